"""The daemon's pure decisions (slurmtopo.daemon.scheduler.decide)."""
from __future__ import annotations

import pytest

from slurmtopo.daemon.protocol import DaemonSpec, Shape
from slurmtopo.daemon.decisions import (OUTSIDE, REHOLD, REJECT, RELEASE, RUNNING, STARTING,
                                        WAIT, ClusterView, Config, JobRecord, QueuedJob)
from slurmtopo.daemon.scheduler import decide
from slurmtopo.daemon.work import slurm_pick
from slurmtopo.daemon.held_job import HeldJob
from slurmtopo.job.groups import Layout
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.job.request import JobRequest

NOW = 1_000_000.0


def busy(**nodes):
    """node=gpus (a set) or node="all" -> ClusterState."""
    out = {}
    for name, gpus in nodes.items():
        if gpus == "all":
            out[name] = NodeState(name, "allocated", exclusive=True)
        elif gpus == "drain":
            out[name] = NodeState(name, "idle", flags=frozenset({"drain"}))
        else:
            out[name] = NodeState(name, "mixed", frozenset(gpus))
    return ClusterState(nodes=out)


def job(job_id, layout, shape=None, age=0.0, priority=0, **kw):
    rec = kw.pop("record", None)
    state = kw.pop("state", "PENDING")
    held = kw.pop("held", True)
    partition = kw.pop("partition", "")
    r = JobRequest(layout=layout, **kw)
    if shape is None:
        g = r.gpus_per_node or min(8, r.world)
        shape = Shape(nodes=-(-r.world // g), gpus_per_node=g, tasks_per_node=g)
    return QueuedJob(job_id=job_id, spec=DaemonSpec(r, shape), submit_time=NOW - age,
                     priority=priority, record=rec, state=state, held=held, partition=partition)


def by_id(decisions):
    out = {}
    for d in decisions:
        out[d.job_id] = d  # the last decision per job wins (rehold then release)
    return out


TP4 = dict(layout=Layout(tp=4), require={"tp": "nvlink"}, gpus_per_node=4)
TP2x2 = dict(layout=Layout(tp=2, dp=2), require={"tp": "nvlink"}, gpus_per_node=4)
# node1: quad 0-3 busy, quad 4-7 free; node2: pairs 0-1 and 4-5 free; node3/4 full
FRAGMENTED = dict(node1={0, 1, 2, 3}, node2={2, 3, 6, 7}, node3="all", node4="all")


@pytest.mark.parametrize("first", ["tp4", "tp2x2"])
def test_two_jobs_that_would_fragment_each_other_both_run(inv, first):
    a = job(1 if first == "tp4" else 2, **TP4)
    b = job(2 if first == "tp4" else 1, **TP2x2)
    ds = by_id(decide([a, b], inv, ClusterView(busy(**FRAGMENTED)), NOW))
    da, db = ds[a.job_id], ds[b.job_id]
    assert da.action == RELEASE and db.action == RELEASE, (da, db)
    assert da.hosts == ("node1",) and da.gpus == {"node1": (4, 5, 6, 7)}
    assert db.hosts == ("node2",) and db.gpus == {"node2": (0, 1, 4, 5)}


def test_priority_order_gives_the_contested_island_to_the_first_job(inv):
    st = busy(node1={0, 1, 2, 3}, node2="all", node3="all", node4="all")
    late = job(1, age=10, **TP4)
    early = job(2, age=100, **TP4)
    ds = by_id(decide([late, early], inv, ClusterView(st), NOW))
    assert ds[2].action == RELEASE and ds[1].action == WAIT
    assert "needs 4 GPUs" in ds[1].reason


def test_slurm_priority_beats_submit_time(inv):
    st = busy(node1={0, 1, 2, 3}, node2="all", node3="all", node4="all")
    ds = by_id(decide([job(1, age=100, **TP4), job(2, age=1, priority=50, **TP4)], inv,
                      ClusterView(st), NOW))
    assert ds[2].action == RELEASE and ds[1].action == WAIT


def test_best_fit_keeps_the_idle_node_whole(inv):
    st = busy(node1={0, 1}, node3="all", node4="all")   # node2 idle
    d = decide([job(1, layout=Layout(tp=2), require={"tp": "nvlink"}, gpus_per_node=2)], inv,
               ClusterView(st), NOW)[0]
    assert d.action == RELEASE and d.hosts == ("node1",)
    # Slurm gives GPUs of the socket with the most free ones: 4-5, a good pair
    assert d.gpus == {"node1": (4, 5)} and d.claim == {"node1": (4, 5)}



def test_slurm_pick_follows_sockets(inv):
    hw = inv.nodes["node1"].hardware
    assert slurm_pick(hw, range(8), 2) == (0, 1)
    assert slurm_pick(hw, [1, 2, 3, 4, 5, 6, 7], 1) == (4,)
    assert slurm_pick(hw, [1, 2, 3, 5, 6, 7], 1) == (1,)
    assert slurm_pick(hw, [0, 2, 4, 6], 4) == (0, 2, 4, 6)
    assert slurm_pick(hw, [4, 5, 6, 7], 4) == (4, 5, 6, 7)


def test_wait_knob_waits_then_takes_the_fallback(inv):
    # node2 (leaf1) and node4 (leaf2) have a free quad each: dp=leaf impossible now
    st = busy(node1="all", node2={0, 1, 2, 3}, node3="all", node4={0, 1, 2, 3})
    kw = dict(layout=Layout(tp=4, dp=2), require={"tp": "nvlink"}, prefer={"dp": "leaf"},
              wait={"dp": 600}, gpus_per_node=4)
    young = decide([job(1, age=30, **kw)], inv, ClusterView(st), NOW)[0]
    assert young.action == WAIT
    assert young.waiting_for == ("dp=leaf",)
    assert young.wait_left == pytest.approx(570)
    assert "waiting up to 9min30s more for its preferred dp=leaf" in young.reason
    assert "a fallback placement is free now" in young.reason
    old = decide([job(1, age=700, **kw)], inv, ClusterView(st), NOW)[0]
    assert old.action == RELEASE and old.taken == "fallback"
    assert set(old.hosts) == {"node2", "node4"}
    assert old.gave_up == ("dp=leaf",)
    assert old.cost_s is not None and old.preferred_cost_s is not None
    assert old.cost_s >= old.preferred_cost_s
    assert "FALLBACK" in old.summary() and "preferred" in old.summary()
    assert any("waited" in n for n in old.notes)


def test_wait_knob_takes_the_preferred_placement_when_it_frees(inv):
    st = busy(node1={0, 1, 2, 3}, node2={0, 1, 2, 3}, node3="all", node4={0, 1, 2, 3})
    kw = dict(layout=Layout(tp=4, dp=2), require={"tp": "nvlink"}, prefer={"dp": "leaf"},
              wait={"dp": 600}, gpus_per_node=4)
    d = decide([job(1, age=30, **kw)], inv, ClusterView(st), NOW)[0]
    assert d.action == RELEASE and d.taken == "preferred"
    assert set(d.hosts) == {"node1", "node2"}          # one leaf


def test_no_wait_means_best_available_at_once(inv):
    st = busy(node1="all", node2={0, 1, 2, 3}, node3="all", node4={0, 1, 2, 3})
    d = decide([job(1, layout=Layout(tp=4, dp=2), require={"tp": "nvlink"},
                    prefer={"dp": "leaf"}, gpus_per_node=4)], inv, ClusterView(st), NOW)[0]
    assert d.action == RELEASE and d.taken == "fallback"


def test_a_preference_that_can_never_be_met_is_not_waited_for(inv):
    # dp=node with 4 GPUs per node (the script's shape) can never hold
    st = busy(node3="all", node4="all")
    d = decide([job(1, layout=Layout(tp=4, dp=2), require={"tp": "nvlink"},
                    prefer={"dp": "node"}, wait={"dp": 600}, gpus_per_node=4)],
               inv, ClusterView(st), NOW)[0]
    assert d.action == RELEASE
    assert any("can never be met" in n for n in d.notes)


def test_wait_on_an_implicit_preference(inv):
    # tp=4 without require: its implicit preference is NVLink; wait for it
    st = busy(node1={0, 1, 4, 5}, node2="all", node3="all", node4="all")
    d = decide([job(1, layout=Layout(tp=4), wait={"tp": 60}, gpus_per_node=4, age=1)], inv,
               ClusterView(st), NOW)[0]
    assert d.action == WAIT and d.waiting_for == ("tp=nvlink",)
    d = decide([job(1, layout=Layout(tp=4), wait={"tp": 60}, gpus_per_node=4, age=100)], inv,
               ClusterView(st), NOW)[0]
    assert d.action == RELEASE and d.taken == "fallback"


def test_wait_on_implicit_dp_waits_for_the_planners_level(inv):
    """The daemon waits for the level the planner itself prefers (one table,
    request.IMPLICIT_PREFER): the DP block in one node, not a leaf."""
    # two free GPUs on each node of leaf1: dp=leaf holds now, dp=node does not
    st = busy(node1={0, 1, 2, 3, 4, 5}, node2={0, 1, 2, 3, 4, 5}, node3="all", node4="all")
    d = decide([job(1, layout=Layout(tp=2, dp=2), require={"tp": "nvlink"}, wait={"dp": 60},
                    age=1)], inv, ClusterView(st), NOW)[0]
    assert d.action == WAIT and d.waiting_for == ("dp=node",)


def test_reservation_keeps_a_small_job_off_the_last_island(inv):
    # the big job needs two free quads on one leaf; node2's quad 4-7 is free
    # now and node1 is busy. A 2-GPU job must not break node2's quad when
    # node4 (other leaf) has room.
    st = busy(node1="all", node2={0, 1, 2, 3}, node3="all", node4={0})
    big = job(1, age=100, layout=Layout(tp=4, dp=2), require={"tp": "nvlink", "dp": "leaf"},
              gpus_per_node=4)
    small = job(2, age=10, layout=Layout(tp=2), require={"tp": "nvlink"}, gpus_per_node=2)
    ds = by_id(decide([big, small], inv, ClusterView(st), NOW))
    assert ds[1].action == WAIT and ds[1].reserved == {"node2": (4, 5, 6, 7)}
    assert ds[2].action == RELEASE and ds[2].hosts == ("node4",)
    # without reservations the small job best-fits onto node2's quad
    ds = by_id(decide([big, small], inv, ClusterView(st), NOW, Config(reservations=0)))
    assert ds[2].action == RELEASE and ds[2].hosts == ("node2",)


def test_a_job_blocked_only_by_a_reservation_says_so(inv):
    st = busy(node1="all", node2={0, 1, 2, 3}, node3="all", node4="all")
    big = job(1, age=100, layout=Layout(tp=4, dp=2), require={"tp": "nvlink", "dp": "leaf"},
              gpus_per_node=4)
    small = job(2, age=10, layout=Layout(tp=2), require={"tp": "nvlink"}, gpus_per_node=2)
    ds = by_id(decide([big, small], inv, ClusterView(st), NOW))
    assert ds[2].action == WAIT
    assert "reserved for job 1" in ds[2].reason


@pytest.mark.parametrize("kw, match", [
    (dict(layout=Layout(tp=16), require={"tp": "nvlink"}), "can never run"),
    (dict(layout=Layout(tp=8, dp=8), gpus_per_node=8), "can never run"),
    (dict(layout=Layout(tp=4), require={"tp": "nvlink"}, nodelist="node9"), "can never run"),
])
def test_jobs_that_can_never_fit_are_rejected(inv, kw, match):
    d = decide([job(1, **kw)], inv, ClusterView(busy()), NOW)[0]
    assert d.action == REJECT and match in d.reason


def test_shape_mismatch_is_rejected(inv):
    d = decide([job(1, layout=Layout(tp=2, dp=4), gpus_per_node=4, shape=Shape(3, 4, 4))], inv,
               ClusterView(busy()), NOW)[0]
    assert d.action == REJECT and "--nodes=3" in d.reason


def test_a_bad_tag_is_rejected(inv):
    q = QueuedJob(job_id=5, spec=None, error="bad slurmtopo request: not valid JSON")
    d = decide([q], inv, ClusterView(busy()), NOW)[0]
    assert d.action == REJECT and "not valid JSON" in d.reason


def test_busy_or_drained_is_not_never(inv):
    st = busy(node1="drain", node2="drain", node3="all", node4="all")
    d = decide([job(1, **TP4)], inv, ClusterView(st), NOW)[0]
    assert d.action == WAIT


def test_partition_limits_the_nodes(inv):
    view = ClusterView(busy(), partitions={"small": frozenset({"node3"}),
                                           "gpu": frozenset({"node1", "node2", "node3", "node4"})})
    d = decide([job(1, partition="small", **TP4)], inv, view, NOW)[0]
    assert d.action == RELEASE and d.hosts == ("node3",)
    d = decide([job(1, partition="small", layout=Layout(tp=4, dp=2), gpus_per_node=4)], inv,
               view, NOW)[0]
    assert d.action == REJECT and "partition small" in d.reason


def test_nodes_without_free_cpus_are_skipped(inv):
    view = ClusterView(busy(node3="all", node4="all"),
                       cpus_free={"node1": 2, "node2": 16, "node3": 0, "node4": 0})
    d = decide([job(1, **TP4)], inv, view, NOW)[0]
    assert d.action == RELEASE and d.hosts == ("node2",)


def test_released_job_keeps_its_gpus_claimed(inv):
    rec = JobRecord(1, phase="released", hosts=("node1",), gpus={"node1": (0, 1, 2, 3)},
                    claim={"node1": (0, 1, 2, 3)}, released_at=NOW - 2)
    st = busy(node2="all", node3="all", node4="all")
    flying = job(1, held=False, record=rec, **TP4)
    ds = by_id(decide([flying, job(2, **TP4)], inv, ClusterView(st), NOW))
    assert ds[1].action == STARTING
    assert ds[2].action == RELEASE and ds[2].gpus == {"node1": (4, 5, 6, 7)}


def test_race_lost_nodes_are_reheld_and_replanned(inv):
    rec = JobRecord(1, phase="released", hosts=("node1",), gpus={"node1": (0, 1, 2, 3)},
                    claim={"node1": (0, 1, 2, 3)}, released_at=NOW - 1)
    st = busy(node1="all", node2="all", node3="all")  # someone took node1
    ds = decide([job(1, held=False, record=rec, **TP4)], inv, ClusterView(st), NOW)
    assert [d.action for d in ds] == [REHOLD, RELEASE]
    assert "race" in ds[0].reason and "node1" in ds[0].reason
    assert ds[1].hosts == ("node4",)


def test_release_grace_expiry_avoids_the_nodes(inv):
    rec = JobRecord(1, phase="released", hosts=("node1",), gpus={"node1": (0, 1, 2, 3)},
                    claim={"node1": (0, 1, 2, 3)}, released_at=NOW - 100)
    st = busy(node3="all", node4="all")
    ds = decide([job(1, held=False, record=rec, **TP4)], inv, ClusterView(st), NOW,
                Config(release_grace=30, avoid_for=300))
    assert [d.action for d in ds] == [REHOLD, RELEASE]
    assert ds[0].avoid == {"node1": NOW + 300}
    assert ds[1].hosts == ("node2",)


def test_running_and_outside_jobs(inv):
    rec = JobRecord(1, phase="released", hosts=("node1",), gpus={"node1": (0, 1, 2, 3)})
    running = QueuedJob(1, spec=None, state="RUNNING", held=False, record=rec,
                        nodes=("node1",), gpus={"node1": (0, 1, 2, 3)})
    reheld = job(2, held=True, record=JobRecord(2, phase="released"), **TP4)
    released_by_hand = job(3, held=False, **TP4)
    ds = by_id(decide([running, reheld, released_by_hand], inv, ClusterView(busy()), NOW))
    assert ds[1].action == RUNNING
    assert ds[2].action == OUTSIDE and "held by someone else" in ds[2].reason
    assert ds[3].action == OUTSIDE


def test_exclusive_jobs_take_whole_nodes(inv):
    st = busy(node1={0}, node3="all", node4="all")
    d = decide([job(1, layout=Layout(tp=4), exclusive=True, gpus_per_node=4)], inv,
               ClusterView(st), NOW)[0]
    assert d.action == RELEASE and d.hosts == ("node2",)
    assert d.claim == {"node2": tuple(range(8))}


def test_a_job_waits_for_its_preference_and_knows_its_cost(inv):
    # two half-free nodes on different leaves: dp=leaf is not free now, so
    # the job waits (up to its --wait) and the cost it waits for is known
    st = busy(node1="all", node2={0, 1, 2, 3}, node3="all", node4={0, 1, 2, 3})
    r = JobRequest(layout=Layout(tp=4, dp=2), require={"tp": "nvlink"}, prefer={"dp": "leaf"},
                   wait={"dp": 600}, gpus_per_node=4)
    q = QueuedJob(job_id=0, spec=DaemonSpec(request=r, shape=Shape()), submit_time=NOW)
    cfg = Config(default_wait=0.0, reservations=0)
    d = decide([q], inv, ClusterView(st), NOW, config=cfg)[-1]
    held = HeldJob(q, inv, ClusterView(st), NOW, cfg)
    assert held.prefs == {"dp": "leaf"} and held.waits == {"dp": 600.0}
    assert d.action == WAIT and d.preferred_cost_s is not None and d.preferred_cost_s > 0


def test_the_cost_model_is_advice_but_a_bug_is_not_swallowed(monkeypatch):
    # what the cost model raises on what it cannot price leaves the step time
    # unknown; anything else is a bug and goes on to the per-job barrier
    from slurmtopo.cost import step
    from slurmtopo.daemon import scheduler
    from slurmtopo.errors import InventoryError

    for exc, swallowed in ((InventoryError("bad cost block"), True),
                           (ValueError("out of domain"), True),
                           (RuntimeError("a bug"), False)):
        def boom(*_args, exc=exc, **_kw):
            raise exc
        monkeypatch.setattr(step, "price_step", boom)
        if swallowed:
            assert scheduler.job_step_time(None, None, None, None) is None
        else:
            with pytest.raises(RuntimeError):
                scheduler.job_step_time(None, None, None, None)


# ---------------------------------------------------------------------------
# the job's launcher is part of the daemon's choice, as at submission


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_torchrun_job_is_released_on_a_placement_torchrun_can_start(inv, launcher):
    """node1 and node2 busy: the faster-modelled nesting interleaves the
    ranks of tp=2 pp=2 dp=4 over node3 and node4, which torchrun cannot
    start (its rank is node rank * 8 + local rank). The daemon used to
    plan every held job as if srun started it."""
    from dataclasses import replace

    from slurmtopo.cost.model_spec import ModelSpec
    from slurmtopo.job.workload import Workload
    from slurmtopo.plan.rankmap import node_contiguous

    q = job(1, layout=Layout(tp=2, pp=2, dp=4))
    # a model whose activations weigh more than its gradients: the nesting
    # that keeps each pipeline inside a node models clearly faster
    small = Workload(model=ModelSpec(params=10 ** 9, layers=16, hidden=8192))
    req = replace(q.spec.request, workload=small)
    q = QueuedJob(job_id=1, spec=DaemonSpec(req, q.spec.shape, launcher=launcher),
                  submit_time=NOW)
    d = decide([q], inv, ClusterView(busy(node1="all", node2="all")), NOW)[-1]
    assert d.action == RELEASE and d.hosts == ("node3", "node4")
    why = node_contiguous(d.placement)
    if launcher == "torchrun":
        assert why is None
    else:  # srun is not held back: it takes the faster nesting
        assert why is not None and "interleaves" in why

