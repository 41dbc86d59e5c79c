"""The lower bound: what no placement of a job can beat on this cluster
(on its free GPUs, given a state), per group kind and jointly over the
kinds (:func:`lower_bound`)."""
from __future__ import annotations

import copy
import itertools
import math
from typing import Dict, List, Optional, Tuple

from slurmtopo.cost.collectives import COLLECTIVES, collective_time
from slurmtopo.cost.defaults import NETWORK_CLASSES
from slurmtopo.cost.params import CostParams, cost_params
from slurmtopo.cost.report import CostReport, GroupCost
from slurmtopo.cost.compute import gpu_figures
from slurmtopo.cost.step import CallPrice, StepCall, call_bytes, step_calls, subgroups
from slurmtopo.cost.whole import compose_at
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Hardware, Inventory
from slurmtopo.inventory.topology import network_view
from slurmtopo.job.groups import build_groups
from slurmtopo.job.request import JobRequest
from slurmtopo.placement.intranode import candidate_sets, hw_info

class InventoryStats:
    """What the lower bound needs to know about an inventory's shape (not
    about the cost parameters): the GPU sets a group could use (per
    hardware type all its GPUs; with a cluster state the free GPUs of each
    usable node), NVLink domain sizes, the GPUs under the largest switch of
    each level. Cached on the inventory when no state is given."""

    def __init__(self, inv: Inventory, state=None):
        sets: Dict[Tuple[int, Tuple[int, ...]], Tuple[Hardware, Tuple[int, ...]]] = {}
        dom_gpus: Dict[str, int] = {}
        dom_sets: Dict[Tuple[int, Tuple[int, ...]], Tuple[Hardware, Tuple[int, ...]]] = {}
        free_of: Dict[str, int] = {}
        #: GPUs (free ones, given a state) per node -> number of such nodes
        self.node_sizes: Dict[int, int] = {}
        #: the same for the nodes outside every NVLink domain (on a mixed
        #: cluster a group fits "one node or one domain" in either)
        self.solo_sizes: Dict[int, int] = {}
        #: GPUs (free ones, given a state) per GPU model and memory: the
        #: GPUs a job could run at (the whole step's bound)
        models: Dict[Tuple[str, Optional[int]], int] = {}
        # without a state a node's GPUs are its hardware's: one set per node
        # type, not a hash of the hardware per node (12,500 of them)
        whole: Dict[int, Tuple[int, ...]] = {}
        for n in inv:
            hw = n.hardware
            if state is None:
                gpus = whole.get(id(hw))
                if gpus is None:
                    gpus = whole[id(hw)] = tuple(range(hw.gpu_count))
                    if gpus:
                        sets.setdefault((hw, gpus), (hw, gpus))
            else:
                gpus = tuple(state.free_gpus(n))
                if gpus:
                    sets.setdefault((hw, gpus), (hw, gpus))
            if not gpus:
                continue
            free_of[n.name] = len(gpus)
            self.node_sizes[len(gpus)] = self.node_sizes.get(len(gpus), 0) + 1
            g0 = hw.gpus[0]
            key = (g0.model, g0.memory_mib)
            models[key] = models.get(key, 0) + len(gpus)
            if n.nvlink_domain is not None:
                k = n.nvlink_domain.key
                dom_gpus[k] = dom_gpus.get(k, 0) + len(gpus)
                dom_sets.setdefault((hw, gpus), (hw, gpus))
            else:
                self.solo_sizes[len(gpus)] = self.solo_sizes.get(len(gpus), 0) + 1
        self.sets = list(sets.values())
        self.gpu_models = sorted(models.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))
        self.dom_sets = list(dom_sets.values())
        self.node_max = max((len(g) for _, g in self.sets), default=0)
        self.dom_max = max(dom_gpus.values()) if dom_gpus else 0
        self.dom_sizes = sorted(dom_gpus.values())
        view = network_view(inv.fabric)
        total = sum(free_of.values())
        self.scope_cap: Dict[LinkClass, int] = {}
        if view.flat:
            for c in NETWORK_CLASSES:
                self.scope_cap[c] = total
            return
        # the hosts under one switch share its ancestors' table
        # (topology.network_view): add their GPUs up per table first
        per_table: Dict[int, list] = {}
        for name, g in free_of.items():
            anc = view.ancestors.get(name)
            if anc:
                hit = per_table.get(id(anc))
                if hit is None:
                    per_table[id(anc)] = [anc, g]
                else:
                    hit[1] += g
        per_sw: Dict[str, int] = {}
        for anc, g in per_table.values():
            for sw in anc:
                per_sw[sw] = per_sw.get(sw, 0) + g
        per_leaf: Dict[str, int] = {}
        for host, leaf in view.leaf.items():
            g = free_of.get(host)
            if g:
                per_leaf[leaf] = per_leaf.get(leaf, 0) + g
        self.scope_cap[LinkClass.NET_LEAF] = max(per_leaf.values()) if per_leaf else 1
        top = 0
        for lvl in range(1, 4):
            caps = [v for sw, v in per_sw.items() if view.levels.get(sw) == lvl]
            if caps:
                self.scope_cap[LinkClass.network(lvl)] = max(caps)
                top = lvl
        if any(l > 3 for l in view.levels.values()):
            caps = [v for sw, v in per_sw.items() if view.levels.get(sw, 0) >= 3]
            self.scope_cap[LinkClass.NET_L3] = max(caps)
            top = 3
        # levels above the top described one hold no more than it does
        for lvl in range(top + 1, 4):
            self.scope_cap[LinkClass.network(lvl)] = self.scope_cap[LinkClass.network(top)]
        self.scope_cap[LinkClass.NET_FAR] = total


    def __eq__(self, other) -> bool:
        return isinstance(other, InventoryStats) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]

    def to_json(self, hw_ref) -> Dict[str, object]:
        """JSON-ready, each hardware as ``hw_ref(hardware)`` (its index in
        a compiled inventory's table: :mod:`slurmtopo.inventory.cache`)."""
        return {"sets": [[hw_ref(h), list(g)] for h, g in self.sets],
                "dom_sets": [[hw_ref(h), list(g)] for h, g in self.dom_sets],
                "node_sizes": [[k, v] for k, v in self.node_sizes.items()],
                "solo_sizes": [[k, v] for k, v in self.solo_sizes.items()],
                "gpu_models": [[m, mib, k] for (m, mib), k in self.gpu_models],
                "node_max": self.node_max, "dom_max": self.dom_max, "dom_sizes": self.dom_sizes,
                "scope_cap": [[int(c), v] for c, v in self.scope_cap.items()]}

    @classmethod
    def from_json(cls, d, hardware: List[Hardware]) -> "InventoryStats":
        """What :meth:`to_json` wrote, ``hardware`` its hardware table;
        raises (KeyError, TypeError, ValueError, IndexError) on anything
        else."""
        def count(v) -> int:
            if type(v) is not int or v < 0:
                raise ValueError("a count")
            return v

        st = cls.__new__(cls)
        st.node_sizes = {count(k): count(v) for k, v in d["node_sizes"]}
        st.solo_sizes = {count(k): count(v) for k, v in d["solo_sizes"]}
        st.sets = [(hardware[count(h)], tuple(count(x) for x in g)) for h, g in d["sets"]]
        st.dom_sets = [(hardware[count(h)], tuple(count(x) for x in g))
                       for h, g in d["dom_sets"]]
        if any(type(m) is not str for m, _, _ in d["gpu_models"]):
            raise TypeError("a GPU model")
        st.gpu_models = [((m, None if mib is None else count(mib)), count(k))
                         for m, mib, k in d["gpu_models"]]
        st.node_max, st.dom_max = count(d["node_max"]), count(d["dom_max"])
        st.dom_sizes = [count(v) for v in d["dom_sizes"]]
        st.scope_cap = {LinkClass(c): count(v) for c, v in d["scope_cap"]}
        return st


#: its name in the inventory's derived tables
STATS_TABLE = "cost.inventory_stats"


def inventory_stats(inv: Inventory, state=None) -> InventoryStats:
    """The idle cluster's statistics are kept in the inventory's derived
    tables; those of a state are built for it. A state that lists no node
    is the idle cluster (unlisted nodes are idle and whole)."""
    if state is not None and state.nodes:
        return InventoryStats(inv, state)
    return inv.derive(STATS_TABLE, lambda: InventoryStats(inv))


class LowerBound:
    """The fastest each group size could possibly be on this inventory
    (on its free GPUs, given a state)."""

    def __init__(self, inv: Inventory, p: CostParams, state=None):
        self.p = p
        st = inventory_stats(inv, state)
        self.sets = st.sets
        self.node_max = st.node_max
        self.best_net = max((max(p.hw(h).net[g] for g in gpus) for h, gpus in self.sets),
                            default=1.0)
        self.dom_max = st.dom_max
        self.dom_bw = max((p.hw(h).class_bw(LinkClass.NVLINK_DOMAIN) for h, _ in st.dom_sets),
                          default=0.0)
        self.dom_nvls = max((p.hw(h).nvls_bw for h, _ in st.dom_sets), default=0.0)
        self.dom_nvls_lat = min((p.hw(h).nvls_lat for h, _ in st.dom_sets), default=0.0)
        #: ranks of the largest multi-node NVLink domain and of its nodes: a
        #: group over several domains is priced with domains as its units
        #: (NVLink inside, NVLSTree between), kept for every scope
        self.unit_max = st.dom_max
        self.scope_cap = st.scope_cap
        self.node_sizes = st.node_sizes
        self.solo_sizes = st.solo_sizes
        self.dom_sizes = st.dom_sizes
        self._best_in: Dict[Tuple[int, Tuple[int, ...], int], Tuple[LinkClass, float]] = {}
        self._cache: Dict[Tuple[int, str, int, int], Tuple[LinkClass, float]] = {}

    def fit(self, n: int, count: int) -> Tuple[bool, bool]:
        """Can ``count`` disjoint groups of ``n`` all stay inside one node
        each / inside one node or one NVLink domain each? When not, the
        slowest of them cannot have that scope. The second counts the
        groups that nodes outside every domain hold too: on a cluster of
        HGX nodes and NVL72 racks, TP groups of 8 fill the free HGX nodes
        and the rest go inside racks, none of them over the network."""
        def per_node(sizes: Dict[int, int]) -> int:
            return sum(k * (size // n) for size, k in sizes.items())

        doms = sum(d // n for d in self.dom_sizes)
        return per_node(self.node_sizes) >= count, doms + per_node(self.solo_sizes) >= count

    def best_intra(self, hw: Hardware, gpus: Tuple[int, ...], l: int) -> Tuple[LinkClass, float]:
        """Fastest (class, GB/s) of a ring over some ``l`` of ``gpus`` of ``hw``."""
        key = (hw, gpus, l)
        hit = self._best_in.get(key)
        if hit is None:
            if l <= 1:
                hit = (LinkClass.SELF, math.inf)
            else:
                hc = self.p.hw(hw)
                best = None
                for cand in candidate_sets(hw_info(hw), gpus, l):
                    c, b = hc.intra(tuple(sorted(cand)))
                    k = (c, -b)
                    if best is None or k < best[0]:
                        best = (k, (c, b))
                hit = best[1]
            self._best_in[key] = hit
        return hit

    def best_pair(self, m: int) -> Tuple[LinkClass, float]:
        """(class, seconds) of the fastest p2p of ``m`` bytes between two
        GPUs of one node."""
        best = None
        p = self.p
        for hw, gpus in self.sets:
            hc = p.hw(hw)
            for i, a in enumerate(gpus):
                for b in gpus[i + 1:]:
                    c, bw = hc.pair(a, b)
                    t = collective_time(p, "p2p", 2, m, 0, 0, 0, c, bw)
                    if best is None or (t, c) < (best[1], best[0]):
                        best = (c, t)
        return best

    def best(self, n: int, collective: str, m: int, count: int = 1,
             l_cap: int = 0) -> Tuple[LinkClass, float]:
        """(class, seconds) of the fastest option for the slowest of
        ``count`` disjoint groups of ``n`` (over the network at most
        ``l_cap`` ranks a host, when given)."""
        key = (n, collective, m, count, l_cap)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        p = self.p
        if n <= 1:
            return LinkClass.SELF, 0.0
        opts: List[Tuple[float, LinkClass]] = []
        in_node, in_dom = self.fit(n, count) if count > 1 else (True, True)
        # inside one node
        if n <= self.node_max and in_node:
            if collective == "p2p":
                c, t = self.best_pair(m)
                opts.append((t, c))
            else:
                for hw, gpus in self.sets:
                    if len(gpus) >= n:
                        c, bw = self.best_intra(hw, gpus, n)
                        hc = p.hw(hw)
                        nvls = hc.nvls_bw if c is LinkClass.NVLINK else 0.0
                        opts.append((collective_time(p, collective, n, m, 0, 0, 0, c, bw,
                                                     nvls_bw=nvls, nvls_lat=hc.nvls_lat,
                                                     fastest=True), c))
        # inside one NVLink domain
        if self.dom_max >= n and n > 1 and in_dom:
            c = LinkClass.NVLINK_DOMAIN
            bw = p.bandwidth.get(c, self.dom_bw)
            opts.append((collective_time(p, collective, n, m, 0, 0, 0, c, bw,
                                         nvls_bw=self.dom_nvls, nvls_lat=self.dom_nvls_lat,
                                         fastest=True), c))
        # over the network, packing l ranks a host
        first = None
        for c in NETWORK_CLASSES:
            if self.scope_cap.get(c, 0) >= n:
                first = c
                break
        if first is None:
            first = LinkClass.NET_FAR
        for c in NETWORK_CLASSES:
            if c < first:
                continue
            b_net = p.bandwidth.get(c, self.best_net / p.oversubscription.get(c, 1.0))
            if collective == "p2p":
                opts.append((collective_time(p, "p2p", 2, m, 2, 1, 1, LinkClass.SELF, 0.0, c,
                                             b_net), c))
                continue
            for hw, gpus in self.sets:
                for l in range(1, min(len(gpus), n, l_cap or n) + 1):
                    h = -(-n // l)
                    if h < 2:
                        continue
                    ci, bi = self.best_intra(hw, gpus, l)
                    hc = p.hw(hw)
                    nvls = hc.nvls_bw if ci is LinkClass.NVLINK else 0.0
                    t = collective_time(p, collective, n, m, h, l, l, ci, bi, c, b_net,
                                        nvls_bw=nvls, nvls_lat=hc.nvls_lat, fastest=True)
                    opts.append((t, max(c, ci)))
            # several multi-node NVLink domains (NVL72 racks) as the units
            dc = LinkClass.NVLINK_DOMAIN
            for l in range(2, min(self.unit_max, n) + 1):
                h = -(-n // l)
                if h < 2:
                    continue
                t = collective_time(p, collective, n, m, h, l, l, dc,
                                    p.bandwidth.get(dc, self.dom_bw), c, b_net,
                                    nvls_bw=self.dom_nvls, nvls_lat=self.dom_nvls_lat,
                                    fastest=True)
                opts.append((t, c))
        if not opts:  # no free GPU anywhere (a state with nothing free)
            opts.append((math.inf, LinkClass.NET_FAR))
        t, c = min(opts, key=lambda x: (x[0], x[1]))
        hit = (c, t)
        self._cache[key] = hit
        return hit


#: dimensions each counted group kind spans, per rank generator (dense
#: kinds and expert kinds number ranks differently, see slurmtopo.job.groups)
_DENSE_DIMS = {"tp": ("tp",), "cp": ("cp",), "pp": ("pp",), "dp": ("dp",), "dp-cp": ("dp", "cp")}
_EXPERT_DIMS = {"ep": ("ep",), "expert-tp": ("etp",), "expert-dp": ("edp",)}


def joint_bound(base: "LowerBound", p: CostParams, req: JobRequest, groups,
                calls: List[StepCall]) -> float:
    """The cheapest assignment of the step's kinds to three scopes (inside
    one node; across nodes inside one NVLink domain; over the network),
    each kind priced as the sum of its calls at the cost model's optimum
    for that scope, in which the kinds kept inside one node span at most a
    node's GPUs and those kept inside a node or a domain at most a
    domain's, per rank generator: if TP of 8 and DP of 2 each stay inside
    one node, so does their product of 16 ranks, which no 8-GPU node
    holds. Calls on a part of a kind's groups (HSDP's shard and replicate
    groups) are priced at their own best, whatever the scope."""
    lay = req.layout
    off_node = copy.copy(base)
    off_node.node_max = 1
    off_node._cache = {}
    net_only = copy.copy(off_node)
    net_only.dom_max = 0
    net_only._cache = {}
    sizes = {"tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "dp": lay.dp, "ep": lay.ep,
             "etp": lay.expert_tp,
             "edp": lay.expert_dp if lay.ep > 1 or lay.expert_tp != lay.tp else 1}
    whole = [c for c in calls if c.part[0] == "all"]
    fixed = sum(c.calls * base.best(len(g[0]), c.collective, call_bytes(c, p, req), len(g))[1]
                for c in calls if c.part[0] != "all"
                for g in [_parts(groups[c.kind], c)] if len(g[0]) > 1)
    kinds = list(dict.fromkeys(c.kind for c in whole if len(groups[c.kind][0]) > 1))
    scopes = (base, off_node, net_only)
    node_cap = max(base.node_max, 1)
    dom_cap = max(base.node_max, base.dom_max, 1)
    cache: Dict[Tuple[str, int, int], float] = {}

    def cost(k: str, level: int, l_cap: int) -> float:
        key = (k, level, l_cap)
        hit = cache.get(key)
        if hit is None:
            n, count = len(groups[k][0]), len(groups[k])
            hit = cache[key] = sum(
                c.calls * scopes[level].best(n, c.collective, call_bytes(c, p, req), count,
                                             l_cap)[1]
                for c in whole if c.kind == k)
        return hit

    def fits(assign) -> bool:
        for dims_of in (_DENSE_DIMS, _EXPERT_DIMS):
            for level, cap in ((0, node_cap), (1, dom_cap)):
                dims = set()
                for k, lv in assign.items():
                    if k in dims_of and lv <= level:
                        dims.update(dims_of[k])
                if math.prod(sizes[d] for d in dims) > cap:
                    return False
        return True

    # ranks a host a kind off the node may have: powers of two up to a node
    caps = [c for c in (1 << i for i in range(node_cap.bit_length())) if c <= node_cap]

    best = math.inf
    for levels in itertools.product((0, 1, 2), repeat=len(kinds)):
        assign = dict(zip(kinds, levels))
        if not fits(assign):
            continue
        inner = sum(cost(k, 0, 0) for k, lv in assign.items() if lv == 0)
        if inner >= best:
            continue
        # a host holds the ranks of the kinds kept inside it (their full
        # size) times those of every kind off the node (l of its ranks a
        # host): with TP 8 in every node a DP group has one rank a host,
        # and TP and DP both split 4+4 would need 16 ranks a host
        off = [k for k, lv in assign.items() if lv > 0]
        for ls in itertools.product(caps, repeat=len(off)):
            if not _host_holds(assign, dict(zip(off, ls)), sizes, node_cap):
                continue
            total = inner + sum(cost(k, assign[k], l) for k, l in zip(off, ls))
            if total < best:
                best = total
    return fixed + (0.0 if not kinds else best)


def _host_holds(assign, ls, sizes, node_cap: int) -> bool:
    """Can one host hold the ranks this assignment puts on it: every dim
    of the kinds kept inside a node whole, and ``l`` ranks of each kind
    off the node (``ls``), of which the dims already whole on the host
    give a fixed share (a dp-cp group with cp inside the node has cp of
    its ranks on every host it touches)? Per rank generator; kinds off the
    node sharing dims are counted by the largest of them, never twice."""
    for dims_of in (_DENSE_DIMS, _EXPERT_DIMS):
        held = set()
        for k, lv in assign.items():
            if lv == 0 and k in dims_of:
                held.update(dims_of[k])
        ranks = math.prod(sizes[d] for d in held)
        clusters: List[Tuple[set, float]] = []
        for k, l in ls.items():
            if k not in dims_of:
                continue
            whole = math.prod(sizes[d] for d in set(dims_of[k]) & held)
            if l < whole:  # the held dims alone put that many of its ranks there
                return False
            free = set(dims_of[k]) - held
            factor = l / whole
            merged = [(dims, f) for dims, f in clusters if dims & free]
            clusters = [(dims, f) for dims, f in clusters if not dims & free]
            for dims, f in merged:
                free |= dims
                factor = max(factor, f)
            clusters.append((free, factor))
        for _, f in clusters:
            ranks *= f
        if ranks > node_cap + 1e-9:
            return False
    return True


def _parts(gl, call: StepCall):
    return subgroups(gl, call.part)


def lower_bound(inv: Inventory, req: JobRequest, params: Optional[CostParams] = None,
                state=None) -> CostReport:
    """What no placement of ``req`` can beat under the same parameters.

    Per kind (``kinds``): every group on the fastest link class its size
    could possibly use: inside one node's best GPUs if it fits a node,
    inside an NVLink domain if it fits one, else over the smallest switch
    scope that holds that many GPUs, packing as many ranks per host as the
    fastest option wants, with the best NIC share; a scope counts only when
    every group of the kind can have one (18 TP groups of 8 and 17 free
    nodes: the slowest TP group crosses a node; a domain's scope counts the
    groups that nodes outside every domain hold too). ``alone_s`` is the
    step (:func:`slurmtopo.cost.step.step_calls`, every call on its kind's
    best) with each kind alone; ``comm_s`` is tighter: the kinds
    *jointly* (:func:`joint_bound`: two kinds cannot both stay inside a node
    when their product of ranks exceeds it). ``step_time_s`` is what a
    placement's step (:func:`slurmtopo.cost.step.price_step`) is compared
    with: ``comm_s`` when the job describes no model (the step is its
    communication), else the whole step's bound (:func:`whole_bound`:
    compute at the fastest GPUs that hold the job, every call at its best
    and hidden as the compute allows). Given the cluster ``state``, only
    the free GPUs of usable nodes count (the largest free set of a node,
    the free GPUs of a domain or under a switch, the GPU models free), so
    the bound describes this job on this cluster now rather than on an
    idle one.
    """
    p = params if params is not None else cost_params(inv)
    if req.workload is not None:
        p = p.for_version(req.workload.nccl_version)
    lay = req.layout
    groups = build_groups(lay)
    lb = LowerBound(inv, p, state)
    kinds: Dict[str, GroupCost] = {}
    for kind, gl in groups.items():
        size = len(gl[0])
        coll = COLLECTIVES.get(kind, "all-reduce")
        m = p.message(kind, req)
        c, t = lb.best(size, coll, m, len(gl))
        kinds[kind] = GroupCost(kind, len(gl), size, coll, m, c, t, 0)
    calls = [c for c in step_calls(lay, req.workload) if c.kind in groups]
    counted = tuple(dict.fromkeys(c.kind for c in calls if len(groups[c.kind][0]) > 1))
    alone = 0.0
    priced: List[CallPrice] = []
    for c in calls:
        gl = groups[c.kind] if c.part[0] == "all" else subgroups(groups[c.kind], c.part)
        if len(gl[0]) > 1:
            cls, t = lb.best(len(gl[0]), c.collective, call_bytes(c, p, req), len(gl))
            alone += c.calls * t
            priced.append(CallPrice(c, t, t * c.calls, t * c.calls, cls, len(gl[0]), len(gl)))
    comm = max(alone, joint_bound(lb, p, req, groups, calls))
    step = comm
    if req.workload is not None and req.workload.model is not None:
        step = whole_bound(inv, req, p, priced, state)
    return CostReport(kinds=kinds, step_time_s=step, warnings=[], counted=counted,
                      alone_s=alone, comm_s=comm)


def whole_bound(inv: Inventory, req: JobRequest, p: CostParams, priced, state=None) -> float:
    """The whole step no placement of ``req`` beats: every call at its
    best (``priced``: the bound's calls), composed with the compute
    (:func:`slurmtopo.cost.whole.compose_at`) at each GPU the job could run
    at, the least of them. A step runs at its slowest GPU
    (:func:`slurmtopo.cost.compute.placement_gpu`, the lowest bf16 peak), so
    a GPU model counts when the GPUs at least as fast (free ones, given a
    state) hold the job; the composed step grows with every call's seconds
    at a given GPU, so no placement at that GPU is faster."""
    w = req.workload
    model = w.model
    table = getattr(p, "gpu_compute", ())
    figs = [(gpu_figures(m, mib, table)[0], k)
            for (m, mib), k in inventory_stats(inv, state).gpu_models]
    world = req.layout.world
    best = math.inf
    for g, _ in figs:
        peak = g.peak("bf16")[0]
        if sum(k for f, k in figs if f.peak("bf16")[0] >= peak) < world:
            continue
        best = min(best, compose_at(g, req.layout, w, model, priced).time_s)
    if best == math.inf:  # no GPU model known to hold it: the fastest
        g = max((f for f, _ in figs), key=lambda f: f.peak("bf16")[0], default=None)
        if g is None:
            g = gpu_figures("", None, table)[0]
        best = compose_at(g, req.layout, w, model, priced).time_s
    return best
