"""How many positions every scope of the cluster can take under a set of
constraints (:class:`Capacities`), and the sizes and nodes they are
computed from.

A scope keeps every block of a constraint whole exactly when it receives a
multiple of the block's span, so a constraint set becomes "nodes take
multiples of this unit, each chunk ringing under that link class; pods and
spine groups take multiples of these". The capacity of a node is computed
once per distinct (hardware, free GPUs) signature (an idle 12,500-node
cluster is one computation), then summed up the tree.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Inventory, Node
from slurmtopo.job.request import NODE_LEVEL_BOUND, NODE_LEVELS
from slurmtopo.placement.common import Candidates
from slurmtopo.placement.constraints import Constraint, lcm
from slurmtopo.placement.fabric import FabricTree, Scope, fabric_tree
from slurmtopo.placement.intranode import capacity

#: no unit of this level bounds a block (a flat fabric, or ``any``)
UNBOUNDED = 1 << 62


class UnitSizes:
    """GPUs in the largest unit of each level in the whole inventory, free
    or not ("no leaf holds a block of 640 ranks"). Depends on the inventory
    only: one object serves every proposal of one :func:`plan` call."""

    def __init__(self, inv: Inventory, tree: FabricTree):
        self.inv = inv
        self.tree = tree
        self.largest: Dict[str, int] = {}
        self._pod_gpus: Optional[List[int]] = None
        self._node_max: Optional[int] = None

    def __call__(self, level: str) -> int:
        got = self.largest.get(level)
        if got is None:
            got = self.largest[level] = self._largest(level)
        return got

    def _gpus(self, pod: Scope) -> int:
        """GPUs of the pod's nodes (every pod's counted in one pass)."""
        if self._pod_gpus is None:
            tree, nodes = self.tree, self.inv.nodes
            per = [0] * len(tree.pods)
            for i, name in enumerate(tree.names):
                per[tree.node_pod[i]] += nodes[name].hardware.gpu_count
            self._pod_gpus = per
        return self._pod_gpus[pod.index]

    def _largest(self, level: str) -> int:
        tree = self.tree
        if self._node_max is None:
            self._node_max = max(hw.gpu_count for hw in {id(n.hardware): n.hardware
                                                         for n in self.inv}.values())
        node_max = self._node_max
        if level in NODE_LEVELS:
            return node_max
        if level == "nvlink-domain":
            return max([node_max] + [self._gpus(p) for p in tree.pods if p.is_domain])
        if tree.flat or level == "any":
            return UNBOUNDED
        if level == "leaf":
            return max(self._gpus(p) for p in tree.pods)
        # spine: the largest level-1 switch group
        per: Dict[int, int] = {}
        for p in tree.pods:
            l1 = tree.pod_l1[p.index]
            per[id(l1)] = per.get(id(l1), 0) + self._gpus(p)
        return max(per.values())


def unit_sizes(inv: Inventory, tree: FabricTree) -> UnitSizes:
    """The :class:`UnitSizes` of ``inv`` over ``tree``: for the inventory's
    own tree (:func:`~slurmtopo.placement.fabric.fabric_tree`) kept in its
    derived tables, so that the placement daemon, which plans hundreds of
    jobs a cycle on one inventory, scans the cluster for them once and not
    once per job (half of a 1,000-job cycle on 100,000 GPUs)."""
    own = inv.derive("placement.unit_sizes", lambda: UnitSizes(inv, fabric_tree(inv)))
    return own if own.tree is tree else UnitSizes(inv, tree)


class UsableNodes:
    """index -> (node, free GPUs) for the usable nodes, without building a
    dict of 100,000 entries: views over the candidates' signatures."""

    __slots__ = ("nodes", "sig_of", "sigs")

    def __init__(self, nodes: List[Node], cand: Candidates):
        self.nodes = nodes
        self.sig_of = cand.sig_of
        self.sigs = cand.sigs

    def __contains__(self, idx: int) -> bool:
        return idx in self.sig_of

    def __getitem__(self, idx: int) -> Tuple[Node, Tuple[int, ...]]:
        return self.nodes[idx], self.sigs[self.sig_of[idx]][1]

    def __iter__(self) -> Iterator[int]:
        return iter(self.sig_of)

    def items(self) -> Iterator[Tuple[int, Tuple[Node, Tuple[int, ...]]]]:
        nodes, sigs = self.nodes, self.sigs
        for idx, s in self.sig_of.items():
            yield idx, (nodes[idx], sigs[s][1])


class Capacities:
    """Capacities of every scope under one set of constraints, for ``need``
    positions on the candidates' free GPUs.

    ``node_unit`` and ``node_bounds`` are per pod type (in a multi-node
    NVLink domain or not): the multiple a node takes and the (span, link
    class) bounds its chunks ring under. ``pod_multiple`` and
    ``spine_multiple``: what a pod and a level-1 switch group take
    multiples of."""

    def __init__(self, cons: Sequence[Constraint], tree: FabricTree, cand: Candidates,
                 per_node: Optional[int], need: int):
        self.cons = tuple(cons)
        self.tree = tree
        self.cand = cand
        self.per_node = per_node
        self.need = need
        node_spans: List[Tuple[int, LinkClass]] = []
        domain_spans: List[int] = []
        pod_spans: List[int] = []
        spine_spans: List[int] = []
        for c in cons:
            if c.level in NODE_LEVELS:
                node_spans.append((c.span, NODE_LEVEL_BOUND[c.level]))
            elif c.level == "nvlink-domain":
                domain_spans.append(c.span)
            elif c.level == "leaf":
                if not tree.flat:
                    pod_spans.append(c.span)
            elif c.level == "spine":
                if not tree.flat:
                    spine_spans.append(c.span)
        self.node_spans = node_spans
        in_domain = lcm([s for s, _ in node_spans])
        off_domain = lcm([in_domain] + domain_spans)
        self.node_unit: Dict[bool, int] = {True: in_domain, False: off_domain}
        self.node_bounds: Dict[bool, Tuple[Tuple[int, LinkClass], ...]] = {
            True: tuple(sorted(set(node_spans))),
            False: tuple(sorted(set(node_spans) | {(s, LinkClass.SYS) for s in domain_spans}))}
        both = lcm([in_domain, off_domain] if tree.has_domains else [off_domain])
        self.pod_multiple = lcm([both] + pod_spans + domain_spans)
        if tree.levels == 0:
            self.pod_multiple = lcm([self.pod_multiple] + spine_spans)
        self.spine_multiple = lcm([self.pod_multiple] + spine_spans)
        self._caps: Dict[bool, List[int]] = {}
        #: scope (by id) -> positions it can take
        self.scope_cap: Dict[int, int] = {}
        self.total = self._aggregate()
        # filled by the node search (slurmtopo.placement.search) for this
        # constraint set: node quality per (signature, in a domain), the
        # reference block it is rated by, the best quality per scope (by
        # id), the nested chains of blocks per (in a domain, ranks,
        # alignment) and the block sizes they are made of
        self.sig_quality: Dict[Tuple[int, bool], tuple] = {}
        self.reference_block: Optional[int] = None
        self.scope_quality: Dict[int, tuple] = {}
        self.chains: Dict[Tuple, tuple] = {}
        self.chain_sizes: Optional[List[int]] = None

    def caps_by_signature(self, dom: bool) -> List[int]:
        """Per candidate signature: the positions one node can take."""
        caps = self._caps.get(dom)
        if caps is None:
            u, b = self.node_unit[dom], self.node_bounds[dom]
            g = self.per_node
            caps = []
            for hw, free in self.cand.sigs:
                c = capacity(hw, free, u, b)
                if g is not None:
                    c = min(c, g) // u * u
                caps.append(c)
            self._caps[dom] = caps
        return caps

    def computed_doms(self) -> List[bool]:
        """The pod types whose node capacities were computed."""
        return list(self._caps)

    def node_cap(self, idx: int) -> int:
        tree = self.tree
        dom = tree.pods[tree.node_pod[idx]].is_domain
        return self.caps_by_signature(dom)[self.cand.sig_of[idx]]

    def _aggregate(self) -> int:
        """Every scope's capacity, pods first, then up the tree (one pass
        each: the daemon builds thousands of these a cycle)."""
        tree, scope_cap = self.tree, self.scope_cap
        pod_sigs, pm, sm = self.cand.pod_sigs, self.pod_multiple, self.spine_multiple
        for pod in tree.pods:
            counts = pod_sigs.get(pod.index)
            if not counts:
                cap = 0
            else:
                caps = self.caps_by_signature(pod.is_domain)
                cap = sum([n * caps[s] for s, n in counts.items()]) // pm * pm
            scope_cap[id(pod)] = cap
        for sc in tree.upper:
            cap = sum([scope_cap[id(c)] for c in sc.children])
            if sc.level == 1 and sc.depth > 0:
                cap = cap // sm * sm
            scope_cap[id(sc)] = cap
        return scope_cap[id(tree.root)]

    @property
    def feasible(self) -> bool:
        return self.total >= self.need
