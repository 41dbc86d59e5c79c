"""A past period rebuilt from ``sacct -P`` output (``slurmtopo audit --sacct``).

The record is read by ``slurmtopo simulate``'s sacct reader
(:mod:`slurmtopo.simulate.trace_sacct`: the same fields, the same rows
skipped and counted, but for the jobs still running, kept here). Each job's ``Start``, ``End`` and ``NodeList`` are
replayed in time order on the inventory (ends before starts at the same
second); at each multi-node job's start the cluster is what the other
jobs' intervals leave free, and the job is audited on it
(:class:`~slurmtopo.audit.placements.Auditor`).

sacct gives a job's GPU count (``AllocTRES``), not their indices: each node
of a job gets ``GPUs / nodes`` (the first nodes one more where that does
not divide), the indices chosen as Slurm chooses them
(:func:`slurmtopo.placement.slurm_select.slurm_pick`). Node states
(drained, down) are not in the record: every node counts as up. A job
still running when the record was taken (``End`` ``Unknown``) is read
as running: it holds its GPUs to the end of the record, and is audited
at its start like the others.

Shared links (:mod:`~slurmtopo.audit.contention`): every audited job's
traffic is on the fabric from its start to its end, and its slowdown by
them is averaged over its run.

The stranded GPUs (:mod:`~slurmtopo.audit.stranded`) are averaged over the
record, from its first start to its last start or end, as ``slurmtopo simulate``
averages them over a replay.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from slurmtopo.audit.contention import LinkWatch
from slurmtopo.audit.contention import summary as contention_summary
from slurmtopo.audit.placements import Auditor, JobAudit, RunningJob
from slurmtopo.inventory.model import ClusterState, Inventory
from slurmtopo.placement.slurm_select import slurm_pick
from slurmtopo.simulate.freestate import FreeState
from slurmtopo.simulate.trace import RowLog, Skipped, Trace


@dataclass(frozen=True)
class History:
    audits: Tuple[JobAudit, ...]
    #: jobs of the record not audited: single-node ones, and those that
    #: cannot be placed back (a node not in the inventory, GPUs already taken)
    single_node: int
    skipped: Tuple[Skipped, ...]
    stranded_mean: Optional[float]
    stranded_peak: int
    span_s: float
    #: jobs still running when the record was taken (they hold their GPUs to its end)
    running: int = 0
    #: the audited jobs' slowdown by shared links, each averaged over its run
    #: (:func:`slurmtopo.audit.contention.summary`), and per job (stretch, alone)
    contention: Optional[Dict[str, object]] = None
    contention_by_job: Optional[Dict[str, Tuple[float, float]]] = None


def split(gpus: int, hosts: int) -> List[int]:
    """``gpus`` over ``hosts`` nodes: the first ones one more where it does not divide."""
    base, extra = divmod(gpus, hosts)
    return [base + (1 if i < extra else 0) for i in range(hosts)]


def _line(where: str) -> int:
    """The line of a trace job's ``file:line``."""
    tail = where.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def replay(inv: Inventory, trace: Trace, auditor: Auditor) -> History:
    """Every job of ``trace`` placed back in time order; each multi-node job
    audited at its start (see the module doc)."""
    log = RowLog(trace.source)
    events: List[Tuple[float, int, int]] = []  # (time, 0 end / 1 start, job)
    running = 0
    for k, tj in enumerate(trace.jobs):
        line = _line(tj.where)
        if tj.wait is None or not tj.hosts:
            log.skip("without Start or NodeList", line)
            continue
        missing = [h for h in tj.hosts if h not in inv.nodes]
        if missing:
            log.skip("on nodes not in the inventory", line)
            continue
        start = tj.submit + tj.wait
        events.append((start, 1, k))
        if not tj.running:  # a running job holds its GPUs to the end of the record
            events.append((start + tj.run_time, 0, k))
        else:
            running += 1
    events.sort()
    fs = FreeState(inv)
    watch = LinkWatch(inv, auditor)
    recs = []
    held: Dict[int, Dict[str, Tuple[int, ...]]] = {}
    audits: List[JobAudit] = []
    single = 0
    area = 0.0
    peak = 0
    first = last = None
    now = None
    for t, kind, k in events:
        if now is not None:
            area += fs.stranded * (t - now)
        now = t
        first = t if first is None else first
        last = t
        tj = trace.jobs[k]
        if kind == 0:
            alloc = held.pop(k, None)
            if alloc:
                fs.release(alloc)
            if k in watch.jobs:
                recs.append(watch.remove(k, t))
            continue
        alloc: Dict[str, Tuple[int, ...]] = {}
        short = False
        for host, want in zip(tj.hosts, split(tj.gpus, len(tj.hosts))):
            node = inv.nodes[host]
            free = fs.free_gpus(host)
            if want > len(free):
                short = True
            picked = slurm_pick(node.hardware, free, min(want, len(free)))
            if picked:
                alloc[host] = picked
        line = _line(tj.where)
        if short:
            log.skip("whose GPUs other jobs of the record still hold (or more than the "
                     "nodes have)", line)
        elif len(tj.hosts) > 1:
            before = ClusterState(nodes=dict(fs.cluster.nodes), source=trace.source)
            job = RunningJob(job_id=tj.job_id, alloc=alloc, start=trace.origin + t,
                             where=tj.where)
            audits.append(auditor.audit(job, before))
            watch.add(k, job, t)
        else:
            single += 1
        if alloc:
            fs.allocate(alloc)
            held[k] = alloc
        peak = max(peak, fs.stranded)
    for k in sorted(watch.jobs):  # still running at the end of the record
        recs.append(watch.remove(k, last if last is not None else 0.0))
    span = (last - first) if first is not None else 0.0
    return History(audits=tuple(audits), single_node=single,
                   skipped=trace.skipped + log.skipped(),
                   stranded_mean=(area / span) if span > 0 else None,
                   stranded_peak=peak, span_s=span, running=running,
                   contention=contention_summary(recs, True),
                   contention_by_job={r.job_id: (r.stretch, r.alone) for r in recs})
