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
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple


from slurmtopo.admin.ibnetdiscover import IbFabric, IbNode
from slurmtopo.inventory.hostlist import fold_hostlist, natural_key
from slurmtopo.inventory.model import Fabric, Switch
from slurmtopo.slurmfmt.checks import NAME_RE

#: words of vendors' default node descriptions ("MT4123 ConnectX6 Mellanox Technologies")
_VENDOR = re.compile(r"(?i)\b(mellanox|technologies|nvidia|voltaire|qlogic|infinihost|connectx"
                     r"|bluefield|infiniscale|switchx|switch-ib|switchib|quantum|spectrum"
                     r"|sharp|aggregation)\b|^MT\d+\b")
_MF0 = re.compile(r"^MF0;([^:;]+):([^/]*)(?:/(.*))?$")
_IPV4 = re.compile(r"^\d+(\.\d+){3}$")


# --------------------------------------------------------------------------
# Which CA belongs to which host


_MLX_INDEX = re.compile(r"(?i)^mlx\d+_(\d+)$")
_HCA_INDEX = re.compile(r"(?i)^HCA-(\d+)$")


def hca_rail(hca: str) -> Optional[int]:
    """The rail an HCA name stands for, counting from 0, or None.

    One port is named two ways in real dumps: rdma-ndd on current stacks
    writes the RDMA device (``mlx5_4``, numbered from 0), older stacks and
    some DGX OS images write ``HCA-5`` (numbered from 1). Both are rail 4.
    Other names (``mlx5_bond_0``, ``ibp12s0``) have no rail number.
    """
    m = _MLX_INDEX.match(hca)
    if m:
        return int(m.group(1))
    m = _HCA_INDEX.match(hca)
    if m and int(m.group(1)) >= 1:
        return int(m.group(1)) - 1
    return None


@dataclass(frozen=True)
class CaHost:
    host: str
    hca: str  # HCA name from the description ("mlx5_0", "HCA-1"); "" if none

    @property
    def rail(self) -> Optional[int]:
        return hca_rail(self.hca)


def host_of(description: str) -> Tuple[Optional[CaHost], str]:
    """Host and HCA name from a CA node description, or (None, why not).

    rdma-ndd sets descriptions to ``"<hostname> <hca>"`` (``"gpu001 mlx5_0"``,
    older stacks ``"gpu001 HCA-1"``); a CA nobody named keeps its vendor text
    (``"MT4123 ConnectX6 Mellanox Technologies"``). Whether a named host is
    a compute node is another question (:func:`non_compute_reason`).
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
    hca = tokens[1] if len(tokens) > 1 else ""
    return CaHost(host, hca), ""


#: host names an OS installer leaves behind: nobody names a compute node so
DEFAULT_HOSTNAMES = frozenset({"localhost", "localhost4", "localhost6", "localdomain", "ubuntu",
                               "debian", "centos", "rocky", "rhel", "redhat", "fedora", "almalinux",
                               "sles", "suse", "linux", "none", "unknown"})
#: name parts of fabric/cluster management hosts (UFM, subnet managers, head nodes)
_MANAGEMENT = re.compile(r"(?i)^(c?ufm[a-z]*\d*|opensm\d*|sm\d*|subnetmanager|mgmt\d*"
                         r"|mgt\d*|headnode\d*|head\d*|bcm\d*|nvue\d*)$")
#: name parts of storage servers and login nodes on the compute fabric
_SERVICE = re.compile(r"(?i)^(storage\d*|stor\d*|nfs\d*|lustre\d*|oss\d*|mds\d*|mgs\d*"
                      r"|ddn\d*|vast\d*|weka\d*|gpfs\d*|nsd\d*|login\d*)$")


def non_compute_reason(host: str) -> Optional[str]:
    """Why a named CA host is not a compute node, when no node list says.

    Without slurm.conf (or ``--nodes``/``--reports``) the fabric alone must
    tell compute hosts from the rest, and only names can: a host still
    called by an installer's default (``ubuntu``, ``localhost``), or one
    whose name has a part naming management software or a management role
    (``B11-P1-CUFM-02``, ``ufm01``, ``opensm2``, ``mgmt01``, ``head1``), or a
    storage server or login node (``lustre-oss3``, ``vast-cnode-01``,
    ``login02``).
    With a node list, the list decides and this is not asked.
    """
    low = host.lower()
    if low in DEFAULT_HOSTNAMES or low.startswith("localhost"):
        return "default OS host name"
    parts = re.split(r"[-_.]", host)
    for pattern, what in ((_MANAGEMENT, "management host"), (_SERVICE, "storage or login host")):
        hit = next((p for p in parts if pattern.match(p)), None)
        if hit is not None:
            return f"{what} ({hit!r} in its name)"
    return None


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


def _shared_parts(members: List[str]) -> str:
    """The name parts every member has in the same place, the varying ones
    dropped: ``A09-P1-IBLEAF-01-02`` .. ``A09-P1-IBLEAF-04-02`` (the four
    rail leaves of unit 02) -> ``A09-P1-IBLEAF-02``; "" when the names do
    not split alike."""
    split = [re.split(r"([-_.])", m) for m in members]
    if len({len(p) for p in split}) != 1:
        return ""
    keep = [i for i in range(0, len(split[0]), 2) if len({p[i] for p in split}) == 1]
    if len(keep) * 2 - 1 == len(split[0]) or not keep:
        return ""  # nothing varies, or nothing is shared
    parts = [split[0][keep[0]]]
    for i in keep[1:]:
        parts += [split[0][i - 1], split[0][i]]
    return "".join(parts)


def group_name_candidates(members: List[str]) -> List[str]:
    """What a logical switch made of ``members`` would like to be called,
    best first: their common stem (``spine01, spine02`` -> ``spine``; the
    leaves of unit ``su001-leaf[0-7]`` -> ``su001``), then the parts of the
    names they share (``A09-P1-IBLEAF-[01-04]-02`` -> ``A09-P1-IBLEAF-02``)."""
    out = []
    for cand in (_common_stem(members), _shared_parts(members)):
        if len(cand) >= 2 and NAME_RE.match(cand) and len(cand) <= 56 and cand not in out:
            out.append(cand)
    return out


def _folded_name(members: List[str]) -> str:
    folded = fold_hostlist(members)
    name = folded.replace("[", "").replace("]", "").replace(",", "_")
    if not NAME_RE.match(name) or len(name) > 48:
        name = f"{sorted(members, key=natural_key)[0]}-x{len(members)}"
    return name


def group_names(groups: List[List[str]], taken: Set[str]) -> List[str]:
    """Names for several logical switches at once, one per group of
    physical switch names (single-member groups keep their member's name).

    Decided over all groups together and in a fixed order, so the same
    fabric always gives the same names, and a stem two groups would share
    (``A09-P1-IBLEAF`` for every unit of a row) goes to neither: one name
    never stands for different units from one run, or one format, to the
    next. ``taken`` (physical names in use) is updated.
    """
    cands = [[g[0]] if len(g) == 1 else group_name_candidates(g) for g in groups]
    out: List[str] = []
    for k, g in enumerate(groups):
        if len(g) == 1:
            out.append(g[0])
            taken.add(g[0])
            continue
        others = {c for j, cs in enumerate(cands) if j != k for c in cs}
        w = next((c for c in cands[k] if c not in others and (c not in taken or c in g)),
                 _folded_name(g))
        cand, n = w, 2
        while cand in taken and cand not in g:
            cand, n = f"{w}-{n}", n + 1
        taken.add(cand)
        out.append(cand)
    return out


# --------------------------------------------------------------------------
# Deriving the tree


@dataclass
class HostSelection:
    """Which hosts and which of their HCAs make the compute fabric."""

    nodes: Optional[Set[str]] = None  # allowed host names (None: every named host)
    hcas: Optional[Set[str]] = None  # compute HCA names ("mlx5_0", ...)
    rails: Optional[Set[int]] = None  # compute rails (mlx5_N and HCA-(N+1) are rail N)
    #: per host, its compute NIC names (from node reports: Nic.role == compute)
    compute_nics: Optional[Mapping[str, Set[str]]] = None
    #: fabric host name -> Slurm node name (slurm.conf NodeHostname)
    rename: Optional[Mapping[str, str]] = None

    def is_compute(self, host: str, ca: CaHost) -> bool:
        """Is this HCA a compute HCA? ``--hca mlx5_4`` also selects
        ``HCA-5``: both names are rail 4 (:func:`hca_rail`)."""
        if self.hcas is not None:
            if ca.hca in self.hcas:
                return True
            rails = {r for r in map(hca_rail, self.hcas) if r is not None}
            return ca.rail is not None and ca.rail in rails
        if self.rails is not None:
            return ca.rail in self.rails
        if self.compute_nics is not None and self.compute_nics.get(host):
            nics = self.compute_nics[host]
            rails = {r for r in map(hca_rail, nics) if r is not None}
            return ca.hca in nics or (ca.rail is not None and ca.rail in rails)
        return True

    def describe(self) -> str:
        """The rule that picked the compute HCAs, for messages."""
        if self.hcas is not None:
            return f"--hca {fold_hostlist(self.hcas)}"
        if self.rails is not None:
            return f"--rails {','.join(str(r) for r in sorted(self.rails))}"
        if self.compute_nics is not None:
            return "the compute NICs of the node reports"
        return "every HCA"


@dataclass
class DerivedTree:
    """What :func:`derive_fabric` makes of a discovered fabric: the switch
    tree Slurm should see and how it was made (not :class:`slurmtopo.inventory.model.
    Derived`, a loaded value's tables)."""

    fabric: Fabric
    notes: List[str] = field(default_factory=list)
    #: host -> physical leaf switch names its compute HCAs plug into
    host_leaves: Dict[str, List[str]] = field(default_factory=dict)
    #: logical switch name -> the physical switches it stands for
    members: Dict[str, List[str]] = field(default_factory=dict)
    #: hosts of the fabric the HCA selection leaves out, by reason ("with no
    #: HCA matching --hca mlx5_[0-7]", "whose compute HCAs have no link");
    #: node-list hosts missing from the fabric are the coverage check's job
    left_out: Dict[str, List[str]] = field(default_factory=dict)

    @property
    def hosts(self) -> List[str]:
        return sorted(self.host_leaves, key=natural_key)


def _sample(names: Iterable[str], limit: int = 6) -> str:
    names = sorted(set(names), key=natural_key)
    shown = names[:limit]
    text = fold_hostlist(shown) if all(NAME_RE.match(n) for n in shown) else ", ".join(shown)
    return text if len(names) <= limit else f"{text} and {len(names) - limit} more"


def left_out_message(left_out: Mapping[str, Sequence[str]]) -> str:
    """``3 host(s) left out: 2 no HCA matches --hca ... (gpu[1-2]); 1 ...``."""
    total = len({h for hosts in left_out.values() for h in hosts})
    parts = [f"{len(hosts)} {why} ({_sample(hosts, 4)})"
             for why, hosts in sorted(left_out.items())]
    return f"{total} host(s) left out: " + "; ".join(parts)


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


def derive_fabric(ib: IbFabric, select: Optional[HostSelection] = None) -> DerivedTree:
    """Slurm's view of an InfiniBand fabric: logical leaves (scalable units)
    holding hosts, logical switches above them, one level per hop.

    Deterministic: records are visited in GUID order and every choice
    (names, link rates) is made over sorted data, so the same fabric gives
    the same tree whatever the order of the dump or ``PYTHONHASHSEED``.
    """
    return _Derivation(ib, select or HostSelection()).run()


def _rate(values: List[float]) -> Optional[float]:
    """The usual link rate among ``values`` (the most common one; the
    fastest of equally common ones)."""
    if not values:
        return None
    return max(Counter(values).items(), key=lambda kv: (kv[1], kv[0]))[0]


class _Derivation:
    """The steps of :func:`derive_fabric`, sharing what they learn."""

    def __init__(self, ib: IbFabric, select: HostSelection):
        self.ib, self.select = ib, select
        self.notes: List[str] = []
        self.switches = {g: ib.nodes[g] for g in sorted(ib.nodes)
                         if ib.nodes[g].kind == "switch"}
        self.names = switch_names(self.switches.values())
        self.host_leaf: Dict[str, Set[str]] = defaultdict(set)  # host -> leaf guids
        self.host_gbps: Dict[str, List[float]] = defaultdict(list)  # leaf -> host link rates
        self.leaf_rails: Dict[str, Dict[int, Set[str]]] = defaultdict(lambda: defaultdict(set))
        self.service: Set[str] = set()  # switches carrying only left-out CAs
        self.left_out: Dict[str, List[str]] = {}
        self.level: Dict[str, int] = {}
        self.adj: Dict[str, Set[str]] = defaultdict(set)  # switch -> switches
        self.link_gbps: Dict[Tuple[str, str], List[float]] = defaultdict(list)

    def run(self) -> DerivedTree:
        self.attach_hosts()
        leaves = {sw for sws in self.host_leaf.values() for sw in sws}
        self.check_rails()
        self.assign_levels(leaves)
        units, unit_hosts = self.scalable_units(leaves)
        switches, members = self.logical_switches(units, unit_hosts)
        if len(units) != len(leaves):
            self.notes.append(f"{len(leaves)} leaf switches form {len(units)} scalable "
                              "unit(s); each unit is one leaf for Slurm")
        host_leaves = {h: sorted((self.names[g] for g in self.host_leaf[h]), key=natural_key)
                       for h in sorted(self.host_leaf, key=natural_key)}
        return DerivedTree(fabric=Fabric(switches=tuple(switches)), notes=self.notes,
                           host_leaves=host_leaves, members=members, left_out=self.left_out)

    def attach_hosts(self) -> None:
        """CAs -> hosts on leaf switches; who is left out and why."""
        select, notes = self.select, self.notes
        neigh = self.ib.neighbours()
        skipped: Dict[str, List[str]] = defaultdict(list)
        other_attached: Set[str] = set()  # switches with left-out named CAs
        excluded_hosts: Set[str] = set()
        non_compute: Dict[str, Set[str]] = defaultdict(set)
        excluded_hcas: Dict[str, Set[str]] = defaultdict(set)
        host_hcas: Dict[str, Set[str]] = defaultdict(set)  # every named HCA of a host
        dark_cas: Set[str] = set()
        for guid in sorted(self.ib.nodes):
            node = self.ib.nodes[guid]
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
            peers = sorted(((sw, ln) for _p, sw, _rp, ln in neigh.get(node.guid, ())
                            if sw in self.switches),
                           key=lambda p: (p[0], p[1].a, p[1].a_port, p[1].b, p[1].b_port))
            reason = non_compute_reason(host) if select.nodes is None else None
            if select.nodes is not None and host not in select.nodes:
                excluded_hosts.add(host)
            elif reason is not None:
                non_compute[reason].add(host)
            elif not select.is_compute(host, ca):
                excluded_hcas[ca.hca or "?"].add(host)
                host_hcas[host].add(ca.hca or "?")
                self._rail_seen(host, ca, peers)
            elif not peers:
                dark_cas.add(f"{host}:{ca.hca}" if ca.hca else host)
                host_hcas[host].add(ca.hca or "?")
            else:
                for sw, ln in peers:
                    self.host_leaf[host].add(sw)
                    if ln.gbps:
                        self.host_gbps[sw].append(ln.gbps)
                self._rail_seen(host, ca, peers)
                continue
            other_attached.update(sw for sw, _ in peers)
        for why, items in sorted(skipped.items()):
            notes.append(f"skipped {len(items)} CA(s): {why} ({_sample(items, 3)})")
        for why, hosts in sorted(non_compute.items()):
            notes.append(f"left out {len(hosts)} host(s) that are not compute nodes by their "
                         f"name ({why}): {_sample(hosts)}; give --slurm-conf or --nodes to "
                         "decide by the node list instead")
        if excluded_hosts:
            notes.append(f"left out {len(excluded_hosts)} host(s) not in the node list: "
                         f"{_sample(excluded_hosts)}")
        for hca, hosts in sorted(excluded_hcas.items(), key=lambda kv: natural_key(kv[0])):
            notes.append(f"left out HCA {hca} (not compute) on {len(hosts)} host(s)")
        if dark_cas:
            notes.append(f"{len(dark_cas)} compute HCA(s) have no link: {_sample(dark_cas)}")
        unplaced = set(host_hcas) - set(self.host_leaf)
        no_match = {h for h in unplaced if h not in {d.split(":")[0] for d in dark_cas}}
        if no_match:
            seen = sorted({x for h in no_match for x in host_hcas[h]}, key=natural_key)
            self.left_out[f"with no HCA matching {select.describe()} (theirs: "
                          f"{', '.join(seen[:8])})"] = sorted(no_match, key=natural_key)
        dark_hosts = unplaced - no_match
        if dark_hosts:
            self.left_out["whose compute HCAs have no link"] = sorted(dark_hosts, key=natural_key)
        if select.nodes is not None:
            absent = select.nodes - set(self.host_leaf) - unplaced
            if absent:
                notes.append(f"{len(absent)} host(s) of the node list have no linked compute "
                             f"HCA in the fabric: {_sample(absent)}")
        leaves = {sw for sws in self.host_leaf.values() for sw in sws}
        self.service = other_attached - leaves
        if self.service:
            notes.append(f"left out {len(self.service)} switch(es) that carry only left-out "
                         f"hosts or HCAs (storage/service leaves): "
                         f"{_sample(self.names[g] for g in self.service)}")

    def _rail_seen(self, host: str, ca: CaHost, peers) -> None:
        if ca.rail is not None:
            for sw, _ln in peers:
                self.leaf_rails[sw][ca.rail].add(f"{host} {ca.hca}")

    def check_rails(self) -> None:
        """In a rail-optimized fabric every leaf carries one rail. A leaf
        that also carries a few HCAs of another rail (every HCA of the
        hosts counted, selected or not) has a cable on the wrong rail, or
        HCA names that do not say the rail: name those HCAs."""
        per_leaf = {sw: rails for sw, rails in self.leaf_rails.items()}
        mixed = sorted((sw for sw, rails in per_leaf.items() if len(rails) > 1),
                       key=lambda sw: natural_key(self.names[sw]))
        if not mixed or len(mixed) * 2 > len(per_leaf):
            return  # one rail a leaf is not how this fabric is built
        parts = []
        for sw in mixed[:4]:
            rails = per_leaf[sw]
            usual = max(rails, key=lambda r: (len(rails[r]), -r))
            odd = sorted((h for r, hs in rails.items() if r != usual for h in hs), key=natural_key)
            parts.append(f"{self.names[sw]} (rail {usual}): {', '.join(odd[:3])}"
                         + (f" and {len(odd) - 3} more" if len(odd) > 3 else ""))
        self.notes.append(f"{len(mixed)} leaf switch(es) carry HCAs of another rail (a cable on "
                          "the wrong rail, or HCA names that do not say the rail): "
                          + "; ".join(parts))

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
                              f"spine, or leaves cabled directly?): {_sample(flat)}")
        level = self.level
        level.update((sw, 0) for sw in sorted(leaves))
        frontier = sorted(leaves)
        while frontier:
            nxt = set()
            for sw in frontier:
                for other in sorted(self.adj.get(sw, ())):
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
        root guid -> its hosts (roots are the smallest GUID of a unit)."""
        uf = _UnionFind()
        for sw in sorted(leaves):
            uf.find(sw)
        for host in sorted(self.host_leaf):
            first, *rest = sorted(self.host_leaf[host])
            for other in rest:
                uf.union(first, other)
        units: Dict[str, List[str]] = defaultdict(list)
        for sw in sorted(leaves):
            units[uf.find(sw)].append(sw)
        unit_hosts: Dict[str, Set[str]] = defaultdict(set)
        for host, sws in self.host_leaf.items():
            unit_hosts[uf.find(min(sws))].add(host)
        sizes = Counter(len(m) for m in units.values())
        usual, most = max(sizes.items(), key=lambda kv: (kv[1], kv[0])) if sizes else (0, 0)
        if len(sizes) > 1 and most * 2 > len(units):
            odd = sorted((root for root, m in units.items() if len(m) != usual),
                         key=lambda r: natural_key(min(unit_hosts[r], key=natural_key)))
            self.notes.append(
                f"{len(odd)} scalable unit(s) do not have the usual {usual} leaves (check "
                "their cabling): "
                + "; ".join(_sample(self.names[g] for g in units[r]) for r in odd[:3]))
        return dict(sorted(units.items())), unit_hosts

    def merge_partial(self, groups: Dict[FrozenSet[str], List[str]], lvl: int
                      ) -> Dict[FrozenSet[str], List[str]]:
        """Switches of a level that reach most, not all, of another group's
        children (a spine missing a cable or two) join that group, with a
        note naming what they miss: otherwise they would stand as a second
        root beside their own spine layer."""
        keys = sorted(groups, key=lambda k: (-len(k), sorted(groups[k])))
        out: Dict[FrozenSet[str], List[str]] = {}
        for k in keys:
            host = next((big for big in out if k < big and len(k) * 2 >= len(big)), None)
            if host is None:
                out[k] = list(groups[k])
                continue
            out[host].extend(groups[k])
            missing = sorted(host - k, key=natural_key)
            self.notes.append(
                f"{_sample(self.names[g] for g in groups[k])} (level {lvl}) "
                f"{'has' if len(groups[k]) == 1 else 'have'} no link to "
                f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} unlike the other "
                "switches of that level (a missing cable?); counted with them")
        return {k: sorted(v) for k, v in out.items()}

    def logical_switches(self, units, unit_hosts):
        """Units become leaves; above, switches of one level with the same
        (logical) children become one logical switch. Names are given level
        by level, each level's groups together in a fixed order."""
        names, level = self.names, self.level
        taken: Set[str] = set(names.values())
        logical_of: Dict[str, str] = {}  # physical guid -> logical name
        members: Dict[str, List[str]] = {}

        def make_level(groups: List[List[str]], kws: List[dict]) -> List[Switch]:
            phys = [sorted((names[g] for g in guids), key=natural_key) for guids in groups]
            order = sorted(range(len(groups)), key=lambda i: natural_key(phys[i][0]))
            chosen = group_names([phys[i] for i in order], taken)
            made: List[Switch] = []
            for i, name in zip(order, chosen):
                guids = groups[i]
                members[name] = phys[i]
                logical_of.update((g, name) for g in guids)
                desc = f"{len(phys[i])} switches: {_sample(phys[i], 8)}" if len(guids) > 1 \
                    else (self.switches[guids[0]].description or f"guid {guids[0]}")
                made.append(Switch(name=name, description=desc, **kws[i]))
            return made

        roots = sorted(units, key=lambda r: natural_key(min(unit_hosts[r], key=natural_key)))
        out = make_level(
            [units[r] for r in roots],
            [dict(level=0, nodes=tuple(sorted(unit_hosts[r], key=natural_key)),
                  link_gbps=_rate([x for g in units[r] for x in self.host_gbps[g]]))
             for r in roots])
        out.sort(key=lambda s: natural_key(s.nodes[0]))
        for lvl in range(1, max(level.values(), default=0) + 1):
            groups: Dict[FrozenSet[str], List[str]] = defaultdict(list)
            for sw in sorted(g for g, lv in level.items() if lv == lvl):
                kids = frozenset(logical_of[o] for o in self.adj[sw]
                                 if level.get(o) == lvl - 1)
                groups[kids].append(sw)
            groups = self.merge_partial(groups, lvl)
            keys = sorted(groups, key=lambda k: sorted(groups[k]))
            kws = []
            for kids in keys:
                speeds = [r for g in groups[kids] for o in sorted(self.adj[g])
                          if level.get(o) == lvl - 1 for r in self.link_gbps.get((g, o), ())]
                kws.append(dict(level=lvl, switches=tuple(sorted(kids, key=natural_key)),
                                link_gbps=_rate(speeds)))
            made = make_level([groups[k] for k in keys], kws)
            out.extend(sorted(made, key=lambda s: natural_key(s.name)))
        return out, members
