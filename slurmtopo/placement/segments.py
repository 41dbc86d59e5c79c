"""Which topology/block segments a job asks Slurm for, from its groups (pure).

Slurm's topology/block (src/plugins/topology/block/eval_nodes_block.c,
read in 25.11.7 and 26.05.3) cuts a job of N nodes asking ``--segment=S``
into N/S segments and places each one inside the smallest block level that
holds S nodes: one *base block* (the first ``BlockSizes`` value, else the
node count of the first block with nodes) when S fits one, else (25.11+)
an aggregated block of 2^k consecutive base blocks. Two more 25.11 flags:

* ``--spread-segments``: once a segment is placed, the base blocks it
  touched are taken out of the candidates of the next ones, so no two
  segments of the job share a base block;
* ``--consolidate-segments``: every segment must lie in one aggregated
  block, the smallest enabled level that holds the whole job (with
  ``--spread-segments``: each segment rounded up to whole base blocks).

and with ``SwitchType=switch/nvidia_imex``, ``--network=
unique-channel-per-segment`` gives each segment its own IMEX channel instead
of one for the job.

What a training job needs from that, and why each choice below:

* **Segment size.** A group that talks over NVLink (TP, expert-TP, EP and
  the expert TP x EP group, plus any kind the job requires or prefers inside
  an NVLink domain) must not straddle two base blocks when it fits one. The
  start-time step re-plans on the nodes Slurm gives, and it can keep every
  such group inside one block whenever each block holds a whole multiple of
  the group's node count; a segment size that is a multiple of it gives
  exactly that. Among those sizes the one the plan itself shows (the
  greatest common divisor of its nodes per block) is kept when it is one,
  because the planner found that many free nodes in each block; else the
  largest aligned size no bigger than the plan's smallest share of a block.
* **Spread** only with per-segment IMEX channels (segments of several
  nodes: slurmtopo writes one base block per NVLink domain): two segments in one
  NVLink domain on two channels could not map each other's memory, yet
  NCCL sees one clique and would try; spread keeps one segment per domain.
* **Consolidate** when the job has several segments (one-node segments
  included: alone they ask for nothing, with this flag they keep the job
  in one aggregated block) and the plan's blocks
  all lie in one aggregated block of the level Slurm would use: the
  traffic between segments (DP, PP) then stays under that block's switch,
  as planned, instead of Slurm scattering segments over the whole cluster.
* **IMEX channel per segment** when the cluster runs switch/nvidia_imex
  and the job has more than one segment (one segment: the job's one
  channel is that segment's).

Every option is asked only from the release that has it (``SINCE``); an
unknown release is taken as a current one, and the note says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.job.request import LEVEL_INDEX

#: first Slurm release with each option (CHANGELOG/slurm-25.11.md; --segment
#: came with topology/block in 23.11)
SINCE: Dict[str, Tuple[int, int]] = {
    "segment": (23, 11),
    "segment-over-base": (25, 11),
    "spread-segments": (25, 11),
    "consolidate-segments": (25, 11),
    "unique-channel-per-segment": (25, 11),
}

#: group kinds whose traffic runs over NVLink (kept inside one NVLink domain
#: whenever they fit one), besides those a job requires or prefers there
NVLINK_KINDS: Tuple[str, ...] = ("tp", "expert-tp", "ep", "expert-tp-ep")

#: Slurm's levels when topology.conf sets no BlockSizes (block_record.c:
#: ``bit_nset(block_levels, 0, 4)``: 1, 2, 4, 8 and 16 base blocks)
DEFAULT_LEVELS: Tuple[int, ...] = (0, 1, 2, 3, 4)

IMEX_SWITCH = "switch/nvidia_imex"


@dataclass(frozen=True)
class SlurmFeatures:
    """What the cluster's Slurm can be asked: its release (None: unknown,
    taken as current) and whether it runs switch/nvidia_imex."""

    version: Optional[Tuple[int, ...]] = None
    imex: bool = False

    def has(self, option: str) -> bool:
        return self.version is None or tuple(self.version[:2]) >= SINCE[option]

    @classmethod
    def of(cls, version: Optional[Sequence[int]], switch_type: Optional[str]) -> "SlurmFeatures":
        return cls(version=tuple(version) if version else None,
                   imex=(switch_type or "").strip().lower() == IMEX_SWITCH)


@dataclass(frozen=True)
class BlockLayout:
    """The blocks as Slurm's topology/block plans on them."""

    #: host -> position of its block in the block list (placeholders counted)
    position: Mapping[str, int]
    #: position -> block name
    names: Tuple[str, ...]
    #: nodes in one base block
    base: int
    #: enabled levels: an aggregated block of level k is 2^k base blocks
    levels: Tuple[int, ...]

    def level_for(self, nodes: int) -> Optional[int]:
        """Slurm's ``_get_block_level``: the smallest enabled level whose
        blocks hold ``nodes`` (None: larger than every level, the whole
        topology)."""
        need = math.ceil(math.log2(max(1, math.ceil(nodes / self.base))))
        return next((lv for lv in self.levels if lv >= need), None)


@dataclass(frozen=True)
class SegmentChoice:
    """The topology/block options for one job and why."""

    segment: int = 0  # 0: no --segment
    spread: bool = False
    consolidate: bool = False
    imex_channels: bool = False
    why: Tuple[str, ...] = ()

    def options(self) -> List[str]:
        if not self.segment:
            return []
        out = [f"--segment={self.segment}"]
        if self.spread:
            out.append("--spread-segments")
        if self.consolidate:
            out.append("--consolidate-segments")
        if self.imex_channels:
            out.append("--network=unique-channel-per-segment")
        return out


def block_layout(fabric) -> Optional[BlockLayout]:
    """The block layout of an inventory's fabric (None: it has no blocks)."""
    if not fabric.blocks:
        return None
    position: Dict[str, int] = {}
    for i, blk in enumerate(fabric.blocks):
        for h in blk.nodes:
            position.setdefault(h, i)
    sizes = tuple(int(s) for s in fabric.block_sizes)
    first = next((len(b.nodes) for b in fabric.blocks if b.nodes), 0)
    base = sizes[0] if sizes else first
    if base < 1:
        return None
    if sizes:
        levels = tuple(sorted({int(round(math.log2(s // base))) for s in sizes
                               if s >= base and s % base == 0}))
    else:
        levels = DEFAULT_LEVELS
    return BlockLayout(position=position, names=tuple(b.name for b in fabric.blocks),
                       base=base, levels=levels or (0,))


def nvlink_kinds(require: Mapping[str, str], prefer: Mapping[str, str]) -> Tuple[str, ...]:
    """The group kinds that must not straddle an NVLink domain: the NVLink
    kinds, and any kind required or preferred at an NVLink-domain level or
    tighter (a node-level request is tighter still)."""
    limit = LEVEL_INDEX["nvlink-domain"]
    asked = [k for table in (require, prefer) for k, lv in table.items()
             if LEVEL_INDEX.get(lv, len(LEVEL_INDEX)) <= limit]
    return tuple(dict.fromkeys(list(NVLINK_KINDS) + asked))


def group_nodes(groups: Mapping[str, Sequence[Sequence[int]]], host_of: Sequence[str],
                kinds: Sequence[str]) -> Dict[str, int]:
    """kind -> the most nodes one of its groups spans (kinds with a group
    on more than one node only)."""
    out: Dict[str, int] = {}
    for kind in kinds:
        widest = max((len({host_of[r] for r in g}) for g in groups.get(kind, ())), default=0)
        if widest > 1:
            out[kind] = widest
    return out


def choose_segments(layout: BlockLayout, hosts: Sequence[str],
                    groups: Mapping[str, Sequence[Sequence[int]]], host_of: Sequence[str],
                    kinds: Sequence[str], slurm: SlurmFeatures = SlurmFeatures()
                    ) -> SegmentChoice:
    """The segment request for a plan on ``hosts`` (its node order), with
    ``groups`` (kind -> lists of ranks) and ``host_of`` (rank -> host)."""
    why: List[str] = []
    n = len(hosts)
    if not slurm.has("segment"):
        return SegmentChoice(why=(f"topology request: none (Slurm {_ver(slurm)} has no "
                                  "--segment; topology/block came in 23.11)",))
    counts: Dict[int, int] = {}
    for h in hosts:
        counts[layout.position[h]] = counts.get(layout.position[h], 0) + 1
    where = ", ".join(f"{layout.names[b]}: {c}" for b, c in counts.items())
    plan_gcd = 0
    for c in counts.values():
        plan_gcd = math.gcd(plan_gcd, c)
    spans = group_nodes(groups, host_of, kinds)
    cap = layout.base
    fit = {k: s for k, s in spans.items() if s <= layout.base}
    over = {k: s for k, s in spans.items() if s > layout.base}
    if over and slurm.has("segment-over-base"):
        # a group wider than a base block still fits an aggregated block:
        # 25.11+ places a segment that size inside one
        widest = max(over.values())
        level = layout.level_for(widest)
        if level is not None and n % widest == 0:
            cap = layout.base << level
            fit.update(over)
            over = {}
    align = 1
    for s in fit.values():
        align = align * s // math.gcd(align, s)
    for kind, s in sorted(over.items()):
        why.append(f"note: a {kind} group spans {s} nodes, more than a block of "
                   f"{layout.base}: no segment keeps it inside one")
    sizes = [s for s in range(align, min(n, cap) + 1, align) if n % s == 0]
    if not sizes:
        return SegmentChoice(why=tuple([f"topology request: none (no segment of a multiple of "
                                        f"{align} nodes up to {cap} divides the job's {n} "
                                        f"nodes; planned nodes per block {where})"] + why))
    plan_fits = [s for s in sizes if plan_gcd % s == 0]
    if plan_fits:
        seg = max(plan_fits)
        reason = f"planned nodes per block: {where}"
    else:
        smallest = min(counts.values())
        seg = max([s for s in sizes if s <= smallest] or [sizes[0]])
        reason = (f"planned nodes per block {where}, not whole multiples of {align}; "
                  f"segments of {seg} keep each group inside one block")
    if align > 1:
        widest = ", ".join(f"{k} {s}" for k, s in fit.items())
        reason += f"; nodes per NVLink group: {widest}"
    if seg > layout.base:
        reason += (f"; a segment of {seg} exceeds the base block of {layout.base} and lies "
                   "in one aggregated block (Slurm 25.11+)")
    segments = n // seg
    spread = consolidate = imex = False
    extra: List[str] = []
    if segments > 1 and seg > 1 and slurm.imex:
        if slurm.has("unique-channel-per-segment") and slurm.has("spread-segments"):
            imex = spread = True
            extra.append("--network=unique-channel-per-segment: one IMEX channel per segment "
                         "(switch/nvidia_imex), --spread-segments: no NVLink domain holds two "
                         "segments on different channels")
        else:
            extra.append(f"no IMEX channel per segment (Slurm {_ver(slurm)} has no "
                         "unique-channel-per-segment; 25.11+)")
    if segments > 1:
        total = (math.ceil(seg / layout.base) * layout.base * segments) if spread else n
        level = layout.level_for(total)
        if level is None:
            extra.append("no --consolidate-segments (the job is larger than every block level)")
        elif not slurm.has("consolidate-segments"):
            extra.append(f"no --consolidate-segments (Slurm {_ver(slurm)}; 25.11+)")
        else:
            agg = {b >> level for b in counts}
            if len(agg) == 1:
                consolidate = True
                extra.append(f"--consolidate-segments: the planned blocks lie in one aggregated "
                             f"block of {1 << level} base blocks")
            else:
                extra.append(f"no --consolidate-segments (the plan spans {len(agg)} aggregated "
                             f"blocks of {1 << level} base blocks)")
    if seg <= 1 and n > 1 and not consolidate:
        # one-node segments alone ask Slurm for nothing
        return SegmentChoice(why=tuple([f"topology request: none (planned nodes per block "
                                        f"{where} share no segment size)"] + why))
    choice = SegmentChoice(segment=seg, spread=spread, consolidate=consolidate,
                           imex_channels=imex)
    opts = " ".join(choice.options())
    count = f"{segments} segments; " if segments > 1 else ""
    head = f"topology request: {opts} ({count}{reason})"
    if slurm.version is None and (spread or consolidate or imex or seg > layout.base):
        extra.append("Slurm release unknown: taken as 25.11+ (give --slurm-version)")
    return SegmentChoice(segment=seg, spread=spread, consolidate=consolidate,
                         imex_channels=imex,
                         why=tuple([head] + [f"  {e}" for e in extra] + why))


def _ver(slurm: SlurmFeatures) -> str:
    v = slurm.version or ()
    return f"{v[0]}.{v[1]:02d}" if len(v) >= 2 else "?"
