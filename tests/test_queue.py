"""Queue by default: "now", "not now" (busy or down nodes) and "never", and
which nodes a job may use at all (partition, --constraint)."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurmtopo import api
from slurmtopo.errors import PlacementError, SlurmtopoError
from slurmtopo.job.groups import Layout
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.plan.choice import plan
from slurmtopo.placement.queue import (INELIGIBLE, eligible_state, fits_ever, parse_constraint,
                                       plan_for_queue)
from slurmtopo.job.request import JobRequest

INV = Path(__file__).resolve().parents[1] / "etc" / "examples" / "h100-4node-2leaf.yaml"


@pytest.fixture(scope="module")
def inv():
    return api.load_cluster(str(INV))


def _req(**kw):
    return JobRequest(layout=Layout(**kw).resolved())


def test_now_busy_down_never(inv):
    busy = ClusterState(nodes={"gpu01": NodeState("gpu01", "allocated", exclusive=True),
                               "gpu02": NodeState("gpu02", "allocated", exclusive=True),
                               "gpu03": NodeState("gpu03", "down", exclusive=True)})
    assert plan_for_queue(inv, busy, _req(tp=8), plan).when == "now"
    q = plan_for_queue(inv, busy, _req(tp=8, dp=2), plan)
    assert q.when == "busy" and q.note.startswith("not now: needs 16 GPUs")
    assert "gpu03" not in q.placement.hosts           # down nodes stay out while busy ones do
    q = plan_for_queue(inv, busy, _req(tp=8, dp=4), plan)
    assert q.when == "down" and "down or drained now" in q.note
    with pytest.raises(PlacementError, match="^never: .*needs 64 GPUs"):
        plan_for_queue(inv, busy, _req(tp=8, dp=8), plan)
    assert fits_ever(inv, busy, _req(tp=8, dp=4), plan) is None
    assert "64 GPUs" in fits_ever(inv, busy, _req(tp=8, dp=8), plan)


def test_partition_members_are_the_limit(inv):
    state, notes = eligible_state(inv, ClusterState(), partition_members=["gpu01", "gpu02"])
    assert state.nodes["gpu03"].state == INELIGIBLE and "gpu01" not in state.nodes
    assert plan_for_queue(inv, state, _req(tp=8, dp=2), plan).when == "now"
    with pytest.raises(PlacementError, match="^never:"):
        plan_for_queue(inv, state, _req(tp=8, dp=3), plan)


def test_constraint_uses_inventory_and_slurm_features(inv):
    # the example's nodes all have feature h100; Slurm says gpu02 also has ib
    state, notes = eligible_state(inv, ClusterState(), constraint="h100&ib",
                                  features={"gpu02": ["ib"]})
    assert not notes
    usable = [n for n in inv.nodes if state.of(n).usable]
    assert usable == ["gpu02"]
    state, _ = eligible_state(inv, ClusterState(), constraint="[ib|h100]")
    assert all(state.of(n).usable for n in inv.nodes)
    state, notes = eligible_state(inv, ClusterState(), constraint="h100*2")
    assert "left to Slurm" in notes[0] and all(state.of(n).usable for n in inv.nodes)


@pytest.mark.parametrize("text,feats,want", [
    ("a", {"a"}, True), ("a&b", {"a"}, False), ("a|b", {"b"}, True),
    ("a&(b|c)", {"a", "c"}, True), ("a,b", {"a", "b"}, True), ("(a|b)&c", {"a"}, False)])
def test_parse_constraint(text, feats, want):
    pred, note = parse_constraint(text)
    assert note is None and pred(feats) is want


@pytest.mark.parametrize("text", ["a&", "(a", "a)", "&a", "a;b", ""])
def test_bad_constraint(text):
    with pytest.raises(SlurmtopoError, match="--constraint"):
        parse_constraint(text)


def test_daemon_job_is_shaped_for_its_preference(inv):
    """On a busy cluster the free GPUs give 2 nodes x 4; with tensor pairs
    required inside a node, --prefer dp=node cannot be met with that shape, so the script is shaped 1 node x 8 (the
    daemon can then wait for it), and the user is told."""
    from slurmtopo.placement.queue import shape_for_preferences

    busy = ClusterState(nodes={n: NodeState(n, "mixed", busy_gpus=frozenset(range(4, 8)))
                               for n in inv.nodes})
    req = JobRequest(layout=Layout(tp=2, dp=4).resolved(), require={"tp": "node"},
                     prefer={"dp": "node"})
    now = api.plan_job(inv, busy, req)
    assert len(now.hosts) == 2
    shaped, notes = shape_for_preferences(inv, busy, req, now, plan)
    assert len(shaped.hosts) == 1 and len(notes) == 1
    assert "--prefer dp=node cannot be met with the shape planned on the free GPUs " \
           "(2 node(s) x 4 GPU(s)); the job is shaped for it instead (1 node(s) x 8 GPU(s))" \
           in notes[0]
    # a preference the shape already meets changes nothing
    same, notes = shape_for_preferences(inv, busy, JobRequest(
        layout=Layout(tp=2, dp=4).resolved(), prefer={"tp": "node"}), now, plan)
    assert same is now and notes == []


def test_preference_that_can_never_be_met_is_said(inv):
    from slurmtopo.placement.queue import shape_for_preferences

    req = JobRequest(layout=Layout(tp=16).resolved(), prefer={"tp": "node"})
    p = api.plan_job(inv, ClusterState(), req)
    same, notes = shape_for_preferences(inv, ClusterState(), req, p, plan)
    assert same is p
    assert notes == ["--prefer tp=node can never be met on this cluster; the placement daemon "
                     "will not wait for it"]
