"""Shared links on the real cluster: how much the running jobs' traffic
slows them, by ``slurmtopo simulate``'s model (:mod:`slurmtopo.simulate.contention`).

Every audited multi-node job is placed as Slurm launched it (ranks in
block order, GPUs by index: :meth:`~slurmtopo.audit.placements.Auditor.today`),
its step's traffic (:mod:`slurmtopo.simulate.traffic`) put on the fabric's
links, its flows hashed onto uplinks as ECMP does, and each job's run-time
multiplier read off: its share of time communicating is ``--comm-fraction``
(0.3), as in ``simulate``. For the cluster now, every running job at once;
for a past period (``--sacct``), the jobs' intervals replayed in time order,
each job's multiplier averaged over its run.

A job is *slowed* when its multiplier passes
:data:`slurmtopo.simulate.report.SLOWED`; *by other jobs* when it passes what
its own flows alone give it (two of its flows hashed onto one uplink slow
it too).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from slurmtopo.simulate.contention import Contention, FabricLinks, job_load
from slurmtopo.simulate.report import BUCKETS, SLOWED, percentile
from slurmtopo.simulate.traffic import job_traffic

#: the share of a job's run time spent communicating (simulate's default)
FRACTION = 0.3


@dataclass
class JobContention:
    """One job's multiplier (mean over its run for a past period) and what
    its own flows alone give it."""

    job_id: str
    gpus: int
    stretch: float = 1.0
    alone: float = 1.0
    #: seconds it ran (a past period), for the GPU-hours
    seconds: float = 0.0


class LinkWatch:
    """The audited jobs' load on the shared links, kept as they start and
    end (see the module doc)."""

    def __init__(self, inv, auditor, fraction: float = FRACTION, mode: str = "ecmp",
                 seed: int = 0):
        self.inv = inv
        self.auditor = auditor
        self.fraction = fraction
        self.seed = seed
        self.links = FabricLinks(inv, auditor.params, mode)
        self.net = Contention(self.links)
        self.mult: Dict[int, float] = {}
        self.jobs: Dict[int, JobContention] = {}
        self._area: Dict[int, float] = {}
        self._since: Dict[int, float] = {}
        self._last: Dict[int, float] = {}

    def add(self, key: int, job, now: float = 0.0) -> None:
        rec = self.jobs[key] = JobContention(job.job_id, job.gpus)
        self._area[key] = 0.0
        self._since[key] = self._last[key] = now
        self.mult[key] = 1.0
        if len(job.alloc) < 2:
            return
        _shape, req, pl = self.auditor.today(job)
        traffic = job_traffic(self.inv, pl, req, self.auditor.params)
        if traffic.empty or traffic.comm_s <= 0:
            return
        load = job_load(self.links, traffic, self.fraction / traffic.comm_s, key, self.seed)
        self._changed(self.net.add(key, load), now)
        rec.alone = self.net.alone(key)

    def remove(self, key: int, now: float = 0.0) -> JobContention:
        self._settle(key, now)
        rec = self.jobs.pop(key)
        rec.seconds = now - self._since.pop(key)
        self._last.pop(key, None)
        rec.stretch = (self._area.pop(key) / rec.seconds) if rec.seconds > 0 else \
            self.mult.get(key, 1.0)
        self.mult.pop(key, None)
        self._changed(self.net.remove(key), now)
        return rec

    def now(self) -> List[JobContention]:
        """Every job's multiplier as things stand (the cluster now)."""
        out = []
        for key, rec in self.jobs.items():
            rec.stretch = self.mult.get(key, 1.0)
            out.append(rec)
        return out

    def _settle(self, key: int, now: float) -> None:
        """Add the time since the job's last change at its multiplier."""
        last = self._last.get(key)
        if last is not None:
            self._area[key] += self.mult.get(key, 1.0) * (now - last)
            self._last[key] = now

    def _changed(self, changed: Dict[int, float], now: float) -> None:
        for key in sorted(changed):
            if key in self.jobs:
                self._settle(key, now)
                self.mult[key] = changed[key]


def summary(recs: Sequence[JobContention], weigh_time: bool) -> Dict[str, object]:
    """The share of jobs (and of GPUs, or GPU-hours for a past period)
    slowed by shared links, of them by other jobs, how much, and the
    distribution of the multipliers."""
    def r(x: Optional[float]) -> Optional[float]:
        return None if x is None else float(f"{x:.6g}")

    n = len(recs)
    weight = [(x.gpus * x.seconds if weigh_time else x.gpus) for x in recs]
    total = sum(weight)
    slowed = [x for x in recs if x.stretch > SLOWED]
    by_others = [x for x in slowed if x.stretch > x.alone * SLOWED]
    w_slowed = sum(w for x, w in zip(recs, weight) if x.stretch > SLOWED)
    hist = [0] * len(BUCKETS)
    for x in recs:
        b = max(i for i, lo in enumerate(BUCKETS) if x.stretch >= lo - 1e-12) \
            if x.stretch >= BUCKETS[0] else 0
        hist[b] += 1
    st = [x.stretch for x in slowed]
    return {"jobs": n, "comm_fraction": FRACTION, "slowed": r(len(slowed) / n) if n else None,
            "slowed_by_others": r(len(by_others) / n) if n else None,
            ("gpu_hours" if weigh_time else "gpus"): r(w_slowed / total) if total else None,
            "stretch": {"mean": r(sum(st) / len(st)) if st else None,
                        "p95": r(percentile(st, 95)), "max": r(max(st) if st else None)},
            "distribution": [{"from": BUCKETS[i],
                              "to": BUCKETS[i + 1] if i + 1 < len(BUCKETS) else None,
                              "jobs": r(hist[i] / n) if n else None}
                             for i in range(len(BUCKETS))]}
