"""The placement daemon's loop: read Slurm, decide, journal, act.

Every cycle:

1. read every job (``squeue``) and node (``sinfo``) from the backend;
2. **reconcile** the journal with what Slurm says (see below);
3. build the managed queue: held jobs whose comment is a ``slurmtopo:v1:``
   tag, plus the jobs the journal says the daemon released; a job held by
   an admin or changed by someone since the daemon first saw it is left
   alone (:mod:`slurmtopo.daemon.still_ours`);
4. :func:`slurmtopo.daemon.scheduler.decide` (pure) -> decisions;
5. act on each, journal first (releases last, all together), each checked
   against a fresh ``scontrol show job`` right before (still pending, still
   held the protocol's way, unchanged):

   rehold    journal ``reholding`` (flushed) -> ``scontrol uhold J`` (a user
             hold, told apart from an admin's) -> journal ``waiting`` (then
             it is planned again in the same cycle); a hold that landed on
             a job that had started after all is released at once
   reject    ``Comment=slurmtopo:rejected: <why>`` -> ``scancel`` (or left
             held with ``--on-reject hold``) -> journal entry dropped
   release   journal ``releasing`` for every job of the cycle (intent: job,
             nodes, GPUs), flushed once -> per job ``scontrol update JobId=J
             ReqNodeList=<nodes>`` -> ``scontrol release J`` -> journal
             ``released`` (flushed with the end of the cycle)

6. write ``status.json`` (what ``slurmtopo daemon status`` shows), and
   report once what the spool could not take.

One user's job never stops the daemon for the others: a request is read
by a total decoder (:mod:`slurmtopo.daemon.protocol`), and one barrier per
job (:meth:`Daemon._barrier` here, :func:`slurmtopo.daemon.scheduler.
run_pass` for planning) turns any unexpected exception while handling one
job into a ``fault`` for that job alone: the traceback in the log, the
reason in the job's comment, and the cycle goes on.

Restart safety
    The spool directory holds the journal (``journal.json``: one record per
    job the daemon manages, replaced atomically) and an append-only event
    log (``events.log``, one JSON object a line, fsynced). Writes are
    batched per cycle (:class:`Journal`), but an intent is always on disk
    before the Slurm call it announces (no intent on disk, no action), and
    every action is decided again from Slurm's state after a restart:

    * ``releasing`` and the job is still held: the release never happened
      (killed before ``scontrol release``): the job is planned again;
    * ``releasing`` and the job is no longer held: it happened: recorded as
      ``released`` (event ``release-confirmed``), never released again;
    * ``reholding`` and held: the hold happened; ``waiting`` again (and if
      the job is running, the hold landed on a started job: undone);
    * a job the daemon released that is found *held* again was held by
      someone else: it is left alone.

    Only held jobs are ever released, so whatever the moment of a kill, a
    job is released once (or again only after the daemon itself re-held it
    because it could not start). A lock file (``daemon.lock``, ``flock``)
    keeps a second daemon off the same spool.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from slurmtopo.daemon import protocol, still_ours
from slurmtopo.daemon.actions import Actions
from slurmtopo.daemon.decisions import (FAULT, LEFT_ALONE, RELEASE, WAIT, ClusterView, Config,
                                        Decision, JobRecord, QueuedJob, fault, format_wait)
from slurmtopo.daemon.metrics import NO_METRICS, NoMetrics
from slurmtopo.daemon.requests import USER_BYTES_PER_CYCLE, Requests, same_file_system
from slurmtopo.daemon.scheduler import decide
from slurmtopo.daemon.spool import (STATUS_FILE, MODES, EventLogLimits, Journal, SpoolError,
                                    prepare_spool, spool_path)
from slurmtopo.daemon.status import STATUS_KIND
from slurmtopo.daemon.status import identity as status_identity
from slurmtopo.daemon.still_ours import TERMINAL
from slurmtopo.errors import SlurmError, SlurmtopoError
from slurmtopo.files.fileio import atomic_write, open_file
from slurmtopo.plan.cluster import load_cluster
from slurmtopo.slurm.backend import ACTIVE_JOB_STATES, SlurmJob, cluster_state_from

log = logging.getLogger("slurmtopo.daemon")

#: the steps of a release a crash can fall between (see Daemon.reached)
RELEASE_STEPS = ("after-intent", "after-pin", "after-release")


# --------------------------------------------------------------------------
# the daemon


class Daemon(Actions):
    """One placement daemon. ``cycle()`` is one pass; ``run()`` loops. What
    it does to each job is in :class:`~slurmtopo.daemon.actions.Actions`."""

    def __init__(self, backend, inventory, spool: str, config: Optional[Config] = None,
                 on_reject: str = "cancel", dry_run: bool = False,
                 clock: Callable[[], float] = time.time,
                 inventory_loader: Optional[Callable[[], object]] = None,
                 inventory_label: Optional[str] = None, metrics: NoMetrics = NO_METRICS,
                 events_limits: EventLogLimits = EventLogLimits()):
        if on_reject not in ("cancel", "hold"):
            raise SlurmtopoError("--on-reject must be cancel or hold")
        self.backend = backend
        self.inv = inventory
        self.inventory_loader = inventory_loader
        self.inventory_label = inventory_label or getattr(inventory, "source", None)
        self.spool = spool_path(spool)
        prepare_spool(self.spool)
        self.journal = Journal(self.spool, events_limits)
        self.cfg = config or Config()
        self.on_reject = on_reject
        self.dry_run = dry_run
        self.clock = clock
        #: the Prometheus metrics (slurmtopo.daemon.metrics); none by default
        self.metrics = metrics
        self.records: Dict[int, JobRecord] = self.journal.load()
        self.started = clock()
        #: who the daemon is, for `daemon status` (its pid, host, boot and
        #: start: slurmtopo.daemon.status.liveness) and its interval
        self.identity = status_identity()
        self.interval: Optional[float] = None
        #: whether this daemon holds the spool's lock (`slurmtopo daemon
        #: run` sets it; status.json says so: a daemon without it serves
        #: no spool)
        self.locked = False
        self.cycles = 0
        self.first_seen: Dict[int, float] = {}
        self.last_reason: Dict[int, str] = {}
        self.rejected: List[Dict[str, object]] = []
        self.stop_event = threading.Event()
        self.last_decisions: List[Decision] = []
        #: what decide() may keep between cycles (plans on the empty cluster)
        self.memo: Dict[str, object] = {}
        #: jobs of this cycle's snapshot, by id
        self.snapshot: Dict[int, SlurmJob] = {}
        #: jobs the daemon failed on and could not take out of its hands
        #: (their comment could not be rewritten): not handled again
        self.faulted: Dict[int, str] = {}
        #: what the spool could not take in the last cycle (status.json)
        self.spool_error: Optional[str] = None
        #: users' requests, decoded once and within budgets; request files
        #: of jobs that left the queue removed (slurmtopo.daemon.requests)
        self.requests = Requests(self.spool, clock=clock)
        if same_file_system(self.spool):
            log.debug("spool %s: requests/ shares the spool's file system (a user who fills "
                      "it fills the journal's too: docs/security.md)", self.spool)

    # -- helpers -----------------------------------------------------------

    def reached(self, step: str) -> None:
        """Called after each step of a release (:data:`RELEASE_STEPS`): the
        journal makes it safe to die between any two, and this is where a
        test kills the daemon to prove it (tests/integration/paused_daemon.py).
        Does nothing."""

    def _save(self, rec: JobRecord) -> None:
        self.records[rec.job_id] = rec
        self.journal.save(rec)

    def _drop(self, job_id: int) -> None:
        self.records.pop(job_id, None)
        self.journal.drop(job_id)

    def _barrier(self, job_id: int, what: str, action: Callable[[], object],
                 failed: object = None) -> object:
        """One job's work, fenced: a Slurm error is logged and journalled
        (``failed`` returned); any other exception is a bug met on this job
        only: it becomes a ``fault`` of this job (:meth:`fault`) and the
        cycle goes on with everyone else's jobs."""
        try:
            return action()
        except SlurmError as exc:
            log.error("job %s: %s failed: %s", job_id, what, exc.render())
            self.metrics.error("slurm")
            self.journal.event("error", job_id, action=what, error=exc.render())
            return failed
        except SpoolError:
            return failed  # recorded in journal.problems, reported once per cycle
        except Exception as exc:  # noqa: BLE001 - the per-job fault barrier
            self.fault(fault(job_id, what, exc))
            return failed

    # -- reconcile ---------------------------------------------------------

    def reconcile(self, jobs: Mapping[int, SlurmJob]) -> None:
        """Bring the journal in line with Slurm (see the module doc)."""
        for job_id, rec in list(self.records.items()):
            self._barrier(job_id, "reconciling its journal record",
                          lambda job_id=job_id, rec=rec: self._reconcile_one(job_id, rec, jobs))

    def _reconcile_one(self, job_id: int, rec: JobRecord, jobs: Mapping[int, SlurmJob]) -> None:
        j = jobs.get(job_id)
        if j is not None and j.unreadable:
            return  # nothing in its record can be read: the record stays as it is
        if j is None and rec.phase == "releasing":
            # squeue --json lists finished jobs on 22.05 but not from 23.02
            # on; scontrol still knows them (MinJobAge), and whether a job
            # we meant to release ran decides if the release happened
            try:
                j = self.backend.job(job_id)
            except SlurmError as exc:
                log.warning("job %s: cannot look it up (%s)", job_id, exc.render())
        if j is None or j.state in TERMINAL:
            if rec.phase == "releasing" and j is not None and (
                    j.state != "CANCELLED" or j.nodes):
                # released (it ran) and finished before the daemon came back
                rec = replace(rec, phase="released", releases=rec.releases + 1)
                self.journal.event("release-confirmed", job_id, hosts=list(rec.hosts),
                                   note="the release happened before the daemon stopped; "
                                        "the job has ended since")
            if rec.phase != "waiting" or rec.hosts or rec.releases or rec.reholds:
                # (a job only ever seen waiting has no events to close)
                self.journal.event("ended", job_id, state=getattr(j, "state", "gone"),
                                   releases=rec.releases)
            self._drop(job_id)
            self.first_seen.pop(job_id, None)
            return
        if rec.phase == "releasing":
            if j.held and j.state == "PENDING":
                self.journal.event("release-not-done", job_id,
                                   note="intent found, job still held: planned again")
                self._save(replace(rec, phase="waiting"))
            else:
                rec = replace(rec, phase="released", released_at=self.clock(),
                              releases=rec.releases + 1)
                self._save(rec)
                self.journal.event("release-confirmed", job_id, hosts=list(rec.hosts),
                                   note="the release happened before the daemon stopped")
                log.info("job %s: release found done after a restart", job_id)
        elif rec.phase == "reholding":
            if still_ours.hold_landed_on_a_started_job(j):
                self._undo_hold(job_id, j, replace(rec, phase="released"))
            elif j.held:
                self._save(replace(rec, phase="waiting", reholds=rec.reholds + 1))
                self.journal.event("rehold-confirmed", job_id)
            else:
                self._save(replace(rec, phase="released"))
        if j.state != "PENDING" and self.records[job_id].phase == "waiting":
            # released by someone else (or started) while ours: not ours any more
            self._save(replace(self.records[job_id], phase="outside"))

    # -- one cycle ---------------------------------------------------------

    def _maybe_reload_inventory(self) -> None:
        if self.inventory_loader is None:
            return
        try:
            inv = self.inventory_loader()
        except SlurmtopoError as exc:
            log.error("inventory reload failed (%s); keeping the previous one", exc.render())
            self.metrics.error("inventory")
            return
        if inv is not None and inv is not self.inv:
            self.inv = inv

    def queue(self, jobs: Sequence[SlurmJob]) -> Tuple[List[QueuedJob], List[Decision]]:
        """The managed queue, and the decisions made without planning: a
        ``fault`` for each job the daemon failed to read, a wait for each
        job backing off after a refused release, a job whose record cannot
        be read with certainty (the others are read all the same)."""
        out: List[QueuedJob] = []
        direct: List[Decision] = []
        now = self.clock()
        self.requests.start_cycle(self.inv)
        for j in jobs:
            try:
                if j.unreadable:
                    d = self._unreadable(j, now)
                    if d is not None:
                        direct.append(d)
                    continue
                q = self._queued(j, now)
            except Exception as exc:  # noqa: BLE001 - the per-job fault barrier
                direct.append(fault(j.job_id, "reading its request", exc))
                continue
            if q is None:
                continue
            d = self._backing_off(q, now)
            if d is None and q.spec is None and q.error is None:
                d = Decision(q.job_id, WAIT, reason=(
                    f"not planned in this cycle: its owner's requests new to the daemon "
                    f"reached the per-user budget of {USER_BYTES_PER_CYCLE >> 20} MiB a cycle; "
                    "read in a later cycle"))
            if d is not None:
                direct.append(d)
            else:
                out.append(q)
        self.requests.end_cycle()
        return out, direct

    def _unreadable(self, j: SlurmJob, now: float) -> Optional[Decision]:
        """A job whose record cannot be read with certainty (text a user
        wrote reads as Slurm's fields, :mod:`slurmtopo.slurm.jobrecord`): the
        daemon does not act on it, and it claims no GPU. When it is one of
        the daemon's (in the journal, or its record holds the tag), it is
        looked at again after a back-off, and let go, with the reason in
        its comment, after ``release_tries`` looks: never parsed, never
        released, never a hostage."""
        rec = self.records.get(j.job_id)
        if rec is None and not j.maybe_tagged:
            return None
        why = still_ours.unreadable_reason(j)
        self.first_seen.setdefault(j.job_id, now)
        if rec is None:
            rec = JobRecord(j.job_id, first_seen=now)
            self._save(rec)
        if rec.phase != "waiting":
            return Decision(j.job_id, LEFT_ALONE, reason=why)
        if rec.retry_at is not None and now < rec.retry_at:
            return Decision(j.job_id, LEFT_ALONE, reason=(
                f"{why}; looked at again in {format_wait(rec.retry_at - now)}"))
        if self.refused(j.job_id, rec, why):
            return None
        return Decision(j.job_id, LEFT_ALONE, reason=(
            f"{why} ({rec.refusals + 1} of {self.cfg.release_tries} looks; then the daemon "
            "lets it go)"))

    def _backing_off(self, q: QueuedJob, now: float) -> Optional[Decision]:
        """A held job whose last release was refused waits, unplanned (so
        it claims no GPU), until its back-off is over."""
        rec = q.record
        if rec is None or rec.retry_at is None or now >= rec.retry_at or rec.phase != "waiting":
            return None
        if q.state != "PENDING" or not q.held or q.foreign_hold or q.changed or q.spec is None:
            return None
        return Decision(q.job_id, WAIT, reason=(
            f"backing off: its release was refused ({rec.refused}); tried again in "
            f"{format_wait(rec.retry_at - now)} ({rec.refusals} of {self.cfg.release_tries} "
            "tries, then the daemon lets it go with the reason in its comment)"))

    def _queued(self, j: SlurmJob, now: float) -> Optional[QueuedJob]:
        rec = self.records.get(j.job_id)
        tagged = protocol.is_tagged(j.comment)
        if rec is None and not (tagged and j.held and j.state == "PENDING"):
            return None
        if j.state in TERMINAL or j.job_id in self.faulted:
            return None
        if not tagged:
            # its comment was changed by someone: not ours any more
            self.journal.event("untagged", j.job_id, comment=j.comment[:200])
            log.info("job %s: its slurmtopo comment was replaced; no longer managed",
                     j.job_id)
            self._drop(j.job_id)
            return None
        if (j.array or j.het) and not (j.state == "PENDING" and j.held):
            self._drop(j.job_id)  # not ours to pin: someone else released it
            return None
        if rec is None or not rec.fingerprint:
            # first sight: what it was submitted with (docs/daemon.md)
            rec = replace(rec or JobRecord(j.job_id, first_seen=now),
                          fingerprint=j.fingerprint())
            self._save(rec)
        if j.array or j.het:
            spec, error = None, (
                f"bad slurmtopo request: {'an array' if j.array else 'a heterogeneous'} job "
                "cannot be placed by the daemon (releasing it releases every "
                f"{'task' if j.array else 'component'} at once, and Slurm does not pin an "
                f"{'array' if j.array else 'heterogeneous'} job's nodes); submit each as a "
                "job of its own")
        else:
            spec, error = self.requests.read(j)
        self.first_seen.setdefault(j.job_id, now)
        return QueuedJob(
            job_id=j.job_id, spec=spec, error=error, state=j.state, held=bool(j.held),
            reason=j.reason, priority=int(j.priority or 0),
            submit_time=float(j.submit_time) if j.submit_time else None,
            partition=j.partition or "", name=j.name, user=j.user,
            nodes=tuple(j.nodes), gpus=dict(j.gpus or {}), record=rec,
            foreign_hold=still_ours.foreign_hold(j), changed=still_ours.changes(rec, j))

    def view(self, nodes: Sequence[object], jobs: Sequence[SlurmJob] = ()) -> ClusterView:
        """The cluster as the nodes say, with who holds which GPU as the
        same job snapshot as the queue says (see ClusterView)."""
        state = cluster_state_from(nodes, self.inv, source="slurm")
        parts: Dict[str, set] = {}
        cpus: Dict[str, int] = {}
        for n in nodes:
            for p in n.partitions or ():
                parts.setdefault(p, set()).add(n.name)
            if getattr(n, "cpus_total", 0):
                cpus[n.name] = int(n.cpus_total) - int(getattr(n, "cpus_alloc", 0) or 0)
        holders: Dict[str, Dict[int, int]] = {}
        on_node: Dict[str, Set[int]] = {}
        for j in jobs:
            if j.state not in ACTIVE_JOB_STATES:
                continue
            for h in j.nodes:
                on_node.setdefault(h, set()).add(j.job_id)
            for h, gs in (j.gpus or {}).items():
                for g in gs:
                    holders.setdefault(h, {})[g] = j.job_id
        return ClusterView(state=state, partitions={k: frozenset(v) for k, v in parts.items()},
                           cpus_free=cpus, gpu_holders=holders,
                           node_jobs={h: frozenset(v) for h, v in on_node.items()})

    def cycle(self) -> List[Decision]:
        """One pass; returns the decisions taken. Slurm errors while reading
        propagate (the caller retries next interval)."""
        t0 = time.monotonic()
        self._maybe_reload_inventory()
        jobs = self.backend.jobs()
        nodes = self.backend.nodes()
        by_id = {j.job_id: j for j in jobs}
        self.snapshot = by_id
        for job_id in [k for k in self.faulted if k not in by_id]:
            del self.faulted[job_id]
        with self.journal.batch():
            self.reconcile(by_id)
            queue, faults = self.queue(jobs)
            if not self.dry_run:
                try:
                    self.requests.sweep(jobs)
                except OSError as exc:  # never a reason to skip the cycle
                    log.error("requests: sweep failed (%s)", exc.strerror or exc)
            live = {q.job_id for q in queue} | {d.job_id for d in faults}
            for cache in (self.first_seen, self.last_reason):
                for job_id in [k for k in cache if k not in live]:
                    del cache[job_id]
            now = self.clock()
            if not queue:  # nothing held: what planning kept for earlier jobs goes
                for key in ("ideal", "blocked"):
                    self.memo.pop(key, None)
            decisions = faults + (decide(queue, self.inv, self.view(nodes, jobs), now, self.cfg,
                                         memo=self.memo) if queue else [])
            skip: set = set()
            releases: List[Decision] = []
            for d in decisions:
                if d.job_id in skip:
                    continue
                if d.action == RELEASE and not self.dry_run:
                    releases.append(d)  # all together below, after every other action
                    continue
                if not self._barrier(d.job_id, d.action, lambda d=d: self.act(d),
                                     failed=False):
                    skip.add(d.job_id)
            done = self.release_all([d for d in releases if d.job_id not in skip])
        self.cycles += 1
        self.last_decisions = decisions
        self.write_status(decisions, queue, time.monotonic() - t0)
        self.report_spool()
        self.metrics.observe_cycle(decisions, queue, done, time.monotonic() - t0, self.clock())
        return decisions

    def report_spool(self) -> None:
        """What the spool could not take this cycle, in one log line (and
        in the next status.json); nothing when all was written."""
        problems = self.journal.take_problems()
        self.metrics.spool_problem(bool(problems))
        if not problems:
            self.spool_error = None
            return
        text = "; ".join(problems)
        if self.journal.lost_events:
            text += f" ({self.journal.lost_events} event lines not written so far)"
        self.spool_error = text
        self.metrics.error("spool")
        log.error("spool %s: %s; no job was released or held on what could not be recorded",
                  self.spool, text)

    # -- status ------------------------------------------------------------

    def write_status(self, decisions: Sequence[Decision], queue: Sequence[QueuedJob],
                     duration: float) -> None:
        qmap = {q.job_id: q for q in queue}
        jobs: Dict[int, Dict[str, object]] = {}
        for d in decisions:
            q = qmap.get(d.job_id)
            snap = self.snapshot.get(d.job_id)
            rec = self.records.get(d.job_id)
            e = jobs.setdefault(d.job_id, {"job_id": d.job_id})
            e.update({
                "name": q.name if q else (snap.name if snap else ""),
                "user": q.user if q else (snap.user if snap else ""),
                "slurm_state": q.state if q else (snap.state if snap else ""),
                "action": d.action,
                "reason": d.summary() if d.action == RELEASE else d.reason,
                "since": self.first_seen.get(d.job_id),
                "submit_time": q.submit_time if q else None,
                "hosts": list(d.hosts), "gpus": {h: list(g) for h, g in d.gpus.items()},
                "taken": d.taken, "cost_s": d.cost_s, "preferred_cost_s": d.preferred_cost_s,
                "waiting_for": list(d.waiting_for), "wait_left_s": d.wait_left,
                "reserved": {h: list(g) for h, g in d.reserved.items()},
                "releases": rec.releases if rec else 0,
                "drift": rec.drift if rec else None,
                "phase": rec.phase if rec else ("fault" if d.action == FAULT else "waiting"),
                # what became of each --prefer the daemon will not wait for
                "preference_notes": [n for n in d.notes if n.startswith("prefer ")],
            })
        problems = list(self.journal.problems)
        doc = {"slurmtopo": STATUS_KIND, "version": 1,
               "daemon": {**self.identity, "interval": self.interval, "locked": self.locked,
                          "started": self.started, "at": self.clock(), "cycles": self.cycles,
                          "cycle_s": round(duration, 3), "inventory": self.inventory_label,
                          "dry_run": self.dry_run, "on_reject": self.on_reject,
                          "spool_error": "; ".join(problems) or None,
                          "lost_events": self.journal.lost_events},
               "jobs": list(jobs.values()), "rejected": self.rejected}
        try:
            atomic_write(os.path.join(self.spool, STATUS_FILE),
                         json.dumps(doc, indent=1, default=str) + "\n", mode=MODES[STATUS_FILE])
        except SlurmtopoError as exc:
            self.journal.problem(f"cannot write {STATUS_FILE}: {exc.message}")
            doc["daemon"]["spool_error"] = "; ".join(self.journal.problems)
            self._status_in_place(json.dumps(doc, indent=1, default=str) + "\n")

    def _status_in_place(self, text: str) -> None:
        """A full spool took no new status.json: the old one is rewritten in
        place (emptied first, so the space it held is there for it), so
        that `daemon status` shows the SPOOL PROBLEM now rather than a
        stale cycle. Not atomic: a reader may meet it half-written once
        (one error line); only on this path."""
        try:
            fd = open_file(self.spool, STATUS_FILE, os.O_WRONLY, {os.geteuid()}, "status file")
        except (OSError, SlurmtopoError):
            return
        try:
            os.ftruncate(fd, 0)
            data, done = text.encode(), 0
            while done < len(data):
                done += os.pwrite(fd, data[done:], done)
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    # -- the loop ----------------------------------------------------------

    def run(self, interval: float = 10.0, once: bool = False,
            max_cycles: Optional[int] = None) -> int:
        """Cycle every ``interval`` seconds until stopped (SIGTERM/SIGINT set
        ``stop_event``). Returns an exit code. A cycle that fails (Slurm
        unreachable; a bug outside any one job, logged with its traceback)
        is tried again at the next interval."""
        rc = 0
        n = 0
        self.interval = interval
        while not self.stop_event.is_set():
            try:
                self.cycle()
                rc = 0
            except SlurmtopoError as exc:
                log.error("cycle failed: %s", exc.render())
                self.metrics.error("cycle")
                rc = 1
            except Exception:  # noqa: BLE001 - logged with its traceback; next interval
                log.exception("cycle failed (a bug in slurmtopo, please report it)")
                self.metrics.error("cycle")
                rc = 1
            self.metrics.publish()
            n += 1
            if once or (max_cycles is not None and n >= max_cycles):
                break
            self.stop_event.wait(interval)
        return rc


def inventory_loader(paths) -> Callable[[], object]:
    """A loader that re-reads the inventory only when a file changed (and
    validates all of it, as every use case loads a cluster)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    cache: Dict[str, object] = {}

    def stamp():
        out = []
        for p in paths:
            try:
                if os.path.isdir(p):
                    for f in sorted(os.listdir(p)):
                        st = os.stat(os.path.join(p, f))
                        out.append((f, st.st_mtime_ns, st.st_size))
                else:
                    st = os.stat(p)
                    out.append((p, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((p, None, None))
        return tuple(out)

    def load():
        s = stamp()
        if cache.get("stamp") != s:
            cache["inv"] = load_cluster(paths)
            if "stamp" in cache:
                log.info("inventory reloaded")
            cache["stamp"] = s
        return cache["inv"]

    return load
