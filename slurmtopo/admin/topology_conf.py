"""Slurm's topology files: write them from a Fabric, read them back into one.

Three formats (topology.conf(5), topology.yaml(5)):

* ``topology/tree``: ``SwitchName=leaf01 Nodes=gpu[001-032]`` for leaves,
  ``SwitchName=spine Switches=leaf[01-04]`` above (a switch has Nodes or
  Switches, never both; ``LinkSpeed`` is informative, Slurm does not use it);
* ``topology/block``: ``BlockName=b1 Nodes=...`` and ``BlockSizes=18,36``;
* ``topology.yaml`` (Slurm 25.05+): a list of named topologies, each with
  ``tree: {switches: [{switch, children, nodes}]}`` or ``block:
  {block_sizes, blocks: [{block, nodes}]}`` or ``flat: true``; the first
  with ``cluster_default: true`` is the default.

Hostlists are folded with ClusterShell's NodeSet (Slurm's hostlist syntax).
The reader accepts what Slurm accepts (case-insensitive keys, ``#``
comments, ``\\`` continuations) and turns every bad line into one
``file:line: ...`` error, so a site's hand-written topology can feed the
planner (:func:`read_topology_conf`, :func:`apply_fabric`) and ``--diff`` can
say what really changes (:func:`describe_changes`).
"""
from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import yaml

from slurmtopo.admin.checks import check_blocks, check_tree, raise_first_error, valid_block_sizes
from slurmtopo.admin.switch_tree import natural_key
from slurmtopo.admin.slurmconf import ConfLine, conf_lines, hostlist_at, read_text
from slurmtopo.errors import InventoryError, SlurmtopoError
from slurmtopo.hostlist import fold_hostlist
from slurmtopo.model import Block, Fabric, Inventory, Switch
from slurmtopo.yamlio import LineDict, LineList, Reader, as_str, parse_text

FORMATS = ("tree", "block", "yaml")
SWITCH_KEYS = {"switchname", "switches", "nodes", "linkspeed"}
BLOCK_KEYS = {"blockname", "nodes", "blocksizes"}


# --------------------------------------------------------------------------
# Writing


def _comment(header: Sequence[str]) -> List[str]:
    return [f"# {h}".rstrip() for h in header]


def render_tree(fabric: Fabric, header: Sequence[str] = ()) -> str:
    """topology.conf lines for topology/tree."""
    lines = _comment(header)
    for s in fabric.switches:
        parts = [f"SwitchName={s.name}"]
        if s.nodes:
            parts.append(f"Nodes={fold_hostlist(s.nodes)}")
        if s.switches:
            parts.append(f"Switches={fold_hostlist(s.switches)}")
        if s.link_gbps and s.link_gbps >= 1:
            parts.append(f"LinkSpeed={int(round(s.link_gbps))}")
        desc = " ".join((s.description or "").split())  # one line, whatever it held
        if desc and desc != s.name:
            parts.append(f"# {desc}")
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"


def render_block(fabric: Fabric, header: Sequence[str] = ()) -> str:
    """topology.conf lines for topology/block."""
    lines = _comment(header)
    for b in fabric.blocks:
        if b.domain and b.nodes:
            lines.append(f"# {b.name}={b.domain}")
        lines.append(f"BlockName={b.name} Nodes={fold_hostlist(b.nodes)}" if b.nodes
                     else f"BlockName={b.name}")
    if fabric.block_sizes:
        lines.append("BlockSizes=" + ",".join(str(s) for s in fabric.block_sizes))
    return "\n".join(lines) + "\n"


def yaml_topologies(fabric: Fabric, tree_name: str = "tree",
                    block_name: str = "block") -> List[Dict[str, object]]:
    """The topology.yaml document: a tree topology (cluster default) when
    there are switches, a block topology when there are blocks."""
    out: List[Dict[str, object]] = []
    if fabric.switches:
        switches = []
        for s in fabric.switches:
            d: Dict[str, object] = {"switch": s.name}
            if s.switches:
                d["children"] = fold_hostlist(s.switches)
            if s.nodes:
                d["nodes"] = fold_hostlist(s.nodes)
            switches.append(d)
        out.append({"topology": tree_name, "cluster_default": True,
                    "tree": {"switches": switches}})
    if fabric.blocks:
        block: Dict[str, object] = {}
        if fabric.block_sizes:
            block["block_sizes"] = list(fabric.block_sizes)
        block["blocks"] = [{"block": b.name, "nodes": fold_hostlist(b.nodes)} if b.nodes
                           else {"block": b.name} for b in fabric.blocks]
        out.append({"topology": block_name, "cluster_default": not out, "block": block})
    return out


def render_yaml(fabric: Fabric, header: Sequence[str] = ()) -> str:
    head = "\n".join(_comment(header))
    body = yaml.safe_dump(yaml_topologies(fabric), sort_keys=False, default_flow_style=False,
                          width=1 << 16) if (fabric.switches or fabric.blocks) else ""
    return (head + "\n" if head else "") + body


def render(fabric: Fabric, fmt: str, header: Sequence[str] = ()) -> str:
    if fmt == "tree":
        return render_tree(fabric, header)
    if fmt == "block":
        return render_block(fabric, header)
    if fmt == "yaml":
        return render_yaml(fabric, header)
    raise ValueError(f"unknown topology format {fmt!r}")


def check(fabric: Fabric, fmt: str, slurm_nodes=None):
    """The checks that apply to ``fmt`` (both kinds for topology.yaml)."""
    if fmt == "tree":
        return check_tree(fabric, slurm_nodes)
    if fmt == "block":
        return check_blocks(fabric, slurm_nodes)
    problems = []
    if fabric.switches or not fabric.blocks:
        problems += check_tree(fabric, slurm_nodes)
    if fabric.blocks:
        problems += check_blocks(fabric, slurm_nodes)
    return problems


# --------------------------------------------------------------------------
# Reading topology.conf


def _one_line_keys(cl: ConfLine, allowed: set, path: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for key, value in cl.pairs:
        k = key.lower()
        if k not in allowed:
            raise InventoryError(f"unknown key {key!r} on a {cl.pairs[0][0]} line (allowed: "
                                 f"{', '.join(sorted(allowed))})", path, cl.line)
        if k in out:
            raise InventoryError(f"{key} given twice on one line", path, cl.line)
        out[k] = value
    return out


def _sizes(value: str, path: str, line: int) -> Tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise InventoryError(f"BlockSizes must be numbers, got {value!r}", path, line) from None
    why = valid_block_sizes(sizes)
    if why:
        raise InventoryError(why, path, line)
    return sizes


def parse_topology_conf(text: str, path: str = "<topology.conf>") -> Fabric:
    """A topology.conf (tree or block) as a Fabric; InventoryError at file:line."""
    switches: List[Switch] = []
    blocks: List[Block] = []
    sizes: Tuple[int, ...] = ()
    rings: List[Tuple[str, Tuple[str, ...], str]] = []
    kind = None
    for cl in conf_lines(text, path):
        first = cl.first_key
        where = f"{path}:{cl.line}"
        if first in ("switchname", "blockname"):
            this = "tree" if first == "switchname" else "block"
            if kind and kind != this:
                raise InventoryError("this file mixes SwitchName (topology/tree) and BlockName "
                                     "(topology/block) lines", path, cl.line)
            kind = this
        if first == "switchname":
            d = _one_line_keys(cl, SWITCH_KEYS, path)
            speed = None
            if "linkspeed" in d:
                if not d["linkspeed"].isdigit():
                    raise InventoryError(f"LinkSpeed must be a whole number, got "
                                         f"{d['linkspeed']!r}", path, cl.line)
                speed = float(d["linkspeed"])
            switches.append(Switch(
                name=d["switchname"], level=-1,
                nodes=tuple(hostlist_at(d["nodes"], path, cl.line, "Nodes")) if "nodes" in d else (),
                switches=tuple(hostlist_at(d["switches"], path, cl.line, "Switches"))
                if "switches" in d else (),
                link_gbps=speed, description=cl.comment or None, origin=where))
        elif first == "blockname":
            d = _one_line_keys(cl, BLOCK_KEYS, path)
            # no Nodes=: a placeholder block (block_record.c gives it an empty bitmap)
            blocks.append(Block(name=d["blockname"],
                                nodes=tuple(hostlist_at(d["nodes"], path, cl.line, "Nodes"))
                                if "nodes" in d else (), origin=where))
            if "blocksizes" in d:
                sizes = _sizes(d["blocksizes"], path, cl.line)
        elif first == "blocksizes":
            if len(cl.pairs) > 1:
                raise InventoryError(f"unexpected {cl.pairs[1][0]} after BlockSizes", path,
                                     cl.line)
            sizes = _sizes(cl.pairs[0][1], path, cl.line)
        elif first == "ringname":  # topology/ring (26.05): slurmtopo/admin/ring_torus.py
            d = _one_line_keys(cl, {"ringname", "nodes"}, path)
            rings.append((d["ringname"], tuple(hostlist_at(d["nodes"], path, cl.line, "Nodes"))
                          if "nodes" in d else (), f"{path}:{cl.line}"))
        else:
            raise InventoryError(f"a topology.conf line starts with SwitchName=, BlockName= or "
                                 f"BlockSizes=, not {cl.pairs[0][0]}=", path, cl.line)
    if rings:
        if switches or blocks:
            raise InventoryError("RingName= lines cannot share a topology.conf with switches "
                                 "or blocks (one plugin reads it)", rings[0][2])
        from slurmtopo.admin.ring_torus import ring_fabric
        return ring_fabric(rings, path)
    fabric = Fabric(switches=tuple(switches), blocks=tuple(blocks), block_sizes=sizes)
    if switches:
        raise_first_error(check_tree(fabric))
    if blocks:
        raise_first_error(check_blocks(fabric))
    return fabric


# --------------------------------------------------------------------------
# Reading topology.yaml

_TOPO_KEYS = {"topology", "cluster_default", "tree", "block", "flat", "ring", "torus3d"}


def parse_topology_yaml(text: str, path: str = "<topology.yaml>") -> List[Tuple[str, bool, Fabric]]:
    """Every topology of a topology.yaml: (name, cluster_default, Fabric)."""
    data = parse_text(text, path)
    r = Reader(path)
    if data is None:
        return []
    seq = r.sequence(data, "topology.yaml (a list of topologies)")
    out: List[Tuple[str, bool, Fabric]] = []
    names = set()
    for i, item in enumerate(seq):
        d = r.mapping(item, "topology", _TOPO_KEYS, Reader.line(seq, i))
        name = r.need(d, "topology", "topology", as_str)
        if not isinstance(d["topology"], str) or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise r.error(f"topology name {name!r}: letters, digits, '.', '_' and '-' only "
                          "(a partition's Topology= names it)", Reader.line(d, "topology"))
        if next(iter(d)) != "topology":
            raise r.error("'topology' must be the first attribute", Reader.line(d))
        if name in names:
            raise r.error(f"topology {name!r} defined twice", Reader.line(d, "topology"))
        names.add(name)
        default = d.get("cluster_default", False)
        if not isinstance(default, bool):
            raise r.error("cluster_default must be true or false", Reader.line(d, "cluster_default"))
        kinds = [k for k in ("tree", "block", "flat", "ring", "torus3d") if k in d]
        if len(kinds) != 1:
            raise r.error(f"topology {name!r} must define exactly one of tree, block, flat, "
                          "ring, torus3d", Reader.line(d))
        if kinds[0] in ("ring", "torus3d"):  # 26.05: slurmtopo/admin/ring_torus.py
            from slurmtopo.admin import ring_torus
            read = ring_torus.yaml_ring if kinds[0] == "ring" else ring_torus.yaml_torus3d
            fab = read(r, d[kinds[0]], path, Reader.line(d, kinds[0]), _hl)
        elif kinds[0] == "tree":
            fab = _yaml_tree(r, d["tree"], path, Reader.line(d, "tree"))
        elif kinds[0] == "block":
            fab = _yaml_block(r, d["block"], path, Reader.line(d, "block"))
        else:
            fab = Fabric()
        out.append((str(name), default, fab))
    return out


def _hl(r: Reader, d: LineDict, key: str, path: str, what: str) -> Tuple[str, ...]:
    value = d.get(key)
    if value is None:
        return ()
    if isinstance(value, list):
        value = ",".join(r.strings(value, what, Reader.line(d, key)))
    elif not isinstance(value, str):
        raise r.error(f"{what} must be a hostlist, got {value!r:.40}", Reader.line(d, key))
    names = hostlist_at(value, path, Reader.line(d, key), what)
    if key == "nodes":
        from slurmtopo.inventory import NODE_NAME

        odd = next((n for n in names if not NODE_NAME.match(n)), None)
        if odd is not None:
            raise r.error(f"node name {odd!r} is not a host name", Reader.line(d, key))
    return tuple(names)


def _yaml_tree(r: Reader, value, path: str, line) -> Fabric:
    d = r.mapping(value, "tree", {"switches"}, line)
    switches = []
    for s in r.sequence(d.get("switches") or LineList(), "tree switches", Reader.line(d)):
        s = r.mapping(s, "switch", {"switch", "children", "nodes"})
        switches.append(Switch(name=str(r.need(s, "switch", "switch")), level=-1,
                               nodes=_hl(r, s, "nodes", path, "nodes"),
                               switches=_hl(r, s, "children", path, "children"),
                               origin=f"{path}:{Reader.line(s)}"))
    fab = Fabric(switches=tuple(switches))
    raise_first_error(check_tree(fab))
    return fab


def _yaml_block(r: Reader, value, path: str, line) -> Fabric:
    d = r.mapping(value, "block", {"block_sizes", "blocks"}, line)
    sizes: Tuple[int, ...] = ()
    if d.get("block_sizes") is not None:
        raw = d["block_sizes"]
        raw = raw if isinstance(raw, list) else str(raw).split(",")
        sizes = _sizes(",".join(str(x) for x in raw), path, Reader.line(d, "block_sizes"))
    blocks = []
    for b in r.sequence(d.get("blocks") or LineList(), "blocks", Reader.line(d)):
        b = r.mapping(b, "block", {"block", "nodes"})
        nodes = _hl(r, b, "nodes", path, "nodes") if b.get("nodes") is not None else ()
        blocks.append(Block(name=str(r.need(b, "block", "block")), nodes=nodes,
                            origin=f"{path}:{Reader.line(b)}"))
    fab = Fabric(blocks=tuple(blocks), block_sizes=sizes)
    raise_first_error(check_blocks(fab))
    return fab


def is_yaml_path(path) -> bool:
    return os.fspath(path).endswith((".yaml", ".yml"))


def read_topology_conf(path) -> Fabric:
    """A site's topology.conf or topology.yaml as a Fabric the planner can use.

    For topology.yaml: the switches of the default tree topology (the first
    with ``cluster_default: true``, else the first tree) and the blocks of
    the first block topology.
    """
    path = os.fspath(path)
    return topology_from_text(read_text(path), path)


def topology_from_text(text: str, path: str) -> Fabric:
    """:func:`read_topology_conf` on text already read (``path`` says which
    format and names the file in errors)."""
    if not is_yaml_path(path):
        return parse_topology_conf(text, path)
    from slurmtopo.topology import made_from

    topos = parse_topology_yaml(text, path)  # rings and toruses: checked as they are read
    trees = [t for t in topos if t[2].switches and not made_from(t[2])]
    tree = next((t for t in trees if t[1]), trees[0] if trees else None)
    block = next((t for t in topos if t[2].blocks), None)
    return Fabric(switches=tree[2].switches if tree else (),
                  blocks=block[2].blocks if block else (),
                  block_sizes=block[2].block_sizes if block else ())


def pick_topology(topos: Sequence[Tuple[str, bool, Fabric]], name: Optional[str],
                  path: str = "<topology.yaml>") -> Tuple[str, Fabric]:
    """The topology called ``name`` of a topology.yaml (None: the cluster
    default, the first with ``cluster_default: true``, else the first)."""
    if not topos:
        raise SlurmtopoError("no topology defined", path)
    if name is None:
        hit = next((t for t in topos if t[1]), topos[0])
    else:
        hit = next((t for t in topos if t[0] == name), None)
        if hit is None:
            raise SlurmtopoError(f"no topology named {name!r} (there are: "
                                 f"{', '.join(t[0] for t in topos)})", path)
    return hit[0], hit[2]


def read_one_topology(path, name: Optional[str] = None) -> Tuple[str, Fabric]:
    """(name, Fabric) of one topology: the named one of a topology.yaml (None:
    its cluster default), or a topology.conf's only one (named after its
    plugin: tree or block)."""
    path = os.fspath(path)
    text = read_text(path)
    if not is_yaml_path(path):
        fab = parse_topology_conf(text, path)
        from slurmtopo.topology import made_from
        return ("block" if fab.blocks and not fab.switches else (made_from(fab) or "tree")), fab
    return pick_topology(parse_topology_yaml(text, path), name, path)


def apply_fabric(inv: Inventory, fabric: Fabric, source: Optional[str] = None,
                 whole: bool = False) -> Inventory:
    """``inv`` with its switches/blocks replaced by ``fabric``'s (the ones it
    has; with ``whole``, all of them, so a tree-only fabric drops the
    inventory's blocks), keeping only the inventory's hosts: a site topology
    also lists nodes the planner does not know (CPU nodes, login nodes)."""
    known = set(inv.nodes)
    switches = tuple(replace(s, nodes=tuple(h for h in s.nodes if h in known))
                     for s in fabric.switches) \
        if fabric.switches or whole else inv.fabric.switches
    blocks = tuple(replace(b, nodes=tuple(h for h in b.nodes if h in known))
                   for b in fabric.blocks) if fabric.blocks or whole else inv.fabric.blocks
    if not (whole and any(b.nodes for b in blocks)):
        # the site's whole block list keeps its empty blocks: they hold the
        # positions Slurm aggregates blocks by (placement/segments.py)
        blocks = tuple(b for b in blocks if b.nodes)
    sizes = fabric.block_sizes if fabric.blocks or whole else inv.fabric.block_sizes
    return replace(inv, fabric=Fabric(switches=switches, blocks=blocks,
                                      block_sizes=sizes if blocks or not whole else ()),
                   source=inv.source or source)


# --------------------------------------------------------------------------
# What changes


def leaf_of(fabric: Fabric) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for s in fabric.switches:
        for h in s.nodes:
            out.setdefault(h, s.name)
    for b in fabric.blocks:
        for h in b.nodes:
            out.setdefault(h, b.name)
    return out


def _renames(old: Dict[str, str], new: Dict[str, str]) -> Dict[str, str]:
    """Old leaf/block name -> new name, for the units whose nodes are all
    the same under a name that changed (so the nodes did not move)."""
    members_old: Dict[str, set] = {}
    members_new: Dict[str, set] = {}
    for h, leaf in old.items():
        members_old.setdefault(leaf, set()).add(h)
    for h, leaf in new.items():
        members_new.setdefault(leaf, set()).add(h)
    by_nodes = {frozenset(m): n for n, m in members_new.items()}
    out = {}
    for o, m in members_old.items():
        n = by_nodes.get(frozenset(m))
        if n is not None and n != o and o not in members_new:
            out[o] = n
    return out


def describe_changes(old: Fabric, new: Fabric) -> List[str]:
    """Human summary of what a new topology changes: switches/blocks added,
    removed, renamed or changed, nodes added, removed or moved to another
    leaf/block. A leaf that keeps its nodes under a new name is a rename,
    not a move of its nodes."""
    out: List[str] = []
    lo, ln = leaf_of(old), leaf_of(new)
    renames = _renames(lo, ln)
    for what, a, b in (("switch", {s.name: s for s in old.switches},
                        {s.name: s for s in new.switches}),
                       ("block", {x.name: x for x in old.blocks}, {x.name: x for x in new.blocks})):
        renamed = sorted(((o, renames[o]) for o in set(a) - set(b)
                          if renames.get(o) in set(b) - set(a)), key=lambda p: natural_key(p[0]))
        gone_names = {o for o, _ in renamed}
        new_names = {n for _, n in renamed}
        added = sorted(set(b) - set(a) - new_names, key=natural_key)
        removed = sorted(set(a) - set(b) - gone_names, key=natural_key)
        changed = sorted((n for n in set(a) & set(b)
                          if (set(a[n].nodes), getattr(a[n], "switches", ()))
                          != (set(b[n].nodes), getattr(b[n], "switches", ()))), key=natural_key)
        plural = "switches" if what == "switch" else "blocks"
        for label, names in (("added", added), ("removed", removed), ("changed", changed)):
            if names:
                out.append(f"{plural} {label}: {_short(names)}")
        if renamed:
            out.append(f"{plural} renamed (same nodes): "
                       f"{_short(f'{o} -> {n}' for o, n in renamed)}")
    gone = set(lo) - set(ln)
    came = set(ln) - set(lo)
    moved = [h for h in set(lo) & set(ln) if lo[h] != ln[h] and renames.get(lo[h]) != ln[h]]
    if came:
        out.append(f"nodes added: {fold_hostlist(came)}")
    if gone:
        out.append(f"nodes removed: {fold_hostlist(gone)}")
    if moved:
        out.append(f"nodes moved to another leaf/block: {fold_hostlist(moved)}")
    if old.block_sizes != new.block_sizes and (old.blocks or new.blocks):
        out.append(f"BlockSizes {','.join(map(str, old.block_sizes)) or '(none)'} -> "
                   f"{','.join(map(str, new.block_sizes)) or '(none)'}")
    return out


def _short(names: Iterable[str], limit: int = 10) -> str:
    names = list(names)
    text = ", ".join(names[:limit])
    return text if len(names) <= limit else f"{text} and {len(names) - limit} more"
