"""The use case: a trace made placeable once, then replayed under every
policy, in parallel processes when asked (each replay is independent, so
the result does not depend on how many run at once)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import PlacementError
from slurmtopo.inventory.model import Inventory
from slurmtopo.simulate.engine import JobSpec, Replay, replay
from slurmtopo.simulate.layouts import JobShape, LayoutRules, node_size, shape_of
from slurmtopo.simulate.policies import PolicySpec, make_policy
from slurmtopo.simulate.trace import Trace, TraceJob


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


def prepare(inv: Inventory, trace: Trace, rules: LayoutRules, fraction: float,
            seed: int = 0) -> Setup:
    """Each trace job's shape and request (:mod:`~slurmtopo.simulate.layouts`)
    and its best step: the planner's placement on the idle cluster, priced
    by the cost model (once per distinct shape)."""
    from slurmtopo.cost.step import price_step
    from slurmtopo.plan.choice import params_of, plan

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
    return Setup(inv=inv, trace=trace, rules=rules, fraction=fraction, seed=seed,
                 jobs=tuple(jobs), never=tuple(never))


def run_one(setup: Setup, spec: PolicySpec,
            progress: Optional[Callable[[int], None]] = None) -> Tuple[Replay, float]:
    """One policy's replay and the seconds it took."""
    t0 = time.perf_counter()
    policy = make_policy(spec, setup.inv, setup.seed)
    result = replay(setup.inv, list(setup.jobs), policy, setup.fraction, progress)
    return result, time.perf_counter() - t0


#: how long each policy's replay takes, roughly, against ``slurm``'s
COST = {"daemon": 6.0, "slurmtopo": 2.5, "slurm-switches": 1.5, "slurm": 1.0, "random": 1.0}

# what a forked worker reads (set just before the workers fork)
_SHARED: Dict[str, object] = {}


def _child(k: int, spec: PolicySpec) -> Tuple[Replay, float]:
    counters = _SHARED["counters"]

    def progress(done: int) -> None:
        counters[k] = done

    return run_one(_SHARED["setup"], spec, progress)


def run_policies(setup: Setup, specs: Sequence[PolicySpec], workers: int = 1,
                 progress: Optional[Callable[[int, int], None]] = None
                 ) -> List[Tuple[Replay, float]]:
    """Every policy's replay, in the order of ``specs``; ``workers``
    processes at a time (forked; 1: in this process). ``progress(k,
    done)`` is told how many jobs policy ``k`` has finished."""
    if workers <= 1 or len(specs) <= 1:
        out = []
        for k, spec in enumerate(specs):
            cb = (lambda done, k=k: progress(k, done)) if progress is not None else None
            out.append(run_one(setup, spec, cb))
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("fork")
    counters = ctx.Array("q", len(specs), lock=False)
    _SHARED.update(setup=setup, counters=counters)
    # the slowest first, so that the others share the remaining workers
    order = sorted(range(len(specs)), key=lambda k: (-COST.get(specs[k].name, 1.0), k))
    try:
        with ProcessPoolExecutor(max_workers=min(workers, len(specs)), mp_context=ctx) as pool:
            submitted = {k: pool.submit(_child, k, specs[k]) for k in order}
            futures = [submitted[k] for k in range(len(specs))]
            while not all(f.done() for f in futures):
                if progress is not None:
                    for k in range(len(specs)):
                        progress(k, counters[k])
                time.sleep(0.2)
            results = [f.result() for f in futures]
            if progress is not None:
                for k in range(len(specs)):
                    progress(k, len(setup.jobs))
            return results
    finally:
        _SHARED.clear()
