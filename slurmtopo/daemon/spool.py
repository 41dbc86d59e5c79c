"""The daemon's spool directory: what survives a restart.

* ``journal.json`` -- one record per job the daemon manages, replaced
  atomically (:class:`Journal`);
* ``events.log`` -- the append-only event log, one JSON object a line,
  fsynced (:class:`Journal`, :func:`read_events`); rotated by size to
  ``events.log.1`` ... ``events.log.<keep>`` (:class:`EventLogLimits`);
* ``status.json`` -- what ``slurmtopo daemon status`` shows (written by the
  loop, :data:`STATUS_FILE`);
* ``private/daemon.lock`` -- the ``flock`` that keeps a second daemon off
  the same spool (:class:`SpoolLock`), in a directory only the daemon's
  user may enter, so that no one else can open it, let alone lock it;
* ``requests/`` -- request files too long for a job comment, written by
  users (:mod:`slurmtopo.daemon.protocol`).

Who may write what (docs/security.md): the spool belongs to the daemon's
user and nobody else may write into it (:func:`prepare_spool` refuses to
start otherwise), except ``requests/`` (mode 1733: everyone may create a
file, nobody may list it or remove another user's). The daemon's own files
are created with fixed modes whatever the umask (:data:`MODES`), opened
without following links or blocking (:mod:`slurmtopo.files.fileio`),
and read back like user input: bounded, nesting checked, every value of a
record validated (:meth:`JobRecord.from_dict`).

How the loop uses them to act once whatever the moment of a kill is in
:mod:`slurmtopo.daemon.loop`.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import stat
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from slurmtopo.daemon.decisions import JobRecord
from slurmtopo.daemon.protocol import REQUESTS_DIR
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.boundedjson import JsonRefused, loads
from slurmtopo.files.fileio import UnsafeFileError, atomic_write, open_dir, open_file, read_file
from slurmtopo.show.termsafe import printable

log = logging.getLogger("slurmtopo.daemon")

STATUS_FILE = "status.json"
JOURNAL_FILE = "journal.json"
JOURNAL_KIND = "daemon-journal"
EVENTS_FILE = "events.log"
LOCK_FILE = "daemon.lock"
#: the daemon's own directory in the spool (0700): its lock
PRIVATE_DIR = "private"
#: where a journal that cannot be read is set aside (one, replaced)
DAMAGED_SUFFIX = ".bad"

#: the mode of everything the daemon creates in its spool, whatever the
#: umask: the journal and the event log are the daemon's alone (they hold
#: every user's jobs); status.json is world-readable because `slurmtopo
#: daemon status` is for users (it shows what squeue shows: job ids,
#: names, users, reasons). The lock is the daemon's alone (0600 in the
#: 0700 private/): a lock others could open, others could hold (`flock -s`
#: kept the daemon from starting; `flock -x` made `daemon status` report a
#: daemon that was not there); users tell whether it runs from its
#: process (slurmtopo.daemon.status.liveness). The spool itself 0755 and
#: requests/ 1733 (see the module doc)
MODES = {JOURNAL_FILE: 0o600, EVENTS_FILE: 0o600, JOURNAL_FILE + DAMAGED_SUFFIX: 0o600,
         STATUS_FILE: 0o644, LOCK_FILE: 0o600, ".": 0o755, REQUESTS_DIR: 0o1733,
         PRIVATE_DIR: 0o700}
#: the largest journal read back (1,000 jobs take about 0.5 MiB)
MAX_JOURNAL_BYTES = 64 << 20
#: nesting of the journal document (document, jobs, record, gpus, list)
JOURNAL_DEPTH = 6
#: how much of the end of events.log (and the rotated logs before it)
#: `read_events` reads
MAX_EVENTS_READ = 16 << 20
#: rotated logs `read_events` walks back through at most
MAX_ROTATED_READ = 16


@dataclass(frozen=True)
class EventLogLimits:
    """How large ``events.log`` may grow before it is rotated, and how many
    rotated logs stay (``events.log.1`` the newest): a daemon that runs for
    years keeps at most about ``max_bytes * (keep + 1)`` of events, never
    fills the spool's file system with them. The defaults are
    ``slurmtopo daemon run``'s (``--events-max-mib``, ``--events-keep``)."""

    max_bytes: int = 64 << 20
    keep: int = 3

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.keep < 1:
            raise SlurmtopoError(f"the event log limits must be at least 1 byte and 1 rotated "
                                 f"log (got {self.max_bytes} bytes, {self.keep})")


def rotated_name(n: int) -> str:
    """The name of the ``n``-th rotated event log (1: the newest)."""
    return f"{EVENTS_FILE}.{n}"


class SpoolError(SlurmtopoError):
    """The spool could not be written; what was to be written is not on
    disk (the caller must not act on it)."""


# --------------------------------------------------------------------------
# the directory


def spool_path(spool: str) -> str:
    """The spool's real path: the admin may name it through a link; the
    daemon follows none inside it."""
    return os.path.realpath(spool)


def _refuse(what: str, path: str) -> SlurmtopoError:
    return SlurmtopoError(f"{what}; the daemon refuses a spool others may write into "
                          "(docs/security.md)", path)


def _make_dir(path: str, mode: int, what: str) -> None:
    """``path`` made (0700 first, then ``mode`` whatever the umask) unless
    something is there already (the caller checks what)."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, mode)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SlurmtopoError(f"cannot create {what} ({exc.strerror})", path) from None


def prepare_spool(spool: str) -> None:
    """Make the spool (0755) and its ``requests/`` (1733) when missing, and
    refuse to run on one that someone else owns or may write into (a user
    who can write into the spool can replace the journal the daemon acts
    on). The spool path itself is the admin's: a link to a directory is
    fine there, never inside."""
    spool = spool_path(spool)
    euid = os.geteuid()
    if not os.path.lexists(spool):
        try:
            parent = os.path.dirname(spool)
            if not os.path.isdir(parent):
                os.makedirs(parent)
            os.mkdir(spool, 0o700)
            os.chmod(spool, MODES["."])
        except OSError as exc:
            if not os.path.isdir(spool):
                raise SlurmtopoError(f"cannot create the spool directory ({exc.strerror})",
                                     spool) from None
    try:
        st = os.stat(spool)
    except OSError as exc:
        raise SlurmtopoError(f"cannot use the spool directory ({exc.strerror})", spool) from None
    if not stat.S_ISDIR(st.st_mode):
        raise SlurmtopoError("the spool directory is not a directory", spool)
    if st.st_uid != euid:
        raise _refuse(f"the spool directory belongs to uid {st.st_uid}, not to the daemon's "
                      f"user (uid {euid})", spool)
    if st.st_mode & 0o022:
        raise _refuse(f"the spool directory is writable by its group or others (mode "
                      f"{stat.S_IMODE(st.st_mode):04o}; make it 0755: users write only into "
                      f"{REQUESTS_DIR}/)", spool)
    private = os.path.join(spool, PRIVATE_DIR)
    _make_dir(private, MODES[PRIVATE_DIR], "the daemon's private directory")
    st = os.lstat(private)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != euid:
        raise _refuse(f"{PRIVATE_DIR} in the spool is not a directory of the daemon's user "
                      f"(uid {euid})", private)
    if stat.S_IMODE(st.st_mode) != MODES[PRIVATE_DIR]:
        os.chmod(private, MODES[PRIVATE_DIR])
    path = os.path.join(spool, REQUESTS_DIR)
    _make_dir(path, MODES[REQUESTS_DIR], "the request directory")
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(f"{REQUESTS_DIR} in the spool is not a directory", path)
    if st.st_uid != euid:
        raise _refuse(f"the request directory belongs to uid {st.st_uid}, not to the daemon's "
                      f"user (uid {euid}); remove it, the daemon makes it (mode 1733)", path)
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        raise _refuse("the request directory is world-writable without the sticky bit (any "
                      "user could remove another's request); make it 1733", path)


# --------------------------------------------------------------------------
# the journal


class Journal:
    """The job records (one file, ``journal.json``, replaced atomically)
    and the append-only event log (``events.log``).

    Writes are batched: inside :meth:`batch` records and events are kept
    in memory and written by :meth:`flush` (the journal file: temp file,
    fsync, rename; the new event lines: one write, one fsync). Outside a
    batch every change is flushed at once. The loop flushes where crash
    safety needs it (every release intent before the first ``scontrol
    release`` of a cycle, a re-hold intent before ``scontrol hold``) and at
    the end of the cycle, so a cycle costs two or three fsyncs however
    many jobs it releases. What a crash can lose is only what happened
    after the last flush, and the journal never claims an action that did
    not reach Slurm's side of the reconcile table (see the module doc).

    A spool that cannot be written (read-only, full) never stops the
    daemon and never duplicates an event: a journal that cannot be written
    raises :class:`SpoolError` (the caller does not act on what it could
    not record), and event lines are handed to the disk once, written or
    dropped, never kept to be written again. What failed is collected in
    :attr:`problems` for the loop to report once per cycle."""

    def __init__(self, spool: str, events_limits: EventLogLimits = EventLogLimits()):
        self.spool = spool_path(spool)
        self.events_limits = events_limits
        self.path = os.path.join(self.spool, JOURNAL_FILE)
        #: per-job files of daemons before 0.x: read once, removed on the
        #: first write of journal.json
        self.legacy_dir = os.path.join(self.spool, "journal")
        self.events_path = os.path.join(self.spool, EVENTS_FILE)
        self._records: Dict[int, JobRecord] = {}
        self._dirty = False
        self._lines: List[str] = []
        self._depth = 0
        #: what could not be written since the loop last took them
        self.problems: List[str] = []
        #: event lines dropped because the spool could not take them
        self.lost_events = 0

    # -- reading -------------------------------------------------------------

    def load(self) -> Dict[int, JobRecord]:
        """The records on disk. A journal that is not a regular file of the
        daemon's user (a FIFO, a link, someone else's) is refused with a
        SlurmtopoError; one that cannot be read as a journal is set aside
        (``journal.json.bad``) with a warning, and a record out of shape
        is skipped with a warning: the daemon then starts from Slurm's
        state, which is safe (it only ever releases held jobs)."""
        out: Dict[int, JobRecord] = {}
        if os.path.isdir(self.legacy_dir) and not os.path.islink(self.legacy_dir):
            for name in sorted(os.listdir(self.legacy_dir)):
                if name.endswith(".json") and not name.startswith("."):
                    rec = self._read_record(name)
                    if rec is not None:
                        out[rec.job_id] = rec
        doc = self._read_journal()
        for d in doc:
            try:
                rec = JobRecord.from_dict(d)
            except ValueError as exc:
                log.warning("journal %s: a record is out of shape (%s); skipped", self.path, exc)
                continue
            out[rec.job_id] = rec
        self._records = dict(out)
        return out

    def _read_journal(self) -> list:
        try:
            raw = read_file(self.spool, JOURNAL_FILE, MAX_JOURNAL_BYTES, {os.geteuid()},
                            "journal")
        except FileNotFoundError:
            return []
        except UnsafeFileError as exc:
            if "larger than" not in exc.message:
                raise SlurmtopoError(f"{exc.message}; refusing to use this spool (has someone "
                                     "else written into it?)", exc.path) from None
            why = exc.message
        else:
            try:
                doc = loads(raw.decode("utf-8"), JOURNAL_DEPTH)
                if not isinstance(doc, dict) or doc.get("slurmtopo") != JOURNAL_KIND:
                    raise ValueError(f"not a {JOURNAL_KIND} document")
                jobs = doc.get("jobs") or []
                if not isinstance(jobs, list):
                    raise ValueError("its jobs are not a list")
                return jobs
            except (UnicodeDecodeError, JsonRefused, ValueError) as exc:
                why = str(exc)
        bad = JOURNAL_FILE + DAMAGED_SUFFIX
        try:
            dfd = open_dir(self.spool)
            try:
                os.rename(JOURNAL_FILE, bad, src_dir_fd=dfd, dst_dir_fd=dfd)
            finally:
                os.close(dfd)
            where = f"set aside as {bad}"
        except OSError as exc:
            where = f"could not be set aside ({exc.strerror})"
        log.warning("journal %s unreadable (%s); %s, starting from Slurm's state", self.path,
                    why, where)
        return []

    def _read_record(self, name: str) -> Optional[JobRecord]:
        path = os.path.join(self.legacy_dir, name)
        try:
            raw = read_file(self.legacy_dir, name, 1 << 20, {os.geteuid()}, "journal entry")
            return JobRecord.from_dict(loads(raw.decode("utf-8"), JOURNAL_DEPTH))
        except (OSError, SlurmtopoError, UnicodeDecodeError, ValueError) as exc:
            log.warning("journal entry %s unreadable (%s); ignored", path,
                        exc.render() if isinstance(exc, SlurmtopoError) else exc)
            return None

    # -- changing --------------------------------------------------------------

    def save(self, rec: JobRecord) -> None:
        self._records[rec.job_id] = rec
        self._dirty = True
        self._maybe_flush()

    def drop(self, job_id: int) -> None:
        if self._records.pop(int(job_id), None) is not None:
            self._dirty = True
        self._maybe_flush()

    def event(self, kind: str, job_id: Optional[int] = None, **fields) -> None:
        rec = {"at": round(time.time(), 3), "event": kind}
        if job_id is not None:
            rec["job"] = int(job_id)
        rec.update({k: v for k, v in fields.items() if v is not None})
        self._lines.append(json.dumps(rec, sort_keys=False, default=str) + "\n")
        self._maybe_flush()

    @contextlib.contextmanager
    def batch(self):
        """Keep writes in memory until :meth:`flush` or the end of the
        block (flushed then, also when the block raises an error; not when
        it is interrupted: that is a kill, and the journal is safe without).
        A spool that cannot be written at the end of the block is recorded
        in :attr:`problems`, not raised."""
        self._depth += 1
        try:
            yield self
        except Exception:
            self._depth -= 1
            self.flush(quiet=True)
            raise
        except BaseException:
            self._depth -= 1
            raise
        self._depth -= 1
        self.flush(quiet=True)

    def _maybe_flush(self) -> None:
        if not self._depth:
            self.flush(quiet=True)

    def take_problems(self) -> List[str]:
        out, self.problems = self.problems, []
        return out

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def flush(self, quiet: bool = False) -> None:
        """Write what changed: the journal file first, then the events.
        Raises :class:`SpoolError` when the journal file cannot be written
        (unless ``quiet``); the events of that flush are then dropped
        with it (they describe what is not recorded)."""
        if self._dirty:
            doc = {"slurmtopo": JOURNAL_KIND, "version": 1,
                   "jobs": [self._records[k].as_dict() for k in sorted(self._records)]}
            try:
                atomic_write(self.path, json.dumps(doc, sort_keys=True) + "\n",
                             mode=MODES[JOURNAL_FILE])
            except SlurmtopoError as exc:
                self._drop_lines(len(self._lines))
                self.problem(f"cannot write {JOURNAL_FILE}: {exc.message}")
                if quiet:
                    return
                raise SpoolError(f"cannot write the journal: {exc.message}", self.path) from None
            self._dirty = False
            self._drop_legacy()
        if self._lines:
            self._append_events()

    def _drop_lines(self, n: int) -> None:
        self.lost_events += n
        self._lines = []

    def _append_events(self) -> None:
        """The pending event lines, appended and fsynced; each is handed to
        the disk once: written, or counted in lost_events (a spool that
        fails for 23 cycles does not get 23 copies of anything). A log
        these lines would take past ``events_limits.max_bytes`` is rotated
        first (:meth:`_rotate_events`)."""
        lines, self._lines = self._lines, []
        data = "".join(lines).encode()
        written = 0
        try:
            fd = self._events_fd(len(data))
            try:
                while written < len(data):
                    written += os.write(fd, data[written:])
                os.fsync(fd)
            finally:
                os.close(fd)
        except (OSError, SlurmtopoError) as exc:
            lost, end = 0, 0
            for line in lines:
                end += len(line.encode())
                if end > written:
                    lost += 1
            self.lost_events += lost
            self.problem(f"cannot write {EVENTS_FILE}: {_why(exc)}")

    def _open_events(self) -> int:
        return open_file(self.spool, EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                         {os.geteuid()}, "event log", MODES[EVENTS_FILE])

    def _events_fd(self, adding: int) -> int:
        """``events.log`` opened to append ``adding`` bytes, rotated first
        when they would take a log that is not empty past the limit (one
        flush larger than the limit still goes into one file, whole)."""
        fd = self._open_events()
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        if not size or size + adding <= self.events_limits.max_bytes:
            return fd
        os.close(fd)
        self._rotate_events()
        return self._open_events()

    def _rotate_events(self) -> None:
        """``events.log`` becomes ``events.log.1``, ``.1`` becomes ``.2`` ...
        and the oldest, ``.<keep>``, is replaced. Every step is one
        ``rename`` relative to the spool's descriptor: atomic, and a name
        is replaced, never followed (a link planted at ``events.log.1`` is
        renamed or dropped, what it points to is never opened or written).
        A crash between two renames leaves a gap in the numbers, never a
        lost or doubled line. The append that follows creates a new
        ``events.log`` (0600, the daemon's). A step that fails (a directory
        in the way) is a problem of the cycle, and the lines go on to the
        log as it is: events are not lost for a rotation."""
        try:
            dfd = open_dir(self.spool)
        except (OSError, SlurmtopoError) as exc:
            self.problem(f"cannot rotate {EVENTS_FILE}: {_why(exc)}")
            return
        try:
            names = [EVENTS_FILE] + [rotated_name(n) for n in range(1, self.events_limits.keep + 1)]
            for newer, older in reversed(list(zip(names, names[1:]))):
                try:
                    os.rename(newer, older, src_dir_fd=dfd, dst_dir_fd=dfd)
                except FileNotFoundError:
                    continue
            os.fsync(dfd)
        except OSError as exc:
            self.problem(f"cannot rotate {EVENTS_FILE}: {_why(exc)}")
        finally:
            os.close(dfd)

    def _drop_legacy(self) -> None:
        if not os.path.isdir(self.legacy_dir) or os.path.islink(self.legacy_dir):
            return
        for name in os.listdir(self.legacy_dir):
            if name.endswith(".json"):
                try:
                    os.unlink(os.path.join(self.legacy_dir, name))
                except OSError:
                    pass
        try:
            os.rmdir(self.legacy_dir)
        except OSError:
            pass

    def events(self, job_id: Optional[int] = None) -> List[Dict[str, object]]:
        return read_events(self.spool, job_id)


def read_events(spool: str, job_id: Optional[int] = None, limit: Optional[int] = None
                ) -> List[Dict[str, object]]:
    """The events of the log (of ``job_id``; the last ``limit``), oldest
    first, from at most the last MAX_EVENTS_READ bytes of ``events.log``
    and, where it is shorter, of the rotated logs before it (``.1``,
    ``.2`` ...: a rotation does not empty ``daemon status --events``);
    lines that are not events (cut by a crash) are skipped. An
    ``events.log`` that is not a regular file, or that the caller may not
    read (it is the daemon's alone), is a SlurmtopoError; a rotated log
    that cannot be used ends the walk back."""
    spool = spool_path(spool)
    chunks: List[bytes] = []
    budget = MAX_EVENTS_READ
    for n in range(MAX_ROTATED_READ + 1):
        name = rotated_name(n) if n else EVENTS_FILE
        try:
            fd = open_file(spool, name, os.O_RDONLY, None, "event log")
        except FileNotFoundError:
            break
        except SlurmtopoError:
            if not n:
                raise
            break
        try:
            size = os.fstat(fd).st_size
            start = max(0, size - budget)
            data = os.pread(fd, budget, start)
        finally:
            os.close(fd)
        budget -= len(data)
        if start:
            data = data[data.find(b"\n") + 1:] if b"\n" in data else b""  # the first line is cut
        chunks.append(data if data.endswith(b"\n") or not data else data + b"\n")
        if budget <= 0 or start:
            break
    lines = b"".join(reversed(chunks)).decode("utf-8", errors="replace").split("\n")
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            e = loads(line, 8)
        except JsonRefused:
            continue
        if isinstance(e, dict) and (job_id is None or e.get("job") == job_id):
            out.append(e)
    return out[-limit:] if limit else out


def _why(exc: Exception) -> str:
    return exc.render() if isinstance(exc, SlurmtopoError) else (
        getattr(exc, "strerror", None) or str(exc))


class SpoolLock:
    """``flock`` on ``<spool>/private/daemon.lock``: one daemon per spool.
    Only the daemon's user can open it (0600 in a 0700 directory), so no
    one else can hold it; the lock of earlier releases, ``<spool>/daemon.lock``
    (0644: any user could lock it), is removed once this one is held."""

    def __init__(self, spool: str):
        self.spool = spool_path(spool)
        self.directory = os.path.join(self.spool, PRIVATE_DIR)
        self.path = os.path.join(self.directory, LOCK_FILE)
        self.fd: Optional[int] = None

    def acquire(self) -> None:
        prepare_spool(self.spool)
        try:
            fd = open_file(self.directory, LOCK_FILE, os.O_RDWR | os.O_CREAT, {os.geteuid()},
                           "lock file", MODES[LOCK_FILE])
        except OSError as exc:
            raise SlurmtopoError(f"cannot open the daemon's lock file ({exc.strerror}); is "
                                 "--spool a directory this user may write?", self.path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                other = os.pread(fd, 64, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise SlurmtopoError(f"another slurmtopo daemon (pid {printable(other, 20) or '?'}) "
                                 "is running on this spool directory", self.path) from None
        try:  # the pid is for the admin's eyes only; a full spool must not stop the start
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        self.fd = fd
        self._drop_old_lock()

    def _drop_old_lock(self) -> None:
        """The world-readable lock of earlier releases: removed (a user
        holding it no longer matters, nor does anyone read it)."""
        try:
            dfd = open_dir(self.spool)
        except (OSError, SlurmtopoError):
            return
        try:
            st = os.stat(LOCK_FILE, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(LOCK_FILE, dir_fd=dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    @staticmethod
    def probe(spool: str) -> Optional[bool]:
        """Whether a daemon holds the lock: True or False for the daemon's
        user (root too), None for anyone else (the lock is not theirs to
        open: they tell from the daemon's process,
        :func:`slurmtopo.daemon.status.liveness`)."""
        directory = os.path.join(spool_path(spool), PRIVATE_DIR)
        try:
            fd = open_file(directory, LOCK_FILE, os.O_RDONLY, {os.geteuid()} if os.geteuid()
                           else None, "lock file")
        except FileNotFoundError:
            return False if os.access(directory, os.X_OK) else None
        except (OSError, SlurmtopoError):
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)
