"""The placement policies a trace is replayed with; each calls the code it
names, never a copy of it.

``slurm[:topology=tree|flat|block,segment=S]``
    Slurm's own choice of nodes and GPUs
    (:func:`slurmtopo.placement.baselines.slurm_from`, the model of
    select/cons_tres in :mod:`slurmtopo.placement.slurm_select`), over the
    inventory's blocks as topology/block does (``block``, the default when
    the inventory has blocks), every job of a multiple of ``S`` nodes
    asking ``--segment=S``; with its switch tree as topology/tree uses it
    for every job (``tree``, the default otherwise when it has one), or
    without (``flat``: no topology plugin, or ``TopologyParam=TopoOptional``).
``slurm-switches:wait=T``
    The same over the tree, asked for ``--switches=1@T``: a job whose
    choice spans several leaves waits, until T after its submission.
``slurmtopo[:topology=block|tree]``
    The planner (:func:`slurmtopo.plan.choice.plan`) on what is free when Slurm
    starts the job (``tree``; on an inventory without blocks). With
    ``topology=block`` (the default when the inventory has blocks: a
    cluster running topology/block), as ``slurmtopo sbatch`` runs there: the job asks the
    ``--segment`` its plan on the idle cluster calls for
    (:func:`slurmtopo.placement.segments.choose_segments`), Slurm's block
    choice picks its nodes when it can (``slurm:topology=block``'s), and the
    planner maps its ranks onto them (``slurmtopo bind``).
``daemon:wait=T[,level=leaf,reservations=1,max_releases=100,interval=10,pack=domains]``
    The placement daemon's decisions
    (:func:`slurmtopo.daemon.scheduler.decide`) every ``interval`` seconds
    of the simulated clock: each job held; a multi-node job submitted as
    with ``--prefer dp=LEVEL,tp=node --wait dp=T,tp=T`` (its nodes under one
    ``level``, as ``--switches=1@T`` asks Slurm, tensor parallel inside a
    node), waiting up to ``T`` seconds for it; the daemon's reservations,
    release limit and rack packing (``--pack domains``) as configured.
``random``
    A random feasible placement (:func:`slurmtopo.placement.baselines.random_plan`,
    seeded by ``--seed`` and the job), for scale.

The first four, and ``random``, start jobs in the same queue order
(:mod:`slurmtopo.simulate.engine`): they differ in where a job goes, and
``slurm-switches`` and ``daemon`` in how long it may wait for a better
place. Times are seconds, or with a unit: ``90s``, ``10m``, ``2h``, ``1d``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Dict, Mapping, Optional, Tuple

from slurmtopo.daemon.decisions import ClusterView, Config, QueuedJob
from slurmtopo.daemon.packing import PACK_MODES
from slurmtopo.daemon.protocol import DaemonSpec, Shape
from slurmtopo.daemon.scheduler import decide
from slurmtopo.errors import LayoutError, PlacementError, SlurmtopoError
from slurmtopo.inventory.model import ClusterState, Inventory, Placement
from slurmtopo.job.request import normalise_level
from slurmtopo.placement.baselines import random_plan, slurm_from
from slurmtopo.placement.common import candidates
from slurmtopo.placement.segments import block_layout, choose_segments, nvlink_kinds
from slurmtopo.placement.slurm_select import TOPOLOGIES, leaves_used, slurm_pick
from slurmtopo.plan.choice import plan

SLURM = "slurm"
SWITCHES = "slurm-switches"
SLURMTOPO = "slurmtopo"
DAEMON = "daemon"
RANDOM = "random"
NAMES = (SLURM, SWITCHES, SLURMTOPO, DAEMON, RANDOM)
#: what ``--policy`` defaults to
DEFAULT_POLICIES = ("slurm", "slurm-switches:wait=600", "slurmtopo", "daemon:wait=600")

#: option -> (kind, default) per policy; kinds: time, int, level, topology
OPTIONS: Dict[str, Dict[str, Tuple[str, object]]] = {
    SLURM: {"topology": ("topology", None), "segment": ("int", 0)},
    SWITCHES: {"wait": ("time", 600.0)},
    SLURMTOPO: {"topology": ("topology", None)},
    DAEMON: {"wait": ("time", 600.0), "level": ("level", "leaf"),
             "reservations": ("int", 1), "max_releases": ("int", 100),
             "interval": ("time", 10.0), "pack": ("pack", "")},
    RANDOM: {},
}
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
#: longest wait or interval accepted (a year)
MAX_TIME = 365 * 86400.0


def parse_time(text: str, what: str) -> float:
    """``600``, ``90s``, ``10m``, ``2h``, ``1d`` -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?\s*", text)
    if not m:
        raise SlurmtopoError(f"{what}: {text!r} is not a time (600, 90s, 10m, 2h or 1d)")
    value = float(m.group(1)) * _UNITS[m.group(2) or ""]
    if value > MAX_TIME:
        raise SlurmtopoError(f"{what}: {text!r} is more than a year")
    return value


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class PolicySpec:
    """One ``--policy`` value, validated: its name and options."""

    name: str
    options: Mapping[str, object] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The canonical spelling: ``daemon:wait=600`` (options as given)."""
        opts = ",".join(f"{k}={_fmt(v)}" for k, v in self.options.items())
        return f"{self.name}:{opts}" if opts else self.name

    def get(self, key: str):
        if key in self.options:
            return self.options[key]
        return OPTIONS[self.name][key][1]


def parse_policy(text: str) -> PolicySpec:
    """``NAME[:key=value,...]`` (see the module doc)."""
    name, _, rest = text.strip().partition(":")
    name = name.strip().lower()
    if name not in NAMES:
        raise SlurmtopoError(f"--policy {text!r}: unknown policy {name!r} (known: "
                             f"{', '.join(NAMES)})")
    known = OPTIONS[name]
    opts: Dict[str, object] = {}
    for part in [p for p in rest.split(",") if p.strip()] if rest else []:
        key, eq, value = part.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not eq or not value.strip():
            raise SlurmtopoError(f"--policy {text!r}: {part.strip()!r} is not key=value")
        if key not in known:
            raise SlurmtopoError(f"--policy {text!r}: {name} has no option {key!r}"
                                 + (f" (options: {', '.join(known)})" if known else
                                    " (it takes none)"))
        if key in opts:
            raise SlurmtopoError(f"--policy {text!r}: {key} given twice")
        kind = known[key][0]
        what = f"--policy {name} {key}"
        value = value.strip()
        if kind == "time":
            opts[key] = parse_time(value, what)
            if key == "interval" and opts[key] <= 0:
                raise SlurmtopoError(f"{what}: must be more than 0")
        elif kind == "int":
            if not value.isdigit() or int(value) > 1_000_000:
                raise SlurmtopoError(f"{what}: {value!r} is not a whole number >= 0")
            opts[key] = int(value)
        elif kind == "pack":
            if value not in PACK_MODES or not value:
                raise SlurmtopoError(f"{what}: {value!r} (known: "
                                     f"{', '.join(m for m in PACK_MODES if m)})")
            opts[key] = value
        elif kind == "level":
            try:
                opts[key] = normalise_level(value)
            except LayoutError as exc:
                raise SlurmtopoError(f"{what}: {exc.message}") from None
        else:
            if value not in TOPOLOGIES:
                raise SlurmtopoError(f"{what}: {value!r} (known: {', '.join(TOPOLOGIES)})")
            opts[key] = value
    return PolicySpec(name, opts)


# --------------------------------------------------------------------------
# the policies Slurm's queue starts jobs for


@dataclass
class Start:
    """Where a job starts: the GPUs it holds on each node (Slurm allocates
    ``--gpus-per-node`` on every node, the remainder node included), its
    ranks, and, for ``slurm-switches``, the time before which it may not
    start there (it waits for one leaf until then)."""

    alloc: Dict[str, Tuple[int, ...]]
    placement: Placement
    hold_until: Optional[float] = None


def allocation(inv: Inventory, state: ClusterState, placement: Placement,
               gpus_per_node: Optional[int]) -> Dict[str, Tuple[int, ...]]:
    """The GPUs Slurm allocates on each node of ``placement``: the ones its
    ranks use, and up to ``gpus_per_node`` on each node the ones Slurm
    picks among the other free GPUs (:func:`~slurmtopo.placement.slurm_select.slurm_pick`)."""
    out: Dict[str, Tuple[int, ...]] = {}
    for h in placement.hosts:
        used = set(placement.gpus_on(h))
        want = max(gpus_per_node or 0, len(used))
        if len(used) < want:
            node = inv.nodes[h]
            others = [g for g in state.free_gpus(node) if g not in used]
            used |= set(slurm_pick(node.hardware, others, want - len(used)))
        out[h] = tuple(sorted(used))
    return out


class QueuePolicy:
    """A policy whose jobs Slurm's queue starts; :meth:`place` says where."""

    def __init__(self, spec: PolicySpec, inv: Inventory, seed: int = 0):
        self.spec = spec
        self.inv = inv
        self.seed = seed
        self.topology = spec.get("topology") if spec.name in (SLURM, SLURMTOPO) else None
        if self.topology is None and spec.name in (SLURM, SLURMTOPO) and inv.fabric.blocks:
            self.topology = "block"  # a cluster with blocks runs topology/block
        self.block = self.topology == "block"
        if spec.name == SWITCHES:
            self.topology = "tree"
        elif self.topology is None or (spec.name == SLURMTOPO and not self.block):
            self.topology = "tree" if inv.fabric.switches else "flat"
        self._segments: Dict[object, Optional[int]] = {}
        self.switch_wait = spec.get("wait") if spec.name == SWITCHES else None
        self.segment = int(spec.get("segment")) if spec.name == SLURM else 0
        if self.topology == "block" and not inv.fabric.blocks:
            raise SlurmtopoError(f"--policy {spec.label}: the inventory has no blocks "
                                 "(fabric: blocks:) for topology/block")

    @property
    def label(self) -> str:
        return self.spec.label

    def segment_of(self, job) -> Optional[int]:
        """The ``--segment`` ``slurmtopo sbatch`` asks for this job: from its
        plan on the idle cluster (None: none)."""
        req = job.request
        if req not in self._segments:
            seg = None
            layout = block_layout(self.inv.fabric)
            if layout is not None and job.shape.nodes > 1:
                idle = plan(self.inv, None, req)
                host_of = [sl.host for sl in idle.slots]
                choice = choose_segments(layout, list(idle.hosts), idle.groups, host_of,
                                         nvlink_kinds(req.require, req.prefer))
                seg = choice.segment or None
            self._segments[req] = seg
        return self._segments[req]

    def _on_blocks(self, state: ClusterState, job, cand) -> Placement:
        """Slurm's block choice for the job's segments, ranks planned on it."""
        req = job.request
        if cand is None:
            cand = candidates(self.inv, state, req)
        nodes = slurm_from(self.inv, req, cand, "block", segment=self.segment_of(job))
        return plan(self.inv, state, replace(req, nodelist=tuple(sorted(nodes.hosts))))

    def place(self, state: ClusterState, job, now: float, cand=None) -> Optional[Start]:
        """Where ``job`` (a :class:`~slurmtopo.simulate.engine.JobSpec`) goes
        on ``state`` now, or None when it does not fit. ``cand``: the
        candidate nodes of its request on ``state``, when the caller keeps
        them (None: computed here)."""
        inv, req = self.inv, job.request
        try:
            if self.spec.name in (SLURM, SWITCHES):
                if cand is None:
                    cand = candidates(inv, state, req)
                n = job.shape.nodes
                seg = self.segment if self.segment and n > self.segment and \
                    n % self.segment == 0 else None
                pl = slurm_from(inv, req, cand, self.topology, segment=seg)
            elif self.spec.name == SLURMTOPO:
                if self.block:
                    pl = self._on_blocks(state, job, cand)
                else:
                    pl = plan(inv, state, req, cand=cand)
            else:
                pl = random_plan(inv, state, req, seed=self.seed * 1_000_003 + job.index)
        except PlacementError:
            return None
        start = Start(allocation(inv, state, pl, req.gpus_per_node), pl)
        if self.switch_wait is not None and len(pl.hosts) > 1:
            if leaves_used(inv, pl.hosts) > 1 and now < job.submit + self.switch_wait:
                start.hold_until = job.submit + self.switch_wait
        return start


# --------------------------------------------------------------------------
# the placement daemon


class DaemonPolicy:
    """The placement daemon, its decisions driven by the simulated clock."""

    def __init__(self, spec: PolicySpec, inv: Inventory):
        self.spec = spec
        self.inv = inv
        self.wait = float(spec.get("wait"))
        self.level = str(spec.get("level"))
        self.interval = float(spec.get("interval"))
        self.config = replace(Config(), reservations=int(spec.get("reservations")),
                              max_releases=int(spec.get("max_releases")),
                              pack=str(spec.get("pack")))
        #: what the daemon keeps between cycles (plans on the empty cluster)
        self.memo: Dict[str, object] = {}
        self._queued: Dict[int, object] = {}
        self._requests: Dict[object, object] = {}

    @property
    def label(self) -> str:
        return self.spec.label

    def request(self, job):
        """The job's request as the daemon gets it: multi-node jobs prefer
        their DP groups in one ``level``, and every preference (tensor
        parallel on NVLink too) is waited for up to ``wait`` seconds."""
        hit = self._requests.get(job.request)
        if hit is None:
            hit = self._requests[job.request] = self._request(job)
        return hit

    def _request(self, job):
        req = job.request
        if job.shape.nodes <= 1 or req.layout.dp <= 1:
            return req
        # the job's nodes under one `level`, as --switches=1 asks Slurm: DP
        # groups inside it with tensor parallel kept inside a node (without
        # tp=node the planner may instead nest DP innermost and spread TP)
        prefer = {"dp": self.level}
        if req.layout.tp > 1:
            prefer["tp"] = "node"
        return replace(req, prefer=prefer, wait={k: self.wait for k in prefer})

    def wait_of(self, job) -> float:
        """How long ``job`` waits for a preference (0: it has none)."""
        return max(self.request(job).wait.values(), default=0.0)

    def queued(self, job):
        """The daemon's view of a held job (made once per job)."""
        hit = self._queued.get(job.index)
        if hit is None:
            shape = job.shape
            spec = DaemonSpec(request=self.request(job),
                              shape=Shape(nodes=shape.nodes, gpus_per_node=shape.gpus_per_node,
                                          tasks_per_node=shape.gpus_per_node),
                              source="simulation")
            hit = self._queued[job.index] = QueuedJob(job_id=job.index + 1, spec=spec,
                                                      submit_time=job.submit,
                                                      name=job.trace.job_id)
        return hit

    def forget(self, job) -> None:
        self._queued.pop(job.index, None)

    def decide(self, jobs, state: ClusterState, now: float):
        """One daemon cycle over the held ``jobs``: its decisions."""
        return decide([self.queued(j) for j in jobs], self.inv, ClusterView(state=state), now,
                      self.config, self.memo)


def make_policy(spec: PolicySpec, inv: Inventory, seed: int = 0):
    """The policy object for ``spec``."""
    if spec.name == DAEMON:
        return DaemonPolicy(spec, inv)
    return QueuePolicy(spec, inv, seed)
