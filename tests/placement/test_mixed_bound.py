"""The lower bound on the free GPUs of a cluster mixing NVL72 racks and
HGX nodes (``nvl72-hgx`` in bench/scenarios.py).

The bound puts a kind's slowest group inside one NVLink domain only when
every group of the kind fits one. It counted the groups the racks' free
GPUs hold and left out the free HGX nodes, which are in no domain: with 4
free HGX nodes and 16 free GPUs in the rack, six TP groups of 8 fit (four
in the nodes, two in the rack) and none crosses the network, but the bound
put the slowest over the network, above what the planner found (the
bench's "a placement beats the bound on the free GPUs (cost bug)" on 6
nvl72-hgx scenarios, 7.6 s placed against a 23.7 s bound).
"""
from __future__ import annotations

import pytest

from bench.scenarios import nvl72_hgx
from slurmtopo.cost import CostParams, evaluate, lower_bound
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.placement import leaf_constrained_plan, naive_plan, random_plan
from slurmtopo.plan.choice import plan


def mixed_state(inv, free_hgx: int, free_trays: int) -> ClusterState:
    """All but ``free_hgx`` HGX nodes and ``free_trays`` trays of the rack busy."""
    hgx = sorted(n.name for n in inv if n.nvlink_domain is None)
    trays = sorted(n.name for n in inv if n.nvlink_domain is not None)
    busy = hgx[free_hgx:] + trays[free_trays:]
    return ClusterState(nodes={n: NodeState(n, "allocated", exclusive=True) for n in busy})


@pytest.fixture(scope="module")
def case():
    inv = nvl72_hgx(36)  # one rack of 18 trays, 18 HGX B200 nodes
    state = mixed_state(inv, free_hgx=4, free_trays=4)
    return inv, state, CostParams.from_inventory(inv)


@pytest.mark.parametrize("layout", [Layout(tp=8, dp=6), Layout(tp=8, pp=2, dp=3)])
def test_no_placement_beats_the_bound_on_the_free_gpus(case, layout):
    inv, state, params = case
    req = JobRequest(layout)
    bound = lower_bound(inv, req, params, state=state)
    # six TP groups of 8: neither the free nodes (4) nor the rack (2) hold
    # them all, both together do
    assert bound.kinds["tp"].slowest is LinkClass.NVLINK_DOMAIN
    for fn in (plan, naive_plan, leaf_constrained_plan, random_plan):
        pl = fn(inv, state, req)
        rep = evaluate(inv, pl, req, params)
        assert rep.step_time_s >= bound.step_time_s * (1 - 1e-9), fn.__name__
        assert rep.kinds["tp"].time_s >= bound.kinds["tp"].time_s * (1 - 1e-9), fn.__name__
    # the planner keeps every TP group inside a node or the rack
    assert evaluate(inv, plan(inv, state, req), req, params).kinds["tp"].slowest \
        <= LinkClass.NVLINK_DOMAIN


def test_the_bound_still_crosses_the_network_when_they_do_not_fit(case):
    inv, state, params = case
    # seven TP groups of 8: 4 in the free nodes, 2 in the rack, one over
    # the network
    bound = lower_bound(inv, JobRequest(Layout(tp=8, dp=7)), params, state=state)
    assert bound.kinds["tp"].slowest.is_network
