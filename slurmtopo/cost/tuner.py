"""Which algorithm and protocol NCCL runs a collective with: NCCL's own
estimate of each option, by its published figures, and the choice it
makes with them (docs/cost-model.md, "What NCCL chooses").

NCCL does not run the fastest option; it runs the option its tuner
*estimates* fastest (``src/graph/tuning.cc``, ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``; ``src/enqueue.cc``, ``topoGetAlgoInfo``): a fixed
latency per algorithm and protocol from its tables plus the bytes over a
bandwidth from its topology search, with a few refinements. Where its
figures are off (8x B200 under NCCL 2.27: NVLS estimated faster than the
LL ring from about 4 MiB, measured slower) the collective runs the slower
option, and the cost model must price that one. :mod:`.collectives`
prices every option as it runs (the calibrated figures); this module only
says which one NCCL takes.

What is modelled, per release (:data:`RELEASES`): the base and per-hop
latencies by algorithm, protocol and link (NVLink, PCIe, network); the
LL protocol's bandwidth ceiling; LL128's and the trees' shares of the
bandwidth; the conversion from bus to algorithm bandwidth; the ring's
"plateau" factor across nodes; the trees' mid-size correction
(:data:`TREE_CORRECTION`, summarised); the latency a network plugin
reports for its hops (AWS's plugin: 75 us for EFA, which NCCL adds to
every network step, twice for Simple's flush); NVLS's 2.28 bandwidth
model. Its topology search is summarised: a ring or tree over NVLink is
credited :data:`NCCL_NVLINK_SHARE` of the GPU's NVLink (NCCL's per-link
figures: 20.6 GB/s of a Hopper lane's 25, 40.1 of Blackwell's 50), a
network hop the node's NICs at :data:`NCCL_NET_SHARE` of their rate. Not
modelled: the per-channel ceilings (they bind only on few channels), the
CPU vendor (taken as Intel: LL's ceiling across nodes 39 GB/s on two,
20.4 on more), NCCL_ALGO/NCCL_PROTO set by hand.

A tuner plugin may overrule NCCL. AWS's (aws/aws-ofi-nccl,
``src/tuner/``, loaded with the network plugin from NCCL 2.21) does on
p5/p5e/p5en and p6-b200 instances with three or more nodes of 8 GPUs;
:func:`plugin_choice` follows its all-reduce regions in outline.
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, Optional, Tuple

from slurmtopo.inventory.links import LinkClass

#: an option: (algorithm, protocol); algorithms ring, tree, nvls,
#: nvls-tree, collnet, pat; protocols LL, LL128, Simple
Option = Tuple[str, str]

_LL, _LL128, _SIMPLE = 0, 1, 2
_PROTO_INDEX = {"LL": _LL, "LL128": _LL128, "Simple": _SIMPLE}

#: GPU generations as NCCL's tables index them (its compute-capability
#: index: Volta, Ampere, Hopper, Blackwell)
VOLTA, AMPERE, HOPPER, BLACKWELL = 0, 1, 2, 3

#: share of the GPU's nominal NVLink bandwidth NCCL's topology search
#: credits a ring or tree: its per-link figures (``topo.h``:
#: SM80_NVLINK_BW 20, SM90 20.6, SM100 40.1 GB/s) over the lane rates
#: (25, 25, 50)
NCCL_NVLINK_SHARE = 0.8
#: share of a NIC's rate NCCL's search credits a channel over the network
#: (its top speeds: 48 GB/s for a 400 Gb/s NIC)
NCCL_NET_SHARE = 0.96
#: NCCL's per-hop latency of a network plugin by network kind, microseconds
#: (``ncclNetProperties.latency``, added to every network step and again for
#: Simple's flush): the InfiniBand and RoCE transports report 0; AWS's
#: plugin sets 75 for every EFA platform it knows (aws-ofi-nccl,
#: ``src/platform-aws.cpp``: p4d, p4de, p5, p5e, p5en, p6)
PLUGIN_LATENCY_US = {"infiniband": 0.0, "roce": 0.0, "efa": 75.0}
#: the ring's "plateau effect" across nodes: NCCL multiplies a Simple
#: ring's latency by 1.4 (1.9 before Ampere)
RING_PLATEAU = 1.4
RING_PLATEAU_VOLTA = 1.9

#: NCCL's base latencies (us) of a ring and a tree by protocol (LL, LL128,
#: Simple); the other algorithms have none
BASE_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)}

#: NCCL's per-hop latencies (us) by link (nvlink, pci, net) and algorithm,
#: (LL, LL128, Simple), from NCCL 2.23 to 2.27; :data:`RELEASES` holds the
#: changes of the other releases
_HW_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "collnet": (0, 0, 3.7),
               "nvls": (0, 0, 25.0), "nvls-tree": (0, 0, 25.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "collnet": (0, 0, 3.7),
            "nvls": (0, 0, 0.0), "nvls-tree": (0, 0, 0.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "collnet": (0, 0, 31.0),
            "nvls": (0, 0, 18.0), "nvls-tree": (0, 0, 14.0)},
}

#: what each release changed in those tables (from NVIDIA/nccl's
#: ``src/graph/tuning.cc`` at each tag): up to 2.18 NVLS and NVLSTree had
#: no NVLink latency (NVLS beat every ring inside a node) and NVLSTree 19 us
#: a network hop; 2.19-2.22 charged a Simple tree step 28 us everywhere and
#: NVLS 23 us (25 from 2.21); 2.28.9 charges an NVLSTree network hop 20.9 us.
#: ``nvls_model``: 2.28 estimates NVLS from the NVLink bandwidth times an
#: efficiency per generation (Hopper 0.85, Blackwell 0.74), pipelining two
#: reductions, where earlier releases take 5/6 of the NVLS graph's
RELEASES: Tuple[Tuple[Tuple[int, int, int], Dict[Tuple[str, str], Tuple[float, ...]], bool],
                ...] = (
    ((0, 0, 0), {("nvlink", "nvls"): (0, 0, 0.0), ("nvlink", "nvls-tree"): (0, 0, 0.0),
                 ("net", "nvls-tree"): (0, 0, 19.0)}, False),
    ((2, 19, 0), {("nvlink", "tree"): (0.6, 1.25, 28.0), ("pci", "tree"): (1.0, 1.9, 28.0),
                  ("net", "tree"): (5.0, 8.5, 28.0), ("nvlink", "nvls"): (0, 0, 23.0),
                  ("nvlink", "nvls-tree"): (0, 0, 23.0)}, False),
    ((2, 21, 0), {("nvlink", "tree"): (0.6, 1.25, 28.0), ("pci", "tree"): (1.0, 1.9, 28.0),
                  ("net", "tree"): (5.0, 8.5, 28.0)}, False),
    ((2, 23, 0), {}, False),
    ((2, 28, 0), {}, True),
    ((2, 28, 9), {("net", "nvls-tree"): (0, 0, 20.9)}, True),
)
#: NCCL 2.28's NVLS efficiency by generation (Hopper, Blackwell)
NVLS_EFFICIENCY = {HOPPER: 0.85, BLACKWELL: 0.74}

#: LL's bandwidth ceiling (GB/s of busbw): inside one node by GPU
#: generation, across nodes by the CPU (taken as Intel: 39 on two nodes,
#: 20.4 on more)
LL_MAX_NODE = {VOLTA: 39.0, AMPERE: 87.7, HOPPER: 141.0, BLACKWELL: 282.0}
LL_MAX_TWO, LL_MAX_MANY = 39.0, 20.4

#: NCCL's correction of a tree all-reduce's bandwidth at mid sizes ("Trees
#: are not perfectly sticking to the model for medium sizes"), summarised
#: as (log2 of the bytes, factor) knots per protocol, linear between them
#: and flat beyond: LL dips to 0.4 at 256-512 KiB, LL128 to 0.6 at 64 KiB-
#: 2 MiB, Simple to 0.5 at 128 KiB-1 MiB and 0.7 again at 16-32 MiB
TREE_CORRECTION = {
    "LL": ((9, 1.0), (12, 0.7), (15, 0.7), (17, 0.5), (18, 0.4), (19, 0.4), (23, 0.8),
           (25, 1.0)),
    "LL128": ((10, 1.0), (12, 0.8), (14, 0.8), (16, 0.6), (21, 0.6), (22, 0.8), (23, 0.9),
              (26, 0.9), (27, 1.0)),
    "Simple": ((12, 0.9), (15, 0.6), (17, 0.5), (20, 0.5), (22, 0.7), (23, 0.8), (24, 0.7),
               (25, 0.7), (26, 0.8), (27, 0.9)),
}


def tree_correction(protocol: str, m: float) -> float:
    """NCCL's mid-size correction of a tree's bandwidth for ``m`` bytes."""
    knots = TREE_CORRECTION[protocol]
    x = math.log2(m) if m > 0 else 0.0
    if x <= knots[0][0]:
        return knots[0][1]
    for (x0, y0), (x1, y1) in zip(knots, knots[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return knots[-1][1]


def _release(version: Tuple[int, int, int]) -> Tuple[Dict[Tuple[str, str], Tuple[float, ...]],
                                                      bool]:
    changes: Dict[Tuple[str, str], Tuple[float, ...]] = {}
    model = False
    for since, table, nvls_model in RELEASES:
        if version >= since:
            changes, model = table, nvls_model
    return changes, model


def _log2i(x: int) -> int:
    return max(0, int(x).bit_length() - 1)


def estimates(collective: str, n: int, m: float, nodes: int, ppn: float, nvlink: bool,
              intra_gbps: float, inter_gbps: float, gen: int, kind: str,
              version: Tuple[int, int, int], offered: Iterable[Option],
              nics: int = 1) -> Dict[Option, float]:
    """NCCL's estimate (microseconds) of each ``offered`` option for one
    ``collective`` of ``m`` bytes over ``n`` ranks on ``nodes`` NCCL nodes
    (hosts, or multi-node NVLink domains) of ``ppn`` ranks: the latency of
    its tables plus the bytes over its bandwidth. ``intra_gbps``: the
    nominal GB/s a GPU's ring gets inside a node (its NVLink when
    ``nvlink``), ``inter_gbps``: the nominal GB/s of a node's ``nics``
    NICs."""
    changes, nvls_model = _release(version)

    def hw(link: str, algo: str, proto: int) -> float:
        row = changes.get((link, algo)) or _HW_US[link][algo]
        return float(row[proto])

    intra = intra_gbps * (NCCL_NVLINK_SHARE if nvlink else 1.0)
    inter = inter_gbps * NCCL_NET_SHARE
    link_in = "nvlink" if nvlink else "pci"
    allreduce = collective == "all-reduce"
    steps = 2 * (n - 1) if allreduce else n - 1
    inter_steps = 0 if nodes <= 1 else (2 * (nodes - 1) if allreduce else nodes - 1)
    plugin = PLUGIN_LATENCY_US.get(kind, 0.0) if nodes > 1 else 0.0
    log_nodes = _log2i(nodes)
    ll_max = LL_MAX_NODE.get(gen, LL_MAX_NODE[AMPERE]) if nodes <= 1 else (
        LL_MAX_TWO if nodes == 2 else LL_MAX_MANY)
    out: Dict[Option, float] = {}
    for algo, proto in offered:
        pi = _PROTO_INDEX[proto]
        # the bandwidth NCCL credits the option (GB/s of algbw)
        if algo == "ring":
            bus = intra if nodes <= 1 else min(intra, inter)
            if proto == "LL":
                bus = min(ll_max, bus * 0.5)
            elif proto == "LL128":
                bus *= 0.92
            bw = bus * n / steps
        elif algo == "tree":
            if nodes > 2 and proto != "LL":
                continue  # TREE_BEYOND_TWO
            # a tree's search on two nodes doubles its intra-node figure
            # over the network's; on more it takes the network's
            bus = min(intra, 2 * inter) if nodes == 2 else min(intra, inter)
            bus *= 0.92
            if proto == "LL":
                bus = min(bus / 3.8, ll_max)
            elif proto == "LL128":
                bus *= 120.0 / 128.0 if nodes > 1 else 7.0 / 9.0
            bw = bus * 0.5 * tree_correction(proto, m)
        elif algo in ("nvls", "nvls-tree"):
            if algo == "nvls-tree" and nodes > 2 and ppn <= 8:
                continue  # NVLSTREE_BEYOND_TWO
            net = inter * (2 if nodes <= 2 and algo == "nvls-tree" else 1)
            if nvls_model:
                eff = NVLS_EFFICIENCY.get(gen, 0.0)
                inside = intra * eff * 0.95 * 2
                bw = min(inside, net if nodes > 1 else intra) * n / max(1, steps)
            else:
                net = inter if algo == "nvls" else (inter if nodes <= 2 else inter / 2)
                bw = min(intra, net if nodes > 1 else intra) * 5.0 / 6.0
        elif algo == "collnet":
            # CollNet Direct: the intra-node figure, less where a NIC serves
            # several GPUs, 0.85 of it from Hopper, half of it as algbw
            factor = max(1.0, ppn / max(1.0, nics))
            factor -= (factor - 1) / 2
            bw = intra / factor * (0.85 if gen >= HOPPER else 1.0) * 0.5
        elif algo == "pat":
            bw = min(intra, inter) * 0.75
        else:
            continue
        if bw <= 0:
            continue
        # its latency
        net_lat = hw("net", "tree" if ppn <= 1 else algo, pi) + plugin * (
            2 if proto == "Simple" else 1)
        if algo == "ring":
            step = hw(link_in, "ring", pi)
            if nodes > 1:
                step = max(step, 1.0 * (3 if proto == "Simple" else 1))
            lat = BASE_US["ring"][pi] + (steps - inter_steps) * step + inter_steps * net_lat
            if proto == "Simple" and nodes > 1 and allreduce:
                lat *= RING_PLATEAU_VOLTA if gen == VOLTA else RING_PLATEAU
        elif algo == "tree":
            lat = BASE_US["tree"][pi] + 2 * ((int(ppn) - 1) * hw(link_in, "tree", pi)
                                             + log_nodes * net_lat)
        elif algo == "nvls":
            lat = hw(link_in, "nvls", pi) + (net_lat if nodes > 1 else 0.0)
        elif algo == "nvls-tree":
            lat = hw(link_in, "nvls-tree", pi) + 2 * log_nodes * net_lat
        elif algo == "collnet":
            k = int(ppn) - 1
            lat = 2 * (min(1, k) * hw(link_in, "collnet", pi) + k * 0.4) + net_lat
        else:  # pat
            lat = 8.0 + log_nodes * net_lat / 3.5 + n * 2.8
        out[(algo, proto)] = lat + m / (1e3 * bw)
    return out


def plugin_choice(platform: Optional[str], collective: str, n: int, m: float, nodes: int,
                  ppn: float, offered: Iterable[Option]) -> Optional[Option]:
    """The option a network plugin's tuner imposes, or None where NCCL's
    own choice stands.

    AWS's plugin (aws-ofi-nccl 1.13 and later, ``src/tuner/
    nccl_ofi_regions.cpp``) keeps NCCL's choice on one or two nodes and
    sets its own for all-reduce on three or more p5/p5e or p6-b200 nodes of
    8 GPUs, by regions of (bytes, ranks) measured on those instances. In
    outline: trees of the LL128 protocol up to a size that grows with the
    ranks (p5: about 30 MiB on 16 ranks, 36 on 32, 110 on 64, 290 on 128
    to 256 ranks, 512 MiB on 1,024; p6: from 256 KiB, below which LL
    trees, to about 53 MiB on 16 ranks, 64 on 32, 440 on 128, 920 on 256,
    1.5 GiB on 512), then LL128 rings up to 1-2 GiB, then NVLSTree or
    Simple rings."""
    if platform not in ("p5", "p6") or collective != "all-reduce" or nodes <= 2:
        return None
    if abs(ppn - 8) > 1e-9:
        return None
    offered = set(offered)
    mib = 1 << 20
    if platform == "p5":
        tree_top = _interp(n, ((16, 30 * mib), (32, 36 * mib), (64, 112 * mib),
                               (128, 288 * mib), (256, 288 * mib), (512, 320 * mib),
                               (1024, 512 * mib)))
        ring_top = _interp(n, ((16, 1024 * mib), (64, 2048 * mib), (256, 2048 * mib),
                               (1024, 2048 * mib)))
        pick = (("tree", "LL128") if m <= tree_top else
                ("ring", "LL128") if m <= ring_top else ("nvls-tree", "Simple"))
    else:
        if m <= 256 * 1024:
            pick = ("tree", "LL")
        else:
            tree_top = _interp(n, ((16, 53 * mib), (32, 64 * mib), (128, 444 * mib),
                                   (256, 918 * mib), (512, 1536 * mib), (1024, 2560 * mib)))
            ring_top = _interp(n, ((16, 83 * mib), (32, 536 * mib), (1024, 16384 * mib)))
            pick = (("tree", "LL128") if m <= tree_top else
                    ("ring", "LL128") if m <= ring_top else ("ring", "Simple"))
    if pick not in offered:
        return None
    return pick


def _interp(n: int, points: Tuple[Tuple[int, float], ...]) -> float:
    """Piecewise linear in log2(ranks) between ``points``, flat beyond."""
    x = math.log2(max(1, n))
    if x <= math.log2(points[0][0]):
        return points[0][1]
    for (n0, y0), (n1, y1) in zip(points, points[1:]):
        x0, x1 = math.log2(n0), math.log2(n1)
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def choose(estimated: Dict[Option, float]) -> Option:
    """The option NCCL takes: its smallest estimate (ties: the first)."""
    return min(estimated, key=estimated.__getitem__)


def in_class_nvlink(cls: LinkClass) -> bool:
    """Does NCCL count a ring on ``cls`` as NVLink (its latencies)?"""
    return cls in (LinkClass.NVLINK, LinkClass.NVLINK_DOMAIN)
