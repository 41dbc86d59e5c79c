"""Reading the daemon's ``status.json`` back (``slurmtopo daemon status``).

The daemon rewrites the file every cycle (:meth:`Daemon.write_status` in
``loop.py``); the status command reads it, possibly from another host or
another slurmtopo version. Every field is checked against the shape the
writer gives it, so a damaged or foreign file is one line naming the field,
never a traceback halfway through the table.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

from slurmtopo.errors import SlurmtopoError

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
          "on_reject": _OPT_STR, "spool_error": _OPT_STR, "lost_events": (int,)}
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
    from slurmtopo.daemon.boundedjson import JsonRefused, loads

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
    from slurmtopo.daemon.protocol import is_tagged

    known = {j.get("job_id") for j in doc.get("jobs") or []}
    return sorted((j for j in jobs if j.held and is_tagged(j.comment) and j.job_id not in known),
                  key=lambda j: j.job_id)
