"""The planner's choice on a cluster that mixes GPU models: placements are
ranked by what differs between them (:func:`slurmtopo.cost.step.compared_seconds`).

A step runs at its slowest GPU (:func:`slurmtopo.cost.compute.placement_gpu`),
so where the options of a job put it on different GPU models their compute
differs, and comparing only the communication they leave exposed (as the
choice did since the whole step came) took a placement that mixes an A100
node into an H100 job because it crossed fewer links: twice the step
(the quality bench's ``mixed`` scenarios, where Slurm's default placement
beat slurmtopo by up to 1.87x)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slurmtopo.cost import CostParams, evaluate, lower_bound
from slurmtopo.cost.step import compared_seconds, compute_differs, price_step
from slurmtopo.cost.model_spec import parse_model
from slurmtopo.inventory.model import (ClusterState, Fabric, Inventory, Node, NodeState,
                                       Switch)
from slurmtopo.inventory.presets import preset
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.job.workload import Workload
from slurmtopo.job.groups import build_groups
from slurmtopo.placement import naive_plan
from slurmtopo.placement.baselines import naive_from
from slurmtopo.placement.common import candidates
from slurmtopo.placement.fabric import fabric_tree
from slurmtopo.placement.planner import proposals
from slurmtopo.plan.choice import CostModelSpeeds, params_of, plan

H100, A100 = "hgx-h100-8", "hgx-a100-8"


def mixed_leaf():
    """Three H100 nodes with 7, 6 and 4 free GPUs and a whole free A100
    node, under one leaf switch."""
    kinds = {"h100n001": H100, "h100n002": H100, "h100n003": H100, "a100n001": A100}
    nodes = {n: Node(name=n, hardware=preset(t), type=t) for n, t in kinds.items()}
    inv = Inventory(nodes=nodes, fabric=Fabric(switches=(Switch("leaf1", nodes=tuple(kinds)),)),
                    node_types={H100: preset(H100), A100: preset(A100)})
    busy = {"h100n001": {0}, "h100n002": {0, 1}, "h100n003": {0, 1, 2, 3}}
    state = ClusterState(nodes={n: NodeState(n, "mixed", busy_gpus=frozenset(b))
                                for n, b in busy.items()})
    return inv, state


def request(model: bool = True) -> JobRequest:
    # a 70B model in 4 stages of TP 4: 16 GPUs, which the free H100 GPUs
    # (17) hold, but not with every TP group inside one node
    w = Workload(model=parse_model("params=70e9,layers=80,hidden=8192,seq_len=4096,"
                                   "micro_batches=64")) if model else None
    return JobRequest(layout=Layout(tp=4, pp=4), workload=w)


def models_of(inv, pl):
    return {inv.nodes[h].hardware.gpus[0].model for h in pl.hosts}


def options(inv, state, req):
    """What :func:`slurmtopo.plan.choice.plan` weighs: the planner's
    proposals and Slurm's default placement."""
    tree = fabric_tree(inv)
    cand = candidates(inv, state, req, tree.node_pod)
    groups = build_groups(req.layout)
    opts = proposals(inv, req, groups, cand, tree, CostModelSpeeds(params_of(inv)))
    return [o.placement for o in opts] + [naive_from(inv, req, cand, groups)]


def test_the_choice_keeps_a_job_off_slower_gpus_when_the_step_says_so():
    inv, state = mixed_leaf()
    req = request()
    steps = [(pl, price_step(inv, pl, req)) for pl in options(inv, state, req)]
    # the planner's first proposal keeps every TP group inside a node by
    # taking the A100 node: the least exposed communication of all (what
    # the choice compared before), and the slowest step (A100 compute)
    first, step1 = steps[0]
    assert len(models_of(inv, first)) == 2
    assert step1.exposed_comm_s == min(s.exposed_comm_s for _, s in steps)
    assert step1.time_s == max(s.time_s for _, s in steps)
    pl = plan(inv, state, req)
    assert models_of(inv, pl) == {"NVIDIA H100 80GB HBM3"}, pl.hosts
    mine = price_step(inv, pl, req)
    assert mine.time_s == pytest.approx(min(s.time_s for _, s in steps))
    assert mine.time_s < 0.5 * step1.time_s
    assert "compute included" in pl.notes[-1]


def test_without_a_model_the_choice_is_the_communication():
    """No model described: the step is its communication; the planner
    keeps TP inside nodes with the A100 (nothing says it computes slower)."""
    inv, state = mixed_leaf()
    req = request(model=False)
    pl = plan(inv, state, req)
    step = price_step(inv, pl, req)
    assert step.whole is None and step.time_s == pytest.approx(step.comm_s)
    assert step.time_s <= price_step(inv, naive_plan(inv, state, req), req).time_s


def test_compared_seconds_rank_by_the_whole_step_where_compute_differs():
    inv, state = mixed_leaf()
    req = request()
    fast = price_step(inv, plan(inv, state, req), req)
    slow = replace(fast, compute_s=fast.compute_s * 2)  # the same calls on slower GPUs
    assert compute_differs([fast, slow]) and not compute_differs([fast, fast])
    a, b = compared_seconds([fast, slow])
    # the slower GPUs' extra compute is what differs, on top of the exposed
    # communication (the same here)
    assert b - a == pytest.approx(fast.compute_s)
    assert a == pytest.approx(fast.exposed_comm_s)
    # on one GPU model: the exposed communication alone, as before
    assert compared_seconds([fast, fast]) == [pytest.approx(fast.exposed_comm_s)] * 2


def test_no_placement_is_below_the_whole_step_bound():
    """The lower bound prices the whole step at the fastest GPUs the job
    could run on (here the H100s: 17 free GPUs hold the 16 ranks), so
    every placement's step, at whatever GPU it runs, is at or above it."""
    inv, state = mixed_leaf()
    req = request()
    params = CostParams.from_inventory(inv)
    for st in (state, None):
        bound = lower_bound(inv, req, params, state=st)
        assert bound.comm_s is not None and bound.comm_s <= bound.step_time_s
        for pl in (plan(inv, st, req), naive_plan(inv, st, req)):
            rep = evaluate(inv, pl, req, params, step_only=True)
            assert rep.step_time_s >= bound.step_time_s * (1 - 1e-9)
            assert rep.step.comm_s >= bound.comm_s * (1 - 1e-9)
    # the bound's compute is the H100's: within the exposed communication
    # of the best placement
    bound = lower_bound(inv, req, params, state=state)
    best = price_step(inv, plan(inv, state, req), req, params)
    assert bound.step_time_s >= best.compute_s + best.bubble_s - 1e-9


def test_the_bound_runs_at_the_slower_gpus_when_the_faster_do_not_hold_the_job():
    inv, state = mixed_leaf()
    # 24 ranks: 17 free H100 GPUs do not hold them; every placement has an
    # A100 and runs at its pace, and so does the bound
    req = replace(request(), layout=Layout(tp=4, pp=6))
    req = replace(req, workload=Workload(model=parse_model(
        "params=70e9,layers=84,hidden=8192,seq_len=4096,micro_batches=64")))
    params = CostParams.from_inventory(inv)
    bound = lower_bound(inv, req, params, state=state)
    pl = plan(inv, state, req)
    step = price_step(inv, pl, req, params)
    assert len(models_of(inv, pl)) == 2
    assert step.compute_s + step.bubble_s <= bound.step_time_s <= step.time_s * (1 + 1e-9)
