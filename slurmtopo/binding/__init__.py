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
   :func:`slurmtopo.plan.choice.plan` and logs what moved;
4. writes ``DIR/hostfile`` (line r = host of rank r, for ``srun
   --distribution=arbitrary``), ``DIR/rankmap.json`` (what really runs),
   ``DIR/task-env.sh`` (every task's environment as POSIX sh; for a big job
   also ``DIR/task-env/K.sh``, blocks of ranks) and ``DIR/env.sh`` (job-wide
   variables, shell-quoted), which the script sources before ``srun``.

``srun`` then starts every task as ``/bin/sh -c TASK_SNIPPET``
(:mod:`slurmtopo.plan.plandoc`), which evaluates the task environment for its
``SLURM_PROCID`` (reading only its block of ranks in a big job), sets RANK,
LOCAL_RANK, CUDA_VISIBLE_DEVICES, ..., binds itself with ``taskset`` to the
planned CPUs that exist *on that host* and execs the user's command. Doing
this on the rank's own host is what makes GPU numbers right when nodes got
different GPU indices and CPU binding right when a host has fewer CPUs than
its description; and since only ``/bin/sh`` runs there, the other nodes
and container images need neither Python nor slurmtopo. (``python3 -m
slurmtopo.binding rank -- CMD``, :mod:`.launcher`, is the older per-rank
launcher, kept for scripts written by hand.)

Pure functions take the environment and a command runner as arguments, so
the tests drive every path without Slurm.

The modules, one job each (import from them; this package re-exports
nothing, so no module here can import its own package half-initialised):
``allocation`` (what Slurm gave), ``replan`` (keep or redo the plan),
``step`` (the batch-host step and the run directory), ``imex`` (the IMEX
channel segment of every host: per-host ``NCCL_MNNVL_CLIQUE_ID``), ``taskenv`` (every
task's environment as POSIX sh), ``launcher`` (the older per-rank exec),
``limits`` (size limits and constants). The plan document they read is
:mod:`slurmtopo.plan.plandoc`.
"""
