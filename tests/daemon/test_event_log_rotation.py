"""The daemon's events.log is bounded: rotated by size to events.log.1 ...
events.log.<keep>, each step a rename inside the spool (no link followed,
0600, the daemon's), and ``read_events`` reads back across a rotation
(docs/daemon.md, "Restart safety")."""
from __future__ import annotations

import os
import stat

import pytest
from click.testing import CliRunner

from slurmtopo.daemon.spool import (EVENTS_FILE, EventLogLimits, Journal, prepare_spool,
                                    read_events, rotated_name)
from slurmtopo.errors import SlurmtopoError

#: one event line written by `write` below is this long (bytes)
LINE = len('{"at": 0.0, "event": "x", "job": 1000, "n": "%s"}\n' % ("p" * 40))


def write(journal: Journal, first: int, count: int) -> None:
    """``count`` events, jobs ``first`` ..., each flushed on its own."""
    for job in range(first, first + count):
        journal.event("x", job, n="p" * 40)


def jobs_in(path: str):
    import json

    with open(path) as f:
        return [json.loads(line)["job"] for line in f]


@pytest.fixture
def spool(tmp_path, monkeypatch):
    monkeypatch.setattr("time.time", lambda: 0.0)   # every line LINE bytes long
    path = str(tmp_path / "spool")
    prepare_spool(path)
    return path


def test_the_log_rotates_by_size_and_keeps_only_the_newest(spool):
    journal = Journal(spool, EventLogLimits(max_bytes=3 * LINE, keep=2))
    write(journal, 1000, 11)   # 3 lines a file: 1000-1002 ... 1009-1010
    assert not journal.take_problems()
    assert jobs_in(os.path.join(spool, EVENTS_FILE)) == [1009, 1010]
    assert jobs_in(os.path.join(spool, rotated_name(1))) == [1006, 1007, 1008]
    assert jobs_in(os.path.join(spool, rotated_name(2))) == [1003, 1004, 1005]
    assert not os.path.lexists(os.path.join(spool, rotated_name(3)))   # 1000-1002: gone
    for name in (EVENTS_FILE, rotated_name(1), rotated_name(2)):
        st = os.lstat(os.path.join(spool, name))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == os.geteuid()
    # read back across the rotation, oldest first
    assert [e["job"] for e in read_events(spool)] == list(range(1003, 1011))
    assert [e["job"] for e in read_events(spool, limit=4)] == [1007, 1008, 1009, 1010]


def test_a_flush_larger_than_the_limit_is_written_whole(spool):
    journal = Journal(spool, EventLogLimits(max_bytes=LINE, keep=1))
    with journal.batch():
        write(journal, 1000, 5)
    assert jobs_in(os.path.join(spool, EVENTS_FILE)) == list(range(1000, 1005))
    write(journal, 1005, 1)    # the full log is rotated before the next line
    assert jobs_in(os.path.join(spool, rotated_name(1))) == list(range(1000, 1005))
    assert jobs_in(os.path.join(spool, EVENTS_FILE)) == [1005]


def test_a_link_planted_at_the_rotated_name_is_not_followed(spool, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.chmod(victim, 0o644)
    os.symlink(victim, os.path.join(spool, rotated_name(1)))
    os.symlink(victim, os.path.join(spool, rotated_name(2)))
    journal = Journal(spool, EventLogLimits(max_bytes=2 * LINE, keep=2))
    write(journal, 1000, 5)
    assert victim.read_text() == "precious\n"                     # not written through
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o644         # nor chmodded
    for name in (rotated_name(1), rotated_name(2)):
        st = os.lstat(os.path.join(spool, name))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, name
    assert jobs_in(os.path.join(spool, rotated_name(2))) == [1000, 1001]
    assert [e["job"] for e in read_events(spool)] == list(range(1000, 1005))


def test_a_rotated_link_is_not_read_back(spool, tmp_path):
    """``daemon status --events`` walks back through rotated logs; a link
    there ends the walk, it is never opened."""
    secret = tmp_path / "secret"
    secret.write_text('{"at": 1, "event": "planted", "job": 7}\n')
    journal = Journal(spool)
    write(journal, 1000, 1)
    os.symlink(secret, os.path.join(spool, rotated_name(1)))
    assert [e["event"] for e in read_events(spool)] == ["x"]


def test_a_rotation_that_fails_loses_no_event(spool):
    os.mkdir(os.path.join(spool, rotated_name(1)))     # events.log cannot be renamed onto it
    with open(os.path.join(spool, rotated_name(1), "x"), "w"):
        pass
    journal = Journal(spool, EventLogLimits(max_bytes=LINE, keep=1))
    write(journal, 1000, 3)
    problems = journal.take_problems()
    assert problems and all(p.startswith(f"cannot rotate {EVENTS_FILE}") for p in problems)
    assert journal.lost_events == 0
    assert jobs_in(os.path.join(spool, EVENTS_FILE)) == [1000, 1001, 1002]


@pytest.mark.parametrize("limits", [(0, 3), (1, 0)])
def test_limits_below_one_are_refused(limits):
    with pytest.raises(SlurmtopoError, match="event log limits"):
        EventLogLimits(*limits)


@pytest.mark.parametrize("option", ["--events-max-mib=0", "--events-keep=0"])
def test_the_options_refuse_zero(option, tmp_path):
    from slurmtopo.cli import cli

    r = CliRunner().invoke(cli, ["daemon", "run", "--inventory", str(tmp_path), "--spool",
                                  str(tmp_path / "s"), "--once", option])
    assert r.exit_code == 2 and option.split("=")[0] in r.output, r.output
