"""Each task's variables as TaskProlog ``export`` lines (pure).

A job the cli_filter hook planned runs the user's own ``srun`` line, not
slurmtopo's: Slurm lays the tasks out (``SLURM_PROCID`` in its block
order) and slurmtopo cannot move one. What it can do is name each task
after the rank the plan put on that task's host and GPU: the task on host
H with Slurm's local id L is the plan's rank with local rank L on H, and
gets that rank's ``RANK``, ``LOCAL_RANK``, ``CUDA_VISIBLE_DEVICES`` (the
host's planned GPUs in local-rank order, so device ``LOCAL_RANK`` is its
GPU) and the rest of what ``slurmtopo sbatch``'s task shell sets
(:mod:`slurmtopo.binding.taskenv`, docs/sbatch.md). Slurm's own
``SLURM_PROCID``, ``SLURM_LOCALID`` and ``SLURM_NODEID`` are set to the
same numbers, so tools that read those (submitit, Lightning) agree.

That needs Slurm's layout to match the plan: the step runs as many tasks
on each planned host as the plan has ranks there (one step with the plan's
``--ntasks-per-node``, as the hook asked sbatch for). A step of one task
per planned host is a launcher's (``srun torchrun``): each gets its node's
variables and torchrun's static rendezvous through ``PET_*`` variables,
which torchrun reads as its options' defaults (``--node-rank``,
``--nnodes``, ``--master-addr``; torch/distributed/argparse_util.py), so
its rank ``NODE_RANK * K + LOCAL_RANK`` is the plan's when the plan is
node-contiguous. Any other step (``srun -n1 hostname``) gets nothing.

The binding (what the start-time step decided, :class:`TaskBinding`, made
by :func:`slurmtopo.hooks.taskbind.binding_of`) is JSON written once per
job; :func:`task_lines` turns it and one task's
environment into its lines. Every value is checked to be one line:
TaskProlog reads ``export NAME=value`` up to the end of the line and
quotes nothing.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.hostlist import expand_hostlist

#: the binding's format version
BINDING_VERSION = 1
#: the binding's file in the job's run directory: the job's first task
#: writes it (:mod:`slurmtopo.hooks.taskbind`), every later one reads it
#: (:mod:`slurmtopo.hooks.taskprolog`)
BINDING_FILE = "hook-binding.json"
#: the variable the batch step leaves for the job's steps: ``JOBID:VALUE``,
#: VALUE the plan (slurmtopo.plan.planenv.PLAN_ENV's); a job submitted from
#: inside this one inherits it with another job id, and ignores it
JOB_PLAN_ENV = "SLURMTOPO_JOB_PLAN"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Slurm's id of a job's batch step in SLURM_STEP_ID: SLURM_BATCH_SCRIPT
#: (0xfffffffb, slurm/slurm.h), which 26.05 prints signed ("-5",
#: src/common/env.c); 22.05 to 25.11 set no SLURM_STEP_ID for it at all
BATCH_STEP_IDS = ("batch", "-5", "4294967291")


def is_batch_step(env: Mapping[str, str]) -> bool:
    """Whether the task is a job's batch script (its TaskProlog runs
    before any step of the script)."""
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
    return step is None or step in BATCH_STEP_IDS


@dataclass(frozen=True)
class HostRanks:
    """One planned host: its node rank, its ranks in local-rank order, the
    GPUs they use (NVML indices) and the CUDA_VISIBLE_DEVICES the start-time
    step computed for it."""

    node_rank: int
    ranks: Tuple[int, ...]
    gpus: Tuple[int, ...]
    visible: str
    nics: Tuple[str, ...] = ()      # one comma-joined list per local rank
    cpus: Tuple[str, ...] = ()      # one cpulist per local rank
    env: Tuple[Tuple[str, str], ...] = ()  # this host's own variables


@dataclass(frozen=True)
class TaskBinding:
    """What the start-time step decided for a job, for its tasks."""

    job_id: str
    world: int
    hosts: Dict[str, HostRanks]
    #: job-wide variables: MASTER_ADDR, MASTER_PORT, NCCL_*
    job_env: Dict[str, str]
    launcher: str = "srun"
    replanned: bool = False
    run_dir: str = ""
    #: when the plan is node-contiguous with K ranks on every node (None: not)
    per_node: Optional[int] = None
    notes: Tuple[str, ...] = field(default=())

    def to_json(self) -> str:
        return json.dumps({
            "version": BINDING_VERSION, "job_id": self.job_id, "world": self.world,
            "launcher": self.launcher, "replanned": self.replanned, "run_dir": self.run_dir,
            "per_node": self.per_node, "job_env": self.job_env, "notes": list(self.notes),
            "hosts": {h: {"node_rank": r.node_rank, "ranks": list(r.ranks),
                          "gpus": list(r.gpus), "visible": r.visible, "nics": list(r.nics),
                          "cpus": list(r.cpus), "env": dict(r.env)}
                      for h, r in self.hosts.items()}}, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str = "binding") -> "TaskBinding":
        try:
            d = json.loads(text)
            if d.get("version") != BINDING_VERSION:
                raise ValueError(f"version {d.get('version')!r}")
            hosts = {str(h): HostRanks(
                node_rank=int(r["node_rank"]), ranks=tuple(int(x) for x in r["ranks"]),
                gpus=tuple(int(x) for x in r["gpus"]), visible=str(r["visible"]),
                nics=tuple(str(x) for x in r["nics"]), cpus=tuple(str(x) for x in r["cpus"]),
                env=tuple((str(k), str(v)) for k, v in sorted(r["env"].items())))
                for h, r in d["hosts"].items()}
            return cls(job_id=str(d["job_id"]), world=int(d["world"]), hosts=hosts,
                       job_env={str(k): str(v) for k, v in d["job_env"].items()},
                       launcher=str(d["launcher"]), replanned=bool(d["replanned"]),
                       run_dir=str(d["run_dir"]),
                       per_node=None if d["per_node"] is None else int(d["per_node"]),
                       notes=tuple(str(n) for n in d["notes"]))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SlurmtopoError(f"{where}: damaged binding ({exc})") from None


# --------------------------------------------------------------------------
# one task


def tasks_per_node(env: Mapping[str, str]) -> Optional[Dict[str, int]]:
    """host -> tasks of this step there, from SLURM_STEP_NODELIST and
    SLURM_STEP_TASKS_PER_NODE (``8(x2),4``); None when Slurm did not say."""
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_NODELIST")
    counts = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if not nodes or not counts:
        return None
    per: List[int] = []
    for part in counts.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            return None
        per += [int(m.group(1))] * int(m.group(2) or 1)
        if len(per) > 1 << 16:
            return None
    try:
        hosts = expand_hostlist(nodes)
    except SlurmtopoError:
        return None
    if len(hosts) != len(per):
        return None
    return dict(zip(hosts, per))


def step_kind(binding: TaskBinding, env: Mapping[str, str]) -> Tuple[str, str]:
    """("rank" | "node" | "none", why): whether this step runs the plan's
    ranks (as many tasks on each planned host as it has ranks), one task
    per planned host (a launcher such as torchrun), or something else."""
    per = tasks_per_node(env)
    if per is None:
        return "none", "Slurm gave no SLURM_STEP_NODELIST/SLURM_STEP_TASKS_PER_NODE"
    plan = {h: len(r.ranks) for h, r in binding.hosts.items()}
    used = {h: n for h, n in per.items() if n}
    if used == plan:
        return "rank", ""
    if used == {h: 1 for h in plan}:
        return "node", ""
    shown = ", ".join(f"{h}:{n}" for h, n in list(used.items())[:4])
    want = ", ".join(f"{h}:{n}" for h, n in list(plan.items())[:4])
    return "none", (f"this step runs {sum(used.values())} task(s) ({shown}"
                    f"{', ...' if len(used) > 4 else ''}); the plan has {binding.world} rank(s) "
                    f"({want}{', ...' if len(plan) > 4 else ''}) or one task per node")


def local_visible(planned: str, host_gpus: Sequence[int], env: Mapping[str, str]) -> str:
    """CUDA_VISIBLE_DEVICES for a task on this node: ``planned`` (what the
    start-time step computed) unless the task's own SLURM_STEP_GPUS and
    Slurm's CUDA_VISIBLE_DEVICES say how this node numbers GPUs ("local
    facts win"): the same rule, in Python, as the task shell's
    (binding/taskenv.py ``_LOCAL_GPUS``; tests/test_hooks_taskvars.py holds
    the two to the same answers). SlurmtopoError when a planned GPU is not
    among this step's."""
    step = env.get("SLURM_STEP_GPUS", "")
    slurm = env.get("CUDA_VISIBLE_DEVICES", "")
    if not step or not slurm:
        return planned
    s, c = step.split(","), slurm.split(",")
    seq = ",".join(str(i) for i in range(len(s)))
    if len(s) != len(c) or step == seq:
        return planned
    gpus = [str(g) for g in host_gpus]
    if step == slurm:
        return ",".join(gpus)
    out = []
    for g in gpus:
        if g not in s:
            raise SlurmtopoError(f"planned GPU {g} is not among this step's GPUs {step}")
        out.append(str(s.index(g)))
    return ",".join(out)


def _line(name: str, value: Any) -> str:
    text = str(value)
    if not _NAME.match(name):
        raise SlurmtopoError(f"not a variable name: {name!r}")
    if "\n" in text or "\r" in text or "\x00" in text:
        raise SlurmtopoError(f"{name}: a value with a newline cannot be exported by TaskProlog")
    return f"export {name}={text}"


def job_lines(binding: TaskBinding, env: Mapping[str, str]) -> List[str]:
    """The job-wide variables, for the batch step (whose environment every
    srun of the script inherits); an NCCL variable the user exported wins."""
    out = []
    for k, v in sorted(binding.job_env.items()):
        if k.startswith("NCCL_") and k in env:
            continue
        out.append(_line(k, v))
    nnodes = len(binding.hosts)
    out += [_line("WORLD_SIZE", binding.world), _line("SLURMTOPO_NNODES", nnodes),
            _line("SLURMTOPO_NPROC_PER_NODE", binding.world // max(nnodes, 1))]
    if binding.run_dir:
        out.append(_line("SLURMTOPO_RUN_DIR", binding.run_dir))
    return out


def task_lines(binding: TaskBinding, env: Mapping[str, str]) -> Tuple[List[str], Optional[str]]:
    """(export lines, why none) for the task whose environment is ``env``
    (SLURMD_NODENAME, SLURM_LOCALID and the step's layout)."""
    kind, why = step_kind(binding, env)
    if kind == "none":
        return [], why
    host = env.get("SLURMD_NODENAME", "")
    mine = binding.hosts.get(host)
    if mine is None:
        return [], f"{host or '(no SLURMD_NODENAME)'} is not a planned host"
    try:
        local = int(env.get("SLURM_LOCALID", ""))
    except ValueError:
        return [], "Slurm gave no SLURM_LOCALID"
    if kind == "node" and binding.per_node is None:
        return [], ("one task per node (a launcher such as torchrun) needs a node-contiguous "
                    "plan with the same ranks on every node; submit with '#SLURMTOPO "
                    "--launcher torchrun'")
    visible = local_visible(mine.visible, mine.gpus, env)
    out = []
    for k, v in sorted(binding.job_env.items()):
        if k.startswith("NCCL_") and k in env and env[k] != v:
            continue  # the user's (exported before sbatch) wins, as for slurmtopo sbatch
        out.append(_line(k, v))
    out += [_line(k, v) for k, v in mine.env if not (k.startswith("NCCL_") and k in env
                                                        and env[k] != v)]
    nnodes = len(binding.hosts)
    out += [_line("NODE_RANK", mine.node_rank), _line("GROUP_RANK", mine.node_rank),
            _line("SLURM_NODEID", mine.node_rank), _line("CUDA_VISIBLE_DEVICES", visible),
            _line("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            _line("LOCAL_WORLD_SIZE", len(mine.ranks)), _line("SLURMTOPO_NNODES", nnodes)]
    if binding.run_dir:
        out.append(_line("SLURMTOPO_RUN_DIR", binding.run_dir))
    if kind == "rank":
        if not 0 <= local < len(mine.ranks):
            return [], f"local task {local} is not planned on {host}"
        rank = mine.ranks[local]
        out += [_line("RANK", rank), _line("LOCAL_RANK", local),
                _line("WORLD_SIZE", binding.world), _line("SLURM_PROCID", rank),
                _line("SLURM_LOCALID", local), _line("SLURMTOPO_GPU", mine.gpus[local]),
                _line("SLURMTOPO_NICS", mine.nics[local] if mine.nics else ""),
                _line("SLURMTOPO_CPUS", mine.cpus[local] if mine.cpus else "")]
    else:
        # torchrun's options from the environment: a static rendezvous in plan order
        master = binding.job_env.get("MASTER_ADDR", "")
        port = binding.job_env.get("MASTER_PORT", "")
        out += [_line("PET_NNODES", nnodes), _line("PET_NPROC_PER_NODE", binding.per_node),
                _line("PET_NODE_RANK", mine.node_rank), _line("PET_MASTER_ADDR", master),
                _line("PET_MASTER_PORT", port), _line("PET_RDZV_BACKEND", "static"),
                _line("SLURM_PROCID", mine.node_rank)]
        out += ["unset RANK", "unset LOCAL_RANK", "unset WORLD_SIZE"]
    return out, None
