"""Reading the daemon's ``status.json`` back (``slurmtopo daemon status``).

The daemon rewrites the file every cycle (:meth:`Daemon.write_status` in
``loop.py``); the status command reads it, possibly from another host or
another slurmtopo version. Every field is checked against the shape the
writer gives it, so a damaged or foreign file is one line naming the field,
never a traceback halfway through the table.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from slurmtopo.daemon.protocol import is_tagged
from slurmtopo.daemon.spool import SpoolLock
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.boundedjson import JsonRefused, loads

STATUS_KIND = "daemon-status"
#: nesting of the status document (document, jobs, job, gpus, list)
MAX_DEPTH = 8

_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))
#: top-level keys, the daemon's own block, one managed job, one rejection:
#: key -> the JSON types its value may have
TOP = {"slurmtopo": (str,), "version": (int,), "daemon": (dict,), "jobs": (list,),
       "rejected": (list,)}
DAEMON = {"pid": (int,), "host": _OPT_STR, "started": _OPT_NUM, "at": _OPT_NUM,
          "cycles": (int,), "cycle_s": _OPT_NUM, "inventory": _OPT_STR, "dry_run": (bool,),
          "on_reject": _OPT_STR, "spool_error": _OPT_STR, "lost_events": (int,),
          "interval": _OPT_NUM, "boot_id": _OPT_STR, "proc_start": (int, type(None)),
          "locked": (bool,)}
JOB = {"job_id": (int,), "name": _OPT_STR, "user": _OPT_STR, "slurm_state": _OPT_STR,
       "action": _OPT_STR, "reason": _OPT_STR, "since": _OPT_NUM, "submit_time": _OPT_NUM,
       "hosts": (list,), "gpus": (dict,), "taken": (int, float, str, list, dict, type(None)),
       "cost_s": _OPT_NUM, "preferred_cost_s": _OPT_NUM, "waiting_for": (list,),
       "wait_left_s": _OPT_NUM, "reserved": (dict,), "releases": (int,), "drift": _OPT_STR,
       "phase": _OPT_STR, "preference_notes": (list,)}
REJECTED = {"job_id": (int,), "at": _OPT_NUM, "reason": _OPT_STR, "policy": _OPT_STR}


def _check(entry: Mapping[str, Any], spec: Dict[str, Tuple[type, ...]], what: str,
           path: str) -> None:
    if not isinstance(entry, dict):
        raise SlurmtopoError(f"damaged status file: {what} is not an object", path)
    for key, value in entry.items():
        kinds = spec.get(key)
        if kinds is None:
            raise SlurmtopoError(f"damaged status file: unknown key {key!r} in {what}", path)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise SlurmtopoError(f"damaged status file: {what} {key!r} is {value!r:.60}", path)


def read_status(text: str, path: str) -> Dict[str, Any]:
    """The status document in ``text`` (read from ``path``), checked."""
    try:
        doc = loads(text, MAX_DEPTH)
    except JsonRefused as exc:
        raise SlurmtopoError(f"unreadable status file ({str(exc)[:80]})", path) from None
    if not isinstance(doc, dict) or doc.get("slurmtopo") != STATUS_KIND:
        raise SlurmtopoError("not a slurmtopo daemon status file", path)
    _check(doc, TOP, "the document", path)
    _check(doc.get("daemon", {}), DAEMON, "'daemon'", path)
    for job in doc.get("jobs", []):
        _check(job, JOB, "a job", path)
    for rej in doc.get("rejected", []):
        _check(rej, REJECTED, "a rejected job", path)
    return doc


def unseen_jobs(doc: Mapping[str, Any], jobs) -> list:
    """The jobs of ``jobs`` (Slurm's, :class:`slurmtopo.slurm.SlurmJob`)
    waiting held for the daemon (tagged by ``slurmtopo sbatch --daemon``)
    that the status document does not list: submitted since its last
    cycle, or while it is down."""
    known = {j.get("job_id") for j in doc.get("jobs") or []}
    return sorted((j for j in jobs if j.held and is_tagged(j.comment) and j.job_id not in known),
                  key=lambda j: j.job_id)


# --------------------------------------------------------------------------
# is the daemon running?


def _boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read(64).strip() or None
    except OSError:
        return None


def proc_start(pid: int) -> Optional[int]:
    """When process ``pid`` started (clock ticks since boot, field 22 of
    ``/proc/PID/stat``), or None when there is no such process. With the
    boot id it names one process for good: a pid used again by another
    process has another start."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            text = f.read(4096)
    except (OSError, ValueError):
        return None
    rest = text[text.rfind(b")") + 2:].split()  # the command may hold blanks and ')'
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def identity() -> Dict[str, Any]:
    """What status.json says of the daemon's own process, so that anyone
    can tell whether it still runs (:func:`liveness`)."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "boot_id": _boot_id(),
            "proc_start": proc_start(os.getpid())}


#: a status written longer ago than this many intervals (and at least
#: STALE_MIN_S) is stale: the daemon is stuck, or cannot write its spool
STALE_INTERVALS = 3
STALE_MIN_S = 60.0


@dataclass(frozen=True)
class Liveness:
    """Whether the spool's daemon runs, and how that was told: ``lock``
    (the daemon's user, root: the lock itself), ``process`` (anyone on the
    daemon's host: its pid still names the process that wrote the status,
    same boot, same start), ``heartbeat`` (another host: its last cycle is
    recent) or ``none`` (no status yet)."""

    running: bool
    pid: Optional[int]
    how: str


def liveness(spool: str, doc: Mapping[str, Any], now: float) -> Liveness:
    """See :class:`Liveness`. Nothing here is anyone else's to forge: the
    lock is the daemon's alone (0600 in a 0700 directory), status.json is
    the daemon's (in its 0755 spool; the caller reads it only when it is
    the spool owner's), and a process's start time is the kernel's."""
    d = doc.get("daemon") or {}
    pid = d.get("pid") if isinstance(d.get("pid"), int) else None
    locked = SpoolLock.probe(spool)
    if locked is not None:
        return Liveness(locked, pid if locked else None, "lock")
    if not d or pid is None:
        return Liveness(False, None, "none")
    if not d.get("locked"):
        # written by a daemon that did not hold the spool's lock (in a
        # test, a notebook): no daemon serves this spool
        return Liveness(False, None, "process")
    if d.get("host") == socket.gethostname() and d.get("boot_id") == _boot_id() \
            and d.get("proc_start") is not None:
        alive = proc_start(pid) == d.get("proc_start")
        return Liveness(alive, pid if alive else None, "process")
    return Liveness(not stale(d, now), pid, "heartbeat")


def stale(d: Mapping[str, Any], now: float) -> Optional[float]:
    """How old the daemon's last status is when that is more than
    :data:`STALE_INTERVALS` cycles (a daemon that cannot write its spool
    leaves it so); None when it is recent."""
    at, interval = d.get("at"), d.get("interval")
    if not isinstance(at, (int, float)) or isinstance(at, bool):
        return None
    age = now - float(at)
    limit = max(STALE_MIN_S, STALE_INTERVALS * float(interval or 10.0))
    return age if age > limit else None
