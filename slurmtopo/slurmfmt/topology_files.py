"""Slurm's topology files whichever they are: render, check, read, apply, compare.

A Fabric is the one graph (:mod:`slurmtopo.inventory.model`); each format has its
writer and reader (:mod:`.topology_conf` for topology/tree and
topology/block, :mod:`.topology_yaml`). Here: the choice by format name or
file name, a site's file as a Fabric the planner can use
(:func:`read_topology_conf`, :func:`apply_fabric`), and what a new file
really changes for ``--diff`` (:func:`describe_changes`).
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.hostlist import fold_hostlist, natural_key
from slurmtopo.inventory.model import Fabric, Inventory
from slurmtopo.inventory.topology import made_from
from slurmtopo.slurmfmt.checks import check_blocks, check_ring_torus, check_tree
from slurmtopo.slurmfmt.slurm_conf import read_text
from slurmtopo.slurmfmt.topology_conf import (parse_topology_conf, render_block, render_ring,
                                               render_tree)
from slurmtopo.slurmfmt.topology_yaml import parse_topology_yaml, render_yaml


def render(fabric: Fabric, fmt: str, header: Sequence[str] = ()) -> str:
    if fmt == "tree":
        return render_tree(fabric, header)
    if fmt == "block":
        return render_block(fabric, header)
    if fmt == "ring":
        return render_ring(fabric, header)
    if fmt == "yaml":
        return render_yaml(fabric, header)
    raise ValueError(f"unknown topology format {fmt!r}")


def check(fabric: Fabric, fmt: str, slurm_nodes=None):
    """The checks that apply to ``fmt`` (both kinds for topology.yaml)."""
    if fabric.rings or fabric.toruses:  # Slurm's rules were checked as they were read
        return check_ring_torus(fabric, slurm_nodes)
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
    kept = switches is inv.fabric.switches  # the inventory's rings/toruses made them
    return replace(inv, fabric=Fabric(switches=switches, blocks=blocks,
                                      block_sizes=sizes if blocks or not whole else (),
                                      rings=inv.fabric.rings if kept else (),
                                      toruses=inv.fabric.toruses if kept else ()),
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
