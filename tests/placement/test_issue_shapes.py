"""The shapes where an independent check found the planner losing (issue
14), checked on the planner alone (``safety_net=False``: Slurm's default
placement is not among the candidates): lopsided splits on fragmented fat
trees, EP groups straddling NVL72 racks, pure data parallel on L40S, TP=4
on H100 NVL; and the planner against Slurm's default placement on the
quick benchmark scenarios of every cluster shape."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from bench.scenarios import build, busy_state, h100_nvl, hgx_fattree, l40s, nvl72, quality_specs
from slurmtopo.cost import CostParams, evaluate
from slurmtopo.groups import Layout
from slurmtopo.links import LinkClass
from slurmtopo.placement import naive_plan, plan
from slurmtopo.request import JobRequest


def pieces(pl, group):
    return sorted(Counter(pl.slots[r].host for r in group).values(), reverse=True)


def step(inv, pl, req):
    return evaluate(inv, pl, req, CostParams.from_inventory(inv), step_only=True).step_time_s


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fragmented_fat_tree_splits_tp_evenly(seed):
    # 256 HGX nodes, 40% busy: 85-88 whole nodes free, the rest 2-7 free
    # GPUs; a 1,024-GPU job must split some TP groups of 8. Nodes with 4 or
    # more free GPUs are plenty, so every split is 4+4 (pod by pod the
    # last blocks of a nearly full leaf got 7+1 and 6+1+1)
    inv = hgx_fattree(256)
    state = busy_state(inv, 0.4, random.Random(seed))
    req = JobRequest(Layout(tp=8, dp=128))
    pl = plan(inv, state, req, safety_net=False)
    split = [pieces(pl, g) for g in pl.groups["tp"] if len(pieces(pl, g)) > 1]
    assert split, "the state forces some TP groups over two hosts"
    assert all(p == [4, 4] for p in split), Counter(map(tuple, split))
    assert step(inv, pl, req) < step(inv, naive_plan(inv, state, req), req)


def test_nvl72_ep8_groups_stay_in_one_rack():
    # 24 GB200 NVL72 racks, 20% busy, a 1,024-GPU job with EP 8: every
    # expert-parallel group inside one rack's NVLink domain
    inv = nvl72(18 * 24)
    state = busy_state(inv, 0.2, random.Random(0))
    req = JobRequest(Layout(tp=1, ep=8, dp=1024))
    pl = plan(inv, state, req, safety_net=False)
    for g in pl.groups["ep"]:
        racks = {inv.nodes[pl.slots[r].host].nvlink_domain.key for r in g}
        assert len(racks) == 1, g
    assert step(inv, pl, req) < step(inv, naive_plan(inv, state, req), req)


def test_l40s_data_parallel_keeps_rings_on_one_socket():
    # 8x L40S nodes (no NVLink; a ring over a whole node crosses the
    # sockets at the UPI's 10 GB/s): DP 16 as 4 GPUs of one socket on each
    # of 4 nodes models faster than two whole nodes
    inv = l40s(16)
    req = JobRequest(Layout(dp=16))
    pl = plan(inv, None, req, safety_net=False)
    hw = inv.nodes[pl.hosts[0]].hardware
    for h in pl.hosts:
        numa = {hw.gpus[g].numa_node for g in pl.gpus_on(h)}
        assert len(numa) == 1, (h, pl.gpus_on(h))
    assert any("at most 4 ranks a node" in n for n in pl.notes), pl.notes
    assert step(inv, pl, req) < step(inv, naive_plan(inv, None, req), req)


def test_h100_nvl_tp4_on_nvlink_pairs_of_two_nodes():
    # H100 NVL: NVLink pairs, one 400G NIC per pair. TP 4 inside one node
    # rings over PCIe between the pairs; 2+2 over two nodes, each piece an
    # NVLink pair with its own NIC, models faster
    inv = h100_nvl(16)
    req = JobRequest(Layout(tp=4, dp=4))
    pl = plan(inv, None, req, safety_net=False)
    hw = inv.nodes[pl.hosts[0]].hardware
    for g in pl.groups["tp"]:
        assert pieces(pl, g) == [2, 2]
        for h in {pl.slots[r].host for r in g}:
            a, b = (pl.slots[r].gpu for r in g if pl.slots[r].host == h)
            assert hw.link(a, b) is LinkClass.NVLINK
    assert step(inv, pl, req) < step(inv, naive_plan(inv, None, req), req)


SPECS = [s for s in quality_specs(1, quick=True)]


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_planner_alone_never_slower_than_slurms_default(spec):
    sc = build(spec)
    req = sc.job.request()
    mine = step(sc.inv, plan(sc.inv, sc.state, req, safety_net=False), req)
    naive = step(sc.inv, naive_plan(sc.inv, sc.state, req), req)
    assert mine <= naive * (1 + 1e-9), f"{spec.id}: planner {mine:.6g}s, default {naive:.6g}s"
