"""A cluster as every use case loads it.

The api (``slurmtopo plan``/``sbatch``), the placement daemon and the
simulator all need it, and the daemon must not climb up to the api for
it: it lives here, below all three (the api re-exports it). The step they
all price is :func:`slurmtopo.cost.step.price_step`, below them too.
"""
from __future__ import annotations

from typing import Sequence, Union

from slurmtopo.cost import cost_params
from slurmtopo.cost.bound import STATS_TABLE, InventoryStats, inventory_stats
from slurmtopo.inventory.cache import Table
from slurmtopo.inventory.model import Inventory
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.placement.fabric import TABLE, fabric_tree, same_tree, tree_from_json, tree_json


def load_cluster(paths: Union[str, Sequence[str]], write_cache: bool = True) -> Inventory:
    """Read an inventory (file, directory of node reports, or several) and
    validate all of it, the ``cost:`` block included, so a typo fails here
    for every command and not only for the one that prices a plan.
    ``write_cache`` False keeps no compiled form for next time (a dry run
    writes nothing)."""
    # each file is checked before its compiled form is kept; the whole again
    inv = load_inventory(paths, check=cost_params, write_cache=write_cache,
                         tables=derived_tables())
    cost_params(inv)  # validated and kept with it; raises InventoryError at file:line
    return inv


def derived_tables():
    """The tables a plan derives from the whole cluster, as a compiled
    inventory keeps them (:class:`slurmtopo.inventory.cache.Table`): the
    planner's fabric tree and the lower bound's statistics. Not the network
    view: built from the switches alone, it costs less than reading it."""
    return (Table(TABLE, fabric_tree, lambda tree, hw_ref: tree_json(tree),
                  lambda d, inv, hardware: tree_from_json(d, inv), same_tree),
            Table(STATS_TABLE, inventory_stats, lambda st, hw_ref: st.to_json(hw_ref),
                  lambda d, inv, hardware: InventoryStats.from_json(d, hardware)))

