"""Reading, validating, merging and writing inventories (schema version 1).

One schema serves three kinds of document (the ``slurmtopo:`` key says
which; see docs/schema.md):

* ``inventory``: a whole cluster (node types, nodes, fabric);
* ``node-report``: what the node agent writes for one node, an inventory
  with exactly one node plus a ``report`` block, so the planner reads a
  directory of reports with no conversion step;
* ``fabric``: only the switch tree and blocks (the admin tooling's output).

A path may be a directory: every ``*.yaml``, ``*.yml`` and ``*.json`` in it
is read and merged (node reports from the agents plus a fabric file).
"""
from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from slurmtopo.errors import InventoryError
from slurmtopo.files.fileio import read_text
from slurmtopo.files.yamlio import (LineDict, Reader, as_bool, as_float, as_int, as_nonneg_int,
                                    as_pos_int, as_rate, as_str, document_kind, BlockList,
                                    dump_json, dump_yaml, load_document, parse_text)
from slurmtopo.inventory.cache import FileSchema, load_file
from slurmtopo.inventory.hostlist import (expand_hostlist, expand_in_order, fold_hostlist,
                                          fold_in_order)
from slurmtopo.inventory.links import normalise_token, parse_token
from slurmtopo.inventory.model import (SCHEMA_VERSION, Block, CpuTopology, Fabric, Gpu, Hardware,
                                       Inventory, MigDevice, Nic, Node, NvlinkDomain, NvLinkPort,
                                       Ring, Switch, Torus, MAX_CPUS, check_cpu_id, format_cpulist,
                                       parse_cpulist)
from slurmtopo.inventory.presets import PRESETS, preset
from slurmtopo.inventory.ringtree import inventory_switches
from slurmtopo.inventory.topology import switch_levels

_PCI_RE = re.compile(r"^[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7]$")

KINDS = ("inventory", "node-report", "fabric")
TOP_KEYS = {"slurmtopo", "version", "name", "node_types", "nodes", "fabric", "cost", "report",
            "reports", "compiled"}
HW_KEYS = {"gpus", "links", "nics", "cpu", "nvswitch", "nvlink_lane_gbps", "pcie_gbps",
           "gres_type", "virtualised", "nccl_topo_file"}
NODE_KEYS = HW_KEYS | {"name", "type", "nvlink_domain", "features"}
TYPE_KEYS = HW_KEYS | {"preset"}
GPU_KEYS = {"index", "model", "pci_bus_id", "memory_mib", "uuid", "minor", "numa_node", "cpus",
            "mig_mode", "mig", "nvlinks", "pci_path"}
NIC_KEYS = {"name", "netdev", "pci_bus_id", "link_layer", "rate_gbps", "state", "port",
            "numa_node", "gpu_relation", "role", "pci_path"}
CPU_KEYS = {"sockets", "cores_per_socket", "threads_per_core", "core_cpus"}
MIG_KEYS = {"gi_id", "ci_id", "profile", "uuid", "memory_mib", "gi_cap_minor", "ci_cap_minor"}
NVLINK_KEYS = {"link", "active", "remote_pci_bus_id", "remote_type"}
FABRIC_KEYS = {"switches", "blocks", "block_sizes", "rings", "toruses"}
RING_KEYS = {"name", "nodes"}
TORUS_KEYS = {"name", "dims", "nodes", "placements"}
SWITCH_KEYS = {"name", "level", "nodes", "switches", "link_gbps", "description", "sharp"}
BLOCK_KEYS = {"name", "nodes"}


#: a node name as Slurm and a shell take it: a host name, nothing to quote
NODE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")


def flat_hostlist(value, what: str = "hostlist") -> List[str]:
    """A hostlist, or a list of hostlists, expanded; a list of lists or a
    mapping is refused rather than flattened or turned into a name."""
    if isinstance(value, dict):
        raise ValueError(f"expected a {what} or a list of names, got a mapping")
    if isinstance(value, list) and any(isinstance(v, (list, dict)) for v in value):
        raise ValueError(f"expected a {what} or a list of names, got a nested list")
    if isinstance(value, bool) or not isinstance(value, (str, int, list)):
        raise ValueError(f"expected a {what} or a list of names, got {value!r}")
    return expand_hostlist(value, what)


def node_names(value, what: str = "node name") -> List[str]:
    """The host names of a node entry's ``name`` (or a switch's ``nodes``):
    every name a plain host name. A name with a blank, a newline or a shell
    metacharacter would end up inside ``topology.conf``, ``gres.conf`` and
    the batch script: refused here."""
    names = flat_hostlist(value, what)
    for name in names:
        if not NODE_NAME.match(name):
            raise ValueError(f"node name {name!r} is not a host name (letters, digits, '.', "
                             "'_' and '-' only)")
    return names


def ordered_node_names(value) -> List[str]:
    """:func:`node_names` in the order written, not sorted: a ring's nodes
    (ring order), a torus's (x-major fill)."""
    if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool)
                                       for v in value):
        names = [n for v in value for n in expand_in_order(str(v), "hostlist")]
    elif isinstance(value, (str, int)) and not isinstance(value, bool):
        names = expand_in_order(str(value), "hostlist")
    else:
        raise ValueError(f"expected a hostlist or a list of names, got {value!r:.40}")
    for name in names:
        if not NODE_NAME.match(name):
            raise ValueError(f"node name {name!r} is not a host name (letters, digits, '.', "
                             "'_' and '-' only)")
    return names


def _xyz(value) -> Tuple[int, int, int]:
    """A torus's or a placement's ``[x, y, z]``."""
    if not isinstance(value, list) or len(value) != 3:
        raise ValueError(f"expected [x, y, z], got {value!r:.40}")
    return tuple(as_pos_int(v) for v in value)  # type: ignore[return-value]


def _unit_name(value) -> str:
    """A ring's or a torus's name: written into topology.conf/yaml as it is."""
    name = as_str(value)
    if not NODE_NAME.match(name):
        raise ValueError(f"{name!r:.40} is not a plain name (letters, digits, '.', '_', '-')")
    return name


#: a NIC's name as the kernel gives it (mlx5_0, ibp12s0, rdmap16s27, eth0):
#: written into NCCL_IB_HCA, env.json and the task's environment
NIC_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:-]{0,254}$")


def _nic_name(value) -> str:
    name = as_str(value)
    if not NIC_NAME.match(name):
        raise ValueError(f"{name!r:.40} is not a NIC's name (letters, digits, '.', '_', '-', ':')")
    return name


def _xyz_list(value) -> Tuple[Tuple[int, int, int], ...]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list of [x, y, z], got {value!r:.40}")
    return tuple(_xyz(v) for v in value)


def _cpus(value) -> Tuple[int, ...]:
    if isinstance(value, list):
        return tuple(sorted({check_cpu_id(as_nonneg_int(v)) for v in value}))
    return parse_cpulist(str(value))


def _bus_ids(value) -> Tuple[str, ...]:
    """``pci_path``: a list of PCI bus ids (or one whitespace-separated string)."""
    ids = _tokens(value)
    for b in ids:
        if not _PCI_RE.match(b):
            raise ValueError(f"{b!r} is not a PCI bus id (expected e.g. 0000:07:00.0)")
    return ids


def _tokens(value) -> Tuple[str, ...]:
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    raise ValueError(f"expected a list or a string of tokens, got {value!r}")


class _Parser:
    """Builds model objects from one parsed document."""

    def __init__(self, path: str):
        self.r = Reader(path)
        self.path = path
        #: preset name -> its Hardware, one object for every node of this document
        self._presets: Dict[str, Hardware] = {}

    def preset(self, name: str) -> Hardware:
        hw = self._presets.get(name)
        if hw is None:
            hw = self._presets[name] = preset(name)
        return hw

    def where(self, obj, key=None) -> str:
        line = Reader.line(obj, key)
        return f"{self.path}:{line}" if line else self.path

    # -- hardware ---------------------------------------------------------

    def gpu(self, d, i: int) -> Gpu:
        r = self.r
        d = r.mapping(d, f"GPU #{i}", GPU_KEYS)
        mig = tuple(self.mig(m) for m in r.sequence(d.get("mig", []) or [], "mig"))
        nvl = tuple(self.nvlink(p) for p in r.sequence(d.get("nvlinks", []) or [], "nvlinks"))
        return Gpu(
            index=r.need(d, "index", "GPU", as_nonneg_int),
            model=r.get(d, "model", "GPU", as_str, "unknown"),
            pci_bus_id=r.get(d, "pci_bus_id", "GPU", as_str),
            memory_mib=r.get(d, "memory_mib", "GPU", as_nonneg_int),
            uuid=r.get(d, "uuid", "GPU", as_str),
            minor=r.get(d, "minor", "GPU", as_nonneg_int),
            numa_node=r.get(d, "numa_node", "GPU", as_int),
            cpus=r.get(d, "cpus", "GPU", _cpus, ()),
            mig_mode=r.get(d, "mig_mode", "GPU", as_bool, bool(mig)),
            mig=mig, nvlinks=nvl, pci_path=r.get(d, "pci_path", "GPU", _bus_ids, ()))

    def mig(self, d) -> MigDevice:
        r = self.r
        d = r.mapping(d, "MIG device", MIG_KEYS)
        return MigDevice(
            gi_id=r.need(d, "gi_id", "MIG device", as_nonneg_int),
            ci_id=r.need(d, "ci_id", "MIG device", as_nonneg_int),
            profile=r.need(d, "profile", "MIG device", as_str),
            uuid=r.get(d, "uuid", "MIG device", as_str),
            memory_mib=r.get(d, "memory_mib", "MIG device", as_nonneg_int),
            gi_cap_minor=r.get(d, "gi_cap_minor", "MIG device", as_nonneg_int),
            ci_cap_minor=r.get(d, "ci_cap_minor", "MIG device", as_nonneg_int))

    def nvlink(self, d) -> NvLinkPort:
        r = self.r
        d = r.mapping(d, "NVLink port", NVLINK_KEYS)
        return NvLinkPort(
            link=r.need(d, "link", "NVLink port", as_nonneg_int),
            active=r.get(d, "active", "NVLink port", as_bool, False),
            remote_pci_bus_id=r.get(d, "remote_pci_bus_id", "NVLink port", as_str),
            remote_type=r.get(d, "remote_type", "NVLink port", as_str))

    def nic(self, d, n_gpus: int) -> Nic:
        r = self.r
        d = r.mapping(d, "NIC", NIC_KEYS)
        rel = r.get(d, "gpu_relation", "NIC", _tokens, ())
        for tok in rel:
            try:
                cls, _ = parse_token(tok)
            except ValueError as exc:
                raise r.error(f"NIC gpu_relation: {exc}", Reader.line(d, "gpu_relation")) from None
        if rel and len(rel) != n_gpus:
            raise r.error(f"NIC {d.get('name')!r}: gpu_relation has {len(rel)} entries for "
                          f"{n_gpus} GPUs", Reader.line(d, "gpu_relation"))
        layer = r.get(d, "link_layer", "NIC", as_str, "InfiniBand")
        if layer.lower() not in ("infiniband", "ethernet", "unknown"):
            raise r.error(f"NIC link_layer must be InfiniBand, Ethernet or unknown, got "
                          f"{layer!r}", Reader.line(d, "link_layer"))
        role = r.get(d, "role", "NIC", as_str, "compute")
        if role not in ("compute", "storage", "management"):
            raise r.error(f"NIC role must be compute, storage or management, got {role!r}",
                          Reader.line(d, "role"))
        return Nic(
            name=r.need(d, "name", "NIC", _nic_name),
            netdev=r.get(d, "netdev", "NIC", as_str),
            pci_bus_id=r.get(d, "pci_bus_id", "NIC", as_str),
            link_layer={"infiniband": "InfiniBand", "ethernet": "Ethernet"}.get(layer.lower(),
                                                                                "unknown"),
            rate_gbps=r.get(d, "rate_gbps", "NIC", as_float),
            state=r.get(d, "state", "NIC", as_str, "active"),
            port=r.get(d, "port", "NIC", as_pos_int, 1),
            numa_node=r.get(d, "numa_node", "NIC", as_int),
            gpu_relation=tuple(_norm(t) for t in rel), role=role,
            pci_path=r.get(d, "pci_path", "NIC", _bus_ids, ()))

    def cpu(self, d) -> CpuTopology:
        r = self.r
        d = r.mapping(d, "cpu", CPU_KEYS)
        core_cpus = None
        if d.get("core_cpus") is not None:
            seq = r.sequence(d["core_cpus"], "cpu core_cpus")
            core_cpus = tuple(r.get({"c": c}, "c", "cpu core_cpus", _cpus) for c in seq)
        topo = CpuTopology(
            sockets=r.need(d, "sockets", "cpu", as_pos_int),
            cores_per_socket=r.need(d, "cores_per_socket", "cpu", as_pos_int),
            threads_per_core=r.get(d, "threads_per_core", "cpu", as_pos_int, 1),
            core_cpus=core_cpus)
        if topo.cores * topo.threads_per_core > MAX_CPUS:  # before any table is built
            raise r.error(f"cpu layout of {topo.sockets:,} x {topo.cores_per_socket:,} x "
                          f"{topo.threads_per_core:,} CPUs is more than {MAX_CPUS:,}, the most "
                          "slurmtopo reads", Reader.line(d))
        if core_cpus is not None and len(core_cpus) != topo.cores:
            raise r.error(f"cpu core_cpus lists {len(core_cpus)} cores, expected "
                          f"sockets x cores_per_socket = {topo.cores}", Reader.line(d, "core_cpus"))
        return topo

    def links(self, value, n: int, line) -> Tuple[Tuple[str, ...], ...]:
        r = self.r
        rows = r.sequence(value, "links", line)
        if len(rows) != n:
            raise r.error(f"link matrix has {len(rows)} rows for {n} GPUs (must be square)",
                          Reader.line(rows) or line)
        out = []
        for i, row in enumerate(rows):
            ln = Reader.line(rows, i)
            try:
                toks = _tokens(row)
            except ValueError as exc:
                raise r.error(f"links row {i}: {exc}", ln) from None
            if len(toks) != n:
                raise r.error(f"links row {i} has {len(toks)} entries for {n} GPUs "
                              "(must be square)", ln)
            try:
                norm = tuple(_norm(t) for t in toks)
            except ValueError as exc:
                raise r.error(f"links row {i}: {exc}", ln) from None
            for j, t in enumerate(norm):
                if (i == j) != (t == "X"):
                    raise r.error(f"links row {i}, column {j}: "
                                  + ("the diagonal must be X" if i == j else
                                     "X is only allowed on the diagonal"), ln)
            out.append(norm)
        for i in range(n):
            for j in range(i + 1, n):
                if out[i][j] != out[j][i]:
                    raise r.error(f"link matrix is not symmetric: GPU{i}-GPU{j} is {out[i][j]} "
                                  f"but GPU{j}-GPU{i} is {out[j][i]}", Reader.line(rows, j))
        return tuple(out)

    def hardware(self, d, base: Optional[Hardware], what: str) -> Hardware:
        """Hardware from keys of ``d``, starting from ``base`` (a type)."""
        r = self.r
        if base is None and "gpus" not in d:
            raise r.error(f"{what} needs 'gpus' (or a 'type')", Reader.line(d))
        if "gpus" in d:
            seq = r.sequence(d["gpus"], f"{what} gpus", Reader.line(d, "gpus"))
            gpus = tuple(self.gpu(g, i) for i, g in enumerate(seq))
            seen: Dict[int, int] = {}
            for i, g in enumerate(gpus):
                if g.index in seen:
                    raise r.error(f"GPU index {g.index} listed twice", Reader.line(seq, i))
                seen[g.index] = i
            if sorted(seen) != list(range(len(gpus))):
                raise r.error(f"GPU indices must be 0..{len(gpus) - 1}, got {sorted(seen)}",
                              Reader.line(d, "gpus"))
            gpus = tuple(sorted(gpus, key=lambda g: g.index))
        else:
            gpus = base.gpus
        n = len(gpus)
        if "links" in d:
            links = self.links(d["links"], n, Reader.line(d, "links"))
        elif base is not None and base.gpu_count == n:
            links = base.links
        elif n <= 1:
            links = (("X",),) if n == 1 else ()
        else:
            raise r.error(f"{what} has {n} GPUs but no 'links' matrix", Reader.line(d))
        if "nics" in d:
            nics = tuple(self.nic(x, n) for x in r.sequence(d["nics"], "nics", Reader.line(d, "nics")))
        else:
            nics = base.nics if base is not None else ()
        names = [x.name for x in nics]
        if len(set(names)) != len(names):
            dup = next(x for x in names if names.count(x) > 1)
            raise r.error(f"NIC {dup!r} listed twice", Reader.line(d, "nics"))
        for nic in nics:
            if nic.gpu_relation and len(nic.gpu_relation) != n:
                raise r.error(f"NIC {nic.name!r}: gpu_relation does not match {n} GPUs",
                              Reader.line(d))
        kw: Dict[str, Any] = dict(gpus=gpus, links=links, nics=nics)
        if "cpu" in d:
            kw["cpu"] = None if d["cpu"] is None else self.cpu(d["cpu"])
        for key, conv in (("nvswitch", as_bool), ("nvlink_lane_gbps", as_rate),
                          ("pcie_gbps", as_rate), ("gres_type", as_str),
                          ("virtualised", as_bool), ("nccl_topo_file", as_str)):
            if key in d:
                kw[key] = r.get(d, key, what, conv)
        if base is not None:
            return replace(base, **kw)
        return Hardware(**kw)

    # -- nodes ------------------------------------------------------------

    def node_types(self, value) -> Dict[str, Hardware]:
        r = self.r
        d = r.mapping(value, "node_types")
        out: Dict[str, Hardware] = {}
        for name, spec in d.items():
            spec = r.mapping(spec, f"node type {name!r}", TYPE_KEYS, Reader.line(d, name))
            base = None
            if spec.get("preset") is not None:
                p = str(spec["preset"])
                if p not in PRESETS:
                    raise r.error(f"unknown preset {p!r} (known: {', '.join(sorted(PRESETS))})",
                                  Reader.line(spec, "preset"))
                base = self.preset(p)
            out[str(name)] = self.hardware(spec, base, f"node type {name!r}")
        return out

    def nodes(self, value, types: Dict[str, Hardware]) -> List[Node]:
        r = self.r
        seq = r.sequence(value, "nodes")
        out: List[Node] = []
        for i, spec in enumerate(seq):
            spec = r.mapping(spec, "node", NODE_KEYS, Reader.line(seq, i))
            names = r.need(spec, "name", "node", node_names)
            if not names:
                raise r.error("node name expands to no host", Reader.line(spec, "name"))
            tname = r.get(spec, "type", "node", as_str)
            base = None
            if tname is not None:
                if tname in types:
                    base = types[tname]
                elif tname in PRESETS:
                    base = self.preset(tname)
                else:
                    known = sorted(set(types) | set(PRESETS))
                    raise r.error(f"unknown node type {tname!r} (known: {', '.join(known)})",
                                  Reader.line(spec, "type"))
            hw_keys = HW_KEYS & set(spec)
            hw = self.hardware(spec, base, f"node {spec['name']}") if (hw_keys or base is None) else base
            domain = None
            if spec.get("nvlink_domain") is not None:
                dd = r.mapping(spec["nvlink_domain"], "nvlink_domain", {"cluster_uuid", "clique_id"})
                domain = NvlinkDomain(r.need(dd, "cluster_uuid", "nvlink_domain", as_str),
                                      r.need(dd, "clique_id", "nvlink_domain", as_nonneg_int))
            feats = tuple(r.strings(spec.get("features") or [], "features",
                                    Reader.line(spec, "features")))
            origin = self.where(spec)
            for name in names:
                out.append(Node(name=name, hardware=hw, type=tname if not hw_keys else None,
                                nvlink_domain=domain, features=feats, origin=origin))
        return out

    # -- fabric -----------------------------------------------------------

    def fabric(self, value) -> Fabric:
        r = self.r
        d = r.mapping(value, "fabric", FABRIC_KEYS)
        switches = []
        for i, s in enumerate(r.sequence(d.get("switches") or [], "switches")):
            s = r.mapping(s, "switch", SWITCH_KEYS)
            switches.append(Switch(
                name=r.need(s, "name", "switch", as_str),
                level=r.get(s, "level", "switch", as_nonneg_int, -1),
                nodes=tuple(r.get(s, "nodes", "switch", lambda v: node_names(v, "hostlist"),
                                  [])),
                switches=tuple(r.get(s, "switches", "switch",
                                     lambda v: flat_hostlist(v, "switch list"), [])),
                link_gbps=r.get(s, "link_gbps", "switch", as_rate),
                description=r.get(s, "description", "switch", as_str),
                origin=self.where(s), sharp=r.get(s, "sharp", "switch", as_bool, False)))
        blocks = []
        for b in r.sequence(d.get("blocks") or [], "blocks"):
            b = r.mapping(b, "block", BLOCK_KEYS)
            blocks.append(Block(name=r.need(b, "name", "block", as_str),
                                nodes=tuple(r.need(b, "nodes", "block",
                                                   lambda v: node_names(v, "hostlist"))),
                                origin=self.where(b)))
        sizes = tuple(r.get(d, "block_sizes", "fabric",
                            lambda v: [as_pos_int(x) for x in (v if isinstance(v, list) else [v])],
                            []))
        rings = tuple(
            Ring(name=r.need(g, "name", "ring", _unit_name),
                 nodes=tuple(r.need(g, "nodes", "ring", ordered_node_names)), origin=self.where(g))
            for g in (r.mapping(x, "ring", RING_KEYS)
                      for x in r.sequence(d.get("rings") or [], "rings")))
        toruses = tuple(
            Torus(name=r.need(t, "name", "torus", _unit_name), dims=r.need(t, "dims", "torus", _xyz),
                  nodes=tuple(r.need(t, "nodes", "torus", ordered_node_names)),
                  placements=r.get(t, "placements", "torus", _xyz_list, ()),
                  origin=self.where(t))
            for t in (r.mapping(x, "torus", TORUS_KEYS)
                      for x in r.sequence(d.get("toruses") or [], "toruses")))
        if rings or toruses:
            if switches or blocks or sizes:
                raise r.error("a fabric with rings or toruses has no switches or blocks "
                              "(Slurm plans a job on one topology)", Reader.line(d))
            switches = list(inventory_switches(rings, toruses, self.path))
        return Fabric(switches=tuple(switches), blocks=tuple(blocks), block_sizes=sizes,
                      rings=rings, toruses=toruses)


def _norm(tok: str) -> str:
    return normalise_token(str(tok))


def parse_inventory(data: Any, path: str = "<inventory>") -> Inventory:
    """Build an Inventory from one parsed document (see load_inventory)."""
    p = _Parser(path)
    r = p.r
    if data is None:
        raise r.error("empty document")
    if isinstance(data, list) and data and all(isinstance(t, dict) and "topology" in t
                                               for t in data):
        raise r.error(slurm_topology_yaml_message(path))
    d = r.mapping(data, "the document")
    kind = document_kind(r, d, KINDS, "inventory")
    r.mapping(d, "the document", TOP_KEYS)
    version = r.get(d, "version", "document", as_pos_int, SCHEMA_VERSION)
    if version > SCHEMA_VERSION:
        raise r.error(f"schema version {version} is newer than this slurmtopo understands "
                      f"({SCHEMA_VERSION}); upgrade slurmtopo", Reader.line(d, "version"))
    types = p.node_types(d["node_types"]) if d.get("node_types") is not None else {}
    nodes = p.nodes(d["nodes"], types) if d.get("nodes") is not None else []
    if kind == "node-report" and len(nodes) != 1:
        raise r.error(f"a node report describes exactly one node, this one has {len(nodes)}",
                      Reader.line(d, "nodes"))
    by_name: Dict[str, Node] = {}
    for n in nodes:
        if n.name in by_name:
            raise InventoryError(f"node {n.name!r} defined twice (first at {by_name[n.name].origin})",
                                 *_split_origin(n.origin))
        by_name[n.name] = n
    fabric = p.fabric(d["fabric"]) if d.get("fabric") is not None else Fabric()
    cost = dict(r.mapping(d["cost"], "cost")) if d.get("cost") is not None else {}
    reports = {}
    if d.get("report") is not None:
        reports = {n.name: dict(r.mapping(d["report"], "report")) for n in nodes}
    if d.get("reports") is not None:  # a compiled inventory: node name -> its report block
        rd = r.mapping(d["reports"], "reports")
        for name, block in rd.items():
            if name not in by_name:
                raise r.error(f"reports: {name!r} is not a node of this inventory",
                              Reader.line(rd, name))
            reports[str(name)] = dict(r.mapping(block, f"report of {name}"))
    inv = Inventory(nodes=by_name, fabric=fabric, node_types=types, cost=cost, reports=reports,
                    source=path)
    _check_fabric(inv, require_nodes=kind != "fabric")
    return inv


def slurm_topology_yaml_message(path: str) -> str:
    """What to do with Slurm's topology.yaml found where slurmtopo documents
    are read (a node-report directory, ``--inventory``): the planner reads
    the network from a ``slurmtopo: fabric`` document, which one command
    makes from it."""
    where = os.path.dirname(os.path.abspath(path)) if path and not path.startswith("<") \
        else "DIR"
    return ("this is Slurm's topology.yaml (a list of topologies), not a slurmtopo document: "
            "the planner reads the network from a 'slurmtopo: fabric' document; move this file "
            "out of the directory and make that document from it with `slurmtopo topology "
            f"generate --fabric topology.yaml --reports {where} --format fabric -o "
            f"{os.path.join(where, 'fabric.yaml')}`")


def _split_origin(origin: Optional[str]) -> Tuple[Optional[str], Optional[int]]:
    if not origin:
        return None, None
    path, _, line = origin.rpartition(":")
    if path and line.isdigit():
        return path, int(line)
    return origin, None


def _check_fabric(inv: Inventory, require_nodes: bool = True) -> None:
    """Cross-references: every host and child switch a fabric names exists,
    switch names are unique, the tree has no loops."""
    if require_nodes:
        for unit in inv.fabric.rings + inv.fabric.toruses:
            what = "ring" if isinstance(unit, Ring) else "torus"
            for host in unit.nodes:
                if host not in inv.nodes:
                    raise InventoryError(f"{what} {unit.name!r} names node {host!r}, which is "
                                         "not defined in the inventory",
                                         *_split_origin(unit.origin))
    names: Dict[str, Switch] = {}
    for s in inv.fabric.switches:
        if s.name in names:
            raise InventoryError(f"switch {s.name!r} defined twice (first at {names[s.name].origin})",
                                 *_split_origin(s.origin))
        names[s.name] = s
    for s in inv.fabric.switches:
        for child in s.switches:
            if child not in names:
                raise InventoryError(f"switch {s.name!r} names child switch {child!r}, "
                                     "which is not defined", *_split_origin(s.origin))
            if child == s.name:
                raise InventoryError(f"switch {s.name!r} lists itself as a child",
                                     *_split_origin(s.origin))
        if require_nodes:
            for host in s.nodes:
                if host not in inv.nodes:
                    raise InventoryError(f"switch {s.name!r} names node {host!r}, which is not "
                                         "defined in the inventory", *_split_origin(s.origin))
    try:
        switch_levels(inv.fabric)
    except ValueError as exc:
        raise InventoryError(f"fabric: {exc}", inv.source) from None
    if require_nodes:
        for b in inv.fabric.blocks:
            for host in b.nodes:
                if host not in inv.nodes:
                    raise InventoryError(f"block {b.name!r} names node {host!r}, which is not "
                                         "defined in the inventory", *_split_origin(b.origin))


DOC_SUFFIXES = (".yaml", ".yml", ".json")


def load_inventory(paths, check: Optional[Callable[[Inventory], object]] = None,
                   write_cache: bool = True, tables: Sequence[Any] = ()) -> Inventory:
    """Load one or more files or directories and merge them into one cluster.

    Directories contribute every ``*.yaml``/``*.yml``/``*.json`` in them, so
    ``--inventory /shared/slurmtopo/reports`` reads the agents' node reports
    as they are; the reports are read through their compiled form
    (:mod:`slurmtopo.inventory.compiled`), so only reports changed since the last
    read are parsed again. A big file is read through its compiled form
    too (:mod:`slurmtopo.inventory.cache`): ``check`` (the caller's
    validation of a whole inventory, e.g. its ``cost:`` block) is run on
    each file parsed, and only a file that passes gets a compiled form.
    ``write_cache`` False reads compiled forms but writes none (a dry run
    leaves nothing behind). ``tables`` (:class:`slurmtopo.inventory.cache.Table`)
    are the derived tables a file's compiled form keeps with it.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    parts: List[Inventory] = []
    first: Optional[str] = None
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            dir_parts, _ = _compiled().load_report_dir(p, report_dir_schema(), write_cache)
            parts.extend(dir_parts)
        elif os.path.exists(p):
            parts.append(load_file(p, file_schema(), read_text, check, write_cache, tables))
        else:
            raise InventoryError("no such file or directory", p)
        first = first or p
    inv = parts[0] if len(parts) == 1 else merge_inventories(parts)
    if not inv.nodes:
        raise InventoryError("the inventory defines no nodes",
                             first if len(paths) == 1 else None)
    return inv


def read_document(path: str) -> Inventory:
    """One inventory, node-report or fabric file."""
    return parse_inventory(load_document(path), path)


def _compiled():
    """:mod:`slurmtopo.inventory.compiled`, which reads a directory of node
    reports (the plan of a job on an inventory file never needs it)."""
    # lazy: its process pool (concurrent.futures, multiprocessing: 22 modules) costs 13 ms
    #   measured on the path of `plan` and `hooks plan` with an inventory file
    from slurmtopo.inventory import compiled

    return compiled


def report_dir_schema():
    """What :mod:`slurmtopo.inventory.compiled` needs to read and compile a report
    directory (it cannot import this module, which reads directories
    through it)."""
    return _compiled().Schema(read=read_document, parse=parse_inventory,
                              merge=merge_inventories, hardware_dict=hardware_dict,
                              suffixes=DOC_SUFFIXES)


def parse_document_text(text: str, path: str) -> Inventory:
    """One inventory, node-report or fabric document from its text."""
    return parse_inventory(parse_text(text, path), path)


def parse_hardware(d: Any, where: str) -> Hardware:
    """One node's hardware from its schema form (:func:`hardware_dict`),
    checked as in a file."""
    return _Parser(where).hardware(d, None, "hardware")


def file_schema():
    """What :mod:`slurmtopo.inventory.cache` needs to read, compile and
    check a file (it cannot import this module, which reads files through
    it)."""
    return FileSchema(parse_text=parse_document_text, hardware_dict=hardware_dict,
                      parse_hardware=parse_hardware)


def compile_report_dir(directory: str) -> Tuple[Dict[str, Any], Inventory, List[str]]:
    """``slurmtopo inventory compile``: the whole directory (reports, fabric,
    any other document) as one inventory document, plus the merged
    Inventory and log lines; the directory's compiled form is brought up to
    date on the way."""
    compiled = _compiled()
    schema = report_dir_schema()
    parts, log = compiled.load_report_dir(directory, schema)
    inv = parts[0] if len(parts) == 1 else merge_inventories(parts)
    if not inv.nodes:
        raise InventoryError("the directory defines no nodes", directory)
    doc = compiled.compile_inventory(inv, {}, schema, os.path.abspath(directory))
    rest = inventory_dict(Inventory(nodes={}, fabric=inv.fabric, cost=inv.cost))
    for key in ("fabric", "cost"):
        if key in rest:
            doc[key] = rest[key]
    doc["compiled"] = {"version": compiled.COMPILED_VERSION, "from": os.path.abspath(directory)}
    doc = {k: doc[k] for k in ("slurmtopo", "version", "node_types", "nodes", "fabric", "cost",
                               "reports", "compiled") if k in doc}
    return doc, inv, log


def merge_inventories(parts: Sequence[Inventory]) -> Inventory:
    """Merge documents: nodes must not repeat; at most one document may
    describe switches; blocks and node types are combined."""
    nodes: Dict[str, Node] = {}
    types: Dict[str, Hardware] = {}
    cost: Dict[str, object] = {}
    reports: Dict[str, Dict[str, object]] = {}
    switches: Tuple[Switch, ...] = ()
    rings: Tuple[Ring, ...] = ()
    toruses: Tuple[Torus, ...] = ()
    switch_src: Optional[str] = None
    blocks: List[Block] = []
    sizes: Tuple[int, ...] = ()
    for part in parts:
        for name, node in part.nodes.items():
            if name in nodes:
                raise InventoryError(f"node {name!r} is defined in two documents "
                                     f"(also at {nodes[name].origin})", *_split_origin(node.origin))
            nodes[name] = node
        for tname, hw in part.node_types.items():
            if tname in types and types[tname] != hw:
                raise InventoryError(f"node type {tname!r} is defined differently in two "
                                     "documents", part.source)
            types[tname] = hw
        if part.fabric.switches:
            if switches:
                raise InventoryError(f"two documents describe switches (also {switch_src}); "
                                     "keep the fabric in one file", part.source)
            switches, switch_src = part.fabric.switches, part.source
            rings, toruses = part.fabric.rings, part.fabric.toruses
        blocks.extend(part.fabric.blocks)
        sizes = part.fabric.block_sizes or sizes
        cost.update(part.cost)
        reports.update(part.reports)
    if (rings or toruses) and (blocks or sizes):
        raise InventoryError("a fabric with rings or toruses has no blocks (Slurm plans a job "
                             "on one topology); keep them apart", switch_src)
    inv = Inventory(nodes=nodes, fabric=Fabric(switches=switches, blocks=tuple(blocks),
                                               block_sizes=sizes, rings=rings, toruses=toruses),
                    node_types=types, cost=cost, reports=reports,
                    source=parts[0].source if parts else None)
    _check_fabric(inv)
    return inv


# --------------------------------------------------------------------------
# Writing


def hardware_dict(hw: Hardware) -> Dict[str, Any]:
    """The schema form of one node's hardware (only fields that are set)."""
    out: Dict[str, Any] = {"gpus": [_gpu_dict(g) for g in hw.gpus],
                           "links": BlockList(" ".join(f"{t:<4}" for t in row).rstrip()
                                               for row in hw.links)}
    if hw.nvswitch:
        out["nvswitch"] = True
    if hw.nics:
        out["nics"] = [_nic_dict(n) for n in hw.nics]
    if hw.cpu is not None:
        c: Dict[str, Any] = {"sockets": hw.cpu.sockets, "cores_per_socket": hw.cpu.cores_per_socket,
                             "threads_per_core": hw.cpu.threads_per_core}
        if hw.cpu.core_cpus is not None:
            c["core_cpus"] = [format_cpulist(x) for x in hw.cpu.core_cpus]
        out["cpu"] = c
    for key in ("nvlink_lane_gbps", "pcie_gbps", "gres_type"):
        if getattr(hw, key) is not None:
            out[key] = getattr(hw, key)
    if hw.virtualised:
        out["virtualised"] = True
    if hw.nccl_topo_file is not None:
        out["nccl_topo_file"] = hw.nccl_topo_file
    return out


def _gpu_dict(g: Gpu) -> Dict[str, Any]:
    d: Dict[str, Any] = {"index": g.index, "model": g.model}
    for key in ("pci_bus_id", "memory_mib", "uuid", "minor", "numa_node"):
        if getattr(g, key) is not None:
            d[key] = getattr(g, key)
    if g.cpus:
        d["cpus"] = format_cpulist(g.cpus)
    if g.mig_mode:
        d["mig_mode"] = True
    if g.mig:
        d["mig"] = [{k: v for k, v in vars(m).items() if v is not None} for m in g.mig]
    if g.nvlinks:
        d["nvlinks"] = [{k: v for k, v in vars(p).items() if v is not None} for p in g.nvlinks]
    if g.pci_path:
        d["pci_path"] = " ".join(g.pci_path)
    return d


def _nic_dict(n: Nic) -> Dict[str, Any]:
    d: Dict[str, Any] = {"name": n.name}
    for key in ("netdev", "pci_bus_id", "link_layer", "rate_gbps", "state", "port", "numa_node"):
        v = getattr(n, key)
        if v is not None and not (key == "port" and v == 1) and not (key == "state" and v == "active"):
            d[key] = v
    if n.gpu_relation:
        d["gpu_relation"] = " ".join(n.gpu_relation)
    if n.role != "compute":
        d["role"] = n.role
    if n.pci_path:
        d["pci_path"] = " ".join(n.pci_path)
    return d


def inventory_dict(inv: Inventory, kind: str = "inventory",
                   report: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The schema form of an inventory. Consecutive nodes of one type with
    the same domain and features are folded into one hostlist entry."""
    out: Dict[str, Any] = {"slurmtopo": kind, "version": SCHEMA_VERSION}
    if report:
        out["report"] = report
    used_types = {n.type for n in inv if n.type is not None and n.type in inv.node_types}
    if used_types:
        out["node_types"] = {t: hardware_dict(inv.node_types[t]) for t in inv.node_types
                             if t in used_types}
    entries: List[Dict[str, Any]] = []
    run: List[Node] = []

    def flush():
        if not run:
            return
        first = run[0]
        e: Dict[str, Any] = {"name": fold_hostlist(n.name for n in run) if len(run) > 1 else first.name}
        if first.type is not None:
            e["type"] = first.type
        else:
            e.update(hardware_dict(first.hardware))
        if first.nvlink_domain is not None:
            e["nvlink_domain"] = {"cluster_uuid": first.nvlink_domain.cluster_uuid,
                                  "clique_id": first.nvlink_domain.clique_id}
        if first.features:
            e["features"] = list(first.features)
        entries.append(e)
        run.clear()

    for n in inv:
        if run and not (n.type is not None and n.type == run[0].type
                        and n.nvlink_domain == run[0].nvlink_domain
                        and n.features == run[0].features):
            flush()
        run.append(n)
        if n.type is None:
            flush()
    flush()
    if entries:
        out["nodes"] = entries
    f = inv.fabric
    if f.rings or f.toruses:  # the switches are made from them (ringtree.py)
        out["fabric"] = ring_torus_dict(f)
    elif f.switches or f.blocks:
        fd: Dict[str, Any] = {}
        if f.switches:
            fd["switches"] = []
            for s in f.switches:
                sd: Dict[str, Any] = {"name": s.name}
                if s.level >= 0:
                    sd["level"] = s.level
                if s.nodes:
                    sd["nodes"] = fold_hostlist(s.nodes)
                if s.switches:
                    sd["switches"] = list(s.switches)
                if s.link_gbps is not None:
                    sd["link_gbps"] = s.link_gbps
                if s.description:
                    sd["description"] = s.description
                if s.sharp:
                    sd["sharp"] = True
                fd["switches"].append(sd)
        if f.blocks:
            # empty blocks (placeholders read from a site's topology.conf) have no
            # inventory form: the schema's blocks name their nodes
            fd["blocks"] = [{"name": b.name, "nodes": fold_hostlist(b.nodes)}
                            for b in f.blocks if b.nodes]
        if f.block_sizes:
            fd["block_sizes"] = list(f.block_sizes)
        out["fabric"] = fd
    if inv.cost:
        out["cost"] = dict(inv.cost)
    return out


def ring_torus_dict(f: Fabric) -> Dict[str, Any]:
    """The schema form of a fabric's rings and toruses (node lists in their
    order: ring order, x-major fill)."""
    out: Dict[str, Any] = {}
    if f.rings:
        out["rings"] = [{"name": g.name, "nodes": fold_in_order(g.nodes)} for g in f.rings]
    if f.toruses:
        out["toruses"] = []
        for t in f.toruses:
            td: Dict[str, Any] = {"name": t.name, "dims": list(t.dims),
                                  "nodes": fold_in_order(t.nodes)}
            if t.placements:
                td["placements"] = [list(p) for p in t.placements]
            out["toruses"].append(td)
    return out


def dump_inventory(inv: Inventory, fmt: str = "yaml", kind: str = "inventory",
                   report: Optional[Dict[str, Any]] = None) -> str:
    data = inventory_dict(inv, kind=kind, report=report)
    return dump_json(data) if fmt == "json" else dump_yaml(data)


def node_report(node: Node, report: Dict[str, Any], fmt: str = "yaml") -> str:
    """A node report document for one node (what the agent writes)."""
    inv = Inventory(nodes={node.name: replace(node, type=None)})
    return dump_inventory(inv, fmt=fmt, kind="node-report", report=report)
