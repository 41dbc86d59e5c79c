"""Every srun task's environment as one POSIX ``/bin/sh`` fragment.

``slurmtopo bind`` runs once, on the batch host, with Python. The tasks it
starts on the other nodes (and inside containers) must not need Python or
slurmtopo, so bind writes what each task needs as shell text: a ``case`` on
``SLURM_PROCID`` giving the task's node rank (and, for the srun launcher,
its local rank, GPU, CPUs and NICs), a ``case`` on the node rank giving the
host and its ``CUDA_VISIBLE_DEVICES``, then the checks, exports, CPU
binding (``taskset``, when the node has it) and ``exec "$@"``. The batch
script's srun line sources it through :data:`slurmtopo.plandoc.TASK_SNIPPET`.

Every value is shell-quoted; the text only assigns, tests and execs.
"""
from __future__ import annotations

import shlex
from typing import Iterable, Mapping, Optional, Sequence

from slurmtopo.model import Placement, format_cpulist

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

_SRUN_TAIL = """\
RANK=$SLURM_PROCID
GROUP_RANK=$NODE_RANK
export RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK CUDA_VISIBLE_DEVICES
export CUDA_DEVICE_ORDER=PCI_BUS_ID SLURMTOPO_GPU SLURMTOPO_NICS SLURMTOPO_CPUS
unset SLURMTOPO_TASK_ENV SLURMTOPO_HOST SLURMTOPO_HOST_GPUS
if [ -n "$SLURMTOPO_CPUS" ] && [ "${SLURMTOPO_CPU_BIND:-1}" != 0 ]; then
  if command -v taskset >/dev/null 2>&1; then
    # the kernel keeps only the CPUs that exist and are allowed here; when
    # none are, taskset fails and the rank runs unbound (the batch step's
    # "CPU binding:" line says which ranks)
    if taskset -c "$SLURMTOPO_CPUS" true 2>/dev/null; then
      exec taskset -c "$SLURMTOPO_CPUS" "$@"
    fi
  elif [ "$LOCAL_RANK" = 0 ]; then
    echo "slurmtopo task $RANK (${SLURMD_NODENAME:-?}): no taskset on this node; its ranks run without CPU binding" >&2
  fi
fi
SLURMTOPO_CPUS=
exec "$@"
"""

_TORCHRUN_TAIL = """\
GROUP_RANK=$NODE_RANK
export NODE_RANK GROUP_RANK CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER=PCI_BUS_ID
# torchrun sets the per-process variables itself
unset SLURMTOPO_TASK_ENV SLURMTOPO_HOST SLURMTOPO_HOST_GPUS RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE
for _st_a in "$@"; do
  shift
  case $_st_a in
    {word}) set -- "$@" "--node-rank=$NODE_RANK" ;;
    *) set -- "$@" "$_st_a" ;;
  esac
done
exec "$@"
"""


def task_script(placement: Placement, visible: Mapping[str, str], launcher: str = "srun",
                cpu_bind: bool = True) -> str:
    """The fragment for ``placement``. ``visible``: host ->
    CUDA_VISIBLE_DEVICES as the batch step computed it (device cgroup and
    allocation taken into account). ``launcher``: one task per rank (srun)
    or per node (torchrun)."""
    from slurmtopo.rankmap import check_placement, node_ranks
    from slurmtopo.plandoc import NODE_RANK_WORD

    q = shlex.quote
    check_placement(placement)
    nr = node_ranks(placement)
    lines = [_HEAD.rstrip("\n"), f"WORLD_SIZE={placement.world_size}",
             "_st_slurm_cvd=${CUDA_VISIBLE_DEVICES:-}",
             'case "${SLURM_PROCID:-}" in']
    if launcher == "torchrun":
        for h, i in nr.items():
            lines.append(f"  {i}) NODE_RANK={i} ;;")
    else:
        for s in placement.slots:
            cpus = format_cpulist(s.cpus) if cpu_bind else ""
            lines.append(f"  {s.rank}) NODE_RANK={nr[s.host]} LOCAL_RANK={s.local_rank} "
                         f"SLURMTOPO_GPU={s.gpu} SLURMTOPO_CPUS={q(cpus)} "
                         f"SLURMTOPO_NICS={q(','.join(s.nics))} ;;")
    lines += ['  *) _st_die "task ${SLURM_PROCID:-(no SLURM_PROCID)} is not in this job\'s '
              'plan; start tasks with the srun line of the batch script" ;;', "esac",
              "case $NODE_RANK in"]
    for h, i in nr.items():
        lines.append(f"  {i}) SLURMTOPO_HOST={q(h)} CUDA_VISIBLE_DEVICES={q(visible[h])} "
                     f"SLURMTOPO_HOST_GPUS={','.join(map(str, placement.gpus_on(h)))} "
                     f"LOCAL_WORLD_SIZE={len(placement.ranks_on(h))} ;;")
    lines.append("esac")
    tail = (_TORCHRUN_TAIL.replace("{word}", NODE_RANK_WORD) if launcher == "torchrun"
            else _SRUN_TAIL)
    return "\n".join(lines) + "\n" + _HOST_CHECK + _LOCAL_GPUS + tail


def cpu_summary(placement: Placement, launcher: str, cpu_bind: bool,
                allowed: Optional[Iterable[int]] = None, here: Optional[str] = None) -> str:
    """The one log line about CPU binding (instead of one per rank).

    ``allowed`` is what this (batch) node lets the job use; ranks are judged
    by it, on the assumption that the job's nodes are alike."""
    if launcher == "torchrun":
        return ("CPU binding: none (torchrun starts the ranks; rankmap.json lists each "
                "rank's planned CPUs for a program that binds itself)")
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
    reduced = [s.rank for s in bound if set(s.cpus) & allowed and not set(s.cpus) <= allowed]
    none = [s.rank for s in bound if not set(s.cpus) & allowed]
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
    from slurmtopo.errors import SlurmtopoError
    from slurmtopo.rankmap import node_ranks, visible_devices

    out = {}
    for h in node_ranks(placement):
        try:
            out[h] = visible_devices(placement.gpus_on(h), alloc_gpus.get(h), constrained)
        except SlurmtopoError as exc:
            raise SlurmtopoError(f"{h}: {exc.message}") from None
    return out
