"""The command-line Slurm backend on the running dev cluster: live nodes and
jobs (sinfo/squeue --json, scontrol text), the planner placing around GPUs
that running jobs hold, job and node updates, and Slurm's own words when it
refuses a submission."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmtopo.errors import SlurmError
from slurmtopo.slurm.cli_backend import CliBackend
from tests.integration.helpers import it_version, node_records

ROOT = Path(__file__).resolve().parents[2]
INV = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-inventory.yaml"


#: backends under test: SLURMTOPO_IT_BACKENDS="cli,pyslurm" (scripts/test.sh on
#: 25.11, with pyslurm built against that Slurm on PYTHONPATH); "cli" elsewhere
IT_BACKENDS = [b for b in os.environ.get("SLURMTOPO_IT_BACKENDS", "cli").split(",") if b]


@pytest.fixture(params=IT_BACKENDS)
def backend(request, devcluster):
    if request.param == "cli":
        return CliBackend(env=devcluster.env)
    assert request.param == "pyslurm", request.param
    # libslurm reads SLURM_CONF from this process's environment on first use
    os.environ["SLURM_CONF"] = str(devcluster.conf)
    from slurmtopo.slurm.pyslurm_backend import PySlurmBackend
    return PySlurmBackend()      # no pyslurm here: SlurmError fails the test, never a skip


def _sleeper(devcluster, *args):
    jid = devcluster.sbatch("-t", "2", *args, wrap="sleep 120")
    return jid


def _wait(backend, jid, states, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        j = backend.job(jid)
        if j is not None and j.state in states:
            return j
        if time.monotonic() > deadline:
            raise AssertionError(f"job {jid} not in {states}: {j}")
        time.sleep(0.1)


def test_live_nodes_and_jobs_agree_with_slurm(devcluster, backend):
    a = _sleeper(devcluster, "-w", "node1", "--gres=gpu:3", "-J", "a job; $(name)")
    b = _sleeper(devcluster, "-N2", "-w", "node[2-3]", "--gpus-per-node=2",
                 "--comment=two nodes")
    c = _sleeper(devcluster, "--hold", "-N1", "--gres=gpu:8")
    devcluster.wait_state(a, {"RUNNING"})
    devcluster.wait_state(b, {"RUNNING"})
    held_a, held_b = devcluster.gpus(a), devcluster.gpus(b)

    nodes = {n.name: n for n in backend.nodes()}
    assert sorted(nodes) == devcluster.nodes
    assert nodes["node1"].gpus_used == set(held_a["node1"])
    assert nodes["node2"].gpus_used == set(held_b["node2"])
    assert nodes["node3"].gpus_used == set(held_b["node3"])
    assert nodes["node4"].gpus_used == set() and nodes["node4"].state == "idle"
    assert all(n.gpus_total == 8 and n.partitions == ("gpu",) for n in nodes.values())
    assert nodes["node1"].state == "mixed" and nodes["node1"].usable

    jobs = {j.job_id: j for j in backend.jobs()}
    assert jobs[a].gpus == {"node1": tuple(held_a["node1"])}
    assert jobs[a].name == "a job; $(name)" and jobs[a].state == "RUNNING"
    assert jobs[b].gpus == {h: tuple(g) for h, g in held_b.items()}
    assert jobs[b].nodes == ("node2", "node3") and jobs[b].comment == "two nodes"
    assert jobs[c].held and jobs[c].state == "PENDING" and jobs[c].reason == "JobHeldUser"
    assert [j.job_id for j in backend.jobs({"PENDING"})] == [c]
    # squeue --json and scontrol text say the same about every job
    for jid, j in jobs.items():
        one = backend.job(jid)
        assert (one.name, one.state, one.nodes, dict(one.gpus), one.held, one.comment) == \
               (j.name, j.state, j.nodes, dict(j.gpus), j.held, j.comment)
    assert backend.job(999999) is None


def test_plan_with_live_state_avoids_gpus_jobs_hold(devcluster, backend):
    from slurmtopo.job.groups import Layout
    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.plan.choice import plan
    from slurmtopo.job.request import JobRequest

    a = _sleeper(devcluster, "-w", "node1", "--gres=gpu:3")
    b = _sleeper(devcluster, "-N2", "-w", "node[2-3]", "--gpus-per-node=5")
    devcluster.wait_state(a, {"RUNNING"})
    devcluster.wait_state(b, {"RUNNING"})
    busy = {**devcluster.gpus(a), **devcluster.gpus(b)}
    backend.update_node("node4", State="DRAIN", Reason="slurmtopo test: drained")
    try:
        inv = load_inventory(str(INV))
        state = backend.cluster_state(inv)
        assert not state.nodes["node4"].usable
        assert state.nodes["node4"].flags == {"drain"}
        # 5 + 3 + 3 GPUs are free: an 11-rank job fits only around the busy ones
        placement = plan(inv, state, JobRequest(layout=Layout(world=11).resolved()))
        used = {(s.host, s.gpu) for s in placement.slots}
        assert len(used) == 11
        assert not any(g in busy.get(h, []) for h, g in used), (used, busy)
        assert {h for h, _ in used} == {"node1", "node2", "node3"}
        # `slurmtopo state` writes what the planner saw
        p = subprocess.run([sys.executable, "-m", "slurmtopo", "state", "--inventory", str(INV)],
                           env=devcluster.env, capture_output=True, text=True, cwd=ROOT,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        from slurmtopo.files.yamlio import parse_text
        from slurmtopo.inventory.state import parse_state
        snap = parse_state(parse_text(p.stdout), "<stdout>", inv)
        for name in ("node1", "node2", "node3"):
            assert snap.nodes[name].busy_gpus == set(busy[name])
        assert snap.nodes["node4"].flags == {"drain"}
        with pytest.raises(Exception, match="GPU"):   # 12 GPUs are not free
            plan(inv, state, JobRequest(layout=Layout(world=12).resolved()))
    finally:
        backend.update_node("node4", State="RESUME")
    # after RESUME slurmctld may flag the node not_responding until its next ping
    deadline = time.monotonic() + 30
    while {n.name: n for n in backend.nodes()}["node4"].flags - {"not_responding"}:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    devcluster.run(["scontrol", "reconfigure"])   # re-register now instead of at the next ping
    while not {n.name: n for n in backend.nodes()}["node4"].usable:
        assert time.monotonic() < deadline, backend.nodes()
        time.sleep(0.2)


def test_submit_update_hold_release_cancel(devcluster, backend, tmp_path):
    script = ("#!/bin/bash\n#SBATCH --job-name=from-script\n#SBATCH --gres=gpu:1\n"
              f"#SBATCH --output={tmp_path}/%j.out\n"
              "echo \"$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES\"\nsleep 60\n")
    jid = backend.submit(script, args=["--comment=held by the test"], hold=True)
    j = backend.job(jid)
    assert j.held and j.state == "PENDING" and j.name == "from-script"
    assert j.comment == "held by the test"
    backend.update_job(jid, Comment="slurmtopo:v1:{\"tp\":2} $(touch X) `y`",
                       ReqNodeList="node3")
    j = backend.job(jid)
    assert j.comment == "slurmtopo:v1:{\"tp\":2} $(touch X) `y`" and j.req_nodes == ("node3",)
    assert not (ROOT / "X").exists()
    backend.release(jid)
    j = _wait(backend, jid, {"RUNNING"})
    assert j.nodes == ("node3",) and len(j.gpus["node3"]) == 1 and not j.held
    backend.hold(jid)                      # a running job: Slurm holds nothing (priority only)
    backend.cancel(jid)
    assert devcluster.wait_job(jid) == "CANCELLED"
    with pytest.raises(SlurmError, match="Invalid job id"):
        backend.release(999999)


@pytest.mark.parametrize("args, words", [
    (["-p", "nosuch"], "Invalid partition name specified"),
    (["--gres=gpu:9"], "Requested node configuration is not available"),
])
def test_submission_refused_with_slurms_words(devcluster, backend, args, words):
    with pytest.raises(SlurmError) as exc:
        backend.submit("#!/bin/bash\ntrue\n", args=args)
    assert words in exc.value.render() and "\n" not in exc.value.render()
    assert exc.value.exit_code == 4


@pytest.mark.parametrize("opts, words", [
    (["--partition", "nosuch"], "Invalid partition name specified"),
    # (25.11 queues --cpus-per-task=999 instead of refusing it; memory no node has is
    # refused by every version)
    (["--sbatch=--mem=9999999"], "Requested node configuration is not available"),
])
def test_slurmtopo_sbatch_failure_is_one_line(devcluster, tmp_path, opts, words):
    env = dict(devcluster.env, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "slurmtopo", "sbatch", "--inventory", str(INV),
                        "--tp", "2", *opts, "--", "true"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 4, p
    assert p.stdout == ""
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("slurmtopo: error: ") and words in last, p.stderr
    assert "Traceback" not in p.stderr
    assert devcluster.run(["squeue", "-h"]).stdout.strip() == ""


#: the recorded outputs of each supported Slurm (tests/fixtures/slurm/README.md):
#: (node records, their top-level key, squeue --json) by (major, minor)
RECORDED = {
    (22, 5): ("sinfo_untyped_busy.json", "squeue_untyped.json"),
    (25, 11): ("v25.11/scontrol_show_nodes.json", "v25.11/squeue.json"),
    (26, 5): ("v26.05/scontrol_show_nodes.json", "v26.05/squeue.json"),
}


def test_parsers_read_what_this_slurm_prints(devcluster, backend):
    """The recorded fixtures of this Slurm version are still what it prints:
    the same keys in node and job records, and the same GRES forms, so the
    parser unit tests on those fixtures speak for this version."""
    version = it_version()
    assert version[:2] in RECORDED, f"no recorded outputs for Slurm {version}: record them"
    node_file, job_file = RECORDED[version[:2]]
    a = _sleeper(devcluster, "-w", "node2", "--gres=gpu:2")
    devcluster.wait_state(a, {"RUNNING"})
    squeue = json.loads(devcluster.run(["squeue", "--json"]).stdout)
    fixtures = ROOT / "tests" / "fixtures" / "slurm"
    rec_node = json.loads((fixtures / node_file).read_text())["nodes"][0]
    rec_job = json.loads((fixtures / job_file).read_text())["jobs"][0]
    node2 = next(n for n in node_records(devcluster) if n["name"] == "node2")
    job = next(j for j in squeue["jobs"] if j["job_id"] == a)
    assert set(node2) == set(rec_node)
    assert set(job) == set(rec_job)
    for key in ("name", "state", "gres", "gres_used", "features",
                "active_features", "partitions", "reason", "cpus", "alloc_cpus"):
        assert key in node2, key
    for key in ("job_id", "name", "user_name", "job_state", "state_reason", "priority",
                "submit_time", "nodes", "gres_detail", "comment", "required_nodes",
                "job_resources", "partition", "node_count", "tres_per_node", "shared"):
        assert key in job, key
    assert node2["gres_used"].startswith("gpu:") and "(IDX:" in node2["gres_used"]
    assert job["gres_detail"][0].startswith("gpu:") and "(IDX:" in job["gres_detail"][0]
    # and the backend reads this version's live output as the parsers read the recording
    live = {n.name: n for n in backend.nodes()}
    assert live["node2"].gpus_used == set(devcluster.gpus(a)["node2"])


def test_accounting_passes_sacct_on_in_one_line(devcluster, backend, monkeypatch):
    """Both backends read accounting with the real sacct (the pyslurm one
    through the command-line backend, see its module doc). The dev cluster
    keeps none (AccountingStorageType=accounting_storage/none): sacct's own
    refusal comes back as one line, and a job's accounted work directory is
    unknown, not an error."""
    monkeypatch.setenv("PATH", devcluster.env["PATH"])
    monkeypatch.setenv("SLURM_CONF", str(devcluster.conf))
    with pytest.raises(SlurmError) as exc:
        backend.accounting("now-1hours", "now", ["JobID", "State"])
    text = exc.value.render()
    assert "accounting storage is disabled" in text and "\n" not in text, text
    jid = _sleeper(devcluster)
    try:
        assert backend.accounted_work_dir(jid) is None
    finally:
        devcluster.run(["scancel", str(jid)])
