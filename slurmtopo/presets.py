"""Node-type presets for common GPU servers.

An inventory can say ``type: hgx-h100-8`` instead of spelling out 8 GPUs, a
link matrix and the NICs. The presets describe the machines as their vendors
document them (and as ``nvidia-smi topo -m`` prints them): which GPU pairs
share NVLink, which share a PCIe switch, which NIC is next to which GPU, and
how CPUs split into NUMA nodes. A site whose machines differ writes its own
type in the inventory, or lets the node agent report the real thing.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

from slurmtopo.model import CpuTopology, Gpu, Hardware, Nic


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


def hgx_h100_8() -> Hardware:
    """DGX/HGX H100: 8x H100 SXM5 on NVSwitch (18 NVLink4 per GPU), 2 sockets
    of 56 cores with HT, one 400 Gb/s ConnectX-7 per GPU on its PCIe switch."""
    numa = [0, 0, 0, 0, 1, 1, 1, 1]
    gpus = _gpus("NVIDIA H100 80GB HBM3", 81559, numa, 56, 2, 2)
    return Hardware(
        gpus=gpus, links=_matrix(8, lambda a, b: "NV18"), nvswitch=True,
        nics=_nics([f"mlx5_{i}" for i in range(8)], 400, numa, [[i] for i in range(8)], numa,
                   near_rel="PIX"),
        cpu=CpuTopology(sockets=2, cores_per_socket=56, threads_per_core=2))


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


def gb200_nvl72_tray() -> Hardware:
    """One GB200 compute tray: 4 Blackwell GPUs on the rack's NVSwitch (18
    NVLink5 each), 2 Grace CPUs of 72 cores, one 400 Gb/s NIC per GPU. Give
    nodes an ``nvlink_domain`` so 18 trays form one NVL72 domain."""
    numa = [0, 0, 1, 1]
    gpus = _gpus("NVIDIA GB200", 189471, numa, 72, 2, 1)
    return Hardware(
        gpus=gpus, links=_matrix(4, lambda a, b: "NV18"), nvswitch=True,
        nics=_nics([f"mlx5_{i}" for i in range(4)], 400, numa, [[i] for i in range(4)], numa,
                   near_rel="PIX"),
        cpu=CpuTopology(sockets=2, cores_per_socket=72, threads_per_core=1))


PRESETS: Dict[str, Callable[[], Hardware]] = {
    "hgx-h100-8": hgx_h100_8,
    "dgx-h100": hgx_h100_8,
    "hgx-a100-8": hgx_a100_8,
    "dgx-a100": hgx_a100_8,
    "dgx1-v100": dgx1_v100,
    "pcie-a6000-8-nvlink-pairs": pcie_a6000_8_nvlink_pairs,
    "pcie-l40s-8": pcie_l40s_8,
    "gb200-nvl72-tray": gb200_nvl72_tray,
}

_cache: Dict[str, Hardware] = {}


def preset(name: str) -> Hardware:
    """The shared Hardware object of a preset (KeyError when unknown)."""
    if name not in _cache:
        _cache[name] = PRESETS[name]()
    return _cache[name]
