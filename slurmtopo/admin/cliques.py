"""Trays whose NVLink clique is not their rack's, left out of its block.

NVML's fabric info gives every GPU of a multi-node NVLink system a cluster
UUID (the NVLink fabric: one GB200/GB300 NVL72 rack) and a clique id (the
NVLink partition inside it that the fabric manager put the GPU in). GPUs of
different cliques do not talk over NVLink, so a Slurm block that holds a
tray of another clique promises a job NVLink that the tray does not have.
A rack is one the admin declared (a block of a fabric document): its
clique is the one most of its trays report (on a tie, the one its first
tray in the block's order reports); a tray reporting another is a *stray*.
With the node reports alone there is no rack to differ from: the cluster
UUID is the NVLink domain and each clique in it a sub-domain, laid out as
topograph 1.0 lays them out (:mod:`slurmtopo.admin.block_domains`; a clique
of one tray is a sub-domain of one tray, so the same input gives the same
``BlockSizes`` as topograph).

A stray is flagged (one note naming it, its clique and its rack's) and left
out of every block, like a tray whose fabric is not completed. Pure.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import List, Sequence, Tuple

from slurmtopo.inventory.model import Block, Inventory, NvlinkDomain


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


def drop_from_blocks(blocks: Sequence[Block], strays: Sequence[Stray]) -> Tuple[Block, ...]:
    gone = {s.node for s in strays}
    return tuple(replace(b, nodes=tuple(n for n in b.nodes if n not in gone)) for b in blocks)


def stray_note(strays: Sequence[Stray]) -> str:
    shown = ", ".join(f"{s.node} (clique {s.clique}, rack {s.rack}: {s.rack_clique})"
                      for s in strays[:8])
    return (f"{len(strays)} tray(s) left out of NVLink blocks, their NVLink clique not their "
            f"rack's: {shown}{' ...' if len(strays) > 8 else ''}")
