"""A cluster as every use case loads it, and one step of a placement priced.

The api (``slurmtopo plan``/``sbatch``), the placement daemon and the
simulator all need these two, and the daemon must not climb up to the api
for them: they live here, below all three (the api re-exports them).
"""
from __future__ import annotations

from typing import Sequence, Union

from slurmtopo.model import Inventory, Placement
from slurmtopo.request import JobRequest


def load_cluster(paths: Union[str, Sequence[str]], write_cache: bool = True) -> Inventory:
    """Read an inventory (file, directory of node reports, or several) and
    validate all of it, the ``cost:`` block included, so a typo fails here
    for every command and not only for the one that prices a plan.
    ``write_cache`` False keeps no compiled form for next time (a dry run
    writes nothing)."""
    from slurmtopo.cost import cost_params
    from slurmtopo.inventory import load_inventory

    # each file is checked before its compiled form is kept; the whole again
    inv = load_inventory(paths, check=cost_params, write_cache=write_cache)
    cost_params(inv)  # validated and kept with it; raises InventoryError at file:line
    return inv


def step_time(cluster: Inventory, placement: Placement, request: JobRequest,
              params=None) -> float:
    """The modelled seconds per training step of ``placement``."""
    from slurmtopo.cost import evaluate

    return float(evaluate(cluster, placement, request, params, step_only=True).step_time_s)
