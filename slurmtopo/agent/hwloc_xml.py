"""Read hwloc's XML (``lstopo --of xml``) into a node report.

hwloc is on most HPC nodes (Open MPI and Slurm use it) and sees the PCI tree
the kernel sees, with names: ``cuda0``/``nvml0`` below a GPU, ``mlx5_0`` or
an EFA ``rdmap*`` device (OpenFabrics) and its netdev below a NIC. The file
format (hwloc 2.x, ``hwloc2.dtd``): ``<object>`` elements nested as the
machine is; normal objects carry hex ``cpuset``/``nodeset`` masks, I/O
objects hang below the object whose locality they share:

* ``type="Bridge"``: ``bridge_type="0-1"`` a host bridge, ``"1-1"`` a PCIe
  switch port (``pci_busid``);
* ``type="PCIDev"``: ``pci_busid``, ``pci_type="CCSS [vendor:device] ..."``
  (class 03xx a GPU, 02xx a NIC);
* ``type="OSDev"``: ``name``, ``osdev_type`` (2 network, 3 OpenFabrics, ...)
  and ``subtype``; ``<info name="GPUModel">`` names the GPU.

A NIC with an OpenFabrics (RDMA) device is a compute NIC; a plain Ethernet
port (AWS's ENA, the onboard port) is a management one. hwloc 2 describes no
NVLink, so the GPU matrix is PCIe only unless merged with NVML.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import List, Optional, Tuple

from slurmtopo.agent.pcitree import Bridge, TreeDevice, tree_discovery
from slurmtopo.agent.report import Discovery
from slurmtopo.agent.sysfs import canonical_pci
from slurmtopo.agent.xmlsafe import XmlDoc, read_xml
from slurmtopo.inventory.model import parse_cpumask

WHAT = "an hwloc topology (lstopo --of xml)"
MAX_DEPTH = 64
#: RDMA device names (used when osdev_type/subtype do not say)
_RDMA_NAME = re.compile(r"^(mlx\d+_\d+|rdmap\w+|efa_?\d*|irdma\w*|bnxt_re\d+|hfi\d+_\d+|qedr\d+)$")


def _mask(text: Optional[str]) -> Tuple[int, ...]:
    """hwloc's ``0x0000ffff,0xffffffff`` bitmap -> bit numbers (empty on junk
    or on an infinite mask such as ``0xf...f``)."""
    if not text or "f...f" in text:
        return ()
    try:
        return parse_cpumask(",".join(w.strip()[2:] if w.strip().lower().startswith("0x")
                                       else w.strip() for w in text.split(",")))
    except ValueError:
        return ()


class _Walker:
    def __init__(self, doc: XmlDoc):
        self.doc = doc
        self.devices: List[TreeDevice] = []

    def walk(self, elem: ET.Element, numa: Optional[int], root: str, cpus: Tuple[int, ...],
             path: Tuple[Bridge, ...], depth: int) -> None:
        if depth > MAX_DEPTH:
            raise self.doc.error(f"objects nested deeper than {MAX_DEPTH}", elem)
        for obj in elem:
            if obj.tag != "object":
                continue
            kind = obj.get("type", "")
            if kind == "Bridge":
                bus = obj.get("pci_busid")
                if bus is not None and canonical_pci(bus) is None:
                    raise self.doc.error(f"pci_busid={bus!r} is not a PCI bus id", obj)
                host = (obj.get("bridge_type") or "").startswith("0-") or bus is None
                bid = canonical_pci(bus) if bus else f"hostbridge-{obj.get('gp_index', '?')}"
                self.walk(obj, numa, root, cpus, path + (Bridge(bid, host=host),), depth + 1)
            elif kind == "PCIDev":
                self.pcidev(obj, numa, root, cpus, path)
            elif kind in ("OSDev", "Misc"):
                continue
            else:  # a normal object: it may narrow the locality
                n_here, r_here, c_here = numa, root, cpus
                if kind == "NUMANode" and obj.get("os_index", "").isdigit():
                    n_here, r_here = int(obj.get("os_index")), f"numa{obj.get('os_index')}"
                else:
                    nodes = _mask(obj.get("nodeset"))
                    if len(nodes) == 1:
                        n_here, r_here = nodes[0], f"numa{nodes[0]}"
                c_here = _mask(obj.get("cpuset")) or cpus
                self.walk(obj, n_here, r_here, c_here, (), depth + 1)

    def pcidev(self, obj: ET.Element, numa, root, cpus, path) -> None:
        bus = obj.get("pci_busid")
        if bus is None or canonical_pci(bus) is None:
            raise self.doc.error(f"PCIDev pci_busid={bus!r} is not a PCI bus id", obj)
        cls = (obj.get("pci_type") or "")[:4].lower()
        osdevs = [o for o in obj if o.tag == "object" and o.get("type") == "OSDev"]
        line = self.doc.line(obj)
        if cls.startswith("03"):
            self.devices.append(TreeDevice(kind="gpu", bus_id=bus, numa=numa, root=root,
                                           path=path, line=line, cpus=cpus, model=_model(osdevs)))
        elif cls.startswith("02"):
            rdma = [o.get("name") for o in osdevs if _is_rdma(o)]
            net = [o.get("name") for o in osdevs if not _is_rdma(o) and _is_net(o)]
            layer = {"0207": "InfiniBand", "0200": "Ethernet"}.get(cls, "unknown")
            if rdma:
                for name in rdma:
                    self.devices.append(TreeDevice(
                        kind="nic", bus_id=bus, numa=numa, root=root, path=path, line=line,
                        name=name, netdev=net[0] if net else None,
                        link_layer=layer))
            else:
                self.devices.append(TreeDevice(
                    kind="nic", bus_id=bus, numa=numa, root=root, path=path, line=line,
                    name=net[0] if net else None,
                    netdev=net[0] if net else None, link_layer=layer, rdma=False))


def _is_rdma(o: ET.Element) -> bool:
    return (o.get("subtype") == "OpenFabrics" or o.get("osdev_type") == "3"
            or bool(_RDMA_NAME.match(o.get("name") or "")))


def _is_net(o: ET.Element) -> bool:
    return o.get("subtype") == "Network" or o.get("osdev_type") == "2"


def _model(osdevs) -> Optional[str]:
    for o in osdevs:
        for info in o:
            if info.tag == "info" and info.get("name") == "GPUModel" and info.get("value"):
                return info.get("value")
    return None


def read_hwloc_xml(path: str, node_name: Optional[str] = None, model: Optional[str] = None,
                   threads_per_core: Optional[int] = None) -> Discovery:
    """One node's Discovery from ``lstopo --of xml`` output."""
    doc = read_xml(path, ("topology",), WHAT)
    walker = _Walker(doc)
    walker.walk(doc.root, None, "machine", (), (), 0)
    if not any(d.kind == "gpu" for d in walker.devices):
        raise doc.error("no GPU in this topology (no PCIDev of class 03xx; was lstopo run "
                        "with I/O devices, i.e. without --no-io?)", doc.root)
    return tree_discovery(walker.devices, [], path, "hwloc-xml", node_name, model,
                          threads_per_core)
