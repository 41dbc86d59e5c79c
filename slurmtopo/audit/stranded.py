"""Stranded GPUs by leaf and by NVLink domain, on a cluster state.

A free GPU is stranded when it is in no fully free NVLink domain and no
fully free leaf (the rule, and its one home, is
:class:`slurmtopo.simulate.freestate.FreeState`; ``slurmtopo simulate``
averages the same count over a replay). A GPU a job cannot use (a drained
or down node, a node held whole) counts as busy here, not free.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from slurmtopo.inventory.model import ClusterState, Inventory
from slurmtopo.simulate.freestate import FreeState


@dataclass(frozen=True)
class Group:
    """One leaf or one NVLink domain: its GPUs, the free ones, the stranded ones."""

    name: str
    gpus: int
    free: int
    stranded: int

    def as_dict(self) -> Dict[str, object]:
        return {"name": self.name, "gpus": self.gpus, "free": self.free,
                "stranded": self.stranded}


@dataclass(frozen=True)
class Stranded:
    gpus: int
    free: int
    stranded: int
    #: per leaf switch, in inventory order (empty without a switch tree)
    by_leaf: Tuple[Group, ...]
    #: per multi-node NVLink domain (empty where nodes have none)
    by_domain: Tuple[Group, ...]
    #: stranded GPUs in nodes' own NVLink islands (nodes without a multi-node domain)
    in_islands: int

    def as_dict(self) -> Dict[str, object]:
        return {"gpus": self.gpus, "free": self.free, "stranded": self.stranded,
                "in_node_islands": self.in_islands,
                "by_leaf": [g.as_dict() for g in self.by_leaf],
                "by_domain": [g.as_dict() for g in self.by_domain]}


def free_state(inv: Inventory, state: ClusterState):
    """A :class:`~slurmtopo.simulate.freestate.FreeState` of ``state``:
    every GPU a new job could not take is busy."""
    fs = FreeState(inv)
    for name, node in inv.nodes.items():
        if name not in state.nodes:
            continue
        free = set(state.free_gpus(node))
        busy = [g.index for g in node.gpus if g.index not in free]
        if busy:
            fs.allocate({name: busy})
    return fs


def stranded_of(fs) -> Stranded:
    """The stranded GPUs of a FreeState, summed by leaf and by domain."""
    leaves: Dict[str, List[int]] = {}
    domains: Dict[str, List[int]] = {}
    islands = 0
    for name, key, leaf, free, stranded in fs.stranded_pieces():
        size = len(fs.inv.nodes[name].gpus) if key[0] == "domain" else len(key[2])
        if leaf is not None:
            acc = leaves.setdefault(leaf, [0, 0, 0])
            acc[0] += size
            acc[1] += free
            acc[2] += stranded
        if key[0] == "domain":
            acc = domains.setdefault(key[1], [0, 0, 0])
            acc[0] += size
            acc[1] += free
            acc[2] += stranded
        else:
            islands += stranded
    total_free = fs.total_gpus - fs.busy_gpus
    return Stranded(gpus=fs.total_gpus, free=total_free, stranded=fs.stranded,
                    by_leaf=tuple(Group(k, *v) for k, v in leaves.items()),
                    by_domain=tuple(Group(k, *v) for k, v in domains.items()),
                    in_islands=islands)


def stranded(inv: Inventory, state: ClusterState) -> Stranded:
    """The stranded GPUs of ``state`` (see the module doc)."""
    return stranded_of(free_state(inv, state))
