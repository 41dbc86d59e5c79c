"""Parser for ``ibnetdiscover`` output (its default topology format).

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


def parse_ibnetdiscover(text: str, path: str = "<ibnetdiscover>") -> IbFabric:
    """Parse ibnetdiscover output; raises InventoryError at file:line."""
    fab = IbFabric(source=path)
    seen: Dict[Tuple[str, int], Tuple[str, int]] = {}  # (guid, port) -> (peer, peer port)
    remote_desc: Dict[str, Tuple[str, str]] = {}  # guid -> (kind letter, description)
    current: Optional[IbNode] = None
    links: Dict[Tuple[str, int, str, int], IbLink] = {}
    guids: set = set()  # every node named so far, with a record or as a far end
    port_lines = 0  # of the current record

    def count(guid: str, n: int) -> None:
        if guid not in guids:
            guids.add(guid)
            if len(guids) > MAX_NODES:
                raise InventoryError(f"more than {MAX_NODES:,} InfiniBand nodes: refused (one "
                                     "subnet has at most 49,151; is this one fabric?)", path, n)

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
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
            count(guid, n)
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
            if max(lp, rp) > MAX_PORTS or port_lines > MAX_PORTS:
                what = (f"port {max(lp, rp):,}" if max(lp, rp) > MAX_PORTS
                        else f"more than {MAX_PORTS} port lines")
                raise InventoryError(f"{what} in the record of {current.guid} (line "
                                     f"{current.line}); an InfiniBand node has at most "
                                     f"{MAX_PORTS} ports: refused", path, n)
            count(rguid, n)
            desc = _description(comment)  # the far end's node description
            if desc and (rguid not in remote_desc or (rletter, desc) < remote_desc[rguid]):
                remote_desc[rguid] = (rletter, desc)  # the same whatever the record order
            speed = _SPEED.search(comment or "")
            width = speed.group(0) if speed else None
            a, b = sorted([(current.guid, lp), (rguid, rp)])
            prev = seen.get((current.guid, lp))
            if prev is not None and prev != (rguid, rp):
                raise InventoryError(f"port {lp} of {current.guid} is linked twice "
                                     f"({prev[0]}[{prev[1]}] and {rguid}[{rp}])", path, n)
            seen[(current.guid, lp)] = (rguid, rp)
            key = (a[0], a[1], b[0], b[1])
            if key not in links:
                links[key] = IbLink(a[0], a[1], b[0], b[1], width, n)
            elif width and (not links[key].width or width < links[key].width):
                # both ends say: keep one, the same whatever the record order
                links[key] = IbLink(a[0], a[1], b[0], b[1], width, links[key].line)
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
    for key in list(links):
        for guid in (key[0], key[2]):
            if guid not in fab.nodes:
                fab.nodes[guid] = IbNode(guid, "ca", 0, "", 0)
    fab.links = sorted(links.values(), key=lambda ln: (ln.a, ln.a_port, ln.b, ln.b_port))
    if not fab.nodes:
        raise InventoryError("no Switch or Ca records: is this ibnetdiscover output?", path)
    return fab


def read_ibnetdiscover(path) -> IbFabric:
    from slurmtopo.fileio import MAX_FABRIC_DUMP_BYTES, read_text
    return parse_ibnetdiscover(read_text(path, MAX_FABRIC_DUMP_BYTES), str(path))
