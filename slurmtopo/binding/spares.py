"""The re-plan after a lost node (``--spares``): the ranks of each lost
node go to an idle node of the allocation in the same domain, everything
else stays where it ran (docs/sbatch.md, "Spare nodes").

Pure: the placement that ran, the hosts still usable, the lost ones and
why, in; the new placement and what moved, out. ``slurmtopo bind
--restart`` reads Slurm and writes the run directory around it; a
start-time hook that must re-plan after a loss calls the same function.

A lost node is replaced like for like: a spare of the same domain
(:func:`slurmtopo.placement.spares.domain_of`: its multi-node NVLink
domain, else its block, else its leaf switch) and hardware takes its
ranks in the same local order, on the same GPU indices where it has them.
Every group then touches the same domains as before, so a TP or EP group
never leaves its rack. Only when no such spare is left does a spare of
another domain take them, and the result says which groups left theirs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Inventory, Placement, format_cpulist
from slurmtopo.placement.common import build_placement
from slurmtopo.placement.spares import domain_of


@dataclass(frozen=True)
class LossReplan:
    """What :func:`replan_after_loss` decided."""

    placement: Placement
    #: lost host -> the spare that takes its ranks
    replaced: Mapping[str, str]
    #: one line per replaced host, for the job's log
    moves: Tuple[str, ...]
    #: every group touches the same domains as before
    in_domain: bool
    #: the groups that left their domains (kind, index), when not in_domain
    left: Tuple[Tuple[str, int], ...] = ()


def replan_after_loss(inv: Inventory, placement: Placement, usable: Sequence[str],
                      lost: Mapping[str, str],
                      gpus: Optional[Mapping[str, Optional[Sequence[int]]]] = None
                      ) -> LossReplan:
    """Move the ranks of every ``lost`` host (host -> why) of
    ``placement`` onto an idle host of ``usable`` (the allocated hosts
    still fine, in Slurm's order; idle: running no rank of ``placement``).
    ``gpus``: host -> the GPU indices Slurm gave it (None: unknown, all of
    the node's). Raises SlurmtopoError when too few idle hosts have the
    GPUs."""
    gpus = gpus or {}
    by_host = placement.by_host()
    running = [h for h, s in by_host.items() if s]
    gone = [h for h in running if h in lost]
    if not gone:
        raise SlurmtopoError("no node of the step was lost: nothing to re-plan")
    idle = [h for h in usable if h not in by_host and h not in lost and h in inv.nodes]

    def have(host: str) -> List[int]:
        got = gpus.get(host)
        return sorted(got) if got is not None else [g.index for g in inv.nodes[host].gpus]

    replaced: Dict[str, str] = {}
    gpu_map: Dict[str, Dict[int, int]] = {}
    for h in gone:
        mine = sorted(s.gpu for s in by_host[h])
        hw = inv.nodes[h].hardware if h in inv.nodes else None
        fits = [c for c in idle if len(have(c)) >= len(mine)
                and (hw is None or inv.nodes[c].hardware == hw)]
        same = [c for c in fits if domain_of(inv, c) == domain_of(inv, h)]
        pick = (same or fits or [None])[0]
        if pick is None:
            free = ", ".join(idle) or "none"
            raise SlurmtopoError(
                f"{h} was lost ({lost[h]}) and no idle node of the job has {len(mine)} GPUs "
                f"like it (idle: {free}): no spare left")
        idle.remove(pick)
        replaced[h] = pick
        theirs = have(pick)
        keep = [g for g in mine if g in theirs]
        if len(keep) == len(mine):
            gpu_map[h] = {g: g for g in mine}
        else:
            gpu_map[h] = dict(zip(mine, theirs))
    assign = [(replaced.get(s.host, s.host), gpu_map[s.host][s.gpu] if s.host in replaced
               else s.gpu) for s in placement.slots]
    note = ("re-planned after losing " + ", ".join(f"{h} ({lost[h]})" for h in gone)
            + ": " + ", ".join(f"{h} -> {replaced[h]}" for h in gone))
    new = build_placement(inv, None, assign, tuple(placement.notes) + (note,),
                          groups=placement.groups)
    left = _left_domains(inv, placement, new)
    moves = []
    for h in gone:
        ranks = [s.rank for s in by_host[h]]
        same = domain_of(inv, replaced[h]) == domain_of(inv, h)
        scope, name = domain_of(inv, h)
        where = (f"same {scope} {name}".rstrip() if same else
                 f"another {scope}: {scope} {name} had no spare left")
        moves.append(f"ranks {_ranges(ranks)}: {h} ({lost[h]}) -> {replaced[h]} ({where})")
    return LossReplan(new, replaced, tuple(moves), not left, tuple(left))


def _left_domains(inv: Inventory, old: Placement, new: Placement) -> List[Tuple[str, int]]:
    """Groups whose ranks touch other domains after the move."""
    memo: Dict[str, Tuple[str, str]] = {}

    def dom(h: str) -> Tuple[str, str]:
        if h not in memo:
            memo[h] = domain_of(inv, h) if h in inv.nodes else ("host", h)
        return memo[h]

    out = []
    for kind in sorted(old.groups):
        for gi, group in enumerate(old.groups[kind]):
            before = {dom(old.slots[r].host) for r in group}
            after = {dom(new.slots[r].host) for r in group}
            if before != after:
                out.append((kind, gi))
    return out


def _ranges(ranks: Sequence[int]) -> str:
    return format_cpulist(sorted(ranks))
