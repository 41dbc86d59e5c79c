"""The daemon loop against a Slurm in memory: journal, restarts, races."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from slurmtopo.daemon.decisions import Config
from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.spool import Journal, SpoolLock, read_events
from tests.events import release_count
from slurmtopo.daemon.protocol import PREFIX, REJECTED_PREFIX
from slurmtopo.daemon.submit import submit_for_daemon
from slurmtopo.errors import SlurmtopoError
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest


def script(nodes: int, gpn: int) -> str:
    return ("#!/bin/bash\n"
            f"#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node={gpn}\n"
            f"#SBATCH --gpus-per-node={gpn}\n#SBATCH --switches=1@5:00\n"
            "srun true\n")


def submit(slurm, layout, gpn=4, **kw):
    req = JobRequest(layout=layout, gpus_per_node=gpn, **kw)
    return submit_for_daemon(slurm, req, script(-(-req.world // gpn), gpn))


TP4 = dict(layout=Layout(tp=4), require={"tp": "nvlink"})


def test_a_cycle_pins_and_releases(slurm, inv, spool):
    slurm.occupy("node1", [0, 1, 2, 3])
    a = submit(slurm, **TP4)
    b = submit(slurm, layout=Layout(tp=2, dp=2), require={"tp": "nvlink"})
    assert slurm.job(a).held and slurm.job(b).held
    d = Daemon(slurm, inv, spool)
    ds = d.cycle()
    assert {x.job_id: x.action for x in ds} == {a: "release", b: "release"}
    ja, jb = slurm.jobs_[a], slurm.jobs_[b]
    assert ja.state == jb.state == "RUNNING"
    assert ja.alloc == {"node1": [4, 5, 6, 7]}          # the free quad, pinned
    assert ("update", a, (("ReqNodeList", "node1"),)) in slurm.calls
    assert slurm.releases(a) == slurm.releases(b) == 1
    ev = read_events(spool)
    assert [e["event"] for e in ev if e.get("job") == a] == ["intent-release", "released"]
    doc = json.load(open(os.path.join(spool, "journal.json")))
    rec = [r for r in doc["jobs"] if r["job_id"] == a][0]
    assert rec["phase"] == "released" and rec["hosts"] == ["node1"]
    status = json.load(open(os.path.join(spool, "status.json")))
    assert {j["job_id"] for j in status["jobs"]} == {a, b}
    # next cycle: both running as planned; then they end and are forgotten
    d.cycle()
    assert d.records[a].phase == "running" and d.records[a].drift is None
    slurm.finish(a)
    slurm.finish(b)
    d.cycle()
    assert d.records == {} and Journal(spool).load() == {}
    assert [e["event"] for e in read_events(spool, a)][-1] == "ended"


def test_the_switches_directive_is_dropped(slurm):
    a = submit(slurm, **TP4)
    assert "#SBATCH --switches" not in slurm.jobs_[a].script
    assert slurm.jobs_[a].comment.startswith(PREFIX)


def test_killed_after_the_intent_releases_once_after_restart(slurm, inv, spool, killed):
    a = submit(slurm, **TP4)

    def die(job_id):
        raise killed()

    slurm.hooks["release"] = die
    with pytest.raises(killed):
        Daemon(slurm, inv, spool).cycle()
    assert slurm.job(a).held                            # the release never happened
    assert Journal(spool).load()[a].phase == "releasing"
    del slurm.hooks["release"]
    d = Daemon(slurm, inv, spool)                       # restart
    d.cycle()
    assert slurm.jobs_[a].state == "RUNNING"
    assert slurm.releases(a) == 1
    ev = read_events(spool, a)
    assert "release-not-done" in [e["event"] for e in ev]
    assert release_count(ev, a) == 1


def test_killed_after_the_release_never_releases_again(slurm, inv, spool, killed):
    slurm.occupy("node1", range(8), exclusive=True)
    slurm.occupy("node2", range(8), exclusive=True)
    slurm.occupy("node3", range(8), exclusive=True)
    slurm.occupy("node4", range(8), exclusive=True)
    slurm.auto_schedule = False                          # stays pending after release
    a = submit(slurm, **TP4)
    b = submit(slurm, **TP4)
    # make room for exactly one of them
    slurm.jobs_[min(slurm.jobs_)].state = "COMPLETED"
    for g in range(8):
        slurm.busy["node1"].pop(g)
    slurm.excl["node1"] = None
    slurm.cpu_used["node1"] = 0

    def die(job_id):
        raise killed()

    slurm.hooks["after_release"] = die
    with pytest.raises(killed):
        Daemon(slurm, inv, spool).cycle()
    assert not slurm.job(a).held and Journal(spool).load()[a].phase == "releasing"
    del slurm.hooks["after_release"]
    d = Daemon(slurm, inv, spool)
    ds = d.cycle()
    assert d.records[a].phase == "released"
    assert slurm.releases(a) == 1
    # b is planned on node1's other quad: a's claim is respected
    rel_b = [x for x in ds if x.job_id == b and x.action == "release"]
    assert rel_b and rel_b[0].gpus == {"node1": (4, 5, 6, 7)}
    assert release_count(read_events(spool), a) == 1
    assert "release-confirmed" in [e["event"] for e in read_events(spool, a)]
    slurm.schedule()
    assert slurm.jobs_[a].state == slurm.jobs_[b].state == "RUNNING"


@pytest.mark.parametrize("lists_finished", [True, False], ids=["22.05", "23.02+"])
def test_released_then_ended_while_the_daemon_was_down_counts_once(slurm, inv, spool, killed,
                                                                   lists_finished):
    """From 23.02 squeue --json no longer lists a finished job: the daemon
    asks for that one job (scontrol keeps it) before deciding the release
    never happened."""
    slurm.lists_finished = lists_finished
    a = submit(slurm, **TP4)

    def die(job_id):
        raise killed()

    slurm.hooks["after_release"] = die
    with pytest.raises(killed):
        Daemon(slurm, inv, spool).cycle()
    del slurm.hooks["after_release"]
    assert slurm.jobs_[a].state == "RUNNING"
    slurm.finish(a)                                     # done before the restart
    assert (a in {j.job_id for j in slurm.jobs()}) == lists_finished
    d = Daemon(slurm, inv, spool)
    d.cycle()
    ev = read_events(spool, a)
    assert [e["event"] for e in ev][-2:] == ["release-confirmed", "ended"]
    assert release_count(ev, a) == 1 and d.records == {}


def test_cancelled_while_held_is_not_a_release(slurm, inv, spool, killed):
    a = submit(slurm, **TP4)

    def die(job_id):
        raise killed()

    slurm.hooks["release"] = die
    with pytest.raises(killed):
        Daemon(slurm, inv, spool).cycle()
    del slurm.hooks["release"]
    slurm.cancel(a)
    Daemon(slurm, inv, spool).cycle()
    ev = read_events(spool, a)
    assert release_count(ev, a) == 0 and ev[-1]["event"] == "ended"


def test_a_race_for_the_pinned_nodes_is_recovered(slurm, inv, spool):
    slurm.occupy("node3", range(8), exclusive=True)
    slurm.occupy("node4", range(8), exclusive=True)
    a = submit(slurm, layout=Layout(tp=8), require={"tp": "node"}, gpn=8)
    stolen = []

    def grab(job_id, fields):
        # another job takes the node between the plan and the release
        if "ReqNodeList" in fields and not stolen:
            stolen.append(slurm.occupy(fields["ReqNodeList"], range(8), exclusive=True))

    slurm.hooks["update"] = grab
    d = Daemon(slurm, inv, spool)
    d.cycle()
    first = d.records[a].hosts
    assert slurm.jobs_[a].state == "PENDING" and not slurm.jobs_[a].held
    del slurm.hooks["update"]
    ds = d.cycle()
    assert [x.action for x in ds if x.job_id == a] == ["rehold", "release"]
    assert slurm.jobs_[a].state == "RUNNING"
    assert set(slurm.jobs_[a].alloc) != set(first)
    # the daemon's own hold is a user hold (scontrol uhold), never an admin's
    assert slurm.releases(a) == 2 and ("uhold", a) in slurm.calls
    assert ("hold", a) not in slurm.calls
    ev = [e["event"] for e in read_events(spool, a)]
    assert ev.count("reheld") == 1 and release_count(read_events(spool), a) == 2


def test_a_job_that_can_never_fit_is_cancelled_with_the_reason(slurm, inv, spool):
    a = submit(slurm, layout=Layout(tp=16), require={"tp": "nvlink"}, gpn=8)
    Daemon(slurm, inv, spool).cycle()
    j = slurm.jobs_[a]
    assert j.state == "CANCELLED"
    assert j.comment.startswith(REJECTED_PREFIX) and "can never run" in j.comment
    status = json.load(open(os.path.join(spool, "status.json")))
    assert status["rejected"][0]["job_id"] == a


def test_on_reject_hold_leaves_it_held_and_alone(slurm, inv, spool):
    a = slurm.submit(script(1, 4), args=[f"--comment={PREFIX}{{bad"], hold=True)
    d = Daemon(slurm, inv, spool, on_reject="hold")
    d.cycle()
    j = slurm.jobs_[a]
    assert j.state == "PENDING" and j.held and j.comment.startswith(REJECTED_PREFIX)
    assert "not valid JSON" in j.comment
    n = len(slurm.calls)
    d.cycle()
    assert len(slurm.calls) == n                         # not looked at again


def test_jobs_not_tagged_are_ignored(slurm, inv, spool):
    a = slurm.submit(script(1, 4), hold=True)
    b = slurm.submit(script(1, 4), args=["--comment=hello"], hold=True)
    assert Daemon(slurm, inv, spool).cycle() == []
    assert slurm.job(a).held and slurm.job(b).held


def test_dry_run_changes_nothing(slurm, inv, spool):
    a = submit(slurm, **TP4)
    ds = Daemon(slurm, inv, spool, dry_run=True).cycle()
    assert ds[0].action == "release"
    assert slurm.job(a).held and not [c for c in slurm.calls if c[0] != "submit"]


def test_a_job_held_again_by_its_user_is_left_alone(slurm, inv, spool):
    slurm.auto_schedule = False
    a = submit(slurm, **TP4)
    d = Daemon(slurm, inv, spool)
    d.cycle()
    slurm.jobs_[a].held = True                           # the user held it again
    ds = d.cycle()
    assert ds[0].action == "outside"
    assert slurm.releases(a) == 1


def test_slurm_errors_are_journalled_not_fatal(slurm, inv, spool):
    a = submit(slurm, **TP4)

    def refuse(job_id, fields):
        from slurmtopo.errors import SlurmError
        raise SlurmError("Requested node configuration is not available")

    slurm.hooks["update"] = refuse
    # (no back-off: tried again at once; tests/daemon/test_no_hostage.py)
    d = Daemon(slurm, inv, spool, Config(retry_backoff=0))
    d.cycle()
    assert slurm.job(a).held and d.records[a].phase == "waiting"
    assert d.records[a].refusals == 1
    assert "release-failed" in [e["event"] for e in read_events(spool, a)]
    del slurm.hooks["update"]
    d.cycle()
    assert slurm.jobs_[a].state == "RUNNING"


def test_one_daemon_per_spool(spool):
    os.makedirs(spool)
    first = SpoolLock(spool)
    first.acquire()
    try:
        assert SpoolLock.probe(spool) is True
        with pytest.raises(SlurmtopoError, match="another slurmtopo daemon"):
            SpoolLock(spool).acquire()
    finally:
        first.release()
    assert SpoolLock.probe(spool) is False


def test_cli_run_once_and_status(slurm, inv_file, spool, monkeypatch):
    from slurmtopo.cli import cli

    inv_path = inv_file
    slurm.occupy("node1", range(8), exclusive=True)
    slurm.occupy("node2", range(8), exclusive=True)
    slurm.occupy("node3", range(8), exclusive=True)
    a = submit(slurm, layout=Layout(tp=4, dp=2), require={"tp": "nvlink"},
               prefer={"dp": "leaf"}, wait={"dp": 3600})
    b = submit(slurm, layout=Layout(tp=16), require={"tp": "nvlink"}, gpn=8)
    monkeypatch.setattr("slurmtopo.slurm.get_backend", lambda name="auto": slurm)
    r = CliRunner().invoke(cli, ["daemon", "--inventory", str(inv_path), "--spool", spool,
                                 "--once"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool, "--events", "5"],
                           catch_exceptions=False)
    assert r.exit_code == 3, r.output  # shown, and "not running" for a monitor
    out = r.output
    assert "NOT running" in out
    assert str(a) in out and "waiting up to" in out and "dp=leaf" in out
    assert f"job {b}" in out and "can never run" in out
    assert "unseen" not in out
    # submitted while the daemon is down: Slurm has it, the snapshot does not
    c = submit(slurm, **TP4)
    r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool, "--json"])
    assert r.exit_code == 3, r.output
    doc = json.loads(r.output)
    assert doc["running"] is False and doc["jobs"][0]["waiting_for"] == ["dp=leaf"]
    assert [u["job_id"] for u in doc["unseen"]] == [c]
    r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool], catch_exceptions=False)
    row = [line for line in r.output.splitlines() if line.startswith(f"{c} ")]
    assert row and "unseen" in row[0] and "not in its last cycle" in row[0], r.output
    # a daemon holding the spool: exit code 0
    lock = SpoolLock(spool)
    lock.acquire()
    try:
        r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool, "--backend", "none"])
    finally:
        lock.release()
    assert r.exit_code == 0 and "running (pid" in r.output, r.output


def test_a_job_whose_tag_is_replaced_is_no_longer_managed(slurm, inv, spool):
    slurm.auto_schedule = False
    a = submit(slurm, **TP4)
    d = Daemon(slurm, inv, spool)
    d.cycle()
    assert d.records[a].phase == "released"
    slurm.jobs_[a].comment = "mine now"
    slurm.jobs_[a].held = True
    d.cycle()
    assert a not in d.records and slurm.jobs_[a].state == "PENDING"
    assert read_events(spool, a)[-1]["event"] == "untagged"


def test_status_says_what_became_of_a_preference(slurm, inv, spool):
    """A --prefer the job's shape can never meet is in `daemon status`
    (text and JSON), not only in a debug log."""
    from slurmtopo.cli import cli

    slurm.occupy("node3", range(8), exclusive=True)
    slurm.occupy("node4", range(8), exclusive=True)
    a = submit(slurm, layout=Layout(tp=4, dp=2), require={"tp": "nvlink"},
               prefer={"dp": "node"}, wait={"dp": 600})
    Daemon(slurm, inv, spool).cycle()
    status = json.load(open(os.path.join(spool, "status.json")))
    entry = [j for j in status["jobs"] if j["job_id"] == a][0]
    assert "prefer dp=node can never be met here; not waiting for it" in \
        entry["preference_notes"]
    r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool], catch_exceptions=False)
    assert "[prefer dp=node can never be met here; not waiting for it" in r.output


def test_release_steps_are_marked_in_order(slurm, inv, spool):
    """Daemon.reached marks the points a crash can fall between (the
    integration test kills the daemon there through paused_daemon.py)."""
    a = submit(slurm, **TP4)
    seen = []

    class Watching(Daemon):
        def reached(self, step):
            seen.append((step, Journal(spool).load()[a].phase, slurm.job(a).held))

    Watching(slurm, inv, spool).cycle()
    assert seen == [("after-intent", "releasing", True), ("after-pin", "releasing", True),
                    ("after-release", "releasing", False)]


def test_the_pausing_driver_lives_in_the_tests(slurm, inv, spool, monkeypatch):
    import importlib.util
    import time

    path = os.path.join(os.path.dirname(__file__), "..", "integration", "paused_daemon.py")
    spec = importlib.util.spec_from_file_location("paused_daemon", path)
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    assert driver.parse(["after-pin=2.5", "--", "daemon", "run"]) == (
        {"after-pin": 2.5}, ["daemon", "run"])
    with pytest.raises(SystemExit, match="unknown step"):
        driver.parse(["after-lunch=1", "--"])
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    a = submit(slurm, **TP4)
    driver.pausing(Daemon, {"after-pin": 2.5})(slurm, inv, spool).cycle()
    assert slept == [2.5] and slurm.releases(a) == 1


def test_status_before_any_cycle_lists_the_held_jobs(slurm, spool, monkeypatch):
    """A daemon that never ran a cycle with this spool (not started yet,
    or down since the spool was made): `daemon status` still says it is
    not running (exit 3) and lists the jobs Slurm holds for it, rather
    than only "no status file" (issue 24)."""
    from slurmtopo.cli import cli

    a = submit(slurm, **TP4)
    monkeypatch.setattr("slurmtopo.slurm.get_backend", lambda name="auto": slurm)
    r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool])
    assert r.exit_code == 3, r.output
    assert "NOT running" in r.output and "no cycle has run with this spool" in r.output
    row = [line for line in r.output.splitlines() if line.startswith(f"{a} ")]
    assert row and "unseen" in row[0], r.output
    r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool, "--json"])
    assert r.exit_code == 3, r.output
    doc = json.loads(r.output)
    assert doc["running"] is False and doc["jobs"] == []
    assert [u["job_id"] for u in doc["unseen"]] == [a]
