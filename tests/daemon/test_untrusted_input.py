"""What users put in front of the daemon (job comments, request files) can
never stop it: every hostile input ends as a rejection the user can see, in
the same cycle that releases everyone else's jobs (issue 21; the daemon
runs as root, every user is untrusted: docs/security.md).

The explicit cases are the ones found on a real cluster; the hypothesis
tests generate garbage, huge, deep and wrongly typed requests, valid JSON
of the wrong shape, and request files that are FIFOs, links, directories,
huge or someone else's."""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmtopo.daemon import protocol, scheduler
from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.protocol import (MAX_REQUEST_BYTES, PREFIX, REJECTED_PREFIX, ProtocolError,
                                       parse_comment, request_file_name)
from slurmtopo.daemon.spool import prepare_spool, read_events
from slurmtopo.daemon.submit import submit_for_daemon
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest

from tests.daemon.conftest import FakeSlurm, quad8_inventory

BOB_UID = 4242

SCRIPT = ("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=4\n"
          "#SBATCH --gpus-per-node=4\nsrun true\n")


def alice_job(slurm) -> int:
    """A well-formed daemon job of another user."""
    req = JobRequest(layout=Layout(tp=4), require={"tp": "nvlink"}, gpus_per_node=4)
    return submit_for_daemon(slurm, req, SCRIPT)


def bob_job(slurm, comment: str) -> int:
    """A held job of user bob with whatever comment bob chose."""
    b = slurm.submit(SCRIPT, args=[f"--comment={comment}"], hold=True)
    slurm.jobs_[b].user, slurm.jobs_[b].uid = "bob", BOB_UID
    return b


def request_file(spool: str, body: str, kind: str = "file") -> str:
    """A request file (named by its body's hash, as make_comment names it)
    of the given kind in the spool; the comment that points at it."""
    name = request_file_name(body.strip())
    path = os.path.join(spool, "requests", name + ".json")
    if kind == "file":
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(body)
        os.chown(path, BOB_UID, -1)
    elif kind == "fifo":
        os.mkfifo(path)
        os.chown(path, BOB_UID, -1)
    elif kind == "symlink":      # to a file of exactly the right content, owned by bob
        target = os.path.join(spool, "elsewhere-" + name)
        with open(target, "w") as f:
            f.write(body)
        os.chown(target, BOB_UID, -1)
        os.symlink(target, path)
    elif kind == "directory":
        os.mkdir(path)
        os.chown(path, BOB_UID, -1)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(MAX_REQUEST_BYTES + 1)
        os.chown(path, BOB_UID, -1)
    elif kind == "someone-else's":
        with open(path, "w") as f:
            f.write(body)
        os.chown(path, BOB_UID + 1, -1)
    else:
        raise ValueError(kind)
    return f"{PREFIX}@{name}"


def within(fn, seconds: float = 20.0):
    """``fn()``, which must finish (a FIFO must not block the daemon)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "blocked"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def cycle_within(daemon):
    """One cycle, which must finish."""
    return within(daemon.cycle)


def unblock_fifos(spool: str) -> None:
    """Let a reader stuck on a FIFO of the old code go (test hygiene)."""
    directory = os.path.join(spool, "requests")
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if stat.S_ISFIFO(os.lstat(path).st_mode):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                pass


def assert_alice_released_and_bob_told(slurm, spool, a, b, decisions):
    """alice's job runs; bob's is rejected, with the reason where bob sees
    it (his job's comment) and where the admin does (event log, status)."""
    assert slurm.jobs_[a].state == "RUNNING" and slurm.releases(a) == 1
    assert slurm.releases(b) == 0
    jb = slurm.jobs_[b]
    assert jb.comment.startswith(REJECTED_PREFIX), jb.comment
    assert "\n" not in jb.comment and len(jb.comment.encode()) <= protocol.COMMENT_LIMIT
    assert {d.job_id: d.action for d in decisions}[b] in ("reject", "fault")
    assert [e["event"] for e in read_events(spool, b)][0] in ("rejected", "error")
    status = json.load(open(os.path.join(spool, "status.json")))
    assert b in [r["job_id"] for r in status["rejected"]]


# --------------------------------------------------------------------------
# the cases found on a real cluster


@pytest.mark.parametrize("comment, why", [
    (PREFIX + '{"layout":{"tp":4},"shape":[1]}', "shape must be an object"),
    (PREFIX + '{"layout":{"tp":' + "9" * 5000 + "}}", "a number longer than"),
    (PREFIX + '{"layout":{"tp":4},"wait":{"tp":1e999}}', "out of range"),
    (PREFIX + '{"layout":{"tp":4},"wait":{"tp":NaN}}', "NaN"),
    (PREFIX + '{"layout":{"tp":4},"exclusive":"yes"}', "true or false"),
    (PREFIX + '{"layout":{"tp":4},"launcher":"../mpirun"}', "launcher must be one of srun, "
                                                            "torchrun"),
    (PREFIX + '{"layout":{"tp":4},"nodelist":5}', "hostlist"),
    (PREFIX + '{"layout":{"tp":4,"tp":8}}', "appears twice"),
    (PREFIX + '{"layout":{"tp":4},"require":{"tp":["nvlink"]}}', "a name"),
    (PREFIX + '{"layout":{"tp":4},"nodelist":"n[1-99999999]"}', "more than the"),
    # int() reads '+99999'; counted as one name, it expanded to 100,000
    # ('+99999999': 10^8 strings, the daemon's memory)
    (PREFIX + '{"layout":{"tp":4},"nodelist":"n[0-+99999]"}', "not N, N-M or N-M/S"),
    (PREFIX + "[" * 5000, "nested deeper"),
    (PREFIX + '{"layout":{"tp":4}}' + " " * (protocol.MAX_COMMENT_BYTES), "longer than"),
])
def test_a_hostile_comment_is_rejected_and_others_run(tmp_path, comment, why):
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "spool")
    a = alice_job(slurm)
    b = bob_job(slurm, comment)
    decisions = Daemon(slurm, inv, spool).cycle()
    assert_alice_released_and_bob_told(slurm, spool, a, b, decisions)
    assert why in slurm.jobs_[b].comment


@pytest.mark.parametrize("kind, why", [
    ("fifo", "is a FIFO, not a regular file"),
    ("symlink", "is a symbolic link"),
    ("directory", "is a directory"),
    ("huge", "larger than"),
    ("someone-else's", f"belongs to uid {BOB_UID + 1}, not to uid {BOB_UID}"),
    ("file", "nested deeper"),
])
def test_a_hostile_request_file_is_rejected_and_others_run(tmp_path, kind, why):
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "spool")
    prepare_spool(spool)
    a = alice_job(slurm)
    b = bob_job(slurm, request_file(spool, "[" * 5000 if kind == "file" else
                                    '{"layout":{"tp":4}}', kind))
    try:
        decisions = cycle_within(Daemon(slurm, inv, spool))
    finally:
        unblock_fifos(spool)
    assert_alice_released_and_bob_told(slurm, spool, a, b, decisions)
    assert why in slurm.jobs_[b].comment


def test_a_request_file_of_the_jobs_owner_is_read(tmp_path):
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "spool")
    prepare_spool(spool)
    b = bob_job(slurm, request_file(spool, '{"layout":{"tp":4},"require":{"tp":"nvlink"},'
                                           '"gpn":4,"shape":{"nodes":1,"gpn":4,"tpn":4}}'))
    Daemon(slurm, inv, spool).cycle()
    assert slurm.jobs_[b].state == "RUNNING"


def test_a_job_of_unknown_owner_cannot_point_at_a_request_file(tmp_path):
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "spool")
    prepare_spool(spool)
    b = bob_job(slurm, request_file(spool, '{"layout":{"tp":4}}'))
    slurm.jobs_[b].uid = None                   # a backend that does not say
    Daemon(slurm, inv, spool).cycle()
    assert slurm.jobs_[b].comment.startswith(REJECTED_PREFIX)
    assert "owner cannot be checked" in slurm.jobs_[b].comment


# --------------------------------------------------------------------------
# one barrier per job


def test_a_bug_met_on_one_job_does_not_stop_the_others(tmp_path, monkeypatch, caplog):
    """Defence in depth: an unexpected exception while planning one job is
    that job's fault alone: logged with its traceback, the reason in the
    job's comment (left held, never cancelled), the cycle goes on."""
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "spool")
    b = bob_job(slurm, PREFIX + '{"layout":{"tp":2},"gpn":2,"shape":{"nodes":1,"gpn":2}}')
    a = alice_job(slurm)
    real = scheduler.SchedulingPass.held

    def buggy(self, q):
        if q.job_id == b:
            raise AttributeError("'list' object has no attribute 'get'")
        return real(self, q)

    monkeypatch.setattr(scheduler.SchedulingPass, "held", buggy)
    with caplog.at_level("ERROR", logger="slurmtopo.daemon"):
        decisions = Daemon(slurm, inv, spool).cycle()
    assert slurm.jobs_[a].state == "RUNNING"
    jb = slurm.jobs_[b]
    assert jb.state == "PENDING" and jb.held                    # never cancelled for our bug
    assert jb.comment.startswith(REJECTED_PREFIX) and "AttributeError" in jb.comment
    assert {d.job_id: d.action for d in decisions}[b] == "fault"
    logged = [r for r in caplog.records if r.exc_info and "AttributeError" in r.getMessage()]
    assert logged and "buggy" in caplog.text and "Traceback" in caplog.text
    ev = [e for e in read_events(spool, b) if e["event"] == "error"]
    assert ev and ev[0]["action"] == "fault"
    # no longer a v1 tag: not looked at again
    n = len(slurm.calls)
    Daemon(slurm, inv, spool).cycle()
    assert len(slurm.calls) == n


def test_a_bug_while_acting_on_one_job_does_not_stop_the_others(tmp_path, monkeypatch):
    slurm, inv, spool = FakeSlurm(), quad8_inventory(tmp_path), str(tmp_path / "spool")
    b = bob_job(slurm, PREFIX + '{"layout":{"tp":2},"gpn":2,"shape":{"nodes":1,"gpn":2}}')
    a = alice_job(slurm)

    def update(job_id, fields):
        if job_id == b and "ReqNodeList" in fields:
            raise KeyError("surprise")

    slurm.hooks["update"] = update
    Daemon(slurm, inv, spool).cycle()
    assert slurm.jobs_[a].state == "RUNNING"
    assert slurm.jobs_[b].comment.startswith(REJECTED_PREFIX)
    assert "KeyError" in slurm.jobs_[b].comment and slurm.releases(b) == 0


# --------------------------------------------------------------------------
# generated input: the decoder is total ...


JSON_LEAF = (st.none() | st.booleans() | st.integers() | st.integers(-2, 100)
             | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
JSON = st.recursive(JSON_LEAF, lambda c: st.lists(c, max_size=4)
                    | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=16)
KINDS = st.sampled_from(["tp", "cp", "ep", "pp", "dp", "expert_tp", "expert-tp", "x", ""])
LEVELS = st.sampled_from(["nvlink", "numa", "node", "leaf", "any", "warp", ""])
#: requests of the right shape with values of every kind in its fields
SHAPED = st.fixed_dictionaries({"layout": st.dictionaries(
    st.sampled_from(["tp", "cp", "ep", "pp", "dp", "expert_tp", "world", "order", "convention",
                     "bogus"]),
    st.integers(-3, 1 << 20) | st.sampled_from([1, 2, 4, 8]) | JSON, max_size=5)}, optional={
    "require": st.dictionaries(KINDS, LEVELS | JSON, max_size=3),
    "prefer": st.dictionaries(KINDS, LEVELS | JSON, max_size=3),
    "wait": st.dictionaries(KINDS, st.floats() | st.integers() | JSON, max_size=3),
    "msg": st.dictionaries(KINDS, st.integers() | JSON, max_size=3),
    "gpn": st.integers(-2, 5000) | JSON, "exclusive": st.booleans() | JSON,
    "nodelist": st.sampled_from(["node1", "node[1-2]", "", "node[1-99999999]", "[", "a,,b",
                                 "@grp", "n!x"]) | JSON,
    "exclude": st.sampled_from(["node3", "node[1-4]", "]["]) | JSON,
    "shape": st.dictionaries(st.sampled_from(["nodes", "gpn", "tpn", "x"]),
                             st.integers(-2, 1 << 17) | JSON, max_size=3) | JSON,
    "bogus": JSON})
BODIES = st.one_of(
    st.text(max_size=200),
    JSON.map(lambda v: json.dumps(v, allow_nan=True)),
    SHAPED.map(lambda v: json.dumps(v, allow_nan=True)),
    st.integers(1, 20000).map(lambda n: "[" * n),
    st.integers(1, 5000).map(lambda n: '{"layout":{"tp":' + "9" * n + "}}"),
    st.sampled_from(['{"layout":{"tp":4},"shape":[1]}', "1e999", '{"layout":{"tp":1e999}}',
                     '{"layout":{"tp":4}}' * 2, '{"layout":{"tp":4}', "\ufeff{}", "@",
                     "@" + "f" * 64, "@../x", '{"layout":{"tp":4},"x":' + "[" * 100 + "]" * 100
                     + "}"]))


@settings(max_examples=500, deadline=None)
@given(body=BODIES)
def test_the_decoder_raises_nothing_but_protocol_errors(body):
    try:
        spec = parse_comment(PREFIX + body)
    except ProtocolError as exc:
        assert "\n" not in exc.render() and len(exc.render()) < 600
    else:
        assert spec is not None and spec.request.world >= 1


# ... and a cycle with a hostile job releases everyone else's


_INV_DIR = tempfile.mkdtemp(prefix="slurmtopo-fuzz-inv-")


def _inv():
    from pathlib import Path
    return quad8_inventory(Path(_INV_DIR))


INV = None


def _cycle_with_bob(make_comment):
    global INV
    INV = INV or _inv()
    spool = tempfile.mkdtemp(prefix="slurmtopo-fuzz-spool-")
    try:
        prepare_spool(spool)
        slurm = FakeSlurm()
        a = alice_job(slurm)
        b = bob_job(slurm, make_comment(spool))
        try:
            decisions = cycle_within(Daemon(slurm, INV, spool))
        finally:
            unblock_fifos(spool)
        assert slurm.jobs_[a].state == "RUNNING" and slurm.releases(a) == 1
        action = {d.job_id: d.action for d in decisions}.get(b)
        jb = slurm.jobs_[b]
        if action in ("reject", "fault"):
            assert jb.comment.startswith(REJECTED_PREFIX)
        else:  # a valid request: released, waiting, or its own rejection
            assert action in ("release", "wait"), action
    finally:
        shutil.rmtree(spool, ignore_errors=True)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=BODIES)
def test_a_cycle_with_any_comment_from_bob_releases_alice(body):
    _cycle_with_bob(lambda spool: PREFIX + body)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=BODIES.filter(lambda b: b.strip() and "\x00" not in b),
       kind=st.sampled_from(["file", "file", "fifo", "symlink", "directory", "huge",
                             "someone-else's"]))
def test_a_cycle_with_any_request_file_from_bob_releases_alice(body, kind):
    _cycle_with_bob(lambda spool: request_file(spool, body, kind))


# --------------------------------------------------------------------------
# two users, one request


def _comment_as(uid: int, req, spool: str) -> str:
    """``make_comment`` run by user ``uid`` (a child with that effective
    uid): the comment, or the one-line error it ended with."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            os.setegid(uid)
            os.seteuid(uid)
            out = "ok " + protocol.make_comment(req, spool=spool)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out = f"error {exc}"
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return text


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")
def test_two_users_with_the_same_long_request_both_submit(tmp_path):
    """alice and bob ask for the same long --exclude list: one file name
    for both made bob's submission fail (requests/ is sticky: his rename
    could not replace alice's file), and had it stood, the daemon would
    have refused alice's file for bob's job. Each user's request file now
    has a name of its own, and each job is read and released."""
    many = ",".join(f"host{i:04d}x" for i in range(0, 400, 2))
    req = JobRequest(layout=Layout(tp=4), require={"tp": "nvlink"}, gpus_per_node=4,
                     exclude=many)
    spool = tempfile.mkdtemp(prefix="slurmtopo-two-users-")
    try:
        os.chmod(spool, 0o755)
        prepare_spool(spool)
        slurm, inv = FakeSlurm(), quad8_inventory(tmp_path)
        jobs = []
        for uid, user in ((BOB_UID + 1, "alice"), (BOB_UID, "bob")):
            out = _comment_as(uid, req, spool)
            assert out.startswith("ok "), f"{user}: {out}"
            j = slurm.submit(SCRIPT, args=[f"--comment={out[3:]}"], hold=True)
            slurm.jobs_[j].user, slurm.jobs_[j].uid = user, uid
            jobs.append(j)
        assert len(os.listdir(os.path.join(spool, "requests"))) == 2
        Daemon(slurm, inv, spool).cycle()
        assert [slurm.releases(j) for j in jobs] == [1, 1]
    finally:
        shutil.rmtree(spool, ignore_errors=True)
