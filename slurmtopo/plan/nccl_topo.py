"""Write a node type's hardware as an NCCL topology file (``NCCL_TOPO_FILE``).

NCCL reads the machine's PCI tree from sysfs; inside a cloud VM that tree is
flattened or made up, so NCCL picks far NICs and slow rings. Given a
topology file NCCL starts from it and fills in, from NVML and sysfs, what
the file leaves out. The format is NCCL's own (``src/graph/xml.cc``, read in
``src/graph/topo.cc``); what is written, per NUMA node:

* ``<cpu numaid affinity>`` with the NUMA node's CPUs as NCCL's mask;
* the PCIe switches: the bus ids the devices' ``pci_path`` names (read from
  a provider's file or hwloc), else switches made up from the relations
  (devices ``PIX`` to each other share one switch, ``PXB`` groups sit under
  a common upper switch), with ids ``ffff:ff:NN.0`` as the providers use;
* GPUs as ``<pci class="0x030200">`` with ``<gpu dev>`` and their
  ``<nvlink>``s (NVSwitch links as ``tclass="0x068000"``), or bare with
  ``nvlink=False`` so that NCCL reads NVLink from NVML;
* NICs as ``<pci class="0x020700">`` (InfiniBand), ``0x020000``
  (Ethernet, EFA) or ``0x028000`` (link layer unknown) with ``<nic><net name dev speed port>`` (speed in Mbit/s).

Attributes NCCL measures itself (``sm``, ``gdr``, ``guid``, ``maxconn``,
``latency``) are left for it to fill in. NCCL matches devices by PCI bus
id, so devices without one are left out (see :func:`render`'s notes). Pure:
text in, text out; :mod:`slurmtopo.commands.nccl_topo` writes the files.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple
from xml.sax.saxutils import quoteattr

from slurmtopo.inventory.links import LinkClass, parse_token
from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Hardware, format_cpumask

GPU_CLASS = "0x030200"
BRIDGE_CLASS = "0x060400"
NVSWITCH_CLASS = "0x068000"
NVSWITCH_TARGET = "ffff:fe:00.0"
NIC_CLASS = {"InfiniBand": "0x020700", "Ethernet": "0x020000"}
OTHER_NIC_CLASS = "0x028000"  # "other network controller": link layer unknown


@dataclass
class _Dev:
    kind: str  # gpu | nic
    index: int
    bus: Optional[str]
    numa: int


@dataclass
class _Bridge:
    id: str
    children: List["_Bridge"] = field(default_factory=list)
    devices: List[_Dev] = field(default_factory=list)


@dataclass
class Rendered:
    """The file's text and what the reader should know about it."""

    text: str
    notes: List[str]


#: GPU generations on PCIe Gen5 (32 GT/s); older ones are Gen4 (16 GT/s)
_GEN5 = ("H100", "H200", "H800", "H20", "B200", "B300", "GB200", "GB300")


def _link_speed(hw: Hardware) -> str:
    """PCIe speed for the link attributes (NCCL models PCIe bandwidth from
    them): from ``pcie_gbps`` (GB/s per direction of an x16 link) when set,
    else from the GPU generation."""
    g = hw.pcie_gbps
    if g is None:
        return "32.0 GT/s PCIe" if any(k in hw.model for k in _GEN5) else "16.0 GT/s PCIe"
    if g >= 48:
        return "32.0 GT/s PCIe"
    return "16.0 GT/s PCIe" if g >= 24 else "8.0 GT/s PCIe"


def _numa_of(hw: Hardware) -> Tuple[List[int], List[int]]:
    """NUMA node of every GPU and NIC; unknown ones follow a device they
    are PCIe-close to, else 0."""
    gpu = [g.numa_node for g in hw.gpus]
    nic = [n.numa_node for n in hw.nics]
    for i, n in enumerate(hw.nics):
        if nic[i] is None:
            near = [gpu[g] for g, rel in enumerate(n.gpu_relation)
                    if parse_token(rel)[0] <= LinkClass.NODE and gpu[g] is not None]
            nic[i] = near[0] if near else None
    for i in range(len(gpu)):
        if gpu[i] is None:
            near = [nic[k] for k, n in enumerate(hw.nics) if i < len(n.gpu_relation)
                    and parse_token(n.gpu_relation[i])[0] <= LinkClass.NODE
                    and nic[k] is not None]
            gpu[i] = near[0] if near else 0
    return gpu, [0 if x is None else x for x in nic]


class _Ids:
    """Made-up switch bus ids: ffff:ff:01.0, ffff:ff:02.0, ... (domain ffff
    is what no real VM uses, as in the providers' files)."""

    def __init__(self, taken: Sequence[str]):
        self.n = 0
        self.taken = set(taken)

    def next(self) -> str:
        while True:
            self.n += 1
            bid = f"ffff:{0xff - self.n // 32:02x}:{self.n % 32:02x}.0"
            if bid not in self.taken:
                return bid


def _from_paths(devs: List[_Dev], paths: Dict[Tuple[str, int], Tuple[str, ...]]) -> _Bridge:
    """The tree the devices' recorded ``pci_path`` s describe."""
    top = _Bridge("")
    for d in devs:
        node = top
        for bid in paths[(d.kind, d.index)]:
            nxt = next((c for c in node.children if c.id == bid), None)
            if nxt is None:
                nxt = _Bridge(bid)
                node.children.append(nxt)
            node = nxt
        node.devices.append(d)
    return top


def _union(pairs, items):
    parent = {x: x for x in items}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: Dict[object, list] = {}
    for x in items:
        groups.setdefault(find(x), []).append(x)
    return list(groups.values())


def _inferred(hw: Hardware, devs: List[_Dev], ids: _Ids) -> _Bridge:
    """Switches made up from the relations of one NUMA node's devices."""
    keys = [(d.kind, d.index) for d in devs]
    by_key = {(d.kind, d.index): d for d in devs}
    pix, pxb = [], []
    for a in (k for k in keys if k[0] == "gpu"):
        for b in keys:
            if b == a or (b[0] == "gpu" and b[1] < a[1]):
                continue
            tok = hw.links[a[1]][b[1]] if b[0] == "gpu" else hw.nics[b[1]].gpu_relation[a[1]]
            cls = parse_token(tok)[0]
            if cls is LinkClass.PIX:
                pix.append((a, b))
            elif cls is LinkClass.PXB:
                pxb.append((a, b))
    leaves = _union(pix, keys)
    leaf_of = {k: i for i, grp in enumerate(leaves) for k in grp}
    uppers = _union([(leaf_of[a], leaf_of[b]) for a, b in pxb], list(range(len(leaves))))
    top = _Bridge("")
    for up in uppers:
        if len(up) == 1:
            grp = leaves[up[0]]
            if len(grp) == 1:
                top.devices.append(by_key[grp[0]])
            else:
                top.children.append(_Bridge(ids.next(), devices=[by_key[k] for k in grp]))
            continue
        upper = _Bridge(ids.next())
        for li in up:
            upper.children.append(_Bridge(ids.next(), devices=[by_key[k] for k in leaves[li]]))
        top.children.append(upper)
    return top


def render(hw: Hardware, title: Optional[str] = None, nvlink: bool = True) -> Rendered:
    """The NCCL topology file for ``hw``; ``notes`` say what was left out."""
    notes: List[str] = []
    gpu_numa, nic_numa = _numa_of(hw)
    devs = [_Dev("gpu", g.index, g.pci_bus_id, gpu_numa[i]) for i, g in enumerate(hw.gpus)]
    devs += [_Dev("nic", k, n.pci_bus_id, nic_numa[k]) for k, n in enumerate(hw.nics)
             if n.role == "compute"]
    skipped = [f"GPU{d.index}" for d in devs if d.bus is None and d.kind == "gpu"]
    if skipped:
        notes.append(f"no PCI bus id for {', '.join(skipped)}: left out (NCCL adds them from "
                     "sysfs; it matches the file's devices by bus id)")
    loose = [d for d in devs if d.bus is None and d.kind == "nic"]  # <nic> right under <cpu>
    devs = [d for d in devs if d.bus is not None]
    if not devs:
        raise SlurmtopoError("no GPU or NIC has a PCI bus id, so there is nothing NCCL could "
                             "match: describe the node type from a node report (slurmtopo "
                             "agent discover) or give pci_bus_id")
    paths = {("gpu", g.index): g.pci_path for g in hw.gpus}
    paths.update({("nic", k): n.pci_path for k, n in enumerate(hw.nics)})
    recorded = any(paths[(d.kind, d.index)] for d in devs)  # else: from the relations
    ids = _Ids([b for p in paths.values() for b in p] + [d.bus for d in devs])
    words = max(1, (max((c for g in hw.gpus for c in g.cpus), default=0) // 32) + 1)
    speed = _link_speed(hw)
    out = []
    if title:
        out.append(f"<!-- {title.replace('--', '- -')} -->")
    out.append('<system version="1">')
    for numa in sorted({d.numa for d in devs + loose}):
        here = [d for d in devs if d.numa == numa]
        cpus = sorted({c for d in here if d.kind == "gpu" for c in hw.gpus[d.index].cpus})
        attrs = f'numaid="{numa}"'
        if cpus:
            attrs += f' affinity="{format_cpumask(cpus, words)}"'
        out.append(f"  <cpu {attrs}>")
        tree = _from_paths(here, paths) if recorded else _inferred(hw, here, ids)
        _emit(hw, tree, out, 2, speed, nvlink)
        for d in (d for d in loose if d.numa == numa):
            out.append("    <nic>")
            out.append(f"      <net {_net_attrs(hw, d)}/>")
            out.append("    </nic>")
        out.append("  </cpu>")
    out.append("</system>")
    return Rendered(text="\n".join(out) + "\n", notes=notes)


def _emit(hw: Hardware, node: _Bridge, out: List[str], depth: int, speed: str,
          nvlink: bool) -> None:
    pad = "  " * depth
    for d in sorted(node.devices, key=lambda d: (d.kind != "gpu", d.index)):
        if d.kind == "gpu":
            _gpu(hw, d, out, pad, speed, nvlink)
        else:
            _nic(hw, d, out, pad, speed)
    for child in node.children:
        out.append(f'{pad}<pci busid="{child.id}" class="{BRIDGE_CLASS}" '
                   f'link_speed="{speed}" link_width="16">')
        _emit(hw, child, out, depth + 1, speed, nvlink)
        out.append(f"{pad}</pci>")


def _gpu(hw: Hardware, d: _Dev, out: List[str], pad: str, speed: str, nvlink: bool) -> None:
    head = f'{pad}<pci busid="{d.bus}" class="{GPU_CLASS}" link_speed="{speed}" link_width="16"'
    links = _nvlinks(hw, d.index) if nvlink else []
    if not links:
        out.append(head + "/>" if not nvlink else head + ">")
        if nvlink:
            out.append(f'{pad}  <gpu dev="{d.index}"/>')
            out.append(f"{pad}</pci>")
        return
    out.append(head + ">")
    out.append(f'{pad}  <gpu dev="{d.index}">')
    for target, count, tclass in links:
        out.append(f'{pad}    <nvlink target="{target}" count="{count}" tclass="{tclass}"/>')
    out.append(f"{pad}  </gpu>")
    out.append(f"{pad}</pci>")


def _nvlinks(hw: Hardware, i: int) -> List[Tuple[str, int, str]]:
    lanes = [(j, parse_token(hw.links[i][j])[1]) for j in range(hw.gpu_count) if j != i]
    lanes = [(j, n) for j, n in lanes if n]
    if not lanes:
        return []
    if hw.nvswitch:
        return [(NVSWITCH_TARGET, max(n for _, n in lanes), NVSWITCH_CLASS)]
    return [(hw.gpus[j].pci_bus_id, n, GPU_CLASS) for j, n in lanes
            if hw.gpus[j].pci_bus_id]


def _nic(hw: Hardware, d: _Dev, out: List[str], pad: str, speed: str) -> None:
    n = hw.nics[d.index]
    net = _net_attrs(hw, d)
    out.append(f'{pad}<pci busid="{d.bus}" class="{NIC_CLASS.get(n.link_layer, OTHER_NIC_CLASS)}" '
               f'link_speed="{speed}" link_width="16">')
    out.append(f"{pad}  <nic>")
    out.append(f"{pad}    <net {net}/>")
    out.append(f"{pad}  </nic>")
    out.append(f"{pad}</pci>")


def _net_attrs(hw: Hardware, d: _Dev) -> str:
    n = hw.nics[d.index]
    net = f'name={quoteattr(n.name)} dev="{d.index}"'
    if n.rate_gbps:
        net += f' speed="{int(round(n.rate_gbps * 1000))}"'
    return net + f' port="{n.port}"'


# --------------------------------------------------------------------------
# Which files an inventory needs


@dataclass
class TopoFile:
    """One file to write: a node type's hardware and the nodes that have it."""

    name: str  # file stem: the node type, or ``node-<name>`` for untyped nodes
    hardware: Hardware
    nodes: List[str]


def file_stem(name: str) -> str:
    """A node type name as a file name (``nccl-topo-<stem>.xml``)."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "_"


def topo_files(inv, types: Sequence[str] = (), virtualised_only: bool = False
               ) -> List[TopoFile]:
    """One entry per distinct node type of ``inv`` (typed nodes by type name,
    untyped nodes with identical hardware together), in inventory order."""
    out: Dict[object, TopoFile] = {}
    for node in inv:
        hw = node.hardware
        key = ("type", node.type) if node.type is not None else ("hw", hw)
        if key not in out:
            name = node.type if node.type is not None else f"node-{node.name}"
            out[key] = TopoFile(file_stem(name), hw, [])
        out[key].nodes.append(node.name)
    files = list(out.values())
    if types:
        known = {f.name for f in files}
        unknown = [t for t in types if file_stem(t) not in known]
        if unknown:
            raise SlurmtopoError(f"no node of type {', '.join(unknown)} in the inventory "
                                 f"(types: {', '.join(sorted(known))})")
        files = [f for f in files if f.name in {file_stem(t) for t in types}]
    if virtualised_only:
        files = [f for f in files if f.hardware.virtualised]
    return files


#: the GPUs and the host hashes of a topology file, as NCCL writes them
_GPU_TAG = re.compile(r"<gpu[\s/>]")
_HOST_HASH = re.compile(r"""\bhost_hash\s*=\s*["']([^"']*)["']""")


def single_node_problem(text: str, hw: Hardware) -> Optional[str]:
    """Why a topology file does not describe one node of ``hw`` (None when
    it does). On multi-node NVLink systems NCCL wants ``NCCL_TOPO_FILE`` to
    describe a single node (env.rst), but ``NCCL_TOPO_DUMP_FILE`` on such a
    job dumps the whole NVLink domain: every tray's ``<cpu>`` tagged with
    its ``host_hash``, 72 GPUs where a GB200 tray has 4. Either gives it
    away; :func:`render` never writes one."""
    hosts = set(_HOST_HASH.findall(text))
    gpus = len(_GPU_TAG.findall(text))
    if len(hosts) > 1:
        return f"it describes {len(hosts)} hosts (host_hash), {gpus} GPUs"
    if gpus > hw.gpu_count:
        return f"it describes {gpus} GPUs where a node has {hw.gpu_count}"
    return None
