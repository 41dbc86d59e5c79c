"""Rack-scale NVLink domains (GB200 NVL72 and the like): how much of a
rack a job asking ``--segment=S`` can still use when trays fail.

A job that keeps its NVLink groups in one rack asks topology/block for
segments of ``S`` trays inside one block (a rack). A rack of ``T`` trays
with ``F`` of them down gives ``floor((T - F) / S)`` such segments: with
``S = T`` one failed tray takes the whole rack out of service for these
jobs, with a smaller ``S`` the rack still serves most of them. This is the
trade NVIDIA's NVL72 guidance discusses when it suggests segments of 16
(or 8) trays rather than 18: a few spare trays per rack keep it usable
through failures, at the price of those trays idle (or left to smaller
jobs) while all is well.

:func:`usable_share` is the expected share of a rack's trays that such
segments can use when each tray is down independently with probability
``p`` (the binomial expectation, exact); :func:`capacity_table` the same
for several segment sizes and failure rates, as ``simulate`` reports it.
"""
from __future__ import annotations

import math
from typing import Dict, List, Sequence

#: failure rates (share of trays down at a time) the report weighs
FAILURE_RATES = (0.0, 0.005, 0.01, 0.02, 0.05)
#: segment sizes the report weighs (those no larger than the rack)
SEGMENT_SIZES = (1, 2, 4, 8, 9, 16, 18)


def usable_share(trays: int, segment: int, p: float) -> float:
    """Expected share of a rack of ``trays`` that segments of ``segment``
    trays can use, each tray down with probability ``p``."""
    if trays <= 0 or segment <= 0 or segment > trays:
        return 0.0
    total = 0.0
    for down in range(trays + 1):
        prob = math.comb(trays, down) * (p ** down) * ((1.0 - p) ** (trays - down))
        total += prob * ((trays - down) // segment) * segment
    return total / trays


def capacity_table(trays: int, segments: Sequence[int] = SEGMENT_SIZES,
                   rates: Sequence[float] = FAILURE_RATES) -> List[Dict[str, object]]:
    """Per segment size (no larger than the rack): the usable share at each
    failure rate."""
    return [{"segment": s, "usable": {f"{r:g}": round(usable_share(trays, s, r), 6)
                                      for r in rates}}
            for s in segments if s <= trays]
