"""The placement daemon's vocabulary: what it is told (the queue, the
cluster view, its configuration), what it remembers (job records) and what
it decides (:class:`Decision` and its actions). Pure data; the decisions
themselves are made in :mod:`slurmtopo.daemon.scheduler`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, Mapping, Optional, Tuple

from slurmtopo.model import ClusterState, Placement

RELEASE = "release"
WAIT = "wait"
REJECT = "reject"
REHOLD = "rehold"
STARTING = "starting"
RUNNING = "running"
OUTSIDE = "outside"

@dataclass
class Config:
    #: a released job may pend this long with its pinned GPUs free before it
    #: is held again and re-planned elsewhere
    release_grace: float = 30.0
    #: after such a time-out, the job's pinned nodes are avoided this long
    avoid_for: float = 300.0
    #: how many blocked jobs get a reservation (0: no reservations)
    reservations: int = 1
    #: placements tried per job for best fit (the planner's + alternatives)
    alternatives: int = 4
    #: placements within this fraction of the best modelled cost are "equal"
    cost_tolerance: float = 0.02
    #: wait for a ``prefer`` that has no ``wait`` of its own (seconds)
    default_wait: float = 0.0
    #: at most this many releases per cycle (0: no limit); the jobs after
    #: them wait for the next cycle unplanned, so a burst of submissions
    #: costs a bounded time per cycle (like Slurm's sched_max_job_start)
    max_releases: int = 100
    #: only the first this many releases of a cycle compare alternatives
    #: for best fit (0: all); later ones take the planner's placement
    best_fit_releases: int = 16


@dataclass
class JobRecord:
    """What the daemon did with one job; the loop keeps it in the journal.

    ``phase``: ``waiting`` (held, ours), ``releasing`` (intent written,
    release may or may not have happened), ``released`` (released, not
    running yet), ``running``, ``reholding`` (intent to hold it again),
    ``outside`` (someone else held or released it after us).
    """

    job_id: int
    phase: str = "waiting"
    hosts: Tuple[str, ...] = ()
    gpus: Dict[str, Tuple[int, ...]] = field(default_factory=dict)  # planned
    claim: Dict[str, Tuple[int, ...]] = field(default_factory=dict)  # planned + predicted
    exclusive: bool = False
    cpus: int = 0  # CPUs per node the job takes (its tasks per node)
    taken: Optional[str] = None
    cost_s: Optional[float] = None
    preferred_cost_s: Optional[float] = None
    released_at: Optional[float] = None
    releases: int = 0
    reholds: int = 0
    first_seen: Optional[float] = None
    avoid: Dict[str, float] = field(default_factory=dict)  # node -> until (epoch s)
    drift: Optional[str] = None

    def as_dict(self) -> Dict[str, object]:
        return {"job_id": self.job_id, "phase": self.phase, "hosts": list(self.hosts),
                "gpus": {h: list(g) for h, g in self.gpus.items()},
                "claim": {h: list(g) for h, g in self.claim.items()},
                "exclusive": self.exclusive, "cpus": self.cpus, "taken": self.taken,
                "cost_s": self.cost_s, "preferred_cost_s": self.preferred_cost_s,
                "released_at": self.released_at, "releases": self.releases,
                "reholds": self.reholds, "first_seen": self.first_seen,
                "avoid": dict(self.avoid), "drift": self.drift}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> "JobRecord":
        def gmap(v) -> Dict[str, Tuple[int, ...]]:
            return {str(h): tuple(int(x) for x in g) for h, g in dict(v or {}).items()}
        return cls(job_id=int(d["job_id"]), phase=str(d.get("phase") or "waiting"),
                   hosts=tuple(str(h) for h in d.get("hosts") or ()), gpus=gmap(d.get("gpus")),
                   claim=gmap(d.get("claim")), exclusive=bool(d.get("exclusive")),
                   cpus=int(d.get("cpus") or 0), taken=d.get("taken"),
                   cost_s=d.get("cost_s"), preferred_cost_s=d.get("preferred_cost_s"),
                   released_at=d.get("released_at"), releases=int(d.get("releases") or 0),
                   reholds=int(d.get("reholds") or 0), first_seen=d.get("first_seen"),
                   avoid={str(k): float(v) for k, v in dict(d.get("avoid") or {}).items()},
                   drift=d.get("drift"))


@dataclass(frozen=True)
class QueuedJob:
    """One job the daemon looks at (built by the loop from Slurm + journal)."""

    job_id: int
    spec: Optional[object] = None  # protocol.DaemonSpec; None with error set
    error: Optional[str] = None
    state: str = "PENDING"
    held: bool = True
    reason: Optional[str] = None
    priority: int = 0
    submit_time: Optional[float] = None  # epoch seconds
    partition: str = ""
    name: str = ""
    user: str = ""
    nodes: Tuple[str, ...] = ()  # allocated nodes (running)
    gpus: Mapping[str, Tuple[int, ...]] = field(default_factory=dict)  # allocated GPUs
    record: Optional[JobRecord] = None


@dataclass
class ClusterView:
    """What the scheduler knows about the cluster besides the inventory."""

    state: ClusterState
    #: partition -> node names (empty: do not restrict by partition)
    partitions: Mapping[str, FrozenSet[str]] = field(default_factory=dict)
    #: node -> free CPUs (missing: unknown, not checked)
    cpus_free: Mapping[str, int] = field(default_factory=dict)


@dataclass
class Decision:
    job_id: int
    action: str
    reason: str = ""
    hosts: Tuple[str, ...] = ()
    gpus: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    claim: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    exclusive: bool = False
    cpus: int = 0
    placement: Optional[Placement] = None
    taken: Optional[str] = None  # "preferred" | "fallback"
    cost_s: Optional[float] = None
    preferred_cost_s: Optional[float] = None
    gave_up: Tuple[str, ...] = ()  # "dp=leaf" preferences not waited for any more
    waiting_for: Tuple[str, ...] = ()  # preferences still waited for
    wait_left: Optional[float] = None
    reserved: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    avoid: Dict[str, float] = field(default_factory=dict)
    notes: Tuple[str, ...] = ()

    def summary(self) -> str:
        """One line for logs and `slurmtopo daemon status`."""
        from slurmtopo.hostlist import fold_hostlist

        if self.action == RELEASE:
            where = ", ".join(f"{h}:{format_gpus(self.gpus.get(h, ()))}" for h in self.hosts)
            text = f"release on {fold_hostlist(self.hosts)} (GPUs {where})"
            if self.taken == "fallback":
                text += f"; FALLBACK after its wait ({', '.join(self.gave_up)} given up)"
            elif self.taken:
                text += f"; {self.taken} placement"
            if self.cost_s is not None:
                text += f"; modelled step {format_time(self.cost_s)}"
                if self.preferred_cost_s is not None and self.taken == "fallback":
                    text += (f" vs {format_time(self.preferred_cost_s)} preferred "
                             f"({_pct(self.cost_s, self.preferred_cost_s)})")
            return text
        return f"{self.action}: {self.reason}" if self.reason else self.action


def format_time(t: Optional[float]) -> str:
    if t is None:
        return "-"
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} us"


def _pct(a: float, b: float) -> str:
    if not b:
        return "n/a"
    d = (a - b) / b * 100
    return f"{d:+.0f}%"


def format_gpus(gpus: Iterable[int]) -> str:
    """GPU indices as a cpulist (``0-3,6``), ``-`` for none."""
    from slurmtopo.model import format_cpulist
    return format_cpulist(gpus) or "-"


def format_wait(t: float) -> str:
    """A wait in seconds, for people: ``90s``, ``9min30s``, ``2.5h``."""
    t = max(0.0, t)
    if t < 120:
        return f"{t:.0f}s"
    if t < 7200:
        m, sec = divmod(int(round(t)), 60)
        return f"{m}min{sec:02d}s" if sec else f"{m}min"
    return f"{t / 3600:.1f}h"
