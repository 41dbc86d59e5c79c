"""A job that one leaf holds only in small pieces (bench scenario
``hgx-fattree:64:60:51007``: DP 82 with EP pairs on nodes in the one leaf
whose even rooms sum to 82, pieces of 2, where Slurm's leaf-constrained
placement modelled 4% faster and pieces of 4 and more were free under
other leaves).

HGX nodes under two leaves: leaf a has rooms 8, 2, 2 (it holds the 12
ranks, as 8+2+2), leaf b 6 and 4 or 5 (it does not). The DP group's
all-reduce is set by its smallest piece: 8+2+2 under one leaf modelled
3.8-4.3x slower than 6+6 across the spine. The planner packed spanning
blocks over the whole job's nodes only when no pod held the job.
"""
from __future__ import annotations

from collections import Counter

import pytest

from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.plan.choice import plan
from tests.placement.test_exact_optimum import cluster

LEAVES = [["a1", "a2", "a3"], ["b1", "b2"]]
A = {"a1": list(range(8)), "a2": [0, 1], "a3": [2, 3]}


@pytest.mark.parametrize("b2, layout", [
    (list(range(4)), Layout(ep=2, dp=12)),  # EP pairs kept on nodes
    (list(range(5)), Layout(dp=12)),
])
@pytest.mark.parametrize("safety_net", [False, True])
def test_no_piece_of_two_when_other_leaves_have_room(b2, layout, safety_net):
    inv, state = cluster("hgx-h100-8", {**A, "b1": list(range(6)), "b2": b2}, LEAVES)
    pl = plan(inv, state, JobRequest(layout), safety_net=safety_net)
    per_host = Counter(s.host for s in pl.slots)
    assert min(per_host.values()) >= 4, dict(per_host)
