"""The daemon's working state (Slurm's busy GPUs plus what it claimed and
reserved) and how good the free space left in it is (fragmentation), and
which GPUs Slurm will most likely give a released job."""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from slurmtopo.daemon.candidates import Filter, filter_of, refreshed, without
from slurmtopo.daemon.decisions import ClusterView
from slurmtopo.inventory.links import LinkClass
from slurmtopo.placement.common import Candidates, candidates
from slurmtopo.placement.slurm_select import slurm_pick
from slurmtopo.inventory.model import (ClusterState, Inventory, Node, NodeState, Placement,
                                       free_gpus_of)
from slurmtopo.placement.fabric import fabric_tree
from slurmtopo.placement.intranode import largest_group


# --------------------------------------------------------------------------
# the working state: Slurm's view plus claims (released jobs) and reservations


class Work:
    """Mutable free/busy view: Slurm's busy GPUs, plus GPUs claimed by jobs
    the daemon released that Slurm has not started yet, plus reservations.

    Kept incrementally, because one pass claims GPUs hundreds of times on a
    cluster of thousands of nodes: a claim rewrites only the nodes it
    touches (the planning state and the free-GPU counts below), never the
    whole cluster. The counts (how many usable nodes have f free GPUs, per
    partition) answer "can this job fit at all?" without planning
    (:meth:`shortfall`)."""

    def __init__(self, inv: Inventory, view: ClusterView):
        self.inv = inv
        self.base = view.state
        self.view = view
        self.claimed: Dict[str, Set[int]] = {}
        self.claimed_whole: Set[str] = set()
        self.reserved: Dict[str, Set[int]] = {}
        self.cpus_claimed: Dict[str, int] = {}
        #: the planning state (claims and reservations applied), node by node
        self._nodes: Dict[str, NodeState] = dict(view.state.nodes)
        self._cache: Optional[ClusterState] = None
        #: (hardware, free GPUs, link bound) -> largest group: one pass asks
        #: the same few shapes over and over; kept with the pass, not the process
        self._largest: Dict[Tuple[object, Tuple[int, ...], int], int] = {}
        #: node -> partitions ("*": every node), and per key the number of
        #: usable nodes by free GPU count, with and without reservations
        self._parts: Dict[str, Tuple[str, ...]] = {}
        for part, members in view.partitions.items():
            for n in members:
                self._parts[n] = self._parts.get(n, ()) + (part,)
        self._free_n: Dict[bool, Dict[str, int]] = {True: {}, False: {}}
        self._hist: Dict[bool, Dict[str, Dict[int, int]]] = {True: {}, False: {}}
        #: per node what a plan can see of it (:meth:`_seen`), and the XOR
        #: of their hashes: equal digests, equal planning states
        self._seen_of: Dict[bool, Dict[str, int]] = {True: {}, False: {}}
        self._digest: Dict[bool, int] = {True: 0, False: 0}
        for name, node in inv.nodes.items():
            free = self._free_of(name, node, True)
            h = self._seen(name, free, self._nodes.get(name))
            for res in (True, False):
                self._free_n[res][name] = len(free)
                self._count(res, name, len(free), 1)
                self._seen_of[res][name] = h
                self._digest[res] ^= h
        #: tasks per node -> nodes without that many free CPUs
        self._low_cpus: Dict[int, Set[str]] = {}
        #: the planner's candidates per filter, kept up to date by claims
        self._cands: Dict[Filter, Candidates] = {}
        self._index: Optional[Dict[str, int]] = None
        self._order: Optional[List[Node]] = None

    # -- the free-GPU counts ---------------------------------------------------

    def _count(self, res: bool, name: str, f: int, delta: int) -> None:
        for key in ("*",) + self._parts.get(name, ()):
            h = self._hist[res].setdefault(key, {})
            h[f] = h.get(f, 0) + delta

    @staticmethod
    def _seen(name: str, free: Tuple[int, ...], st: Optional[NodeState]) -> int:
        """A node as the planner sees it: its free GPUs, and whether Slurm
        calls it in use (an exclusive job cannot have it)."""
        return hash((name, free, st is not None and st.state in ("allocated", "mixed")))

    def digest(self, with_reserved: bool = True) -> int:
        """A fingerprint of the planning state (:meth:`state`): two states
        with the same digest give the planner the same free GPUs (up to a
        64-bit hash collision)."""
        return self._digest[with_reserved]

    def _recount(self, name: str, res: bool) -> None:
        node = self.inv.nodes.get(name)
        if node is None:
            return
        free = self._free_of(name, node, res)
        st = self._nodes.get(name) if res else self._node_state(name, False, False)
        h = self._seen(name, free, st)
        self._digest[res] ^= self._seen_of[res].get(name, 0) ^ h
        self._seen_of[res][name] = h
        f = len(free)
        old = self._free_n[res].get(name)
        if old == f:
            return
        if old is not None:
            self._count(res, name, old, -1)
        self._free_n[res][name] = f
        self._count(res, name, f, 1)

    def shortfall(self, world: int, gpus_per_node: Optional[int],
                  partitions: Optional[Sequence[str]] = None,
                  with_reserved: bool = True) -> Optional[str]:
        """Why a job of ``world`` GPUs (``gpus_per_node`` on each of its
        nodes) cannot fit now by counts alone, before any planning; None
        when the counts allow it (the planner then decides). Only a
        necessary condition is checked, so a job it turns away could never
        have been placed: nodes with fewer free GPUs than the job takes per
        node are no use to it, and the rest must hold its nodes and GPUs.
        ``partitions``: count only their nodes (None: every node)."""
        t = min(gpus_per_node, world) if gpus_per_node else 1
        keys = [p for p in (partitions or ()) if p in self._hist[with_reserved]] or ["*"]
        nodes = gpus = 0
        for key in keys:
            for f, c in self._hist[with_reserved][key].items():
                if f >= t and c:
                    nodes += c
                    gpus += f * c
        if gpus_per_node and world > gpus_per_node:
            need = -(-world // gpus_per_node)
            if nodes < need:
                return (f"needs {need} nodes with {gpus_per_node} free GPUs each "
                        f"(--gpus-per-node {gpus_per_node}); only {nodes} usable nodes have "
                        f"{gpus_per_node} free")
        if gpus < world:
            where = f" on nodes with at least {t} free" if t > 1 else ""
            return f"needs {world} GPUs; only {gpus} are free{where}"
        return None

    def histogram(self, with_reserved: bool = True) -> Dict[int, int]:
        """Free GPUs -> how many usable nodes have that many, now."""
        return {f: c for f, c in self._hist[with_reserved].get("*", {}).items() if c}

    # -- the planning state ----------------------------------------------------

    def largest_group(self, hw, free: Tuple[int, ...], bound) -> int:
        """:func:`slurmtopo.placement.intranode.largest_group`, remembered
        for this pass."""
        key = (hw, free, int(bound))
        v = self._largest.get(key)
        if v is None:
            v = self._largest[key] = largest_group(hw, free, bound)
        return v

    def _node_state(self, name: str, freed: bool = False, with_reserved: bool = True
                    ) -> NodeState:
        """``name`` as Slurm sees it plus the claims (and reservations)."""
        st = self.base.of(name)
        busy = set() if freed else set(st.busy_gpus)
        excl = False if freed else st.exclusive
        state = st.state
        if freed and state in ("allocated", "mixed", "completing"):
            state = "idle"
        busy |= self.claimed.get(name, set())
        if with_reserved:
            busy |= self.reserved.get(name, set())
        if name in self.claimed_whole:
            excl = True
        if busy and state == "idle" and name in self.inv.nodes:
            state = "mixed"
        return NodeState(name=name, state=state, busy_gpus=frozenset(busy), flags=st.flags,
                         exclusive=excl)

    def _free_of(self, name: str, node, with_reserved: bool) -> Tuple[int, ...]:
        st = self._nodes.get(name) if with_reserved else self._node_state(name, False, False)
        return free_gpus_of(node, st)

    def state(self, freed: Iterable[str] = (), with_reserved: bool = True) -> ClusterState:
        """The ClusterState to plan on; ``freed`` nodes lose their Slurm
        busy GPUs (for reservations: "once the jobs there end")."""
        freed = set(freed)
        if not freed and with_reserved:
            if self._cache is None:
                self._cache = ClusterState(nodes=dict(self._nodes), source=self.base.source)
            return self._cache
        out = dict(self._nodes)  # claims and reservations applied
        touched = freed | (set(self.reserved) if not with_reserved else set())
        for name in touched:
            out[name] = self._node_state(name, name in freed, with_reserved)
        return ClusterState(nodes=out, source=self.base.source)

    def free_gpus(self, name: str, with_reserved: bool = True) -> Tuple[int, ...]:
        return self._free_of(name, self.inv.nodes[name], with_reserved)

    def cpus_free(self, name: str) -> Optional[int]:
        c = self.view.cpus_free.get(name)
        if c is None:
            return None
        return c - self.cpus_claimed.get(name, 0)

    def low_cpus(self, tasks: int) -> Set[str]:
        """Nodes with fewer than ``tasks`` free CPUs (kept up to date by
        :meth:`claim`)."""
        hit = self._low_cpus.get(tasks)
        if hit is None:
            hit = self._low_cpus[tasks] = set()
            for name in self.view.cpus_free:
                c = self.cpus_free(name)
                if c is not None and c < tasks and name in self.inv.nodes:
                    hit.add(name)
        return hit

    def candidates(self, req) -> Candidates:
        """:func:`~slurmtopo.placement.common.candidates` of ``req`` on
        :meth:`state`, ignoring its ``--nodelist`` and ``--exclude`` (see
        :func:`candidates_for`): computed once per filter, then kept up to
        date node by node (:mod:`slurmtopo.daemon.candidates`)."""
        flt = filter_of(req)
        hit = self._cands.get(flt)
        if hit is None:
            bare = replace(req, nodelist=None, exclude=())
            hit = self._cands[flt] = candidates(self.inv, self.state(), bare,
                                                fabric_tree(self.inv).node_pod)
        return hit

    def candidates_for(self, req) -> Candidates:
        """:meth:`candidates` less ``req``'s excluded nodes; None semantics
        of ``--nodelist`` are not kept (callers with a node list plan the
        usual way)."""
        cand = self.candidates(req)
        if req.exclude:
            index = self.index()
            cand = without(cand, (index[n] for n in req.exclude if n in index),
                           fabric_tree(self.inv).node_pod)
        return cand

    def candidates_freed(self, req, freed: Sequence[str], state: ClusterState
                         ) -> Optional[Candidates]:
        """:meth:`candidates_for` ``req`` on ``state``, which is
        :meth:`state` with the ``freed`` nodes' Slurm jobs gone (see
        :meth:`state`); None for a request with a node list. Rewrites only
        the freed nodes' entries (the reservation search asks this a dozen
        times a pass)."""
        if req.nodelist is not None:
            return None
        index = self.index()
        skip = set(req.exclude)
        at = {index[n]: n for n in freed if n in index and n not in skip}
        return refreshed(self.candidates_for(req), at, self.order(),
                         lambda i: self._nodes.get(at[i]), lambda i: state.nodes.get(at[i]),
                         filter_of(req), fabric_tree(self.inv).node_pod)

    def order(self) -> List[Node]:
        """The inventory's nodes by inventory index."""
        if self._order is None:
            self._order = list(self.inv.nodes.values())
        return self._order

    def index(self) -> Dict[str, int]:
        """Node name -> inventory index."""
        if self._index is None:
            self._index = {name: i for i, name in enumerate(self.inv.nodes)}
        return self._index

    def _touch(self, names: Iterable[str], reserved_only: bool = False) -> None:
        names = [n for n in names]
        before = {n: self._nodes.get(n) for n in names}
        for name in names:
            self._nodes[name] = self._node_state(name)
            self._recount(name, True)
            if not reserved_only:
                self._recount(name, False)
        self._cache = None
        if self._cands:
            index = self.index()
            order = self.order()
            name_at = {index[n]: n for n in names if n in index}
            node_pod = fabric_tree(self.inv).node_pod
            for flt, cand in list(self._cands.items()):
                self._cands[flt] = refreshed(
                    cand, name_at, order, lambda i: before[name_at[i]],
                    lambda i: self._nodes.get(name_at[i]), flt, node_pod)

    def claim(self, gpus: Mapping[str, Iterable[int]], exclusive: bool = False,
              cpus: int = 0) -> None:
        for h, gs in gpus.items():
            self.claimed.setdefault(h, set()).update(gs)
            if exclusive:
                self.claimed_whole.add(h)
            if cpus:
                self.cpus_claimed[h] = self.cpus_claimed.get(h, 0) + cpus
                c = self.cpus_free(h)
                for tasks, low in self._low_cpus.items():
                    if c is not None and c < tasks and h in self.inv.nodes:
                        low.add(h)
        self._touch(gpus)

    def reserve(self, gpus: Mapping[str, Iterable[int]]) -> None:
        for h, gs in gpus.items():
            self.reserved.setdefault(h, set()).update(gs)
        self._touch(gpus, reserved_only=True)


def _whole_free(work: Work, name: str, extra: Mapping[str, Set[int]]) -> bool:
    node = work.inv.nodes[name]
    st = work.state()
    ns = st.of(name)
    if not ns.usable:
        return False
    free = set(st.free_gpus(node)) - extra.get(name, set())
    return len(free) == node.hardware.gpu_count


def free_space_key(work: Work, touched: Sequence[str], take: Mapping[str, Set[int]],
              leaf_of: Mapping[str, str], leaf_nodes: Mapping[str, Sequence[str]]):
    """How good the free space is after taking ``take`` (bigger is better)."""
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
        keys.append((work.largest_group(hw, free, LinkClass.NVLINK),
                     work.largest_group(hw, free, LinkClass.PXB),
                     work.largest_group(hw, free, LinkClass.NODE), len(free)))
    leaves = {leaf_of[n] for n in touched if n in leaf_of}
    whole_leaves = sum(1 for lf in leaves
                       if all(_whole_free(work, n, take) for n in leaf_nodes[lf]))
    return (whole_leaves, whole_nodes, sorted(keys, reverse=True))


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
