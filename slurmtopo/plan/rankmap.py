"""The rank map as files, and the environment each rank is started with.

A :class:`~slurmtopo.inventory.model.Placement` says where every rank runs. This
module turns it into what people and programs read (``rankmap.json``, the
CSV) and into the environment a launcher must give each rank so that the
framework actually uses the GPU, CPUs and NICs the planner chose. All pure:
no files, no Slurm. :mod:`slurmtopo.binding` applies it at job start,
:mod:`slurmtopo.sbatch` writes it into the batch script.

Why the environment looks the way it does:

* ``CUDA_VISIBLE_DEVICES`` lists *all* GPUs the job uses on a host, in local
  rank order, so ``torch.cuda.set_device(LOCAL_RANK)`` picks the planned GPU
  and the other local GPUs stay visible for CUDA peer-to-peer / NVLink
  (hiding peers would push intra-node traffic through host memory).
* Its numbers depend on the device cgroup: without ``ConstrainDevices`` they
  are the node's own GPU numbers (a job holding GPUs 4,5 writes ``4,5``);
  with it, CUDA only sees the allocated GPUs and numbers them from 0 in PCI
  order, so GPU 5 of an allocation {4, 5} is device ``1``.
  :func:`visible_devices` does both.
* ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA number GPUs like NVML and
  Slurm do (CUDA's default puts the fastest GPU first).
* ``NCCL_IB_HCA`` names the rails exactly (``=`` prefix: ``mlx5_1`` would
  otherwise also match ``mlx5_10``), in rail order, so every rank uses the
  same rail numbering and NCCL never picks a storage NIC.
"""
from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.topology import rail_optimised
from slurmtopo.inventory.model import (MAX_CPUS, Hardware, Inventory, Placement, RankSlot,
                                       format_cpulist, parse_cpulist)
from slurmtopo.job.groups import MAX_WORLD, rank_to_group
from slurmtopo.show.termsafe import printable

RANKMAP_VERSION = 1


# --------------------------------------------------------------------------
# checks


#: a GPU index on one node is below this (NVML numbers a node's GPUs from 0;
#: the largest nodes have 8 to 72): a plan or rank map with another is
#: refused before anything is built from it (30,000,000 was a MemoryError)
MAX_GPU_INDEX = 1024
#: the longest host name read from a plan (Slurm's node names are far shorter)
MAX_HOST_NAME = 256


def bad_host_name(name: object) -> Optional[str]:
    """Why ``name`` is no host name slurmtopo writes or reads back (None
    when it is one): Slurm's hostlist characters (``[``, ``]``, ``,``) or
    blanks and control characters in it would be read as several hosts or
    none."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_HOST_NAME:
        return f"not a name of 1 to {MAX_HOST_NAME} characters"
    if any(c in "[],@" or c.isspace() or not c.isprintable() for c in name):
        return "holds a character no Slurm node name has ([, ], a comma, a blank, a control)"
    return None


def check_read_hosts(placement: Placement, where: str) -> None:
    """The host names of a plan or rank map read back (someone else may
    have written it): each a name Slurm could have (:func:`bad_host_name`),
    or a SlurmtopoError naming it."""
    for h in dict.fromkeys([*placement.hosts, *(s.host for s in placement.slots)]):
        why = bad_host_name(h)
        if why:
            raise SlurmtopoError(f"{where}: host {printable(h, 40)}: {why}")


def check_placement(placement: Placement) -> None:
    """Raise SlurmtopoError unless ranks are 0..W-1 and, on every host, local
    ranks are 0..k-1 on k distinct GPUs (what a launcher relies on). Once
    per placement (kept until its slots or hosts change): each output
    asks again."""
    done = placement.derived.get("rankmap.checked", lambda: [None, None])
    if done[0] is placement.slots and done[1] is placement.hosts:
        return

    if len(placement.slots) > MAX_WORLD:
        raise SlurmtopoError(f"rank map: {len(placement.slots):,} ranks, more than the "
                             f"{MAX_WORLD:,} slurmtopo lays out")
    for i, s in enumerate(placement.slots):
        if s.rank != i:
            raise SlurmtopoError(f"rank map: slot {i} holds rank {s.rank}; ranks must be 0..W-1 "
                                 "in order")
        if not 0 <= s.gpu < MAX_GPU_INDEX:
            raise SlurmtopoError(f"rank map: rank {i} has GPU index {s.gpu}, not one of a "
                                 f"node's (0 to {MAX_GPU_INDEX - 1})")
        if s.numa_node is not None and not -1 <= s.numa_node < MAX_CPUS:
            raise SlurmtopoError(f"rank map: rank {i} has NUMA node {s.numa_node}")

    for host, slots in placement.by_host().items():
        lrs = [s.local_rank for s in slots]
        if lrs != list(range(len(slots))):
            raise SlurmtopoError(f"rank map: local ranks on {host} are {lrs}, expected "
                                 f"0..{len(slots) - 1}")
        gpus = [s.gpu for s in slots]
        if len(set(gpus)) != len(gpus):
            raise SlurmtopoError(f"rank map: two ranks share a GPU on {host}: {gpus}")
    done[:] = [placement.slots, placement.hosts]


def _hosts(placement: Placement) -> List[str]:
    """Hosts in placement order, then any host a slot names that the order
    lacks (defensive: hosts should list them all)."""
    return list(placement.by_host())


def node_ranks(placement: Placement) -> Dict[str, int]:
    """host -> its index in the placement's host order (NODE_RANK)."""
    return placement.node_ranks()


# --------------------------------------------------------------------------
# rankmap.json


def layout_dict(layout) -> Dict[str, Any]:
    lay = layout.resolved()
    return {"world": lay.world, "tp": lay.tp, "cp": lay.cp, "ep": lay.ep, "pp": lay.pp,
            "dp": lay.dp, "expert_tp": lay.expert_tp, "order": lay.order,
            "convention": lay.convention}


def slot_dict(slot: RankSlot, node_rank: Optional[int] = None,
              local_world: Optional[int] = None, cpus: Optional[str] = None) -> Dict[str, Any]:
    """One rank's entry; ``cpus``: its cpulist when the caller has it."""
    d: Dict[str, Any] = {"rank": slot.rank, "host": slot.host, "gpu": slot.gpu,
                         "local_rank": slot.local_rank}
    if node_rank is not None:
        d["node_rank"] = node_rank
    if local_world is not None:
        d["local_world_size"] = local_world
    d["nics"] = list(slot.nics)
    d["cpus"] = format_cpulist(slot.cpus) if cpus is None else cpus
    if slot.numa_node is not None:
        d["numa_node"] = slot.numa_node
    return d


def rankmap_dict(placement: Placement, layout=None, extra: Optional[Mapping[str, Any]] = None
                 ) -> Dict[str, Any]:
    """The rank map as plain data: ``world_size``, ``hosts``, ``ranks`` (one
    object per rank: rank, host, gpu = NVML index, local_rank, nics, cpus as
    a kernel cpulist, ...) and ``groups`` exactly as ``slurmtopo groups
    --json`` prints them."""
    check_placement(placement)
    nr = node_ranks(placement)
    per_host = {h: len(v) for h, v in placement.by_host().items()}
    cpus = cpulists(placement)
    return _rankmap_fields(placement, layout, extra,
                           [slot_dict(s, nr[s.host], per_host[s.host], cpus[id(s.cpus)])
                            for s in placement.slots])


def _rankmap_fields(placement: Placement, layout, extra: Optional[Mapping[str, Any]],
                    ranks: Any, copy_groups: bool = True) -> Dict[str, Any]:
    """The rank map's keys in file order, ``ranks`` as given; ``groups``
    copied for a caller that keeps the data, shared when it is only
    encoded."""
    out: Dict[str, Any] = {"slurmtopo": "rankmap", "version": RANKMAP_VERSION,
                           "world_size": placement.world_size,
                           "hosts": list(node_ranks(placement))}
    if layout is not None:
        out["layout"] = layout_dict(layout)
    out["ranks"] = ranks
    out["groups"] = ({k: [list(g) for g in v] for k, v in placement.groups.items()}
                     if copy_groups else dict(placement.groups))
    if placement.notes:
        out["notes"] = list(placement.notes)
    if extra:
        out.update(extra)
    return out


def cpulists(placement: Placement) -> Dict[int, str]:
    """id(a slot's CPU tuple) -> its cpulist. A job has a few distinct CPU
    sets (one a NUMA node), shared by its slots, so no rank formats its
    own; keyed by identity because hashing a 100-CPU tuple per rank costs
    more than the formatting it saves. Kept with the placement while its
    slots (which hold those tuples) are the same: the rank map, the CSV,
    env.json and the script each ask."""
    hit = placement.derived.get("rankmap.cpulists", lambda: [None, None])
    if hit[0] is placement.slots:
        return hit[1]
    out: Dict[int, str] = {}
    for s in placement.slots:
        if id(s.cpus) not in out:
            out[id(s.cpus)] = format_cpulist(s.cpus)
    hit[:] = [placement.slots, out]
    return out


class _Encoded(dict):
    """value -> its JSON text, encoded the first time it is asked for."""

    def __missing__(self, key):
        text = self[key] = json.dumps(list(key) if isinstance(key, tuple) else key)
        return text


def rankmap_json(placement: Placement, layout=None,
                 extra: Optional[Mapping[str, Any]] = None) -> str:
    """``rankmap.json``: byte for byte ``dumps_rankmap(rankmap_dict(...))``,
    rendered without a dict per rank (one format string a rank; hosts, NIC
    lists and cpulists, which a job repeats, encoded once each): a
    16,384-rank map in a fifth of the time."""
    check_placement(placement)
    nr = node_ranks(placement)
    cpus = cpulists(placement)
    enc = _Encoded()
    tails: Dict[Tuple[int, int, Optional[int]], str] = {}  # nics, cpus, NUMA node
    lines: List[str] = [""] * placement.world_size
    # check_placement: ranks are 0..W-1 and local ranks 0..k-1, so each
    # one's text is looked up (made once) instead of formatted a rank
    numbers = list(map(str, range(placement.world_size)))
    for host, mates in placement.by_host().items():
        head = f'"host": {enc[host]}, "gpu": '
        node = f'"node_rank": {nr[host]}, "local_world_size": {len(mates)}, '
        for s in mates:
            key = (id(s.nics), id(s.cpus), s.numa_node)
            tail = tails.get(key)
            if tail is None:
                numa = "" if s.numa_node is None else f', "numa_node": {int(s.numa_node)}'
                tail = tails[key] = (f'"nics": {enc[s.nics]}, "cpus": {enc[cpus[id(s.cpus)]]}'
                                     f'{numa}}}')
            lines[s.rank] = (f'    {{"rank": {numbers[s.rank]}, {head}{int(s.gpu)}, '
                             f'"local_rank": {numbers[s.local_rank]}, {node}{tail}')
    return dumps_rankmap(_rankmap_fields(placement, layout, extra, lines, copy_groups=False),
                         ("ranks",))


def dumps_rankmap(data: Mapping[str, Any], rendered: Sequence[str] = ()) -> str:
    """JSON with one rank (and one group kind) per line: diffable, greppable,
    and still small for thousands of ranks. Lines are encoded by json's
    default (C) encoder, whose separators are the ones shown. The lists
    named in ``rendered`` hold their items' JSON text already, indented
    (four spaces)."""
    dumps = json.dumps
    lines = ["{"]
    items = list(data.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        k = dumps(key)
        if key in ("ranks", *rendered) and isinstance(value, list) and value:
            lines.append(f"  {k}: [")
            lines.append(",\n".join(value if key in rendered else
                                     ["    " + dumps(r) for r in value]))
            lines.append(f"  ]{comma}")
        elif key == "groups" and isinstance(value, dict) and value:
            lines.append(f"  {k}: {{")
            lines.append(",\n".join(f"    {dumps(kk)}: {dumps(v, separators=(',', ':'))}"
                                    for kk, v in value.items()))
            lines.append(f"  }}{comma}")
        else:
            lines.append(f"  {k}: {dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


#: the keys of one rank entry (slot_dict)
RANK_KEYS = frozenset({"rank", "host", "gpu", "local_rank", "node_rank", "local_world_size",
                       "nics", "cpus", "numa_node"})


def _int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not a whole number")
    return value


def _str(value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def placement_from_dict(data: Mapping[str, Any], where: str = "rank map") -> Placement:
    """Rebuild a Placement from :func:`rankmap_dict` data (groups optional).

    Raises SlurmtopoError naming what is wrong: the start-time step reads
    this from the batch script, where a hand edit is the likely culprit.
    """
    try:
        ranks = data["ranks"]
        slots = []
        for r in ranks:
            unknown = sorted(set(r) - RANK_KEYS)
            if unknown:
                raise ValueError(f"unknown key {unknown[0]!r}")
            cpus = r.get("cpus", "")
            cpus = parse_cpulist(cpus) if isinstance(cpus, str) else tuple(_int(c) for c in cpus)
            numa = r.get("numa_node")
            slots.append(RankSlot(rank=_int(r["rank"]), host=_str(r["host"]), gpu=_int(r["gpu"]),
                                  local_rank=_int(r["local_rank"]),
                                  nics=tuple(_str(n) for n in r.get("nics", ())), cpus=cpus,
                                  numa_node=None if numa is None else _int(numa)))
        hosts = tuple(data.get("hosts") or dict.fromkeys(s.host for s in slots))
        groups = {str(k): [[int(x) for x in g] for g in v]
                  for k, v in (data.get("groups") or {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise SlurmtopoError(f"{where}: malformed rank entry ({exc})") from None
    p = Placement(slots=tuple(slots), groups=groups, hosts=hosts,
                  notes=tuple(data.get("notes", ())))
    if "world_size" in data and int(data["world_size"]) != len(slots):
        raise SlurmtopoError(f"{where}: world_size {data['world_size']} but {len(slots)} ranks")
    check_read_hosts(p, where)
    check_placement(p)
    return p


# --------------------------------------------------------------------------
# CSV


#: text csv's writer leaves as it is (no delimiter, quote or line break)
_PLAIN_CELL = re.compile(r"[A-Za-z0-9_.:/+ -]*")


class _CsvCells(dict):
    """text -> its cell as :mod:`csv`'s writer writes it in a row (quoted
    when it holds a comma, a quote or a line break), encoded the first
    time it is asked for: a job repeats its hosts, NIC lists and cpulists
    rank after rank."""

    def __missing__(self, text: str) -> str:
        if _PLAIN_CELL.fullmatch(text):
            cell = text  # (a row of one empty field is the writer's only other case)
        else:
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerow([text])
            cell = buf.getvalue()[:-1]
        self[text] = cell
        return cell


def framework_extra(framework) -> Dict[str, Any]:
    """What a rank map adds for a non-Megatron framework's job (a
    :class:`slurmtopo.job.frameworks.common.FrameworkLayout`, or None: nothing):
    its name and its own groups by its own kind names (``dp_shard``,
    ``dp_replicate``, ...), as ``slurmtopo groups --framework NAME --json``
    prints them; ``groups`` stays the planner's (Megatron) kinds."""
    if framework is None:
        return {}
    return {"framework": framework.framework,
            "framework_groups": {k: [list(g) for g in v] for k, v in framework.groups.items()}}


@dataclass(frozen=True)
class RankDocuments:
    """A plan's documents for its ranks, each rendered when first asked
    (a command writes some of them, prints others): ``rankmap`` (the rank
    map as data: ``plan --json``), ``rankmap_json``, ``rankmap_csv`` and
    ``env_json`` (the files' contents). ``framework``: the job's layout
    by its framework's own kind names (a FrameworkLayout: the rank map's
    ``framework_groups``, the CSV's group columns), None when its kinds are
    the planner's; ``master_port``: the number, or the words saying how
    the job will set it."""

    placement: Placement
    layout: Any
    cluster: Optional[Inventory] = None
    framework: Any = None
    master_port: Any = "20000 + SLURM_JOB_ID % 10000"
    socket_ifname: Optional[str] = None

    @cached_property
    def rankmap(self) -> Dict[str, Any]:
        return rankmap_dict(self.placement, self.layout, framework_extra(self.framework))

    @cached_property
    def rankmap_json(self) -> str:
        return rankmap_json(self.placement, self.layout, framework_extra(self.framework))

    @cached_property
    def rankmap_csv(self) -> str:
        return rankmap_csv(self.placement,
                           self.framework.groups if self.framework is not None else None)

    @cached_property
    def env_json(self) -> str:
        return env_json(self.placement, self.cluster, self.master_port, self.socket_ifname)


def rankmap_csv(placement: Placement, groups: Optional[Mapping[str, Any]] = None) -> str:
    """One row per rank, with the index of the rank's group of every kind
    (``tp_group``, ``dp_group``, ...) so a spreadsheet can colour by group;
    ``groups``: the kinds to give (a framework's own, ``dp_shard_group``
    ...), default the placement's.

    Byte for byte what :mod:`csv`'s writer gives for the rows, written one
    format string a rank (numbers need no quoting; the text cells, which
    ranks share, are encoded once each): a 16,384-rank CSV in a third of
    the time."""
    check_placement(placement)
    nr = node_ranks(placement)
    groups = placement.groups if groups is None else groups
    kinds = list(groups)
    cells = _CsvCells()
    header = ["rank", "host", "node_rank", "gpu", "local_rank", "local_world_size",
              "numa_node", "nics", "cpus"] + [f"{k}_group" for k in kinds]
    cpus = cpulists(placement)
    columns = [rank_to_group(groups, k) for k in kinds]
    # check_placement: slot r holds rank r, and by_host lists every slot once
    rows: List[str] = [""] * placement.world_size
    tails: Dict[Tuple[int, int, Optional[int]], str] = {}  # NICs, CPUs, NUMA node
    for host, mates in placement.by_host().items():
        head = f"{cells[host]},{nr[host]},"
        size = f",{len(mates)},"
        for s in mates:
            key = (id(s.nics), id(s.cpus), s.numa_node)
            tail = tails.get(key)
            if tail is None:
                tail = tails[key] = (f"{'' if s.numa_node is None else s.numa_node},"
                                     f"{cells[' '.join(s.nics)]},{cells[cpus[id(s.cpus)]]}")
            rows[s.rank] = f"{s.rank},{head}{s.gpu},{s.local_rank}{size}{tail}"
    if kinds and rows:
        for k, c in zip(kinds, columns):
            if len(c) < len(rows):
                raise SlurmtopoError(f"rank map: the {k} groups hold {len(c)} ranks, not "
                                     f"{len(rows)}")
        # group indices are below the world size: each number's text made once
        numbers = list(map(str, range(max(map(max, columns)) + 1)))
        texts = [list(map(numbers.__getitem__, c)) for c in columns]
        rows = list(map(",".join, zip(rows, *texts)))
    return "\n".join([",".join(cells[h] for h in header)] + rows) + "\n"


# --------------------------------------------------------------------------
# environment


def visible_devices(gpus: Sequence[int], allocated: Optional[Iterable[int]],
                    constrained: bool) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a host whose ranks use ``gpus`` (NVML
    indices, local rank order).

    ``constrained``: the device cgroup hides unallocated GPUs, so CUDA numbers
    the ``allocated`` ones 0..n-1 in PCI (= NVML index) order. Raises
    SlurmtopoError when a planned GPU is not allocated.
    """
    gpus = [int(g) for g in gpus]
    if not constrained:
        return ",".join(map(str, gpus))
    alloc = sorted(set(int(a) for a in (allocated if allocated is not None else gpus)))
    pos = {g: i for i, g in enumerate(alloc)}
    missing = [g for g in gpus if g not in pos]
    if missing:
        raise SlurmtopoError(f"GPU(s) {missing} are not in the allocation "
                             f"{format_cpulist(alloc) or 'none'}")
    return ",".join(str(pos[g]) for g in gpus)


@dataclass(frozen=True)
class TopoFilePlan:
    """``NCCL_TOPO_FILE`` for a job: the variable, and the file the
    start-time step must write into the run directory (when the node type
    names no installed file)."""

    env: Dict[str, str]
    write: Optional[Tuple[str, Hardware]] = None  # (path, hardware to render)
    note: Optional[str] = None


#: the placeholder for the run directory before the job starts (env.json)
RUN_DIR_PLACEHOLDER = "${SLURMTOPO_RUN_DIR}"


def nccl_topo_plan(inv: Optional[Inventory], placement: Placement,
                   run_dir: Optional[str] = None) -> TopoFilePlan:
    """``NCCL_TOPO_FILE`` when the job's nodes are of one virtualised node
    type: the type's ``nccl_topo_file`` when it names one, else
    ``<run dir>/nccl-topo-<type>.xml`` (written at job start). The variable
    is job-wide, so a job spanning several node types, or virtualised and
    bare-metal nodes, gets none (and a note)."""
    if inv is None:
        return TopoFilePlan({})
    kinds: Dict[object, Tuple[str, Hardware]] = {}
    for h in _hosts(placement):
        node = inv.nodes.get(h)
        if node is not None:
            key = node.type if node.type is not None else node.hardware
            kinds.setdefault(key, (node.type or f"node-{node.name}", node.hardware))
    virt = [k for k, (_, hw) in kinds.items() if hw.virtualised]
    if not virt:
        return TopoFilePlan({})
    if len(kinds) > 1:
        return TopoFilePlan({}, note="NCCL_TOPO_FILE not set: the job spans node types "
                            + ", ".join(sorted(n for n, _ in kinds.values()))
                            + " and the variable is job-wide")
    name, hw = kinds[virt[0]]
    if hw.nccl_topo_file:
        return TopoFilePlan({"NCCL_TOPO_FILE": hw.nccl_topo_file},
                            note=f"NCCL_TOPO_FILE={hw.nccl_topo_file} (virtualised node type "
                                 f"{name})")
    # lazy: only a virtualised node type needs it; the NCCL XML reader (xml, email, http, ssl:
    #   38 modules) costs 32 ms measured on `plan`'s path
    from slurmtopo.plan.nccl_topo import file_stem

    path = f"{(run_dir or RUN_DIR_PLACEHOLDER).rstrip('/')}/nccl-topo-{file_stem(name)}.xml"
    return TopoFilePlan({"NCCL_TOPO_FILE": path}, write=(path, hw),
                        note=f"NCCL_TOPO_FILE={path} (virtualised node type {name}, written at "
                             "job start; the run directory must be readable on every node)")


def nccl_env(inv: Optional[Inventory], placement: Placement,
             socket_ifname: Optional[str] = None, run_dir: Optional[str] = None
             ) -> Dict[str, str]:
    """The job-wide NCCL block.

    * ``NCCL_IB_HCA``: the compute NICs the ranks are next to, exact names
      with port, in rail (hardware) order; storage/management NICs never.
    * ``NCCL_SOCKET_IFNAME``: the compute NICs' netdevs when the inventory
      knows them, else everything but loopback and docker bridges.
    * ``NCCL_CROSS_NIC=0`` when the fabric under the job's hosts is
      rail-optimised by the inventory's NIC and leaf wiring
      (:func:`slurmtopo.inventory.topology.rail_optimised`: a leaf per rail; NCCL's
      env.rst: 0 suits networks with a switch per NIC, rails joined only
      at the top), or, where the inventory cannot tell, when the job is
      rail-aligned: every host uses the same GPUs in the same local order
      and each GPU's nearest NIC has the same name everywhere, so rank
      traffic can stay on its rail. Never 1 (all of a host's NICs on one
      switch): a merged scalable unit looks the same in the inventory, and
      NCCL's default (2) is right for both.
    * ``NCCL_NETDEVS_POLICY=MAX:1`` (NCCL 2.28+) when the job is
      rail-aligned and every GPU of a host has its own nearest NIC: with the
      default AUTO, GPUs of different communicators (TP, EP, DP) may share a
      NIC; one NIC per GPU keeps each on its rail.
    * ``NCCL_MNNVL_ENABLE`` and ``NCCL_CUMEM_ENABLE`` (:func:`mnnvl_env`).
    * ``NCCL_TOPO_FILE`` on virtualised nodes (:func:`nccl_topo_plan`);
      it describes one node, as NCCL wants on multi-node NVLink systems.
    """
    env: Dict[str, str] = {}
    hws: List[Hardware] = []
    if inv is not None:
        seen = set()
        for h in _hosts(placement):
            node = inv.nodes.get(h)
            if node is not None and id(node.hardware) not in seen:
                seen.add(id(node.hardware))
                hws.append(node.hardware)
    used = {n for s in placement.slots for n in s.nics}
    rails: List[str] = []
    netdevs: List[str] = []
    for hw in hws:
        nics = [n for n in hw.compute_nics() if n.state != "down"]
        if used:
            nics = [n for n in nics if n.name in used] or nics
        for n in nics:
            tok = f"{n.name}:{n.port}"
            if tok not in rails:
                rails.append(tok)
            if n.netdev and n.netdev not in netdevs:
                netdevs.append(n.netdev)
    if not hws and used:
        rails = [f"{n}:1" for n in sorted(used)]
    if rails:
        env["NCCL_IB_HCA"] = "=" + ",".join(rails)
    if socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = socket_ifname
    elif netdevs:
        env["NCCL_SOCKET_IFNAME"] = "=" + ",".join(netdevs)
    else:
        env["NCCL_SOCKET_IFNAME"] = "^lo,docker"
    aligned = rail_aligned(placement)
    wired = rail_optimised(inv, _hosts(placement)) if inv is not None else None
    if len(rails) > 1 and (wired or aligned):
        env["NCCL_CROSS_NIC"] = "0"
        if aligned and own_nic_per_gpu(placement):
            env["NCCL_NETDEVS_POLICY"] = "MAX:1"
    env.update(mnnvl_env(inv, placement))
    env.update(nccl_topo_plan(inv, placement, run_dir).env)
    return env


def mnnvl_env(inv: Optional[Inventory], placement: Placement) -> Dict[str, str]:
    """Multi-node NVLink (NCCL 2.21+, env.rst): when two or more hosts of
    the job share an NVLink domain (cluster UUID and clique), ``2`` (use it
    where the IMEX domain works, never fail init) and ``NCCL_CUMEM_ENABLE=1``
    (MNNVL needs it); ``0`` when the job's hosts have NVLink domains but
    none shares one (no IMEX set-up for nothing). Nothing without domains."""
    if inv is None:
        return {}
    count: Dict[str, int] = {}
    for h in _hosts(placement):
        node = inv.nodes.get(h)
        if node is not None and node.nvlink_domain is not None:
            key = node.nvlink_domain.key
            count[key] = count.get(key, 0) + 1
    if not count:
        return {}
    if max(count.values()) >= 2:
        return {"NCCL_MNNVL_ENABLE": "2", "NCCL_CUMEM_ENABLE": "1"}
    return {"NCCL_MNNVL_ENABLE": "0"}


def mnnvl_clique_ids(inv: Optional[Inventory], placement: Placement,
                     parts: Sequence[Sequence[str]]) -> Dict[str, str]:
    """``NCCL_MNNVL_CLIQUE_ID`` per host, where the job must not share a
    clique: hosts of one NVLink clique (cluster UUID and clique id) split
    over ``parts`` that share no IMEX channel (Slurm's
    ``--network=unique-channel-per-segment`` gives each segment its own), so
    multi-node NVLink cannot map memory between the parts. NCCL (env.rst)
    takes the clique from the fabric and uses MNNVL between ranks of one
    (UUID, clique); the variable overrides the clique id, so each part gets
    its own, above every clique id of that UUID among the job's hosts, and
    NCCL goes over the network between parts. Never set job-wide: one value
    for every host would join cliques the fabric manager keeps apart, and
    nothing where a clique lies within one part."""
    if inv is None:
        return {}
    part_of = {h: i for i, hosts in enumerate(parts) for h in hosts}
    doms: Dict[Tuple[str, int], Dict[int, List[str]]] = {}
    top: Dict[str, int] = {}
    for h in _hosts(placement):
        node = inv.nodes.get(h)
        d = node.nvlink_domain if node is not None else None
        if d is None or h not in part_of:
            continue
        doms.setdefault((d.cluster_uuid, d.clique_id), {}).setdefault(part_of[h], []).append(h)
        top[d.cluster_uuid] = max(top.get(d.cluster_uuid, 0), d.clique_id)
    used: Dict[str, set] = {}
    for uuid, clique in doms:
        used.setdefault(uuid, set()).add(clique)
    out: Dict[str, str] = {}
    for (uuid, _), by_part in doms.items():
        if len(by_part) < 2:
            continue
        for part, hosts in sorted(by_part.items()):
            top[uuid] = _free_clique_id(top[uuid], used[uuid])
            used[uuid].add(top[uuid])
            for h in hosts:
                out[h] = str(top[uuid])
    return out


#: NCCL reads NCCL_MNNVL_CLIQUE_ID as a 32-bit integer (env.rst); -1 and
#: -2 mean "from the fabric" and "by chassis", so ids stay in 0..2^31-1
CLIQUE_ID_MAX = 2 ** 31 - 1


def _free_clique_id(last: int, used: set) -> int:
    """The next clique id above ``last`` that no host of the job has, from
    0 again past :data:`CLIQUE_ID_MAX`."""
    nxt = last + 1 if last < CLIQUE_ID_MAX else 0
    while nxt in used:
        nxt = nxt + 1 if nxt < CLIQUE_ID_MAX else 0
    return nxt


def own_nic_per_gpu(placement: Placement) -> bool:
    """Every rank's nearest NIC differs from those of the other ranks on
    its host (a 1:1 GPU:NIC, rail-optimised design)."""
    for slots in placement.by_host().values():
        first = [s.nics[0] for s in slots if s.nics]
        if len(first) != len(slots) or len(set(first)) != len(first):
            return False
    return True


def rail_aligned(placement: Placement) -> bool:
    """True when all hosts run the same GPUs in the same local order and each
    local rank's nearest NIC is the same name on every host."""
    by_host = list(placement.by_host().values())
    if len(by_host) < 2:
        return False
    ref = [(s.gpu, s.nics[:1]) for s in by_host[0]]
    if not all(n for _, n in ref):
        return False
    return all([(s.gpu, s.nics[:1]) for s in mates] == ref for mates in by_host[1:])


def job_env(placement: Placement, master_port, nccl: Mapping[str, str]) -> Dict[str, str]:
    """Variables shared by every rank of the job."""
    env = {"WORLD_SIZE": str(placement.world_size),
           "MASTER_ADDR": placement.slots[0].host if placement.slots else "",
           "MASTER_PORT": str(master_port),
           "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    env.update(nccl)
    return env


def rank_vars(rank: int, local_rank: int, world: int, local_world: int, node_rank: int,
              cvd: str, gpu: int, cpus: str, nics: Sequence[str]) -> Dict[str, str]:
    """The variables one rank is started with, in the order they are shown:
    the one home of their names and values. ``env.json`` (:func:`env_json`),
    the per-rank Python launcher (``slurmtopo.binding.launcher``) and the
    tests of the per-task shell text (``slurmtopo.binding.taskenv``, which
    computes the same values on the node) all take them from here.
    ``cvd``: CUDA_VISIBLE_DEVICES; ``cpus``: a cpulist ("" unbound)."""
    env = {"RANK": str(rank), "LOCAL_RANK": str(local_rank),
           "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(local_world),
           "NODE_RANK": str(node_rank), "GROUP_RANK": str(node_rank),
           "CUDA_VISIBLE_DEVICES": cvd,
           "SLURMTOPO_GPU": str(gpu),
           "SLURMTOPO_CPUS": cpus}
    if nics:
        env["SLURMTOPO_NICS"] = ",".join(nics)
    return env


def env_fields(placement: Placement, inv: Optional[Inventory], master_port,
                socket_ifname: Optional[str], ranks: Any) -> Dict[str, Any]:
    """env.json's keys in file order, ``ranks`` as given (one mapping a
    rank from :func:`rank_vars`, or text already encoded)."""
    nccl = nccl_env(inv, placement, socket_ifname)
    return {"slurmtopo": "rank-env", "version": RANKMAP_VERSION,
            "note": "as planned: GPU numbers assume no device cgroup and the planned nodes; "
                    "`slurmtopo bind` recomputes them from the real allocation at job start",
            "job": job_env(placement, master_port, nccl),
            "ranks": ranks}


def env_json(placement: Placement, inv: Optional[Inventory], master_port="from SLURM_JOB_ID",
             socket_ifname: Optional[str] = None) -> str:
    """``env.json``: byte for byte ``dumps_rankmap(env_fields(...))`` of
    the ranks' :func:`rank_vars`,
    one line a rank from :func:`rank_vars` (values a job repeats, such as
    cpulists and NIC lists, encoded once each; see :func:`rankmap_json`)."""
    world = placement.world_size
    cpus = cpulists(placement)
    enc = _Encoded()
    lines: List[str] = [""] * world
    for node_rank, mates in enumerate(placement.by_host().values()):
        cvd = visible_devices([s.gpu for s in mates], None, False)
        for s in mates:
            env = rank_vars(s.rank, s.local_rank, world, len(mates), node_rank, cvd, s.gpu,
                            cpus[id(s.cpus)], s.nics)
            # (digits need no escaping: most values are numbers)
            lines[s.rank] = "    {" + ", ".join([
                f'"{k}": "{v}"' if v.isdigit() else f'"{k}": {enc[v]}'
                for k, v in env.items()]) + "}"
    return dumps_rankmap(env_fields(placement, inv, master_port, socket_ifname, lines),
                         ("ranks",))


def group_indices(placement: Placement, kinds: Sequence[str]) -> Dict[str, List[int]]:
    """kind -> list mapping each rank to its group index (for tables)."""
    return {k: rank_to_group(placement.groups, k) for k in kinds if k in placement.groups}


def node_contiguous(placement: Placement) -> Optional[str]:
    """None when torchrun can start this plan, else why not.

    torchrun with ``--node-rank R --nproc-per-node K`` gives local rank i of
    node R the global rank ``R * K + i``. That equals the plan only when
    every host runs the same number of ranks K and host R (in the plan's
    host order) holds ranks R*K .. R*K+K-1 in local-rank order.
    """
    hosts = _hosts(placement)
    counts = {h: len(placement.ranks_on(h)) for h in hosts}
    if len(set(counts.values())) > 1:
        return ("ranks per node differ (" + ", ".join(f"{h}: {c}" for h, c in counts.items())
                + "); torchrun starts the same number on every node")
    k = counts[hosts[0]] if hosts else 0
    for r, h in enumerate(hosts):
        for s in placement.ranks_on(h):
            if s.rank != r * k + s.local_rank:
                return (f"rank {s.rank} is local rank {s.local_rank} on {h} (node {r}); torchrun "
                        f"would make it rank {r * k + s.local_rank}: the plan interleaves ranks "
                        "across nodes")
    return None
