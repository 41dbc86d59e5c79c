"""GPUs and NICs placed in a PCI tree, turned into a node's hardware.

NCCL's topology XML and hwloc's XML both describe the machine as a tree:
CPUs (NUMA nodes) at the top, PCIe switches below them, GPUs and NICs at the
leaves. Both readers reduce their file to a list of :class:`TreeDevice` (a
device, the NUMA node it hangs from and the switches on the way down) and
this module, pure and shared, derives what the inventory keeps:

* the relation of two devices, in ``nvidia-smi topo -m`` words: below the
  same switch ``PIX``, below a common switch higher up ``PXB``, sharing
  only a host bridge ``PHB``, same CPU ``NODE``, different CPUs ``SYS``;
* the GPU-GPU matrix: NVLink where the file gives it (direct links, or links
  to an NVSwitch, which make every pair of switch-attached GPUs ``NV<n>``),
  the PCIe relation otherwise;
* GPUs in PCI bus id order (NVML's index order), NICs in NCCL's device
  order (``dev``) when the file gives it, else in bus id order; CPU affinity
  from the NUMA node's CPU list.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.agent.report import Discovery, report_block, short_hostname
from slurmtopo.agent.cpulayout import infer_cpu_layout
from slurmtopo.agent.sysfs import canonical_pci
from slurmtopo.inventory.model import Gpu, Hardware, Nic, Node

#: NCCL's PCI class for an NVSwitch (the far end of a GPU's NVLinks)
NVSWITCH_CLASS = "0x068000"


@dataclass(frozen=True)
class Bridge:
    """One PCI bridge on a device's way down from its CPU."""

    id: str  # bus id, or a stable made-up id when the file gives none
    host: bool = False  # a host bridge (hwloc): sharing only these is PHB


@dataclass
class TreeDevice:
    """A GPU or a NIC where the file puts it."""

    kind: str  # "gpu" | "nic"
    bus_id: Optional[str]
    numa: Optional[int]
    #: what the device hangs from (a CPU / NUMA object); devices whose roots
    #: differ talk across CPUs (SYS)
    root: str
    path: Tuple[Bridge, ...] = ()
    line: Optional[int] = None
    cpus: Tuple[int, ...] = ()
    # GPU only: (target bus id, link count, target class) per <nvlink>
    nvlinks: List[Tuple[str, int, str]] = field(default_factory=list)
    model: Optional[str] = None  # the GPU's name, when the file gives it
    # NIC only
    name: Optional[str] = None
    netdev: Optional[str] = None
    rate_gbps: Optional[float] = None
    port: int = 1
    link_layer: str = "InfiniBand"
    rdma: bool = True
    order: Optional[int] = None  # NCCL's net ``dev`` (the plugin's device index)


def relation(a: TreeDevice, b: TreeDevice) -> str:
    """nvidia-smi's word for the PCIe path between two devices."""
    if a.root != b.root:
        return "SYS"
    common = 0
    for x, y in zip(a.path, b.path):
        if x != y:
            break
        common += 1
    if common == 0:
        return "NODE"
    if all(br.host for br in a.path[:common]):
        return "PHB"
    if common == len(a.path) == len(b.path):
        return "PIX"
    return "PXB"


def bus_key(bus_id: Optional[str]) -> Tuple[int, ...]:
    """Sort key of a bus id in NVML's order (domain, bus, device, function)."""
    c = canonical_pci(bus_id)
    if c is None:
        return (1 << 40,)
    dom, bus, rest = c.split(":")
    dev, fn = rest.split(".")
    return (int(dom, 16), int(bus, 16), int(dev, 16), int(fn))


def _nvlink_matrix(gpus: Sequence[TreeDevice]) -> Tuple[Dict[Tuple[int, int], int], bool]:
    """NVLink lanes per GPU pair, and whether the GPUs meet in an NVSwitch."""
    index = {canonical_pci(g.bus_id): i for i, g in enumerate(gpus) if g.bus_id}
    to_switch = [0] * len(gpus)
    direct: Dict[Tuple[int, int], int] = {}
    for i, g in enumerate(gpus):
        for target, count, tclass in g.nvlinks:
            if tclass.lower().startswith(NVSWITCH_CLASS):
                to_switch[i] += count
                continue
            j = index.get(canonical_pci(target))
            if j is None or j == i:
                continue
            key = (min(i, j), max(i, j))
            direct[key] = max(direct.get(key, 0), count)
    lanes: Dict[Tuple[int, int], int] = {}
    for i in range(len(gpus)):
        for j in range(i + 1, len(gpus)):
            n = direct.get((i, j), 0)
            if to_switch[i] and to_switch[j]:
                n += min(to_switch[i], to_switch[j])
            if n:
                lanes[(i, j)] = n
    return lanes, any(to_switch)


def build_hardware(devices: Sequence[TreeDevice], problems: List[str],
                   threads_per_core: Optional[int] = None) -> Hardware:
    """The node's hardware from the devices of a tree (``problems`` gets what
    the file could not say)."""
    gpus = sorted((d for d in devices if d.kind == "gpu"), key=lambda d: bus_key(d.bus_id))
    nics = [d for d in devices if d.kind == "nic"]
    if nics and all(n.order is not None for n in nics):
        nics.sort(key=lambda n: n.order)
    else:  # probe order: the kernel names RDMA devices in PCI bus order
        nics.sort(key=lambda n: bus_key(n.bus_id))
    lanes, nvswitch = _nvlink_matrix(gpus)
    links = tuple(tuple("X" if i == j else
                        (f"NV{lanes[(min(i, j), max(i, j))]}"
                         if (min(i, j), max(i, j)) in lanes else relation(a, b))
                        for j, b in enumerate(gpus)) for i, a in enumerate(gpus))
    if gpus and not any(g.nvlinks for g in gpus):
        problems.append("the file does not describe NVLink: the GPU-GPU matrix shows PCIe "
                        "paths; run on the node to merge NVML's NVLinks")
    model_gpus = tuple(
        Gpu(index=i, model=g.model or "unknown", pci_bus_id=canonical_pci(g.bus_id) if g.bus_id else None,
            numa_node=g.numa, cpus=g.cpus, pci_path=tuple(b.id for b in g.path if not b.host))
        for i, g in enumerate(gpus))
    model_nics = []
    seen: Dict[str, int] = {}
    for n in nics:
        name = n.name or f"nic-{canonical_pci(n.bus_id) or len(model_nics)}"
        if name in seen:
            problems.append(f"NIC {name} appears twice in the file; the second one "
                            f"(line {n.line or '?'}) is left out")
            continue
        seen[name] = len(model_nics)
        model_nics.append(Nic(
            name=name, netdev=n.netdev,
            pci_bus_id=canonical_pci(n.bus_id) if n.bus_id else None,
            link_layer=n.link_layer, rate_gbps=n.rate_gbps, port=n.port, numa_node=n.numa,
            gpu_relation=tuple(relation(n, g) for g in gpus),
            role="compute" if n.rdma else "management",
            pci_path=tuple(b.id for b in n.path if not b.host)))
    if any(not n.name for n in nics):
        problems.append("the file does not name some NICs (given only by PCI class): named "
                        "nic-<bus id>; run on the node to merge the RDMA device names")
    guess = infer_cpu_layout([g.cpus for g in gpus], [g.numa for g in gpus], threads_per_core)
    problems.extend(guess.guesses)
    cpu = guess.cpu
    return Hardware(gpus=model_gpus, links=links, nics=tuple(model_nics), cpu=cpu,
                    nvswitch=nvswitch)


def tree_discovery(devices: Sequence[TreeDevice], problems: List[str], path: str, source: str,
                   node_name: Optional[str] = None, model: Optional[str] = None,
                   threads_per_core: Optional[int] = None) -> Discovery:
    """A node report from a file's devices (the readers' common ending)."""
    hw = build_hardware(devices, problems, threads_per_core)
    if model:
        hw = replace(hw, gpus=tuple(replace(g, model=model) for g in hw.gpus))
    elif all(g.model == "unknown" for g in hw.gpus):
        problems.append(f"GPU model unknown ({source} does not name it; give --model)")
    name = node_name or short_hostname()
    report = report_block(source, problems, hostname=name, file=path)
    return Discovery(node=Node(name=name, hardware=hw), report=report)
