"""Slurm 26.05's topology.yaml ``ring:`` and ``torus3d:`` sections, read
(pure, no I/O).

The formats (doc/man/man5/topology.yaml.5 and topology.conf.5 of 26.05.3):

* ring: ``ring: {rings: [{ring: NAME, nodes: HOSTLIST}]}`` in topology.yaml
  (``RingName=NAME Nodes=HOSTLIST`` lines in topology.conf are
  :mod:`.topology_conf`'s). The hostlist's order is the ring order. A job
  gets a contiguous arc of one ring, which may wrap.
* torus3d (topology.yaml only): ``torus3d: {toruses: [{name, dims: {x, y,
  z}, nodes | regions: [{anchor, dims, nodes}], placements: [{dims,
  anchor_seed, anchor_spacing}]}]}``. A job gets one placement-shaped
  sub-cube, which may wrap.

Slurm's rules for rings and toruses (sizes, unique names, the x-major fill,
regions and placements inside the torus) and how each becomes the planner's
switch tree are :mod:`slurmtopo.inventory.ringtree`'s, the one home of both (an
inventory's ``fabric: rings:``/``toruses:`` use them too): this module only
reads the text into its calls. Node lists are read in the order written
(:func:`slurmtopo.inventory.hostlist.expand_in_order`), as Slurm reads them: the ring
order, the x-major fill.
"""
from __future__ import annotations

from slurmtopo.inventory.model import Fabric
from slurmtopo.inventory.ringtree import (Coord, check_anchor, check_placement, ring_fabric,
                                          torus_coords, torus_fabric)
from slurmtopo.slurmfmt.checks import NAME_RE


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


def plain_name(r, d, key: str, what: str) -> str:
    """A ring's or a torus's name: a plain name (letters, digits, '.', '_',
    '-'), as for switches and blocks."""
    name = str(r.need(d, key, what))
    if not NAME_RE.match(name):
        raise r.error(f"{what} name {name!r:.40} is not a plain name (letters, digits, '.', "
                      "'_', '-')", r.line(d, key))
    return name


def yaml_ring(r, value, path: str, line, hostlist) -> Fabric:
    """A topology.yaml ``ring:`` section; ``hostlist(r, d, key, path, what)``
    reads a node list in order."""
    d = r.mapping(value, "ring", {"rings"}, line)
    rings = []
    for item in r.sequence(d.get("rings") or [], "rings", r.line(d)):
        item = r.mapping(item, "ring", {"ring", "nodes"})
        name = plain_name(r, item, "ring", "ring")
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
        name = plain_name(r, t, "name", "torus")
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
            why = check_placement(pd, dims)
            if why:
                raise r.error(why, r.line(p))
            for key, low in (("anchor_seed", 0), ("anchor_spacing", 1)):
                if p.get(key) is not None:
                    why = check_anchor(key, _xyz(r, p, key, "placement", low), dims)
                    if why:
                        raise r.error(why, r.line(p, key))
        toruses.append((name, coords, where))
    return torus_fabric(toruses, path)

