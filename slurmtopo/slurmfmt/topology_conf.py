"""Slurm's topology.conf (topology.conf(5)): write it from a Fabric, read it back.

Two plugins share this file format:

* ``topology/tree``: ``SwitchName=leaf01 Nodes=gpu[001-032]`` for leaves,
  ``SwitchName=spine Switches=leaf[01-04]`` above (a switch has Nodes or
  Switches, never both; ``LinkSpeed`` is informative, Slurm does not use it);
* ``topology/block``: ``BlockName=b1 Nodes=...`` and ``BlockSizes=18,36``;
* ``topology/ring`` (26.05): ``RingName=r1 Nodes=...``, nodes in ring order.

topology.yaml is :mod:`.topology_yaml`; reading either file whichever it
is, applying it to an inventory and saying what changes is
:mod:`.topology_files`.

Hostlists are folded with ClusterShell's NodeSet (Slurm's hostlist syntax).
The reader accepts what Slurm accepts (case-insensitive keys, ``#``
comments, ``\\`` continuations) and turns every bad line into one
``file:line: ...`` error, with the checks of :mod:`.checks` that Slurm's
own parser makes.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from slurmtopo.errors import InventoryError
from slurmtopo.inventory.hostlist import fold_hostlist, fold_in_order
from slurmtopo.inventory.model import Block, Fabric, Switch
from slurmtopo.inventory.ringtree import ring_fabric
from slurmtopo.slurmfmt.checks import (NAME_RE, check_blocks, check_tree, raise_first_error,
                                       valid_block_sizes)
from slurmtopo.slurmfmt.slurm_conf import ConfLine, conf_lines, hostlist_at

SWITCH_KEYS = {"switchname", "switches", "nodes", "linkspeed"}
BLOCK_KEYS = {"blockname", "nodes", "blocksizes"}


# --------------------------------------------------------------------------
# Writing


def comment_lines(header: Sequence[str]) -> List[str]:
    return [f"# {h}".rstrip() for h in header]


def render_tree(fabric: Fabric, header: Sequence[str] = ()) -> str:
    """topology.conf lines for topology/tree."""
    lines = comment_lines(header)
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


def render_ring(fabric: Fabric, header: Sequence[str] = ()) -> str:
    """topology.conf lines for topology/ring (Slurm 26.05+): one
    ``RingName=`` line a ring, its nodes in ring order."""
    lines = comment_lines(header)
    for g in fabric.rings:
        lines.append(f"RingName={g.name} Nodes={fold_in_order(g.nodes)}")
    return "\n".join(lines) + "\n"


def render_block(fabric: Fabric, header: Sequence[str] = ()) -> str:
    """topology.conf lines for topology/block."""
    lines = comment_lines(header)
    for b in fabric.blocks:
        if b.domain and b.nodes:
            lines.append(f"# {b.name}={b.domain}")
        lines.append(f"BlockName={b.name} Nodes={fold_hostlist(b.nodes)}" if b.nodes
                     else f"BlockName={b.name}")
    if fabric.block_sizes:
        lines.append("BlockSizes=" + ",".join(str(s) for s in fabric.block_sizes))
    return "\n".join(lines) + "\n"


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


def block_sizes_at(value: str, path: str, line: int) -> Tuple[int, ...]:
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
                sizes = block_sizes_at(d["blocksizes"], path, cl.line)
        elif first == "blocksizes":
            if len(cl.pairs) > 1:
                raise InventoryError(f"unexpected {cl.pairs[1][0]} after BlockSizes", path,
                                     cl.line)
            sizes = block_sizes_at(cl.pairs[0][1], path, cl.line)
        elif first == "ringname":  # topology/ring (26.05): rules in inventory/ringtree.py
            d = _one_line_keys(cl, {"ringname", "nodes"}, path)
            if not NAME_RE.match(d["ringname"]):
                raise InventoryError(f"ring name {d['ringname']!r:.40} is not a plain name "
                                     "(letters, digits, '.', '_', '-')", path, cl.line)
            rings.append((d["ringname"], tuple(hostlist_at(d["nodes"], path, cl.line, "Nodes",
                                                          ordered=True))
                          if "nodes" in d else (), f"{path}:{cl.line}"))
        else:
            raise InventoryError(f"a topology.conf line starts with SwitchName=, BlockName= or "
                                 f"BlockSizes=, not {cl.pairs[0][0]}=", path, cl.line)
    if rings:
        if switches or blocks:
            raise InventoryError("RingName= lines cannot share a topology.conf with switches "
                                 "or blocks (one plugin reads it)", rings[0][2])
        return ring_fabric(rings, path)
    fabric = Fabric(switches=tuple(switches), blocks=tuple(blocks), block_sizes=sizes)
    if switches:
        raise_first_error(check_tree(fabric))
    if blocks:
        raise_first_error(check_blocks(fabric))
    return fabric
