"""Slurm 26.05's rings and 3D toruses as the planner's switch trees, and
Slurm's rules for them: the one home of both, for a topology file read
(:mod:`slurmtopo.slurmfmt.ring_torus`) and for an inventory's ``fabric:
rings:``/``toruses:`` (:mod:`slurmtopo.inventory.schema`, written out by
:mod:`slurmtopo.slurmfmt.topology_conf` and :mod:`.topology_yaml`). Pure.

The rules (src/plugins/topology/ring/ring_record.c and
torus3d/torus3d_record.c of 26.05.3): at most 16 nodes a ring
(``MAX_RING_SIZE``), in ring order; names unique; no node in two rings or
toruses; a torus's nodes fill it x-major (x fastest) and number x*y*z; a
region fills its box the same way inside the torus (no wrap-around, no
overlap); a placement fits the torus, its anchor seed and spacing inside
it. Their text (topology.conf's ``RingName=`` lines, topology.yaml's
``ring:`` and ``torus3d:`` sections) is :mod:`slurmtopo.slurmfmt`'s, which
reads it into these calls.

The planner measures distance between hosts on a switch tree
(:mod:`slurmtopo.inventory.topology`'s network view), so each ring and torus becomes
one: the coordinates are halved recursively (the longest extent first)
until two nodes are left, each box a switch (the man page's 4x4x2 torus
halves to 4x2x2, 2x2x2, 2x2x1, 2x1x1: its placements 2x2x2 and 2x2x1 are
boxes of the tree). Two nodes under one leaf are neighbours; the higher
the common switch, the more hops apart, so the planner's "keep this group
under one switch" becomes "keep it in a compact arc or sub-cube", which is
what both plugins allocate. The tree does not see the wrap-around links
(the two ends of a ring look far apart): a plan may be more compact than
it needs, never less. Rings and toruses get no common root: Slurm never
gives a job nodes of two of them.

Every switch made here carries :data:`DESCRIPTION` in its description
(:func:`slurmtopo.inventory.topology.made_from` finds it), so the script does not ask
Slurm for ``--switches`` (only topology/tree reads it).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import InventoryError
from slurmtopo.inventory.model import Fabric, Ring, Switch, Torus
from slurmtopo.inventory.topology import MADE_FROM

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
    """(name, ordered nodes, origin) per ring -> the tree and the rings;
    Slurm's rules checked (a located InventoryError for what slurmctld
    would refuse)."""
    for name, nodes, origin in rings:
        if len(nodes) > MAX_RING_SIZE:
            raise InventoryError(f"ring {name!r} has {len(nodes)} nodes; Slurm allows "
                                 f"{MAX_RING_SIZE} a ring", origin or path)
        twice = next((h for i, h in enumerate(nodes) if h in nodes[:i]), None)
        if twice is not None:
            raise InventoryError(f"ring {name!r} lists node {twice} twice", origin or path)
    fab = _fabric("ring", [(name, {h: (i,) for i, h in enumerate(nodes)}, origin)
                           for name, nodes, origin in rings],
                  path, "slurmctld: \"No rings configured\"")
    # the rings themselves too, so a ring read can be written again
    # (``topology generate --fabric topology.conf --format yaml``)
    return Fabric(switches=fab.switches, rings=tuple(Ring(name, tuple(nodes), origin)
                                                     for name, nodes, origin in rings))


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


def check_placement(dims: Coord, torus: Coord) -> Optional[str]:
    """Why a placement shape does not fit a torus (torus3d_record.c's
    ``_validate_placement``), or None."""
    if len(dims) != 3 or any(d < 1 for d in dims):
        return f"placement dims {tuple(dims)} must be three whole numbers >= 1"
    if any(a > b for a, b in zip(dims, torus)):
        return f"placement dims {tuple(dims)} exceed the torus {tuple(torus)}"
    return None


def check_anchor(key: str, value: Coord, torus: Coord) -> Optional[str]:
    """Why a placement's ``anchor_seed`` (a place of the torus) or
    ``anchor_spacing`` (a step no longer than the torus) does not lie within
    it, or None."""
    limit = (lambda a, b: a >= b) if key == "anchor_seed" else (lambda a, b: a > b)
    if any(limit(a, b) for a, b in zip(value, torus)):
        return f"placement {key} {value} must lie within the torus {torus}"
    return None


def tree_boxes(dims: Coord) -> Tuple[Coord, ...]:
    """Every box shape of a torus's tree, largest first: ``dims`` cut in
    two along the longest extent (the outer axis on a tie; an odd extent
    gives a larger and a smaller half) down to one node, as
    :func:`tree_of` cuts it (4x4x2 -> 4x4x2, 4x2x2, 2x2x2, 2x2x1, 2x1x1,
    1x1x1). A torus in an inventory with no ``placements`` gets these:
    every job the planner keeps under one switch of the tree has a
    placement Slurm can give it."""
    seen = set()
    todo = [tuple(dims)]
    while todo:
        box = todo.pop()
        if box in seen:
            continue
        seen.add(box)
        if all(d == 1 for d in box):
            continue
        axis = max(range(len(box)), key=lambda i: (box[i], i))
        for half in ((box[axis] + 1) // 2, box[axis] // 2):
            todo.append(tuple(half if i == axis else d for i, d in enumerate(box)))
    return tuple(sorted(seen, key=lambda b: (-b[0] * b[1] * b[2], b[::-1])))


def torus_placements(t: Torus) -> Tuple[Coord, ...]:
    """The placements written for a torus: its own, else :func:`tree_boxes`."""
    return tuple(t.placements) or tree_boxes(t.dims)


def inventory_switches(rings: Sequence[Ring], toruses: Sequence[Torus],
                       path: str) -> Tuple[Switch, ...]:
    """The switch tree of an inventory's rings or toruses (Slurm's rules
    checked, errors at the ring's or torus's file:line)."""
    if rings and toruses:
        where = rings[0].origin or path
        raise InventoryError("a fabric describes rings or toruses, not both (Slurm plans a "
                             "job on one topology)", where)
    if rings:
        return ring_fabric([(r.name, r.nodes, r.origin) for r in rings], path).switches
    units = []
    for t in toruses:
        where = t.origin or path
        for p in t.placements:
            why = check_placement(p, t.dims)
            if why:
                raise InventoryError(f"torus {t.name!r}: {why}", where)
        units.append((t.name, torus_coords(t.dims, t.nodes, where=where), t.origin))
    return torus_fabric(units, path).switches if units else ()
