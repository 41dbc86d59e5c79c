"""One running job against what slurmtopo would have given it.

"Could have had" means: the same job (its GPU count, node count and the
layout :mod:`slurmtopo.simulate.layouts` gives it: a job's layout is not
known to Slurm, so every job gets the layout rule's, the one ``slurmtopo
simulate`` uses) planned by slurmtopo's planner (:func:`slurmtopo.plan.choice.plan`)
on the cluster as it was without the job: every GPU free then, the job's own
included. For the live cluster that is today's free GPUs plus the job's own
(what was free when it started is gone); for a past period
(:mod:`~slurmtopo.audit.history`) the GPUs free at its start, rebuilt from
the other jobs' intervals. The fewest leaves, blocks and NVLink domains are
each the smaller of today's count and the planner's: the planner minimises
the modelled step, not a count, and may take a second leaf when that is
faster.

Today's placement is priced as Slurm launches it: ranks in block order over
the job's nodes (in Slurm's order) and, on each node, its GPUs in index
order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from slurmtopo.audit.spans import Spans, fewest, spans
from slurmtopo.cost.step import price_step
from slurmtopo.errors import PlacementError
from slurmtopo.inventory.model import ClusterState, Inventory, NodeState
from slurmtopo.placement.common import build_placement
from slurmtopo.plan.choice import params_of, plan
from slurmtopo.simulate.layouts import JobShape, LayoutRules, node_size, shape_of


#: the flags of a node being drained (a job still running there)
DRAIN_FLAGS = frozenset({"drain", "draining"})


@dataclass(frozen=True)
class RunningJob:
    """A job holding GPUs: ``alloc`` node -> GPU indices, in Slurm's node order."""

    job_id: str
    alloc: Dict[str, Tuple[int, ...]]
    name: str = ""
    #: when it started (seconds since the epoch), where known
    start: Optional[float] = None
    #: ``file:line`` where it was read, when from a file
    where: str = ""

    @property
    def gpus(self) -> int:
        return sum(len(g) for g in self.alloc.values())


@dataclass(frozen=True)
class JobAudit:
    job: RunningJob
    shape: JobShape
    today: Spans
    #: slurmtopo's placement's spans (None: it could not place the job)
    slurmtopo: Optional[Spans]
    fewest: Spans
    step_today_s: Optional[float]
    step_slurmtopo_s: Optional[float]
    note: str = ""

    @property
    def optimal(self) -> bool:
        """Spans no more leaves, blocks or domains than it could have."""
        return self.today == self.fewest

    @property
    def slowdown(self) -> Optional[float]:
        """Today's modelled step over slurmtopo's."""
        if not self.step_today_s or not self.step_slurmtopo_s:
            return None
        return self.step_today_s / self.step_slurmtopo_s


def without(state: ClusterState, alloc: Dict[str, Tuple[int, ...]]) -> ClusterState:
    """``state`` with the GPUs of ``alloc`` free again. A node the job held
    whole is no longer held whole (its other CPUs are taken to be free),
    and a node draining under the job was not draining when it started:
    its drain flag is dropped."""
    nodes = dict(state.nodes)
    for host, gpus in alloc.items():
        st = nodes.get(host)
        if st is None:
            continue
        busy = st.busy_gpus - frozenset(gpus)
        base = st.state
        if base in ("allocated", "mixed"):
            base = "mixed" if busy else "idle"
        flags = st.flags - DRAIN_FLAGS
        nodes[host] = NodeState(host, base, busy, flags, exclusive=False)
    return ClusterState(nodes=nodes, source=state.source)


def with_jobs(state: ClusterState, jobs: List[RunningJob]) -> ClusterState:
    """``state`` with every job's GPUs busy (a snapshot may list only jobs)."""
    nodes = dict(state.nodes)
    for job in jobs:
        for host, gpus in job.alloc.items():
            st = nodes.get(host) or NodeState(host, "idle")
            busy = st.busy_gpus | frozenset(gpus)
            base = "mixed" if st.state == "idle" else st.state
            nodes[host] = NodeState(host, base, busy, st.flags, st.exclusive)
    return ClusterState(nodes=nodes, source=state.source)


class Auditor:
    """Audits jobs on one inventory with one layout rule (the cost
    parameters and the node size found once)."""

    def __init__(self, inv: Inventory, rules: LayoutRules):
        self.inv = inv
        self.rules = rules
        self.per_node = node_size(inv)
        self.params = params_of(inv)

    def shape(self, job: RunningJob) -> JobShape:
        return shape_of(job.gpus, len(job.alloc), self.rules, self.per_node)

    def today(self, job: RunningJob):
        """(shape, request, placement) of ``job`` as Slurm launched it: ranks
        in block order over its nodes, GPUs by index on each."""
        shape = self.shape(job)
        req = shape.request()
        assign = [(h, g) for h, gpus in job.alloc.items() for g in sorted(gpus)]
        return shape, req, build_placement(self.inv, req, assign,
                                           ["today: block order, GPUs by index"])

    def audit(self, job: RunningJob, before: ClusterState) -> JobAudit:
        """``job`` against slurmtopo's plan on ``before`` (the cluster
        without the job; see the module doc)."""
        inv = self.inv
        shape, req, today_pl = self.today(job)
        today = spans(inv, list(job.alloc))
        step_today = price_step(inv, today_pl, req, self.params).time_s
        try:
            best_pl = plan(inv, before, req)
        except PlacementError as exc:
            return JobAudit(job, shape, today, None, today, step_today, None,
                            f"slurmtopo cannot place it on the cluster without it: {exc.message}")
        best = spans(inv, list(best_pl.hosts))
        step_best = price_step(inv, best_pl, req, self.params).time_s
        return JobAudit(job, shape, today, best, fewest(today, best), step_today, step_best)
