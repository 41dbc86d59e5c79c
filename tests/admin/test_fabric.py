"""From a discovered fabric to Slurm's tree: hosts, scalable units, levels."""
from __future__ import annotations

import pytest

from slurmtopo.slurmfmt.checks import REFUSE, check_tree
from slurmtopo.admin.switch_tree import (CaHost, HostSelection, derive_fabric, host_of,
                                         switch_base_name, switch_names)
from bench.ibgen import FatTreeSpec, generate
from slurmtopo.admin.ibnetdiscover import IbNode, parse_ibnetdiscover, read_ibnetdiscover
from slurmtopo.inventory.topology import network_view, switch_levels
from slurmtopo.inventory.links import LinkClass

from .conftest import fixture


@pytest.mark.parametrize("desc,host,hca", [
    ("gpu001 mlx5_0", "gpu001", "mlx5_0"),
    ("gpu001 HCA-1", "gpu001", "HCA-1"),
    ("compute-00-01 HCA-1", "compute-00-01", "HCA-1"),
    ("gpu002.cluster.local mlx5_0", "gpu002", "mlx5_0"),
    ("gpu008  mlx5_3", "gpu008", "mlx5_3"),
    ("gpu009\tmlx5_1", "gpu009", "mlx5_1"),
    ("node17", "node17", ""),
])
def test_host_from_ca_description(desc, host, hca):
    ca, why = host_of(desc)
    assert ca == CaHost(host, hca), why


@pytest.mark.parametrize("desc,why", [
    ("", "no node description"),
    ("Mellanox Technologies Aggregation Node", "SHARP"),
    ("MT4123 ConnectX6   Mellanox Technologies", "vendor default"),
    ("MT23108 InfiniHost Mellanox Technologies", "vendor default"),
    ("10.1.2.3 mlx4_0", "address"),
])
def test_cas_that_are_no_host(desc, why):
    ca, reason = host_of(desc)
    assert ca is None and why in reason


def test_rail_is_the_number_of_the_hca():
    assert host_of("gpu001 mlx5_7")[0].rail == 7
    assert host_of("gpu001 HCA-2")[0].rail == 1  # HCA-(N+1) is mlx5_N
    assert host_of("gpu001 mlx5_bond_0")[0].rail is None
    assert host_of("gpu001")[0].rail is None


@pytest.mark.parametrize("desc,name", [
    ("MF0;leaf01:MQM8700/U1", "leaf01"),
    ("MF0;ib-core1:CS7500/L05/U1", "ib-core1-L05"),
    ("MF0;ib-core1:CS7500/S02/U1", "ib-core1-S02"),
    ("spine-a", "spine-a"),
    ("ISR9024 Voltaire", None),
    ("MT43132 Mellanox Technologies", None),
    ("Quantum Mellanox Technologies", None),
    ("", None),
])
def test_switch_names_from_descriptions(desc, name):
    assert switch_base_name(desc) == name


def test_switch_names_unique_and_stable():
    nodes = [IbNode("b8599f0300000010", "switch", 36, "MF0;leaf1:X/U1", 1),
             IbNode("b8599f0300000011", "switch", 36, "MF0;leaf1:X/U1", 2),  # same name twice
             IbNode("b8599f0300000012", "switch", 36, "", 3),
             IbNode("c8599f0300000012", "switch", 36, "", 4)]  # same last 6 hex digits
    names = switch_names(nodes)
    assert len(set(names.values())) == 4
    assert names["b8599f0300000010"] == "leaf1-0010"
    assert names["b8599f0300000012"] != names["c8599f0300000012"]
    assert switch_names(nodes) == names


def test_fat_tree_is_one_tree_not_a_chain():
    d = derive_fabric(read_ibnetdiscover(fixture("fat_tree_4x2_dual.topo")))
    sw = {s.name: s for s in d.fabric.switches}
    leaves = [s for s in d.fabric.switches if s.level == 0]
    assert [s.name for s in leaves] == ["ib-leaf1", "ib-leaf2", "ib-leaf3", "ib-leaf4"]
    roots = [s for s in d.fabric.switches if s.level == 1]
    assert len(roots) == 1 and len(sw) == 5  # both spines are one logical root
    assert set(roots[0].switches) == {s.name for s in leaves}
    assert max(switch_levels(d.fabric).values()) == 1
    assert d.members[roots[0].name] == ["ib-spine1", "ibsw-000021"]
    hosts = sorted(h for s in leaves for h in s.nodes)
    assert hosts == [f"gpu{i:03d}" for i in range(1, 9)]  # gpu002.cluster.local -> gpu002
    assert sw["ib-leaf1"].link_gbps == 200
    assert any("SHARP" in n for n in d.notes)
    assert check_tree(d.fabric) == []
    view = network_view(d.fabric)
    assert view.distance("gpu001", "gpu002") == LinkClass.NET_LEAF
    assert view.distance("gpu001", "gpu008") == LinkClass.NET_L1


def _two_rails(**kw):
    return derive_fabric(read_ibnetdiscover(fixture("two_rails.topo")), HostSelection(**kw))


GPU8 = {f"gpu{i:03d}" for i in range(1, 9)}


@pytest.mark.parametrize("select", [
    dict(hcas={"mlx5_0", "mlx5_1"}),
    dict(rails={0, 1}),
    dict(compute_nics={f"gpu{i:03d}": {"mlx5_0", "mlx5_1"} for i in range(1, 9)}),
])
def test_rail_optimized_units_are_leaves(select):
    d = _two_rails(nodes=GPU8, **select)
    leaves = [s for s in d.fabric.switches if s.level == 0]
    assert [(s.name, s.nodes) for s in leaves] == [
        ("su1", tuple(f"gpu{i:03d}" for i in range(1, 5))),
        ("su2", tuple(f"gpu{i:03d}" for i in range(5, 9)))]  # gpu008 (dead mlx5_1) included
    assert d.members["su1"] == ["su1-r0", "su1-r1"]
    assert d.host_leaves["gpu008"] == ["su2-r0"]
    assert d.host_leaves["gpu001"] == ["su1-r0", "su1-r1"]
    root = [s for s in d.fabric.switches if s.level == 1]
    assert [(s.name, s.switches) for s in root] == [("spine", ("su1", "su2"))]
    text = " | ".join(d.notes)
    assert "stor-leaf1" in text and "storage/service" in text
    assert "mgmt01" in text and "localhost" in text
    assert check_tree(d.fabric, sorted(GPU8)) == []


def test_without_a_compute_filter_storage_hcas_count():
    d = _two_rails()
    su1 = [s for s in d.fabric.switches if "gpu001" in s.nodes][0]
    assert "stor-leaf1" in d.members[su1.name]  # it is told apart only when asked
    # without a node list, a management host is recognised by its name
    assert "mgmt01" not in su1.nodes and "localhost" not in su1.nodes
    assert any("management host" in n and "mgmt01" in n for n in d.notes)


def test_unnamed_cas_and_guid_switches():
    d = derive_fabric(read_ibnetdiscover(fixture("unnamed_cas.topo")))
    leaves = {s.name: s.nodes for s in d.fabric.switches if s.level == 0}
    assert leaves == {"ibsw-000010": ("node-a1", "node-a2"), "ibsw-000011": ("node-b1",)}
    top = [s for s in d.fabric.switches if s.level == 1]
    assert [t.switches for t in top] == [("ibsw-000010", "ibsw-000011")]
    notes = "\n".join(d.notes)
    for why in ("SHARP aggregation node", "vendor default", "no node description", "address"):
        assert why in notes


def test_three_levels_with_pods():
    spec = FatTreeSpec(hosts=64, hosts_per_unit=8, rails=2, spines=2, units_per_pod=2, cores=2)
    d = derive_fabric(parse_ibnetdiscover(generate(spec)))
    levels = switch_levels(d.fabric)
    assert max(levels.values()) == 2
    by_level = {}
    for s in d.fabric.switches:
        by_level.setdefault(s.level, []).append(s)
    assert len(by_level[0]) == 8  # 8 units of 8 hosts
    assert len(by_level[1]) == 4  # one logical spine group per pod
    assert [len(s.switches) for s in by_level[1]] == [2, 2, 2, 2]
    assert len(by_level[2]) == 1 and len(by_level[2][0].switches) == 4  # one core layer
    assert check_tree(d.fabric) == []


def test_node_hostname_rename_and_node_filter():
    d = derive_fabric(read_ibnetdiscover(fixture("fat_tree_4x2_dual.topo")),
                      HostSelection(nodes={"n1", "n2", "gpu003"},
                                    rename={"gpu001": "n1", "gpu002": "n2"}))
    hosts = sorted(h for s in d.fabric.switches for h in s.nodes)
    assert hosts == ["gpu003", "n1", "n2"]
    assert any("not in the node list" in n for n in d.notes)


def test_hosts_of_the_node_list_missing_from_the_fabric_are_noted():
    d = derive_fabric(read_ibnetdiscover(fixture("fat_tree_4x2_dual.topo")),
                      HostSelection(nodes={"gpu001", "gpu999"}))
    assert any("gpu999" in n and "no linked compute HCA" in n for n in d.notes)


def test_leaf_without_uplink_is_refused():
    spec = FatTreeSpec(hosts=8, hosts_per_unit=4, rails=1, spines=1)
    text = generate(spec)
    # cut the uplink of the second leaf (its spine port and the spine's port)
    lines = [ln for ln in text.splitlines()
             if not ("spine-01" in ln and ln.startswith("[")) or "leaf001" in ln]
    lines = [ln for ln in lines if not ('"MF0;leaf002' in ln and ln.startswith("["))]
    d = derive_fabric(parse_ibnetdiscover("\n".join(lines)))
    problems = check_tree(d.fabric)
    assert [p.severity for p in problems] == [REFUSE]
    assert "leaf002" in problems[0].message and "no parent" in problems[0].message


def test_hosts_directly_on_a_spine_are_reported():
    spec = FatTreeSpec(hosts=8, hosts_per_unit=4, rails=1, spines=1, extra_hosts=())
    text = generate(spec)
    extra = ('\nvendid=0x2c9\ncaguid=0x99\nCa\t1 "H-0000000000000099"\t\t# "gpu099 mlx5_0"\n'
             '[1](99)\t"S-b83fd20300000200"[40]\t\t# lid 99 lmc 0 "x" lid 3 4xHDR\n')
    d = derive_fabric(parse_ibnetdiscover(text + extra))
    assert any("linked to other leaf switches" in n for n in d.notes)
