"""Placement: which GPU runs each global rank.

:func:`~slurmtopo.placement.planner.proposals` are the topology-aware
planner's candidate placements (see :mod:`slurmtopo.placement.planner` for
the algorithm); :func:`slurmtopo.plan.choice.plan`, one layer up, prices them
with the cost model and keeps the fastest. :func:`naive_plan`,
:func:`leaf_constrained_plan` and :func:`random_plan` are the baselines the
benchmarks compare it with, :func:`slurm_plan` Slurm's own choice
(:mod:`slurmtopo.placement.slurm_select`, what ``slurmtopo simulate``
replays a trace with); all in :mod:`slurmtopo.placement.baselines`.
Everything here is pure: no I/O, no Slurm calls, and no cost model.
"""
from slurmtopo.placement.baselines import (leaf_constrained_plan, naive_plan, random_plan,
                                           slurm_plan)
from slurmtopo.placement.common import candidates, nic_choice

__all__ = ["naive_plan", "leaf_constrained_plan", "random_plan", "slurm_plan", "candidates",
           "nic_choice"]
