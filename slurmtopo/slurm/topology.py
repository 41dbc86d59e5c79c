"""Slurm's live topology (``scontrol show topology``) as a
:class:`slurmtopo.inventory.model.Fabric`, for a plan whose inventory has no fabric
(:func:`slurmtopo.api.live_topology`). The records are read with the
backend's ``scontrol`` reader (:mod:`slurmtopo.slurm.parse`)."""
from __future__ import annotations

from slurmtopo.inventory.model import Block, Fabric, Switch
from slurmtopo.slurm.parse import _first, _hosts, _number, _tokens, scontrol_records


def fabric_from_scontrol_topology(text: str) -> Fabric:
    """``scontrol show topology`` as a :class:`slurmtopo.inventory.model.Fabric`: the
    ``SwitchName=`` records of topology/tree (Level, Nodes of a leaf,
    Switches), the ``BlockName=`` records of topology/block (its base blocks; the
    ``AggregatedBlock=`` records only give the sizes jobs may span:
    BlockSizes is every block size printed). LinkSpeed is Slurm's relative
    number, not a rate, so it is left out. Records as Slurm 22.05 to 26.05
    print them (topology_tree.c, topology_block.c)."""
    switches = []
    for rec in scontrol_records(text, "SwitchName"):
        children = _hosts(_first(rec, "Switches"))
        # an upper switch prints every node below it; the inventory's
        # switches list only the hosts cabled to them
        switches.append(Switch(name=_first(rec, "SwitchName") or "",
                               level=_number(_first(rec, "Level")),
                               nodes=() if children else _hosts(_first(rec, "Nodes")),
                               switches=children))
    blocks, sizes = [], set()
    for line in text.splitlines():
        rec = _tokens(line.strip())
        key = rec[0][0] if rec else ""
        if key not in ("BlockName", "AggregatedBlock"):
            continue
        size = _first(rec, "BlockSize")
        if size and size.isdigit() and int(size) > 0:
            sizes.add(int(size))
        if key == "BlockName":
            blocks.append(Block(name=_first(rec, "BlockName") or "",
                                nodes=_hosts(_first(rec, "Nodes"))))
    return Fabric(switches=tuple(s for s in switches if s.name), blocks=tuple(blocks),
                  block_sizes=tuple(sorted(sizes)) if blocks else ())
