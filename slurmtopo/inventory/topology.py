"""Derived topology queries over the inventory model (pure, cached).

Answers the questions the planner and the cost model ask again and again:
which GPUs of a node form an NVLink island, what is the slowest hop a ring
over some GPUs must take, and how far apart two hosts are in the switch
tree. Results are cached per :class:`~slurmtopo.inventory.model.Hardware` object (all
nodes of a type share one) and per :class:`~slurmtopo.inventory.model.Fabric`.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Fabric, Hardware, Inventory, Node


def link_classes(hw: Hardware) -> Tuple[Tuple[LinkClass, ...], ...]:
    """The link matrix as LinkClass values (parsed once per hardware, kept
    in its derived tables)."""
    return hw.derived.get("topology.link_classes", lambda: _link_classes(hw))


def _link_classes(hw: Hardware) -> Tuple[Tuple[LinkClass, ...], ...]:
    return tuple(tuple(hw.link(a, b) for b in range(hw.gpu_count)) for a in range(hw.gpu_count))


def nvlink_islands(hw: Hardware) -> Tuple[Tuple[int, ...], ...]:
    """Connected components of the NVLink graph, as sorted GPU index tuples.

    An NVSwitch node is one island; NVLink-bridged pairs are islands of two;
    a PCIe-only node has one island per GPU.
    """
    return hw.derived.get("topology.nvlink_islands", lambda: _nvlink_islands(hw))


def _nvlink_islands(hw: Hardware) -> Tuple[Tuple[int, ...], ...]:
    lc = link_classes(hw)
    n = hw.gpu_count
    seen = [False] * n
    out: List[Tuple[int, ...]] = []
    for start in range(n):
        if seen[start]:
            continue
        stack, comp = [start], []
        seen[start] = True
        while stack:
            a = stack.pop()
            comp.append(a)
            for b in range(n):
                if not seen[b] and lc[a][b] == LinkClass.NVLINK:
                    seen[b] = True
                    stack.append(b)
        out.append(tuple(sorted(comp)))
    return tuple(out)


def _has_ring(gpus: Sequence[int], ok) -> bool:
    """Is there a cycle through all ``gpus`` using only pairs with ok(a, b)?"""
    n = len(gpus)
    if n <= 1:
        return True
    if n == 2:
        return ok(gpus[0], gpus[1])
    first = gpus[0]
    rest = list(gpus[1:])
    # depth-first search for a Hamiltonian cycle; n is at most a node's GPU
    # count (<= 16 in practice), with pruning it is instant
    path = [first]
    used = [False] * len(rest)

    def dfs() -> bool:
        if len(path) == n:
            return ok(path[-1], first)
        last = path[-1]
        for i, g in enumerate(rest):
            if not used[i] and ok(last, g):
                used[i] = True
                path.append(g)
                if dfs():
                    return True
                path.pop()
                used[i] = False
        return False

    return dfs()


def ring_class(hw: Hardware, gpus: Tuple[int, ...]) -> LinkClass:
    """The slowest hop of the best ring over ``gpus`` inside one node.

    NCCL builds rings over the fastest links it can find, so on a DGX-1
    cube-mesh eight GPUs still all-reduce over NVLink although some pairs
    have no direct link. We find the smallest class c such that a ring over
    the GPUs exists using only hops of class <= c. Remembered per GPU set
    in the hardware's derived tables (a node has at most 2**n sets).
    """
    known: Dict[Tuple[int, ...], LinkClass] = hw.derived.get("topology.ring_class", dict)
    hit = known.get(gpus)
    if hit is None:
        hit = known[gpus] = _ring_class(hw, gpus)
    return hit


def _ring_class(hw: Hardware, gpus: Tuple[int, ...]) -> LinkClass:
    if len(gpus) <= 1:
        return LinkClass.SELF
    lc = link_classes(hw)
    pairs = {lc[a][b] for a, b in itertools.combinations(gpus, 2)}
    if len(gpus) > 16:
        return max(pairs)
    for c in sorted(pairs):
        if _has_ring(list(gpus), lambda a, b, c=c: lc[a][b] <= c):
            return c
    return max(pairs)


@dataclass(frozen=True)
class NetworkView:
    """The switch tree as lookups: each host's ancestors and their levels."""

    #: host -> {switch name: level} of every switch above it
    ancestors: Dict[str, Dict[str, int]]
    #: host -> leaf switch name (the first leaf that lists it)
    leaf: Dict[str, str]
    #: switch -> level (0 = leaf)
    levels: Dict[str, int]
    flat: bool  # no switches described: every host on one virtual leaf

    def distance(self, a: str, b: str) -> LinkClass:
        """Network class between two different hosts."""
        if self.flat:
            return LinkClass.NET_LEAF
        la, lb = self.leaf.get(a), self.leaf.get(b)
        if la is not None and la == lb:
            return LinkClass.NET_LEAF
        anc_a, anc_b = self.ancestors.get(a), self.ancestors.get(b)
        if not anc_a or not anc_b:
            return LinkClass.NET_FAR
        common = [lvl for sw, lvl in anc_a.items() if sw in anc_b]
        return LinkClass.network(min(common)) if common else LinkClass.NET_FAR

    def switch_at(self, host: str, level: int) -> Optional[str]:
        """The (first, by name) switch above ``host`` at ``level``."""
        names = sorted(sw for sw, lvl in self.ancestors.get(host, {}).items() if lvl == level)
        return names[0] if names else None


def switch_levels(fabric: Fabric) -> Dict[str, int]:
    """Level of every switch: explicit levels are kept; otherwise a switch
    with hosts is a leaf (0) and a parent is one above its highest child."""
    children = {s.name: s.switches for s in fabric.switches}
    memo: Dict[str, int] = {}

    def level(name: str, stack: FrozenSet[str] = frozenset()) -> int:
        if name in memo:
            return memo[name]
        if name in stack:
            raise ValueError(f"switch loop through {name!r}")
        kids = children.get(name, ())
        lvl = 0 if not kids else 1 + max(level(k, stack | {name}) for k in kids)
        memo[name] = lvl
        return lvl

    for s in fabric.switches:
        level(s.name)
    return memo


def network_view(fabric: Fabric) -> NetworkView:
    """The switch tree as the planner and the cost model read it, derived
    once per fabric (kept in its derived tables)."""
    return fabric.derived.get("topology.network_view", lambda: _network_view(fabric))


def _network_view(fabric: Fabric) -> NetworkView:
    levels = switch_levels(fabric)
    parents: Dict[str, List[str]] = {}
    for s in fabric.switches:
        for child in s.switches:
            parents.setdefault(child, []).append(s.name)
    # ancestors of each switch, including itself
    sw_anc: Dict[str, Dict[str, int]] = {}

    def anc(sw: str) -> Dict[str, int]:
        if sw not in sw_anc:
            out = {sw: levels.get(sw, 0)}
            for p in parents.get(sw, ()):
                out.update(anc(p))
            sw_anc[sw] = out
        return sw_anc[sw]

    # a host under one switch shares that switch's table (read only, like
    # every table of the view): no copy per host of a 12,500-node fabric
    ancestors: Dict[str, Dict[str, int]] = {}
    leaf: Dict[str, str] = {}
    for s in fabric.switches:
        up = anc(s.name)
        for host in s.nodes:
            had = ancestors.get(host)
            if had is None:
                leaf[host] = s.name
                ancestors[host] = up
            else:  # under several switches: the union, first switch first
                ancestors[host] = {**had, **up}
    return NetworkView(ancestors=ancestors, leaf=leaf, levels=levels, flat=not fabric.switches)


def host_link(inv: Inventory, a: Node, b: Node) -> LinkClass:
    """Class of the link between GPUs on two different hosts."""
    if a.name == b.name:
        raise ValueError("host_link is for two different hosts")
    if a.nvlink_domain is not None and a.nvlink_domain == b.nvlink_domain:
        return LinkClass.NVLINK_DOMAIN
    return network_view(inv.fabric).distance(a.name, b.name)


def block_of(inv: Inventory) -> Dict[str, str]:
    """host -> block name, from explicit blocks and NVLink domains."""
    out: Dict[str, str] = {}
    for blk in inv.fabric.blocks:
        for h in blk.nodes:
            out.setdefault(h, blk.name)
    return out


def nvlink_domains(nodes: Iterable[Node]) -> Dict[str, List[str]]:
    """domain key -> host names (in input order), for multi-node NVLink."""
    out: Dict[str, List[str]] = {}
    for n in nodes:
        if n.nvlink_domain is not None:
            out.setdefault(n.nvlink_domain.key, []).append(n.name)
    return out


def host_leaves(fabric) -> Dict[str, Tuple[str, ...]]:
    """host -> the switches that list it, kept with the fabric (every
    placement priced asks: a pass over 12,500 hosts' switches each time
    was a tenth of a small job's plan)."""
    def build() -> Dict[str, Tuple[str, ...]]:
        out: Dict[str, List[str]] = {}
        for s in fabric.switches:
            for h in s.nodes:
                out.setdefault(h, []).append(s.name)
        return {h: tuple(v) for h, v in out.items()}

    return fabric.derived.get("topology.host_leaves", build)


def rail_optimised(inv: Inventory, hosts: Iterable[str]) -> Optional[bool]:
    """Is the network under ``hosts`` rail-optimised, as the inventory's
    NIC and leaf wiring says? True when every host with two or more
    compute NICs sits under as many leaf switches as it has compute NICs
    (a leaf per rail) and any two such hosts are under the same leaves or
    under none in common (the hosts of a scalable unit share its rail
    leaves). None when the inventory cannot tell: no fabric, hosts with
    one compute NIC, a host under one leaf (its NICs on one switch, or a
    scalable unit's rail leaves merged into the one leaf Slurm sees:
    ``admin/switch_tree.py`` writes those), or leaves shared irregularly.
    It never answers False: nothing in the inventory tells a leaf that
    holds all of a host's NICs from a merged scalable unit. Feeds
    ``NCCL_CROSS_NIC`` (``rankmap.nccl_env``)."""
    if not inv.fabric.switches:
        return None
    leaves = host_leaves(inv.fabric)
    seen: Dict[str, FrozenSet[str]] = {}  # leaf -> the leaf set of its hosts
    any_multi = False
    for h in dict.fromkeys(hosts):
        node = inv.nodes.get(h)
        if node is None:
            return None
        nics = {n.name for n in node.hardware.compute_nics()}
        if len(nics) < 2:
            continue
        mine = frozenset(leaves.get(h, ()))
        if len(mine) != len(nics) or len(mine) < 2:
            return None
        for leaf in mine:
            if seen.setdefault(leaf, mine) != mine:
                return None
        any_multi = True
    return True if any_multi else None


def rail_of(slot) -> Optional[str]:
    """A rank's rail: its nearest compute NIC, by name (NIC names are
    taken to name the same rail on every host: ``mlx5_0`` is rail 0), or
    None when the slot names no NIC."""
    return slot.nics[0] if slot.nics else None


def group_rails(slots: Sequence, ranks: Iterable[int]) -> Dict[str, FrozenSet[str]]:
    """Per host, the rails the ranks of one communicator use there. With
    PXN a rank reaches any of these through the GPU next to that NIC (over
    NVLink); NCCL pairs hosts' NICs rail by rail, so the communicator stays
    on its rails when every host has the same set."""
    out: Dict[str, set] = {}
    for r in ranks:
        s = slots[r]
        rail = rail_of(s)
        if rail is not None:
            out.setdefault(s.host, set()).add(rail)
    return {h: frozenset(v) for h, v in out.items()}


def misaligned(rails: Dict[str, FrozenSet[str]]) -> Optional[Tuple[Tuple[str, FrozenSet[str]],
                                                                   Tuple[str, FrozenSet[str]]]]:
    """Two hosts whose rail sets differ (the first host and the first that
    differs from it), or None when the communicator is rail-aligned."""
    items = list(rails.items())
    if len(items) < 2:
        return None
    first = items[0]
    other = next(((h, r) for h, r in items[1:] if r != first[1]), None)
    return (first, other) if other is not None else None


def cross_rail_class(view: "NetworkView", host: str) -> LinkClass:
    """Where traffic between two different rails of ``host`` meets on a
    rail-optimised fabric: the lowest switch level above its rail leaves
    (a scalable unit's spine: NET_L1), or NET_FAR when the rails are not
    joined at all."""
    anc = view.ancestors.get(host) or {}
    above = [lvl for lvl in anc.values() if lvl >= 1]
    return LinkClass.network(min(above)) if above else LinkClass.NET_FAR


#: the description of every switch slurmtopo makes from a Slurm 26.05
#: topology/ring or topology/torus3d (slurmtopo/inventory/ringtree.py): such a
#: tree measures distance only, Slurm allocates arcs and sub-cubes on it
MADE_FROM = "made by slurmtopo from topology/"


def made_from(fabric: Fabric) -> Optional[str]:
    """``ring`` or ``torus3d`` when the fabric's switches were made from
    that Slurm topology (no ``--switches`` to ask for), else None."""
    for s in fabric.switches:
        d = s.description or ""
        if d.startswith(MADE_FROM):
            return d[len(MADE_FROM):].split()[0]
    return None
