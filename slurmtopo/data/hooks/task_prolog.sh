#!/bin/sh
# slurmtopo's TaskProlog: each task of a job the cli_filter hook planned gets
# its rank's environment (RANK, LOCAL_RANK, CUDA_VISIBLE_DEVICES, MASTER_ADDR,
# the NCCL variables ...). Slurm runs it once per task, as the user, and reads
# "export NAME=value" lines from its output (TaskProlog= in slurm.conf).
# Written by `slurmtopo admin install-hooks` (docs/admin.md, "Slurm hooks");
# from a TaskProlog of your own, run this one and pass its output on.
#
# A task of any other job costs one test here. A failure never stops a task:
# the script always exits 0, and slurmtopo reports problems as "print" lines
# in the task's output. The planning step is bounded by timeout(1).

# @@SLURMTOPO CONFIG BEGIN@@
SLURMTOPO_COMMAND=slurmtopo
SLURMTOPO_TIMEOUT=120
SLURMTOPO_TIMEOUT_COMMAND=timeout
# @@SLURMTOPO CONFIG END@@

case "${SLURMTOPO_PLAN:-}${SLURMTOPO_JOB_PLAN:-}" in
  '') exit 0 ;;
esac
# from /: nothing is imported from the task's working directory
cd / 2>/dev/null || exit 0
"$SLURMTOPO_TIMEOUT_COMMAND" -k 2 "$SLURMTOPO_TIMEOUT" "$SLURMTOPO_COMMAND" hooks task-prolog 2>/dev/null </dev/null
exit 0
