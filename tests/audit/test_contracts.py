"""Contracts (slurmtopo/audit/contracts.py): every rule on a job that keeps
it and on one that breaks it, the probes run for real under /bin/sh, and
the report's JSON and Prometheus text."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmtopo.audit.contracts import (KINDS, ContractReport, JobSeen, SlurmView, Violation,
                                       check_job, check_jobs, metrics_text, report_dict)
from slurmtopo.binding.replan import fill_placement
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.job.groups import Layout
from slurmtopo.plan.taskprobe import PROBE_PROCESSES, PROBE_SELF, TaskSeen, parse_task_lines
from slurmtopo.slurm.parse import parse_job_asks, parse_scontrol_blocks

ROOT = Path(__file__).resolve().parents[2]
NVL = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-nvl-inventory.yaml"
DEV = ROOT / "etc" / "examples" / "devcluster.yaml"
RACKS = {"rack1": ("node1", "node2"), "rack2": ("node3", "node4")}


@pytest.fixture(scope="module")
def nvl():
    return load_inventory(NVL)


@pytest.fixture(scope="module")
def dev():
    return load_inventory(DEV)


def _kinds(inv, view, job):
    found, _ = check_job(inv, view, job)
    return sorted({v.kind for v in found}), found


def _task(host, **env):
    return TaskSeen(host=host, pid=100 + int(env.get("RANK", 0)), env={k: str(v) for k, v in
                                                                     env.items()})


def _ranked(placement, cvd=None):
    """What the tasks of ``placement`` get when everything is right (or
    with ``cvd`` for every task)."""
    out = []
    for s in placement.slots:
        gpus = placement.gpus_on(s.host)
        out.append(_task(s.host, RANK=s.rank, LOCAL_RANK=s.local_rank,
                         NODE_RANK=placement.node_ranks()[s.host],
                         CUDA_VISIBLE_DEVICES=cvd or ",".join(map(str, gpus)),
                         SLURM_STEP_GPUS="0,1,2,3", SLURMTOPO_GPU=s.gpu,
                         SLURMD_NODENAME=s.host))
    return tuple(out)


def test_a_healthy_segment_job_keeps_every_contract(nvl):
    p = fill_placement(nvl, [("node3", range(4)), ("node4", range(4))], Layout(tp=4, dp=2))
    job = JobSeen("9", ("node3", "node4"), segment=2, tasks=_ranked(p), planned=p,
                  launch_probe=True)
    found, skipped = check_job(nvl, SlurmView(blocks=RACKS), job)
    assert found == [] and skipped == []


def test_a_segment_across_blocks(nvl):
    # SchedMD/slurm#225: block scheduling off, --segment=2 given as 1+1
    kinds, found = _kinds(nvl, SlurmView(blocks=RACKS), JobSeen("4", ("node2", "node3"),
                                                                  segment=2))
    assert kinds == ["segment"]
    assert found[0].message == ("asked --segment=2 but got 1+1 node(s) per block "
                                "(rack1: node2, rack2: node3)")
    # the same nodes without a segment asked: nothing
    assert _kinds(nvl, SlurmView(blocks=RACKS), JobSeen("4", ("node2", "node3")))[0] == []


def test_a_node_updated_out_of_its_block(nvl):
    view = SlurmView(blocks={"rack1": ("node1",), "rack2": ("node2", "node3", "node4")})
    kinds, found = _kinds(nvl, view, JobSeen("8", ("node2", "node3"), segment=2))
    assert kinds == ["block-whole", "node-out-of-block", "segment"]
    text = [v.message for v in found]
    assert "node2 belongs to block rack1 but Slurm has it in block rack2" in text
    assert any(m.startswith("block rack1 is not whole in Slurm: it lacks node2") for m in text)
    # a node dropped from every block (a powered-down cloud node)
    gone = SlurmView(blocks={"rack1": ("node1",), "rack2": ("node3", "node4")})
    kinds, found = _kinds(nvl, gone, JobSeen("8", ("node1", "node2")))
    assert kinds == ["block-whole", "node-out-of-block"]
    assert "node2 belongs to block rack1 but is in no block of `scontrol show topology`" in \
        [v.message for v in found]


def test_switches_beyond_the_limit(dev):
    kinds, found = _kinds(dev, SlurmView(), JobSeen("5", ("node1", "node3"), switches=1))
    assert kinds == ["switches"]
    assert found[0].message == ("asked --switches=1 but spans 2 leaf switches (leaf1: node1, "
                                "leaf2: node3)")
    assert _kinds(dev, SlurmView(), JobSeen("5", ("node1", "node2"), switches=1))[0] == []
    assert _kinds(dev, SlurmView(), JobSeen("5", ("node1", "node3"), switches=2))[0] == []


def test_rank_order_of_a_job_slurmtopo_did_not_plan(dev):
    # torchrun numbering nodes alphabetically would interleave leaves
    def job(order):
        return JobSeen("6", tuple(order), tasks=tuple(
            _task(h, RANK=i * 8, GROUP_RANK=i) for i, h in enumerate(order)))

    assert _kinds(dev, SlurmView(), job(["node1", "node2", "node3", "node4"]))[0] == []
    kinds, found = _kinds(dev, SlurmView(), job(["node1", "node3", "node2", "node4"]))
    assert kinds == ["rank-order"]
    assert "leaf switch leaf1 is split in 2 runs" in found[0].message


def test_rank_order_against_slurmtopos_plan(nvl):
    p = fill_placement(nvl, [("node3", range(4)), ("node4", range(4))], Layout(tp=4, dp=2))
    tasks = tuple(TaskSeen(t.host, t.pid, dict(t.env, NODE_RANK="1" if t.host == "node3" else
                                               "0")) for t in _ranked(p))
    kinds, found = _kinds(nvl, SlurmView(blocks=RACKS),
                          JobSeen("9", ("node3", "node4"), tasks=tasks, planned=p,
                                  launch_probe=True))
    assert kinds == ["rank-order"]
    assert found[0].message == "nodes are numbered node4, node3, slurmtopo planned node3, node4"


def test_a_wrong_cuda_visible_devices(nvl):
    p = fill_placement(nvl, [("node3", range(4)), ("node4", range(4))], Layout(tp=4, dp=2))
    job = JobSeen("10", ("node3", "node4"), tasks=_ranked(p, cvd="0"), planned=p,
                  launch_probe=True)
    kinds, found = _kinds(nvl, SlurmView(blocks=RACKS), job)
    assert kinds == ["task-env"]
    # device 0 still reaches GPU 0 on both nodes; the six others do not
    assert len(found) == 6
    assert found[0].message == ("rank 1 on node3: CUDA_VISIBLE_DEVICES=0 (SLURM_STEP_GPUS=0,1,2,3)"
                                " does not give device 1 (its LOCAL_RANK) its planned GPU 1")
    # under a device cgroup the numbers are positions among the step's GPUs
    step = tuple(TaskSeen(t.host, t.pid, dict(t.env, SLURM_STEP_GPUS="4,5,6,7",
                                              SLURMTOPO_GPU=str(4 + int(t.env["LOCAL_RANK"]))))
                 for t in _ranked(p))
    ok = JobSeen("10", ("node3", "node4"), tasks=step)
    assert _kinds(nvl, SlurmView(blocks=RACKS), ok)[0] == []


def test_tasks_against_the_plan(nvl):
    p = fill_placement(nvl, [("node3", range(4)), ("node4", range(4))], Layout(tp=4, dp=2))
    tasks = list(_ranked(p))
    tasks[5] = TaskSeen("node3", 99, dict(tasks[5].env, SLURMD_NODENAME="node3"))
    found, _ = check_job(nvl, SlurmView(blocks=RACKS), JobSeen(
        "11", ("node3", "node4"), tasks=tuple(tasks[:7]), planned=p, launch_probe=True))
    messages = [v.message for v in found if v.kind == "task-env"]
    assert "rank 5 on node3: planned on node4" in messages
    assert "1 planned rank(s) got no task (first: 7)" in messages


def test_a_job_of_one_torchrun_task_per_node(nvl):
    p = fill_placement(nvl, [("node3", range(4)), ("node4", range(4))], Layout(tp=4, dp=2))
    good = tuple(_task(h, NODE_RANK=i, CUDA_VISIBLE_DEVICES="0,1,2,3", SLURM_STEP_GPUS="0,1,2,3")
                 for i, h in enumerate(("node3", "node4")))
    job = JobSeen("12", ("node3", "node4"), tasks=good, planned=p, launch_probe=True)
    assert check_job(nvl, SlurmView(blocks=RACKS), job)[0] == []
    bad = (good[0], _task("node4", NODE_RANK=1, CUDA_VISIBLE_DEVICES="3,2,1,0",
                          SLURM_STEP_GPUS="0,1,2,3"))
    found, _ = check_job(nvl, SlurmView(blocks=RACKS), JobSeen(
        "12", ("node3", "node4"), tasks=bad, planned=p, launch_probe=True))
    assert [v.kind for v in found] == ["task-env"]


def test_what_was_not_checked_is_said(nvl):
    _, skipped = check_job(nvl, SlurmView(), JobSeen("3", ("node1", "node3"), segment=2,
                                                       probe_note="probe step failed: x"))
    assert "rank-order: probe step failed: x" in skipped
    assert "block-whole: Slurm shows no blocks (scontrol show topology)" in skipped


# --------------------------------------------------------------------------
# the probes, for real


def test_probe_self_prints_the_tasks_own_variables():
    env = {"PATH": os.environ["PATH"], "RANK": "3", "LOCAL_RANK": "1", "SLURMD_NODENAME": "n9",
           "CUDA_VISIBLE_DEVICES": "2,3", "SLURMTOPO_GPU": "3", "SECRET": "x"}
    out = subprocess.run(["/bin/sh", "-c", PROBE_SELF], env=env, capture_output=True,
                         text=True, check=True).stdout
    (task,) = parse_task_lines(out)
    assert task.host == "n9" and task.env == {
        "RANK": "3", "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "2,3", "SLURMD_NODENAME": "n9",
        "SLURMTOPO_GPU": "3"}                                     # nothing else leaves


def test_probe_processes_reads_the_jobs_ranked_processes():
    env = dict(os.environ, SLURM_JOB_ID="424242", RANK="5", CUDA_VISIBLE_DEVICES="4,5",
               SLURMD_NODENAME="nodeX", SLURM_STEP_ID="0")
    other = dict(os.environ, SLURM_JOB_ID="4242420", RANK="1")   # another job
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=e)
             for e in (env, other)]
    try:
        time.sleep(0.3)
        out = subprocess.run(["/bin/sh", "-c", PROBE_PROCESSES, "probe", "424242"],
                             env=dict(os.environ, SLURM_STEP_ID="1"), capture_output=True,
                             text=True).stdout
    finally:
        for p in procs:
            p.kill()
            p.wait()
    tasks = parse_task_lines(out)
    assert [(t.host, t.pid, t.env["RANK"], t.env["CUDA_VISIBLE_DEVICES"]) for t in tasks] == \
        [("nodeX", procs[0].pid, "5", "4,5")]


def test_task_lines_are_bounded_and_deduplicated():
    line = "SLURMTOPO_TASKENV\tn1\t{pid}\tRANK=0\tBOGUS=1\tCUDA_VISIBLE_DEVICES=0\n"
    text = line.format(pid=20) + line.format(pid=10) + "garbage\tline\n" + "x" * 100
    (task,) = parse_task_lines(text)
    assert task.pid == 10 and "BOGUS" not in task.env


# --------------------------------------------------------------------------
# Slurm's words, and the report


def test_parse_scontrol_blocks_and_job_asks():
    assert parse_scontrol_blocks(
        "BlockName=rack1 BlockIndex=0 Nodes=node1 BlockSize=2\n"
        "BlockName=rack2 BlockIndex=1 Nodes=node[2-4] BlockSize=2\n"
        "BlockName=b3 BlockIndex=2 BlockSize=2\n") == {
        "rack1": ("node1",), "rack2": ("node2", "node3", "node4"), "b3": ()}
    asks = parse_job_asks("JobId=8 JobName=wrap\n   UserId=root(0) GroupId=root(0)\n"
                          "   JobState=RUNNING Reason=None\n   NodeList=node[2-3]\n"
                          "   SegmentSize=2\n")
    assert (asks.job_id, asks.nodes, asks.segment, asks.switches, asks.user) == \
        ("8", ("node2", "node3"), 2, None, "root")
    tree = parse_job_asks("JobId=5 JobName=x\n   NodeList=node[1,3]\n"
                          "   Network=(null) Switches=1@00:05:00\n")
    assert (tree.switches, tree.switch_wait) == (1, "00:05:00")


def test_report_json_and_metrics(nvl):
    report = check_jobs(nvl, SlurmView(blocks=RACKS), [
        JobSeen("4", ("node2", "node3"), segment=2), JobSeen("5", ("node3", "node4"))])
    assert report.by_kind()["segment"] == 1 and set(report.by_kind()) == set(KINDS)
    doc = report_dict(report, "test")
    assert doc["jobs"] == ["4", "5"] and doc["violations"][0]["kind"] == "segment"
    text = metrics_text(report, 1700000000.0)
    assert 'slurmtopo_contract_violations{kind="segment"} 1.0' in text
    assert 'slurmtopo_contract_violations{kind="task-env"} 0.0' in text
    assert "slurmtopo_contract_jobs 2.0" in text
    assert "slurmtopo_contract_jobs_violating 1.0" in text


def test_shown_violations_are_bounded():
    many = ContractReport(("1",), tuple(Violation("1", "task-env", f"rank {r}")
                                        for r in range(20)))
    shown = many.shown()
    assert len(shown) == 9 and shown[-1].message == "... and 12 more"
    assert many.by_kind()["task-env"] == 20
