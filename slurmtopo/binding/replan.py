"""Keeping or redoing the plan on the allocation: what differs, the state
that marks everything outside the allocation busy, and the re-plan."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import PlacementError, SlurmtopoError
from slurmtopo.inventory.model import (ClusterState, Inventory, Node, NodeState, Placement,
                                       format_cpulist)
from slurmtopo.binding.allocation import Allocation
from slurmtopo.job.groups import build_groups
from slurmtopo.job.request import JobRequest
from slurmtopo.plan.plandoc import layout_from_doc


def differences(placement: Placement, alloc: Allocation) -> List[str]:
    """Why the plan cannot run on this allocation (empty: it can)."""
    out = []
    have = set(alloc.hosts)
    for h in placement.hosts:
        if h not in have:
            out.append(f"planned node {h} was not allocated")
            continue
        got = alloc.gpus.get(h)
        want = placement.gpus_on(h)
        if got is not None and not set(want) <= set(got):
            out.append(f"{h}: planned GPUs {format_cpulist(want)}, allocated "
                       f"{format_cpulist(got) or 'none'}")
    return out


def fill_placement(inv: Inventory, host_gpus: Sequence[Tuple[str, Sequence[int]]], layout,
                   notes: Sequence[str] = ()) -> Placement:
    """Ranks in order over ``host_gpus`` (host by host, GPUs in the order
    given): the last-resort mapping when the planner cannot place the job on
    the allocation, and a plain reference placement for tests. NICs, CPUs
    and NUMA nodes come from the planner's own rule
    (:func:`slurmtopo.placement.common.build_placement`)."""
    # lazy: only a fallback or a torchrun fill uses it (~2 ms; hoisted: first task +5 ms CPU)
    from slurmtopo.placement.common import build_placement

    lay = layout.resolved()
    assign = [(host, g) for host, gpus in host_gpus for g in gpus][:lay.world]
    if len(assign) < lay.world:
        raise SlurmtopoError(f"the allocation has {len(assign)} GPUs for {lay.world} ranks")
    return build_placement(inv, None, assign, notes, groups=dict(build_groups(lay)))


def allocation_state(inv: Inventory, alloc: Allocation) -> ClusterState:
    """A ClusterState in which only the allocation is free: every other node
    is taken whole, and on allocated nodes the GPUs not given are busy."""
    have = set(alloc.hosts)
    nodes: Dict[str, NodeState] = {}
    for n in inv:
        if n.name not in have:
            nodes[n.name] = NodeState(n.name, state="allocated", exclusive=True)
            continue
        got = alloc.gpus.get(n.name)
        busy = frozenset(g.index for g in n.gpus if got is not None and g.index not in got)
        nodes[n.name] = NodeState(n.name, state="mixed" if busy else "idle", busy_gpus=busy)
    return ClusterState(nodes=nodes, source="allocation")


def job_request_from_doc(doc: Mapping[str, Any], relax: bool = False):
    """Rebuild the JobRequest (slurmtopo.job.request) for a re-plan on the
    allocation: exclusivity is already granted (the allocation state says
    what is free); ``relax`` also drops the requirements and the GPUs-per-node
    rule, for a second try."""
    names = {f.name for f in fields(JobRequest)}
    kw: Dict[str, Any] = {k: v for k, v in (doc.get("request") or {}).items() if k in names}
    kw["layout"] = layout_from_doc(doc)
    if "exclusive" in names:
        kw["exclusive"] = False
    if relax:
        for k, v in (("require", {}), ("gpus_per_node", None)):
            if k in names:
                kw[k] = v
    for k in ("nodelist", "exclude"):
        if k in names:
            kw[k] = None
    for k in ("require", "prefer", "message_bytes"):
        if k in kw and kw[k] is None:
            kw.pop(k)
    return JobRequest(**kw)


def with_allocated_nodes(inv: Inventory, alloc: Allocation, log: List[str]) -> Inventory:
    """Add allocated nodes the inventory lacks (the embedded copy holds only
    the planned ones when the cluster is big), with the hardware all
    planned nodes share; they sit in no known switch."""
    missing = [h for h in alloc.hosts if h not in inv.nodes]
    if not missing:
        return inv
    hws = {n.hardware: n for n in inv}
    if len(hws) != 1:
        raise SlurmtopoError(f"allocated node(s) {', '.join(missing)} are not in the inventory "
                             "and the planned nodes differ in hardware; pass --inventory")
    ref = next(iter(hws.values()))
    log.append(f"node(s) {', '.join(missing)} not in the inventory: assuming they are like "
               f"{ref.name}, with an unknown place in the network")
    nodes = dict(inv.nodes)
    for h in missing:
        nodes[h] = Node(name=h, hardware=ref.hardware, type=ref.type)
    return Inventory(nodes=nodes, fabric=inv.fabric, node_types=inv.node_types, cost=inv.cost,
                     source=inv.source)


def replan(doc: Mapping[str, Any], inv: Inventory, alloc: Allocation, log: List[str],
           planner: Optional[Callable] = None) -> Placement:
    """Plan again with only the allocation free. If the requirements cannot
    be met there, retry without them, then fall back to ranks in order:
    the job is already running, refusing to start helps nobody."""
    if planner is None:
        # lazy: only a re-plan plans; each binding would pay 16 modules (~7 ms)
        from slurmtopo.plan.choice import plan as planner
    inv = with_allocated_nodes(inv, alloc, log)
    state = allocation_state(inv, alloc)
    for relax in (False, True):
        try:
            req = job_request_from_doc(doc, relax=relax)
            p = planner(inv, state, req)
            if relax:
                log.append("re-planned without the --require constraints and GPUs per node")
            return p
        except PlacementError as exc:
            log.append(f"re-plan{' without requirements' if relax else ''} failed: "
                       f"{exc.render()}")
    hg = [(h, sorted(alloc.gpus[h]) if alloc.gpus.get(h) is not None
           else [g.index for g in inv.nodes[h].gpus]) for h in alloc.hosts]
    log.append("falling back to ranks in allocation order")
    return fill_placement(inv, hg, layout_from_doc(doc),
                          notes=("ranks in allocation order (re-plan failed)",))


def moved_slots(old: Placement, new: Placement) -> list:
    """(planned slot, actual slot) of every rank whose host or GPU changed."""
    return [(a, b) for a, b in zip(old.slots, new.slots) if (a.host, a.gpu) != (b.host, b.gpu)]


def moved_ranks(old: Placement, new: Placement, limit: int = 8) -> List[str]:
    """The moves for a reader: the first ``limit``, then how many more."""
    lines = []
    moved = moved_slots(old, new)
    for a, b in moved[:limit]:
        lines.append(f"rank {a.rank}: {a.host} GPU {a.gpu} -> {b.host} GPU {b.gpu}")
    if len(moved) > limit:
        lines.append(f"... and {len(moved) - limit} more ranks moved")
    if not moved:
        lines.append("no rank moved")
    return lines
