"""Choosing GPUs inside one node.

Two questions, both answered per (hardware, free GPU set) and cached, so a
100,000-GPU cluster of identical idle nodes costs one computation:

:func:`capacity`
    how many ranks can this node take, in whole *units* of ``U`` ranks,
    when some chunks of the unit must stay under a link-class bound (for
    ``--require tp=nvlink``: each chunk of ``tp`` ranks on an NVLink ring)?

:func:`select`
    which ``k`` free GPUs, in which order, for ``k`` consecutive rank
    positions? Positions come in nested aligned chunks (``tp`` inside
    ``tp*cp`` inside ...); the choice minimises, innermost chunk first, the
    slowest ring class of the chunks (so TP lands on NVLink before the
    TP x CP group lands on one PCIe switch), then leaves the free GPUs of
    the node least fragmented (best fit: take NVLink islands and NUMA nodes
    that are already partly used), then prefers low GPU indices (so nodes
    with the same free GPUs are used the same way: data-parallel peers
    share a local index, i.e. a rail).

Both search exhaustively over subsets and chunk partitions when that is
small (8-GPU nodes: at most C(8,4) = 70 subsets, 105 pairings) and fall
back to a greedy walk in locality order on big nodes.
"""
from __future__ import annotations

import itertools
import math
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Hardware
from slurmtopo.inventory.topology import link_classes, nvlink_islands, ring_class

#: a chain level: (chunk size, hard bound or None)
Level = Tuple[int, Optional[LinkClass]]

_SUBSET_LIMIT = 1000
_PARTITION_LIMIT = 2000


class HwInfo:
    """Per-hardware lookups the planner needs (built once per Hardware)."""

    __slots__ = ("hw", "n", "locality", "island_of", "islands", "numa_of", "max_class",
                 "nvswitch_like", "lc", "lanes", "rings", "partitions", "capacities",
                 "selections")

    def __init__(self, hw: Hardware):
        self.hw = hw
        self.n = hw.gpu_count
        self.islands = nvlink_islands(hw)
        self.island_of = [0] * self.n
        for i, isl in enumerate(self.islands):
            for g in isl:
                self.island_of[g] = i
        self.numa_of = [g.numa_node if g.numa_node is not None else 0 for g in hw.gpus]
        # locality order: NUMA node, then NVLink island, then index
        self.locality = tuple(sorted(range(self.n),
                                     key=lambda g: (self.numa_of[g], self.island_of[g], g)))
        lc = link_classes(hw)
        self.lc = lc
        self.lanes = tuple(tuple(hw.nvlink_lanes(a, b) for b in range(self.n))
                           for a in range(self.n))
        # per-hardware memo tables, keyed without the Hardware object (a
        # generated dataclass hash walks every GPU and link: ~40 us a call)
        self.rings: Dict[Tuple[int, ...], LinkClass] = {}
        self.partitions: Dict[Tuple, object] = {}
        self.capacities: Dict[Tuple, int] = {}
        self.selections: Dict[Tuple, object] = {}
        self.max_class = max((lc[a][b] for a in range(self.n) for b in range(self.n) if a != b),
                             default=LinkClass.SELF)
        #: every pair on NVLink: any subset rings over NVLink (NVSwitch)
        self.nvswitch_like = self.max_class <= LinkClass.NVLINK


def hw_info(hw: Hardware) -> HwInfo:
    """The planner's tables of ``hw``, built once and kept in its derived
    tables (they go when the hardware object goes)."""
    return hw.derived.get("placement.hw_info", lambda: HwInfo(hw))


def ring(hw: Hardware, gpus: Tuple[int, ...]) -> LinkClass:
    """:func:`~slurmtopo.inventory.topology.ring_class`, memoised per hardware object."""
    info = hw_info(hw)
    cls = info.rings.get(gpus)
    if cls is None:
        cls = info.rings[gpus] = ring_class(hw, gpus)
    return cls


def ring_order(hw: Hardware, gpus: Tuple[int, ...], cls: LinkClass) -> Tuple[int, ...]:
    """``gpus`` in the order of a ring whose hops are all no slower than
    ``cls`` (consecutive ranks, e.g. pipeline stages, then sit on good
    links); sorted order when that already is one (NVSwitch) or when the
    group is too big to search."""
    n = len(gpus)
    if n <= 2:
        return gpus
    lc = hw_info(hw).lc
    if all(lc[gpus[i]][gpus[(i + 1) % n]] <= cls for i in range(n)) or n > 16:
        return gpus
    path = [gpus[0]]
    used = {gpus[0]}

    def dfs() -> bool:
        if len(path) == n:
            return lc[path[-1]][path[0]] <= cls
        last = path[-1]
        for g in gpus:
            if g not in used and lc[last][g] <= cls:
                used.add(g)
                path.append(g)
                if dfs():
                    return True
                path.pop()
                used.discard(g)
        return False

    return tuple(path) if dfs() else gpus


def _partitions(items: Tuple[int, ...], size: int):
    """All ways to split ``items`` into blocks of ``size`` (block order
    canonical: each block starts with the smallest remaining item)."""
    if not items:
        yield ()
        return
    first, rest = items[0], items[1:]
    for comb in itertools.combinations(rest, size - 1):
        block = (first,) + comb
        left = tuple(x for x in rest if x not in comb)
        for tail in _partitions(left, size):
            yield (block,) + tail


def _partition_count(n: int, s: int) -> int:
    m = n // s
    return math.factorial(n) // (math.factorial(s) ** m * math.factorial(m))


#: entries per level in a partition score: ring class of the level's
#: blocks, their columns (see :func:`_arrange`), NVLink lane penalty, sum
#: of the ring classes
_W = 4

#: arrangements of sub-blocks tried per block (orders x orientations)
_ARRANGE_LIMIT = 400
#: equally good partitions whose arrangements are compared
_TIES_LIMIT = 8


def best_partition(hw: Hardware, gpus: Tuple[int, ...], levels: Tuple[Level, ...]):
    """Best way to arrange ``gpus`` (sorted) into the nested chunks of
    ``levels`` (ascending sizes, each dividing the next, the last equal to
    ``len(gpus)``).

    Returns ``(score, order)`` or None when a hard bound cannot be met.
    ``score`` has four entries per level, innermost level first, compared
    lexicographically: the slowest ring class of the level's chunks; the
    slowest *column* (ranks at the same offset of consecutive sub-chunks:
    pipeline stages, data-parallel peers strided over tensor-parallel
    chunks), counting each consecutive hop and the column's ring; minus the
    fewest NVLink lanes of an NVLink chunk (a DGX-1's NV2 pairs before its
    NV1 pairs: twice the bandwidth); the sum of the chunks' classes.
    ``order`` lists the GPUs so that consecutive chunks are the chosen
    chunks.
    """
    info = hw_info(hw)
    key = (gpus, levels)
    memo = info.partitions
    if key in memo:
        return memo[key]
    r = _best_partition(hw, info, gpus, levels)
    memo[key] = r
    return r


def _lane_penalty(info: HwInfo, gpus: Tuple[int, ...], cls: LinkClass) -> int:
    """Minus the fewest lanes among the NVLink pairs of an NVLink ring (the
    cost model prices the ring at that many lanes); 0 otherwise."""
    if cls is not LinkClass.NVLINK or info.nvswitch_like or len(gpus) < 2:
        return 0
    lc, lanes = info.lc, info.lanes
    return -min((lanes[a][b] for i, a in enumerate(gpus) for b in gpus[i + 1:]
                 if lc[a][b] is LinkClass.NVLINK), default=0)


def _best_partition(hw: Hardware, info: HwInfo, gpus: Tuple[int, ...],
                    levels: Tuple[Level, ...]):
    size, bound = levels[-1]
    cls = ring(hw, gpus)
    if bound is not None and cls > bound:
        return None
    lp = _lane_penalty(info, gpus, cls)
    if len(levels) == 1:
        return ((int(cls), 0, lp, int(cls)), ring_order(hw, gpus, cls))
    sub = levels[:-1]
    s = sub[-1][0]
    n = len(gpus)
    best_key = None
    ties: List[List] = []
    if _partition_count(n, s) <= _PARTITION_LIMIT:
        candidates = _partitions(gpus, s)
    else:  # big node: consecutive blocks in locality order only
        loc = [g for g in info.locality if g in set(gpus)]
        candidates = [tuple(tuple(sorted(loc[i:i + s])) for i in range(0, n, s))]
    for blocks in candidates:
        parts = []
        for b in blocks:
            r = best_partition(hw, b, sub)
            if r is None:
                break
            parts.append(r)
        else:
            vec = []
            for li in range(len(sub)):
                o = _W * li
                vec.append(max(p[0][o] for p in parts))
                vec.append(max(p[0][o + 1] for p in parts))
                vec.append(max(p[0][o + 2] for p in parts))
                vec.append(sum(p[0][o + 3] for p in parts))
            key = tuple(vec)
            if best_key is None or key < best_key:
                best_key, ties = key, [parts]
            elif key == best_key and len(ties) < _TIES_LIMIT:
                ties.append(parts)
    if best_key is None:
        return None
    best = None
    for parts in ties:
        col, order = _arrange(info, [p[1] for p in parts], leaf=len(sub) == 1)
        if best is None or col < best[0]:
            best = (col, order)
    return (best_key + (int(cls), best[0], lp, int(cls)), best[1])


def _arrange(info: HwInfo, blocks: List[Tuple[int, ...]], leaf: bool) -> Tuple[int, Tuple[int, ...]]:
    """Order the chunks of one block (and, for innermost chunks, rotate or
    reflect each ring) so that its *columns*, the GPUs at the same offset
    of consecutive chunks, are well connected: a column is a pipeline
    chain (consecutive hops) or a strided group (its ring). Returns
    ``(score, order)``: slowest column class x 256 + sum of the hop
    classes (smaller is better)."""
    m = len(blocks)
    flat = tuple(g for b in blocks for g in b)
    if m == 1:
        return 0, flat
    lc = info.lc
    hw = info.hw

    def score(seq) -> int:
        worst = total = 0
        for j in range(len(seq[0])):
            col = [b[j] for b in seq]
            hops = [int(lc[a][b]) for a, b in zip(col, col[1:])]
            c = max(max(hops), int(ring(hw, tuple(sorted(col)))))
            worst = max(worst, c)
            total += sum(hops)
        return worst * 256 + total

    if info.nvswitch_like:
        return score(blocks), flat
    variants = []
    for b in blocks:
        if leaf and len(b) > 1:
            rots = [b[i:] + b[:i] for i in range(len(b))]
            vs = list(dict.fromkeys(rots + [tuple(reversed(r)) for r in rots]))
        else:
            vs = [b]
        variants.append(vs)
    total = math.factorial(m - 1)
    for vs in variants[1:]:
        total *= len(vs)
    total *= len(variants[0])
    if total > _ARRANGE_LIMIT:
        return score(blocks), flat
    best = (score(blocks), flat)
    first = variants[0]
    for perm in itertools.permutations(range(1, m)):
        for choice in itertools.product(first, *(variants[i] for i in perm)):
            sc = score(choice)
            if sc < best[0]:
                best = (sc, tuple(g for b in choice for g in b))
    return best


def _fit(info: HwInfo, free: Sequence[int], chosen: Sequence[int]) -> Tuple[int, int]:
    """Best-fit penalty: free GPUs left in the NVLink islands and NUMA nodes
    the choice touches (smaller = the choice fills partly used groups)."""
    chosen_set = set(chosen)
    isl = {info.island_of[g] for g in chosen}
    numa = {info.numa_of[g] for g in chosen}
    left_isl = sum(1 for g in free if g not in chosen_set and info.island_of[g] in isl)
    left_numa = sum(1 for g in free if g not in chosen_set and info.numa_of[g] in numa)
    return left_isl, left_numa


def candidate_sets(info: HwInfo, free: Tuple[int, ...], k: int):
    if math.comb(len(free), k) <= _SUBSET_LIMIT:
        return itertools.combinations(free, k)
    loc = [g for g in info.locality if g in set(free)]
    return [tuple(sorted(loc[i:i + k])) for i in range(0, len(loc) - k + 1)]


def gpu_subsets(hw: Hardware, free: Tuple[int, ...], k: int):
    """The sets of ``k`` of the ``free`` GPUs worth trying: every one when
    there are few, else windows along the node's locality order (NVLink
    islands, PCIe switches, NUMA nodes)."""
    return candidate_sets(hw_info(hw), free, k)


def nested_chain(levels: Sequence[Level], k: int) -> Tuple[Level, ...]:
    """Keep the levels that nest (each size divides the next and ``k``),
    bounded levels first; sizes of 1 and duplicates are dropped (a bound
    on a size already present is merged, keeping the tighter bound)."""
    by_size: Dict[int, Optional[LinkClass]] = {}
    for s, b in levels:
        if s <= 1 or s > k or k % s:
            continue
        if s in by_size:
            old = by_size[s]
            if b is not None and (old is None or b < old):
                by_size[s] = b
        else:
            by_size[s] = b
    kept: List[int] = []
    # bounded sizes first, ascending, then unbounded that still nest
    for s in sorted(x for x in by_size if by_size[x] is not None):
        if all(s % t == 0 or t % s == 0 for t in kept):
            kept.append(s)
    for s in sorted(x for x in by_size if by_size[x] is None):
        if all(s % t == 0 or t % s == 0 for t in kept):
            kept.append(s)
    kept.sort()
    chain = [(s, by_size[s]) for s in kept]
    if not chain or chain[-1][0] != k:
        chain.append((k, None))
    return tuple(chain)


def capacity(hw: Hardware, free: Tuple[int, ...], unit: int,
             bounds: Tuple[Level, ...]) -> int:
    """Ranks (a multiple of ``unit``) this node can take when every chunk of
    ``bounds`` (sizes dividing ``unit``) must ring under its bound.

    Greedy: repeatedly take the feasible unit that leaves the remaining
    free GPUs least fragmented. Exact for NVSwitch nodes, NVLink pairs and
    PCIe trees; a safe under-estimate otherwise.
    """
    if unit < 1 or len(free) < unit:
        return 0
    whole = (len(free) // unit) * unit
    if not bounds or unit == 1:
        return whole
    info = hw_info(hw)
    key = (free, unit, bounds)
    got = info.capacities.get(key)
    if got is None:
        got = info.capacities[key] = _capacity(hw, info, free, unit, bounds, whole)
    return got


def _capacity(hw: Hardware, info: HwInfo, free: Tuple[int, ...], unit: int,
              bounds: Tuple[Level, ...], whole: int) -> int:
    worst = max(b for _, b in bounds)
    if info.nvswitch_like and worst >= LinkClass.NVLINK:
        return whole
    chain = nested_chain(bounds, unit)
    remaining = tuple(free)
    got = 0
    while len(remaining) >= unit:
        best = None
        for cand in candidate_sets(info, remaining, unit):
            if best_partition(hw, cand, chain) is None:
                continue
            key = (_fit(info, remaining, cand), cand)
            if best is None or key < best:
                best = key
        if best is None:
            break
        taken = set(best[1])
        remaining = tuple(g for g in remaining if g not in taken)
        got += unit
    return got


def select_scored(hw: Hardware, free: Tuple[int, ...], k: int, levels: Tuple[Level, ...]):
    """``(score, gpus)``: the choice of :func:`select` and its score (per
    level innermost first: slowest ring class, sum of classes; smaller is
    better, comparable between nodes for the same ``k`` and ``levels``), or
    None when the hard bounds cannot be met."""
    info = hw_info(hw)
    key = (free, k, levels)
    memo = info.selections
    if key in memo:
        return memo[key]
    r = memo[key] = _select_scored(hw, info, free, k, levels)
    return r


def _select_scored(hw: Hardware, info: HwInfo, free: Tuple[int, ...], k: int,
                   levels: Tuple[Level, ...]):
    if k > len(free):
        return None
    best = None
    for cand in candidate_sets(info, free, k):
        r = best_partition(hw, cand, levels)
        if r is None:
            continue
        key = (r[0], _fit(info, free, cand), cand)
        if best is None or key < best[0]:
            best = (key, r[1])
    if best is None and math.comb(len(free), k) > _SUBSET_LIMIT:
        # big node and the windows missed: build from greedy units
        got = _greedy_select(hw, free, k, levels)
        if got is None:
            return None
        r = best_partition(hw, tuple(sorted(got)), ((k, None),))
        return ((99,) + (r[0] if r else ()), got)
    return None if best is None else (best[0][0], best[1])


def select(hw: Hardware, free: Tuple[int, ...], k: int,
           levels: Tuple[Level, ...]) -> Optional[Tuple[int, ...]]:
    """``k`` GPUs of ``free`` ordered for consecutive rank positions (see the
    module doc), or None when the hard bounds cannot be met.

    ``levels`` is a nested chain ending at ``k`` (see :func:`nested_chain`).
    """
    r = select_scored(hw, free, k, levels)
    return None if r is None else r[1]


def _greedy_select(hw: Hardware, free: Tuple[int, ...], k: int,
                   levels: Tuple[Level, ...]) -> Optional[Tuple[int, ...]]:
    info = hw_info(hw)
    bounded = [lv for lv in levels if lv[1] is not None]
    unit = bounded[-1][0] if bounded else 1
    chain = nested_chain(bounded, unit) if bounded else ((1, None),)
    remaining = tuple(free)
    out: List[int] = []
    while len(out) < k:
        best = None
        for cand in candidate_sets(info, remaining, unit):
            r = best_partition(hw, cand, chain) if unit > 1 else ((0,), cand)
            if r is None:
                continue
            key = (r[0], _fit(info, remaining, cand), cand)
            if best is None or key < best[0]:
                best = (key, r[1])
        if best is None:
            return None
        out.extend(best[1])
        taken = set(best[1])
        remaining = tuple(g for g in remaining if g not in taken)
    return tuple(out[:k])


def largest_group(hw: Hardware, free: Tuple[int, ...], bound: LinkClass) -> int:
    """Size of the largest subset of ``free`` that rings under ``bound``
    (for error messages: "the largest free NVLink island is 4 GPUs")."""
    info = hw_info(hw)
    if not free:
        return 0
    if info.nvswitch_like and bound >= LinkClass.NVLINK:
        return len(free)
    for s in range(len(free), 0, -1):
        for cand in candidate_sets(info, free, s):
            if ring(hw, cand) <= bound:
                return s
    return 1
