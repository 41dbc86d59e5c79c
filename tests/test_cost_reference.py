"""cost.evaluate against a plain reference.

``slurmtopo.cost.pricing`` prices groups through per-placement tables and
memos (shapes shared between groups and kinds, chains memoised by their
host sequence, leaf-pair classes) so that 32,768 ranks take a few
hundredths of a second. The reference below prices every group the long
way, straight from the model's definitions (group the ranks by host, ring
class inside each host, the lowest switch level every host shares, the
slowest rank's network share), with no memo. Random placements (any GPU of
any host for any rank, so partial hosts, uneven hosts and hosts on several
leaves of a group all occur) on clusters with NVLink domains, PCIe-only
nodes, a flat fabric and hosts missing from the fabric must price the same.
"""
from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Dict, List, Sequence, Tuple

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from slurmtopo.cost import COLLECTIVES, cost_params, evaluate
from slurmtopo.cost.collectives import collective_time
from slurmtopo.cost.defaults import NET_KIND_ORDER
from slurmtopo.cost.step import call_bytes, step_calls, subgroups
from slurmtopo.errors import LayoutError
from slurmtopo.job.groups import Layout
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Fabric, Inventory, Placement
from slurmtopo.placement.common import build_placement
from slurmtopo.job.request import JobRequest
from slurmtopo.cost.hardware import generation, tuned_platform
from slurmtopo.inventory.model import Switch
from slurmtopo.inventory.topology import network_view, rail_optimised

EX = os.path.join(os.path.dirname(__file__), "..", "etc", "examples")


def _load(name: str) -> Inventory:
    return load_inventory(os.path.join(EX, name + ".yaml"))


def _flat(inv: Inventory) -> Inventory:
    """No switches described: every host on one virtual leaf."""
    return replace(inv, fabric=Fabric())


def _half_cabled(inv: Inventory) -> Inventory:
    """Every other host missing from the fabric (NET_FAR to the rest)."""
    keep = set(list(inv.nodes)[::2])
    sw = tuple(replace(s, nodes=tuple(h for h in s.nodes if h in keep))
               for s in inv.fabric.switches)
    return replace(inv, fabric=replace(inv.fabric, switches=sw))


def _nic_down(inv: Inventory) -> Inventory:
    """Every other host with its first NIC down: its GPUs' network shares
    differ (the GPUs next to the dead NIC share another), and differ from
    the other hosts'."""
    nodes = {}
    for i, (name, n) in enumerate(inv.nodes.items()):
        if i % 2:
            hw = n.hardware
            nics = tuple(replace(x, state="down") if j == 0 else x
                         for j, x in enumerate(hw.nics))
            n = replace(n, hardware=replace(hw, nics=nics), type=None)
        nodes[name] = n
    return replace(inv, nodes=nodes)


def _rails(inv: Inventory) -> Inventory:
    """Rail-optimised: a leaf per NIC index joining every host's NIC of that
    index, one spine over the leaves (traffic between rails crosses it)."""
    hosts = tuple(inv.nodes)
    nics = max(len(n.hardware.compute_nics()) for n in inv)
    leaves = tuple(Switch(name=f"rail{r}", nodes=hosts) for r in range(nics))
    return replace(inv, fabric=Fabric(switches=leaves + (
        Switch(name="spine", switches=tuple(s.name for s in leaves)),)))


CLUSTERS = {
    "h100-4node-rails": lambda: _rails(_load("h100-4node-2leaf")),
    "h100-32node-fattree": lambda: _load("h100-32node-fattree"),
    "h100-4node-2leaf": lambda: _load("h100-4node-2leaf"),
    "a6000-4node-pcie": lambda: _load("a6000-4node-pcie"),
    "dgx1-v100-pair": lambda: _load("dgx1-v100-pair"),
    "gb200-nvl72-rack": lambda: _load("gb200-nvl72-rack"),
    "azure-ndv4-4node": lambda: _load("azure-ndv4-4node"),
    "fattree-flat": lambda: _flat(_load("h100-32node-fattree")),
    "fattree-half-cabled": lambda: _half_cabled(_load("h100-32node-fattree")),
    "fattree-nic-down": lambda: _nic_down(_load("h100-32node-fattree")),
    "pcie-nic-down": lambda: _nic_down(_load("a6000-4node-pcie")),
}
_CACHE: Dict[str, Inventory] = {}


def cluster(name: str) -> Inventory:
    if name not in _CACHE:
        _CACHE[name] = CLUSTERS[name]()
    return _CACHE[name]


# --------------------------------------------------------------------------
# the reference: every group priced from the definitions, nothing memoised


def ref_net_class(inv: Inventory, hosts: Sequence[str]) -> LinkClass:
    """Class of the network between distinct ``hosts`` (two or more)."""
    doms = {inv.nodes[h].nvlink_domain for h in hosts}
    if len(doms) == 1 and None not in doms:
        return LinkClass.NVLINK_DOMAIN
    view = network_view(inv.fabric)
    if view.flat:
        return LinkClass.NET_LEAF
    leaves = {view.leaf.get(h) for h in hosts}
    if None in leaves:
        return LinkClass.NET_FAR
    if len(leaves) == 1:
        return LinkClass.NET_LEAF
    common = set.intersection(*(set(view.ancestors[h]) for h in hosts))
    if not common:
        return LinkClass.NET_FAR
    return LinkClass.network(min(view.levels[s] for s in common))


def ref_cross_rail(inv: Inventory, host: str) -> LinkClass:
    """Where two rails of ``host`` meet: the lowest switch level above it."""
    levels = [lvl for lvl in network_view(inv.fabric).ancestors.get(host, {}).values() if lvl]
    return LinkClass.network(min(levels)) if levels else LinkClass.NET_FAR


def ref_group(inv: Inventory, p, pl: Placement, ranks: Sequence[int], coll: str,
              m: int) -> Tuple[LinkClass, float]:
    slots = [pl.slots[r] for r in ranks]
    n = len(ranks)
    if n <= 1:
        return LinkClass.SELF, 0.0
    wired = len(pl.by_host()) > 1 and bool(rail_optimised(inv, list(pl.by_host())))
    if coll == "p2p":
        worst_c, worst_t = LinkClass.SELF, 0.0
        for a, b in zip(slots, slots[1:]):
            if a.host == b.host:
                cls, bw = p.hw(inv.nodes[a.host].hardware).pair(a.gpu, b.gpu)
            else:
                cls = ref_net_class(inv, [a.host, b.host])
                if wired and a.nics[:1] != b.nics[:1] and cls is not LinkClass.NVLINK_DOMAIN:
                    cls = max(cls, ref_cross_rail(inv, a.host), ref_cross_rail(inv, b.host))
                fa, fb = (p.hw(inv.nodes[s.host].hardware) for s in (a, b))
                if cls is LinkClass.NVLINK_DOMAIN:
                    bw = min(fa.class_bw(cls), fb.class_bw(cls))
                elif cls in p.bandwidth:
                    bw = p.bandwidth[cls]
                else:
                    bw = min(fa.net[a.gpu], fb.net[b.gpu]) / p.oversubscription.get(cls, 1.0)
            t = p.launch + p.alpha[cls] + m / (p.efficiency.get(cls, 1.0) * bw * 1e9)
            worst_c, worst_t = max(worst_c, cls), max(worst_t, t)
        return worst_c, worst_t
    by_host: Dict[str, List[int]] = {}
    for s in slots:
        by_host.setdefault(s.host, []).append(s.gpu)
    figures = {h: p.hw(inv.nodes[h].hardware) for h in by_host}
    gen = min(generation(inv.nodes[h].hardware) for h in by_host)
    kind = max((f.net_kind for f in figures.values()), key=NET_KIND_ORDER.__getitem__)
    if len(by_host) == 1:
        (h, gpus), = by_host.items()
        f = figures[h]
        cls, bw = f.intra(tuple(sorted(gpus)))
        nvls = f.nvls_bw if cls is LinkClass.NVLINK else 0.0
        return cls, collective_time(p, coll, n, m, 0, 0, 0, cls, bw, nvls_bw=nvls,
                                    nvls_lat=f.nvls_lat, kind=kind, gen=gen)
    rings = [figures[h].intra(tuple(sorted(g))) for h, g in by_host.items() if len(g) > 1]
    in_cls = max((c for c, _ in rings), default=LinkClass.SELF)
    in_bw = min((b for _, b in rings), default=math.inf)
    net = ref_net_class(inv, list(by_host))
    if wired and net is not LinkClass.NVLINK_DOMAIN:
        rails: Dict[str, set] = {}
        for s in slots:
            if s.nics:
                rails.setdefault(s.host, set()).add(s.nics[0])
        if len({frozenset(v) for v in rails.values()}) > 1:
            net = max([net] + [ref_cross_rail(inv, h) for h in by_host])
    slowest = max(net, in_cls)
    if net is LinkClass.NVLINK_DOMAIN:
        bw = min(min(f.class_bw(net) for f in figures.values()), in_bw)
        nvls = (min(f.nvls_bw for f in figures.values()) if in_cls <= LinkClass.NVLINK else 0.0)
        lat = max(f.nvls_lat for f in figures.values())
        return slowest, collective_time(p, coll, n, m, 0, 0, 0, slowest, bw, nvls_bw=nvls,
                                        nvls_lat=lat, kind=kind, gen=gen)
    if net in p.bandwidth:
        net_bw = p.bandwidth[net]
    else:
        net_bw = min(figures[s.host].net[s.gpu] for s in slots) / p.oversubscription.get(net, 1.0)
    # the hosts of one multi-node NVLink domain are one unit, NVLink inside
    units: Dict[object, List[str]] = {}
    for h in by_host:
        d = inv.nodes[h].nvlink_domain
        units.setdefault(h if d is None else d, []).append(h)
    sizes = []
    for hosts in units.values():
        sizes.append(sum(len(by_host[h]) for h in hosts))
        if len(hosts) > 1:
            in_cls = max(in_cls, LinkClass.NVLINK_DOMAIN)
            in_bw = min(in_bw, min(figures[h].class_bw(LinkClass.NVLINK_DOMAIN) for h in hosts))
    # NVLSTree: every domain's NVLS when the rings inside are on NVLink
    nvls = (min(f.nvls_bw for f in figures.values())
            if LinkClass.NVLINK <= in_cls <= LinkClass.NVLINK_DOMAIN else 0.0)
    lat = max(f.nvls_lat for f in figures.values()) if nvls else 0.0
    plats = {tuned_platform(inv.nodes[h].hardware, figures[h].net_kind) for h in by_host}
    platform = plats.pop() if len(plats) == 1 else ""
    return slowest, collective_time(p, coll, n, m, len(units), max(sizes), min(sizes), in_cls,
                                    in_bw, net, net_bw, nvls, lat, kind, False, gen, platform)


def assert_prices_like_the_reference(inv: Inventory, pl: Placement, req: JobRequest) -> None:
    p = cost_params(inv)
    rep = evaluate(inv, pl, req, p)
    assert set(rep.kinds) == set(pl.groups)
    for kind, gl in pl.groups.items():
        gc = rep.kinds[kind]
        coll = COLLECTIVES.get(kind, "all-reduce")
        ref = [ref_group(inv, p, pl, g, coll, p.message(kind, req)) for g in gl]
        assert gc.slowest == max(c for c, _ in ref), kind
        worst = max(t for _, t in ref)
        assert gc.time_s == pytest.approx(worst, rel=1e-12, abs=1e-15), kind
        assert ref[gc.worst_group][1] == pytest.approx(worst, rel=1e-12, abs=1e-15), kind
    # the step: every call of step_calls on the slowest of its groups
    step = 0.0
    for call in step_calls(req.layout, req.workload):
        gl = subgroups(pl.groups[call.kind], call.part)
        step += call.calls * max(ref_group(inv, p, pl, g, call.collective,
                                           call_bytes(call, p, req))[1] for g in gl)
    assert rep.step_time_s == pytest.approx(step, rel=1e-12)
    assert rep.step.time_s == rep.step_time_s
    # step_only prices the step alike; warn=False every kind alike
    quick = evaluate(inv, pl, req, p, step_only=True)
    assert quick.step_time_s == pytest.approx(rep.step_time_s, rel=1e-12)
    quiet = evaluate(inv, pl, req, p, warn=False)
    assert quiet.kinds == rep.kinds and quiet.warnings == []


# --------------------------------------------------------------------------
# random placements


@st.composite
def placements(draw):
    name = draw(st.sampled_from(sorted(CLUSTERS)))
    inv = cluster(name)
    slots = [(n.name, g) for n in inv for g in range(n.hardware.gpu_count)]
    dims = {"tp": draw(st.sampled_from([1, 2, 4, 8])), "cp": draw(st.sampled_from([1, 1, 2])),
            "pp": draw(st.sampled_from([1, 2, 4])), "ep": draw(st.sampled_from([1, 1, 2]))}
    base = dims["tp"] * dims["cp"] * dims["pp"]
    top = len(slots) // base
    dps = [d for d in range(1, top + 1) if d % dims["ep"] == 0]
    if not dps:
        dims = {"tp": 1, "cp": 1, "pp": 1, "ep": 1}
        dps = list(range(1, len(slots) + 1))
    dp = draw(st.sampled_from(dps[:16]))
    etp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if dims["tp"] % d == 0]))
    order = draw(st.sampled_from(["tp-cp-ep-dp-pp", "tp-dp-cp-ep-pp", "dp-tp-cp-ep-pp"]))
    try:
        req = JobRequest(Layout(tp=dims["tp"], cp=dims["cp"], pp=dims["pp"], ep=dims["ep"],
                                dp=dp, expert_tp=etp, order=order))
    except LayoutError:
        reject()
    order = draw(st.permutations(slots))
    # often fill hosts one after another (the planner's shapes), sometimes not
    if draw(st.booleans()):
        pos = {h: i for i, h in enumerate(dict.fromkeys(h for h, _ in order))}
        order = sorted(order, key=lambda s: (pos[s[0]], s[1]))
    return name, inv, req, build_placement(inv, req, order[:req.world])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placements())
def test_random_placements_price_like_the_reference(case):
    _, inv, req, pl = case
    assert_prices_like_the_reference(inv, pl, req)


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_planned_placements_price_like_the_reference(name):
    from slurmtopo.placement import naive_plan
    from slurmtopo.plan.choice import plan

    inv = cluster(name)
    gpus = inv.gpu_count
    for layout in (Layout(tp=min(8, gpus), dp=max(1, gpus // 16)),
                   Layout(tp=2, pp=2, dp=max(1, gpus // 8)),
                   Layout(tp=2, cp=2, dp=max(1, gpus // 8))):
        req = JobRequest(layout)
        if req.world > gpus:
            continue
        for fn in (plan, naive_plan):
            assert_prices_like_the_reference(inv, fn(inv, None, req), req)


def test_part_of_a_host_is_not_priced_as_the_whole_host():
    """The ring over all a job's GPUs on a host is priced once per host; a
    later group holding only some of them (expert-TP pairs after the TP
    group of 8) rings over its own GPUs: NVLink-bridged pairs, not the
    8-GPU ring across the sockets."""
    inv = cluster("a6000-4node-pcie")
    host = next(iter(inv)).name
    req = JobRequest(Layout(tp=8, expert_tp=2, dp=1))
    pl = build_placement(inv, req, [(host, g) for g in range(8)])
    rep = evaluate(inv, pl, req)
    assert rep.kinds["tp"].slowest is LinkClass.SYS
    assert rep.kinds["expert-tp"].slowest is LinkClass.NVLINK
    assert_prices_like_the_reference(inv, pl, req)


def test_chains_through_the_same_hosts_are_priced_alike_per_gpu_share():
    """Two pipeline chains through the same host pair price alike when every
    GPU has the same network share, and by their own GPUs' shares when not
    (the memo by host sequence must not serve the second from the first)."""
    inv = cluster("fattree-nic-down")
    p = cost_params(inv)
    hosts = list(inv.nodes)[:2]
    shares = p.hw(inv.nodes[hosts[1]].hardware).net
    assert len(set(shares)) > 1  # the second host's NIC 0 is down
    req = JobRequest(Layout(tp=1, pp=2, dp=len(shares)))
    # dp replica d: stage 0 on hosts[0] GPU d, stage 1 on hosts[1] GPU d
    order = [(hosts[r // len(shares)], r % len(shares)) for r in range(req.world)]
    pl = build_placement(inv, req, order)
    assert_prices_like_the_reference(inv, pl, req)
