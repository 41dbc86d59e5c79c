"""Groups reduced to shapes: what one group's collective time depends on
(hosts, ranks a host, classes and bandwidths, NVLS), computed per host
rather than per rank (:class:`PlacementPricer`), and kept with the
placement (:func:`group_shapes`) so that the step (:mod:`slurmtopo.cost.step`)
and the per-kind report (:func:`slurmtopo.cost.pricing.evaluate`) share them.

Speed is part of the contract (the planner prices many proposals, the
preview prices the plan and Slurm's default, and issue 13 asks for 32,768
ranks under 0.1 s), so the work is per host, not per rank: each group is
reduced to a :data:`Shape` with C-level passes over its ranks, and
everything that depends only on hosts is computed once per placement.
tests/test_cost_reference.py holds a plain per-rank reference that random
placements must price alike."""
from __future__ import annotations

import math
from collections import Counter
from operator import attrgetter, getitem, itemgetter
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from slurmtopo.cost.collectives import collective_time
from slurmtopo.cost.defaults import NET_KIND_ORDER
from slurmtopo.cost.hardware import HardwareFigures
from slurmtopo.cost.params import CostParams
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Inventory, Placement
from slurmtopo.inventory.topology import (cross_rail_class, group_rails, misaligned, network_view,
                                          rail_of, rail_optimised)

#: What one group's collective time depends on, whatever the collective
#: and message: (slowest class, NVLink domains, most and fewest ranks a
#: domain, class and GB/s inside domains, network class and GB/s a rank,
#: GB/s and seconds of latency of an NVLS all-reduce of 8 ranks, the
#: network's kind, whether its switches reduce (SHARP), the GPUs' oldest
#: generation, the platform whose network plugin tunes NCCL or "").
#: A domain is a host, or the hosts of one multi-node NVLink domain (an
#: NVL72 rack) the group spans. ``domains`` 0: one flat ring on the inside
#: class (a single host, or one NVLink domain), NVLS possible when its GB/s
#: is not 0.
Shape = Tuple[LinkClass, int, int, int, LinkClass, float, LinkClass, float, float, float, str,
              bool, int, str]


def shape_time(p: CostParams, shape: Shape, collective: str, n: int, m: int) -> float:
    """Seconds of one ``collective`` of ``m`` bytes over ``n`` ranks of ``shape``."""
    (_, hosts, l_max, l_min, in_cls, in_bw, net_cls, net_bw, nvls_bw, nvls_lat, kind,
     sharp, gen, platform) = shape
    return collective_time(p, collective, n, m, hosts, l_max, l_min, in_cls, in_bw, net_cls,
                           net_bw, nvls_bw, nvls_lat, kind, sharp, gen, platform)


class PlacementPricer:
    """What :func:`evaluate` needs, computed once per placement: per rank
    its host index, GPU and network share; per host its hardware figures,
    leaf switch and NVLink domain.

    Pricing a group is then a few C-level passes over its ranks
    (``itemgetter``, ``Counter``, ``min``) and Python work per *host*, not
    per rank. What depends only on hosts is memoised: the network class of
    a set of leaf switches, a host's ring over all the job's GPUs there, a
    pipeline chain's cost by its host sequence. That keeps the full report
    at 32,768 ranks on a fragmented placement to a few hundredths of a
    second.
    """

    def __init__(self, inv: Inventory, p: CostParams, placement: Placement):
        self.p = p
        view = network_view(inv.fabric)
        self.view = view
        slots = placement.slots
        rank_host = list(map(attrgetter("host"), slots))
        hosts = list(dict.fromkeys(rank_host))
        hidx = {h: i for i, h in enumerate(hosts)}
        self.rank_h = rank_h = list(map(hidx.__getitem__, rank_host))
        self.rank_g = rank_g = list(map(attrgetter("gpu"), slots))
        self.nodes = nodes = list(map(inv.nodes.__getitem__, hosts))
        figures: Dict[int, HardwareFigures] = {}  # node types share Hardware objects
        hcs = []
        for n in nodes:
            hc = figures.get(id(n.hardware))
            if hc is None:
                hc = figures[id(n.hardware)] = p.hw(n.hardware)
            hcs.append(hc)
        self.hcs = hcs
        nets = [hc.net for hc in hcs]
        self.rank_share = list(map(getitem, map(nets.__getitem__, rank_h), rank_g))
        self.dom = [n.nvlink_domain for n in nodes]
        self.any_dom = any(d is not None for d in self.dom)
        #: leaf switch per host; None: the fabric does not list it
        self.leaf = [None] * len(hosts) if view.flat else list(map(view.leaf.get, hosts))
        self._leaf_host: Dict[str, str] = {}
        for h, leaf in zip(hosts, self.leaf):
            if leaf is not None and leaf not in self._leaf_host:
                self._leaf_host[leaf] = h
        #: ranks the job has on each host: a group holding all of them
        #: rings over the same GPUs as every other such group, priced once
        counts = Counter(rank_h)
        self.host_n = [counts[i] for i in range(len(hosts))]
        self._host_ring: List[Optional[Tuple[LinkClass, float]]] = [None] * len(hosts)
        #: hosts whose GPUs all get the same network share: a hop between
        #: two such hosts costs the same whichever GPUs it joins
        same_share = {id(hc): len(set(hc.net)) == 1 for hc in figures.values()}
        self.uniform = [same_share[id(hc)] for hc in hcs]
        self._leaves: Dict[frozenset, LinkClass] = {}
        self._leaf_pair: Dict[Tuple[Optional[str], Optional[str]], LinkClass] = {}
        self._by_level: Dict[str, List[frozenset]] = {}
        #: switches that reduce in the network (SHARP), and whether the
        #: switches joining a set of leaves all do
        self.sharp = frozenset(s.name for s in inv.fabric.switches if s.sharp)
        self._sharp_of: Dict[frozenset, bool] = {}
        #: a rail-optimised fabric under the job's hosts (the inventory's
        #: wiring, :func:`slurmtopo.inventory.topology.rail_optimised`): a group whose
        #: hosts use different rails crosses them (``_cross_rail``)
        self.slots = slots
        self.rails = len(hosts) > 1 and bool(rail_optimised(inv, hosts))
        self.rank_rail = list(map(rail_of, slots)) if self.rails else []
        self._cross: Dict[int, LinkClass] = {}
        self._hosts = hosts
        #: shapes of the step's groups by (kind, part) (:func:`group_shapes`)
        self.keyed_shapes: Dict[object, List[Shape]] = {}
        #: the step's calls priced, by (kind, part, collective, bytes): the
        #: planner's choice and the report price the same placement's step
        self.priced_calls: Dict[object, Tuple[float, LinkClass]] = {}

    # -- the network class of a set of hosts ---------------------------------

    def hosts_class(self, hs: Sequence[int]) -> LinkClass:
        """Network class (or NVLINK_DOMAIN) of the distinct host indices
        ``hs`` (two or more)."""
        if len(hs) == 2:
            return self.pair_class(hs[0], hs[1])
        if self.any_dom:
            doms = set(itemgetter(*hs)(self.dom))
            if len(doms) == 1 and None not in doms:
                return LinkClass.NVLINK_DOMAIN
        if self.view.flat:
            return LinkClass.NET_LEAF
        leaves = frozenset(itemgetter(*hs)(self.leaf))
        hit = self._leaves.get(leaves)
        if hit is None:
            hit = self._leaves[leaves] = self._leaves_class(leaves)
        return hit

    def pair_class(self, a: int, b: int) -> LinkClass:
        """:meth:`hosts_class` of two different hosts, memoised per leaf pair."""
        if self.any_dom:
            d = self.dom[a]
            if d is not None and d == self.dom[b]:
                return LinkClass.NVLINK_DOMAIN
        key = (self.leaf[a], self.leaf[b])
        hit = self._leaf_pair.get(key)
        if hit is None:
            hit = self._leaf_pair[key] = (LinkClass.NET_LEAF if self.view.flat
                                          else self._leaves_class(frozenset(key)))
        return hit

    def _switches_by_level(self, leaf: str) -> List[frozenset]:
        """The switches above ``leaf`` (through a host under it), by level."""
        hit = self._by_level.get(leaf)
        if hit is None:
            anc = self.view.ancestors.get(self._leaf_host[leaf], {})
            top = max(anc.values(), default=-1)
            hit = [frozenset(sw for sw, lvl in anc.items() if lvl == level)
                   for level in range(top + 1)]
            self._by_level[leaf] = hit
        return hit

    def _leaves_class(self, leaves: frozenset) -> LinkClass:
        """The lowest level at which every leaf of ``leaves`` meets."""
        if None in leaves:
            return LinkClass.NET_FAR
        if len(leaves) == 1:
            return LinkClass.NET_LEAF
        tables = [self._switches_by_level(leaf) for leaf in leaves]
        for level in range(min(map(len, tables))):
            common = tables[0][level]
            for t in tables[1:]:
                common = common & t[level]
                if not common:
                    break
            if common:
                return LinkClass.network(level)
        return LinkClass.NET_FAR

    def sharp_ok(self, hosts) -> bool:
        """Do the switches joining these hosts (their leaves and the level
        where those meet) all reduce in the network (SHARP)?"""
        if self.view.flat:
            return False
        leaves = frozenset(self.leaf[h] for h in hosts)
        hit = self._sharp_of.get(leaves)
        if hit is None:
            hit = None not in leaves and leaves <= self.sharp
            if hit and len(leaves) > 1:
                cls = self._leaves_class(leaves)
                if cls is LinkClass.NET_FAR:
                    hit = False
                else:
                    level = int(cls) - int(LinkClass.NET_LEAF)
                    tables = [self._switches_by_level(leaf) for leaf in leaves]
                    hit = all(any(sw in self.sharp for sw in t[lv])
                              for t in tables for lv in range(1, level + 1) if lv < len(t))
            self._sharp_of[leaves] = hit
        return hit

    # -- rails ---------------------------------------------------------------

    def cross_rail(self, h: int) -> LinkClass:
        """The class at which different rails of host ``h`` meet."""
        hit = self._cross.get(h)
        if hit is None:
            hit = self._cross[h] = cross_rail_class(self.view, self._hosts[h])
        return hit

    def rail_class(self, ranks: Sequence[int], hosts: Iterable[int], net_cls: LinkClass
                   ) -> LinkClass:
        """``net_cls``, or where rails meet when the group's hosts use
        different sets of rails (a rank reaches the other rails of its host
        through their GPUs, PXN, but only those of its communicator): NCCL
        then pairs NICs of different rails, through the switches joining
        them."""
        if not self.rails or misaligned(group_rails(self.slots, ranks)) is None:
            return net_cls
        return max(net_cls, max(map(self.cross_rail, hosts)))

    # -- rings inside hosts --------------------------------------------------

    def _ring_of(self, h: int, gpus: Sequence[int]) -> Tuple[LinkClass, float]:
        """(class, GB/s) of a ring over ``gpus`` of host ``h``; memoised per
        host when ``gpus`` are all the job holds there."""
        if len(gpus) == self.host_n[h]:
            hit = self._host_ring[h]
            if hit is None:
                hit = self._host_ring[h] = self.hcs[h].intra(tuple(sorted(gpus)))
            return hit
        return self.hcs[h].intra(tuple(sorted(gpus)))

    # -- one group -----------------------------------------------------------

    def shaper(self, n: int):
        """A function giving the :data:`Shape` of a group of ``n`` ranks
        (its argument). Shapes repeat across groups (a TP group split 4+4
        over two hosts under one spine), so :func:`evaluate` computes each
        distinct shape's time once, and kinds with the same groups (dp and
        dp-cp when cp is 1) share the shapes whatever their messages."""
        hcs, rank_h, rank_g, rank_share = self.hcs, self.rank_h, self.rank_g, self.rank_share
        host_n, host_ring, ring_of = self.host_n, self._host_ring, self._ring_of
        network_gbps = self.p.network_gbps
        flat: Dict[Tuple[LinkClass, float], Shape] = {}
        dom_cls, self_cls, inf = LinkClass.NVLINK_DOMAIN, LinkClass.SELF, math.inf
        nvl_cls = LinkClass.NVLINK
        hosts_class, pair_class = self.hosts_class, self.pair_class
        self_shape: Shape = (self_cls, 0, 0, 0, self_cls, inf, self_cls, 0.0, 0.0, 0.0, "",
                             False, 0, "")
        dom, any_dom = self.dom, self.any_dom
        rails, rail_class = self.rails, self.rail_class

        def shape(ranks: Sequence[int]) -> Shape:
            if n < 2:
                return self_shape
            get = itemgetter(*ranks)
            hs = get(rank_h)
            h0 = hs[0]
            c0 = hs.count(h0)
            if c0 == n:  # one host: a ring inside it
                hit = host_ring[h0] if n == host_n[h0] else None
                if hit is None:
                    hit = ring_of(h0, get(rank_g))
                sh = flat.get(hit)
                if sh is None:
                    cls, bw = hit
                    hc = hcs[h0]
                    nvls = hc.nvls_bw if cls is nvl_cls else 0.0
                    sh = flat[hit] = (cls, 0, 0, 0, cls, bw, self_cls, 0.0, nvls, hc.nvls_lat,
                                      hc.net_kind, False, hc.gen, "")
                return sh
            if n <= 32:
                distinct = dict.fromkeys(hs)
                per_host = dict(zip(distinct, map(hs.count, distinct)))
            else:
                per_host = Counter(hs)
            counts = per_host.values()
            l_max = max(counts)
            in_cls, in_bw = self_cls, inf
            if l_max > 1:
                gather: Dict[int, List[int]] = {}
                for h, k in per_host.items():
                    if k == 1:
                        continue
                    hit = host_ring[h] if k == host_n[h] else None
                    if hit is None:
                        gather[h] = []
                        continue
                    c, b = hit
                    if c > in_cls:
                        in_cls = c
                    if b < in_bw:
                        in_bw = b
                if gather:  # GPUs of these hosts not priced yet: collect them
                    for r, h in zip(ranks, hs):
                        lst = gather.get(h)
                        if lst is not None:
                            lst.append(rank_g[r])
                    for h, gpus in gather.items():
                        c, b = ring_of(h, gpus)
                        if c > in_cls:
                            in_cls = c
                        if b < in_bw:
                            in_bw = b
            if len(per_host) == 2:
                net_cls = pair_class(*per_host)
            else:
                net_cls = hosts_class(list(per_host))
            if rails and net_cls is not dom_cls:
                net_cls = rail_class(ranks, per_host, net_cls)
            slowest = net_cls if net_cls > in_cls else in_cls
            if net_cls is dom_cls:
                # one NVLink fabric: a flat ring over all ranks (NVLS when
                # every tray's NVSwitch has it)
                bw = min(min(hcs[h].class_bw(net_cls) for h in per_host), in_bw)
                nvls = (min(hcs[h].nvls_bw for h in per_host) if in_cls <= nvl_cls else 0.0)
                lat = max(hcs[h].nvls_lat for h in per_host)
                kind = max((hcs[h].net_kind for h in per_host), key=NET_KIND_ORDER.__getitem__)
                gen = min(hcs[h].gen for h in per_host)
                return (slowest, 0, 0, 0, slowest, bw, self_cls, 0.0, nvls, lat, kind, False,
                        gen, "")
            net_bw = network_gbps(min(get(rank_share)), net_cls)
            kind = max((hcs[h].net_kind for h in per_host), key=NET_KIND_ORDER.__getitem__)
            sharp = self.sharp_ok(per_host) if self.sharp else False
            units = per_host
            if any_dom:
                # the hosts of one multi-node NVLink domain (an NVL72 rack)
                # are one unit: NVLink inside, the network between units
                by_dom: Dict[object, List[int]] = {}
                for h in per_host:
                    d = dom[h]
                    by_dom.setdefault(h if d is None else d, []).append(h)
                if len(by_dom) < len(per_host):
                    units = {}
                    for hosts in by_dom.values():
                        units[hosts[0]] = sum(per_host[h] for h in hosts)
                        if len(hosts) > 1:
                            b = min(hcs[h].class_bw(dom_cls) for h in hosts)
                            if dom_cls > in_cls:
                                in_cls = dom_cls
                            if b < in_bw:
                                in_bw = b
                    counts = units.values()
                    l_max = max(counts)
            # NVLSTree: NVLS inside each domain when every domain's ranks
            # share its NVSwitch fabric
            nvls = (min(hcs[h].nvls_bw for h in per_host) if nvl_cls <= in_cls <= dom_cls
                    else 0.0)
            lat = max(hcs[h].nvls_lat for h in per_host) if nvls else 0.0
            gen = min(hcs[h].gen for h in per_host)
            plats = {hcs[h].platform for h in per_host}
            platform = plats.pop() if len(plats) == 1 else ""
            return (slowest, len(units), l_max, min(counts), in_cls,
                    in_bw if in_bw != inf else 1.0, net_cls, net_bw, nvls, lat, kind, sharp,
                    gen, platform)

        return shape

    def p2p_pricer(self, m: int):
        """A function pricing one pipeline chain for a message of ``m``
        bytes. A hop's cost is computed once per GPU pair inside a host and
        once per host pair between hosts whose GPUs share the network alike
        (per rank pair otherwise); a chain over distinct such hosts costs
        what its host sequence costs, so chains through the same hosts (the
        TP ranks of one stage) are priced once."""
        p = self.p
        rank_h, rank_g, hcs, share = self.rank_h, self.rank_g, self.hcs, self.rank_share
        uniform, pair_class = self.uniform, self.pair_class
        rails, rank_rail, cross_rail = self.rails, self.rank_rail, self.cross_rail
        inside: Dict[Tuple[int, int, int], Tuple[LinkClass, float]] = {}
        across: Dict[Tuple[int, int, bool], Tuple[LinkClass, float, float]] = {}
        by_hosts: Dict[tuple, Tuple[LinkClass, float]] = {}
        alpha, over, fixed, eff, launch = (p.alpha, p.oversubscription, p.bandwidth,
                                           p.efficiency, p.launch)
        dom_cls, self_cls = LinkClass.NVLINK_DOMAIN, LinkClass.SELF

        def hops(ranks: Sequence[int]) -> Tuple[LinkClass, float]:
            worst_c, worst_t = self_cls, 0.0
            prev = ranks[0]
            for r in ranks[1:]:
                ha, hb = rank_h[prev], rank_h[r]
                if ha == hb:
                    hc = hcs[ha]
                    key = (id(hc), rank_g[prev], rank_g[r])
                    hit = inside.get(key)
                    if hit is None:
                        cls, bw = hc.pair(rank_g[prev], rank_g[r])
                        hit = inside[key] = (cls, launch + alpha[cls]
                                             + m / (eff.get(cls, 1.0) * bw * 1e9))
                    cls, t = hit
                else:
                    # a send between different rails of a rail-optimised
                    # fabric goes through the switches joining them (no
                    # other rank of a pipeline pair to relay it, PXN)
                    off = rails and rank_rail[prev] != rank_rail[r]
                    hit = across.get((ha, hb, off))
                    if hit is None:
                        cls = pair_class(ha, hb)
                        if off and cls is not dom_cls:
                            cls = max(cls, cross_rail(ha), cross_rail(hb))
                        e = eff.get(cls, 1.0)
                        if cls is dom_cls:
                            bw = min(hcs[ha].class_bw(cls), hcs[hb].class_bw(cls))
                            hit = (cls, launch + alpha[cls] + m / (e * bw * 1e9), 0.0)
                        elif cls in fixed:
                            hit = (cls, launch + alpha[cls] + m / (e * fixed[cls] * 1e9), 0.0)
                        else:
                            hit = (cls, launch + alpha[cls], m * over.get(cls, 1.0) / (e * 1e9))
                        across[(ha, hb, off)] = hit
                    cls, t, per = hit
                    if per:
                        t += per / min(share[prev], share[r])
                if t > worst_t:
                    worst_t = t
                if cls > worst_c:
                    worst_c = cls
                prev = r
            return worst_c, worst_t

        def chain(ranks: Sequence[int]) -> Tuple[LinkClass, float]:
            if len(ranks) < 2:
                return self_cls, 0.0
            hs = itemgetter(*ranks)(rank_h)
            if rails:  # a chain's cost depends on its ranks' rails as well
                hs = hs + tuple(rank_rail[r] == rank_rail[q] for q, r in zip(ranks, ranks[1:]))
            hit = by_hosts.get(hs)  # only host-determined chains are kept
            if hit is None:
                hit = hops(ranks)
                hosts = hs[:len(ranks)]
                if len(set(hosts)) == len(hosts) and all(itemgetter(*hosts)(uniform)):
                    by_hosts[hs] = hit
            return hit

        return chain

def pricing_of(inv: Inventory, p: CostParams, placement: Placement
                ) -> Tuple[PlacementPricer, List[Tuple[list, List[Shape]]]]:
    """The pricer of ``placement`` under ``p`` and the shapes of the groups
    it has priced, kept with the placement while its slots, the inventory
    and the parameters stay the same: the choice among proposals prices the
    step of the plan and of Slurm's default, and the report prices them
    again (a 16,384-rank placement's shapes are most of its pricing)."""
    hit = placement.derived.get("cost.pricing", lambda: [None, None, None, None, None])
    if hit[0] is inv and hit[1] is p and hit[2] is placement.slots:
        return hit[3], hit[4]
    pricer, shaped = PlacementPricer(inv, p, placement), []
    hit[:] = [inv, p, placement.slots, pricer, shaped]
    return pricer, shaped


def placement_pricer(inv: Inventory, p: CostParams, placement: Placement) -> PlacementPricer:
    """The placement's :class:`PlacementPricer` under ``p``, kept with it."""
    return pricing_of(inv, p, placement)[0]


def group_shapes(inv: Inventory, p: CostParams, placement: Placement, key,
                 groups: Sequence[Sequence[int]]) -> List[Shape]:
    """The :data:`Shape` of every group of ``groups`` (all of one size),
    kept with the placement under ``key`` (the placement's groups of one
    kind, or a part of them: fixed for a placement), or shared with an
    equal group list (``dp`` and ``dp-cp`` when cp is 1):
    the step's calls on one kind share them whatever their messages, and
    :func:`evaluate` shares them too."""
    pricer, shaped = pricing_of(inv, p, placement)
    hit = pricer.keyed_shapes.get(key)
    if hit is not None:
        return hit
    shapes = next((sh for g2, sh in shaped if g2 is groups or g2 == groups), None)
    if shapes is None:
        shapes = list(map(pricer.shaper(len(groups[0])), groups))
        shaped.append((groups, shapes))
    pricer.keyed_shapes[key] = shapes
    return shapes
