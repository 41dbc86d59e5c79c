"""The launchers and containers, run under bash and dash with a fake Slurm.

Compute nodes here have no Python: the fake srun (tests/test_binding.py)
gives every task a PATH holding only ``taskset`` and stand-ins written in
``/bin/sh`` (torchrun, apptainer, the program), so the per-task launch must
work with a POSIX shell alone. The batch step itself (``slurmtopo bind``)
runs with Python, as it does on a real first node.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from slurmtopo.binding.replan import fill_placement
from slurmtopo.errors import SlurmError, SlurmtopoError
from slurmtopo.groups import Layout, build_groups
from slurmtopo.model import Placement, RankSlot
from slurmtopo.rankmap import node_contiguous
from slurmtopo.sbatch import SbatchRequest
from slurmtopo.sbatch.launch import Launch, torchrun_args

from test_binding import H100, _run_job  # noqa: E402  (tests/ is on sys.path)

#: a stand-in that records its arguments and environment, one file per task
RECORDER = """#!/bin/sh
f="$OUT_DIR/{name}-${{SLURM_PROCID}}.txt"
{{
  for a in "$@"; do printf 'ARG %s\\n' "$a"; done
  if command -v python3 >/dev/null 2>&1 || command -v python >/dev/null 2>&1; then
    echo PYTHON yes
  else
    echo PYTHON no
  fi
  echo CPUS "$(taskset -cp $$ | /bin/sed 's/.*: //')"
  /usr/bin/env | /bin/sed 's/^/ENV /'
}} > "$f"
{tail}
"""


class RefusingSlurm:
    """A Slurm backend that answers nothing (every question is refused)."""

    def job_detail(self, job_id):
        raise SlurmError("scontrol: no answer")

    config_text = step_output = job_detail


def _task_path(tmp: Path, **scripts: str) -> Path:
    """A PATH for the tasks: taskset and the given /bin/sh stand-ins only."""
    d = tmp / "taskbin"
    d.mkdir()
    taskset = shutil.which("taskset")
    if taskset:
        (d / "taskset").symlink_to(taskset)
    for name, text in scripts.items():
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return d


def _records(out: Path, name: str):
    recs = {}
    for f in sorted(out.glob(f"{name}-*.txt")):
        args, env, python, cpus = [], {}, None, None
        for line in f.read_text().splitlines():
            tag, _, rest = line.partition(" ")
            if tag == "ARG":
                args.append(rest)
            elif tag == "ENV" and "=" in rest:
                k, _, v = rest.partition("=")
                env[k] = v
            elif tag == "PYTHON":
                python = rest
            elif tag == "CPUS":
                cpus = rest
        recs[int(f.stem.rsplit("-", 1)[1])] = {"args": args, "env": env, "python": python,
                                                "cpus": cpus}
    return recs


def _script(inv, placement, layout, command, launch=None, **kw):
    return SbatchRequest.from_plan(inv, placement, layout, command, inventory_path=H100,
                                   python=sys.executable, launch=launch, **kw).render()


@pytest.fixture(scope="module")
def h100():
    from slurmtopo.inventory import load_inventory
    return load_inventory(H100)


@pytest.mark.parametrize("cgroup", [False, True], ids=["no-cgroup", "cgroup"])
def test_srun_ranks_without_python(tmp_path, h100, cgroup):
    """Every rank starts through /bin/sh alone and gets its planned
    environment; no Python is on the task's PATH."""
    layout = Layout(tp=4, dp=2).resolved()
    alloc = {"gpu01": [4, 5, 6, 7], "gpu02": [1, 3, 5, 7]}
    p = fill_placement(h100, list(alloc.items()), layout)
    tb = _task_path(tmp_path, train=RECORDER.format(name="rank", tail=""))
    proc, _, log = _run_job(tmp_path, _script(h100, p, layout, ["train", "--lr", "3e-4"]),
                            alloc, cgroup, extra_env={"FAKE_TASK_PATH": str(tb)})
    assert proc.returncode == 0, proc.stderr
    recs = _records(tmp_path / "out", "rank")
    assert sorted(recs) == list(range(8))
    for r, d in recs.items():
        slot = p.slots[r]
        gpus = p.gpus_on(slot.host)
        env = d["env"]
        assert d["python"] == "no"
        assert d["args"] == ["--lr", "3e-4"]
        assert env["RANK"] == str(r) and env["WORLD_SIZE"] == "8"
        assert env["LOCAL_RANK"] == str(slot.local_rank)
        assert env["NODE_RANK"] == env["GROUP_RANK"] == str(p.hosts.index(slot.host))
        assert env["LOCAL_WORLD_SIZE"] == "4"
        want = ([str(sorted(alloc[slot.host]).index(g)) for g in gpus] if cgroup
                else [str(g) for g in gpus])
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(want)
        assert env["SLURMTOPO_GPU"] == str(slot.gpu)
        assert env["MASTER_ADDR"] == "gpu01" and env["MASTER_PORT"] == "24242"
        assert "SLURMTOPO_TASK_ENV" not in env and "SLURMTOPO_RANK_TABLE" not in env
    srun = [e for e in log if e["prog"] == "srun" and e["opts"].get("distribution")]
    assert srun[0]["argv"][:2] == ["/bin/sh", "-c"]
    assert srun[0]["argv"][3:] == ["slurmtopo-task", "train", "--lr", "3e-4"]


@pytest.mark.parametrize("cgroup", [False, True], ids=["no-cgroup", "cgroup"])
def test_torchrun_one_task_per_node(tmp_path, h100, cgroup):
    """torchrun gets --nnodes/--nproc-per-node/--node-rank in the planned host
    order and the static rendezvous on the first host; each node's
    CUDA_VISIBLE_DEVICES puts the planned GPU of local rank i at device i."""
    layout = Layout(tp=4, dp=2).resolved()
    alloc = {"gpu01": [4, 5, 6, 7], "gpu02": [1, 3, 5, 7]}
    p = fill_placement(h100, list(alloc.items()), layout)
    tb = _task_path(tmp_path, torchrun=RECORDER.format(name="torchrun", tail=""))
    script = _script(h100, p, layout, ["python", "train.py", "--lr", "3e-4"],
                     launch=Launch(launcher="torchrun"))
    proc, _, log = _run_job(tmp_path, script, alloc, cgroup,
                            extra_env={"FAKE_TASK_PATH": str(tb)})
    assert proc.returncode == 0, proc.stderr
    recs = _records(tmp_path / "out", "torchrun")
    assert sorted(recs) == [0, 1]
    hostfile = (tmp_path / ".slurmtopo/runs/4242" / "hostfile").read_text().split()
    assert hostfile == ["gpu01", "gpu02"]
    srun = [e for e in log if e["prog"] == "srun" and e["opts"].get("distribution")]
    assert srun[0]["opts"]["ntasks"] == "2"
    for node, d in recs.items():
        host = p.hosts[node]
        assert d["python"] == "no"
        assert d["args"] == ["--nnodes=2", "--nproc-per-node=4", f"--node-rank={node}",
                             "--master-addr=gpu01", "--master-port=24242",
                             "train.py", "--lr", "3e-4"]
        env = d["env"]
        assert env["SLURMD_NODENAME"] == host and env["NODE_RANK"] == str(node)
        gpus = p.gpus_on(host)
        if cgroup:
            want = [str(sorted(alloc[host]).index(g)) for g in gpus]
        else:
            want = [str(g) for g in gpus]
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(want)
        # torchrun's global rank node*K + LOCAL_RANK is the planned rank
        for lr, g in enumerate(gpus):
            slot = p.slots[node * 4 + lr]
            assert (slot.host, slot.gpu, slot.local_rank) == (host, g, lr)
        for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            assert var not in env  # torchrun sets these per process
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env["NCCL_IB_HCA"].startswith("=mlx5_")
    assert "CPU binding: none (torchrun" in proc.stderr


def test_torchrun_refuses_an_interleaved_plan(h100):
    layout = Layout(tp=2, dp=2).resolved()
    hw = h100.nodes["gpu01"].hardware
    slots = tuple(RankSlot(rank=r, host=("gpu01", "gpu02")[r % 2], gpu=r // 2,
                           local_rank=r // 2, cpus=hw.gpus[r // 2].cpus) for r in range(4))
    p = Placement(slots=slots, groups=dict(build_groups(layout)), hosts=("gpu01", "gpu02"))
    assert "interleaves" in node_contiguous(p)
    with pytest.raises(SlurmtopoError, match="--launcher torchrun cannot start this plan: "
                                             "rank 2 is local rank 1 on gpu01 \\(node 0\\); torchrun "
                                             "would make it rank 1"):
        _script(h100, p, layout, ["python", "t.py"], launch=Launch(launcher="torchrun"))
    uneven = fill_placement(h100, [("gpu01", [0, 1, 2]), ("gpu02", [0])], layout)
    assert "ranks per node differ" in node_contiguous(uneven)


def test_torchrun_args():
    assert torchrun_args(["python", "train.py", "-x"]) == ["train.py", "-x"]
    assert torchrun_args(["/usr/bin/python3.11", "-m", "pkg.train", "a"]) == \
        ["-m", "pkg.train", "a"]
    assert torchrun_args(["python", "-u", "t.py"]) == ["--no-python", "python", "-u", "t.py"]
    assert torchrun_args(["./train.sh", "a b"]) == ["--no-python", "./train.sh", "a b"]


def test_pyxis_options_on_the_srun_step(tmp_path, h100):
    layout = Layout(tp=2).resolved()
    alloc = {"gpu01": [0, 1]}
    p = fill_placement(h100, list(alloc.items()), layout)
    tb = _task_path(tmp_path, train=RECORDER.format(name="rank", tail=""))
    launch = Launch(container_image="nvcr.io#nvidia/pytorch:24.05-py3",
                    container_mounts="/data:/data", container_workdir="/work dir")
    script = _script(h100, p, layout, ["train"], launch=launch)
    assert ("'--container-image=nvcr.io#nvidia/pytorch:24.05-py3' "
            "--container-mounts=/data:/data '--container-workdir=/work dir'") in script
    proc, _, log = _run_job(tmp_path, script, alloc, False, extra_env={"FAKE_TASK_PATH": str(tb)})
    assert proc.returncode == 0, proc.stderr
    srun = [e for e in log if e["prog"] == "srun" and e["opts"].get("distribution")][0]
    assert srun["opts"]["container-image"] == "nvcr.io#nvidia/pytorch:24.05-py3"
    assert srun["opts"]["container-mounts"] == "/data:/data"
    assert srun["opts"]["container-workdir"] == "/work dir"
    assert sorted(_records(tmp_path / "out", "rank")) == [0, 1]


APPTAINER = """#!/bin/sh
printf '%s\\n' "$@" > "$OUT_DIR/apptainer-$SLURM_PROCID.args"
shift 3
exec "$@"
"""


def test_apptainer_wraps_the_command(tmp_path, h100):
    """apptainer exec --nv IMAGE runs after the environment is set, so the
    program inside sees it."""
    layout = Layout(tp=2).resolved()
    alloc = {"gpu01": [2, 3]}
    p = fill_placement(h100, list(alloc.items()), layout)
    tb = _task_path(tmp_path, apptainer=APPTAINER, train=RECORDER.format(name="rank", tail=""))
    script = _script(h100, p, layout, ["train", "x"], launch=Launch(apptainer="/img/pt.sif"))
    proc, _, _ = _run_job(tmp_path, script, alloc, False, extra_env={"FAKE_TASK_PATH": str(tb)})
    assert proc.returncode == 0, proc.stderr
    for r in (0, 1):
        args = (tmp_path / "out" / f"apptainer-{r}.args").read_text().splitlines()
        assert args == ["exec", "--nv", "/img/pt.sif", "train", "x"]
    recs = _records(tmp_path / "out", "rank")
    assert recs[1]["env"]["CUDA_VISIBLE_DEVICES"] == "2,3" and recs[1]["env"]["RANK"] == "1"


def test_launch_option_checks():
    with pytest.raises(SlurmtopoError, match="need --container-image"):
        Launch(container_mounts="/a:/a").check()
    with pytest.raises(SlurmtopoError, match="not both"):
        Launch(container_image="x", apptainer="y").check()
    with pytest.raises(SlurmtopoError, match="--launcher must be one of srun, torchrun"):
        Launch(launcher="mpirun").check()
    with pytest.raises(SlurmtopoError, match="one non-empty line"):
        Launch(container_image="a\nb").check()


def test_task_env_by_file_when_large(tmp_path, h100, monkeypatch):
    """Above the environment limit the task fragment is read from the run
    directory instead, and the task still starts with /bin/sh alone."""
    import subprocess

    from slurmtopo.binding import limits
    from slurmtopo.binding.step import bind, write_run_dir
    from slurmtopo.plandoc import read_plan
    from slurmtopo.plandoc import TASK_SNIPPET

    layout = Layout(tp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1])], layout)
    req = SbatchRequest.from_plan(h100, p, layout, ["train"], inventory_path=H100)
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu01", "SLURMD_NODENAME": "gpu01",
           "SLURM_JOB_GPUS": "0,1"}
    result = bind(read_plan(req.plan_json), env, slurm=RefusingSlurm(), cgroup_mode="no",
                  probe=False)
    monkeypatch.setattr(limits, "ENV_TABLE_LIMIT", 10)
    write_run_dir(result, str(tmp_path), {})
    envsh = (tmp_path / "env.sh").read_text()
    assert f"export SLURMTOPO_TASK_ENV_FILE={tmp_path}/task-env.sh" in envsh
    assert "passed as a file" in "\n".join(result.log)
    r = subprocess.run(["/bin/sh", "-c", TASK_SNIPPET, "t", "/usr/bin/env"],
                       env={"PATH": "/usr/bin:/bin", "SLURM_PROCID": "1",
                            "SLURMD_NODENAME": "gpu01", "SLURMTOPO_CPU_BIND": "0",
                            "SLURMTOPO_TASK_ENV_FILE": str(tmp_path / "task-env.sh")},
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "RANK=1" in r.stdout.splitlines() and "CUDA_VISIBLE_DEVICES=0,1" in r.stdout


def test_wrong_host_is_refused(tmp_path, h100):
    """A task started on another host than planned stops with the reason."""
    from slurmtopo.binding.taskenv import task_script
    import subprocess
    layout = Layout(tp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1])], layout)
    text = task_script(p, {"gpu01": "0,1"})
    env = {"PATH": "/usr/bin:/bin", "SLURM_PROCID": "1", "SLURMD_NODENAME": "gpu09",
           "SLURMTOPO_TASK_ENV": text}
    from slurmtopo.plandoc import TASK_SNIPPET
    r = subprocess.run(["/bin/sh", "-c", TASK_SNIPPET, "t", "true"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "planned on gpu01 but srun started it on gpu09" in r.stderr
    env.update(SLURM_PROCID="7", SLURMD_NODENAME="gpu01")
    r = subprocess.run(["/bin/sh", "-c", TASK_SNIPPET, "t", "true"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "task 7 is not in this job's plan" in r.stderr
