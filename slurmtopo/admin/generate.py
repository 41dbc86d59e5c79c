"""Putting the sources together: which hosts, which switches, which blocks.

``slurmtopo topology generate`` can be given node reports, slurm.conf, an
ibnetdiscover dump, a YAML fabric description, or a mix. The rules:

* **Hosts**: ``--nodes`` if given, else the nodes of slurm.conf (the
  topology must cover every Slurm node, GPU or not), else the node reports;
  with none of these, every named CA host of the fabric.
* **Compute HCAs**: ``--hca``/``--rails`` if given, else each node's compute
  NICs from its report (``role: compute``), else every HCA.
* **Switches**: derived from ibnetdiscover, or taken from the fabric
  document (``--fabric``, or a fabric file among the reports).
* **Blocks**: the fabric document's, else one per NVLink domain of the
  reports (same cluster UUID and clique id: one NVL72 rack), else, for
  ``--format block`` over a switch tree, one per leaf (scalable unit).
* **BlockSizes**: ``--block-sizes``, else the document's, else as NVIDIA
  topograph infers them (``admin/block_domains.py``): the smallest block
  and one doubling per power of two in the number of blocks, or, when one
  NVLink cluster UUID holds several cliques (domains inside a domain), the
  largest clique and its doublings up to the largest domain.
* **Rings and toruses** (Slurm 26.05): an inventory's (or the fabric
  document's) ``rings``/``toruses`` are written as they are, the
  ``RingName=`` lines of topology/ring or topology.yaml's ``ring:`` and
  ``torus3d:`` sections (:func:`ring_torus_topology`).
* **Placeholders**: NVLink domains with cliques inside them, or given
  ``--block-sizes``, are laid out as topograph does: every domain the same
  power-of-two run of base blocks, empty ``BlockName=`` lines where a rack
  is missing, so the positions of the others do not shift; the blocks are
  then ``block001``... with their domain as a comment, or named from node
  names with ``--block-name REGEXP=FORMAT``.
* **One tree**: switches with no common parent (two leaves cabled to each
  other, a file of leaves and no spine) get a top switch above them, with a
  note: otherwise Slurm finds no switch that reaches all nodes and every
  job needing several leaves fails.
* **Nobody lost quietly**: hosts the HCA selection or the node list would
  leave out stop the run (counts per reason) unless ``allow_missing``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from slurmtopo import __version__
from slurmtopo.admin.switch_tree import HostSelection, derive_fabric, left_out_message
from slurmtopo.inventory.hostlist import natural_key
from slurmtopo.admin.block_domains import BlockNaming, domain_blocks, doubling_sizes
from slurmtopo.admin.cliques import drop_from_blocks, stray_note, strays_in_blocks
from slurmtopo.admin.ibnetdiscover import IbFabric
from slurmtopo.slurmfmt.slurm_conf import SlurmConf
from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Block, Fabric, Inventory, Switch
from slurmtopo.inventory.topology import nvlink_domains, switch_levels

#: name of the switch added above switches that have no common parent
TOP_SWITCH = "top"


@dataclass
class Built:
    fabric: Fabric
    notes: List[str] = field(default_factory=list)
    sources: List[str] = field(default_factory=list)


def nvlink_blocks(inv: Inventory) -> Tuple[Block, ...]:
    """One block per multi-node NVLink domain, named from the domain so a
    rack keeps its name when others are added (``nvl-5b1a2c3d-1``)."""
    domains = nvlink_domains(inv)
    keys = sorted(domains, key=lambda k: natural_key(min(domains[k], key=natural_key)))
    out = []
    for key in keys:
        uuid, _, clique = key.rpartition("/")
        short = "".join(c for c in uuid if c.isalnum())[:8] or "x"
        name = f"nvl-{short}-{clique}"
        out.append(Block(name=name, nodes=tuple(sorted(domains[key], key=natural_key))))
    names = [b.name for b in out]
    if len(set(names)) != len(names):  # UUIDs sharing 8 characters: use them whole
        out = [Block(name=f"nvl-{''.join(c for c in k.rpartition('/')[0] if c.isalnum())}-"
                          f"{k.rpartition('/')[2]}", nodes=b.nodes) for k, b in zip(keys, out)]
    return tuple(out)


def leaf_blocks(fabric: Fabric) -> Tuple[Block, ...]:
    return tuple(Block(name=s.name, nodes=s.nodes) for s in fabric.switches if s.nodes)


def top_level(switches: Sequence[Switch]) -> List[str]:
    """Switches nobody lists as a child (the roots of the tree)."""
    children = {c for s in switches for c in s.switches}
    return [s.name for s in switches if s.name not in children]


def join_roots(switches: Tuple[Switch, ...]) -> Tuple[Tuple[Switch, ...], Optional[str]]:
    """One tree out of several: a top switch above every root, and the note
    saying so; ``switches`` unchanged (and no note) when there is one root.

    Slurm's topology/tree needs a switch that reaches every node ("no switch
    can reach all nodes through its descendants"), else a job that needs
    nodes of two leaves never starts.
    """
    roots = top_level(switches)
    if len(roots) <= 1:
        return switches, None
    names = {s.name for s in switches}
    name, n = TOP_SWITCH, 2
    while name in names:
        name, n = f"{TOP_SWITCH}{n}", n + 1
    level = 1 + max((s.level for s in switches), default=0)
    top = Switch(name=name, level=level, switches=tuple(sorted(roots, key=natural_key)),
                 description="added by slurmtopo: no switch above these in the input")
    shown = ", ".join(sorted(roots, key=natural_key)[:8]) + (" ..." if len(roots) > 8 else "")
    note = (f"{len(roots)} switches have no common parent ({shown}); added switch {name!r} "
            "above them so Slurm sees one tree (without it, jobs spanning them fail). If "
            "they are not linked at all, fix the fabric instead")
    return switches + (top,), note


def default_block_sizes(blocks: Sequence[Block]) -> Tuple[int, ...]:
    """topograph's one-level BlockSizes: the smallest block with nodes and
    one doubling per power of two in the number of such blocks."""
    counts = [len(b.nodes) for b in blocks if b.nodes]
    return doubling_sizes(counts) if counts else ()


def nvlink_domain_map(inv: Inventory) -> Dict[str, Dict[str, str]]:
    """The NVLink domains of the reports as topograph's domain map: the
    cluster UUID is the domain; where one UUID holds several cliques (one
    NVLink fabric partitioned, or racks joined into one), each clique is a
    sub-domain (named ``UUID:clique``)."""
    cliques: Dict[str, Set[int]] = {}
    members: Dict[str, Dict[str, int]] = {}
    for n in inv:
        d = n.nvlink_domain
        if d is None:
            continue
        cliques.setdefault(d.cluster_uuid, set()).add(d.clique_id)
        members.setdefault(d.cluster_uuid, {})[n.name] = d.clique_id
    return {u: {h: (f"{u}:{c}" if len(cliques[u]) > 1 else "") for h, c in hosts.items()}
            for u, hosts in members.items()}


def fabric_pending(inv: Inventory) -> Dict[str, str]:
    """Trays whose agent found the NVLink fabric not completed (node ->
    state): the agent reports no domain for them, so no block holds them."""
    out: Dict[str, str] = {}
    for name, rep in sorted(inv.reports.items(), key=lambda kv: natural_key(kv[0])):
        fab = rep.get("nvlink_fabric") if isinstance(rep, dict) else None
        if isinstance(fab, dict):
            out[name] = str(fab.get("state", "unknown"))
    return out


def layout_domains(inv: Inventory, sizes: Sequence[int],
                   naming: Optional[BlockNaming]) -> Optional[Tuple[Tuple[Block, ...],
                                                                  Tuple[int, ...]]]:
    """Blocks with placeholders (topograph's layout), or None where the
    one-block-per-domain list stands: no domains inside domains, no sizes
    given and no naming rule."""
    dmap = nvlink_domain_map(inv)
    if not dmap:
        return None
    nested = any(sub for hosts in dmap.values() for sub in hosts.values())
    if not (nested or sizes or naming):
        return None
    laid, eff = domain_blocks(dmap, tuple(sizes), naming)
    return tuple(Block(name=b.name, nodes=b.nodes, domain=b.domain or None) for b in laid), eff


def selection(nodes: Optional[Sequence[str]], slurm: Optional[SlurmConf],
              inv: Optional[Inventory], hcas: Optional[Set[str]] = None,
              rails: Optional[Set[int]] = None) -> HostSelection:
    if nodes is not None:
        allowed: Optional[Set[str]] = set(nodes)
    elif slurm is not None:
        allowed = set(slurm.nodes)
    elif inv is not None:
        allowed = set(inv.nodes)
    else:
        allowed = None
    compute = None
    if hcas is None and rails is None and inv is not None:
        compute = {n.name: {nic.name for nic in n.hardware.compute_nics()}
                   for n in inv if n.hardware.nics}
    return HostSelection(nodes=allowed, hcas=hcas, rails=rails, compute_nics=compute,
                         rename=slurm.hostnames if slurm is not None else None)


def build_topology(fmt: str, *, ib: Optional[IbFabric] = None, fabric_doc: Optional[Fabric] = None,
                   inv: Optional[Inventory] = None, slurm: Optional[SlurmConf] = None,
                   nodes: Optional[Sequence[str]] = None, hcas: Optional[Set[str]] = None,
                   rails: Optional[Set[int]] = None,
                   block_sizes: Optional[Sequence[int]] = None,
                   block_naming: Optional[BlockNaming] = None,
                   fabric_source: Optional[str] = None, allow_missing: bool = False) -> Built:
    """The Fabric to write as ``fmt`` (tree, block or yaml) from the sources.

    Raises SlurmtopoError when the HCA selection or the node list leaves
    hosts of the fabric out, unless ``allow_missing`` (then it is a note).
    """
    notes: List[str] = []
    sources: List[str] = []
    doc = fabric_doc
    if doc is None and inv is not None and (inv.fabric.switches or inv.fabric.blocks):
        doc = inv.fabric
    if ib is None and doc is not None and (doc.rings or doc.toruses):
        return ring_torus_topology(fmt, doc, inv, fabric_source)
    switches: Tuple = ()
    if ib is not None:
        derived = derive_fabric(ib, selection(nodes, slurm, inv, hcas, rails))
        switches = derived.fabric.switches
        notes += derived.notes
        sources.append(f"ibnetdiscover {os.path.basename(ib.source)}")
        if derived.left_out:
            what = left_out_message(derived.left_out)
            if not allow_missing:
                raise SlurmtopoError(f"{ib.source}: {what}; check --hca/--rails and the node "
                                     "list, or pass --allow-missing to write without them")
            notes.append(what)
        if not switches:
            raise SlurmtopoError(f"{ib.source}: no compute host found on any switch "
                                 + (f"({notes[0]})" if notes else ""))
    elif doc is not None:
        switches = doc.switches
        sources.append("fabric description " + (os.path.basename(fabric_source) if fabric_source
                                                else "among the node reports"))
    if inv is not None:
        stale = [n for n, r in inv.reports.items() if r.get("stale")]
        sources.append(f"{len(inv)} node report(s)" + (f", {len(stale)} stale" if stale else ""))
    if slurm is not None:
        sources.append("slurm.conf")

    blocks: Tuple[Block, ...] = ()
    sizes: Tuple[int, ...] = tuple(block_sizes or ())
    if fmt in ("block", "yaml"):
        if inv is not None and not (doc is not None and doc.blocks) \
                and (pend := fabric_pending(inv)):
            shown = ", ".join(f"{n} ({st})" for n, st in list(pend.items())[:8])
            notes.append(f"{len(pend)} tray(s) left out of NVLink blocks, their NVLink fabric "
                         f"not completed: {shown}{' ...' if len(pend) > 8 else ''}")
        strays = []
        if inv is not None and doc is not None and doc.blocks:
            strays = strays_in_blocks(inv, doc.blocks)
        if strays:
            notes.append(stray_note(strays))
        if doc is not None and doc.blocks:
            blocks = drop_from_blocks(doc.blocks, strays)
            sizes = sizes or doc.block_sizes
        elif inv is not None and (laid := layout_domains(inv, sizes, block_naming)):
            blocks, sizes = laid
            empty = sum(1 for b in blocks if not b.nodes)
            notes.append(f"{len(blocks) - empty} block(s) from NVLink domains of the node "
                         f"reports, {empty} placeholder(s) keeping block positions")
        elif inv is not None and (nv := nvlink_blocks(inv)):
            blocks = nv
            notes.append(f"{len(blocks)} block(s) from NVLink domains of the node reports")
        elif fmt == "block" and switches:
            blocks = leaf_blocks(Fabric(switches=switches))
            notes.append(f"{len(blocks)} block(s), one per leaf switch (scalable unit)")
        sizes = sizes or default_block_sizes(blocks)
    if block_naming is not None and blocks and not any(b.domain for b in blocks):
        raise SlurmtopoError("--block-name names blocks made from NVLink domains of the node "
                             "reports; these blocks come from elsewhere")
    if fmt == "ring":
        raise SlurmtopoError("no rings to write: the inventory (or --fabric) describes none")
    if fmt == "tree" and not switches:
        raise SlurmtopoError("no switches to write: give --ibnetdiscover FILE or --fabric FILE "
                             "(or a fabric document among the reports)")
    if fmt == "block" and not blocks:
        raise SlurmtopoError("no blocks to write: the reports have no NVLink domains and there "
                             "is no fabric (give --ibnetdiscover or --fabric)")
    if fmt == "yaml" and not (switches or blocks):
        raise SlurmtopoError("nothing to write: give --ibnetdiscover FILE, --fabric FILE or "
                             "node reports with NVLink domains")
    if switches and fmt in ("tree", "yaml"):
        switches, note = join_roots(tuple(switches))
        if note:
            notes.append(note)
    if fmt == "tree":
        fabric = Fabric(switches=switches)
    elif fmt == "block":
        fabric = Fabric(blocks=blocks, block_sizes=sizes)
    else:
        fabric = Fabric(switches=switches, blocks=blocks, block_sizes=sizes if blocks else ())
    return Built(fabric=fabric, notes=notes, sources=sources)


def ring_torus_topology(fmt: str, doc: Fabric, inv: Optional[Inventory],
                        fabric_source: Optional[str]) -> Built:
    """The rings or toruses of the inventory (or fabric document) as they
    are: topology/ring as topology.conf (``ring``) or topology.yaml,
    topology/torus3d as topology.yaml only (topology.conf has no torus
    lines)."""
    if fmt in ("tree", "block"):
        raise SlurmtopoError(f"the fabric describes {'rings' if doc.rings else 'toruses'}, not "
                             f"a topology/{fmt} network: write --format "
                             f"{'ring or yaml' if doc.rings else 'yaml'}")
    if fmt == "ring" and not doc.rings:
        raise SlurmtopoError("topology/torus3d is read from topology.yaml only: write "
                             "--format yaml")
    sources = ["fabric description " + (os.path.basename(fabric_source) if fabric_source
                                        else "of the inventory")]
    if inv is not None:
        sources.append(f"{len(inv)} node report(s)")
    return Built(fabric=Fabric(switches=doc.switches, rings=doc.rings, toruses=doc.toruses),
                 sources=sources)


def header(what: str, fmt: str, built: Built) -> List[str]:
    """Comment lines on top of a generated file (no timestamp: an unchanged
    topology must give an unchanged file)."""
    f = built.fabric
    plugin = {"tree": " for topology/tree", "block": " for topology/block",
              "ring": " for topology/ring (Slurm 26.05+)",
              "yaml": " (Slurm 26.05+)" if f.rings or f.toruses else " (Slurm 25.05+)"}[fmt]
    lines = [f"{what}{plugin}, generated by slurmtopo {__version__}",
             "from " + (", ".join(built.sources) or "nothing")]
    for units, one, many in ((f.rings, "ring", "rings"), (f.toruses, "torus", "toruses")):
        if units:
            lines.append(f"{len(units)} {one if len(units) == 1 else many}, "
                         f"{sum(len(u.nodes) for u in units)} nodes")
    if f.switches and not (f.rings or f.toruses):
        levels = 1 + max(switch_levels(Fabric(switches=f.switches)).values())
        hosts = {h for s in f.switches for h in s.nodes}
        lines.append(f"{len(f.switches)} switches, {levels} level(s), {len(hosts)} nodes")
    if f.blocks:
        empty = sum(1 for b in f.blocks if not b.nodes)
        lines.append(f"{len(f.blocks) - empty} blocks, {sum(len(b.nodes) for b in f.blocks)} "
                     "nodes" + (f", {empty} placeholder block(s)" if empty else ""))
    lines.append("Do not edit: regenerate with `slurmtopo topology generate`.")
    return lines
