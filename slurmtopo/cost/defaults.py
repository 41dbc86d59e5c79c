"""The cost model's default figures: message sizes per group kind, latency
per link class, NVLink and PCIe bandwidth by GPU model, NCCL's PCIe
factors and socket link, and the keys of the inventory's ``cost:`` block
(docs/cost-model.md cites where each number comes from)."""
from __future__ import annotations

from typing import Dict, Tuple

from slurmtopo.links import LinkClass

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


#: alpha (latency per step), microseconds
DEFAULT_ALPHA_US: Dict[LinkClass, float] = {
    LinkClass.SELF: 0.0, LinkClass.NVLINK: 1.0, LinkClass.NVLINK_DOMAIN: 1.5, LinkClass.PIX: 2.0, LinkClass.PXB: 2.5,
    LinkClass.PHB: 3.0, LinkClass.NODE: 3.5, LinkClass.SYS: 5.0, LinkClass.NET_LEAF: 6.0, LinkClass.NET_L1: 7.0,
    LinkClass.NET_L2: 8.0, LinkClass.NET_L3: 9.0, LinkClass.NET_FAR: 12.0,
}

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
             "inter_socket_gbps", "oversubscription", "default_nic_gbit", "message_bytes")
