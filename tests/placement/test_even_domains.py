"""Jobs over several GB200 NVL72 racks (multi-node NVLink domains).

A data-parallel group over racks runs NVLink inside each and the network
between them through the NICs of its ranks in each rack, so its slowest
rack is the one where it has the fewest ranks. The planner took racks the
largest first and the best fit for the rest: the last few ranks of the job
in one more rack, every DP group one or two ranks (NICs) there (the
quality bench's nvl72:144:60:51002 with the default message sizes, where
Slurm's default placement was 2.7x faster). It now also proposes the
ranks spread evenly over the racks it takes
(:meth:`slurmtopo.placement.search.NodeSearch.even_split`), and the cost
model keeps the faster."""
from __future__ import annotations

from collections import Counter

import pytest

from slurmtopo.cost.step import price_step
from slurmtopo.daemon.decisions import ClusterView, Config, QueuedJob
from slurmtopo.daemon.protocol import DaemonSpec, Shape
from slurmtopo.daemon.scheduler import decide
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.placement import naive_plan
from slurmtopo.plan.choice import plan
from slurmtopo.simulate.clusters import build


@pytest.fixture(scope="module")
def inv():
    return build("nvl72", racks=3)


def trays(rack, first, last):
    return [f"r{rack:03d}t{t:02d}" for t in range(first, last + 1)]


def busy(hosts) -> ClusterState:
    return ClusterState(nodes={h: NodeState(h, "allocated", frozenset(range(4)))
                               for h in hosts})


def per_rack(pl):
    return Counter(s.host[:4] for s in pl.slots)


@pytest.mark.parametrize("layout", [Layout(tp=2, dp=42), Layout(tp=4, dp=21), Layout(dp=84)])
def test_ranks_spread_evenly_over_the_racks_taken(inv, layout):
    # 40 free GPUs in racks 1 and 2, 12 in rack 3: 84 ranks need all three
    state = busy(trays(1, 11, 18) + trays(2, 11, 18) + trays(3, 4, 18))
    req = JobRequest(layout=layout)
    pl = plan(inv, state, req)
    # largest first and the best fit for the rest took 40 + 40 + 4
    assert per_rack(pl) == {"r001": 36, "r002": 36, "r003": 12}
    mine = price_step(inv, pl, req).time_s
    naive = naive_plan(inv, state, req)
    assert per_rack(naive)["r003"] == 4  # Slurm's default: hostname order
    assert mine < 0.75 * price_step(inv, naive, req).time_s
    assert any("evenly over the NVLink domains" in n for n in pl.notes)


def test_an_even_split_is_only_proposed_where_the_racks_are_uneven(inv):
    # 80 ranks fill racks 1 and 2 (40 each): nothing to spread
    state = busy(trays(1, 11, 18) + trays(2, 11, 18) + trays(3, 4, 18))
    req = JobRequest(layout=Layout(tp=2, dp=40))
    pl = plan(inv, state, req)
    assert per_rack(pl) == {"r001": 40, "r002": 40}
    assert not any("evenly" in n for n in pl.notes)


def test_one_rack_models_faster_than_two_for_a_small_job(inv):
    """dp=16 on 4 trays (the contention engineer's case): rack 1 has 6
    free trays, rack 2 14, rack 3 is idle. One rack's NVLink is faster than
    two racks joined by the network (it was priced the other way round
    before the NVLSTree latency took the largest rack's ranks), so the
    daemon's plan stays in one rack and Slurm's default placement over two
    is slower."""
    hosts = trays(1, 1, 12) + trays(2, 1, 4)
    state = busy(hosts)
    req = JobRequest(layout=Layout(dp=16), gpus_per_node=4)
    q = QueuedJob(job_id=1, spec=DaemonSpec(req, Shape(nodes=4, gpus_per_node=4,
                                                       tasks_per_node=4)), submit_time=0.0)
    d = decide([q], inv, ClusterView(state=state), 10.0, Config())[-1]
    assert len({h[:4] for h in d.hosts}) == 1, d.hosts
    one = price_step(inv, plan(inv, state, req), req).time_s
    # two trays in rack 1 and two in rack 2: the same job over two racks
    two_racks = busy([h for h in (trays(1, 1, 18) + trays(2, 1, 18) + trays(3, 1, 18))
                      if h not in ("r001t17", "r001t18", "r002t05", "r002t06")])
    split = plan(inv, two_racks, req)
    assert len({h[:4] for h in split.hosts}) == 2
    assert one < price_step(inv, split, req).time_s
