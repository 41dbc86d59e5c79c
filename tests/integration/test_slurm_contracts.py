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
  GPUs it passes in, sets CUDA_VISIBLE_DEVICES=0) gives every rank device 0.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import Cluster, devcluster_mod, it_config, run_slurmtopo
from tests.integration.test_slurm_topology import NVL, _need

ROOT = Path(__file__).resolve().parents[2]

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


def _audit(cluster, tmp_path, *extra):
    """One check of every running job: (JSON report, textfile metrics)."""
    prom = tmp_path / "contracts.prom"
    env = dict(cluster.env, PYTHONPATH=str(ROOT))
    p = run_slurmtopo(["audit", "--contracts", "--inventory", NVL, "--backend", "cli",
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
