"""Choosing nodes: the search over the cluster tree for the nodes (and the
ranks each takes) of a job under one set of capacities.

A job that fits one node goes to the node where its GPUs are best
connected, then the best fit. One that fits a pod goes to the pod whose
chosen nodes are best connected, then needs the fewest nodes, then the best
fit. Bigger jobs walk the tree top-down: children by quality, the largest
while none can take the rest alone, then the best fit for the rest. Inside
a pod the ranks are spread evenly in whole units, or packed block by block
(:mod:`slurmtopo.placement.packing`) when that splits the groups that must
span hosts better.
"""
from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from slurmtopo.errors import PlacementError
from slurmtopo.inventory.links import LinkClass
from slurmtopo.placement.capacity import Capacities, UsableNodes
from slurmtopo.placement.common import Candidates
from slurmtopo.placement.fabric import FabricTree, Scope
from slurmtopo.placement.intranode import Level, nested_chain, select_scored
from slurmtopo.placement.packing import Allocation, BlockPacker, blocks_of, water_fill
from slurmtopo.placement.speeds import LinkSpeeds

#: NodeQuality.tier: the node holds a whole reference block / part of one /
#: the scope has no usable node (sorts after every node)
HOLDS_BLOCK, HOLDS_PART, NO_NODE = 0, 1, 9


class NodeQuality(NamedTuple):
    """How well a node's free GPUs can talk, smaller is better, compared as
    a tuple. Nodes are compared on a common yardstick, the job's innermost
    block (the *reference block*: TP, or the first block bigger than one
    rank): a node that holds a whole one is rated by the best ring class of
    such a block on its free GPUs; one that cannot is worse (the block will
    cross nodes) and rated by how much of a block it holds, then by that
    part's ring class. Ties go to the faster node type (mixed clusters)."""

    tier: int
    part: int  # minus the ranks of the block it holds; 0 when it holds one
    ring: int  # LinkClass of the best ring over them
    nvlink: float  # the node type's link speeds, fastest first (negated)
    network: float
    pcie: float

    def connection(self) -> tuple:
        """The quality without the part held: what the packing compares
        (which share of a block a node holds is what it decides)."""
        return (self.tier,) + tuple(self[2:])


#: the quality of a scope without a usable node
NO_NODE_QUALITY = NodeQuality(NO_NODE, 0, 99, 0.0, 0.0, 0.0)


def pick(kids: List[tuple], need: int, take: Callable) -> None:
    """``kids``: (quality, capacity, free, order, item). Quality groups
    best first; in a group the largest while none can take the rest
    alone, then the best fit (least capacity, fewest free GPUs)."""
    kids.sort(key=lambda t: (t[0], -t[1], t[3]))
    i, n = 0, len(kids)
    while need > 0:
        if i >= n:
            raise PlacementError("internal: capacity accounting went wrong")
        q = kids[i][0]
        j = i
        while j < n and kids[j][0] == q:
            j += 1
        # kids[i:j]: one quality group, capacity descending
        while need > 0 and i < j:
            cap = kids[i][1]
            if cap < need:
                take(kids[i][4], cap)
                need -= cap
                i += 1
                continue
            k = i
            while k < j and kids[k][1] >= need:
                k += 1
            best = min(kids[i:k], key=lambda t: (t[1], t[2], t[3]))
            take(best[4], need)
            need = 0
        i = j


class NodeSearch:
    """The node search of one planning pass: the candidates, the job's
    nested block sizes (``nested``: TP 8, PP 4 -> [8, 32]) and whether
    spanning blocks may be packed over the whole job's nodes
    (``global_split``). :meth:`allocate` records in ``used_global``
    whether that was done."""

    def __init__(self, tree: FabricTree, cand: Candidates, usable: UsableNodes,
                 packer: BlockPacker, speeds: LinkSpeeds, world: int, nested: Sequence[int],
                 global_split: bool, even_domains: bool = False):
        self.tree = tree
        self.cand = cand
        self.usable = usable
        self.packer = packer
        self.speeds = speeds
        self.world = world
        self.nested = list(nested)
        self.global_split = global_split
        self.used_global = False
        #: spread a job's ranks evenly over the NVLink domains (racks) it
        #: takes (:meth:`fill`), and whether some were left uneven without
        self.even_domains = even_domains
        self.uneven_domains = False
        #: pods whose ranks the current allocation packed block by block
        self.packed_pods: Set[int] = set()
        #: scope (by id) -> free GPUs under it
        self._scope_free: Dict[int, int] = {}

    # ---- node quality -------------------------------------------------------

    def reference_block(self, caps: Capacities) -> int:
        sizes = [s for s, _ in caps.node_spans] + [c.span for c in caps.cons] + self.nested
        sizes = [x for x in sizes if x > 1]
        return min(sizes) if sizes else 1

    def sig_quality(self, caps: Capacities, s: int, dom: bool) -> NodeQuality:
        key = (s, dom)
        q = caps.sig_quality.get(key)
        if q is None:
            hw, free = self.cand.sigs[s]
            cap = caps.caps_by_signature(dom)[s]
            ref = caps.reference_block
            if ref is None:
                ref = caps.reference_block = self.reference_block(caps)
            k = min(cap, ref, len(free))
            if k <= 1:
                cls = int(LinkClass.SELF)
            else:
                r = select_scored(hw, free, k, ((k, None),))
                cls = r[0][0] if r is not None else int(LinkClass.NET_FAR)
            speed = self.speeds.hardware_order(hw)
            q = NodeQuality(HOLDS_BLOCK, 0, cls, *speed) if cap >= ref else \
                NodeQuality(HOLDS_PART, -k, cls, *speed)
            caps.sig_quality[key] = q
        return q

    def node_quality(self, caps: Capacities, idx: int) -> NodeQuality:
        dom = self.tree.pods[self.tree.node_pod[idx]].is_domain
        return self.sig_quality(caps, self.cand.sig_of[idx], dom)

    def scope_quality(self, caps: Capacities, sc: Scope) -> NodeQuality:
        """Best node quality available in a scope."""
        q = caps.scope_quality.get(id(sc))
        if q is None:
            if sc.is_pod:
                counts = self.cand.pod_sigs.get(sc.index, {})
                by_sig = caps.caps_by_signature(sc.is_domain)
                qs = [self.sig_quality(caps, s, sc.is_domain) for s in counts if by_sig[s] > 0]
            else:
                qs = [self.scope_quality(caps, c) for c in sc.children
                      if caps.scope_cap.get(id(c), 0) > 0]
            q = min(qs) if qs else NO_NODE_QUALITY
            caps.scope_quality[id(sc)] = q
        return q

    def scope_free(self, sc: Scope) -> int:
        v = self._scope_free.get(id(sc))
        if v is None:
            if sc.is_pod:
                v = self.cand.pod_free.get(sc.index, 0)
            else:
                v = sum(self.scope_free(c) for c in sc.children)
            self._scope_free[id(sc)] = v
        return v

    def node_chain(self, caps: Capacities, dom: bool, k: int, offset: int) -> Tuple[Level, ...]:
        """The nested chain of blocks a node's ``k`` positions starting at
        ``offset`` must respect (bounded) or should (scored)."""
        sizes = caps.chain_sizes
        if sizes is None:
            sizes = caps.chain_sizes = sorted(
                {s for s, _ in caps.node_bounds[True] + caps.node_bounds[False]} |
                {c.span for c in caps.cons} | set(self.nested))
        key = (dom, k, tuple(offset % x == 0 for x in sizes if x <= k))
        got = caps.chains.get(key)
        if got is None:
            levels = []
            bound_spans = {s for s, _ in caps.node_bounds[dom]}
            for s, b in caps.node_bounds[dom]:
                levels.append((s, b))
            for c in caps.cons:
                if c.span not in bound_spans:
                    levels.append((c.span, None))
            for s in self.nested:
                levels.append((s, None))
            levels = [(s, b) for s, b in levels if s <= k and k % s == 0 and offset % s == 0]
            got = caps.chains[key] = nested_chain(levels, k)
        return got

    def gpu_choice_quality(self, caps: Capacities, idx: int, k: int, offset: int = 0) -> tuple:
        """Score of the best choice of ``k`` GPUs on node ``idx`` (smaller is
        better; see :func:`~slurmtopo.placement.intranode.select_scored`)."""
        node, free = self.usable[idx]
        dom = self.tree.pods[self.tree.node_pod[idx]].is_domain
        r = select_scored(node.hardware, free, k, self.node_chain(caps, dom, k, offset))
        return (1,) if r is None else (0,) + tuple(r[0])

    # ---- one node, one pod, the tree -----------------------------------------

    def single_node(self, caps: Capacities, need: int) -> Optional[int]:
        """When one node can take the whole job: the node where its GPUs
        are best connected, then the best fit (least capacity that suffices,
        then fewest free GPUs, then the fullest pod), so small jobs fill
        holes and leave idle nodes.

        All but the last two criteria depend on the node's signature (its
        hardware and free GPUs, in a domain or not), so the signatures are
        ranked first, and only the pods holding the best ones are looked
        at: the daemon asks this for every small held job, and a pass over
        every free node of 100,000 GPUs each time added up."""
        best_cap = max((c for dom in caps.computed_doms() for c in caps.caps_by_signature(dom)),
                       default=0)
        if best_cap < need:
            return None
        tree, cand = self.tree, self.cand
        # (signature, in a domain) -> (GPU choice quality, capacity, free GPUs)
        ranked: Dict[Tuple[int, bool], tuple] = {}
        for p, counts in cand.pod_sigs.items():
            dom = tree.pods[p].is_domain
            caps_of = caps.caps_by_signature(dom)
            for sig in counts:
                if (sig, dom) in ranked or caps_of[sig] < need:
                    continue
                some = next(i for i in tree.pods[p].members if cand.sig_of.get(i) == sig)
                ranked[(sig, dom)] = (self.gpu_choice_quality(caps, some, need), caps_of[sig],
                                      len(cand.sigs[sig][1]))
        if not ranked:
            return None
        top = min(ranked.values())
        # in a domain or not -> the signatures ranked best
        best_sigs: Dict[bool, set] = {False: set(), True: set()}
        for (sig, dom), v in ranked.items():
            if v == top:
                best_sigs[dom].add(sig)
        best = None
        for p, counts in cand.pod_sigs.items():
            sigs = best_sigs[tree.pods[p].is_domain]
            if sigs.isdisjoint(counts):
                continue
            idx = min(i for i in tree.pods[p].members if cand.sig_of.get(i) in sigs)
            key = (cand.pod_free.get(p, 0), idx)
            if best is None or key < best:
                best = key
        return best[1]

    def best_pod(self, caps: Capacities, need: int) -> Optional[Scope]:
        """When one pod can take the whole job: the pod whose chosen nodes
        are best connected, then needs the fewest nodes, then the best fit
        (least capacity, fewest free GPUs), so the job stays under one leaf
        and leaves big free leaves alone."""
        cands = []
        for p, counts in self.cand.pod_sigs.items():
            pod = self.tree.pods[p]
            cap = caps.scope_cap.get(id(pod), 0)
            if cap < need:
                continue
            by_sig = caps.caps_by_signature(pod.is_domain)
            top = max(by_sig[s] for s in counts)
            if top <= 0:
                continue
            fewest = -(-need // top)
            cands.append((self.scope_quality(caps, pod), fewest, cap,
                          self.cand.pod_free.get(p, 0), pod.first, pod))
        if not cands:
            return None
        cands.sort(key=lambda t: t[:5])
        best = None
        for qbest, fewest, cap, free, first, pod in cands:
            if best is not None and (qbest, fewest) > best[0][:2]:
                break
            chosen = self.pod_choice(caps, pod, need)
            qworst = max(self.node_quality(caps, i) for i, _ in chosen)
            key = (qworst, len(chosen), cap, free, first)
            if best is None or key < best[0]:
                best = (key, pod)
            if (qworst, len(chosen)) == (qbest, fewest):
                break
        return best[1]

    def fill(self, caps: Capacities, sc: Scope, need: int, out: Allocation) -> None:
        """Top-down: at each scope the children are taken by quality group,
        best first; inside a group the largest while none can take the rest
        alone, then the best fit for the rest."""
        if sc.is_pod:
            out.extend(self.fill_pod(caps, sc, need))
            return
        kids = []
        for ch in sc.children:
            c = caps.scope_cap.get(id(ch), 0)
            if c > 0:
                kids.append((self.scope_quality(caps, ch), c, self.scope_free(ch), ch.first, ch))
        picks: List[Tuple[Scope, int]] = []
        pick(kids, need, lambda ch, n: picks.append((ch, n)))
        even = self.even_split(caps, picks, need)
        if even is not None:
            self.uneven_domains = True
            if self.even_domains:
                picks = even
        for ch, n in picks:
            self.fill(caps, ch, n, out)

    def even_split(self, caps: Capacities, picks: List[Tuple[Scope, int]],
                   need: int) -> Optional[List[Tuple[Scope, int]]]:
        """The ranks of ``picks`` (NVLink domains of one quality, the
        largest first and the best fit for the rest) spread as evenly as
        their capacities allow, or None when they are even already or are
        not all domains. A group over several racks runs NVLink inside each
        and the network between them through the NICs of its ranks in each
        rack: a rack that takes the last 2 ranks of the job leaves every
        data-parallel group one rank (one NIC) there, its bottleneck."""
        if len(picks) < 2 or not all(ch.is_domain for ch, _ in picks):
            return None
        unit = caps.pod_multiple
        if unit <= 0 or need % unit:
            return None
        q = {self.scope_quality(caps, ch) for ch, _ in picks}
        if len(q) > 1:
            return None
        spread = water_fill([(k, caps.scope_cap[id(ch)]) for k, (ch, _) in enumerate(picks)],
                            need, unit)
        if sum(n for _, n in spread) != need:
            return None
        even = [(picks[k][0], n) for k, n in spread]
        if min(n for _, n in even) <= min(n for _, n in picks):
            return None
        return even

    def pod_choice(self, caps: Capacities, pod: Scope, need: int) -> Allocation:
        if pod.is_domain and caps.pod_multiple > caps.node_unit[True]:
            return self.domain_choice(caps, pod, need)
        kids = []
        for i in pod.members:
            if i in self.usable:
                c = caps.node_cap(i)
                if c > 0:
                    kids.append((self.node_quality(caps, i), c, len(self.usable[i][1]), i, i))
        chosen: Allocation = []
        pick(kids, need, lambda i, n: chosen.append((i, n)))
        return chosen

    def domain_choice(self, caps: Capacities, pod: Scope, need: int) -> Allocation:
        """Nodes of a multi-node NVLink domain that receives whole blocks
        (the capacities give pods multiples of a block): the best connected
        first, then the *smallest* free pieces first. A block inside one
        domain rings over the domain's NVLink whatever its hosts hold, so
        the partly used trays are filled and the wholly free ones stay free
        for the blocks that must straddle domains (a whole tray there is a
        piece of 4 ranks, not 1: the all-to-all's network part shrinks
        with the smallest piece)."""
        kids = []
        for i in pod.members:
            if i in self.usable:
                c = caps.node_cap(i)
                if c > 0:
                    kids.append((self.node_quality(caps, i).connection(), c, i))
        kids.sort()
        chosen: Allocation = []
        for _, c, i in kids:
            if need <= 0:
                break
            k = min(c, need)
            chosen.append((i, k))
            need -= k
        if need > 0:  # pragma: no cover - the capacities say it fits
            raise PlacementError("internal: capacity accounting went wrong")
        return chosen

    def fill_pod(self, caps: Capacities, pod: Scope, need: int) -> Allocation:
        """Nodes of ``pod`` for ``need`` ranks: the best connected first, as
        few as possible (largest capacity first, best fit for the rest),
        then the ranks spread as evenly as the unit allows (more ranks on
        the bottleneck host means a smaller slice of the inter-node ring;
        equal counts keep data-parallel peers on the same local GPU index)."""
        chosen = self.pod_choice(caps, pod, need)
        if len(chosen) <= 1:
            return chosen
        unit = caps.node_unit[pod.is_domain]
        base = water_fill([(i, caps.node_cap(i)) for i, _ in chosen], need, unit)
        if pod.is_domain:
            # a group inside one NVLink domain rings over the domain's
            # NVLink whatever its hosts' rank counts
            return base
        return self.balanced_split(caps, pod, chosen, base, need, unit)

    # ---- splitting blocks over hosts ---------------------------------------------
    # Consecutive positions over nodes with uneven free GPUs can leave a
    # block (a group that must span hosts) with one or two ranks on some
    # host. So when the even spread leaves such a block, the ranks are also
    # packed block by block (slurmtopo.placement.packing) and the split the
    # cost model's hierarchical all-reduce prices better is used.

    def split_spans(self, caps: Capacities, need: int) -> List[int]:
        spans = {s for s, _ in caps.node_spans} | {c.span for c in caps.cons} | set(self.nested)
        whole = need == self.world
        return sorted(s for s in spans if 1 < s <= need and need % s == 0
                      and (whole or caps.pod_multiple % s == 0))

    def balanced_split(self, caps: Capacities, pod: Scope, chosen: Allocation,
                       base: Allocation, need: int, unit: int) -> Allocation:
        order = self.tree.tree_order
        base = sorted(base, key=lambda t: order[t[0]])
        # blocks of a span dividing the unit never cross hosts
        spans = [s for s in self.split_spans(caps, need) if unit % s]
        if not spans:
            return base
        amounts = {k for _, k in base}
        if len(amounts) == 1:
            a = amounts.pop()
            if all(s % a == 0 or a % s == 0 for s in spans):
                return base  # every block on one host or evenly over whole hosts
        if not any(blocks_of(base, s) for s in spans):
            return base  # no block crosses hosts
        best_key = self.packer.split_cost(base, spans)
        # nodes as well connected as the chosen ones (the share of a block
        # a node holds is what the packing decides, so it is not compared)
        worst = max(self.node_quality(caps, i).connection() for i, _ in chosen)
        pool = []
        for i in pod.members:
            if i in self.usable:
                c = caps.node_cap(i)
                q = self.node_quality(caps, i)
                if c > 0 and q.connection() <= worst:
                    pool.append((q, -c, order[i], i, c))
        pool.sort()
        best = self.packer.best_packing(pool, need, unit, spans, base, best_key)
        if best is not base:
            self.packed_pods.add(pod.index)
        return best

    def global_pack(self, caps: Capacities, alloc: Allocation, need: int) -> Optional[Allocation]:
        """Blocks that must span hosts, split over the whole job's nodes
        rather than pod by pod: when the pods are nearly full, a pod on its
        own can only split its last blocks 7+1 or 6+1+1, while the job's
        other pods have nodes with room for even pieces. Used when the cost
        model's hierarchical all-reduce of the worst split block
        (:meth:`BlockPacker.split_cost`) is smaller; only without hard pod-
        or spine-level constraints, and not on clusters with multi-node
        NVLink domains (pieces there ring over the domain). It may give up a
        soft pod- or spine-level preference; the proposals then also hold
        the pod-by-pod placement and the cost model keeps the faster."""
        if self.tree.has_domains or any(c.level in ("leaf", "spine", "nvlink-domain") and
                                        c.hard for c in caps.cons):
            return None
        unit = caps.node_unit[False]
        spans = [s for s in self.split_spans(caps, need) if unit % s]
        if not spans:
            return None
        tree = self.tree
        order = tree.tree_order
        base = sorted(alloc, key=lambda t: (order[tree.pods[tree.node_pod[t[0]]].first],
                                            order[t[0]]))
        if not any(blocks_of(base, s) for s in spans) or self.split_at_best(caps, base, spans):
            return None
        base_key = self.packer.split_cost(base, spans)
        worst = max(self.node_quality(caps, i).connection() for i, _ in alloc)
        pool = []
        for i in self.usable:
            c = caps.node_cap(i)
            if c <= 0:
                continue
            q = self.node_quality(caps, i).connection()
            if q <= worst:
                pool.append((q, order[tree.pods[tree.node_pod[i]].first], order[i], i, c))
        pool.sort()
        return self.packer.best_packing(pool, need, unit, spans, None, base_key)

    def split_at_best(self, caps: Capacities, seq: Allocation, spans: Sequence[int]) -> bool:
        """Does ``seq`` split every block of ``spans`` as well as any packing
        could? Yes when every host takes the same number of ranks, the
        most any usable node can, every block lies on one host or evenly
        over whole hosts, the usable nodes are all one hardware with the
        same free GPUs (or one hardware whose free GPUs are alike on every
        node: NVSwitch nodes with a NIC each, where a piece of k GPUs rings
        and reaches the network as any other k would) and the network is
        alike at every level: each split block then has the
        fewest hosts and the biggest smallest piece there are (a 16,384-GPU
        job on an idle cluster, or a 64-GPU job on whole free nodes of a
        busy one, whose packing over every node of the cluster would cost
        a tenth of its plan, or ten times it, for nothing)."""
        amounts = {k for _, k in seq}
        if len(amounts) != 1:
            return False
        a = amounts.pop()
        if not all(s % a == 0 or a % s == 0 for s in spans):
            return False
        if max(caps.caps_by_signature(False), default=0) > a:
            return False
        sigs = self.cand.sigs
        if len(sigs) != 1 and (len({hw for hw, _ in sigs}) != 1
                               or not all(map(self.packer.alike, range(len(sigs))))):
            return False
        return self.packer.flat_network

    # ---- the allocation -----------------------------------------------------------

    def allocate(self, caps: Capacities, need: int) -> Allocation:
        """(node index, ranks) for ``need`` ranks, in tree order."""
        alloc: Allocation = []
        self.packed_pods = set()  # the packed pods of this allocation only
        single = self.single_node(caps, need)
        if single is not None:
            alloc.append((single, need))
        else:
            pod = self.best_pod(caps, need)
            if pod is not None:
                alloc.extend(self.fill_pod(caps, pod, need))
            else:
                self.fill(caps, self.tree.root, need, alloc)
            if self.global_split and (pod is None or len(self.cand.pod_sigs) > 1):
                # also when one pod holds the job: the pod with the fewest
                # nodes may hold it only in small pieces (DP 82 with EP
                # pairs on nodes in a leaf whose even rooms sum to 82:
                # pieces of 2), where the job's other pods have room for
                # pieces of 6 (only when another pod has free GPUs); the
                # pod's placement stays a proposal
                packed = self.global_pack(caps, alloc, need)
                if packed is not None:
                    self.used_global = True
                    return packed
        tree = self.tree
        order, packed_pods = tree.tree_order, self.packed_pods
        # tree order; inside a pod packed block by block, the packing's
        # order (a stable sort keeps it; a node may appear more than once)
        alloc.sort(key=lambda t: (order[tree.pods[tree.node_pod[t[0]]].first],
                                  0 if tree.node_pod[t[0]] in packed_pods else order[t[0]]))
        return alloc
