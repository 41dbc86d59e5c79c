"""The use case: a trace made placeable once, then replayed under every
policy, in parallel processes when asked (each replay is independent, so
the result does not depend on how many run at once)."""
from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from slurmtopo.cost.step import price_step
from slurmtopo.errors import PlacementError, SlurmtopoError
from slurmtopo.inventory.model import Inventory
from slurmtopo.plan.choice import params_of, plan
from slurmtopo.simulate.contention import FabricLinks
from slurmtopo.simulate.engine import JobSpec, Replay, replay
from slurmtopo.simulate.layouts import JobShape, LayoutRules, node_size, shape_of
from slurmtopo.simulate.policies import PolicySpec, make_policy
from slurmtopo.simulate.trace import Trace, TraceJob
from slurmtopo.simulate.workers import die_with_parent


@dataclass(frozen=True)
class Setup:
    """Everything the replays share: the cluster, the trace's jobs made
    placeable, and the jobs that can never run here (left out of every
    replay, and reported)."""

    inv: Inventory
    trace: Trace
    rules: LayoutRules
    fraction: float
    seed: int
    jobs: Tuple[JobSpec, ...]
    never: Tuple[Tuple[TraceJob, str], ...] = ()
    #: how shared links are modelled (:mod:`~slurmtopo.simulate.contention`)
    contention: str = "ecmp"
    #: the fabric's links (None: contention off)
    links: object = None
    #: the load the trace offers as read, and the factor its inter-arrival
    #: times were scaled by (``--load``; 1: as read)
    offered_native: Optional[float] = None
    arrival_scale: float = 1.0

    @property
    def offered(self) -> Optional[float]:
        """GPU-seconds the replayed jobs ask for over GPU-seconds the cluster
        has while they are submitted (after ``--load``)."""
        if self.offered_native is None:
            return None
        return self.offered_native / self.arrival_scale


def offered_load(inv: Inventory, jobs: Sequence[TraceJob]) -> Optional[float]:
    """GPU-seconds ``jobs`` ask for (their trace run times) over the
    cluster's GPU-seconds from the first submission to the last; None when
    they are all submitted at once."""
    if len(jobs) < 2:
        return None
    span = max(j.submit for j in jobs) - min(j.submit for j in jobs)
    gpus = inv.gpu_count
    if span <= 0 or not gpus:
        return None
    return sum(j.gpus * j.run_time for j in jobs) / (gpus * span)


#: offered loads below this rarely make jobs compete for places (warned of)
LOW_LOAD = 0.5


def prepare(inv: Inventory, trace: Trace, rules: LayoutRules, fraction: float,
            seed: int = 0, contention: str = "ecmp", load: Optional[float] = None) -> Setup:
    """Each trace job's shape and request (:mod:`~slurmtopo.simulate.layouts`)
    and its best step: the planner's placement on the idle cluster, priced
    by the cost model (once per distinct shape); the fabric's links for
    ``contention`` (``ecmp``, ``ideal`` or ``off``). ``load``: scale the
    inter-arrival times so that the jobs offer that share of the cluster's
    GPU-seconds (SlurmtopoError when they cannot: all submitted at once)."""
    params = params_of(inv)  # the cost block's one policy
    per_node = node_size(inv)
    best: Dict[JobShape, Tuple[Optional[float], str]] = {}
    jobs: List[JobSpec] = []
    never: List[Tuple[TraceJob, str]] = []
    requests = {}
    for tj in trace.jobs:
        shape = shape_of(tj.gpus, tj.nodes, rules, per_node)
        hit = best.get(shape)
        if hit is None:
            req = requests[shape] = shape.request()
            try:
                pl = plan(inv, None, req)
                hit = (price_step(inv, pl, req, params).time_s if req.layout.world > 1 else 0.0, "")
            except PlacementError as exc:
                hit = (None, exc.message)
            best[shape] = hit
        if hit[0] is None:
            never.append((tj, hit[1]))
            continue
        jobs.append(JobSpec(index=len(jobs), trace=tj, shape=shape, request=requests[shape],
                            best_step=hit[0]))
    native = offered_load(inv, [j.trace for j in jobs])
    scale = 1.0
    if load is not None:
        if native is None:
            raise SlurmtopoError("--load: the trace's jobs are all submitted at once (or there "
                                 "is one): there are no inter-arrival times to scale")
        scale = native / load
        jobs = [replace(j, trace=replace(j.trace, submit=j.trace.submit * scale)) for j in jobs]
    links = None
    if contention != "off" and jobs:
        links = FabricLinks(inv, params, contention)
    return Setup(inv=inv, trace=trace, rules=rules, fraction=fraction, seed=seed,
                 jobs=tuple(jobs), never=tuple(never), contention=contention, links=links,
                 offered_native=native, arrival_scale=scale)


def run_one(setup: Setup, spec: PolicySpec,
            progress: Optional[Callable[[int], None]] = None) -> Tuple[Replay, float]:
    """One policy's replay and the seconds it took."""
    t0 = time.perf_counter()
    policy = make_policy(spec, setup.inv, setup.seed)
    result = replay(setup.inv, list(setup.jobs), policy, setup.fraction, progress,
                    setup.links, setup.seed)
    return result, time.perf_counter() - t0


#: how long each policy's replay takes, roughly, against ``slurm``'s
COST = {"daemon": 6.0, "slurmtopo": 2.5, "slurm-switches": 1.5, "slurm": 1.0, "random": 1.0}

# what a forked worker reads (set just before the workers fork)
_SHARED: Dict[str, object] = {}


def _child(k: int, spec: PolicySpec) -> Tuple[Replay, float]:
    counters = _SHARED["counters"]

    def progress(done: int) -> None:
        counters[k] = done

    setups = _SHARED["setups"]
    return run_one(setups[_SHARED["which"][k]], spec, progress)


def run_policies(setup: Setup, specs: Sequence[PolicySpec], workers: int = 1,
                 progress: Optional[Callable[[int, int], None]] = None
                 ) -> List[Tuple[Replay, float]]:
    """Every policy's replay, in the order of ``specs``; ``workers``
    processes at a time (forked; 1: in this process). ``progress(k,
    done)`` is told how many jobs policy ``k`` has finished."""
    return run_tasks([(setup, s) for s in specs], workers, progress)


def run_tasks(tasks: Sequence[Tuple[Setup, PolicySpec]], workers: int = 1,
              progress: Optional[Callable[[int, int], None]] = None
              ) -> List[Tuple[Replay, float]]:
    """Every (setup, policy) replay, in order (a sweep replays each policy
    on several setups); ``workers`` processes at a time (forked, each dying
    with this process: :mod:`~slurmtopo.simulate.workers`; 1: in this
    process). ``progress(k, done)``: how many jobs task ``k`` has
    finished."""
    if workers <= 1 or len(tasks) <= 1:
        out = []
        for k, (setup, spec) in enumerate(tasks):
            cb = (lambda done, k=k: progress(k, done)) if progress is not None else None
            out.append(run_one(setup, spec, cb))
        return out

    setups: List[Setup] = []
    which: List[int] = []
    for setup, _ in tasks:
        i = next((j for j, s in enumerate(setups) if s is setup), None)
        if i is None:
            i = len(setups)
            setups.append(setup)
        which.append(i)
    ctx = multiprocessing.get_context("fork")
    counters = ctx.Array("q", len(tasks), lock=False)
    _SHARED.update(setups=setups, which=which, counters=counters)
    # the slowest first, so that the others share the remaining workers
    order = sorted(range(len(tasks)), key=lambda k: (-COST.get(tasks[k][1].name, 1.0), k))
    try:
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx,
                                 initializer=die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            submitted = {k: pool.submit(_child, k, tasks[k][1]) for k in order}
            futures = [submitted[k] for k in range(len(tasks))]
            while not all(f.done() for f in futures):
                if progress is not None:
                    for k in range(len(tasks)):
                        progress(k, counters[k])
                time.sleep(0.2)
            results = [f.result() for f in futures]
            if progress is not None:
                for k in range(len(tasks)):
                    progress(k, len(tasks[k][0].jobs))
            return results
    finally:
        _SHARED.clear()
