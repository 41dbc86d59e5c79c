"""Seeded, reproducible benchmark scenarios: clusters, busy states, jobs.

A scenario is named by four values, ``shape:nodes:busy%:seed`` (its *id*,
e.g. ``hgx-fattree:256:60:1003``); :func:`build` turns an id into the same
inventory, cluster state and job on every machine and every Python
version (``random.Random`` seeded with a string is stable). So the worst
scenarios of a report can be rerun one by one::

    python -m bench.quality --scenario hgx-fattree:256:60:1003

Clusters (:data:`SHAPES`) are built in memory from the presets, so that
building a 1,024-node cluster costs milliseconds; the inventory *loader* is
timed separately (bench/speed.py).
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from slurmtopo.files.yamlio import dump_yaml
from slurmtopo.inventory.model import (Block, ClusterState, Fabric, Hardware, Inventory, Node,
                                       NodeState, NvlinkDomain, Switch)
from slurmtopo.inventory.presets import preset
from slurmtopo.inventory.state import state_dict

# --------------------------------------------------------------------------
# fabrics


def fat_tree_fabric(hosts: Sequence[str], leaf_size: int = 16, pod_leaves: int = 8,
                    levels: Optional[int] = None, prefix: str = "",
                    spines_per_pod: int = 2, cores: int = 2,
                    link_gbps: Optional[float] = 400.0) -> Tuple[Switch, ...]:
    """Switches of a fat tree over ``hosts`` (in the given order).

    ``leaf_size`` hosts per leaf switch. Two levels (leaves under
    ``spines_per_pod`` spines) while there are at most ``pod_leaves``
    leaves; beyond that, or when ``levels=3``, leaves are grouped in pods of
    ``pod_leaves`` with their own spines, and ``cores`` core switches sit
    over every spine. Every leaf has several parents, as in a real fat tree.
    """
    leaves: List[Switch] = []
    for i in range(0, len(hosts), leaf_size):
        leaves.append(Switch(name=f"{prefix}leaf{len(leaves) + 1:04d}",
                             nodes=tuple(hosts[i:i + leaf_size]), link_gbps=link_gbps))
    if levels is None:
        levels = 2 if len(leaves) <= pod_leaves else 3
    if levels < 2:
        return tuple(leaves)
    if levels == 2:
        spines = tuple(Switch(name=f"{prefix}spine{s + 1}", switches=tuple(l.name for l in leaves))
                       for s in range(spines_per_pod))
        return tuple(leaves) + spines
    spines: List[Switch] = []
    for p in range(0, len(leaves), pod_leaves):
        pod = tuple(l.name for l in leaves[p:p + pod_leaves])
        for s in range(spines_per_pod):
            spines.append(Switch(name=f"{prefix}pod{p // pod_leaves + 1:03d}-spine{s + 1}",
                                 switches=pod))
    core = tuple(Switch(name=f"{prefix}core{c + 1}", switches=tuple(s.name for s in spines))
                 for c in range(cores))
    return tuple(leaves) + tuple(spines) + core


def _nodes(names: Sequence[str], hw: Hardware, type_name: str,
           domain: Optional[NvlinkDomain] = None) -> Dict[str, Node]:
    return {n: Node(name=n, hardware=hw, type=type_name, nvlink_domain=domain) for n in names}


def _inventory(nodes: Dict[str, Node], switches=(), blocks=(), block_sizes=(),
               source: str = "bench") -> Inventory:
    types = {}
    for n in nodes.values():
        if n.type is not None:
            types.setdefault(n.type, n.hardware)
    return Inventory(nodes=nodes, fabric=Fabric(switches=tuple(switches), blocks=tuple(blocks),
                                                block_sizes=tuple(block_sizes)),
                     node_types=types, source=source)


def _homogeneous(type_name: str, prefix: str, nodes: int, leaf_size: int = 16,
                 pod_leaves: int = 8, levels: Optional[int] = None) -> Inventory:
    width = max(3, len(str(nodes)))
    names = [f"{prefix}{i + 1:0{width}d}" for i in range(nodes)]
    hw = preset(type_name)
    return _inventory(_nodes(names, hw, type_name),
                      fat_tree_fabric(names, leaf_size, pod_leaves, levels),
                      source=f"bench:{type_name}x{nodes}")


def hgx_fattree(nodes: int) -> Inventory:
    """HGX H100 nodes (NVSwitch), 16 per leaf; 2 levels up to 128 nodes,
    3 levels (pods of 8 leaves under a core) beyond."""
    return _homogeneous("hgx-h100-8", "gpu", nodes)


#: what the admin of :func:`hgx_oversubscribed` tells the cost model: the
#: leaf switches' uplinks are 2:1 oversubscribed, so a ring whose hosts meet
#: above a leaf gets half of its NIC share (through a spine or a core alike)
OVERSUBSCRIPTION = {"NET_L1": 2, "NET_L2": 2}


def hgx_oversubscribed(nodes: int) -> Inventory:
    """The fat tree of :func:`hgx_fattree` (2 levels up to 128 nodes, 3
    beyond) with 2:1 oversubscribed leaf uplinks, told to the planner in
    the inventory's ``cost:`` block: a TP group split over two partly
    busy nodes is twice as slow across the spine as under one leaf
    (issue 27)."""
    return replace(hgx_fattree(nodes), cost={"oversubscription": dict(OVERSUBSCRIPTION)},
                   source=f"bench:hgx-h100-8x{nodes}-oversubscribed")


def pcie_pairs(nodes: int) -> Inventory:
    """8x A6000 PCIe with NVLink bridges on pairs, 16 nodes a leaf."""
    return _homogeneous("pcie-a6000-8-nvlink-pairs", "pcie", nodes)


def dgx1_cubemesh(nodes: int) -> Inventory:
    """DGX-1 V100 hybrid cube-mesh, 16 nodes a leaf."""
    return _homogeneous("dgx1-v100", "dgx", nodes)


def _nvl72_racks(racks: int, into: Dict[str, Node]) -> List[Block]:
    """``racks`` GB200 NVL72 racks of 18 trays (``nvl001t01``...), each one
    NVLink domain, added to ``into``; their Slurm blocks."""
    hw = preset("gb200-nvl72-tray")
    blocks = []
    for r in range(racks):
        dom = NvlinkDomain(cluster_uuid=f"5b1a2c3d-0000-4000-8000-{r + 1:012x}", clique_id=1)
        rack = [f"nvl{r + 1:03d}t{t + 1:02d}" for t in range(18)]
        into.update(_nodes(rack, hw, "gb200-nvl72-tray", dom))
        blocks.append(Block(name=f"nvl72-r{r + 1:03d}", nodes=tuple(rack)))
    return blocks


def nvl72(nodes: int) -> Inventory:
    """GB200 NVL72 racks: 18 trays of 4 GPUs share one NVLink domain and
    one Slurm block; 2 leaves of 9 trays per rack, spines over all racks."""
    racks = max(1, nodes // 18)
    all_nodes: Dict[str, Node] = {}
    blocks = _nvl72_racks(racks, all_nodes)
    names = [n for b in blocks for n in b.nodes]
    switches = fat_tree_fabric(names, leaf_size=9, pod_leaves=64)
    return _inventory(all_nodes, switches, blocks, (18,), source=f"bench:nvl72x{racks}")


def nvl72_hgx(nodes: int) -> Inventory:
    """A cluster mixing rack-scale NVLink and HGX: half the nodes GB200
    NVL72 trays (racks of 18, each one NVLink domain and one Slurm block,
    as :func:`nvl72`), half HGX B200 nodes (8 GPUs on NVSwitch), all on one
    fat tree (9 trays or 16 HGX nodes a leaf, spines over everything). A
    job's TP or EP group must stay in a rack or a node; the GPU model
    proposals must not mix the two where one holds the job."""
    racks = max(1, nodes // 2 // 18)
    hgx = preset("hgx-b200-8")
    all_nodes: Dict[str, Node] = {}
    blocks = _nvl72_racks(racks, all_nodes)
    leaves: List[Switch] = []
    for rack in (b.nodes for b in blocks):
        for i in (0, 9):
            leaves.append(Switch(name=f"leaf{len(leaves) + 1:04d}", nodes=tuple(rack[i:i + 9]),
                                 link_gbps=400.0))
    hosts = [f"b200n{i + 1:03d}" for i in range(max(1, nodes - racks * 18))]
    all_nodes.update(_nodes(hosts, hgx, "hgx-b200-8"))
    for i in range(0, len(hosts), 16):
        leaves.append(Switch(name=f"leaf{len(leaves) + 1:04d}", nodes=tuple(hosts[i:i + 16]),
                             link_gbps=400.0))
    spines = tuple(Switch(name=f"spine{s + 1}", switches=tuple(l.name for l in leaves))
                   for s in range(2))
    return _inventory(all_nodes, tuple(leaves) + spines, blocks, (18,),
                      source=f"bench:nvl72-hgxx{nodes}")


#: node types of the mixed cluster, in hostname order, with their share
MIXED_TYPES = (("hgx-h100-8", "h100n", 0.5), ("hgx-a100-8", "a100n", 0.25),
               ("pcie-l40s-8", "l40sn", 0.125), ("dgx1-v100", "v100n", 0.125))


def mixed(nodes: int) -> Inventory:
    """Four node types (H100 and A100 NVSwitch, L40S PCIe-only, DGX-1) on
    their own leaves of one fat tree; hostname prefixes sort by type."""
    all_nodes: Dict[str, Node] = {}
    names: List[str] = []
    left = nodes
    for i, (tname, prefix, share) in enumerate(MIXED_TYPES):
        k = left if i == len(MIXED_TYPES) - 1 else max(1, round(nodes * share))
        left -= k
        part = [f"{prefix}{j + 1:03d}" for j in range(k)]
        all_nodes.update(_nodes(part, preset(tname), tname))
        names.extend(part)
    return _inventory(all_nodes, fat_tree_fabric(names, 16, 8), source=f"bench:mixedx{nodes}")


def fattree3(nodes: int) -> Inventory:
    """The speed benchmark's cluster: HGX H100 (8 GPUs a node) in a
    3-level fat tree, 32 nodes a leaf, 8 leaves a pod, cores over the pods."""
    return _homogeneous("hgx-h100-8", "n", nodes, leaf_size=32, pod_leaves=8, levels=3)


def l40s(nodes: int) -> Inventory:
    """8x L40S PCIe (no NVLink; sockets joined by UPI), 16 nodes a leaf."""
    return _homogeneous("pcie-l40s-8", "l40s", nodes)


def h100_nvl(nodes: int) -> Inventory:
    """8x H100 NVL PCIe with NVLink pairs and a 400G NIC per pair."""
    return _homogeneous("pcie-h100-nvl-8", "nvl", nodes)


#: shape name -> (builder(nodes), node counts used by the quality benchmark,
#: node counts of the --quick pass)
SHAPES: Dict[str, Tuple[Callable[[int], Inventory], Tuple[int, ...], Tuple[int, ...]]] = {
    "hgx-fattree": (hgx_fattree, (16, 64, 256, 1024), (16, 64)),
    "pcie-pairs": (pcie_pairs, (16, 64), (16,)),
    "dgx1-cubemesh": (dgx1_cubemesh, (16, 64), (16,)),
    "nvl72": (nvl72, (36, 144), (36,)),
    "mixed": (mixed, (64, 256), (64,)),
    # GB200 NVL72 racks beside HGX B200 nodes on one fat tree (issue 25)
    "nvl72-hgx": (nvl72_hgx, (72, 144), (72,)),
    # the shapes where an independent check found the planner losing: big
    # jobs on fat trees fragmented by partial-node jobs (lopsided splits),
    # EP=8 on NVL72 racks, pure data parallel on L40S, TP=4 on H100 NVL
    "hgx-lopsided": (hgx_fattree, (256,), (64,)),
    "nvl72-ep8": (nvl72, (288,), (72,)),
    "l40s-dp": (l40s, (16,), (16,)),
    "h100nvl-tp4": (h100_nvl, (16,), (16,)),
    # TP 8 on half the GPUs of a fat tree with 2:1 leaf uplinks: the split
    # TP groups must pair partly busy nodes under one leaf (issue 27)
    "hgx-oversub": (hgx_oversubscribed, (64, 256), (64,)),
    "fattree3": (fattree3, (), ()),
}

#: shapes whose busy GPUs come mostly from partial-node jobs (whole-node
#: jobs, partial-node jobs, single GPUs as shares of the busy GPUs)
BUSY_MIX: Dict[str, Tuple[float, float]] = {"hgx-lopsided": (0.25, 0.65)}

FRAGMENTATION = (0.0, 0.3, 0.6, 0.85)


@lru_cache(maxsize=32)
def cluster(shape: str, nodes: int) -> Inventory:
    """The (cached, deterministic) inventory of a shape at a size."""
    try:
        builder = SHAPES[shape][0]
    except KeyError:
        raise ValueError(f"unknown shape {shape!r} (known: {', '.join(SHAPES)})") from None
    return builder(nodes)


# --------------------------------------------------------------------------
# cluster states


def busy_state(inv: Inventory, busy: float, rng: random.Random,
               whole_share: float = 0.6, partial_share: float = 0.3,
               down_share: float = 0.01) -> ClusterState:
    """A fragmented state with about ``busy`` of the GPUs unavailable.

    Realistic patterns, in this order:

    * about 1% of nodes drained or down (when busy > 0);
    * ``whole_share`` of the busy GPUs: whole-node jobs of 1-32 nodes, each
      on consecutive free nodes in hostname order from a random start (what
      Slurm's default selection does over time);
    * ``partial_share``: jobs of 1, 2 or 4 GPUs on a random node, taking
      its lowest free GPU indices (Slurm's GRES order);
    * the rest: single GPUs at random indices on random nodes.
    """
    names = list(inv.nodes)
    total = inv.gpu_count
    gpn = {n: inv.nodes[n].hardware.gpu_count for n in names}
    target = int(round(busy * total))
    states: Dict[str, NodeState] = {}
    used: Dict[str, set] = {n: set() for n in names}
    taken = 0
    if target <= 0:
        return ClusterState(nodes={}, source="bench")

    def whole_free(n: str) -> bool:
        return n not in states and not used[n]

    # drained / down nodes
    n_down = int(round(down_share * len(names)))
    if n_down == 0 and busy >= 0.3 and len(names) >= 32:
        n_down = 1
    for n in rng.sample(names, n_down):
        if rng.random() < 0.5:
            states[n] = NodeState(n, state="idle", flags=frozenset({"drain"}))
        else:
            states[n] = NodeState(n, state="down")
        taken += gpn[n]

    # whole-node multi-node jobs
    goal = taken + whole_share * target
    sizes, weights = (1, 2, 4, 8, 16, 32), (30, 20, 20, 15, 10, 5)
    guard = 0
    while taken < goal and guard < 10 * len(names):
        guard += 1
        k = rng.choices(sizes, weights)[0]
        k = max(1, min(k, int(math.ceil((goal - taken) / max(gpn.values())))))
        start = rng.randrange(len(names))
        got = []
        i = start
        for _ in range(len(names)):
            n = names[i % len(names)]
            i += 1
            if whole_free(n):
                got.append(n)
                if len(got) == k:
                    break
            elif got:
                # Slurm prefers consecutive nodes; a gap ends this job's run
                break
        for n in got:
            states[n] = NodeState(n, state="allocated", exclusive=True)
            taken += gpn[n]

    def free_idx(n: str) -> List[int]:
        return [g for g in range(gpn[n]) if g not in used[n]]

    open_nodes = [n for n in names if n not in states]

    # partial-node jobs: lowest free indices of a random node
    goal = min(target, taken + partial_share * target)
    guard = 0
    while taken < goal and open_nodes and guard < 20 * len(names):
        guard += 1
        k = rng.choices((1, 2, 4), (30, 30, 40))[0]
        n = rng.choice(open_nodes)
        free = free_idx(n)
        if len(free) < k:
            continue
        for g in free[:k]:
            used[n].add(g)
        taken += k

    # scattered single GPUs
    guard = 0
    while taken < target and open_nodes and guard < 50 * len(names):
        guard += 1
        n = rng.choice(open_nodes)
        free = free_idx(n)
        if not free:
            continue
        used[n].add(rng.choice(free))
        taken += 1

    for n in open_nodes:
        if used[n]:
            full = len(used[n]) == gpn[n]
            states[n] = NodeState(n, state="allocated" if full else "mixed",
                                  busy_gpus=frozenset(used[n]))
    return ClusterState(nodes=dict(sorted(states.items())), source="bench")


def free_gpus(inv: Inventory, state: ClusterState) -> int:
    return sum(len(state.free_gpus(n)) for n in inv)


def free_by_node(inv: Inventory, state: ClusterState) -> Dict[str, int]:
    return {n.name: len(state.free_gpus(n)) for n in inv}


def dump_state(state: ClusterState) -> str:
    """A busy state as the state snapshot ``--state FILE`` reads (YAML), for
    the benchmarks that plan through the command line; the package writes
    its snapshots from :func:`slurmtopo.inventory.state.state_dict` itself
    (``slurmtopo state``), so this lives with the benchmarks that need it."""
    return dump_yaml(state_dict(state))


# --------------------------------------------------------------------------
# jobs


@dataclass(frozen=True)
class Job:
    """A job in plain values; :meth:`request` makes the JobRequest."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    #: bytes of every collective of a kind (the cost model's per-kind size)
    message_bytes: Tuple[Tuple[str, int], ...] = ()
    model: str = ""  # a short description of the model
    #: the model as ``--model`` text (empty: the cost model's default)
    model_spec: str = ""

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def layout(self):
        from slurmtopo.job.groups import Layout
        return Layout(tp=self.tp, cp=self.cp, ep=self.ep, pp=self.pp, dp=self.dp,
                      world=self.world)

    def request(self, **extra):
        from slurmtopo.job.request import JobRequest
        kw = dict(layout=self.layout())
        if self.message_bytes:
            kw["message_bytes"] = dict(self.message_bytes)
        if self.model_spec:
            from slurmtopo.cost.model_spec import parse_model
            from slurmtopo.job.workload import Workload
            kw["workload"] = Workload(model=parse_model(self.model_spec))
        kw.update(extra)
        return JobRequest(**kw)

    def describe(self) -> str:
        parts = [f"tp{self.tp}"]
        for name in ("cp", "ep", "pp"):
            if getattr(self, name) > 1:
                parts.append(f"{name}{getattr(self, name)}")
        parts.append(f"dp{self.dp}")
        return "-".join(parts) + f" ({self.world} GPUs)"

    def as_dict(self) -> Dict[str, object]:
        return {"tp": self.tp, "cp": self.cp, "ep": self.ep, "pp": self.pp, "dp": self.dp,
                "world": self.world, "message_bytes": dict(self.message_bytes),
                "model": self.model, "model_spec": self.model_spec}


#: (hidden size, layers, parameters in billions) of the models jobs train
MODELS = ((4096, 32, 8), (5120, 40, 13), (8192, 80, 70), (12288, 96, 175))


def job_model(tp: int, cp: int, ep: int, pp: int, dp: int, rng: random.Random,
              ) -> Tuple[str, str]:
    """The model a job trains, as ``--model`` text (and a short
    description): a transformer of a random size from :data:`MODELS`, bf16,
    micro-batches of one sequence of 4k or 8k tokens, a global batch of
    1-4M tokens, so ``mb`` micro-batches a step per data-parallel replica;
    MoE jobs route to 2 experts. The cost model's step
    (:func:`slurmtopo.cost.step.step_calls`) counts every collective of the
    step from it, with the kinds weighted as in training."""
    hidden, layers, params_b = rng.choice(MODELS)
    seq = rng.choice((4096, 8192))
    tokens = rng.choice((1, 2, 4)) * 2**20
    mb = max(1, math.ceil(tokens / seq / dp))
    spec = (f"params={params_b}e9,layers={layers},hidden={hidden},seq_len={seq},"
            f"micro_batches={mb}" + (",top_k=2" if ep > 1 else ""))
    desc = f"{params_b}B h{hidden} L{layers} s{seq}, {tokens // 2**20}M-token batch, {mb} mb"
    return spec, desc


def make_job(inv: Inventory, state: ClusterState, rng: random.Random,
             max_share: float = 0.9, min_world: int = 8) -> Job:
    """A random layout that fits in the free GPUs: TP 1-8, CP 1-2, EP
    1-16 (MoE on a third of the jobs), PP 1-16, DP to fill a job size drawn
    log-uniformly between the model size and ``max_share`` of the free
    GPUs (for 30% of the jobs: uniformly from a quarter of the free GPUs
    up, big jobs), usually rounded to whole 8-GPU nodes. TP is at most 8 (on NVL72
    a TP group of 8 spans two trays of one NVLink domain)."""
    free = free_gpus(inv, state)
    cap = max(1, int(max_share * free))
    for _ in range(200):
        tp = rng.choices((1, 2, 4, 8), (10, 15, 25, 50))[0]
        cp = rng.choices((1, 2), (80, 20))[0]
        pp = rng.choices((1, 2, 4, 8, 16), (30, 25, 20, 15, 10))[0]
        ep = rng.choice((2, 4, 8, 16)) if rng.random() < 0.35 else 1
        model = tp * cp * pp
        lo = max(model, min_world)
        if lo > cap:
            continue
        if rng.random() < 0.3:  # a big job: a quarter to nine tenths of the free GPUs
            target = rng.uniform(max(lo, 0.25 * free), max(lo, cap))
        else:  # most jobs are small: log-uniform from the model size up
            target = math.exp(rng.uniform(math.log(lo), math.log(cap)))
        dp = max(1, int(target // model))
        # expert parallelism must divide dp*cp (expert_tp = tp); most real
        # jobs take whole nodes, so usually round to a multiple of 8 GPUs
        unit = ep // math.gcd(ep, cp)
        if model * dp >= 8 and rng.random() < 0.8:
            step = 8 // math.gcd(8, model)
            unit = unit * step // math.gcd(unit, step)
        dp = max(unit, dp - dp % unit)
        if model * dp > cap or model * dp < min_world:
            continue
        spec, desc = job_model(tp, cp, ep, pp, dp, rng)
        return Job(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, model_spec=spec, model=desc)
    # nothing fits the constraints: the smallest job that does
    return Job(tp=1, dp=max(1, min(min_world, cap)), message_bytes=(("dp", 1 << 30),),
               model="fallback")


# --------------------------------------------------------------------------
# scenarios


_ID_RE = re.compile(r"^(?P<shape>[a-z0-9-]+):(?P<nodes>\d+):(?P<busy>\d+):(?P<seed>-?\d+)$")


@dataclass(frozen=True)
class ScenarioSpec:
    shape: str
    nodes: int
    busy_pct: int  # percent of GPUs busy
    seed: int

    @property
    def id(self) -> str:
        return f"{self.shape}:{self.nodes}:{self.busy_pct}:{self.seed}"

    @classmethod
    def parse(cls, text: str) -> "ScenarioSpec":
        m = _ID_RE.match(text.strip())
        if not m:
            raise ValueError(f"bad scenario id {text!r}; expected shape:nodes:busy%:seed, "
                             "e.g. hgx-fattree:256:60:1003")
        if m["shape"] not in SHAPES:
            raise ValueError(f"unknown shape {m['shape']!r} (known: {', '.join(SHAPES)})")
        return cls(m["shape"], int(m["nodes"]), int(m["busy"]), int(m["seed"]))


@dataclass
class Scenario:
    spec: ScenarioSpec
    inv: Inventory
    state: ClusterState
    job: Job
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.spec.id


def build(spec) -> Scenario:
    """The scenario of an id (string or :class:`ScenarioSpec`): same
    cluster, state and job every time."""
    if isinstance(spec, str):
        spec = ScenarioSpec.parse(spec)
    inv = cluster(spec.shape, spec.nodes)
    rng = random.Random(f"slurmtopo-bench/{spec.id}")
    whole, partial = BUSY_MIX.get(spec.shape, (0.6, 0.3))
    state = busy_state(inv, spec.busy_pct / 100.0, rng, whole_share=whole, partial_share=partial)
    maker = JOB_MAKERS.get(spec.shape, make_job)
    job = maker(inv, state, rng)
    return Scenario(spec=spec, inv=inv, state=state, job=job)


def _fixed_job(tps: Sequence[int], ep: int, rng: random.Random, inv: Inventory,
               state: ClusterState, big: bool) -> Job:
    """A job of the issue's shapes: TP from ``tps``, EP ``ep``, no PP or
    CP, DP filling a share of the free GPUs (a quarter to 90% when
    ``big``, else 16 to 90% log-uniformly), whole multiples of 8 GPUs."""
    free = free_gpus(inv, state)
    tp = rng.choice(tps)
    cap = int(0.9 * free)
    unit = math.lcm(8, tp * ep)  # EP divides DP; whole 8-GPU nodes
    lo = unit
    if cap < lo:
        return make_job(inv, state, rng)
    target = rng.uniform(max(lo, 0.25 * free), cap) if big else \
        math.exp(rng.uniform(math.log(max(lo, 16)), math.log(max(cap, lo))))
    world = max(lo, int(target) // unit * unit)
    dp = world // tp
    spec, desc = job_model(tp, 1, ep, 1, dp, rng)
    return Job(tp=tp, ep=ep, dp=dp, model_spec=spec, model=desc)


def _half_cluster_tp8(inv: Inventory, state: ClusterState, rng: random.Random) -> Job:
    """TP 8, DP filling half of the cluster's GPUs (at most 90% of the free
    ones, whole nodes): TP 8 x DP 32 on 64 nodes, x DP 128 on 256. At 40%
    busy that is more whole nodes than are free, so some TP groups split
    over partly busy nodes (issue 27)."""
    world = min(inv.gpu_count // 2, int(0.9 * free_gpus(inv, state)) // 8 * 8)
    if world < 8:
        return make_job(inv, state, rng)
    spec, desc = job_model(8, 1, 1, 1, world // 8, rng)
    return Job(tp=8, dp=world // 8, model_spec=spec, model=desc)


#: shape -> job generator, for the shapes that test one kind of job
JOB_MAKERS: Dict[str, Callable[[Inventory, ClusterState, random.Random], Job]] = {
    "hgx-lopsided": lambda inv, st, rng: _fixed_job((8,), 1, rng, inv, st, True),
    "nvl72-ep8": lambda inv, st, rng: _fixed_job((1, 4), 8, rng, inv, st, True),
    "l40s-dp": lambda inv, st, rng: _fixed_job((1,), 1, rng, inv, st, False),
    "h100nvl-tp4": lambda inv, st, rng: _fixed_job((4,), 1, rng, inv, st, False),
    "hgx-oversub": _half_cluster_tp8,
}


def quality_specs(per_cell: int, quick: bool = False, base_seed: int = 1000,
                  shapes: Optional[Sequence[str]] = None,
                  fragmentation: Sequence[float] = FRAGMENTATION) -> List[ScenarioSpec]:
    """``per_cell`` scenarios for every (shape, size, busy level)."""
    out = []
    for shape, (_, sizes, quick_sizes) in SHAPES.items():
        if shapes is not None and shape not in shapes:
            continue
        for nodes in (quick_sizes if quick else sizes):
            for busy in fragmentation:
                for i in range(per_cell):
                    out.append(ScenarioSpec(shape, nodes, int(round(busy * 100)), base_seed + i))
    return out
