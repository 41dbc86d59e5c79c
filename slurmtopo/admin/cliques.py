"""Trays whose NVLink clique is not their rack's, left out of its block.

NVML's fabric info gives every GPU of a multi-node NVLink system a cluster
UUID (the NVLink fabric: one GB200/GB300 NVL72 rack) and a clique id (the
NVLink partition inside it that the fabric manager put the GPU in). GPUs of
different cliques do not talk over NVLink, so a Slurm block that holds a
tray of another clique promises a job NVLink that the tray does not have.
Two cases, both decided here and nowhere else (issue 25):

* **racks the admin declared** (blocks of a fabric document): the rack's
  clique is the one most of its trays report (on a tie, the one its first
  tray in the block's order reports); a tray reporting another is a *stray*;
* **racks from the reports alone** (the cluster UUID is the rack): a tray
  alone in its clique while another clique of the same UUID holds several
  trays is a stray. A partition of several trays is a sub-domain, as
  topograph lays it out (:mod:`slurmtopo.admin.block_domains`); a clique
  of one tray shares NVLink with no other tray, so leaving it out of the
  rack's blocks takes nothing from a job.

A stray is flagged (one note naming it, its clique and its rack's) and left
out of every block, like a tray whose fabric is not completed. Pure.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Dict, List, Sequence, Tuple

from slurmtopo.hostlist import natural_key
from slurmtopo.model import Block, Inventory, NvlinkDomain


@dataclass(frozen=True)
class Stray:
    """A tray whose clique differs from its rack's."""

    node: str
    rack: str
    clique: int
    rack_clique: int


def strays_in_blocks(inv: Inventory, blocks: Sequence[Block]) -> List[Stray]:
    """Strays of racks the admin declared (``blocks``): trays with a
    domain whose clique (or cluster UUID) differs from the block's."""
    out: List[Stray] = []
    for b in blocks:
        doms: List[Tuple[str, NvlinkDomain]] = [
            (n, inv.nodes[n].nvlink_domain) for n in b.nodes
            if n in inv.nodes and inv.nodes[n].nvlink_domain is not None]
        if len(doms) < 2:
            continue
        counts = Counter(d for _, d in doms)
        top = max(counts.values())
        rack = next(d for _, d in doms if counts[d] == top)  # ties: the first tray's
        out += [Stray(n, b.name, d.clique_id, rack.clique_id) for n, d in doms if d != rack]
    return out


def strays_in_reports(inv: Inventory) -> List[Stray]:
    """Strays where the cluster UUID is the rack: trays alone in their
    clique while another clique of the UUID holds several trays."""
    members: Dict[str, Dict[int, List[str]]] = {}
    for n in inv:
        d = n.nvlink_domain
        if d is not None:
            members.setdefault(d.cluster_uuid, {}).setdefault(d.clique_id, []).append(n.name)
    out: List[Stray] = []
    for uuid, cliques in members.items():
        if len(cliques) < 2:
            continue
        top = max(len(v) for v in cliques.values())
        if top < 2:
            continue
        rack = min(c for c, v in cliques.items() if len(v) == top)
        out += [Stray(v[0], uuid, c, rack) for c, v in cliques.items() if len(v) == 1]
    return sorted(out, key=lambda s: natural_key(s.node))


def without_strays(inv: Inventory, strays: Sequence[Stray]) -> Inventory:
    """``inv`` with the strays outside any NVLink domain (so no block made
    from the domains holds them)."""
    if not strays:
        return inv
    gone = {s.node for s in strays}
    nodes = {k: (replace(n, nvlink_domain=None) if k in gone else n)
             for k, n in inv.nodes.items()}
    return replace(inv, nodes=nodes)


def drop_from_blocks(blocks: Sequence[Block], strays: Sequence[Stray]) -> Tuple[Block, ...]:
    gone = {s.node for s in strays}
    return tuple(replace(b, nodes=tuple(n for n in b.nodes if n not in gone)) for b in blocks)


def stray_note(strays: Sequence[Stray]) -> str:
    shown = ", ".join(f"{s.node} (clique {s.clique}, rack {s.rack}: {s.rack_clique})"
                      for s in strays[:8])
    return (f"{len(strays)} tray(s) left out of NVLink blocks, their NVLink clique not their "
            f"rack's: {shown}{' ...' if len(strays) > 8 else ''}")
