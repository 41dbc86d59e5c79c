"""Placement: which GPU runs each global rank.

:func:`plan` is the topology-aware planner (see
:mod:`slurmtopo.placement.planner` for the algorithm); :func:`naive_plan`,
:func:`leaf_constrained_plan` and :func:`random_plan` are the baselines the
benchmarks compare it with (:mod:`slurmtopo.placement.baselines`).
Everything here is pure: no I/O, no Slurm calls.
"""
from slurmtopo.placement.baselines import leaf_constrained_plan, naive_plan, random_plan
from slurmtopo.placement.common import candidates, constraint_report, nic_choice
from slurmtopo.placement.planner import plan

__all__ = ["plan", "naive_plan", "leaf_constrained_plan", "random_plan", "candidates",
           "nic_choice", "constraint_report"]
