"""Slurm 26.05's topology/ring and topology/torus3d, read into the planner's
switch tree (pure, no I/O).

The formats (doc/man/man5/topology.yaml.5 and topology.conf.5 of 26.05.3;
the rules from src/plugins/topology/ring/ring_record.c and
torus3d/torus3d_record.c):

* ring: ``ring: {rings: [{ring: NAME, nodes: HOSTLIST}]}`` in topology.yaml,
  ``RingName=NAME Nodes=HOSTLIST`` lines in topology.conf. The hostlist's
  order is the ring order; at most 16 nodes a ring (``MAX_RING_SIZE``);
  names unique. A job gets a contiguous arc of one ring, which may wrap.
* torus3d (topology.yaml only): ``torus3d: {toruses: [{name, dims: {x, y,
  z}, nodes | regions: [{anchor, dims, nodes}], placements: [{dims,
  anchor_seed, anchor_spacing}]}]}``. ``nodes`` fill the torus x-major (x
  fastest) and must number x*y*z; a region fills its box the same way, must
  fit the torus (no wrap) and not overlap another; toruses share no node.
  A job gets one placement-shaped sub-cube, which may wrap.

The planner measures distance between hosts on a switch tree
(:mod:`slurmtopo.topology`'s network view), so each ring and torus becomes
one: the coordinates are halved recursively (the longest extent first)
until two nodes are left, each box a switch (the man page's 4x4x2 torus
halves to 4x2x2, 2x2x2, 2x2x1, 2x1x1: its placements 2x2x2 and 2x2x1 are
boxes of the tree). Two nodes under one leaf are
neighbours; the higher the common switch, the more hops apart, so the
planner's "keep this group under one switch" becomes "keep it in a compact
arc or sub-cube", which is what both plugins allocate. The tree does not
see the wrap-around links (the two ends of a ring look far apart): a plan
may be more compact than it needs, never less. Rings and toruses get no
common root: Slurm never gives a job nodes of two of them.

Every switch made here carries :data:`DESCRIPTION` in its description
(:func:`slurmtopo.topology.made_from` finds it), so the script does not ask
Slurm for ``--switches`` (only topology/tree reads it).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import InventoryError
from slurmtopo.model import Fabric, Switch
from slurmtopo.topology import MADE_FROM

#: ring_record.h
MAX_RING_SIZE = 16
#: the description of every switch made from a ring or a torus
DESCRIPTION = MADE_FROM + "{kind} {name}"

Coord = Tuple[int, ...]


def tree_of(kind: str, name: str, coords: Dict[str, Coord]) -> List[Switch]:
    """The switches of one ring or torus: boxes of its coordinates halved
    recursively, leaves of at most two nodes. Names are ``NAME.lo-hi`` with
    the box's corners (``x.y.z`` for a torus)."""
    desc = DESCRIPTION.format(kind=kind, name=name)
    out: List[Switch] = []
    dims = len(next(iter(coords.values()))) if coords else 1
    lo = tuple(min(c[i] for c in coords.values()) for i in range(dims)) if coords else (0,)
    hi = tuple(max(c[i] for c in coords.values()) for i in range(dims)) if coords else (0,)

    def label(a: Coord, b: Coord) -> str:
        return f"{name}.{'.'.join(map(str, a))}-{'.'.join(map(str, b))}"

    def build(a: Coord, b: Coord, hosts: List[str]) -> Optional[str]:
        if not hosts:
            return None
        me = label(a, b)
        if len(hosts) <= 2:
            out.append(Switch(name=me, level=-1, nodes=tuple(hosts), description=desc))
            return me
        # the longest extent first; on a tie the outer axis (z, then y), so
        # x neighbours (the x-major fill, and placements such as 2x2x1) stay
        # together longest
        axis = max(range(dims), key=lambda i: (b[i] - a[i], i))
        mid = (a[axis] + b[axis]) // 2
        a2 = tuple(mid + 1 if i == axis else a[i] for i in range(dims))
        b1 = tuple(mid if i == axis else b[i] for i in range(dims))
        left = [h for h in hosts if coords[h][axis] <= mid]
        right = [h for h in hosts if coords[h][axis] > mid]
        kids = [k for k in (build(a, b1, left), build(a2, b, right)) if k]
        if len(kids) == 1:
            return kids[0]
        out.append(Switch(name=me, level=-1, switches=tuple(kids), description=desc))
        return me

    build(lo, hi, sorted(coords, key=lambda h: coords[h][::-1]))
    return out


def ring_fabric(rings: Sequence[Tuple[str, Sequence[str], Optional[str]]],
                path: str) -> Fabric:
    """(name, ordered nodes, origin) per ring -> the tree; Slurm's rules
    checked (a located InventoryError for what slurmctld would refuse)."""
    for name, nodes, origin in rings:
        if len(nodes) > MAX_RING_SIZE:
            raise InventoryError(f"ring {name!r} has {len(nodes)} nodes; Slurm allows "
                                 f"{MAX_RING_SIZE} a ring", origin or path)
    return _fabric("ring", [(name, {h: (i,) for i, h in enumerate(nodes)}, origin)
                            for name, nodes, origin in rings],
                   path, "slurmctld: \"No rings configured\"")


def _fabric(kind: str, units: Sequence[Tuple[str, Dict[str, Coord], Optional[str]]],
            path: str, none: str) -> Fabric:
    """The trees of every ring or torus, once names are unique and no node
    is in two of them (both plugins refuse either)."""
    what = "ring" if kind == "ring" else "torus"
    if not units:
        raise InventoryError(f"topology/{kind} needs at least one {what} ({none})", path)
    owner: Dict[str, str] = {}
    names = set()
    switches: List[Switch] = []
    for name, coords, origin in units:
        if name in names:
            raise InventoryError(f"{what} {name!r} is defined twice", origin or path)
        names.add(name)
        for h in coords:
            if h in owner:
                raise InventoryError(f"{what}s {owner[h]!r} and {name!r} share node {h}",
                                     origin or path)
            owner[h] = name
        switches += tree_of(kind, name, coords)
    return Fabric(switches=tuple(switches))


def torus_coords(dims: Coord, nodes: Sequence[str] = (),
                 regions: Sequence[Tuple[Coord, Coord, Sequence[str]]] = (),
                 where: str = "<torus>") -> Dict[str, Coord]:
    """host -> (x, y, z) of one torus, x-major (x fastest), from ``nodes``
    or from ``regions`` ((anchor, dims, nodes) each)."""
    if len(dims) != 3 or any(d < 1 for d in dims):
        raise InventoryError("a torus needs dims x, y, z of at least 1", where)
    if nodes and regions:
        raise InventoryError("a torus gives nodes or regions, not both", where)
    out: Dict[str, Coord] = {}

    def fill(anchor: Coord, box: Coord, hosts: Sequence[str], what: str) -> None:
        if len(hosts) != box[0] * box[1] * box[2]:
            raise InventoryError(f"{what} has {len(hosts)} nodes for {box[0]}x{box[1]}x"
                                 f"{box[2]} = {box[0] * box[1] * box[2]} places", where)
        taken = {c for c in out.values()}
        for i, h in enumerate(hosts):
            c = (anchor[0] + i % box[0], anchor[1] + (i // box[0]) % box[1],
                 anchor[2] + i // (box[0] * box[1]))
            if c in taken:
                raise InventoryError(f"{what}: place {c} is filled twice (regions overlap)",
                                     where)
            if h in out:
                raise InventoryError(f"{what}: node {h} is placed twice", where)
            out[h] = c

    if regions:
        for k, (anchor, box, hosts) in enumerate(regions):
            if len(anchor) != 3 or len(box) != 3 or any(b < 1 for b in box) or \
                    any(a < 0 or a + b > d for a, b, d in zip(anchor, box, dims)):
                raise InventoryError(f"region {k + 1} does not fit the torus {dims} "
                                     "(no wrap-around)", where)
            fill(anchor, box, hosts, f"region {k + 1}")
    else:
        fill((0, 0, 0), dims, nodes, "the torus")
    return out


def torus_fabric(toruses: Sequence[Tuple[str, Dict[str, Coord], Optional[str]]],
                 path: str) -> Fabric:
    """(name, coordinates, origin) per torus -> the tree."""
    return _fabric("torus3d", toruses, path, "slurmctld: \"No torus3d configurations found\"")


# --------------------------------------------------------------------------
# topology.yaml sections (the caller's Reader and hostlist reader, so this
# module needs nothing of topology_conf)

def _xyz(r, d, key: str, what: str, minimum: int) -> Coord:
    v = r.mapping(d.get(key), f"{what} {key}", {"x", "y", "z"}, r.line(d, key))
    out = []
    for axis in ("x", "y", "z"):
        n = v.get(axis)
        if isinstance(n, bool) or not isinstance(n, int) or n < minimum:
            raise r.error(f"{what} {key}.{axis} must be a whole number >= {minimum}",
                          r.line(v, axis) or r.line(d, key))
        out.append(n)
    return tuple(out)


def yaml_ring(r, value, path: str, line, hostlist) -> Fabric:
    """A topology.yaml ``ring:`` section; ``hostlist(r, d, key, path, what)``
    reads a node list in order."""
    d = r.mapping(value, "ring", {"rings"}, line)
    rings = []
    for item in r.sequence(d.get("rings") or [], "rings", r.line(d)):
        item = r.mapping(item, "ring", {"ring", "nodes"})
        name = str(r.need(item, "ring", "ring"))
        rings.append((name, hostlist(r, item, "nodes", path, "nodes"),
                      f"{path}:{r.line(item)}"))
    return ring_fabric(rings, path)


def yaml_torus3d(r, value, path: str, line, hostlist) -> Fabric:
    """A topology.yaml ``torus3d:`` section (placements checked against the
    torus as torus3d_record.c does; the planner does not use them)."""
    d = r.mapping(value, "torus3d", {"toruses"}, line)
    toruses = []
    for t in r.sequence(d.get("toruses") or [], "toruses", r.line(d)):
        t = r.mapping(t, "torus", {"name", "dims", "nodes", "regions", "placements"})
        name = str(r.need(t, "name", "torus"))
        where = f"{path}:{r.line(t)}"
        dims = _xyz(r, t, "dims", "torus", 1)
        regions = []
        for g in r.sequence(t.get("regions") or [], "regions", r.line(t)):
            g = r.mapping(g, "region", {"anchor", "dims", "nodes"})
            regions.append((_xyz(r, g, "anchor", "region", 0), _xyz(r, g, "dims", "region", 1),
                            hostlist(r, g, "nodes", path, "nodes")))
        coords = torus_coords(dims, hostlist(r, t, "nodes", path, "nodes"), regions, where)
        for p in r.sequence(t.get("placements") or [], "placements", r.line(t)):
            p = r.mapping(p, "placement", {"dims", "anchor_seed", "anchor_spacing"})
            pd = _xyz(r, p, "dims", "placement", 1)
            if any(a > b for a, b in zip(pd, dims)):
                raise r.error(f"placement dims {pd} exceed the torus {dims}", r.line(p))
            for key, low in (("anchor_seed", 0), ("anchor_spacing", 1)):
                if p.get(key) is not None:
                    v = _xyz(r, p, key, "placement", low)
                    limit = (lambda a, b: a >= b) if key == "anchor_seed" else \
                        (lambda a, b: a > b)
                    if any(limit(a, b) for a, b in zip(v, dims)):
                        raise r.error(f"placement {key} {v} must lie within the torus {dims}",
                                      r.line(p, key))
        toruses.append((name, coords, where))
    return torus_fabric(toruses, path)

