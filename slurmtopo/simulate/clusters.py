"""Inventories to replay public traces on: each trace's own cluster at its
published size, and GB200 NVL72 systems (pure: ``slurmtopo inventory
synthetic`` writes them).

A trace replayed on a cluster much larger than the one it came from fills
a few percent of it, and no placement policy differs there; on its own
cluster it offers the load it had. What each trace says of its cluster,
and what is made of it:

``philly``
    Microsoft Philly (ATC'19), ``cluster_machine_list`` of the published
    trace (github.com/msr-fiddle/philly-traces): 552 machines, 321 with 2
    GPUs of 12 GB and 231 with 8 GPUs of 24 GB (2,490 GPUs). Written as
    PCIe servers (P100-class pairs, P40-class eights; the trace names no
    model). ``--machines cluster_machine_list`` reads the list itself.
``pai-2020``
    Alibaba PAI (NSDI'22, cluster-trace-gpu-v2020): "over 6,500 GPUs on
    about 1,800 machines" of several models; ``--machines
    pai_machine_spec.csv`` (``machine,gpu_type,cap_cpu,cap_mem,cap_gpu``,
    published without a header) is required: the machines' GPU counts and
    models are read from it.
``alibaba-2023``
    Alibaba's GPU-sharing cluster (ATC'23, cluster-trace-gpu-v2023):
    ``--machines openb_node_list_gpu_node.csv`` (``sn,cpu_milli,
    memory_mib,gpu,model``), nodes without GPUs left out.
``helios``
    SenseTime Helios (SC'21): every cluster's ``cluster_gpu_number.csv``
    gives its GPUs per day; ``--machines`` that file: the most GPUs it
    lists (``total``), as 8-GPU V100 nodes (Helios' servers).
``acme-seren``, ``acme-kalos``
    Shanghai AI Lab's Acme (NSDI'24, github.com/InternLM/AcmeTrace): Seren
    286 nodes and Kalos 302 nodes of 8 A100 (2,288 and 2,416 GPUs), as the
    paper's cluster table gives them (recalled, not re-read: docs/simulate.md);
    the trace has no machine list.
``nvl72``
    ``--racks R`` GB200 NVL72 racks: 18 trays of 4 GPUs each, one NVLink
    domain and one topology/block block a rack (``BlockSizes`` 18 and the
    aggregated levels of 2, 4 and 8 racks that fit).
``fat-tree``
    ``--nodes N`` HGX H100 nodes, for any other trace.

No trace publishes its network. Every cluster but ``nvl72`` gets a
two-level fat tree: leaves of ``--leaf-size`` hosts (16 by default, a
rack's worth of 8-GPU servers on one 64-port leaf), every leaf under
``--spines`` spines, the leaves' uplinks ``--oversubscription`` X:1 (1:
non-blocking) told to the cost model. NVL72 racks get two leaves a rack
(9 trays each) under the same spines. Say so when reporting a replay on
them: it is the trace's size, not its fabric.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import read_text
from slurmtopo.inventory.model import (Block, CpuTopology, Fabric, Gpu, Hardware, Inventory, Nic, Node,
                             NvlinkDomain, Switch)
from slurmtopo.inventory.presets import preset

NAMES = ("philly", "pai-2020", "alibaba-2023", "helios", "acme-seren", "acme-kalos", "nvl72",
         "fat-tree")
#: most nodes a generated inventory may have
MAX_NODES = 20000
#: the Philly machine list as published: (machines, GPUs each, GB a GPU)
PHILLY = ((321, 2, 12), (231, 8, 24))
#: Acme's clusters (nodes of 8 A100)
ACME = {"acme-seren": 286, "acme-kalos": 302}
#: trays in an NVL72 rack
NVL72_TRAYS = 18


def pcie_server(gpus: int, model: str, mem_mib: int, nic_gbit: float = 100.0) -> Hardware:
    """A PCIe GPU server without NVLink: GPUs split over two sockets, one
    PCIe switch per socket, one NIC per socket."""
    half = max(1, gpus // 2)
    numa = [0 if i < half else 1 for i in range(gpus)]
    sockets = 2 if gpus > 1 else 1
    gl = tuple(Gpu(index=i, model=model, memory_mib=mem_mib, minor=i, numa_node=numa[i])
               for i in range(gpus))
    links = tuple(tuple("X" if a == b else ("PXB" if numa[a] == numa[b] else "SYS")
                        for b in range(gpus)) for a in range(gpus))
    nics = tuple(Nic(name=f"mlx5_{k}", rate_gbps=nic_gbit, numa_node=k,
                     gpu_relation=tuple("PXB" if numa[g] == k else "SYS" for g in range(gpus)))
                 for k in range(sockets))
    return Hardware(gpus=gl, links=links, nics=nics,
                    cpu=CpuTopology(sockets=sockets, cores_per_socket=16, threads_per_core=2))


def _hardware(kind: str) -> Hardware:
    return preset(kind)


@dataclass(frozen=True)
class Machines:
    """Groups of identical machines: (count, node type name, hardware)."""

    groups: Tuple[Tuple[int, str, Hardware], ...]

    @property
    def nodes(self) -> int:
        return sum(c for c, _, _ in self.groups)


def _rows(path: str, header: Sequence[str], what: str) -> List[Dict[str, str]]:
    """A CSV file's rows by ``header`` (the file's own header when it has
    one naming them, else ``header`` in order)."""
    text = read_text(path)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise SlurmtopoError(f"no {what} in it", path)
    first = [c.strip() for c in next(csv.reader([lines[0]]))]
    names = list(header)
    start = 0
    if all(h in first for h in header[:2]):
        names, start = first, 1
    out = []
    for i, row in enumerate(csv.reader(io.StringIO("\n".join(lines[start:]))), start + 1):
        if len(row) < len(header):
            raise SlurmtopoError(f"line {i}: {len(row)} columns, expected {len(header)} "
                                 f"({','.join(header)})", path)
        out.append({n: v.strip() for n, v in zip(names, row)})
    if not out:
        raise SlurmtopoError(f"no {what} in it", path)
    if len(out) > MAX_NODES:
        raise SlurmtopoError(f"{len(out)} {what}: at most {MAX_NODES}", path)
    return out


def _count(text: str, what: str, path: str, line: int, hi: int = 64) -> int:
    try:
        v = float(text)
    except ValueError:
        raise SlurmtopoError(f"line {line}: {what} {text!r} is not a number", path) from None
    if v != int(v) or not 0 <= v <= hi:
        raise SlurmtopoError(f"line {line}: {what} {text!r} is not a whole number 0-{hi}", path)
    return int(v)


def _fold(counts: Dict[Tuple[int, str], int], maker) -> Machines:
    groups = []
    for (gpus, model), n in sorted(counts.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        if gpus <= 0:
            continue
        name = f"{model.lower().replace(' ', '-')}-{gpus}"
        groups.append((n, name, maker(gpus, model)))
    return Machines(tuple(groups))


def philly_machines(path: Optional[str]) -> Machines:
    """Philly's machines: its published list, or ``path`` (the trace's
    ``cluster_machine_list``: ``machineId, number of GPUs, single GPU mem``)."""
    if path is None:
        return Machines(tuple((n, f"philly-{g}gpu", pcie_server(g, f"{mem} GB GPU", mem * 1024))
                              for n, g, mem in PHILLY))
    rows = _rows(path, ("machineId", "number of GPUs", "single GPU mem"), "machines")
    counts: Dict[Tuple[int, str], int] = {}
    for i, r in enumerate(rows, 2):
        g = _count(list(r.values())[1], "number of GPUs", path, i)
        mem = list(r.values())[2].replace(" ", "") or "GPU"
        counts[(g, mem)] = counts.get((g, mem), 0) + 1
    return _fold(counts, lambda g, m: pcie_server(g, f"{m} GPU", 12 * 1024))


def pai_machines(path: str) -> Machines:
    """PAI 2020's machines from ``pai_machine_spec.csv``: 8-GPU V100 (and
    V100M32) servers as NVLink DGX-1s, the rest PCIe servers."""
    rows = _rows(path, ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"), "machines")
    counts: Dict[Tuple[int, str], int] = {}
    for i, r in enumerate(rows, 1):
        g = _count(r["cap_gpu"], "cap_gpu", path, i)
        counts[(g, r["gpu_type"] or "GPU")] = counts.get((g, r["gpu_type"] or "GPU"), 0) + 1

    def make(g: int, model: str) -> Hardware:
        if g == 8 and model.upper().startswith("V100"):
            return _hardware("dgx1-v100")
        return pcie_server(g, model, 16 * 1024)
    return _fold(counts, make)


def openb_machines(path: str) -> Machines:
    """Alibaba 2023's GPU nodes from ``openb_node_list_gpu_node.csv``."""
    rows = _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"), "nodes")
    counts: Dict[Tuple[int, str], int] = {}
    for i, r in enumerate(rows, 2):
        g = _count(r["gpu"], "gpu", path, i)
        counts[(g, r["model"] or "GPU")] = counts.get((g, r["model"] or "GPU"), 0) + 1
    return _fold(counts, lambda g, m: pcie_server(g, m, 16 * 1024))


def helios_machines(path: str) -> Machines:
    """A Helios cluster from its ``cluster_gpu_number.csv``: its most GPUs
    on any day, as 8-GPU V100 servers."""
    reader = csv.DictReader(io.StringIO(read_text(path)))
    if not reader.fieldnames or "total" not in reader.fieldnames:
        raise SlurmtopoError("no 'total' column (Helios' cluster_gpu_number.csv has one)", path)
    most = 0
    for i, r in enumerate(reader, 2):
        most = max(most, _count(r["total"] or "0", "total", path, i, 1 << 20))
    if most <= 0:
        raise SlurmtopoError("no GPUs in it", path)
    return Machines(((-(-most // 8), "helios-v100-8", _hardware("dgx1-v100")),))


def _fat_tree(hosts: Sequence[str], leaf_size: int, spines: int, link_gbps: float
              ) -> Tuple[Switch, ...]:
    leaves = []
    for i in range(0, len(hosts), leaf_size):
        leaves.append(Switch(name=f"leaf{len(leaves) + 1:03d}", nodes=tuple(hosts[i:i + leaf_size]),
                             link_gbps=link_gbps))
    if len(leaves) < 2:
        return tuple(leaves)
    names = tuple(s.name for s in leaves)
    return tuple(leaves) + tuple(Switch(name=f"spine{k + 1}", switches=names,
                                        link_gbps=link_gbps) for k in range(spines))


def _names(prefix: str, count: int, start: int = 1) -> List[str]:
    width = max(3, len(str(start + count - 1)))
    return [f"{prefix}{i:0{width}d}" for i in range(start, start + count)]


def build(name: str, machines: Optional[str] = None, nodes: Optional[int] = None,
          racks: Optional[int] = None, leaf_size: int = 16, spines: int = 4,
          oversubscription: float = 1.0) -> Inventory:
    """The inventory of cluster ``name`` (see the module doc)."""
    if name not in NAMES:
        raise SlurmtopoError(f"unknown cluster {name!r} (known: {', '.join(NAMES)})")
    if not 1 <= leaf_size <= 1024:
        raise SlurmtopoError(f"--leaf-size {leaf_size}: 1 to 1024 hosts")
    if name == "nvl72":
        if racks is None or not 1 <= racks <= MAX_NODES // NVL72_TRAYS:
            raise SlurmtopoError("nvl72 needs --racks R (1 to "
                                 f"{MAX_NODES // NVL72_TRAYS})")
        return _nvl72(racks, spines, oversubscription)
    if name == "fat-tree":
        if nodes is None or not 1 <= nodes <= MAX_NODES:
            raise SlurmtopoError(f"fat-tree needs --nodes N (1 to {MAX_NODES})")
        group = Machines(((nodes, "hgx-h100-8", _hardware("hgx-h100-8")),))
    elif name in ACME:
        group = Machines(((ACME[name], "hgx-a100-8", _hardware("hgx-a100-8")),))
    elif name == "philly":
        group = philly_machines(machines)
    else:
        if machines is None:
            raise SlurmtopoError(f"{name} needs --machines FILE (the trace's own list of its "
                                 "machines; see docs/simulate.md)")
        group = {"pai-2020": pai_machines, "alibaba-2023": openb_machines,
                 "helios": helios_machines}[name](machines)
    if group.nodes > MAX_NODES:
        raise SlurmtopoError(f"{group.nodes} nodes: at most {MAX_NODES}")
    nodes_out: Dict[str, Node] = {}
    types: Dict[str, Hardware] = {}
    start = 1
    for count, tname, hw in group.groups:
        types[tname] = hw
        for h in _names("n", count, start):
            nodes_out[h] = Node(name=h, hardware=hw, type=tname)
        start += count
    rate = max((x.rate_gbps or 0.0 for _, _, hw in group.groups for x in hw.compute_nics()),
               default=0.0) or 400.0
    fabric = Fabric(switches=_fat_tree(list(nodes_out), leaf_size, spines, rate))
    return Inventory(nodes=nodes_out, fabric=fabric, node_types=types,
                     cost=_oversubscribed(oversubscription), source=f"synthetic:{name}")


def _oversubscribed(x: float) -> Dict[str, object]:
    if not 1.0 <= x <= 64.0:
        raise SlurmtopoError(f"--oversubscription {x:g}: 1 to 64 (X:1)")
    return {} if x == 1.0 else {"oversubscription": {"NET_L1": x, "NET_L2": x}}


def _nvl72(racks: int, spines: int, oversubscription: float) -> Inventory:
    hw = _hardware("gb200-nvl72-tray")
    nodes: Dict[str, Node] = {}
    blocks = []
    leaves = []
    for r in range(1, racks + 1):
        dom = NvlinkDomain(cluster_uuid=f"00000000-0000-4000-8000-{r:012d}", clique_id=1)
        trays = [f"r{r:03d}t{t:02d}" for t in range(1, NVL72_TRAYS + 1)]
        for h in trays:
            nodes[h] = Node(name=h, hardware=hw, type="gb200-nvl72-tray", nvlink_domain=dom)
        blocks.append(Block(name=f"nvl72-r{r:03d}", nodes=tuple(trays)))
        half = NVL72_TRAYS // 2
        leaves.append(Switch(name=f"r{r:03d}-leaf1", nodes=tuple(trays[:half]), link_gbps=400.0))
        leaves.append(Switch(name=f"r{r:03d}-leaf2", nodes=tuple(trays[half:]), link_gbps=400.0))
    sw = tuple(leaves)
    if len(leaves) > 1:
        sw += tuple(Switch(name=f"spine{k + 1}", switches=tuple(s.name for s in leaves),
                           link_gbps=400.0) for k in range(spines))
    sizes = tuple(NVL72_TRAYS * k for k in (1, 2, 4, 8) if k <= racks)
    return Inventory(nodes=nodes, fabric=Fabric(switches=sw, blocks=tuple(blocks),
                                                block_sizes=sizes),
                     node_types={"gb200-nvl72-tray": hw}, cost=_oversubscribed(oversubscription),
                     source=f"synthetic:nvl72x{racks}")
