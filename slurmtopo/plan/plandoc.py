"""The plan document the batch script carries: the layout, the request,
every rank, and enough of the inventory to re-plan when the inventory path
is unreadable on the node; read back here.

It is the one contract between submit time and start time, so it lives
apart from both: the script renderer (``sbatch/script.py``) writes it
(through :mod:`slurmtopo.plan.planwrite`) and the start-time step
(``binding/``, the hooks' first task) reads it with this module, and
neither imports the other. The hooks carry it in the job's environment
(:mod:`slurmtopo.plan.planenv`). Pure: data in, data out (reading the
inventory file it names is the start-time step's job)."""
from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import fields
from typing import Any, Dict, Mapping, Optional

from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.boundedjson import JsonRefused, check_shape
from slurmtopo.inventory.model import Inventory, Placement, RankSlot, parse_cpulist
from slurmtopo.inventory.schema import parse_inventory
from slurmtopo.job.groups import MAX_WORLD, Layout, build_groups
from slurmtopo.job.request import JobRequest
from slurmtopo.plan import launchers
from slurmtopo.plan.planenv import DAMAGED, PLAN_ENV, plan_env_text
from slurmtopo.plan.rankmap import check_placement, check_read_hosts, placement_from_dict

PLAN_KIND = "plan"
PLAN_VERSION = 2  # 2: ranks as (packed) columns; 1 is still read

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


def launcher_of(doc: Mapping[str, Any]) -> launchers.Launcher:
    """The launcher a plan document names (srun for plans that name none)."""
    mode = (doc.get("launch") or {}).get("launcher", launchers.DEFAULT)
    if not isinstance(mode, str) or mode not in launchers.names():
        raise SlurmtopoError(f"plan names launcher {mode!r}; this slurmtopo knows "
                             f"{', '.join(launchers.names())}")
    return launchers.get(mode)


def guardrails_of(doc: Mapping[str, Any]) -> Dict[str, Any]:
    """The plan's ``guardrails`` (``{}`` for plans without one)."""
    return dict(doc.get("guardrails") or {})


# --------------------------------------------------------------------------
# the ranks, compactly (version 2: columns, packed when big; see
# slurmtopo.plan.planwrite)

#: the most a packed value may unpack to (262,144 ranks' columns are about
#: 12 MiB, a 12,500-node embedded inventory less): a plan read from
#: someone else's job (`slurmtopo show` as an admin) whose few MiB unpack
#: to gigabytes is refused before they are built
MAX_UNPACKED_BYTES = 64 << 20
COLUMNS = ("host", "gpu", "local_rank", "nics", "cpus", "numa_node")


def unpack(value: Any, where: str = "plan", what: str = "ranks") -> Any:
    """:func:`slurmtopo.plan.planwrite.pack`'s input back from its output (anything
    else as it is)."""
    if not (isinstance(value, Mapping) and "packed" in value):
        return value
    if value.get("packed") != "zlib+base64":
        raise SlurmtopoError(f"{where}: unknown packing {value.get('packed')!r} of the {what}")
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


#: nesting of a plan document (its embedded inventory nests deepest)
PLAN_DEPTH = 32


def read_plan(text: str, where: str = "plan") -> Dict[str, Any]:
    """The plan document in ``text``, its shape checked (see check_plan)."""
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
    return parse_inventory(unpack(doc["inventory"], where, "inventory"),
                           f"{where} (embedded inventory)")


def planned_placement(doc: Mapping[str, Any]) -> Placement:
    """The submit-time Placement, groups recomputed from the layout."""
    if isinstance(doc["ranks"], list):  # version 1: one object per rank
        p = placement_from_dict(doc, "plan")
    else:
        p = placement_from_columns(doc, "plan")
    if not p.groups:
        p = Placement(slots=p.slots, groups=dict(build_groups(layout_from_doc(doc))),
                      hosts=p.hosts, notes=p.notes)
    return p


def plan_from_env_value(value: str, where: str = f"${PLAN_ENV}") -> Dict[str, Any]:
    """The plan document :func:`slurmtopo.plan.planenv.plan_env_value`
    wrote, checked as :func:`read_plan` checks a script's; SlurmtopoError
    (one line) for anything else, after reading at most
    :data:`slurmtopo.plan.planenv.MAX_ENV_JSON_BYTES`."""
    text = plan_env_text(value, where)
    try:
        return read_plan(text, where)
    except DAMAGED as exc:
        raise SlurmtopoError(f"{where}: damaged plan ({exc})") from None
