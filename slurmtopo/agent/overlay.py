"""Merge what NVML sees on a node with what a topology file says about it.

Inside a cloud VM both are half right. NVML and sysfs know the GPUs (model,
UUID, minor, memory, MIG, NVLink) and the NICs (RDMA name, netdev, rate,
state), but the PCI tree they see is the hypervisor's flattened one, so
every GPU-NIC path looks like ``SYS`` or ``PHB``. The provider's NCCL
topology file (or an hwloc export from the host) knows the real tree but
nothing else. :func:`overlay_tree` keeps NVML's devices and takes the PCIe
relations, NUMA placement and CPU affinity from the file, matching devices
by PCI bus id. NVLink stays NVML's: the hypervisor passes it through as is.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional

from slurmtopo.agent.report import Discovery
from slurmtopo.agent.sysfs import canonical_pci
from slurmtopo.inventory.links import LinkClass, parse_token
from slurmtopo.inventory.model import Hardware, Nic


def overlay_tree(nvml: Discovery, tree: Discovery, source: str) -> Discovery:
    """NVML's discovery with the PCI layout of ``tree`` (same node)."""
    hw, th = nvml.node.hardware, tree.node.hardware
    problems: List[str] = list(nvml.problems)
    t_gpu = {canonical_pci(g.pci_bus_id): g for g in th.gpus if g.pci_bus_id}
    # file GPU index for every NVML GPU (None: the file does not have it)
    pos: List[Optional[int]] = []
    for g in hw.gpus:
        tg = t_gpu.get(canonical_pci(g.pci_bus_id)) if g.pci_bus_id else None
        pos.append(tg.index if tg is not None else None)
    missing = [g.index for g, p in zip(hw.gpus, pos) if p is None]
    if missing:
        problems.append(f"{source}: GPU(s) {', '.join(map(str, missing))} are not in the file; "
                        "their PCIe paths are NVML's")
    extra = sorted(set(t_gpu) - {canonical_pci(g.pci_bus_id) for g in hw.gpus})
    if extra:
        problems.append(f"{source}: the file names GPU(s) {', '.join(extra)} that NVML does "
                        "not see on this node")
    gpus = []
    for g, p in zip(hw.gpus, pos):
        if p is None:
            gpus.append(g)
            continue
        tg = th.gpus[p]
        gpus.append(replace(g, numa_node=tg.numa_node if tg.numa_node is not None else g.numa_node,
                            cpus=tg.cpus or g.cpus, pci_path=tg.pci_path))
    links = []
    for a, pa in enumerate(pos):
        row = []
        for b, pb in enumerate(pos):
            tok = hw.links[a][b]
            if (pa is not None and pb is not None and a != b
                    and parse_token(tok)[0] is not LinkClass.NVLINK):
                tok = th.links[pa][pb] if parse_token(th.links[pa][pb])[0].is_pcie else tok
            row.append(tok)
        links.append(tuple(row))
    nics = _nics(hw, th, pos, problems, source)
    merged = replace(hw, gpus=tuple(gpus), links=tuple(links), nics=tuple(nics),
                     cpu=hw.cpu or th.cpu)
    report = dict(nvml.report)
    report["source"] = f"{report.get('source', 'nvml')}+{tree.report.get('source', source)}"
    report["file"] = tree.report.get("file")
    report.pop("problems", None)
    report["problems"] = problems
    return Discovery(node=replace(nvml.node, hardware=merged), report=report,
                     lost_gpus=list(nvml.lost_gpus))


def _nics(hw: Hardware, th: Hardware, pos: List[Optional[int]], problems: List[str],
          source: str) -> List[Nic]:
    """NVML/sysfs NICs with the file's relations; file NICs sysfs lacks are
    added as the file has them (EFA devices a sysfs reader did not list)."""
    by_bus: Dict[str, Nic] = {}
    for n in th.nics:
        if n.pci_bus_id:
            by_bus.setdefault(canonical_pci(n.pci_bus_id), n)

    def relation(tn: Nic, mine: Optional[Nic]) -> tuple:
        """The file's relation for GPUs it has; NVML's (or SYS) for the rest."""
        return tuple(tn.gpu_relation[p] if p is not None else
                     (mine.gpu_relation[g] if mine is not None and g < len(mine.gpu_relation)
                      else "SYS") for g, p in enumerate(pos))

    out: List[Nic] = []
    used = set()
    for n in hw.nics:
        tn = by_bus.get(canonical_pci(n.pci_bus_id)) if n.pci_bus_id else None
        if tn is None:
            out.append(n)
            continue
        used.add(id(tn))
        out.append(replace(n, gpu_relation=relation(tn, n), pci_path=tn.pci_path,
                           numa_node=tn.numa_node if tn.numa_node is not None else n.numa_node,
                           rate_gbps=n.rate_gbps or tn.rate_gbps))
    names = {n.name for n in out}
    for tn in th.nics:
        if id(tn) in used or tn.name in names:
            continue
        out.append(replace(tn, gpu_relation=relation(tn, None)))
        problems.append(f"{source}: NIC {tn.name} is in the file but not in sysfs; kept as "
                        "the file describes it")
    return out
