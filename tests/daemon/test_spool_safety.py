"""The daemon's own files (issue 21): read back like user input, never
followed through a link or blocked on, created with fixed modes whatever the
umask, and a spool that cannot be written is reported once per cycle
without a crash and without writing any event twice (docs/security.md)."""
from __future__ import annotations

import errno
import json
import logging
import os
import stat

import pytest

from slurmtopo.daemon import spool as spool_mod
from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.spool import (JOURNAL_FILE, Journal, SpoolLock, prepare_spool,
                                    read_events)
from slurmtopo.errors import SlurmtopoError

from tests.daemon.test_untrusted_input import alice_job, within


def events_of(spool, kind, job=None):
    return [e for e in read_events(spool, job) if e["event"] == kind]


# --------------------------------------------------------------------------
# the journal read back


def test_a_journal_with_an_overflowing_number_is_set_aside(slurm, inv, spool, caplog):
    prepare_spool(spool)
    a = alice_job(slurm)
    with open(os.path.join(spool, JOURNAL_FILE), "w") as f:
        f.write('{"slurmtopo":"daemon-journal","version":1,"jobs":[{"job_id":%d,'
                '"phase":"released","releases":1e999}]}' % a)
    with caplog.at_level(logging.WARNING, logger="slurmtopo.daemon"):
        d = Daemon(slurm, inv, spool)
    assert d.records == {}
    assert "out of range" in caplog.text and "set aside" in caplog.text
    assert os.path.exists(os.path.join(spool, JOURNAL_FILE + ".bad"))
    d.cycle()                                   # and it works from Slurm's state
    assert slurm.jobs_[a].state == "RUNNING"


@pytest.mark.parametrize("record, why", [
    ({"phase": "released", "released_at": 1e308 * 10}, None),   # inf once loaded: json writes it
    ({"phase": "released", "avoid": {"node1": "soon"}}, "avoid.node1"),
    ({"phase": "lunch"}, "phase"),
    ({"phase": "released", "hosts": "node1"}, "hosts"),
    ({"phase": "released", "gpus": {"node1": [0, -1]}}, "gpus.node1"),
    ({"phase": "released", "releases": 2 ** 80}, "releases"),
    ({"phase": "released", "cpus": True}, "cpus"),
])
def test_a_record_out_of_shape_is_skipped_the_others_kept(slurm, inv, spool, caplog, record,
                                                          why):
    prepare_spool(spool)
    good = {"job_id": 7, "phase": "waiting"}
    bad = dict(record, job_id=8)
    text = json.dumps({"slurmtopo": "daemon-journal", "version": 1, "jobs": [good, bad]})
    if why is None:     # 1e309 is what a damaged file would hold
        text = text.replace("Infinity", "1e309")
        why = "out of range"
    with open(os.path.join(spool, JOURNAL_FILE), "w") as f:
        f.write(text)
    with caplog.at_level(logging.WARNING, logger="slurmtopo.daemon"):
        records = Journal(spool).load()
    assert why in caplog.text
    if why == "out of range":       # a number JSON cannot hold: the whole file set aside
        assert records == {}
    else:
        assert set(records) == {7}


@pytest.mark.parametrize("kind", ["fifo", "symlink", "someone else's"])
def test_a_journal_that_is_not_the_daemons_file_is_refused(slurm, inv, spool, tmp_path, kind):
    prepare_spool(spool)
    path = os.path.join(spool, JOURNAL_FILE)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_text('{"slurmtopo":"daemon-journal","version":1,"jobs":[]}')
        os.symlink(target, path)
    else:
        with open(path, "w") as f:
            f.write('{"slurmtopo":"daemon-journal","version":1,"jobs":[]}')
        os.chown(path, 4242, -1)
    try:
        with pytest.raises(SlurmtopoError, match="refusing to use this spool") as ei:
            within(lambda: Daemon(slurm, inv, spool))
    finally:
        if kind == "fifo":
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    assert "\n" not in ei.value.render() and path in ei.value.render()


# --------------------------------------------------------------------------
# the spool directory


def test_a_spool_others_may_write_into_is_refused(slurm, inv, spool):
    os.makedirs(spool)
    os.chmod(spool, 0o777)
    with pytest.raises(SlurmtopoError, match="writable by its group or others"):
        Daemon(slurm, inv, spool)
    os.chmod(spool, 0o755)
    Daemon(slurm, inv, spool)


@pytest.mark.parametrize("kind", ["symlink", "a user's", "world-writable"])
def test_a_request_directory_not_the_daemons_is_refused(slurm, inv, spool, tmp_path, kind):
    os.makedirs(spool, mode=0o755)
    path = os.path.join(spool, "requests")
    if kind == "symlink":
        os.mkdir(tmp_path / "there")
        os.symlink(tmp_path / "there", path)
    elif kind == "a user's":
        os.mkdir(path)
        os.chown(path, 4242, -1)
    else:
        os.mkdir(path)
        os.chmod(path, 0o777)
    with pytest.raises(SlurmtopoError, match="refuses a spool others may write into"):
        Daemon(slurm, inv, spool)


def test_files_have_fixed_modes_whatever_the_umask(slurm, inv, spool):
    old = os.umask(0)
    try:
        lock = SpoolLock(spool)
        prepare_spool(spool)
        lock.acquire()
        alice_job(slurm)
        Daemon(slurm, inv, spool).cycle()
        lock.release()
    finally:
        os.umask(old)

    def mode(name):
        return stat.S_IMODE(os.lstat(os.path.join(spool, name)).st_mode)

    assert mode(".") == 0o755
    assert mode("requests") == 0o1733
    assert mode("journal.json") == 0o600
    assert mode("events.log") == 0o600
    assert mode("status.json") == 0o644
    assert mode("daemon.lock") == 0o644
    # an events.log of an older daemon (0644) is made private on the next write
    os.chmod(os.path.join(spool, "events.log"), 0o644)
    Daemon(slurm, inv, spool).cycle()
    assert mode("events.log") == 0o600


def test_no_link_is_followed_in_the_spool(slurm, inv, spool, tmp_path):
    """events.log and status.json replaced by links to a file elsewhere:
    the target is never written."""
    prepare_spool(spool)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.symlink(victim, os.path.join(spool, "events.log"))
    os.symlink(victim, os.path.join(spool, "status.json"))
    alice_job(slurm)
    Daemon(slurm, inv, spool).cycle()
    assert victim.read_text() == "precious\n"
    assert not os.path.islink(os.path.join(spool, "status.json"))   # replaced, not followed


# --------------------------------------------------------------------------
# a spool that cannot be written


def _failing(what):
    def fail(*a, **kw):
        raise SlurmtopoError(f"cannot write: {os.strerror(errno.EROFS)}", what)
    return fail


def test_a_read_only_spool_releases_nothing_duplicates_nothing(slurm, inv, spool, monkeypatch,
                                                              caplog):
    """23 cycles on a read-only spool: every cycle says so once, no job is
    released on an intent that is not on disk, and once the spool is back
    each event is in the log once."""
    a = alice_job(slurm)
    d = Daemon(slurm, inv, spool)
    monkeypatch.setattr(spool_mod, "atomic_write", _failing("journal.json"))
    monkeypatch.setattr("slurmtopo.daemon.loop.atomic_write", _failing("status.json"))
    for n in range(23):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="slurmtopo.daemon"):
            d.cycle()
        spool_lines = [r for r in caplog.records if "spool" in r.getMessage()]
        assert len(spool_lines) == 1, [r.getMessage() for r in caplog.records]
        assert "Read-only file system" in spool_lines[0].getMessage()
    assert slurm.releases(a) == 0 and slurm.jobs_[a].held
    monkeypatch.undo()
    d.cycle()
    assert slurm.jobs_[a].state == "RUNNING"
    assert len(events_of(spool, "intent-release", a)) == 1
    assert len(events_of(spool, "released", a)) == 1
    status = json.load(open(os.path.join(spool, "status.json")))
    assert status["daemon"]["spool_error"] is None and status["daemon"]["lost_events"] > 0


def test_a_full_disk_writes_each_event_at_most_once(slurm, inv, spool, monkeypatch):
    """The event log fills up halfway through a write: what was written is
    not written again, what was not is counted as lost, never retried."""
    a = alice_job(slurm)
    d = Daemon(slurm, inv, spool)
    real_write = os.write
    state = {"full": True}

    def half(fd, data):
        if state["full"] and len(data) > 40:
            real_write(fd, data[:len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(spool_mod.os, "write", half)
    for _ in range(5):
        d.cycle()
    state["full"] = False
    d.cycle()
    events = read_events(spool)              # lines cut by the full disk are skipped
    keys = [json.dumps(e, sort_keys=True) for e in events]
    assert len(keys) == len(set(keys))       # nothing twice
    assert slurm.releases(a) == 1
    assert d.journal.lost_events > 0


def test_status_says_when_the_spool_fails(slurm, inv, spool, monkeypatch):
    from click.testing import CliRunner
    from slurmtopo.cli import cli

    alice_job(slurm)
    d = Daemon(slurm, inv, spool)
    d.cycle()
    r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool], catch_exceptions=False)
    assert "SPOOL PROBLEM" not in r.output
    monkeypatch.setattr(spool_mod, "atomic_write", _failing("journal.json"))
    alice_job(slurm)
    d.cycle()
    monkeypatch.undo()
    r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool], catch_exceptions=False)
    assert "SPOOL PROBLEM: cannot write journal.json" in r.output


def test_users_read_the_status_but_not_the_event_log(slurm, inv):
    """status.json is for users (0644), the event log the daemon's (0600):
    a user asking for events gets one line saying so."""
    import shutil
    import tempfile

    from tests.clirun import one_line_error, run_cli, run_cli_unprivileged

    base = tempfile.mkdtemp(prefix="slurmtopo-spool-")
    os.chmod(base, 0o755)
    spool = os.path.join(base, "spool")
    try:
        alice_job(slurm)
        Daemon(slurm, inv, spool).cycle()
        run_cli(["daemon", "status", "--spool", spool, "--events", "3"])   # imports, as root
        code, err = run_cli_unprivileged(["daemon", "status", "--spool", spool])
        assert code == 3, err  # shown; the daemon is not running
        code, err = run_cli_unprivileged(["daemon", "status", "--spool", spool, "--events", "3"])
        one_line_error(code, err, "events.log", "Permission denied",
                       "readable by its user only")
    finally:
        shutil.rmtree(base)
