"""Talking to Slurm: live node/job state, submission, job and node updates.

See :mod:`slurmtopo.slurm.backend` for the interface and docs/slurm.md.
"""
from slurmtopo.slurm.backend import (ACTIVE_JOB_STATES, SlurmBackend, SlurmJob, SlurmNode,
                                     cluster_state_from, node_state_of)
from slurmtopo.slurm.choose import get_backend

__all__ = ["ACTIVE_JOB_STATES", "SlurmBackend", "SlurmJob", "SlurmNode", "cluster_state_from",
           "get_backend", "node_state_of"]
