"""The alpha-beta time of one collective: a flat ring on one link class,
or hierarchical across hosts (the formulas are in the package docstring),
and which collective each group kind runs."""
from __future__ import annotations

from typing import Dict, Mapping, Tuple

#: Which collective each kind runs.
COLLECTIVES: Dict[str, str] = {
    "tp": "all-reduce", "cp": "all-gather", "ep": "all-to-all", "expert-tp": "all-reduce",
    "dp": "all-reduce", "dp-cp": "all-reduce", "expert-dp": "all-reduce", "pp": "p2p",
    "tp-pp": "all-reduce", "tp-cp": "all-reduce", "tp-dp": "all-reduce",
    "tp-dp-cp": "all-reduce", "expert-tp-ep": "all-reduce", "expert-tp-ep-pp": "all-reduce",
}


def flat_time(collective: str, n: int, m: float, alpha: float, gbps: float) -> float:
    """One collective over ``n`` ranks on one link class (ring)."""
    if n <= 1:
        return 0.0
    bw = gbps * 1e9
    if collective == "all-reduce":
        return 2 * (n - 1) * (alpha + m / (n * bw))
    if collective in ("all-gather", "all-to-all"):
        return (n - 1) * (alpha + m / (n * bw))
    if collective == "p2p":
        return alpha + m / bw
    raise ValueError(f"unknown collective {collective!r}")


def hier_time(collective: str, n: int, h: int, l_max: int, l_min: int, m: float,
              a_in: float, gbps_in: float, a_net: float, gbps_net: float) -> float:
    """One collective over ``n`` ranks on ``h`` hosts, ``l_min..l_max`` a host."""
    if h <= 1:
        return flat_time(collective, n, m, a_in, gbps_in)
    b_in = gbps_in * 1e9
    b_net = gbps_net * 1e9
    if collective == "all-reduce":
        t = 2 * (h - 1) * (a_net + m / (l_min * h * b_net))
        if l_max > 1:
            t += 2 * (l_max - 1) * (a_in + m / (l_max * b_in))
        return t
    if collective == "all-gather":
        t = (h - 1) * (a_net + m / (n * b_net))
        if l_max > 1:
            t += (l_max - 1) * (a_in + m / (l_max * b_in))
        return t
    if collective == "all-to-all":
        t = (n - l_min) * (a_net + m / (n * b_net))
        if l_max > 1:
            t += (l_max - 1) * (a_in + m / (n * b_in))
        return t
    if collective == "p2p":
        return a_net + m / b_net
    raise ValueError(f"unknown collective {collective!r}")


def counted_kinds(groups: Mapping[str, list], cp: int) -> Tuple[str, ...]:
    """Kinds whose times make the step time (see the module doc)."""
    out = ["tp", "cp", "dp-cp" if cp > 1 else "dp", "pp"]
    for k in ("ep", "expert-tp", "expert-dp"):
        if k in groups:
            out.append(k)
    return tuple(k for k in out if k in groups)
