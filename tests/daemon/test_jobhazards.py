"""The placement daemon's own pre-launch hazard checks (issue 38): the job's
hazard policy and NCCL release travel in its v1 request
(slurmtopo/daemon/jobhazards.py), and the placement the daemon is about to
pin is checked with them (slurmtopo/daemon/scheduler.py): a placement
without an error hazard is preferred, one with an error is never released
(the job is held, backs off unplanned, claiming no GPU, and is let go with
the reason in its comment; at once when even the empty cluster gives it the
hazard), warnings are logged and journalled. The pure decisions first, then
the loop against the in-memory Slurm."""
from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtopo import api
from slurmtopo.daemon.decisions import RELEASE, WAIT, ClusterView, Config, QueuedJob
from slurmtopo.daemon.jobhazards import NO_HAZARDS, JobHazards, hazards_from_dict
from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.protocol import (PREFIX, REJECTED_PREFIX, ProtocolError, Shape,
                                       make_comment, parse_comment, request_to_dict)
from slurmtopo.daemon.scheduler import decide
from slurmtopo.daemon.spool import read_events
from slurmtopo.daemon.submit import submit_for_daemon
from slurmtopo.errors import SlurmtopoError
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.testing.slurm_backend import FakeSlurm
from tests.daemon.test_scheduler import NOW, busy, by_id, job

ROOT = Path(__file__).resolve().parents[2]
NVL72 = ROOT / "etc" / "examples" / "gb200-nvl72-rack.yaml"


def with_hazards(q: QueuedJob, *items: str, nccl=None) -> QueuedJob:
    return replace(q, spec=replace(q.spec, hazards=JobHazards.of(items, nccl)))


# --------------------------------------------------------------------------
# the request


def test_the_policy_and_release_travel_in_the_comment():
    req = JobRequest(layout=Layout(tp=4, dp=2), gpus_per_node=4)
    h = JobHazards.of(["all=warn", "uneven-ranks=error", "rail-alignment=off"], "v2.24.3-1")
    comment = make_comment(req, Shape(2, 4, 4), hazards=h)
    assert ('"hazards":{"policy":["group-domain=warn","mnnvl-clique=warn",'
            '"rail-alignment=off","uneven-ranks=error"],"nccl":"v2.24.3-1"}') in comment
    spec = parse_comment(comment)
    assert spec.hazards == h and spec.request == req


def test_a_request_without_them_is_read_as_before():
    req = JobRequest(layout=Layout(tp=4), gpus_per_node=4)
    assert "hazards" not in request_to_dict(req, hazards=NO_HAZARDS)
    assert make_comment(req) == make_comment(req, hazards=JobHazards())
    spec = parse_comment(PREFIX + '{"layout":{"tp":4},"gpn":4}')
    assert spec.hazards == NO_HAZARDS


@pytest.mark.parametrize("value, says", [
    ([], "hazards must be an object"),
    ({"policy": "uneven-ranks=error"}, "hazards.policy must be a list"),
    ({"policy": ["uneven-ranks=error"] * 17}, "at most 16"),
    ({"policy": ["x" * 65]}, "hazards.policy must be a list"),
    ({"policy": [7]}, "hazards.policy must be a list"),
    ({"policy": ["uneven-ranks=maybe"]}, "hazards.policy 'uneven-ranks=maybe': expected"),
    ({"policy": ["stack-smash=error"]}, "KIND one of"),
    ({"nccl": 2.24}, "hazards.nccl must be an NCCL release"),
    ({"nccl": "2.24.3.1.5"}, "hazards.nccl '2.24.3.1.5' is not an NCCL version"),
    ({"nccl": "9" * 70}, "hazards.nccl must be an NCCL release"),
    ({"level": "error"}, "unknown hazards field(s): 'level'"),
])
def test_a_bad_hazards_field_is_one_protocol_error(value, says):
    with pytest.raises(ValueError) as exc:
        hazards_from_dict(value)
    assert says in str(exc.value) and "\n" not in str(exc.value)
    tag = PREFIX + json.dumps({"layout": {"tp": 4}, "hazards": value}, separators=(",", ":"))
    with pytest.raises(ProtocolError, match="hazards"):
        parse_comment(tag)


_items = st.one_of(st.sampled_from(["uneven-ranks=error", "all=off", "group-domain=warn",
                                     "mnnvl-clique=warning", "=", "all", "rail-alignment=on"]),
                   st.text(max_size=80), st.integers(), st.none())
_values = st.one_of(st.lists(_items, max_size=20), st.text(max_size=80),
                    st.sampled_from(["2.24.3", "v2.27.7-1", "2.30", "2", "99999.1"]),
                    st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(field=st.dictionaries(st.sampled_from(["policy", "nccl", "level"]), _values, max_size=3))
def test_any_hazards_field_reads_or_is_refused(field):
    """Whatever a user writes in ``hazards``: a JobHazards whose policy the
    checks accept, or a one-line ProtocolError, nothing else."""
    text = json.dumps({"layout": {"tp": 2}, "hazards": field}, separators=(",", ":"))
    try:
        spec = parse_comment(PREFIX + text)
    except ProtocolError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(spec.hazards, JobHazards)
    assert len(spec.hazards.policy) <= 4 and JobHazards.of(spec.hazards.policy) == \
        replace(spec.hazards, nccl=None)


def test_the_submit_options_reach_the_daemons_request():
    """`slurmtopo sbatch --daemon --hazard ... --nccl-version`: the use case
    writes what the job was checked with into its comment."""
    cluster = api.load_cluster(str(ROOT / "etc" / "examples" / "devcluster.yaml"))
    job_ = api.prepare(cluster, None, JobRequest(layout=Layout(tp=4), gpus_per_node=4),
                       ("python", "train.py"),
                       api.ScriptOptions(hazards=("uneven-ranks=error",),
                                         nccl_version_env="2.27.7"), queue=True,
                       for_daemon=True)
    backend = FakeSlurm(auto_schedule=False)
    done = api.submit(job_, backend, held=True)
    spec = parse_comment(backend.jobs_[done.job_id].comment)
    assert spec.hazards == JobHazards(("uneven-ranks=error",), "2.27.7")
    # a policy the options would refuse is refused before anything is submitted
    with pytest.raises(SlurmtopoError, match="expected KIND=error"):
        submit_for_daemon(backend, spec.request, "#!/bin/sh\ntrue\n", hazards=("nope",))
    assert len(backend.jobs_) == 1


# --------------------------------------------------------------------------
# the decisions


#: node1-node3 have 3 GPUs free (5-7), node4 is free: best fit puts 8 ranks
#: 3+3+2 and keeps node4 whole for others
THREE_THREE_THREE = dict(node1=set(range(5)), node2=set(range(5)), node3=set(range(5)))


def test_a_placement_without_an_error_hazard_is_preferred(inv):
    free_shape = job(1, layout=Layout(dp=8), shape=Shape())
    d = by_id(decide([free_shape], inv, ClusterView(busy(**THREE_THREE_THREE)), NOW))[1]
    assert d.action == RELEASE and sorted(len(g) for g in d.gpus.values()) == [2, 3, 3]
    assert any(h.startswith("hazard uneven-ranks (warning)") for h in d.hazards)
    even = with_hazards(free_shape, "uneven-ranks=error")
    d = by_id(decide([even], inv, ClusterView(busy(**THREE_THREE_THREE)), NOW))[1]
    assert d.action == RELEASE and d.gpus == {"node4": tuple(range(8))}, d
    assert "1 placement(s) passed over for an error hazard (node[1-3]: uneven-ranks)" in d.notes
    assert d.hazards == ()


def test_nothing_free_without_the_hazard_is_a_refusal_that_holds_nothing(inv):
    """node1 has 6 GPUs free and node2 2: the only free placement of 8
    ranks is 6+2. Under uneven-ranks=error the job is not released, gets no
    reservation (it is not waiting for room: the room is there), and the
    next job takes node1's GPUs in the same pass. On the empty cluster it
    would run on one node: the refusal is not final."""
    st = busy(node1={0, 1}, node2=set(range(6)), node3="all", node4="all")
    first = with_hazards(job(1, age=100, layout=Layout(dp=8), shape=Shape()),
                         "uneven-ranks=error")
    second = job(2, age=10, layout=Layout(dp=6), gpus_per_node=6)
    ds = by_id(decide([first, second], inv, ClusterView(st), NOW))
    d = ds[1]
    assert d.action == WAIT and d.refused and not d.final and d.reserved == {}, d
    assert d.reason.startswith("not released: every placement free now has an error hazard "
                               "under the job's policy: hazard uneven-ranks (error): ranks per "
                               "node differ (node1: 6, node2: 2)")
    assert ds[2].action == RELEASE and ds[2].gpus == {"node1": (2, 3, 4, 5, 6, 7)}


def test_a_hazard_even_the_empty_cluster_gives_is_final(inv):
    """tp=8 with 4 GPUs a node spreads every TP group over two hosts,
    although a node holds 8 GPUs: a warning by default (released, said),
    refused for good under group-domain=error."""
    spread = job(1, layout=Layout(tp=8), gpus_per_node=4)
    d = by_id(decide([spread], inv, ClusterView(busy()), NOW))[1]
    assert d.action == RELEASE and d.hazards[0].startswith("hazard group-domain (warning)")
    d = by_id(decide([with_hazards(spread, "group-domain=error")], inv, ClusterView(busy()),
                     NOW))[1]
    assert d.action == WAIT and d.final and d.refused == d.reason
    assert d.reason.startswith("not released: even on the empty cluster its placement has an "
                               "error hazard under the job's policy: hazard group-domain (error)")


@pytest.fixture(scope="module")
def rack():
    return api.load_cluster(str(NVL72))


@pytest.mark.parametrize("nccl, action", [("2.24.3", WAIT), ("2.25.1", RELEASE),
                                          (None, RELEASE)])
def test_the_jobs_own_nccl_release_decides_the_clique_check(rack, nccl, action):
    """72 ranks in one NVL72 clique: NCCL 2.20-2.24 handles 64 (an error
    by default), 2.25 handles 72; without a release the daemon's inventory
    has none to give, so a release it knows of would fail: a warning."""
    q = with_hazards(job(1, layout=Layout(tp=4, dp=18), gpus_per_node=4), nccl=nccl)
    d = by_id(decide([q], rack, ClusterView(busy()), NOW))[1]
    assert d.action == action, d
    if action == WAIT:
        assert d.final and "hazard mnnvl-clique (error)" in d.reason
        assert "with NCCL 2.24.3" in d.reason
    elif nccl is None:
        assert [h.split(":")[0] for h in d.hazards] == ["hazard mnnvl-clique (warning)"]
        assert "NCCL release is not known" in d.hazards[0]
    else:
        assert d.hazards == ()


def test_the_release_the_jobs_workload_carries_is_used_when_none_other_is(rack):
    """A request whose ``work`` names the NCCL release (the cost model's
    input) and whose ``hazards`` does not: the clique check uses it."""
    from slurmtopo.job.workload import Workload

    q = job(1, layout=Layout(tp=4, dp=18), gpus_per_node=4,
            workload=Workload(nccl_version=(2, 24, 3)))
    d = by_id(decide([q], rack, ClusterView(busy()), NOW))[1]
    assert d.action == WAIT and "with NCCL 2.24.3" in d.reason, d
    d = by_id(decide([with_hazards(q, nccl="2.25.1")], rack, ClusterView(busy()), NOW))[1]
    assert d.action == RELEASE, d      # the hazards field's release wins


def test_the_daemons_own_environment_is_never_read(rack, monkeypatch):
    monkeypatch.setenv("NCCL_VERSION", "2.24.3")
    q = job(1, layout=Layout(tp=4, dp=18), gpus_per_node=4)
    assert by_id(decide([q], rack, ClusterView(busy()), NOW))[1].action == RELEASE


# --------------------------------------------------------------------------
# the loop, against the in-memory Slurm

SCRIPT8 = ("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=8\n"
           "#SBATCH --gpus-per-node=8\nsrun python train.py\n")
SPREAD = ("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n"
          "#SBATCH --gpus-per-node=4\nsrun python train.py\n")


class Clock:
    def __init__(self):
        self.t = time.time()

    def __call__(self):
        return self.t


def test_a_final_hazard_is_let_go_at_once_held_with_the_reason(tmp_path, inv):
    """bob's tp=8 job on 2x4 GPUs under group-domain=error, first in line
    for node1 and node2, the only free nodes; alice's whole-node job after
    it. bob's job is never released: held, its comment says why, never
    cancelled; alice's job runs in the same cycle on the GPUs bob's would
    have taken."""
    slurm = FakeSlurm()
    for n in ("node3", "node4"):
        slurm.occupy(n, range(8), exclusive=True)
    b = submit_for_daemon(slurm, JobRequest(layout=Layout(tp=8), gpus_per_node=4), SPREAD,
                          hazards=("group-domain=error",))
    a = submit_for_daemon(slurm, JobRequest(layout=Layout(tp=8, dp=2), gpus_per_node=8),
                          SCRIPT8.replace("--nodes=1", "--nodes=2"))
    d = Daemon(slurm, inv, str(tmp_path / "spool"))
    ds = {x.job_id: x for x in d.cycle()}
    assert ds[b].action == WAIT and ds[b].final
    assert slurm.releases(b) == 0 and ("cancel", b) not in slurm.calls
    jb = slurm.jobs_[b]
    assert jb.held and jb.state == "PENDING"
    assert jb.comment.startswith(REJECTED_PREFIX) and "hazard group-domain (error)" in jb.comment
    assert slurm.jobs_[a].state == "RUNNING" and set(slurm.jobs_[a].alloc) == {"node1", "node2"}
    events = [e["event"] for e in read_events(str(tmp_path / "spool"), b)]
    assert events == ["hazard-refused", "let-go"]
    status = json.load(open(os.path.join(str(tmp_path / "spool"), "status.json")))
    assert b in [r["job_id"] for r in status["rejected"]]
    assert b not in {x.job_id for x in d.cycle()}     # never looked at again


def test_a_passing_hazard_backs_off_then_runs_without_it(tmp_path, inv):
    """Only node1 (6 free) and node2 (2 free) have room: 6+2 is refused
    under uneven-ranks=error; the job backs off unplanned; once node3
    frees, the next try releases it on an even placement."""
    slurm, clock = FakeSlurm(), Clock()
    slurm.occupy("node1", [0, 1])
    slurm.occupy("node2", range(6))
    blocker = slurm.occupy("node3", range(8), exclusive=True)
    slurm.occupy("node4", range(8), exclusive=True)
    j = submit_for_daemon(slurm, JobRequest(layout=Layout(dp=8)), "#!/bin/bash\nsrun true\n",
                          hazards=("uneven-ranks=error",))
    d = Daemon(slurm, inv, str(tmp_path / "spool"), Config(release_tries=3, retry_backoff=60),
               clock=clock)
    first = {x.job_id: x for x in d.cycle()}[j]
    assert first.action == WAIT and first.refused and not first.final
    assert d.records[j].refusals == 1 and "uneven-ranks" in d.records[j].refused
    clock.t += 10
    second = {x.job_id: x for x in d.cycle()}[j]
    assert second.reason.startswith("backing off") and "hazard uneven-ranks" in second.reason
    slurm.finish(blocker)
    clock.t += 60
    third = {x.job_id: x for x in d.cycle()}[j]
    assert third.action == RELEASE and "node2" not in third.hosts, third
    assert len({len(g) for g in third.gpus.values()}) == 1 and third.hazards == ()
    assert slurm.releases(j) == 1 and d.records[j].refusals == 0
    assert slurm.jobs_[j].comment.startswith(PREFIX)


def test_warnings_are_logged_and_journalled(tmp_path, inv, caplog):
    slurm = FakeSlurm()
    j = submit_for_daemon(slurm, JobRequest(layout=Layout(tp=8), gpus_per_node=4), SPREAD)
    with caplog.at_level("WARNING", logger="slurmtopo.daemon"):
        d = {x.job_id: x for x in Daemon(slurm, inv, str(tmp_path / "spool")).cycle()}[j]
    assert d.action == RELEASE and slurm.releases(j) == 1
    assert f"job {j}: hazard group-domain (warning): tp group 0 (8 ranks) spans 2 hosts" \
        in caplog.text
    released = [e for e in read_events(str(tmp_path / "spool"), j) if e["event"] == "released"]
    assert released[0]["hazards"] == list(d.hazards) and len(d.hazards) == 1
