"""From GPU counts to layouts, and the policies' options and requests."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurmtopo.api import load_cluster
from slurmtopo.errors import SlurmtopoError
from slurmtopo.simulate.engine import JobSpec
from slurmtopo.simulate.layouts import BUILTIN, JobShape, load_rules, shape_of
from slurmtopo.simulate.policies import (DaemonPolicy, QueuePolicy, allocation, parse_policy,
                                         parse_time)
from slurmtopo.simulate.trace import TraceJob

ROOT = Path(__file__).resolve().parents[2]
INV = str(ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml")
RULES = BUILTIN["default"]


@pytest.mark.parametrize("gpus, nodes, want", [
    (1, None, JobShape(1, 1, 1, 1, 1)),          # data parallel
    (8, None, JobShape(8, 1, 8, 1, 1)),
    (16, None, JobShape(16, 2, 8, 8, 1)),        # TP 8 in a node, DP across
    (12, None, JobShape(12, 2, 6, 2, 1)),        # 6 a node: TP gcd(8, 12, 6) = 2
    (20, None, JobShape(20, 3, 7, 1, 1)),        # 7+7+6: TP gcd(8, 20, 7) = 1
    (256, None, JobShape(256, 32, 8, 8, 4)),     # the largest: PP 4 too
    (4, 2, JobShape(4, 2, 2, 1, 1)),             # the trace's node count is followed
    (16, 1, JobShape(16, 2, 8, 8, 1)),           # ... unless the nodes cannot hold it
])
def test_shapes(gpus, nodes, want):
    got = shape_of(gpus, nodes, RULES, 8)
    assert got == want
    assert got.tp * got.pp * got.dp == gpus
    req = got.request()
    assert req.layout.world == gpus and req.gpus_per_node == got.gpus_per_node


def test_dp_rule_and_description():
    assert shape_of(64, None, BUILTIN["dp"], 8) == JobShape(64, 8, 8, 1, 1)
    assert RULES.describe() == "default (1-8 GPUs: dp; 9-128 GPUs: tp 8; 129+ GPUs: tp 8, pp 4)"


def test_rules_file(tmp_path):
    p = tmp_path / "rules.yaml"
    p.write_text("slurmtopo: layout-rules\nversion: 1\nrules:\n  - {up_to: 4}\n"
                 "  - {up_to: 64, tp: 4}\n  - {tp: 8, pp: 2}\n")
    rules = load_rules(str(p))
    assert shape_of(4, None, rules, 8).tp == 1
    assert shape_of(32, None, rules, 8) == JobShape(32, 4, 8, 4, 1)
    assert shape_of(128, None, rules, 8) == JobShape(128, 16, 8, 8, 2)


@pytest.mark.parametrize("text, line, what", [
    ("slurmtopo: layout-rules\nversion: 1\nrules: []\n", 3, "rules is empty"),
    ("slurmtopo: layout-rules\nversion: 1\nrules:\n  - {tp: 2}\n  - {tp: 4}\n", 4,
     "only the last rule"),
    ("slurmtopo: layout-rules\nversion: 1\nrules:\n  - {up_to: 8}\n  - {up_to: 4}\n", 5,
     "must be larger"),
    ("slurmtopo: layout-rules\nversion: 1\nrules:\n  - {up_to: 8, dp: 2}\n", 4, "unknown key"),
    ("slurmtopo: layout-rules\nversion: 1\nrules:\n  - {tp: 0}\n", 4, "bad 'tp'"),
    ("slurmtopo: layout-rules\nversion: 2\nrules: [{tp: 1}]\n", 2, "version 2"),
    ("slurmtopo: inventory\nversion: 1\n", 1, "not a layout-rules file"),
])
def test_rules_file_refused(tmp_path, text, line, what):
    p = tmp_path / "rules.yaml"
    p.write_text(text)
    with pytest.raises(SlurmtopoError) as exc:
        load_rules(str(p))
    assert what in exc.value.message and exc.value.line == line


def test_unknown_rule():
    with pytest.raises(SlurmtopoError, match="not a built-in rule"):
        load_rules("tensorish")


def test_policy_specs():
    assert parse_policy("slurm").label == "slurm"
    assert parse_policy(" Daemon:wait=10m,interval=30 ").label == "daemon:wait=600,interval=30"
    assert parse_policy("slurm-switches:wait=1h").get("wait") == 3600.0
    assert parse_policy("daemon").get("reservations") == 1
    assert parse_policy("daemon:level=tor").get("level") == "leaf"
    assert parse_time("90s", "x") == 90 and parse_time("1.5d", "x") == 129600


@pytest.mark.parametrize("text, what", [
    ("fifo", "unknown policy"),
    ("slurm:wait=5", "has no option 'wait'"),
    ("slurmtopo:x=1", "has no option 'x' (options: topology)"),
    ("random:x=1", "it takes none"),
    ("daemon:pack=racks", "known: domains"),
    ("daemon:wait", "is not key=value"),
    ("daemon:wait=soon", "is not a time"),
    ("daemon:wait=400d", "more than a year"),
    ("daemon:interval=0", "more than 0"),
    ("daemon:reservations=-1", "not a whole number"),
    ("daemon:level=rack", "unknown level"),
    ("slurm:topology=dragonfly", "known: tree, flat, block"),
    ("slurm:segment=x", "not a whole number"),
    ("daemon:wait=1,wait=2", "given twice"),
])
def test_policy_specs_refused(text, what):
    with pytest.raises(SlurmtopoError) as exc:
        parse_policy(text)
    assert what in exc.value.message


def _job(gpus: int, submit: float = 0.0) -> JobSpec:
    shape = shape_of(gpus, None, RULES, 8)
    return JobSpec(0, TraceJob("j", submit, 10.0, gpus), shape, shape.request(), 1.0)


def test_daemon_requests():
    inv = load_cluster(INV)
    pol = DaemonPolicy(parse_policy("daemon:wait=300"), inv)
    one = _job(8)
    assert pol.request(one) is one.request and pol.wait_of(one) == 0
    two = _job(16)
    req = pol.request(two)
    assert dict(req.prefer) == {"dp": "leaf", "tp": "node"}
    assert dict(req.wait) == {"dp": 300.0, "tp": 300.0} and pol.wait_of(two) == 300.0
    q = pol.queued(two)
    assert (q.job_id, q.spec.shape.nodes, q.spec.shape.gpus_per_node, q.submit_time) == \
        (1, 2, 8, 0.0)
    level = DaemonPolicy(parse_policy("daemon:wait=1,level=spine"), inv)
    assert level.request(two).prefer["dp"] == "spine"


def test_switches_hold_a_job_that_spans_leaves():
    from slurmtopo.inventory.model import ClusterState, NodeState

    inv = load_cluster(INV)
    pol = QueuePolicy(parse_policy("slurm-switches:wait=100"), inv)
    # gpu02 and gpu03 busy: a 2-node job gets gpu01 + gpu04, two leaves
    st = ClusterState(nodes={n: NodeState(n, state="allocated", busy_gpus=frozenset(range(8)))
                             for n in ("gpu02", "gpu03")})
    job = _job(16, submit=50.0)
    held = pol.place(st, job, 60.0)
    assert sorted(held.alloc) == ["gpu01", "gpu04"] and held.hold_until == 150.0
    assert pol.place(st, job, 150.0).hold_until is None
    plain = QueuePolicy(parse_policy("slurm"), inv).place(st, job, 60.0)
    assert plain.hold_until is None and plain.alloc == held.alloc


def test_allocation_tops_up_to_the_gpus_per_node():
    from slurmtopo.inventory.model import ClusterState, NodeState
    from slurmtopo.job.groups import Layout
    from slurmtopo.job.request import JobRequest
    from slurmtopo.plan.choice import plan

    inv = load_cluster(INV)
    # 12 GPUs, 8 a node: the planner runs 8 + 4 ranks, Slurm allocates 8 on both
    req = JobRequest(Layout(tp=4, dp=3), gpus_per_node=8)
    st = ClusterState(nodes={"gpu01": NodeState("gpu01", state="mixed",
                                                busy_gpus=frozenset({0}))})
    pl = plan(inv, st, req)
    alloc = allocation(inv, st, pl, 8)
    assert sorted(len(g) for g in alloc.values()) == [8, 8]
    for h, gs in alloc.items():
        assert set(pl.gpus_on(h)) <= set(gs)
        assert not set(gs) & set(st.of(h).busy_gpus)
