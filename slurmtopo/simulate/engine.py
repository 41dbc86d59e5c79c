"""The event loop: a trace replayed on a simulated clock under one policy.

Events are job submissions, job ends, and wake-ups (a wait that runs out);
between them nothing changes, so the clock jumps from one to the next.
The cluster's free GPUs are kept node by node (:class:`FreeState`), never
rescanned.

Run time
    A job runs ``run_time * (1 + f * (step / best_step - 1))``: its trace
    run time, stretched by the share ``f`` of it spent communicating
    (``--comm-fraction``) times how much slower its placement's modelled
    step is than the best it gets on the idle cluster (the planner's, by
    the cost model's step, :func:`slurmtopo.cost.step.price_step`). ``step / best_step``
    is the job's *slowdown* (1 for a one-GPU job, which does not
    communicate). A job whose layout rule names its model (``model:``,
    :mod:`~slurmtopo.simulate.layouts`) runs ``run_time * step / best_step``:
    its step is then the whole step (compute, exposed communication,
    bubble), so no fraction is assumed.

Slurm's queue (every policy but ``daemon``)
    Jobs are considered in submission order (trace order on ties), after
    every event. A job that the policy can place now starts. The first job
    that cannot gets a reservation, as Slurm's backfill gives it: running
    jobs are taken to end at their time limit (the trace's, else their
    actual end: perfect estimates), the earliest time it fits is found and
    its GPUs of that placement are set aside; a later job may start only
    on other GPUs, or on those if it ends before that time. One
    reservation (EASY backfill; Slurm's backfill makes one per job up to
    ``bf_max_job_test``). A ``slurm-switches`` job held for its switch
    count is passed over without a reservation until its wait ends. When
    only submissions happened since the last pass, only the new jobs are
    considered: the state the others were refused on has not changed.

The placement daemon (``daemon``)
    Every job is held. The daemon's :func:`~slurmtopo.daemon.scheduler.decide`
    runs at the daemon's cycle (every ``interval`` seconds of the clock),
    at the first cycle after anything happened (a submission, an end, a
    preference's wait running out, a cycle that hit the release limit);
    a released job starts at once on the GPUs the daemon claimed for it,
    at the modelled step the decision gives. A cycle after nothing but
    submissions of jobs that the free GPUs cannot hold by count is not
    run: the daemon turns such a job away before planning, and the jobs
    before it were refused on the same GPUs (the decisions would be the
    same waits); nor is one after anything at all when no held job fits
    the free GPUs by count (it would release nothing: a reservation only
    matters to the jobs a cycle releases).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from slurmtopo.cost.step import price_step
from slurmtopo.daemon.decisions import REJECT, RELEASE, WAIT
from slurmtopo.inventory.model import ClusterState, Inventory, NodeState
from slurmtopo.job.request import JobRequest
from slurmtopo.placement.slurm_select import leaves_used
from slurmtopo.plan.choice import params_of
from slurmtopo.simulate.contention import Contention, job_load
from slurmtopo.simulate.freestate import FreeState
from slurmtopo.simulate.layouts import JobShape
from slurmtopo.simulate.policies import DaemonPolicy
from slurmtopo.simulate.trace import TraceJob
from slurmtopo.simulate.traffic import job_traffic

END, SUBMIT, WAKE, CYCLE = 0, 1, 2, 3


@dataclass(frozen=True)
class JobSpec:
    """A trace job made placeable (the same for every policy)."""

    index: int
    trace: TraceJob
    shape: JobShape
    request: JobRequest
    #: modelled step time on the idle cluster (0 for a job that does not
    #: communicate)
    best_step: float

    @property
    def submit(self) -> float:
        return self.trace.submit


@dataclass
class Outcome:
    """What happened to one job under one policy."""

    start: Optional[float] = None
    end: Optional[float] = None
    step: Optional[float] = None
    gpus_held: int = 0
    nodes: int = 0
    leaves: int = 0
    #: run time at its placement, before contention
    run_base: float = 0.0
    #: its run-time multiplier with no other job on its links (its own
    #: flows colliding only; 1 without contention)
    alone: float = 1.0
    #: ever slowed by shared links
    contended: bool = False

    @property
    def stretch(self) -> float:
        """How much shared links stretched its run (1: not at all)."""
        if not self.contended or self.run_base <= 0 or self.start is None or self.end is None:
            return 1.0
        return max(1.0, (self.end - self.start) / self.run_base)


@dataclass
class Replay:
    """One policy's replay: per job outcomes (by :attr:`JobSpec.index`),
    the stranded GPUs integrated over time, and when the last job ended."""

    label: str
    outcomes: List[Outcome]
    stranded_gpu_s: float = 0.0
    #: multi-node NVLink domains (racks), integrated over time: per segment
    #: size of :attr:`FreeState.segments`, free trays no segment of it can
    #: use; racks wholly free; racks partly free
    unusable_tray_s: List[float] = field(default_factory=list)
    whole_domain_s: float = 0.0
    partial_domain_s: float = 0.0
    end: float = 0.0
    rejected: int = 0
    cycles: int = 0
    notes: List[str] = field(default_factory=list)


def slowdown(step: Optional[float], best: float) -> float:
    """``step / best`` (1 when the job does not communicate or is not priced)."""
    if step is None or best <= 0:
        return 1.0
    return step / best


def whole_step(job: JobSpec) -> bool:
    """Is the job's step the whole step (its layout rule names its model),
    rather than communication stretched by ``--comm-fraction``?"""
    w = getattr(job.request, "workload", None)
    return w is not None and w.model is not None


def comm_scale(job: JobSpec, step: Optional[float], fraction: float, comm_s: float) -> float:
    """The share of the job's run time that one second of its step's
    communication takes: ``1 / step`` for a whole step; else the share
    ``phi`` of its (placement-stretched) run spent communicating, spread
    over its ``comm_s`` seconds of communication a step."""
    if whole_step(job):
        return 1.0 / step if step else 0.0
    if fraction <= 0 or comm_s <= 0:
        return 0.0
    s = slowdown(step, job.best_step)
    phi = fraction * s / ((1.0 - fraction) + fraction * s)
    return phi / comm_s


def effective_slowdown(job: JobSpec, step: Optional[float], fraction: float,
                       stretch: float) -> float:
    """The job's slowdown with shared links: the step slowdown that gives
    its run stretched further by ``stretch`` (contention); what reports
    call its slowdown."""
    s = slowdown(step, job.best_step)
    if stretch == 1.0:
        return s
    if whole_step(job):
        return s * stretch
    if fraction <= 0:
        return s
    return s + (stretch - 1.0) * (1.0 + fraction * (s - 1.0)) / fraction


def stretched(job: JobSpec, step: Optional[float], fraction: float) -> float:
    """The run time of ``job`` at modelled step ``step`` (see the module doc):
    when its layout rule names the model, the step is the whole step and
    the run stretches by ``step / best_step``; else only the ``fraction``
    of it spent communicating does."""
    w = getattr(job.request, "workload", None)
    if w is not None and w.model is not None:
        return job.trace.run_time * slowdown(step, job.best_step)
    return job.trace.run_time * (1.0 + fraction * (slowdown(step, job.best_step) - 1.0))


class _Loop:
    """What both loops share: the clock, the events, the state and the
    outcomes, and the running jobs' load on shared links when ``links``
    (a :class:`~slurmtopo.simulate.contention.FabricLinks`) is given."""

    def __init__(self, inv: Inventory, jobs: List[JobSpec], label: str, fraction: float,
                 progress: Optional[Callable[[int], None]], links=None, seed: int = 0):
        self.inv = inv
        self.jobs = jobs
        self.fraction = fraction
        self.state = FreeState(inv)
        self.out = [Outcome() for _ in jobs]
        self.replay = Replay(label=label, outcomes=self.out,
                             unusable_tray_s=[0.0] * len(self.state.segments))
        self.events: List[Tuple[float, int, int, int]] = []
        self.seq = 0
        self.now = 0.0
        self.done = 0
        self.progress = progress
        self.alloc: Dict[int, Dict[str, Tuple[int, ...]]] = {}
        self.running: Dict[int, float] = {}  # job -> when the scheduler believes it ends
        self.params = None
        self.links = links
        self.seed = seed
        self.net = None
        if links is not None:
            self.net = Contention(links)
        #: job -> [time of the last change, base run seconds left, multiplier]
        self.prog: Dict[int, List[float]] = {}
        #: job -> the sequence number of its current END event
        self.end_seq: Dict[int, int] = {}
        for job in jobs:
            self.push(job.submit, SUBMIT, job.index)

    def push(self, t: float, kind: int, what: int) -> int:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, what))
        return self.seq

    def stale(self, kind: int, seq: int, what: int) -> bool:
        """An END event a change of the job's speed has replaced."""
        return kind == END and self.end_seq.get(what) != seq

    def advance(self, t: float) -> None:
        if t > self.now:
            dt = t - self.now
            rep, st = self.replay, self.state
            rep.stranded_gpu_s += st.stranded * dt
            if st.dom_size:
                for k, n in enumerate(st.unusable):
                    rep.unusable_tray_s[k] += n * dt
                rep.whole_domain_s += st.whole_domains * dt
                rep.partial_domain_s += st.partial_domains * dt
            self.now = t

    def cost_params(self):
        if self.params is None:
            self.params = params_of(self.inv)  # the cost block's one policy
        return self.params

    def step_of(self, job: JobSpec, placement) -> Optional[float]:
        if job.best_step <= 0:
            return 0.0

        return price_step(self.inv, placement, job.request, self.cost_params()).time_s

    def load(self, job: JobSpec, placement, step: Optional[float]):
        """The job's load on the shared links (None: it puts none there)."""
        if self.net is None or placement is None or job.best_step <= 0 or len(placement.hosts) < 2:
            return None

        traffic = job_traffic(self.inv, placement, job.request, self.cost_params())
        if traffic.empty:
            return None
        return job_load(self.links, traffic,
                        comm_scale(job, step, self.fraction, traffic.comm_s), job.index,
                        self.seed)

    def respeed(self, changed: Dict[int, float]) -> None:
        """Jobs whose run-time multiplier changed now: their ends move."""
        now = self.now
        for index in sorted(changed):
            pr = self.prog.get(index)
            if pr is None:
                continue
            mult = changed[index]
            left = pr[1] - (now - pr[0]) / pr[2]
            if left < 0.0:
                left = 0.0
            pr[0], pr[1], pr[2] = now, left, mult
            o = self.out[index]
            if mult > 1.0:
                o.contended = True
            end = now + left * mult
            if end == o.end:
                continue
            o.end = end
            self.end_seq[index] = self.push(end, END, index)
            if index in self.running and not self.jobs[index].trace.time_limit:
                self.running[index] = end

    def start(self, job: JobSpec, alloc: Dict[str, Tuple[int, ...]], step: Optional[float],
              placement=None) -> None:
        self.state.allocate(alloc)
        run = stretched(job, step, self.fraction)
        o = self.out[job.index]
        o.start, o.step, o.end = self.now, step, self.now + run
        o.run_base = run
        o.gpus_held = sum(len(g) for g in alloc.values())
        o.nodes = len(alloc)
        if len(alloc) > 1 and self.inv.fabric.switches:
            o.leaves = leaves_used(self.inv, list(alloc))
        else:
            o.leaves = 1
        self.alloc[job.index] = alloc
        limit = job.trace.time_limit
        self.running[job.index] = self.now + limit if limit else o.end
        self.end_seq[job.index] = self.push(o.end, END, job.index)
        load = self.load(job, placement, step)
        if load is not None:
            self.prog[job.index] = [self.now, run, 1.0]
            changed = self.net.add(job.index, load)
            o.alone = self.net.alone(job.index)
            self.respeed(changed)

    def finish(self, index: int) -> None:
        self.state.release(self.alloc.pop(index))
        self.running.pop(index, None)
        self.end_seq.pop(index, None)
        if self.prog.pop(index, None) is not None:
            self.respeed(self.net.remove(index))
        self.done += 1
        if self.progress is not None and (self.done % 64 == 0 or self.done == len(self.jobs)):
            self.progress(self.done)


class QueueLoop(_Loop):
    """Slurm's queue with a placement policy (see the module doc)."""

    def __init__(self, inv, jobs, policy, fraction, progress=None, links=None, seed=0):
        super().__init__(inv, jobs, policy.label, fraction, progress, links, seed)
        self.policy = policy
        self.pending: List[JobSpec] = []
        self.fresh: List[JobSpec] = []
        self.dirty = True
        self.reserve: Optional[Tuple[float, Dict[str, Tuple[int, ...]]]] = None
        self.reserve_view = None
        self.blocked_seen = False
        self.fails: Dict[Tuple, bool] = {}
        self.wakes: set = set()

    def run(self) -> Replay:
        while self.events:
            t = self.events[0][0]
            self.advance(t)
            while self.events and self.events[0][0] == t:
                _, kind, seq, what = heapq.heappop(self.events)
                if kind == END:
                    if self.stale(kind, seq, what):
                        continue
                    self.finish(what)
                    self.dirty = True
                elif kind == SUBMIT:
                    self.fresh.append(self.jobs[what])
                else:
                    self.wakes.discard(t)
                    self.dirty = True
            self.schedule()
        self.replay.end = self.now
        return self.replay

    # -- one pass --------------------------------------------------------------

    def view(self):
        """The state a job is placed on: with the reservation's GPUs busy."""
        if self.reserve is None:
            return self.state.cluster
        if self.reserve_view is None:
            nodes = dict(self.state.cluster.nodes)
            for h, gs in self.reserve[1].items():
                st = nodes.get(h)
                busy = frozenset(gs) | (st.busy_gpus if st is not None else frozenset())
                nodes[h] = NodeState(h, state="mixed", busy_gpus=busy)
            self.reserve_view = ClusterState(nodes=nodes, source="simulation")
        return self.reserve_view

    def changed(self) -> None:
        self.fails.clear()
        self.reserve_view = None

    def schedule(self) -> None:
        if self.dirty:
            self.pending.extend(self.fresh)
            self.fresh = []
            todo = self.pending
            self.reserve = None
            self.reserve_view = None
            self.blocked_seen = False
            self.fails.clear()
        else:
            todo = self.fresh
            self.pending.extend(self.fresh)
            self.fresh = []
        self.dirty = False
        started = set()
        for job in list(todo):
            if self.consider(job):
                started.add(job.index)
        if started:
            self.pending = [j for j in self.pending if j.index not in started]

    def consider(self, job: JobSpec) -> bool:
        """Start ``job`` if it can start now; True when it did."""
        shape = job.shape
        if not self.state.fits_by_count(shape.nodes, min(shape.gpus_per_node, shape.gpus),
                                        shape.gpus):
            self.blocked(job)
            return False
        res = self.reserve
        guess = job.trace.time_limit or job.trace.run_time
        short = res is not None and self.now + guess <= res[0]
        key = (job.request, short)
        if key in self.fails:
            self.blocked(job)
            return False
        st = self.place(job, self.reserve is not None)
        if st is None and short:
            # it may use the reserved GPUs if it ends before the reservation
            st = self.place(job, False)
            if st is not None:
                step = self.step_of(job, st.placement)
                end = self.now + (job.trace.time_limit or stretched(job, step, self.fraction))
                if end > res[0] or st.hold_until is not None:
                    st = None
                else:
                    return self.go(job, st, step, shrink=True)
        if st is None:
            self.fails[key] = True
            self.blocked(job)
            return False
        if st.hold_until is not None and self.now < st.hold_until:
            if st.hold_until not in self.wakes:
                self.wakes.add(st.hold_until)
                self.push(st.hold_until, WAKE, job.index)
            return False
        return self.go(job, st, self.step_of(job, st.placement))

    def place(self, job: JobSpec, reserved: bool):
        """The policy's placement of ``job`` now, around the reservation or not."""
        if reserved and self.reserve is not None:
            view = self.view()
            cand = self.state.candidates(job.request, view, self.reserve[1])
        else:
            view = self.state.cluster
            cand = self.state.candidates(job.request)
        return self.policy.place(view, job, self.now, cand)

    def go(self, job: JobSpec, st, step, shrink: bool = False) -> bool:
        self.start(job, st.alloc, step, st.placement)
        if shrink and self.reserve is not None:
            # the reservation keeps the GPUs this short job did not take
            left = {h: tuple(g for g in gs if g not in st.alloc.get(h, ()))
                    for h, gs in self.reserve[1].items()}
            self.reserve = (self.reserve[0], {h: gs for h, gs in left.items() if gs})
        self.changed()
        return True

    def blocked(self, job: JobSpec) -> None:
        if self.blocked_seen:
            return
        self.blocked_seen = True
        self.reserve = self.reservation(job)
        self.reserve_view = None

    def reservation(self, job: JobSpec) -> Optional[Tuple[float, Dict[str, Tuple[int, ...]]]]:
        """When and where ``job`` would start once running jobs end (at the
        time the scheduler believes), or None."""
        if not self.running:
            return None
        order = sorted((max(end, self.now), index) for index, end in self.running.items())
        freed: List[int] = []
        found = None
        shape = job.shape
        state = self.state
        i = 0
        try:
            while i < len(order):
                t = order[i][0]
                while i < len(order) and order[i][0] == t:
                    index = order[i][1]
                    state.release(self.alloc[index], track=False)
                    freed.append(index)
                    i += 1
                if not state.fits_by_count(shape.nodes, min(shape.gpus_per_node, shape.gpus),
                                           shape.gpus):
                    continue
                st = self.policy.place(state.cluster, job, t, state.candidates(job.request))
                if st is not None:
                    found = (t, st.alloc)
                    break
        finally:
            for index in reversed(freed):
                state.allocate(self.alloc[index], track=False)
        if found is None:
            return None
        # only the GPUs that are free now can be set aside
        now_free = {h: tuple(g for g in gs if g not in state.busy[state.index[h]])
                    for h, gs in found[1].items()}
        return found[0], {h: gs for h, gs in now_free.items() if gs}


class DaemonLoop(_Loop):
    """The placement daemon on the simulated clock (see the module doc)."""

    def __init__(self, inv, jobs, policy, fraction, progress=None, links=None, seed=0):
        super().__init__(inv, jobs, policy.label, fraction, progress, links, seed)
        self.policy = policy
        self.held: Dict[int, JobSpec] = {}
        self.next_cycle: Optional[float] = None
        #: since the last cycle: something besides submissions happened, and
        #: the jobs submitted
        self.moved = True
        self.new: List[JobSpec] = []

    def tick(self, t: float) -> float:
        """The first daemon cycle at or after ``t``."""
        iv = self.policy.interval
        return math.ceil(t / iv - 1e-9) * iv

    def want_cycle(self, t: float) -> None:
        c = self.tick(t)
        if self.next_cycle is None or c < self.next_cycle:
            self.next_cycle = c
            self.push(c, CYCLE, 0)

    def run(self) -> Replay:
        while self.events:
            t = self.events[0][0]
            self.advance(t)
            cycle = False
            while self.events and self.events[0][0] == t:
                _, kind, seq, what = heapq.heappop(self.events)
                if kind == END:
                    if self.stale(kind, seq, what):
                        continue
                    self.finish(what)
                    self.moved = True
                    self.want_cycle(t)
                elif kind == SUBMIT:
                    job = self.jobs[what]
                    self.held[what] = job
                    self.new.append(job)
                    self.want_cycle(t)
                    wait = self.policy.wait_of(job)
                    if wait:
                        self.push(t + wait, WAKE, what)
                elif kind == WAKE:
                    if what in self.held:
                        self.moved = True
                        self.want_cycle(t)
                elif kind == CYCLE and self.next_cycle == t:
                    cycle = True
            if not cycle:
                continue
            self.next_cycle = None
            if not self.held:
                continue
            if not any(self.fits(j) for j in (self.held.values() if self.moved else self.new)):
                # no held job fits by count: the cycle would release none
                self.new = []
                self.moved = False
                continue
            self.moved = False
            self.new = []
            order = sorted(self.held.values(), key=lambda j: (j.submit, j.index))
            decisions = self.policy.decide(order, self.state.cluster, t)
            self.replay.cycles += 1
            released = 0
            for d in decisions:
                index = d.job_id - 1
                job = self.held.get(index)
                if job is None:
                    continue
                if d.action == RELEASE:
                    alloc = dict(d.claim or d.gpus)
                    step = d.cost_s
                    if step is None and d.placement is not None:
                        step = self.step_of(job, d.placement)
                    del self.held[index]
                    self.policy.forget(job)
                    self.start(job, alloc, step if job.best_step > 0 else 0.0, d.placement)
                    released += 1
                elif d.action == REJECT or d.final:
                    # final: every placement has an error hazard under the
                    # job's policy, even on the empty cluster; the daemon
                    # lets it go (held, never run): a rejection here
                    del self.held[index]
                    self.policy.forget(job)
                    self.replay.rejected += 1
                    self.replay.notes.append(f"job {job.trace.job_id} ({job.trace.where}) "
                                             f"rejected: {d.reason}")
                elif d.action == WAIT and d.wait_left is not None and d.wait_left > 0:
                    self.push(t + d.wait_left, WAKE, index)
            cap = self.policy.config.max_releases
            if cap and released >= cap and self.held:
                self.moved = True
                self.want_cycle(t + self.policy.interval)
        self.replay.end = self.now
        return self.replay


    def fits(self, job: JobSpec) -> bool:
        """Can the free GPUs hold ``job`` by count (the daemon's first test)?"""
        shape = job.shape
        return self.state.fits_by_count(shape.nodes, min(shape.gpus_per_node, shape.gpus),
                                        shape.gpus)


def replay(inv: Inventory, jobs: List[JobSpec], policy, fraction: float,
           progress: Optional[Callable[[int], None]] = None, links=None,
           seed: int = 0) -> Replay:
    """Replay ``jobs`` under ``policy`` (a QueuePolicy or DaemonPolicy);
    with ``links`` (:class:`~slurmtopo.simulate.contention.FabricLinks`)
    the running jobs share them (``seed`` hashes their flows)."""
    loop = (DaemonLoop if isinstance(policy, DaemonPolicy) else QueueLoop)(
        inv, jobs, policy, fraction, progress, links, seed)
    return loop.run()
