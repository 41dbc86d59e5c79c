"""The cost model's default figures: message sizes per group kind, latency
per link class, NCCL's protocols and algorithms, the share of each link's
bandwidth they reach, NVLink and PCIe bandwidth by GPU model, NCCL's PCIe
factors and socket link, and the keys of the inventory's ``cost:`` block
(docs/cost-model.md cites where each number comes from)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Tuple

from slurmtopo.inventory.links import LinkClass

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: Per group kind, the bytes of one collective the model prices. They
#: describe one layer of a large dense transformer (hidden 8192, sequence
#: 4096 tokens per micro-batch, bf16) so the kinds weigh against each
#: other as in training; pass your own per job (``message_bytes``).
DEFAULT_MESSAGE_BYTES: Dict[str, int] = {
    # all-reduce of a layer's output activations: 4096 x 8192 x 2 bytes
    "tp": 64 * MiB,
    # all-gather of keys and values (GQA, 2048-wide K and V): 2 x 4096 x 2048 x 2
    "cp": 32 * MiB,
    # all-to-all dispatch of a micro-batch's tokens to the experts: 4096 x 8192 x 2
    "ep": 64 * MiB,
    # expert tensor parallel all-reduce: like tp
    "expert-tp": 64 * MiB,
    # one gradient bucket (Megatron buckets ~40M parameters; 128 MiB of bf16 ~ 64M)
    "dp": 128 * MiB,
    "dp-cp": 128 * MiB,
    "expert-dp": 128 * MiB,
    # activations of one micro-batch sent to the next stage: 4096 x 8192 x 2
    "pp": 64 * MiB,
    # combined kinds carry small reductions (gradient norm, loss, flags):
    # latency-bound; reported but not counted in the step time
    "tp-pp": 8,
    "tp-cp": 8,
    "tp-dp": 8,
    "tp-dp-cp": 8,
    "expert-tp-ep": 8,
    "expert-tp-ep-pp": 8,
}


#: alpha: the latency of one step of a ring (one hop, one chunk) with
#: NCCL's Simple protocol, microseconds, per link class. NCCL's tuner
#: (src/graph/tuning.cc, ``hwLatencies``) charges a Simple ring step 3.4 us
#: over NVLink, 5.7 us over PCIe and 14 us over the network; the steps
#: between the PCIe classes and the switch levels add a little for each
#: bridge or switch crossed. LL and LL128 steps cost a fraction of these
#: (:data:`DEFAULT_PROTOCOLS`).
DEFAULT_ALPHA_US: Dict[LinkClass, float] = {
    LinkClass.SELF: 0.0, LinkClass.NVLINK: 3.4, LinkClass.NVLINK_DOMAIN: 4.0, LinkClass.PIX: 5.7,
    LinkClass.PXB: 5.7, LinkClass.PHB: 6.0, LinkClass.NODE: 6.5, LinkClass.SYS: 8.0,
    LinkClass.NET_LEAF: 14.0, LinkClass.NET_L1: 14.5, LinkClass.NET_L2: 15.0, LinkClass.NET_L3: 15.5,
    LinkClass.NET_FAR: 17.0,
}


@dataclass(frozen=True)
class Protocol:
    """One of NCCL's protocols: the share of the Simple protocol's bandwidth
    it reaches; the share of the Simple per-step latency (alpha) it pays on
    a step inside a node (or NVLink domain) and on a step between hosts;
    its fixed latency per collective (microseconds); the most busbw (GB/s)
    it reaches inside a node and across hosts, whatever the links."""

    bandwidth: float
    latency: float
    network_latency: float
    base_us: float
    node_gbps: float = math.inf
    network_gbps: float = math.inf


#: NCCL's three protocols (src/graph/tuning.cc): LL sends 8 bytes of data
#: with 8 bytes of flags (half the bandwidth, the lowest latency); LL128
#: 120 of every 128 bytes (NCCL counts 0.92 of the bandwidth); Simple the
#: whole bandwidth after a handshake per chunk. Latency factors are
#: NCCL's per-step latencies relative to Simple's (LL 0.6/3.4 us on
#: NVLink, 2.7/14 on the network; LL128 1.9/3.4 and 4/14); base
#: latencies are NCCL's ``baseLatencies`` for rings. LL and LL128 top out
#: whatever the links (NCCL: ``llMaxBws``, in a node 141 GB/s on Hopper
#: and 282 on Blackwell, 20-39 across nodes by the CPU;
#: ``perChMaxRingLL128Bws``, 36.7 GB/s a channel on Hopper, 73.4 on
#: Blackwell in a node, src/graph/tuning.cc from v2.25.1-1); the ceilings
#: here are fitted, one for every generation: Blackwell's twice Hopper's
#: in a node would price 8x B200's LL ring at 1-2 MiB 1.3x too fast
#: (b200-p6-1node, a fit curve).
DEFAULT_PROTOCOLS: Dict[str, Protocol] = {
    "LL": Protocol(bandwidth=0.5, latency=0.18, network_latency=0.19, base_us=6.6,
                   node_gbps=200.0, network_gbps=40.0),
    "LL128": Protocol(bandwidth=0.92, latency=0.56, network_latency=0.29, base_us=14.0,
                      node_gbps=310.0),
    "Simple": Protocol(bandwidth=1.0, latency=1.0, network_latency=1.0, base_us=8.4),
}
PROTOCOL_NAMES = tuple(DEFAULT_PROTOCOLS)

#: collective algorithms the model can choose (NCCL's names): ``ring``
#: always; ``tree`` for all-reduce across hosts (NCCL's double binary
#: tree); ``nvls`` for all-reduce inside one NVSwitch fabric (NVLink
#: SHARP) and, across NVLink domains, NVLS inside each with a tree between
#: them (NVLSTree); ``collnet`` the switches' own reduction (InfiniBand
#: SHARP) where the fabric says they have it; ``pat`` NCCL's
#: Parallel Aggregated Trees for all-gather and reduce-scatter with one
#: rank a host
ALGORITHMS = ("ring", "tree", "nvls", "collnet", "pat")

#: the NCCL release the model prices when neither the job nor the
#: inventory names one: the newest it knows
NEWEST_NCCL = (2, 30, 7)

#: the first NCCL release with each algorithm (NVIDIA/nccl release notes):
#: NVLS (NVLink SHARP inside a node) 2.17, NVLSTree (NVLS with a tree
#: between nodes) 2.18, NVLS over multi-node NVLink (MNNVL, an NVL72 rack)
#: 2.21, PAT 2.23. A release before these prices without them.
ALGORITHM_SINCE = {"nvls": (2, 17, 0), "nvls-tree": (2, 18, 0), "mnnvl": (2, 21, 0),
                   "pat": (2, 23, 0), "collnet": (2, 12, 0)}

#: what the compute NICs are (cost.hardware.network_kind; ``cost: network``)
NETWORK_KINDS = ("infiniband", "roce", "efa")
#: severity order: a group over hosts of several kinds is priced as the worst
NET_KIND_ORDER = {"": 0, "infiniband": 1, "roce": 2, "efa": 3}

#: protocols NCCL runs, by network kind, where the kind restricts them:
#: EFA v1 (libfabric's SRD without RDMA write) does not deliver bytes in
#: the order LL and LL128 need, and AWS's plugin then sets NCCL_PROTO=Simple
#: for the process (aws/aws-ofi-nccl#76, #850; ``src/platform-aws.cpp``)
NETWORK_KIND_PROTOCOLS = {"infiniband": ("LL", "LL128", "Simple"),
                          "roce": ("LL", "LL128", "Simple"), "efa": ("Simple",)}
#: the first GPU generation (:mod:`slurmtopo.cost.tuner`) whose EFA
#: instances deliver LL's and LL128's bytes in order: p5 (Hopper, EFA v2)
#: and later configure in-order 128-byte RDMA writes, and AWS's tuner runs
#: LL128 trees and rings there (aws-ofi-nccl ``src/tuner/``)
EFA_ORDERED_FROM = 2

#: a network step's latency by kind, as a multiple of the class's
#: ``alpha_us``: RoCE runs the same verbs over Ethernet switches (NCCL's
#: tuner does not tell them apart); EFA's SRD goes through the host's
#: libfabric provider and AWS's own transport (fitted, below)
DEFAULT_NETWORK_LATENCY = {"infiniband": 1.0, "roce": 1.0, "efa": 1.0}

#: microseconds a network step adds by kind, on top of ``alpha_us``: the
#: transport's own latency. InfiniBand and RoCE verbs none (NCCL's IB
#: transport reports 0); AWS's plugin tells NCCL 75 us for EFA
#: (aws-ofi-nccl ``src/platform-aws.cpp``), the figure its tuner plans with
DEFAULT_NET_HOP_US = {"infiniband": 0.0, "roce": 0.0, "efa": 75.0}

#: NVLSTree across NVLink domains (hosts, or NVL72 racks): its pipeline
#: fills through the tree's 2 ceil(log2 d) stages between d domains, each a
#: network step and this share of an NVLS pass inside the domain (whose
#: latency grows with the domain's ranks: 57 us on 8 B200, nine times that
#: on a 72-GPU rack). Fitted on gb200-nvl72-2racks and -20racks: two racks
#: carry about 0.9 ms more than one at 512 MiB-16 GiB, twenty about 5 ms
#: (0.4-0.75 fit both); on two p5 hosts it is 16 us a stage
DEFAULT_NVLS_TREE_STAGE = 0.6

#: NICs of one multi-node NVLink domain (an NVL72 rack) a collective
#: drives across domains: NCCL leaves the domain through its channels'
#: rings and its NVLSTree's head ranks, each with its NIC, not through all
#: 72 NICs of a rack (fitted: 20 GB200 racks reach 213 GB/s of algbw, a
#: rack's tree moving 2M over about 10 NICs of 50 GB/s at the network's
#: efficiency). An 8-GPU host uses all its ranks' NICs, as before
DEFAULT_DOMAIN_NICS = 10

#: all-to-all across hosts: how many remote peers a rank's channels keep
#: in flight at once, so that the latency is one network step per round
#: of them rather than one per peer (fitted on AWS p5's alltoall_perf on
#: 16 nodes, 120 remote peers a rank: a network step per peer made it
#: 1.8x too slow at 32 MiB; 2 and 4 nodes held out)
DEFAULT_A2A_PEERS = 2

#: CollNet (in-network reduction, InfiniBand SHARP): microseconds of one
#: pass through the switches (NCCL's tuner: CollNet Direct 31 us on the
#: network, Chain 30); not fitted (no published curve found with its
#: NCCL version)
DEFAULT_COLLNET_US = 31.0

#: The share of a link's bandwidth a Simple ring reaches, per class
#: (fitted to the published curves in tests/fixtures/calibration/, see
#: docs/cost-model.md: an H200 ring measures 367.6 GB/s busbw of 450, a
#: B200 682 of 900; ConnectX-7 and EFA rings across 4 nodes 331-382 GB/s
#: of 400 a node). PCIe classes are not calibrated and take NVLink's.
DEFAULT_EFFICIENCY: Dict[LinkClass, float] = {
    **{c: 0.80 for c in LinkClass if LinkClass.NVLINK <= c <= LinkClass.SYS},
    **{c: 0.89 for c in LinkClass if c.is_network},
}

#: NVLink SHARP (NVLS): an all-reduce inside one NVSwitch fabric (a node,
#: or an NVL72 domain) moves M bytes per GPU each way instead of a ring's
#: 2(n-1)/n M; its algbw is this share of the GPU's NVLink bandwidth
#: (fitted: 8x H100/H200 reach 274 GB/s algbw, 480 busbw, of 450; 8x B200
#: 483 of 900). NVSwitch 3 (Hopper) and later; A100's NVSwitch has none.
DEFAULT_NVLS_EFFICIENCY: Tuple[Tuple[str, float], ...] = (
    ("gb300", 0.45), ("gb200", 0.45), ("b300", 0.45), ("b200", 0.45), ("b100", 0.45),
    ("gh200", 0.58), ("h200", 0.58), ("h100", 0.58), ("h800", 0.58), ("h20", 0.58),
)
#: NVLS's fixed latency per all-reduce (microseconds) by GPU model: it
#: reduces in the switch in one pass but starts later than a ring (NCCL
#: charges 25 us of hardware latency; fitted: Hopper 30, Blackwell 57)
DEFAULT_NVLS_US: Tuple[Tuple[str, float], ...] = (
    ("gb300", 57.0), ("gb200", 57.0), ("b300", 57.0), ("b200", 57.0), ("b100", 57.0),
    ("gh200", 26.0), ("h200", 26.0), ("h100", 26.0), ("h800", 26.0), ("h20", 26.0),
)
#: NCCL does not use NVLS for four GPUs or fewer (the GB200 NVL partition
#: guide: partitions of 4 GPUs or fewer "will not benefit from multicast";
#: NCCL's nvls.cc would set it up from 3 GPUs, but the published 4-GPU tray
#: curves show a ring's start, docs/cost-model.md "NVLS")
DEFAULT_NVLS_MIN_RANKS = 5

#: NCCL multiplies a Simple ring's latency across nodes by 1.4 ("plateau
#: effect of ring", tuning.cc): its figure, not fitted (1.3-1.5 fit the
#: fit set alike)
DEFAULT_RING_PLATEAU = 1.4

#: fixed cost of every collective (kernel launch, the host's enqueue and
#: the caller's loop), microseconds: NCCL's base latencies are part of
#: the protocols, this is what every published curve carries on top of
#: them (fitted: 8-byte all-reduces take 30-40 us on 8 GPUs under
#: nccl-tests and PyTorch, where NCCL's own latency is 10-20 us)
DEFAULT_LAUNCH_US = 18.0

#: GPU generation by model (first substring match), as NCCL's tables index
#: them (:mod:`slurmtopo.cost.tuner`): 0 Volta (and older), 1 Ampere (and
#: the Ada and Ampere workstation parts), 2 Hopper, 3 Blackwell; a model not
#: listed is taken as Ampere
GPU_GENERATIONS: Tuple[Tuple[str, int], ...] = (
    ("gb300", 3), ("gb200", 3), ("b300", 3), ("b200", 3), ("b100", 3), ("rtx pro 6000", 3),
    ("gh200", 2), ("h200", 2), ("h100", 2), ("h800", 2), ("h20", 2),
    ("a100", 1), ("a800", 1), ("a30", 1), ("a10", 1), ("a40", 1), ("a6000", 1), ("a5000", 1),
    ("l40", 1), ("l4", 1),
    ("v100", 0), ("p100", 0), ("t4", 0),
)
DEFAULT_GPU_GENERATION = 1

#: GB/s per NVLink lane and direction by GPU model (first substring match)
DEFAULT_NVLINK_LANE_GBPS: Tuple[Tuple[str, float], ...] = (
    ("gb300", 50.0), ("gb200", 50.0), ("b300", 50.0), ("b200", 50.0), ("b100", 50.0),
    ("gh200", 25.0), ("h200", 25.0), ("h100", 25.0), ("h800", 25.0), ("h20", 25.0),
    ("a100", 25.0), ("a800", 25.0), ("a30", 25.0),
    ("a6000", 14.0625), ("a5000", 14.0625), ("a40", 14.0625), ("rtx", 14.0625),
    ("v100", 25.0), ("p100", 20.0),
)

#: GB/s per direction a GPU gets over PCIe by model (PCIe 5: ~50, 4: ~25, 3: ~12)
DEFAULT_PCIE_GBPS: Tuple[Tuple[str, float], ...] = (
    ("gb300", 50.0), ("gb200", 50.0), ("b300", 50.0), ("b200", 50.0), ("b100", 50.0),
    ("gh200", 50.0), ("h200", 50.0), ("h100", 50.0), ("h800", 50.0), ("h20", 50.0),
    ("a100", 25.0), ("a800", 25.0), ("a30", 25.0), ("a6000", 25.0), ("a5000", 25.0),
    ("a40", 25.0), ("l40", 25.0), ("l4", 25.0), ("a10", 25.0), ("rtx", 25.0),
    ("v100", 12.0), ("p100", 12.0), ("t4", 12.0),
)

#: share of the GPU's PCIe bandwidth a ring gets per PCIe class, after
#: NCCL's topology model (src/graph/topo.h, paths.cc): a path is as fast as
#: its slowest link; peer to peer under PCIe switches (PIX, PXB) runs at
#: the GPU's PCIe link speed; through the CPU's root complex (PHB, NODE,
#: SYS) Intel CPUs split GPU peer traffic into 64-byte TLPs, which NCCL
#: charges as 6/5 of the bandwidth (``INTEL_P2P_OVERHEAD``), so 5/6 of it
#: is left. SYS is further capped by the link between the sockets
#: (:data:`DEFAULT_INTER_SOCKET_GBPS`).
DEFAULT_PCIE_FACTOR: Dict[LinkClass, float] = {
    LinkClass.PIX: 1.0, LinkClass.PXB: 1.0, LinkClass.PHB: 5 / 6, LinkClass.NODE: 5 / 6, LinkClass.SYS: 5 / 6,
}

#: GB/s of the link between CPU sockets, which a SYS ring crosses: NCCL's
#: ``SKL_QPI_BW`` (Skylake-and-later UPI; the same table has ``BDW_QPI_BW``
#: 6 for Broadwell, ``SRP_QPI_BW`` 22 for Sapphire Rapids, ``ERP_QPI_BW``
#: 40 for Emerald Rapids, ``AMD_BW`` 16, ``P9_BW`` 32, ``ARM_BW`` 6). The
#: inventory does not know the CPU model; set ``cost: inter_socket_gbps``.
DEFAULT_INTER_SOCKET_GBPS = 10.0

NETWORK_CLASSES = (LinkClass.NET_LEAF, LinkClass.NET_L1, LinkClass.NET_L2, LinkClass.NET_L3, LinkClass.NET_FAR)

#: keys of the inventory's ``cost:`` block
COST_KEYS = ("alpha_us", "bandwidth_gbps", "nvlink_lane_gbps", "pcie_gbps", "pcie_factor",
             "inter_socket_gbps", "oversubscription", "default_nic_gbit", "message_bytes",
             "efficiency", "protocols", "network_protocols", "algorithms", "nvls_efficiency",
             "nvls_us", "nvls_min_ranks", "ring_plateau", "launch_us", "nccl_version",
             "network", "network_latency", "net_hop_us", "nvls_tree_stage", "domain_nics",
             "collnet_us", "a2a_peers", "gpu_compute")
