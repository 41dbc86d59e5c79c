"""NCCL's algorithms across NVLink domains, network kinds, SHARP, PAT and
the NCCL release as an input (cost/collectives.py, docs/cost-model.md)."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from slurmtopo import api
from slurmtopo.cost import CostParams, collective_time, cost_params, evaluate
from slurmtopo.cost.hardware import network_kind
from slurmtopo.errors import InventoryError
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.presets import preset
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.job.workload import Workload
from slurmtopo.placement.common import build_placement

GiB, MiB = 1 << 30, 1 << 20
H100 = (LinkClass.NVLINK, 450.0)
NET = (LinkClass.NET_LEAF, 50.0)


def _write(tmp_path, text: str, name="inv.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _cluster(tmp_path, node_type: str, hosts: int, extra: str = "", switch: str = ""):
    text = (f"slurmtopo: inventory\nversion: 1\nnodes:\n"
            f"  - {{name: \"n[1-{hosts}]\", type: {node_type}}}\n"
            f"fabric:\n  switches:\n    - {{name: leaf1, nodes: \"n[1-{hosts}]\"{switch}}}\n"
            + extra)
    return load_inventory(_write(tmp_path, text))


def _all_ranks(inv, req, per_host: int):
    hosts = list(inv.nodes)
    return build_placement(inv, req, [(h, g) for h in hosts for g in range(per_host)])


# --------------------------------------------------------------------------
# the network's kind


def test_network_kind_from_the_nics():
    assert network_kind(preset("aws-p5.48xlarge")) == "efa"        # rdmap* devices
    assert network_kind(preset("aws-p6-b200.48xlarge")) == "efa"   # efa* in the preset
    assert network_kind(preset("hgx-h100-8")) == "infiniband"
    assert network_kind(preset("oci-bm.gpu.h100.8")) == "roce"


def test_efa_v1_runs_simple_only_and_the_cost_block_can_say_otherwise(tmp_path):
    # p4d (A100, EFA without RDMA write): AWS's plugin sets NCCL_PROTO=Simple
    efa = _cluster(tmp_path, "aws-p4d.24xlarge", 4)
    req = JobRequest(Layout(dp=32), message_bytes={"dp": MiB})
    pl = _all_ranks(efa, req, 8)
    p = cost_params(efa)
    assert p.protocols_for("efa", 1, True) == ("Simple",)
    assert p.protocols_for("efa", 1, False) == ("Simple",)  # the whole process
    slow = evaluate(efa, pl, req).kinds["dp"].time_s
    # the same nodes said to be on InfiniBand run LL and LL128 across (and
    # no 75 us EFA hop): a 1 MiB all-reduce over 4 hosts is several times
    # faster
    ib = _cluster(tmp_path, "aws-p4d.24xlarge", 4, "cost:\n  network: infiniband\n")
    fast = evaluate(ib, _all_ranks(ib, req, 8), req).kinds["dp"].time_s
    assert fast < slow / 2
    # an admin can list the protocols outright
    listed = _cluster(tmp_path, "aws-p4d.24xlarge", 4,
                      "cost:\n  network_protocols: [LL, LL128, Simple]\n")
    assert cost_params(listed).protocols_for("efa", 1, True) == ("LL", "LL128", "Simple")
    assert evaluate(listed, _all_ranks(listed, req, 8), req).kinds["dp"].time_s < slow
    # and the transport's own latency is a figure of the cost block too
    quick = _cluster(tmp_path, "aws-p4d.24xlarge", 4, "cost:\n  net_hop_us: {efa: 0}\n")
    assert evaluate(quick, _all_ranks(quick, req, 8), req).kinds["dp"].time_s < slow


def test_efa_from_p5_runs_ll128_where_awss_tuner_says(tmp_path):
    # p5 and p6 (EFA v2 and later) deliver LL128's bytes in order; on three
    # or more nodes of 8 GPUs AWS's tuner sets the algorithm: LL128 trees
    # for mid sizes, LL128 rings beyond (aws-ofi-nccl src/tuner/)
    from slurmtopo.cost.collectives import options, pick
    p6 = _cluster(tmp_path, "aws-p6-b200.48xlarge", 4)
    p = cost_params(p6)
    hc = p.hw(preset("aws-p6-b200.48xlarge"))
    assert (hc.net_kind, hc.gen, hc.platform) == ("efa", 3, "p6")
    assert p.protocols_for("efa", hc.gen, True) == ("LL", "LL128", "Simple")
    args = (32, MiB, 4, 8, 8, LinkClass.NVLINK, 900.0, *NET)
    opts = options(p, "all-reduce", *args, kind="efa", gen=3)
    assert pick(p, opts, "all-reduce", 32, MiB, 4, 8, LinkClass.NVLINK, 900.0, 50.0, "efa", 3,
                "p6") == ("tree", "LL128")
    big = options(p, "all-reduce", 32, 128 * MiB, *args[2:], kind="efa", gen=3)
    assert pick(p, big, "all-reduce", 32, 128 * MiB, 4, 8, LinkClass.NVLINK, 900.0, 50.0,
                "efa", 3, "p6") == ("ring", "LL128")
    # each network step of a tree pays EFA's 75 us (AWS's figure): a 1 MiB
    # all-reduce over 4 p6 nodes takes about 380 us (published: 378)
    t = collective_time(p, "all-reduce", *args, kind="efa", gen=3, platform="p6")
    assert 300e-6 < t < 460e-6
    # two nodes: the plugin leaves the choice to NCCL
    two = options(p, "all-reduce", 16, MiB, 2, 8, 8, LinkClass.NVLINK, 900.0, *NET, kind="efa",
                  gen=3)
    from slurmtopo.cost import tuner
    assert tuner.plugin_choice("p6", "all-reduce", 16, MiB, 2, 8.0, two) is None


def test_network_latency_by_kind(tmp_path):
    p = CostParams()
    args = (32, 8 * MiB, 4, 8, 8, *H100, *NET)
    base = collective_time(p, "all-reduce", *args, kind="roce")
    slower = replace(p, network_latency={**p.network_latency, "roce": 3.0})
    assert collective_time(slower, "all-reduce", *args, kind="roce") > base
    # the factor is the kind's: InfiniBand groups are not slowed
    assert collective_time(slower, "all-reduce", *args, kind="infiniband") == pytest.approx(
        collective_time(p, "all-reduce", *args, kind="infiniband"))


# --------------------------------------------------------------------------
# the NCCL release


def test_an_older_nccl_has_no_nvls_nor_pat(tmp_path):
    p = CostParams()
    hc = p.hw(preset("hgx-h100-8"))
    nv = dict(nvls_bw=hc.nvls_bw, nvls_lat=hc.nvls_lat)
    new = collective_time(p, "all-reduce", 8, GiB, 0, 0, 0, *H100, **nv)
    old = collective_time(replace(p, nccl_version=(2, 16, 5)), "all-reduce", 8, GiB, 0, 0, 0,
                          *H100, **nv)
    ring = collective_time(replace(p, algorithms=("ring",)), "all-reduce", 8, GiB, 0, 0, 0,
                           *H100)
    assert new < old == pytest.approx(ring)
    # PAT (all-gather, one rank a host) arrived in 2.23
    args = (64, 4 * MiB, 64, 1, 1, LinkClass.SELF, 0.0, *NET)
    assert collective_time(p, "all-gather", *args) < collective_time(
        replace(p, nccl_version=(2, 22, 3)), "all-gather", *args)


def test_the_release_comes_from_the_inventory_or_the_job(tmp_path):
    inv = _cluster(tmp_path, "hgx-h100-8", 1, "cost:\n  nccl_version: 2.16.5\n")
    assert cost_params(inv).nccl_version == (2, 16, 5)
    default = _cluster(tmp_path, "hgx-h100-8", 1)
    req = JobRequest(Layout(tp=8))
    pl = _all_ranks(default, req, 8)
    new = api.price_step(default, pl, req).time_s
    old_inv = api.price_step(inv, _all_ranks(inv, req, 8), req).time_s
    old_job = api.price_step(default, pl, JobRequest(Layout(tp=8), workload=Workload(
        nccl_version=(2, 16, 5)))).time_s
    assert new < old_inv == pytest.approx(old_job)
    assert api.job_request("megatron", tp=8, nccl_version="2.16").workload.nccl_version == \
        (2, 16, 0)


@pytest.mark.parametrize("block,match", [
    ("nccl_version: two\n", "nccl_version: 'two' is not an NCCL version"),
    ("network: myrinet\n", "network 'myrinet'"),
    ("network_latency: {efa: -1}\n", "network_latency.efa must be > 0"),
    ("network_latency: {ethernet: 2}\n", "unknown network 'ethernet'"),
    ("domain_nics: 0\n", "domain_nics must be a whole number >= 1"),
    ("a2a_peers: 2.5\n", "a2a_peers must be a whole number >= 1"),
    ("nvls_tree_stage: -3\n", "nvls_tree_stage must be >= 0"),
    ("net_hop_us: {efa: -1}\n", "net_hop_us.efa must be >= 0"),
    ("net_hop_us: {slingshot: 2}\n", "unknown network 'slingshot'"),
])
def test_bad_new_cost_keys_are_one_located_line(tmp_path, block, match):
    inv = _cluster(tmp_path, "hgx-h100-8", 1, "cost:\n  " + block)
    with pytest.raises(InventoryError, match=match) as exc:
        CostParams.from_inventory(inv)
    assert "\n" not in str(exc.value) and "inv.yaml" in str(exc.value)


# --------------------------------------------------------------------------
# across NVLink domains: NVLSTree, and NVL72 racks as one unit


def test_nvls_tree_joins_nvl72_racks_over_their_head_nics():
    """A group over two NVL72 racks is two domains of 72 ranks: NVLS inside
    each, a tree between them over the NICs the domain's heads drive,
    where a flat ring of 36 trays over the network is bound by 4 NICs a
    tray."""
    p = CostParams()
    hc = p.hw(preset("gb200-nvl72-tray"))
    nv = dict(nvls_bw=hc.nvls_bw, nvls_lat=hc.nvls_lat)
    racks = collective_time(p, "all-reduce", 144, 16 * GiB, 2, 72, 72, LinkClass.NVLINK_DOMAIN,
                            900.0, *NET, **nv)
    trays = collective_time(p, "all-reduce", 144, 16 * GiB, 36, 4, 4, LinkClass.NVLINK, 900.0,
                            *NET, **nv)
    assert racks < trays / 2
    # busbw near the NVLS of one rack (published: 810 GB/s at 16 GiB)
    busbw = 2 * 143 / 144 * 16 * GiB / racks / 1e9
    assert 650 < busbw < 1000
    # beyond two racks each rack's heads carry 2M: slower, still NVLS-shaped
    twenty = collective_time(p, "all-reduce", 1440, 16 * GiB, 20, 72, 72,
                             LinkClass.NVLINK_DOMAIN, 900.0, *NET, **nv)
    assert racks < twenty < 3 * racks


def test_nvls_tree_waits_on_its_largest_domain():
    """72 ranks in one rack and 8 in another: the tree starts when the
    rack of 72 has done its NVLS pass (nine times a node's), and the rack
    of 8 drives fewer NICs; neither makes the uneven split cheaper than
    two racks of 72 (the lower bound prices even splits)."""
    from slurmtopo.cost.collectives import options
    p = CostParams()
    hc = p.hw(preset("gb200-nvl72-tray"))
    args = (LinkClass.NVLINK_DOMAIN, 900.0, *NET, hc.nvls_bw, hc.nvls_lat)
    for m in (1 << 20, 16 << 20, GiB):
        uneven = options(p, "all-reduce", 80, m, 2, 72, 8, *args)[("nvls-tree", "Simple")]
        even = options(p, "all-reduce", 144, m, 2, 72, 72, *args)[("nvls-tree", "Simple")]
        small = options(p, "all-reduce", 16, m, 2, 8, 8, *args)[("nvls-tree", "Simple")]
        assert uneven >= even and uneven > small, m


def test_a_group_over_two_racks_is_priced_per_rack(tmp_path):
    text = ("slurmtopo: inventory\nversion: 1\nnodes:\n"
            "  - {name: \"a[1-18]\", type: gb200-nvl72-tray, nvlink_domain: "
            "{cluster_uuid: 5b1a2c3d-0000-4000-8000-000000000001, clique_id: 1}}\n"
            "  - {name: \"b[1-18]\", type: gb200-nvl72-tray, nvlink_domain: "
            "{cluster_uuid: 5b1a2c3d-0000-4000-8000-000000000002, clique_id: 2}}\n"
            "fabric:\n  switches:\n    - {name: leaf1, nodes: \"a[1-18]\"}\n"
            "    - {name: leaf2, nodes: \"b[1-18]\"}\n    - {name: spine, switches: \"leaf[1-2]\"}\n")
    inv = load_inventory(_write(tmp_path, text))
    req = JobRequest(Layout(dp=144), message_bytes={"dp": 16 * GiB})
    pl = _all_ranks(inv, req, 4)
    rep = evaluate(inv, pl, req)
    p = cost_params(inv)
    hc = p.hw(preset("gb200-nvl72-tray"))
    want = collective_time(p, "all-reduce", 144, 16 * GiB, 2, 72, 72, LinkClass.NVLINK_DOMAIN,
                           900.0, LinkClass.NET_L1, 50.0, hc.nvls_bw, hc.nvls_lat)
    assert rep.kinds["dp"].time_s == pytest.approx(want)
    assert rep.kinds["dp"].slowest is LinkClass.NET_L1


# --------------------------------------------------------------------------
# SHARP in the switches (CollNet)


def test_sharp_switches_reduce_in_the_network(tmp_path):
    # 8 hosts, 16 MiB: NCCL's estimate takes CollNet (one pass through the
    # switches) over a ring's 126 steps; each host sends its gradient once
    # through the switches instead of a ring's 2(n-1)/n of it
    req = JobRequest(Layout(dp=64), message_bytes={"dp": 16 * MiB})
    plain = _cluster(tmp_path, "hgx-h100-8", 8)
    sharp = _cluster(tmp_path, "hgx-h100-8", 8, switch=", sharp: true")
    assert [s.sharp for s in sharp.fabric.switches] == [True]
    t_plain = evaluate(plain, _all_ranks(plain, req, 8), req).kinds["dp"].time_s
    t_sharp = evaluate(sharp, _all_ranks(sharp, req, 8), req).kinds["dp"].time_s
    assert t_sharp < 0.75 * t_plain
    # the model has it only where NCCL runs it (algorithms) and the
    # release has it
    no = _cluster(tmp_path, "hgx-h100-8", 8, "cost:\n  algorithms: [ring, tree, nvls]\n",
                  switch=", sharp: true")
    assert evaluate(no, _all_ranks(no, req, 8), req).kinds["dp"].time_s == \
        pytest.approx(t_plain)


def test_sharp_needs_every_switch_on_the_way(tmp_path):
    text = ("slurmtopo: inventory\nversion: 1\nnodes:\n"
            "  - {name: \"n[1-8]\", type: hgx-h100-8}\n"
            "fabric:\n  switches:\n    - {name: leaf1, nodes: \"n[1-4]\", sharp: true}\n"
            "    - {name: leaf2, nodes: \"n[5-8]\", sharp: true}\n"
            "    - {name: spine, switches: \"leaf[1-2]\"}\n")
    inv = load_inventory(_write(tmp_path, text))
    req = JobRequest(Layout(dp=64), message_bytes={"dp": 16 * MiB})
    across = evaluate(inv, _all_ranks(inv, req, 8), req).kinds["dp"].time_s
    spine = _write(tmp_path, text.replace('switches: "leaf[1-2]"}', 'switches: "leaf[1-2]", '
                                          'sharp: true}'), "spine.yaml")
    inv2 = load_inventory(spine)
    assert evaluate(inv2, _all_ranks(inv2, req, 8), req).kinds["dp"].time_s < across


def test_sharp_is_kept_by_the_inventory_writers(tmp_path):
    from slurmtopo.inventory.schema import dump_inventory

    inv = _cluster(tmp_path, "hgx-h100-8", 2, switch=", sharp: true")
    text = dump_inventory(inv)
    assert "sharp: true" in text
    again = load_inventory(_write(tmp_path, text, "again.yaml"))
    assert again.fabric.switches[0].sharp is True
    with pytest.raises(InventoryError, match="sharp"):
        _cluster(tmp_path, "hgx-h100-8", 2, switch=", sharp: maybe")


# --------------------------------------------------------------------------
# PAT and all-to-all


def test_pat_gathers_one_rank_a_host_in_log_steps():
    p = CostParams()
    args = (64, 4 * MiB, 64, 1, 1, LinkClass.SELF, 0.0, *NET)
    pat = collective_time(p, "all-gather", *args)
    ring = collective_time(replace(p, algorithms=("ring", "tree", "nvls")), "all-gather", *args)
    assert pat < ring
    # a reduce-scatter costs what the all-gather does
    assert collective_time(p, "reduce-scatter", *args) == pytest.approx(pat)
    # with more than one rank a host NCCL has no PAT
    two = (64, 4 * MiB, 32, 2, 2, *H100, *NET)
    assert collective_time(p, "all-gather", *two) == pytest.approx(collective_time(
        replace(p, algorithms=("ring",)), "all-gather", *two))


def test_all_to_all_keeps_peers_in_flight():
    p = CostParams()
    args = (128, 128 * MiB, 16, 8, 8, *H100, *NET)
    fewer = collective_time(replace(p, a2a_peers=1), "all-to-all", *args)
    assert collective_time(p, "all-to-all", *args) < fewer


# --------------------------------------------------------------------------
# the step prices the job's own release


def test_the_step_and_the_bound_price_the_jobs_release():
    inv = api.load_cluster(os.path.join(os.path.dirname(__file__), "..", "etc", "examples",
                                        "h100-4node-2leaf.yaml"))
    req = JobRequest(Layout(tp=8, dp=2))
    old = JobRequest(Layout(tp=8, dp=2), workload=Workload(nccl_version=(2, 16, 5)))
    pl = api.plan_job(inv, None, req)
    from slurmtopo.cost import lower_bound
    assert api.price_step(inv, pl, req).time_s < api.price_step(inv, pl, old).time_s
    assert lower_bound(inv, old).step_time_s <= api.price_step(inv, pl, old).time_s * (1 + 1e-9)


# --------------------------------------------------------------------------
# rails: a rail-optimised fabric (a leaf per NIC index, one spine over them)


def _rail_cluster(tmp_path, hosts: int = 2, spine: str = ""):
    names = f"n[1-{hosts}]"
    leaves = "".join(f"    - {{name: rail{r}, nodes: \"{names}\"}}\n" for r in range(8))
    text = ("slurmtopo: inventory\nversion: 1\nnodes:\n"
            f"  - {{name: \"{names}\", type: hgx-h100-8}}\n"
            "fabric:\n  switches:\n" + leaves
            + "    - {name: spine, switches: \"rail[0-7]\"}\n" + spine)
    return load_inventory(_write(tmp_path, text, "rails.yaml"))


def test_a_group_on_different_rails_crosses_the_spine(tmp_path):
    inv = _rail_cluster(tmp_path, spine="cost:\n  oversubscription: {NET_L1: 4}\n")
    req = JobRequest(Layout(dp=2), message_bytes={"dp": GiB})
    aligned = build_placement(inv, req, [("n1", 0), ("n2", 0)])
    crossed = build_placement(inv, req, [("n1", 0), ("n2", 3)])
    a = evaluate(inv, aligned, req).kinds["dp"]
    c = evaluate(inv, crossed, req).kinds["dp"]
    # GPU 0 of both hosts: rail 0 to rail 0 under one leaf; GPU 0 to GPU 3:
    # rail 0 to rail 3, through the (4:1) spine
    assert a.slowest is LinkClass.NET_LEAF and c.slowest is LinkClass.NET_L1
    assert c.time_s > 3 * a.time_s
    # PXN: a group holding GPUs 0 and 3 on both hosts uses rails {0, 3} on
    # each, whatever rank pairs with whom: on its rails
    req4 = JobRequest(Layout(dp=4), message_bytes={"dp": GiB})
    pxn = build_placement(inv, req4, [("n1", 0), ("n1", 3), ("n2", 3), ("n2", 0)])
    assert evaluate(inv, pxn, req4).kinds["dp"].slowest is LinkClass.NET_LEAF
    # where the inventory cannot tell rails (one leaf), nothing changes
    flat = _cluster(tmp_path, "hgx-h100-8", 2)
    t0 = evaluate(flat, build_placement(flat, req, [("n1", 0), ("n2", 0)]), req).kinds["dp"]
    t3 = evaluate(flat, build_placement(flat, req, [("n1", 0), ("n2", 3)]), req).kinds["dp"]
    assert t0.time_s == pytest.approx(t3.time_s) and t3.slowest is LinkClass.NET_LEAF


def test_all_to_all_and_pipeline_sends_across_rails(tmp_path):
    inv = _rail_cluster(tmp_path, spine="cost:\n  oversubscription: {NET_L1: 4}\n")
    # an expert group of GPUs 0-3 on one host and 4-7 on the other: every
    # remote peer is on another rail, and PXN has no GPU of the group there
    req = JobRequest(Layout(dp=8, ep=8), message_bytes={"ep": 64 * MiB})
    split = build_placement(inv, req, [("n1", g) for g in range(4)]
                            + [("n2", g) for g in range(4, 8)])
    same = build_placement(inv, req, [("n1", g) for g in range(4)]
                           + [("n2", g) for g in range(4)])
    ep_split = evaluate(inv, split, req).kinds["ep"]
    ep_same = evaluate(inv, same, req).kinds["ep"]
    assert ep_split.slowest is LinkClass.NET_L1 and ep_same.slowest is LinkClass.NET_LEAF
    assert ep_split.time_s > 2 * ep_same.time_s
    # a pipeline send from GPU 0 to GPU 5 of the next host crosses rails
    pp = JobRequest(Layout(pp=2), message_bytes={"pp": 64 * MiB})
    off = evaluate(inv, build_placement(inv, pp, [("n1", 0), ("n2", 5)]), pp).kinds["pp"]
    on = evaluate(inv, build_placement(inv, pp, [("n1", 5), ("n2", 5)]), pp).kinds["pp"]
    assert off.slowest is LinkClass.NET_L1 and on.slowest is LinkClass.NET_LEAF
    assert off.time_s > 2 * on.time_s
