"""The start-time step: bind the planned ranks to the allocation Slurm made.

``slurmtopo plan`` decides at submit time, but Slurm chooses the nodes (and,
on shared nodes, the GPUs) only when the job starts. So the batch script
carries the plan as data and, on the batch host, runs::

    python3 -m slurmtopo bind --plan - --run-dir DIR        (this module's bind())

which

1. reads the real allocation: ``SLURM_JOB_NODELIST``; the GPUs of every node
   from ``scontrol show job -d`` (``Nodes=x ... GRES=gpu:8(IDX:0-7)``), else
   ``SLURM_JOB_GPUS`` for the batch host and an ``srun --ntasks-per-node=1``
   probe printing each node's ``SLURM_STEP_GPUS`` for the others;
2. decides whether a device cgroup renumbers GPUs (``--cgroup-devices
   auto|yes|no``; see :func:`detect_constrained`);
3. keeps the plan when every planned GPU was allocated, otherwise re-plans
   on exactly the allocation (everything else marked busy) with
   :func:`slurmtopo.placement.plan` and logs what moved;
4. writes ``DIR/hostfile`` (line r = host of rank r, for ``srun
   --distribution=arbitrary``), ``DIR/rankmap.json`` (what really runs),
   ``DIR/ranktable`` and ``DIR/env.sh`` (job-wide variables, shell-quoted),
   which the script sources before ``srun``.

``srun`` then starts every rank through ``python3 -m slurmtopo.binding rank
-- CMD`` (:func:`rank_main`), which looks its ``SLURM_PROCID`` up in the rank
table, sets RANK, LOCAL_RANK, CUDA_VISIBLE_DEVICES, ..., binds itself to the
planned CPUs that exist *on that host* and execs the user's command. Doing
this on the rank's own host is what makes GPU numbers right when nodes got
different GPU indices and CPU binding right when a host has fewer CPUs than
its description (``os.sched_getaffinity``).

Pure functions take the environment and a command runner as arguments, so
the tests drive every path without Slurm.
"""
# the public names, from the modules that hold them (one job each)
from slurmtopo.binding.common import (PLAN_KIND, PLAN_VERSION, TABLE_MAGIC, ENV_TABLE_LIMIT,
    EMBED_LIMIT, CGROUP_MODES, Runner, run_command)
from slurmtopo.binding.plandoc import (embedded_inventory, request_dict, plan_document, dumps_plan,
    read_plan, layout_from_doc, planned_placement, load_inventory_for_bind)
from slurmtopo.binding.allocation import (Allocation, parse_index_list, parse_scontrol_job,
    parse_probe, read_allocation, detect_constrained)
from slurmtopo.binding.replan import (differences, nearest_nics, fill_placement, allocation_state,
    job_request_from_doc, with_allocated_nodes, replan, moved_ranks)
from slurmtopo.binding.launcher import (rank_table, RankInfo, parse_rank_table, rank_launch,
    rank_main)
from slurmtopo.binding.step import BindResult, master_port, bind, env_script, write_run_dir  # noqa: F401
