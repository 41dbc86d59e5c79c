"""topology/block and topology.yaml on a real Slurm.

The cluster is tests/fixtures/slurm/devcluster-nvl-inventory.yaml: 4 trays
of 4 GPUs in two NVLink domains ("racks") of 2. slurmtopo generates its
gres.conf, its topology/block topology.conf and its topology.yaml; the
tests check that slurmctld loads each, that a job submitted through
`slurmtopo sbatch` asks for ``--segment`` and lands inside one block, and
that with a topology.yaml used by two partitions (``Topology=`` on the
partition) slurmtopo plans each job with its partition's topology.

topology/block exists from Slurm 23.11, topology.yaml from 25.05: on an
older Slurm (the packaged 22.05) these tests are skipped, saying so; they run
on 25.11 and 26.05 (scripts/test.sh).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.helpers import (Cluster, devcluster_mod, it_config, it_version,
                                       run_slurmtopo)
from tests.integration.ranks import Run, check_ranks

ROOT = Path(__file__).resolve().parents[2]
NVL = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-nvl-inventory.yaml"
RACKS = ({"node1", "node2"}, {"node3", "node4"})


def _need(minimum, what):
    have = it_version()
    if have < minimum:
        pytest.skip(f"{what} needs Slurm {'.'.join(map(str, minimum))} or later; this run "
                    f"tests {'.'.join(map(str, have))}")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    d = tmp_path_factory.mktemp("nvl-generated")
    run_slurmtopo(["gres", "generate", "--reports", NVL, "--output", d / "gres.conf"])
    run_slurmtopo(["topology", "generate", "--reports", NVL, "--format", "block",
                   "--output", d / "topology.conf"])
    run_slurmtopo(["topology", "generate", "--reports", NVL, "--format", "yaml",
                   "--output", d / "topology.yaml"])
    return {"gres": d / "gres.conf", "block": d / "topology.conf", "yaml": d / "topology.yaml"}


def _cluster(tmp_path_factory, name, **kw):
    cfg = it_config(dir=str(tmp_path_factory.mktemp(name)), nodes=4, gpus=4,
                    gpu_type="nvidia_gb200", port=devcluster_mod.free_port_base(4, start=56817),
                    **kw)
    return devcluster_mod.DevCluster.up(cfg)


@pytest.fixture(scope="module")
def block_cluster(generated, tmp_path_factory):
    _need((23, 11), "topology/block")
    dc = _cluster(tmp_path_factory, "block", gres_conf=str(generated["gres"]),
                  topology_conf=str(generated["block"]), topology_plugin="block")
    try:
        yield Cluster(dc)
    finally:
        dc.down()


@pytest.fixture(scope="module")
def yaml_cluster(generated, tmp_path_factory):
    _need((25, 5), "topology.yaml")
    dc = _cluster(tmp_path_factory, "yaml", gres_conf=str(generated["gres"]),
                  topology_conf=str(generated["yaml"]), topology_plugin="yaml",
                  partitions=["nvl Topology=block"])
    try:
        yield Cluster(dc)
    finally:
        dc.down()


def _hosts(run) -> set:
    from slurmtopo.inventory.hostlist import expand_hostlist
    return set(expand_hostlist(run.job["NodeList"]))


def test_slurmctld_loads_the_generated_block_topology(block_cluster, generated):
    assert "TopologyPlugin=topology/block" in block_cluster.conf.read_text()
    installed = (block_cluster.dir / "etc" / "topology.conf").read_text()
    assert installed == generated["block"].read_text()
    shown = block_cluster.run(["scontrol", "show", "topology"]).stdout
    assert "rack1" in shown and "rack2" in shown, shown
    # and slurmtopo reads back what Slurm runs with
    p = run_slurmtopo(["topology", "check", generated["block"]], check=False)
    assert p.returncode == 0, p.stderr


def test_a_segment_job_lands_inside_one_block(block_cluster, tmp_path):
    run = Run(block_cluster, tmp_path, ["--tp", "4", "--dp", "2"], inv=NVL).wait()
    assert "#SBATCH --segment=2" in run.script
    assert _hosts(run) in RACKS, run.job["NodeList"]
    placement, _doc = check_ranks(run)
    assert {s.host for s in placement.slots} in RACKS


def test_a_busy_rack_sends_the_job_to_the_other(block_cluster, tmp_path):
    """node1 taken whole: rack1 has one free tray, so the two-tray job can only
    run in rack2, and Slurm's --segment keeps it there."""
    blocker = block_cluster.sbatch("-w", "node1", "--exclusive", "-t", "2", wrap="sleep 120")
    block_cluster.wait_state(blocker, {"RUNNING"})
    run = Run(block_cluster, tmp_path, ["--tp", "4", "--dp", "2"], inv=NVL).wait()
    assert "#SBATCH --segment=2" in run.script
    assert _hosts(run) == {"node3", "node4"}
    check_ranks(run)


def test_topology_yaml_is_loaded_and_partitions_get_their_topology(yaml_cluster, generated,
                                                                  tmp_path):
    """`topology generate --format yaml` is loaded by slurmctld; with the
    topology.yaml, the job on the default partition (tree) asks for
    --switches, the job on partition nvl (Topology=block) for --segment,
    and both run with every rank's environment as planned."""
    etc = yaml_cluster.dir / "etc"
    assert (etc / "topology.yaml").read_text() == generated["yaml"].read_text()
    assert "TopologyPlugin" not in yaml_cluster.conf.read_text()
    part = yaml_cluster.run(["scontrol", "show", "partition", "nvl"]).stdout
    assert "nvl" in part
    runs = {}
    for name, partition in (("tree", "gpu"), ("block", "nvl")):
        d = tmp_path / name
        d.mkdir()
        runs[name] = Run(yaml_cluster, d, ["--tp", "4", "--dp", "2", "--partition", partition,
                                           "--slurm-topology", etc / "topology.yaml"],
                         inv=NVL)
        assert f"uses Slurm topology {name!r}" in runs[name].proc.stderr, runs[name].proc.stderr
    assert "#SBATCH --switches=1@" in runs["tree"].script
    assert "--segment" not in runs["tree"].script
    assert "#SBATCH --segment=2" in runs["block"].script
    assert "--switches" not in runs["block"].script
    for name, run in runs.items():
        run.wait()
        check_ranks(run)
    assert _hosts(runs["block"]) in RACKS


def _nested_inventory(tmp_path) -> Path:
    """The dev cluster as one NVLink fabric partitioned in two cliques
    (node[1-2], node3) and a second fabric (node4), no fabric section: the
    blocks come from the NVLink domains, laid out as topograph does."""
    text = NVL.read_text()
    text = text[:text.index("nodes:\n")] + (
        "nodes:\n"
        "  - name: \"node[1-2]\"\n    type: gb200-dev\n"
        "    nvlink_domain: {cluster_uuid: 5b1a2c3d-0000-4000-8000-0000000000f1, clique_id: 1}\n"
        "  - name: node3\n    type: gb200-dev\n"
        "    nvlink_domain: {cluster_uuid: 5b1a2c3d-0000-4000-8000-0000000000f1, clique_id: 2}\n"
        "  - name: node4\n    type: gb200-dev\n"
        "    nvlink_domain: {cluster_uuid: 5b1a2c3d-0000-4000-8000-0000000000f2, clique_id: 1}\n")
    path = tmp_path / "nested-inventory.yaml"
    path.write_text(text)
    return path


def test_two_block_levels_with_a_placeholder_load(block_cluster, generated, tmp_path):
    """Domains inside domains: BlockSizes=2,4 (largest clique 2, largest
    fabric 3) and an empty block004 keeping node4's fabric slot two blocks
    wide; slurmctld loads it and shows both levels."""
    inv = _nested_inventory(tmp_path)
    conf = tmp_path / "topology.conf"
    run_slurmtopo(["topology", "generate", "--reports", inv, "--format", "block",
                   "--output", conf])
    text = conf.read_text()
    assert "BlockName=block004\n" in text and "BlockSizes=2,4\n" in text, text
    try:
        block_cluster.reconfigure(topology_conf=str(conf))
        shown = block_cluster.run(["scontrol", "show", "topology"]).stdout
        lines = {ln.split()[0]: ln for ln in shown.splitlines() if ln.strip()}
        assert "Nodes=node[1-2]" in lines["BlockName=block001"], shown
        assert "Nodes=node3" in lines["BlockName=block002"], shown
        assert "Nodes=node4" in lines["BlockName=block003"], shown
        assert "BlockName=block004" in lines, shown
        # the second level: block001+002 (the partitioned fabric) and
        # block003+004 (node4's fabric and its placeholder), 4 nodes each
        assert "Nodes=node[1-3] BlockSize=4" in lines["AggregatedBlock=block[001-002]"], shown
        assert "Nodes=node4 BlockSize=4" in lines["AggregatedBlock=block[003-004]"], shown
        p = run_slurmtopo(["topology", "check", conf], check=False)
        assert p.returncode == 0, p.stderr
    finally:
        block_cluster.reconfigure(topology_conf=str(generated["block"]))


def nvl_cluster_with(d: Path, name: str, text: str, port_start: int, **kw):
    """The NVL dev cluster (generated gres.conf) with topology file ``name``
    holding ``text``, in directory ``d``; returns the started DevCluster and
    the topology file's path (tests/integration/test_slurm_segments.py,
    test_slurm_ring_torus.py)."""
    run_slurmtopo(["gres", "generate", "--reports", NVL, "--output", d / "gres.conf"])
    (d / name).write_text(text)
    cfg = it_config(dir=str(d / "cluster"), nodes=4, gpus=4, gpu_type="nvidia_gb200",
                    port=devcluster_mod.free_port_base(4, start=port_start),
                    gres_conf=str(d / "gres.conf"), topology_conf=str(d / name), **kw)
    return devcluster_mod.DevCluster.up(cfg), d / name


def test_an_inventory_without_fabric_plans_on_slurms_live_blocks(block_cluster, tmp_path):
    """Issue 32: with no fabric in the inventory, `plan --state live` reads
    slurmctld's blocks (`scontrol show topology`) and a two-tray job gets
    one rack and its --segment, as with the inventory's own blocks."""
    import json

    import yaml

    doc = yaml.safe_load(NVL.read_text())
    doc.pop("fabric", None)
    flat = tmp_path / "flat.yaml"
    flat.write_text(yaml.safe_dump(doc))
    env = dict(block_cluster.env, PYTHONPATH=str(ROOT))
    p = run_slurmtopo(["sbatch", "--inventory", flat, "--tp", "4", "--dp", "2", "--dry-run",
                       "--json", "--", "true"], tmp_path, env)
    out = json.loads(p.stdout)
    assert any("planned on Slurm's live topology (scontrol show topology: 2 block(s))" in n
               for n in out["notes"]), out["notes"]
    assert set(out["hosts"]) in RACKS
    assert "#SBATCH --segment=2" in out["script"]
