"""Does Slurm's node order follow the blocks? ``TopologyParam=BlockAsNodeRank`` (pure).

slurmctld sorts its node table once, when it reads slurm.conf
(src/slurmctld/read_config.c, ``_sort_node_record_table_ptr``): by node
name in natural order (``strnatcmp``), unless the topology plugin ranks the
nodes. topology/block does that only with ``TopologyParam=BlockAsNodeRank``
(25.11+, src/plugins/topology/block/topology_block.c,
``topology_p_generate_node_ranking``): every node of the n-th block gets
rank n (nodes in no block rank 0, first), and the table is sorted by rank.

That order is the order of every job's node list and of Slurm's own task
layout, and the order in which the selection walks the nodes. When node
names interleave blocks (racks cabled out of name order, trays renamed
after a swap), a job's nodes and tasks alternate between racks unless the
parameter is set. slurmtopo's own launches do not depend on it (``slurmtopo
bind`` writes ``SLURM_HOSTFILE``), but a user's plain ``srun`` and Slurm's
view of "the next nodes" do. So ``topology generate``/``check`` warn when
a block topology's names do not follow its blocks and slurm.conf lacks the
parameter, and say when the parameter is set on a release without it.
slurmtopo never edits slurm.conf: the admin adds the line.

Natural order here is :func:`slurmtopo.admin.switch_tree.natural_key`
(digit runs compared as numbers), which orders names as ``strnatcmp`` does
for the usual ``prefix + number`` names.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from slurmtopo.slurmfmt.checks import WARNING, Problem
from slurmtopo.inventory.hostlist import natural_key
from slurmtopo.inventory.model import Fabric

PARAM = "BlockAsNodeRank"
#: the release that added it (CHANGELOG/slurm-25.11.md)
SINCE = (25, 11)


def has_param(topology_param: Optional[str]) -> bool:
    """Is BlockAsNodeRank among slurm.conf's TopologyParam values? (Slurm
    matches it case-insensitively anywhere in the string.)"""
    return PARAM.lower() in (topology_param or "").lower()


def out_of_order(fabric: Fabric) -> Optional[str]:
    """The first pair of nodes whose name order contradicts their block
    order, as a sentence; None when name order keeps every block's nodes
    together and the blocks in their listed order."""
    position = {}
    for i, blk in enumerate(fabric.blocks):
        for h in blk.nodes:
            position.setdefault(h, (i, blk.name))
    names = sorted(position, key=natural_key)
    for a, b in zip(names, names[1:]):
        if position[b][0] < position[a][0]:
            return (f"{b} of block {position[b][1]} comes after {a} of block "
                    f"{position[a][1]} in name order, though {position[b][1]} is listed first")
    return None


def node_rank_problems(fabric: Fabric, topology_param: Optional[str],
                       slurm_version: Optional[Sequence[int]] = None) -> List[Problem]:
    """Warnings about the node order a block topology gets on this
    slurm.conf (``topology_param``: its TopologyParam, None when unknown
    or unset) and release (None: a current one)."""
    if not fabric.blocks:
        return []
    old = slurm_version is not None and tuple(slurm_version[:2]) < SINCE
    why = out_of_order(fabric)
    if has_param(topology_param):
        if old:
            return [Problem(WARNING, f"slurm.conf sets TopologyParam={PARAM}, which Slurm "
                                     f"{slurm_version[0]}.{slurm_version[1]:02d} does not have "
                                     "(25.11+): nodes stay in name order")]
        return []
    if why is None:
        return []
    if old:
        return [Problem(WARNING, f"node names do not follow the blocks: {why}; Slurm orders "
                                 "nodes by name, so jobs' node lists and tasks interleave "
                                 f"blocks (TopologyParam={PARAM} needs 25.11+)")]
    return [Problem(WARNING, f"node names do not follow the blocks: {why}; Slurm orders "
                             "nodes by name, so jobs' node lists and tasks interleave blocks: "
                             f"add TopologyParam={PARAM} to slurm.conf (25.11+, with "
                             "topology/block as the cluster's default topology)")]
