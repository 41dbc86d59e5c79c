"""The time of one collective under NCCL's protocol and algorithm choice
(closed form, docs/cost-model.md has the formulas and their sources), and
which collective each group kind runs.

A group is flat (one host, or one multi-node NVLink domain such as an
NVL72 rack: ``hosts`` 0 or 1) or spans ``hosts`` NVLink domains (hosts,
or racks) with ``l_min..l_max`` ranks each, joined by a network class.
Every collective costs the launch plus the cheapest of the options NCCL
weighs in the priced release (:meth:`CostParams.has`):

* a ring with the LL, LL128 or Simple protocol (those the network's kind
  runs across it: AWS EFA Simple only);
* all-reduce across domains: NCCL's tree; NVLSTree (NVLS inside each
  domain, a tree between them, over the NICs its head ranks drive); the
  switches' own reduction (CollNet, InfiniBand SHARP) where the fabric
  says they have it;
* all-reduce inside one NVSwitch fabric: NVLink SHARP (NVLS);
* all-gather and reduce-scatter with one rank a domain: PAT;
* all-to-all (every peer at once, through the host's NICs: PXN) and p2p.

Each option is ``latency + bytes / bandwidth``; bandwidths are the link's
figure times the share a ring reaches (``efficiency``) times the
protocol's share; a network step's latency is the class's ``alpha`` times
the network kind's factor.
"""
from __future__ import annotations

import math
from typing import Dict

from slurmtopo.inventory.links import LinkClass

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
    domains), each rank sending ``share * m`` bytes at ``bus`` bytes/s."""
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
    """NCCL's tree all-reduce across ``hosts`` domains: a chain through
    each domain's ranks, a double binary tree between them. Each domain
    sends and receives M bytes on 2 domains (half a ring's 2(n-1)/n M) and
    2M on more, so past two it wins on latency only: LL alone is weighed
    there."""
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


def nvls_latency(p, nvls_lat: float, ranks: int) -> float:
    """NVLS's latency over ``ranks`` GPUs of one NVSwitch fabric:
    ``nvls_lat`` for 8 and growing with the ranks beyond (the switch
    pipelines every rank's chunks: a 72-GPU NVL72 rack reaches its slope
    after about 9 times an 8-GPU node's, coreweave/nccl-tests' GB200
    curves)."""
    return nvls_lat * max(1.0, ranks / 8.0)


def _nvls_tree(p, hosts: int, l_min: int, m: float, a_net: float, b_net: float,
               nvls_bw: float, nvls_lat: float, heads: int) -> float:
    """NCCL's NVLSTree all-reduce across ``hosts`` NVLink domains: NVLS
    reduces inside each (its algbw ``nvls_bw`` GB/s), a tree of Simple
    steps joins the domains over the NICs of ``heads`` head ranks
    (``b_net``: a rank's share, bytes/s). Like the tree, each domain sends
    and receives M on two domains and 2M on more: on two 8-GPU hosts it
    beats the ring's 2(n-1)/n M (8x H100 over 8x 400 Gb/s: 477 GB/s of
    busbw where a ring reaches 336), and across NVL72 racks, whose head
    ranks' NICs carry M a rack, it is what NCCL runs."""
    pr = p.protocols["Simple"]
    depth = (hosts - 1).bit_length()
    k = 1.0 if hosts == 2 else 2.0
    net = min(pr.bandwidth * heads * b_net, pr.network_gbps * 1e9)
    lat = (nvls_latency(p, nvls_lat, l_min) + 2 * pr.network_latency * depth * a_net
           + 2 * (hosts - 1) * p.nvls_tree)
    return lat + max(m / (nvls_bw * 1e9), k * m / net)


def _collnet(p, l_max: int, l_min: int, m: float, a_in: float, b_in: float, b_net: float,
             nvls_bw: float, nvls_lat: float) -> float:
    """An all-reduce the switches reduce (CollNet, InfiniBand SHARP): the
    domain's ranks reduce M inside it (NVLS where it has it, else a ring's
    reduce-scatter and all-gather), each sends its share up once and gets
    the result back, whatever the number of domains: a domain's NICs carry
    M each way (a tree past two domains 2M)."""
    net = m / (l_min * b_net)
    if nvls_bw > 0 and l_min >= p.nvls_min_ranks:
        inside, lat = m / (nvls_bw * 1e9), nvls_latency(p, nvls_lat, l_max)
    elif l_max > 1:
        inside, lat = 2 * (l_max - 1) / l_max * m / b_in, 2 * (l_max - 1) * a_in
    else:
        inside, lat = 0.0, 0.0
    return p.collnet + lat + max(inside, net)


def _pat(p, n: int, m: float, a_net: float, bus: float) -> float:
    """NCCL's PAT all-gather/reduce-scatter (one rank a host): a
    logarithmic latency where a ring pays one network step a rank, at
    three quarters of the ring's bandwidth (NCCL's tuner: 0.75)."""
    pr = p.protocols["Simple"]
    depth = (n - 1).bit_length()
    return pr.base_us * 1e-6 + depth * a_net + (n - 1) / n * m / (0.75 * bus)


def collective_time(p, collective: str, n: int, m: float, hosts: int, l_max: int, l_min: int,
                    in_cls: LinkClass, in_bw: float, net_cls: LinkClass = LinkClass.SELF,
                    net_bw: float = 0.0, nvls_bw: float = 0.0, nvls_lat: float = 0.0,
                    kind: str = "infiniband", sharp: bool = False) -> float:
    """Seconds of one ``collective`` of ``m`` bytes over ``n`` ranks.

    ``hosts`` 0 or 1: one flat ring on ``in_cls`` at ``in_bw`` GB/s (per
    GPU and direction; ``nvls_bw``, ``nvls_lat``: GB/s and seconds of
    latency for 8 ranks of an NVLS all-reduce there, bandwidth 0 for
    none). ``hosts`` >= 2: NVLink domains of ``l_min..l_max`` ranks,
    rings inside them on ``in_cls``/``in_bw``, joined by ``net_cls`` at
    ``net_bw`` GB/s a rank (its NIC share) over a network of ``kind``
    (infiniband, roce, efa) whose switches reduce when ``sharp``. ``p``:
    the CostParams."""
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
        if (allreduce and nvls_bw > 0 and n >= p.nvls_min_ranks and p.has("nvls")
                and (in_cls is LinkClass.NVLINK or p.has("mnnvl"))):
            t = min(t, nvls_latency(p, nvls_lat, n) + m / (nvls_bw * 1e9))
        return p.launch + t
    a_in = alpha[in_cls] if l_max > 1 else 0.0
    b_in = eff.get(in_cls, 1.0) * in_bw * 1e9 if l_max > 1 else _INF
    a_net = alpha[net_cls] * p.network_latency.get(kind, 1.0)
    b_net = eff.get(net_cls, 1.0) * net_bw * 1e9
    if collective == "p2p":
        return p.launch + a_net + m / b_net
    if collective == "all-to-all":
        # the remote peers over the host's NICs (PXN: a rank reaches a
        # peer's rail through the GPU next to that NIC), a network step of
        # latency for each round of peers the channels keep in flight, and
        # the local peers over NVLink
        t = a_net * math.ceil((n - l_min) / p.a2a_peers) + (n - l_min) * m / (n * b_net)
        if l_max > 1:
            t += (l_max - 1) * (a_in + m / (n * b_in))
        return p.launch + t
    if allreduce:
        steps, net_steps = 2 * (n - 1), 2 * (hosts - 1)
    elif collective == "all-gather":
        steps, net_steps = n - 1, hosts - 1
    else:
        raise ValueError(f"unknown collective {collective!r}")
    # a ring through every rank leaves each domain once per channel: the
    # domain's NICs (l_min ranks' shares on the bottleneck) carry it; a
    # multi-node NVLink domain (an NVL72 rack) has more NICs than NCCL has
    # channels or NVLS heads: it drives ``domain_nics`` of them
    nics = min(l_min, p.domain_nics) if in_cls is LinkClass.NVLINK_DOMAIN else l_min
    bus = min(b_in, nics * b_net)
    protocols = p.net_protocols(kind)
    t = _ring(p, protocols, steps, net_steps, steps / n, m, a_in, a_net, bus, True, allreduce)
    if allreduce:
        if p.has("tree"):
            t = min(t, _tree(p, protocols, hosts, l_max, m, a_in, a_net, b_in, nics * b_net))
        nvls_ok = (nvls_bw > 0 and l_min >= p.nvls_min_ranks and p.has("nvls-tree")
                   and (in_cls is LinkClass.NVLINK or p.has("mnnvl")))
        if nvls_ok and p.has("tree") and "Simple" in protocols:
            t = min(t, _nvls_tree(p, hosts, l_min, m, a_net, b_net, nvls_bw, nvls_lat, nics))
        if sharp and p.has("collnet"):
            t = min(t, _collnet(p, l_max, l_min, m, a_in, b_in, b_net,
                                nvls_bw if nvls_ok else 0.0, nvls_lat))
    elif l_max == 1 and p.has("pat"):
        t = min(t, _pat(p, n, m, a_net, bus))
    return p.launch + t
