"""The split functions of placement/packing.py on hand-made node rooms."""
from __future__ import annotations

from collections import Counter

from slurmtopo.placement.packing import blocks_of, split_min_piece, water_fill


def test_min_piece_split_keeps_every_piece_at_the_threshold():
    # eight nodes with 8 free GPUs, two with 7 and three with 4, in one
    # pod (hgx-fattree:16:30:1007): two blocks of 36 ranks with no piece
    # below 6 (filling the nodes in order leaves a piece of 1)
    rest = [(8, 0, i) for i in range(8)] + [(7, 0, 8), (7, 0, 9)] + \
        [(4, 0, i) for i in range(10, 13)]
    seq = split_min_piece(rest, 2, 36, 1, 6)
    assert seq is not None
    assert sum(k for _, k in seq) == 72
    pieces = blocks_of(seq, 36, whole=True)
    assert len(pieces) == 2
    for block in pieces:
        assert sum(block.values()) == 36 and min(block.values()) >= 6
    used = Counter()
    for i, k in seq:
        used[i] += k
    assert all(used[i] <= c for c, _, i in rest)  # no node over its room
    # a threshold nothing can meet
    assert split_min_piece(rest, 2, 36, 1, 9) is None


def test_min_piece_split_stays_in_the_pod_of_its_first_piece():
    # the first piece takes the preferred of the largest rooms (pod 0); the
    # rest of the block goes to the least room that holds it in pod 0 (6),
    # not to the smaller room of pod 1 (4)
    rest = [(8, 0, 0), (8, 1, 1), (4, 1, 2), (6, 0, 3)]
    assert split_min_piece(rest, 1, 12, 1, 4) == [(0, 8), (3, 4)]


def test_water_fill_spreads_in_whole_units():
    assert water_fill([(0, 8), (1, 8), (2, 4)], 18, 1) == [(0, 7), (1, 7), (2, 4)]
    assert water_fill([(0, 8), (1, 8)], 8, 4) == [(0, 4), (1, 4)]
