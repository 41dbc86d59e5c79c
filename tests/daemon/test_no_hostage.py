"""The second trust-boundary round (issue 33), in the daemon's loop against
the in-memory Slurm: one user's job never holds the others hostage, and
never wears the daemon down.

* a job the daemon cannot release (its fresh record disagrees with the
  snapshot, Slurm refuses its pin, its record cannot be read) backs off
  unplanned, claiming no GPU, and is let go with the reason in its comment
  after ``release_tries``;
* tagged array and heterogeneous jobs are refused with the reason;
* requests are decoded once per content, within a budget per user, their
  names never expanded; plans on the empty cluster are forgotten when
  their jobs leave the queue; request files of jobs that left are removed.

The same findings on real Slurm, with two users and the daemon as root:
tests/integration/test_daemon_trust2.py.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from slurmtopo.daemon import protocol, requests as requests_mod
from slurmtopo.daemon.decisions import Config
from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.protocol import PREFIX, REJECTED_PREFIX, Shape, make_comment
from slurmtopo.daemon.spool import prepare_spool, read_events
from slurmtopo.daemon.submit import submit_for_daemon
from slurmtopo.errors import SlurmError
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from tests.daemon.conftest import quad8_inventory
from slurmtopo.testing.slurm_backend import FakeSlurm

SCRIPT = ("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=4\n"
          "#SBATCH --gpus-per-node=4\nsrun python train.py\n")
SCRIPT8 = SCRIPT.replace("=4\n", "=8\n")
TP4 = JobRequest(layout=Layout(tp=4), require={"tp": "nvlink"}, gpus_per_node=4)
TP8 = JobRequest(layout=Layout(tp=8), require={"tp": "node"}, gpus_per_node=8)
BOB_UID = 4242


class Clock:
    def __init__(self):
        self.t = time.time()

    def __call__(self):
        return self.t


def bob_job(slurm, req=TP8, script=SCRIPT8, comment=None) -> int:
    b = submit_for_daemon(slurm, req if comment is None else TP4, script)
    if comment is not None:
        slurm.jobs_[b].comment = comment
    slurm.jobs_[b].user, slurm.jobs_[b].uid = "bob", BOB_UID
    return b


def one_node(slurm):
    """Only node1 free: one whole-node job at a time."""
    for n in ("node2", "node3", "node4"):
        slurm.occupy(n, range(8), exclusive=True)


def status(spool):
    return json.load(open(os.path.join(spool, "status.json")))


# --------------------------------------------------------------------------
# a refusal is not a hostage


def _disagreeing(slurm, b):
    """bob's job looks different when looked up alone than in the listing
    (what a name with forged keys did to the text reader: "its comment
    changed" every cycle)."""
    def hook(job_id):
        if job_id == b:
            slurm.jobs_[b].comment = PREFIX + '{"layout":{"tp":2}}'
    slurm.hooks["job"] = hook

    def back():
        slurm.jobs_[b].comment = make_comment(TP8, Shape(1, 8, 8))
    slurm.hooks["jobs"] = back


@pytest.mark.parametrize("how", ["fresh look-up disagrees", "Slurm refuses the pin"])
def test_a_job_that_cannot_be_released_backs_off_and_is_let_go(tmp_path, how):
    """bob's whole-node job is first in line for the one free node, and
    its release is refused every time. It used to keep the node claimed for
    good (alice's job waited on an idle node); now, after the first refusal,
    it waits unplanned and alice's job takes the node in the next cycle;
    after release_tries refusals bob's job is let go: held, the reason in
    its comment, listed as rejected, never cancelled."""
    slurm, inv, spool, clock = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "s"), Clock()
    one_node(slurm)
    b = bob_job(slurm)
    a = submit_for_daemon(slurm, TP8, SCRIPT8)
    if how == "fresh look-up disagrees":
        _disagreeing(slurm, b)
        why = "comment changed"
    else:
        def refuse(job_id, fields):
            if job_id == b and "ReqNodeList" in fields:
                raise SlurmError("Job resizing not supported for job arrays")
        slurm.hooks["update"] = refuse
        why = "Job resizing not supported"
    d = Daemon(slurm, inv, spool, Config(release_tries=3, retry_backoff=60), clock=clock)
    first = {x.job_id: x for x in d.cycle()}
    assert first[b].action == "release" and first[a].action == "wait"
    assert slurm.releases(b) == 0 and d.records[b].refusals == 1
    # the next cycle: bob's job backs off, claiming nothing; alice's runs
    clock.t += 10
    second = {x.job_id: x for x in d.cycle()}
    assert second[b].action == "wait" and second[b].reason.startswith("backing off")
    assert why in second[b].reason
    assert second[a].action == "release" and slurm.jobs_[a].state == "RUNNING"
    slurm.finish(a)
    # tried again after its back-off (60 s, then 120 s), let go at the third
    for wait in (60, 120):
        clock.t += wait + 1
        assert {x.job_id: x.action for x in d.cycle()}[b] == "release"
    assert slurm.releases(b) == 0 and b not in d.records
    jb = slurm.jobs_[b]
    assert jb.held and jb.state == "PENDING" and ("cancel", b) not in slurm.calls
    assert jb.comment.startswith(REJECTED_PREFIX) and "not released after 3 tries" in jb.comment
    assert b in [r["job_id"] for r in status(spool)["rejected"]]
    events = [e["event"] for e in read_events(spool, b)]
    assert events.count("release-refused") == 2 and events[-1] == "let-go"
    clock.t += 10
    assert b not in {x.job_id for x in d.cycle()}  # never looked at again


def test_an_unreadable_record_is_never_acted_on_and_let_go(tmp_path):
    """A tagged job whose record cannot be read with certainty (text a user
    wrote reads as Slurm's fields) is not planned, claims no GPU, is not
    released: it is left alone, looked at again after a back-off and let
    go with the reason in its comment. An unreadable record without the
    tag is no daemon's business. alice's job is released in the first
    cycle."""
    slurm, inv, spool, clock = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "s"), Clock()
    one_node(slurm)
    b = bob_job(slurm)
    slurm.jobs_[b].unreadable = "Reason= out of Slurm's order"
    other = slurm.submit(SCRIPT, args=["--comment=my experiment"], hold=True)
    slurm.jobs_[other].unreadable = "Foo= is no field Slurm prints"
    a = submit_for_daemon(slurm, TP8, SCRIPT8)
    d = Daemon(slurm, inv, spool, Config(release_tries=2, retry_backoff=60), clock=clock)
    first = {x.job_id: x for x in d.cycle()}
    assert first[b].action == "left-alone" and "cannot be read with certainty" in first[b].reason
    assert other not in first and other not in d.records
    assert first[a].action == "release" and slurm.jobs_[a].state == "RUNNING"
    clock.t += 10
    assert "looked at again in" in {x.job_id: x for x in d.cycle()}[b].reason
    clock.t += 60
    assert b not in {x.job_id for x in d.cycle()}
    jb = slurm.jobs_[b]
    assert jb.comment.startswith(REJECTED_PREFIX) and "out of Slurm" in jb.comment
    assert slurm.releases(b) == 0 and ("cancel", b) not in slurm.calls and jb.held
    assert slurm.jobs_[other].comment == "my experiment"


@pytest.mark.parametrize("kind", ["array", "het"])
def test_a_tagged_array_or_heterogeneous_job_is_refused(tmp_path, kind):
    """Releasing an array's id releases every task at once (two tasks
    started under --max-releases 1), `uhold` leaves running tasks held,
    and Slurm refuses to pin an array's nodes every cycle: such a job is
    rejected at first sight, with the reason in its comment."""
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "s")
    b = bob_job(slurm, TP4, SCRIPT)
    setattr(slurm.jobs_[b], kind, True)
    a = submit_for_daemon(slurm, TP4, SCRIPT)
    ds = {x.job_id: x for x in Daemon(slurm, inv, spool, on_reject="hold").cycle()}
    assert ds[b].action == "reject" and slurm.releases(b) == 0
    assert ("array" if kind == "array" else "heterogeneous") in slurm.jobs_[b].comment
    assert slurm.jobs_[a].state == "RUNNING"


# --------------------------------------------------------------------------
# budgets


def test_requests_are_decoded_once_and_forgotten_when_their_jobs_leave(tmp_path, monkeypatch):
    """A held job's request was decoded again every cycle (request files
    always): 40 jobs with 65,536-name excludes made an 8 s cycle. Each
    distinct request is now decoded once while a job carries it, and
    forgotten with the last such job; the plans on the empty cluster
    made for it go too."""
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "s")
    prepare_spool(spool)
    for n in slurm.node_names:
        slurm.occupy(n, range(8), exclusive=True)  # nothing fits: jobs wait
    calls = []
    real = protocol.parse_comment

    def counting(*a, **kw):
        calls.append(a[0])
        return real(*a, **kw)
    monkeypatch.setattr(protocol, "parse_comment", counting)
    excludes = [f"x{k}n[0-65534]" for k in range(4)]
    jobs = []
    for ex in excludes:
        req = JobRequest(layout=Layout(tp=4), require={"tp": "nvlink"}, gpus_per_node=4,
                         exclude=f"node4,{ex}")
        jobs.append(submit_for_daemon(slurm, req, SCRIPT, spool=spool))
    d = Daemon(slurm, inv, spool)
    for _ in range(3):
        d.cycle()
    assert len(calls) == 4 and len(d.requests) == 4
    # only the inventory's names are kept: node4 of 65,537
    spec = d.requests.read(slurm.job(jobs[0]))[0]
    assert spec.request.exclude == ("node4",)
    ideal = d.memo.get("ideal") or {}
    assert 0 < len(ideal) <= 8
    for j in jobs[:3]:
        slurm.cancel(j)
    d.cycle()
    assert len(d.requests) == 1 and len(d.memo.get("ideal") or {}) <= 2


def test_one_users_new_requests_are_read_within_a_budget(tmp_path, monkeypatch):
    """bob submits more new request bytes than one cycle reads for him: the
    rest wait for the next cycle, unplanned; alice's request is read in the
    first cycle all the same."""
    monkeypatch.setattr(requests_mod, "USER_BYTES_PER_CYCLE", 2000)
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "s")
    prepare_spool(spool)
    bobs = []
    for k in range(3):
        req = JobRequest(layout=Layout(tp=4), require={"tp": "nvlink"}, gpus_per_node=4,
                         exclude=",".join(f"b{k}x{i}-{i * 37 % 101}" for i in range(120)))
        text = protocol.dumps_compact(protocol.request_to_dict(req, Shape(1, 4, 4)))
        name = protocol.write_request_file(spool, text, uid=BOB_UID)
        os.chown(os.path.join(spool, "requests", name + ".json"), BOB_UID, -1)
        bobs.append(bob_job(slurm, req, SCRIPT, comment=f"{PREFIX}@{name}"))
    a = submit_for_daemon(slurm, TP4, SCRIPT)
    d = Daemon(slurm, inv, spool)
    first = {x.job_id: x for x in d.cycle()}
    assert first[a].action == "release"
    deferred = [b for b in bobs if first[b].reason.startswith("not planned in this cycle")]
    assert len(deferred) >= 1 and "per-user budget" in first[deferred[0]].reason
    assert all(first[b].action in ("release", "wait") for b in bobs)
    d.cycle()
    d.cycle()
    assert all(slurm.jobs_[b].state == "RUNNING" for b in bobs)


def test_request_names_outside_the_inventory_are_never_expanded(tmp_path):
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "s")
    prepare_spool(spool)
    huge = PREFIX + json.dumps({"layout": {"tp": 4}, "require": {"tp": "nvlink"}, "gpn": 4,
                                "exclude": "node[1-3],zz[0-65532]",
                                "shape": {"nodes": 1, "gpn": 4, "tpn": 4}},
                               separators=(",", ":"))
    b = bob_job(slurm, TP4, SCRIPT, comment=huge)
    bad = bob_job(slurm, TP4, SCRIPT, comment=PREFIX + json.dumps(
        {"layout": {"tp": 4}, "nodelist": "node1,elsewhere[1-9]"}, separators=(",", ":")))
    d = Daemon(slurm, inv, spool)
    ds = {x.job_id: x for x in d.cycle()}
    assert ds[b].action == "release" and ds[b].hosts == ("node4",)
    assert d.requests.read(slurm.job(b))[0].request.exclude == ("node1", "node2", "node3")
    assert ds[bad].action == "reject" and "9 node(s) not in the daemon's inventory" in \
        slurm.jobs_[bad].comment


# --------------------------------------------------------------------------
# request files


def test_request_files_of_jobs_that_left_are_removed(tmp_path):
    slurm, inv, spool, clock = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "s"), Clock()
    prepare_spool(spool)
    long_req = JobRequest(layout=Layout(tp=4), require={"tp": "nvlink"}, gpus_per_node=4,
                          exclude=",".join(f"h{i}-{i * 37 % 101}" for i in range(300)))
    j = submit_for_daemon(slurm, long_req, SCRIPT, spool=spool)
    name = protocol.pointer_name(slurm.jobs_[j].comment) + ".json"
    reqdir = os.path.join(spool, "requests")
    fresh = protocol.write_request_file(spool, '{"layout":{"tp":2}}')  # about to be submitted
    os.mkfifo(os.path.join(reqdir, "junk.fifo"))
    d = Daemon(slurm, inv, spool, clock=clock)
    d.cycle()
    assert os.path.exists(os.path.join(reqdir, name))
    slurm.finish(j)
    slurm.jobs_.pop(j)          # slurmctld forgot it (MinJobAge)
    clock.t += requests_mod.UNREFERENCED_GRACE_S + 1
    d.cycle()
    left = set(os.listdir(reqdir))
    assert name not in left and "junk.fifo" not in left
    assert fresh + ".json" not in left  # unreferenced past the grace as well


def test_a_user_over_the_quota_loses_unreferenced_files_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(requests_mod, "USER_QUOTA_BYTES", 10_000)
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "s")
    prepare_spool(spool)
    long_req = JobRequest(layout=Layout(tp=4), require={"tp": "nvlink"}, gpus_per_node=4,
                          exclude=",".join(f"h{i}-{i * 37 % 101}" for i in range(300)))
    keep = submit_for_daemon(slurm, long_req, SCRIPT, spool=spool)
    reqdir = os.path.join(spool, "requests")
    for k in range(5):
        protocol.write_request_file(spool, "x" * 4000 + str(k))
    Daemon(slurm, inv, spool).cycle()
    assert os.listdir(reqdir) == [protocol.pointer_name(slurm.jobs_[keep].comment) + ".json"]
