"""Which held job the daemon looks at first: Slurm's priority order, the
packing order (hardest first), and whether a packing pass could release
more jobs than the priority pass did (counted, without planning)."""
from __future__ import annotations

from typing import Dict, Mapping, Sequence, Tuple

from slurmtopo.daemon.decisions import RELEASE, WAIT, Decision, QueuedJob
from slurmtopo.errors import SlurmtopoError
from slurmtopo.job.groups import build_groups
from slurmtopo.job.request import LEVEL_INDEX


def job_order(q: QueuedJob) -> Tuple:
    """Slurm's priority (highest first), then submit time, then job id."""
    return (-int(q.priority or 0), float(q.submit_time or 0.0), int(q.job_id))


def difficulty(q: QueuedJob) -> Tuple:
    """Hardest first, for the packing pass: the largest group that must
    stay inside one tight unit, then the job's size."""
    if q.spec is None:
        return (0, 0, 0)
    req = q.spec.request
    tight = 0
    level = len(LEVEL_INDEX)
    try:
        groups = build_groups(req.layout)
    except SlurmtopoError:
        groups = {}
    for kind, lvl in req.require.items():
        if kind in groups and groups[kind]:
            size = len(groups[kind][0])
            if (size, -LEVEL_INDEX[lvl]) > (tight, -level):
                tight, level = size, LEVEL_INDEX[lvl]
    return (tight, -level, req.layout.world)


def gpus_taken(q: QueuedJob) -> Tuple[int, int]:
    """(GPUs, fewest free GPUs a node needs to take part) of a held job."""
    req = q.spec.request
    world = req.layout.world
    gpn = q.spec.shape.gpus_per_node or req.gpus_per_node
    return world, (min(gpn, world) if gpn else 1)


def packing_may_help(jobs: Sequence[QueuedJob], first: Sequence[Decision],
                     counts: Mapping[int, int]) -> bool:
    """Whether the packing pass could release every job the priority pass
    released and one more, by counting GPUs (no planning). A job that needs
    ``t`` free GPUs on each of its nodes can only use the nodes that have
    at least ``t`` free (``counts``: free GPUs -> nodes, before any held
    job was placed), and so can every released job needing at least ``t``
    per node: when those nodes cannot hold them all plus the blocked job,
    for every blocked job, no order of placing can release more."""
    by_id = {q.job_id: q for q in jobs if q.spec is not None}
    released = [gpus_taken(by_id[d.job_id]) for d in first
                if d.action == RELEASE and d.job_id in by_id]
    seen: Dict[Tuple[int, int], bool] = {}
    for d in first:
        if d.action != WAIT or d.job_id not in by_id:
            continue
        world, t = gpus_taken(by_id[d.job_id])
        if (world, t) not in seen:
            room = sum(f * c for f, c in counts.items() if f >= t)
            need = world + sum(w for w, tj in released if tj >= t)
            seen[(world, t)] = room >= need
        if seen[(world, t)]:
            return True
    return False


#: job states in which a job holds (or is about to hold) its allocation
ACTIVE = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STAGE_OUT",
                    "SIGNALING", "RESIZING"})
