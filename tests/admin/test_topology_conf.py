"""Writing and reading topology.conf / topology.yaml: exact text, round
trips, and one-line file:line errors for bad files."""
from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtopo.admin.switch_tree import derive_fabric
from slurmtopo.admin.generate import default_block_sizes, leaf_blocks
from bench.ibgen import FatTreeSpec, generate
from slurmtopo.admin.ibnetdiscover import parse_ibnetdiscover, read_ibnetdiscover
from slurmtopo.slurmfmt.topology_conf import parse_topology_conf, render_tree
from slurmtopo.slurmfmt.topology_files import (apply_fabric, describe_changes, read_topology_conf,
                                               render)
from slurmtopo.slurmfmt.topology_yaml import parse_topology_yaml
from slurmtopo.errors import InventoryError
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.inventory.model import Block, Fabric, Switch

from .conftest import REPO, fixture, run_main


def fat_tree() -> Fabric:
    return derive_fabric(read_ibnetdiscover(fixture("fat_tree_4x2_dual.topo"))).fabric


def test_tree_text():
    assert render_tree(fat_tree(), ["hello"]) == textwrap.dedent("""\
        # hello
        SwitchName=ib-leaf1 Nodes=gpu[001-002] LinkSpeed=200 # MF0;ib-leaf1:MQM8700/U1
        SwitchName=ib-leaf2 Nodes=gpu[003-004] LinkSpeed=200 # MF0;ib-leaf2:MQM8700/U1
        SwitchName=ib-leaf3 Nodes=gpu[005-006] LinkSpeed=200 # MF0;ib-leaf3:MQM8700/U1
        SwitchName=ib-leaf4 Nodes=gpu[007-008] LinkSpeed=200 # MF0;ib-leaf4:MQM8700/U1
        SwitchName=ib-spine1_ibsw-000021 Switches=ib-leaf[1-4] LinkSpeed=200 # 2 switches: ib-spine1,ibsw-000021
        """)


def test_block_and_yaml_text():
    f = fat_tree()
    blocks = leaf_blocks(f)
    fb = Fabric(blocks=blocks, block_sizes=default_block_sizes(blocks))
    assert render(fb, "block").splitlines()[-2:] == ["BlockName=ib-leaf4 Nodes=gpu[007-008]",
                                                     "BlockSizes=2,4,8"]
    yml = render(Fabric(switches=f.switches, blocks=blocks, block_sizes=(2, 4)), "yaml")
    assert yml.startswith("- topology: tree\n  cluster_default: true\n  tree:\n    switches:\n"
                          "    - switch: ib-leaf1\n      nodes: gpu[001-002]\n")
    assert "- topology: block\n  cluster_default: false\n  block:\n    block_sizes:\n    - 2\n" \
           "    - 4\n    blocks:\n    - block: ib-leaf1\n" in yml
    assert "children: ib-leaf[1-4]" in yml


def shape(fabric: Fabric):
    """What Slurm sees: names, node sets, child sets, blocks, sizes."""
    return ({s.name: (frozenset(s.nodes), frozenset(s.switches)) for s in fabric.switches},
            {b.name: frozenset(b.nodes) for b in fabric.blocks}, tuple(fabric.block_sizes))


def roundtrip(fabric: Fabric, tmp_path):
    tree = Fabric(switches=fabric.switches)
    blocks = leaf_blocks(fabric)
    block = Fabric(blocks=blocks, block_sizes=default_block_sizes(blocks))
    both = Fabric(switches=fabric.switches, blocks=blocks, block_sizes=block.block_sizes)
    (tmp_path / "topology.conf").write_text(render(tree, "tree"))
    assert shape(read_topology_conf(tmp_path / "topology.conf")) == shape(tree)
    (tmp_path / "block.conf").write_text(render(block, "block"))
    assert shape(read_topology_conf(tmp_path / "block.conf")) == shape(block)
    (tmp_path / "topology.yaml").write_text(render(both, "yaml"))
    assert shape(read_topology_conf(tmp_path / "topology.yaml")) == shape(both)


@pytest.mark.parametrize("name", ["fat_tree_4x2_dual.topo", "two_rails.topo",
                                  "unnamed_cas.topo", "ibm_pcm_example_mt43132_2hosts_sdr.topo"])
def test_round_trip_fixtures(name, tmp_path):
    roundtrip(derive_fabric(read_ibnetdiscover(fixture(name))).fabric, tmp_path)


@settings(max_examples=20, deadline=None)
# hosts <= 40: with one leaf a pod, a core switch has 40 pods x 3 spines x 2
# links = 240 ports; more would pass InfiniBand's 255 ports a node, which the
# reader refuses (docs/schema.md)
@given(hosts=st.integers(1, 40), per_unit=st.integers(1, 12), rails=st.integers(1, 3),
       spines=st.integers(1, 3), pods=st.sampled_from([0, 1, 2, 3]), dual=st.booleans(),
       named=st.booleans())
def test_round_trip_generated(tmp_path_factory, hosts, per_unit, rails, spines, pods, dual, named):
    spec = FatTreeSpec(hosts=hosts, hosts_per_unit=per_unit, rails=rails, spines=spines,
                       units_per_pod=pods, links_per_uplink=2 if dual else 1,
                       named_switches=named)
    d = derive_fabric(parse_ibnetdiscover(generate(spec)))
    hosts_in_tree = sorted(h for s in d.fabric.switches for h in s.nodes)
    assert hosts_in_tree == sorted(spec.host_format.format(i + 1) for i in range(hosts))
    roots = [s for s in d.fabric.switches
             if not any(s.name in p.switches for p in d.fabric.switches)]
    assert len(roots) == 1  # always one tree
    roundtrip(d.fabric, tmp_path_factory.mktemp("rt"))


def test_reader_accepts_what_slurm_accepts():
    text = textwrap.dedent("""\
        # comment line
        switchname=s1 nodes=tux[0-3,12] # a trailing comment
        SwitchName=s2 \\
            Nodes=tux[18-20]
        SWITCHNAME=top   Switches=s[1-2]   LinkSpeed=100

        """)
    f = parse_topology_conf(text, "t.conf")
    assert [s.name for s in f.switches] == ["s1", "s2", "top"]
    assert f.switches[0].nodes == ("tux0", "tux1", "tux2", "tux3", "tux12")
    assert f.switches[0].description == "a trailing comment"
    assert f.switches[1].nodes == ("tux18", "tux19", "tux20")
    assert f.switches[1].origin == "t.conf:3"
    assert f.switches[2].link_gbps == 100


BAD_CONF = [
    ("SwitchName=s1 Nodes=a[1-2] Color=red\n", 1, "unknown key 'Color'"),
    ("SwitchName=s1 Nodes=a1 Nodes=a2\n", 1, "given twice"),
    ("SwitchName=s1 Nodes=a1\nSwitchName=s2 Nodes=a2 Switches=s1\n", 2, "both Nodes and Switches"),
    ("SwitchName=s1 Nodes=a1\nSwitchName=top Switches=s[1-2]\n", 2, "'s2', which is not defined"),
    ("SwitchName=s1 Nodes=a1\nSwitchName=s1 Nodes=a2\n", 2, "used twice"),
    ("SwitchName=s1 Switches=s2\nSwitchName=s2 Switches=s1\n", 1, "do not form a tree"),
    ("SwitchName=s1 Nodes=a1\nBlockName=b1 Nodes=a2\n", 2, "mixes SwitchName"),
    ("SwitchName=s1 Nodes=gpu[1-\n", 1, "bad Nodes"),
    ("SwitchName=s1 Nodes=a1 LinkSpeed=fast\n", 1, "LinkSpeed must be a whole number"),
    ("BlockName=b1 Nodes=a[1-4]\nBlockSizes=4,12\n", 2, "not the base block size 4 times a power"),
    ("BlockName=b1\n", 1, "no block has nodes"),
    ("Nodes=a1 SwitchName=s1\n", 1, "starts with SwitchName="),
    ("RingName=r1 Nodes=a[1-17]\n", 1, "Slurm allows 16 a ring"),
    ("RingName=r1 Nodes=a[1-4]\nRingName=r1 Nodes=b[1-4]\n", 2, "defined twice"),
    ("RingName=r1 Nodes=a[1-4]\nRingName=r2 Nodes=a[4-5]\n", 2, "rings 'r1' and 'r2' share node a4"),
    ("SwitchName=s1 Nodes=a1\nRingName=r1 Nodes=a[2-3]\n", 2, "cannot share a topology.conf"),
    ("RingName=r1 Nodes=a[1-4] Color=red\n", 1, "unknown key 'Color'"),
    ("SwitchName=s1 Nodes=a1 junk\n", 1, "expected Key=Value"),
    ("SwitchName=bad,name Nodes=a1\n", 1, "not a plain name"),
    ("SwitchName=s1\n", 1, "neither nodes nor switches"),
]


@pytest.mark.parametrize("text,line,words", BAD_CONF)
def test_reader_errors_name_file_and_line(text, line, words, tmp_path):
    p = tmp_path / "topology.conf"
    p.write_text(text)
    with pytest.raises(InventoryError) as exc:
        read_topology_conf(p)
    msg = exc.value.render()
    assert words in msg
    assert msg.startswith(f"{p}:{line}:" if line else f"{p}") and "\n" not in msg


def test_bad_file_through_the_cli_is_one_line(tmp_path, capsys):
    p = tmp_path / "topology.conf"
    p.write_text("SwitchName=s1 Nodes=a1\nSwitchName=s2 Nodes=a2 Switches=s1\n")
    rc, out, err = run_main(["topology", "check", str(p)], capsys)
    assert rc == 1  # a file Slurm refuses: a check verdict, not a usage error
    assert err == f"slurmtopo: error: {p}:2: switch 's2' has both Nodes and Switches\n"
    assert "Traceback" not in err


BAD_YAML = [
    ("- cluster_default: true\n  topology: t\n  flat: true\n", 1, "must be the first"),
    ("- topology: t\n  tree: {switches: []}\n  flat: true\n", 1, "exactly one of"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: s1\n      nodes: a[1-\n", 5, "bad nodes"),
    ("- topology: t\n  block:\n    block_sizes: [4, 12]\n    blocks:\n    - {block: b, nodes: "
     "'a[1-4]'}\n", 3, "power of two"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: s1\n      color: red\n", 5,
     "unknown key 'color'"),
    ("- topology: t\n  flat: true\n- topology: t\n  flat: true\n", 3, "defined twice"),
    ("- topology: [\n", 2, "invalid YAML"),
]


@pytest.mark.parametrize("text,line,words", BAD_YAML)
def test_yaml_reader_errors(text, line, words):
    with pytest.raises(InventoryError) as exc:
        parse_topology_yaml(text, "t.yaml")
    msg = exc.value.render()
    assert words in msg and msg.startswith(f"t.yaml:{line}:"), msg


def test_yaml_reader_picks_the_default_tree_and_first_block(tmp_path):
    p = tmp_path / "topology.yaml"
    p.write_text(textwrap.dedent("""\
        - topology: flat1
          flat: true
        - topology: t1
          tree:
            switches:
            - {switch: a, nodes: "n[1-2]"}
        - topology: t2
          cluster_default: true
          tree:
            switches:
            - {switch: b, nodes: "n[1-4]"}
        - topology: blk
          block:
            blocks:
            - {block: b1, nodes: "n[1-2]"}
        """))
    f = read_topology_conf(p)
    assert [s.name for s in f.switches] == ["b"] and [b.name for b in f.blocks] == ["b1"]


def test_apply_site_topology_to_an_inventory(tmp_path):
    inv = load_inventory(REPO / "etc" / "examples" / "h100-32node-fattree.yaml")
    p = tmp_path / "topology.conf"
    p.write_text("SwitchName=r1 Nodes=dgx[001-016],login[1-2]\n"
                 "SwitchName=r2 Nodes=dgx[017-032]\nSwitchName=top Switches=r[1-2]\n")
    merged = apply_fabric(inv, read_topology_conf(p))
    assert [s.name for s in merged.fabric.switches] == ["r1", "r2", "top"]
    assert merged.fabric.switches[0].nodes[-1] == "dgx016"  # login nodes dropped
    from slurmtopo.inventory.topology import network_view
    from slurmtopo.inventory.links import LinkClass
    view = network_view(merged.fabric)
    assert view.distance("dgx001", "dgx016") == LinkClass.NET_LEAF
    assert view.distance("dgx001", "dgx017") == LinkClass.NET_L1


def test_describe_changes():
    old = Fabric(switches=(Switch("l1", nodes=("a1", "a2")), Switch("l2", nodes=("a3",)),
                           Switch("top", switches=("l1", "l2"))))
    new = Fabric(switches=(Switch("l1", nodes=("a1",)), Switch("l3", nodes=("a2", "a3", "a4")),
                           Switch("top", switches=("l1", "l3"))))
    msgs = describe_changes(old, new)
    assert "switches added: l3" in msgs and "switches removed: l2" in msgs
    assert "switches changed: l1, top" in msgs
    assert "nodes added: a4" in msgs and "nodes moved to another leaf/block: a[2-3]" in msgs
    b_old = Fabric(blocks=(Block("b1", ("a1", "a2")),), block_sizes=(2,))
    b_new = Fabric(blocks=(Block("b1", ("a1", "a2")),), block_sizes=(2, 4))
    assert describe_changes(b_old, b_new) == ["BlockSizes 2 -> 2,4"]
