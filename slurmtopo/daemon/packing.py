"""``--pack domains``: small jobs packed into racks already in use, so that
whole multi-node NVLink domains (GB200 NVL72 racks) stay free for the jobs
that need one.

Without it the daemon takes the planner's placement or, among up to
``alternatives`` placements on other nodes, the one leaving the best free
space by nodes and leaves (:func:`~slurmtopo.daemon.work.free_space_key`).
A one-tray job may then land in an idle rack and cut it: a later job of
18 trays finds no rack it can have whole, though 18 trays are free in
pieces. With this policy, for a job that one rack can hold:

* one more placement is weighed: the job planned inside the partly used
  rack with the fewest free trays that still holds it by count (best fit
  by rack);
* the placements are ranked first by the racks they keep whole free, then
  by the racks they leave partly free (fewer is better), then as before.

It costs one more plan for such a job, and changes nothing on clusters
without multi-node NVLink domains. Pure: the scheduler's working state
(:class:`~slurmtopo.daemon.work.Work`) in, requests and keys out.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

DOMAINS = "domains"
#: values of the daemon's ``pack`` setting ("" : off)
PACK_MODES = ("", DOMAINS)


def domains_of(inv) -> Dict[str, List[str]]:
    """domain key -> its nodes (inventory order), multi-node domains only."""
    out: Dict[str, List[str]] = {}
    for name, node in inv.nodes.items():
        if node.nvlink_domain is not None:
            out.setdefault(node.nvlink_domain.key, []).append(name)
    return out


def _free_nodes(work, names: Sequence[str], per_node: int, take=None) -> int:
    """Nodes of ``names`` with at least ``per_node`` free GPUs (after
    ``take``: node -> GPUs a placement would take)."""
    n = 0
    for h in names:
        free = set(work.free_gpus(h))
        if take is not None:
            free -= set(take.get(h, ()))
        if len(free) >= per_node:
            n += 1
    return n


def packed_request(work, inv, req, world: int, gpn: Optional[int], domains=None):
    """``req`` confined to the partly used domain with the fewest nodes free
    that still holds it by count (None: no such domain, the job needs more
    than one, or the cluster has none)."""
    domains = domains if domains is not None else domains_of(inv)
    if not domains:
        return None
    per = gpn or 1
    need = -(-world // per) if gpn else 1
    best: Optional[Tuple[int, int, str]] = None
    for i, (key, names) in enumerate(domains.items()):
        whole = sum(1 for h in names if len(work.free_gpus(h)) == inv.nodes[h].hardware.gpu_count)
        if whole == len(names):
            continue  # idle: the policy keeps it whole
        fit = _free_nodes(work, names, per)
        gpus = sum(len(work.free_gpus(h)) for h in names)
        if fit < need or gpus < world:
            continue
        if best is None or (fit, i) < best[:2]:
            best = (fit, i, key)
    if best is None:
        return None
    inside = set(domains[best[2]])
    outside = tuple(sorted(set(inv.nodes) - inside | set(req.exclude)))
    return replace(req, exclude=outside)


def domain_key(work, inv, touched: Sequence[str], take: Mapping[str, Set[int]],
               domains=None) -> Tuple[int, int]:
    """(domains kept wholly free, minus domains left partly free) among the
    domains of ``touched`` after ``take``: bigger is better."""
    domains = domains if domains is not None else domains_of(inv)
    keys = {inv.nodes[h].nvlink_domain.key for h in touched
            if inv.nodes[h].nvlink_domain is not None}
    whole = partly = 0
    for key in sorted(keys):
        names = domains[key]
        free = sum(1 for h in names
                   if len(set(work.free_gpus(h)) - set(take.get(h, ())))
                   == inv.nodes[h].hardware.gpu_count)
        if free == len(names):
            whole += 1
        elif free:
            partly += 1
    return whole, -partly
