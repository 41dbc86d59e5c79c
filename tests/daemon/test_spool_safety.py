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
    # the lock is the daemon's alone: nobody else can open, let alone hold it
    assert mode("private") == 0o700 and mode("private/daemon.lock") == 0o600
    assert not os.path.exists(os.path.join(spool, "daemon.lock"))
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


# --------------------------------------------------------------------------
# the lock and liveness are the daemon's alone (issue 33)


def _as_nobody(fn):
    """``fn()`` run in a child that dropped to user ``nobody``; its JSON
    result (or the exception's name)."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # never return into pytest
        out = '"child failed"'
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            try:
                out = json.dumps(fn())
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                out = json.dumps(type(exc).__name__)
        finally:
            os.write(write_fd, out.encode())
            os._exit(0)
    os.close(write_fd)
    data = b""
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    return json.loads(data.decode())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_no_user_can_hold_or_fake_the_daemons_lock(slurm, inv):
    """The lock was 0644 in the spool: `flock -s` by any user kept the
    daemon from starting, `flock -x` made `daemon status` say "running"
    with no daemon. It is now 0600 in a 0700 directory (nobody else can
    open it), an old world-readable lock is removed, and users tell from
    the daemon's process whether it runs: a lock they hold says nothing."""
    import fcntl
    import shutil
    import tempfile
    import time

    from slurmtopo.daemon.status import liveness, read_status

    base = tempfile.mkdtemp(prefix="slurmtopo-lock-")
    os.chmod(base, 0o755)
    spool = os.path.join(base, "spool")
    try:
        prepare_spool(spool)
        old = os.path.join(spool, "daemon.lock")   # what an older daemon left
        with open(old, "w") as f:
            f.write("1\n")
        os.chmod(old, 0o644)
        lock = SpoolLock(spool)
        lock.acquire()
        assert not os.path.exists(old)
        d = Daemon(slurm, inv, spool)
        d.locked = True
        d.cycle()

        def user_view():
            try:
                os.open(os.path.join(spool, "private", "daemon.lock"), os.O_RDONLY)
                opened = True
            except PermissionError:
                opened = False
            with open(os.path.join(spool, "status.json")) as f:
                doc = read_status(f.read(), "status.json")
            alive = liveness(spool, doc, time.time())
            return [opened, alive.running, alive.how, alive.pid]

        assert _as_nobody(user_view) == [False, True, "process", os.getpid()]
        lock.release()
        # the daemon is gone: its status names a process that ended
        doc = json.load(open(os.path.join(spool, "status.json")))
        child = os.fork()
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)
        doc["daemon"]["pid"] = child
        with open(os.path.join(spool, "status.json"), "w") as f:
            json.dump(doc, f)
        # a user locks a file of their own named like the old lock: nothing
        fd = os.open(old, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            assert _as_nobody(user_view)[:3] == [False, False, "process"]
        finally:
            os.close(fd)
        # the daemon starts all the same (its lock is not that file)
        again = SpoolLock(spool)
        again.acquire()
        again.release()
    finally:
        shutil.rmtree(base)


def test_liveness_from_another_host_is_the_last_cycles_age(tmp_path, monkeypatch):
    from slurmtopo.daemon.status import Liveness, liveness

    spool = str(tmp_path / "spool")
    prepare_spool(spool)
    doc = {"daemon": {"pid": 4, "host": "elsewhere", "locked": True, "at": 1000.0,
                      "interval": 10.0, "boot_id": "x", "proc_start": 5}}
    # a user's view: the lock is not theirs to open (root's is the lock's)
    monkeypatch.setattr(SpoolLock, "probe", staticmethod(lambda s: None))
    assert liveness(spool, doc, 1020.0) == Liveness(True, 4, "heartbeat")
    assert not liveness(spool, doc, 1100.0).running
    doc["daemon"]["locked"] = False
    assert not liveness(spool, doc, 1020.0).running


def test_a_spool_that_takes_nothing_shows_as_a_problem(slurm, inv, spool, monkeypatch):
    """A full spool file system: the journal cannot be written, nothing is
    released, and status.json cannot be written either, so it went stale
    with no problem shown. `daemon status` now says SPOOL PROBLEM when a
    running daemon's status is older than a few cycles, and the metrics
    have a gauge for it."""
    import json as _json

    from click.testing import CliRunner

    from slurmtopo.cli import cli
    from slurmtopo.daemon import metrics as m
    from slurmtopo.daemon import spool as spool_mod

    rec = m.Recorder()
    lock = SpoolLock(spool)
    lock.acquire()
    try:
        d = Daemon(slurm, inv, spool, metrics=rec)
        d.locked, d.interval = True, 10.0
        alice_job(slurm)
        d.cycle()
        assert b"slurmtopo_daemon_spool_problem 0.0" in rec.text()
        monkeypatch.setattr(spool_mod, "atomic_write", _failing("journal.json"))
        monkeypatch.setattr("slurmtopo.daemon.loop.atomic_write", _failing("status.json"))
        d.cycle()
        assert b"slurmtopo_daemon_spool_problem 1.0" in rec.text()
        monkeypatch.undo()
        # status.json could not be replaced: rewritten in place, with the problem
        r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool, "--backend", "none"])
        assert "SPOOL PROBLEM: cannot write journal.json" in r.output
        assert "cannot write status.json" in r.output
        path = os.path.join(spool, "status.json")
        doc = _json.load(open(path))
        doc["daemon"]["at"] -= 3600   # written an hour ago, and not since
        doc["daemon"]["spool_error"] = None
        with open(path, "w") as f:
            _json.dump(doc, f)
        r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool, "--backend", "none"])
        assert r.exit_code == 0, r.output
        assert "SPOOL PROBLEM: the daemon runs, but its status is 60m old" in r.output
    finally:
        lock.release()
