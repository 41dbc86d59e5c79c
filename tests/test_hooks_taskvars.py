"""TaskProlog's side of the hooks: each task's export lines from the
binding (slurmtopo/hooks/taskvars.py, pure) and the once-per-job binding
under the run directory's lock (slurmtopo/hooks/taskprolog.py)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmtopo.hooks.taskvars import (HostRanks, TaskBinding, is_batch_step, local_visible,
                                      step_kind, task_lines, tasks_per_node)

ROOT = Path(__file__).resolve().parents[1]
INV = str(ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml")


def binding(per_node=4):
    hosts = {"gpu02": HostRanks(node_rank=0, ranks=(0, 1, 2, 3), gpus=(4, 5, 6, 7),
                                visible="4,5,6,7", nics=("mlx5_4",) * 4, cpus=("56-111",) * 4,
                                env=(("NCCL_MNNVL_CLIQUE_ID", "7"),)),
             "gpu01": HostRanks(node_rank=1, ranks=(4, 5, 6, 7), gpus=(0, 1, 2, 3),
                                visible="0,1,2,3", nics=("mlx5_0",) * 4, cpus=("0-55",) * 4)}
    return TaskBinding(job_id="42", world=8, hosts=hosts,
                       job_env={"MASTER_ADDR": "gpu02", "MASTER_PORT": "20042",
                                "NCCL_IB_HCA": "=mlx5_0:1"},
                       run_dir="/r", per_node=per_node)


def task_env(host, local, tasks="4(x2)", nodes="gpu[01-02]", **more):
    return dict({"SLURMD_NODENAME": host, "SLURM_LOCALID": str(local),
                 "SLURM_STEP_NODELIST": nodes, "SLURM_STEP_TASKS_PER_NODE": tasks,
                 "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_ID": "0"}, **more)


def exports(lines):
    return dict(l[len("export "):].split("=", 1) for l in lines if l.startswith("export "))


def test_tasks_per_node():
    assert tasks_per_node(task_env("x", 0)) == {"gpu01": 4, "gpu02": 4}
    assert tasks_per_node(task_env("x", 0, tasks="3,1", nodes="a,b")) == {"a": 3, "b": 1}
    assert tasks_per_node(task_env("x", 0, tasks="4(x3)")) is None     # lengths differ
    assert tasks_per_node(task_env("x", 0, tasks="four")) is None
    assert tasks_per_node({}) is None


def test_a_rank_named_after_its_host_and_local_id():
    """Slurm's block order put local task 1 of gpu02 at SLURM_PROCID 5; the
    plan's rank with local rank 1 on gpu02 is rank 1, and that is its name."""
    lines, why = task_lines(binding(), task_env("gpu02", 1, SLURM_PROCID="5"))
    got = exports(lines)
    assert why is None
    assert got["RANK"] == got["SLURM_PROCID"] == "1" and got["LOCAL_RANK"] == "1"
    assert got["WORLD_SIZE"] == "8" and got["NODE_RANK"] == got["SLURM_NODEID"] == "0"
    assert got["CUDA_VISIBLE_DEVICES"] == "4,5,6,7" and got["SLURMTOPO_GPU"] == "5"
    assert got["MASTER_ADDR"] == "gpu02" and got["NCCL_MNNVL_CLIQUE_ID"] == "7"
    assert got["SLURMTOPO_CPUS"] == "56-111" and got["SLURMTOPO_NICS"] == "mlx5_4"
    assert exports(task_lines(binding(), task_env("gpu01", 3))[0])["RANK"] == "7"


def test_user_nccl_wins():
    got = exports(task_lines(binding(), task_env("gpu01", 0, NCCL_IB_HCA="mine"))[0])
    assert "NCCL_IB_HCA" not in got


def test_one_task_per_node_is_torchruns_static_rendezvous():
    lines, why = task_lines(binding(), task_env("gpu01", 0, tasks="1(x2)"))
    got = exports(lines)
    assert why is None
    assert got["PET_NODE_RANK"] == got["NODE_RANK"] == "1" and got["PET_NNODES"] == "2"
    assert got["PET_NPROC_PER_NODE"] == "4" and got["PET_RDZV_BACKEND"] == "static"
    assert got["PET_MASTER_ADDR"] == "gpu02" and got["PET_MASTER_PORT"] == "20042"
    assert got["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert {"unset RANK", "unset LOCAL_RANK", "unset WORLD_SIZE"} <= set(lines)
    # not node-contiguous: nothing, and why
    lines, why = task_lines(binding(per_node=None), task_env("gpu01", 0, tasks="1(x2)"))
    assert lines == [] and "node-contiguous" in why


def test_other_steps_get_nothing():
    lines, why = task_lines(binding(), task_env("gpu01", 0, tasks="1", nodes="gpu01"))
    assert lines == [] and "this step runs 1 task(s)" in why
    assert task_lines(binding(), task_env("gpu09", 0, nodes="gpu[01-02]"))[0] == []


def test_batch_step():
    assert is_batch_step({"SLURM_JOB_ID": "1"})                 # 22.05-25.11: no step id
    assert is_batch_step({"SLURM_STEP_ID": "-5"})               # 26.05: signed
    assert is_batch_step({"SLURM_STEP_ID": "batch"})
    assert not is_batch_step({"SLURM_STEP_ID": "0"})


def test_binding_json_round_trip():
    b = binding()
    assert TaskBinding.from_json(b.to_json()) == b


_SH = """
_st_die() { echo "DIE $*"; exit 0; }
_st_slurm_cvd=$SLURM_CVD
CUDA_VISIBLE_DEVICES=$PLANNED
%s
echo "$CUDA_VISIBLE_DEVICES"
"""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True),
       st.lists(st.integers(0, 7), min_size=0, max_size=6, unique=True),
       st.sampled_from(["same", "renumbered", "none"]))
def test_local_facts_agree_with_the_task_shell(host_gpus, step, slurm_kind):
    """local_visible is the task shell's "local facts win" rule in Python:
    the same answers (binding/taskenv.py _LOCAL_GPUS run under /bin/sh)."""
    from slurmtopo.binding.taskenv import _LOCAL_GPUS

    step_gpus = ",".join(map(str, step))
    slurm = {"same": step_gpus, "renumbered": ",".join(str(i) for i in range(len(step))),
             "none": ""}[slurm_kind]
    planned = "9,9"
    env = {"SLURM_STEP_GPUS": step_gpus, "CUDA_VISIBLE_DEVICES": slurm}
    try:
        mine = local_visible(planned, host_gpus, env)
    except Exception as exc:
        mine = "DIE " + str(exc)
    sh = subprocess.run(["/bin/sh", "-c", _SH % _LOCAL_GPUS], capture_output=True, text=True,
                        env={"SLURM_STEP_GPUS": step_gpus, "SLURM_CVD": slurm,
                             "PLANNED": planned,
                             "SLURMTOPO_HOST_GPUS": ",".join(map(str, host_gpus))})
    shell = sh.stdout.strip().splitlines()[0]
    assert mine.startswith("DIE") == shell.startswith("DIE"), (mine, shell)
    if not shell.startswith("DIE"):
        assert mine == shell


# --------------------------------------------------------------------------
# the whole TaskProlog step, on a plan the planning call made


@pytest.fixture
def plan_value(capsys, monkeypatch):
    from slurmtopo.cli import main

    monkeypatch.setenv("SLURMTOPO_DIRECTIVE", "--tp 4 --dp 2")
    with pytest.raises(SystemExit):
        main(["hooks", "plan", "--inventory", INV, "--state", "none",
              "--options", '{"wrap": "true", "nodes": "2", "ntasks-per-node": "4"}'])
    monkeypatch.delenv("SLURMTOPO_DIRECTIVE")
    out = capsys.readouterr().out
    export = dict(l.split("\t")[1:] for l in out.splitlines() if l.startswith("set\t"))["export"]
    return export.split("SLURMTOPO_PLAN=", 1)[1]


def _env(tmp_path, value, **more):
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "77", "SLURM_SUBMIT_DIR": str(tmp_path),
           "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_GPUS": "0,1,2,3",
           "SLURMTOPO_PLAN": value}
    env.update(more)
    return env


def test_batch_step_binds_once_and_tasks_read_it(tmp_path, plan_value, monkeypatch):
    from slurmtopo.hooks import taskbind, taskprolog

    calls = []
    real = taskbind.bind_plan
    monkeypatch.setattr(taskbind, "bind_plan", lambda *a: calls.append(1) or real(*a))
    lines = taskprolog.prolog_lines(_env(tmp_path, plan_value))
    got = exports(lines)
    assert got["MASTER_PORT"] == str(20000 + 77) and got["WORLD_SIZE"] == "8"
    assert got["SLURMTOPO_JOB_PLAN"] == f"77:{plan_value}" and "unset SLURMTOPO_PLAN" in lines
    assert any(l.startswith("print slurmtopo: 8 rank(s) on 2 node(s)") for l in lines)
    run = tmp_path / ".slurmtopo" / "runs" / "77"
    assert (run / "rankmap.json").is_file() and (run / "hook-binding.json").is_file()
    assert oct(os.stat(run).st_mode & 0o777) == "0o700"
    assert oct(os.stat(run / "hook-binding.json").st_mode & 0o777) == "0o600"
    # a task of the script's srun: the binding file, not a second bind
    env = _env(tmp_path, plan_value, SLURMTOPO_PLAN="", SLURMTOPO_JOB_PLAN=f"77:{plan_value}",
               **task_env("gpu01", 2, SLURM_PROCID="2"))
    del env["SLURMTOPO_PLAN"]
    got = exports(taskprolog.prolog_lines(env))
    assert calls == [1]
    doc = json.loads((run / "rankmap.json").read_text())
    rank = int(got["RANK"])
    assert doc["ranks"][rank]["host"] == "gpu01" and doc["ranks"][rank]["local_rank"] == 2
    # a job submitted from inside this one inherits the plan with this job's id
    child = dict(env, SLURM_JOB_ID="78")
    assert taskprolog.prolog_lines(child) == []


def test_requeued_job_binds_again(tmp_path, plan_value, monkeypatch):
    from slurmtopo.hooks import taskbind, taskprolog

    calls = []
    real = taskbind.bind_plan
    monkeypatch.setattr(taskbind, "bind_plan", lambda *a: calls.append(1) or real(*a))
    taskprolog.prolog_lines(_env(tmp_path, plan_value))
    taskprolog.prolog_lines(_env(tmp_path, plan_value, SLURM_RESTART_COUNT="1"))
    assert calls == [1, 1]


def test_run_dir_not_usable_each_task_binds(tmp_path, plan_value):
    from slurmtopo.hooks import taskprolog

    run = tmp_path / ".slurmtopo"
    run.mkdir()
    os.chown(run, 12345, 12345)   # another user's
    lines = taskprolog.prolog_lines(_env(tmp_path, plan_value))
    assert exports(lines)["WORLD_SIZE"] == "8"
    assert any("run directory not used" in l and "each task bound on its own" in l
               for l in lines if l.startswith("print "))


def test_not_planned_costs_nothing(tmp_path):
    from slurmtopo.hooks import taskprolog

    assert taskprolog.prolog_lines({"SLURM_JOB_ID": "1"}) == []


def test_damaged_plan_is_a_print_line(tmp_path, capsys, monkeypatch):
    from slurmtopo.cli import main

    for k, v in _env(tmp_path, "z1:garbage").items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as exc:
        main(["hooks", "task-prolog"])
    out = capsys.readouterr()
    assert exc.value.code == 0 and out.err == ""
    assert out.out.startswith("print slurmtopo: the task's variables are not set: "
                              "$SLURMTOPO_PLAN: damaged plan")
