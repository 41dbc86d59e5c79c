"""The placement daemon's decisions: pure, no Slurm, no files.

:func:`decide` takes the managed queue (held jobs with their requests, plus
the jobs the daemon released earlier), the cluster state and the inventory,
and returns one :class:`Decision` per job:

``release``   pin the job on the chosen nodes and release it (gang: every
              node is chosen here, Slurm then starts the job on all of them
              at once or not at all);
``wait``      keep it held, with the reason (not enough free GPUs; waiting
              for a preferred placement; GPUs reserved for a bigger job);
``reject``    it can never run: bad tag, or its required constraints do not
              fit even on the empty cluster;
``rehold``    it was released but did not start (another job took its nodes
              in between, or Slurm kept it pending past the grace time):
              hold it again; it is re-planned in the same pass;
``starting``  released, Slurm has not started it yet (its GPUs stay
              claimed so that no other job is planned onto them);
``running``   released and running (the loop checks which GPUs Slurm gave);
``outside``   someone else held or released it; the daemon leaves it alone.

Order and fairness
    Held jobs are planned in priority order: Slurm's priority (0 for every
    held job unless the backend knows better), then submit time, then job
    id. A job that fits is released and its GPUs are claimed in the working
    state, so lower jobs plan around it.

The wait knob (``JobRequest.wait``: kind -> seconds)
    For each preferred group kind (``prefer``, or a ``wait`` on a kind with
    the planner's implicit preference, e.g. tp -> nvlink), while the job is
    younger than its wait the preference is treated as *required*: the job
    stays held rather than take less. Once the wait has passed it becomes
    soft again and the job takes the best placement that meets its
    ``require``. A preference that cannot be met even on the empty cluster
    is not waited for. The decision says which was taken ("preferred" or
    "fallback") and the modelled step time of both.

Fragmentation (best fit)
    Besides the planner's own choice, up to ``alternatives`` placements on
    other nodes are tried; among those whose modelled cost is within
    ``cost_tolerance`` of the best, the one leaving the most whole free
    leaves, then whole free nodes, then the largest free NVLink islands
    (then PCIe-switch groups, NUMA groups) is taken.

Reservation (like backfill, without run times)
    The highest-priority job that cannot be placed now gets a reservation:
    running jobs' GPUs are freed node by node (least busy nodes first) until
    the job would fit; the GPUs of that future placement that are free *now*
    are reserved, so smaller jobs behind it plan around them and cannot
    break the island it waits for. ``reservations`` sets how many blocked
    jobs get one (0: none).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from slurmtopo.errors import PlacementError, SlurmtopoError
from slurmtopo.model import UNKNOWN_TO_SLURM, ClusterState, Inventory, NodeState, Placement
from slurmtopo.request import IMPLICIT_PREFER

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
            where = ", ".join(f"{h}:{_fmt(self.gpus.get(h, ()))}" for h in self.hosts)
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


def _fmt(gpus: Iterable[int]) -> str:
    from slurmtopo.model import format_cpulist
    return format_cpulist(gpus) or "-"


def _secs(t: float) -> str:
    t = max(0.0, t)
    if t < 120:
        return f"{t:.0f}s"
    if t < 7200:
        m, sec = divmod(int(round(t)), 60)
        return f"{m}min{sec:02d}s" if sec else f"{m}min"
    return f"{t / 3600:.1f}h"


# --------------------------------------------------------------------------
# the working state: Slurm's view plus claims (released jobs) and reservations


class Work:
    """Mutable free/busy view: Slurm's busy GPUs, plus GPUs claimed by jobs
    the daemon released that Slurm has not started yet, plus reservations."""

    def __init__(self, inv: Inventory, view: ClusterView):
        self.inv = inv
        self.base = view.state
        self.view = view
        self.claimed: Dict[str, Set[int]] = {}
        self.claimed_whole: Set[str] = set()
        self.reserved: Dict[str, Set[int]] = {}
        self.cpus_claimed: Dict[str, int] = {}
        self._cache: Optional[ClusterState] = None

    def slurm_busy(self, name: str) -> FrozenSet[int]:
        return self.base.of(name).busy_gpus

    def state(self, freed: Iterable[str] = (), with_reserved: bool = True) -> ClusterState:
        """The ClusterState to plan on; ``freed`` nodes lose their Slurm
        busy GPUs (for reservations: "once the jobs there end")."""
        freed = set(freed)
        if not freed and with_reserved and self._cache is not None:
            return self._cache
        out: Dict[str, NodeState] = {}
        for name, st in self.base.nodes.items():
            out[name] = st
        touched = set(self.claimed) | self.claimed_whole | freed
        if with_reserved:
            touched |= set(self.reserved)
        for name in touched:
            st = self.base.of(name)
            busy = set() if name in freed else set(st.busy_gpus)
            excl = False if name in freed else st.exclusive
            state = st.state
            if name in freed and state in ("allocated", "mixed", "completing"):
                state = "idle"
            busy |= self.claimed.get(name, set())
            if with_reserved:
                busy |= self.reserved.get(name, set())
            if name in self.claimed_whole:
                excl = True
            node = self.inv.nodes.get(name)
            if node is not None and busy and state == "idle":
                state = "mixed"
            out[name] = NodeState(name=name, state=state, busy_gpus=frozenset(busy),
                                  flags=st.flags, exclusive=excl)
        cs = ClusterState(nodes=out, source=self.base.source)
        if not freed and with_reserved:
            self._cache = cs
        return cs

    def free_gpus(self, name: str, with_reserved: bool = True) -> Tuple[int, ...]:
        node = self.inv.nodes[name]
        return self.state(with_reserved=with_reserved).free_gpus(node)

    def cpus_free(self, name: str) -> Optional[int]:
        c = self.view.cpus_free.get(name)
        if c is None:
            return None
        return c - self.cpus_claimed.get(name, 0)

    def claim(self, gpus: Mapping[str, Iterable[int]], exclusive: bool = False,
              cpus: int = 0) -> None:
        for h, gs in gpus.items():
            self.claimed.setdefault(h, set()).update(gs)
            if exclusive:
                self.claimed_whole.add(h)
            if cpus:
                self.cpus_claimed[h] = self.cpus_claimed.get(h, 0) + cpus
        self._cache = None

    def reserve(self, gpus: Mapping[str, Iterable[int]]) -> None:
        for h, gs in gpus.items():
            self.reserved.setdefault(h, set()).update(gs)
        self._cache = None


# --------------------------------------------------------------------------
# planning helpers


def _plan(inv: Inventory, state: Optional[ClusterState], req):
    from slurmtopo.api import plan_job
    return plan_job(inv, state, req)


def _cost(inv: Inventory, placement: Placement, req, params) -> Optional[float]:
    from slurmtopo.api import step_time
    try:
        return step_time(inv, placement, req, params)
    except Exception:  # the cost model is advice; never let it stop a release
        return None


def _cost_params(inv: Inventory):
    try:
        from slurmtopo.cost import CostParams
        return CostParams.from_inventory(inv)
    except Exception:
        return None


def planned_gpus(p: Placement) -> Dict[str, Tuple[int, ...]]:
    return {h: tuple(sorted(p.gpus_on(h))) for h in p.hosts}


class _Job:
    """Per-job derived values for one pass."""

    def __init__(self, q: QueuedJob, inv: Inventory, view: ClusterView, now: float,
                 cfg: Config):
        self.q = q
        spec = q.spec
        self.spec = spec
        req = spec.request
        self.shape = spec.shape
        gpn = self.shape.gpus_per_node or req.gpus_per_node
        exclude = set(req.exclude)
        # nodes outside the job's partition(s)
        if view.partitions and q.partition:
            allowed: Set[str] = set()
            known = False
            for part in q.partition.split(","):
                if part in view.partitions:
                    known = True
                    allowed |= set(view.partitions[part])
            if known:
                exclude |= {n for n in inv.nodes if n not in allowed}
        self.partition_excluded = frozenset(exclude) - set(req.exclude)
        self.tasks_per_node = self.shape.tasks_per_node or 1
        kw = {}
        if gpn != req.gpus_per_node:
            kw["gpus_per_node"] = gpn
        base = replace(req, exclude=tuple(sorted(exclude)), **kw) if (
            kw or exclude != set(req.exclude)) else req
        self.ideal_req = base
        # nodes to avoid now (recent time-outs), and nodes without CPUs for it
        avoid = set()
        if q.record is not None:
            avoid |= {n for n, until in q.record.avoid.items() if until > now}
        self.avoid = avoid
        self.base_req = base
        self.gpn = gpn
        self.age = max(0.0, now - (now if q.submit_time is None else float(q.submit_time)))
        # preferences with their waits
        self.prefs: Dict[str, str] = {}
        self.waits: Dict[str, float] = {}
        self.notes: List[str] = []
        for kind, level in req.prefer.items():
            self.prefs[kind] = level
            self.waits[kind] = float(req.wait.get(kind, cfg.default_wait))
        for kind, secs in req.wait.items():
            if kind in req.prefer:
                continue
            if kind in req.require:
                self.notes.append(f"wait on {kind} ignored: {kind}={req.require[kind]} is required")
                continue
            level = IMPLICIT_PREFER.get(kind)
            if level is None:
                self.notes.append(f"wait on {kind} ignored: no preference for {kind}")
                continue
            self.prefs[kind] = level
            self.waits[kind] = float(secs)

    def request(self, work: Work, strict: Iterable[str], extra_exclude: Iterable[str] = ()):
        """The request with the ``strict`` preferences made required, minus
        nodes to avoid and nodes without CPUs for its tasks."""
        req = self.base_req
        strict = list(strict)
        exclude = set(req.exclude) | self.avoid | set(extra_exclude)
        if work.view.cpus_free:
            for name in work.inv.nodes:
                c = work.cpus_free(name)
                if c is not None and c < self.tasks_per_node:
                    exclude.add(name)
        require = dict(req.require)
        prefer = dict(req.prefer)
        for kind in strict:
            require[kind] = self.prefs[kind]
            prefer.pop(kind, None)
        if not strict and exclude == set(req.exclude):
            return req
        return replace(req, require=require, prefer=prefer, exclude=tuple(sorted(exclude)))


def _whole_free(work: Work, name: str, extra: Mapping[str, Set[int]]) -> bool:
    node = work.inv.nodes[name]
    st = work.state()
    ns = st.of(name)
    if not ns.usable:
        return False
    free = set(st.free_gpus(node)) - extra.get(name, set())
    return len(free) == node.hardware.gpu_count


def _frag_key(work: Work, touched: Sequence[str], take: Mapping[str, Set[int]],
              leaf_of: Mapping[str, str], leaf_nodes: Mapping[str, Sequence[str]]):
    """How good the free space is after taking ``take`` (bigger is better)."""
    from slurmtopo.links import LinkClass

    st = work.state()
    keys = []
    whole_nodes = 0
    for name in touched:
        node = work.inv.nodes[name]
        if not st.of(name).usable:
            continue
        free = tuple(g for g in st.free_gpus(node) if g not in take.get(name, ()))
        if len(free) == node.hardware.gpu_count:
            whole_nodes += 1
        hw = node.hardware
        keys.append((_largest(hw, free, LinkClass.NVLINK), _largest(hw, free, LinkClass.PXB),
                     _largest(hw, free, LinkClass.NODE), len(free)))
    leaves = {leaf_of[n] for n in touched if n in leaf_of}
    whole_leaves = sum(1 for lf in leaves
                       if all(_whole_free(work, n, take) for n in leaf_nodes[lf]))
    return (whole_leaves, whole_nodes, sorted(keys, reverse=True))


_largest_cache: Dict[Tuple[int, Tuple[int, ...], int], int] = {}


def _largest(hw, free: Tuple[int, ...], bound) -> int:
    from slurmtopo.placement.intranode import largest_group
    key = (id(hw), free, int(bound))
    v = _largest_cache.get(key)
    if v is None:
        if len(_largest_cache) > 4096:
            _largest_cache.clear()
        v = largest_group(hw, free, bound)
        _largest_cache[key] = v
    return v


def slurm_pick(hw, free: Sequence[int], k: int) -> Tuple[int, ...]:
    """The ``k`` GPUs Slurm's cons_tres most likely gives a job on a node
    with ``free`` GPUs: from the socket (NUMA node) with the most free GPUs
    first (ties: the lower socket), lowest indices first inside a socket.
    That is what 22.05 does when gres.conf binds GPUs to sockets
    (``Cores=``); without a binding every GPU is one socket and it is the
    lowest free indices. A prediction only: the loop compares it with what
    Slurm really gave, and ``slurmtopo bind`` plans on the real GPUs."""
    numa = {g.index: (g.numa_node if g.numa_node is not None else 0) for g in hw.gpus}
    by_socket: Dict[int, List[int]] = {}
    for g in sorted(free):
        by_socket.setdefault(numa.get(g, 0), []).append(g)
    out: List[int] = []
    for _, gs in sorted(by_socket.items(), key=lambda t: (-len(t[1]), t[0])):
        for g in gs:
            if len(out) < k:
                out.append(g)
    return tuple(sorted(out))


def predicted_claim(work: Work, p: Placement, gpn: Optional[int], exclusive: bool
                    ) -> Dict[str, Tuple[int, ...]]:
    """The GPUs the job will hold on each host once Slurm starts it
    (:func:`slurm_pick` of as many GPUs as Slurm allocates there); every
    GPU of the node for an exclusive job."""
    out: Dict[str, Tuple[int, ...]] = {}
    for h in p.hosts:
        planned = p.gpus_on(h)
        node = work.inv.nodes[h]
        if exclusive:
            out[h] = tuple(g.index for g in node.gpus)
            continue
        want = max(gpn or 0, len(planned))
        out[h] = slurm_pick(node.hardware, work.free_gpus(h), want)
    return out


class _Pass:
    """One scheduling pass over the queue."""

    def __init__(self, inv: Inventory, view: ClusterView, now: float, cfg: Config,
                 shared: Optional[Dict[str, object]] = None):
        self.inv = inv
        self.view = view
        self.now = now
        self.cfg = cfg
        self.work = Work(inv, view)
        shared = shared if shared is not None else {}
        if "params" not in shared:
            shared["params"] = _cost_params(inv)
        self.params = shared["params"]
        # the empty cluster: every node Slurm knows idle (drained nodes may
        # come back), nodes unknown to Slurm down
        ideal: Dict[str, NodeState] = {}
        for name in inv.nodes:
            st = view.state.nodes.get(name)
            if st is not None and UNKNOWN_TO_SLURM in st.flags:
                ideal[name] = st
        self.ideal = ClusterState(nodes=ideal, source="empty cluster")
        from slurmtopo.topology import network_view
        nv = network_view(inv.fabric)
        self.leaf_of = dict(nv.leaf)
        self.leaf_nodes: Dict[str, List[str]] = {}
        for h, lf in self.leaf_of.items():
            if h in inv.nodes:
                self.leaf_nodes.setdefault(lf, []).append(h)
        self.reservations_left = cfg.reservations
        #: plans on the empty cluster, shared by both passes of one decide()
        self._ideal_cache: Dict[object, Tuple[Optional[Placement], Optional[str]]] = \
            shared.setdefault("ideal", {})  # type: ignore[assignment]
        self._reserved_for: Set[int] = set()

    # -- helpers -------------------------------------------------------------

    def ideal_plan(self, req) -> Tuple[Optional[Placement], Optional[str]]:
        hit = self._ideal_cache.get(req)
        if hit is None:
            try:
                hit = (_plan(self.inv, self.ideal, req), None)
            except PlacementError as exc:
                hit = (None, exc.render())
            except SlurmtopoError as exc:
                hit = (None, exc.render())
            self._ideal_cache[req] = hit
        return hit

    def cost(self, p: Placement, req) -> Optional[float]:
        return _cost(self.inv, p, req, self.params)

    def expected(self, job: _Job, req, p: Placement
                 ) -> Tuple[Optional[Placement], Dict[str, Tuple[int, ...]]]:
        """What will really run when ``p``'s nodes are pinned: Slurm picks
        the GPUs (:func:`slurm_pick`), ranks are planned onto them with the
        same constraints. (None, pick) when Slurm's likely pick breaks a
        required constraint."""
        pick = predicted_claim(self.work, p, job.gpn, req.exclusive)
        if all(set(p.gpus_on(h)) <= set(pick[h]) for h in p.hosts):
            return p, pick
        nodes = dict(self.work.state().nodes)
        for h in p.hosts:
            node = self.inv.nodes[h]
            keep = set(pick[h])
            nodes[h] = NodeState(h, state="mixed", busy_gpus=frozenset(
                g.index for g in node.gpus if g.index not in keep))
        try:
            q = _plan(self.inv, ClusterState(nodes=nodes),
                      replace(req, nodelist=tuple(p.hosts), exclusive=False))
        except (PlacementError, SlurmtopoError):
            return None, pick
        if set(q.hosts) != set(p.hosts):
            return None, pick
        return q, pick

    def choose(self, job: _Job, req, state: ClusterState
               ) -> Tuple[Placement, Dict[str, Tuple[int, ...]], List[str]]:
        """The best placement of ``req`` on ``state``: the planner's and up
        to ``alternatives - 1`` more on other nodes, each as it will run on
        the GPUs Slurm is expected to pick; best modelled cost, then best
        fit. Returns (placement, GPUs Slurm will allocate, notes); raises
        PlacementError when nothing fits."""
        first = _plan(self.inv, state, req)
        cands = [first]
        exclude = set(req.exclude)
        while len(cands) < max(1, self.cfg.alternatives):
            exclude |= set(cands[-1].hosts)
            try:
                cands.append(_plan(self.inv, state, replace(req, exclude=tuple(sorted(exclude)))))
            except (PlacementError, SlurmtopoError):
                break
        scored = []
        touched = sorted({h for p in cands for h in p.hosts})
        for i, p in enumerate(cands):
            exp, pick = self.expected(job, req, p)
            cost = self.cost(exp, job.q.spec.request) if exp is not None else None
            scored.append((i, p, exp, pick, cost))
        usable = [t for t in scored if t[2] is not None]
        notes: List[str] = []
        if not usable:
            # Slurm's likely GPU pick breaks a requirement everywhere: take the
            # planner's choice; slurmtopo bind re-plans on what Slurm gives
            i, p, _, pick, _ = scored[0]
            notes.append("Slurm will probably not hand out the planned GPUs ("
                         + "; ".join(f"{h}: planned {_fmt(p.gpus_on(h))}, likely "
                                     f"{_fmt(pick[h])}" for h in p.hosts)
                         + "); slurmtopo bind re-plans on the GPUs it gets")
            return p, pick, notes
        known = [t[4] for t in usable if t[4] is not None]
        best = min(known) if known else None
        ranked = []
        for i, p, exp, pick, cost in usable:
            if best is not None and (cost is None or cost > best * (1 + self.cfg.cost_tolerance)):
                continue
            take = {h: set(g) for h, g in pick.items()}
            key = _frag_key(self.work, touched, take, self.leaf_of, self.leaf_nodes)
            ranked.append((key, -i, exp, pick))
        if not ranked:
            i, p, exp, pick, _ = usable[0]
            return exp, pick, notes
        ranked.sort(key=lambda t: (t[0], t[1]), reverse=True)
        _, negi, exp, pick = ranked[0]
        if exp is not cands[-negi]:
            notes.append("GPUs as Slurm is expected to pick them: " + ", ".join(
                f"{h}:{_fmt(pick[h])}" for h in exp.hosts))
        return exp, pick, notes

    def shape_error(self, job: _Job, p: Placement) -> Optional[str]:
        n = job.shape.nodes
        if n is not None and len(p.hosts) != n:
            return (f"the batch script asks for --nodes={n} but the layout needs "
                    f"{len(p.hosts)} node(s) with {job.gpn or 'its'} GPUs each")
        return None

    # -- released jobs -------------------------------------------------------

    def in_flight(self, q: QueuedJob) -> Decision:
        """A job the daemon released that Slurm has not started."""
        rec = q.record
        blocked = []
        for h in rec.hosts:
            node = self.inv.nodes.get(h)
            ns = self.view.state.of(h)
            if node is None or not ns.usable:
                blocked.append(f"{h} is {ns.state}{'+' + ','.join(sorted(ns.flags)) if ns.flags else ''}")
                continue
            slurm_free = set(g.index for g in node.gpus) - set(ns.busy_gpus)
            if ns.exclusive:
                slurm_free = set()
            need = len(rec.claim.get(h, rec.gpus.get(h, ())))
            if rec.exclusive:
                if len(slurm_free) < node.hardware.gpu_count:
                    blocked.append(f"{h} is in use by another job")
            elif len(slurm_free) < need:
                taken = sorted(set(rec.claim.get(h, ())) - slurm_free)
                blocked.append(f"{h} GPUs {_fmt(taken)} were taken by another job")
        age = self.now - float(rec.released_at or self.now)
        if blocked:
            return Decision(q.job_id, REHOLD,
                            reason="released but did not start: " + "; ".join(blocked)
                            + " (it lost a race for its nodes); re-planning")
        if age > self.cfg.release_grace:
            until = self.now + self.cfg.avoid_for
            return Decision(q.job_id, REHOLD,
                            reason=(f"Slurm kept it pending {age:.0f}s after its release "
                                    f"(Reason={q.reason or '?'}) although its GPUs look free; "
                                    f"re-planning without {', '.join(rec.hosts)} for "
                                    f"{_secs(self.cfg.avoid_for)}"),
                            avoid={h: until for h in rec.hosts})
        self.work.claim(rec.claim or rec.gpus, rec.exclusive, rec.cpus)
        return Decision(q.job_id, STARTING, hosts=rec.hosts, gpus=dict(rec.gpus),
                        claim=dict(rec.claim),
                        reason=f"released {age:.0f}s ago on {', '.join(rec.hosts)}; "
                               f"waiting for Slurm to start it (Reason={q.reason or 'none yet'})")

    # -- held jobs -------------------------------------------------------------

    def held(self, q: QueuedJob) -> Decision:
        if q.spec is None:
            return Decision(q.job_id, REJECT, reason=q.error or "no slurmtopo request")
        job = _Job(q, self.inv, self.view, self.now, self.cfg)
        # 1. can it ever run?
        ideal, why = self.ideal_plan(job.ideal_req)
        if ideal is None:
            where = ""
            if job.partition_excluded:
                where = f" (partition {q.partition})"
            return Decision(q.job_id, REJECT,
                            reason=f"can never run on this cluster{where}: {why}")
        err = self.shape_error(job, ideal)
        if err:
            return Decision(q.job_id, REJECT, reason=err)
        # 2. which preferences does it still wait for?
        possible = {}
        notes = list(job.notes)
        for kind, level in job.prefs.items():
            p, _ = self.ideal_plan(replace(job.ideal_req,
                                           require={**job.ideal_req.require, kind: level},
                                           prefer={k: v for k, v in job.ideal_req.prefer.items()
                                                   if k != kind}))
            if p is None:
                notes.append(f"prefer {kind}={level} can never be met here; not waiting for it")
            else:
                possible[kind] = level
        waiting = [k for k in possible if job.age < job.waits.get(k, 0.0)]
        expired = [k for k in possible if k not in waiting]
        state = self.work.state()
        # 3. the preferred placement (every feasible preference required)
        full = job.request(self.work, list(possible))
        preferred_cost = None
        if possible:
            ideal_full, _ = self.ideal_plan(replace(
                job.ideal_req, require={**job.ideal_req.require,
                                        **{k: job.prefs[k] for k in possible}},
                prefer={k: v for k, v in job.ideal_req.prefer.items() if k not in possible}))
            if ideal_full is not None:
                preferred_cost = self.cost(ideal_full, q.spec.request)
        placement: Optional[Placement] = None
        taken: Optional[str] = None
        full_err = ""
        claim: Dict[str, Tuple[int, ...]] = {}
        try:
            placement, claim, more = self.choose(job, full, state)
            notes += more
            taken = "preferred" if possible else "best"
        except (PlacementError, SlurmtopoError) as exc:
            full_err = exc.render()
        if placement is None and expired:
            # 4. the fallback: only preferences still waited for are required
            try:
                placement, claim, more = self.choose(job, job.request(self.work, waiting), state)
                notes += more
                taken = "fallback"
            except (PlacementError, SlurmtopoError) as exc:
                full_err = exc.render()
        if placement is not None:
            err = self.shape_error(job, placement)
            if err:
                placement = None
                full_err = err
        if placement is not None:
            cost = self.cost(placement, q.spec.request)
            gave_up = tuple(f"{k}={possible[k]}" for k in expired) if taken == "fallback" else ()
            if taken == "fallback":
                notes.append(f"waited {_secs(job.age)}; "
                             + ", ".join(f"{k}={possible[k]} (wait {_secs(job.waits.get(k, 0))})"
                                         for k in expired)
                             + " not available: took the best placement meeting its requirements")
            self.work.claim(claim, job.base_req.exclusive, job.tasks_per_node)
            return Decision(q.job_id, RELEASE, hosts=tuple(placement.hosts),
                            gpus=planned_gpus(placement), claim=claim,
                            exclusive=job.base_req.exclusive, cpus=job.tasks_per_node,
                            placement=placement, taken=taken, cost_s=cost,
                            preferred_cost_s=preferred_cost if possible else cost,
                            gave_up=gave_up, notes=tuple(notes + list(placement.notes)))
        # 5. blocked: say why, maybe reserve
        reason = full_err
        wait_left = None
        if waiting:
            wait_left = min(job.waits[k] - job.age for k in waiting)
            reason = (f"waiting up to {_secs(wait_left)} more for its preferred "
                      + ", ".join(f"{k}={possible[k]}" for k in waiting) + f": {full_err}")
            # is a fallback available now? say so
            cur = job.request(self.work, [])
            try:
                _plan(self.inv, state, cur)
                reason += " (a fallback placement is free now)"
            except (PlacementError, SlurmtopoError):
                pass
        if self.work.reserved:
            try:
                _plan(self.inv, self.work.state(with_reserved=False),
                      job.request(self.work, waiting))
                held_for = sorted(self._reserved_for)
                reason = (f"the GPUs it could use are reserved for job "
                          f"{', '.join(map(str, held_for))} (higher priority): {reason}")
            except (PlacementError, SlurmtopoError):
                pass
        reserved: Dict[str, Tuple[int, ...]] = {}
        if self.reservations_left > 0:
            reserved = self.reserve(job, job.request(self.work, waiting))
            if reserved:
                self.reservations_left -= 1
                self._reserved_for.add(q.job_id)
        return Decision(q.job_id, WAIT, reason=reason, waiting_for=tuple(
            f"{k}={possible[k]}" for k in waiting), wait_left=wait_left, reserved=reserved,
            preferred_cost_s=preferred_cost, notes=tuple(notes))

    def reserve(self, job: _Job, req) -> Dict[str, Tuple[int, ...]]:
        """Reserve the GPUs free now of where ``req`` would go once running
        jobs on the least busy nodes end (see the module doc)."""
        work = self.work
        excluded = set(req.exclude)
        order = []
        for i, (name, node) in enumerate(self.inv.nodes.items()):
            if name in excluded:
                continue
            ns = self.view.state.of(name)
            if not ns.usable:
                continue
            busy = len(ns.busy_gpus) if not ns.exclusive else node.hardware.gpu_count
            if busy:
                order.append((busy, i, name))
        order.sort()
        names = [n for _, _, n in order]

        def attempt(k: int) -> Optional[Placement]:
            try:
                return _plan(self.inv, work.state(freed=names[:k]), req)
            except (PlacementError, SlurmtopoError):
                return None

        if not names:
            return {}
        p = attempt(len(names))
        if p is None:
            return {}
        lo, hi = 0, len(names)  # attempt(hi) works
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            q = attempt(mid)
            if q is not None:
                hi, p = mid, q
            else:
                lo = mid
        if hi > 0 and lo == 0:
            q = attempt(0)
            if q is not None:
                p = q
        # on each node of that placement, reserve as many of the GPUs free
        # now as the job will take there: the planned ones first, then the
        # others in index order (the planner chose among GPUs that are busy
        # now, so its exact choice there is only a hint)
        claim = predicted_claim(work, p, job.gpn, req.exclusive)
        out: Dict[str, Tuple[int, ...]] = {}
        for h, gs in claim.items():
            free_now = work.free_gpus(h)
            pick = [g for g in gs if g in free_now]
            pick += [g for g in free_now if g not in pick]
            keep = tuple(sorted(pick[:len(gs)]))
            if keep:
                out[h] = keep
        if out:
            work.reserve(out)
        return out


def job_order(q: QueuedJob) -> Tuple:
    """Slurm's priority (highest first), then submit time, then job id."""
    return (-int(q.priority or 0), float(q.submit_time or 0.0), int(q.job_id))


def difficulty(q: QueuedJob) -> Tuple:
    """Hardest first, for the packing pass: the largest group that must
    stay inside one tight unit, then the job's size."""
    from slurmtopo.groups import build_groups
    from slurmtopo.request import LEVEL_INDEX

    if q.spec is None:
        return (0, 0, 0)
    req = q.spec.request
    tight = 0
    level = len(LEVEL_INDEX)
    try:
        groups = build_groups(req.layout)
    except SlurmtopoError:
        groups = {}
    for kind, lvl in req.require.items():
        if kind in groups and groups[kind]:
            size = len(groups[kind][0])
            if (size, -LEVEL_INDEX[lvl]) > (tight, -level):
                tight, level = size, LEVEL_INDEX[lvl]
    return (tight, -level, req.layout.world)


def _pass(jobs: Sequence[QueuedJob], inv: Inventory, view: ClusterView, now: float,
          cfg: Config, pack: bool, shared: Dict[str, object]) -> List[Decision]:
    p = _Pass(inv, view, now, cfg, shared)
    out: List[Decision] = []
    held: List[QueuedJob] = []
    # released jobs first: their GPUs are claimed before anything is planned
    for q in sorted(jobs, key=job_order):
        rec = q.record
        phase = rec.phase if rec is not None else None
        if q.state != "PENDING":
            if phase in ("released", "running", "releasing") and q.state in ACTIVE:
                out.append(Decision(q.job_id, RUNNING, hosts=tuple(q.nodes),
                                    gpus={h: tuple(g) for h, g in q.gpus.items()},
                                    reason=f"{q.state.lower()} on {', '.join(q.nodes) or '?'}"))
            continue
        if q.held:
            if phase in ("released", "running", "outside"):
                out.append(Decision(q.job_id, OUTSIDE,
                                    reason="held by someone else after the daemon released it; "
                                           "the daemon leaves it alone (release it yourself)"))
                continue
            held.append(q)
            continue
        # pending, not held
        if phase in ("released", "running"):
            d = p.in_flight(q)
            out.append(d)
            if d.action == REHOLD:
                rec2 = replace(rec, avoid={**rec.avoid, **d.avoid}, phase="waiting")
                held.append(replace(q, held=True, record=rec2))
            continue
        out.append(Decision(q.job_id, OUTSIDE,
                            reason="released outside the daemon; Slurm schedules it"))
    order = sorted(held, key=job_order)
    if pack:
        order = sorted(order, key=lambda q: tuple(-x for x in difficulty(q)))
    decided: Dict[int, Decision] = {}
    for q in order:
        decided[q.job_id] = p.held(q)
    for q in sorted(held, key=job_order):
        out.append(decided[q.job_id])
    return out


#: job states in which a job holds (or is about to hold) its allocation
ACTIVE = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STAGE_OUT",
                    "SIGNALING", "RESIZING"})


def decide(jobs: Sequence[QueuedJob], inv: Inventory, view: ClusterView, now: float,
           config: Optional[Config] = None) -> List[Decision]:
    """One decision per job (a re-held job gets two: ``rehold``, then
    ``release`` or ``wait``), in the order the loop must act on them.

    Two passes: in priority order, then, when that leaves jobs blocked, in
    packing order (hardest first). The packing result is used only when it
    releases every job the priority pass released and more besides: the
    order of release within one pass does not change who runs first, so
    packing only ever adds jobs (two jobs that would each fragment the
    other both run)."""
    cfg = config or Config()
    shared: Dict[str, object] = {}
    first = _pass(jobs, inv, view, now, cfg, pack=False, shared=shared)
    released = {d.job_id for d in first if d.action == RELEASE}
    blocked = [d for d in first if d.action == WAIT]
    if not blocked or not released:
        return first
    second = _pass(jobs, inv, view, now, cfg, pack=True, shared=shared)
    released2 = {d.job_id for d in second if d.action == RELEASE}
    if released <= released2 and len(released2) > len(released):
        for d in second:
            if d.action == RELEASE and d.job_id not in released:
                d.notes = d.notes + ("released by the packing pass (hardest jobs placed first "
                                     "so that more jobs fit)",)
        return second
    return first


# --------------------------------------------------------------------------
# for the submit-time preview


def preview_lines(inv: Inventory, state: Optional[ClusterState], req,
                  default_wait: float = 0.0) -> List[str]:
    """What the daemon would do with ``req`` now, for ``slurmtopo sbatch
    --daemon``'s preview: which preferences it waits for, for how long,
    and the modelled cost of the preferred and of the fallback placement."""
    from slurmtopo.daemon.protocol import DaemonSpec, Shape

    q = QueuedJob(job_id=0, spec=DaemonSpec(request=req, shape=Shape()), submit_time=0.0)
    view = ClusterView(state=state or ClusterState())
    cfg = Config(default_wait=default_wait, reservations=0)
    d = decide([q], inv, view, now=0.0, config=cfg)[-1]
    lines = []
    job = _Job(q, inv, view, 0.0, cfg)
    for kind, level in job.prefs.items():
        w = job.waits.get(kind, 0.0)
        lines.append(f"prefers {kind}={level}: waits up to {_secs(w)} for it, then takes the "
                     "best placement meeting its requirements" if w else
                     f"prefers {kind}={level}: no wait (takes the best placement free)")
    if d.action == RELEASE:
        lines.append("the daemon would release it now: " + d.summary())
    elif d.action == WAIT:
        lines.append("the daemon would keep it held: " + d.reason)
        if d.preferred_cost_s is not None:
            lines.append(f"preferred placement: modelled step {format_time(d.preferred_cost_s)}")
    else:
        lines.append(f"the daemon would {d.action} it: {d.reason}")
    return lines + [f"note: {n}" for n in d.notes if "ranks on" not in n]
