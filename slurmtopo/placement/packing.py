"""Splitting blocks of ranks over hosts: how the ranks of a group that
must span hosts are cut into pieces, and what a split costs.

A hierarchical collective over ``h`` hosts is set by the host with the
fewest ranks ``l``: each rank's slice of the inter-host ring is
``M / (l * h)``, so a rank alone on a host (7+1, 6+1+1) is as bad as it is
in training. :func:`water_fill` spreads ranks evenly over chosen nodes;
:class:`BlockPacker` packs them block by block instead (whole blocks on
nodes that hold one, every other block by a pattern of piece sizes ranked
by the cost model's hierarchical all-reduce, or, for blocks too big for
patterns, with no piece below a threshold) and prices the result
(:meth:`BlockPacker.split_cost`). Over nodes whose pieces are all alike,
the leftovers (nodes with room for a piece) are also paired inside one
leaf (pod) first, then inside one spine group, and so on up
(:class:`BlockSplitter`), each pattern at each level ranked by the cost
model with the level's oversubscription (a split group across an
oversubscribed spine is the slowest of the step), and the better split
kept.
"""
from __future__ import annotations

import heapq
import math
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from slurmtopo.inventory.links import LinkClass
from slurmtopo.placement.common import Candidates
from slurmtopo.placement.fabric import FabricTree
from slurmtopo.placement.intranode import gpu_subsets
from slurmtopo.placement.speeds import LinkSpeeds

#: (node index, ranks) in position order; a node may appear more than once
Allocation = List[Tuple[int, int]]


def water_fill(caps: List[Tuple[int, int]], need: int, unit: int) -> List[Tuple[int, int]]:
    """Spread ``need`` ranks over nodes ``(index, capacity)`` as evenly as
    whole units allow: the largest level t with sum(min(cap, t)) <= need,
    then one more unit to the first nodes with room."""
    units = [(i, c // unit) for i, c in caps]
    n = need // unit
    lo, hi = 0, max(c for _, c in units)
    while lo < hi:  # largest t with sum(min(c, t)) <= n
        mid = (lo + hi + 1) // 2
        if sum(min(c, mid) for _, c in units) <= n:
            lo = mid
        else:
            hi = mid - 1
    amount = {i: min(c, lo) for i, c in units}
    left = n - sum(amount.values())
    for i, c in units:
        if left <= 0:
            break
        if c > amount[i]:
            amount[i] += 1
            left -= 1
    return [(i, amount[i] * unit) for i, _ in units if amount[i] > 0]


def blocks_of(seq: Sequence[Tuple[int, int]], s: int, whole: bool = False):
    """The pieces ({node: ranks}) of every block of ``s`` consecutive
    positions that ``seq`` ((node, ranks) in position order; a node may
    appear more than once) puts on more than one host (with ``whole``,
    of every block)."""
    out = []
    pieces: Dict[int, int] = {}
    pos = 0
    block = 0
    for idx, k in seq:
        while k > 0:
            b = pos // s
            if b != block:
                if len(pieces) > 1 or (whole and pieces):
                    out.append(pieces)
                pieces = {}
                block = b
            take = min(k, (b + 1) * s - pos)
            pieces[idx] = pieces.get(idx, 0) + take
            pos += take
            k -= take
    if len(pieces) > 1 or (whole and pieces):
        out.append(pieces)
    return out


def hier_share(l_max: int, l_min: int, h: int, b_in: float, b_net: float) -> float:
    """Bandwidth term of the cost model's hierarchical all-reduce of one
    byte over ``h`` hosts (:func:`slurmtopo.cost.hier_time` without the
    latencies): the in-node reduce-scatter/all-gather over ``l_max`` ranks
    at ``b_in`` plus the inter-host ring of each rank's slice, priced by
    the host with the fewest ranks at the slowest NIC share ``b_net``."""
    t = 2 * (h - 1) / (l_min * h * b_net)
    if l_max > 1:
        t += 2 * (l_max - 1) / (l_max * b_in)
    return t


def piece_patterns(units: int, most: int = 4) -> List[Tuple[int, ...]]:
    """Ways to split a block of ``units`` units over 2..``most`` hosts
    (parts in units, largest first)."""
    out: List[Tuple[int, ...]] = []

    def rec(left: int, cap: int, parts: List[int]) -> None:
        if left == 0:
            if len(parts) >= 2:
                out.append(tuple(parts))
            return
        if len(parts) >= most:
            return
        for a in range(min(left, cap), 0, -1):
            rec(left - a, a, parts + [a])

    rec(units, units - 1, [])
    return out


#: blocks of at most this many units are packed by piece patterns (the
#: patterns of a bigger block are too many to try, and its pieces are whole
#: nodes anyway on the clusters seen so far)
PACK_MAX_UNITS = 16


#: thresholds of the smallest piece tried for a block too big for patterns
PACK_MAX_THRESHOLDS = 8


def split_min_piece(rest: Sequence[Tuple[int, int, int]], blocks: int, span: int,
                    piece_unit: int, p: int) -> Optional[Allocation]:
    """``blocks`` blocks of ``span`` ranks over the nodes ``rest`` ((room,
    pod, node) in preference order), block after block, no piece smaller
    than ``p`` (amounts in multiples of ``piece_unit``) and the pieces of a
    block on distinct nodes, in the pod of its first piece when they can:
    the largest room while the rest of the block is bigger than it
    (keeping ``p`` for the last piece), then the least room that holds the
    rest. Returns (node, ranks) in position order, or None when a block
    finds no room."""
    rooms = _MinPieceRooms(rest, p)
    out: Allocation = []
    for _ in range(blocks):
        left, pod, used, back = span, None, set(), []
        while left > 0:
            hit = rooms.find(sorted(c for c in rooms.sizes() if c >= left), pod, used)
            if hit is not None:  # the least room that holds the rest
                c, q = hit
                k = left
            else:
                if left < 2 * p:
                    return None
                hit = rooms.find(sorted(rooms.sizes(), reverse=True), pod, used)
                if hit is None:
                    return None
                c, q = hit
                k = c if left - c >= p else (left - p) // piece_unit * piece_unit
                if k < p:
                    return None
            order, i = rooms.take(c, q)
            if c - k >= p:
                back.append((c - k, q, order, i))
            used.add(i)
            pod = q if pod is None else pod
            out.append((i, k))
            left -= k
        for c, q, order, i in back:  # what is left of a node serves the next blocks
            rooms.put(c, q, order, i)
    return out


class _MinPieceRooms:
    """Nodes by room left, then by pod, each pod's nodes a stack with the
    preferred on top; per room a heap of the pods' tops, so the preferred
    node of any pod is found without scanning every pod (a fragmented
    100k-GPU cluster has hundreds)."""

    def __init__(self, rest: Sequence[Tuple[int, int, int]], p: int):
        self.by_room: Dict[int, Dict[int, List[Tuple[int, int]]]] = {}
        #: room -> heap of (preference, pod) of the pods' tops; stale
        #: entries (a top since taken or replaced) are dropped when seen
        self.tops: Dict[int, List[Tuple[int, int]]] = {}
        for order, (c, pod, i) in reversed(list(enumerate(rest))):
            if c >= p:
                self.by_room.setdefault(c, {}).setdefault(pod, []).append((order, i))
        for c, by_pod in self.by_room.items():
            self.tops[c] = [(stack[-1][0], pod) for pod, stack in by_pod.items()]
            heapq.heapify(self.tops[c])

    def sizes(self):
        return self.by_room.keys()

    def _top_changed(self, c: int, pod: int) -> None:
        stack = self.by_room.get(c, {}).get(pod)
        if stack:
            heapq.heappush(self.tops.setdefault(c, []), (stack[-1][0], pod))

    def take(self, c: int, pod: int) -> Tuple[int, int]:
        stack = self.by_room[c][pod]
        order, i = stack.pop()
        if not stack:
            del self.by_room[c][pod]
            if not self.by_room[c]:
                del self.by_room[c]
                self.tops.pop(c, None)
        else:
            self._top_changed(c, pod)
        return order, i

    def put(self, c: int, pod: int, order: int, i: int) -> None:
        stack = self.by_room.setdefault(c, {}).setdefault(pod, [])
        stack.append((order, i))
        stack.sort(reverse=True)
        self._top_changed(c, pod)

    def _any_pod(self, c: int, avoid) -> Optional[int]:
        """The pod whose top node of room ``c`` is preferred, skipping pods
        whose top is in ``avoid``."""
        heap = self.tops.get(c)
        by_pod = self.by_room.get(c, {})
        skipped = []
        got = None
        while heap:
            order, pod = heap[0]
            stack = by_pod.get(pod)
            if not stack or stack[-1][0] != order:
                heapq.heappop(heap)  # stale
                continue
            if stack[-1][1] in avoid:
                skipped.append(heapq.heappop(heap))
                continue
            got = pod
            break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return got

    def find(self, sizes, pod: Optional[int], avoid) -> Optional[Tuple[int, int]]:
        """(room, pod) of the first size with a node not in ``avoid``: in
        ``pod`` first, else the pod whose best node is preferred."""
        if pod is not None:
            for c in sizes:
                stack = self.by_room.get(c, {}).get(pod)
                if stack and stack[-1][1] not in avoid:
                    return c, pod
        for c in sizes:
            q = self._any_pod(c, avoid)
            if q is not None:
                return c, q
        return None


class PieceRoom:
    """Nodes with room for pieces of split blocks, bucketed by free ranks
    left and by speed class (nodes whose pieces of every size are equally
    fast), so the best place for a piece is found without scanning every
    node (a fragmented 100k-GPU inventory has thousands).

    A node's whole room counts, also beyond one block: a node denied whole
    blocks (``whole_where_fast``: an H100 NVL node whose 4-GPU ring
    crosses the sockets) serves pieces of several blocks, one NVLink pair
    each. ``most_room``: among equally fast nodes the one with the most
    room first instead of the least room that suffices; pieces of a block
    go to distinct nodes, so a node with much room is the scarce partner
    of the others and must be used from the first block on (free rooms
    8, 4, 2, 2 give four blocks of 2+2 that way, three the other way)."""

    def __init__(self, rest: Sequence[Tuple[int, int, int, int]], span: int, speed_class,
                 most_room: bool = False):
        # rest: (capacity left, speed class, pod, node) in preference order
        self.span = span
        self.most_room = most_room
        #: room left -> speed class -> stack of (pod, node), preferred on top
        self.by_room: Dict[int, Dict[int, List[Tuple[int, int]]]] = {}
        for c, cls, pod, i in reversed(rest):  # stacks: the first is on top
            self.by_room.setdefault(c, {}).setdefault(cls, []).append((pod, i))
        self.speed_class = speed_class

    def take(self, want: int, avoid: Sequence[int], pod: Optional[int]):
        """Best node for a piece of ``want`` ranks: the fastest for that
        size, in ``pod`` when possible, then the least room that suffices
        (with ``most_room`` the most room).
        Returns an undo record, or None when no node has room."""
        best = None
        rank = self.speed_class
        sign = -1 if self.most_room else 1
        for c in [x for x in self.by_room if x >= want]:
            for cls, stack in self.by_room[c].items():
                for j in range(len(stack) - 1, max(-1, len(stack) - 2 - len(avoid)), -1):
                    node_pod, i = stack[j]
                    if i in avoid:
                        continue
                    key = (rank(cls, want), pod is not None and node_pod != pod, sign * c)
                    if best is None or key < best[0]:
                        best = (key, c, cls, j)
                    break
        if best is None:
            return None
        _, c, cls, j = best
        node_pod, i = self.by_room[c][cls].pop(j)
        if c > want:
            self.by_room.setdefault(c - want, {}).setdefault(cls, []).append((node_pod, i))
        return (c, cls, j, node_pod, i, want)

    def undo(self, rec) -> None:
        c, cls, j, node_pod, i, want = rec
        if c > want:
            self.by_room[c - want][cls].pop()
        self.by_room[c][cls].insert(j, (node_pod, i))

    def left(self) -> List[Tuple[int, int, int, int]]:
        """The nodes with room left, as ``rest`` entries (any order)."""
        return [(c, cls, pod, i) for c, by_cls in self.by_room.items()
                for cls, stack in by_cls.items() for pod, i in stack]


#: a way to split a block: piece sizes in units (largest first), and the
#: level of the tree its pieces stay inside (0: one pod; then the levels of
#: :meth:`BlockPacker.split_levels`)
SplitOption = Tuple[Tuple[int, ...], int]


class BlockSplitter:
    """Splits blocks of ``span`` ranks over the nodes ``rest`` ((room,
    speed class, pod, node) in preference order) by the options
    ``options``, ranked by the cost model (:meth:`BlockPacker.pack`), as
    many times as the packing's search for the best threshold asks
    (:meth:`split`); what does not depend on the threshold (the nodes of
    each pod, the first option each can take) is sorted out once.

    ``levels[l]`` gives the scope of a pod at level ``l`` (None: one scope,
    every node), finest first: the blocks are formed inside pods first,
    then of what the pods leave inside spine groups, and so on, so that two
    half-free nodes under one leaf are paired rather than each with a node
    across the spine."""

    def __init__(self, rest, span: int, piece_unit: int, speed_class,
                 options: Sequence[SplitOption],
                 levels: Sequence[Optional[Callable[[int], object]]] = (None,),
                 most_room: bool = False):
        self.span = span
        self.speed_class = speed_class
        self.most_room = most_room
        self.levels = levels
        #: per option: (pieces in ranks, level)
        self.options = [(tuple(a * piece_unit for a in parts), lvl) for parts, lvl in options]
        first = levels[0]
        if first is None:
            chunks = [(None, list(rest))]
        else:
            by: Dict[object, list] = {}
            for rec in rest:
                by.setdefault(first(rec[2]), []).append(rec)
            chunks = list(by.items())
        self.order = {rec[3]: n for n, rec in enumerate(rest)} if len(levels) > 1 else {}
        #: the scopes of the first level: (key, members, index of the first
        #: option of that level whose pieces fit them, len(options) if none)
        self.first = []
        for key, members in chunks:
            rooms = rooms_of(members, span)
            fit = next((n for n, (w, lvl) in enumerate(self.options)
                        if lvl == 0 and _fits(rooms, w)), len(self.options))
            self.first.append((key, members, fit))

    def split(self, blocks: int, limit: int) -> Optional[List[List[Tuple[int, int]]]]:
        """Each of ``blocks`` blocks by the first of the first ``limit``
        options whose pieces all find room on distinct nodes of one scope
        of the option's level, so a worse pattern inside a pod is used
        before a better one across an oversubscribed spine only when it
        models faster. None when some block finds no room."""
        span, levels = self.span, self.levels
        allowed = self.options[:limit]
        out: List[List[Tuple[int, int]]] = []
        # (key, members, can fit); the first level's fit is known
        scopes = [(key, members, fit < limit) for key, members, fit in self.first]
        for lvl in range(len(levels)):
            last = lvl + 1 == len(levels)
            opts = [w for w, at in allowed if at == lvl]
            left: List[Tuple[object, list]] = []
            for key, members, can in scopes:
                if can is None:  # a scope above the first level: look
                    rooms = rooms_of(members, span) if len(members) > 1 else []
                    can = any(_fits(rooms, w) for w in opts)
                if not can or not opts or len(out) == blocks:
                    left.append((key, members))  # no block fits this scope
                    continue
                if lvl:  # what the level below left, back in preference order
                    members = sorted(members, key=lambda rec: self.order[rec[3]])
                room = PieceRoom(members, span, self.speed_class, self.most_room)
                take, undo = room.take, room.undo
                live = list(opts)  # rooms only shrink: an option that failed stays failed
                while len(out) < blocks and live:
                    recs: list = []
                    pod = None  # the later pieces in the pod of the first when they can
                    for w in live[0]:
                        rec = take(w, [r[4] for r in recs], pod)
                        if rec is None:
                            for r in reversed(recs):
                                undo(r)
                            del live[0]
                            break
                        pod = rec[3] if pod is None else pod
                        recs.append(rec)
                    else:
                        out.append([(r[4], r[5]) for r in recs])
                if not last:
                    left.append((key, room.left()))
            if len(out) == blocks or last:
                break
            # the next level's scopes: what each scope of this one left
            scope_of = levels[lvl + 1]
            groups: Dict[object, list] = {}
            for key, members in left:
                # every node of a scope has the same scope one level up
                up = None if scope_of is None or not members else scope_of(members[0][2])
                groups.setdefault(up, []).extend(members)
            scopes = [(key, members, None) for key, members in groups.items()]
        return out if len(out) == blocks else None


def _pieces_alike(rest, sizes: Sequence[int], speed_class) -> bool:
    """Is every node of ``rest`` with room for a piece of each size (of
    ``sizes``) as fast for it as every other (NVSwitch nodes: any of their
    GPUs ring alike)?"""
    kinds = {(c, cls) for c, cls, _, _ in rest}
    return all(len({speed_class(cls, k) for c, cls in kinds if c >= k}) <= 1 for k in sizes)


def _threshold_split(splitter: "BlockSplitter", blocks: int, n_options: int
                     ) -> Tuple[Optional[List[List[Tuple[int, int]]]], int]:
    """The split by the shortest prefix of the splitter's options with which
    every block fits (binary search: more options only make more blocks
    fit), and the length of that prefix; (None, 0) when none does."""
    lo, hi, got, used = 0, n_options - 1, None, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        trial = splitter.split(blocks, mid + 1)
        if trial is None:
            lo = mid + 1
        else:
            got, used, hi = trial, mid + 1, mid - 1
    return got, used


def _best_order_split(seq: Allocation, make: Callable[[bool], "BlockSplitter"], blocks: int,
                      n_options: int, price: Callable[[Allocation], Tuple], roomy: bool
                      ) -> Optional[Allocation]:
    """``seq`` then the blocks split by the splitter ``make(False)`` (each
    piece on the least room that suffices); when some node has room for a
    whole block (``roomy``: one denied whole blocks because its ring over a
    block is slow) and some block had to fall back to a worse option than
    the first, also by ``make(True)`` (the most room first, which pairs
    that node with every other before the others run out) and the one
    ``price`` ranks lower kept."""
    got, used = _threshold_split(make(False), blocks, n_options)
    best = None if got is None else _joined(seq, got)
    if not roomy or used == 1 or not n_options:
        return best  # every block got the first option: no order does better
    alt, _ = _threshold_split(make(True), blocks, n_options)
    if alt is not None:
        alt = _joined(seq, alt)
        if best is None or price(alt) < price(best):
            best = alt
    return best


def _joined(seq: Allocation, blocks: List[List[Tuple[int, int]]]) -> Allocation:
    """``seq`` (the whole blocks) then every split block's pieces, a node's
    consecutive pieces merged."""
    out = list(seq)
    for pieces in blocks:
        for i, k in pieces:
            if out and out[-1][0] == i:
                out[-1] = (i, out[-1][1] + k)
            else:
                out.append((i, k))
    return out


def rooms_of(members, span: int) -> List[int]:
    """The rooms of ``members`` (``rest`` entries), largest first."""
    return sorted((min(rec[0], span) for rec in members), reverse=True)


def _fits(rooms: Sequence[int], wants: Sequence[int]) -> bool:
    """Can pieces of ``wants`` ranks (largest first) find room on distinct
    nodes whose rooms are ``rooms`` (largest first)? Exactly when the j-th
    largest room holds the j-th largest piece."""
    if len(wants) > len(rooms):
        return False
    for r, w in zip(rooms, wants):
        if r < w:
            return False
    return True


class BlockPacker:
    """Packs blocks of ranks over the nodes of one candidate set and prices
    the splits, with each (signature, piece size)'s speed computed once."""

    def __init__(self, tree: FabricTree, cand: Candidates, speeds: LinkSpeeds):
        self.tree = tree
        self.cand = cand
        self.speeds = speeds
        self._piece_speed: Dict[Tuple[int, int], Tuple[float, float]] = {}
        self._net: Dict[Tuple[object, float], float] = {}
        self._shared: Dict[Tuple[int, Tuple[int, ...]], List[Tuple[float, float]]] = {}
        self._alike: Dict[int, bool] = {}
        #: every candidate's free GPUs alike (:meth:`alike`); None: not known yet
        self._all_alike: Optional[bool] = None
        #: the network is as fast at every level (no oversubscription, no
        #: figure per level): a split's price need not look at its pods
        self.flat_network = all(speeds.network(1.0, c) == 1.0 for c in LinkClass if c.is_network)

    def piece_speed(self, idx: int, k: int) -> Tuple[float, float]:
        """(GB/s of the best ring over ``k`` of the node's free GPUs, the
        smallest network share among them), in the cost model's figures
        (:class:`~slurmtopo.placement.speeds.LinkSpeeds`): what one piece of
        a split block gets on this node."""
        s = self.cand.sig_of[idx]
        key = (s, k)
        hit = self._piece_speed.get(key)
        if hit is None:
            hw, free = self.cand.sigs[s]
            best = self._best_ring(hw, free, min(k, len(free)))
            hit = self._piece_speed[key] = best[0] if best is not None else (1.0, 1.0)
        return hit

    def _best_ring(self, hw, free: Tuple[int, ...], k: int):
        """((GB/s, smallest NIC share), GPUs) of the best ring over ``k`` of
        the GPUs ``free`` (fastest ring, then the largest share); None when
        there is no such set."""
        share_of = self.speeds.network_share(hw)
        best = None
        for gpus in (gpu_subsets(hw, free, k) if 0 < k <= len(free) else ()):
            gpus = tuple(sorted(gpus))
            _, bw = self.speeds.ring(hw, gpus) if len(gpus) > 1 else (LinkClass.SELF, math.inf)
            share = min(share_of[g] for g in gpus)
            rank = (-bw, -share)
            if best is None or rank < best[0]:
                best = (rank, (bw, share), gpus)
        return None if best is None else best[1:]

    def shared_speeds(self, blocks) -> Dict[int, Iterator[Tuple[float, float]]]:
        """Per node holding pieces of several of ``blocks`` ({node: ranks}
        each, in position order): the speeds of its pieces in that order,
        each piece on the best GPUs the pieces before it left
        (:meth:`pieces_speed`), not all on the node's best GPUs: an H100 NVL
        node with one free NVLink pair gives a second pair of two GPUs a
        ring across the sockets."""
        if self._all_alike is None:
            self._all_alike = all(self.alike(s) for s in range(len(self.cand.sigs)))
        if self._all_alike:
            return {}
        sig_of, cache, alike = self.cand.sig_of, self._shared, self.alike
        sizes: Dict[int, List[int]] = {}
        for pieces in blocks:
            for i, k in pieces.items():
                if alike(sig_of[i]):
                    continue
                got = sizes.get(i)
                if got is None:
                    sizes[i] = [k]
                else:
                    got.append(k)
        out = {}
        for i, ks in sizes.items():
            if len(ks) > 1:
                ks = tuple(ks)
                hit = cache.get((sig_of[i], ks))
                out[i] = iter(hit if hit is not None else self.pieces_speed(i, ks))
        return out

    def alike(self, s: int) -> bool:
        """Are all the free GPUs of signature ``s`` alike (every pair on
        the same link class, the same NIC share: an NVSwitch node), so that
        pieces sharing the node get what each would alone? Kept per
        signature."""
        hit = self._alike.get(s)
        if hit is None:
            hw, free = self.cand.sigs[s]
            share_of = self.speeds.network_share(hw)
            hit = (len({hw.link(a, b) for a in free for b in free if a < b}) <= 1
                   and len({share_of[g] for g in free}) <= 1)
            self._alike[s] = hit
        return hit

    def pieces_speed(self, idx: int, sizes: Tuple[int, ...]) -> List[Tuple[float, float]]:
        """(GB/s, smallest NIC share) of pieces of ``sizes`` ranks that
        share the node: one after the other, each on the best ring over the
        GPUs left (the mapping, too, chooses them piece after piece). Kept
        per (signature, sizes)."""
        s = self.cand.sig_of[idx]
        key = (s, sizes)
        hit = self._shared.get(key)
        if hit is None:
            hw, left = self.cand.sigs[s]
            hit = []
            for k in sizes:
                best = self._best_ring(hw, left, k)
                if best is None:  # more ranks than GPUs left: priced as alone
                    hit.append(self.piece_speed(idx, k))
                    continue
                hit.append(best[0])
                left = tuple(g for g in left if g not in best[1])
            self._shared[key] = hit
        return hit

    def network(self, nodes, share: float) -> float:
        """GB/s of network a piece whose NIC share is ``share`` gets in a
        ring over the hosts ``nodes`` (node indices, several), over the
        level at which they meet (:meth:`FabricTree.meet_class`): an
        oversubscribed spine slows it. Kept per set of pods and share."""
        node_pod = self.tree.node_pod
        pods = {node_pod[i] for i in nodes}
        key = (next(iter(pods)) if len(pods) == 1 else frozenset(pods), share)
        hit = self._net.get(key)
        if hit is None:
            hit = self._net[key] = self.speeds.network(share, self.tree.meet_class(pods))
        return hit

    def split_cost(self, seq: Sequence[Tuple[int, int]], spans: Sequence[int]) -> Tuple:
        """How well ``seq`` places the blocks of each span, innermost span
        first: the cost model's all-reduce of the worst block (one host: a
        ring on the node's best GPUs for it, or on the best the node's
        earlier pieces left, :meth:`shared_speeds`; several: hierarchical,
        :func:`hier_share`, the in-node part on each piece's best ring,
        the inter-host ring at the slowest piece's NIC share over the
        level the hosts meet at (:meth:`network`), and the smallest
        piece's slice), then the number of (node, piece) entries."""
        out = []
        for s in spans:
            worst = 0.0
            blocks = blocks_of(seq, s, whole=True)
            shared = self.shared_speeds(blocks)
            for pieces in blocks:
                speeds = [next(shared[i]) if i in shared else self.piece_speed(i, k)
                          for i, k in pieces.items()]
                b_in = min(sp[0] for (i, k), sp in zip(pieces.items(), speeds) if k > 1) \
                    if any(k > 1 for k in pieces.values()) else math.inf
                b_net = min(sp[1] for sp in speeds)
                if len(pieces) > 1 and not self.flat_network:
                    b_net = self.network(pieces, b_net)
                t = hier_share(max(pieces.values()), min(pieces.values()), len(pieces),
                               b_in, b_net)
                worst = max(worst, t)
            out.append(round(worst, 12))
        out.append(len(seq))
        return tuple(out)

    def pack(self, pool, need: int, span: int, piece_unit: int, spans,
             whole_where_fast: bool = False) -> Optional[List[Tuple[int, int]]]:
        """``need`` ranks in blocks of ``span`` over the nodes of ``pool``
        ((quality, -capacity, tree order, node, capacity), best first),
        every amount a multiple of ``piece_unit``: whole blocks on nodes that hold
        one (best nodes first; with ``whole_where_fast`` only where the block's
        ring is as fast as a half block's ring on the fastest node: a whole
        block on a ring across sockets can be slower than one split over
        NVLink pairs on two hosts); every other block split over 2-4 nodes.
        The patterns of piece sizes are ranked by the cost model's
        hierarchical all-reduce (:func:`hier_share`) and the packing takes
        the best threshold for which every block fits with a pattern no
        worse (so no block gets a singleton piece when an even split fits
        every block). A node may hold pieces of several blocks, a block's
        pieces stay in one pod when they can. None when nothing fits."""
        if need % span or span % piece_unit:
            return None
        if span // piece_unit > PACK_MAX_UNITS:
            return self.pack_large(pool, need, span, piece_unit, spans)
        tree = self.tree
        blocks = need // span
        seq: List[Tuple[int, int]] = []
        rest = []
        # a whole block only where its ring is as fast as a piece's could be
        fastest = max((self.piece_speed(i, max(piece_unit, span // 2))[0] for *_, i, c in pool),
                      default=0.0) if whole_where_fast else 0.0
        for _, _, _, i, c in pool:
            w = min(c // span, blocks)
            if whole_where_fast and w and self.piece_speed(i, span)[0] < fastest:
                w = 0
            if w > 0:
                seq.append((i, w * span))
                blocks -= w
                c -= w * span
            if c >= piece_unit:
                rest.append((c // piece_unit * piece_unit, self.cand.sig_of[i],
                             tree.node_pod[i], i))
        if blocks == 0:
            return seq
        if not rest:
            return None
        ref = max(self.piece_speed(i, span)[1] for _, _, _, i in rest)
        # patterns whose pieces find room nowhere never will
        rooms = rooms_of(rest, span)
        patterns = [ps for ps in piece_patterns(span // piece_unit)
                    if _fits(rooms, tuple(a * piece_unit for a in ps))]
        if not patterns:
            return None
        # nodes whose pieces of every size are equally fast share a class
        sizes = range(piece_unit, span, piece_unit)
        classes: Dict[Tuple, int] = {}
        of_sig: Dict[int, int] = {}
        ranks: List[Tuple] = []
        for _, sig, _, i in rest:
            if sig not in of_sig:
                key = tuple(self.piece_speed(i, k) for k in sizes)
                if key not in classes:
                    classes[key] = len(ranks)
                    ranks.append(tuple((-bw, -share) for bw, share in key))
                of_sig[sig] = classes[key]
        rest = [(c, of_sig[sig], pod, i) for c, sig, pod, i in rest]

        def speed_class(cls: int, k: int) -> Tuple[float, float]:
            return ranks[cls][k // piece_unit - 1]

        # block after block, each piece on the node fastest for it, the
        # block's pod only among equals (what every pool gets)
        roomy = any(c >= span for c, _, _, _ in rest)
        flat = [(ps, 0) for ps in sorted(patterns, key=lambda ps: (
            hier_share(ps[0] * piece_unit, ps[-1] * piece_unit, len(ps), math.inf, ref),
            len(ps), ps))]
        best = _best_order_split(
            seq, lambda most: BlockSplitter(rest, span, piece_unit, speed_class, flat,
                                            most_room=most),
            blocks, len(flat), lambda a: self.split_cost(a, spans), roomy)
        levels, meets = self.split_levels({pod for _, _, pod, _ in rest})
        if len(levels) > 1 and _pieces_alike(rest, sizes, speed_class):
            # over several pods of nodes whose pieces are all alike, also
            # the leftovers paired by pod, then spine group, ...: every
            # pattern at every level ranked by the cost model's all-reduce
            # with the level's network (a pattern across an oversubscribed
            # spine after a worse one under a leaf) and the ring inside a
            # node (6+2 under a leaf after 4+4 across a spine that halves
            # the network); the split the cost model prices better is kept
            nets = [self.speeds.network(ref, cls) for cls in meets]
            ring = max(self.piece_speed(i, span)[0] for _, _, _, i in rest)
            priced = sorted((hier_share(ps[0] * piece_unit, ps[-1] * piece_unit, len(ps), ring,
                                        nets[lvl]), lvl, len(ps), ps)
                            for ps in patterns for lvl in range(len(levels)))
            if best is not None:
                # an option slower than the block-after-block split's worst
                # block (priced at the best ring and NIC share) cannot help
                worst = self.split_cost(best, [span])[0]
                priced = [o for o in priced if o[0] <= worst * (1 + 1e-9)]
            options = [(o[3], o[1]) for o in priced]
            paired = _best_order_split(
                seq, lambda most: BlockSplitter(rest, span, piece_unit, speed_class, options,
                                                levels, most_room=most),
                blocks, len(options), lambda a: self.split_cost(a, spans), roomy)
            if paired is not None:
                if best is None or self.split_cost(paired, spans) <= self.split_cost(best, spans):
                    best = paired
        return best

    def split_levels(self, pods) -> Tuple[List[Optional[Callable[[int], object]]],
                                          List[LinkClass]]:
        """The levels of the tree that split blocks may stay inside, over
        the pods ``pods``, finest first: (per level the scope of a pod, None
        for one scope over every pod; the network class a block inside
        one scope of the level meets at). One pod, then each switch level
        that groups these pods more coarsely than the one below it, then
        everything when the top level still parts them (no common
        switch)."""
        tree = self.tree
        if len(pods) < 2:
            return [None], [LinkClass.NET_LEAF]
        scopes: List[Optional[Callable[[int], object]]] = [lambda p: p]
        meets = [LinkClass.NET_LEAF]
        distinct = len(pods)
        for lvl in range(1, tree.levels + 1):
            keys = {id(tree.pod_up[p][lvl - 1]) for p in pods}
            if len(keys) == distinct:
                continue
            meets.append(LinkClass.network(lvl))
            if len(keys) == 1:
                scopes.append(None)
                return scopes, meets
            scopes.append(lambda p, lvl=lvl: id(tree.pod_up[p][lvl - 1]))
            distinct = len(keys)
        scopes.append(None)
        meets.append(LinkClass.NET_LEAF if tree.flat else LinkClass.NET_FAR)
        return scopes, meets

    def pack_large(self, pool, need: int, span: int, piece_unit: int,
                   spans) -> Optional[Allocation]:
        """Blocks of more than :data:`PACK_MAX_UNITS` units (a DP group of
        36 ranks with TP 1), too many for piece patterns: every block split
        with no piece below a threshold (:func:`split_min_piece`), each
        threshold tried and the split the cost model's hierarchical
        all-reduce prices best kept. The smallest piece sets each rank's
        slice of the inter-host ring, so 8+8+8+6+6 beats 7+7+7+7+7+1."""
        tree = self.tree
        rest = [(c // piece_unit * piece_unit, tree.node_pod[i], i)
                for *_, i, c in pool if c >= piece_unit]
        if not rest:
            return None
        top = max(c for c, _, _ in rest)
        thresholds = list(range(min(top, span) // piece_unit * piece_unit, 0, -piece_unit))
        if len(thresholds) > PACK_MAX_THRESHOLDS:
            step = len(thresholds) / PACK_MAX_THRESHOLDS
            thresholds = sorted({thresholds[int(j * step)] for j in range(PACK_MAX_THRESHOLDS)}
                                | {piece_unit}, reverse=True)
        best = best_key = None
        for p in thresholds:
            seq = split_min_piece(rest, need // span, span, piece_unit, p)
            if seq is None:
                continue
            key = self.split_cost(seq, spans)
            if best_key is None or key < best_key:
                best, best_key = seq, key
        return best

    def best_packing(self, pool, need: int, unit: int, spans, best, best_key):
        """The packing (:meth:`pack`) of the pool by each span and piece
        unit that the cost model prices below ``best_key``; ``best`` if none."""
        for span in spans:
            for piece_unit in sorted({unit} | {t for t in spans if t < span}, reverse=True):
                if span % piece_unit or piece_unit % unit:
                    continue
                # blocks too big for patterns hold no whole block on a node;
                # a block of 2 has no half block with a ring to compare with
                # (one GPU "rings" infinitely fast: every pair would be denied)
                large = span // piece_unit > PACK_MAX_UNITS
                for whole_where_fast in (False,) if large or span < 4 else (False, True):
                    seq = self.pack(pool, need, span, piece_unit, spans, whole_where_fast)
                    if seq is None:
                        continue
                    key = self.split_cost(seq, spans)
                    if key < best_key:
                        best_key, best = key, seq
        return best

