"""TopologyParam=BlockAsNodeRank on a real Slurm (25.11+): what
slurmtopo/admin/node_rank.py tells an admin to add does what its docstring
says. Blocks list the trays against name order (r1: node1, node3; r2:
node2, node4); `topology check` warns about it, and with the parameter
slurmctld orders nodes by block, so a plain 4-task srun runs its tasks on
node1, node3, node2, node4 (without it, Slurm's name order would give
node1..node4 on 25.11)."""
from __future__ import annotations

import pytest

from tests.integration.helpers import Cluster, run_slurmtopo
from tests.integration.test_slurm_topology import _need, nvl_cluster_with

TOPOLOGY = "BlockName=r1 Nodes=node[1,3]\nBlockName=r2 Nodes=node[2,4]\n"


@pytest.fixture(scope="module")
def ranked(tmp_path_factory):
    _need((25, 11), "TopologyParam=BlockAsNodeRank")
    dc, topo = nvl_cluster_with(tmp_path_factory.mktemp("rank"), "topology.conf", TOPOLOGY,
                                59817, topology_plugin="block",
                                topology_param="BlockAsNodeRank")
    try:
        yield Cluster(dc), topo
    finally:
        dc.down()


def test_block_as_node_rank_orders_tasks_by_block(ranked):
    cluster, topo = ranked
    p = run_slurmtopo(["topology", "check", topo], check=False)
    assert p.returncode == 0 and "add TopologyParam=BlockAsNodeRank" in p.stderr, p.stderr
    p = run_slurmtopo(["topology", "check", topo, "--slurm-conf", cluster.conf], check=False)
    assert p.returncode == 0 and "follow the blocks" not in p.stderr, p.stderr
    job = cluster.sbatch("-N4", "-n4", "-t", "2",
                         wrap="srun -N4 -n4 -l printenv SLURMD_NODENAME | sort -n")
    assert cluster.wait_job(job) == "COMPLETED", cluster.output(job)
    lines = [ln.split(":", 1)[1].strip() for ln in cluster.output(job).splitlines()
             if ":" in ln]
    assert lines == ["node1", "node3", "node2", "node4"], cluster.output(job)
