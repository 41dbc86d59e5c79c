"""What the planner must and should keep together, in its own terms.

Every rank gets a *position* in a canonical order where the heaviest
traffic is innermost (:func:`positions`); every group kind then lies in
aligned blocks of consecutive positions, the kind's *span*. A ``require``,
a ``prefer`` or an implicit preference becomes a :class:`Constraint`:
"blocks of this span stay inside that level" (:func:`constraints_for`).
Which level each soft one is relaxed to is the planner's business
(:mod:`slurmtopo.placement.planner`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.inventory.model import Hardware
from slurmtopo.job.groups import DENSE_DIMS, Layout, span_of
from slurmtopo.job.request import (LEVEL_INDEX, LEVELS, NODE_LEVEL_BOUND, JobRequest,
                                   implicit_preferences)
from slurmtopo.placement.intranode import hw_info

#: the pseudo group kind of the implicit "whole job inside one NVLink domain"
JOB = "job"

#: innermost (heaviest traffic) first
DEFAULT_DIMS: Tuple[str, ...] = ("tp", "cp", "dp", "pp")

#: what one unit of a level is called in messages
UNIT_TEXT = {
    "nvlink": "NVLink island",
    "pcie-switch": "group of GPUs under one PCIe switch",
    "numa": "group of GPUs on one NUMA node",
    "node": "node",
    "nvlink-domain": "NVLink domain",
    "leaf": "leaf",
    "spine": "spine group",
}


def lcm(values: Iterable[int]) -> int:
    """Least common multiple (1 for no values)."""
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


@dataclass(frozen=True)
class Constraint:
    """Blocks of ``span`` consecutive positions, each holding one group of
    ``kind`` (``size`` ranks), stay inside ``level``."""

    kind: str
    level: str
    hard: bool
    implicit: bool
    span: int  # aligned block of positions holding each group
    size: int  # ranks per group

    @property
    def text(self) -> str:
        return f"{self.kind}={self.level}"


def dense_sizes(lay: Layout) -> Dict[str, int]:
    """The size of each dense dimension that positions nest (EP lives
    inside DP, so it is not one of them)."""
    return {"tp": lay.tp, "cp": lay.cp, "ep": 1, "dp": lay.dp, "pp": lay.pp}


def positions(lay: Layout, dims: Sequence[str] = DEFAULT_DIMS) -> Optional[List[int]]:
    """rank -> position in the canonical order ``dims`` (innermost first),
    or None when that is the identity (the layout's own order already has
    these dimensions in this order, e.g. Megatron's default)."""
    sizes = dense_sizes(lay)
    user = [n for n in lay.fastest_first() if sizes[n] > 1]
    canon = [n for n in dims if sizes[n] > 1]
    if user == canon:
        return None
    stride: Dict[str, int] = {}
    s = 1
    for n in canon:
        stride[n] = s
        s *= sizes[n]
    pos = [0]
    for n in user:  # fastest first: rank digits
        st = stride[n]
        pos = [p + d * st for d in range(sizes[n]) for p in pos]
    return pos


def nested_blocks(lay: Layout, dims: Sequence[str]) -> List[int]:
    """The block sizes the nesting ``dims`` makes, innermost first (TP 8,
    PP 4: [8, 32]): what a node's positions should respect besides the
    constraints."""
    sizes = dense_sizes(lay)
    out: List[int] = []
    s = 1
    for d in dims:
        if sizes[d] > 1:
            s *= sizes[d]
            out.append(s)
    return out


def constraints_for(req: JobRequest, groups: Mapping[str, list], pos: Optional[List[int]],
                    world: int, domain_gpus: Optional[int], notes: List[str]) -> List[Constraint]:
    """The constraints of ``req`` in position order ``pos``: required, then
    preferred, then the implicit preferences the job did not override; and,
    on clusters with multi-node NVLink domains (``domain_gpus``: the
    largest one's GPUs, None without domains), the whole job inside one
    when it fits one (its pipeline and data-parallel traffic then never
    touches the network; least important, but in-node constraints give way
    to it). A constraint on a kind the layout lacks is noted and ignored."""
    out: List[Constraint] = []
    seen = set()
    spans: Dict[str, int] = {}

    def span(kind: str) -> int:
        if kind not in spans:
            spans[kind] = span_of(groups[kind], pos, world)
        return spans[kind]

    def add(kind: str, level: str, hard: bool, implicit: bool) -> None:
        if kind not in groups:
            if not implicit:
                notes.append(f"{'require' if hard else 'prefer'} {kind}={level}: "
                             f"this layout has no {kind} groups; ignored")
            return
        size = len(groups[kind][0])
        if size <= 1 or level == "any":
            return
        out.append(Constraint(kind, level, hard, implicit, span(kind), size))

    for kind, level in req.require.items():
        add(kind, level, True, False)
        seen.add(kind)
    for kind, level in req.prefer.items():
        add(kind, level, False, False)
        seen.add(kind)
    for kind, level in implicit_preferences(req.layout):
        if kind not in seen:
            add(kind, level, False, True)
    if domain_gpus is not None and world > 1 and JOB not in seen and world <= domain_gpus:
        out.append(Constraint(JOB, "nvlink-domain", False, True, world, world))
    return out


def importance(c: Constraint) -> Tuple[bool, int]:
    """Sort key of soft constraints, most important first: the user's
    preferences (finest blocks first), then the implicit ones in their
    listed order."""
    return c.implicit, c.span if not c.implicit else 0


def required_dims(req: JobRequest) -> Tuple[str, ...]:
    """The canonical dimension order: the default, unless the job requires
    levels of single dimensions (``--require dp=node``), then the required
    dimensions move inward, the tightest first."""
    rank: Dict[str, int] = {}
    for kind, level in req.require.items():
        for d in DENSE_DIMS.get(kind, ()):
            rank[d] = min(rank.get(d, len(LEVELS)), LEVEL_INDEX[level])
    if not rank:
        return DEFAULT_DIMS
    return tuple(sorted(DEFAULT_DIMS, key=lambda d: rank.get(d, len(LEVELS))))


def strided_bound(cons: Sequence[Constraint], hardware: Iterable[Hardware]) -> bool:
    """A hard link-class bound (nvlink, pcie-switch, numa) on a kind whose
    groups are strided inside their block, on hardware where that matters
    (not every GPU pair of the usable nodes is that fast)."""
    worst = {}
    for hw in hardware:
        worst.setdefault(id(hw), hw_info(hw).max_class)
    for c in cons:
        if c.hard and c.level in NODE_LEVEL_BOUND and c.level != "node" and c.span > c.size:
            bound = NODE_LEVEL_BOUND[c.level]
            if any(w > bound for w in worst.values()):
                return True
    return False
