"""Synthetic ``ibnetdiscover`` output for tests and benchmarks (test code:
it lives in bench/, outside the installed package).

Real fabric dumps of big GPU clusters are not public, and the parser and the
tree derivation must be tried on them at scale (2,000 to 10,000+ hosts). This
writes the same text format ``ibnetdiscover`` prints, for a fat tree of
scalable units:

* ``hosts`` hosts in units of ``hosts_per_unit``; each host has ``rails``
  compute HCAs (``mlx5_0``...), HCA *r* cabled to leaf *r* of its unit
  (rail-optimized when ``rails > 1``);
* two levels (leaves under spines) or three (``units_per_pod``: leaves under
  per-pod spines under cores); every leaf links to every spine of its rail
  group, ``links_per_uplink`` cables each;
* optional noise seen in real fabrics: SHARP aggregation nodes, unnamed CAs,
  non-compute hosts (``localhost``, a management server), a storage HCA per
  host on storage leaves, dead HCAs, switches with only GUID names, hosts
  whose HCAs carry the older ``HCA-<N+1>`` names instead of ``mlx5_<N>``
  (as in real DGX SuperPOD dumps), leaves cabled to each other with no
  spine (``spines=0, chain_leaves=True``).

Use it from Python (:func:`generate`) or the command line::

    python -m bench.ibgen --hosts 10000 --rails 8 --hosts-per-unit 32 -o big.topo

It is deterministic: the same spec gives the same text.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

SWITCH_GUID0 = 0xB83FD20300000000
CA_GUID0 = 0x1070FD0300000000


@dataclass
class FatTreeSpec:
    hosts: int = 64
    hosts_per_unit: int = 16
    rails: int = 1
    spines: int = 2  # per rail group (2 levels) or per rail group per pod (3 levels)
    links_per_uplink: int = 1
    units_per_pod: int = 0  # 0: two levels
    cores: int = 2  # per rail group, three levels only
    rail_spines: bool = True  # each rail has its own spines; False: one shared spine group
    host_format: str = "gpu{:04d}"
    hca_format: str = "mlx5_{}"
    named_switches: bool = True
    storage_hca: bool = False
    sharp: bool = False
    unnamed_cas: int = 0
    extra_hosts: Sequence[str] = ()
    dead_hcas: Sequence[Tuple[int, int]] = ()  # (host index, rail) left uncabled
    speed: str = "4xHDR"
    uplink_speed: str = "4xHDR"
    legacy_hca_hosts: Sequence[int] = ()  # host indexes whose HCAs are "HCA-<r+1>"
    chain_leaves: bool = False  # cable leaf u to leaf u+1 of the same rail
    #: switch names, e.g. "A09-P1-IBLEAF-{rail1:02d}-{unit1:02d}" (1-based
    #: unit1/rail1, 0-based unit/rail); "" for the default names
    leaf_format: str = ""
    spine_format: str = ""  # "A10-P1-IBSPINE-{n:02d}" (n: 1-based)

    @property
    def units(self) -> int:
        return -(-self.hosts // self.hosts_per_unit)


@dataclass
class _Node:
    guid: int
    kind: str  # Switch | Ca
    desc: str
    lid: int
    ports: Dict[int, Tuple["_Node", int, str]] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f'"{"S" if self.kind == "Switch" else "H"}-{self.guid:016x}"'


class _Builder:
    def __init__(self, spec: FatTreeSpec):
        self.spec = spec
        self.switches: List[_Node] = []
        self.cas: List[_Node] = []
        self.lid = 0

    def _lid(self) -> int:
        self.lid += 1
        return self.lid

    def switch(self, name: str) -> _Node:
        guid = SWITCH_GUID0 + len(self.switches) * 0x100
        desc = f"MF0;{name}:MQM8790/U1" if self.spec.named_switches else \
            "Quantum Mellanox Technologies"
        node = _Node(guid, "Switch", desc, self._lid())
        self.switches.append(node)
        return node

    def ca(self, desc: str) -> _Node:
        node = _Node(CA_GUID0 + len(self.cas) * 0x10, "Ca", desc, self._lid())
        self.cas.append(node)
        return node

    @staticmethod
    def cable(a: _Node, b: _Node, speed: str) -> None:
        pa = 1 if a.kind == "Ca" else len(a.ports) + 1
        pb = 1 if b.kind == "Ca" else len(b.ports) + 1
        a.ports[pa] = (b, pb, speed)
        b.ports[pb] = (a, pa, speed)


def _build(spec: FatTreeSpec) -> _Builder:
    b = _Builder(spec)
    rails = max(1, spec.rails)
    three = spec.units_per_pod > 0
    pods = -(-spec.units // spec.units_per_pod) if three else 1
    groups = rails if spec.rail_spines else 1

    def leaf_name(u: int, r: int) -> str:
        if spec.leaf_format:
            return spec.leaf_format.format(unit=u, rail=r, unit1=u + 1, rail1=r + 1)
        return f"leaf{u + 1:03d}" if rails == 1 else f"su{u + 1:03d}-leaf{r}"

    leaves = {(u, r): b.switch(leaf_name(u, r)) for u in range(spec.units) for r in range(rails)}
    spines: Dict[Tuple[int, int], List[_Node]] = {}
    for p in range(pods):
        for g in range(groups):
            tag = f"pod{p + 1}-" if three else ""
            rail = f"r{g}-" if groups > 1 else ""
            spines[(p, g)] = [b.switch(spec.spine_format.format(n=len(b.switches) + 1 - len(leaves))
                                       if spec.spine_format else f"{tag}spine-{rail}{s + 1:02d}")
                              for s in range(spec.spines)]
    cores: Dict[int, List[_Node]] = {}
    if three:
        for g in range(groups):
            rail = f"r{g}-" if groups > 1 else ""
            cores[g] = [b.switch(f"core-{rail}{c + 1:02d}") for c in range(spec.cores)]
    dead = set(spec.dead_hcas)
    for h in range(spec.hosts):
        u = h // spec.hosts_per_unit
        name = spec.host_format.format(h + 1)
        for r in range(rails):
            if (h, r) in dead:
                continue
            hca_name = f"HCA-{r + 1}" if h in spec.legacy_hca_hosts else spec.hca_format.format(r)
            b.cable(leaves[(u, r)], b.ca(f"{name} {hca_name}"), spec.speed)
    if spec.storage_hca:
        stor_leaves = [b.switch(f"stor-leaf{u + 1:03d}") for u in range(spec.units)]
        for h in range(spec.hosts):
            hca = b.ca(f"{spec.host_format.format(h + 1)} {spec.hca_format.format(rails)}")
            b.cable(stor_leaves[h // spec.hosts_per_unit], hca, spec.speed)
        for sl in stor_leaves:  # storage shares the subnet through rail 0's spines
            for sp in spines[(0, 0)]:
                b.cable(sl, sp, spec.uplink_speed)
    first = leaves[(0, 0)]
    for extra in spec.extra_hosts:
        b.cable(first, b.ca(f"{extra} mlx5_0"), spec.speed)
    for i in range(spec.unnamed_cas):
        b.cable(first, b.ca("MT4123 ConnectX6   Mellanox Technologies"), spec.speed)
    for (u, r), leaf in leaves.items():
        p = u // spec.units_per_pod if three else 0
        for sp in spines[(p, r if spec.rail_spines else 0)]:
            for _ in range(spec.links_per_uplink):
                b.cable(leaf, sp, spec.uplink_speed)
    if spec.chain_leaves:
        for (u, r), leaf in leaves.items():
            if (u + 1, r) in leaves:
                b.cable(leaf, leaves[(u + 1, r)], spec.uplink_speed)
    for (p, g), sps in spines.items():
        for sp in sps:
            for core in cores.get(g, ()):
                for _ in range(spec.links_per_uplink):
                    b.cable(sp, core, spec.uplink_speed)
    if spec.sharp:
        for sw in list(b.switches):
            b.cable(sw, b.ca("Mellanox Technologies Aggregation Node"), spec.speed)
    return b


def generate(spec: FatTreeSpec) -> str:
    """The ibnetdiscover text of the fabric ``spec`` describes."""
    b = _build(spec)
    out: List[str] = ["#", "# Topology file: generated by bench.ibgen", "#",
                      f"# Initiated from node {b.cas[0].guid:016x} port {b.cas[0].guid:016x}"
                      if b.cas else "#", ""]
    for sw in b.switches:
        out += ["vendid=0x2c9", "devid=0xd2f0", f"sysimgguid=0x{sw.guid:x}",
                f"switchguid=0x{sw.guid:x}({sw.guid:x})",
                f'Switch\t{max(len(sw.ports), 1)} "S-{sw.guid:016x}"\t\t# "{sw.desc}" '
                f"enhanced port 0 lid {sw.lid} lmc 0"]
        for port in sorted(sw.ports):
            peer, pport, speed = sw.ports[port]
            pguid = f"({peer.guid:x})" if peer.kind == "Ca" else ""
            out.append(f'[{port}]\t{peer.ref}[{pport}]{pguid}\t\t# "{peer.desc}" '
                       f"lid {peer.lid} {speed}")
        out.append("")
    for ca in b.cas:
        out += ["vendid=0x2c9", "devid=0x101b", f"sysimgguid=0x{ca.guid:x}",
                f"caguid=0x{ca.guid:x}", f'Ca\t1 "H-{ca.guid:016x}"\t\t# "{ca.desc}"']
        for port in sorted(ca.ports):
            peer, pport, speed = ca.ports[port]
            out.append(f'[{port}]({ca.guid:x})\t{peer.ref}[{pport}]\t\t# lid {ca.lid} lmc 0 '
                       f'"{peer.desc}" lid {peer.lid} {speed}')
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ibgen",
                                description="Write a synthetic ibnetdiscover fabric.")
    p.add_argument("--hosts", type=int, default=64)
    p.add_argument("--hosts-per-unit", type=int, default=16)
    p.add_argument("--rails", type=int, default=1)
    p.add_argument("--spines", type=int, default=2)
    p.add_argument("--links-per-uplink", type=int, default=1)
    p.add_argument("--units-per-pod", type=int, default=0, help="0: two levels")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--shared-spines", action="store_true", help="one spine group for all rails")
    p.add_argument("--host-format", default="gpu{:04d}")
    p.add_argument("--unnamed-switches", action="store_true")
    p.add_argument("--storage-hca", action="store_true")
    p.add_argument("--sharp", action="store_true")
    p.add_argument("--unnamed-cas", type=int, default=0)
    p.add_argument("--extra-host", action="append", default=[])
    p.add_argument("-o", "--output", default="-")
    a = p.parse_args(argv)
    spec = FatTreeSpec(hosts=a.hosts, hosts_per_unit=a.hosts_per_unit, rails=a.rails,
                       spines=a.spines, links_per_uplink=a.links_per_uplink,
                       units_per_pod=a.units_per_pod, cores=a.cores,
                       rail_spines=not a.shared_spines, host_format=a.host_format,
                       named_switches=not a.unnamed_switches, storage_hca=a.storage_hca,
                       sharp=a.sharp, unnamed_cas=a.unnamed_cas, extra_hosts=a.extra_host)
    text = generate(spec)
    if a.output == "-":
        sys.stdout.write(text)
    else:
        with open(a.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
