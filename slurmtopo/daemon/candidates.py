"""The planner's candidate nodes, kept up to date by the daemon's claims.

:func:`slurmtopo.placement.common.candidates` is one pass over the whole
inventory (25-40 ms at 12,500 nodes in CPython). The daemon plans hundreds
of jobs on one state that changes only where it claims GPUs, so it builds
the candidates once per filter (exclusive, GPUs per node) and pass, and
after each claim rewrites only the claimed nodes' entries
(:func:`refreshed`). The result holds the same nodes with the same free
GPUs as a fresh scan of the new state; only the numbering of signatures
(distinct hardware and free-GPU sets) can differ, as it does for the
planner's own :meth:`~slurmtopo.placement.common.Candidates.minus`.
Pure: no Slurm, no files.
"""
from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from slurmtopo.inventory.model import Node, NodeState
from slurmtopo.placement.common import (REFUSALS, Candidates, node_refusal, signature_of,
                                        too_small)

#: (exclusive, --gpus-per-node, fewest free GPUs a node needs)
Filter = Tuple[bool, Optional[int], Optional[int]]


def filter_of(req) -> Filter:
    g = req.gpus_per_node
    return (bool(req.exclusive), g, None if g is None else min(g, req.layout.world))


def classify(node: Node, st: Optional[NodeState], flt: Filter) -> Tuple[str, Tuple[int, ...]]:
    """("ok", free GPUs) for a candidate, else (the Candidates count it
    adds to, ()): the per-node rule of ``candidates()``, one node."""
    exclusive, g, min_free = flt
    hw = node.hardware
    why = node_refusal(st, hw, exclusive)
    if why is not None:
        return why, ()
    busy = st.busy_gpus if st is not None else ()
    free = tuple(x.index for x in hw.gpus if not busy or x.index not in busy)
    if not free:
        return "full", ()
    if too_small(len(free), hw, g, min_free):
        return "small", ()
    return "ok", free


def refreshed(cand: Candidates, changed: Iterable[int], nodes: List[Node],
              old: Callable[[int], Optional[NodeState]],
              new: Callable[[int], Optional[NodeState]], flt: Filter,
              node_pod: List[int]) -> Candidates:
    """``cand`` once the nodes at inventory indices ``changed`` went from
    state ``old(i)`` to ``new(i)``: a new object (the old one may still be
    in use by a plan), sharing what did not change."""
    changed = sorted(set(changed))
    if not changed:
        return cand
    touched = set(changed)
    sigs = list(cand.sigs)
    index = {(id(hw), free): s for s, (hw, free) in enumerate(sigs)}
    sig_of = dict(cand.sig_of)
    pod_sigs = {p: d for p, d in cand.pod_sigs.items()}
    pod_free = dict(cand.pod_free)
    counts: Dict[str, int] = {k: getattr(cand, k) for k in REFUSALS}
    total = cand.free_gpus
    copied = set()

    def pod_counts(p: int) -> Dict[int, int]:
        if p not in copied or p not in pod_sigs:
            pod_sigs[p] = dict(pod_sigs.get(p, {}))
            copied.add(p)
        return pod_sigs[p]

    for i in changed:  # take out what the node added before
        s = sig_of.pop(i, None)
        if s is None:
            what, _ = classify(nodes[i], old(i), flt)
            counts[what] -= 1
            continue
        p, n = node_pod[i], len(sigs[s][1])
        _uncount(pod_sigs, pod_free, pod_counts(p), s, p, n)
        total -= n
    kept = [rec for rec in cand.nodes if rec[0] not in touched]
    for i in changed:  # and put in what it adds now
        node = nodes[i]
        what, free = classify(node, new(i), flt)
        if what != "ok":
            counts[what] += 1
            continue
        s = signature_of(index, sigs, node.hardware, free)
        free = sigs[s][1]
        sig_of[i] = s
        p = node_pod[i]
        d = pod_counts(p)
        d[s] = d.get(s, 0) + 1
        pod_free[p] = pod_free.get(p, 0) + len(free)
        total += len(free)
        bisect.insort(kept, (i, node, free), key=lambda rec: rec[0])
    return replace(cand, nodes=kept, sigs=sigs, sig_of=sig_of, pod_sigs=pod_sigs,
                   pod_free=pod_free, free_gpus=total, **counts)


def _uncount(pod_sigs: Dict[int, Dict[int, int]], pod_free: Dict[int, int],
             d: Dict[int, int], s: int, p: int, n: int) -> None:
    """One node of signature ``s`` (``n`` free GPUs) less in pod ``p``
    (``d``: the pod's own, already copied, signature counts)."""
    d[s] -= 1
    if not d[s]:
        del d[s]
    pod_free[p] -= n
    if not d:
        del pod_sigs[p]
        pod_free.pop(p, None)


def without(cand: Candidates, drop: Iterable[int], node_pod: List[int]) -> Candidates:
    """``cand`` less the nodes at inventory indices ``drop`` (counted as
    excluded, as ``--exclude`` would)."""
    drop = {i for i in drop if i in cand.sig_of}
    if not drop:
        return cand
    pod_sigs = dict(cand.pod_sigs)
    pod_free = dict(cand.pod_free)
    total = cand.free_gpus
    for i in drop:
        s, p = cand.sig_of[i], node_pod[i]
        n = len(cand.sigs[s][1])
        pod_sigs[p] = dict(pod_sigs[p])
        _uncount(pod_sigs, pod_free, pod_sigs[p], s, p, n)
        total -= n
    return replace(cand, nodes=[rec for rec in cand.nodes if rec[0] not in drop],
                   sig_of={i: s for i, s in cand.sig_of.items() if i not in drop},
                   pod_sigs=pod_sigs, pod_free=pod_free, free_gpus=total,
                   excluded=cand.excluded + len(drop))
