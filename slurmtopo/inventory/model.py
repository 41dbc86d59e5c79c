"""The inventory model shared by every part of slurmtopo.

The node agent fills it from NVML and sysfs, the admin tooling merges node
reports and the fabric into it, the planner reads it. It is plain, typed,
immutable data: no I/O here (reading and writing files is
:mod:`slurmtopo.inventory.schema`, derived topology queries are
:mod:`slurmtopo.inventory.topology`).

Node *hardware* is split from node *identity*: every node of a type shares
one :class:`Hardware` object, so a 12,500-node cluster written with node
types costs 12,500 small :class:`Node` objects, not 12,500 link matrices.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from slurmtopo.inventory.links import LinkClass, parse_token

SCHEMA_VERSION = 1


class Derived:
    """Lookups derived from one value, kept with that value.

    Per-hardware tables (the link matrix as classes, NVLink islands, ring
    classes, the NIC choice), the network view of a fabric, the planner's
    view of an inventory: each is computed the first time it is asked for
    and lives exactly as long as the object it was derived from. A daemon
    that reloads its inventory drops the old tables with the old objects;
    there is no process-wide cache, no ``id()`` key that a recycled address
    could match, and no attribute written into another object behind its
    back. Holders declare it as a field that takes no part in comparison,
    hashing or ``repr`` (:func:`derived_field`); the module that derives a
    table owns its name. Copies and pickles start empty."""

    __slots__ = ("_tables",)

    def __init__(self) -> None:
        self._tables: Dict[str, object] = {}

    def get(self, name: str, build):
        """The table ``name``, built by ``build()`` on first use."""
        hit = self._tables.get(name)
        if hit is None:
            hit = self._tables[name] = build()
        return hit

    def __reduce__(self):
        return (Derived, ())

    def __repr__(self) -> str:
        return f"Derived({', '.join(sorted(self._tables))})"


def derived_field():
    """The dataclass field holding a value's :class:`Derived` tables."""
    return field(default_factory=Derived, init=False, repr=False, compare=False, hash=False)


class _CachedHash:
    """Big frozen values (a node type, the fabric) are dictionary keys for
    the cost model's per-hardware figures; hash them once (into their
    :class:`Derived` tables), not on every lookup."""

    __slots__ = ()

    def __hash__(self) -> int:
        return self.derived.get("hash", lambda: hash(tuple(
            getattr(self, f.name) for f in self.__dataclass_fields__.values() if f.compare)))


#: more CPUs than any Linux kernel supports (NR_CPUS tops out at 8192):
#: every CPU, core, GPU or NUMA id read from a list is below this, and a
#: CPU layout has at most this many CPUs. Checked before a range is
#: expanded, so ``CPUs=0-100000000`` costs one error line, not 4 GB.
MAX_CPUS = 65536


def check_cpu_id(value: int, what: str = "CPU id") -> int:
    """``value`` when it is a valid id (0 <= value < MAX_CPUS); ValueError
    otherwise."""
    if value < 0:
        raise ValueError(f"{what} {value} is negative")
    if value >= MAX_CPUS:
        raise ValueError(f"{what} {value:,} is not below {MAX_CPUS:,}, the most CPUs slurmtopo "
                         "reads (a typo in a range?)")
    return value


def parse_cpulist(text: str) -> Tuple[int, ...]:
    """``"0-3,8,10-11"`` -> (0, 1, 2, 3, 8, 10, 11): the kernel's cpulist
    format, read for CPU, core, GPU and NUMA lists alike. Every id is
    checked against :data:`MAX_CPUS` before a range is expanded. Raises
    ValueError. The ids of all items together are bounded too (at most
    MAX_CPUS, as no list of distinct ids is longer): ``0-65535`` repeated a
    million times in a 64 MiB report would otherwise build 6.5 * 10^10
    ids."""
    out: List[int] = []
    text = str(text).strip()
    if not text:
        return ()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo_s, hi_s = part.split("-", 1)
            lo, hi = int(lo_s), int(hi_s)
            if hi < lo:
                raise ValueError(f"bad CPU range {part!r}")
            check_cpu_id(hi, f"CPU range {part!r}: id")
            if len(out) + hi - lo + 1 > MAX_CPUS:
                raise ValueError(f"CPU list {text[:40]!r}... names more than {MAX_CPUS:,} "
                                 "ids (ranges repeated?)")
            out.extend(range(lo, hi + 1))
        else:
            out.append(check_cpu_id(int(part)))
            if len(out) > MAX_CPUS:
                raise ValueError(f"CPU list {text[:40]!r}... names more than {MAX_CPUS:,} ids")
    return tuple(sorted(set(out)))


def format_cpulist(cpus) -> str:
    """(0, 1, 2, 3, 8) -> ``"0-3,8"`` (the kernel's cpulist format)."""
    if isinstance(cpus, tuple):
        return _format_cpu_tuple(cpus)
    return _format_cpus(cpus)


@lru_cache(maxsize=4096)
def _format_cpu_tuple(cpus: Tuple[int, ...]) -> str:
    """Remembered: the ranks of a job share a handful of CPU sets, and the
    rank map, the CSV and the script each write every rank's."""
    return _format_cpus(cpus)


def _format_cpus(cpus) -> str:
    ids = sorted(set(int(c) for c in cpus))
    parts: List[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


#: widest CPU mask read (32768 CPUs): a longer one is a broken file
MAX_MASK_WORDS = 1024
_HEX_WORD = re.compile(r"^[0-9a-f]{1,8}$")


def parse_cpumask(mask: str) -> Tuple[int, ...]:
    """NCCL's / the kernel's CPU mask (``0000ffff,ffffffff``: 32-bit hex words,
    most significant first) -> CPU ids. Raises ValueError."""
    text = mask.strip().lower().replace("0x", "")
    if not text:
        return ()
    words = text.split(",")
    if len(words) > MAX_MASK_WORDS:
        raise ValueError(f"CPU mask of {len(words)} words is wider than "
                         f"{32 * MAX_MASK_WORDS} CPUs")
    value = 0
    for word in words:
        word = word.strip()
        if not _HEX_WORD.match(word):
            raise ValueError(f"bad CPU mask word {word!r} (expected up to 8 hex digits)")
        value = (value << 32) | int(word, 16)
    return tuple(i for i in range(value.bit_length()) if value >> i & 1)


def format_cpumask(cpus: Sequence[int], words: int) -> str:
    """CPU ids -> the mask format of :func:`parse_cpumask`, ``words`` wide."""
    value = 0
    for c in cpus:
        value |= 1 << int(c)
    return ",".join(f"{(value >> (32 * k)) & 0xFFFFFFFF:08x}" for k in reversed(range(words)))


@dataclass(frozen=True)
class MigDevice:
    """One MIG instance (GPU instance + compute instance) of a parent GPU."""

    gi_id: int
    ci_id: int
    profile: str  # e.g. "1g.10gb"
    uuid: Optional[str] = None
    memory_mib: Optional[int] = None
    #: /dev/nvidia-caps/nvidia-capN minors for the GI and CI access files
    gi_cap_minor: Optional[int] = None
    ci_cap_minor: Optional[int] = None


@dataclass(frozen=True)
class NvLinkPort:
    """State of one NVLink port of a GPU, as NVML reports it."""

    link: int
    active: bool
    remote_pci_bus_id: Optional[str] = None
    remote_type: Optional[str] = None  # "gpu" | "nvswitch" | "ibmnpu" | "unknown"


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML index (PCI bus id order)
    model: str = "unknown"
    pci_bus_id: Optional[str] = None
    memory_mib: Optional[int] = None
    uuid: Optional[str] = None
    minor: Optional[int] = None  # N of /dev/nvidiaN; defaults to index
    numa_node: Optional[int] = None
    cpus: Tuple[int, ...] = ()  # CPU (thread) ids with affinity to this GPU
    mig_mode: bool = False
    mig: Tuple[MigDevice, ...] = ()
    nvlinks: Tuple[NvLinkPort, ...] = ()  # per-port detail (agent reports)
    #: bus ids of the PCIe switches (bridges) from the CPU down to this GPU,
    #: as an NCCL topology file or hwloc gives them; lets ``nccl-topo``
    #: write the tree back with the ids the VM really has
    pci_path: Tuple[str, ...] = ()

    @property
    def device_minor(self) -> int:
        return self.index if self.minor is None else self.minor

    @property
    def device_file(self) -> str:
        return f"/dev/nvidia{self.device_minor}"


@dataclass(frozen=True)
class Nic:
    """A network adapter port (RDMA device or plain netdev)."""

    name: str  # RDMA device (mlx5_0) or netdev when there is no RDMA device
    netdev: Optional[str] = None
    pci_bus_id: Optional[str] = None
    #: InfiniBand | Ethernet (RoCE too) | unknown (a source that cannot tell,
    #: such as nvidia-smi; never guessed)
    link_layer: str = "InfiniBand"
    rate_gbps: Optional[float] = None  # link rate in Gbit/s
    state: str = "active"  # active | down | unknown
    port: int = 1
    numa_node: Optional[int] = None
    #: PCIe relation to each GPU, indexed like the node's GPUs ("PIX", ...)
    gpu_relation: Tuple[str, ...] = ()
    #: compute (training traffic) or storage/management; only compute NICs
    #: are given to NCCL
    role: str = "compute"
    #: PCIe switches from the CPU down to this NIC (see :attr:`Gpu.pci_path`)
    pci_path: Tuple[str, ...] = ()

    def relation_to(self, gpu_index: int) -> LinkClass:
        if gpu_index < len(self.gpu_relation):
            return parse_token(self.gpu_relation[gpu_index])[0]
        return LinkClass.SYS


@dataclass(frozen=True)
class CpuTopology:
    """Physical CPU layout; needed for Slurm's abstract core ids.

    ``core_cpus[i]`` lists the thread ids of Slurm abstract core ``i``
    (cores numbered socket by socket). When absent, the usual Linux
    enumeration is assumed: thread ``t`` of core ``c`` is cpu
    ``c + t * sockets * cores_per_socket``.
    """

    sockets: int
    cores_per_socket: int
    threads_per_core: int = 1
    core_cpus: Optional[Tuple[Tuple[int, ...], ...]] = None

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    def cpus_of_core(self, core: int) -> Tuple[int, ...]:
        if self.core_cpus is not None:
            return self.core_cpus[core]
        n = self.cores
        return tuple(core + t * n for t in range(self.threads_per_core))

    def core_of_cpu(self) -> Dict[int, int]:
        """Map every CPU (thread) id to its abstract core id."""
        return {cpu: core for core in range(self.cores) for cpu in self.cpus_of_core(core)}


@dataclass(frozen=True)
class NvlinkDomain:
    """Multi-node NVLink membership: same cluster UUID and clique id means
    the GPUs of these nodes talk over NVLink (e.g. one GB200 NVL72 rack)."""

    cluster_uuid: str
    clique_id: int

    @property
    def key(self) -> str:
        return f"{self.cluster_uuid}/{self.clique_id}"


@dataclass(frozen=True)
class Hardware(_CachedHash):
    """What a node *is*: shared by every node of a node type."""

    gpus: Tuple[Gpu, ...]
    #: square matrix of nvidia-smi tokens ("X", "NV18", "PIX", ...), by GPU index
    links: Tuple[Tuple[str, ...], ...]
    nics: Tuple[Nic, ...] = ()
    cpu: Optional[CpuTopology] = None
    #: GPUs are connected through NVSwitch (all-to-all full bandwidth)
    nvswitch: bool = False
    #: overrides for the cost model (GB/s per direction)
    nvlink_lane_gbps: Optional[float] = None
    pcie_gbps: Optional[float] = None
    gres_type: Optional[str] = None  # Slurm GRES type name override
    #: a VM (or any machine) whose PCI tree NCCL cannot read right: jobs get
    #: ``NCCL_TOPO_FILE`` (docs/nccl-topo.md)
    virtualised: bool = False
    #: where this type's NCCL topology file is on every node; when unset, a
    #: virtualised type's file is written into the job's run directory
    nccl_topo_file: Optional[str] = None
    #: tables derived from this node type (slurmtopo.inventory.topology, placement)
    derived: Derived = derived_field()

    # explicit, or @dataclass(frozen=True) would generate an uncached one
    __hash__ = _CachedHash.__hash__

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def model(self) -> str:
        models = {g.model for g in self.gpus}
        return models.pop() if len(models) == 1 else "mixed"

    def link(self, a: int, b: int) -> LinkClass:
        return parse_token(self.links[a][b])[0]

    def nvlink_lanes(self, a: int, b: int) -> int:
        return parse_token(self.links[a][b])[1]

    def compute_nics(self) -> Tuple[Nic, ...]:
        return tuple(n for n in self.nics if n.role == "compute")


@dataclass(frozen=True)
class Node:
    name: str
    hardware: Hardware
    type: Optional[str] = None  # node type name, when it came from one
    nvlink_domain: Optional[NvlinkDomain] = None
    features: Tuple[str, ...] = ()
    #: where the description came from (file:line), for error messages
    origin: Optional[str] = None

    @property
    def gpus(self) -> Tuple[Gpu, ...]:
        return self.hardware.gpus


@dataclass(frozen=True)
class Switch:
    """A network switch in the tree above the nodes.

    ``level`` 0 is a leaf (has hosts), 1 the switches above the leaves, ...
    """

    name: str
    level: int = 0
    nodes: Tuple[str, ...] = ()
    switches: Tuple[str, ...] = ()  # children
    link_gbps: Optional[float] = None  # per-port rate, Gbit/s
    description: Optional[str] = None
    origin: Optional[str] = field(default=None, compare=False)  # file:line
    #: the switch reduces in the network (InfiniBand SHARP, which NCCL runs
    #: as CollNet): the cost model prices an all-reduce across hosts whose
    #: switches all have it as one pass through them (docs/cost-model.md)
    sharp: bool = False


@dataclass(frozen=True)
class Block:
    """A Slurm topology/block block (e.g. one NVL72 rack). No nodes: a
    placeholder that keeps the positions of the blocks after it (a rack not
    there yet, or gone)."""

    name: str
    nodes: Tuple[str, ...]
    origin: Optional[str] = field(default=None, compare=False)  # file:line
    #: the accelerator domain it holds, written as a comment (topograph's style)
    domain: Optional[str] = field(default=None, compare=False)


@dataclass(frozen=True)
class Ring:
    """A Slurm 26.05 topology/ring ring: its nodes in ring order (a job gets
    an arc of them, which may wrap). At most 16 nodes
    (:mod:`slurmtopo.inventory.ringtree` holds Slurm's rules)."""

    name: str
    nodes: Tuple[str, ...]
    origin: Optional[str] = field(default=None, compare=False)  # file:line


@dataclass(frozen=True)
class Torus:
    """A Slurm 26.05 topology/torus3d torus: ``dims`` (x, y, z) and its
    nodes in x-major order (x fastest), x*y*z of them; ``placements`` the
    sub-cube shapes a job may get (Slurm gives a job whose node count
    matches none of them nothing)."""

    name: str
    dims: Tuple[int, int, int]
    nodes: Tuple[str, ...]
    placements: Tuple[Tuple[int, int, int], ...] = ()
    origin: Optional[str] = field(default=None, compare=False)  # file:line


@dataclass(frozen=True)
class Fabric(_CachedHash):
    """The network above the nodes. ``rings``/``toruses`` (an inventory's
    26.05 ring or torus) come with ``switches`` made from them
    (:func:`slurmtopo.inventory.ringtree.inventory_switches`): the planner reads the
    switches, the writers the rings and toruses."""

    switches: Tuple[Switch, ...] = ()
    blocks: Tuple[Block, ...] = ()
    block_sizes: Tuple[int, ...] = ()
    rings: Tuple[Ring, ...] = ()
    toruses: Tuple[Torus, ...] = ()
    #: tables derived from this fabric (the network view)
    derived: Derived = derived_field()

    __hash__ = _CachedHash.__hash__

    def switch(self, name: str) -> Switch:
        for s in self.switches:
            if s.name == name:
                return s
        raise KeyError(name)


@dataclass(frozen=True)
class Inventory:
    """A whole cluster: nodes (in file order) and the fabric above them.

    What :func:`slurmtopo.api.load_cluster` returns: frozen once loaded and
    validated (a cluster seen another way, e.g. with a site's Slurm
    topology, is a new object made with :func:`dataclasses.replace`), and
    carrying what is derived from it (its validated cost parameters,
    :func:`slurmtopo.cost.cost_params`; the planner's fabric tree; its node
    types' tables) in :class:`Derived` tables that go with it."""

    nodes: Dict[str, Node]
    fabric: Fabric = field(default_factory=Fabric)
    node_types: Dict[str, Hardware] = field(default_factory=dict)
    #: cost-model overrides, passed through as written (see cost.py)
    cost: Dict[str, object] = field(default_factory=dict)
    #: node name -> the ``report`` block of its node report (agent metadata:
    #: when, from what source, problems found, stale or not)
    reports: Dict[str, Dict[str, object]] = field(default_factory=dict)
    source: Optional[str] = None
    #: what the planner and the cost model derive from the whole cluster
    #: (its fabric tree, the lower bound's statistics); see :meth:`derive`
    derived: Derived = derived_field()

    def derive(self, name: str, build):
        """A table derived from the nodes and the fabric, built once
        (:func:`dataclasses.replace` gives a new inventory with empty
        tables; rebuilt too if the node table changed size in place)."""
        hit = self.derived.get(name, lambda: [None, None, -1, None])
        if hit[0] is not self.nodes or hit[1] is not self.fabric or hit[2] != len(self.nodes):
            hit[:] = [self.nodes, self.fabric, len(self.nodes), build()]
        return hit[3]

    def keep(self, name: str, table) -> None:
        """Take ``table`` as what :meth:`derive` would build for ``name``
        from the nodes and fabric as they are now (a compiled inventory's
        entry carries its tables: :mod:`slurmtopo.inventory.cache`)."""
        self.derived.get(name, list)[:] = [self.nodes, self.fabric, len(self.nodes), table]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, name: str) -> Node:
        return self.nodes[name]

    @property
    def gpu_count(self) -> int:
        return sum(n.hardware.gpu_count for n in self.nodes.values())


# --------------------------------------------------------------------------
# Cluster state: which nodes and GPUs are free right now.

#: Slurm node states in which a node can take new work
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing", "planned"})
#: the flag of an inventory node that Slurm's node list lacks (it is "down")
UNKNOWN_TO_SLURM = "unknown_to_slurm"


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str = "idle"  # Slurm base state, lower case
    busy_gpus: frozenset = frozenset()  # NVML indices held by running jobs
    #: flags such as drain, maint, reserved, not_responding
    flags: frozenset = frozenset()
    #: True when a job holds the node exclusively (no GPU is free)
    exclusive: bool = False

    @property
    def usable(self) -> bool:
        if self.state not in USABLE_STATES:
            return False
        return not (self.flags & {"drain", "draining", "drained", "down", "fail", "maint",
                                  "not_responding", "power_down", "powered_down",
                                  "reboot_requested", "reserved"})


@dataclass
class ClusterState:
    """Free/busy view of the cluster; nodes not listed are idle and whole."""

    nodes: Dict[str, NodeState] = field(default_factory=dict)
    source: Optional[str] = None

    def of(self, name: str) -> NodeState:
        st = self.nodes.get(name)
        return st if st is not None else NodeState(name)

    def free_gpus(self, node: Node) -> Tuple[int, ...]:
        """NVML indices of GPUs on ``node`` that a new job may use."""
        return free_gpus_of(node, self.nodes.get(node.name))


def free_gpus_of(node: Node, st: Optional[NodeState]) -> Tuple[int, ...]:
    """NVML indices of GPUs on ``node`` that a new job may use when the
    node is in state ``st`` (None: not listed, so idle and whole)."""
    if st is None:
        return tuple(g.index for g in node.gpus)
    if not st.usable or st.exclusive:
        return ()
    return tuple(g.index for g in node.gpus if g.index not in st.busy_gpus)


# --------------------------------------------------------------------------
# Placement result: the rank map.


class RankSlot(NamedTuple):
    """Where one global rank runs.

    A typed named tuple rather than a frozen dataclass: a plan holds one per
    rank (32,768 for the largest jobs, built for every proposal the planner
    weighs), and a frozen dataclass sets its seven fields one by one
    through ``object.__setattr__``; a tuple is built in one step (about 3x
    faster) and is as immutable."""

    rank: int
    host: str
    gpu: int  # NVML index on host
    local_rank: int
    nics: Tuple[str, ...] = ()  # closest compute NIC(s), best first
    cpus: Tuple[int, ...] = ()  # NUMA-local CPU (thread) ids
    numa_node: Optional[int] = None


@dataclass
class Placement:
    """A complete rank map for one job (gang: every rank has a slot)."""

    slots: Tuple[RankSlot, ...]  # indexed by global rank
    groups: Dict[str, List[List[int]]]
    hosts: Tuple[str, ...]  # node order (SLURM_HOSTFILE order of first use)
    notes: Tuple[str, ...] = ()  # decisions worth telling the user
    #: the per-host index (:meth:`by_host`), kept until slots or hosts change
    derived: Derived = derived_field()

    @property
    def world_size(self) -> int:
        return len(self.slots)

    def by_host(self) -> Dict[str, List[RankSlot]]:
        """host -> its slots by local rank, hosts in placement order (then any
        host a slot names that ``hosts`` lacks). Built in one pass and kept
        until ``slots`` or ``hosts`` is replaced: per-host questions asked
        rank by rank would otherwise cost a pass over all ranks each."""
        hit = self.derived.get("by_host", lambda: [None, None, None, None])
        if hit[0] is self.slots and hit[1] is self.hosts:
            return hit[2]
        index: Dict[str, List[RankSlot]] = {h: [] for h in self.hosts}
        for s in self.slots:
            index.setdefault(s.host, []).append(s)
        for mates in index.values():
            mates.sort(key=lambda s: s.local_rank)
        hit[:] = [self.slots, self.hosts, index, {h: i for i, h in enumerate(index)}]
        return index

    def node_ranks(self) -> Dict[str, int]:
        """host -> its index in the host order of :meth:`by_host` (Slurm's
        and torchrun's NODE_RANK); kept with that index."""
        self.by_host()
        return self.derived.get("by_host", list)[3]

    def ranks_on(self, host: str) -> List[RankSlot]:
        return list(self.by_host().get(host, ()))

    def gpus_on(self, host: str) -> List[int]:
        """GPUs used on ``host`` ordered by local rank (CUDA_VISIBLE_DEVICES order)."""
        return [s.gpu for s in self.ranks_on(host)]
