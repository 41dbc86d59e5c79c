"""How widely a set of nodes is spread: leaf switches, topology/block
blocks and NVLink domains.

Each count is the one the rest of slurmtopo uses: leaves as ``--switches``
counts them (:func:`slurmtopo.placement.slurm_select.leaves_used`),
blocks as the inventory's ``fabric.blocks`` list them, and NVLink domains
as the planner sees them: a node's multi-node NVLink domain (a GB200 NVL72
rack) when it has one, else the node itself (NVLink never leaves it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence

from slurmtopo.inventory.model import Inventory
from slurmtopo.placement.slurm_select import leaves_used


@dataclass(frozen=True)
class Spans:
    """What ``hosts`` span. ``blocks`` is None when the inventory has no
    blocks; ``leaves`` is None when it has no switch tree."""

    nodes: int
    leaves: Optional[int]
    blocks: Optional[int]
    domains: int

    def as_dict(self) -> Dict[str, Optional[int]]:
        return {"nodes": self.nodes, "leaves": self.leaves, "blocks": self.blocks,
                "domains": self.domains}


def _block_of(inv: Inventory) -> Dict[str, str]:
    def build() -> Dict[str, str]:
        out: Dict[str, str] = {}
        for b in inv.fabric.blocks:
            for n in b.nodes:
                out.setdefault(n, b.name)
        return out

    return inv.derive("audit.block_of", build)


def domain_of(inv: Inventory, host: str) -> str:
    """The NVLink domain of ``host``: its multi-node domain's key, else its name."""
    dom = inv.nodes[host].nvlink_domain
    return dom.key if dom is not None else host


def spans(inv: Inventory, hosts: Sequence[str]) -> Spans:
    """The spans of ``hosts`` (see the module doc)."""
    hosts = list(dict.fromkeys(hosts))
    leaves = leaves_used(inv, hosts) if inv.fabric.switches else None
    blocks = None
    if inv.fabric.blocks:
        where = _block_of(inv)
        blocks = len({where[h] for h in hosts if h in where})
    return Spans(nodes=len(hosts), leaves=leaves, blocks=blocks,
                 domains=len({domain_of(inv, h) for h in hosts}))


def fewest(a: Spans, b: Spans) -> Spans:
    """Each count the smaller of the two (None stays None)."""
    def low(x: Optional[int], y: Optional[int]) -> Optional[int]:
        return None if x is None or y is None else min(x, y)

    return Spans(nodes=min(a.nodes, b.nodes), leaves=low(a.leaves, b.leaves),
                 blocks=low(a.blocks, b.blocks), domains=min(a.domains, b.domains))
