"""Constants shared by the binding step (Slurm is reached only through the
Slurm backend, :mod:`slurmtopo.slurm`)."""
from __future__ import annotations


TABLE_MAGIC = "slurmtopo-ranktable"
#: the rank table travels in the environment below this size (one variable
#: may not exceed 128 KiB on Linux); above it, in DIR/ranktable, which must
#: then be on a file system every node can read
ENV_TABLE_LIMIT = 96 * 1024
#: above ENV_TABLE_LIMIT every task reads only its block of this many ranks
#: (DIR/task-env/<SLURM_PROCID / TASK_BLOCK>.sh, ~50 KiB): a task's launch
#: then costs the same at any job size (dash parses a block in ~0.3 ms; the
#: whole table of 32,768 ranks took 40 ms a task), and a job of 32,768
#: ranks writes 128 files
TASK_BLOCK = 256
TASK_DIR = "task-env"
CGROUP_MODES = ("auto", "yes", "no")
#: the start-time step logs one line a node up to this many nodes
LOG_HOSTS = 16
