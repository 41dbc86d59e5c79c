"""Rings and 3D toruses described in the inventory (``fabric: rings:`` /
``toruses:``, docs/schema.md), planned on with the same tree as a topology
file read (slurmtopo/inventory/ringtree.py), and written by ``slurmtopo topology
generate`` as topology/ring's ``RingName=`` lines or topology.yaml's
``ring:``/``torus3d:`` sections (Slurm 26.05), read back the same."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from slurmtopo.inventory.hostlist import expand_in_order, fold_in_order
from slurmtopo.inventory.model import Fabric, Ring, Torus
from slurmtopo.inventory.ringtree import inventory_switches, tree_boxes
from slurmtopo.inventory.schema import dump_inventory, load_inventory, parse_document_text
from slurmtopo.inventory.topology import made_from, network_view
from slurmtopo.slurmfmt.topology_conf import parse_topology_conf, render_ring
from slurmtopo.slurmfmt.topology_yaml import parse_topology_yaml, render_yaml
from tests.admin.test_ring_torus import common_level
from tests.clirun import run_cli

NODES = "nodes:\n  - {name: \"node[1-8]\", type: hgx-h100-8}\n"
RING = ("slurmtopo: inventory\nversion: 1\n" + NODES +
        "fabric:\n  rings:\n    - name: ring0\n      nodes: node3,node[1-2],node4\n")
TORUS = ("slurmtopo: inventory\nversion: 1\n" + NODES +
         "fabric:\n  toruses:\n    - name: pod\n      dims: [2, 2, 2]\n"
         "      nodes: node[1-8]\n")


def write(tmp_path, text, name="inv.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_an_inventory_ring_is_the_tree_of_the_same_ring_read_from_topology_conf(tmp_path):
    inv = load_inventory(write(tmp_path, RING), write_cache=False)
    assert inv.fabric.rings == (Ring("ring0", ("node3", "node1", "node2", "node4")),)
    conf = parse_topology_conf("RingName=ring0 Nodes=node3,node[1-2],node4\n")
    assert inv.fabric.switches == conf.switches and made_from(inv.fabric) == "ring"
    view = network_view(inv.fabric)
    # ring order, not name order: node3 and node1 are neighbours
    assert common_level(view, "node3", "node1") == 0
    assert common_level(view, "node1", "node2") > 0


def test_a_topology_conf_ring_is_read_in_ring_order():
    """Slurm's hostlist_create keeps the order written; a sorted read made
    node1 and node2 neighbours in a ring written node3,node1,node2,node4."""
    fab = parse_topology_conf("RingName=r Nodes=node3,node1,node2,node4\n")
    view = network_view(fab)
    assert common_level(view, "node3", "node1") == 0
    assert common_level(view, "node2", "node4") == 0


def test_an_inventory_torus_is_the_tree_of_the_same_torus_read_from_topology_yaml(tmp_path):
    inv = load_inventory(write(tmp_path, TORUS), write_cache=False)
    assert inv.fabric.toruses == (Torus("pod", (2, 2, 2), tuple(f"node{i}" for i in
                                                                 range(1, 9))),)
    doc = ("- topology: t\n  torus3d:\n    toruses:\n      - name: pod\n"
           "        dims: {x: 2, y: 2, z: 2}\n        nodes: node[1-8]\n")
    assert inv.fabric.switches == parse_topology_yaml(doc)[0][2].switches
    assert made_from(inv.fabric) == "torus3d"


def test_plan_on_an_inventory_ring_asks_for_no_switches(tmp_path):
    out = tmp_path / "out"
    code, stdout, err = run_cli(["plan", "--inventory", str(write(tmp_path, RING)), "--tp", "8",
                                 "--dp", "2", "--output-dir", str(out), "--json", "--",
                                 "python", "t.py"])
    assert code == 0, err
    hosts = {r["host"] for r in json.loads(stdout)["rankmap"]["ranks"]}
    assert hosts == {"node3", "node1"}
    assert "--switches" not in (out / "job.sbatch").read_text()


BAD = [
    ("  rings:\n    - name: r\n      nodes: node[1-17]\n", "16 a ring", 7),
    ("  rings:\n    - name: r\n      nodes: node[1-3],node9\n", "'node9', which is not defined", 7),
    ("  rings:\n    - name: r\n      nodes: node[1-3],node1\n", "lists node node1 twice", 7),
    ("  rings:\n    - {name: 'a b', nodes: 'node[1-2]'}\n", "not a plain name", 7),
    ("  rings:\n    - {name: a, nodes: 'node[1-2]'}\n    - {name: b, nodes: 'node[2-3]'}\n",
     "share node node2", 8),
    ("  toruses:\n    - name: t\n      dims: [2, 2, 2]\n      nodes: node[1-7]\n",
     "7 nodes for 2x2x2", 7),
    ("  toruses:\n    - name: t\n      dims: [2, 2]\n      nodes: node[1-4]\n", "bad 'dims'", 8),
    ("  toruses:\n    - name: t\n      dims: [2, 2, 1]\n      nodes: node[1-4]\n"
     "      placements: [[4, 1, 1]]\n", "exceed the torus", 7),
    ("  rings:\n    - {name: a, nodes: 'node[1-2]'}\n"
     "  toruses:\n    - {name: t, dims: [2, 1, 1], nodes: 'node[3-4]'}\n", "not both", 7),
    ("  switches:\n    - {name: s, nodes: 'node[1-8]'}\n"
     "  rings:\n    - {name: a, nodes: 'node[1-2]'}\n", "no switches or blocks", 6),
]


@pytest.mark.parametrize("body,words,line", BAD)
def test_bad_rings_and_toruses_are_one_located_line(body, words, line, tmp_path):
    p = write(tmp_path, "slurmtopo: inventory\nversion: 1\n" + NODES + "fabric:\n" + body)
    out = tmp_path / "topology.conf"
    code, stdout, err = run_cli(["topology", "generate", "--reports", str(p), "-o", str(out)])
    assert code != 0 and not out.exists()
    assert err.count("\n") == 1 and words in err and f"{p}:{line}:" in err, err


def test_dump_inventory_round_trips_rings_and_toruses(tmp_path):
    for text in (RING, TORUS.replace("nodes: node[1-8]\n",
                                     "nodes: node[5-8],node[1-4]\n      placements: "
                                     "[[2, 1, 1]]\n")):
        inv = load_inventory(write(tmp_path, text), write_cache=False)
        dumped = dump_inventory(inv)
        again = parse_document_text(dumped, "dumped")
        assert again.fabric == inv.fabric and dump_inventory(again) == dumped
        assert "switches" not in dumped  # made from the rings/toruses, not written


def test_a_big_torus_goes_through_the_compiled_form(tmp_path):
    from slurmtopo.inventory import cache as inventory_cache

    p = write(tmp_path, "slurmtopo: inventory\nnodes:\n  - {name: \"n[0000-0999]\", type: "
                        "hgx-h100-8}\nfabric:\n  toruses:\n    - name: big\n"
                        "      dims: [10, 10, 10]\n      nodes: n[0500-0999],n[0000-0499]\n"
                        "      placements: [[2, 2, 2]]\n")
    first = load_inventory(p, check=lambda inv: None)
    hits = []
    real = inventory_cache.from_entry

    def spy(*a, **kw):
        got = real(*a, **kw)
        hits.append(got is not None)
        return got

    inventory_cache.from_entry = spy
    try:
        second = load_inventory(p, check=lambda inv: None)
    finally:
        inventory_cache.from_entry = real
    assert hits == [True]
    assert second.fabric == first.fabric and second.fabric.toruses[0].origin == f"{p}:6"


def test_generate_writes_the_ring_as_topology_conf_and_yaml(tmp_path):
    inv = write(tmp_path, RING)
    conf, yml = tmp_path / "topology.conf", tmp_path / "topology.yaml"
    assert run_cli(["topology", "generate", "--reports", str(inv), "-o", str(conf)])[0] == 0
    assert "RingName=ring0 Nodes=node3,node[1-2],node4\n" in conf.read_text()
    assert run_cli(["topology", "generate", "--reports", str(inv), "-o", str(yml)])[0] == 0
    topos = parse_topology_yaml(yml.read_text())
    assert [(n, d) for n, d, _f in topos] == [("ring", True)]
    loaded = load_inventory(inv, write_cache=False)
    assert topos[0][2].switches == loaded.fabric.switches
    for path, what in ((conf, "topology/ring: 1 ring, 4 nodes: OK"),
                       (yml, "topology/ring 'ring': 1 ring, 4 nodes: OK")):
        code, out, err = run_cli(["topology", "check", str(path)])
        assert code == 0 and what in out, (out, err)


def test_generate_writes_the_torus_with_placements(tmp_path):
    inv = write(tmp_path, TORUS)
    yml = tmp_path / "topology.yaml"
    code, _out, err = run_cli(["topology", "generate", "--reports", str(inv), "-o", str(yml)])
    assert code == 0, err
    text = yml.read_text()
    (name, default, fab), = parse_topology_yaml(text)
    assert (name, default) == ("torus3d", True)
    assert fab.switches == load_inventory(inv, write_cache=False).fabric.switches
    # no placements in the inventory: the boxes of its tree, so every job the
    # planner keeps under one switch has a shape Slurm allocates
    import yaml
    places = [tuple(p["dims"][a] for a in "xyz")
              for p in yaml.safe_load(text)[0]["torus3d"]["toruses"][0]["placements"]]
    assert places == [(2, 2, 2), (2, 2, 1), (2, 1, 1), (1, 1, 1)] == list(tree_boxes((2, 2, 2)))
    code, _out, err = run_cli(["topology", "generate", "--reports", str(inv), "--format",
                               "ring"])
    assert code != 0 and "topology.yaml only" in err


@pytest.mark.parametrize("release,ok", [("25.11", False), ("24.05", False), ("26.05", True)])
def test_ring_and_torus_need_slurm_26_05(release, ok, tmp_path):
    for text, out in ((RING, tmp_path / "topology.conf"), (TORUS, tmp_path / "topology.yaml")):
        code, _o, err = run_cli(["topology", "generate", "--reports", str(write(tmp_path, text)),
                                 "-o", str(out), "--slurm-version", release])
        assert (code == 0) == ok and out.exists() == ok, err
        if not ok:
            assert err.count("\n") == 1 and "26.05" in err, err
        out.unlink(missing_ok=True)


def test_a_ring_is_not_written_as_a_tree_or_block(tmp_path):
    for fmt in ("tree", "block"):
        code, _o, err = run_cli(["topology", "generate", "--reports",
                                 str(write(tmp_path, RING)), "--format", fmt])
        assert code != 0 and "--format ring or yaml" in err, err


NAMES = st.builds(lambda p, n, w: f"{p}{n:0{w}d}", st.sampled_from(["n", "gpu-", "r1n"]),
                  st.integers(0, 40), st.integers(1, 3))


@settings(max_examples=60, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=16, unique=True))
def test_rings_round_trip_through_both_formats(nodes):
    assert expand_in_order(fold_in_order(nodes)) == nodes
    fab = Fabric(rings=(Ring("r", tuple(nodes)),),
                 switches=inventory_switches((Ring("r", tuple(nodes)),), (), "x"))
    assert parse_topology_conf(render_ring(fab)).switches == fab.switches
    assert parse_topology_yaml(render_yaml(fab))[0][2].switches == fab.switches


@settings(max_examples=40, deadline=None)
@given(st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3)), st.randoms())
def test_toruses_round_trip_through_topology_yaml(dims, rnd):
    nodes = [f"n{i}" for i in range(dims[0] * dims[1] * dims[2])]
    rnd.shuffle(nodes)
    torus = Torus("t", dims, tuple(nodes))
    fab = Fabric(toruses=(torus,), switches=inventory_switches((), (torus,), "x"))
    assert parse_topology_yaml(render_yaml(fab))[0][2].switches == fab.switches


def test_diff_says_what_a_new_ring_order_moves(tmp_path):
    conf = tmp_path / "topology.conf"
    inv = write(tmp_path, RING)
    assert run_cli(["topology", "generate", "--reports", str(inv), "-o", str(conf)])[0] == 0
    before = conf.read_text()
    inv = write(tmp_path, RING.replace("node3,node[1-2],node4", "node[1-4]"))
    code, out, err = run_cli(["topology", "generate", "--reports", str(inv), "-o", str(conf),
                              "--diff"])
    assert code == 0 and conf.read_text() == before, err
    assert "-RingName=ring0 Nodes=node3,node[1-2],node4" in out
    assert "+RingName=ring0 Nodes=node[1-4]" in out
    # node3 left node1's arc for node4's; node2 joined node1's
    assert "change: nodes moved to another leaf/block: node[2-3]" in err, err


def test_a_fabric_document_with_a_ring_merges_with_the_nodes(tmp_path):
    nodes = write(tmp_path, "slurmtopo: inventory\nversion: 1\n" + NODES, "nodes.yaml")
    fabric = write(tmp_path, "slurmtopo: fabric\nfabric:\n  rings:\n"
                             "    - {name: r, nodes: 'node4,node3,node2,node1'}\n", "fabric.yaml")
    inv = load_inventory([nodes, fabric], write_cache=False)
    assert inv.fabric.rings[0].nodes == ("node4", "node3", "node2", "node1")
    assert inv.fabric.switches == parse_topology_conf(
        "RingName=r Nodes=node4,node3,node2,node1\n").switches
    write(tmp_path, "slurmtopo: fabric\nfabric:\n  blocks:\n"
                    "    - {name: b, nodes: 'node[5-8]'}\n", "blocks.yaml")
    code, _o, err = run_cli(["topology", "generate", "--reports", str(tmp_path)])
    assert code != 0 and "rings or toruses has no blocks" in err, err


def test_a_torus_without_placements_gets_every_box_of_its_tree():
    """An odd side cuts into a larger and a smaller half: both are boxes
    of the tree, so both are placements (7 -> 4 and 3, 3 -> 2 and 1)."""
    assert tree_boxes((4, 4, 2)) == ((4, 4, 2), (4, 2, 2), (2, 2, 2), (2, 2, 1), (2, 1, 1),
                                     (1, 1, 1))
    assert tree_boxes((7, 1, 1)) == ((7, 1, 1), (4, 1, 1), (3, 1, 1), (2, 1, 1), (1, 1, 1))
    nodes = tuple(f"n{i}" for i in range(7))
    fab = Fabric(switches=inventory_switches((), (Torus("t", (7, 1, 1), nodes),), "x"))
    by_name = {s.name: s for s in fab.switches}

    def hosts(name):
        s = by_name[name]
        return set(s.nodes).union(*(hosts(c) for c in s.switches))

    # the nodes under every switch of the tree fill one of the boxes
    assert {len(hosts(n)) for n in by_name} == {b[0] for b in tree_boxes((7, 1, 1))}


def test_a_ring_topology_conf_converts_to_topology_yaml(tmp_path):
    conf = tmp_path / "topology.conf"
    conf.write_text("RingName=r0 Nodes=node4,node2,node3,node1\nRingName=r1 Nodes=node[5-8]\n")
    code, out, err = run_cli(["topology", "generate", "--fabric", str(conf), "--format", "yaml"])
    assert code == 0, err
    (name, default, fab), = parse_topology_yaml(out)
    assert (name, default) == ("ring", True)
    assert fab.switches == parse_topology_conf(conf.read_text()).switches
    assert "nodes: node4,node[2-3],node1" in out
    code, _o, err = run_cli(["topology", "generate", "--fabric", str(conf), "--format", "tree"])
    assert code != 0 and "--format ring or yaml" in err, err
