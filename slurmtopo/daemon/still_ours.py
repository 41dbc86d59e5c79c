"""Whether a job is still the daemon's to release or hold.

The daemon acts on other users' jobs with root's or an operator's rights,
so it must never undo a decision someone else made on a job (an admin
above all). A job is the daemon's while it is exactly as the protocol left
it:

* **held by the protocol's hold**: a *user* hold (``JobHeldUser``: the
  user's ``sbatch --hold``, or the daemon's own ``scontrol uhold``). An
  admin's ``scontrol hold`` gives ``JobHeldAdmin``, and a job held that way
  is left alone until the admin releases it (then Slurm schedules it) or
  gives it back with ``scontrol uhold``;
* **unchanged since the daemon first saw it**: the fields of
  :data:`~slurmtopo.slurm.backend.JOB_FINGERPRINT` (partition,
  reservation, QOS, account, required and excluded nodes, features) are
  kept in the job's journal record at first sight; a change by anyone but
  the daemon (its own ``ReqNodeList`` pins are remembered) means someone
  decided where or how the job runs, and the daemon leaves it alone;
* **still pending, not started**, checked again on a fresh ``scontrol show
  job`` right before every release and re-hold (:func:`why_not_release`,
  :func:`why_not_rehold`): the decision was made on a snapshot, and a job
  can start, end, be held or changed in between.

Pure functions over :class:`~slurmtopo.slurm.backend.SlurmJob` and
:class:`~slurmtopo.daemon.decisions.JobRecord`; the loop calls them.
"""
from __future__ import annotations

from typing import Iterable, Optional, Tuple

from slurmtopo.daemon.decisions import JobRecord
from slurmtopo.show.termsafe import printable
from slurmtopo.slurm.backend import JOB_FINGERPRINT, SlurmJob

#: job states after which Slurm never runs the job again
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                      "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})


def pin_text(hosts: Iterable[str]) -> str:
    """A node list as the fingerprint writes ``req_nodes`` (sorted names)."""
    return ",".join(sorted(hosts))


def unreadable_reason(job: SlurmJob) -> str:
    """Why the daemon does not act on a job whose record it cannot read
    with certainty (:attr:`SlurmJob.unreadable`)."""
    return (f"Slurm's record of the job cannot be read with certainty "
            f"({printable(job.unreadable, 80)}): text in the job's name, comment, paths or "
            "command line reads as Slurm's own fields; the daemon does not act on it")


def foreign_hold(job: SlurmJob) -> Optional[str]:
    """The reason of a hold on a pending job that is not the protocol's
    (``JobHeldAdmin``, or priority 0 for another reason); None when the
    job is held by its user or not held."""
    if job.state == "PENDING" and job.held and not job.held_by_user:
        return job.reason or "held with priority 0"
    return None


def changes(rec: Optional[JobRecord], job: SlurmJob) -> Tuple[str, ...]:
    """What changed in ``job`` since ``rec.fingerprint`` was taken, by
    someone other than the daemon (``"Partition gpu -> debug"``); the
    daemon's own pins (``rec.pins``) are not a change."""
    if rec is None or not rec.fingerprint:
        return ()
    now = job.fingerprint()
    out = []
    for key, field in JOB_FINGERPRINT.items():
        if key not in rec.fingerprint:
            continue
        was, cur = rec.fingerprint[key], now.get(key, "")
        if cur == was or (key == "req_nodes" and cur in rec.pins):
            continue
        out.append(f"{field} {printable(was or '(none)', 60)} -> {printable(cur or '(none)', 60)}")
    return tuple(out)


def why_not_release(job: Optional[SlurmJob], comment: str, rec: Optional[JobRecord]
                    ) -> Optional[str]:
    """Why the daemon must not pin and release ``job`` (its state read just
    now), or None when it may: still pending, held by the protocol's hold,
    the same comment as when it was decided (``comment``), unchanged."""
    if job is None or job.state in TERMINAL:
        return "it has ended"
    if job.unreadable:
        return unreadable_reason(job)
    if job.state != "PENDING":
        return f"it is {job.state} already"
    if not job.held:
        return "it is no longer held (someone released it)"
    if not job.held_by_user:
        return f"it is held by an admin now (Reason={printable(job.reason, 40)})"
    if job.comment != comment:
        return "its comment changed"
    changed = changes(rec, job)
    if changed:
        return "it was changed: " + "; ".join(changed)
    return None


def persistent(job: Optional[SlurmJob], why: str) -> bool:
    """Whether a refused release (``why``, from :func:`why_not_release` on
    ``job``) may repeat for as long as the job waits: its record cannot be
    read, or the fresh record disagrees with the snapshot the daemon
    decided on (the comment or a field it compares). Every other refusal
    (it ended, started, was released or held by someone) shows in the next
    snapshot and ends the daemon's part by itself."""
    if job is None or job.state in TERMINAL:
        return False
    if job.unreadable:
        return True
    return job.state == "PENDING" and job.held_by_user and bool(why)


def why_not_rehold(job: Optional[SlurmJob]) -> Optional[str]:
    """Why the daemon must not hold ``job`` (its state read just now) again,
    or None when it may: a released job that is still pending, not held."""
    if job is None or job.state in TERMINAL:
        return "it has ended"
    if job.unreadable:
        return unreadable_reason(job)
    if job.state != "PENDING":
        return f"it started ({job.state}) while the daemon decided"
    if job.held:
        return f"someone else held it (Reason={printable(job.reason, 40)})"
    return None


def hold_landed_on_a_started_job(job: Optional[SlurmJob]) -> bool:
    """After ``scontrol uhold``: the job had started after all and slurmctld
    set its priority to 0 anyway (it does so for a running job, see
    ``scontrol hold`` in scontrol(1)); the hold must be undone at once."""
    return job is not None and job.state != "PENDING" and job.state not in TERMINAL \
        and job.held
