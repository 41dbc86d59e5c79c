"""Every srun task's environment as one POSIX ``/bin/sh`` fragment.

``slurmtopo bind`` runs once, on the batch host, with Python. The tasks it
starts on the other nodes (and inside containers) must not need Python or
slurmtopo, so bind writes what each task needs as shell text: a ``case`` on
``SLURM_PROCID`` giving the task's node rank (and, for the srun launcher,
its local rank, GPU, CPUs and NICs), a ``case`` on the node rank giving the
host and its ``CUDA_VISIBLE_DEVICES``, then the checks, exports, CPU
binding (``taskset``, when the node has it) and ``exec "$@"``. The batch
script's srun line sources it through :data:`slurmtopo.plan.plandoc.TASK_SNIPPET`.

Every value is shell-quoted; the text only assigns, tests and execs.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Placement, format_cpulist
from slurmtopo.plan.launchers import SRUN, Launcher
from slurmtopo.plan.rankmap import check_placement, cpulists, node_ranks, visible_devices

_HEAD = """\
# written by `slurmtopo bind`: every srun task runs this with /bin/sh (POSIX;
# no Python or slurmtopo needed on the node), then execs the command
_st_die() { echo "slurmtopo task ${SLURM_PROCID:-?} (${SLURMD_NODENAME:-?}): error: $*" >&2; exit 2; }
"""

#: local facts win: when this task's SLURM_STEP_GPUS and Slurm's own
#: CUDA_VISIBLE_DEVICES tell whether a device cgroup renumbers GPUs here
#: (they differ: it does; equal and not 0..n-1: it does not), follow them
#: whatever the batch host concluded
_LOCAL_GPUS = """\
if [ -n "${SLURM_STEP_GPUS:-}" ] && [ -n "$_st_slurm_cvd" ]; then
  _st_old=$IFS; IFS=,
  _st_n=0; _st_seq=
  for _st_g in $SLURM_STEP_GPUS; do _st_seq=${_st_seq:+$_st_seq,}$_st_n; _st_n=$((_st_n + 1)); done
  _st_m=0
  for _st_g in $_st_slurm_cvd; do _st_m=$((_st_m + 1)); done
  if [ "$_st_n" = "$_st_m" ] && [ "$SLURM_STEP_GPUS" != "$_st_seq" ]; then
    if [ "$SLURM_STEP_GPUS" = "$_st_slurm_cvd" ]; then
      CUDA_VISIBLE_DEVICES=$SLURMTOPO_HOST_GPUS
    else
      _st_v=
      for _st_g in $SLURMTOPO_HOST_GPUS; do
        _st_i=0; _st_p=
        for _st_s in $SLURM_STEP_GPUS; do
          if [ "$_st_s" = "$_st_g" ]; then _st_p=$_st_i; fi
          _st_i=$((_st_i + 1))
        done
        if [ -z "$_st_p" ]; then
          IFS=$_st_old
          _st_die "planned GPU $_st_g is not among this step's GPUs $SLURM_STEP_GPUS"
        fi
        _st_v=${_st_v:+$_st_v,}$_st_p
      done
      CUDA_VISIBLE_DEVICES=$_st_v
    fi
  fi
  IFS=$_st_old
fi
"""

_HOST_CHECK = """\
if [ -n "${SLURMD_NODENAME:-}" ] && [ "$SLURMD_NODENAME" != "$SLURMTOPO_HOST" ]; then
  _st_die "planned on $SLURMTOPO_HOST but srun started it on $SLURMD_NODENAME; is SLURM_HOSTFILE honoured (--distribution=arbitrary)?"
fi
"""

# the launcher's own tail (the exports, CPU binding, the exec) comes from
# slurmtopo.plan.launchers: Launcher.task_tail

@dataclass(frozen=True)
class TaskEnv:
    """Every task's environment, in parts, so it can be written whole (one
    text, for the environment or a human) or in blocks of ranks (one small
    file each, so a task of a 32,768-rank job reads 256 ranks' lines and not
    all of them: its launch then costs the same at any job size).

    ``tasks[i]`` is the ``case`` line of task ``i`` (``SLURM_PROCID``),
    ``task_node[i]`` its node rank, ``nodes[n]`` the ``case`` line of node
    rank ``n``; ``prelude`` comes before them and ``tail`` after."""

    prelude: str
    tasks: Tuple[str, ...]
    task_node: Tuple[int, ...]
    nodes: Tuple[str, ...]
    tail: str

    def table(self, start: int = 0, stop: Optional[int] = None) -> str:
        """The two ``case`` statements for tasks ``start..stop-1``: task ->
        node rank (and its own variables), node rank -> host variables."""
        stop = len(self.tasks) if stop is None else stop
        used = sorted(set(self.task_node[start:stop]))
        return "\n".join(['case "${SLURM_PROCID:-}" in', *self.tasks[start:stop], _NOT_IN_PLAN,
                          "esac", "case $NODE_RANK in", *(self.nodes[n] for n in used),
                          "esac"]) + "\n"

    @cached_property
    def whole(self) -> str:
        """One text for every task (``SLURMTOPO_TASK_ENV``, ``task-env.sh``)."""
        return self.prelude + self.table() + self.tail

    def blocks(self, size: int, token: str) -> List[str]:
        """File ``k`` of the run directory's ``task-env/``: the table of
        tasks ``k*size .. k*size+size-1``, after the line that proves it is
        block ``k`` of this binding (:func:`block_mark`)."""
        return [block_mark(token, i) + "\n" + _BLOCK_HEAD + self.table(k, k + size)
                for i, k in enumerate(range(0, len(self.tasks), size))]

    def loader(self, directory: str, size: int, token: str) -> str:
        """The text that reads this task's block from ``directory`` (then
        runs the tail): what travels in the environment for a big job."""
        _check_token(token)
        return self.prelude + _LOADER.format(
            dir=shlex.quote(directory), size=size, ntasks=len(self.tasks),
            mark=block_mark(token, "$_st_k")) + self.tail


def block_mark(token: str, block) -> str:
    """The first line of block ``block`` of the binding whose secret is
    ``token``: a task runs a block only when its first line is this one.
    The token is made anew by every ``slurmtopo bind`` and travels only in
    the job's own environment and its 0600 files, so another user cannot
    write a block a task accepts, and a block of another of the user's own
    jobs (or another block of this one) is refused too."""
    _check_token(token)
    return f"# slurmtopo task-env {token} block {block}"


def _check_token(token: str) -> None:
    if not token or not all(c in "0123456789abcdef" for c in token):
        raise ValueError("the task-env token is hexadecimal")


#: the last pattern of the task case: a task the plan does not know
_NOT_IN_PLAN = ('  *) _st_die "task ${SLURM_PROCID:-(no SLURM_PROCID)} is not in this job\'s '
                'plan; start tasks with the srun line of the batch script" ;;')

_BLOCK_HEAD = """\
# written by `slurmtopo bind`: one block of the job's tasks; the task shell
# (SLURMTOPO_TASK_ENV, see env.sh) sources the block of its SLURM_PROCID
# after checking, on the open file, that it is the user's and this job's
"""

#: task i reads block i / size: POSIX arithmetic, no other program needed.
#: The block is opened once (fd 9, closed after the braces) and everything
#: is checked on that open file, never on the path again: another user who
#: can rename entries of the directories above it (a group-shared submit
#: directory) may swap the path at any moment, so the file must be the
#: user's own (``[ -O ]`` on /proc/self/fd/9) and start with this
#: binding's mark (which only the job knows), then /proc/self/fd/9 is
#: sourced: the same open file.
_LOADER = """\
case ${{SLURM_PROCID:-}} in
  ''|*[!0-9]*) _st_die "task ${{SLURM_PROCID:-(no SLURM_PROCID)}} is not in this job's plan; start tasks with the srun line of the batch script" ;;
esac
if [ "$SLURM_PROCID" -ge {ntasks} ]; then
  _st_die "task $SLURM_PROCID is not in this job's plan ({ntasks} tasks); start tasks with the srun line of the batch script"
fi
_st_k=$((SLURM_PROCID / {size}))
_st_f={dir}/$_st_k.sh
if [ ! -r "$_st_f" ]; then
  _st_die "cannot read $_st_f: the run directory must be readable on every node (and inside the container)"
fi
_st_ok=
{{
  [ -e /proc/self/fd/9 ] || _st_die "no /proc/self/fd on this node: cannot check $_st_f before running it"
  [ -O /proc/self/fd/9 ] || _st_die "$_st_f is not yours (another user may have replaced it): not running it"
  IFS= read -r _st_l <&9 || _st_l=
  [ "$_st_l" = "{mark}" ] || _st_die "$_st_f was not written for this job by slurmtopo bind: not running it"
  . /proc/self/fd/9
  _st_ok=1
}} 9<"$_st_f"
[ -n "$_st_ok" ] || _st_die "cannot read $_st_f"
"""


def task_env(placement: Placement, visible: Mapping[str, str], launcher: Launcher = SRUN,
             cpu_bind: bool = True,
             host_env: Optional[Mapping[str, Mapping[str, str]]] = None) -> TaskEnv:
    """The parts for ``placement``. ``visible``: host -> CUDA_VISIBLE_DEVICES
    as the batch step computed it (device cgroup and allocation taken into
    account). ``launcher``: one task per rank (srun: each task's line sets
    its own rank's variables) or per node (torchrun: the node's).
    ``host_env``: host -> variables exported to that host's tasks only
    (``NCCL_MNNVL_CLIQUE_ID`` per segment: binding.imex)."""
    q = shlex.quote
    check_placement(placement)
    nr = node_ranks(placement)
    prelude = "\n".join([_HEAD.rstrip("\n"), f"WORLD_SIZE={placement.world_size}",
                         "_st_slurm_cvd=${CUDA_VISIBLE_DEVICES:-}"]) + "\n"
    if launcher.per_node:
        tasks = tuple(f"  {i}) NODE_RANK={i} ;;" for i in nr.values())
        task_node = tuple(nr.values())
    else:
        cpus_of = cpulists(placement)
        quoted: Dict[int, str] = {}  # id(CPU tuple) -> its quoted cpulist
        nics: Dict[Tuple[str, ...], str] = {}
        lines = []
        for s in placement.slots:
            cpus = quoted.get(id(s.cpus))
            if cpus is None:
                cpus = quoted[id(s.cpus)] = q(cpus_of[id(s.cpus)]) if cpu_bind else "''"
            nic = nics.get(s.nics)
            if nic is None:
                nic = nics[s.nics] = q(",".join(s.nics))
            lines.append(f"  {s.rank}) NODE_RANK={nr[s.host]} LOCAL_RANK={s.local_rank} "
                         f"SLURMTOPO_GPU={s.gpu} SLURMTOPO_CPUS={cpus} SLURMTOPO_NICS={nic} ;;")
        tasks = tuple(lines)
        task_node = tuple(nr[s.host] for s in placement.slots)
    host_env = host_env or {}
    nodes = tuple(f"  {i}) SLURMTOPO_HOST={q(h)} CUDA_VISIBLE_DEVICES={q(visible[h])} "
                  f"SLURMTOPO_HOST_GPUS={','.join(map(str, placement.gpus_on(h)))} "
                  f"LOCAL_WORLD_SIZE={len(placement.ranks_on(h))}{_exports(host_env.get(h))} ;;"
                  for h, i in nr.items())
    return TaskEnv(prelude=prelude, tasks=tasks, task_node=task_node, nodes=nodes,
                   tail=_HOST_CHECK + _LOCAL_GPUS + launcher.task_tail)


def _exports(env: Optional[Mapping[str, str]]) -> str:
    """`` ; export K=V ...`` for a node's own variables ("" when none);
    names are checked, values quoted."""
    if not env:
        return ""
    for k in env:
        if not k.replace("_", "").isalnum() or not k[0].isalpha() or not k.isascii():
            raise ValueError(f"not a variable name: {k!r}")
    return " ; export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))


def cpu_summary(placement: Placement, launcher: Launcher, cpu_bind: bool,
                allowed: Optional[Iterable[int]] = None, here: Optional[str] = None) -> str:
    """The one log line about CPU binding (instead of one per rank).

    ``allowed`` is what this (batch) node lets the job use; ranks are judged
    by it, on the assumption that the job's nodes are alike."""
    if launcher.cpu_binding is not None:
        return launcher.cpu_binding
    if not cpu_bind:
        return "CPU binding: off (SLURMTOPO_CPU_BIND=0)"
    bound = [s for s in placement.slots if s.cpus]
    if not bound:
        return "CPU binding: none (the inventory gives no CPUs near the GPUs)"
    line = (f"CPU binding: {len(bound)} of {placement.world_size} rank(s) bound with taskset to "
            "the CPUs of their GPU's NUMA node")
    if allowed is None:
        return line
    allowed = set(allowed)
    fit: Dict[int, str] = {}  # id(CPU tuple) -> "all", "some" or "none" allowed
    for s in bound:
        if id(s.cpus) not in fit:
            cpus = set(s.cpus)
            fit[id(s.cpus)] = ("all" if cpus <= allowed else "some" if cpus & allowed
                               else "none")
    reduced = [s.rank for s in bound if fit[id(s.cpus)] == "some"]
    none = [s.rank for s in bound if fit[id(s.cpus)] == "none"]
    if not reduced and not none:
        return line
    parts = []
    if reduced:
        parts.append(f"rank(s) {format_cpulist(reduced)} get only the allowed ones")
    if none:
        parts.append(f"rank(s) {format_cpulist(none)} run unbound (none of their CPUs allowed)")
    return (f"{line}; {here or 'this node'} allows CPUs {format_cpulist(sorted(allowed))}, so "
            + " and ".join(parts) + " if the other nodes are alike")


def visible_by_host(placement: Placement, alloc_gpus: Mapping[str, Optional[Sequence[int]]],
                    constrained: bool) -> dict:
    """host -> CUDA_VISIBLE_DEVICES (local rank order, cgroup numbering)."""
    out = {}
    for h in node_ranks(placement):
        try:
            out[h] = visible_devices(placement.gpus_on(h), alloc_gpus.get(h), constrained)
        except SlurmtopoError as exc:
            raise SlurmtopoError(f"{h}: {exc.message}") from None
    return out
