"""The per-rank environment computed the plain way, one rank at a time:
the reference the fast writers and the start-time shell text are checked
against (tests/test_rankmap.py, tests/test_launchers.py).

The package writes it host by host (``rankmap.env_json``) or as shell that
computes it on the node (``binding.taskenv``); these look every value up
again for each rank through the same public pieces, so a slip in the fast
paths shows as a difference.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from slurmtopo.inventory.model import Inventory, Placement, format_cpulist
from slurmtopo.plan.rankmap import env_fields, node_ranks, rank_vars, visible_devices


def rank_env(placement: Placement, rank: int, allocated: Optional[Iterable[int]] = None,
             constrained: bool = False, cpus: Optional[Iterable[int]] = None) -> Dict[str, str]:
    """Variables of one rank. ``allocated``: the GPUs Slurm gave the job on
    the rank's host (needed when ``constrained``); ``cpus``: the CPUs the
    rank is bound to (default: the planned ones)."""
    slot = placement.slots[rank]
    mates = placement.by_host()[slot.host]
    return rank_vars(slot.rank, slot.local_rank, placement.world_size, len(mates),
                     node_ranks(placement)[slot.host],
                     visible_devices([s.gpu for s in mates], allocated, constrained), slot.gpu,
                     format_cpulist(slot.cpus if cpus is None else cpus), slot.nics)


def env_document(placement: Placement, inv: Optional[Inventory], master_port="from SLURM_JOB_ID",
                 socket_ifname: Optional[str] = None) -> Dict[str, Any]:
    """``env.json`` as one document (``job`` and one mapping per rank), for
    an allocation equal to the plan and no device cgroup."""
    ranks = [rank_env(placement, r) for r in range(placement.world_size)]
    return env_fields(placement, inv, master_port, socket_ifname, ranks)
