"""The simulated cluster's GPUs, kept up to date job by job.

One :class:`FreeState` per replay. A job's start or end rewrites only the
nodes it touches: the :class:`~slurmtopo.inventory.model.ClusterState` the planner,
Slurm's model and the placement daemon read (only busy nodes are listed,
as in a state snapshot), the planner's candidate nodes per kind of job
(refreshed node by node as the placement daemon keeps its own,
:func:`slurmtopo.daemon.candidates.refreshed`), how many nodes have each
number of free GPUs (so that "can it fit at all?" is a count, not a scan),
and the stranded GPUs.

Stranded GPUs
    A free GPU is stranded when it is in no fully free NVLink domain and
    no fully free leaf: free, yet no job that wants a whole NVLink domain
    or a whole leaf can have it. A GPU's NVLink domain is its node's
    multi-node NVLink domain (a GB200 NVL72 rack) when it has one, else its
    NVLink island inside the node (the whole node on HGX, a pair on
    NVLink-bridged PCIe cards, the GPU alone without NVLink). Without a
    switch tree there are no leaves, and only the domains count.

Rack fragmentation
    In a multi-node NVLink domain (a rack of trays), a tray is usable by a
    job asking ``--segment=S`` only as one of ``S`` free trays of the same
    rack: the rack's free trays beyond a whole number of ``S`` are free but
    unusable for it. They are counted per segment size (:data:`SEGMENTS`),
    with the racks wholly free and the racks partly free.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Set, Tuple

from slurmtopo.daemon.candidates import filter_of, refreshed
from slurmtopo.inventory.model import ClusterState, Inventory, NodeState
from slurmtopo.inventory.topology import network_view, nvlink_islands
from slurmtopo.placement.common import candidates
from slurmtopo.placement.fabric import fabric_tree

#: the segment sizes (trays of a multi-node NVLink domain) whose unusable
#: free trays a replay counts: NVIDIA's NVL72 guidance weighs 16 against 18
SEGMENTS = (2, 4, 8, 9, 16, 18)


class FreeState:
    """Free and busy GPUs of every node of ``inv`` (see the module doc)."""

    def __init__(self, inv: Inventory):
        self.inv = inv
        self.names: List[str] = list(inv.nodes)
        self.index: Dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.size: List[int] = [inv.nodes[n].hardware.gpu_count for n in self.names]
        self.busy: List[Set[int]] = [set() for _ in self.names]
        self.cluster = ClusterState(nodes={}, source="simulation")
        self.total_gpus = sum(self.size)
        self.busy_gpus = 0
        self.max_size = max(self.size, default=0)
        #: free GPUs -> nodes with that many
        self.hist: List[int] = [0] * (self.max_size + 1)
        for s in self.size:
            self.hist[s] += 1
        # stranded GPUs: pieces (a domain's GPUs on one node) by domain and by leaf
        view = network_view(inv.fabric)
        pieces: List[Tuple[int, int, Optional[int], Tuple[int, ...]]] = []
        unit_ids: Dict[object, int] = {}
        leaf_ids: Dict[str, int] = {}
        for i, name in enumerate(self.names):
            node = inv.nodes[name]
            leaf = None if view.flat else view.leaf.get(name)
            lid = None if leaf is None else leaf_ids.setdefault(leaf, len(leaf_ids))
            if node.nvlink_domain is not None:
                key = ("domain", node.nvlink_domain.key)
                groups: Iterable[Tuple[int, ...]] = [tuple(g.index for g in node.gpus)]
                keys = [key]
            else:
                groups = nvlink_islands(node.hardware)
                keys = [("island", name, g) for g in groups]
            for key, gpus in zip(keys, groups):
                uid = unit_ids.setdefault(key, len(unit_ids))
                pieces.append((i, uid, lid, tuple(gpus)))
        self._pieces = pieces
        #: unit id -> its key (("domain", key) or ("island", node, GPUs)); leaf id -> name
        self._unit_keys: List[object] = list(unit_ids)
        self._leaf_names: List[str] = list(leaf_ids)
        self._unit_busy = [0] * len(unit_ids)
        self._leaf_busy = [0] * len(leaf_ids)
        self._node_pieces: List[List[int]] = [[] for _ in self.names]
        self._unit_pieces: List[List[int]] = [[] for _ in unit_ids]
        self._leaf_pieces: List[List[int]] = [[] for _ in leaf_ids]
        for p, (i, uid, lid, _g) in enumerate(pieces):
            self._node_pieces[i].append(p)
            self._unit_pieces[uid].append(p)
            if lid is not None:
                self._leaf_pieces[lid].append(p)
        self._node_leaf: List[Optional[int]] = [None] * len(self.names)
        for i, _uid, lid, _g in pieces:
            self._node_leaf[i] = lid
        self.stranded = 0
        #: (version, node index, its state before) of every change, for the
        #: candidates kept per filter (with the version they are up to date at)
        self._log: List[Tuple[int, int, Optional[NodeState]]] = []
        self._version = 0
        self._cands: Dict[object, Tuple[object, int]] = {}
        self._nodes = list(inv.nodes.values())
        # multi-node NVLink domains (racks): their wholly free trays
        self._dom_of: List[Optional[int]] = [None] * len(self.names)
        dom_ids: Dict[str, int] = {}
        for i, name in enumerate(self.names):
            d = inv.nodes[name].nvlink_domain
            if d is not None:
                self._dom_of[i] = dom_ids.setdefault(d.key, len(dom_ids))
        self.dom_size = [0] * len(dom_ids)
        for d in self._dom_of:
            if d is not None:
                self.dom_size[d] += 1
        self.dom_free = list(self.dom_size)
        biggest = max(self.dom_size, default=0)
        #: the segment sizes whose unusable trays are counted
        self.segments: Tuple[int, ...] = tuple(k for k in SEGMENTS if 1 < k <= biggest)
        #: per segment size: free trays of domains no segment of it can use
        #: (each domain's free trays beyond a whole number of segments)
        self.unusable: List[int] = [sum(n % k for n in self.dom_size) for k in self.segments]
        #: domains with every tray free, and with some but not all free
        self.whole_domains = len(dom_ids)
        self.partial_domains = 0

    # -- queries ---------------------------------------------------------------

    def free_gpus(self, name: str) -> Tuple[int, ...]:
        i = self.index[name]
        busy = self.busy[i]
        return tuple(g.index for g in self.inv.nodes[name].gpus if g.index not in busy)

    def nodes_with(self, gpus: int) -> int:
        """How many nodes have at least ``gpus`` free GPUs."""
        return sum(self.hist[max(0, gpus):])

    def fits_by_count(self, nodes: int, gpus_per_node: int, gpus: int) -> bool:
        """Can ``nodes`` nodes with ``gpus_per_node`` free each (``gpus`` in
        all) be found at all? (Necessary, not sufficient.)"""
        return self.nodes_with(gpus_per_node) >= nodes and \
            sum(f * c for f, c in enumerate(self.hist) if f >= gpus_per_node) >= gpus

    # -- changes ---------------------------------------------------------------

    def _piece_stranded(self, p: int) -> int:
        i, uid, lid, gpus = self._pieces[p]
        if not self._unit_busy[uid] or (lid is not None and not self._leaf_busy[lid]):
            return 0
        busy = self.busy[i]
        return sum(1 for g in gpus if g not in busy)

    def _set(self, i: int, busy: Set[int], track: bool) -> None:
        old = self.busy[i]
        delta = len(busy) - len(old)
        if track:
            lid = self._node_leaf[i]
            touched = set()
            for p in self._node_pieces[i]:
                touched.update(self._unit_pieces[self._pieces[p][1]])
            if lid is not None and (self._leaf_busy[lid] == 0) != (self._leaf_busy[lid] + delta == 0):
                touched.update(self._leaf_pieces[lid])
            before = sum(self._piece_stranded(p) for p in touched)
        for p in self._node_pieces[i]:
            _n, uid, _l, gpus = self._pieces[p]
            self._unit_busy[uid] += sum(1 for g in gpus if g in busy) - \
                sum(1 for g in gpus if g in old)
        lid = self._node_leaf[i]
        if lid is not None:
            self._leaf_busy[lid] += delta
        self.hist[self.size[i] - len(old)] -= 1
        self.hist[self.size[i] - len(busy)] += 1
        self.busy_gpus += delta
        self.busy[i] = busy
        name = self.names[i]
        if self._cands:
            self._log.append((self._version, i, self.cluster.nodes.get(name)))
            self._version += 1
        if not busy:
            self.cluster.nodes.pop(name, None)
        else:
            full = len(busy) >= self.size[i]
            self.cluster.nodes[name] = NodeState(name, state="allocated" if full else "mixed",
                                                 busy_gpus=frozenset(busy))
        if track:
            self.stranded += sum(self._piece_stranded(p) for p in touched) - before
            d = self._dom_of[i]
            if d is not None and (not old) != (not busy):
                self._domain_tray(d, 1 if not busy else -1)

    def _domain_tray(self, d: int, delta: int) -> None:
        """A tray of domain ``d`` became wholly free (+1) or stopped being (-1)."""
        size, before = self.dom_size[d], self.dom_free[d]
        after = before + delta
        self.dom_free[d] = after
        for k, seg in enumerate(self.segments):
            self.unusable[k] += after % seg - before % seg
        self.whole_domains += (after == size) - (before == size)
        self.partial_domains += (0 < after < size) - (0 < before < size)

    def allocate(self, alloc: Mapping[str, Iterable[int]], track: bool = True) -> None:
        """Mark ``alloc`` (node -> GPUs) busy. ``track=False``: a trial
        (a reservation's what-if) that leaves the stranded count alone and
        is undone before anything is measured."""
        for name, gpus in alloc.items():
            i = self.index[name]
            gpus = set(gpus)
            if gpus & self.busy[i]:
                raise ValueError(f"{name}: GPUs {sorted(gpus & self.busy[i])} are busy already")
            self._set(i, self.busy[i] | gpus, track)

    def release(self, alloc: Mapping[str, Iterable[int]], track: bool = True) -> None:
        """Mark ``alloc`` free again (see :meth:`allocate`)."""
        for name, gpus in alloc.items():
            i = self.index[name]
            self._set(i, self.busy[i] - set(gpus), track)

    def candidates(self, req, view: Optional[ClusterState] = None,
                   changed: Iterable[str] = ()):
        """:func:`slurmtopo.placement.common.candidates` of ``req`` (no node
        list, no exclusions) on the current state, or on ``view``: the
        current state with the nodes ``changed`` in another state."""
        pods = fabric_tree(self.inv).node_pod
        flt = filter_of(req)
        hit = self._cands.get(flt)
        if hit is None:
            cand = candidates(self.inv, self.cluster, req, pods)
        else:
            cand, since = hit
            first: Dict[int, Optional[NodeState]] = {}
            for v, i, old in self._log[self._log_start(since):]:
                first.setdefault(i, old)
            if first:
                nodes = self.cluster.nodes
                cand = refreshed(cand, first, self._nodes, first.get,
                                 lambda i: nodes.get(self.names[i]), flt, pods)
        self._cands[flt] = (cand, self._version)
        self._trim()
        if view is not None:
            at = [self.index[n] for n in changed]
            real = self.cluster.nodes
            cand = refreshed(cand, at, self._nodes, lambda i: real.get(self.names[i]),
                             lambda i: view.nodes.get(self.names[i]), flt, pods)
        return cand

    def _log_start(self, version: int) -> int:
        """Where the entries of ``version`` and later begin in the log."""
        first = self._log[0][0] if self._log else self._version
        return max(0, version - first)

    def _trim(self) -> None:
        oldest = min(v for _, v in self._cands.values())
        cut = self._log_start(oldest)
        if cut > 4096:
            del self._log[:cut]

    def stranded_pieces(self) -> List[Tuple[str, object, Optional[str], int, int]]:
        """Every piece (a domain's or an island's GPUs on one node) as
        (node, unit key, leaf name or None, free GPUs, stranded GPUs), so
        that a report can sum the stranded count by leaf or by domain
        (``slurmtopo audit``); same rule as :attr:`stranded`."""
        out = []
        for p, (i, uid, lid, gpus) in enumerate(self._pieces):
            busy = self.busy[i]
            free = sum(1 for g in gpus if g not in busy)
            out.append((self.names[i], self._unit_keys[uid],
                        None if lid is None else self._leaf_names[lid], free,
                        self._piece_stranded(p)))
        return out
