"""What a job's tasks really got: the probes that print it and their
reader (pure; the contracts of docs/audit.md compare it).

Two probes print the same line per task (``SLURMTOPO_TASKENV``, the host,
a pid, then ``KEY=VALUE`` of :data:`TASK_KEYS` only, tab-separated):

* :data:`PROBE_SELF` runs through a job's own launch line (``slurmtopo
  check``, the job's first step with ``--check``): the task snippet sets
  the task's environment and execs it, so it prints exactly what the
  training step's tasks will get;
* :data:`PROBE_PROCESSES` runs as one task per node of a running job
  (``srun --overlap --jobid``, ``slurmtopo audit --contracts``) and reads
  the environment of every process of the job that holds a rank.

Both need a POSIX shell only (and ``tr``); the batch script renderer (pure)
and the audit both take them from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

#: the variables a probe reports of each task (nothing else leaves the node)
TASK_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
             "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_STEP_ID", "SLURMD_NODENAME",
             "SLURMTOPO_GPU")
#: the first word of a probe's line
TASK_MARK = "SLURMTOPO_TASKENV"
#: lines of probe output read at most (a bound on what a job can make us parse)
MAX_TASK_LINES = 65536

_CASE = "|".join(f"{k}=*" for k in TASK_KEYS)

#: run as one task on each node of a running job (``srun --overlap
#: --jobid``): the selected variables of every process of that job holding
#: a rank, read from /proc (root reads every user's). POSIX sh and ``tr``.
PROBE_PROCESSES = f"""\
exec 2>/dev/null
job=$1; nl='
'
for d in /proc/[0-9]*; do
  e=$(tr '\\000' '\\n' < "$d/environ") || continue
  case "$nl$e$nl" in *"${{nl}}SLURM_JOB_ID=$job$nl"*) ;; *) continue ;; esac
  out=; ranked=; old=$IFS; IFS=$nl; set -f
  for kv in $e; do
    case $kv in
      "SLURM_STEP_ID=${{SLURM_STEP_ID:-none}}") ranked=; out=; break ;;
      RANK=*|LOCAL_RANK=*|SLURMTOPO_GPU=*) out="$out	$kv"; ranked=1 ;;
      {_CASE}) out="$out	$kv" ;;
    esac
  done
  IFS=$old; set +f
  if [ -n "$ranked" ]; then
    printf '{TASK_MARK}\\t%s\\t%s%s\\n' "${{SLURMD_NODENAME:-$(hostname -s)}}" "${{d#/proc/}}" "$out"
  fi
done
"""

#: run through the job's own launch line (the task snippet sets the task's
#: environment, then execs this): the task's own variables
PROBE_SELF = (f"printf '{TASK_MARK}\\t%s\\t%s' \"${{SLURMD_NODENAME:-$(hostname -s)}}\" \"$$\"; "
              f"for k in {' '.join(TASK_KEYS)}; do "
              "eval \"s=\\${$k+x} v=\\${$k-}\"; "
              "if [ -n \"$s\" ]; then printf '\\t%s=%s' \"$k\" \"$v\"; fi; done; printf '\\n'")


@dataclass(frozen=True)
class TaskSeen:
    """One task (or process holding a rank) as a probe saw it."""

    host: str
    pid: int
    env: Mapping[str, str]

    def int_of(self, key: str) -> Optional[int]:
        v = self.env.get(key, "")
        return int(v) if v.isdigit() else None


def parse_task_lines(text: str) -> Tuple[TaskSeen, ...]:
    """A probe's output -> the tasks, one per (host, rank) (a rank's child
    processes share its environment: the lowest pid is kept); lines that
    are not a probe's are skipped, at most :data:`MAX_TASK_LINES` read."""
    seen: Dict[Tuple[str, str], TaskSeen] = {}
    for n, line in enumerate(text.splitlines()):
        if n >= MAX_TASK_LINES:
            break
        parts = line.split("\t")
        if len(parts) < 3 or parts[0] != TASK_MARK or not parts[2].isdigit():
            continue
        env: Dict[str, str] = {}
        for kv in parts[3:]:
            k, sep, v = kv.partition("=")
            if sep and k in TASK_KEYS and len(v) <= 4096:
                env[k] = v
        host = env.get("SLURMD_NODENAME") or parts[1]
        task = TaskSeen(host=host[:256], pid=int(parts[2]), env=env)
        key = (task.host, env.get("RANK") or f"pid{task.pid}")
        if key not in seen or task.pid < seen[key].pid:
            seen[key] = task
    return tuple(sorted(seen.values(), key=lambda t: (t.int_of("RANK") is None,
                                                       t.int_of("RANK") or 0, t.host, t.pid)))


def int_list(text: Optional[str]) -> Optional[List[int]]:
    """``"4,5"`` (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS as Slurm sets them)
    -> [4, 5] in their order; None for None or anything but numbers."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return None
