"""The per-rank launcher (`python3 -m slurmtopo.binding rank -- CMD`): looks
its SLURM_PROCID up in the rank table, sets RANK, LOCAL_RANK,
CUDA_VISIBLE_DEVICES, ..., binds to the planned CPUs that exist on this
host and execs the command."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.files import fileio
from slurmtopo.inventory.model import Placement, format_cpulist, parse_cpulist
from slurmtopo.plan.rankmap import (check_placement, cpulists, node_ranks, rank_vars,
                                    visible_devices)
from slurmtopo.plan.taskprobe import int_list
from slurmtopo.binding.limits import TABLE_MAGIC


def rank_table(placement: Placement, alloc_gpus: Mapping[str, Optional[Sequence[int]]],
               constrained: bool, cpu_bind: bool = True,
               host_env: Optional[Mapping[str, Mapping[str, str]]] = None) -> str:
    """Text table (see :func:`parse_rank_table`)::

        slurmtopo-ranktable 1 world=16 constrained=0 cpubind=1
        H <node_rank> <host> <gpus, local rank order> <allocated GPUs or ->
        E <node_rank> <NAME>=<value>        (a variable of that node's ranks only)
        R <rank> <node_rank> <local_rank> <cpus or -> <nics or ->

    (readers of earlier releases skip the ``E`` lines.)
    """
    check_placement(placement)
    nr = node_ranks(placement)
    cpus = cpulists(placement)
    lines = [f"{TABLE_MAGIC} 1 world={placement.world_size} constrained={int(constrained)} "
             f"cpubind={int(cpu_bind)}"]
    for h, i in nr.items():
        got = alloc_gpus.get(h)
        lines.append(f"H {i} {h} {','.join(map(str, placement.gpus_on(h)))} "
                     f"{format_cpulist(got) if got else '-'}")
        for k, v in sorted((host_env or {}).get(h, {}).items()):
            if not v or any(c.isspace() for c in k + v) or "=" in k:
                raise SlurmtopoError(f"{h}: {k}={v!r} cannot go in the rank table")
            lines.append(f"E {i} {k}={v}")
    for s in placement.slots:
        lines.append(f"R {s.rank} {nr[s.host]} {s.local_rank} "
                     f"{cpus[id(s.cpus)] or '-'} {','.join(s.nics) or '-'}")
    return "\n".join(lines) + "\n"


@dataclass
class RankInfo:
    rank: int
    world: int
    host: str
    node_rank: int
    local_rank: int
    host_gpus: List[int]
    allocated: Optional[List[int]]
    cpus: Tuple[int, ...]
    nics: List[str]
    constrained: bool
    cpu_bind: bool
    #: variables of this node's ranks only (``E`` lines)
    host_env: Dict[str, str] = field(default_factory=dict)


def parse_rank_table(text: str, rank: int) -> RankInfo:
    lines = text.splitlines()
    if not lines or not lines[0].startswith(TABLE_MAGIC + " "):
        raise SlurmtopoError("not a slurmtopo rank table")
    head = dict(kv.split("=", 1) for kv in lines[0].split()[2:] if "=" in kv)
    hosts: Dict[int, Tuple[str, List[int], Optional[List[int]]]] = {}
    row = None
    want = str(rank)
    extra: Dict[int, Dict[str, str]] = {}
    for line in lines[1:]:
        p = line.split()
        if not p:
            continue
        if p[0] == "E" and len(p) == 3 and "=" in p[2]:
            k, _, v = p[2].partition("=")
            extra.setdefault(int(p[1]), {})[k] = v
        elif p[0] == "H" and len(p) == 5:
            hosts[int(p[1])] = (p[2], [int(x) for x in p[3].split(",") if x],
                                None if p[4] == "-" else list(parse_cpulist(p[4])))
        elif p[0] == "R" and len(p) == 6 and p[1] == want:
            row = p
    if row is None:
        raise SlurmtopoError(f"rank {rank} is not in the rank table "
                             f"(world {head.get('world', '?')})")
    node_rank, local_rank = int(row[2]), int(row[3])
    host, gpus, alloc = hosts[node_rank]
    return RankInfo(rank=rank, world=int(head["world"]), host=host, node_rank=node_rank,
                    local_rank=local_rank, host_gpus=gpus, allocated=alloc,
                    cpus=() if row[4] == "-" else parse_cpulist(row[4]),
                    nics=[] if row[5] == "-" else row[5].split(","),
                    constrained=head.get("constrained") == "1",
                    cpu_bind=head.get("cpubind", "1") == "1",
                    host_env=extra.get(node_rank, {}))


def rank_launch(info: RankInfo, environ: Mapping[str, str], allowed: Iterable[int]
                ) -> Tuple[Dict[str, str], Optional[Tuple[int, ...]], List[str]]:
    """(variables to set, CPUs to bind to or None, log lines) for one rank on
    the host it runs on. Pure: ``environ`` is what Slurm gave the task,
    ``allowed`` what ``os.sched_getaffinity(0)`` says here.

    Local facts win over the table when Slurm states them: if this step's
    ``SLURM_STEP_GPUS`` and ``CUDA_VISIBLE_DEVICES`` differ, Slurm has
    renumbered GPUs on this node (device cgroup), whatever the batch host
    thought; the step's GPUs stand in for an allocation the table lacks.
    """
    log: List[str] = []
    me = environ.get("SLURMD_NODENAME")
    if me and me != info.host:
        raise SlurmtopoError(f"rank {info.rank} was planned on {info.host} but srun started it "
                             f"on {me}; is SLURM_HOSTFILE honoured (--distribution=arbitrary)?")
    constrained = info.constrained
    step = int_list(environ.get("SLURM_STEP_GPUS"))
    local_cvd = int_list(environ.get("CUDA_VISIBLE_DEVICES"))
    # the numbers only tell when the step holds GPUs other than 0..n-1
    if (step and local_cvd is not None and len(step) == len(local_cvd)
            and step != list(range(len(step)))):
        here = step != local_cvd
        if here != constrained:
            log.append(f"Slurm {'renumbers' if here else 'does not renumber'} GPUs here "
                       f"(SLURM_STEP_GPUS={environ['SLURM_STEP_GPUS']}, "
                       f"CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']}); following it")
        constrained = here
    alloc = info.allocated
    if step:
        if alloc is None:
            alloc = sorted(step)
        elif sorted(step) != sorted(alloc):
            log.append(f"this step holds GPUs {format_cpulist(step)}, the allocation said "
                       f"{format_cpulist(alloc)}")
    cvd = visible_devices(info.host_gpus, alloc, constrained)
    bind: Optional[Tuple[int, ...]] = None
    allowed = set(allowed)
    if info.cpu_bind and info.cpus and environ.get("SLURMTOPO_CPU_BIND", "1") != "0":
        planned = set(info.cpus)
        inter = tuple(sorted(planned & allowed))
        if not inter:
            log.append(f"none of the planned CPUs {format_cpulist(planned)} exist or are "
                       f"allowed here (allowed: {format_cpulist(allowed)}); not binding")
        else:
            if len(inter) < len(planned):
                log.append(f"CPU binding reduced from {format_cpulist(planned)} to "
                           f"{format_cpulist(inter)} (allowed here: {format_cpulist(allowed)})")
            bind = inter
    env = rank_vars(info.rank, info.local_rank, info.world, len(info.host_gpus),
                    info.node_rank, cvd, info.host_gpus[info.local_rank],
                    format_cpulist(bind) if bind else "", info.nics)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env.update(info.host_env)
    return env, bind, log


def rank_main(argv: Sequence[str], environ: Optional[Dict[str, str]] = None) -> int:
    """``python3 -m slurmtopo.binding rank -- CMD ARGS``: set up this rank
    and exec CMD (returns only on error)."""
    environ = dict(os.environ if environ is None else environ)
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    procid = environ.get("SLURM_PROCID")
    tag = f"slurmtopo rank {procid if procid is not None else '?'}"
    try:
        if not args:
            raise SlurmtopoError("no command given after --")
        if procid is None:
            raise SlurmtopoError("SLURM_PROCID is not set: start ranks with srun")
        text = environ.get("SLURMTOPO_RANK_TABLE")
        if not text:
            path = environ.get("SLURMTOPO_RANK_TABLE_FILE")
            if not path:
                raise SlurmtopoError("no rank table (SLURMTOPO_RANK_TABLE or "
                                     "SLURMTOPO_RANK_TABLE_FILE); source env.sh from "
                                     "`slurmtopo bind` before srun")
            text = _read_own(path)
        info = parse_rank_table(text, int(procid))
        env, bind, log = rank_launch(info, environ, os.sched_getaffinity(0))
        host = environ.get("SLURMD_NODENAME") or info.host
        for line in log:
            print(f"{tag} ({host}): {line}", file=sys.stderr)
        if bind:
            os.sched_setaffinity(0, bind)
    except SlurmtopoError as exc:
        print(f"{tag}: error: {exc.render()}", file=sys.stderr)
        return 2
    environ.pop("SLURMTOPO_RANK_TABLE", None)
    environ.update(env)
    sys.stderr.flush()
    try:
        os.execvpe(args[0], args, environ)
    except OSError as exc:
        print(f"{tag}: error: cannot run {args[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover


def _read_own(path: str) -> str:
    """The rank table at ``path``, checked on the open file: a regular file
    (a FIFO would block the rank), the user's and writable by nobody else
    (the path may cross a directory others can rename entries of; what it
    names is only used when it is what ``slurmtopo bind`` wrote, 0600)."""
    try:
        fd = fileio.open_regular(path)
    except SlurmtopoError as exc:
        raise SlurmtopoError(f"the rank table: {exc.message}; large jobs need --run-dir on a "
                             "file system all nodes see", path) from None
    with os.fdopen(fd, encoding="utf-8") as fh:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise SlurmtopoError("the rank table is not yours alone (another user may have "
                                 "replaced it): not using it", path)
        return fh.read(fileio.MAX_TEXT_BYTES)
