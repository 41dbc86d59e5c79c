"""The plan document the batch script carries: the layout, the request,
every rank, and enough of the inventory to re-plan when the inventory path
is unreadable on the node.

It is the one contract between submit time and start time, so it lives
apart from both: the script renderer (``sbatch/script.py``) writes it and
the start-time step (``binding/``) reads it, and neither imports the other.
Pure: data in, data out (reading the inventory file it names is the
start-time step's job)."""
from __future__ import annotations

import binascii
import json
import os
import zlib
from dataclasses import fields, is_dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Fabric, Inventory, Placement, RankSlot, parse_cpulist

if TYPE_CHECKING:
    from slurmtopo.plan.launchers import Launcher

PLAN_KIND = "plan"
PLAN_VERSION = 2  # 2: ranks as (packed) columns; 1 is still read
#: embed the whole inventory in the script below this size (JSON bytes),
#: else only the planned nodes and the switches above them
EMBED_LIMIT = 256 * 1024
#: ... and only when it has at most this many nodes
EMBED_WHOLE_NODES = 1024

# The task launch, the other half of the contract: the script's srun line
# runs TASK_SNIPPET in every task; the start-time step writes the POSIX sh
# text it evaluates (SLURMTOPO_TASK_ENV: every task's lines, or for a big job
# a loader that checks and sources the task's block). The snippet sources no
# file by path: earlier releases sourced SLURMTOPO_TASK_ENV_FILE, which
# another user able to rename entries of a shared submit directory could
# swap between the start-time step and the task.
# What differs between launchers (srun, torchrun) is in slurmtopo.plan.launchers.
TASK_SNIPPET = ('eval "${SLURMTOPO_TASK_ENV:?no task environment: evaluate what '
                'slurmtopo bind --print-env prints before srun}"')
#: $0 of the task shell, seen in `ps` and in its error messages
TASK_NAME = "slurmtopo-task"


def launcher_of(doc: Mapping[str, Any]) -> "Launcher":
    """The launcher a plan document names (srun for plans that name none)."""
    # lazy: off the path of `slurmtopo hooks task-prolog` (start-up time)
    from slurmtopo.plan import launchers

    mode = (doc.get("launch") or {}).get("launcher", launchers.DEFAULT)
    if not isinstance(mode, str) or mode not in launchers.names():
        raise SlurmtopoError(f"plan names launcher {mode!r}; this slurmtopo knows "
                             f"{', '.join(launchers.names())}")
    return launchers.get(mode)


def embedded_inventory(inv: Inventory, hosts: Sequence[str]) -> Dict[str, Any]:
    """The inventory in schema form, for bind to use when the inventory path
    is unreadable on the compute node. Preset hardware is written out (the
    node's slurmtopo may know other presets). Small inventories go in whole
    so a re-plan can use any node; big ones are cut to the planned nodes and
    the switches above them (an inventory of more than EMBED_WHOLE_NODES
    nodes is not even tried whole: folding 100,000 names costs a second)."""
    # lazy: off the path of `slurmtopo hooks plan`, `hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.inventory.schema import inventory_dict

    def with_types(sub: Inventory) -> Inventory:
        types = dict(sub.node_types)
        for n in sub:
            if n.type is not None and n.type not in types:
                types[n.type] = n.hardware
        return Inventory(nodes=sub.nodes, fabric=sub.fabric, node_types=types)

    if len(inv.nodes) <= EMBED_WHOLE_NODES:
        whole = inventory_dict(with_types(inv))
        if len(json.dumps(whole)) <= EMBED_LIMIT:
            return whole
    keep = set(hosts)
    nodes = {h: inv.nodes[h] for h in hosts if h in inv.nodes}
    # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.inventory.topology import network_view
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
                  socket_ifname: Optional[str] = None,
                  launch: Optional[Mapping[str, Any]] = None,
                  guardrails: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Everything ``slurmtopo bind`` needs, as JSON data for the script.
    ``launch``: ``{"launcher": "srun"|"torchrun"}``; ``guardrails``: the
    hazard policy, NCCL release and spares the job was submitted with
    (:func:`guardrails_dict`; the key is left out when empty, so a plan
    that uses none of them is what it was before they existed)."""
    # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.plan.rankmap import check_placement, layout_dict

    check_placement(placement)
    doc = {
        "slurmtopo": PLAN_KIND, "version": PLAN_VERSION,
        "inventory_path": os.path.abspath(inventory_path) if inventory_path else None,
        "layout": layout_dict(layout),
        "request": request_dict(req),
        "master_port": master_port,
        "socket_ifname": socket_ifname,
        "hosts": list(placement.by_host()),
        "ranks": pack(rank_columns(placement)),
        "inventory": pack(embedded_inventory(inv, placement.hosts)),
        "launch": dict(launch or {"launcher": "srun"}),
    }
    if guardrails:
        doc["guardrails"] = dict(guardrails)
    return doc


def guardrails_dict(hazards: Sequence[str] = (), nccl_version: Optional[str] = None,
                    spares: int = 0) -> Dict[str, Any]:
    """The plan's ``guardrails`` part: only what was given."""
    out: Dict[str, Any] = {}
    if hazards:
        out["hazards"] = list(hazards)
    if nccl_version:
        out["nccl_version"] = str(nccl_version)
    if spares:
        out["spares"] = int(spares)
    return out


def guardrails_of(doc: Mapping[str, Any]) -> Dict[str, Any]:
    """The plan's ``guardrails`` (``{}`` for plans without one)."""
    return dict(doc.get("guardrails") or {})


# --------------------------------------------------------------------------
# the ranks, compactly (version 2)
#
# Version 1 wrote one JSON object per rank: 2 MB of script at 16,384 ranks,
# and Slurm refuses scripts over max_script_size (4 MB by default). Version 2
# writes columns: host index, GPU, local rank, and indices into the few
# distinct NIC and CPU sets; above PACK_BYTES the columns are zlib-compressed
# and base64-encoded (lines of BASE64_LINE characters).

#: columns above this many bytes of JSON are packed
PACK_BYTES = 16 * 1024
#: the most a packed value may unpack to (262,144 ranks' columns are about
#: 12 MiB, a 12,500-node embedded inventory less): a plan read from
#: someone else's job (`slurmtopo show` as an admin) whose few MiB unpack
#: to gigabytes is refused before they are built
MAX_UNPACKED_BYTES = 64 << 20
BASE64_LINE = 76
COLUMNS = ("host", "gpu", "local_rank", "nics", "cpus", "numa_node")


def rank_columns(placement: Placement) -> Dict[str, Any]:
    """The ranks as columns (rank r is index r of each list): ``host``
    indexes the plan's ``hosts``, ``nics``/``cpus`` index ``nic_sets``
    (comma-joined names) and ``cpu_sets`` (kernel cpulists)."""
    # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.plan.rankmap import cpulists

    slots = placement.slots
    hosts = {h: i for i, h in enumerate(placement.by_host())}
    cpulist = cpulists(placement)
    # NIC and CPU tuples are shared by the slots that have them: index each
    # distinct object once, in the order the ranks first show it (a value
    # met again under another object gets the index it has already)
    nic_sets: Dict[Tuple[str, ...], int] = {}
    cpu_sets: Dict[str, int] = {}  # cpulist -> index
    nics = list(map(attrgetter("nics"), slots))
    cpus = list(map(attrgetter("cpus"), slots))
    nic_ix = {k: nic_sets.setdefault(t, len(nic_sets))
              for k, t in dict(zip(map(id, nics), nics)).items()}
    cpu_ix = {k: cpu_sets.setdefault(cpulist[k], len(cpu_sets))
              for k in dict.fromkeys(map(id, cpus))}
    cols: Dict[str, List[Any]] = {
        "host": list(map(hosts.__getitem__, map(attrgetter("host"), slots))),
        "gpu": list(map(attrgetter("gpu"), slots)),
        "local_rank": list(map(attrgetter("local_rank"), slots)),
        "nics": list(map(nic_ix.__getitem__, map(id, nics))),
        "cpus": list(map(cpu_ix.__getitem__, map(id, cpus))),
        "numa_node": list(map(attrgetter("numa_node"), slots)),
    }
    out: Dict[str, Any] = {"nic_sets": [",".join(n) for n in nic_sets],
                           "cpu_sets": list(cpu_sets)}
    out.update(cols)
    return out


def pack(value: Any) -> Any:
    """``value`` as it is when its JSON is small, else ``{"packed":
    "zlib+base64", "data": [lines]}``: zlib at level 9 is deterministic, and
    base64 lines are quoted JSON strings, so nothing in them can end the
    here-document."""
    text = json.dumps(value, separators=(",", ":"))
    if len(text) <= PACK_BYTES:
        return value
    # lazy: off the plan path (plan, sbatch, hooks; start-up time)
    import base64

    b64 = base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")
    return {"packed": "zlib+base64",
            "data": [b64[i:i + BASE64_LINE] for i in range(0, len(b64), BASE64_LINE)]}


def unpack(value: Any, where: str = "plan", what: str = "ranks") -> Any:
    """:func:`pack`'s input back from its output (anything else as it is)."""
    if not (isinstance(value, Mapping) and "packed" in value):
        return value
    if value.get("packed") != "zlib+base64":
        raise SlurmtopoError(f"{where}: unknown packing {value.get('packed')!r} of the {what}")
    # lazy: off the plan path (plan, sbatch, hooks; start-up time)
    import base64

    try:
        raw = base64.b64decode("".join(value["data"]), validate=True)
        inflate = zlib.decompressobj()
        text = inflate.decompress(raw, MAX_UNPACKED_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:
            raise SlurmtopoError(f"{where}: the packed {what} unpack to more than "
                                 f"{MAX_UNPACKED_BYTES >> 20} MiB (or are cut short): not a "
                                 "plan slurmtopo wrote")
        return json.loads(text)
    except (KeyError, TypeError, ValueError, binascii.Error, zlib.error,
            RecursionError) as exc:
        raise SlurmtopoError(f"{where}: the packed {what} are damaged "
                             f"({type(exc).__name__})") from None


def placement_from_columns(doc: Mapping[str, Any], where: str = "plan") -> Placement:
    """Rebuild the submit-time Placement (without groups) from a version 2
    document; SlurmtopoError says what is malformed."""
    # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.plan.rankmap import check_placement, check_read_hosts

    # lazy: off the path of `slurmtopo hooks task-prolog` (start-up time)
    from slurmtopo.job.groups import MAX_WORLD

    cols = unpack(doc["ranks"], where, "ranks")
    if not isinstance(cols, Mapping):
        raise SlurmtopoError(f"{where}: 'ranks' must be columns (version 2)")
    if any(not isinstance(cols.get(k), list) or len(cols[k]) > MAX_WORLD for k in COLUMNS):
        raise SlurmtopoError(f"{where}: malformed rank columns (each a list of at most "
                             f"{MAX_WORLD:,} ranks)")
    try:
        hosts = [str(h) for h in doc["hosts"]]
        nic_sets = [tuple(n for n in str(x).split(",") if n) for x in cols["nic_sets"]]
        cpu_sets = [parse_cpulist(str(x)) for x in cols["cpu_sets"]]
        n = len(cols["host"])
        if any(len(cols[k]) != n for k in COLUMNS):
            raise ValueError("columns of different lengths")
        slots = tuple(
            RankSlot(rank=r, host=hosts[h], gpu=int(g), local_rank=int(lr), nics=nic_sets[ni],
                     cpus=cpu_sets[ci], numa_node=None if numa is None else int(numa))
            for r, (h, g, lr, ni, ci, numa) in enumerate(zip(*(cols[k] for k in COLUMNS))))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise SlurmtopoError(f"{where}: malformed rank columns ({exc})") from None
    p = Placement(slots=slots, groups={}, hosts=tuple(hosts), notes=tuple(doc.get("notes", ())))
    check_read_hosts(p, where)
    check_placement(p)
    return p


def dumps_plan(doc: Mapping[str, Any]) -> str:
    """The plan document as JSON, one key a line and one rank column (or
    base64 line) a line; nothing in it can end a quoted here-document: every
    line starts with a blank or a brace."""
    ranks = doc.get("ranks")
    if not isinstance(ranks, Mapping):  # version 1
        # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
        from slurmtopo.plan.rankmap import dumps_rankmap

        return dumps_rankmap(doc)
    dumps = json.dumps
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key in ("ranks", "inventory") and isinstance(value, Mapping) and (
                key == "ranks" or "packed" in value):
            inner = list(value.items())
            lines.append(f"  {dumps(key)}: {{")
            for j, (k, v) in enumerate(inner):
                last = "," if j < len(inner) - 1 else ""
                if k == "data" and isinstance(v, list):
                    lines.append(f"    {dumps(k)}: [")
                    lines.append(",\n".join("      " + dumps(x) for x in v))
                    lines.append(f"    ]{last}")
                else:
                    lines.append(f"    {dumps(k)}: {dumps(v, separators=(',', ':'))}{last}")
            lines.append(f"  }}{comma}")
        else:
            lines.append(f"  {dumps(key)}: {dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


#: nesting of a plan document (its embedded inventory nests deepest)
PLAN_DEPTH = 32


def read_plan(text: str, where: str = "plan") -> Dict[str, Any]:
    """The plan document in ``text``, its shape checked (see check_plan)."""
    # lazy: off the plan path (plan, sbatch, hooks; start-up time)
    from slurmtopo.files.boundedjson import JsonRefused, check_shape

    try:
        # someone else's plan (`slurmtopo show` as an admin): nesting and
        # numbers bounded before Python's parser recurses or converts
        check_shape(text, PLAN_DEPTH)
        doc = json.loads(text)
    except JsonRefused as exc:
        raise SlurmtopoError(f"{where}: not a slurmtopo plan ({exc})") from None
    except json.JSONDecodeError as exc:
        raise SlurmtopoError(f"{where}: not a slurmtopo plan ({exc.msg} at line "
                             f"{exc.lineno})") from None
    except (ValueError, RecursionError):
        raise SlurmtopoError(f"{where}: not a slurmtopo plan (a value out of bounds)") from None
    if not isinstance(doc, dict) or doc.get("slurmtopo") != PLAN_KIND:
        raise SlurmtopoError(f"{where}: not a slurmtopo plan document")
    version = doc.get("version", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise SlurmtopoError(f"{where}: plan version {version!r} is not a number")
    if version > PLAN_VERSION:
        raise SlurmtopoError(f"{where}: plan version {doc['version']} is newer than this "
                             "slurmtopo; install the same slurmtopo on the compute nodes")
    for key in ("layout", "ranks"):
        if key not in doc:
            raise SlurmtopoError(f"{where}: plan has no {key!r}")
    if not isinstance(doc["ranks"], list) and "hosts" not in doc:
        raise SlurmtopoError(f"{where}: plan has rank columns but no 'hosts'")
    check_plan(doc, where)
    return doc


#: every key of a plan document -> the JSON types its value may have
_PLAN_KEYS = {"slurmtopo": (str,), "version": (int,), "inventory_path": (str, type(None)),
              "layout": (dict,), "request": (dict, type(None)),
              "master_port": (int, type(None)), "socket_ifname": (str, type(None)),
              "hosts": (list,), "ranks": (list, dict), "inventory": (dict, type(None)),
              "launch": (dict, type(None)), "guardrails": (dict, type(None))}
#: every key of the plan's ``guardrails`` -> the JSON types its value may have
_GUARD_KEYS = {"hazards": (list,), "nccl_version": (str,), "spares": (int,)}
_LAYOUT_INTS = ("world", "tp", "cp", "ep", "pp", "dp", "expert_tp")
_SCALARS = (str, int, float, bool, type(None))


def _json_kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), "a number")


def check_plan(doc: Mapping[str, Any], where: str = "plan") -> None:
    """Refuse a plan document whose parts have the wrong shape, naming the
    part: the step must fail with one line, not deep inside the re-plan.
    (The ranks are checked where they are read, by placement_from_dict or
    placement_from_columns; the embedded inventory by parse_inventory.)"""
    def bad(what: str, value) -> SlurmtopoError:
        return SlurmtopoError(f"{where}: damaged plan: {what} is {_json_kind(value)} "
                              f"({str(value)[:60]})")

    for key, value in doc.items():
        kinds = _PLAN_KEYS.get(key)
        if kinds is None:
            raise SlurmtopoError(f"{where}: damaged plan: unknown key {key!r}")
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise bad(repr(key), value)
    port = doc.get("master_port")
    if port is not None and not 1 <= port <= 65535:
        raise SlurmtopoError(f"{where}: damaged plan: master_port {port} is not a TCP port")
    if any(not isinstance(h, str) for h in doc["hosts"]):
        raise bad("an entry of 'hosts'", next(h for h in doc["hosts"] if not isinstance(h, str)))
    for key, value in doc["layout"].items():
        ok = (value is None or (isinstance(value, int) and not isinstance(value, bool))
              if key in _LAYOUT_INTS else isinstance(value, str) if key in ("order", "convention")
              else None)
        if ok is None:
            raise SlurmtopoError(f"{where}: damaged plan: unknown layout key {key!r}")
        if not ok:
            raise bad(f"layout {key!r}", value)
    for key in (doc.get("launch") or {}):
        if key != "launcher":
            raise SlurmtopoError(f"{where}: damaged plan: unknown launch key {key!r}")
    for key, value in (doc.get("guardrails") or {}).items():
        kinds = _GUARD_KEYS.get(key)
        if kinds is None:
            raise SlurmtopoError(f"{where}: damaged plan: unknown guardrails key {key!r}")
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise bad(f"guardrails {key!r}", value)
    guard = doc.get("guardrails") or {}
    if any(not isinstance(h, str) for h in guard.get("hazards", ())):
        raise bad("an entry of guardrails 'hazards'", guard["hazards"])
    if not 0 <= guard.get("spares", 0) <= 64:
        raise SlurmtopoError(f"{where}: damaged plan: guardrails spares {guard['spares']} is "
                             "not 0-64")
    launcher_of(doc)
    for key, value in (doc.get("request") or {}).items():
        inner = value.values() if isinstance(value, dict) else (
            value if isinstance(value, list) else ())
        if any(not isinstance(v, _SCALARS) for v in inner):
            raise bad(f"request {key!r}", value)
    _check_request(doc, where)
    if doc.get("inventory"):
        # lazy: off the plan path (plan, sbatch, hooks; start-up time)
        from slurmtopo.inventory.schema import parse_inventory

        inv = parse_inventory(unpack(doc["inventory"], where, "inventory"),
                              f"{where} (embedded inventory)")
        # plan_document writes only the node types its nodes use: another
        # one means an edit (a renamed type whose nodes fell back to a preset)
        unused = sorted(set(inv.node_types) - {n.type for n in inv})
        if unused:
            raise SlurmtopoError(f"{where}: damaged plan: the embedded inventory defines node "
                                 f"type {unused[0]!r}, which no node uses")


def _check_request(doc: Mapping[str, Any], where: str) -> None:
    """The request and layout rebuild (as a re-plan would rebuild them)."""
    # lazy: off the path of `slurmtopo hooks task-prolog` (start-up time)
    from slurmtopo.job.request import JobRequest

    names = {f.name for f in fields(JobRequest)} - {"layout", "nodelist", "exclude"}
    request = dict(doc.get("request") or {})
    unknown = sorted(set(request) - names)
    if unknown:
        raise SlurmtopoError(f"{where}: damaged plan: unknown request key {unknown[0]!r}")
    try:
        JobRequest(layout=layout_from_doc(doc), **request)
    except (TypeError, ValueError, AttributeError) as exc:
        raise SlurmtopoError(f"{where}: damaged plan: bad request ({exc})") from None


def layout_from_doc(doc: Mapping[str, Any]):
    # lazy: off the path of `slurmtopo hooks task-prolog` (start-up time)
    from slurmtopo.job.groups import Layout

    lay = dict(doc["layout"])
    names = {f.name for f in fields(Layout)}
    return Layout(**{k: v for k, v in lay.items() if k in names}).resolved()


def check_against_inventory(placement: Placement, inv: Inventory, where: str = "plan") -> None:
    """Every rank's host is a node of ``inv`` (the plan's embedded
    inventory) and its GPU one that node has: the plan's own limits, not
    only slurmtopo's (a GPU index past the node's makes grids and tables
    of that size)."""
    for s in placement.slots:
        node = inv.nodes.get(s.host)
        if node is None:
            raise SlurmtopoError(f"{where}: rank {s.rank} is on a host its embedded inventory "
                                 "does not have")
        if s.gpu >= node.hardware.gpu_count:
            raise SlurmtopoError(f"{where}: rank {s.rank} has GPU {s.gpu}, and its host has "
                                 f"{node.hardware.gpu_count} GPUs")


def embedded_inventory_of(doc: Mapping[str, Any], where: str = "plan") -> Optional[Inventory]:
    """The inventory a plan embeds (None: none)."""
    if not doc.get("inventory"):
        return None
    # lazy: off the path of `slurmtopo hooks plan`, `hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.inventory.schema import parse_inventory

    return parse_inventory(unpack(doc["inventory"], where, "inventory"),
                           f"{where} (embedded inventory)")


def planned_placement(doc: Mapping[str, Any]) -> Placement:
    """The submit-time Placement, groups recomputed from the layout."""
    # lazy: off the path of `slurmtopo hooks task-prolog`, `--help` (start-up time)
    from slurmtopo.job.groups import build_groups
    from slurmtopo.plan.rankmap import placement_from_dict

    if isinstance(doc["ranks"], list):  # version 1: one object per rank
        p = placement_from_dict(doc, "plan")
    else:
        p = placement_from_columns(doc, "plan")
    if not p.groups:
        p = Placement(slots=p.slots, groups=dict(build_groups(layout_from_doc(doc))),
                      hosts=p.hosts, notes=p.notes)
    return p


# --------------------------------------------------------------------------
# the plan in the job's environment (the Slurm hooks)
#
# A job planned by the cli_filter hook (docs/admin.md, "Slurm hooks") has no
# script of slurmtopo's to carry its plan: the hook adds it to the job's
# environment instead (sbatch --export=...,SLURMTOPO_PLAN=VALUE), where the
# TaskProlog of each task finds it. VALUE must survive sbatch's --export
# parser, which splits at commas and pairs quotes: compact JSON, zlib, then
# URL-safe base64 without padding (letters, digits, '-' and '_' only).

#: the environment variable the hooks' plan travels in
PLAN_ENV = "SLURMTOPO_PLAN"
#: VALUE's prefix: the encoding's version
ENV_ENCODING = "z1:"
#: the longest VALUE a hook writes or reads (the job's environment, and so
#: every process of the job, carries it; Linux caps one variable at 128 KiB)
MAX_ENV_BYTES = 96 * 1024
#: the most JSON a VALUE may inflate to (a bound on what a damaged or
#: hostile value costs the reader)
MAX_ENV_JSON_BYTES = 16 * 1024 * 1024


def plan_env_value(doc: Mapping[str, Any]) -> str:
    """``doc`` as the value of :data:`PLAN_ENV` (deterministic: zlib at
    level 9). SlurmtopoError when it would exceed :data:`MAX_ENV_BYTES`."""
    # lazy: off the plan path (plan, sbatch, hooks; start-up time)
    import base64

    text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    value = ENV_ENCODING + base64.urlsafe_b64encode(
        zlib.compress(text.encode(), 9)).decode("ascii").rstrip("=")
    if len(value) > MAX_ENV_BYTES:
        raise SlurmtopoError(f"the plan is {len(value):,} bytes in the job's environment, more "
                             f"than {MAX_ENV_BYTES:,}")
    return value


def plan_from_env_value(value: str, where: str = f"${PLAN_ENV}") -> Dict[str, Any]:
    """The plan document :func:`plan_env_value` wrote, checked as
    :func:`read_plan` checks a script's; SlurmtopoError (one line) for
    anything else, after reading at most :data:`MAX_ENV_JSON_BYTES`."""
    # lazy: off the plan path (plan, sbatch, hooks; start-up time)
    import base64

    if len(value) > MAX_ENV_BYTES:
        raise SlurmtopoError(f"{where}: {len(value):,} bytes, more than {MAX_ENV_BYTES:,}")
    if not value.startswith(ENV_ENCODING):
        raise SlurmtopoError(f"{where}: not a slurmtopo plan (expected {ENV_ENCODING}...)")
    body = value[len(ENV_ENCODING):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        inflate = zlib.decompressobj()
        text = inflate.decompress(raw, MAX_ENV_JSON_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:
            raise ValueError(f"more than {MAX_ENV_JSON_BYTES:,} bytes of JSON, or cut short")
        return read_plan(text.decode("utf-8"), where)
    except (ValueError, binascii.Error, zlib.error, UnicodeDecodeError) as exc:
        raise SlurmtopoError(f"{where}: damaged plan ({exc})") from None
