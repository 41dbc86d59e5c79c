"""Baselines for the benchmarks: what a job gets without slurmtopo.

All three are gang placements over the same free GPUs as :func:`plan`
(busy GPUs, drained nodes, ``--exclusive``, ``--gpus-per-node``,
``--nodelist``/``--exclude`` respected) but ignore ``require``/``prefer``.

:func:`naive_plan`
    Slurm's default: free nodes in hostname (inventory) order, block
    distribution (ranks fill a node before the next), GPUs in index order.
:func:`leaf_constrained_plan`
    the same inside one leaf switch, like ``--switches=1``: the best-fit
    leaf (fewest free GPUs that suffice); when no leaf can hold the job,
    the fewest leaves, largest first (Slurm's fallback after the wait).
    No awareness of NVLink islands or NUMA inside the nodes.
:func:`random_plan`
    a random feasible placement (seeded): random free GPUs, random ranks.

The first two are simplified stand-ins for Slurm that the benchmarks and
the planner's safety net have always compared with. Slurm's actual choice
(best fit over runs of nodes or over its switch tree, whole free nodes
first for ``--gpus=N``, GPUs by socket; checked against Slurm's source and
a real slurmctld) is :func:`slurm_plan`
(:mod:`slurmtopo.placement.slurm_select`), what ``slurmtopo simulate``
replays a trace with. It is often better than the stand-ins.
"""
from __future__ import annotations

import random
from typing import Dict, List, Optional, Tuple

from slurmtopo.errors import PlacementError
from slurmtopo.inventory.model import ClusterState, Inventory, Node, Placement
from slurmtopo.inventory.topology import network_view
from slurmtopo.job.request import JobRequest
from slurmtopo.placement.common import Candidates, build_placement, candidates, not_enough_gpus
from slurmtopo.placement.slurm_select import BLOCK, TREE, choose_nodes, leaves_used


def _check(req: JobRequest, cand: Candidates) -> None:
    err = not_enough_gpus(req, cand)
    if err is not None:
        raise err


def _take(req: JobRequest, free: Tuple[int, ...], left: int) -> int:
    g = req.gpus_per_node
    k = len(free) if g is None else min(g, len(free))
    return min(k, left)


def _block_fill(inv: Inventory, req: JobRequest,
                nodes: List[Tuple[int, Node, Tuple[int, ...]]], notes, groups=None) -> Placement:
    world = req.layout.world
    assign: List[Tuple[str, int]] = []
    for _, node, free in nodes:
        left = world - len(assign)
        if left <= 0:
            break
        k = _take(req, free, left)
        assign.extend((node.name, g) for g in free[:k])
    if len(assign) < world:  # pragma: no cover - _check ran before
        raise PlacementError(f"needs {world} GPUs; only {len(assign)} could be placed")
    return build_placement(inv, req, assign, notes, groups)


def naive_from(inv: Inventory, req: JobRequest, cand: Candidates, groups=None) -> Placement:
    """:func:`naive_plan` over already computed candidates."""
    _check(req, cand)
    return _block_fill(inv, req, cand.nodes,
                       ["naive: nodes in hostname order, ranks in block order, GPUs in "
                        "index order"], groups)


def naive_plan(inv: Inventory, state: Optional[ClusterState], req: JobRequest) -> Placement:
    """Slurm's default placement (see the module doc)."""
    return naive_from(inv, req, candidates(inv, state, req))


def leaf_constrained_plan(inv: Inventory, state: Optional[ClusterState],
                          req: JobRequest) -> Placement:
    """Slurm with ``--switches=1`` (see the module doc)."""
    cand = candidates(inv, state, req)
    _check(req, cand)
    world = req.layout.world
    view = network_view(inv.fabric)
    leaves: Dict[str, List[Tuple[int, Node, Tuple[int, ...]]]] = {}
    order: List[str] = []
    for rec in cand.nodes:
        leaf = "" if view.flat else (view.leaf.get(rec[1].name) or f"(no leaf) {rec[1].name}")
        if leaf not in leaves:
            leaves[leaf] = []
            order.append(leaf)
        leaves[leaf].append(rec)

    def usable(recs) -> int:
        g = req.gpus_per_node
        return sum(len(f) if g is None else min(g, len(f)) for _, _, f in recs)

    cap = {leaf: usable(leaves[leaf]) for leaf in order}
    fits = [leaf for leaf in order if cap[leaf] >= world]
    if fits:
        leaf = min(fits, key=lambda x: (cap[x], order.index(x)))
        notes = [f"leaf-constrained: all ranks under {leaf or 'the one network'} "
                 f"(--switches=1), nodes in hostname order"]
        return _block_fill(inv, req, leaves[leaf], notes)
    chosen: List[str] = []
    total = 0
    for leaf in sorted(order, key=lambda x: (-cap[x], order.index(x))):
        chosen.append(leaf)
        total += cap[leaf]
        if total >= world:
            break
    chosen.sort(key=order.index)
    nodes = [rec for leaf in chosen for rec in leaves[leaf]]
    notes = [f"leaf-constrained: no leaf holds {world} free GPUs; {len(chosen)} leaves used "
             f"(largest first), as Slurm does after --switches' wait"]
    return _block_fill(inv, req, nodes, notes)


def slurm_from(inv: Inventory, req: JobRequest, cand: Candidates, topology: str = TREE,
               groups=None, segment: Optional[int] = None) -> Placement:
    """:func:`slurm_plan` over already computed candidates (``segment``:
    the job's ``--segment``, with topology/block)."""
    _check(req, cand)
    world = req.layout.world
    chosen = choose_nodes(inv, cand.nodes, world, req.gpus_per_node, topology, segment)
    assign: List[Tuple[str, int]] = []
    for (_, node, _free), gpus in chosen:
        take = min(len(gpus), world - len(assign))
        assign.extend((node.name, g) for g in gpus[:take])
    if len(assign) < world:  # pragma: no cover - choose_nodes raised before
        raise PlacementError(f"needs {world} GPUs; only {len(assign)} could be placed")
    if topology == BLOCK and inv.fabric.blocks:
        note = "slurm: Slurm's choice over its blocks (topology/block" + \
            (f", --segment={segment})" if segment else ")")
    elif topology == TREE and inv.fabric.switches:
        n = leaves_used(inv, [h for h, _ in assign])
        note = f"slurm: Slurm's choice over its switch tree ({n} leaf switch{'es' * (n != 1)})"
    else:
        note = "slurm: Slurm's choice without topology (best fit over runs of nodes)"
    return build_placement(inv, req, assign, [note + ", ranks in block order"], groups)


def slurm_plan(inv: Inventory, state: Optional[ClusterState], req: JobRequest,
               topology: str = TREE) -> Placement:
    """Slurm's own placement (see the module doc): ``tree`` as with
    topology/tree (every job, unless ``TopologyParam=TopoOptional``),
    ``flat`` without a topology plugin. Raises PlacementError when Slurm
    would not start the job now."""
    return slurm_from(inv, req, candidates(inv, state, req), topology)


def random_plan(inv: Inventory, state: Optional[ClusterState], req: JobRequest,
                seed: int = 0) -> Placement:
    """A random feasible placement (see the module doc)."""
    cand = candidates(inv, state, req)
    _check(req, cand)
    world = req.layout.world
    rng = random.Random(seed)
    g = req.gpus_per_node
    if g is None:
        slots = [(node.name, gpu) for _, node, free in cand.nodes for gpu in free]
        chosen = rng.sample(slots, world)
    else:
        per = min(g, world)
        need = -(-world // per)
        nodes = rng.sample(cand.nodes, need)
        chosen = []
        for _, node, free in nodes:
            k = min(per, world - len(chosen))
            chosen.extend((node.name, gpu) for gpu in rng.sample(list(free), k))
        rng.shuffle(chosen)
    return build_placement(inv, req, chosen, [f"random placement (seed {seed})"])
