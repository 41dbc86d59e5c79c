"""Segments chosen from the job's groups, on a real Slurm (25.11+).

The dev cluster's four trays (tests/fixtures/slurm/devcluster-nvl-inventory.yaml)
under a topology/block layout where the segment flags matter: every tray
its own base block, placeholders between them, and two block levels above
(BlockSizes=1,2,4), so the level-1 aggregated blocks are node[1-2], two
empty blocks, node[3-4] and two empty blocks. The cluster runs
switch/nvidia_imex (no IMEX device on the test machine: slurmd disables the
node side, slurmctld still allocates the channels). Each job goes through
`slurmtopo sbatch --slurm-topology` (the plan is made on Slurm's blocks),
and the test checks the options in the script, what Slurm recorded, where
the job landed and every rank's environment (tests/integration/ranks.py).

What each job shows:

* an EP group over two trays, node1 taken: ``--segment=2`` (a segment
  larger than the one-tray base block, 25.11+) keeps both trays in one
  level-1 block, so the job runs on node[3-4] and not on node2+node3;
* a job whose groups stay inside trays, node1 taken: ``--segment=1
  --consolidate-segments`` keeps its two trays in one aggregated block;
* a four-tray job with two EP groups of two trays: two segments of 2, each
  with its own IMEX channel (``--network=unique-channel-per-segment``)
  and ``--spread-segments``; each EP group sits inside one level-1 block.
  ``slurmtopo bind`` reads every node's channel (``scontrol show
  resources``); each rack is one segment, so no rank gets
  ``NCCL_MNNVL_CLIQUE_ID``;
* the same job when all four trays are one NVLink clique (one rack of four
  trays cut in two segments, a channel each): the ranks of each segment get
  their own ``NCCL_MNNVL_CLIQUE_ID``, so NCCL never uses multi-node NVLink
  across the two channels.
"""
from __future__ import annotations

import pytest

from tests.integration.helpers import Cluster
from tests.integration.ranks import Run, check_ranks
from tests.integration.test_slurm_topology import NVL, _hosts, _need, nvl_cluster_with

PAIRS = ({"node1", "node2"}, {"node3", "node4"})

TOPOLOGY = """\
BlockName=b1 Nodes=node1
BlockName=b2 Nodes=node2
BlockName=b3
BlockName=b4
BlockName=b5 Nodes=node3
BlockName=b6 Nodes=node4
BlockName=b7
BlockName=b8
BlockSizes=1,2,4
"""


@pytest.fixture(scope="module")
def seg_cluster(tmp_path_factory):
    _need((25, 11), "--spread-segments, --consolidate-segments and segments over a base block")
    dc, topo = nvl_cluster_with(tmp_path_factory.mktemp("segments"), "topology.conf", TOPOLOGY,
                                57817, topology_plugin="block",
                                switch_type="switch/nvidia_imex")
    try:
        yield Cluster(dc), topo
    finally:
        dc.down()


def _submit(cluster, tmp_path, topo, layout):
    return Run(cluster, tmp_path, [*layout, "--slurm-topology", topo], inv=NVL)


def _with_node1_taken(cluster):
    blocker = cluster.sbatch("-w", "node1", "--exclusive", "-t", "2", wrap="sleep 300")
    cluster.wait_state(blocker, {"RUNNING"})
    return blocker


def test_an_ep_group_over_two_trays_stays_in_one_aggregated_block(seg_cluster, tmp_path):
    cluster, topo = seg_cluster
    blocker = _with_node1_taken(cluster)
    try:
        run = _submit(cluster, tmp_path, topo, ["--tp", "4", "--ep", "2", "--dp", "2"])
        assert "#SBATCH --segment=2\n" in run.script, run.script
        assert "--spread-segments" not in run.script  # one segment: nothing to spread
        run.wait()
        assert "SegmentSize=2" in run.job["_raw"]
        assert _hosts(run) == {"node3", "node4"}, run.job["NodeList"]
        placement, _ = check_ranks(run)
        assert {s.host for s in placement.slots} == {"node3", "node4"}
    finally:
        cluster.run(["scancel", str(blocker)], check=False)
        cluster.wait_job(blocker)


def test_one_tray_segments_consolidated(seg_cluster, tmp_path):
    cluster, topo = seg_cluster
    blocker = _with_node1_taken(cluster)
    try:
        run = _submit(cluster, tmp_path, topo, ["--tp", "4", "--dp", "2"])
        assert "#SBATCH --segment=1\n#SBATCH --consolidate-segments\n" in run.script, run.script
        run.wait()
        assert "SegmentSize=1 ConsolidateSegments=Yes" in run.job["_raw"], run.job["_raw"]
        planned = {s.host for s in run.planned().slots}
        assert _hosts(run) == planned == {"node3", "node4"}
        check_ranks(run)
    finally:
        cluster.run(["scancel", str(blocker)], check=False)
        cluster.wait_job(blocker)


def test_two_segments_with_their_own_imex_channels(seg_cluster, tmp_path):
    cluster, topo = seg_cluster
    run = _submit(cluster, tmp_path, topo, ["--tp", "4", "--ep", "2", "--dp", "4"])
    assert ("#SBATCH --segment=2\n#SBATCH --spread-segments\n"
            "#SBATCH --network=unique-channel-per-segment\n") in run.script, run.script
    run.wait()
    raw = run.job["_raw"]
    assert "SegmentSize=2 SpreadSegments=Yes" in raw, raw
    assert "Network=unique-channel-per-segment" in raw, raw
    assert "IMEX channel per segment (scontrol show resources): channel " in run.output()
    placement, doc = check_ranks(run)       # no NCCL_MNNVL_CLIQUE_ID on any rank
    assert "host_env" not in doc
    host_of = [s.host for s in placement.slots]
    for group in placement.groups["ep"]:
        assert {host_of[r] for r in group} in PAIRS, (group, host_of)


def test_a_clique_split_over_segments_gets_a_clique_id_per_segment(seg_cluster, tmp_path):
    cluster, topo = seg_cluster
    one = tmp_path / "one-clique.yaml"   # both racks' trays in rack 1's clique
    one.write_text(NVL.read_text().replace("0000000000r2", "0000000000r1"))
    run = Run(cluster, tmp_path, ["--tp", "4", "--ep", "2", "--dp", "4", "--slurm-topology",
                                  topo], inv=one)
    assert "#SBATCH --network=unique-channel-per-segment\n" in run.script, run.script
    run.wait()
    placement, doc = run.bound()
    ids = {h: e["NCCL_MNNVL_CLIQUE_ID"] for h, e in doc["host_env"].items()}
    # one id per segment (a level-1 block, a channel), none the fabric's clique 1
    by_id = {}
    for h, v in ids.items():
        by_id.setdefault(v, set()).add(h)
    assert sorted(map(sorted, by_id.values())) == sorted(map(sorted, PAIRS)), ids
    assert all(int(v) > 1 for v in by_id), ids
    check_ranks(run, host_env=doc["host_env"])
