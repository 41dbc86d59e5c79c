"""The topology/block segment request chosen from a job's groups
(slurmtopo/placement/segments.py), and the script that asks Slurm for it."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence

import pytest

from slurmtopo.inventory.model import Block, Fabric
from slurmtopo.placement.segments import (SlurmFeatures, block_layout, choose_segments,
                                          group_nodes, nvlink_kinds)

ROOT = Path(__file__).resolve().parents[2]


def racks(n_racks: int, per_rack: int, sizes=(), empty=()) -> Fabric:
    """n_racks blocks of per_rack nodes r{b}n{i}; ``empty``: placeholder
    positions."""
    blocks = []
    for b in range(n_racks):
        nodes = () if b in empty else tuple(f"r{b}n{i:02d}" for i in range(per_rack))
        blocks.append(Block(name=f"rack{b}", nodes=nodes))
    return Fabric(blocks=tuple(blocks), block_sizes=tuple(sizes))


def hosts_in(plan: Dict[int, int]) -> List[str]:
    """rack -> nodes used, as the planner's host order."""
    return [f"r{b}n{i:02d}" for b, c in plan.items() for i in range(c)]


def ep_groups(hosts: Sequence[str], nodes_per_group: int, gpus: int = 4):
    """EP groups that each fill ``nodes_per_group`` consecutive hosts."""
    host_of = [h for h in hosts for _ in range(gpus)]
    size = nodes_per_group * gpus
    ep = [list(range(i, i + size)) for i in range(0, len(host_of), size)]
    tp = [list(range(i, i + gpus)) for i in range(0, len(host_of), gpus)]
    return {"ep": ep, "tp": tp, "dp": [list(range(0, len(host_of), size))]}, host_of


def choose(fabric, plan, per_group, slurm=SlurmFeatures(version=(25, 11, 7)), kinds=None):
    hosts = hosts_in(plan)
    groups, host_of = ep_groups(hosts, per_group)
    return choose_segments(block_layout(fabric), hosts, groups, host_of,
                           kinds or nvlink_kinds({}, {}), slurm)


def test_segment_follows_the_plan_when_it_is_aligned():
    c = choose(racks(2, 18, (18, 36)), {0: 8, 1: 8}, 4)
    assert c.options() == ["--segment=8"]
    # 16 nodes fit one base block: consolidating would force one rack, which the plan is not
    assert "spans 2 aggregated blocks of 1 base blocks" in "\n".join(c.why)


def test_segment_aligns_to_groups_where_the_plan_counts_do_not():
    # 10 + 6 share only 2: the old rule asked --segment=2, and an EP group of 4 nodes could
    # then straddle the racks; segments of 4 never cut one
    c = choose(racks(2, 18, (18, 36)), {0: 10, 1: 6}, 4)
    assert c.segment == 4 and "not whole multiples of 4" in c.why[0]
    assert "ep 4" in c.why[0]


def test_two_racks_consolidated_into_their_aggregated_block():
    c = choose(racks(4, 18, (18, 36, 72)), {0: 18, 1: 18}, 9)
    assert c.options() == ["--segment=18", "--consolidate-segments"]
    assert "2 segments" in c.why[0]
    # racks 1 and 2 lie in different 2-rack blocks: Slurm must not be told to consolidate
    c = choose(racks(4, 18, (18, 36, 72)), {1: 18, 2: 18}, 9)
    assert c.options() == ["--segment=18"]


def test_placeholder_blocks_keep_positions():
    # rack0 is a placeholder: racks 1 and 2 stay in different level-1 blocks
    fab = racks(4, 18, (18, 36, 72), empty=(0,))
    c = choose(fab, {1: 18, 2: 18}, 9)
    assert c.options() == ["--segment=18"]
    c = choose(fab, {2: 18, 3: 18}, 9)
    assert c.options() == ["--segment=18", "--consolidate-segments"]


def test_imex_channel_per_segment_with_spread():
    imex = SlurmFeatures.of((25, 11, 7), "switch/nvidia_imex")
    c = choose(racks(4, 18, (18,)), {0: 12, 2: 12}, 4, slurm=imex)
    assert c.options() == ["--segment=12", "--spread-segments",
                           "--network=unique-channel-per-segment"]
    # one segment: the job's one channel is the segment's
    c = choose(racks(2, 18, (18, 36)), {0: 12}, 4, slurm=imex)
    assert c.options() == ["--segment=12"]
    # spread changes what consolidation must hold: 2 x 18 nodes, one level-1 block
    c = choose(racks(2, 18, (18, 36)), {0: 8, 1: 8}, 4, slurm=imex)
    assert c.options() == ["--segment=8", "--spread-segments", "--consolidate-segments",
                           "--network=unique-channel-per-segment"]


def test_options_are_gated_by_the_release():
    imex = SlurmFeatures.of((25, 5), "switch/nvidia_imex")
    c = choose(racks(4, 18, (18, 36, 72)), {0: 18, 1: 18}, 9, slurm=imex)
    assert c.options() == ["--segment=18"]
    text = "\n".join(c.why)
    assert "25.05" in text and "unique-channel-per-segment" in text
    c = choose(racks(2, 18, (18, 36)), {0: 8}, 4, slurm=SlurmFeatures.of((23, 2), None))
    assert c.options() == [] and "23.02 has no --segment" in c.why[0]
    # unknown release: current options, and the note says it was assumed
    c = choose(racks(4, 18, (18, 36, 72)), {0: 18, 1: 18}, 9, slurm=SlurmFeatures())
    assert "--consolidate-segments" in c.options()
    assert any("--slurm-version" in w for w in c.why)


def test_group_wider_than_the_base_block():
    # two-level blocks: cliques of 9 as base blocks, racks of 18 as level 1
    fab = racks(4, 9, (9, 18))
    c = choose(fab, {0: 9, 1: 9}, 18)
    assert c.segment == 18 and "exceeds the base block of 9" in c.why[0]
    c = choose(fab, {0: 9, 1: 9}, 18, slurm=SlurmFeatures.of((24, 11), None))
    assert c.segment == 9
    assert any("more than a block of 9" in w for w in c.why)


def test_no_segment_when_none_divides():
    c = choose(racks(2, 18, (18, 36)), {0: 2, 1: 1}, 1)
    assert c.options() == [] and "share no segment size" in c.why[0]


def test_nvlink_kinds_and_group_nodes():
    assert nvlink_kinds({"dp": "nvlink-domain"}, {"pp": "leaf"}) == \
        ("tp", "expert-tp", "ep", "expert-tp-ep", "dp")
    hosts = hosts_in({0: 4})
    groups, host_of = ep_groups(hosts, 2)
    assert group_nodes(groups, host_of, ("tp", "ep", "dp")) == {"ep": 2, "dp": 2}


def test_block_layout_defaults():
    fab = racks(3, 4, empty=(0,))
    lay = block_layout(fab)
    assert lay.base == 4 and lay.levels == (0, 1, 2, 3, 4)
    assert lay.position["r1n00"] == 1 and lay.level_for(9) == 2
    assert block_layout(Fabric()) is None
    assert block_layout(racks(2, 4, (4, 16))).levels == (0, 2)


def test_script_asks_for_the_choice(tmp_path):
    """End to end: slurmtopo plan on the dev cluster's NVL inventory with
    the slurm.conf saying switch/nvidia_imex."""
    from tests.clirun import run_cli

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSwitchType=switch/nvidia_imex\n"
                    "NodeName=node[1-4] Gres=gpu:4\n")
    inv = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-nvl-inventory.yaml"
    out = tmp_path / "out"
    args = ["plan", "--inventory", str(inv), "--tp", "4", "--ep", "2", "--dp", "4",
            "--slurm-conf", str(conf), "--output-dir", str(out)]
    cmd = ["--", "python", "t.py"]
    code, stdout, stderr = run_cli(args + ["--slurm-version", "25.11"] + cmd)
    assert code == 0, stderr
    script = (out / "job.sbatch").read_text()
    assert "#SBATCH --segment=2\n#SBATCH --spread-segments\n" in script
    assert "#SBATCH --network=unique-channel-per-segment\n" in script
    assert "one IMEX channel per segment" in " ".join(stdout.split())  # the preview says why
    code, stdout, stderr = run_cli(args + ["--slurm-version", "24.11"] + cmd)
    assert code == 0, stderr
    script = (out / "job.sbatch").read_text()
    assert "#SBATCH --segment=2\n" in script and "--network" not in script
    code, stdout, stderr = run_cli(args + ["--slurm-version", "latest"] + cmd)
    assert code != 0 and "--slurm-version" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("bad", ["switch/none", None])
def test_no_imex_without_the_switch_plugin(bad):
    assert not SlurmFeatures.of((25, 11), bad).imex


def test_one_node_segments_only_to_consolidate():
    # base blocks of one node, pairs at level 1: a 2-node job whose groups stay inside nodes
    fab = racks(8, 1, (1, 2, 4), empty=(2, 3, 6, 7))
    hosts = ["r0n00", "r1n00"]
    groups = {"tp": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]]}
    host_of = ["r0n00", "r0n00", "r1n00", "r1n00"]
    c = choose_segments(block_layout(fab), hosts, groups, host_of, nvlink_kinds({}, {}),
                        SlurmFeatures.of((25, 11), "switch/nvidia_imex"))
    assert c.options() == ["--segment=1", "--consolidate-segments"]
    # blocks 1 and 4 are in different pairs: nothing to ask
    hosts = ["r1n00", "r4n00"]
    host_of = ["r1n00", "r1n00", "r4n00", "r4n00"]
    c = choose_segments(block_layout(fab), hosts, groups, host_of, nvlink_kinds({}, {}))
    assert c.options() == [] and "share no segment size" in c.why[0]


def test_site_topology_keeps_its_placeholder_blocks(tmp_path):
    """--slurm-topology: the empty blocks of the site's list hold positions
    Slurm aggregates by, so they stay (dropping them put node2 and node3 in
    one level-1 block and asked Slurm to consolidate them)."""
    from slurmtopo import api

    conf = tmp_path / "topology.conf"
    conf.write_text("BlockName=b1 Nodes=node1\nBlockName=b2 Nodes=node2\nBlockName=b3\n"
                    "BlockName=b4\nBlockName=b5 Nodes=node3\nBlockName=b6 Nodes=node4,cpu1\n"
                    "BlockSizes=1,2,4\n")
    inv = api.load_cluster(str(ROOT / "tests" / "fixtures" / "slurm" /
                               "devcluster-nvl-inventory.yaml"))
    seen, _ = api.cluster_for_partition(inv, str(conf))
    assert [b.name for b in seen.fabric.blocks] == ["b1", "b2", "b3", "b4", "b5", "b6"]
    assert seen.fabric.blocks[5].nodes == ("node4",)
    lay = block_layout(seen.fabric)
    assert lay.position["node3"] == 4 and lay.levels == (0, 1, 2)
    # the plan embeds this view: its placeholders have no inventory form and are left out
    from slurmtopo.inventory.schema import inventory_dict, parse_inventory

    back = parse_inventory(inventory_dict(seen), "embedded")
    assert [b.name for b in back.fabric.blocks] == ["b1", "b2", "b5", "b6"]


def test_an_unreadable_default_slurm_conf_does_not_stop_a_plan(tmp_path, monkeypatch):
    """$SLURM_CONF is read only for SwitchType: a file slurmtopo refuses
    leaves the IMEX options off; the same file given with --slurm-conf is
    an error, one line."""
    from tests.clirun import run_cli

    bad = tmp_path / "slurm.conf"
    bad.write_text("SwitchType=switch/nvidia_imex\nNodeName=a\"b\n")
    monkeypatch.setenv("SLURM_CONF", str(bad))
    inv = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-nvl-inventory.yaml"
    args = ["plan", "--inventory", str(inv), "--tp", "4", "--ep", "2", "--dp", "4",
            "--slurm-version", "25.11", "--output-dir", str(tmp_path / "o")]
    code, _out, err = run_cli(args + ["--", "python", "t.py"])
    assert code == 0, err
    assert "--network" not in (tmp_path / "o" / "job.sbatch").read_text()
    code, _out, err = run_cli(args + ["--slurm-conf", str(bad), "--", "python", "t.py"])
    assert code != 0 and str(bad) in err and "Traceback" not in err
