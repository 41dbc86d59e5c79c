"""Slurm 26.05's topology/ring and topology/torus3d on a real Slurm.

A topology.yaml with a ring (the cluster default: node1..node4 in that
order) and a 2x2x1 torus (partition ``tor``, ``Topology=torus``, x-major:
node1 (0,0), node2 (1,0), node3 (0,1), node4 (1,1); placements 1x1x1,
2x1x1 and 2x2x1), in the formats of doc/man/man5/topology.yaml.5. The test
checks that slurmctld loads the file slurmtopo reads, that `slurmtopo
sbatch --slurm-topology` plans on each (asking Slurm for no ``--switches``)
and that the job lands where the plan says, every rank checked. Needs
26.05 (the plugins are new there); skipped on older releases, saying so.
"""
from __future__ import annotations

import pytest

from tests.integration.helpers import Cluster, run_slurmtopo
from tests.integration.ranks import Run, check_ranks
from tests.integration.test_slurm_topology import NVL, _hosts, _need, nvl_cluster_with

TOPOLOGY = """\
- topology: ring
  cluster_default: true
  ring:
    rings:
      - ring: ring0
        nodes: node[1-4]
- topology: torus
  cluster_default: false
  torus3d:
    toruses:
      - name: pod
        dims: {x: 2, y: 2, z: 1}
        nodes: node[1-4]
        placements:
          - dims: {x: 1, y: 1, z: 1}
          - dims: {x: 2, y: 1, z: 1}
          - dims: {x: 2, y: 2, z: 1}
"""


@pytest.fixture(scope="module")
def ring_cluster(tmp_path_factory):
    _need((26, 5), "topology/ring and topology/torus3d")
    dc, topo = nvl_cluster_with(tmp_path_factory.mktemp("ring"), "topology.yaml", TOPOLOGY,
                                58817, topology_plugin="yaml", partitions=["tor Topology=torus"])
    try:
        yield Cluster(dc), topo
    finally:
        dc.down()


def test_slurmctld_loads_the_ring_and_the_torus(ring_cluster):
    cluster, topo = ring_cluster
    shown = cluster.run(["scontrol", "show", "topology"]).stdout
    assert "ring0" in shown, shown
    p = run_slurmtopo(["topology", "check", topo], check=False)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("partition,pairs", [
    ("gpu", ({"node1", "node2"}, {"node2", "node3"}, {"node3", "node4"}, {"node4", "node1"})),
    ("tor", ({"node1", "node2"}, {"node3", "node4"})),
])
def test_a_two_node_job_lands_on_neighbours(ring_cluster, tmp_path, partition, pairs):
    """ring: a contiguous arc of two; torus: a 2x1x1 placement (x neighbours)."""
    cluster, topo = ring_cluster
    run = Run(cluster, tmp_path, ["--tp", "4", "--dp", "2", "--partition", partition,
                                  "--slurm-topology", topo], inv=NVL)
    assert "--switches" not in run.script and "--segment" not in run.script
    planned = {s.host for s in run.planned().slots}
    assert planned in pairs, planned
    run.wait()
    assert _hosts(run) in pairs, run.job["NodeList"]
    placement, _ = check_ranks(run)
    assert {s.host for s in placement.slots} == _hosts(run)
