"""TaskProlog's binding, made by the first task of a job: the plan read
from the job's environment, bound to the allocation
(:func:`slurmtopo.binding.step.bind`), the run directory written
(:func:`slurmtopo.binding.step.write_run_dir`) and the binding saved for
the job's other tasks, which :mod:`slurmtopo.hooks.taskprolog` reads back
under the run directory's lock.

Apart from taskprolog because only one task of a job binds: every other
task reads the binding file and never imports the start-time step, the
plan's reader or what they import (docs/design.md, "Slurm hooks")."""
from __future__ import annotations

import json
from typing import Dict, List, Mapping, Optional, Tuple

from slurmtopo.binding.step import BindResult, bind, write_run_dir
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files import safedir
from slurmtopo.files.safedir import SafeDir
from slurmtopo.hooks.taskvars import BINDING_FILE, HostRanks, TaskBinding
from slurmtopo.inventory.model import format_cpulist
from slurmtopo.plan.plandoc import plan_from_env_value
from slurmtopo.plan.rankmap import node_contiguous, node_ranks

#: what the start-time log says about CPU binding under the hooks: a
#: TaskProlog runs beside the task, and cannot bind it
_CPU_LINE = ("CPU binding: left to Slurm (--cpu-bind; a TaskProlog cannot bind the task it "
             "runs for); SLURMTOPO_CPUS names each rank's planned CPUs")


def binding_of(result: BindResult, run_dir: str) -> TaskBinding:
    """The :class:`TaskBinding` of a start-time step's result
    (:class:`slurmtopo.binding.step.BindResult`)."""
    p = result.placement
    nr = node_ranks(p)
    by_host: Dict[str, list] = {h: [] for h in nr}
    for s in p.slots:
        by_host[s.host].append(s)
    hosts = {}
    for h, slots in by_host.items():
        slots.sort(key=lambda s: s.local_rank)
        hosts[h] = HostRanks(
            node_rank=nr[h], ranks=tuple(s.rank for s in slots),
            gpus=tuple(s.gpu for s in slots), visible=(result.visible or {}).get(h, ""),
            nics=tuple(",".join(s.nics) for s in slots),
            cpus=tuple(format_cpulist(s.cpus) for s in slots),
            env=tuple(sorted((result.host_env or {}).get(h, {}).items())))
    counts = {len(r.ranks) for r in hosts.values()}
    per_node = counts.pop() if len(counts) == 1 and node_contiguous(p) is None else None
    return TaskBinding(job_id=str(result.allocation.job_id or ""), world=p.world_size,
                       hosts=hosts, job_env=dict(result.job_env),
                       launcher=result.launcher.name, replanned=bool(result.replanned),
                       run_dir=run_dir, per_node=per_node)


def bind_plan(plan_value: str, env: Mapping[str, str], run_dir: Optional[str]
              ) -> Tuple[TaskBinding, BindResult]:
    """Bind the plan to the allocation (no files written)."""
    doc = plan_from_env_value(plan_value)
    # no srun probe: a step started from inside a task's prolog would wait
    # for the very resources this step holds
    result = bind(doc, env, probe=False, run_dir=run_dir,
                  cgroup_mode=env.get("SLURMTOPO_CGROUP_DEVICES", "auto")
                  if env.get("SLURMTOPO_CGROUP_DEVICES") in ("auto", "yes", "no") else "auto")
    return binding_of(result, run_dir or ""), result


def bind_alone(plan_value: str, env: Mapping[str, str], why: str
               ) -> Tuple[TaskBinding, List[str], bool]:
    """(binding, log lines, True): this task's own binding, with no run
    directory to share it through (``why``: the log's last line)."""
    binding, result = bind_plan(plan_value, env, None)
    return binding, result.log + [why], True


def bind_once(plan_value: str, env: Mapping[str, str], run_dir: str, where: SafeDir,
              key: str) -> Tuple[TaskBinding, List[str], bool]:
    """(binding, log lines, True): the job's binding, made by the task that
    holds the run directory's lock (``where``) and found no binding there;
    the run directory's files and :data:`BINDING_FILE` (the binding, under
    ``key``) written. A failure to write is a log line: the task still
    runs, and the next one binds again."""
    binding, result = bind_plan(plan_value, env, run_dir)
    log = [_CPU_LINE if line.startswith("CPU binding:") and "taskset" in line else line
           for line in result.log]
    try:
        written = write_run_dir(result, run_dir, env)
        if written.note:
            log.append(f"note: {written.note}")
        safedir.write_files([(where, BINDING_FILE, json.dumps(
            {"key": key, "binding": json.loads(binding.to_json())},
            separators=(",", ":")) + "\n")])
    except (OSError, SlurmtopoError) as exc:  # a full disk: the task still runs
        why = exc.render() if isinstance(exc, SlurmtopoError) else str(exc)
        log.append(f"run directory not written ({why}): each task binds on its own")
    return binding, log, True
