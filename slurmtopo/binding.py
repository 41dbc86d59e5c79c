"""The start-time step: bind the planned ranks to the allocation Slurm made.

``slurmtopo plan`` decides at submit time, but Slurm chooses the nodes (and,
on shared nodes, the GPUs) only when the job starts. So the batch script
carries the plan as data and, on the batch host, runs::

    python3 -m slurmtopo bind --plan - --run-dir DIR        (this module's bind())

which

1. reads the real allocation: ``SLURM_JOB_NODELIST``; the GPUs of every node
   from ``scontrol show job -d`` (``Nodes=x ... GRES=gpu:8(IDX:0-7)``), else
   ``SLURM_JOB_GPUS`` for the batch host and an ``srun --ntasks-per-node=1``
   probe printing each node's ``SLURM_STEP_GPUS`` for the others;
2. decides whether a device cgroup renumbers GPUs (``--cgroup-devices
   auto|yes|no``; see :func:`detect_constrained`);
3. keeps the plan when every planned GPU was allocated, otherwise re-plans
   on exactly the allocation (everything else marked busy) with
   :func:`slurmtopo.placement.plan` and logs what moved;
4. writes ``DIR/hostfile`` (line r = host of rank r, for ``srun
   --distribution=arbitrary``), ``DIR/rankmap.json`` (what really runs),
   ``DIR/ranktable`` and ``DIR/env.sh`` (job-wide variables, shell-quoted),
   which the script sources before ``srun``.

``srun`` then starts every rank through ``python3 -m slurmtopo.binding rank
-- CMD`` (:func:`rank_main`), which looks its ``SLURM_PROCID`` up in the rank
table, sets RANK, LOCAL_RANK, CUDA_VISIBLE_DEVICES, ..., binds itself to the
planned CPUs that exist *on that host* and execs the user's command. Doing
this on the rank's own host is what makes GPU numbers right when nodes got
different GPU indices and CPU binding right when a host has fewer CPUs than
its description (``os.sched_getaffinity``).

Pure functions take the environment and a command runner as arguments, so
the tests drive every path without Slurm.
"""
from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field, fields, is_dataclass
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set,
                    Tuple)

from slurmtopo.errors import SlurmtopoError
from slurmtopo.model import (ClusterState, Gpu, Hardware, Inventory, Node, NodeState, Placement,
                             RankSlot, format_cpulist, parse_cpulist)

PLAN_KIND = "plan"
PLAN_VERSION = 1
TABLE_MAGIC = "slurmtopo-ranktable"
#: the rank table travels in the environment below this size (one variable
#: may not exceed 128 KiB on Linux); above it, in DIR/ranktable, which must
#: then be on a file system every node can read
ENV_TABLE_LIMIT = 96 * 1024
#: embed the whole inventory in the script below this size (JSON bytes),
#: else only the planned nodes and the switches above them
EMBED_LIMIT = 256 * 1024
CGROUP_MODES = ("auto", "yes", "no")

#: (argv, env) -> (exit code, stdout); tests pass fakes
Runner = Callable[[Sequence[str], Optional[Mapping[str, str]]], Tuple[int, str]]


def run_command(argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
                timeout: float = 120) -> Tuple[int, str]:
    """Run a Slurm client; (127, "") when it is not installed."""
    try:
        p = subprocess.run(list(argv), env=dict(env) if env is not None else None,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           timeout=timeout)
    except FileNotFoundError:
        return 127, ""
    except subprocess.TimeoutExpired:
        return 124, ""
    return p.returncode, p.stdout


# --------------------------------------------------------------------------
# the plan document embedded in the batch script


def embedded_inventory(inv: Inventory, hosts: Sequence[str]) -> Dict[str, Any]:
    """The inventory in schema form, for bind to use when the inventory path
    is unreadable on the compute node. Preset hardware is written out (the
    node's slurmtopo may know other presets). Small inventories go in whole
    so a re-plan can use any node; big ones are cut to the planned nodes and
    the switches above them."""
    from slurmtopo.inventory import inventory_dict
    from slurmtopo.model import Fabric

    def with_types(sub: Inventory) -> Inventory:
        types = dict(sub.node_types)
        for n in sub:
            if n.type is not None and n.type not in types:
                types[n.type] = n.hardware
        return Inventory(nodes=sub.nodes, fabric=sub.fabric, node_types=types)

    whole = inventory_dict(with_types(inv))
    if len(json.dumps(whole)) <= EMBED_LIMIT:
        return whole
    keep = set(hosts)
    nodes = {h: inv.nodes[h] for h in hosts if h in inv.nodes}
    from slurmtopo.topology import network_view
    view = network_view(inv.fabric)
    sw_keep = {sw for h in keep for sw in view.ancestors.get(h, {})}
    switches = tuple(
        type(s)(name=s.name, level=s.level, nodes=tuple(x for x in s.nodes if x in keep),
                switches=tuple(c for c in s.switches if c in sw_keep), link_gbps=s.link_gbps,
                description=s.description)
        for s in inv.fabric.switches if s.name in sw_keep)
    blocks = tuple(type(b)(name=b.name, nodes=tuple(x for x in b.nodes if x in keep))
                   for b in inv.fabric.blocks if any(x in keep for x in b.nodes))
    sub = Inventory(nodes=nodes, fabric=Fabric(switches=switches, blocks=blocks,
                                               block_sizes=inv.fabric.block_sizes),
                    node_types=dict(inv.node_types))
    return inventory_dict(with_types(sub))


def request_dict(req) -> Dict[str, Any]:
    """The JobRequest fields a re-plan needs, as JSON data. The node list
    and exclusions are dropped: at start time the allocation is the limit."""
    out: Dict[str, Any] = {}
    if req is None:
        return out
    items = ({f.name: getattr(req, f.name) for f in fields(req)} if is_dataclass(req)
             else dict(req))
    for k, v in items.items():
        if k in ("layout", "nodelist", "exclude"):
            continue
        if isinstance(v, Mapping):
            v = {str(a): b for a, b in v.items()}
        elif isinstance(v, (tuple, list, set, frozenset)):
            v = list(v)
        try:
            json.dumps(v)
        except TypeError:
            continue
        out[k] = v
    return out


def plan_document(inv: Inventory, placement: Placement, layout, req=None,
                  inventory_path: Optional[str] = None, master_port: Optional[int] = None,
                  socket_ifname: Optional[str] = None) -> Dict[str, Any]:
    """Everything ``slurmtopo bind`` needs, as JSON data for the script."""
    from slurmtopo.rankmap import check_placement, layout_dict, slot_dict

    check_placement(placement)
    return {
        "slurmtopo": PLAN_KIND, "version": PLAN_VERSION,
        "inventory_path": os.path.abspath(inventory_path) if inventory_path else None,
        "layout": layout_dict(layout),
        "request": request_dict(req),
        "master_port": master_port,
        "socket_ifname": socket_ifname,
        "hosts": list(placement.hosts),
        "ranks": [slot_dict(s) for s in placement.slots],
        "inventory": embedded_inventory(inv, placement.hosts),
    }


def dumps_plan(doc: Mapping[str, Any]) -> str:
    """The plan document as JSON, one rank per line (a reader can scan it;
    nothing in it can end a quoted here-document: every string is quoted)."""
    from slurmtopo.rankmap import dumps_rankmap

    return dumps_rankmap(doc)


def read_plan(text: str, where: str = "plan") -> Dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmtopoError(f"{where}: not a slurmtopo plan ({exc.msg} at line {exc.lineno})")
    if not isinstance(doc, dict) or doc.get("slurmtopo") != PLAN_KIND:
        raise SlurmtopoError(f"{where}: not a slurmtopo plan document")
    if int(doc.get("version", 0)) > PLAN_VERSION:
        raise SlurmtopoError(f"{where}: plan version {doc['version']} is newer than this "
                             "slurmtopo; install the same slurmtopo on the compute nodes")
    for key in ("layout", "ranks"):
        if key not in doc:
            raise SlurmtopoError(f"{where}: plan has no {key!r}")
    return doc


def layout_from_doc(doc: Mapping[str, Any]):
    from slurmtopo.groups import Layout

    lay = dict(doc["layout"])
    names = {f.name for f in fields(Layout)}
    return Layout(**{k: v for k, v in lay.items() if k in names}).resolved()


def planned_placement(doc: Mapping[str, Any]) -> Placement:
    """The submit-time Placement, groups recomputed from the layout."""
    from slurmtopo.groups import build_groups
    from slurmtopo.rankmap import placement_from_dict

    p = placement_from_dict(doc, "plan")
    if not p.groups:
        p = Placement(slots=p.slots, groups=dict(build_groups(layout_from_doc(doc))),
                      hosts=p.hosts, notes=p.notes)
    return p


def load_inventory_for_bind(doc: Mapping[str, Any], override: Optional[str],
                            log: List[str]) -> Inventory:
    """The inventory file recorded at plan time (or ``--inventory``), else
    the hardware embedded in the script."""
    from slurmtopo.inventory import load_inventory, parse_inventory

    path = override or doc.get("inventory_path")
    if path:
        try:
            inv = load_inventory(path)
            log.append(f"inventory: {path}")
            return inv
        except SlurmtopoError as exc:
            if override:
                raise
            log.append(f"inventory {path} unusable here ({exc.render()}); using the copy "
                       "embedded in the script")
        except OSError as exc:
            log.append(f"inventory {path} unreadable here ({exc.strerror}); using the copy "
                       "embedded in the script")
    if not doc.get("inventory"):
        raise SlurmtopoError("the plan embeds no inventory and none could be read; pass "
                             "--inventory")
    return parse_inventory(doc["inventory"], "<inventory embedded in the batch script>")


# --------------------------------------------------------------------------
# reading the allocation


@dataclass
class Allocation:
    """What Slurm gave the job: hosts in Slurm's order and, per host, the
    GPU indices (None when nothing said)."""

    job_id: str
    hosts: List[str]
    gpus: Dict[str, Optional[Tuple[int, ...]]]
    batch_host: Optional[str] = None
    sources: Dict[str, str] = field(default_factory=dict)  # host -> where gpus came from


_GPU_IDX = re.compile(r"gpu(?::[^,(\s]*)*\((?:IDX|idx):([^)]*)\)")


def parse_index_list(text: str) -> Optional[Tuple[int, ...]]:
    """``"0-3,6"`` -> (0, 1, 2, 3, 6); None for N/A, NoDevFiles, garbage."""
    text = (text or "").strip()
    if not text:
        return ()
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def parse_scontrol_job(text: str) -> Dict[str, Tuple[int, ...]]:
    """host -> GPU indices from ``scontrol show job -d`` output.

    Understands ``Nodes=gpu[01-02] CPU_IDs=0-111 Mem=0 GRES=gpu:h100:8(IDX:0-7)``
    (Slurm >= 20.02; several GPU types are summed) and the older
    ``GRES_IDX=gpu(IDX:0-3)``. A node line without GPUs maps to ().
    """
    from slurmtopo.inventory import expand_hostlist

    out: Dict[str, Tuple[int, ...]] = {}
    for line in text.splitlines():
        m = re.search(r"(?:^|\s)Nodes=(\S+)", line)
        if not m or "CPU_IDs=" not in line:
            continue
        try:
            hosts = expand_hostlist(m.group(1))
        except ValueError:
            continue
        g = re.search(r"(?:^|\s)GRES(?:_IDX)?=(\S*)", line)
        gpus: Set[int] = set()
        ok = True
        for idx in _GPU_IDX.findall(g.group(1) if g else ""):
            vals = parse_index_list(idx)
            if vals is None:
                ok = False
                break
            gpus.update(vals)
        if not ok:
            continue
        for h in hosts:
            out[h] = tuple(sorted(gpus))
    return out


def parse_probe(text: str) -> Dict[str, Optional[Tuple[int, ...]]]:
    """Lines ``SLURMTOPO_PROBE host gpus`` printed by the srun probe."""
    out: Dict[str, Optional[Tuple[int, ...]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "SLURMTOPO_PROBE":
            out[parts[1]] = parse_index_list(parts[2]) if parts[2] != "?" else None
    return out


def _minor_to_index(hw: Optional[Hardware]) -> Dict[int, int]:
    return {g.device_minor: g.index for g in hw.gpus} if hw is not None else {}


def read_allocation(env: Mapping[str, str], run: Runner = run_command,
                    inv: Optional[Inventory] = None, probe: bool = True) -> Allocation:
    """The allocation of the running job (see module doc for the sources).

    Slurm's ``SLURM_*_GPUS`` carry device-file numbers (``/dev/nvidiaN``);
    they are turned into NVML indices with the inventory's minors. ``IDX``
    in ``scontrol`` is the position in gres.conf, which lists GPUs in index
    order (as ``slurmtopo``'s gres.conf does).
    """
    from slurmtopo.inventory import expand_hostlist

    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise SlurmtopoError("SLURM_JOB_NODELIST is not set: `slurmtopo bind` runs inside the "
                             "batch job (use the script `slurmtopo plan` wrote)")
    try:
        hosts = expand_hostlist(nodelist, "SLURM_JOB_NODELIST")
    except ValueError as exc:
        raise SlurmtopoError(str(exc)) from None
    batch = env.get("SLURMD_NODENAME") or (hosts[0] if hosts else None)
    gpus: Dict[str, Optional[Tuple[int, ...]]] = {h: None for h in hosts}
    sources: Dict[str, str] = {}

    def hw_of(h: str) -> Optional[Hardware]:
        node = inv.nodes.get(h) if inv is not None else None
        return node.hardware if node is not None else None

    def from_minors(h: str, nums: Tuple[int, ...]) -> Tuple[int, ...]:
        m = _minor_to_index(hw_of(h))
        return tuple(sorted(m.get(n, n) for n in nums))

    if job:
        rc, text = run(["scontrol", "show", "job", "-d", job], None)
        if rc == 0:
            for h, g in parse_scontrol_job(text).items():
                if h in gpus:
                    gpus[h] = g
                    sources[h] = "scontrol show job -d"
    if batch in gpus and gpus[batch] is None and env.get("SLURM_JOB_GPUS") is not None:
        g = parse_index_list(env["SLURM_JOB_GPUS"])
        if g is not None:
            gpus[batch] = from_minors(batch, g)
            sources[batch] = "SLURM_JOB_GPUS"
    missing = [h for h in hosts if gpus[h] is None]
    if missing and probe:
        penv = {k: v for k, v in env.items()
                if k not in ("SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_HOSTFILE",
                             "SLURM_DISTRIBUTION")}
        n = str(len(hosts))
        rc, text = run(["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
                        "--cpu-bind=none", "--kill-on-bad-exit=0", "/bin/sh", "-c",
                        'echo "SLURMTOPO_PROBE ${SLURMD_NODENAME:-$(hostname -s)} '
                        '${SLURM_STEP_GPUS:-?}"'], penv)
        for h, g in parse_probe(text).items():
            if h in gpus and gpus[h] is None and g is not None:
                gpus[h] = from_minors(h, g)
                sources[h] = "srun probe (SLURM_STEP_GPUS)"
    return Allocation(job_id=job, hosts=hosts, gpus=gpus, batch_host=batch, sources=sources)


def _int_list(text: Optional[str]) -> Optional[List[int]]:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return None


def detect_constrained(mode: str, env: Mapping[str, str], run: Runner = run_command,
                       dev_dir: str = "/dev", allocated: Optional[Iterable[int]] = None
                       ) -> Tuple[bool, str]:
    """Does a device cgroup renumber GPUs (``ConstrainDevices=yes``)?

    ``auto`` asks, in order: (1) this batch step's own numbers: Slurm puts
    device-file numbers in SLURM_JOB_GPUS and, under the cgroup, 0..n-1 in
    CUDA_VISIBLE_DEVICES, so different lists mean renumbering and equal lists
    other than 0..n-1 mean none; (2) ``scontrol show config`` (Slurm prints
    the cgroup.conf settings); (3) opening a /dev/nvidiaN that was not
    allocated: EPERM is the device cgroup saying no. If all are silent the
    numbers agree on this host and "no" is assumed. Returns (answer, why).
    """
    if mode not in CGROUP_MODES:
        raise SlurmtopoError(f"--cgroup-devices must be one of {', '.join(CGROUP_MODES)}")
    if mode != "auto":
        return mode == "yes", f"--cgroup-devices {mode}"
    job = _int_list(env.get("SLURM_JOB_GPUS"))
    cvd = _int_list(env.get("CUDA_VISIBLE_DEVICES"))
    if job and cvd is not None and len(job) == len(cvd):
        if job != cvd:
            return True, (f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} renumbers "
                          f"SLURM_JOB_GPUS={env['SLURM_JOB_GPUS']}")
        if cvd != list(range(len(cvd))):
            return False, (f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} carries the "
                           "node's own GPU numbers")
    rc, text = run(["scontrol", "show", "config"], None)
    if rc == 0:
        m = re.search(r"^\s*ConstrainDevices\s*=\s*(\S+)", text, re.M | re.I)
        if m:
            yes = m.group(1).lower() in ("yes", "true", "1")
            return yes, f"scontrol show config: ConstrainDevices={m.group(1)}"
    verdict = _probe_dev(dev_dir, set(allocated if allocated is not None else (job or ())))
    if verdict is not None:
        return verdict
    return False, "could not tell; assuming no device cgroup (GPU numbers agree on this host)"


def _probe_dev(dev_dir: str, allocated: Set[int]) -> Optional[Tuple[bool, str]]:
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return None
    for name in sorted(names):
        m = re.fullmatch(r"nvidia(\d+)", name)
        if not m or int(m.group(1)) in allocated:
            continue
        path = os.path.join(dev_dir, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.close(fd)
            return False, f"{path} (not allocated) opens: no device cgroup"
        except OSError as exc:
            if exc.errno == errno.EPERM:
                return True, f"{path} (not allocated) is refused (EPERM): device cgroup"
            if exc.errno in (errno.ENXIO, errno.ENODEV):
                return False, f"{path} (not allocated) is reachable: no device cgroup"
    return None


# --------------------------------------------------------------------------
# comparing and re-planning


def differences(placement: Placement, alloc: Allocation) -> List[str]:
    """Why the plan cannot run on this allocation (empty: it can)."""
    out = []
    have = set(alloc.hosts)
    for h in placement.hosts:
        if h not in have:
            out.append(f"planned node {h} was not allocated")
            continue
        got = alloc.gpus.get(h)
        want = placement.gpus_on(h)
        if got is not None and not set(want) <= set(got):
            out.append(f"{h}: planned GPUs {format_cpulist(want)}, allocated "
                       f"{format_cpulist(got) or 'none'}")
    return out


def nearest_nics(hw: Hardware, gpu: int) -> Tuple[str, ...]:
    """The compute NICs closest to ``gpu`` (all those of the best class)."""
    nics = [n for n in hw.compute_nics() if n.state != "down"]
    if not nics:
        return ()
    best = min(n.relation_to(gpu) for n in nics)
    return tuple(n.name for n in nics if n.relation_to(gpu) == best)


def fill_placement(inv: Inventory, host_gpus: Sequence[Tuple[str, Sequence[int]]], layout,
                   notes: Sequence[str] = ()) -> Placement:
    """Ranks in order over ``host_gpus`` (host by host, GPUs in the order
    given): the last-resort mapping when the planner cannot place the job on
    the allocation, and a plain reference placement for tests."""
    from slurmtopo.groups import build_groups

    lay = layout.resolved()
    slots: List[RankSlot] = []
    hosts: List[str] = []
    for host, gpus in host_gpus:
        hw = inv.nodes[host].hardware
        for lr, g in enumerate(gpus):
            if len(slots) == lay.world:
                break
            if lr == 0:
                hosts.append(host)
            gpu: Gpu = hw.gpus[g]
            slots.append(RankSlot(rank=len(slots), host=host, gpu=g, local_rank=lr,
                                  nics=nearest_nics(hw, g), cpus=gpu.cpus,
                                  numa_node=gpu.numa_node))
    if len(slots) < lay.world:
        raise SlurmtopoError(f"the allocation has {len(slots)} GPUs for {lay.world} ranks")
    return Placement(slots=tuple(slots), groups=dict(build_groups(lay)), hosts=tuple(hosts),
                     notes=tuple(notes))


def allocation_state(inv: Inventory, alloc: Allocation) -> ClusterState:
    """A ClusterState in which only the allocation is free: every other node
    is taken whole, and on allocated nodes the GPUs not given are busy."""
    have = set(alloc.hosts)
    nodes: Dict[str, NodeState] = {}
    for n in inv:
        if n.name not in have:
            nodes[n.name] = NodeState(n.name, state="allocated", exclusive=True)
            continue
        got = alloc.gpus.get(n.name)
        busy = frozenset(g.index for g in n.gpus if got is not None and g.index not in got)
        nodes[n.name] = NodeState(n.name, state="mixed" if busy else "idle", busy_gpus=busy)
    return ClusterState(nodes=nodes, source="allocation")


def job_request_from_doc(doc: Mapping[str, Any], relax: bool = False):
    """Rebuild the JobRequest (slurmtopo.request) for a re-plan on the
    allocation: exclusivity is already granted (the allocation state says
    what is free); ``relax`` also drops the requirements and the GPUs-per-node
    rule, for a second try."""
    from slurmtopo.request import JobRequest

    names = {f.name for f in fields(JobRequest)}
    kw: Dict[str, Any] = {k: v for k, v in (doc.get("request") or {}).items() if k in names}
    kw["layout"] = layout_from_doc(doc)
    if "exclusive" in names:
        kw["exclusive"] = False
    if relax:
        for k, v in (("require", {}), ("gpus_per_node", None)):
            if k in names:
                kw[k] = v
    for k in ("nodelist", "exclude"):
        if k in names:
            kw[k] = None
    for k in ("require", "prefer", "message_bytes"):
        if k in kw and kw[k] is None:
            kw.pop(k)
    return JobRequest(**kw)


def with_allocated_nodes(inv: Inventory, alloc: Allocation, log: List[str]) -> Inventory:
    """Add allocated nodes the inventory lacks (the embedded copy holds only
    the planned ones when the cluster is big), with the hardware all
    planned nodes share; they sit in no known switch."""
    missing = [h for h in alloc.hosts if h not in inv.nodes]
    if not missing:
        return inv
    hws = {id(n.hardware): n for n in inv}
    if len(hws) != 1:
        raise SlurmtopoError(f"allocated node(s) {', '.join(missing)} are not in the inventory "
                             "and the planned nodes differ in hardware; pass --inventory")
    ref = next(iter(hws.values()))
    log.append(f"node(s) {', '.join(missing)} not in the inventory: assuming they are like "
               f"{ref.name}, with an unknown place in the network")
    nodes = dict(inv.nodes)
    for h in missing:
        nodes[h] = Node(name=h, hardware=ref.hardware, type=ref.type)
    return Inventory(nodes=nodes, fabric=inv.fabric, node_types=inv.node_types, cost=inv.cost,
                     source=inv.source)


def replan(doc: Mapping[str, Any], inv: Inventory, alloc: Allocation, log: List[str],
           planner: Optional[Callable] = None) -> Placement:
    """Plan again with only the allocation free. If the requirements cannot
    be met there, retry without them, then fall back to ranks in order:
    the job is already running, refusing to start helps nobody."""
    from slurmtopo.errors import PlacementError

    if planner is None:
        from slurmtopo.placement import plan as planner
    inv = with_allocated_nodes(inv, alloc, log)
    state = allocation_state(inv, alloc)
    for relax in (False, True):
        try:
            req = job_request_from_doc(doc, relax=relax)
            p = planner(inv, state, req)
            if relax:
                log.append("re-planned without the --require constraints and GPUs per node")
            return p
        except PlacementError as exc:
            log.append(f"re-plan{' without requirements' if relax else ''} failed: "
                       f"{exc.render()}")
    hg = [(h, sorted(alloc.gpus[h]) if alloc.gpus.get(h) is not None
           else [g.index for g in inv.nodes[h].gpus]) for h in alloc.hosts]
    log.append("falling back to ranks in allocation order")
    return fill_placement(inv, hg, layout_from_doc(doc),
                          notes=("ranks in allocation order (re-plan failed)",))


def moved_ranks(old: Placement, new: Placement, limit: int = 8) -> List[str]:
    lines = []
    moved = [(a, b) for a, b in zip(old.slots, new.slots) if (a.host, a.gpu) != (b.host, b.gpu)]
    for a, b in moved[:limit]:
        lines.append(f"rank {a.rank}: {a.host} GPU {a.gpu} -> {b.host} GPU {b.gpu}")
    if len(moved) > limit:
        lines.append(f"... and {len(moved) - limit} more ranks moved")
    if not moved:
        lines.append("no rank moved")
    return lines


# --------------------------------------------------------------------------
# the rank table: what each rank's launcher needs, keyed by SLURM_PROCID


def rank_table(placement: Placement, alloc_gpus: Mapping[str, Optional[Sequence[int]]],
               constrained: bool, cpu_bind: bool = True) -> str:
    """Text table (see :func:`parse_rank_table`)::

        slurmtopo-ranktable 1 world=16 constrained=0 cpubind=1
        H <node_rank> <host> <gpus, local rank order> <allocated GPUs or ->
        R <rank> <node_rank> <local_rank> <cpus or -> <nics or ->
    """
    from slurmtopo.rankmap import check_placement, node_ranks

    check_placement(placement)
    nr = node_ranks(placement)
    lines = [f"{TABLE_MAGIC} 1 world={placement.world_size} constrained={int(constrained)} "
             f"cpubind={int(cpu_bind)}"]
    for h, i in nr.items():
        got = alloc_gpus.get(h)
        lines.append(f"H {i} {h} {','.join(map(str, placement.gpus_on(h)))} "
                     f"{format_cpulist(got) if got else '-'}")
    for s in placement.slots:
        lines.append(f"R {s.rank} {nr[s.host]} {s.local_rank} "
                     f"{format_cpulist(s.cpus) or '-'} {','.join(s.nics) or '-'}")
    return "\n".join(lines) + "\n"


@dataclass
class RankInfo:
    rank: int
    world: int
    host: str
    node_rank: int
    local_rank: int
    host_gpus: List[int]
    allocated: Optional[List[int]]
    cpus: Tuple[int, ...]
    nics: List[str]
    constrained: bool
    cpu_bind: bool


def parse_rank_table(text: str, rank: int) -> RankInfo:
    lines = text.splitlines()
    if not lines or not lines[0].startswith(TABLE_MAGIC + " "):
        raise SlurmtopoError("not a slurmtopo rank table")
    head = dict(kv.split("=", 1) for kv in lines[0].split()[2:] if "=" in kv)
    hosts: Dict[int, Tuple[str, List[int], Optional[List[int]]]] = {}
    row = None
    want = str(rank)
    for line in lines[1:]:
        p = line.split()
        if not p:
            continue
        if p[0] == "H" and len(p) == 5:
            hosts[int(p[1])] = (p[2], [int(x) for x in p[3].split(",") if x],
                                None if p[4] == "-" else list(parse_cpulist(p[4])))
        elif p[0] == "R" and len(p) == 6 and p[1] == want:
            row = p
    if row is None:
        raise SlurmtopoError(f"rank {rank} is not in the rank table "
                             f"(world {head.get('world', '?')})")
    node_rank, local_rank = int(row[2]), int(row[3])
    host, gpus, alloc = hosts[node_rank]
    return RankInfo(rank=rank, world=int(head["world"]), host=host, node_rank=node_rank,
                    local_rank=local_rank, host_gpus=gpus, allocated=alloc,
                    cpus=() if row[4] == "-" else parse_cpulist(row[4]),
                    nics=[] if row[5] == "-" else row[5].split(","),
                    constrained=head.get("constrained") == "1",
                    cpu_bind=head.get("cpubind", "1") == "1")


def rank_launch(info: RankInfo, environ: Mapping[str, str], allowed: Iterable[int]
                ) -> Tuple[Dict[str, str], Optional[Tuple[int, ...]], List[str]]:
    """(variables to set, CPUs to bind to or None, log lines) for one rank on
    the host it runs on. Pure: ``environ`` is what Slurm gave the task,
    ``allowed`` what ``os.sched_getaffinity(0)`` says here.

    Local facts win over the table when Slurm states them: if this step's
    ``SLURM_STEP_GPUS`` and ``CUDA_VISIBLE_DEVICES`` differ, Slurm has
    renumbered GPUs on this node (device cgroup), whatever the batch host
    thought; the step's GPUs stand in for an allocation the table lacks.
    """
    from slurmtopo.rankmap import visible_devices

    log: List[str] = []
    me = environ.get("SLURMD_NODENAME")
    if me and me != info.host:
        raise SlurmtopoError(f"rank {info.rank} was planned on {info.host} but srun started it "
                             f"on {me}; is SLURM_HOSTFILE honoured (--distribution=arbitrary)?")
    constrained = info.constrained
    step = _int_list(environ.get("SLURM_STEP_GPUS"))
    local_cvd = _int_list(environ.get("CUDA_VISIBLE_DEVICES"))
    # the numbers only tell when the step holds GPUs other than 0..n-1
    if (step and local_cvd is not None and len(step) == len(local_cvd)
            and step != list(range(len(step)))):
        here = step != local_cvd
        if here != constrained:
            log.append(f"Slurm {'renumbers' if here else 'does not renumber'} GPUs here "
                       f"(SLURM_STEP_GPUS={environ['SLURM_STEP_GPUS']}, "
                       f"CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']}); following it")
        constrained = here
    alloc = info.allocated
    if step:
        if alloc is None:
            alloc = sorted(step)
        elif sorted(step) != sorted(alloc):
            log.append(f"this step holds GPUs {format_cpulist(step)}, the allocation said "
                       f"{format_cpulist(alloc)}")
    cvd = visible_devices(info.host_gpus, alloc, constrained)
    env = {"RANK": str(info.rank), "LOCAL_RANK": str(info.local_rank),
           "WORLD_SIZE": str(info.world), "LOCAL_WORLD_SIZE": str(len(info.host_gpus)),
           "NODE_RANK": str(info.node_rank), "GROUP_RANK": str(info.node_rank),
           "CUDA_VISIBLE_DEVICES": cvd, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
           "SLURMTOPO_GPU": str(info.host_gpus[info.local_rank])}
    if info.nics:
        env["SLURMTOPO_NICS"] = ",".join(info.nics)
    bind: Optional[Tuple[int, ...]] = None
    allowed = set(allowed)
    if info.cpu_bind and info.cpus and environ.get("SLURMTOPO_CPU_BIND", "1") != "0":
        planned = set(info.cpus)
        inter = tuple(sorted(planned & allowed))
        if not inter:
            log.append(f"none of the planned CPUs {format_cpulist(planned)} exist or are "
                       f"allowed here (allowed: {format_cpulist(allowed)}); not binding")
        else:
            if len(inter) < len(planned):
                log.append(f"CPU binding reduced from {format_cpulist(planned)} to "
                           f"{format_cpulist(inter)} (allowed here: {format_cpulist(allowed)})")
            bind = inter
    env["SLURMTOPO_CPUS"] = format_cpulist(bind) if bind else ""
    return env, bind, log


def rank_main(argv: Sequence[str], environ: Optional[Dict[str, str]] = None) -> int:
    """``python3 -m slurmtopo.binding rank -- CMD ARGS``: set up this rank
    and exec CMD (returns only on error)."""
    environ = dict(os.environ if environ is None else environ)
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    procid = environ.get("SLURM_PROCID")
    tag = f"slurmtopo rank {procid if procid is not None else '?'}"
    try:
        if not args:
            raise SlurmtopoError("no command given after --")
        if procid is None:
            raise SlurmtopoError("SLURM_PROCID is not set: start ranks with srun")
        text = environ.get("SLURMTOPO_RANK_TABLE")
        if not text:
            path = environ.get("SLURMTOPO_RANK_TABLE_FILE")
            if not path:
                raise SlurmtopoError("no rank table (SLURMTOPO_RANK_TABLE or "
                                     "SLURMTOPO_RANK_TABLE_FILE); source env.sh from "
                                     "`slurmtopo bind` before srun")
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError as exc:
                raise SlurmtopoError(f"cannot read the rank table ({exc.strerror}); large jobs "
                                     "need --run-dir on a file system all nodes see", path)
        info = parse_rank_table(text, int(procid))
        env, bind, log = rank_launch(info, environ, os.sched_getaffinity(0))
        host = environ.get("SLURMD_NODENAME") or info.host
        for line in log:
            print(f"{tag} ({host}): {line}", file=sys.stderr)
        if bind:
            os.sched_setaffinity(0, bind)
    except SlurmtopoError as exc:
        print(f"{tag}: error: {exc.render()}", file=sys.stderr)
        return 2
    environ.pop("SLURMTOPO_RANK_TABLE", None)
    environ.update(env)
    sys.stderr.flush()
    try:
        os.execvpe(args[0], args, environ)
    except OSError as exc:
        print(f"{tag}: error: cannot run {args[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover


# --------------------------------------------------------------------------
# the batch-host step


@dataclass
class BindResult:
    placement: Placement
    allocation: Allocation
    constrained: bool
    replanned: bool
    job_env: Dict[str, str]
    table: str
    log: List[str]
    inventory: Inventory
    layout: Any


def master_port(doc: Mapping[str, Any], job_id: str) -> int:
    """The plan's port, else one derived from the job id, so two jobs
    sharing a node do not collide (range 20000-29999)."""
    if doc.get("master_port"):
        return int(doc["master_port"])
    return 20000 + int(job_id) % 10000 if job_id.isdigit() else 29500


def bind(doc: Mapping[str, Any], env: Mapping[str, str], run: Runner = run_command,
         cgroup_mode: str = "auto", inventory_path: Optional[str] = None,
         planner: Optional[Callable] = None, dev_dir: str = "/dev",
         probe: bool = True) -> BindResult:
    """Everything the start-time step decides, without writing anything."""
    from slurmtopo.rankmap import job_env, nccl_env, visible_devices

    log: List[str] = []
    inv = load_inventory_for_bind(doc, inventory_path, log)
    planned = planned_placement(doc)
    alloc = read_allocation(env, run, inv, probe=probe)
    from slurmtopo.inventory import fold_hostlist
    log.append(f"job {alloc.job_id or '?'}: {len(alloc.hosts)} node(s) "
               f"{fold_hostlist(alloc.hosts)}")
    for h in alloc.hosts:
        g = alloc.gpus[h]
        log.append(f"  {h}: GPUs {format_cpulist(g) if g is not None else 'unknown'}"
                   + (f" (from {alloc.sources[h]})" if h in alloc.sources else ""))
    batch_gpus = alloc.gpus.get(alloc.batch_host) if alloc.batch_host else None
    constrained, why = detect_constrained(cgroup_mode, env, run, dev_dir, batch_gpus)
    log.append(f"device cgroup renumbers GPUs: {'yes' if constrained else 'no'} ({why})")
    diff = differences(planned, alloc)
    if not diff:
        placement, replanned = planned, False
        log.append("allocation matches the plan")
        extra = [h for h in alloc.hosts if h not in set(planned.hosts)]
        if extra:
            log.append(f"node(s) {', '.join(extra)} allocated but not used by the plan")
    else:
        log.append("allocation differs from the plan: " + "; ".join(diff[:6])
                   + (f"; ... {len(diff) - 6} more" if len(diff) > 6 else ""))
        log.append("re-planning on the allocated nodes and GPUs")
        placement = replan(doc, inv, alloc, log, planner)
        replanned = True
        log.extend("  " + line for line in moved_ranks(planned, placement))
    from slurmtopo.rankmap import check_placement, node_ranks
    check_placement(placement)
    for h in node_ranks(placement):
        ranks = [s.rank for s in placement.ranks_on(h)]
        gpus = placement.gpus_on(h)
        try:
            cvd = visible_devices(gpus, alloc.gpus.get(h), constrained)
        except SlurmtopoError as exc:
            raise SlurmtopoError(f"{h}: {exc.message}") from None
        log.append(f"  {h}: ranks {format_cpulist(ranks)} on GPUs "
                   f"{','.join(map(str, gpus))} -> CUDA_VISIBLE_DEVICES={cvd}")
    port = master_port(doc, alloc.job_id)
    jenv = job_env(placement, port, nccl_env(inv, placement, doc.get("socket_ifname")))
    log.append(f"MASTER_ADDR={jenv['MASTER_ADDR']} MASTER_PORT={port} "
               f"WORLD_SIZE={placement.world_size}")
    table = rank_table(placement, alloc.gpus, constrained)
    return BindResult(placement=placement, allocation=alloc, constrained=constrained,
                      replanned=replanned, job_env=jenv, table=table, log=log, inventory=inv,
                      layout=layout_from_doc(doc))


def env_script(result: BindResult, run_dir: str, environ: Mapping[str, str],
               log: List[str]) -> Tuple[str, bool]:
    """env.sh text (every value shell-quoted) and whether the rank table is
    passed by file. NCCL variables the user already exported are kept."""
    import shlex

    q = shlex.quote
    p = result.placement
    lines = ["# written by `slurmtopo bind`; sourced by the batch script before srun",
             f"export SLURM_HOSTFILE={q(os.path.join(run_dir, 'hostfile'))}",
             f"export SLURMTOPO_NTASKS={p.world_size}",
             f"export SLURMTOPO_NNODES={len(set(s.host for s in p.slots))}",
             f"export SLURMTOPO_RUN_DIR={q(run_dir)}"]
    for k, v in result.job_env.items():
        if k.startswith("NCCL_") and k in environ:
            log.append(f"keeping {k}={environ[k]} from the environment (slurmtopo "
                       f"would set {v})")
            continue
        lines.append(f"export {k}={q(v)}")
    by_file = len(result.table.encode()) > ENV_TABLE_LIMIT
    if by_file:
        lines.append(f"export SLURMTOPO_RANK_TABLE_FILE={q(os.path.join(run_dir, 'ranktable'))}")
        lines.append("unset SLURMTOPO_RANK_TABLE")
        log.append(f"rank table is {len(result.table)} bytes: passed as a file; {run_dir} "
                   "must be readable on every node")
    else:
        lines.append(f"export SLURMTOPO_RANK_TABLE={q(result.table)}")
        lines.append("unset SLURMTOPO_RANK_TABLE_FILE")
    # a task must only see GPU variables its own step set; srun reads
    # SLURM_NTASKS_PER_NODE as an option, which a re-plan may contradict
    lines.append("unset SLURM_STEP_GPUS SLURM_NTASKS_PER_NODE")
    return "\n".join(lines) + "\n", by_file


def write_run_dir(result: BindResult, run_dir: str, environ: Mapping[str, str]) -> List[str]:
    """Write hostfile, ranktable, rankmap.json and env.sh; returns paths."""
    from slurmtopo.fileio import atomic_write
    from slurmtopo.rankmap import dumps_rankmap, rankmap_dict

    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as exc:
        raise SlurmtopoError(f"cannot create the run directory ({exc.strerror})", run_dir)
    p = result.placement
    paths = []
    hostfile = os.path.join(run_dir, "hostfile")
    atomic_write(hostfile, "".join(f"{s.host}\n" for s in p.slots))
    paths.append(hostfile)
    table = os.path.join(run_dir, "ranktable")
    atomic_write(table, result.table)
    paths.append(table)
    rm = rankmap_dict(p, result.layout, extra={
        "allocation": {h: (format_cpulist(g) if g is not None else None)
                       for h, g in result.allocation.gpus.items()},
        "replanned": result.replanned, "cgroup_devices": result.constrained})
    rmpath = os.path.join(run_dir, "rankmap.json")
    atomic_write(rmpath, dumps_rankmap(rm))
    paths.append(rmpath)
    text, _ = env_script(result, run_dir, environ, result.log)
    envsh = os.path.join(run_dir, "env.sh")
    atomic_write(envsh, text)
    paths.append(envsh)
    return paths


def _main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "rank":
        return rank_main(argv[1:])
    print("usage: python3 -m slurmtopo.binding rank -- CMD [ARGS...]\n"
          "(the batch-host step is `python3 -m slurmtopo bind`)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
