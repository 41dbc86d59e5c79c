"""The daemon's spool directory: what survives a restart.

* ``journal.json`` -- one record per job the daemon acted on, replaced
  atomically (:class:`Journal`);
* ``events.log`` -- the append-only event log, one JSON object a line,
  fsynced (:class:`Journal`, :func:`read_events`);
* ``status.json`` -- what ``slurmtopo daemon status`` shows (written by the
  loop, :data:`STATUS_FILE`);
* ``daemon.lock`` -- the ``flock`` that keeps a second daemon off the same
  spool (:class:`SpoolLock`).

How the loop uses them to act once whatever the moment of a kill is in
:mod:`slurmtopo.daemon.loop`.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from typing import Dict, List, Mapping, Optional, Sequence

from slurmtopo.daemon.decisions import JobRecord
from slurmtopo.errors import SlurmtopoError
from slurmtopo.fileio import atomic_write, ensure_dir

log = logging.getLogger("slurmtopo.daemon")

STATUS_FILE = "status.json"
JOURNAL_FILE = "journal.json"
JOURNAL_KIND = "daemon-journal"
EVENTS_FILE = "events.log"
LOCK_FILE = "daemon.lock"


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
    not reach Slurm's side of the reconcile table (see the module doc)."""

    def __init__(self, spool: str):
        self.spool = os.path.abspath(spool)
        self.path = os.path.join(self.spool, JOURNAL_FILE)
        #: per-job files of daemons before 0.x: read once, removed on the
        #: first write of journal.json
        self.legacy_dir = os.path.join(self.spool, "journal")
        self.events_path = os.path.join(self.spool, EVENTS_FILE)
        ensure_dir(self.spool, "spool directory")
        self._records: Dict[int, JobRecord] = {}
        self._dirty = False
        self._lines: List[str] = []
        self._depth = 0

    def load(self) -> Dict[int, JobRecord]:
        out: Dict[int, JobRecord] = {}
        if os.path.isdir(self.legacy_dir):
            for name in sorted(os.listdir(self.legacy_dir)):
                if name.endswith(".json") and not name.startswith("."):
                    rec = self._read_record(os.path.join(self.legacy_dir, name))
                    if rec is not None:
                        out[rec.job_id] = rec
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            if not isinstance(doc, dict) or doc.get("slurmtopo") != JOURNAL_KIND:
                raise ValueError(f"not a {JOURNAL_KIND} document")
            for d in doc.get("jobs") or ():
                rec = JobRecord.from_dict(d)
                out[rec.job_id] = rec
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("journal %s unreadable (%s); ignored", self.path, exc)
        self._records = dict(out)
        return out

    @staticmethod
    def _read_record(path: str) -> Optional[JobRecord]:
        try:
            with open(path, encoding="utf-8") as f:
                return JobRecord.from_dict(json.load(f))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("journal entry %s unreadable (%s); ignored", path, exc)
            return None

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
        it is interrupted: that is a kill, and the journal is safe without)."""
        self._depth += 1
        try:
            yield self
        except Exception:
            self._depth -= 1
            self.flush()
            raise
        except BaseException:
            self._depth -= 1
            raise
        self._depth -= 1
        self.flush()

    def _maybe_flush(self) -> None:
        if not self._depth:
            self.flush()

    def flush(self) -> None:
        """Write what changed: the journal file first, then the events."""
        if self._dirty:
            doc = {"slurmtopo": JOURNAL_KIND, "version": 1,
                   "jobs": [self._records[k].as_dict() for k in sorted(self._records)]}
            atomic_write(self.path, json.dumps(doc, sort_keys=True) + "\n", mode=0o644)
            self._dirty = False
            self._drop_legacy()
        if self._lines:
            data = "".join(self._lines).encode()
            fd = os.open(self.events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
            finally:
                os.close(fd)
            self._lines = []

    def _drop_legacy(self) -> None:
        if not os.path.isdir(self.legacy_dir):
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
    out = []
    try:
        with open(os.path.join(spool, EVENTS_FILE), encoding="utf-8") as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a line cut by a crash
                if job_id is None or e.get("job") == job_id:
                    out.append(e)
    except FileNotFoundError:
        pass
    return out[-limit:] if limit else out


def release_count(events: Sequence[Mapping[str, object]], job_id: int) -> int:
    """How many times the event log says ``job_id`` was released."""
    return sum(1 for e in events if e.get("job") == job_id
               and e.get("event") in ("released", "release-confirmed"))


class SpoolLock:
    """``flock`` on ``<spool>/daemon.lock``: one daemon per spool."""

    def __init__(self, spool: str):
        self.path = os.path.join(spool, LOCK_FILE)
        self.fd: Optional[int] = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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
            raise SlurmtopoError(f"another slurmtopo daemon (pid {other or '?'}) is running on "
                                 "this spool directory", self.path) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    @staticmethod
    def holder(spool: str) -> Optional[str]:
        """The pid holding the lock, or None when no daemon runs."""
        path = os.path.join(spool, LOCK_FILE)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)
