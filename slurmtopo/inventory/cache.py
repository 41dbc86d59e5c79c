"""The compiled form of a big inventory file, kept by its content hash.

Reading a 12,500-node inventory file costs a tenth of a second or more on
every command: YAML, hostlists expanded by ClusterShell, every field
checked, a Node object per node. The compiled form is the parsed
inventory as one JSON image that loads in a fraction of that: hardware as
a table (each entry checked again as in a file), nodes in runs that share
everything but the name, hostlists expanded, origins as line numbers (the
file's path is the one it is read by, so a file keeps one entry whatever
path names it). Loading it gives an inventory equal to parsing the file,
node types shared by the same nodes, so plans are byte-identical. The
image also carries what a plan derives from the whole inventory and
would otherwise build on every run (:class:`Table`: the planner's fabric
tree, the lower bound's statistics, a dozen milliseconds at 12,500
nodes), each written only when it reads back equal, and installed in the
loaded inventory's derived tables.

Where and how entries are kept is :mod:`slurmtopo.files.usercache`'s (only
where no other user can write, 0600 files in 0700 directories, no
symbolic link followed). An entry is used only when its header names
this format, the slurmtopo code that made it (the package's modules, by
size and modification time) and the SHA-256 of the file's bytes, and the
SHA-256 of its payload matches; an entry that fails any of these, or
whose payload does not build, is rebuilt from the file. Entries are
written only for inventories of :data:`MIN_NODES` nodes or more, and only
by loaders that validate the whole inventory first (``check``: its
``cost:`` block), so an entry never holds what a command would refuse.
"""
from __future__ import annotations

import json
import operator
import os
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Optional, Sequence

from slurmtopo import __version__
from slurmtopo.files.usercache import sha256_hex, slot_for
from slurmtopo.inventory.model import (Block, Fabric, Hardware, Inventory, Node, NvlinkDomain, Ring,
                                       Switch, Torus)

#: the image's layout; entries of another are rebuilt
FORMAT = 3
#: smaller inventories are parsed every time (no file beside every example)
MIN_NODES = 1000
#: the user's cache directory for entries (:func:`slurmtopo.files.usercache.slot_for`)
KIND = "inventories"
SUFFIX = ".slurmtopo-cache"


@dataclass(frozen=True)
class FileSchema:
    """The schema functions this module works with; :mod:`slurmtopo.inventory.schema`
    passes its own (it reads files through this module, so this module
    cannot import it back)."""

    #: a document's text and path -> the checked Inventory
    parse_text: Callable[[str, str], Inventory]
    hardware_dict: Callable[[Hardware], Dict[str, Any]]
    #: a hardware mapping (as ``hardware_dict`` writes it), where -> checked Hardware
    parse_hardware: Callable[[Any, str], Hardware]


@dataclass(frozen=True)
class Table:
    """A table the planner or the cost model derives from a whole
    inventory (:meth:`~slurmtopo.inventory.model.Inventory.derive`: the fabric tree,
    the lower bound's statistics), kept in the entry beside the image so
    that a warm load takes it instead of building it again. The module
    that derives the table owns its name and its JSON form; the caller
    (:func:`slurmtopo.plan.cluster.load_cluster`) passes them in, since this
    module sits below the planner and the cost model."""

    name: str
    #: the inventory -> its table (kept in its derived tables as usual)
    build: Callable[[Inventory], object]
    #: the table, ``hw_ref`` (hardware -> its index in the image) -> JSON-ready
    dump: Callable[[object, Callable[[Hardware], int]], Any]
    #: JSON, the inventory built from the image, its hardware table ->
    #: the table; raises on a payload it did not write
    load: Callable[[Any, Inventory, List[Hardware]], object]
    #: are two tables the same (what ``==`` says, sooner)?
    same: Callable[[object, object], bool] = operator.eq


#: Node is a plain frozen dataclass with these fields, in this order, and
#: nothing run on construction: :func:`build` may fill its instances' dicts
_PLAIN_NODE = ("__slots__" not in vars(Node) and not hasattr(Node, "__post_init__")
               and [f.name for f in fields(Node)] ==
               ["name", "hardware", "type", "nvlink_domain", "features", "origin"])


class _NotExact(Exception):
    """The inventory holds something its image would not give back."""


def code_fingerprint() -> str:
    """The slurmtopo code an entry was made with: every module's size and
    modification time (a change anywhere, an upgrade, rebuilds entries).
    Read on every warm load, so with :func:`os.scandir` and no path
    arithmetic (``os.walk`` and ``relpath`` over the package's modules
    took several milliseconds of each plan)."""
    # the whole package: this module sits in slurmtopo/inventory/
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cut = len(top) + 1
    parts = [f"{FORMAT}/{__version__}"]

    def walk(directory: str) -> None:  # files by name, then each directory by name
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        below = []
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                below.append(e.path)
            elif e.name.endswith(".py"):
                st = e.stat()
                parts.append(f"{e.path[cut:]}:{st.st_size}:{st.st_mtime_ns}")
        for d in below:
            walk(d)

    walk(top)
    return sha256_hex(";".join(parts).encode())


# --------------------------------------------------------------------------
# the image


def image(inv: Inventory, path: str, schema: FileSchema,
          tables: Sequence[Table] = ()) -> Dict[str, Any]:
    """The JSON-ready image of ``inv``, parsed from ``path``, with the
    ``tables`` derived from it. Raises :class:`_NotExact` when loading it
    would not give ``inv`` back (a value JSON does not keep, an origin not
    in this file, hardware whose mapping reads back different); a table
    that would not read back equal is left out (built on use as ever)."""

    def line(origin: Optional[str]) -> int:
        if origin is None:
            return -1
        if origin == path:
            return 0
        head, _, tail = origin.rpartition(":")
        if head == path and tail.isdigit() and int(tail) > 0:
            return int(tail)
        raise _NotExact(origin)

    if inv.source != path:
        raise _NotExact(inv.source)
    hw_of: Dict[int, int] = {}  # id(Hardware) -> table index: the sharing is kept
    hardware: List[Dict[str, Any]] = []
    read_back: List[Hardware] = []  # what each entry of the table loads as

    def hw_ref(hw: Hardware) -> int:
        i = hw_of.get(id(hw))
        if i is None:
            d = json.loads(json.dumps(schema.hardware_dict(hw)))
            back = schema.parse_hardware(d, path)
            if back != hw:
                raise _NotExact("hardware")
            i = hw_of[id(hw)] = len(hardware)
            hardware.append(d)
            read_back.append(back)
        return i

    domains: Dict[NvlinkDomain, int] = {}
    runs: List[list] = []
    for n in inv.nodes.values():
        dom = -1 if n.nvlink_domain is None else domains.setdefault(n.nvlink_domain, len(domains))
        key = [hw_ref(n.hardware), n.type, dom, list(n.features), line(n.origin)]
        if runs and runs[-1][:5] == key:
            runs[-1][5].append(n.name)
        else:
            runs.append(key + [[n.name]])
    plain = {"cost": inv.cost, "reports": inv.reports}
    try:
        if json.loads(json.dumps(plain)) != plain:
            raise _NotExact("cost or reports")
    except (TypeError, ValueError):  # a date, a set: JSON keeps neither
        raise _NotExact("cost or reports") from None
    f = inv.fabric
    derived: Dict[str, Any] = {}
    for t in tables:
        table = t.build(inv)
        try:
            d = json.loads(json.dumps(t.dump(table, hw_ref)))
            if t.same(t.load(d, inv, read_back), table):
                derived[t.name] = d
        except (TypeError, ValueError, KeyError, IndexError):
            pass  # JSON would not keep it: built on use
    return {
        "hardware": hardware,
        "types": [[name, hw_ref(hw)] for name, hw in inv.node_types.items()],
        "domains": [[d.cluster_uuid, d.clique_id] for d in domains],
        "runs": runs,
        "switches": [[s.name, s.level, list(s.nodes), list(s.switches), s.link_gbps,
                      s.description, line(s.origin), bool(s.sharp)] for s in f.switches],
        "blocks": [[b.name, list(b.nodes), line(b.origin)] for b in f.blocks],
        "block_sizes": list(f.block_sizes),
        "rings": [[g.name, list(g.nodes), line(g.origin)] for g in f.rings],
        "toruses": [[t.name, list(t.dims), list(t.nodes), [list(p) for p in t.placements],
                     line(t.origin)] for t in f.toruses],
        **plain,
        "derived": derived,
    }


def build(img: Dict[str, Any], path: str, schema: FileSchema,
          tables: Sequence[Table] = ()) -> Inventory:
    """The inventory of an image, read from ``path``, with those of
    ``tables`` the image holds installed in its derived tables. Raises on
    a payload that does not build (KeyError, TypeError, ValueError,
    IndexError, or the schema's own error for bad hardware)."""

    def origin(line: int) -> Optional[str]:
        return None if line < 0 else (path if line == 0 else f"{path}:{line}")

    hardware = [schema.parse_hardware(d, path) for d in img["hardware"]]
    domains = [NvlinkDomain(str(u), int(c)) for u, c in img["domains"]]
    nodes: Dict[str, Node] = {}
    new = object.__new__
    for hw, typ, dom, feats, line, names in img["runs"]:
        fields = {"hardware": hardware[hw], "type": typ if typ is None else str(typ),
                  "nvlink_domain": domains[dom] if dom >= 0 else None,
                  "features": tuple(str(f) for f in feats), "origin": origin(line)}
        if not _PLAIN_NODE:
            for name in names:
                nodes[str(name)] = Node(name=str(name), **fields)
            continue
        for name in names:
            # every field but the name is the run's: set them in one step,
            # as Node's generated __init__ would one by one (a run is
            # thousands of nodes)
            node = new(Node)
            state = node.__dict__
            state["name"] = str(name)
            state.update(fields)
            nodes[node.name] = node
    switches = tuple(Switch(name=a, level=lvl, nodes=tuple(hosts), switches=tuple(kids),
                            link_gbps=gbps, description=desc, origin=origin(line),
                            sharp=sharp is True)
                     for a, lvl, hosts, kids, gbps, desc, line, sharp in img["switches"])
    blocks = tuple(Block(name=a, nodes=tuple(hosts), origin=origin(line))
                   for a, hosts, line in img["blocks"])
    rings = tuple(Ring(name=str(a), nodes=tuple(hosts), origin=origin(line))
                  for a, hosts, line in img["rings"])
    toruses = tuple(Torus(name=str(a), dims=tuple(int(d) for d in dims), nodes=tuple(hosts),
                          placements=tuple(tuple(int(d) for d in p) for p in places),
                          origin=origin(line))
                    for a, dims, hosts, places, line in img["toruses"])
    if not isinstance(img["cost"], dict) or not isinstance(img["reports"], dict):
        raise TypeError("cost or reports")
    inv = Inventory(nodes=nodes, fabric=Fabric(switches=switches, blocks=blocks,
                                               block_sizes=tuple(img["block_sizes"]),
                                               rings=rings, toruses=toruses),
                    node_types={name: hardware[i] for name, i in img["types"]},
                    cost=img["cost"], reports=img["reports"], source=path)
    derived = img["derived"]
    for t in tables:
        if t.name in derived:
            inv.keep(t.name, t.load(derived[t.name], inv, hardware))
    return inv


# --------------------------------------------------------------------------
# the entry


def _header(source_sha: str, payload: bytes, code: str) -> Dict[str, Any]:
    return {"slurmtopo-cache": "inventory", "format": FORMAT, "code": code,
            "source_sha256": source_sha, "payload_sha256": sha256_hex(payload)}


def entry_bytes(inv: Inventory, path: str, source_sha: str, schema: FileSchema,
                code: Optional[str] = None, tables: Sequence[Table] = ()) -> Optional[bytes]:
    """The entry of ``inv`` (a header line, then the image and ``tables``),
    or None when its image would not be exact."""
    try:
        payload = json.dumps(image(inv, path, schema, tables), separators=(",", ":")).encode()
    except _NotExact:
        return None
    head = _header(source_sha, payload, code or code_fingerprint())
    return json.dumps(head, separators=(",", ":")).encode() + b"\n" + payload


def from_entry(data: bytes, path: str, source_sha: str, schema: FileSchema,
               code: Optional[str] = None, tables: Sequence[Table] = ()) -> Optional[Inventory]:
    """The inventory of an entry made from this file by this code, or None
    when the entry is anything else (stale, damaged, not ours)."""
    head_text, sep, payload = data.partition(b"\n")
    try:
        head = json.loads(head_text)
        if not sep or not isinstance(head, dict) or \
                head != _header(source_sha, payload, code or code_fingerprint()):
            return None
        return build(json.loads(payload), path, schema, tables)
    except Exception:  # noqa: BLE001 - whatever the payload holds, it is rebuilt
        return None


def load_file(path: str, schema: FileSchema, read_text: Callable[[str], str],
              check: Optional[Callable[[Inventory], object]] = None,
              write: bool = True, tables: Sequence[Table] = ()) -> Inventory:
    """The inventory of the file ``path``: from its entry when there is a
    good one, else parsed (``schema.parse_text``), and, when it has
    :data:`MIN_NODES` nodes or more and ``check`` (the caller's
    validation of the whole inventory) passes, kept for next time (unless
    ``write`` is False) with ``tables``, which are then built already."""
    text = read_text(path)
    sha = sha256_hex(text.encode("utf-8", "surrogateescape"))
    code = None
    slot = slot_for(path, KIND, SUFFIX)
    if slot is not None:
        with slot:
            data = slot.read()
        if data is not None:
            code = code_fingerprint()
            inv = from_entry(data, path, sha, schema, code, tables)
            if inv is not None:
                return inv
    inv = schema.parse_text(text, path)
    if check is not None:
        check(inv)
        if write and len(inv.nodes) >= MIN_NODES:
            out = entry_bytes(inv, path, sha, schema, code, tables)
            slot = slot_for(path, KIND, SUFFIX, create=True) if out is not None else None
            if slot is not None:
                with slot:
                    slot.write(out)
    return inv
