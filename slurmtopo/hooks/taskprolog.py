"""TaskProlog's step: each task's variables, from the plan the cli_filter
hook put in the job's environment (docs/admin.md, "Slurm hooks").

Slurm runs TaskProlog once per task, as the user, with the task's
environment, and reads ``export NAME=value`` / ``unset NAME`` / ``print
TEXT`` lines from its output (src/slurmd/slurmstepd/task.c). The
start-time work of ``slurmtopo bind`` (the real allocation, a re-plan when
Slurm gave other nodes or GPUs, the run directory) must happen once per
job, not once per task, and every task must agree on its result:

* the first task to arrive takes an exclusive lock (``flock``) on
  ``hook.lock`` in the job's run directory (``$SLURMTOPO_RUN_DIR``, else
  ``<submit dir>/.slurmtopo/runs/<job id>``: a directory only the user can
  write, reached through :mod:`slurmtopo.files.rundirs`), binds, and writes the
  run directory's files and ``hook-binding.json``
  (:mod:`slurmtopo.hooks.taskbind`, imported by the binding task only);
  every later task takes the lock, finds that file (made for this job, this
  plan and this allocation) and reads it. In a batch job the batch step's
  TaskProlog comes first of all, so the binding is done before the
  script's first ``srun``;
* the batch step gets the job-wide variables (``MASTER_ADDR``,
  ``MASTER_PORT``, ``WORLD_SIZE``, the NCCL block), which every ``srun`` of
  the script inherits, and the plan moves from ``SLURMTOPO_PLAN`` to
  ``SLURMTOPO_JOB_PLAN=<job id>:<plan>``: a job submitted from inside this
  one inherits the variable with this job's id, and its own TaskProlog
  ignores it;
* each task of a step gets its rank's variables
  (:func:`slurmtopo.hooks.taskvars.task_lines`).

When the run directory cannot be used (another user's, unwritable), each
task binds on its own (the same inputs give the same answer) and the job's
first task says so. Nothing here may stop a task: every failure becomes a
``print`` line, and the TaskProlog script exits 0 whatever happens.
"""
from __future__ import annotations

import fcntl
import json
import os
from typing import List, Mapping, Optional, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.rundirs import open_run_dir, read_file_at, run_dir_for
from slurmtopo.files.usercache import sha256_hex
from slurmtopo.hooks.taskvars import (BINDING_FILE, JOB_PLAN_ENV, TaskBinding, is_batch_step,
                                      job_lines, task_lines)
from slurmtopo.plan.planenv import PLAN_ENV
from slurmtopo.show.termsafe import printable

LOCK_FILE = "hook.lock"


def run_dir_of(env: Mapping[str, str]) -> Optional[str]:
    """The job's run directory, as the batch script of ``slurmtopo sbatch``
    names it: ``$SLURMTOPO_RUN_DIR``, else ``<submit dir>/.slurmtopo/runs/<job>``."""
    explicit = env.get("SLURMTOPO_RUN_DIR")
    if explicit:
        return os.path.abspath(explicit)
    submit, job = env.get("SLURM_SUBMIT_DIR"), env.get("SLURM_JOB_ID")
    if not submit or not job or not job.isdigit():
        return None
    return run_dir_for(submit, int(job))


def binding_key(plan_value: str, env: Mapping[str, str]) -> str:
    """What makes a binding this job's: the plan, the job, its nodes and
    how often Slurm requeued it (a requeued job may run on other nodes)."""
    return sha256_hex(b"".join(
        part.encode("utf-8", "surrogatepass") + b"\0"
        for part in (plan_value, env.get("SLURM_JOB_ID", ""), env.get("SLURM_JOB_NODELIST", ""),
                     env.get("SLURM_RESTART_COUNT", "0"))))[:32]


def _first_task():
    """:mod:`slurmtopo.hooks.taskbind`, for the task that binds."""
    # lazy: one task of a job binds; the others only read, and skip 62 modules (~35 ms)
    from slurmtopo.hooks import taskbind

    return taskbind


def obtain(plan_value: str, env: Mapping[str, str]) -> Tuple[TaskBinding, List[str], bool]:
    """(binding, log lines, whether this task made it). Once per job under
    the run directory's lock; on a run directory that cannot be used, here
    and now without one."""
    run_dir = run_dir_of(env)
    key = binding_key(plan_value, env)
    if run_dir is None:
        return _first_task().bind_alone(plan_value, env, "no run directory (no SLURM_SUBMIT_DIR):"
                                        " each task bound on its own")
    try:
        where = open_run_dir(run_dir)
    except (SlurmtopoError, OSError) as exc:
        why = exc.render() if isinstance(exc, SlurmtopoError) else str(exc)
        return _first_task().bind_alone(plan_value, env, f"run directory not used ({why}): each "
                                        "task bound on its own")
    with where:
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=where.fd)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise SlurmtopoError("the lock file is not yours", where.child(LOCK_FILE))
            fcntl.flock(fd, fcntl.LOCK_EX)
            text = read_file_at(where, BINDING_FILE, limit=64 << 20)
            if text is not None:
                try:
                    doc = json.loads(text)
                    if isinstance(doc, dict) and doc.get("key") == key:
                        return TaskBinding.from_json(json.dumps(doc["binding"]),
                                                     where.child(BINDING_FILE)), [], False
                except (ValueError, KeyError, TypeError, SlurmtopoError):
                    pass  # another job's, or damaged: bind again
            return _first_task().bind_once(plan_value, env, run_dir, where, key)
        finally:
            os.close(fd)  # releases the lock


def prolog_lines(env: Mapping[str, str]) -> List[str]:
    """Everything TaskProlog prints for the task whose environment is
    ``env`` (empty for a job the hooks did not plan)."""
    plan_value = env.get(PLAN_ENV)
    job = env.get("SLURM_JOB_ID", "")
    if not plan_value:
        inherited = env.get(JOB_PLAN_ENV, "")
        owner, _, plan_value = inherited.partition(":")
        if not plan_value or owner != job:
            return []  # not planned, or another job's plan (a job submitted from inside one)
    batch = is_batch_step(env)
    first = batch or env.get("SLURM_PROCID") == "0"
    binding, log, made = obtain(plan_value, env)
    out: List[str] = []
    if batch:
        out += job_lines(binding, env)
        out += [f"export {JOB_PLAN_ENV}={job}:{plan_value}", f"unset {PLAN_ENV}"]
        out += [_print(f"slurmtopo bind: {line}") for line in log]
        out.append(_print(f"slurmtopo: {binding.world} rank(s) on {len(binding.hosts)} "
                          f"node(s){' (re-planned at start)' if binding.replanned else ''}; "
                          f"rank map: {binding.run_dir or '(no run directory)'}/rankmap.json"))
        return out
    lines, why = task_lines(binding, env)
    out += lines
    if env.get(PLAN_ENV):
        out.append(f"unset {PLAN_ENV}")
    if made and first:
        out += [_print(f"slurmtopo bind: {line}") for line in log]
    if why and first and binding.world > 1 and _looks_like_a_launch(binding, env):
        out.append(_print(f"slurmtopo: this step's tasks get no rank variables: {why}"))
    return out


def _looks_like_a_launch(binding: TaskBinding, env: Mapping[str, str]) -> bool:
    """Whether a step that got no rank variables was meant to run the job's
    ranks (as many tasks as the plan has ranks, or as it has nodes): only
    then is it worth a line in the step's output (``srun -n1 hostname``'s
    output stays its own)."""
    tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or ""
    return tasks.isdigit() and int(tasks) in (binding.world, len(binding.hosts))


def _print(text: str) -> str:
    return "print " + " ".join(printable(text).split())
