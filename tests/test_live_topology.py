"""The planner on Slurm's own topology (issue 32): with no fabric in the
inventory, `plan --state live` and `sbatch` read `scontrol show topology`
through the Slurm backend and say so; an inventory with a fabric is the
authority (Slurm is not asked); a plan against a snapshot never asks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from slurmtopo import api
from slurmtopo.errors import SlurmError
from slurmtopo.slurm.topology import fabric_from_scontrol_topology
from slurmtopo.testing.slurm_backend import FakeSlurm
from tests.clirun import run_cli
ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-inventory.yaml"

#: as topology/tree prints it (src/plugins/topology/tree/topology_tree.c)
TREE = """SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[3-4],cpu01
SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[1-4],cpu01 Switches=leaf[1-2]
"""
#: as topology/block prints it (src/plugins/topology/block/topology_block.c)
BLOCK = """BlockName=b1 BlockIndex=0 Nodes=node[1-2] BlockSize=2
BlockName=b2 BlockIndex=1 Nodes=node[3-4] BlockSize=2
AggregatedBlock=b[1-2] BlockIndex=0 Nodes=node[1-4] BlockSize=4
"""


def test_scontrol_topology_as_a_fabric():
    f = fabric_from_scontrol_topology(TREE)
    assert [(s.name, s.level, s.nodes, s.switches) for s in f.switches] == [
        ("leaf1", 0, ("node1", "node2"), ()), ("leaf2", 0, ("cpu01", "node3", "node4"), ()),
        ("spine", 1, (), ("leaf1", "leaf2"))]
    f = fabric_from_scontrol_topology(BLOCK)
    assert [(b.name, b.nodes) for b in f.blocks] == [("b1", ("node1", "node2")),
                                                     ("b2", ("node3", "node4"))]
    assert f.block_sizes == (2, 4) and not f.switches
    assert fabric_from_scontrol_topology("") == fabric_from_scontrol_topology("\n")


@pytest.fixture
def flat_inventory(tmp_path):
    """The dev cluster's inventory without its fabric."""
    doc = yaml.safe_load(DEV.read_text())
    del doc["fabric"]
    path = tmp_path / "flat.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _with(monkeypatch, fake):
    monkeypatch.setattr("slurmtopo.slurm.get_backend", lambda name="auto", **kw: fake)
    return fake


def _plan(inv, tmp_path, *extra):
    code, out, err = run_cli(["plan", "--inventory", inv, "--tp", "2", "--dp", "4", "--json",
                              "--output-dir", str(tmp_path / "plan"), *extra])
    assert code == 0, err
    return json.loads(out)


def test_a_live_plan_reads_slurms_topology_and_says_so(flat_inventory, tmp_path, monkeypatch):
    fake = _with(monkeypatch, FakeSlurm(answers={"topology": TREE}))
    doc = _plan(flat_inventory, tmp_path, "--state", "live")
    assert "topology" in fake.asked
    assert any(n.startswith("the inventory has no fabric: planned on Slurm's live topology "
                            "(scontrol show topology: 3 switch(es))") for n in doc["notes"])
    hosts = doc["rankmap"]["hosts"]
    assert hosts in (["node1", "node2"], ["node3", "node4"])  # one leaf, as Slurm has it
    # the same job planned flat spreads nothing by leaf: no note about Slurm
    fake.asked.clear()
    doc = _plan(flat_inventory, tmp_path, "--state", "none")
    assert fake.asked == [] and not any("Slurm's live topology" in n for n in doc["notes"])


def test_sbatch_asks_for_the_leaf_slurm_has(flat_inventory, monkeypatch):
    _with(monkeypatch, FakeSlurm(answers={"topology": TREE}))
    code, out, err = run_cli(["sbatch", "--inventory", flat_inventory, "--tp", "2", "--dp", "4",
                              "--dry-run", "--", "python3", "t.py"])
    assert code == 0, err
    assert "#SBATCH --switches=1@5:00" in out
    assert "slurmtopo: the inventory has no fabric: planned on Slurm's live topology" in err


def test_the_inventorys_fabric_wins(tmp_path, monkeypatch):
    fake = _with(monkeypatch, FakeSlurm(answers={"topology": BLOCK}))
    doc = _plan(str(DEV), tmp_path, "--state", "live")
    assert "topology" not in fake.asked
    assert not any("Slurm's" in n and "topology" in n for n in doc["notes"])


def test_no_topology_or_no_answer_is_said(flat_inventory, tmp_path, monkeypatch):
    _with(monkeypatch, FakeSlurm())
    doc = _plan(flat_inventory, tmp_path, "--state", "live")
    assert any("Slurm reports no topology for its nodes" in n for n in doc["notes"])

    class Refusing(FakeSlurm):
        def topology_text(self):
            raise SlurmError("scontrol: Unable to contact slurm controller")

    _with(monkeypatch, Refusing())
    doc = _plan(flat_inventory, tmp_path, "--state", "live")
    assert any("Slurm's topology could not be read (scontrol: Unable to contact" in n
               for n in doc["notes"])


def test_the_api_use_case(flat_inventory):
    cluster = api.load_cluster(flat_inventory)
    seen, notes = api.live_topology(cluster, FakeSlurm(answers={"topology": BLOCK}))
    assert [b.nodes for b in seen.fabric.blocks] == [("node1", "node2"), ("node3", "node4")]
    assert "2 block(s)" in notes[0]
