"""``slurmtopo audit`` and ``slurmtopo state --jobs`` on the live cluster,
through the CLI backend and the Slurm command stand-ins (tests/fakes)."""
from __future__ import annotations

import json

import pytest

from tests.slurm.test_commands import INV, onpath, run  # noqa: F401 (onpath: a fixture)


@pytest.fixture
def live(onpath):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("squeue --json", file="squeue_untyped.json")
    return onpath


def test_live_audit(live, capsys):
    # job 2 holds GPUs 0-1 of node2 (leaf1) and node3 (leaf2); without it
    # node1 and node2, both under leaf1, have two free GPUs each
    code, out, err = run(["audit", "--inventory", INV, "--json", "--backend", "cli"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    (j,) = doc["jobs"]
    assert (j["job"], j["nodes"], j["gpus"]) == ("2", "node[2-3]", 4)
    assert (j["spans"]["leaves"], j["fewest"]["leaves"]) == (2, 1)
    assert doc["not_audited"] == {"on one node": 2}
    assert doc["source"] == "slurm (cli backend)"
    assert doc["stranded"]["free"] == 32 - 3 - 2 - 2 - 8


def test_state_jobs_round_trip_through_the_audit(live, capsys, tmp_path):
    code, out, err = run(["state", "--inventory", INV, "--jobs", "--backend", "cli"], capsys)
    assert code == 0, err
    path = tmp_path / "snap.yaml"
    path.write_text(out)
    live = json.loads(run(["audit", "--inventory", INV, "--json", "--backend", "cli"],
                          capsys)[1])
    code, again, err = run(["audit", "--inventory", INV, "--state", str(path), "--json"], capsys)
    assert code == 0, err
    snap = json.loads(again)
    assert snap["jobs"] == live["jobs"]
    assert snap["stranded"] == live["stranded"]


def test_sacct_period_through_the_backend(onpath, capsys):
    from pathlib import Path

    record = Path(__file__).resolve().parents[2] / "etc" / "examples" / "traces" / \
        "devcluster-sacct.txt"
    onpath.on("sacct -a -X -P -S 2025-03-03 -E 2025-03-04 -o JobID,Submit,Start,End,AllocTRES,"
              "NodeList,NNodes,Timelimit,State", stdout=record.read_text())
    code, out, err = run(["audit", "--inventory", INV, "--backend", "cli", "--sacct",
                          "--starttime", "2025-03-03", "--endtime", "2025-03-04", "--json"],
                         capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == "sacct -S 2025-03-03 -E 2025-03-04"
    assert [j["job"] for j in doc["jobs"]] == ["202", "203"]
    code, out, err = run(["audit", "--inventory", INV, "--backend", "cli", "--sacct",
                          "--starttime", "-x"], capsys)
    assert code != 0 and "bad start time" in err and len(err.strip().splitlines()) == 1
    onpath.on("sacct", rc=1, stderr="sacct: error: Slurm accounting storage is disabled\n")
    code, out, err = run(["audit", "--inventory", INV, "--backend", "cli", "--sacct",
                          "--starttime", "2025-03-03"], capsys)
    assert code != 0 and err == "slurmtopo: error: sacct: error: Slurm accounting storage " \
                                "is disabled\n"


# --------------------------------------------------------------------------
# audit --contracts and check: Slurm's words through the CLI backend

JOB2 = ("JobId=2 JobName=train\n   UserId=root(0) GroupId=root(0) MCS_label=N/A\n"
        "   JobState=RUNNING Reason=None Dependency=(null)\n   NodeList=node[2-3]\n"
        "   BatchHost=node2\n   Network=(null) Switches=1@00:05:00\n")
#: what the probe prints of job 2's processes: torchrun numbered node3 first
PROBE2 = ("SLURMTOPO_TASKENV\tnode2\t301\tRANK=8\tGROUP_RANK=1\tCUDA_VISIBLE_DEVICES=0,1\t"
          "SLURM_STEP_GPUS=0,1\tLOCAL_RANK=0\tSLURMD_NODENAME=node2\n"
          "SLURMTOPO_TASKENV\tnode3\t302\tRANK=0\tGROUP_RANK=0\tCUDA_VISIBLE_DEVICES=0,7\t"
          "SLURM_STEP_GPUS=0,1\tLOCAL_RANK=0\tSLURMD_NODENAME=node3\n")


@pytest.fixture
def contracts(live):
    live.on("scontrol show topology", file="scontrol_show_topology.txt")
    live.on("scontrol show job -d 2", stdout=JOB2)
    live.on("srun --overlap --jobid=2", stdout=PROBE2)
    return live


def test_audit_contracts_table_json_and_metrics(contracts, capsys, tmp_path):
    prom = tmp_path / "contracts.prom"
    code, out, err = run(["audit", "--contracts", "--inventory", INV, "--backend", "cli",
                          "--metrics-textfile", str(prom)], capsys)
    assert code == 0, err
    assert "1 running multi-node job(s) checked, 2 violation(s): switches 1, task-env 1" in out
    assert "asked --switches=1 but spans 2 leaf switches" in out
    metrics = prom.read_text()
    assert 'slurmtopo_contract_violations{kind="switches"} 1.0' in metrics
    assert 'slurmtopo_contract_violations{kind="segment"} 0.0' in metrics
    assert oct(prom.stat().st_mode & 0o777) == "0o644"
    # the probe ran inside job 2, one task on each of its nodes, reading processes
    probe = next(c["argv"] for c in contracts.calls() if c["argv"][0] == "srun")
    assert probe[1:8] == ["--overlap", "--jobid=2", "--nodes=2", "--ntasks=2",
                          "--ntasks-per-node=1", "--nodelist=node[2-3]", "--cpu-bind=none"]
    assert probe[-2:] == ["slurmtopo-probe", "2"]
    code, out, err = run(["audit", "--contracts", "--inventory", INV, "--backend", "cli",
                          "--json"], capsys)
    doc = json.loads(out)
    assert doc["by_kind"]["switches"] == 1 and doc["jobs"] == ["2"]
    tasks = [v["message"] for v in doc["violations"] if v["kind"] == "task-env"]
    assert tasks == ["rank 0 on node3: CUDA_VISIBLE_DEVICES=0,7 (SLURM_STEP_GPUS=0,1) names "
                     "GPUs the step was not given"]


def test_audit_contracts_without_the_probe(contracts, capsys):
    code, out, err = run(["audit", "--contracts", "--inventory", INV, "--backend", "cli",
                          "--no-task-env", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["by_kind"]["task-env"] == 0
    assert "task-env: not probed (--no-task-env)" in doc["unchecked"]["2"]
    assert not any(c["argv"][0] == "srun" for c in contracts.calls())


def test_contract_options_are_refused_alone(onpath, capsys):
    code, out, err = run(["audit", "--inventory", INV, "--no-task-env"], capsys)
    assert code == 2 and "--no-task-env goes with --contracts" in err
    code, out, err = run(["audit", "--contracts", "--inventory", INV, "--state", "x.yaml"],
                         capsys)
    assert code == 2 and "drop --state" in err


def test_check_inside_a_job(contracts, capsys, monkeypatch, tmp_path):
    from slurmtopo.binding.replan import fill_placement
    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.job.groups import Layout
    from slurmtopo.plan.rankmap import rankmap_json

    inv = load_inventory(INV)
    p = fill_placement(inv, [("node2", [0, 1]), ("node3", [0, 1])], Layout(dp=4))
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / "rankmap.json").write_text(rankmap_json(p, Layout(dp=4)))
    (run_dir / "rankmap.json").chmod(0o600)
    lines = "".join(
        f"SLURMTOPO_TASKENV\t{s.host}\t{50 + s.rank}\tRANK={s.rank}\tLOCAL_RANK={s.local_rank}"
        f"\tNODE_RANK={p.node_ranks()[s.host]}\tCUDA_VISIBLE_DEVICES="
        f"{'1,0' if s.rank == 3 else '0,1'}\tSLURM_STEP_GPUS=0,1\tSLURMTOPO_GPU={s.gpu}"
        f"\tSLURMD_NODENAME={s.host}\n" for s in p.slots)
    tasks = tmp_path / "tasks.txt"
    tasks.write_text(lines)
    monkeypatch.setenv("SLURM_JOB_ID", "2")
    code, out, err = run(["check", "--run-dir", str(run_dir), "--tasks", str(tasks),
                          "--inventory", INV, "--backend", "cli"], capsys)
    assert code == 0, err                        # reported; --strict makes it fail
    assert ("slurmtopo check: job 2: task-env: rank 3 on node3: CUDA_VISIBLE_DEVICES=1,0 "
            "(SLURM_STEP_GPUS=0,1) does not give device 1 (its LOCAL_RANK) its planned GPU 1"
            in err)
    assert "job 2: 2 contract violation(s): switches 1, task-env 1" in err
    code, out, err = run(["check", "--run-dir", str(run_dir), "--tasks", str(tasks),
                          "--inventory", INV, "--backend", "cli", "--strict"], capsys)
    assert code == 3
    # no srun of its own: the tasks came from the job's launch line
    assert not any(c["argv"][0] == "srun" for c in contracts.calls())
    monkeypatch.delenv("SLURM_JOB_ID")
    code, out, err = run(["check", "--run-dir", str(run_dir)], capsys)
    assert code == 2 and "no job: run inside a job" in err
