"""Spares and start-time guardrails on a real Slurm (every release tested).

The cluster: four nodes of 8 GPUs under one leaf switch
(tests/fixtures/slurm/devcluster-one-leaf.yaml). What is shown:

* a job of two nodes with ``--spares 1`` holds a third, idle; when one of
  its nodes is lost (``scontrol update State=DOWN`` and its step's
  processes killed: on the dev cluster every slurmd shares the host, so
  stopping a slurmd alone leaves its slurmstepd running) the step fails,
  the script re-plans that node's ranks onto the spare and starts a new
  step, which resumes from the job's checkpoint and finishes; every rank
  of the new step is checked;
* the same loss of the node that runs the script (the batch host) is not
  replaced: the job ends, saying why where Slurm lets the script live
  (25.11.6 and later);
* a requeued job without spares re-plans at start as always, and its log
  says so;
* the pre-launch hazards against the live state: an uneven plan is a
  warning, refused under ``--hazard uneven-ranks=error`` with nothing
  submitted.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import (Cluster, devcluster_mod, it_config, it_version,
                                       run_slurmtopo)
from tests.integration.ranks import Run, check_ranks

ROOT = Path(__file__).resolve().parents[2]
ONE_LEAF = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-one-leaf.yaml"

#: a training program: every attempt writes what its rank got (as ranks.DUMP
#: does), rank 0 of the first attempt a checkpoint; the first attempt then
#: trains "forever", a restart resumes and ends
TRAIN = ("import json, os, sys, time; out = sys.argv[1]; r = os.environ['RANK']; "
         "ck = os.path.join(out, 'ckpt.json'); "
         "first = os.environ.get('SLURMTOPO_RESTART', '0') == '0' "
         "and os.environ.get('SLURM_RESTART_COUNT', '0') == '0'; "
         # the checkpoint first, whole (renamed into place), then what the rank got
         "r == '0' and first and (json.dump({'step': 5}, open(ck + '.tmp', 'w')) "
         "or os.rename(ck + '.tmp', ck)); "
         "resumed = json.load(open(ck))['step'] if os.path.exists(ck) else 0; "
         "json.dump({'env': dict(os.environ), 'cpus': sorted(os.sched_getaffinity(0)), "
         "'argv': sys.argv[1:], 'resumed': resumed}, "
         "open(os.path.join(out, 'rank-%s.json' % r), 'w')); "
         "first and time.sleep(600)")


@pytest.fixture(scope="module")
def leaf(tmp_path_factory):
    d = tmp_path_factory.mktemp("one-leaf")
    env_root = str(ROOT)
    for what in ("gres", "topology"):
        run_slurmtopo([what, "generate", "--reports", ONE_LEAF, "--output", d / f"{what}.conf"],
                      env={"PYTHONPATH": env_root, "PATH": "/usr/bin:/bin"})
    cfg = it_config(dir=str(d / "cluster"), nodes=4, gpus=8, leaves=1,
                    gres_conf=str(d / "gres.conf"), topology_conf=str(d / "topology.conf"),
                    port=devcluster_mod.free_port_base(4, start=59817))
    dc = devcluster_mod.DevCluster.up(cfg)
    try:
        yield Cluster(dc)
    finally:
        dc.down()


def _ranks_started(run, count, timeout=60):
    deadline = time.monotonic() + timeout
    while len(list(run.out.glob("rank-*.json"))) < count:
        assert time.monotonic() < deadline, run.output()
        time.sleep(0.2)


#: step ids from here up are Slurm's special steps (batch 0xFFFFFFFB, extern
#: 0xFFFFFFFC, ...: slurm.h); the batch script shows its step as "batch"
#: (22.05) or "-5" (26.05) in SLURM_STEP_ID
SPECIAL_STEPS = 0xFFFFFFF0


def _step_pids(job_id: int, node: str):
    """The processes of the job's numbered steps (srun's tasks, not the
    batch script nor srun itself) on ``node`` (read from /proc: every
    dev-cluster node runs on this host)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = proc.joinpath("environ").read_bytes().split(b"\0")
        except OSError:
            continue
        step = next((e.split(b"=", 1)[1] for e in env if e.startswith(b"SLURM_STEP_ID=")), b"")
        if (f"SLURM_JOB_ID={job_id}".encode() in env
                and f"SLURMD_NODENAME={node}".encode() in env
                and step.isdigit() and int(step) < SPECIAL_STEPS):
            pids.append(int(proc.name))
    return pids


def _end(pids) -> None:
    """SIGKILL the processes ``pids`` (Slurm may have ended them first)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_job_with_a_spare_survives_a_lost_node(leaf, tmp_path):
    run = Run(leaf, tmp_path, ["--tp", "4", "--dp", "2", "--gpus-per-node", "4",
                               "--spares", "1"], inv=ONE_LEAF,
              command=[sys.executable, "-c", TRAIN])
    assert "#SBATCH --no-kill\n" in run.script and "#SBATCH --nodes=3\n" in run.script
    leaf.wait_state(run.job_id, {"RUNNING"})
    _ranks_started(run, 8)
    first, _ = run.bound()
    planned = list(first.hosts)
    spare = sorted(set(devcluster_mod.expand(leaf.job(run.job_id)["NodeList"])) - set(planned))
    assert len(planned) == 2 and len(spare) == 1
    lost = planned[1]                       # not the batch host: it runs the script
    for f in run.out.glob("rank-*.json"):
        f.unlink()
    # the step's processes there, found before the node goes down: Slurm may
    # end them itself as soon as it is DOWN (seen on 25.11 under load)
    pids = _step_pids(run.job_id, lost)
    assert pids
    leaf.run(["scontrol", "update", f"NodeName={lost}", "State=DOWN", "Reason=lost-in-test"])
    _end(pids)
    try:
        run.wait(timeout=120)
    finally:
        leaf.run(["scontrol", "update", f"NodeName={lost}", "State=RESUME"], check=False)
    log = run.output()
    assert f"restart 1 of 1: the step failed (exit " in log, log
    # down, or already taken out of the job by Slurm (--no-kill): either way lost
    assert f"lost: {lost} (" in log and f"-> {spare[0]} (same leaf switch leaf1)" in log
    assert "every group is still inside its domain" in log and "0 restart(s) left" in log
    placement, doc = check_ranks(run)        # every rank of the new step, as bound
    assert set(placement.hosts) == {planned[0], spare[0]}
    ranks = run.ranks()
    assert all(r["env"]["SLURMTOPO_RESTART"] == "1" and r["resumed"] == 5
               for r in ranks.values())
    # the groups kept their shape: the lost node's ranks moved together
    assert [s.rank for s in placement.ranks_on(spare[0])] == \
        [s.rank for s in first.ranks_on(lost)]


def test_the_batch_hosts_loss_ends_the_job_and_says_why(leaf, tmp_path):
    """The node that runs the job's script is lost the same way: no spare
    can run the script, so the job is not restarted. From Slurm 25.11.6 a
    --no-kill job's batch step outlives its node's failure (Slurm's
    CHANGELOG/slurm-25.11.md), the script goes on, and the job ends with
    the step's exit code and one line saying why; before, slurmctld kills
    the batch step with the node ("Killing ... StepId=batch due to failed
    node"), and nothing of the script is left to say anything."""
    run = Run(leaf, tmp_path, ["--tp", "4", "--dp", "2", "--gpus-per-node", "4",
                               "--spares", "1"], inv=ONE_LEAF,
              command=[sys.executable, "-c", TRAIN])
    leaf.wait_state(run.job_id, {"RUNNING"})
    _ranks_started(run, 8)
    batch = leaf.job(run.job_id)["BatchHost"]
    first, _ = run.bound()
    assert batch in first.hosts
    pids = _step_pids(run.job_id, batch)
    assert pids
    leaf.run(["scontrol", "update", f"NodeName={batch}", "State=DOWN", "Reason=lost-in-test"])
    _end(pids)
    try:
        state = leaf.wait_job(run.job_id, timeout=120)
    finally:
        leaf.run(["scontrol", "update", f"NodeName={batch}", "State=RESUME"], check=False)
    log = run.output()
    assert state == "FAILED", (state, log)
    if it_version() >= (25, 11, 6):
        assert (f"slurmtopo: error: restart 1 of 1: the step failed (exit " in log
                and f") and the job's batch host {batch} was lost (" in log
                and "the batch host runs this job's script, so a spare cannot replace it; the "
                    "job ends with the step's exit code" in log), log
    else:
        assert leaf.job(run.job_id)["ExitCode"] == "0:9", log     # the script, killed
        assert "restart 1 of 1" not in log, log
    assert "every group is still inside its domain" not in log
    assert not list(run.out.glob("rank-*.json")) or all(
        r["env"].get("SLURMTOPO_RESTART") == "0" for r in run.ranks().values())


def test_a_requeued_job_replans_at_start_and_says_so(leaf, tmp_path):
    run = Run(leaf, tmp_path, ["--tp", "8", "--requeue"], inv=ONE_LEAF,
              command=[sys.executable, "-c", TRAIN],
              extra=["--sbatch=--open-mode=append"])
    leaf.wait_state(run.job_id, {"RUNNING"})
    _ranks_started(run, 8)
    leaf.run(["scontrol", "requeue", str(run.job_id)])
    leaf.wait_state(run.job_id, {"PENDING"})
    # Slurm revokes the first run's credential at the requeue, to the second:
    # a start in that same second is refused ("Job credential revoked", the
    # job FAILED); Slurm's own requeue delay avoids it, StartTime=now does not
    time.sleep(2)
    leaf.run(["scontrol", "update", f"JobId={run.job_id}", "StartTime=now"])
    run.wait(timeout=120)
    log = run.output()
    assert "the job was requeued (SLURM_RESTART_COUNT=1): planned again at start" in log, log
    check_ranks(run)
    assert all(r["env"]["SLURM_RESTART_COUNT"] == "1" for r in run.ranks().values())


def test_hazards_against_the_live_state(leaf, tmp_path):
    blocker = leaf.sbatch("-w", "node1", "--gpus=4", "-t", "5", wrap="sleep 300")
    leaf.wait_state(blocker, {"RUNNING"})
    env = dict(leaf.env, PYTHONPATH=str(ROOT))
    # 12 ranks: node1 has 4 free GPUs, the others 8: the plan puts 4+8
    args = ["sbatch", "--inventory", ONE_LEAF, "--world", "12", "--nodelist", "node[1-2]",
            "--python", sys.executable]
    p = run_slurmtopo(args + ["--dry-run", "--", "true"], cwd=tmp_path, env=env)
    assert "slurmtopo: hazard uneven-ranks (warning): ranks per node differ" in p.stderr
    p = run_slurmtopo(args + ["--hazard", "uneven-ranks=error", "--", "true"], cwd=tmp_path,
                      env=env, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("slurmtopo: error: refused: hazard uneven-ranks (error)")
    queued = leaf.run(["squeue", "-h", "-o", "%i"]).stdout.split()
    assert queued == [str(blocker)]          # nothing submitted
