"""Contracts on a real Slurm (25.05+: ``scontrol update NodeName=...
Topology=``): ``slurmtopo audit --contracts`` and the job's own
``slurmtopo check`` find each violation provoked on purpose, within one
check, and nothing on a healthy job.

The cluster is the dev cluster's four GB200-like trays in two racks
(tests/fixtures/slurm/devcluster-nvl-inventory.yaml), Slurm's
topology/block with rack1 = node[1-2], rack2 = node[3-4]. node1 and node4
run exclusive blockers where a test needs the free nodes to straddle the
racks. Provoked:

* a node updated out of its block (``scontrol update NodeName=node2
  Topology=default:rack2``): Slurm gives a ``--segment=2`` job node2+node3,
  one node of each real rack, and ``scontrol show topology`` shows rack1
  without node2;
* a segment the job could not get: the same topology applied again to
  every node turns block scheduling off while ``scontrol show topology``
  still looks right (SchedMD/slurm#225, seen on 25.11.7 and 26.05.3), and
  the ``--segment=2`` job gets node2+node3 again;
* a wrong CUDA_VISIBLE_DEVICES: the job's container runtime (an
  ``apptainer`` on the job's PATH that, like a runtime re-numbering the
  GPUs it passes in, sets CUDA_VISIBLE_DEVICES=0) gives every rank device 0;
* a rank order against the topology: a job slurmtopo did not plan ranks
  its tasks as Slurm numbers them (``RANK=$SLURM_PROCID``, as srun-launched
  PyTorch does). Slurm numbers the nodes by name (node1..node4) unless
  ``TopologyParam=BlockAsNodeRank``; with blocks that list the trays
  against name order (r1: node1, node3; r2: node2, node4, the case of
  tests/integration/test_slurm_node_rank.py, and of pytorch/pytorch#191190's
  node66-before-node7) its node order splits both blocks, while with
  blocks in name order the same job keeps every contract.

And on the session's dev cluster (topology/tree, node[1-2] under leaf1 and
node[3-4] under leaf2; every Slurm release tested, 22.05 included):

* a switch limit Slurm gave up on: a 3-node job asking
  ``--switches=1@00:00:01`` (no leaf has three nodes) is started across both
  leaves once its second of waiting is over, while a 2-node job asking
  ``--switches=1`` gets one leaf and shows nothing.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import Cluster, devcluster_mod, it_config, run_slurmtopo
from tests.integration.test_slurm_topology import NVL, _need

ROOT = Path(__file__).resolve().parents[2]
DEVCLUSTER = ROOT / "etc" / "examples" / "devcluster.yaml"

TOPOLOGY = """\
BlockName=rack1 Nodes=node[1-2]
BlockName=rack2 Nodes=node[3-4]
BlockSizes=2
"""
RACK = {"node1": "rack1", "node2": "rack1", "node3": "rack2", "node4": "rack2"}


@pytest.fixture(scope="module")
def racks(tmp_path_factory):
    _need((25, 5), "scontrol update NodeName=... Topology=")
    d = tmp_path_factory.mktemp("contracts")
    run_slurmtopo(["gres", "generate", "--reports", NVL, "--output", d / "gres.conf"])
    (d / "topology.conf").write_text(TOPOLOGY)
    cfg = it_config(dir=str(d / "cluster"), nodes=4, gpus=4, gpu_type="nvidia_gb200",
                    gres_conf=str(d / "gres.conf"), topology_conf=str(d / "topology.conf"),
                    topology_plugin="block",
                    port=devcluster_mod.free_port_base(4, start=58817))
    dc = devcluster_mod.DevCluster.up(cfg)
    try:
        yield Cluster(dc)
    finally:
        dc.down()


def _audit(cluster, tmp_path, *extra, inventory=NVL):
    """One check of every running job: (JSON report, textfile metrics)."""
    prom = tmp_path / "contracts.prom"
    env = dict(cluster.env, PYTHONPATH=str(ROOT))
    p = run_slurmtopo(["audit", "--contracts", "--inventory", inventory, "--backend", "cli",
                       "--json", "--metrics-textfile", prom, *extra], env=env)
    return json.loads(p.stdout), prom.read_text()


def _mine(doc, job):
    return [v for v in doc["violations"] if v["job"] == str(job)]


def _blockers(cluster):
    """node1 and node4 taken: the only two free nodes straddle the racks."""
    ids = [cluster.sbatch("-w", n, "--exclusive", "-t", "5", wrap="sleep 300")
           for n in ("node1", "node4")]
    for j in ids:
        cluster.wait_state(j, {"RUNNING"})
    return ids


def _restore(cluster):
    cluster.cancel_all()
    cluster.reconfigure(topology_conf=TOPOLOGY)   # slurmctld rebuilds its blocks
    shown = cluster.run(["scontrol", "show", "topology"]).stdout
    assert "Nodes=node[1-2]" in shown and "Nodes=node[3-4]" in shown, shown


def _slurmtopo_job(cluster, tmp_path, *extra, path=None):
    out = tmp_path / "job.out"
    env = dict(cluster.env, PYTHONPATH=str(ROOT))
    if path:
        env["PATH"] = f"{path}{os.pathsep}{env['PATH']}"
    p = run_slurmtopo(["sbatch", "--inventory", NVL, "--tp", "4", "--dp", "2",
                       "--python", sys.executable, "--run-dir", tmp_path / "run",
                       f"--sbatch=--output={out}", "--parsable", "--check", "warn", *extra,
                       "--", "sleep", "60"], cwd=tmp_path, env=env)
    return int(p.stdout.strip()), out


def _wait_for(path: Path, text: str, timeout: float = 60):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return path.read_text()
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path}: "
                         f"{path.read_text() if path.exists() else '(none)'}")


def test_a_healthy_job_keeps_every_contract(racks, tmp_path):
    job, out = _slurmtopo_job(racks, tmp_path)
    racks.wait_state(job, {"RUNNING"})
    log = _wait_for(out, "slurmtopo check: job")
    assert f"slurmtopo check: job {job}: every contract holds" in log, log
    doc, metrics = _audit(racks, tmp_path)
    assert str(job) in doc["jobs"]
    assert _mine(doc, job) == [], doc
    assert "task-env" not in " ".join(doc["unchecked"].get(str(job), []))  # probed: seen
    assert 'slurmtopo_contract_violations{kind="segment"} 0.0' in metrics
    racks.cancel_all()


def test_a_node_updated_out_of_its_block(racks, tmp_path):
    _blockers(racks)
    try:
        racks.run(["scontrol", "update", "NodeName=node2", "Topology=default:rack2"])
        job = racks.sbatch("-N2", "--segment=2", "--gpus-per-node=4", "--ntasks-per-node=1",
                           "-t", "5", wrap="sleep 300")
        racks.wait_state(job, {"RUNNING"})
        assert racks.job(job)["NodeList"] == "node[2-3]"   # Slurm: both in rack2
        doc, metrics = _audit(racks, tmp_path, "--no-task-env")
        kinds = sorted({v["kind"] for v in _mine(doc, job)})
        assert kinds == ["block-whole", "node-out-of-block", "segment"], doc
        messages = [v["message"] for v in _mine(doc, job)]
        assert "node2 belongs to block rack1 but Slurm has it in block rack2" in messages
        assert ("asked --segment=2 but got 1+1 node(s) per block (rack1: node2, rack2: node3)"
                in messages)
        assert 'slurmtopo_contract_violations{kind="node-out-of-block"} 1.0' in metrics
    finally:
        racks.run(["scontrol", "update", "NodeName=node2", "Topology=default:rack1"],
                  check=False)
        _restore(racks)


def test_a_segment_the_job_could_not_get(racks, tmp_path):
    _blockers(racks)
    try:
        for node, rack in RACK.items():   # the same topology again: SchedMD/slurm#225
            racks.run(["scontrol", "update", f"NodeName={node}", f"Topology=default:{rack}"])
        shown = racks.run(["scontrol", "show", "topology"]).stdout
        assert "Nodes=node[1-2]" in shown and "Nodes=node[3-4]" in shown   # looks right
        job = racks.sbatch("-N2", "--segment=2", "--gpus-per-node=4", "--ntasks-per-node=1",
                           "-t", "5", wrap="sleep 300")
        racks.wait_state(job, {"RUNNING"})
        doc, metrics = _audit(racks, tmp_path, "--no-task-env")
        mine = _mine(doc, job)
        assert [v["kind"] for v in mine] == ["segment"], doc
        got = racks.job(job)["NodeList"]
        racks_of = {RACK[n] for n in ("node2", "node3")}
        assert got == "node[2-3]" and len(racks_of) == 2
        assert 'slurmtopo_contract_violations{kind="segment"} 1.0' in metrics
        # the blockers run on one node each: not multi-node, not checked
        assert doc["jobs"] == [str(job)]
    finally:
        _restore(racks)


def test_a_wrong_cuda_visible_devices(racks, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "apptainer"
    fake.write_text("#!/bin/sh\n# a runtime that re-numbers the GPUs it passes in\nshift 3\n"
                    "CUDA_VISIBLE_DEVICES=0 exec \"$@\"\n")
    fake.chmod(0o755)
    job, out = _slurmtopo_job(racks, tmp_path, "--apptainer", "img.sif", path=bindir)
    racks.wait_state(job, {"RUNNING"})
    log = _wait_for(out, f"slurmtopo check: job {job}: 6 contract violation(s): task-env 6")
    assert "CUDA_VISIBLE_DEVICES=0 (SLURM_STEP_GPUS=0,1,2,3) does not give device 1" in log
    # from outside, on the training processes themselves (sleep, under the runtime)
    doc, metrics = _audit(racks, tmp_path)
    mine = _mine(doc, job)
    assert {v["kind"] for v in mine} == {"task-env"} and len(mine) == 6, doc
    assert 'slurmtopo_contract_violations{kind="task-env"} 6.0' in metrics
    racks.cancel_all()


#: a job's tasks ranked as Slurm numbers them (srun-launched PyTorch reads
#: SLURM_PROCID as its RANK); each says so in the job's output once it runs
RANKED = ("srun /bin/sh -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID "
          "WORLD_SIZE=$SLURM_NTASKS; echo ranked $RANK; exec sleep 300'")
INTERLEAVED = """\
BlockName=r1 Nodes=node[1,3]
BlockName=r2 Nodes=node[2,4]
BlockSizes=2
"""


def _ranked_job(cluster, tmp_path):
    out = tmp_path / f"ranked-{len(list(tmp_path.glob('ranked-*')))}.out"
    job = cluster.sbatch("-N4", "--ntasks-per-node=1", "--gpus-per-node=1", "-t", "5",
                         f"--output={out}", wrap=RANKED)
    cluster.wait_state(job, {"RUNNING"})
    deadline = time.monotonic() + 60
    while not out.exists() or out.read_text().count("ranked ") < 4:
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "(none)"
        time.sleep(0.2)
    return job


def _interleaved_inventory(tmp_path) -> Path:
    """The NVL inventory with its racks (NVLink domains and blocks) against
    name order, as INTERLEAVED tells Slurm."""
    text = NVL.read_text()
    text = text.replace('"node[1-2]"', '"node[1,3]"').replace('"node[3-4]"', '"node[2,4]"')
    text = text.replace("{name: rack1,", "{name: r1,").replace("{name: rack2,", "{name: r2,")
    path = tmp_path / "interleaved.yaml"
    path.write_text(text)
    return path


def test_a_rank_order_against_the_blocks(racks, tmp_path):
    healthy = _ranked_job(racks, tmp_path)
    doc, _ = _audit(racks, tmp_path)
    assert _mine(doc, healthy) == [] and str(healthy) not in doc["unchecked"], doc
    racks.cancel_all()
    try:
        racks.reconfigure(topology_conf=INTERLEAVED)
        job = _ranked_job(racks, tmp_path)
        assert racks.job(job)["NodeList"] == "node[1-4]"
        doc, metrics = _audit(racks, tmp_path, inventory=_interleaved_inventory(tmp_path))
        assert [v["kind"] for v in _mine(doc, job)] == ["rank-order"], doc
        assert _mine(doc, job)[0]["message"].startswith(
            "nodes are numbered node1, node2, node3, node4: block r1 is split in 2 runs")
        assert str(job) not in doc["unchecked"], doc      # task-env seen and kept
        assert 'slurmtopo_contract_violations{kind="rank-order"} 1.0' in metrics
    finally:
        _restore(racks)


def test_a_switch_limit_slurm_gave_up_on(devcluster, tmp_path):
    spread = devcluster.sbatch("-N3", "--ntasks-per-node=1", "--gpus-per-node=1",
                               "--switches=1@00:00:01", "-t", "5", wrap="sleep 300")
    kept = devcluster.sbatch("-N2", "--ntasks-per-node=1", "--gpus-per-node=1",
                             "--switches=1", "-t", "5", wrap="sleep 300")
    for job in (spread, kept):
        devcluster.wait_state(job, {"RUNNING"}, timeout=60)
    doc, metrics = _audit(devcluster, tmp_path, "--no-task-env", inventory=DEVCLUSTER)
    assert sorted(doc["jobs"]) == sorted([str(spread), str(kept)])
    assert _mine(doc, kept) == [], doc
    mine = _mine(doc, spread)
    assert [v["kind"] for v in mine] == ["switches"], doc
    leaves = {"node1": "leaf1", "node2": "leaf1", "node3": "leaf2", "node4": "leaf2"}
    got = devcluster_mod.expand(devcluster.job(spread)["NodeList"])
    assert len({leaves[n] for n in got}) == 2
    assert mine[0]["message"].startswith("asked --switches=1 but spans 2 leaf switches (leaf1: ")
    assert 'slurmtopo_contract_violations{kind="switches"} 1.0' in metrics
    devcluster.cancel_all()
