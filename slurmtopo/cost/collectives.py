"""The time of one collective as NCCL runs it (closed form,
docs/cost-model.md has the formulas and their sources), and which
collective each group kind runs.

A group is flat (one host, or one multi-node NVLink domain such as an
NVL72 rack: ``hosts`` 0 or 1) or spans ``hosts`` NVLink domains (hosts,
or racks) with ``l_min..l_max`` ranks each, joined by a network class.
:func:`options` prices every option NCCL may run in the priced release
(:meth:`CostParams.has`), as it runs (the calibrated figures):

* a ring with the LL, LL128 or Simple protocol (those the node's network
  allows: AWS EFA v1 Simple only);
* all-reduce across domains: NCCL's tree per protocol; NVLSTree (NVLS
  inside each domain, a tree between them, over the NICs its head ranks
  drive); the switches' own reduction (CollNet, InfiniBand SHARP) where
  the fabric says they have it;
* all-reduce inside one NVSwitch fabric: NVLink SHARP (NVLS);
* all-gather and reduce-scatter with one rank a domain: PAT;
* all-to-all (every peer at once, through the host's NICs: PXN) and p2p.

Each option is ``latency + bytes / bandwidth``; bandwidths are the link's
figure times the share a ring reaches (``efficiency``) times the
protocol's share; a network step's latency is the class's ``alpha``
times the network kind's factor plus the transport's own (``net_hop``:
AWS EFA's). :func:`collective_time` is the launch plus the option NCCL
takes (:func:`pick`: its tuner plugin's, else NCCL's own estimate,
:mod:`slurmtopo.cost.tuner`); the lower bound takes the fastest.
"""
from __future__ import annotations

import math
from typing import Dict

from slurmtopo.cost import tuner
from slurmtopo.cost.tuner import HOPPER, Option
from slurmtopo.inventory.links import LinkClass

#: Which collective each kind runs.
COLLECTIVES: Dict[str, str] = {
    "tp": "all-reduce", "cp": "all-gather", "ep": "all-to-all", "expert-tp": "all-reduce",
    "dp": "all-reduce", "dp-cp": "all-reduce", "expert-dp": "all-reduce", "pp": "p2p",
    "tp-pp": "all-reduce", "tp-cp": "all-reduce", "tp-dp": "all-reduce",
    "tp-dp-cp": "all-reduce", "expert-tp-ep": "all-reduce", "expert-tp-ep-pp": "all-reduce",
}

_INF = math.inf


def net_step(pr, a_net: float, hop: float) -> float:
    """Seconds of one network step of protocol ``pr``: its share of the
    class's latency, plus the transport's own (``hop``: AWS EFA's). NCCL's
    estimate counts the transport's latency twice for Simple (its flush);
    the published EFA curves show it once (P6-B200's Simple rings on four
    nodes start within 0.3 ms)."""
    return pr.network_latency * a_net + hop


def _rings(out: Dict[Option, float], p, protocols, steps: int, net_steps: int, share: float,
           m: float, a_in: float, a_net: float, bus: float, across: bool,
           allreduce: bool, hop: float = 0.0) -> None:
    """A ring per protocol: ``steps`` steps (``net_steps`` of them between
    domains), each rank sending ``share * m`` bytes at ``bus`` bytes/s."""
    for name in protocols:
        pr = p.protocols[name]
        bw = min(pr.bandwidth * bus, (pr.network_gbps if across else pr.node_gbps) * 1e9)
        lat = pr.latency * (steps - net_steps) * a_in + net_steps * net_step(pr, a_net, hop)
        if across and allreduce and name == "Simple":
            lat *= p.ring_plateau
        out[("ring", name)] = pr.base_us * 1e-6 + lat + share * m / bw


def _trees(out: Dict[Option, float], p, protocols, hosts: int, l_max: int, m: float,
           a_in: float, a_net: float, b_in: float, b_net: float, hop: float = 0.0) -> None:
    """NCCL's tree all-reduce across ``hosts`` domains, per protocol: a
    chain through each domain's ranks, a double binary tree between them.
    Each domain sends and receives M bytes on 2 domains (half a ring's
    2(n-1)/n M) and 2M on more."""
    depth = (hosts - 1).bit_length()  # ceil(log2(hosts))
    k = 1.0 if hosts == 2 else 2.0
    for name in protocols:
        pr = p.protocols[name]
        net = min(pr.bandwidth * b_net, pr.network_gbps * 1e9)
        t_bw = k * m / net
        if l_max > 1:
            t_bw = max(t_bw, 2 * m / (pr.bandwidth * b_in))
        lat = 2 * (pr.latency * (l_max - 1) * a_in + depth * net_step(pr, a_net, hop))
        out[("tree", name)] = pr.base_us * 1e-6 + lat + t_bw


def nvls_latency(p, nvls_lat: float, ranks: int) -> float:
    """NVLS's latency over ``ranks`` GPUs of one NVSwitch fabric:
    ``nvls_lat`` for 8 and growing with the ranks beyond (the switch
    pipelines every rank's chunks: a 72-GPU NVL72 rack reaches its slope
    after about 9 times an 8-GPU node's, coreweave/nccl-tests' GB200
    curves)."""
    return nvls_lat * max(1.0, ranks / 8.0)


def _nvls_tree(p, hosts: int, l_max: int, m: float, a_net: float, b_net: float,
               nvls_bw: float, nvls_lat: float, heads: int, hop: float = 0.0) -> float:
    """NCCL's NVLSTree all-reduce across ``hosts`` NVLink domains: NVLS
    reduces inside each (its algbw ``nvls_bw`` GB/s), a tree of Simple
    steps joins the domains over the NICs of ``heads`` head ranks
    (``b_net``: a rank's share, bytes/s). Like the tree, each domain sends
    and receives M on two domains and 2M on more: on two 8-GPU hosts it
    beats the ring's 2(n-1)/n M (8x H100 over 8x 400 Gb/s: 477 GB/s of
    busbw where a ring reaches 356), and across NVL72 racks, whose head
    ranks' NICs carry M a rack, it is what NCCL runs. Its pipeline fills
    through the tree's 2 ceil(log2 hosts) stages, each a network step and
    ``nvls_tree_stage`` of an NVLS pass in the domain (a rack's is nine
    times an 8-GPU node's: what makes twenty racks 5 ms slower to start
    than one); the tree waits for the largest domain's pass (``l_max``
    ranks), while the smallest domain's NICs (``heads``) bound its
    bandwidth."""
    pr = p.protocols["Simple"]
    depth = (hosts - 1).bit_length()
    k = 1.0 if hosts == 2 else 2.0
    net = min(pr.bandwidth * heads * b_net, pr.network_gbps * 1e9)
    nv = nvls_latency(p, nvls_lat, l_max)
    lat = nv + 2 * depth * (net_step(pr, a_net, hop) + nv * p.nvls_tree_stage)
    return lat + max(m / (nvls_bw * 1e9), k * m / net)


def _collnet(p, l_max: int, l_min: int, m: float, a_in: float, b_in: float, b_net: float,
             nvls_bw: float, nvls_lat: float, hop: float = 0.0) -> float:
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
    return p.collnet + 2 * hop + lat + max(inside, net)


def _pat(p, n: int, m: float, a_net: float, bus: float, hop: float = 0.0) -> float:
    """NCCL's PAT all-gather/reduce-scatter (one rank a host): a
    logarithmic latency where a ring pays one network step a rank, at
    three quarters of the ring's bandwidth (NCCL's tuner: 0.75)."""
    pr = p.protocols["Simple"]
    depth = (n - 1).bit_length()
    return (pr.base_us * 1e-6 + depth * net_step(pr, a_net, hop)
            + (n - 1) / n * m / (0.75 * bus))


def options(p, collective: str, n: int, m: float, hosts: int, l_max: int, l_min: int,
            in_cls: LinkClass, in_bw: float, net_cls: LinkClass = LinkClass.SELF,
            net_bw: float = 0.0, nvls_bw: float = 0.0, nvls_lat: float = 0.0,
            kind: str = "infiniband", sharp: bool = False, gen: int = HOPPER
            ) -> Dict[Option, float]:
    """Seconds each option NCCL may run takes for one all-reduce, all-gather
    or reduce-scatter (without the launch), by (algorithm, protocol). The
    arguments are :func:`collective_time`'s."""
    if collective == "reduce-scatter":  # a ring's mirror of the all-gather
        collective = "all-gather"
    alpha, eff = p.alpha, p.efficiency
    allreduce = collective == "all-reduce"
    if allreduce:
        steps = 2 * (n - 1)
    elif collective == "all-gather":
        steps = n - 1
    else:
        raise ValueError(f"unknown collective {collective!r}")
    out: Dict[Option, float] = {}
    protocols = p.protocols_for(kind, gen, hosts > 1)
    if hosts <= 1:
        a = alpha[in_cls]
        b = eff.get(in_cls, 1.0) * in_bw * 1e9
        _rings(out, p, protocols, steps, 0, steps / n, m, a, 0.0, b, False, allreduce)
        if (allreduce and nvls_bw > 0 and n >= p.nvls_min_ranks and p.has("nvls")
                and (in_cls is LinkClass.NVLINK or p.has("mnnvl"))):
            out[("nvls", "Simple")] = nvls_latency(p, nvls_lat, n) + m / (nvls_bw * 1e9)
        return out
    a_in = alpha[in_cls] if l_max > 1 else 0.0
    b_in = eff.get(in_cls, 1.0) * in_bw * 1e9 if l_max > 1 else _INF
    a_net = alpha[net_cls] * p.network_latency.get(kind, 1.0)
    hop = p.net_hop.get(kind, 0.0)
    b_net = eff.get(net_cls, 1.0) * net_bw * 1e9
    net_steps = 2 * (hosts - 1) if allreduce else hosts - 1
    nics = domain_nics(p, in_cls, l_min)
    bus = min(b_in, nics * b_net)
    _rings(out, p, protocols, steps, net_steps, steps / n, m, a_in, a_net, bus, True, allreduce,
           hop)
    if allreduce:
        if p.has("tree"):
            _trees(out, p, protocols, hosts, l_max, m, a_in, a_net, b_in, nics * b_net, hop)
        nvls_ok = (nvls_bw > 0 and l_min >= p.nvls_min_ranks and p.has("nvls-tree")
                   and (in_cls is LinkClass.NVLINK or p.has("mnnvl")))
        if nvls_ok and p.has("tree") and "Simple" in protocols:
            out[("nvls-tree", "Simple")] = _nvls_tree(p, hosts, l_max, m, a_net, b_net, nvls_bw,
                                                      nvls_lat, nics, hop)
        if sharp and p.has("collnet"):
            out[("collnet", "Simple")] = _collnet(p, l_max, l_min, m, a_in, b_in, b_net,
                                                  nvls_bw if nvls_ok else 0.0, nvls_lat, hop)
    elif l_max == 1 and p.has("pat"):
        out[("pat", "Simple")] = _pat(p, n, m, a_net, bus, hop)
    return out


def domain_nics(p, in_cls: LinkClass, l_min: int) -> int:
    """NICs a domain of ``l_min`` ranks drives across domains: an 8-GPU
    host all of its ranks' (a ring through every rank leaves each domain
    once per channel), a multi-node NVLink domain (an NVL72 rack) at most
    ``domain_nics``: it has more NICs than NCCL has channels or NVLS heads."""
    return min(l_min, p.domain_nics) if in_cls is LinkClass.NVLINK_DOMAIN else l_min


def pick(p, opts: Dict[Option, float], collective: str, n: int, m: float, hosts: int,
         l_min: int, in_cls: LinkClass, in_bw: float, net_bw: float, kind: str, gen: int,
         platform: str = "") -> Option:
    """The option NCCL runs: a network plugin's tuner's where it overrules
    NCCL (:func:`~slurmtopo.cost.tuner.plugin_choice`), else the one NCCL's
    own estimate says is fastest (:func:`~slurmtopo.cost.tuner.estimates`)."""
    nodes = max(1, hosts)
    ppn = n / nodes
    if collective == "reduce-scatter":
        collective = "all-gather"
    forced = tuner.plugin_choice(platform, collective, n, m, nodes, ppn, opts)
    if forced is not None:
        return forced
    nvlink = tuner.in_class_nvlink(in_cls)
    nics = domain_nics(p, in_cls, l_min) if hosts > 1 else 1
    inter = nics * net_bw if hosts > 1 else in_bw
    intra = in_bw if (hosts <= 1 or l_min > 1) and math.isfinite(in_bw) else inter * 4
    est = tuner.estimates(collective, n, m, nodes, ppn, nvlink, intra, inter, gen, kind,
                          p.nccl_version, opts, nics)
    return tuner.choose(est) if est else min(opts, key=opts.__getitem__)


def collective_time(p, collective: str, n: int, m: float, hosts: int, l_max: int, l_min: int,
                    in_cls: LinkClass, in_bw: float, net_cls: LinkClass = LinkClass.SELF,
                    net_bw: float = 0.0, nvls_bw: float = 0.0, nvls_lat: float = 0.0,
                    kind: str = "infiniband", sharp: bool = False, gen: int = HOPPER,
                    platform: str = "", fastest: bool = False) -> float:
    """Seconds of one ``collective`` of ``m`` bytes over ``n`` ranks.

    ``hosts`` 0 or 1: one flat ring on ``in_cls`` at ``in_bw`` GB/s (per
    GPU and direction; ``nvls_bw``, ``nvls_lat``: GB/s and seconds of
    latency for 8 ranks of an NVLS all-reduce there, bandwidth 0 for
    none). ``hosts`` >= 2: NVLink domains of ``l_min..l_max`` ranks,
    rings inside them on ``in_cls``/``in_bw``, joined by ``net_cls`` at
    ``net_bw`` GB/s a rank (its NIC share) over a network of ``kind``
    (infiniband, roce, efa) whose switches reduce when ``sharp``. ``gen``:
    the GPUs' generation (:mod:`~slurmtopo.cost.tuner`), ``platform``: a
    platform whose network plugin tunes NCCL (AWS ``p5``, ``p6``). ``p``:
    the CostParams.

    The collective runs the option NCCL chooses (:func:`pick`), priced as
    it runs (:func:`options`); ``fastest``: the fastest option instead
    (the lower bound's: no choice of NCCL's is faster)."""
    if n <= 1:
        return 0.0
    if collective == "p2p":
        if hosts <= 1:
            return p.launch + p.alpha[in_cls] + m / (p.efficiency.get(in_cls, 1.0) * in_bw * 1e9)
        a_net = p.alpha[net_cls] * p.network_latency.get(kind, 1.0) + p.net_hop.get(kind, 0.0)
        return p.launch + a_net + m / (p.efficiency.get(net_cls, 1.0) * net_bw * 1e9)
    if collective == "all-to-all":
        return p.launch + _all_to_all(p, n, m, hosts, l_max, l_min, in_cls, in_bw, net_cls,
                                      net_bw, kind)
    opts = options(p, collective, n, m, hosts, l_max, l_min, in_cls, in_bw, net_cls, net_bw,
                   nvls_bw, nvls_lat, kind, sharp, gen)
    if fastest or len(opts) == 1:
        return p.launch + min(opts.values())
    choice = pick(p, opts, collective, n, m, hosts, l_min, in_cls, in_bw, net_bw, kind, gen,
                  platform)
    return p.launch + opts[choice]


def _all_to_all(p, n: int, m: float, hosts: int, l_max: int, l_min: int, in_cls: LinkClass,
                in_bw: float, net_cls: LinkClass, net_bw: float, kind: str) -> float:
    """An all-to-all (``m``: what a rank sends, ``m/n`` to each peer) with
    the Simple protocol: the local peers over NVLink, the remote ones over
    the host's NICs (PXN: a rank reaches a peer's rail through the GPU of
    its host next to that rail's NIC), ``a2a_peers`` of them in flight at
    once, a network step of latency for each round."""
    alpha, eff = p.alpha, p.efficiency
    if hosts <= 1:
        a = alpha[in_cls]
        b = eff.get(in_cls, 1.0) * in_bw * 1e9
        return (n - 1) * (a + m / (n * b))
    a_net = alpha[net_cls] * p.network_latency.get(kind, 1.0)
    b_net = eff.get(net_cls, 1.0) * net_bw * 1e9
    # the transport's own latency once: the peers' messages are in flight
    # together
    t = (p.net_hop.get(kind, 0.0) + a_net * math.ceil((n - l_min) / p.a2a_peers)
         + (n - l_min) * m / (n * b_net))
    if l_max > 1:
        a_in = alpha[in_cls]
        b_in = eff.get(in_cls, 1.0) * in_bw * 1e9
        t += (l_max - 1) * (a_in + m / (n * b_in))
    return t
