"""A held job as one scheduling pass sees it: its request with the nodes it
may not use (outside its partitions, tried before), its preferences and
how long it still waits for each, and what its launcher requires of a
placement."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterable, List, Optional, Set

from slurmtopo.daemon.decisions import ClusterView, Config, QueuedJob
from slurmtopo.daemon.work import Work
from slurmtopo.inventory.model import Inventory
from slurmtopo.job.request import IMPLICIT_PREFER
from slurmtopo.plan import launchers

if TYPE_CHECKING:
    from slurmtopo.plan.choice import Admit


def nodes_outside(inv: Inventory, view: ClusterView, partitions: str) -> FrozenSet[str]:
    """The inventory's nodes outside every partition of ``partitions`` (a
    comma-separated list) that the view knows; none when it knows none."""
    allowed: Set[str] = set()
    known = False
    for part in partitions.split(","):
        if part in view.partitions:
            known = True
            allowed |= set(view.partitions[part])
    return frozenset(n for n in inv.nodes if n not in allowed) if known else frozenset()


class HeldJob:
    """Per-job derived values for one pass."""

    def __init__(self, q: QueuedJob, inv: Inventory, view: ClusterView, now: float,
                 cfg: Config, outside: Optional[Dict[str, FrozenSet[str]]] = None):
        """``outside``: partition list -> nodes outside it, shared by the
        jobs of a pass (one pass over the inventory per partition list,
        not per job)."""
        self.q = q
        spec = q.spec
        self.spec = spec
        req = spec.request
        #: what the job's launcher requires of a placement (torchrun:
        #: node-contiguous ranks), weighed in every plan made for the job as
        #: ``choice.cheapest`` weighs it at submission; the launcher's name
        #: was checked when the request was read (protocol.spec_from_dict)
        self.admit: "Admit" = launchers.get(spec.launcher, "the job's launcher").requirement
        self.shape = spec.shape
        gpn = self.shape.gpus_per_node or req.gpus_per_node
        exclude = set(req.exclude)
        # nodes outside the job's partition(s)
        if view.partitions and q.partition:
            cache = outside if outside is not None else {}
            if q.partition not in cache:
                cache[q.partition] = nodes_outside(inv, view, q.partition)
            exclude |= cache[q.partition]
        self.partition_excluded = frozenset(exclude) - set(req.exclude)
        #: the job's partitions the cluster view knows (for the free counts)
        self.partitions = tuple(p for p in (q.partition or "").split(",")
                                if p and p in view.partitions)
        self.world = req.layout.world
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
            exclude |= work.low_cpus(self.tasks_per_node)
        require = dict(req.require)
        prefer = dict(req.prefer)
        for kind in strict:
            require[kind] = self.prefs[kind]
            prefer.pop(kind, None)
        if not strict and exclude == set(req.exclude):
            return req
        return replace(req, require=require, prefer=prefer, exclude=tuple(sorted(exclude)))
