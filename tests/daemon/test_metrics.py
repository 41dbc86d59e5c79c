"""The daemon's Prometheus metrics (slurmtopo.daemon.metrics): the reason
labels of real decisions, the counts of a scripted cycle read back with
prometheus_client's own text parser, the textfile's safety, the port, and
the daemon without the library."""
from __future__ import annotations

import os
import stat
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurmtopo.daemon import metrics as m
from slurmtopo.daemon.decisions import ClusterView, Config, JobRecord, QueuedJob, fault
from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.protocol import PREFIX
from slurmtopo.daemon.scheduler import decide
from slurmtopo.errors import SlurmError, SlurmtopoError
from slurmtopo.job.groups import Layout
from tests.daemon.test_loop import TP4 as JOB_TP4, submit
from tests.daemon.test_scheduler import NOW, TP4, busy, job

# --------------------------------------------------------------------------
# every reason label, from decisions the scheduler really makes


def _labels(ds):
    return [m.reason_of(d) for d in ds]


def _release_preferred(inv):
    j = job(1, age=10, layout=Layout(tp=4, dp=2), require={"tp": "nvlink"},
            prefer={"dp": "leaf"}, wait={"dp": 600}, gpus_per_node=4)
    return decide([j], inv, ClusterView(busy()), NOW), ["release-preferred"]


def _release_fallback_and_wait_preference(inv):
    st = busy(node1="all", node3="all")  # free: node2 (leaf1), node4 (leaf2)
    kw = dict(layout=Layout(tp=4, dp=2), require={"tp": "nvlink"}, prefer={"dp": "leaf"},
              gpus_per_node=4)
    old = job(1, age=700, wait={"dp": 600}, **kw)
    young = job(2, age=10, wait={"dp": 600}, **kw)
    return decide([old, young], inv, ClusterView(st), NOW), ["release-fallback",
                                                              "wait-preference"]


def _release_best_and_no_room(inv):
    st = busy(node1="all", node2="all", node3="all", node4={0, 1, 2, 3})
    return (decide([job(1, **TP4), job(2, **TP4)], inv, ClusterView(st), NOW),
            ["release-best", "wait-no-room"])


def _wait_reserved(inv):
    st = busy(node1="all", node2={0, 1, 2, 3}, node3="all", node4="all")
    big = job(1, age=100, layout=Layout(tp=4, dp=2), require={"tp": "nvlink", "dp": "leaf"},
              gpus_per_node=4)
    small = job(2, age=10, layout=Layout(tp=2), require={"tp": "nvlink"}, gpus_per_node=2)
    return decide([big, small], inv, ClusterView(st), NOW), ["wait-no-room", "wait-reserved"]


def _release_limit(inv):
    return (decide([job(1, age=2, **TP4), job(2, age=1, **TP4)], inv, ClusterView(busy()), NOW,
                   Config(max_releases=1)), ["release-best", "wait-release-limit"])


def _rejects(inv):
    bad = QueuedJob(job_id=5, spec=None, error="bad slurmtopo request: not valid JSON")
    never = job(6, layout=Layout(tp=16), require={"tp": "nvlink"})
    return (decide([bad, never], inv, ClusterView(busy()), NOW),
            ["reject-request", "reject-never-fits"])


def _reholds(inv):
    raced = JobRecord(1, phase="released", hosts=("node1",), gpus={"node1": (0, 1, 2, 3)},
                      claim={"node1": (0, 1, 2, 3)}, released_at=NOW - 1)
    stuck = JobRecord(2, phase="released", hosts=("node2",), gpus={"node2": (0, 1, 2, 3)},
                      claim={"node2": (0, 1, 2, 3)}, released_at=NOW - 100)
    st = busy(node1="all", node3="all")
    ds = decide([job(1, held=False, record=raced, **TP4), job(2, held=False, record=stuck, **TP4)],
                inv, ClusterView(st), NOW, Config(release_grace=30))
    return [d for d in ds if d.action == "rehold"], ["rehold-lost-race", "rehold-grace-expired"]


def _the_others(inv):
    flying = job(1, held=False, record=JobRecord(1, phase="released", hosts=("node1",),
                                                 gpus={"node1": (0, 1, 2, 3)},
                                                 claim={"node1": (0, 1, 2, 3)},
                                                 released_at=NOW - 2), **TP4)
    running = QueuedJob(2, spec=None, state="RUNNING", held=False,
                        record=JobRecord(2, phase="released", hosts=("node2",)),
                        nodes=("node2",), gpus={"node2": (0, 1, 2, 3)})
    by_hand = job(3, held=False, **TP4)
    admin = QueuedJob(4, spec=None, foreign_hold="JobHeldAdmin")
    ds = decide([flying, running, by_hand, admin], inv, ClusterView(busy()), NOW)
    return ds + [fault(9, "planning it", RuntimeError("boom"))], [
        "starting", "running", "outside", "left-alone", "fault"]


def _backoff(inv):
    """A release the fresh look-up refuses: the job backs off (the loop's
    decision, not the scheduler's)."""
    import tempfile

    from slurmtopo.testing.slurm_backend import FakeSlurm

    slurm = FakeSlurm()
    j = submit(slurm, **JOB_TP4)

    def disagree(job_id):
        slurm.jobs_[j].comment = PREFIX + '{"layout":{"tp":2}}'
    slurm.hooks["job"] = disagree
    with tempfile.TemporaryDirectory() as spool:
        d = Daemon(slurm, inv, spool)
        d.cycle()
        slurm.jobs_[j].comment = d.snapshot[j].comment
        return d.cycle(), ["wait-backoff"]


def _wait_hazard(inv):
    """What is free for the job has an error hazard under its own policy:
    held, not blocked (slurmtopo/daemon/jobhazards.py)."""
    from dataclasses import replace

    from slurmtopo.daemon.jobhazards import JobHazards

    q = job(1, layout=Layout(tp=8), gpus_per_node=4)
    q = replace(q, spec=replace(q.spec, hazards=JobHazards.of(["group-domain=error"])))
    return decide([q], inv, ClusterView(busy()), NOW), ["wait-hazard"]


SCENARIOS = [_release_preferred, _release_fallback_and_wait_preference,
             _release_best_and_no_room, _wait_reserved, _release_limit, _rejects, _reholds,
             _the_others, _backoff, _wait_hazard]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__.strip("_"))
def test_reason_labels_of_real_decisions(inv, scenario):
    ds, want = scenario(inv)
    assert sorted(_labels(ds)) == sorted(want), [(d.action, d.reason) for d in ds]


def test_the_scenarios_cover_every_reason(inv):
    seen = set()
    for scenario in SCENARIOS:
        seen.update(_labels(scenario(inv)[0]))
    assert seen == set(m.REASONS)


def test_a_reason_label_never_carries_user_text():
    from slurmtopo.daemon.decisions import Decision

    hostile = 'x"} 1\nevil_metric{a="b'
    for action in ("release", "wait", "reject", "rehold", "starting", "running", "outside",
                   "left-alone", "fault", "made-up"):
        assert m.reason_of(Decision(1, action, reason=hostile, taken=hostile)) in m.REASONS


# --------------------------------------------------------------------------
# a scripted cycle, read back from the textfile


def _metrics(text):
    """{(sample name, labels as a sorted tuple): value} of a text exposition."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(doc, name, **labels):
    return doc[(name, tuple(sorted(labels.items())))]


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def test_a_scripted_cycle_counts_match_its_decisions(slurm, inv, spool, tmp_path):
    for n in ("node1", "node2", "node3"):
        slurm.occupy(n, range(8), exclusive=True)
    fits = submit(slurm, **JOB_TP4)                          # node4's quads: one each
    fits2 = submit(slurm, **JOB_TP4)
    blocked = submit(slurm, **JOB_TP4)                       # nothing left
    never = submit(slurm, layout=Layout(tp=16), require={"tp": "nvlink"}, gpn=8)
    t0 = 1_700_000_000
    for jid, age in ((fits, 40), (fits2, 7), (blocked, 5), (never, 3)):
        slurm.jobs_[jid].submit_time = t0 - age
    path = str(tmp_path / "slurmtopo.prom")
    rec = m.Recorder(textfile=path)
    d = Daemon(slurm, inv, spool, clock=Clock(t0), metrics=rec)
    assert d.run(once=True) == 0
    doc = _metrics(open(path).read())
    reasons = {x.job_id: m.reason_of(x) for x in d.last_decisions}
    assert reasons == {fits: "release-best", fits2: "release-best", blocked: "wait-no-room",
                       never: "reject-never-fits"}
    assert _value(doc, "slurmtopo_daemon_releases_total") == 2
    assert _value(doc, "slurmtopo_daemon_held_jobs") == 1
    for reason in m.REASONS:
        n = list(reasons.values()).count(reason)
        assert _value(doc, "slurmtopo_daemon_decisions_total", reason=reason) == n, reason
        assert _value(doc, "slurmtopo_daemon_jobs", reason=reason) == n, reason
    assert _value(doc, "slurmtopo_daemon_release_wait_seconds_count") == 2
    assert _value(doc, "slurmtopo_daemon_release_wait_seconds_sum") == 47
    assert _value(doc, "slurmtopo_daemon_release_wait_seconds_bucket", le="5.0") == 0
    assert _value(doc, "slurmtopo_daemon_release_wait_seconds_bucket", le="10.0") == 1
    assert _value(doc, "slurmtopo_daemon_release_wait_seconds_bucket", le="60.0") == 2
    assert _value(doc, "slurmtopo_daemon_cycle_seconds_count") == 1
    assert _value(doc, "slurmtopo_daemon_last_success_timestamp_seconds") == t0
    for kind in m.ERROR_KINDS:
        assert _value(doc, "slurmtopo_daemon_errors_total", kind=kind) == 0

    # the next cycle: node2 frees, the blocked job is released 20 s later
    slurm.finish(min(j for j in slurm.jobs_ if slurm.jobs_[j].alloc.get("node2")))
    d.clock = Clock(t0 + 20)
    d.run(once=True)
    doc = _metrics(open(path).read())
    assert m.reason_of([x for x in d.last_decisions if x.job_id == blocked][0]) == "release-best"
    assert _value(doc, "slurmtopo_daemon_releases_total") == 3
    assert _value(doc, "slurmtopo_daemon_held_jobs") == 0
    assert _value(doc, "slurmtopo_daemon_jobs", reason="wait-no-room") == 0
    assert _value(doc, "slurmtopo_daemon_decisions_total", reason="wait-no-room") == 1
    assert _value(doc, "slurmtopo_daemon_release_wait_seconds_sum") == 47 + 25
    assert _value(doc, "slurmtopo_daemon_cycle_seconds_count") == 2
    assert _value(doc, "slurmtopo_daemon_last_success_timestamp_seconds") == t0 + 20


def test_errors_are_counted_by_kind(slurm, inv, spool, tmp_path):
    a = submit(slurm, **JOB_TP4)

    def refuse(job_id):
        raise SlurmError("scontrol: error: Access/permission denied")

    slurm.hooks["release"] = refuse
    path = str(tmp_path / "m.prom")
    rec = m.Recorder(textfile=path)
    d = Daemon(slurm, inv, spool, metrics=rec)
    d.run(once=True)
    doc = _metrics(open(path).read())
    assert _value(doc, "slurmtopo_daemon_errors_total", kind="slurm") == 1
    assert _value(doc, "slurmtopo_daemon_releases_total") == 0
    assert _value(doc, "slurmtopo_daemon_held_jobs") == 1      # its release was not done
    assert slurm.job(a).held

    def down():
        raise SlurmError("squeue: error: Unable to contact slurm controller")

    slurm.hooks["jobs"] = down
    assert d.run(once=True) == 1
    doc = _metrics(open(path).read())
    assert _value(doc, "slurmtopo_daemon_errors_total", kind="cycle") == 1
    assert _value(doc, "slurmtopo_daemon_cycle_seconds_count") == 1   # the failed one is not

    with pytest.raises(ValueError):
        rec.error("user text")


def test_a_dry_run_releases_nothing_and_counts_nothing_released(slurm, inv, spool, tmp_path):
    submit(slurm, **JOB_TP4)
    path = str(tmp_path / "m.prom")
    d = Daemon(slurm, inv, spool, dry_run=True, metrics=m.Recorder(textfile=path))
    d.run(once=True)
    doc = _metrics(open(path).read())
    assert _value(doc, "slurmtopo_daemon_decisions_total", reason="release-best") == 1
    assert _value(doc, "slurmtopo_daemon_releases_total") == 0
    assert _value(doc, "slurmtopo_daemon_held_jobs") == 1


# --------------------------------------------------------------------------
# the textfile


def test_the_textfile_is_0644_whatever_the_umask_and_replaces_a_link(tmp_path):
    path = tmp_path / "slurmtopo.prom"
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.symlink(victim, path)
    rec = m.Recorder(textfile=str(path))
    old = os.umask(0o077)
    try:
        rec.publish()
    finally:
        os.umask(old)
    assert victim.read_text() == "keep\n"                 # the link was not followed
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert ("slurmtopo_daemon_held_jobs", ()) in _metrics(path.read_text())
    assert sorted(os.listdir(tmp_path)) == ["slurmtopo.prom", "victim"]  # no temporary left


@pytest.mark.parametrize("case, match", [
    ("name", "*.prom"), ("group-writable", "writable by its group or others"),
    ("missing", "cannot use the metrics directory"), ("directory", "is a directory"),
])
def test_a_textfile_where_the_daemon_may_not_write_is_refused(tmp_path, case, match):
    target = tmp_path / "d" / "slurmtopo.prom"
    (tmp_path / "d").mkdir()
    if case == "name":
        target = tmp_path / "d" / "slurmtopo.txt"
    elif case == "group-writable":
        os.chmod(tmp_path / "d", 0o775)
    elif case == "missing":
        target = tmp_path / "nowhere" / "slurmtopo.prom"
    else:
        target.mkdir()
    with pytest.raises(SlurmtopoError, match=match.replace("*", r"\*")):
        m.Recorder(textfile=str(target))


def test_a_textfile_that_cannot_be_written_is_logged_once_and_counted(tmp_path, caplog):
    d = tmp_path / "d"
    d.mkdir()
    rec = m.Recorder(textfile=str(d / "m.prom"))
    os.chmod(d, 0o775)                                   # someone loosened it since the start
    rec.publish()
    rec.publish()
    assert not (d / "m.prom").exists()
    assert len([r for r in caplog.records if "metrics" in r.getMessage()]) == 1
    os.chmod(d, 0o755)
    rec.publish()
    doc = _metrics((d / "m.prom").read_text())
    assert _value(doc, "slurmtopo_daemon_errors_total", kind="metrics") == 2


# --------------------------------------------------------------------------
# the port


def test_the_port_serves_the_same_metrics(tmp_path):
    rec = m.Recorder()
    rec.serve("127.0.0.1", 0)
    try:
        host, port = rec.address
        assert host == "127.0.0.1" and port > 0
        rec.releases.inc()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            doc = _metrics(r.read().decode())
        assert _value(doc, "slurmtopo_daemon_releases_total") == 1
    finally:
        rec.close()


def test_a_port_in_use_is_one_error_line():
    first = m.Recorder()
    first.serve("127.0.0.1", 0)
    try:
        with pytest.raises(SlurmtopoError, match="cannot serve metrics on 127.0.0.1 port"):
            m.Recorder().serve("127.0.0.1", first.address[1])
    finally:
        first.close()


# --------------------------------------------------------------------------
# the command, with and without prometheus-client


def _cli(args, slurm, monkeypatch):
    """(exit code, stdout + stderr) of ``slurmtopo args`` on the fake Slurm."""
    from tests.clirun import run_cli

    monkeypatch.setattr("slurmtopo.slurm.get_backend", lambda name="auto": slurm)
    code, out, err = run_cli(args)
    return code, out + err


def test_the_cli_writes_the_textfile(slurm, inv_file, spool, tmp_path, monkeypatch):
    submit(slurm, **JOB_TP4)
    path = tmp_path / "slurmtopo.prom"
    code, out = _cli(["daemon", "--inventory", inv_file, "--spool", spool, "--once",
                      "--metrics-textfile", str(path)], slurm, monkeypatch)
    assert code == 0, out
    assert _value(_metrics(path.read_text()), "slurmtopo_daemon_releases_total") == 1


def test_without_the_library_the_daemon_runs_as_before(slurm, inv_file, spool, tmp_path,
                                                       monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    a = submit(slurm, **JOB_TP4)
    code, out = _cli(["daemon", "--inventory", inv_file, "--spool", spool, "--once"], slurm,
                     monkeypatch)
    assert code == 0, out
    assert not slurm.job(a).held
    b = submit(slurm, **JOB_TP4)
    for flag in (["--metrics-textfile", str(tmp_path / "m.prom")], ["--metrics-port", "0"]):
        code, out = _cli(["daemon", "--inventory", inv_file, "--spool", spool, "--once",
                          *flag], slurm, monkeypatch)
        lines = out.strip().splitlines()
        assert code != 0 and len(lines) == 1 and "prometheus-client" in lines[0], out
    assert slurm.job(b).held and slurm.job(b).comment.startswith(PREFIX)  # nothing was done
    assert not (tmp_path / "m.prom").exists()


def test_metrics_addr_without_a_port_is_refused(slurm, inv_file, spool, monkeypatch):
    code, out = _cli(["daemon", "--inventory", inv_file, "--spool", spool, "--once",
                      "--metrics-addr", "0.0.0.0"], slurm, monkeypatch)
    assert code != 0 and "--metrics-addr needs --metrics-port" in out


def test_a_silent_client_delays_no_other_scrape_nor_the_stop(tmp_path, monkeypatch):
    """A client sending one byte every few seconds blocked every other
    scrape (one request at a time, a 10 s silence limit it never reached),
    and after SIGTERM the daemon lived until that client stopped. Clients
    are served each in a thread, cut off at a deadline, and stop() waits
    for none."""
    import socket
    import threading
    import time

    monkeypatch.setattr(m, "HTTP_DEADLINE_S", 2.0)
    rec = m.Recorder()
    rec.serve("127.0.0.1", 0)
    host, port = rec.address
    slow = socket.create_connection((host, port))
    stop = threading.Event()

    def trickle():
        for ch in b"GET /metrics HTTP/1.0\r\n":
            if stop.wait(0.4):
                return
            try:
                slow.send(bytes([ch]))
            except OSError:
                return
    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read()
        assert b"slurmtopo_daemon_spool_problem 0.0" in body
        # the slow client is cut off at its deadline
        slow.settimeout(5)
        assert slow.recv(100) == b""
    finally:
        stop.set()
    other = socket.create_connection((host, port))  # one more that stays silent
    started = time.monotonic()
    rec.close()
    assert time.monotonic() - started < 1.5
    other.settimeout(2)
    try:
        assert other.recv(10) == b""   # closed by the server ...
    except ConnectionResetError:
        pass                           # ... or reset
    slow.close()
    other.close()
