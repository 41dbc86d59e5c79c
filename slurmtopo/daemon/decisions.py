"""The placement daemon's vocabulary: what it is told (the queue, the
cluster view, its configuration), what it remembers (job records) and what
it decides (:class:`Decision` and its actions). Pure data; the decisions
themselves are made in :mod:`slurmtopo.daemon.scheduler`."""
from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterable, Mapping, Optional, Tuple

from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.inventory.model import ClusterState, Placement, format_cpulist
from slurmtopo.show.termsafe import printable

RELEASE = "release"
WAIT = "wait"
REJECT = "reject"
REHOLD = "rehold"
STARTING = "starting"
RUNNING = "running"
OUTSIDE = "outside"
#: the daemon failed on this job (an unexpected exception): it is taken out
#: of the daemon's hands with the error in its comment, never cancelled
FAULT = "fault"
#: someone else decided about this job (an admin's hold, a change of its
#: partition, reservation, ...): left alone while that lasts
LEFT_ALONE = "left-alone"

#: the phases of a JobRecord (see there)
PHASES = ("waiting", "releasing", "released", "running", "reholding", "outside")
#: node lists the daemon pinned on a job that its record keeps (the last
#: few: a crash between the intent and the pin leaves Slurm with the one
#: before), so that its own pins never count as a change by someone else
KEEP_PINS = 4

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
    #: a job whose release is refused (its fresh record disagrees with the
    #: snapshot, Slurm refuses the pin, its record cannot be read) this many
    #: times in a row is let go, the reason in its comment: one job the
    #: daemon cannot release never holds the others' GPUs for good
    release_tries: int = 3
    #: after each refused try the job waits this long, doubled each time,
    #: without planning (so it claims no GPU) before the next try
    retry_backoff: float = 60.0
    #: "domains": pack jobs a rack can hold into racks in use, keeping whole
    #: multi-node NVLink domains free (slurmtopo.daemon.packing); "": off
    pack: str = ""


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
    #: the job's JOB_FINGERPRINT fields when the daemon first saw it
    #: (slurmtopo.slurm.backend): a change by anyone else makes the daemon
    #: leave the job alone
    fingerprint: Dict[str, str] = field(default_factory=dict)
    #: the node lists (folded) the daemon pinned on it, the last KEEP_PINS
    pins: Tuple[str, ...] = ()
    #: releases tried and refused in a row (Config.release_tries), the
    #: last reason, and when the next try may come (epoch s)
    refusals: int = 0
    refused: Optional[str] = None
    retry_at: Optional[float] = None

    def as_dict(self) -> Dict[str, object]:
        return {"job_id": self.job_id, "phase": self.phase, "hosts": list(self.hosts),
                "gpus": {h: list(g) for h, g in self.gpus.items()},
                "claim": {h: list(g) for h, g in self.claim.items()},
                "exclusive": self.exclusive, "cpus": self.cpus, "taken": self.taken,
                "cost_s": self.cost_s, "preferred_cost_s": self.preferred_cost_s,
                "released_at": self.released_at, "releases": self.releases,
                "reholds": self.reholds, "first_seen": self.first_seen,
                "avoid": dict(self.avoid), "drift": self.drift,
                "fingerprint": dict(self.fingerprint), "pins": list(self.pins),
                "refusals": self.refusals, "refused": self.refused, "retry_at": self.retry_at}

    @classmethod
    def from_dict(cls, d: Any) -> "JobRecord":
        """A record read back from the journal, every value checked like
        user input (the journal is a file, and files get damaged or
        edited): ValueError naming the field when one is out of shape or
        range, never OverflowError, TypeError or a record that makes a
        later cycle fail."""
        r = _Reader(d)
        return cls(job_id=r.whole("job_id", 1, MAX_JOB_ID, required=True),
                   phase=r.choice("phase", PHASES, "waiting"),
                   hosts=r.names("hosts"), gpus=r.gpu_map("gpus"), claim=r.gpu_map("claim"),
                   exclusive=r.flag("exclusive"), cpus=r.whole("cpus", 0, MAX_COUNT) or 0,
                   taken=r.text("taken", 32), cost_s=r.number("cost_s", 0, MAX_SECONDS),
                   preferred_cost_s=r.number("preferred_cost_s", 0, MAX_SECONDS),
                   released_at=r.number("released_at", 0, MAX_EPOCH),
                   releases=r.whole("releases", 0, MAX_COUNT) or 0,
                   reholds=r.whole("reholds", 0, MAX_COUNT) or 0,
                   first_seen=r.number("first_seen", 0, MAX_EPOCH),
                   avoid=r.until_map("avoid"), drift=r.text("drift", MAX_TEXT),
                   fingerprint=r.text_map("fingerprint"),
                   pins=tuple(r.texts("pins", MAX_TEXT))[-KEEP_PINS:],
                   refusals=r.whole("refusals", 0, MAX_COUNT) or 0,
                   refused=r.text("refused", MAX_TEXT),
                   retry_at=r.number("retry_at", 0, MAX_EPOCH))


#: bounds of a journal record's values (JobRecord.from_dict)
MAX_JOB_ID = (1 << 32) - 1
MAX_COUNT = 1 << 31
MAX_SECONDS = 1e9
MAX_EPOCH = float(1 << 40)
MAX_TEXT = 1 << 16
MAX_NODE_NAME = 256
MAX_NODES = 1 << 16
MAX_GPU_INDEX = 4096


class _Reader:
    """Typed, bounded access to one journal record (a JSON object)."""

    def __init__(self, d: Any):
        if not isinstance(d, dict):
            raise ValueError("a journal record is not an object")
        self.d = d

    def _get(self, key: str, required: bool = False) -> Any:
        if required and key not in self.d:
            raise ValueError(f"a journal record has no {key}")
        return self.d.get(key)

    def whole(self, key: str, low: int, high: int, required: bool = False) -> Optional[int]:
        v = self._get(key, required)
        if v is None and not required:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ValueError(f"{key} is not a whole number from {low} to {high}")
        return v

    @staticmethod
    def _finite(v: Any, low: float, high: float) -> bool:
        return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) \
            and low <= v <= high

    def number(self, key: str, low: float, high: float) -> Optional[float]:
        v = self._get(key)
        if v is None:
            return None
        if not self._finite(v, low, high):
            raise ValueError(f"{key} is not a number from {low:g} to {high:g}")
        return float(v)

    def flag(self, key: str) -> bool:
        v = self._get(key)
        if v is None:
            return False
        if not isinstance(v, bool):
            raise ValueError(f"{key} is not true or false")
        return v

    def text(self, key: str, limit: int) -> Optional[str]:
        v = self._get(key)
        if v is None:
            return None
        if not isinstance(v, str) or len(v) > limit:
            raise ValueError(f"{key} is not a text of at most {limit} characters")
        return v

    def choice(self, key: str, allowed: Tuple[str, ...], default: str) -> str:
        v = self._get(key)
        if v is None:
            return default
        if v not in allowed:
            raise ValueError(f"{key} is not one of {', '.join(allowed)}")
        return v

    def _list(self, key: str, limit: int) -> list:
        v = self._get(key)
        if v is None:
            return []
        if not isinstance(v, list) or len(v) > limit:
            raise ValueError(f"{key} is not a list of at most {limit} items")
        return v

    def _map(self, key: str) -> dict:
        v = self._get(key)
        if v is None:
            return {}
        if not isinstance(v, dict) or len(v) > MAX_NODES:
            raise ValueError(f"{key} is not an object of at most {MAX_NODES} keys")
        for k in v:
            if not 0 < len(k) <= MAX_NODE_NAME:
                raise ValueError(f"{key} has a key longer than {MAX_NODE_NAME} characters")
        return v

    def names(self, key: str) -> Tuple[str, ...]:
        out = self._list(key, MAX_NODES)
        if not all(isinstance(h, str) and 0 < len(h) <= MAX_NODE_NAME for h in out):
            raise ValueError(f"{key} holds something that is not a node name")
        return tuple(out)

    def texts(self, key: str, limit: int) -> Tuple[str, ...]:
        out = self._list(key, KEEP_PINS * 4)
        if not all(isinstance(x, str) and len(x) <= limit for x in out):
            raise ValueError(f"{key} holds something that is not a text")
        return tuple(out)

    def gpu_map(self, key: str) -> Dict[str, Tuple[int, ...]]:
        out = {}
        for h, g in self._map(key).items():
            if not isinstance(g, list) or len(g) > MAX_GPU_INDEX or not all(
                    isinstance(x, int) and not isinstance(x, bool) and 0 <= x < MAX_GPU_INDEX
                    for x in g):
                raise ValueError(f"{key}.{h[:40]} is not a list of GPU indices")
            out[h] = tuple(g)
        return out

    def until_map(self, key: str) -> Dict[str, float]:
        out = {}
        for h, v in self._map(key).items():
            if not self._finite(v, 0, MAX_EPOCH):
                raise ValueError(f"{key}.{h[:40]} is not a time")
            out[h] = float(v)
        return out

    def text_map(self, key: str) -> Dict[str, str]:
        out = {}
        for k, v in self._map(key).items():
            if not isinstance(v, str) or len(v) > MAX_TEXT:
                raise ValueError(f"{key}.{k[:40]} is not a text")
            out[k] = v
        return out


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
    #: the reason of a hold that is not the protocol's (``JobHeldAdmin``:
    #: an admin held it); None when the job is held by its user or not held
    foreign_hold: Optional[str] = None
    #: what changed since the daemon first saw the job ("partition gpu ->
    #: debug"), by someone else than the daemon; empty when nothing did
    changed: Tuple[str, ...] = ()


@dataclass
class ClusterView:
    """What the scheduler knows about the cluster besides the inventory."""

    state: ClusterState
    #: partition -> node names (empty: do not restrict by partition)
    partitions: Mapping[str, FrozenSet[str]] = field(default_factory=dict)
    #: node -> free CPUs (missing: unknown, not checked)
    cpus_free: Mapping[str, int] = field(default_factory=dict)
    #: node -> GPU index -> the running job holding it, and node -> the
    #: running jobs on it, from the same job snapshot as the queue (None:
    #: not known). A released job is held again for lost GPUs only when
    #: another job of this snapshot holds them: GPUs that look busy without
    #: one are the job itself starting between two reads of Slurm
    gpu_holders: Optional[Mapping[str, Mapping[int, int]]] = None
    node_jobs: Optional[Mapping[str, FrozenSet[int]]] = None


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
    #: the pre-launch hazard warnings of a released placement, one line
    #: each (slurmtopo.daemon.jobhazards): logged and journalled
    hazards: Tuple[str, ...] = ()
    #: a WAIT because the pass refused the release itself (what was free had
    #: an error hazard under the job's policy): the loop counts it as a
    #: refused release, so the job backs off unplanned and is let go after
    #: ``Config.release_tries``, the reason in its comment; at once when
    #: ``final`` (even its placement on the empty cluster has the hazard)
    refused: Optional[str] = None
    final: bool = False
    #: the traceback of a FAULT as text (the event log), and the exception
    #: itself (the daemon's log); never shown to the job's owner
    trace: Optional[str] = None
    exc: Optional[BaseException] = field(default=None, repr=False, compare=False)

    def summary(self) -> str:
        """One line for logs and `slurmtopo daemon status`."""
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


def fault(job_id: int, what: str, exc: BaseException) -> Decision:
    """The decision for a job the daemon failed on: ``exc``, unexpected,
    raised while ``what`` ("planning it"). One user's job must never stop
    the daemon for everyone: the loop logs the traceback, takes the job out
    of its hands with the reason in the job's comment, and goes on with
    the other jobs."""
    return Decision(job_id, FAULT, exc=exc, trace="".join(traceback.format_exception(
        type(exc), exc, exc.__traceback__)), reason=(
        f"the placement daemon failed while {what} ({type(exc).__name__}: "
        f"{printable(exc, 160)}); the job is left held for an admin to look at"))


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
