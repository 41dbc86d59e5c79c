"""Slurm's topology.yaml (topology.yaml(5), Slurm 25.05+): write it from a Fabric, read it back.

A list of named topologies, each with ``tree: {switches: [{switch,
children, nodes}]}`` or ``block: {block_sizes, blocks: [{block, nodes}]}``
or ``flat: true``; the first with ``cluster_default: true`` is the default.
Every error names ``file:line``; the checks are those of topology.conf
(:mod:`.checks`).
"""
from __future__ import annotations

import re
from typing import Dict, List, Sequence, Tuple

import yaml

from slurmtopo.files.yamlio import LineDict, LineList, Reader, as_str, parse_text
from slurmtopo.inventory.hostlist import fold_hostlist, fold_in_order
from slurmtopo.inventory.model import Block, Fabric, Switch
from slurmtopo.inventory.ringtree import torus_placements
from slurmtopo.inventory.schema import NODE_NAME
from slurmtopo.slurmfmt import ring_torus
from slurmtopo.slurmfmt.checks import check_blocks, check_tree, raise_first_error
from slurmtopo.slurmfmt.slurm_conf import hostlist_at
from slurmtopo.slurmfmt.topology_conf import block_sizes_at, comment_lines


def yaml_topologies(fabric: Fabric, tree_name: str = "tree",
                    block_name: str = "block") -> List[Dict[str, object]]:
    """The topology.yaml document: a tree topology (cluster default) when
    there are switches, a block topology when there are blocks; a ring or
    torus3d topology (26.05) when the fabric has rings or toruses (its
    switches are made from them, not written)."""
    out: List[Dict[str, object]] = []
    if fabric.rings or fabric.toruses:
        return ring_torus_topologies(fabric)
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


def ring_torus_topologies(fabric: Fabric) -> List[Dict[str, object]]:
    """topology.yaml's ``ring:`` and ``torus3d:`` topologies (the first the
    cluster default), node lists in their order (ring order, x-major
    fill), every torus with its placements (its own, else the boxes of its
    tree: :func:`slurmtopo.inventory.ringtree.torus_placements`)."""
    def xyz(v) -> Dict[str, int]:
        return {"x": v[0], "y": v[1], "z": v[2]}

    out: List[Dict[str, object]] = []
    if fabric.rings:
        out.append({"topology": "ring", "cluster_default": True,
                    "ring": {"rings": [{"ring": g.name, "nodes": fold_in_order(g.nodes)}
                                       for g in fabric.rings]}})
    if fabric.toruses:
        out.append({"topology": "torus3d", "cluster_default": not out,
                    "torus3d": {"toruses": [
                        {"name": t.name, "dims": xyz(t.dims), "nodes": fold_in_order(t.nodes),
                         "placements": [{"dims": xyz(p)} for p in torus_placements(t)]}
                        for t in fabric.toruses]}})
    return out


def render_yaml(fabric: Fabric, header: Sequence[str] = ()) -> str:
    head = "\n".join(comment_lines(header))
    body = yaml.safe_dump(yaml_topologies(fabric), sort_keys=False, default_flow_style=False,
                          width=1 << 16) if (fabric.switches or fabric.blocks) else ""
    return (head + "\n" if head else "") + body

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
        if kinds[0] in ("ring", "torus3d"):  # 26.05: slurmtopo/slurmfmt/ring_torus.py
            read = ring_torus.yaml_ring if kinds[0] == "ring" else ring_torus.yaml_torus3d
            fab = read(r, d[kinds[0]], path, Reader.line(d, kinds[0]), _hl_in_order)
        elif kinds[0] == "tree":
            fab = _yaml_tree(r, d["tree"], path, Reader.line(d, "tree"))
        elif kinds[0] == "block":
            fab = _yaml_block(r, d["block"], path, Reader.line(d, "block"))
        else:
            fab = Fabric()
        out.append((str(name), default, fab))
    return out


def _hl_in_order(r: Reader, d: LineDict, key: str, path: str, what: str) -> Tuple[str, ...]:
    """A ring's or a torus's nodes, in the order written (Slurm's order)."""
    return _hl(r, d, key, path, what, ordered=True)


def _hl(r: Reader, d: LineDict, key: str, path: str, what: str,
        ordered: bool = False) -> Tuple[str, ...]:
    value = d.get(key)
    if value is None:
        return ()
    if isinstance(value, list):
        value = ",".join(r.strings(value, what, Reader.line(d, key)))
    elif not isinstance(value, str):
        raise r.error(f"{what} must be a hostlist, got {value!r:.40}", Reader.line(d, key))
    names = hostlist_at(value, path, Reader.line(d, key), what, ordered)
    if key == "nodes":
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
        sizes = block_sizes_at(",".join(str(x) for x in raw), path, Reader.line(d, "block_sizes"))
    blocks = []
    for b in r.sequence(d.get("blocks") or LineList(), "blocks", Reader.line(d)):
        b = r.mapping(b, "block", {"block", "nodes"})
        nodes = _hl(r, b, "nodes", path, "nodes") if b.get("nodes") is not None else ()
        blocks.append(Block(name=str(r.need(b, "block", "block")), nodes=nodes,
                            origin=f"{path}:{Reader.line(b)}"))
    fab = Fabric(blocks=tuple(blocks), block_sizes=sizes)
    raise_first_error(check_blocks(fab))
    return fab
