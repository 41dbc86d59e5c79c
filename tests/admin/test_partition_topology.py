"""A site topology.yaml with several topologies: each partition's job is
planned on the topology its ``Topology=`` names (Slurm 25.05+)."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurmtopo import api
from slurmtopo.slurmfmt.slurm_conf import parse_slurm_conf
from slurmtopo.errors import SlurmtopoError

NVL = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "devcluster-nvl-inventory.yaml"

TOPOLOGY_YAML = """\
- topology: fat
  cluster_default: true
  tree:
    switches:
      - {switch: leaf1, nodes: "node[1-2]"}
      - {switch: leaf2, nodes: "node[3-4],cpu[1-8]"}
      - {switch: spine, children: "leaf[1-2]"}
- topology: nvl
  cluster_default: false
  block:
    block_sizes: [2]
    blocks:
      - {block: rack1, nodes: "node[1-2]"}
      - {block: rack2, nodes: "node[3-4]"}
- topology: none
  flat: true
"""

SLURM_CONF = """\
NodeName=node[1-4] Gres=gpu:4
PartitionName=DEFAULT MaxTime=INFINITE
PartitionName=gpu Nodes=ALL Default=YES
PartitionName=nvl Nodes=ALL Topology=nvl
PartitionName=flat Nodes=ALL Topology=none
"""


@pytest.fixture
def site(tmp_path):
    (tmp_path / "topology.yaml").write_text(TOPOLOGY_YAML)
    (tmp_path / "slurm.conf").write_text(SLURM_CONF)
    return tmp_path


def test_slurm_conf_partitions_name_their_topology():
    conf = parse_slurm_conf(SLURM_CONF)
    assert conf.partition_topology("nvl") == "nvl"
    assert conf.partition_topology("gpu") is None            # the cluster default
    assert conf.partition_topology(None) is None             # default partition gpu
    assert conf.partitions["nvl"]["maxtime"] == "INFINITE"   # DEFAULT line applied


@pytest.mark.parametrize("partition, name, kind", [
    ("gpu", "fat", "tree"), (None, "fat", "tree"), ("nvl", "nvl", "block"),
    ("flat", "none", "flat")])
def test_each_partition_sees_its_topology(site, partition, name, kind):
    inv = api.load_cluster(str(NVL))
    seen, notes = api.cluster_for_partition(inv, str(site / "topology.yaml"), partition,
                                            str(site / "slurm.conf"))
    assert notes == (f"{'partition ' + partition if partition else 'the default partition'} "
                     f"uses Slurm topology {name!r} ({kind}) of {site / 'topology.yaml'}",)
    if kind == "tree":
        assert [s.name for s in seen.fabric.switches] == ["leaf1", "leaf2", "spine"]
        # hosts the inventory does not have (CPU nodes) are dropped
        assert seen.fabric.switches[1].nodes == ("node3", "node4")
        assert not seen.fabric.blocks
    elif kind == "block":
        assert [b.name for b in seen.fabric.blocks] == ["rack1", "rack2"]
        assert seen.fabric.block_sizes == (2,) and not seen.fabric.switches
    else:
        assert not seen.fabric.switches and not seen.fabric.blocks
    assert seen.nodes == inv.nodes


def test_the_script_asks_for_what_the_partition_topology_offers(site):
    from slurmtopo.job.groups import Layout
    from slurmtopo.job.request import JobRequest

    inv = api.load_cluster(str(NVL))
    req = JobRequest(layout=Layout(tp=4, dp=2).resolved())
    texts = {}
    for partition in ("gpu", "nvl"):
        seen, _ = api.cluster_for_partition(inv, str(site / "topology.yaml"), partition,
                                            str(site / "slurm.conf"))
        job = api.prepare(seen, None, req, ["python", "train.py"],
                          api.ScriptOptions(partition=partition))
        texts[partition] = job.script_text
    assert "#SBATCH --switches=" in texts["gpu"] and "--segment" not in texts["gpu"]
    assert "#SBATCH --segment=2" in texts["nvl"] and "--switches" not in texts["nvl"]


def test_unknown_topology_name_is_a_clear_error(site):
    (site / "slurm.conf").write_text(SLURM_CONF.replace("Topology=nvl", "Topology=nvl72"))
    inv = api.load_cluster(str(NVL))
    with pytest.raises(SlurmtopoError, match=r"no topology named 'nvl72' \(there are: fat, nvl"):
        api.cluster_for_partition(inv, str(site / "topology.yaml"), "nvl", str(site / "slurm.conf"))


def test_without_a_slurm_topology_nothing_changes():
    inv = api.load_cluster(str(NVL))
    assert api.cluster_for_partition(inv, None, "nvl") == (inv, ())
