"""The daemon never undoes someone else's decision about a job, and never
holds a job that has started (issue 21): admin holds and jobs an admin
changed are left alone (and `daemon status` says why), its own holds are
user holds, and every release and re-hold is checked on a fresh view of
the job right before it is made (and a hold that landed on a started job
anyway is undone at once). The extra look-ups are one per action, never
one per held job per cycle."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.spool import read_events
from slurmtopo.job.groups import Layout

from tests.daemon.test_untrusted_input import alice_job
from tests.daemon.test_loop import submit


def status_of(spool, job_id):
    doc = json.load(open(os.path.join(spool, "status.json")))
    return [j for j in doc["jobs"] if j["job_id"] == job_id][0]


def fill(slurm):
    for n in ("node1", "node2", "node3", "node4"):
        slurm.occupy(n, range(8), exclusive=True)


def free_all(slurm):
    """Every running job gone at once (no scheduling pass in between)."""
    for h in list(slurm.busy):
        slurm.busy[h] = {}
        slurm.excl[h] = None
        slurm.cpu_used[h] = 0


def status_text(spool):
    from slurmtopo.cli import cli
    return CliRunner().invoke(cli, ["daemon", "status", "--spool", spool],
                              catch_exceptions=False).output


# --------------------------------------------------------------------------
# holds


def test_an_admin_hold_is_never_lifted(slurm, inv, spool):
    a = alice_job(slurm)
    slurm.hold(a)                                    # scontrol hold as root: JobHeldAdmin
    assert slurm.job(a).reason == "JobHeldAdmin"
    d = Daemon(slurm, inv, spool)
    for _ in range(3):
        ds = {x.job_id: x for x in d.cycle()}
        assert ds[a].action == "left-alone"
    assert slurm.releases(a) == 0 and slurm.job(a).held
    entry = status_of(spool, a)
    assert entry["action"] == "left-alone" and "held by an admin" in entry["reason"]
    assert "held by an admin (Reason=JobHeldAdmin)" in status_text(spool)
    assert [e["event"] for e in read_events(spool, a)] == ["left-alone"]   # said once
    # the admin gives it back to the daemon (a user hold): managed again
    slurm.uhold(a)
    d.cycle()
    assert slurm.jobs_[a].state == "RUNNING" and slurm.releases(a) == 1


def test_an_admin_hold_after_first_sight_is_never_lifted(slurm, inv, spool):
    fill(slurm)
    a = alice_job(slurm)
    d = Daemon(slurm, inv, spool)
    assert {x.job_id: x.action for x in d.cycle()}[a] == "wait"
    slurm.hold(a)
    free_all(slurm)                                # room for it now
    assert {x.job_id: x.action for x in d.cycle()}[a] == "left-alone"
    assert slurm.releases(a) == 0


# --------------------------------------------------------------------------
# changed after submission


@pytest.mark.parametrize("field, value, shown", [
    ("Reservation", "maint", "Reservation (none) -> maint"),
    ("Partition", "debug", "Partition gpu -> debug"),
    ("ExcNodeList", "node[1-2]", "ExcNodeList (none) -> node1,node2"),
    ("QOS", "high", "QOS (none) -> high"),
    ("Account", "physics", "Account (none) -> physics"),
    ("Features", "a100", "Features (none) -> a100"),
])
def test_a_job_changed_after_submission_is_left_alone(slurm, inv, spool, field, value, shown):
    a = alice_job(slurm)
    d = Daemon(slurm, inv, spool)
    fill(slurm)
    assert {x.job_id: x.action for x in d.cycle()}[a] == "wait"      # first sight
    slurm.update_job(a, **{field: value})                            # an admin's change
    free_all(slurm)
    x = {x.job_id: x for x in d.cycle()}[a]
    assert x.action == "left-alone" and shown in x.reason, x.reason
    assert slurm.releases(a) == 0
    assert shown in status_text(spool)


# --------------------------------------------------------------------------
# the start race


def race_setup(slurm):
    """A job released on node1 that Slurm has not started yet."""
    slurm.auto_schedule = False
    for n in ("node2", "node3", "node4"):
        slurm.occupy(n, range(8), exclusive=True)
    return submit(slurm, layout=Layout(tp=8), require={"tp": "node"}, gpn=8)


def test_a_job_that_starts_between_the_two_reads_is_never_held(slurm, inv, spool):
    """jobs() sees it pending, nodes() a moment later sees its GPUs busy:
    busy with the job itself. The old daemon held it ("lost a race"),
    leaving a running job at Priority=0."""
    a = race_setup(slurm)
    d = Daemon(slurm, inv, spool)
    d.cycle()
    assert slurm.jobs_[a].state == "PENDING" and not slurm.jobs_[a].held
    slurm.hooks["nodes"] = slurm.schedule          # it starts between jobs() and nodes()
    ds = [x.action for x in d.cycle() if x.job_id == a]
    assert "rehold" not in ds, ds
    assert slurm.jobs_[a].state == "RUNNING" and not slurm.jobs_[a].held
    assert ("uhold", a) not in slurm.calls and ("hold", a) not in slurm.calls
    del slurm.hooks["nodes"]
    d.cycle()
    assert d.records[a].phase == "running"


def lost_then_started(slurm, inv, spool, when):
    """A released job whose node another job takes (so the daemon decides
    to hold it again), and which starts after all at the moment ``when``
    (a FakeSlurm hook: "job", "hold") of the next cycle."""
    a = race_setup(slurm)
    d = Daemon(slurm, inv, spool)
    d.cycle()
    thief = slurm.occupy("node1", [0], exclusive=False)

    def start_it(job_id):
        if job_id == a and slurm.jobs_[a].state == "PENDING":
            slurm.finish(thief)
            slurm.schedule()

    slurm.hooks[when] = start_it
    return a, d


def test_a_rehold_is_checked_on_a_fresh_view_first(slurm, inv, spool):
    """The snapshot says another job took its node; by the time the daemon
    acts, the job has started (the other job ended, Slurm started it): no
    hold."""
    a, d = lost_then_started(slurm, inv, spool, "job")
    ds = [x.action for x in d.cycle() if x.job_id == a]
    assert ds[0] == "rehold"                        # decided on the snapshot ...
    assert ("uhold", a) not in slurm.calls          # ... never carried out
    assert slurm.jobs_[a].state == "RUNNING" and not slurm.jobs_[a].held
    assert "rehold-skipped" in [e["event"] for e in read_events(spool, a)]


def test_a_hold_that_lands_on_a_started_job_is_undone(slurm, inv, spool, caplog):
    """Checked just before, started just before the hold lands: slurmctld
    sets a running job's priority to 0 all the same; the daemon sees it
    right after and releases it again."""
    a, d = lost_then_started(slurm, inv, spool, "hold")
    with caplog.at_level("WARNING", logger="slurmtopo.daemon"):
        d.cycle()
    j = slurm.jobs_[a]
    assert j.state == "RUNNING" and not j.held, j       # no running job left at Priority=0
    assert ("uhold", a) in slurm.calls and slurm.releases(a) == 2
    assert "rehold-undone" in [e["event"] for e in read_events(spool, a)]
    assert "hold undone" in caplog.text


def test_a_hold_left_on_a_started_job_by_a_crash_is_undone_at_restart(slurm, inv, spool,
                                                                     killed):
    a = race_setup(slurm)
    Daemon(slurm, inv, spool).cycle()
    thief = slurm.occupy("node1", [0], exclusive=False)

    def start_then_die(job_id):
        if job_id == a:
            slurm.finish(thief)
            slurm.schedule()
            slurm.jobs_[a].held = True               # the hold lands ...
            raise killed()                           # ... and the daemon dies

    slurm.hooks["hold"] = start_then_die
    with pytest.raises(killed):
        Daemon(slurm, inv, spool).cycle()
    del slurm.hooks["hold"]
    assert slurm.jobs_[a].state == "RUNNING" and slurm.jobs_[a].held
    Daemon(slurm, inv, spool).cycle()
    assert slurm.jobs_[a].state == "RUNNING" and not slurm.jobs_[a].held
    assert "rehold-undone" in [e["event"] for e in read_events(spool, a)]


def test_a_release_is_checked_on_a_fresh_view_first(slurm, inv, spool):
    """Held by an admin between the snapshot and the release: not released."""
    a = alice_job(slurm)

    def admin_holds(job_id):
        if job_id == a:
            slurm.hold(a)

    slurm.hooks["job"] = admin_holds
    d = Daemon(slurm, inv, spool)
    d.cycle()
    assert slurm.releases(a) == 0 and slurm.job(a).reason == "JobHeldAdmin"
    assert not [c for c in slurm.calls if c[0] == "update"]          # not even pinned
    ev = [e for e in read_events(spool, a) if e["event"] == "release-skipped"]
    assert ev and "held by an admin" in ev[0]["reason"]


# --------------------------------------------------------------------------
# the cost of the checks


def test_one_look_up_per_action_not_per_held_job(slurm, inv, spool):
    """30 held jobs, room for 4: 4 look-ups (one per release); the next
    cycle, with nothing to do, none."""
    for n in ("node3", "node4"):
        slurm.occupy(n, range(8), exclusive=True)
    jobs = [alice_job(slurm) for _ in range(30)]
    d = Daemon(slurm, inv, spool)
    ds = d.cycle()
    released = [x.job_id for x in ds if x.action == "release"]
    assert len(released) == 4
    assert sorted(slurm.looked_up) == sorted(released)
    slurm.looked_up.clear()
    d.cycle()
    assert slurm.looked_up == [] and len(jobs) == 30
