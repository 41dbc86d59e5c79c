"""The alpha-beta cost model: formulas, per-link parameters, overrides,
evaluate() on hand-made placements, the lower bound."""
from __future__ import annotations

import os
import textwrap

import pytest

from slurmtopo.cost import (COLLECTIVES, DEFAULT_MESSAGE_BYTES, CostParams, counted_kinds,
                            evaluate, flat_time, hier_time, lower_bound, parse_bytes)
from slurmtopo.errors import InventoryError
from slurmtopo.groups import Layout, build_groups
from slurmtopo.inventory import load_inventory
from slurmtopo.links import LinkClass
from slurmtopo.model import Inventory
from slurmtopo.choice import plan
from slurmtopo.placement import leaf_constrained_plan, naive_plan, random_plan
from slurmtopo.placement.common import build_placement
from slurmtopo.presets import preset
from slurmtopo.request import JobRequest
from slurmtopo.state import load_state

EX = os.path.join(os.path.dirname(__file__), "..", "etc", "examples")
MiB = 1 << 20


def ex(name: str) -> Inventory:
    return load_inventory(os.path.join(EX, name + ".yaml"))


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def place(inv, req, assign):
    return build_placement(inv, req, assign)


# --------------------------------------------------------------------------
# formulas


def test_flat_ring_formulas():
    # n=4, M=4 GB, alpha=1us, B=100 GB/s: a step moves M/n = 1 GB in 10 ms
    assert flat_time("all-reduce", 4, 4e9, 1e-6, 100) == approx(2 * 3 * (1e-6 + 0.01))
    assert flat_time("all-gather", 4, 4e9, 1e-6, 100) == approx(3 * (1e-6 + 0.01))
    assert flat_time("all-to-all", 4, 4e9, 1e-6, 100) == approx(3 * (1e-6 + 0.01))
    assert flat_time("p2p", 4, 4e9, 1e-6, 100) == approx(1e-6 + 0.04)
    assert flat_time("all-reduce", 1, 4e9, 1e-6, 100) == 0.0
    with pytest.raises(ValueError):
        flat_time("broadcast", 4, 1, 1, 1)


def test_hierarchical_formulas():
    # 8 ranks on 2 hosts (4 each), M = 8 GB; inside 100 GB/s, network 10 GB/s
    args = dict(n=8, h=2, l_max=4, l_min=4, m=8e9, a_in=1e-6, gbps_in=100, a_net=1e-5,
                gbps_net=10)
    intra = 2 * 3 * (1e-6 + 8e9 / (4 * 100e9))  # reduce-scatter + all-gather in the node
    inter = 2 * 1 * (1e-5 + 8e9 / (4 * 2 * 10e9))  # ring over 2 hosts of an M/4 slice
    assert hier_time("all-reduce", **args) == approx(intra + inter)
    assert hier_time("all-gather", **args) == approx(
        1 * (1e-5 + 8e9 / (8 * 10e9)) + 3 * (1e-6 + 8e9 / (4 * 100e9)))
    assert hier_time("all-to-all", **args) == approx(
        4 * (1e-5 + 8e9 / (8 * 10e9)) + 3 * (1e-6 + 8e9 / (8 * 100e9)))
    # one rank a host: the flat ring over the network
    one = dict(args, h=8, l_max=1, l_min=1)
    assert hier_time("all-reduce", **one) == approx(flat_time("all-reduce", 8, 8e9, 1e-5, 10))
    assert hier_time("all-gather", **one) == approx(flat_time("all-gather", 8, 8e9, 1e-5, 10))
    assert hier_time("all-to-all", **one) == approx(flat_time("all-to-all", 8, 8e9, 1e-5, 10))
    # one host: the flat ring inside it
    assert hier_time("all-reduce", **dict(args, h=1)) == approx(
        flat_time("all-reduce", 8, 8e9, 1e-6, 100))


def test_uneven_hosts_use_the_bottleneck():
    # 3 ranks on one host, 1 on another: intra part with l=3, slice M/1
    t = hier_time("all-reduce", 4, 2, 3, 1, 6e9, 0.0, 100, 0.0, 10)
    assert t == approx(2 * 2 * (6e9 / (3 * 100e9)) + 2 * 1 * (6e9 / (1 * 2 * 10e9)))


def test_parse_bytes():
    assert parse_bytes(1024) == 1024
    assert parse_bytes("64MiB") == 64 * MiB
    assert parse_bytes("1.5 GB") == 1_500_000_000
    assert parse_bytes("2KiB") == 2048
    assert parse_bytes("100") == 100
    for bad in ("lots", "-3MB", True, -1, 1.5):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_default_message_bytes_cover_every_kind():
    from slurmtopo.groups import GROUP_KINDS
    assert set(DEFAULT_MESSAGE_BYTES) == set(GROUP_KINDS) == set(COLLECTIVES)
    assert COLLECTIVES["tp"] == "all-reduce" and COLLECTIVES["cp"] == "all-gather"
    assert COLLECTIVES["ep"] == "all-to-all" and COLLECTIVES["pp"] == "p2p"


# --------------------------------------------------------------------------
# per-link parameters


def test_nvlink_bandwidth_by_generation():
    p = CostParams()
    assert p.hw(preset("hgx-h100-8")).intra((0, 1, 2, 3, 4, 5, 6, 7)) == (LinkClass.NVLINK, 450.0)
    assert p.hw(preset("hgx-a100-8")).intra((0, 1)) == (LinkClass.NVLINK, 300.0)
    assert p.hw(preset("pcie-a6000-8-nvlink-pairs")).intra((0, 1)) == (LinkClass.NVLINK, 56.25)
    assert p.hw(preset("gb200-nvl72-tray")).intra((0, 1, 2, 3)) == (LinkClass.NVLINK, 900.0)
    # DGX-1: the 8-GPU ring is NVLink, limited by its single-lane hops
    assert p.hw(preset("dgx1-v100")).intra(tuple(range(8))) == (LinkClass.NVLINK, 25.0)


def test_pcie_bandwidth_by_class():
    p = CostParams()
    a6000 = p.hw(preset("pcie-a6000-8-nvlink-pairs"))
    assert a6000.intra((0, 2)) == (LinkClass.PXB, 25.0)  # under one PCIe switch tree: full speed
    assert a6000.intra((0, 4)) == (LinkClass.SYS, 10.0)  # capped by the socket link (SKL_QPI_BW)
    l40s = p.hw(preset("pcie-l40s-8"))
    assert l40s.intra((0, 1)) == (LinkClass.PIX, 25.0)


def test_network_share_per_gpu():
    p = CostParams()
    assert p.hw(preset("hgx-h100-8")).net == [50.0] * 8  # 400 Gb/s NIC per GPU
    assert p.hw(preset("pcie-a6000-8-nvlink-pairs")).net == [6.25] * 8  # 200 Gb/s for 4 GPUs
    assert p.hw(preset("hgx-a100-8")).net == [25.0] * 8  # two 200 Gb/s NICs per GPU pair
    assert p.hw(preset("dgx1-v100")).net == [6.25] * 8  # 100 Gb/s per GPU pair


def test_hardware_fields_override_the_tables():
    from dataclasses import replace
    hw = replace(preset("hgx-h100-8"), nvlink_lane_gbps=10.0, pcie_gbps=7.0)
    hc = CostParams().hw(hw)
    assert hc.lane == 10.0 and hc.pcie == 7.0
    assert hc.intra((0, 1)) == (LinkClass.NVLINK, 180.0)


# --------------------------------------------------------------------------
# evaluate on known placements


def test_tp8_on_one_h100_node():
    inv = ex("h100-4node-2leaf")
    req = JobRequest(Layout(tp=8))
    pl = place(inv, req, [("gpu01", g) for g in range(8)])
    rep = evaluate(inv, pl, req)
    tp = rep.kinds["tp"]
    m = DEFAULT_MESSAGE_BYTES["tp"]
    assert (tp.count, tp.size, tp.collective, tp.message_bytes) == (1, 8, "all-reduce", m)
    assert tp.slowest is LinkClass.NVLINK
    assert tp.time_s == approx(2 * 7 * (1e-6 + m / (8 * 450e9)))
    assert rep.step_time_s == approx(tp.time_s)
    assert rep.warnings == []


def test_dp_across_a_leaf_and_pp_across_the_spine():
    inv = ex("h100-4node-2leaf")
    req = JobRequest(Layout(tp=8, dp=2, pp=2))
    hosts = ["gpu01", "gpu02", "gpu03", "gpu04"]  # leaf1: 01-02, leaf2: 03-04
    pl = place(inv, req, [(hosts[r // 8], r % 8) for r in range(32)])
    rep = evaluate(inv, pl, req)
    dp = rep.kinds["dp"]
    m = DEFAULT_MESSAGE_BYTES["dp"]
    # dp groups {r, r+8}: 2 hosts on one leaf, one rank each: flat ring over the NIC
    assert dp.slowest is LinkClass.NET_LEAF
    assert dp.time_s == approx(2 * 1 * (6e-6 + m / (1 * 2 * 50e9)))
    pp = rep.kinds["pp"]
    assert pp.slowest is LinkClass.NET_L1 and pp.collective == "p2p"
    assert pp.time_s == approx(7e-6 + DEFAULT_MESSAGE_BYTES["pp"] / 50e9)
    assert rep.counted == ("tp", "cp", "dp", "pp")
    assert rep.step_time_s == approx(sum(rep.kinds[k].time_s for k in rep.counted))


def test_hierarchical_all_reduce_on_two_nodes():
    inv = ex("h100-4node-2leaf")
    req = JobRequest(Layout(dp=16), message_bytes={"dp": 1 << 30})
    pl = place(inv, req, [("gpu01", g) for g in range(8)] + [("gpu02", g) for g in range(8)])
    dp = evaluate(inv, pl, req).kinds["dp"]
    m = 1 << 30
    want = 2 * 7 * (1e-6 + m / (8 * 450e9)) + 2 * 1 * (6e-6 + m / (8 * 2 * 50e9))
    assert dp.time_s == approx(want) and dp.slowest is LinkClass.NET_LEAF


def test_bad_tp_placement_warns_and_costs_more():
    inv = ex("a6000-4node-pcie")
    req = JobRequest(Layout(tp=2, dp=2))
    good = place(inv, req, [("ws1", 0), ("ws1", 1), ("ws1", 2), ("ws1", 3)])
    bad = place(inv, req, [("ws1", 0), ("ws1", 4), ("ws1", 1), ("ws1", 5)])
    rg, rb = evaluate(inv, good, req), evaluate(inv, bad, req)
    m = DEFAULT_MESSAGE_BYTES["tp"]
    assert rg.kinds["tp"].slowest is LinkClass.NVLINK
    assert rg.kinds["tp"].time_s == approx(2 * (1e-6 + m / (2 * 56.25e9)))
    assert rb.kinds["tp"].slowest is LinkClass.SYS
    assert rb.kinds["tp"].time_s == approx(2 * (5e-6 + m / (2 * 10e9)))
    assert rb.kinds["tp"].worst_group == 0
    assert rb.step_time_s > rg.step_time_s
    assert any(w.startswith("TP group 0 (and 1 more) crosses PCIe between NUMA nodes (SYS)")
               for w in rb.warnings), rb.warnings
    assert not any(w.startswith("TP") for w in rg.warnings)


def test_context_all_gather_and_expert_all_to_all():
    inv = ex("h100-4node-2leaf")
    req = JobRequest(Layout(cp=2, ep=2, dp=2))  # world 4: cp pairs, ep pairs
    pl = place(inv, req, [("gpu01", 0), ("gpu03", 0), ("gpu01", 1), ("gpu03", 1)])
    rep = evaluate(inv, pl, req)
    groups = build_groups(req.layout)
    assert groups["cp"] == [[0, 1], [2, 3]]
    cp = rep.kinds["cp"]
    m = DEFAULT_MESSAGE_BYTES["cp"]
    assert cp.collective == "all-gather" and cp.slowest is LinkClass.NET_L1
    assert cp.time_s == approx(1 * (7e-6 + m / (2 * 50e9)))
    ep = rep.kinds["ep"]
    assert ep.collective == "all-to-all"
    assert groups["ep"] == [[0, 1], [2, 3]]
    assert ep.time_s == approx(1 * (7e-6 + DEFAULT_MESSAGE_BYTES["ep"] / (2 * 50e9)))
    # cp > 1: gradients reduce over dp x cp, so dp-cp is counted, not dp
    assert rep.counted == ("tp", "cp", "dp-cp", "pp", "ep", "expert-tp", "expert-dp")


def test_nvl72_group_across_trays_is_one_nvlink_ring():
    inv = ex("gb200-nvl72-rack")
    req = JobRequest(Layout(tp=8))
    pl = place(inv, req, [("nvl72r1-t01", g) for g in range(4)] +
               [("nvl72r1-t10", g) for g in range(4)])  # trays on different leaves
    tp = evaluate(inv, pl, req).kinds["tp"]
    m = DEFAULT_MESSAGE_BYTES["tp"]
    assert tp.slowest is LinkClass.NVLINK_DOMAIN
    assert tp.time_s == approx(2 * 7 * (1.5e-6 + m / (8 * 900e9)))


def test_groups_of_one_cost_nothing():
    inv = ex("h100-4node-2leaf")
    req = JobRequest(Layout(tp=1, dp=1))
    rep = evaluate(inv, place(inv, req, [("gpu01", 3)]), req)
    assert rep.step_time_s == 0.0
    assert all(k.slowest is LinkClass.SELF for k in rep.kinds.values())


def test_counted_kinds():
    g = build_groups(Layout(tp=2, dp=2).resolved())
    assert counted_kinds(g, 1) == ("tp", "cp", "dp", "pp")
    g = build_groups(Layout(tp=2, cp=2, dp=2).resolved())
    assert counted_kinds(g, 2) == ("tp", "cp", "dp-cp", "pp")
    g = build_groups(Layout(tp=2, ep=2, dp=2).resolved())
    assert counted_kinds(g, 1) == ("tp", "cp", "dp", "pp", "ep", "expert-tp", "expert-dp")


# --------------------------------------------------------------------------
# message sizes and overrides


def _inv_with_cost(tmp_path, cost_yaml: str) -> Inventory:
    base = open(os.path.join(EX, "h100-4node-2leaf.yaml")).read()
    path = tmp_path / "inv.yaml"
    path.write_text(base + "cost:\n" + textwrap.indent(textwrap.dedent(cost_yaml), "  "))
    return load_inventory(str(path))


def test_overrides_from_the_inventory(tmp_path):
    inv = _inv_with_cost(tmp_path, """
        alpha_us: {NVLINK: 3, net-leaf: 10}
        bandwidth_gbps: {NET_L1: 5}
        nvlink_lane_gbps: {h100: 10}
        pcie_gbps: 30
        pcie_factor: {SYS: 0.5}
        oversubscription: {NET_LEAF: 2}
        default_nic_gbit: 100
        message_bytes: {tp: 16MiB, dp: 1000}
    """)
    p = CostParams.from_inventory(inv)
    assert p.alpha[LinkClass.NVLINK] == approx(3e-6)
    assert p.alpha[LinkClass.NET_LEAF] == approx(10e-6)
    assert p.bandwidth == {LinkClass.NET_L1: 5.0}
    assert p.lane_gbps(preset("hgx-h100-8")) == 10.0
    assert p.default_pcie_gbps == 30.0 and p.pcie(preset("pcie-l40s-8")) == 30.0
    assert p.pcie_factor[LinkClass.SYS] == 0.5
    assert p.oversubscription == {LinkClass.NET_LEAF: 2.0}
    assert p.default_nic_gbit == 100.0
    assert p.message_bytes["tp"] == 16 * MiB and p.message_bytes["dp"] == 1000
    # the overrides reach evaluate()
    req = JobRequest(Layout(tp=8, dp=2))
    pl = place(inv, req, [("gpu01", g) for g in range(8)] + [("gpu02", g) for g in range(8)])
    rep = evaluate(inv, pl, req)
    assert rep.kinds["tp"].time_s == approx(2 * 7 * (3e-6 + 16 * MiB / (8 * 180e9)))
    assert rep.kinds["dp"].time_s == approx(2 * (10e-6 + 1000 / (2 * 25e9)))  # 50 / 2
    # the request beats the inventory
    req2 = JobRequest(Layout(tp=8, dp=2), message_bytes={"tp": 8})
    assert evaluate(inv, place(inv, req2, [(s.host, s.gpu) for s in pl.slots]),
                    req2).kinds["tp"].message_bytes == 8


def test_nvlink_lane_single_number(tmp_path):
    inv = _inv_with_cost(tmp_path, "nvlink_lane_gbps: 20\npcie_gbps: {l40s: 11}\n")
    p = CostParams.from_inventory(inv)
    assert p.lane_gbps(preset("hgx-h100-8")) == 20.0
    assert p.lane_gbps(preset("dgx1-v100")) == 20.0
    assert p.pcie(preset("pcie-l40s-8")) == 11.0
    assert p.pcie(preset("hgx-h100-8")) == 50.0  # table still applies to others


@pytest.mark.parametrize("cost,match", [
    ("latency: 3\n", "unknown key 'latency'"),
    ("alpha_us: {WIRE: 3}\n", "unknown link class 'WIRE'"),
    ("alpha_us: {NVLINK: -1}\n", "alpha_us.NVLINK must be >= 0"),
    ("bandwidth_gbps: {SYS: 0}\n", "bandwidth_gbps.SYS must be > 0"),
    ("bandwidth_gbps: 5\n", "bandwidth_gbps must be a mapping"),
    ("pcie_factor: {NET_LEAF: 0.5}\n", "pcie_factor takes only PIX, PXB, PHB, NODE, SYS"),
    ("oversubscription: {SYS: 2}\n", "oversubscription takes only NET_LEAF"),
    ("default_nic_gbit: fast\n", "default_nic_gbit must be a number"),
    ("message_bytes: {tp: lots}\n", "message_bytes: expected a size"),
    ("message_bytes: {zz: 5}\n", "unknown group kind 'zz'"),
    ("nvlink_lane_gbps: {h100: x}\n", "nvlink_lane_gbps.h100 must be a number"),
])
def test_bad_overrides_are_clear_errors(tmp_path, cost, match):
    inv = _inv_with_cost(tmp_path, cost)
    with pytest.raises(InventoryError, match=match) as exc:
        CostParams.from_inventory(inv)
    assert exc.value.path and exc.value.path.endswith("inv.yaml")
    assert exc.value.render().count("\n") == 0


def test_bad_override_names_its_line(tmp_path):
    inv = _inv_with_cost(tmp_path, "alpha_us:\n  NVLINK: 1\n  BOGUS: 2\n")
    with pytest.raises(InventoryError) as exc:
        CostParams.from_inventory(inv)
    text = open(tmp_path / "inv.yaml").read().splitlines()
    assert exc.value.line is not None and "BOGUS" in text[exc.value.line - 1]


def test_no_cost_block_gives_defaults():
    p = CostParams.from_inventory(ex("h100-4node-2leaf"))
    assert p.message_bytes == DEFAULT_MESSAGE_BYTES
    assert p.alpha[LinkClass.NET_LEAF] == approx(6e-6)


# --------------------------------------------------------------------------
# the lower bound


def test_lower_bound_values():
    inv = ex("h100-32node-fattree")
    req = JobRequest(Layout(tp=8, dp=16, pp=2))
    lb = lower_bound(inv, req)
    m = DEFAULT_MESSAGE_BYTES["tp"]
    assert lb.kinds["tp"].slowest is LinkClass.NVLINK
    assert lb.kinds["tp"].time_s == approx(2 * 7 * (1e-6 + m / (8 * 450e9)))
    # 16 data-parallel ranks fit two nodes of one leaf: hierarchical, l = 8
    dp = lb.kinds["dp"]
    md = DEFAULT_MESSAGE_BYTES["dp"]
    assert dp.slowest is LinkClass.NET_LEAF
    assert dp.time_s == approx(2 * 7 * (1e-6 + md / (8 * 450e9)) +
                               2 * 1 * (6e-6 + md / (8 * 2 * 50e9)))
    assert lb.kinds["pp"].slowest is LinkClass.NVLINK  # 2 stages could share a node
    assert lb.alone_s == approx(sum(lb.kinds[k].time_s for k in lb.counted))
    # jointly: TP 8 fills the node, so the 2 stages of a pipeline cannot
    # share it too (16 ranks): either the pipeline hop goes over the leaf,
    # or TP is split over two hosts; the bound takes the cheaper
    mp = DEFAULT_MESSAGE_BYTES["pp"]
    pp_net = 6e-6 + mp / 50e9
    assert lb.alone_s < lb.step_time_s <= lb.alone_s - lb.kinds["pp"].time_s + pp_net + 1e-15


def test_lower_bound_on_the_free_gpus():
    inv = ex("h100-32node-fattree")
    state = load_state(os.path.join(EX, "h100-32node-state.yaml"), inv)
    for layout in (Layout(tp=8, dp=16), Layout(tp=4, dp=8, pp=2), Layout(tp=8, dp=18)):
        req = JobRequest(layout)
        idle = lower_bound(inv, req)
        free = lower_bound(inv, req, state=state)
        assert free.step_time_s >= idle.step_time_s * (1 - 1e-12)
        for fn in (plan, naive_plan, leaf_constrained_plan):
            rep = evaluate(inv, fn(inv, state, req), req)
            assert rep.step_time_s >= free.step_time_s * (1 - 1e-9), fn.__name__
    # a node with 4 free GPUs holds no TP group of 8: when no whole node is
    # free the bound puts TP over the network
    from slurmtopo.model import ClusterState, NodeState
    half = ClusterState(nodes={n: NodeState(n, busy_gpus=frozenset(range(4))) for n in inv.nodes})
    req = JobRequest(Layout(tp=8))
    assert lower_bound(inv, req).kinds["tp"].slowest is LinkClass.NVLINK
    assert lower_bound(inv, req, state=half).kinds["tp"].slowest.is_network


def test_lower_bound_nvl72_uses_the_domain():
    inv = ex("gb200-nvl72-rack")
    lb = lower_bound(inv, JobRequest(Layout(tp=8)))
    assert lb.kinds["tp"].slowest is LinkClass.NVLINK_DOMAIN
    lb = lower_bound(inv, JobRequest(Layout(tp=4)))
    assert lb.kinds["tp"].slowest is LinkClass.NVLINK


def test_lower_bound_pcie_pairs():
    inv = ex("a6000-4node-pcie")
    lb = lower_bound(inv, JobRequest(Layout(tp=4)))
    assert lb.kinds["tp"].slowest is LinkClass.PXB  # no 4-GPU NVLink island


@pytest.mark.parametrize("name,state", [
    ("h100-4node-2leaf", None), ("h100-32node-fattree", "h100-32node-state"),
    ("a6000-4node-pcie", None), ("dgx1-v100-pair", None), ("gb200-nvl72-rack", None),
])
@pytest.mark.parametrize("layout", [
    Layout(tp=8, dp=2), Layout(tp=2, dp=4, pp=2), Layout(tp=4, cp=2, dp=2),
    Layout(tp=1, ep=4, dp=4), Layout(tp=2, pp=4), Layout(dp=12),
])
def test_no_placement_beats_the_lower_bound(name, state, layout):
    inv = ex(name)
    st = load_state(os.path.join(EX, state + ".yaml"), inv) if state else None
    req = JobRequest(layout)
    lb = lower_bound(inv, req)
    for fn in (plan, naive_plan, leaf_constrained_plan):
        try:
            pl = fn(inv, st, req)
        except Exception as exc:  # noqa: BLE001 - too big for the cluster
            assert "needs" in str(exc)
            continue
        rep = evaluate(inv, pl, req)
        assert rep.step_time_s >= lb.step_time_s * (1 - 1e-9)
        for kind, gc in rep.kinds.items():
            assert gc.time_s >= lb.kinds[kind].time_s * (1 - 1e-9), kind
    if req.world <= 32:
        try:
            pl = random_plan(inv, st, req, seed=3)
        except Exception:  # noqa: BLE001
            return
        assert evaluate(inv, pl, req).step_time_s >= lb.step_time_s * (1 - 1e-9)


def test_identical_group_kinds_warn_once():
    # with cp=1 the dp-cp groups are the dp groups: one warning, not two
    inv = ex("h100-4node-2leaf")
    req = JobRequest(Layout(tp=8, dp=2))
    pl = place(inv, req, [("gpu01", g) for g in range(8)] + [("gpu03", g) for g in range(8)])
    warnings = evaluate(inv, pl, req).warnings
    assert [w.split(" group")[0] for w in warnings] == ["DP"], warnings
    assert "through a spine switch" in warnings[0]
