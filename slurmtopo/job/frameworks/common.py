"""What every framework module returns, and how it refuses a layout.

A framework (Megatron-LM, torchtitan, DeepSpeed) builds its process groups
from its own knobs under its own names. slurmtopo computes the same groups
without the framework installed, keyed by the framework's name for each kind
(``dp_shard``, ``expert_data_parallel``, ...), so that ``groups --json``
reads like the framework's own logs.

Every group is listed with its ranks ascending and the groups of a kind by
ascending first rank. ``torch.distributed.new_group`` sorts the ranks it is
given, so a group's rank order inside the framework is ascending too, and
the listing order of groups carries no meaning for communication.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.groups import MAX_WORLD, Groups, Layout

__all__ = ["FrameworkLayout", "Knob", "refuse", "normalised", "integer", "whole", "check_world"]


@dataclass(frozen=True)
class Knob:
    """One of a framework's parallelism settings, under the framework's name.

    ``name`` is the keyword the module's ``layout`` takes and the option is
    ``--`` + name with '_' as '-'; ``default`` is the framework's default
    (None: derived from the world size); ``kind`` is ``int``, ``bool`` or a
    tuple of allowed strings.
    """

    name: str
    default: object
    help: str
    kind: object = int


@dataclass(frozen=True)
class FrameworkLayout:
    """A framework's layout, resolved: its knobs and every group it builds."""

    framework: str
    world: int
    #: the framework's knobs as it resolves them (dp_shard=-1 filled in ...)
    knobs: Tuple[Tuple[str, object], ...]
    #: kind (framework's name) -> groups; ascending ranks, by first rank
    groups: Mapping[str, List[List[int]]]
    #: the Layout the groups were built from, when the framework builds
    #: them from one (Megatron's RankGenerator): the planner's own, resolved
    #: once; None for a framework with its own rank rules
    planner_layout: Optional[Layout] = None

    def knob(self, name: str):
        return dict(self.knobs)[name]


def refuse(framework: str, reason: str) -> LayoutError:
    """The error for a configuration the framework itself refuses, carrying
    the framework's own reason so the user recognises it."""
    return LayoutError(f"{framework} refuses this layout: {reason}")


def integer(name: str, value) -> int:
    """``value`` if it is an int (not a bool), else LayoutError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LayoutError(f"{name} must be a whole number, got {value!r}")
    return value


def whole(name: str, value, minimum: int = 1) -> int:
    """``value`` as a whole number of at least ``minimum`` (else LayoutError)."""
    if integer(name, value) < minimum:
        raise LayoutError(f"{name} must be at least {minimum}, got {value}")
    return value


def check_world(world: int) -> int:
    whole("world", world)
    if world > MAX_WORLD:
        raise LayoutError(f"world size {world:,} is larger than {MAX_WORLD:,} ranks, the most "
                          "slurmtopo lays out (a typo?)")
    return world


def normalised(groups: Mapping[str, List[List[int]]]) -> Dict[str, List[List[int]]]:
    """Each group sorted, the groups of a kind by first rank (see module doc)."""
    out = Groups()
    for kind, lists in groups.items():
        out[kind] = sorted(sorted(g) for g in lists)
    return out
