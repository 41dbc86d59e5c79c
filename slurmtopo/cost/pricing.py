"""Pricing a placement: :func:`evaluate` prices one collective of every
group kind over the ranks' hosts and GPUs (for the per-kind table and the
checks of the kinds' link classes), prices the step
(:func:`slurmtopo.cost.step.price_step`) and names the groups whose link
is slower than their size allows. Groups are reduced to shapes
(:mod:`slurmtopo.cost.shapes`), priced once per distinct shape."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from slurmtopo.cost.bound import LowerBound
from slurmtopo.cost.collectives import COLLECTIVES
from slurmtopo.cost.params import CostParams, cost_params
from slurmtopo.cost.report import CostReport, GroupCost
from slurmtopo.cost.shapes import (PlacementPricer, Shape, group_shapes,  # noqa: F401
                                   placement_pricer, pricing_of, shape_time)
from slurmtopo.cost.step import price_step
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Inventory, Placement
from slurmtopo.job.groups import build_groups, span_of
from slurmtopo.job.request import JobRequest

_PHRASE = {
    LinkClass.NVLINK_DOMAIN: "spans nodes over multi-node NVLink",
    LinkClass.PIX: "runs over PCIe through one switch (PIX)",
    LinkClass.PXB: "crosses PCIe switches (PXB)",
    LinkClass.PHB: "goes through a PCIe host bridge (PHB)",
    LinkClass.NODE: "crosses PCIe host bridges inside a NUMA node (NODE)",
    LinkClass.SYS: "crosses PCIe between NUMA nodes (SYS)",
    LinkClass.NET_LEAF: "crosses the network (same leaf switch)",
    LinkClass.NET_L1: "crosses the network through a spine switch",
    LinkClass.NET_L2: "crosses the network through a core switch (2 levels up)",
    LinkClass.NET_L3: "crosses the network 3 or more switch levels up",
    LinkClass.NET_FAR: "crosses the network between hosts with no common switch",
}

_HEAVY = ("tp", "expert-tp", "cp", "ep", "dp", "dp-cp", "expert-dp", "pp")


def _capped_clause(placement: Placement, req: JobRequest, lb: LowerBound,
                   best_cls: LinkClass, span: int) -> str:
    """The rest of a "could use" warning when only whole nodes would reach
    ``best_cls``: the plan puts fewer ranks on a node than it holds (its own
    cap that keeps rings on one socket or PCIe switch, or --gpus-per-node),
    so a block of ``span`` ranks needs more nodes than one switch of that
    scope has. Said as the choice it is, never as a bare shortfall (issue
    24); empty when the cap is not why."""
    if not best_cls.is_network or span <= 0:
        return ""
    per_host = max((len(v) for v in placement.by_host().values()), default=0)
    scope = lb.scope_cap.get(best_cls, 0)
    if not 0 < per_host < lb.node_max or span <= per_host:
        return ""
    if (scope // lb.node_max) * per_host >= span:  # the scope holds the block at the cap too
        return ""
    if req.gpus_per_node is not None:
        return f" with whole nodes, but --gpus-per-node {req.gpus_per_node} puts at most {per_host}"
    return (f" with whole nodes, but this plan puts at most {per_host} ranks on a node by "
            f"choice (see the note on rings)")


def evaluate(inv: Inventory, placement: Placement, req: JobRequest,
             params: Optional[CostParams] = None, step_only: bool = False,
             warn: bool = True) -> CostReport:
    """Price the step of ``placement`` and one collective of every group
    kind.

    ``step`` is :func:`slurmtopo.cost.step.price_step` (every call of one
    training step) and ``step_time_s`` its ``time_s``: the number every
    decision uses. Per kind (``kinds``): one collective of the kind's
    message size (:data:`~slurmtopo.cost.defaults.DEFAULT_MESSAGE_BYTES`),
    the slowest link any group crosses and the time of the slowest group.
    ``warnings`` name the worst group of each traffic-heavy kind whose link
    is slower than the best its size allows on this cluster (e.g. "TP group
    3 crosses PCIe between NUMA nodes (SYS)"). ``step_only``: the step
    alone, no kinds and no warnings. ``warn`` False: every kind priced, no
    warnings (what checks of the kinds' link classes need; the warnings
    compare with the lower bound, which costs more than the pricing on a
    small job).
    """
    warn = warn and not step_only
    p = params if params is not None else cost_params(inv)
    step = price_step(inv, placement, req, p)
    counted = step.kinds
    if step_only:
        return CostReport(kinds={}, step_time_s=step.time_s, counted=counted, step=step)
    if req.workload is not None:  # the job's own NCCL release, as its step
        p = p.for_version(req.workload.nccl_version)
    groups = placement.groups if placement.groups else build_groups(req.layout)
    pricer, shaped = pricing_of(inv, p, placement)
    priced: Dict[str, Tuple[list, str, int]] = {}
    seen: Dict[str, Tuple[float, int, LinkClass, List[int]]] = {}
    kinds: Dict[str, GroupCost] = {}
    warnings: List[str] = []
    warned: List[list] = []
    lb = None
    for kind, gl in groups.items():
        size = len(gl[0]) if gl else 0
        coll = COLLECTIVES.get(kind, "all-reduce")
        m = p.message(kind, req)
        if size <= 1:
            kinds[kind] = GroupCost(kind, len(gl), size, coll, m, LinkClass.SELF, 0.0, 0)
            continue
        same = next((k for k, (g2, c2, m2) in priced.items()
                     if c2 == coll and m2 == m and (g2 is gl or g2 == gl)), None)
        if same is not None:  # tp-dp-cp is tp-dp when cp == 1 ...
            worst_t, worst_i, slowest, at_slowest = seen[same]
        else:
            worst_t, worst_i, slowest = -1.0, 0, LinkClass.SELF
            at_slowest: List[int] = []
            if coll == "p2p":
                priced_groups = map(pricer.p2p_pricer(m), gl)
            else:
                # dp-cp is dp when cp == 1: same groups, another message
                shapes = next((sh for g2, sh in shaped if g2 is gl or g2 == gl), None)
                if shapes is None:
                    shapes = list(map(pricer.shaper(size), gl))
                    shaped.append((gl, shapes))
                times: Dict[Shape, Tuple[LinkClass, float]] = {}
                for sh in set(shapes):
                    times[sh] = (sh[0], shape_time(p, sh, coll, size, m))
                priced_groups = map(times.__getitem__, shapes)
            for i, (cls, t) in enumerate(priced_groups):
                if t > worst_t:
                    worst_t, worst_i = t, i
                if cls > slowest:
                    slowest = cls
                    at_slowest = [i]
                elif cls == slowest:
                    at_slowest.append(i)
            priced[kind] = (gl, coll, m)
            seen[kind] = (worst_t, worst_i, slowest, at_slowest)
        kinds[kind] = GroupCost(kind, len(gl), size, coll, m, slowest, worst_t, worst_i)
        if warn and kind in _HEAVY and slowest > LinkClass.NVLINK:
            if lb is None:
                lb = LowerBound(inv, p)
            # compare with the best for the block the group sits in (a DP
            # group of 2 with TP=8 inside spans 16 ranks: two nodes)
            span = span_of(gl, None, req.layout.world)
            best_cls, _ = lb.best(span, coll, m)
            # dp-cp is dp when cp == 1 (and tp-cp is tp ...): say it once
            if slowest > best_cls and not any(gl == w for w in warned):
                warned.append(gl)
                more = f" (and {len(at_slowest) - 1} more)" if len(at_slowest) > 1 else ""
                what = f"a group of {size}" if span == size else f"its block of {span} ranks"
                warnings.append(f"{kind.upper()} group {at_slowest[0]}{more} {_PHRASE[slowest]}; "
                                f"{what} could use {best_cls.label}"
                                f"{_capped_clause(placement, req, lb, best_cls, span)}")
    if warn and len(placement.hosts) > 1 and any(hc.no_nics for hc in pricer.hcs):
        warnings.append(f"some nodes list no compute NIC: their network share assumes "
                        f"{p.default_nic_gbit:g} Gbit/s a node (cost.default_nic_gbit)")
    return CostReport(kinds=kinds, step_time_s=step.time_s, warnings=warnings, counted=counted,
                      step=step)
