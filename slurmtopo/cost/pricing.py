"""Pricing a placement: :func:`evaluate` prices one collective of every
group kind over the ranks' hosts and GPUs (per-rank tables built once, so
32,768 ranks cost a few hundredths of a second) and names the groups whose
link is slower than their size allows."""
from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from slurmtopo.cost.bound import LowerBound
from slurmtopo.cost.collectives import COLLECTIVES, counted_kinds, flat_time, hier_time
from slurmtopo.cost.params import CostParams, cost_params
from slurmtopo.cost.report import CostReport, GroupCost
from slurmtopo.groups import build_groups, span_of
from slurmtopo.links import LinkClass
from slurmtopo.model import Inventory, Node, Placement
from slurmtopo.request import JobRequest
from slurmtopo.topology import network_view

class HostSetClasses:
    """Network class of a set of hosts, cached by the set of their leaves."""

    def __init__(self, inv: Inventory):
        self.inv = inv
        self.view = network_view(inv.fabric)
        self._cache: Dict[frozenset, LinkClass] = {}

    def hosts_class(self, nodes: Sequence[Node]) -> LinkClass:
        if len(nodes) <= 1:
            return LinkClass.SELF
        dom = nodes[0].nvlink_domain
        if dom is not None and all(n.nvlink_domain == dom for n in nodes):
            return LinkClass.NVLINK_DOMAIN
        view = self.view
        if view.flat:
            return LinkClass.NET_LEAF
        leaves = {}
        for n in nodes:
            leaf = view.leaf.get(n.name)
            if leaf is None:
                return LinkClass.NET_FAR
            leaves.setdefault(leaf, n.name)
        if len(leaves) == 1:
            return LinkClass.NET_LEAF
        key = frozenset(leaves)
        hit = self._cache.get(key)
        if hit is None:
            common = None
            for host in leaves.values():
                anc = view.ancestors.get(host, {})
                common = set(anc) if common is None else common & set(anc)
            if not common:
                hit = LinkClass.NET_FAR
            else:
                anc0 = view.ancestors[next(iter(leaves.values()))]
                hit = LinkClass.network(min(anc0[s] for s in common))
            self._cache[key] = hit
        return hit


def _net_gbps(p: CostParams, cls: LinkClass, shares: Iterable[float]) -> float:
    if cls in p.bandwidth:
        return p.bandwidth[cls]
    return min(shares) / p.oversubscription.get(cls, 1.0)


class PlacementPricer:
    """What :func:`evaluate` needs per rank, computed once per placement
    (host index, GPU, network share), and per host (hardware costs, leaf,
    NVLink domain), so that pricing a group is a few list look-ups: 32,768
    ranks in a few hundredths of a second."""

    def __init__(self, inv: Inventory, p: CostParams, net: HostSetClasses, placement: Placement):
        self.p = p
        self.net = net
        hidx: Dict[str, int] = {}
        hosts: List[str] = []
        rank_h: List[int] = []
        rank_g: List[int] = []
        for s in placement.slots:
            i = hidx.get(s.host)
            if i is None:
                i = hidx[s.host] = len(hosts)
                hosts.append(s.host)
            rank_h.append(i)
            rank_g.append(s.gpu)
        self.nodes = [inv.nodes[h] for h in hosts]
        self.hcs = [p.hw(n.hardware) for n in self.nodes]
        self.rank_h = rank_h
        self.rank_g = rank_g
        self.rank_share = [self.hcs[h].net[g] for h, g in zip(rank_h, rank_g)]
        view = net.view
        self.dom = [n.nvlink_domain for n in self.nodes]
        self.leaf = [None if view.flat else view.leaf.get(n.name) for n in self.nodes]
        self._pair: Dict[Tuple[int, int], LinkClass] = {}

    def hosts_class(self, hs) -> LinkClass:
        """Network class (or NVLINK_DOMAIN) of the distinct host indices ``hs``."""
        dom = self.dom
        d0 = dom[hs[0]]
        if d0 is not None and all(dom[h] == d0 for h in hs):
            return LinkClass.NVLINK_DOMAIN
        if len(hs) == 2:
            key = (hs[0], hs[1])
            hit = self._pair.get(key)
            if hit is None:
                hit = self._pair[key] = self.net.hosts_class([self.nodes[h] for h in hs])
            return hit
        return self.net.hosts_class([self.nodes[h] for h in hs])

    def cost(self, ranks: Sequence[int], collective: str, m: int) -> Tuple[LinkClass, float]:
        """(slowest class, seconds) of one collective over ``ranks``."""
        p = self.p
        rank_h, rank_g, hcs = self.rank_h, self.rank_g, self.hcs
        if collective == "p2p":
            return self.p2p_pricer(m)(ranks)
        hs = [rank_h[r] for r in ranks]
        h0 = hs[0]
        n = len(ranks)
        if hs.count(h0) == n:  # one host
            cls, bw = hcs[h0].intra(tuple(sorted([rank_g[r] for r in ranks])))
            return cls, flat_time(collective, n, m, p.alpha[cls], bw)
        by_host: Dict[int, List[int]] = {}
        for r, h in zip(ranks, hs):
            lst = by_host.get(h)
            if lst is None:
                by_host[h] = [rank_g[r]]
            else:
                lst.append(rank_g[r])
        net_cls = self.hosts_class(list(by_host))
        in_cls, in_bw = LinkClass.SELF, math.inf
        l_max, l_min = 0, n
        for h, gpus in by_host.items():
            k = len(gpus)
            if k > 1:
                c, b = hcs[h].intra(tuple(sorted(gpus)))
                if c > in_cls:
                    in_cls = c
                if b < in_bw:
                    in_bw = b
            if k > l_max:
                l_max = k
            if k < l_min:
                l_min = k
        slowest = max(net_cls, in_cls)
        if net_cls is LinkClass.NVLINK_DOMAIN:
            # one NVLink fabric: a flat ring over all ranks
            bw = min(min(hcs[h].class_bw(net_cls) for h in by_host), in_bw)
            return slowest, flat_time(collective, n, m, p.alpha[slowest], bw)
        if net_cls in p.bandwidth:
            net_bw = p.bandwidth[net_cls]
        else:
            share = self.rank_share
            net_bw = min([share[r] for r in ranks]) / p.oversubscription.get(net_cls, 1.0)
        t = hier_time(collective, n, len(by_host), l_max, l_min, m, p.alpha[in_cls],
                      in_bw if in_bw != math.inf else 1.0, p.alpha[net_cls], net_bw)
        return slowest, t

    def p2p_pricer(self, m: int):
        """A function pricing one pipeline chain for a message of ``m``
        bytes: hop costs of a GPU pair inside a host, and of a host pair,
        are computed once per distinct pair."""
        p = self.p
        rank_h, rank_g, hcs, share = self.rank_h, self.rank_g, self.hcs, self.rank_share
        inside: Dict[Tuple[int, int, int], Tuple[LinkClass, float]] = {}
        across: Dict[Tuple[int, int], Tuple[LinkClass, float, float]] = {}
        alpha, over, fixed = p.alpha, p.oversubscription, p.bandwidth
        dom_cls = LinkClass.NVLINK_DOMAIN

        def chain(ranks: Sequence[int]) -> Tuple[LinkClass, float]:
            worst_c, worst_t = LinkClass.SELF, 0.0
            prev = ranks[0]
            for r in ranks[1:]:
                ha, hb = rank_h[prev], rank_h[r]
                if ha == hb:
                    hc = hcs[ha]
                    key = (id(hc), rank_g[prev], rank_g[r])
                    hit = inside.get(key)
                    if hit is None:
                        cls, bw = hc.pair(rank_g[prev], rank_g[r])
                        hit = inside[key] = (cls, alpha[cls] + m / (bw * 1e9))
                    cls, t = hit
                else:
                    hit = across.get((ha, hb))
                    if hit is None:
                        cls = self.hosts_class((ha, hb))
                        if cls is dom_cls:
                            bw = min(hcs[ha].class_bw(cls), hcs[hb].class_bw(cls))
                            hit = (cls, alpha[cls] + m / (bw * 1e9), 0.0)
                        elif cls in fixed:
                            hit = (cls, alpha[cls] + m / (fixed[cls] * 1e9), 0.0)
                        else:
                            hit = (cls, alpha[cls], m * over.get(cls, 1.0) / 1e9)
                        across[(ha, hb)] = hit
                    cls, t, per = hit
                    if per:
                        t += per / min(share[prev], share[r])
                if t > worst_t:
                    worst_t = t
                if cls > worst_c:
                    worst_c = cls
                prev = r
            return worst_c, worst_t

        return chain


_PHRASE = {
    LinkClass.NVLINK_DOMAIN: "spans nodes over multi-node NVLink",
    LinkClass.PIX: "runs over PCIe through one switch (PIX)",
    LinkClass.PXB: "crosses PCIe switches (PXB)",
    LinkClass.PHB: "goes through a PCIe host bridge (PHB)",
    LinkClass.NODE: "crosses PCIe host bridges inside a NUMA node (NODE)",
    LinkClass.SYS: "crosses PCIe between NUMA nodes (SYS)",
    LinkClass.NET_LEAF: "crosses the network (same leaf switch)",
    LinkClass.NET_L1: "crosses the network through a spine switch",
    LinkClass.NET_L2: "crosses the network through a core switch (2 levels up)",
    LinkClass.NET_L3: "crosses the network 3 or more switch levels up",
    LinkClass.NET_FAR: "crosses the network between hosts with no common switch",
}

_HEAVY = ("tp", "expert-tp", "cp", "ep", "dp", "dp-cp", "expert-dp", "pp")


def evaluate(inv: Inventory, placement: Placement, req: JobRequest,
             params: Optional[CostParams] = None, step_only: bool = False) -> CostReport:
    """Price one collective of every group kind of ``placement``.

    Per kind: the slowest link any group crosses, and the time of the
    slowest group. ``warnings`` name the worst group of each traffic-heavy
    kind whose link is slower than the best its size allows on this
    cluster (e.g. "TP group 3 crosses PCIe between NUMA nodes (SYS)").
    ``step_only``: price only the kinds counted in the step time, no
    warnings (what the planner needs to compare placements).
    """
    p = params if params is not None else cost_params(inv)
    groups = placement.groups if placement.groups else build_groups(req.layout)
    counted = counted_kinds(groups, req.layout.cp)
    pricer = PlacementPricer(inv, p, HostSetClasses(inv), placement)
    priced: Dict[str, Tuple[list, str, int]] = {}
    seen: Dict[str, Tuple[float, int, LinkClass, List[int]]] = {}
    kinds: Dict[str, GroupCost] = {}
    warnings: List[str] = []
    warned: List[list] = []
    lb = None
    for kind, gl in groups.items():
        if step_only and kind not in counted:
            continue
        size = len(gl[0]) if gl else 0
        coll = COLLECTIVES.get(kind, "all-reduce")
        m = p.message(kind, req)
        if size <= 1:
            kinds[kind] = GroupCost(kind, len(gl), size, coll, m, LinkClass.SELF, 0.0, 0)
            continue
        same = next((k for k, (g2, c2, m2) in priced.items()
                     if c2 == coll and m2 == m and g2 == gl), None)
        if same is not None:  # dp-cp is dp when cp == 1, tp-dp-cp is tp-dp...
            worst_t, worst_i, slowest, at_slowest = seen[same]
        else:
            worst_t, worst_i, slowest = -1.0, 0, LinkClass.SELF
            at_slowest: List[int] = []
            price = pricer.p2p_pricer(m) if coll == "p2p" else None
            for i, g in enumerate(gl):
                cls, t = price(g) if price is not None else pricer.cost(g, coll, m)
                if t > worst_t:
                    worst_t, worst_i = t, i
                if cls > slowest:
                    slowest = cls
                    at_slowest = [i]
                elif cls == slowest:
                    at_slowest.append(i)
            priced[kind] = (gl, coll, m)
            seen[kind] = (worst_t, worst_i, slowest, at_slowest)
        kinds[kind] = GroupCost(kind, len(gl), size, coll, m, slowest, worst_t, worst_i)
        if kind in _HEAVY and slowest > LinkClass.NVLINK and not step_only:
            if lb is None:
                lb = LowerBound(inv, p)
            # compare with the best for the block the group sits in (a DP
            # group of 2 with TP=8 inside spans 16 ranks: two nodes)
            span = span_of(gl, None, req.layout.world)
            best_cls, _ = lb.best(span, coll, m)
            # dp-cp is dp when cp == 1 (and tp-cp is tp ...): say it once
            if slowest > best_cls and not any(gl == w for w in warned):
                warned.append(gl)
                more = f" (and {len(at_slowest) - 1} more)" if len(at_slowest) > 1 else ""
                what = f"a group of {size}" if span == size else f"its block of {span} ranks"
                warnings.append(f"{kind.upper()} group {at_slowest[0]}{more} {_PHRASE[slowest]}; "
                                f"{what} could use {best_cls.label}")
    if not step_only and len(placement.hosts) > 1 and any(hc.no_nics for hc in pricer.hcs):
        warnings.append(f"some nodes list no compute NIC: their network share assumes "
                        f"{p.default_nic_gbit:g} Gbit/s a node (cost.default_nic_gbit)")
    step = sum(kinds[k].time_s for k in counted)
    return CostReport(kinds=kinds, step_time_s=step, warnings=warnings, counted=counted)
