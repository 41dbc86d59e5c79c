"""What the placement daemon does to a job, decision by decision: the
Slurm side of :mod:`slurmtopo.daemon.loop`'s cycle.

Every action is journalled before Slurm hears of it, and checked on a
fresh ``scontrol show job`` right before it is made
(:mod:`slurmtopo.daemon.still_ours`): a release pins the nodes and lifts
the protocol's user hold; a re-hold is a user hold (``scontrol uhold``),
undone at once when it lands on a job that had started; a rejection writes
the reason into the job's comment; a fault takes one job out of the
daemon's hands. The restart-safety argument is in the loop's module doc.

:class:`Actions` is the half of :class:`~slurmtopo.daemon.loop.Daemon`
that acts; it uses the daemon's backend, journal, records and helpers
(``_save``, ``_drop``, ``_barrier``, ``reached``).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Dict, Optional, Sequence

from slurmtopo.daemon import protocol, still_ours
from slurmtopo.daemon.decisions import (FAULT, KEEP_PINS, LEFT_ALONE, OUTSIDE, REHOLD, REJECT,
                                        RELEASE, RUNNING, STARTING, WAIT, Decision, JobRecord)
from slurmtopo.daemon.spool import SpoolError
from slurmtopo.daemon.still_ours import TERMINAL
from slurmtopo.errors import SlurmError
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.slurm.backend import SlurmJob

log = logging.getLogger("slurmtopo.daemon")

#: how many faults and rejections status.json lists
KEEP_REJECTED = 50


class Actions:
    """The actions of the placement daemon (see the module doc)."""

    def act(self, d: Decision, job=None) -> bool:
        """Carry out one decision; False stops later decisions for the job
        in this cycle."""
        if d.action == RELEASE:
            return self.release(d)
        if d.action == REHOLD:
            return self.rehold(d)
        if d.action == REJECT:
            return self.reject(d)
        if d.action == FAULT:
            self.fault(d)
            return False
        if d.action == RUNNING:
            self.started_running(d)
            return True
        if d.action == WAIT and d.refused is not None:
            return self.refused_here(d)
        if d.action in (WAIT, STARTING, OUTSIDE, LEFT_ALONE):
            if self.last_reason.get(d.job_id) != d.reason:
                self.last_reason[d.job_id] = d.reason
                log.info("job %s: %s", d.job_id, d.summary())
                if d.action == LEFT_ALONE:
                    self.journal.event("left-alone", d.job_id, reason=d.reason)
                if d.action == WAIT and d.reserved:
                    log.info("job %s: reserved %s", d.job_id,
                             ", ".join(f"{h}:{','.join(map(str, g))}"
                                       for h, g in d.reserved.items()))
            if d.action == OUTSIDE:
                rec = self.records.get(d.job_id)
                if rec is not None and rec.phase != "outside":
                    self._save(replace(rec, phase="outside"))
                    self.journal.event("outside", d.job_id, reason=d.reason)
            return True
        return True

    def release(self, d: Decision) -> bool:
        """Release one job (see :meth:`release_all`)."""
        if self.dry_run:
            log.info("job %s: [dry run] would %s", d.job_id, d.summary())
            return True
        return self.release_all([d]).get(d.job_id, False)

    def release_all(self, ds: Sequence[Decision]) -> Dict[int, bool]:
        """Release the jobs of one cycle: every intent is journalled and
        flushed first (one fsync for all), then each job is checked,
        pinned and released in turn; what became of them is flushed with
        the end of the cycle. A crash anywhere in between leaves
        ``releasing`` records that the next start reconciles job by job
        (held: planned again; not held: the release happened), so no job is
        released twice. A journal that cannot be written releases nothing.
        Returns job id -> released."""
        recs: Dict[int, JobRecord] = {}
        before: Dict[int, Optional[JobRecord]] = {}
        for d in ds:
            before[d.job_id] = self.records.get(d.job_id)
            old = before[d.job_id] or JobRecord(d.job_id, first_seen=self.first_seen.get(d.job_id))
            pin = still_ours.pin_text(d.hosts)
            rec = replace(old, phase="releasing", hosts=tuple(d.hosts), gpus=dict(d.gpus),
                          claim=dict(d.claim), exclusive=d.exclusive, cpus=d.cpus,
                          taken=d.taken, cost_s=d.cost_s, preferred_cost_s=d.preferred_cost_s,
                          drift=None, pins=(tuple(p for p in old.pins if p != pin)
                                            + (pin,))[-KEEP_PINS:])
            self._save(rec)
            recs[d.job_id] = rec
            self.journal.event("intent-release", d.job_id, hosts=list(d.hosts),
                               nodelist=fold_hostlist(d.hosts),
                               gpus={h: list(g) for h, g in d.gpus.items()}, taken=d.taken,
                               cost_s=d.cost_s, preferred_cost_s=d.preferred_cost_s,
                               gave_up=list(d.gave_up) or None)
        if ds:
            try:
                self.journal.flush()
            except SpoolError:
                # no intent on disk: nothing is released this cycle
                for job_id, old in before.items():
                    if old is None:
                        self._drop(job_id)
                    else:
                        self._save(old)
                return {d.job_id: False for d in ds}
        return {d.job_id: bool(self._barrier(d.job_id, "release",
                                             lambda d=d: self._release_one(d, recs[d.job_id]),
                                             failed=False))
                for d in ds}

    def _release_one(self, d: Decision, rec: JobRecord) -> bool:
        """Check, pin and release one job whose intent is on disk."""
        self.reached("after-intent")
        snap = self.snapshot.get(d.job_id)
        fresh = self.backend.job(d.job_id)
        why = still_ours.why_not_release(fresh, snap.comment if snap is not None else "", rec)
        if why:
            self.journal.event("release-skipped", d.job_id, reason=why)
            log.warning("job %s: not released: %s", d.job_id, why)
            if still_ours.persistent(fresh, why):
                self.refused(d.job_id, replace(rec, phase="waiting"), why)
            else:
                self._save(replace(rec, phase="waiting"))
            return False
        try:
            self.backend.update_job(d.job_id, ReqNodeList=fold_hostlist(d.hosts))
            self.reached("after-pin")
            self.backend.release(d.job_id)
            self.reached("after-release")
        except SlurmError as exc:
            j = self.backend.job(d.job_id)
            if j is None or j.state in TERMINAL:
                self.journal.event("ended", d.job_id, state=getattr(j, "state", "gone"),
                                   note=exc.render())
                self._drop(d.job_id)
                return False
            if j.held:
                self.journal.event("release-failed", d.job_id, error=exc.render())
                self.metrics.error("slurm")
                log.error("job %s: release failed: %s", d.job_id, exc.render())
                self.refused(d.job_id, replace(rec, phase="waiting"),
                             f"Slurm refused it: {exc.render()}")
                return False
            # the release went through although the command complained
        rec = replace(rec, phase="released", released_at=self.clock(), releases=rec.releases + 1,
                      refusals=0, refused=None, retry_at=None)
        self._save(rec)
        self.journal.event("released", d.job_id, hosts=list(d.hosts), taken=d.taken,
                           summary=d.summary(), hazards=list(d.hazards) or None)
        self.last_reason.pop(d.job_id, None)
        log.info("job %s: %s", d.job_id, d.summary())
        for line in d.hazards:
            log.warning("job %s: %s", d.job_id, line)
        for n in d.notes:
            if n.startswith(("waited", "released by the packing", "prefer ")):
                log.info("job %s: %s", d.job_id, n)
        return True

    def refused_here(self, d: Decision) -> bool:
        """A release the scheduler refused itself (the placement free for
        the job had an error hazard under its own policy): never made; the
        job is held, and counted like any refused release (:meth:`refused`:
        backing off unplanned, let go after ``release_tries``), or let go at
        once when even its placement on the empty cluster has the hazard.
        Returns False (nothing more for the job this cycle)."""
        log.warning("job %s: %s", d.job_id, d.reason)
        if self.dry_run:
            return False
        self.journal.event("hazard-refused", d.job_id, reason=d.refused, final=d.final)
        if d.final:
            self.let_go(d.job_id, d.refused)
            return False
        rec = self.records.get(d.job_id) or JobRecord(d.job_id,
                                                     first_seen=self.first_seen.get(d.job_id))
        self.refused(d.job_id, replace(rec, phase="waiting"), d.refused)
        return False

    def refused(self, job_id: int, rec: JobRecord, why: str) -> bool:
        """A try to release the job failed for a reason that does not go
        away by itself (its fresh record disagrees with the snapshot, Slurm
        refuses the pin, its record cannot be read). It backs off, unplanned
        (claiming no GPU: other jobs are planned as if it were not there),
        for ``retry_backoff`` seconds, doubled at each refusal; after
        ``release_tries`` refusals in a row it is let go (:meth:`let_go`).
        Returns True when it was let go."""
        n = rec.refusals + 1
        if self.cfg.release_tries and n >= self.cfg.release_tries:
            self.let_go(job_id, f"not released after {n} tries: {why}")
            return True
        wait = self.cfg.retry_backoff * 2 ** (n - 1)
        self._save(replace(rec, phase="waiting", refusals=n, refused=why[:500],
                           retry_at=self.clock() + wait))
        self.journal.event("release-refused", job_id, reason=why, tries=n, retry_in_s=wait)
        log.warning("job %s: release refused (%d of %d tries): %s; tried again in %.0fs",
                    job_id, n, self.cfg.release_tries, why, wait)
        return False

    def let_go(self, job_id: int, reason: str) -> None:
        """Take a job the daemon cannot release out of its hands: the reason
        in its comment (its owner reads it in `squeue -o %k`; no longer a v1
        tag, so no daemon looks at it again), left held (never cancelled:
        the fault may be someone else's), listed by `daemon status` under
        "rejected recently", and not handled again while Slurm lists it
        (in case the comment could not be written)."""
        log.warning("job %s: let go: %s", job_id, reason)
        self.journal.event("let-go", job_id, reason=reason)
        if not self.dry_run:
            self._comment_reason(job_id, reason)
        self.faulted[job_id] = reason
        self._drop(job_id)
        self._note_rejected(job_id, reason, "let go")

    def rehold(self, d: Decision) -> bool:
        """Hold a released job again (a user hold, ``scontrol uhold``), after
        checking on a fresh ``scontrol show job`` that it is still pending;
        checked again after the hold, and undone at once if it landed on a
        job that had started in between."""
        if self.dry_run:
            log.info("job %s: [dry run] would hold again: %s", d.job_id, d.reason)
            return False
        rec = self.records.get(d.job_id) or JobRecord(d.job_id)
        why = still_ours.why_not_rehold(self.backend.job(d.job_id))
        if why:
            self.journal.event("rehold-skipped", d.job_id, reason=why)
            log.info("job %s: not held again: %s", d.job_id, why)
            return False
        rec = replace(rec, phase="reholding")
        self._save(rec)
        self.journal.event("intent-rehold", d.job_id, reason=d.reason)
        self.journal.flush()  # on disk before Slurm hears of it (SpoolError: not held)
        try:
            self.backend.uhold(d.job_id)
        except SlurmError as exc:
            j = self.backend.job(d.job_id)
            if j is None or not j.held:
                state = getattr(j, "state", "gone")
                self._save(replace(rec, phase="released"))
                self.journal.event("rehold-failed", d.job_id, state=state, error=exc.render())
                log.info("job %s: could not hold it again (%s): it is %s", d.job_id,
                         exc.render(), state)
                return False
        after = self.backend.job(d.job_id)
        if still_ours.hold_landed_on_a_started_job(after):
            self._undo_hold(d.job_id, after, replace(rec, phase="released"))
            return False
        avoid = {**rec.avoid, **d.avoid}
        self._save(replace(rec, phase="waiting", reholds=rec.reholds + 1, avoid=avoid))
        self.journal.event("reheld", d.job_id, reason=d.reason)
        log.warning("job %s: held again: %s", d.job_id, d.reason)
        return True

    def _undo_hold(self, job_id: int, job: SlurmJob, rec: JobRecord) -> None:
        """The daemon's hold landed on a job that had started (slurmctld
        sets a running job's priority to 0 all the same): release it at
        once, so that no running job is left at Priority=0."""
        try:
            self.backend.release(job_id)
        except SlurmError as exc:
            self.metrics.error("slurm")
            log.error("job %s: started, and held by the daemon in the same moment; the hold "
                      "could not be undone (%s): `scontrol release %s` lifts it", job_id,
                      exc.render(), job_id)
            self.journal.event("rehold-undo-failed", job_id, state=job.state, error=exc.render())
            self._save(rec)
            return
        self._save(rec)
        self.journal.event("rehold-undone", job_id, state=job.state,
                           note="the job had started when the hold landed; released again")
        log.warning("job %s: had started (%s) when the daemon held it again; hold undone",
                    job_id, job.state)

    def reject(self, d: Decision) -> bool:
        log.warning("job %s: rejected: %s", d.job_id, d.reason)
        if self.dry_run:
            return False
        self.journal.event("rejected", d.job_id, reason=d.reason, policy=self.on_reject)
        self._comment_reason(d.job_id, d.reason)
        if self.on_reject == "cancel":
            self.backend.cancel(d.job_id)
        self._drop(d.job_id)
        self._note_rejected(d.job_id, d.reason, self.on_reject)
        return False

    def _note_rejected(self, job_id: int, reason: str, policy: str) -> None:
        self.rejected.append({"job_id": job_id, "at": self.clock(), "reason": reason,
                              "policy": policy})
        self.rejected = self.rejected[-KEEP_REJECTED:]

    def fault(self, d: Decision) -> None:
        """The daemon failed on this job (see :func:`~slurmtopo.daemon.
        decisions.fault`): the traceback in the log and the event log, and
        the job taken out of the daemon's hands with the reason in its
        comment (no longer a v1 tag: never looked at again; a held job
        stays held, it is never cancelled for the daemon's fault). The
        cycle goes on."""
        if d.exc is not None:
            log.error("job %s: %s", d.job_id, d.reason,
                      exc_info=(type(d.exc), d.exc, d.exc.__traceback__))
        else:
            log.error("job %s: %s", d.job_id, d.reason)
        self.metrics.error("fault")
        self.journal.event("error", d.job_id, action="fault", error=d.reason,
                           trace=(d.trace or "").splitlines()[-12:] or None)
        self.faulted[d.job_id] = d.reason
        if not self.dry_run:
            self._comment_reason(d.job_id, d.reason)
        self._drop(d.job_id)
        self._note_rejected(d.job_id, d.reason, "fault")

    def _comment_reason(self, job_id: int, reason: str) -> None:
        """The reason the daemon let go of the job, written into its comment
        (where its owner reads it); Slurm refusing that is logged and
        counted, never fatal: the job is out of the daemon's hands anyway."""
        try:
            self.backend.update_job(job_id, Comment=protocol.rejected_comment(reason))
        except SlurmError as exc:
            self.metrics.error("slurm")
            log.error("job %s: could not write the reason into its comment: %s", job_id,
                      exc.render())

    def started_running(self, d: Decision) -> None:
        rec = self.records.get(d.job_id)
        if rec is None or rec.phase == "running":
            return
        drift = []
        for h in rec.hosts:
            if h not in d.gpus and h not in d.hosts:
                drift.append(f"{h} not allocated")
                continue
            got = set(d.gpus.get(h, ()))
            want = set(rec.gpus.get(h, ()))
            if got and not want <= got:
                drift.append(f"{h}: planned GPUs {','.join(map(str, sorted(want)))}, Slurm gave "
                             f"{','.join(map(str, sorted(got)))}")
        text = "; ".join(drift) if drift else None
        self._save(replace(rec, phase="running", drift=text))
        self.journal.event("started", d.job_id, hosts=list(d.hosts),
                           gpus={h: list(g) for h, g in d.gpus.items()}, drift=text)
        if text:
            log.info("job %s: started; %s (slurmtopo bind re-plans on the real GPUs)",
                     d.job_id, text)
        else:
            log.info("job %s: started as planned", d.job_id)
