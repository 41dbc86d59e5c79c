"""A directory of node reports compiled into one compact inventory.

The agents write one report per node (``slurmtopo agent discover``), and a
directory of them *is* an inventory. Parsing a report costs milliseconds, so
12,500 of them cost a minute and a half on every ``slurmtopo plan``. The
compiled form is one JSON inventory document:

* identical hardware is folded into node types (named from the GPU model and
  count, in the order of the first node that has it). GPU UUIDs are left
  out (MIG nodes excepted, whose GPU and MIG UUIDs name Slurm's MIG GRES):
  they are the only thing two nodes of one build differ in, nothing on the
  cluster side reads them, and the planner works per hardware object, so
  12,500 one-node "types" would make it price every node afresh (minutes
  instead of milliseconds). The reports themselves keep them;
* a node whose hardware matches no other keeps a per-node override: the type
  it differs least from, plus only the hardware fields that differ (a NIC
  down, another GPU memory size), or its whole hardware when nothing is
  close;
* consecutive nodes of one type, domain and features fold into one hostlist;
* each node's report block (``stale`` and the like) is kept under
  ``reports``, and ``compiled`` records which file gave which node, with
  its size and modification time.

:func:`load_report_dir` is what ``load_inventory(DIR)`` uses: it keeps the
compiled form in ``DIR/.slurmtopo-inventory.json`` when the directory is
the user's own (owned by them, writable by nobody else), else in the
user's cache directory, as :mod:`slurmtopo.files.usercache` keeps private
entries: 0600 in 0700 directories whatever the umask, written to a fresh
temporary name and renamed, read only when it is a regular file of the
user's that nobody else may write, no symbolic link followed. A compiled
form another user could have written (in a shared report directory) is
never read: each user keeps their own. It re-parses only the reports
whose name, size or modification time changed since. Output is
deterministic: the same reports give the same bytes.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import InventoryError
from slurmtopo.files.usercache import slot_in
from slurmtopo.inventory.hostlist import expand_hostlist, fold_hostlist
from slurmtopo.inventory.model import Hardware, Inventory, Node, SCHEMA_VERSION

COMPILED_NAME = ".slurmtopo-inventory.json"
#: the user's cache directory for compiled forms of directories that are
#: not the user's own (:func:`slurmtopo.files.usercache.slot_in`)
KIND = "inventories"
SUFFIX = ".json"
COMPILED_VERSION = 1
#: a node differing from a type in more top-level hardware fields than this
#: is written out whole
MAX_OVERRIDE_FIELDS = 3

FileKey = Tuple[int, int]  # (mtime_ns, size)


@dataclass(frozen=True)
class Schema:
    """The schema functions this module works with. :mod:`slurmtopo.inventory.schema`
    passes its own (``inventory.report_dir_schema()``): it reads directories
    through this module, so this module cannot import it back."""

    #: one document file -> Inventory (module-level: worker processes get it)
    read: Callable[[str], Inventory]
    #: parsed document data, where -> Inventory
    parse: Callable[[Any, str], Inventory]
    merge: Callable[[Sequence[Inventory]], Inventory]
    hardware_dict: Callable[[Hardware], Dict[str, Any]]
    suffixes: Tuple[str, ...]


# --------------------------------------------------------------------------
# compiling (pure)


def _slug(hw: Hardware) -> str:
    model = hw.gpus[0].model if hw.gpus else "cpu"
    words = re.findall(r"[a-z0-9]+", model.lower())
    words = [w for w in words if w not in ("nvidia", "tesla", "geforce")] or ["gpu"]
    return "-".join(words[:3]) + f"-{len(hw.gpus)}"


def without_uuids(hw: Hardware) -> Hardware:
    """The hardware less its GPU UUIDs (see the module docstring); MIG
    hardware as it is."""
    if any(g.mig for g in hw.gpus) or not any(g.uuid for g in hw.gpus):
        return hw
    return replace(hw, gpus=tuple(replace(g, uuid=None) for g in hw.gpus))


def fold_types(nodes: Sequence[Node]) -> Tuple[Dict[str, Hardware], Dict[str, str]]:
    """(type name -> hardware, node name -> type name) for every hardware
    (less GPU UUIDs) that two or more nodes share, named in the order of
    its first node."""
    groups: Dict[Hardware, List[str]] = {}
    for n in nodes:
        if any(g.mig for g in n.gpus):  # MIG UUIDs are per node: written whole
            continue
        groups.setdefault(without_uuids(n.hardware), []).append(n.name)
    types: Dict[str, Hardware] = {}
    of: Dict[str, str] = {}
    taken: Dict[str, int] = {}
    for hw, names in groups.items():
        if len(names) < 2:
            continue
        base = _slug(hw)
        taken[base] = taken.get(base, 0) + 1
        name = base if taken[base] == 1 else f"{base}-{taken[base]}"
        types[name] = hw
        for n in names:
            of[n] = name
    return types, of


def _override(hw_d: Mapping[str, Any], type_d: Mapping[str, Any]) -> Dict[str, Any]:
    """The hardware fields to write on a node of a type so that it reads
    back as ``hw_d``; a field the type has and the node lacks is reset."""
    out = {k: v for k, v in hw_d.items() if type_d.get(k) != v}
    for k in type_d:
        if k not in hw_d:
            out[k] = [] if k == "nics" else (False if k == "nvswitch" else None)
    return out


def compile_inventory(inv: Inventory, files: Mapping[str, Tuple[FileKey, Optional[str]]],
                      schema: Schema, source: str = "") -> Dict[str, Any]:
    """The compiled document of ``inv`` (the nodes of a report directory, in
    the order they are to be read back). ``files``: document file name ->
    ((mtime_ns, size), node name, or None for a document that is not a node
    report)."""
    hardware_dict = schema.hardware_dict

    nodes = list(inv.nodes.values())
    types, of = fold_types(nodes)
    type_dicts = {t: hardware_dict(hw) for t, hw in types.items()}
    entries: List[Dict[str, Any]] = []
    run: List[Node] = []

    def flush() -> None:
        if not run:
            return
        names = [n.name for n in run]
        folded = fold_hostlist(names) if len(names) > 1 else names[0]
        if len(names) > 1 and expand_hostlist(folded) != names:  # order would change
            for n in run:
                entries.append(_entry(n.name, run[0], {"type": of[n.name]}))
        else:
            entries.append(_entry(folded, run[0], {"type": of[run[0].name]}))
        run.clear()

    for n in nodes:
        t = of.get(n.name)
        if t is not None:
            if run and (of[run[0].name] != t or run[0].nvlink_domain != n.nvlink_domain
                        or run[0].features != n.features):
                flush()
            run.append(n)
            continue
        flush()
        shape = without_uuids(n.hardware)
        hw_d = hardware_dict(shape)
        best: Optional[Tuple[int, str, Dict[str, Any]]] = None
        for tn, td in type_dicts.items():
            if len(types[tn].gpus) != len(n.hardware.gpus) or shape is n.hardware and any(
                    g.mig for g in n.gpus):
                continue
            ov = _override(hw_d, td)
            if len(ov) <= MAX_OVERRIDE_FIELDS and (best is None or len(ov) < best[0]):
                best = (len(ov), tn, ov)
        entries.append(_entry(n.name, n, {"type": best[1], **best[2]} if best else hw_d))
    flush()
    doc: Dict[str, Any] = {"slurmtopo": "inventory", "version": SCHEMA_VERSION}
    if type_dicts:
        doc["node_types"] = type_dicts
    doc["nodes"] = entries
    reports = {n.name: dict(inv.reports[n.name]) for n in nodes if inv.reports.get(n.name)}
    if reports:
        doc["reports"] = reports
    doc["compiled"] = {"version": COMPILED_VERSION, "from": source,
                       "files": {f: [k[0], k[1], node] for f, (k, node) in sorted(files.items())}}
    return doc


def _entry(name: str, node: Node, hardware: Mapping[str, Any]) -> Dict[str, Any]:
    e: Dict[str, Any] = {"name": name}
    e.update(hardware)
    if node.nvlink_domain is not None:
        e["nvlink_domain"] = {"cluster_uuid": node.nvlink_domain.cluster_uuid,
                              "clique_id": node.nvlink_domain.clique_id}
    if node.features:
        e["features"] = list(node.features)
    return e


def dumps_compiled(doc: Mapping[str, Any]) -> str:
    """Compact JSON, one node entry and one report a line."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key in ("nodes", "reports", "node_types") and value:
            pairs = (list(value.items()) if isinstance(value, Mapping)
                     else [(None, v) for v in value])
            opener, closer = ("{", "}") if isinstance(value, Mapping) else ("[", "]")
            lines.append(f"  {json.dumps(key)}: {opener}")
            lines.append(",\n".join(
                "    " + (f"{json.dumps(k)}: " if k is not None else "")
                + json.dumps(v, separators=(",", ":"), sort_keys=False) for k, v in pairs))
            lines.append(f"  {closer}{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# the report directory, with the compiled form as a cache


def scan(directory: str, suffixes: Tuple[str, ...]) -> Dict[str, FileKey]:
    """Document file name -> (mtime_ns, size), hidden files skipped."""
    out: Dict[str, FileKey] = {}
    try:
        entries = list(os.scandir(directory))
    except OSError as exc:
        raise InventoryError(f"cannot list the directory ({exc.strerror})", directory) from None
    for e in entries:
        if e.name.startswith(".") or not e.name.endswith(suffixes):
            continue
        try:
            st = e.stat()
        except OSError:
            continue
        if not os.path.isdir(e.path):
            out[e.name] = (st.st_mtime_ns, st.st_size)
    return out


def cache_slot(directory: str, create: bool = False):
    """Where the compiled form of ``directory`` lives
    (:class:`slurmtopo.files.usercache.Slot`): in the directory when it is the
    user's own, else in the user's cache directory (keyed by the
    directory's absolute path); None when neither will do."""
    return slot_in(directory, COMPILED_NAME, KIND, SUFFIX, create)


def read_compiled(slot) -> Optional[Dict[str, Any]]:
    """The compiled document in ``slot``, or None when there is none or it
    is not one (a damaged cache is rebuilt, never trusted; a FIFO, a link
    or another user's file planted as the cache is passed over, never
    waited on or followed)."""
    data = slot.read() if slot is not None else None
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("compiled"), dict):
        return None
    if doc["compiled"].get("version") != COMPILED_VERSION:
        return None
    return doc


def _write_cache(directory: str, text: str) -> Optional[str]:
    """Keep ``text`` as the compiled form of ``directory``; where it went,
    or None when there is no place for it."""
    slot = cache_slot(directory, create=True)
    if slot is None:
        return None
    with slot:
        return slot.where if slot.write(text.encode()) else None


def load_report_dir(directory: str, schema: Schema,
                    write_cache: bool = True) -> Tuple[List[Inventory], List[str]]:
    """The directory as inventory parts ready to merge: one part holding
    every node report, read from the compiled form (brought up to date
    first: only reports whose size or modification time changed are parsed
    again), and one per other document (a fabric file, an inventory: always
    parsed). Also returns log lines (what was read again, where the compiled
    form went)."""
    files = scan(directory, schema.suffixes)
    if not files:
        raise InventoryError("no *.yaml, *.yml or *.json files in this directory", directory)
    slot = cache_slot(directory)
    where, compiled = directory, None
    if slot is not None:
        with slot:
            where, compiled = slot.where, read_compiled(slot)
    known: Dict[str, list] = dict(compiled["compiled"].get("files") or {}) if compiled else {}
    reuse = {f: known[f][2] for f, k in files.items()
             if f in known and list(k) == known[f][:2] and known[f][2] is not None}
    parts: List[Inventory] = []
    whole: Optional[Inventory] = None
    if reuse:
        whole = _parse_compiled(compiled, where, schema)
        if set(reuse.values()) <= set(whole.nodes):
            keep = set(reuse.values())
            parts.append(Inventory(nodes={n: node for n, node in whole.nodes.items() if n in keep},
                                   node_types=whole.node_types,
                                   reports={n: r for n, r in whole.reports.items() if n in keep}))
        else:  # the compiled form does not hold what it lists: read everything again
            reuse, whole = {}, None
    file_nodes: Dict[str, Tuple[FileKey, Optional[str]]] = {
        f: (files[f], node) for f, node in reuse.items()}
    others: List[Inventory] = []
    reread = 0
    todo = [f for f in sorted(files) if f not in reuse]
    for f, part in zip(todo, _parse_files([os.path.join(directory, f) for f in todo],
                                          schema.read)):
        if part.reports and len(part.nodes) == 1 and not part.fabric.switches:
            parts.append(part)
            file_nodes[f] = (files[f], next(iter(part.nodes)))
            reread += 1
        else:
            others.append(part)
            file_nodes[f] = (files[f], None)
    log: List[str] = []
    current = {f: [k[0], k[1], node] for f, (k, node) in sorted(file_nodes.items())}
    reports: Optional[Inventory] = None
    if parts and (whole is None or current != known):
        merged = schema.merge(parts) if len(parts) > 1 else parts[0]
        order = [v[2] for v in current.values() if v[2] is not None]
        merged = replace(merged, nodes={n: merged.nodes[n] for n in order})
        doc = compile_inventory(merged, file_nodes, schema, os.path.abspath(directory))
        text = dumps_compiled(doc)
        written = _write_cache(directory, text) if write_cache else None
        log.append(f"compiled {len(merged.nodes)} node report(s) ({reread} read again) into "
                   f"{written or 'memory only (no writable place for it)'}")
        reports = _parse_compiled(json.loads(text), written or directory, schema)
    elif parts:
        reports = whole
    return ([reports] if reports is not None else []) + others, log


#: below this many files to read, one process reads them
PARALLEL_FILES = 256


def _parse_files(paths: Sequence[str], read: Callable[[str], Inventory]) -> List[Inventory]:
    """Parse documents, in worker processes when there are many (the first
    compile of 12,500 reports is a minute of YAML on one core). Results in
    ``paths`` order; the first error is raised as it would be serially."""
    workers = min(os.cpu_count() or 1, 16)
    if len(paths) < PARALLEL_FILES or workers < 2:
        return [read(p) for p in paths]

    # lazy: only 256 reports or more start workers; the pool's modules
    # (multiprocessing) are 8-13 ms measured on every `--inventory DIR` load
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(read, paths, chunksize=64))


def _parse_compiled(doc: Mapping[str, Any], where: str, schema: Schema) -> Inventory:
    return schema.parse({k: v for k, v in doc.items() if k != "compiled"}, where)


def describe(doc: Mapping[str, Any], inv: Inventory) -> str:
    """One line: how much the folding saved."""
    entries = doc.get("nodes", [])
    overrides = sum(1 for e in entries if "type" in e and set(e) - {
        "name", "type", "uuids", "features", "nvlink_domain"})
    whole = sum(1 for e in entries if "type" not in e)
    types = doc.get("node_types", {})
    return (f"{len(inv.nodes)} node(s) -> {len(types)} node type(s)"
            + (f" ({', '.join(types)})" if types else "")
            + f", {overrides} with per-node overrides, {whole} described whole")
