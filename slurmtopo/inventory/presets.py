"""Node-type presets for common GPU servers.

An inventory can say ``type: hgx-h100-8`` instead of spelling out 8 GPUs, a
link matrix and the NICs. The presets describe the machines as their vendors
document them (and as ``nvidia-smi topo -m`` prints them): which GPU pairs
share NVLink, which share a PCIe switch, which NIC is next to which GPU, and
how CPUs split into NUMA nodes. A site whose machines differ writes its own
type in the inventory, or lets the node agent report the real thing.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from slurmtopo.inventory.model import CpuTopology, Gpu, Hardware, Nic


def _cpus(numa: int, cores_per_numa: int, numa_nodes: int, threads: int) -> Tuple[int, ...]:
    """CPU ids of NUMA node ``numa`` under the usual Linux enumeration."""
    total_cores = cores_per_numa * numa_nodes
    first = numa * cores_per_numa
    ids: List[int] = []
    for t in range(threads):
        ids.extend(range(first + t * total_cores, first + cores_per_numa + t * total_cores))
    return tuple(ids)


def _gpus(model: str, mem_mib: int, numa_of: Sequence[int], cores_per_numa: int,
          numa_nodes: int, threads: int) -> Tuple[Gpu, ...]:
    return tuple(
        Gpu(index=i, model=model, memory_mib=mem_mib, minor=i, numa_node=numa,
            cpus=_cpus(numa, cores_per_numa, numa_nodes, threads))
        for i, numa in enumerate(numa_of))


def _matrix(n: int, rel: Callable[[int, int], str]) -> Tuple[Tuple[str, ...], ...]:
    return tuple(tuple("X" if a == b else rel(a, b) for b in range(n)) for a in range(n))


def _pcie(numa_of: Sequence[int], switch_of: Sequence[int], a: int, b: int) -> str:
    """PCIe relation from NUMA node and PCIe-switch membership."""
    if switch_of[a] == switch_of[b]:
        return "PXB"
    return "NODE" if numa_of[a] == numa_of[b] else "SYS"


def _nics(names: Sequence[str], rate: float, numa_of_nic: Sequence[int],
          near: Sequence[Sequence[int]], gpu_numa: Sequence[int], near_rel: str = "PXB",
          link_layer: str = "InfiniBand") -> Tuple[Nic, ...]:
    out = []
    for name, numa, close in zip(names, numa_of_nic, near):
        rel = tuple(near_rel if g in close else ("NODE" if gpu_numa[g] == numa else "SYS")
                    for g in range(len(gpu_numa)))
        out.append(Nic(name=name, rate_gbps=rate, numa_node=numa, gpu_relation=rel,
                       link_layer=link_layer))
    return tuple(out)


# --------------------------------------------------------------------------
# NVIDIA's 8-GPU nodes and their NICs. Sources, named so a reader can check them:
#
# * NVIDIA DGX B200 datasheet (nvidia.com, "DGX B200"; the DGX B200 User
#   Guide, https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html,
#   checked for issue 25: 8x B200, 1,440 GB, 2x Xeon 8570 of 56 cores, 4x
#   OSFP for 8x single-port ConnectX-7 up to 400 Gb/s): 8x B200 (1,440 GB
#   of HBM3e), NVLink 5 through 2 NVSwitch chips (14.4 TB/s aggregate: 18
#   links of 50 GB/s a direction per GPU), 2x Intel Xeon Platinum 8570 (112
#   cores), 4x OSFP ports serving 8x single-port ConnectX-7 VPI at up to
#   400 Gb/s InfiniBand/Ethernet, 2x BlueField-3 DPUs (storage, in-band).
# * DGX B300: 8x Blackwell Ultra SXM (2.3 TB of HBM3e), NVLink 5 (18
#   links of 50 GB/s a direction per GPU, 14.4 TB/s aggregate), 2x Intel
#   Xeon 6776P (64 cores each), 8x OSFP ports serving 8x single-port
#   ConnectX-8 at up to 800 Gb/s InfiniBand/Ethernet, 2x BlueField-3 DPUs.
#   The product page (https://www.nvidia.com/en-us/data-center/dgx-b300/)
#   could not be read back for this check, so each figure is confirmed
#   separately: one ConnectX-8 SuperNIC per GPU, rail-optimised, in
#   NVIDIA's HGX B300 Enterprise Reference Architecture
#   (https://docs.nvidia.com/enterprise-reference-architectures/hgx-ai-factory/latest/networking-physical-topologies.html);
#   the GPU's name "NVIDIA B300 SXM6 AC" and its 288 GB of HBM3e in
#   NVIDIA's NIM release notes
#   (https://docs.nvidia.com/nim/bionemo/boltz2/release-notes/2026/5/18);
#   the ConnectX-8s sit on the GPU baseboard (not the host board, as on
#   DGX B200) and 8 800G ports leave the front, per the DGX B300 User
#   Guide's figures (read through a secondary source: vengineer.hatenablog.com,
#   2025-12-06); the Xeon 6776P and 2.3 TB from secondary sources only
#   (aiwiki.ai "NVIDIA DGX B300"). Because the ConnectX-8 SuperNIC
#   carries its own PCIe switch with the GPU behind it, the GPU-NIC
#   relation is PIX.
# * NVIDIA ConnectX-7 and ConnectX-8 SuperNIC datasheets: one port at 400
#   (NDR) and 800 Gb/s (XDR) respectively.
#
# HGX boards (from server vendors) put the same GPUs and NVSwitch tray with
# the NICs the builder chose, usually the same one per GPU; CPUs vary. The
# BlueField DPUs carry storage and management traffic and are left out
# (only compute NICs matter to NCCL). Memory as NVML reports it.

#: NVIDIA ConnectX-7, one port: 400 Gb/s InfiniBand NDR or Ethernet
CONNECTX7_GBIT = 400
#: NVIDIA ConnectX-8 SuperNIC, one port: 800 Gb/s InfiniBand XDR or Ethernet
CONNECTX8_GBIT = 800


def _hgx_8(model: str, mem_mib: int, cores_per_socket: int, nic_gbit: int) -> Hardware:
    """An HGX board: 8 GPUs on NVSwitch (18 NVLink lanes each, NV18), two
    sockets of ``cores_per_socket`` with HT, GPUs 0-3 on the first, one
    compute NIC of ``nic_gbit`` on each GPU's PCIe switch (PIX)."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    gpus = _gpus(model, mem_mib, numa, cores_per_socket, 2, 2)
    return Hardware(
        gpus=gpus, links=_matrix(8, lambda a, b: "NV18"), nvswitch=True,
        nics=_nics([f"mlx5_{i}" for i in range(8)], nic_gbit, numa, [[i] for i in range(8)],
                   numa, near_rel="PIX"),
        cpu=CpuTopology(sockets=2, cores_per_socket=cores_per_socket, threads_per_core=2))


def hgx_h100_8() -> Hardware:
    """DGX/HGX H100: 8x H100 SXM5 on NVSwitch (18 NVLink4 per GPU), 2 sockets
    of 56 cores with HT, one 400 Gb/s ConnectX-7 per GPU on its PCIe switch."""
    return _hgx_8("NVIDIA H100 80GB HBM3", 81559, 56, CONNECTX7_GBIT)


def hgx_h200_8() -> Hardware:
    """HGX H200: 8x H200 SXM (141 GB HBM3e; NVLink 4, NV18 on NVSwitch like
    the H100 board), 2 sockets of 56 cores with HT, one 400 Gb/s
    ConnectX-7 per GPU on its PCIe switch (NVIDIA HGX H200 and DGX H200
    datasheets)."""
    return _hgx_8("NVIDIA H200", 143771, 56, CONNECTX7_GBIT)


def dgx_b200() -> Hardware:
    """DGX B200 (and an HGX B200 built the same way): 8x B200, NVLink 5 on
    NVSwitch, 2x Xeon Platinum 8570 (56 cores, HT), 8x ConnectX-7 at 400
    Gb/s, one per GPU."""
    return _hgx_8("NVIDIA B200", 183359, 56, CONNECTX7_GBIT)


def dgx_b300() -> Hardware:
    """DGX B300 (and an HGX B300 built the same way): 8x B300 (Blackwell
    Ultra), NVLink 5 on NVSwitch, 2x Xeon 6776P (64 cores, HT), 8x
    ConnectX-8 at 800 Gb/s, one per GPU."""
    return _hgx_8("NVIDIA B300 SXM6 AC", 275040, 64, CONNECTX8_GBIT)


def hgx_a100_8() -> Hardware:
    """DGX/HGX A100: 8x A100 SXM4 on NVSwitch (12 NVLink3 per GPU), 2 NUMA
    nodes, GPU pairs share a PCIe switch with two 200 Gb/s HDR NICs."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    gpus = _gpus("NVIDIA A100-SXM4-80GB", 81920, numa, 64, 2, 2)
    pair = [[2 * (i // 2), 2 * (i // 2) + 1] for i in range(8)]
    return Hardware(
        gpus=gpus, links=_matrix(8, lambda a, b: "NV12"), nvswitch=True,
        nics=_nics([f"mlx5_{i}" for i in range(8)], 200, [numa[2 * (i // 2)] for i in range(8)],
                   pair, numa),
        cpu=CpuTopology(sockets=2, cores_per_socket=64, threads_per_core=2))


#: DGX-1 (V100) hybrid cube-mesh, as nvidia-smi prints it: NV1/NV2 mix and
#: no NVLink at all between some pairs (they go over PCIe and QPI).
_DGX1 = [
    "X   NV1 NV1 NV2 NV2 SYS SYS SYS",
    "NV1 X   NV2 NV1 SYS NV2 SYS SYS",
    "NV1 NV2 X   NV2 SYS SYS NV1 SYS",
    "NV2 NV1 NV2 X   SYS SYS SYS NV1",
    "NV2 SYS SYS SYS X   NV1 NV1 NV2",
    "SYS NV2 SYS SYS NV1 X   NV2 NV1",
    "SYS SYS NV1 SYS NV1 NV2 X   NV2",
    "SYS SYS SYS NV1 NV2 NV1 NV2 X",
]


def dgx1_v100() -> Hardware:
    """DGX-1 with 8x V100 SXM2 in a hybrid cube-mesh, 2x 20-core Xeon with
    HT, four 100 Gb/s EDR NICs, one per GPU pair."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    gpus = _gpus("Tesla V100-SXM2-32GB", 32510, numa, 20, 2, 2)
    links = tuple(tuple(row.split()) for row in _DGX1)
    pairs = [[0, 1], [2, 3], [4, 5], [6, 7]]
    return Hardware(
        gpus=gpus, links=links, nvswitch=False,
        nics=_nics([f"mlx5_{i}" for i in range(4)], 100, [0, 0, 1, 1], pairs, numa,
                   near_rel="PIX"),
        cpu=CpuTopology(sockets=2, cores_per_socket=20, threads_per_core=2))


def pcie_a6000_8_nvlink_pairs() -> Hardware:
    """8x RTX A6000 PCIe with NVLink bridges on pairs (0-1, 2-3, ...), four
    GPUs behind one PCIe switch per socket, one 200 Gb/s NIC per socket."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    switch = [0, 0, 0, 0, 1, 1, 1, 1]
    gpus = _gpus("NVIDIA RTX A6000", 49140, numa, 32, 2, 2)

    def rel(a: int, b: int) -> str:
        if a // 2 == b // 2:
            return "NV4"
        return _pcie(numa, switch, a, b)

    return Hardware(
        gpus=gpus, links=_matrix(8, rel), nvswitch=False,
        nics=_nics(["mlx5_0", "mlx5_1"], 200, [0, 1], [[0, 1, 2, 3], [4, 5, 6, 7]], numa),
        cpu=CpuTopology(sockets=2, cores_per_socket=32, threads_per_core=2))


def pcie_l40s_8() -> Hardware:
    """8x L40S PCIe, no NVLink: pairs on one PCIe switch (PIX), two switches
    per socket under a common one (PXB), sockets joined by UPI (SYS)."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    gpus = _gpus("NVIDIA L40S", 46068, numa, 32, 2, 2)

    def rel(a: int, b: int) -> str:
        if a // 2 == b // 2:
            return "PIX"
        if a // 4 == b // 4:
            return "PXB"
        return "SYS"

    return Hardware(
        gpus=gpus, links=_matrix(8, rel), nvswitch=False,
        nics=_nics(["mlx5_0", "mlx5_1"], 200, [0, 1], [[0, 1, 2, 3], [4, 5, 6, 7]], numa,
                   link_layer="Ethernet"),
        cpu=CpuTopology(sockets=2, cores_per_socket=32, threads_per_core=2))


def pcie_h100_nvl_8() -> Hardware:
    """8x H100 NVL PCIe: NVLink bridges on pairs (0-1, 2-3, ...; 12 NVLink4
    lanes each), every pair and one 400 Gb/s NIC behind one PCIe switch,
    two pairs per socket (NODE between them), sockets joined by UPI (SYS)."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    switch = [0, 0, 1, 1, 2, 2, 3, 3]
    gpus = _gpus("NVIDIA H100 NVL", 95830, numa, 48, 2, 2)

    def rel(a: int, b: int) -> str:
        if a // 2 == b // 2:
            return "NV12"
        return _pcie(numa, switch, a, b)

    return Hardware(
        gpus=gpus, links=_matrix(8, rel), nvswitch=False,
        nics=_nics([f"mlx5_{i}" for i in range(4)], 400, [0, 0, 1, 1],
                   [[0, 1], [2, 3], [4, 5], [6, 7]], numa, near_rel="PIX"),
        cpu=CpuTopology(sockets=2, cores_per_socket=48, threads_per_core=2))


def _grace_tray(model: str, mem_mib: int, nic_names: Sequence[str], nic_gbit: float,
                link_layer: str = "InfiniBand") -> Hardware:
    """A Grace Blackwell compute tray: 4 GPUs on the rack's NVSwitch (18
    NVLink 5 links each, NV18), 2 Grace CPUs of 72 cores (no SMT), GPUs 0-1
    on the first, one compute NIC per GPU next to it (PIX). Trays of one
    rack share an ``nvlink_domain``."""
    numa = [0, 0, 1, 1]
    gpus = _gpus(model, mem_mib, numa, 72, 2, 1)
    return Hardware(
        gpus=gpus, links=_matrix(4, lambda a, b: "NV18"), nvswitch=True,
        nics=_nics(nic_names, nic_gbit, numa, [[i] for i in range(4)], numa, near_rel="PIX",
                   link_layer=link_layer),
        cpu=CpuTopology(sockets=2, cores_per_socket=72, threads_per_core=1))


def gb200_nvl72_tray() -> Hardware:
    """One GB200 compute tray: 4 Blackwell GPUs on the rack's NVSwitch (18
    NVLink5 each), 2 Grace CPUs of 72 cores, one 400 Gb/s NIC per GPU. Give
    nodes an ``nvlink_domain`` so 18 trays form one NVL72 domain. Checked
    against NVIDIA's DGX GB rack scale user guide
    (https://docs.nvidia.com/dgx/dgxgb200-user-guide/index.html: NVL72
    racks, 72 GPUs a NVLink domain) and a published tray description
    (MLCommons inference v6.1, Crusoe GB200-NVL72 system file: 4 GPUs a
    node, NV18 in ``nvidia-smi topo -m``, 144 Grace cores, 4 ConnectX-7
    class NICs a node)."""
    return _grace_tray("NVIDIA GB200", 189471, [f"mlx5_{i}" for i in range(4)], CONNECTX7_GBIT)


#: GB300 GPU memory: NVIDIA's GB300 NVL72 page gives 20 TB of HBM3e for 72
#: GPUs (279 GB a GPU, 266,075 MiB; the 288 GB of a B300's stacks less what
#: NVML keeps back)
GB300_MEM_MIB = 266075


def gb300_nvl72_tray() -> Hardware:
    """One GB300 NVL72 compute tray: 4 Blackwell Ultra GPUs and 2 Grace CPUs
    (72 cores each), the GPUs on the rack's NVSwitch trays (NVLink 5, 1.8
    TB/s a GPU: NV18), 4 ConnectX-8 at 800 Gb/s, one per GPU. Sources:
    NVIDIA's GB300 NVL72 page (https://www.nvidia.com/en-us/data-center/gb300-nvl72/:
    72 Blackwell Ultra GPUs and 36 Grace CPUs a rack, 20 TB HBM3e, a
    ConnectX-8 SuperNIC at 800 Gb/s a GPU) and NVIDIA's NVL72 enterprise
    reference architecture (https://docs.nvidia.com/enterprise-reference-architectures/nvl72-ai-factory/latest/components.html:
    a tray holds 4 Blackwell Ultra GPUs, 2 Grace CPUs and 4 ConnectX-8
    HCAs on 2 mezzanine boards; 9 NVSwitch trays join all 72 GPUs)."""
    return _grace_tray("NVIDIA GB300", GB300_MEM_MIB, [f"mlx5_{i}" for i in range(4)],
                       CONNECTX8_GBIT)


# --------------------------------------------------------------------------
# Cloud GPU shapes. Inside a VM, NVML and sysfs see a flattened PCI tree, so
# these come from the providers' published NCCL topology files (sources in
# docs/schema.md): bus ids, which NIC shares a (virtual) PCIe switch with
# which GPU, NUMA placement and CPU masks. Virtualised shapes get
# NCCL_TOPO_FILE in every job (docs/nccl-topo.md).


def _cloud_nics(names: Sequence[str], buses: Sequence[str], rate: float, link_layer: str,
                gpus_of: Sequence[Sequence[int]], gpu_numa: Sequence[int],
                switch_of: Sequence[str]) -> Tuple[Nic, ...]:
    """NICs that share a switch with the GPUs ``gpus_of[k]`` (PIX), NODE to
    the other GPUs of their NUMA node, SYS to the rest."""
    out = []
    for name, bus, close, sw in zip(names, buses, gpus_of, switch_of):
        numa = gpu_numa[close[0]]
        rel = tuple("PIX" if g in close else ("NODE" if gpu_numa[g] == numa else "SYS")
                    for g in range(len(gpu_numa)))
        out.append(Nic(name=name, pci_bus_id=bus, rate_gbps=rate, numa_node=numa,
                       gpu_relation=rel, link_layer=link_layer, pci_path=(sw,)))
    return tuple(out)


def _placed(gpus: Tuple[Gpu, ...], buses: Sequence[Optional[str]],
            switches: Sequence[str]) -> Tuple[Gpu, ...]:
    return tuple(replace(g, pci_bus_id=b, pci_path=(sw,))
                 for g, b, sw in zip(gpus, buses, switches))


def aws_p4d_24xlarge() -> Hardware:
    """AWS p4d.24xlarge: 8x A100 40GB SXM4 on NVSwitch (NV12), 2 sockets of
    24 cores with HT, 4 EFA devices at 100 Gb/s, one per virtual PCIe switch
    shared by two GPUs (aws-ofi-nccl ``topology/p4d-24xl-topo.xml``)."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    sw = [f"ffff:ff:0{1 + i // 2}.0" for i in range(8)]
    buses = [f"0000:{b}:{d}.0" for b in ("10", "20", "90", "a0") for d in ("1c", "1d")]
    gpus = _placed(_gpus("NVIDIA A100-SXM4-40GB", 40960, numa, 24, 2, 2), buses, sw)
    efa_bus = ["0000:10:1b.0", "0000:20:1b.0", "0000:90:1b.0", "0000:a0:1b.0"]
    return Hardware(
        gpus=gpus, links=_matrix(8, lambda a, b: "NV12"), nvswitch=True, virtualised=True,
        nics=_cloud_nics([f"rdmap{int(b[5:7], 16)}s27" for b in efa_bus], efa_bus, 100,
                         "Ethernet", [[0, 1], [2, 3], [4, 5], [6, 7]], numa, sw[::2]),
        cpu=CpuTopology(sockets=2, cores_per_socket=24, threads_per_core=2))


#: p5.48xlarge PCIe switches, one GPU and four EFA devices below each
_P5_SWITCHES = ("45", "56", "67", "78", "89", "9a", "ab", "bc")
_P5_EFA = (("4f", "50", "51", "52"), ("60", "61", "62", "63"), ("71", "72", "73", "74"),
           ("82", "83", "84", "85"), ("93", "94", "95", "96"), ("a4", "a5", "a6", "a7"),
           ("b5", "b6", "b7", "b8"), ("c6", "c7", "c8", "c9"))


def aws_p5_48xlarge() -> Hardware:
    """AWS p5.48xlarge: 8x H100 80GB SXM5 on NVSwitch (NV18), 2 sockets of 48
    cores with HT, 32 EFA devices at 100 Gb/s, four on each GPU's PCIe
    switch (aws-ofi-nccl ``topology/p5.48xl-topo.xml``, which names the
    switches and EFA devices but not the GPUs' bus ids: NCCL adds the GPUs
    from sysfs below the same switches)."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    sw = [f"0000:{s}:00.0" for s in _P5_SWITCHES]
    gpus = _placed(_gpus("NVIDIA H100 80GB HBM3", 81559, numa, 48, 2, 2), [None] * 8, sw)
    buses = [f"0000:{b}:00.0" for grp in _P5_EFA for b in grp]
    return Hardware(
        gpus=gpus, links=_matrix(8, lambda a, b: "NV18"), nvswitch=True, virtualised=True,
        nics=_cloud_nics([f"rdmap{int(b[5:7], 16)}s0" for b in buses], buses, 100, "Ethernet",
                         [[k // 4] for k in range(32)], numa, [sw[k // 4] for k in range(32)]),
        cpu=CpuTopology(sockets=2, cores_per_socket=48, threads_per_core=2))


#: AWS P6: the instance types' page (https://aws.amazon.com/ec2/instance-types/p6/)
#: and the EKS guide to P6e-GB200 UltraServers
#: (https://docs.aws.amazon.com/eks/latest/userguide/ml-eks-nvidia-ultraserver.html:
#: ``p6e-gb200.36xlarge``, 4 Blackwell GPUs, sold only as UltraServers of 9
#: (``u-p6e-gb200x36``) or 18 (``u-p6e-gb200x72``) instances on one NVLink
#: domain). Both are Nitro VMs, but AWS publishes no NCCL topology file with
#: their bus ids here, so these presets are not ``virtualised`` (no
#: NCCL_TOPO_FILE: the aws-ofi-nccl plugin gives NCCL its topology for the
#: platforms it knows); EFA device names are the kernel's ``rdmap*`` names
#: only once a node report has them, so the presets say ``efa0``...
P6_EFA_GBIT = 400


def aws_p6_b200_48xlarge() -> Hardware:
    """AWS p6-b200.48xlarge: 8x B200 (1,440 GB HBM3e) on NVSwitch (NVLink 5,
    NV18), 192 vCPUs (2 sockets of 48 cores with HT), 2 TiB of memory,
    3,200 Gb/s of EFAv4: 8 EFA at 400 Gb/s, one per GPU on its PCIe switch
    (the split of the total is this preset's reading; a node report shows
    the real devices). Source: https://aws.amazon.com/ec2/instance-types/p6/."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    gpus = _gpus("NVIDIA B200", 183359, numa, 48, 2, 2)
    return Hardware(
        gpus=gpus, links=_matrix(8, lambda a, b: "NV18"), nvswitch=True,
        nics=_nics([f"efa{i}" for i in range(8)], P6_EFA_GBIT, numa, [[i] for i in range(8)],
                   numa, near_rel="PIX", link_layer="Ethernet"),
        cpu=CpuTopology(sockets=2, cores_per_socket=48, threads_per_core=2))


def aws_p6e_gb200_36xlarge() -> Hardware:
    """AWS p6e-gb200.36xlarge, one instance of a P6e-GB200 UltraServer: 4x
    B200 of two GB200 superchips on the UltraServer's NVLink domain (NV18),
    2 Grace CPUs of 72 cores (144 vCPUs), 4 EFAv4 at 400 Gb/s, one per GPU.
    Give the 9 or 18 instances of an UltraServer one ``nvlink_domain``.
    Sources: https://aws.amazon.com/ec2/instance-types/p6/ and the EKS guide
    named above."""
    return _grace_tray("NVIDIA GB200", 189471, [f"efa{i}" for i in range(4)], P6_EFA_GBIT,
                       link_layer="Ethernet")


def azure_nd96asr_v4() -> Hardware:
    """Azure ND96asr_v4 (ND A100 v4): 8x A100 80GB SXM4 on NVSwitch (NV12),
    96 cores (2x AMD EPYC, no SMT) in 4 NUMA nodes, 8 HDR InfiniBand HCAs at
    200 Gb/s; per NUMA node one virtual switch with 2 GPUs and 2 HCAs
    (azhpc-images ``topology/ndv4-topo.xml``)."""
    numa = [1, 1, 0, 0, 3, 3, 2, 2]  # GPUs in bus id order: 0001 0002 0003 0004 000b-000e
    sw = [f"ffff:ff:0{n + 1}.0" for n in numa]
    buses = [f"{d:04x}:00:00.0" for d in (0x1, 0x2, 0x3, 0x4, 0xb, 0xc, 0xd, 0xe)]
    gpus = tuple(replace(g, cpus=tuple(range(24 * n, 24 * n + 24)))
                 for g, n in zip(_gpus("NVIDIA A100-SXM4-80GB", 81920, numa, 24, 4, 1), numa))
    gpus = _placed(gpus, buses, sw)
    hca_bus = [f"01{d:02x}:00:00.0" for d in range(1, 9)]
    pairs = [[0, 1], [0, 1], [2, 3], [2, 3], [4, 5], [4, 5], [6, 7], [6, 7]]
    return Hardware(
        gpus=gpus, links=_matrix(8, lambda a, b: "NV12"), nvswitch=True, virtualised=True,
        nics=_cloud_nics([f"mlx5_ib{k}" for k in range(8)], hca_bus, 200, "InfiniBand", pairs,
                         numa, [sw[p[0]] for p in pairs]),
        cpu=CpuTopology(sockets=2, cores_per_socket=48, threads_per_core=1))


def azure_nd96isr_h100_v5() -> Hardware:
    """Azure ND96isr_H100_v5 (ND H100 v5): 8x H100 80GB SXM5 on NVSwitch
    (NV18), 96 cores (2x Xeon, no SMT), 8 NDR InfiniBand HCAs at 400 Gb/s,
    one per GPU on its own virtual switch (azhpc-images
    ``topology/ndv5-topo.xml``, whose NUMA node 0 holds CPUs 48-95)."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    sw = [f"ffff:ff:0{k + 1}.0" for k in range(8)]
    buses = [f"{d:04x}:00:00.0" for d in (0x1, 0x2, 0x3, 0x8, 0x9, 0xa, 0xb, 0xc)]
    cpus = {0: tuple(range(48, 96)), 1: tuple(range(0, 48))}
    gpus = tuple(replace(g, cpus=cpus[n])
                 for g, n in zip(_gpus("NVIDIA H100 80GB HBM3", 81559, numa, 48, 2, 1), numa))
    gpus = _placed(gpus, buses, sw)
    return Hardware(
        gpus=gpus, links=_matrix(8, lambda a, b: "NV18"), nvswitch=True, virtualised=True,
        nics=_cloud_nics([f"mlx5_ib{k}" for k in range(8)],
                         [f"01{k + 1:02x}:00:00.0" for k in range(8)], 400, "InfiniBand",
                         [[k] for k in range(8)], numa, sw),
        cpu=CpuTopology(sockets=2, cores_per_socket=48, threads_per_core=1))


def oci_bm_gpu_h100_8() -> Hardware:
    """OCI BM.GPU.H100.8: bare metal (NCCL sees the real PCI tree, so not
    virtualised), 8x H100 80GB SXM5 on NVSwitch (NV18), 2x Xeon Platinum
    8480+ (56 cores, HT), 16 ConnectX-7 RoCE ports at 200 Gb/s, two on each
    GPU's PCIe switch."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    gpus = _gpus("NVIDIA H100 80GB HBM3", 81559, numa, 56, 2, 2)
    return Hardware(
        gpus=gpus, links=_matrix(8, lambda a, b: "NV18"), nvswitch=True,
        nics=_nics([f"mlx5_{k}" for k in range(16)], 200, [numa[k // 2] for k in range(16)],
                   [[k // 2] for k in range(16)], numa, near_rel="PIX", link_layer="Ethernet"),
        cpu=CpuTopology(sockets=2, cores_per_socket=56, threads_per_core=2))


PRESETS: Dict[str, Callable[[], Hardware]] = {
    "hgx-h100-8": hgx_h100_8,
    "dgx-h100": hgx_h100_8,
    "hgx-h200-8": hgx_h200_8,
    "dgx-h200": hgx_h200_8,
    "hgx-b200-8": dgx_b200,
    "dgx-b200": dgx_b200,
    "hgx-b300-8": dgx_b300,
    "dgx-b300": dgx_b300,
    "hgx-a100-8": hgx_a100_8,
    "dgx-a100": hgx_a100_8,
    "dgx1-v100": dgx1_v100,
    "pcie-a6000-8-nvlink-pairs": pcie_a6000_8_nvlink_pairs,
    "pcie-l40s-8": pcie_l40s_8,
    "pcie-h100-nvl-8": pcie_h100_nvl_8,
    "gb200-nvl72-tray": gb200_nvl72_tray,
    "gb300-nvl72-tray": gb300_nvl72_tray,
    "aws-p4d.24xlarge": aws_p4d_24xlarge,
    "aws-p5.48xlarge": aws_p5_48xlarge,
    "aws-p6-b200.48xlarge": aws_p6_b200_48xlarge,
    "aws-p6e-gb200.36xlarge": aws_p6e_gb200_36xlarge,
    "azure-nd96asr-v4": azure_nd96asr_v4,
    "azure-nd96isr-h100-v5": azure_nd96isr_h100_v5,
    "oci-bm.gpu.h100.8": oci_bm_gpu_h100_8,
}

def preset(name: str) -> Hardware:
    """A new Hardware object of a preset (KeyError when unknown).

    New on every call: a Hardware carries its derived tables
    (:class:`slurmtopo.inventory.model.Derived`), which must live no longer than the
    inventory that uses it, so no process-wide copy is kept here; the
    inventory reader shares one object among the nodes of one document."""
    return PRESETS[name]()
