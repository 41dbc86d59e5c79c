"""Read NCCL's topology XML (``NCCL_TOPO_FILE``, ``NCCL_TOPO_DUMP_FILE``).

Cloud providers publish these for their GPU VMs because inside a VM the
PCI tree NVML and sysfs show is flattened or made up: AWS p4d/p5 put EFA
devices (no mlx5 names, so ``nvidia-smi topo -m`` prints no NIC columns),
Azure ND v4/v5 hide GPUs and NICs behind virtual switches. The file says
which NIC is next to which GPU. Format (NCCL's ``src/graph/xml.cc`` and
``topo.cc``)::

    <system version="1">
      <cpu numaid="0" affinity="0000ffff,ffffffff" arch="x86_64" vendor="AuthenticAMD">
        <pci busid="ffff:ff:01.0" class="0x060400" link_speed="16 GT/s" link_width="16">
          <pci busid="0001:00:00.0" class="0x030200" ...>
            <gpu dev="0" sm="80" rank="0" gdr="1">
              <nvlink target="0000:c4:00.0" count="2" tclass="0x068000"/>
            </gpu>
          </pci>
          <pci busid="0101:00:00.0" class="0x020700" ...>
            <nic><net name="mlx5_0" dev="0" speed="200000" port="1" guid="0x..." gdr="1"/></nic>
          </pci>

Both styles are read: NCCL's own dump (``<gpu>`` and ``<nic>/<net>``
elements) and the providers' skeletons that give only PCI classes
(``0x03....`` a GPU, ``0x02....`` a NIC) and let NCCL fill in the rest.
``<pci>`` leaves with neither class nor element (AWS's p5 file lists its
EFA devices that way) cannot be told apart and are left out, said in the
report's problems. ``speed`` is in Mbit/s.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import List, Optional, Tuple

from slurmtopo.agent.pcitree import Bridge, TreeDevice, tree_discovery
from slurmtopo.agent.report import Discovery
from slurmtopo.agent.sysfs import canonical_pci
from slurmtopo.agent.xmlsafe import XmlDoc, parse_xml, read_xml
from slurmtopo.inventory.model import Hardware, parse_cpumask

WHAT = "an NCCL topology file"
#: deeper PCI nesting than this is a broken (or hostile) file, not a machine
MAX_DEPTH = 32


class _Walker:
    def __init__(self, doc: XmlDoc):
        self.doc = doc
        self.devices: List[TreeDevice] = []
        self.unknown: List[int] = []

    def integer(self, elem: ET.Element, key: str, default=None):
        value = elem.get(key)
        if value is None:
            if default is None:
                raise self.doc.error(f"<{elem.tag}> needs a {key}= attribute", elem)
            return default
        try:
            return int(float(value))
        except ValueError:
            raise self.doc.error(f"<{elem.tag}> {key}={value!r} is not a number", elem) from None

    def bus(self, elem: ET.Element, required: bool) -> Optional[str]:
        value = elem.get("busid")
        if value is None:
            if required:
                raise self.doc.error("<pci> needs a busid= attribute", elem)
            return None
        if canonical_pci(value) is None:
            raise self.doc.error(f"busid={value!r} is not a PCI bus id (expected e.g. "
                                 "0000:07:00.0)", elem)
        return value

    def cpu(self, elem: ET.Element) -> None:
        numa = self.integer(elem, "numaid")
        cpus: Tuple[int, ...] = ()
        if elem.get("affinity"):
            try:
                cpus = parse_cpumask(elem.get("affinity"))
            except ValueError as exc:
                raise self.doc.error(f"<cpu> affinity: {exc}", elem) from None
        root = f"cpu{numa}"
        for child in elem:
            if child.tag == "pci":
                self.pci(child, numa, root, cpus, (), 1)
            elif child.tag == "nic":
                self.nic(child, None, numa, root, (), None)

    def pci(self, elem: ET.Element, numa: int, root: str, cpus, path: Tuple[Bridge, ...],
            depth: int) -> None:
        if depth > MAX_DEPTH:
            raise self.doc.error(f"PCI elements nested deeper than {MAX_DEPTH}", elem)
        kids = list(elem)
        tags = {k.tag for k in kids}
        cls = (elem.get("class") or "").lower()
        line = self.doc.line(elem)
        if "gpu" in tags or (cls.startswith("0x03") and "pci" not in tags):
            gpu = next((k for k in kids if k.tag == "gpu"), None)
            dev = TreeDevice(kind="gpu", bus_id=self.bus(elem, True), numa=numa, root=root,
                             path=path, line=line, cpus=cpus)
            if gpu is not None:
                for link in gpu:
                    if link.tag != "nvlink":
                        continue
                    target = link.get("target") or ""
                    dev.nvlinks.append((target, self.integer(link, "count"),
                                        link.get("tclass") or ""))
            self.devices.append(dev)
        elif "nic" in tags:
            for k in kids:
                if k.tag == "nic":
                    self.nic(k, self.bus(elem, True), numa, root, path, cls)
        elif cls.startswith("0x02") and "pci" not in tags:
            self.devices.append(TreeDevice(
                kind="nic", bus_id=self.bus(elem, True), numa=numa, root=root, path=path,
                line=line, link_layer=_layer(cls, None)))
        elif "pci" in tags:
            bus = self.bus(elem, False)
            here = path + (Bridge(canonical_pci(bus) if bus else f"line-{line}"),)
            for k in kids:
                if k.tag == "pci":
                    self.pci(k, numa, root, cpus, here, depth + 1)
        elif line is not None:
            self.unknown.append(line)

    def nic(self, elem: ET.Element, bus: Optional[str], numa: int, root: str,
            path: Tuple[Bridge, ...], cls: Optional[str]) -> None:
        for net in elem:
            if net.tag != "net":
                continue
            name = net.get("name")
            if not name:
                raise self.doc.error("<net> needs a name= attribute", net)
            speed = self.integer(net, "speed", 0)
            self.devices.append(TreeDevice(
                kind="nic", bus_id=bus, numa=numa, root=root, path=path,
                line=self.doc.line(net), name=name,
                rate_gbps=speed / 1000.0 if speed > 0 else None,
                port=max(1, self.integer(net, "port", 1)), link_layer=_layer(cls, name),
                order=self.integer(net, "dev", -1) if net.get("dev") is not None else None))


def _layer(cls: Optional[str], name: Optional[str]) -> str:
    """InfiniBand for class 0x0207, Ethernet for 0x0200 (EFA and RoCE ports;
    AWS's ``rdmap*`` EFA devices when no class is given), else unknown."""
    if cls and cls.startswith("0x0207"):
        return "InfiniBand"
    if cls and cls.startswith("0x0200"):
        return "Ethernet"
    if name and (name.startswith("rdmap") or name.startswith("efa")):
        return "Ethernet"
    if name and name.startswith("mlx") and not cls:
        return "InfiniBand"
    return "unknown"


def read_nccl_xml(path: str, node_name: Optional[str] = None, model: Optional[str] = None,
                  threads_per_core: Optional[int] = None) -> Discovery:
    """One node's Discovery from an NCCL topology file."""
    return nccl_discovery(read_xml(path, ("system",), WHAT), node_name, model,
                          threads_per_core)


def parse_nccl_xml(text: str, where: str, node_name: Optional[str] = None) -> Discovery:
    """Like :func:`read_nccl_xml`, from text (checking what was written)."""
    return nccl_discovery(parse_xml(text, where, ("system",), WHAT), node_name or "check")


def check_written(hw: Hardware, text: str, where: str) -> List[str]:
    """Read ``text`` (a file :mod:`slurmtopo.plan.nccl_topo` wrote for ``hw``)
    back and list every relation that differs from ``hw`` (PHB, which
    NCCL's format cannot say, comes back as NODE)."""
    back = parse_nccl_xml(text, where).node.hardware if any(
        g.pci_bus_id for g in hw.gpus) else None
    if back is None:
        return []
    pos = {canonical_pci(g.pci_bus_id): g.index for g in back.gpus}
    mine = {g.index: pos.get(canonical_pci(g.pci_bus_id)) for g in hw.gpus if g.pci_bus_id}
    nics = {n.name: n for n in back.nics}
    out: List[str] = []
    for a, pa in mine.items():
        for b, pb in mine.items():
            if a < b and pa is not None and pb is not None and hw.links[a][b] != back.links[pa][pb]:
                out.append(f"GPU{a}-GPU{b} is {hw.links[a][b]} but reads back as "
                           f"{back.links[pa][pb]}")
        for n in hw.compute_nics():
            m = nics.get(n.name)
            if m is not None and pa is not None and n.gpu_relation and \
                    n.gpu_relation[a] != m.gpu_relation[pa]:
                out.append(f"GPU{a}-{n.name} is {n.gpu_relation[a]} but reads back as "
                           f"{m.gpu_relation[pa]}")
    return out


def nccl_discovery(doc: XmlDoc, node_name: Optional[str] = None, model: Optional[str] = None,
                   threads_per_core: Optional[int] = None) -> Discovery:
    path = doc.path
    walker = _Walker(doc)
    cpus = [c for c in doc.root if c.tag == "cpu"]
    if not cpus:
        raise doc.error("<system> holds no <cpu> element", doc.root)
    seen = {}
    for c in cpus:
        numa = walker.integer(c, "numaid")
        if numa in seen:
            raise doc.error(f"<cpu numaid=\"{numa}\"> appears twice (first on line "
                            f"{seen[numa]})", c)
        seen[numa] = doc.line(c)
        walker.cpu(c)
    if not any(d.kind == "gpu" for d in walker.devices):
        raise doc.error("no GPU in this file (no <gpu> element and no <pci> of class 0x03..."
                        + (f"; {len(walker.unknown)} PCI device(s) have neither class nor "
                           "element" if walker.unknown else "") + ")", doc.root)
    buses = {}
    for d in walker.devices:
        key = (canonical_pci(d.bus_id), d.name)
        if d.bus_id and key in buses:
            raise doc.error(f"busid {d.bus_id} appears twice (first on line {buses[key]})",
                            line=d.line)
        buses[key] = d.line
    problems: List[str] = []
    if walker.unknown:
        problems.append(f"{len(walker.unknown)} PCI device(s) with neither a class nor a "
                        f"<gpu>/<nic> element left out (lines "
                        f"{', '.join(map(str, walker.unknown[:8]))}"
                        + (" ..." if len(walker.unknown) > 8 else "") + ")")
    return tree_discovery(walker.devices, problems, path, "nccl-topology-xml", node_name,
                          model, threads_per_core)
