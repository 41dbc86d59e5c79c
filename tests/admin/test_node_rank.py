"""TopologyParam=BlockAsNodeRank: warned about when node names do not
follow the blocks (slurmtopo/admin/node_rank.py), on `topology check` and
`topology generate`."""
from __future__ import annotations

from slurmtopo.admin.node_rank import has_param, node_rank_problems, out_of_order
from slurmtopo.slurmfmt.slurm_conf import parse_slurm_conf
from slurmtopo.inventory.model import Block, Fabric
from tests.clirun import run_cli


def fabric(*blocks):
    return Fabric(blocks=tuple(Block(name=f"b{i}", nodes=tuple(n))
                               for i, n in enumerate(blocks, 1)))


def test_name_order_against_block_order():
    assert out_of_order(fabric(["gpu1", "gpu2"], ["gpu3", "gpu10"])) is None
    # natural order: gpu10 after gpu9, so this one follows the blocks
    assert out_of_order(fabric(["gpu8", "gpu9"], ["gpu10", "gpu11"])) is None
    why = out_of_order(fabric(["n1", "n3"], ["n2", "n4"]))
    assert "n3 of block b1 comes after n2 of block b2" in why
    # blocks listed against name order
    assert out_of_order(fabric(["n3", "n4"], ["n1", "n2"])) is not None
    # a placeholder between blocks changes nothing
    assert out_of_order(fabric(["n1"], [], ["n2"])) is None


def test_warning_unless_the_parameter_is_set():
    il = fabric(["n1", "n3"], ["n2", "n4"])
    [p] = node_rank_problems(il, None)
    assert p.severity == "warning" and "add TopologyParam=BlockAsNodeRank" in p.message
    assert node_rank_problems(il, "SwitchAsNodeRank,blockasnoderank") == []
    [p] = node_rank_problems(il, None, (25, 5, 0))
    assert "needs 25.11+" in p.message and "add " not in p.message
    [p] = node_rank_problems(fabric(["n1"], ["n2"]), "BlockAsNodeRank", (24, 11, 0))
    assert "24.11 does not have" in p.message
    assert node_rank_problems(fabric(["n1"], ["n2"]), None) == []
    assert node_rank_problems(Fabric(), None) == []
    assert has_param("SwitchAsNodeRank,BlockAsNodeRank") and not has_param(None)


def test_slurm_conf_topology_param_and_switch_type():
    conf = parse_slurm_conf("TopologyParam=BlockAsNodeRank\nSwitchType=switch/nvidia_imex\n"
                            "NodeName=n[1-2]\n")
    assert conf.topology_param == "BlockAsNodeRank"
    assert conf.switch_type == "switch/nvidia_imex"


def test_topology_check_warns(tmp_path):
    topo = tmp_path / "topology.conf"
    topo.write_text("BlockName=r1 Nodes=node[1,3]\nBlockName=r2 Nodes=node[2,4]\n")
    code, _out, err = run_cli(["topology", "check", str(topo)])
    assert code == 0 and "node names do not follow the blocks" in err, err
    conf = tmp_path / "slurm.conf"
    conf.write_text("TopologyPlugin=topology/block\nTopologyParam=BlockAsNodeRank\n"
                    "NodeName=node[1-4]\n")
    code, _out, err = run_cli(["topology", "check", str(topo), "--slurm-conf", str(conf)])
    assert code == 0 and "follow the blocks" not in err, err


def test_topology_generate_warns(tmp_path):
    from pathlib import Path

    nvl = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / \
        "devcluster-nvl-inventory.yaml"
    text = nvl.read_text().replace('{name: rack1, nodes: "node[1-2]"}',
                                   '{name: rack1, nodes: "node[1,3]"}').replace(
        '{name: rack2, nodes: "node[3-4]"}', '{name: rack2, nodes: "node[2,4]"}').replace(
        '- name: "node[1-2]"', '- name: "node[1,3]"').replace(
        '- name: "node[3-4]"', '- name: "node[2,4]"')  # the trays' NVLink domains follow
    inv = tmp_path / "inv.yaml"
    inv.write_text(text)
    code, _out, err = run_cli(["topology", "generate", "--reports", str(inv), "--format",
                               "block", "--output", str(tmp_path / "topology.conf")])
    assert code == 0 and "add TopologyParam=BlockAsNodeRank" in err, err
    assert (tmp_path / "topology.conf").exists()
