"""From a discovered InfiniBand fabric to the switch tree Slurm should see.

Slurm's topology/tree wants each node on exactly one leaf and a tree of
switches above. A real GPU fabric is not that:

* **Hosts have several HCAs, one per rail.** In a rail-optimized fabric HCA
  *r* of every host of a scalable unit (SU) plugs into leaf *r* of that unit,
  so one host sits on eight leaves. The hosts whose HCAs share leaves are one
  SU, and the SU is what Slurm must see as one leaf: the leaves of a unit are
  merged into one logical leaf (union-find over host-leaf cables, so a host
  with a dead HCA still belongs to its unit through the others).
* **Fat trees are redundant.** Every leaf links to every spine; listing each
  spine as a parent, or worse stacking spines on top of each other, is
  wrong. Levels come from the links (leaves have hosts, the next level are
  switches linked to leaves, and so on, breadth first), and switches of one
  level with the same children collapse into one logical switch: a 2-level
  fat tree comes out as leaves under one root, not a chain.
* **Not every CA is a compute HCA.** SHARP aggregation nodes and CAs with no
  host name are skipped (and said so); ``localhost`` and hosts outside the
  node list are left out; storage HCAs are told apart by name (``--hca
  'mlx5_[0-7]'``), by rail number or by the node reports' NIC roles. A switch
  that carries only such left-out CAs is a storage/service leaf, not part of
  the compute tree.

Everything here is pure: :func:`derive_fabric` takes a parsed
:class:`~slurmtopo.admin.ibnetdiscover.IbFabric` and returns model objects
plus the notes to show the admin.
"""
from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Set, Tuple


from slurmtopo.admin.ibnetdiscover import IbFabric, IbNode
from slurmtopo.hostlist import fold_hostlist
from slurmtopo.model import Fabric, Switch

#: what Slurm and ClusterShell both read as one plain name
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: words of vendors' default node descriptions ("MT4123 ConnectX6 Mellanox Technologies")
_VENDOR = re.compile(r"(?i)\b(mellanox|technologies|nvidia|voltaire|qlogic|infinihost|connectx"
                     r"|bluefield|infiniscale|switchx|switch-ib|switchib|quantum|spectrum"
                     r"|sharp|aggregation)\b|^MT\d+\b")
_MF0 = re.compile(r"^MF0;([^:;]+):([^/]*)(?:/(.*))?$")
_TRAILING_INT = re.compile(r"(\d+)$")
_IPV4 = re.compile(r"^\d+(\.\d+){3}$")


def natural_key(name: str):
    """``gpu2`` < ``gpu10``: sort names the way people number them."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


# --------------------------------------------------------------------------
# Which CA belongs to which host


@dataclass(frozen=True)
class CaHost:
    host: str
    hca: str  # HCA name from the description ("mlx5_0", "HCA-1"); "" if none

    @property
    def rail(self) -> Optional[int]:
        m = _TRAILING_INT.search(self.hca)
        return int(m.group(1)) if m else None


def host_of(description: str) -> Tuple[Optional[CaHost], str]:
    """Host and HCA name from a CA node description, or (None, why not).

    rdma-ndd sets descriptions to ``"<hostname> <hca>"`` (``"gpu001 mlx5_0"``,
    older stacks ``"gpu001 HCA-1"``); a CA nobody named keeps its vendor text
    (``"MT4123 ConnectX6 Mellanox Technologies"``).
    """
    desc = description.strip()
    if not desc:
        return None, "no node description"
    if "aggregation node" in desc.lower():
        return None, "SHARP aggregation node"
    if _VENDOR.search(desc):
        return None, "no host name in its description (vendor default)"
    tokens = desc.replace("\t", " ").split()
    host = tokens[0]
    if _IPV4.match(host):
        return None, "an address, not a host name"
    if "." in host:
        host = host.split(".", 1)[0]  # Slurm node names are short names
    if not NAME_RE.match(host):
        return None, "no usable host name in its description"
    if host.lower() in ("localhost", "localhost4", "localhost6"):
        return None, "host name is localhost"
    hca = tokens[1] if len(tokens) > 1 else ""
    return CaHost(host, hca), ""


# --------------------------------------------------------------------------
# Switch names


def switch_base_name(description: str) -> Optional[str]:
    """A readable name from a switch's description, if it has one.

    ``"MF0;leaf01:MQM8700/U1"`` -> ``leaf01`` (managed Mellanox/NVIDIA
    switches); ``"MF0;core1:CS7500/L05/U1"`` -> ``core1-L05`` (a line card of
    a director); a single plain word is taken as is; vendor text such as
    ``"ISR9024 Voltaire"`` is not a name.
    """
    desc = description.strip()
    m = _MF0.match(desc)
    if m:
        name = m.group(1).strip()
        module = [p for p in (m.group(3) or "").split("/") if re.fullmatch(r"[LS]\d+", p)]
        if module:
            name = f"{name}-{module[0]}"
    elif desc and len(desc.split()) == 1 and not _VENDOR.search(desc):
        name = desc
    else:
        return None
    name = re.sub(r"[^A-Za-z0-9._-]", "-", name).strip("-.")
    return name if name and NAME_RE.match(name) and len(name) <= 56 else None


def switch_names(switches: Iterable[IbNode]) -> Dict[str, str]:
    """guid -> unique, stable name (from the description, else from the GUID)."""
    switches = list(switches)
    base = {s.guid: switch_base_name(s.description) for s in switches}
    count = Counter(b for b in base.values() if b)
    out: Dict[str, str] = {}
    for s in switches:
        b = base[s.guid]
        out[s.guid] = b if b and count[b] == 1 else (f"{b}-{s.guid[-4:]}" if b else "")
    # GUID names: as short as stays unique
    used = Counter(out.values())
    for s in switches:
        if not out[s.guid] or used[out[s.guid]] > 1:
            for width in (6, 8, 10, 12, 16):
                cand = f"ibsw-{s.guid[-width:]}"
                if cand not in used:
                    break
            out[s.guid] = cand
            used[cand] += 1
    return out


def _common_stem(members: List[str]) -> str:
    """What the names share, cut at a word boundary: ``su001-leaf0``,
    ``su001-leaf1`` -> ``su001``; ``spine-r0-01``, ``spine-r1-02`` ->
    ``spine``; ``spine01``, ``spine02`` -> ``spine``; else ""."""
    prefix = os.path.commonprefix(members)
    for i in range(len(prefix), 0, -1):  # followed by a separator in every name
        if prefix[i - 1] not in "-_." and all(len(m) == i or m[i] in "-_." for m in members):
            return prefix[:i]
    stem = prefix.rstrip("0123456789")  # letters, then each name goes on with a number
    if stem and stem[-1].isalpha() and all(len(m) > len(stem) and m[len(stem)].isdigit()
                                           for m in members):
        return stem
    return ""


def group_name(members: List[str], taken: Set[str]) -> str:
    """A name for a logical switch made of several physical ones: their
    common stem (``spine01, spine02`` -> ``spine``; the leaves of unit
    ``su001-leaf[0-7]`` -> ``su001``), else the folded list without brackets
    (``spine[1,3]`` -> ``spine1_3``)."""
    stem = _common_stem(members)
    if len(stem) >= 2 and NAME_RE.match(stem) and stem not in taken:
        return stem
    folded = fold_hostlist(members)
    name = folded.replace("[", "").replace("]", "").replace(",", "_")
    if not NAME_RE.match(name) or len(name) > 48:
        name = f"{sorted(members, key=natural_key)[0]}-x{len(members)}"
    cand, n = name, 2
    while cand in taken:
        cand, n = f"{name}-{n}", n + 1
    return cand


# --------------------------------------------------------------------------
# Deriving the tree


@dataclass
class HostSelection:
    """Which hosts and which of their HCAs make the compute fabric."""

    nodes: Optional[Set[str]] = None  # allowed host names (None: every named host)
    hcas: Optional[Set[str]] = None  # compute HCA names ("mlx5_0", ...)
    rails: Optional[Set[int]] = None  # compute rails (trailing number of the HCA name)
    #: per host, its compute NIC names (from node reports: Nic.role == compute)
    compute_nics: Optional[Mapping[str, Set[str]]] = None
    #: fabric host name -> Slurm node name (slurm.conf NodeHostname)
    rename: Optional[Mapping[str, str]] = None

    def is_compute(self, host: str, ca: CaHost) -> bool:
        if self.hcas is not None:
            return ca.hca in self.hcas
        if self.rails is not None:
            return ca.rail in self.rails
        if self.compute_nics is not None and self.compute_nics.get(host):
            return ca.hca in self.compute_nics[host]
        return True


@dataclass
class Derived:
    fabric: Fabric
    notes: List[str] = field(default_factory=list)
    #: host -> physical leaf switch names its compute HCAs plug into
    host_leaves: Dict[str, List[str]] = field(default_factory=dict)
    #: logical switch name -> the physical switches it stands for
    members: Dict[str, List[str]] = field(default_factory=dict)

    @property
    def hosts(self) -> List[str]:
        return sorted(self.host_leaves, key=natural_key)


def _sample(names: Iterable[str], limit: int = 6) -> str:
    names = sorted(set(names), key=natural_key)
    shown = names[:limit]
    text = fold_hostlist(shown) if all(NAME_RE.match(n) for n in shown) else ", ".join(shown)
    return text if len(names) <= limit else f"{text} and {len(names) - limit} more"


class _UnionFind:
    def __init__(self):
        self.parent: Dict[str, str] = {}

    def find(self, x: str) -> str:
        p = self.parent.setdefault(x, x)
        while p != self.parent[p]:
            self.parent[p] = self.parent[self.parent[p]]
            p = self.parent[p]
        self.parent[x] = p
        return p

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def derive_fabric(ib: IbFabric, select: Optional[HostSelection] = None) -> Derived:
    """Slurm's view of an InfiniBand fabric: logical leaves (scalable units)
    holding hosts, logical switches above them, one level per hop."""
    return _Derivation(ib, select or HostSelection()).run()


def _rate(values: List[float]) -> Optional[float]:
    """The usual link rate among ``values`` (the most common one)."""
    return Counter(values).most_common(1)[0][0] if values else None


class _Derivation:
    """The steps of :func:`derive_fabric`, sharing what they learn."""

    def __init__(self, ib: IbFabric, select: HostSelection):
        self.ib, self.select = ib, select
        self.notes: List[str] = []
        self.switches = {g: n for g, n in ib.nodes.items() if n.kind == "switch"}
        self.names = switch_names(self.switches.values())
        self.host_leaf: Dict[str, Set[str]] = defaultdict(set)  # host -> leaf guids
        self.host_gbps: Dict[str, List[float]] = defaultdict(list)  # leaf -> host link rates
        self.service: Set[str] = set()  # switches carrying only left-out CAs
        self.level: Dict[str, int] = {}
        self.adj: Dict[str, Set[str]] = defaultdict(set)  # switch -> switches
        self.link_gbps: Dict[Tuple[str, str], List[float]] = defaultdict(list)

    def run(self) -> Derived:
        self.attach_hosts()
        leaves = {sw for sws in self.host_leaf.values() for sw in sws}
        self.assign_levels(leaves)
        units, unit_hosts = self.scalable_units(leaves)
        switches, members = self.logical_switches(units, unit_hosts)
        if len(units) != len(leaves):
            self.notes.append(f"{len(leaves)} leaf switches form {len(units)} scalable "
                              "unit(s); each unit is one leaf for Slurm")
        host_leaves = {h: sorted((self.names[g] for g in sws), key=natural_key)
                       for h, sws in self.host_leaf.items()}
        return Derived(fabric=Fabric(switches=tuple(switches)), notes=self.notes,
                       host_leaves=host_leaves, members=members)

    def attach_hosts(self) -> None:
        """CAs -> hosts on leaf switches; who is left out and why."""
        select, notes = self.select, self.notes
        neigh = self.ib.neighbours()
        skipped: Dict[str, List[str]] = defaultdict(list)
        other_attached: Set[str] = set()  # switches with left-out named CAs
        excluded_hosts: Set[str] = set()
        excluded_hcas: Dict[str, Set[str]] = defaultdict(set)
        dark_cas: Set[str] = set()
        for node in self.ib.nodes.values():
            if node.kind == "switch":
                continue
            if node.kind == "router":
                skipped["router"].append(node.description or node.guid)
                continue
            ca, why = host_of(node.description)
            if ca is None:
                skipped[why].append(node.description or node.guid)
                continue
            host = (select.rename or {}).get(ca.host, ca.host)
            peers = [(sw, ln) for _p, sw, _rp, ln in neigh.get(node.guid, ())
                     if sw in self.switches]
            if select.nodes is not None and host not in select.nodes:
                excluded_hosts.add(host)
            elif not select.is_compute(host, ca):
                excluded_hcas[ca.hca or "?"].add(host)
            elif not peers:
                dark_cas.add(f"{host}:{ca.hca}" if ca.hca else host)
            else:
                for sw, ln in peers:
                    self.host_leaf[host].add(sw)
                    if ln.gbps:
                        self.host_gbps[sw].append(ln.gbps)
                continue
            other_attached.update(sw for sw, _ in peers)
        for why, items in sorted(skipped.items()):
            notes.append(f"skipped {len(items)} CA(s): {why} ({_sample(items, 3)})")
        if excluded_hosts:
            notes.append(f"left out {len(excluded_hosts)} host(s) not in the node list: "
                         f"{_sample(excluded_hosts)}")
        for hca, hosts in sorted(excluded_hcas.items()):
            notes.append(f"left out HCA {hca} (not compute) on {len(hosts)} host(s)")
        if dark_cas:
            notes.append(f"{len(dark_cas)} compute HCA(s) have no link: {_sample(dark_cas)}")
        if select.nodes is not None:
            absent = select.nodes - set(self.host_leaf)
            if absent:
                notes.append(f"{len(absent)} host(s) of the node list have no linked compute "
                             f"HCA in the fabric: {_sample(absent)}")
        leaves = {sw for sws in self.host_leaf.values() for sw in sws}
        self.service = other_attached - leaves
        if self.service:
            notes.append(f"left out {len(self.service)} switch(es) that carry only left-out "
                         f"hosts or HCAs (storage/service leaves): "
                         f"{_sample(self.names[g] for g in self.service)}")

    def assign_levels(self, leaves: Set[str]) -> None:
        """Breadth first from the leaves, never through service leaves."""
        for ln in self.ib.links:
            a, b = ln.a, ln.b
            if a in self.switches and b in self.switches and a != b \
                    and a not in self.service and b not in self.service:
                self.adj[a].add(b)
                self.adj[b].add(a)
                if ln.gbps:
                    self.link_gbps[(a, b)].append(ln.gbps)
                    self.link_gbps[(b, a)].append(ln.gbps)
        flat = {self.names[a] for a in leaves for b in self.adj.get(a, ()) if b in leaves}
        if flat:
            self.notes.append("leaf switches linked to other leaf switches (hosts on a "
                              f"spine?): {_sample(flat)}")
        level = self.level
        level.update((sw, 0) for sw in leaves)
        frontier = sorted(leaves)
        while frontier:
            nxt = set()
            for sw in frontier:
                for other in self.adj.get(sw, ()):
                    if other not in level:
                        level[other] = level[sw] + 1
                        nxt.add(other)
            frontier = sorted(nxt)
        lost = set(self.switches) - set(level) - self.service
        if lost and leaves:
            self.notes.append(f"left out {len(lost)} switch(es) with no path to a compute "
                              f"host: {_sample(self.names[g] for g in lost)}")

    def scalable_units(self, leaves: Set[str]):
        """Leaves that share hosts are one unit: root guid -> its leaves, and
        root guid -> its hosts."""
        uf = _UnionFind()
        for sw in leaves:
            uf.find(sw)
        for sws in self.host_leaf.values():
            first, *rest = sorted(sws)
            for other in rest:
                uf.union(first, other)
        units: Dict[str, List[str]] = defaultdict(list)
        for sw in leaves:
            units[uf.find(sw)].append(sw)
        unit_hosts: Dict[str, Set[str]] = defaultdict(set)
        for host, sws in self.host_leaf.items():
            unit_hosts[uf.find(next(iter(sws)))].add(host)
        sizes = Counter(len(m) for m in units.values())
        usual, most = sizes.most_common(1)[0] if sizes else (0, 0)
        if len(sizes) > 1 and most * 2 > len(units):
            odd = [root for root, m in units.items() if len(m) != usual]
            self.notes.append(
                f"{len(odd)} scalable unit(s) do not have the usual {usual} leaves (check "
                "their cabling): "
                + "; ".join(_sample(self.names[g] for g in units[r]) for r in odd[:3]))
        return units, unit_hosts

    def logical_switches(self, units, unit_hosts):
        """Units become leaves; above, switches of one level with the same
        (logical) children become one logical switch."""
        names, level = self.names, self.level
        taken: Set[str] = set(names.values())
        logical_of: Dict[str, str] = {}  # physical guid -> logical name
        members: Dict[str, List[str]] = {}

        def make(guids: List[str], **kw) -> Switch:
            phys = sorted((names[g] for g in guids), key=natural_key)
            name = phys[0] if len(phys) == 1 else group_name(phys, taken - set(phys))
            taken.add(name)
            members[name] = phys
            logical_of.update((g, name) for g in guids)
            desc = f"{len(phys)} switches: {_sample(phys, 8)}" if len(phys) > 1 else \
                (self.switches[guids[0]].description or f"guid {guids[0]}")
            return Switch(name=name, description=desc, **kw)

        out = sorted((make(guids, level=0,
                           nodes=tuple(sorted(unit_hosts[root], key=natural_key)),
                           link_gbps=_rate([r for g in guids for r in self.host_gbps[g]]))
                      for root, guids in units.items()),
                     key=lambda s: natural_key(s.nodes[0]))
        for lvl in range(1, max(level.values(), default=0) + 1):
            groups: Dict[FrozenSet[str], List[str]] = defaultdict(list)
            for sw, lv in level.items():
                if lv == lvl:
                    kids = frozenset(logical_of[o] for o in self.adj[sw]
                                     if level.get(o) == lvl - 1)
                    groups[kids].append(sw)
            made = []
            for kids, guids in groups.items():
                speeds = [r for g in guids for o in self.adj[g] if level.get(o) == lvl - 1
                          for r in self.link_gbps.get((g, o), ())]
                made.append(make(guids, level=lvl,
                                 switches=tuple(sorted(kids, key=natural_key)),
                                 link_gbps=_rate(speeds)))
            out.extend(sorted(made, key=lambda s: natural_key(s.name)))
        return out, members
