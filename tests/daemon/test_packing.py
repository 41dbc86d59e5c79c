"""``slurmtopo daemon --pack domains`` (slurmtopo/daemon/packing.py): small
jobs into racks in use, whole NVL72 racks kept free."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slurmtopo.daemon.decisions import RELEASE, ClusterView, Config, QueuedJob
from slurmtopo.daemon.packing import domain_key, domains_of, packed_request
from slurmtopo.daemon.protocol import DaemonSpec, Shape
from slurmtopo.daemon.scheduler import decide
from slurmtopo.daemon.work import Work
from slurmtopo.job.groups import Layout
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.job.request import JobRequest
from slurmtopo.simulate.clusters import build


@pytest.fixture(scope="module")
def inv():
    return build("nvl72", racks=3)


def _state(busy):
    return ClusterState(nodes={h: NodeState(h, "allocated", frozenset(range(4))) for h in busy})


def _trays(rack, first, last):
    return [f"r{rack:03d}t{t:02d}" for t in range(first, last + 1)]


def test_the_best_fitting_rack_in_use(inv):
    """Rack 1: 12 trays busy (6 free); rack 2: 4 busy (14 free); rack 3
    idle. A 4-tray job fits racks 1 and 2: the one with fewer free trays
    (rack 1). 8 trays: only rack 2 of the racks in use. 16 trays: no rack
    in use holds it (rack 3 is idle: kept out of the packing)."""
    work = Work(inv, ClusterView(state=_state(_trays(1, 1, 12) + _trays(2, 1, 4))))
    req = JobRequest(layout=Layout(dp=16), gpus_per_node=4)
    inside = set(inv.nodes) - set(packed_request(work, inv, req, 16, 4).exclude)
    assert inside == set(_trays(1, 1, 18))
    req8 = JobRequest(layout=Layout(dp=32), gpus_per_node=4)
    assert set(inv.nodes) - set(packed_request(work, inv, req8, 32, 4).exclude) == \
        set(_trays(2, 1, 18))
    assert packed_request(work, inv, JobRequest(layout=Layout(dp=64), gpus_per_node=4),
                          64, 4) is None


def test_domain_key_counts_whole_and_partly_free(inv):
    work = Work(inv, ClusterView(state=_state(_trays(1, 1, 12))))
    touched = _trays(1, 13, 13) + _trays(3, 1, 1)
    doms = domains_of(inv)
    # taking a tray of rack 1: rack 3 stays whole, rack 1 partly free
    assert domain_key(work, inv, touched, {"r001t13": set(range(4))}, doms) == (1, -1)
    # taking one of rack 3: no rack whole, two partly free
    assert domain_key(work, inv, touched, {"r003t01": set(range(4))}, doms) == (0, -2)


def _decide(inv, busy, gpus, pack):
    r = JobRequest(layout=Layout(dp=gpus), gpus_per_node=4)
    q = QueuedJob(job_id=1, spec=DaemonSpec(r, Shape(nodes=-(-gpus // 4), gpus_per_node=4,
                                                     tasks_per_node=4)), submit_time=0.0)
    return decide([q], inv, ClusterView(state=_state(busy)), 10.0,
                  replace(Config(), pack=pack))[-1]


@pytest.mark.parametrize("gpus", [4, 8, 16])
def test_small_jobs_stay_in_racks_in_use(inv, gpus):
    """With --pack domains a job a rack in use can hold never cuts an idle
    rack: racks 1 and 2 partly busy, rack 3 idle."""
    busy = _trays(1, 1, 12) + _trays(2, 1, 4)
    d = _decide(inv, busy, gpus, "domains")
    assert d.action == RELEASE
    assert not any(h.startswith("r003") for h in d.hosts)


def test_without_racks_packing_changes_nothing():
    fat = build("fat-tree", nodes=8, leaf_size=4)
    r = JobRequest(layout=Layout(dp=8), gpus_per_node=8)
    q = QueuedJob(job_id=1, spec=DaemonSpec(r, Shape(nodes=1, gpus_per_node=8, tasks_per_node=8)),
                  submit_time=0.0)
    st = ClusterState(nodes={"n001": NodeState("n001", "mixed", frozenset({0}))})
    a = decide([q], fat, ClusterView(state=st), 10.0, Config())[-1]
    b = decide([q], fat, ClusterView(state=st), 10.0, replace(Config(), pack="domains"))[-1]
    assert (a.action, a.hosts, a.gpus) == (b.action, b.hosts, b.gpus)
