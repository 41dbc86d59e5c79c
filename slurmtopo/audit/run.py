"""The audit's two use cases, on data the command read: the cluster now
(a state and its running jobs) and a past period (a ``sacct`` record)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.audit.contention import LinkWatch
from slurmtopo.audit.contention import summary as contention_summary
from slurmtopo.audit.placements import Auditor, JobAudit, RunningJob, with_jobs, without
from slurmtopo.audit.stranded import Stranded, stranded
from slurmtopo.inventory.model import ClusterState, Inventory


@dataclass(frozen=True)
class Now:
    audits: Tuple[JobAudit, ...]
    stranded: Stranded
    #: reason -> jobs not audited for it
    not_audited: Dict[str, int]
    #: the running jobs' slowdown by shared links
    #: (:func:`slurmtopo.audit.contention.summary`), and per job (stretch, alone)
    contention: Optional[Dict[str, object]] = None
    contention_by_job: Optional[Dict[str, Tuple[float, float]]] = None


def audit_now(inv: Inventory, state: ClusterState, jobs: Sequence[RunningJob],
              auditor: Auditor) -> Now:
    """Every multi-node GPU job of ``jobs`` against slurmtopo's plan on
    ``state`` without it, and the stranded GPUs of ``state``."""
    skipped: Dict[str, int] = {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    kept: List[RunningJob] = []
    for job in jobs:
        if not job.alloc:
            skip("without GPUs")
        elif any(h not in inv.nodes for h in job.alloc):
            skip("on nodes not in the inventory")
        elif any(g >= inv.nodes[h].hardware.gpu_count for h, gs in job.alloc.items()
                 for g in gs):
            skip("on GPUs the inventory's nodes lack")
        else:
            kept.append(job)
    state = with_jobs(state, kept)
    audits = []
    for job in kept:
        if len(job.alloc) < 2:
            skip("on one node")
            continue
        audits.append(auditor.audit(job, without(state, job.alloc)))
    watch = LinkWatch(inv, auditor)
    for k, a in enumerate(audits):
        watch.add(k, a.job)
    recs = watch.now()
    return Now(tuple(audits), stranded(inv, state), skipped, contention_summary(recs, False),
               {r.job_id: (r.stretch, r.alone) for r in recs})
