"""A job end to end through the documented interface (slurmtopo.api,
docs/api.md): load, read the state, prepare, submit, as `slurmtopo sbatch`
and a notebook do it, against every example cluster and the in-memory
Slurm (slurmtopo/testing/slurm_backend.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmtopo import api
from slurmtopo.daemon.decisions import RELEASE, ClusterView, QueuedJob
from slurmtopo.daemon.protocol import parse_comment
from slurmtopo.daemon.scheduler import decide
from slurmtopo.errors import PlacementError
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.plan.plandoc import planned_placement, read_plan
from slurmtopo.plan.rankmap import node_contiguous
from slurmtopo.sbatch.launch import Launch
from slurmtopo.sbatch.script import extract_plan
from slurmtopo.testing.slurm_backend import FakeSlurm

EXAMPLES = Path(__file__).resolve().parents[1] / "etc" / "examples"
COMMAND = ["python", "train.py", "--config", "conf/my run.yaml"]

#: example -> (state file, layout): the jobs of tests/test_sbatch_script.py
JOBS = {
    "h100-4node-2leaf": (None, dict(tp=8, pp=2, dp=2)),
    "h100-32node-fattree": ("h100-32node-state.yaml", dict(tp=8, pp=2, dp=2)),
    "a6000-4node-pcie": (None, dict(tp=2, pp=2, dp=4)),
    "dgx1-v100-pair": (None, dict(tp=4, dp=4)),
    "gb200-nvl72-rack": (None, dict(tp=4, pp=4, dp=2)),
    "azure-ndv4-4node": (None, dict(tp=8, dp=4)),
    "devcluster": (None, dict(tp=2, dp=4)),
}
LAUNCHES = {"srun": None, "torchrun": Launch(launcher="torchrun"),
            "apptainer": Launch(apptainer="/images/pytorch.sif")}


def _prepared(name, launch=None, **kw):
    state_file, layout = JOBS[name]
    cluster = api.load_cluster(str(EXAMPLES / f"{name}.yaml"))
    state = api.load_state_file(cluster, str(EXAMPLES / state_file) if state_file else None)
    return api.prepare(cluster, state, JobRequest(layout=Layout(**layout)), COMMAND,
                       api.ScriptOptions(job_name=name, launch=launch), **kw)


@pytest.mark.parametrize("launcher", sorted(LAUNCHES))
@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_script_carries_the_plan_prepare_made(name, launcher):
    """What the start-time step reads back from the script is the placement
    prepare returned, rank by rank, and the directives ask Slurm for its
    nodes."""
    job = _prepared(name, LAUNCHES[launcher])
    back = planned_placement(read_plan(extract_plan(job.script_text)))
    assert [(s.rank, s.host, s.gpu) for s in back.slots] == \
        [(s.rank, s.host, s.gpu) for s in job.placement.slots]
    assert f"#SBATCH --nodes={len(job.placement.hosts)}" in job.script_text.splitlines()
    assert f"#SBATCH --job-name={name}" in job.script_text.splitlines()
    if launcher == "torchrun":  # the launcher's requirement was part of the choice
        assert node_contiguous(job.placement) is None


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_plan_is_priced_between_the_bound_and_slurms_default(name):
    job = _prepared(name)
    plan, naive, bound = job.costs.plan, job.costs.naive, job.costs.bound
    assert plan.step_time_s == api.price(job.cluster, job.placement, job.request).step_time_s
    assert bound.step_time_s <= plan.step_time_s * (1 + 1e-9)
    if naive is not None:
        assert plan.step_time_s <= naive.step_time_s * (1 + 1e-9)
    assert job.placement.hosts == api.plan_job(job.cluster, job.state, job.request).hosts


def test_not_now_and_never_are_told_apart():
    from slurmtopo.inventory.model import ClusterState, NodeState

    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    busy = ClusterState(nodes={n: NodeState(n, "allocated", exclusive=True)
                               for n in ("gpu01", "gpu02", "gpu03")})
    fits_later = JobRequest(layout=Layout(tp=8, dp=2))
    with pytest.raises(PlacementError, match="^not now"):
        api.prepare(cluster, busy, fits_later, COMMAND)
    queued = api.prepare(cluster, busy, fits_later, COMMAND, queue=True)
    assert len(queued.placement.hosts) == 2 and queued.script_text
    with pytest.raises(PlacementError, match="^never"):
        api.prepare(cluster, busy, JobRequest(layout=Layout(tp=8, dp=5)), COMMAND, queue=True)


def test_live_state_prepare_submit_keeps_what_slurm_runs(tmp_path, monkeypatch):
    """docs/api.md's second example with the in-memory Slurm: the job is
    planned around the busy node Slurm reports, the script Slurm got is the
    prepared one, and it is kept in the job's run directory."""
    monkeypatch.delenv("SLURMTOPO_RUN_DIR", raising=False)
    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    backend = FakeSlurm(nodes=4, prefix="gpu0", partition="gpu", auto_schedule=False)
    backend.occupy("gpu01", range(8), exclusive=True)
    live = api.live_state(cluster, backend, partition="gpu")
    job = api.prepare(cluster, live.state, JobRequest(layout=Layout(tp=8, dp=2)), COMMAND,
                      api.ScriptOptions(partition="gpu"), queue=True,
                      partition_members=live.partition_members, features=live.features)
    assert "gpu01" not in job.placement.hosts
    done = api.submit(job, backend, submit_dir=str(tmp_path))
    assert backend.jobs_[done.job_id].script == job.script_text
    assert done.run_dir == os.path.join(str(tmp_path), ".slurmtopo", "runs", str(done.job_id))
    assert Path(done.script_path).read_text() == job.script_text


def test_a_held_torchrun_job_reaches_the_daemon_with_its_launcher():
    """Submitted held through the api, the job's comment carries its request
    and launcher, and the daemon plans it as torchrun can start it."""
    from slurmtopo.inventory.model import ClusterState, NodeState

    cluster = api.load_cluster(str(EXAMPLES / "devcluster.yaml"))
    busy = ClusterState(nodes={n: NodeState(n, "allocated", exclusive=True)
                               for n in ("node1", "node2")})
    job = api.prepare(cluster, busy, JobRequest(layout=Layout(tp=2, pp=2, dp=4)), COMMAND,
                      api.ScriptOptions(launch=Launch(launcher="torchrun")), queue=True,
                      for_daemon=True)
    backend = FakeSlurm(auto_schedule=False)
    done = api.submit(job, backend, held=True)
    spec = parse_comment(backend.jobs_[done.job_id].comment)
    assert spec.request == job.request and spec.launcher == "torchrun"
    q = QueuedJob(job_id=done.job_id, spec=spec, submit_time=0.0)
    d = decide([q], cluster, ClusterView(busy), 0.0)[-1]
    assert d.action == RELEASE, d
    assert d.hosts == ("node3", "node4") and node_contiguous(d.placement) is None
