"""The placement daemon's decisions: pure, no Slurm, no files.

(What it decides about is in :mod:`slurmtopo.daemon.decisions`; the working
state it plans on, in :mod:`slurmtopo.daemon.work`.)

:func:`decide` takes the managed queue (held jobs with their requests, plus
the jobs the daemon released earlier), the cluster state and the inventory,
and returns one :class:`Decision` per job:

``release``   pin the job on the chosen nodes and release it (gang: every
              node is chosen here, Slurm then starts the job on all of them
              at once or not at all);
``wait``      keep it held, with the reason (not enough free GPUs; waiting
              for a preferred placement; GPUs reserved for a bigger job);
``reject``    it can never run: bad tag, or its required constraints do not
              fit even on the empty cluster;
``rehold``    it was released but did not start (another job took its nodes
              in between, or Slurm kept it pending past the grace time):
              hold it again; it is re-planned in the same pass;
``starting``  released, Slurm has not started it yet (its GPUs stay
              claimed so that no other job is planned onto them);
``running``   released and running (the loop checks which GPUs Slurm gave);
``outside``   someone else held or released it; the daemon leaves it alone;
``left-alone`` an admin decided about it: held it (``JobHeldAdmin``) or
              changed where or how it runs since the daemon first saw it
              (partition, reservation, ...); left alone while that lasts;
``fault``     the daemon failed on it (an unexpected exception while
              planning it): one job's bug never stops the pass for the
              others (:func:`run_pass` fences each job).

Order and fairness
    Held jobs are planned in priority order: Slurm's priority (0 for every
    held job unless the backend knows better), then submit time, then job
    id. A job that fits is released and its GPUs are claimed in the working
    state, so lower jobs plan around it.

The wait knob (``JobRequest.wait``: kind -> seconds)
    For each preferred group kind (``prefer``, or a ``wait`` on a kind with
    the planner's implicit preference, e.g. tp -> nvlink), while the job is
    younger than its wait the preference is treated as *required*: the job
    stays held rather than take less. Once the wait has passed it becomes
    soft again and the job takes the best placement that meets its
    ``require``. A preference that cannot be met even on the empty cluster
    is not waited for. The decision says which was taken ("preferred" or
    "fallback") and the modelled step time of both.

Fragmentation (best fit)
    Besides the planner's own choice, up to ``alternatives`` placements on
    other nodes are tried (for the first ``best_fit_releases`` releases of
    a pass); among those whose modelled cost is within
    ``cost_tolerance`` of the best, the one leaving the most whole free
    leaves, then whole free nodes, then the largest free NVLink islands
    (then PCIe-switch groups, NUMA groups) is taken.

Reservation (like backfill, without run times)
    The highest-priority job that cannot be placed now gets a reservation:
    running jobs' GPUs are freed node by node (least busy nodes first) until
    the job would fit; the GPUs of that future placement that are free *now*
    are reserved, so smaller jobs behind it plan around them and cannot
    break the island it waits for. ``reservations`` sets how many blocked
    jobs get one (0: none).

Cost (a cycle on a big queue)
    The working state is updated node by node as GPUs are claimed, with
    free-GPU counts that turn away a job that cannot fit before any
    planning, and the planner's candidate nodes kept up to date
    (:class:`Work`). At most ``max_releases`` jobs are released per pass
    (the rest wait, unplanned, for the next cycle) and only the first
    ``best_fit_releases`` compare alternatives. None of this changes a
    decision below those limits except the planner's tie-breaking among
    equal candidates.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from slurmtopo.cost import step as cost_step
from slurmtopo.daemon import packing
from slurmtopo.daemon.decisions import (LEFT_ALONE, OUTSIDE, REHOLD, REJECT, RELEASE, RUNNING,
                                        STARTING, WAIT, ClusterView, Config, Decision,
                                        QueuedJob, fault, format_gpus, format_wait)
from slurmtopo.daemon.held_job import HeldJob
from slurmtopo.daemon.jobhazards import placement_hazards
from slurmtopo.daemon.ordering import ACTIVE, difficulty, job_order, packing_may_help
from slurmtopo.daemon.work import Work, free_space_key, predicted_claim
from slurmtopo.errors import PlacementError, SlurmtopoError
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.inventory.model import (UNKNOWN_TO_SLURM, ClusterState, Inventory, NodeState,
                                       Placement)
from slurmtopo.inventory.topology import network_view
from slurmtopo.plan.choice import params_of, plan

# --------------------------------------------------------------------------
# planning helpers


def plan_job(inv: Inventory, state: Optional[ClusterState], req, cand=None, admit=None):
    """The planner's placement of ``req``, among the proposals the job's
    launcher admits (``admit``: :attr:`HeldJob.admit`; a torchrun job gets
    node-contiguous ranks, as it does at submission)."""
    return plan(inv, state, req, cand=cand, admit=admit)


#: what the cost model raises on a plan or a cost block it cannot price: a
#: located error (a bad ``cost:`` block, a layout it refuses) or a figure out
#: of its domain. Its answer is advice, so these never stop a release; any
#: other exception is a bug and reaches the per-job barrier (:func:`fenced`),
#: which logs it
COST_MODEL_ERRORS = (SlurmtopoError, ValueError)


def job_step_time(inv: Inventory, placement: Placement, req, params) -> Optional[float]:
    try:
        return cost_step.price_step(inv, placement, req, params).time_s
    except COST_MODEL_ERRORS:
        return None


def planned_gpus(p: Placement) -> Dict[str, Tuple[int, ...]]:
    return {h: tuple(sorted(p.gpus_on(h))) for h in p.hosts}


class HazardRefusal(SlurmtopoError):
    """Every placement of a job the pass found free has an error hazard
    under the job's own policy (:mod:`slurmtopo.daemon.jobhazards`): it is
    not released there (docs/hazards.md, "The placement daemon")."""


class SchedulingPass:
    """One scheduling pass over the queue."""

    def __init__(self, inv: Inventory, view: ClusterView, now: float, cfg: Config,
                 shared: Optional[Dict[str, object]] = None):
        self.inv = inv
        self.view = view
        self.now = now
        self.cfg = cfg
        self.work = Work(inv, view)
        shared = shared if shared is not None else {}
        if "params" not in shared:
            shared["params"] = params_of(inv)  # the cost block's one policy
        self.params = shared["params"]
        # the empty cluster: every node Slurm knows idle (drained nodes may
        # come back), nodes unknown to Slurm down
        ideal: Dict[str, NodeState] = {}
        for name in inv.nodes:
            st = view.state.nodes.get(name)
            if st is not None and UNKNOWN_TO_SLURM in st.flags:
                ideal[name] = st
        self.ideal = ClusterState(nodes=ideal, source="empty cluster")
        if "leaves" not in shared:
            leaf_of = dict(network_view(inv.fabric).leaf)
            leaf_nodes: Dict[str, List[str]] = {}
            for h, lf in leaf_of.items():
                if h in inv.nodes:
                    leaf_nodes.setdefault(lf, []).append(h)
            shared["leaves"] = (leaf_of, leaf_nodes)
        self.leaf_of, self.leaf_nodes = shared["leaves"]  # type: ignore[misc]
        self.reservations_left = cfg.reservations
        self._outside: Dict[str, FrozenSet[str]] = {}
        #: job id -> (planning key, what planning found) of jobs found
        #: blocked, kept between passes and cycles (see held())
        self._blocked: Dict[int, Tuple[object, Tuple[str, bool, bool]]] = \
            shared.setdefault("blocked", {})  # type: ignore[assignment]
        #: jobs this pass released so far (Config.max_releases, best_fit_releases)
        self.released = 0
        #: plans on the empty cluster, shared by both passes of one decide()
        #: and kept between cycles for the requests still queued (see
        #: forget_unused_plans)
        self._ideal_cache: Dict[object, Tuple[Optional[Placement], Optional[str]]] = \
            shared.setdefault("ideal", {})  # type: ignore[assignment]
        self._ideal_used: Set[object] = \
            shared.setdefault("ideal_used", set())  # type: ignore[assignment]
        self._reserved_for: Set[int] = set()

    # -- helpers -------------------------------------------------------------

    def ideal_plan(self, req, admit=None) -> Tuple[Optional[Placement], Optional[str]]:
        """``req`` planned on the empty cluster (kept per request and
        launcher requirement for the passes of one decide())."""
        key = (req, admit)
        self._ideal_used.add(key)
        hit = self._ideal_cache.get(key)
        if hit is None:
            try:
                hit = (plan_job(self.inv, self.ideal, req, admit=admit), None)
            except PlacementError as exc:
                hit = (None, exc.render())
            except SlurmtopoError as exc:
                hit = (None, exc.render())
            self._ideal_cache[key] = hit
        return hit

    def plan_now(self, req, admit=None) -> Placement:
        """``req`` planned on the working state, with the candidate nodes
        the working state keeps up to date (no pass over the inventory)."""
        cand = self.work.candidates_for(req) if req.nodelist is None else None
        return plan_job(self.inv, self.work.state(), req, cand, admit)

    def fits_now(self, req, with_reserved: bool = True, admit=None) -> bool:
        """Does ``req`` fit on the working state (without the reservations)?"""
        try:
            if with_reserved:
                self.plan_now(req, admit)
            else:
                plan_job(self.inv, self.work.state(with_reserved=False), req, admit=admit)
            return True
        except (PlacementError, SlurmtopoError):
            return False

    def cost(self, p: Placement, req) -> Optional[float]:
        return job_step_time(self.inv, p, req, self.params)

    def expected(self, job: HeldJob, req, p: Placement
                 ) -> Tuple[Optional[Placement], Dict[str, Tuple[int, ...]]]:
        """What will really run when ``p``'s nodes are pinned: Slurm picks
        the GPUs (:func:`slurm_pick`), ranks are planned onto them with the
        same constraints. (None, pick) when Slurm's likely pick breaks a
        required constraint."""
        pick = predicted_claim(self.work, p, job.gpn, req.exclusive)
        if all(set(p.gpus_on(h)) <= set(pick[h]) for h in p.hosts):
            return p, pick
        nodes = dict(self.work.state().nodes)
        for h in p.hosts:
            node = self.inv.nodes[h]
            keep = set(pick[h])
            nodes[h] = NodeState(h, state="mixed", busy_gpus=frozenset(
                g.index for g in node.gpus if g.index not in keep))
        try:
            q = plan_job(self.inv, ClusterState(nodes=nodes),
                         replace(req, nodelist=tuple(p.hosts), exclusive=False),
                         admit=job.admit)
        except (PlacementError, SlurmtopoError):
            return None, pick
        if set(q.hosts) != set(p.hosts):
            return None, pick
        return q, pick

    def choose(self, job: HeldJob, req, state: ClusterState
               ) -> Tuple[Placement, Dict[str, Tuple[int, ...]], List[str]]:
        """The best placement of ``req`` on ``state``: the planner's and up
        to ``alternatives - 1`` more on other nodes, each as it will run on
        the GPUs Slurm is expected to pick; best modelled cost, then best
        fit. Returns (placement, GPUs Slurm will allocate, notes); raises
        PlacementError when nothing fits."""
        first = self.plan_now(req, job.admit)
        cands = [first]
        if self.cfg.pack:  # the job planned inside the best-fitting rack in use
            packed = packing.packed_request(self.work, self.inv, req, job.world, job.gpn)
            if packed is not None:
                try:
                    cands.append(self.plan_now(packed, job.admit))
                except (PlacementError, SlurmtopoError):
                    pass
        alternatives = self.cfg.alternatives + (len(cands) - 1)
        if self.cfg.best_fit_releases and self.released >= self.cfg.best_fit_releases:
            alternatives = 1  # a burst: later jobs of it take the planner's placement
        exclude = set(req.exclude)
        while len(cands) < max(1, alternatives):
            exclude |= set(cands[-1].hosts)
            try:
                cands.append(self.plan_now(replace(req, exclude=tuple(sorted(exclude))),
                                           job.admit))
            except (PlacementError, SlurmtopoError):
                break
        scored = []
        touched = sorted({h for p in cands for h in p.hosts})
        for i, p in enumerate(cands):
            exp, pick = self.expected(job, req, p)
            cost = self.cost(exp, job.q.spec.request) if exp is not None else None
            scored.append((i, p, exp, pick, cost))
        # the job's own hazard checks on each placement as it will run: one
        # with an error hazard is never taken (HazardRefusal when every one has)
        reports = {t[0]: placement_hazards(self.inv, t[2] if t[2] is not None else t[1],
                                           job.spec.hazards, job.spec.request)
                   for t in scored}
        usable = [t for t in scored if t[2] is not None]
        notes: List[str] = []
        safe = [t for t in usable if not reports[t[0]].errors]
        if (usable and not safe) or (not usable and reports[0].errors):
            first = reports[(usable or scored)[0][0]].errors[0]
            raise HazardRefusal(f"every placement free now has an error hazard under the job's "
                                f"policy: {first.line()}")
        if len(safe) < len(usable):
            shunned = [t for t in usable if reports[t[0]].errors]
            notes.append(f"{len(shunned)} placement(s) passed over for an error hazard ("
                         + "; ".join(f"{fold_hostlist(t[2].hosts)}: "
                                     f"{reports[t[0]].errors[0].kind}" for t in shunned[:4])
                         + ")")
            usable = safe
        if not usable:
            # Slurm's likely GPU pick breaks a requirement everywhere: take the
            # planner's choice; slurmtopo bind re-plans on what Slurm gives
            i, p, _, pick, _ = scored[0]
            notes.append("Slurm will probably not hand out the planned GPUs ("
                         + "; ".join(f"{h}: planned {format_gpus(p.gpus_on(h))}, likely "
                                     f"{format_gpus(pick[h])}" for h in p.hosts)
                         + "); slurmtopo bind re-plans on the GPUs it gets")
            return p, pick, notes + [h.line() for h in reports[0].warnings]
        known = [t[4] for t in usable if t[4] is not None]
        best = min(known) if known else None
        ranked = []
        for i, p, exp, pick, cost in usable:
            if best is not None and (cost is None or cost > best * (1 + self.cfg.cost_tolerance)):
                continue
            take = {h: set(g) for h, g in pick.items()}
            key = free_space_key(self.work, touched, take, self.leaf_of, self.leaf_nodes)
            if self.cfg.pack:
                key = (packing.domain_key(self.work, self.inv, touched, take), key)
            ranked.append((key, -i, exp, pick))
        if not ranked:
            i, p, exp, pick, _ = usable[0]
            return exp, pick, notes + [h.line() for h in reports[i].warnings]
        ranked.sort(key=lambda t: (t[0], t[1]), reverse=True)
        _, negi, exp, pick = ranked[0]
        if exp is not cands[-negi]:
            notes.append("GPUs as Slurm is expected to pick them: " + ", ".join(
                f"{h}:{format_gpus(pick[h])}" for h in exp.hosts))
        return exp, pick, notes + [h.line() for h in reports[-negi].warnings]

    def shape_error(self, job: HeldJob, p: Placement) -> Optional[str]:
        n = job.shape.nodes
        if n is not None and len(p.hosts) != n:
            return (f"the batch script asks for --nodes={n} but the layout needs "
                    f"{len(p.hosts)} node(s) with {job.gpn or 'its'} GPUs each")
        return None

    # -- released jobs -------------------------------------------------------

    def in_flight(self, q: QueuedJob) -> Decision:
        """A job the daemon released that Slurm has not started."""
        rec = q.record
        blocked = []
        for h in rec.hosts:
            node = self.inv.nodes.get(h)
            ns = self.view.state.of(h)
            if node is None or not ns.usable:
                blocked.append(f"{h} is {ns.state}{'+' + ','.join(sorted(ns.flags)) if ns.flags else ''}")
                continue
            busy, whole = self.taken_by_others(q.job_id, h, ns)
            slurm_free = set(g.index for g in node.gpus) - busy
            if whole:
                slurm_free = set()
            need = len(rec.claim.get(h, rec.gpus.get(h, ())))
            if rec.exclusive:
                if len(slurm_free) < node.hardware.gpu_count:
                    blocked.append(f"{h} is in use by another job")
            elif len(slurm_free) < need:
                taken = sorted(set(rec.claim.get(h, ())) - slurm_free)
                blocked.append(f"{h} GPUs {format_gpus(taken)} were taken by another job")
        age = self.now - float(rec.released_at or self.now)
        if blocked:
            return Decision(q.job_id, REHOLD,
                            reason="released but did not start: " + "; ".join(blocked)
                            + " (it lost a race for its nodes); re-planning")
        if age > self.cfg.release_grace:
            until = self.now + self.cfg.avoid_for
            return Decision(q.job_id, REHOLD,
                            reason=(f"Slurm kept it pending {age:.0f}s after its release "
                                    f"(Reason={q.reason or '?'}) although its GPUs look free; "
                                    f"re-planning without {', '.join(rec.hosts)} for "
                                    f"{format_wait(self.cfg.avoid_for)}"),
                            avoid={h: until for h in rec.hosts})
        self.work.claim(rec.claim or rec.gpus, rec.exclusive, rec.cpus)
        return Decision(q.job_id, STARTING, hosts=rec.hosts, gpus=dict(rec.gpus),
                        claim=dict(rec.claim),
                        reason=f"released {age:.0f}s ago on {', '.join(rec.hosts)}; "
                               f"waiting for Slurm to start it (Reason={q.reason or 'none yet'})")

    def taken_by_others(self, job_id: int, host: str, ns: NodeState) -> Tuple[Set[int], bool]:
        """(busy GPUs, whole node busy) of ``host`` as far as *other* jobs
        explain them. With the job snapshot's holders (ClusterView), only
        GPUs another running job holds count: GPUs that look busy without
        one are the released job itself, started between the two reads of
        Slurm, and holding it again then would hold a running job."""
        busy = set(ns.busy_gpus)
        whole = ns.exclusive
        if self.view.gpu_holders is not None:
            held = {g for g, other in self.view.gpu_holders.get(host, {}).items()
                    if other != job_id}
            busy &= held
            others = (self.view.node_jobs or {}).get(host, frozenset()) - {job_id}
            whole = whole and bool(others)
        return busy, whole

    # -- held jobs -------------------------------------------------------------

    def held(self, q: QueuedJob) -> Decision:
        if q.spec is None:
            return Decision(q.job_id, REJECT, reason=q.error or "no slurmtopo request")
        job = HeldJob(q, self.inv, self.view, self.now, self.cfg, self._outside)
        # 1. can it ever run?
        never = self.never_runs(job)
        if never is not None:
            return never
        # 2. which preferences does it still wait for?
        notes = list(job.notes)
        possible = self.feasible_preferences(job, notes)
        waiting = [k for k in possible if job.age < job.waits.get(k, 0.0)]
        expired = [k for k in possible if k not in waiting]
        state = self.work.state()
        # 3. the preferred placement (every feasible preference required)
        full = job.request(self.work, list(possible))
        preferred_cost = self.preferred_cost(job, possible)
        if self.cfg.max_releases and self.released >= self.cfg.max_releases:
            return Decision(q.job_id, WAIT, notes=tuple(notes), reason=(
                f"not planned in this cycle: it already released {self.released} jobs "
                f"(--max-releases {self.cfg.max_releases}); planned again next cycle"))
        # 4. can it fit at all by the free-GPU counts? (no planning when not)
        short = self.work.shortfall(job.world, job.gpn, job.partitions)
        if short is not None:
            return self.blocked(job, possible, waiting, notes, preferred_cost, short, state,
                                counted=True)
        # 5. the same requests on the same free GPUs as when it was last found
        # blocked (this cycle or an earlier one): the planner would say the
        # same, so it is not asked again (not when a reservation is still to
        # be made: that depends on more than the free GPUs)
        fallback_req = job.request(self.work, waiting) if expired else None
        key = None
        if self.reservations_left == 0:
            key = (self.work.digest(), self.work.digest(False), full, fallback_req,
                   job.request(self.work, []) if waiting else None, tuple(waiting),
                   job.shape.nodes)
            seen = self._blocked.get(q.job_id)
            if seen is not None and seen[0] == key:
                return self.blocked(job, possible, waiting, notes, preferred_cost, seen[1][0],
                                    state, facts=seen[1][1:])
        # 6. the preferred placement, else the fallback
        placement, claim, taken, full_err, hazard = self.place(job, full, bool(possible),
                                                               fallback_req, state, notes)
        if placement is not None:
            return self.release(job, placement, claim, taken, possible, expired,
                                preferred_cost, notes)
        if hazard is not None:
            return self.refused(job, hazard, notes)
        return self.blocked(job, possible, waiting, notes, preferred_cost, full_err, state,
                            key=key)

    def never_runs(self, job: HeldJob) -> Optional[Decision]:
        """The rejection of a job that can never run on this cluster (not
        even on the empty one), or of a shape it cannot have; None."""
        q = job.q
        ideal, why = self.ideal_plan(job.ideal_req, job.admit)
        if ideal is None:
            where = ""
            if job.partition_excluded:
                where = f" (partition {q.partition})"
            return Decision(q.job_id, REJECT,
                            reason=f"can never run on this cluster{where}: {why}")
        err = self.shape_error(job, ideal)
        if err:
            return Decision(q.job_id, REJECT, reason=err)
        return None

    def feasible_preferences(self, job: HeldJob, notes: List[str]) -> Dict[str, str]:
        """The job's preferences the empty cluster could meet (kind ->
        level); a note for each one it never could."""
        possible = {}
        for kind, level in job.prefs.items():
            p, _ = self.ideal_plan(replace(job.ideal_req,
                                           require={**job.ideal_req.require, kind: level},
                                           prefer={k: v for k, v in job.ideal_req.prefer.items()
                                                   if k != kind}), job.admit)
            if p is None:
                notes.append(f"prefer {kind}={level} can never be met here; not waiting for it")
            else:
                possible[kind] = level
        return possible

    def preferred_cost(self, job: HeldJob, possible: Dict[str, str]) -> Optional[float]:
        """The modelled step time of the job with every feasible preference
        met, on the empty cluster (None: no preference, or none to price)."""
        preferred_cost = None
        if possible:
            ideal_full, _ = self.ideal_plan(replace(
                job.ideal_req, require={**job.ideal_req.require,
                                        **{k: job.prefs[k] for k in possible}},
                prefer={k: v for k, v in job.ideal_req.prefer.items() if k not in possible}),
                job.admit)
            if ideal_full is not None:
                preferred_cost = self.cost(ideal_full, job.q.spec.request)
        return preferred_cost

    def place(self, job: HeldJob, full, preferred: bool, fallback_req, state: ClusterState,
              notes: List[str]
              ) -> Tuple[Optional[Placement], Dict[str, Tuple[int, ...]], Optional[str], str,
                         Optional[HazardRefusal]]:
        """(placement or None, its claim, which request it met: preferred
        (``full`` with preferences), best or fallback, the planner's
        refusal, the hazard refusal when what was free had an error hazard):
        ``full`` first, then the fallback (only preferences still waited
        for are required)."""
        placement: Optional[Placement] = None
        taken: Optional[str] = None
        full_err = ""
        hazard: Optional[HazardRefusal] = None
        claim: Dict[str, Tuple[int, ...]] = {}
        try:
            placement, claim, more = self.choose(job, full, state)
            notes += more
            taken = "preferred" if preferred else "best"
        except HazardRefusal as exc:
            hazard, full_err = exc, exc.render()
        except (PlacementError, SlurmtopoError) as exc:
            full_err = exc.render()
        if placement is None and fallback_req is not None:
            try:
                placement, claim, more = self.choose(job, fallback_req, state)
                notes += more
                taken = "fallback"
            except HazardRefusal as exc:
                hazard, full_err = exc, exc.render()
            except (PlacementError, SlurmtopoError) as exc:
                full_err = exc.render()
        if placement is not None:
            err = self.shape_error(job, placement)
            if err:
                placement = None
                full_err = err
        return placement, claim, taken, full_err, hazard if placement is None else None

    def refused(self, job: HeldJob, hazard: HazardRefusal, notes: List[str]) -> Decision:
        """The job stays held: what was free for it had an error hazard
        under its own policy. It is not blocked (no reservation: nothing is
        kept for it); the loop counts a refused release (``refused``): it
        backs off unplanned and is let go after ``release_tries``, the
        reason in its comment, at once (``final``) when even its placement
        on the empty cluster has the hazard (waiting cannot help)."""
        ideal, _ = self.ideal_plan(job.ideal_req, job.admit)
        never = ideal is not None and bool(
            placement_hazards(self.inv, ideal, job.spec.hazards, job.spec.request).errors)
        why = hazard.render()
        if never:
            why = ("not released: " + why.replace("every placement free now", "even on the "
                                                  "empty cluster its placement", 1))
        else:
            why = "not released: " + why
        return Decision(job.q.job_id, WAIT, reason=why, refused=why, final=never,
                        notes=tuple(notes))

    def release(self, job: HeldJob, placement: Placement, claim: Dict[str, Tuple[int, ...]],
                taken: Optional[str], possible: Dict[str, str], expired: List[str],
                preferred_cost: Optional[float], notes: List[str]) -> Decision:
        """Release the job on ``placement``: its GPUs claimed in the working
        state, what it gave up said."""
        q = job.q
        cost = self.cost(placement, q.spec.request)
        gave_up = tuple(f"{k}={possible[k]}" for k in expired) if taken == "fallback" else ()
        if taken == "fallback":
            notes.append(f"waited {format_wait(job.age)}; "
                         + ", ".join(f"{k}={possible[k]} (wait {format_wait(job.waits.get(k, 0))})"
                                     for k in expired)
                         + " not available: took the best placement meeting its requirements")
        self.work.claim(claim, job.base_req.exclusive, job.tasks_per_node)
        self.released += 1
        return Decision(q.job_id, RELEASE, hosts=tuple(placement.hosts),
                        gpus=planned_gpus(placement), claim=claim,
                        exclusive=job.base_req.exclusive, cpus=job.tasks_per_node,
                        placement=placement, taken=taken, cost_s=cost,
                        preferred_cost_s=preferred_cost if possible else cost,
                        gave_up=gave_up, notes=tuple(notes + list(placement.notes)),
                        hazards=tuple(n for n in notes if n.startswith("hazard ")))

    def blocked(self, job: HeldJob, possible: Dict[str, str], waiting: List[str],
                notes: List[str], preferred_cost: Optional[float], full_err: str,
                state: ClusterState, counted: bool = False,
                facts: Optional[Tuple[bool, bool]] = None, key=None) -> Decision:
        """5. The job stays held: say why, maybe reserve. ``counted``: the
        free-GPU counts already showed it cannot fit (so no fallback can
        be free either, and nothing was planned). ``facts``: (a fallback
        is free now, only the reservation blocks it) as found when it was
        last blocked on the same state; else they are planned and kept
        under ``key``."""
        q = job.q
        reason = full_err
        wait_left = None
        free_now = blocks = False
        if waiting:
            wait_left = min(job.waits[k] - job.age for k in waiting)
            reason = (f"waiting up to {format_wait(wait_left)} more for its preferred "
                      + ", ".join(f"{k}={possible[k]}" for k in waiting) + f": {full_err}")
            # is a fallback available now? say so
            if facts is not None:
                free_now = facts[0]
            elif not counted:
                free_now = self.fits_now(job.request(self.work, []), admit=job.admit)
            if free_now:
                reason += " (a fallback placement is free now)"
        if self.work.reserved and self.work.shortfall(job.world, job.gpn, job.partitions,
                                                      with_reserved=False) is None:
            held_for = ", ".join(map(str, sorted(self._reserved_for)))
            if counted:
                # by count it fits once the reservation is left out: say so
                # without planning (hundreds of jobs can be in this case)
                reason = (f"the free GPUs it could use are reserved for job {held_for} "
                          f"(higher priority): {reason}")
            else:
                blocks = facts[1] if facts is not None else self.fits_now(
                    job.request(self.work, waiting), with_reserved=False, admit=job.admit)
                if blocks:
                    reason = (f"the GPUs it could use are reserved for job {held_for} "
                              f"(higher priority): {reason}")
        if key is not None and not counted:
            self._blocked[q.job_id] = (key, (full_err, free_now, blocks))
        reserved: Dict[str, Tuple[int, ...]] = {}
        if self.reservations_left > 0:
            reserved = self.reserve(job, job.request(self.work, waiting))
            if reserved:
                self.reservations_left -= 1
                self._reserved_for.add(q.job_id)
        return Decision(q.job_id, WAIT, reason=reason, waiting_for=tuple(
            f"{k}={possible[k]}" for k in waiting), wait_left=wait_left, reserved=reserved,
            preferred_cost_s=preferred_cost, notes=tuple(notes))

    def reserve(self, job: HeldJob, req) -> Dict[str, Tuple[int, ...]]:
        """Reserve the GPUs free now of where ``req`` would go once running
        jobs on the least busy nodes end (see the module doc)."""
        work = self.work
        if work.shortfall(1, None) is not None:
            # not one GPU free anywhere: nothing to set aside whatever the
            # placement (a saturated cluster: most blocked jobs, every cycle)
            return {}
        excluded = set(req.exclude)
        order = []
        for i, (name, node) in enumerate(self.inv.nodes.items()):
            if name in excluded:
                continue
            ns = self.view.state.of(name)
            if not ns.usable:
                continue
            busy = len(ns.busy_gpus) if not ns.exclusive else node.hardware.gpu_count
            if busy:
                order.append((busy, i, name))
        order.sort()
        names = [n for _, _, n in order]

        def attempt(k: int) -> Optional[Placement]:
            state = work.state(freed=names[:k])
            try:
                return plan_job(self.inv, state, req, work.candidates_freed(req, names[:k], state),
                                job.admit)
            except (PlacementError, SlurmtopoError):
                return None

        if not names:
            return {}
        p = attempt(len(names))
        if p is None:
            return {}
        lo, hi = 0, len(names)  # attempt(hi) works
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            q = attempt(mid)
            if q is not None:
                hi, p = mid, q
            else:
                lo = mid
        if hi > 0 and lo == 0:
            q = attempt(0)
            if q is not None:
                p = q
        # on each node of that placement, reserve as many of the GPUs free
        # now as the job will take there: the planned ones first, then the
        # others in index order (the planner chose among GPUs that are busy
        # now, so its exact choice there is only a hint)
        claim = predicted_claim(work, p, job.gpn, req.exclusive)
        out: Dict[str, Tuple[int, ...]] = {}
        for h, gs in claim.items():
            free_now = work.free_gpus(h)
            pick = [g for g in gs if g in free_now]
            pick += [g for g in free_now if g not in pick]
            keep = tuple(sorted(pick[:len(gs)]))
            if keep:
                out[h] = keep
        if out:
            work.reserve(out)
        return out


def left_alone(q: QueuedJob) -> Decision:
    """Someone else decided about this job: say who and what, touch nothing."""
    if q.held and q.foreign_hold:
        why = (f"held by an admin (Reason={q.foreign_hold}): the daemon leaves it alone until "
               "it is released (Slurm then schedules it) or given back with `scontrol uhold "
               f"{q.job_id}`")
    else:
        why = ("changed since the daemon first saw it (" + "; ".join(q.changed) + "): the "
               "daemon leaves it alone (release it yourself with `scontrol release "
               f"{q.job_id}`, or submit it again)")
    return Decision(q.job_id, LEFT_ALONE, reason=why)


def fenced(q: QueuedJob, what: str, plan) -> Decision:
    """``plan()`` for one job, or a ``fault`` decision for that job alone
    when it raises anything unexpected (the pass goes on with the others;
    the loop logs the traceback and tells the job's owner)."""
    try:
        return plan()
    except Exception as exc:  # noqa: BLE001 - the per-job fault barrier
        return fault(q.job_id, what, exc)


def run_pass(jobs: Sequence[QueuedJob], inv: Inventory, view: ClusterView, now: float,
          cfg: Config, pack: bool, shared: Dict[str, object]
          ) -> Tuple[List[Decision], Dict[int, int]]:
    """The decisions of one pass, and the free-GPU counts (free GPUs ->
    nodes) it planned the held jobs on."""
    p = SchedulingPass(inv, view, now, cfg, shared)
    out: List[Decision] = []
    held: List[QueuedJob] = []
    # released jobs first: their GPUs are claimed before anything is planned
    for q in sorted(jobs, key=job_order):
        rec = q.record
        phase = rec.phase if rec is not None else None
        if q.state == "PENDING" and (q.changed or (q.held and q.foreign_hold)) \
                and phase not in ("outside",):
            out.append(left_alone(q))
            continue
        if q.state != "PENDING":
            if phase in ("released", "running", "releasing") and q.state in ACTIVE:
                out.append(Decision(q.job_id, RUNNING, hosts=tuple(q.nodes),
                                    gpus={h: tuple(g) for h, g in q.gpus.items()},
                                    reason=f"{q.state.lower()} on {', '.join(q.nodes) or '?'}"))
            continue
        if q.held:
            if phase in ("released", "running", "outside"):
                out.append(Decision(q.job_id, OUTSIDE,
                                    reason="held by someone else after the daemon released it; "
                                           "the daemon leaves it alone (release it yourself)"))
                continue
            held.append(q)
            continue
        # pending, not held
        if phase in ("released", "running"):
            d = fenced(q, "checking its release", lambda q=q: p.in_flight(q))
            out.append(d)
            if d.action == REHOLD:
                rec2 = replace(rec, avoid={**rec.avoid, **d.avoid}, phase="waiting")
                held.append(replace(q, held=True, record=rec2))
            continue
        out.append(Decision(q.job_id, OUTSIDE,
                            reason="released outside the daemon; Slurm schedules it"))
    counts = p.work.histogram()
    order = sorted(held, key=job_order)
    if pack:
        order = sorted(order, key=lambda q: tuple(-x for x in difficulty(q)))
    decided: Dict[int, Decision] = {}
    for q in order:
        decided[q.job_id] = fenced(q, "planning it", lambda q=q: p.held(q))
    for q in sorted(held, key=job_order):
        out.append(decided[q.job_id])
    return out, counts


def cycle_memo(memo: Optional[Dict[str, object]], inv: Inventory, view: ClusterView
          ) -> Dict[str, object]:
    """What one decide() shares between its passes and, given a ``memo``
    kept by the caller, with the next cycles: plans on the empty cluster,
    the cost parameters, the leaves. They depend only on the inventory and
    on which nodes Slurm does not know, so a change of either starts it
    afresh."""
    unknown = frozenset(n for n, st in view.state.nodes.items() if UNKNOWN_TO_SLURM in st.flags)
    memo = {} if memo is None else memo
    if memo.get("inv") is not inv or memo.get("unknown") != unknown:
        memo.clear()
        memo.update(inv=inv, unknown=unknown)
    return memo


def decide(jobs: Sequence[QueuedJob], inv: Inventory, view: ClusterView, now: float,
           config: Optional[Config] = None, memo: Optional[Dict[str, object]] = None
           ) -> List[Decision]:
    """One decision per job (a re-held job gets two: ``rehold``, then
    ``release`` or ``wait``), in the order the loop must act on them.

    Two passes: in priority order, then, when that leaves jobs blocked, in
    packing order (hardest first). The packing result is used only when it
    releases every job the priority pass released and more besides: the
    order of release within one pass does not change who runs first, so
    packing only ever adds jobs (two jobs that would each fragment the
    other both run). The packing pass is skipped when counting free GPUs
    shows it cannot add a job (:func:`packing_may_help`).

    ``memo``: a dict the caller keeps between cycles (the daemon does), so
    that plans on the empty cluster are made once per inventory."""
    cfg = config or Config()
    shared = cycle_memo(memo, inv, view)
    shared["ideal_used"] = set()
    try:
        return _decide(jobs, inv, view, now, cfg, shared)
    finally:
        forget_unused_plans(shared)


#: plans on the empty cluster kept between cycles, at most (the queue's
#: distinct requests, normally far fewer)
MAX_IDEAL_PLANS = 1024


def forget_unused_plans(shared: Dict[str, object]) -> None:
    """Drop the plans on the empty cluster that no job of this decide()
    asked for: a request whose jobs left the queue is forgotten at once
    (each distinct 65,536-name request used to stay until the inventory
    changed: memory without bound), and never more than
    :data:`MAX_IDEAL_PLANS` are kept."""
    ideal = shared.get("ideal")
    used = shared.get("ideal_used")
    if not isinstance(ideal, dict) or not isinstance(used, set):
        return
    for key in [k for k in ideal if k not in used]:
        del ideal[key]
    while len(ideal) > MAX_IDEAL_PLANS:
        del ideal[next(iter(ideal))]


def _decide(jobs: Sequence[QueuedJob], inv: Inventory, view: ClusterView, now: float,
            cfg: Config, shared: Dict[str, object]) -> List[Decision]:
    blocked_before = shared.get("blocked")
    if isinstance(blocked_before, dict):  # forget jobs that left the queue
        live = {q.job_id for q in jobs}
        for job_id in [k for k in blocked_before if k not in live]:
            del blocked_before[job_id]
    first, counts = run_pass(jobs, inv, view, now, cfg, pack=False, shared=shared)
    released = {d.job_id for d in first if d.action == RELEASE}
    blocked = [d for d in first if d.action == WAIT]
    if (not blocked or not released or (cfg.max_releases and len(released) >= cfg.max_releases)
            or not packing_may_help(jobs, first, counts)):
        return first
    second, _ = run_pass(jobs, inv, view, now, cfg, pack=True, shared=shared)
    released2 = {d.job_id for d in second if d.action == RELEASE}
    if released <= released2 and len(released2) > len(released):
        for d in second:
            if d.action == RELEASE and d.job_id not in released:
                d.notes = d.notes + ("released by the packing pass (hardest jobs placed first "
                                     "so that more jobs fit)",)
        return second
    return first
