"""Parser for ``ibnetdiscover`` output (its default topology format, and
the ports report of ``ibnetdiscover -p``).

The format is a list of node records, each a few ``key=value`` header lines
(``vendid``, ``devid``, ``switchguid``/``caguid``...) followed by::

    Switch  36 "S-b8cffff0053ee"   # "MF0;leaf01:MQM8700/U1" enhanced port 0 lid 3 lmc 0
    [1]     "H-0002c902002789ac"[1](2c902002789ad)   # "gpu001 mlx5_0" lid 1 4xHDR
    Ca      1 "H-0002c902002789ac"  # "gpu001 mlx5_0"
    [1](2c902002789ad)  "S-b8cffff0053ee"[1]   # lid 1 lmc 0 "MF0;leaf01:..." lid 3 4xHDR

Every cable shows up twice (once from each end); we keep one link per
(node, port) pair. Grouping lines of ``ibnetdiscover -g`` (``Chassis``,
``Spine 1 Chip 1``...) and anything else outside a record are skipped and
counted, but a malformed port line inside a record is an error at
``file:line``: silently losing a cable would silently move hosts.

Sizes are bounded while reading, before anything is built from them: an
InfiniBand node has at most :data:`MAX_PORTS` ports (NodeInfo's NumPorts is
one byte), so a record declaring more, a port number past it, or more port
lines than that in one record is refused at its line; and a dump naming
more than :data:`MAX_NODES` nodes is refused where it passes the count (one
subnet addresses at most 49,151 LIDs). A dump of 200,000 hosts on one
switch is one error line at once, not a minute of parsing.

This module only reads; deciding hosts, levels and scalable units is
:mod:`slurmtopo.admin.switch_tree`.
"""
from __future__ import annotations

import re
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from slurmtopo.errors import InventoryError
from slurmtopo.files.fileio import MAX_FABRIC_DUMP_BYTES, read_text

#: nominal per-lane rate of each InfiniBand speed, Gbit/s
LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0,
             "HDR": 50.0, "NDR": 100.0, "XDR": 200.0, "GDR": 400.0}

_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9A-Fa-f]+)"\s*(?:#\s*(.*))?$')
_PORT = re.compile(
    r'^\[(\d+)\](?:\[ext\s*\d+\])?(?:\(([0-9A-Fa-f]+)\))?\s+'
    r'"([SHR])-([0-9A-Fa-f]+)"\[(\d+)\](?:\[ext\s*\d+\])?(?:\(([0-9A-Fa-f]+)\))?\s*(?:#\s*(.*))?$')
_QUOTED = re.compile(r'"([^"]*)"')
_SPEED = re.compile(r"\b(\d+)x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR|GDR)\b")
_HEADER = re.compile(r"^[A-Za-z]+=\S*")
_KIND = {"Switch": "switch", "Ca": "ca", "Rt": "router"}

#: ports of one InfiniBand node (NodeInfo.NumPorts is 8 bits)
MAX_PORTS = 255
#: nodes (switches, CAs, routers) in one dump: several subnets' worth (one
#: subnet has at most 49,151 unicast LIDs)
MAX_NODES = 131072


@dataclass(frozen=True)
class IbNode:
    guid: str  # node GUID, 16 lower-case hex digits
    kind: str  # switch | ca | router
    ports: int
    description: str  # node description ("" when none was printed)
    line: int  # where its record starts


@dataclass(frozen=True)
class IbLink:
    """One cable: (a, a_port) <-> (b, b_port), ordered so a <= b."""

    a: str
    a_port: int
    b: str
    b_port: int
    width: Optional[str] = None  # e.g. "4xHDR"
    line: int = 0

    @property
    def gbps(self) -> Optional[float]:
        return link_gbps(self.width)


@dataclass
class IbFabric:
    nodes: Dict[str, IbNode] = field(default_factory=dict)
    links: List[IbLink] = field(default_factory=list)
    source: str = "<ibnetdiscover>"
    skipped_lines: int = 0

    def neighbours(self) -> Dict[str, List[Tuple[int, str, int, IbLink]]]:
        """guid -> [(own port, other guid, other port, link)]."""
        out: Dict[str, List[Tuple[int, str, int, IbLink]]] = {g: [] for g in self.nodes}
        for ln in self.links:
            out.setdefault(ln.a, []).append((ln.a_port, ln.b, ln.b_port, ln))
            out.setdefault(ln.b, []).append((ln.b_port, ln.a, ln.a_port, ln))
        return out


@lru_cache(maxsize=64)
def link_gbps(width: Optional[str]) -> Optional[float]:
    """``"4xHDR"`` -> 200.0 (nominal signalling rate)."""
    if not width:
        return None
    m = _SPEED.fullmatch(width)
    if not m:
        return None
    return int(m.group(1)) * LANE_GBPS[m.group(2)]


def _guid(text: str) -> str:
    return text.lower().rjust(16, "0")


def _description(comment: Optional[str]) -> str:
    if not comment:
        return ""
    m = _QUOTED.search(comment)
    return m.group(1).strip() if m else ""


class _Cables:
    """The cables of a dump as they are read, each seen from both ends:
    bounds the node count, refuses a port linked to two places, and keeps
    one :class:`IbLink` per cable (the same whatever the record order)."""

    def __init__(self, path: str):
        self.path = path
        self.guids: set = set()  # every node named so far
        self.seen: Dict[Tuple[str, int], Tuple[str, int]] = {}  # (guid, port) -> far end
        self.links: Dict[Tuple[str, int, str, int], IbLink] = {}

    def count(self, guid: str, n: int) -> None:
        if guid not in self.guids:
            self.guids.add(guid)
            if len(self.guids) > MAX_NODES:
                raise InventoryError(f"more than {MAX_NODES:,} InfiniBand nodes: refused (one "
                                     "subnet has at most 49,151; is this one fabric?)",
                                     self.path, n)

    def add(self, guid: str, lp: int, rguid: str, rp: int, width: Optional[str],
            n: int) -> None:
        prev = self.seen.get((guid, lp))
        if prev is not None and prev != (rguid, rp):
            raise InventoryError(f"port {lp} of {guid} is linked twice "
                                 f"({prev[0]}[{prev[1]}] and {rguid}[{rp}])", self.path, n)
        self.seen[(guid, lp)] = (rguid, rp)
        a, b = sorted([(guid, lp), (rguid, rp)])
        key = (a[0], a[1], b[0], b[1])
        if key not in self.links:
            self.links[key] = IbLink(a[0], a[1], b[0], b[1], width, n)
        elif width and (not self.links[key].width or width < self.links[key].width):
            # both ends say: keep one, the same whatever the record order
            self.links[key] = IbLink(a[0], a[1], b[0], b[1], width, self.links[key].line)

    def sorted_links(self) -> List[IbLink]:
        return sorted(self.links.values(), key=lambda ln: (ln.a, ln.a_port, ln.b, ln.b_port))


def _check_port(guid: str, record_line: int, port: int, port_lines: int, path: str,
                n: int) -> None:
    if port > MAX_PORTS or port_lines > MAX_PORTS:
        what = f"port {port:,}" if port > MAX_PORTS else f"more than {MAX_PORTS} port lines"
        raise InventoryError(f"{what} in the record of {guid} (line {record_line}); an "
                             f"InfiniBand node has at most {MAX_PORTS} ports: refused", path, n)


#: a line of ``ibnetdiscover -p`` (the ports report): the port, its width
#: and speed, then the far port and both node descriptions, or (no cable)
#: the node description alone. ``CA 5 1 0x...03 4x SDR - SW 4 1 0x...02
#: ( 'gpu01 mlx5_0' - 'leaf-r1' )``
_PORTS_LINE = re.compile(
    r"^(SW|CA|RT)\s+(\d+)\s+(\d+)\s+0x([0-9A-Fa-f]{1,16})\s+(\d+)[xX]\s+(\S+)"
    r"(?:\s+-\s+(SW|CA|RT)\s+(\d+)\s+(\d+)\s+0x([0-9A-Fa-f]{1,16})\s+\(\s*'(.*)'\s+-\s+'(.*)'\s*\)"
    r"|\s+'(.*)')?\s*$")
_PORTS_KIND = {"SW": "switch", "CA": "ca", "RT": "router"}
#: outputs of other tools given in place of a dump, and what to run instead
_OTHER_TOOLS = (
    (re.compile(r"^(Switch|Ca|Rt)\s*:\s*0x[0-9A-Fa-f]+\s+ports\s+\d+"),
     "a node list (ibswitches, ibhosts or ibnetdiscover -l/-S/-H): it has no cables"),
    (re.compile(r"==\(.*\)==>"), "iblinkinfo output"),
)


def _ports_report(lines: List[Tuple[int, str]], path: str) -> IbFabric:
    """The fabric of ``ibnetdiscover -p``: each line is one port, a cable is
    listed from both ends. A CA shows its port GUID (a dual-port HCA reads
    as two CAs, one per port, each with the node description); a switch
    shows its own GUID. Port counts are the highest port listed."""
    fab = IbFabric(source=path)
    cables = _Cables(path)
    info: Dict[str, Tuple[str, str, int]] = {}  # guid -> (kind, description, first line)
    top: Dict[str, int] = {}  # guid -> highest port listed
    per_node: Dict[str, int] = {}  # port lines of each node

    def node(kind: str, guid: str, desc: Optional[str], port: int, n: int) -> None:
        cables.count(guid, n)
        old = info.get(guid)
        if old is None or (desc and not old[1]):
            info[guid] = (_PORTS_KIND[kind], (desc or "").strip(), old[2] if old else n)
        top[guid] = max(top.get(guid, 0), port)

    for n, line in lines:
        m = _PORTS_LINE.match(line)
        if not m:
            raise InventoryError(f"cannot read this line of an 'ibnetdiscover -p' report: "
                                 f"{line[:80]!r}", path, n)
        (kind, _lid, port, guid, lanes, speed, rkind, _rlid, rport, rguid, desc, rdesc,
         alone) = m.groups()
        guid, lp = _guid(guid), int(port)
        per_node[guid] = per_node.get(guid, 0) + 1
        _check_port(guid, info[guid][2] if guid in info else n, lp, per_node[guid], path, n)
        node(kind, guid, desc if rkind else alone, lp, n)
        if rkind:
            rguid, rp = _guid(rguid), int(rport)
            _check_port(rguid, n, rp, 0, path, n)
            node(rkind, rguid, rdesc, rp, n)
            width = f"{lanes}x{speed.upper()}"
            cables.add(guid, lp, rguid, rp, width if _SPEED.fullmatch(width) else None, n)
    for guid, (kind, desc, first) in info.items():
        fab.nodes[guid] = IbNode(guid, kind, top[guid], desc, first)
    fab.links = cables.sorted_links()
    return fab


def parse_ibnetdiscover(text: str, path: str = "<ibnetdiscover>") -> IbFabric:
    """Parse ibnetdiscover output (its default topology format, or the
    ports report of ``ibnetdiscover -p``); raises InventoryError at
    file:line."""
    fab = IbFabric(source=path)
    cables = _Cables(path)
    remote_desc: Dict[str, Tuple[str, str]] = {}  # guid -> (kind letter, description)
    current: Optional[IbNode] = None
    port_lines = 0  # of the current record
    first: Optional[Tuple[int, str]] = None  # the first line that says anything

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if first is None:
            first = (n, line)
            if _PORTS_LINE.match(line):
                return _ports_report([(k + 1, ln.strip()) for k, ln in
                                      enumerate(text.splitlines())
                                      if ln.strip() and not ln.strip().startswith("#")], path)
        m = _NODE.match(line)
        if m:
            kind, nports, _letter, guid, comment = m.groups()
            guid = _guid(guid)
            if guid in fab.nodes:
                raise InventoryError(f"node {guid} is described twice (first at line "
                                     f"{fab.nodes[guid].line})", path, n)
            if int(nports) > MAX_PORTS:
                raise InventoryError(f"{kind} {guid} declares {int(nports):,} ports; an "
                                     f"InfiniBand node has at most {MAX_PORTS}: refused (is this "
                                     "ibnetdiscover output?)", path, n)
            cables.count(guid, n)
            current = IbNode(guid, _KIND[kind], int(nports), _description(comment), n)
            fab.nodes[guid] = current
            port_lines = 0
            continue
        if line.startswith("["):
            if current is None:
                raise InventoryError("port line outside a Switch/Ca record", path, n)
            p = _PORT.match(line)
            if not p:
                raise InventoryError(f"cannot read this port line: {line[:80]!r}", path, n)
            lport, _lpguid, rletter, rguid, rport, _rpguid, comment = p.groups()
            rguid = _guid(rguid)
            lp, rp = int(lport), int(rport)
            port_lines += 1
            _check_port(current.guid, current.line, max(lp, rp), port_lines, path, n)
            cables.count(rguid, n)
            desc = _description(comment)  # the far end's node description
            if desc and (rguid not in remote_desc or (rletter, desc) < remote_desc[rguid]):
                remote_desc[rguid] = (rletter, desc)  # the same whatever the record order
            speed = _SPEED.search(comment or "")
            cables.add(current.guid, lp, rguid, rp, speed.group(0) if speed else None, n)
            continue
        if _HEADER.match(line):
            current = None  # header of the next record
            continue
        current = None
        fab.skipped_lines += 1
    # nodes seen only from the other end of a cable (their record is missing)
    for guid, (letter, desc) in remote_desc.items():
        if guid not in fab.nodes:
            kind = {"S": "switch", "H": "ca", "R": "router"}[letter]
            fab.nodes[guid] = IbNode(guid, kind, 0, desc, 0)
    for key in list(cables.links):
        for guid in (key[0], key[2]):
            if guid not in fab.nodes:
                fab.nodes[guid] = IbNode(guid, "ca", 0, "", 0)
    fab.links = cables.sorted_links()
    if not fab.nodes:
        other = next((what for rx, what in _OTHER_TOOLS if first and rx.search(first[1])), None)
        if other and first:
            raise InventoryError(f"this is {other}; give the output of 'ibnetdiscover' (or "
                                 "'ibnetdiscover -p')", path, first[0])
        raise InventoryError("no Switch or Ca records: is this ibnetdiscover output?", path)
    return fab


def read_ibnetdiscover(path) -> IbFabric:
    return parse_ibnetdiscover(read_text(path, MAX_FABRIC_DUMP_BYTES), str(path))
