"""The time of one collective under NCCL's protocol and algorithm choice
(closed form, docs/cost-model.md has the formulas and their sources), and
which collective each group kind runs.

A group is a flat ring on one link class (one host, or one NVLink domain:
``hosts`` 0 or 1) or spans ``hosts`` hosts with ``l_min..l_max`` ranks
each, joined by a network class. Every collective costs the launch plus
the cheapest of the options NCCL would weigh: a ring with the LL, LL128
or Simple protocol; for all-reduce across hosts a tree; for all-reduce
inside one NVSwitch fabric NVLink SHARP (NVLS). Each option is
``latency + bytes / bandwidth``; bandwidths are the link's figure times
the share a ring reaches (``efficiency``) times the protocol's share.
"""
from __future__ import annotations

import math
from typing import Dict

from slurmtopo.links import LinkClass

#: Which collective each kind runs.
COLLECTIVES: Dict[str, str] = {
    "tp": "all-reduce", "cp": "all-gather", "ep": "all-to-all", "expert-tp": "all-reduce",
    "dp": "all-reduce", "dp-cp": "all-reduce", "expert-dp": "all-reduce", "pp": "p2p",
    "tp-pp": "all-reduce", "tp-cp": "all-reduce", "tp-dp": "all-reduce",
    "tp-dp-cp": "all-reduce", "expert-tp-ep": "all-reduce", "expert-tp-ep-pp": "all-reduce",
}

_INF = math.inf


def _ring(p, protocols, steps: int, net_steps: int, share: float, m: float, a_in: float,
          a_net: float, bus: float, across: bool, allreduce: bool) -> float:
    """The fastest ring: ``steps`` steps (``net_steps`` of them between
    hosts), each rank sending ``share * m`` bytes at ``bus`` bytes/s."""
    best = _INF
    for name in protocols:
        pr = p.protocols[name]
        bw = min(pr.bandwidth * bus, (pr.network_gbps if across else pr.node_gbps) * 1e9)
        lat = pr.latency * (steps - net_steps) * a_in + pr.network_latency * net_steps * a_net
        if across and allreduce and name == "Simple":
            lat *= p.ring_plateau
        t = pr.base_us * 1e-6 + lat + share * m / bw
        if t < best:
            best = t
    return best


def _tree(p, protocols, hosts: int, l_max: int, m: float, a_in: float, a_net: float,
          b_in: float, b_net: float) -> float:
    """NCCL's tree all-reduce across ``hosts``: a chain through each host's
    ranks, a double binary tree between hosts. Each host sends and receives
    M bytes on 2 hosts (half a ring's 2(n-1)/n M) and 2M on more, so past
    two hosts it wins on latency only: LL alone is weighed there."""
    best = _INF
    depth = (hosts - 1).bit_length()  # ceil(log2(hosts))
    k = 1.0 if hosts == 2 else 2.0
    for name in protocols:
        if hosts > 2 and name != "LL":
            continue
        pr = p.protocols[name]
        net = min(pr.bandwidth * b_net, pr.network_gbps * 1e9)
        t_bw = k * m / net
        if l_max > 1:
            t_bw = max(t_bw, 2 * m / (pr.bandwidth * b_in))
        lat = 2 * (pr.latency * (l_max - 1) * a_in + pr.network_latency * depth * a_net)
        t = pr.base_us * 1e-6 + lat + t_bw
        if t < best:
            best = t
    return best


def _nvls_tree(p, hosts: int, m: float, a_net: float, b_net: float, nvls_bw: float,
               nvls_lat: float) -> float:
    """NCCL's NVLSTree all-reduce across ``hosts``: NVLink SHARP reduces
    inside each host (its algbw ``nvls_bw`` GB/s), a tree of Simple steps
    joins the hosts over their NICs (``b_net``: the host's share, bytes/s).
    Like the tree, each host sends and receives M on two hosts and 2M on
    more, so it beats the ring's 2(n-1)/n M on two hosts only, where a
    host's NVLS, not its NICs, is the limit (8x H100 over 8x 400 Gb/s:
    477 GB/s of busbw where a ring reaches 336, aws-p5-2node)."""
    pr = p.protocols["Simple"]
    depth = (hosts - 1).bit_length()
    k = 1.0 if hosts == 2 else 2.0
    net = min(pr.bandwidth * b_net, pr.network_gbps * 1e9)
    return (nvls_lat + 2 * pr.network_latency * depth * a_net
            + max(m / (nvls_bw * 1e9), k * m / net))


def collective_time(p, collective: str, n: int, m: float, hosts: int, l_max: int, l_min: int,
                    in_cls: LinkClass, in_bw: float, net_cls: LinkClass = LinkClass.SELF,
                    net_bw: float = 0.0, nvls_bw: float = 0.0, nvls_lat: float = 0.0) -> float:
    """Seconds of one ``collective`` of ``m`` bytes over ``n`` ranks.

    ``hosts`` 0 or 1: one flat ring on ``in_cls`` at ``in_bw`` GB/s (per
    GPU and direction; ``nvls_bw``, ``nvls_lat``: GB/s and seconds of
    latency of an NVLS all-reduce there, bandwidth 0 for none). ``hosts`` >= 2: ``l_min..l_max`` ranks a host, rings inside
    hosts on ``in_cls``/``in_bw``, hosts joined by ``net_cls`` at
    ``net_bw`` GB/s per rank (its NIC share). ``p``: the CostParams."""
    if n <= 1:
        return 0.0
    if collective == "reduce-scatter":  # a ring's mirror of the all-gather
        collective = "all-gather"
    alpha, eff = p.alpha, p.efficiency
    allreduce = collective == "all-reduce"
    if hosts <= 1:
        a = alpha[in_cls]
        b = eff.get(in_cls, 1.0) * in_bw * 1e9
        if collective == "p2p":
            return p.launch + a + m / b
        if collective == "all-to-all":
            return p.launch + (n - 1) * (a + m / (n * b))
        if allreduce:
            steps = 2 * (n - 1)
        elif collective == "all-gather":
            steps = n - 1
        else:
            raise ValueError(f"unknown collective {collective!r}")
        t = _ring(p, p.protocols, steps, 0, steps / n, m, a, 0.0, b, False, allreduce)
        if (allreduce and nvls_bw > 0 and n >= p.nvls_min_ranks and "nvls" in p.algorithms):
            t = min(t, nvls_lat + m / (nvls_bw * 1e9))
        return p.launch + t
    a_in = alpha[in_cls] if l_max > 1 else 0.0
    b_in = eff.get(in_cls, 1.0) * in_bw * 1e9 if l_max > 1 else _INF
    a_net = alpha[net_cls]
    b_net = eff.get(net_cls, 1.0) * net_bw * 1e9
    if collective == "p2p":
        return p.launch + a_net + m / b_net
    if collective == "all-to-all":
        t = (n - l_min) * (a_net + m / (n * b_net))
        if l_max > 1:
            t += (l_max - 1) * (a_in + m / (n * b_in))
        return p.launch + t
    if allreduce:
        steps, net_steps = 2 * (n - 1), 2 * (hosts - 1)
    elif collective == "all-gather":
        steps, net_steps = n - 1, hosts - 1
    else:
        raise ValueError(f"unknown collective {collective!r}")
    # a ring through every rank leaves each host once per channel: the
    # host's NICs (l_min ranks' shares on the bottleneck host) carry it
    bus = min(b_in, l_min * b_net)
    protocols = p.network_protocols
    t = _ring(p, protocols, steps, net_steps, steps / n, m, a_in, a_net, bus, True, allreduce)
    if allreduce and "tree" in p.algorithms:
        t = min(t, _tree(p, protocols, hosts, l_max, m, a_in, a_net, b_in, l_min * b_net))
        if (hosts == 2 and nvls_bw > 0 and l_min >= p.nvls_min_ranks
                and "nvls" in p.algorithms and "Simple" in protocols):
            t = min(t, _nvls_tree(p, hosts, m, a_net, l_min * b_net, nvls_bw, nvls_lat))
    return p.launch + t

