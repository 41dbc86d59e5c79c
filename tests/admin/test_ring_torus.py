"""Slurm 26.05's topology/ring and topology/torus3d read into the planner's
switch tree (read by slurmtopo/slurmfmt/, the trees and Slurm's rules in
slurmtopo/inventory/ringtree.py), from the formats of
doc/man/man5/topology.yaml.5 and topology.conf.5 (fixture:
tests/fixtures/slurm/topology-ring-torus.yaml, the man page's example)."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurmtopo.inventory.ringtree import torus_coords
from slurmtopo.slurmfmt.topology_files import read_one_topology, read_topology_conf
from slurmtopo.slurmfmt.topology_yaml import parse_topology_yaml
from slurmtopo.errors import InventoryError
from slurmtopo.inventory.topology import made_from, network_view
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "slurm" / "topology-ring-torus.yaml"


def common_level(view, a, b):
    """The level of the lowest switch above both hosts."""
    both = set(view.ancestors[a]) & set(view.ancestors[b])
    return min(view.ancestors[a][s] for s in both) if both else None


def test_the_man_page_example_reads():
    topos = {name: (default, fab) for name, default, fab in
             parse_topology_yaml(FIXTURE.read_text(), str(FIXTURE))}
    assert set(topos) == {"topo4", "topo5", "regions"} and topos["topo4"][0]
    ring = topos["topo4"][1]
    assert made_from(ring) == "ring" and made_from(topos["topo5"][1]) == "torus3d"
    view = network_view(ring)
    # ring order: neighbours share a leaf, the far side of the ring only the ring's root
    assert common_level(view, "node01", "node02") == 0
    assert common_level(view, "node01", "node05") > common_level(view, "node01", "node03")
    # two rings: no common switch, as Slurm never gives a job both
    assert common_level(view, "node01", "node09") is None
    assert {h for s in ring.switches for h in s.nodes} == {f"node{i:02d}" for i in range(1, 17)}
    assert read_one_topology(FIXTURE)[0] == "topo4"


def test_torus_coordinates_are_x_major():
    hosts = [f"node{i:02d}" for i in range(1, 33)]
    c = torus_coords((4, 4, 2), hosts)
    assert c["node01"] == (0, 0, 0) and c["node02"] == (1, 0, 0)
    assert c["node05"] == (0, 1, 0) and c["node17"] == (0, 0, 1)
    fab = dict((n, f) for n, _d, f in parse_topology_yaml(FIXTURE.read_text(), "x"))["topo5"]
    view = network_view(fab)
    # x neighbours closer than z neighbours' far corners
    assert common_level(view, "node01", "node02") < common_level(view, "node01", "node32")
    regions = dict((n, f) for n, _d, f in parse_topology_yaml(FIXTURE.read_text(),
                                                              "x"))["regions"]
    assert {h for s in regions.switches for h in s.nodes} == {f"node{i:02d}" for i in
                                                              range(1, 7)}


BAD_YAML = [
    ("  ring:\n    rings:\n      - ring: r\n        nodes: n[1-17]\n", "16 a ring"),
    ("  torus3d:\n    toruses:\n      - name: t\n        dims: {x: 2, y: 2, z: 1}\n"
     "        nodes: n[1-3]\n", "3 nodes for 2x2x1"),
    ("  torus3d:\n    toruses:\n      - name: t\n        dims: {x: 2, y: 2, z: 1}\n"
     "        regions:\n          - {anchor: {x: 1, y: 0, z: 0}, dims: {x: 2, y: 1, z: 1},"
     " nodes: 'n[1-2]'}\n", "does not fit the torus"),
    ("  torus3d:\n    toruses:\n      - name: t\n        dims: {x: 2, y: 2, z: 1}\n"
     "        regions:\n          - {anchor: {x: 0, y: 0, z: 0}, dims: {x: 2, y: 1, z: 1},"
     " nodes: 'n[1-2]'}\n          - {anchor: {x: 1, y: 0, z: 0}, dims: {x: 1, y: 2, z: 1},"
     " nodes: 'n[3-4]'}\n", "filled twice"),
    ("  torus3d:\n    toruses:\n      - name: t\n        dims: {x: 2, y: 2, z: 0}\n"
     "        nodes: n[1-4]\n", "dims.z must be a whole number >= 1"),
    ("  torus3d:\n    toruses:\n      - name: t\n        dims: {x: 2, y: 2, z: 1}\n"
     "        nodes: n[1-4]\n        placements:\n          - dims: {x: 4, y: 1, z: 1}\n",
     "exceed the torus"),
    ("  ring: {rings: [{ring: a, nodes: 'n[1-2]'}, {ring: b, nodes: 'n[2-3]'}]}\n",
     "rings 'a' and 'b' share node n2"),
    ("  torus3d:\n    toruses:\n      - {name: t, dims: {x: 2, y: 1, z: 1}, nodes: 'n[1-2]'}\n"
     "      - {name: u, dims: {x: 2, y: 1, z: 1}, nodes: 'n[2-3]'}\n", "share node n2"),
    ("  torus3d:\n    toruses:\n      - name: t\n        dims: {x: 2, y: 2, z: 1}\n"
     "        nodes: n[1-4]\n        placements:\n          - dims: {x: 1, y: 1, z: 1}\n"
     "            anchor_seed: {x: 2, y: 0, z: 0}\n",
     "anchor_seed (2, 0, 0) must lie within the torus (2, 2, 1)"),
    ("  torus3d:\n    toruses:\n      - name: t\n        dims: {x: 2, y: 2, z: 1}\n"
     "        nodes: n[1-4]\n        placements:\n          - dims: {x: 1, y: 1, z: 1}\n"
     "            anchor_spacing: {x: 3, y: 1, z: 1}\n",
     "anchor_spacing (3, 1, 1) must lie within the torus (2, 2, 1)"),
]


@pytest.mark.parametrize("body,words", BAD_YAML)
def test_bad_sections_are_one_located_line(body, words, tmp_path):
    p = tmp_path / "topology.yaml"
    p.write_text("- topology: t\n" + body)
    with pytest.raises(InventoryError) as exc:
        read_one_topology(p)
    msg = exc.value.render()
    assert words in msg and msg.startswith(str(p)) and "\n" not in msg


def test_ring_topology_conf(tmp_path):
    conf = tmp_path / "topology.conf"
    conf.write_text("RingName=ring0 Nodes=node[01-08]\nRingName=ring1 Nodes=node[09-16]\n")
    fab = read_topology_conf(conf)
    assert made_from(fab) == "ring" and read_one_topology(conf)[0] == "ring"
    assert len({h for s in fab.switches for h in s.nodes}) == 16


def test_plan_on_a_ring(tmp_path):
    """slurmtopo plan --slurm-topology on the man page's ring: a 2-node job
    lands on ring neighbours, and the script asks for no --switches."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("slurmtopo: inventory\nversion: 1\nnodes:\n"
                   "  - {name: \"node[01-16]\", type: hgx-h100-8}\n")
    out = tmp_path / "out"
    code, stdout, err = run_cli(["plan", "--inventory", str(inv), "--tp", "8", "--dp", "2",
                                 "--slurm-topology", str(FIXTURE), "--output-dir", str(out),
                                 "--json", "--", "python", "t.py"])
    assert code == 0, err
    import json
    doc = json.loads(stdout)
    hosts = sorted({r["host"] for r in doc["rankmap"]["ranks"]})
    fab = read_one_topology(FIXTURE)[1]
    assert common_level(network_view(fab), *hosts) == 0, hosts
    script = (out / "job.sbatch").read_text()
    assert "--switches" not in script and "topology/ring gives each job" in script
    assert any("Slurm topology 'topo4' (ring)" in n for n in doc["notes"])


def test_torus_tree_holds_the_placements():
    """The man page's 4x4x2 torus: its 2x2x1 and 2x2x2 placements (anchors
    on their own grid) are whole subtrees."""
    fab = dict((n, f) for n, _d, f in parse_topology_yaml(FIXTURE.read_text(), "x"))["topo5"]
    boxes = {s.name for s in fab.switches}
    assert {"pod1.0.0.0-1.1.0", "pod1.0.0.0-1.1.1", "pod1.2.2.1-3.3.1"} <= boxes
    hosts = [f"node{i:02d}" for i in range(1, 33)]
    c = torus_coords((4, 4, 2), hosts)
    view = network_view(fab)
    cube = [h for h in hosts if c[h][0] < 2 and c[h][1] < 2 and c[h][2] == 0]
    outside = [h for h in hosts if h not in cube]
    inside = max(common_level(view, a, b) for a in cube for b in cube if a != b)
    assert all(common_level(view, cube[0], o) is None or common_level(view, cube[0], o) > inside
               for o in outside)


def test_topology_check_takes_rings_and_toruses(tmp_path):
    """Slurm's ring/torus rules are checked as the file is read; the tree
    rules (one root above all) do not apply to them."""
    code, out, err = run_cli(["topology", "check", str(FIXTURE)])
    assert code == 0, err
    assert "topology/ring 'topo4': 2 rings, 16 nodes" in out
    assert "topology/torus3d 'topo5': 1 torus, 32 nodes" in out
    conf = tmp_path / "topology.conf"
    conf.write_text("RingName=r0 Nodes=n[1-4]\nRingName=r1 Nodes=n[5-8]\n")
    code, out, err = run_cli(["topology", "check", str(conf)])
    assert code == 0 and "topology/ring: 2 rings, 8 nodes: OK" in out, (out, err)
