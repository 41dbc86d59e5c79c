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
import stat
import sys
from pathlib import Path

import pytest

from slurmtopo import api
from slurmtopo.binding.replan import fill_placement
from slurmtopo.errors import SlurmtopoError
from slurmtopo.job.groups import Layout, build_groups
from slurmtopo.inventory.model import Placement, RankSlot
from slurmtopo.plan.rankmap import node_contiguous
from slurmtopo.sbatch import SbatchRequest
from slurmtopo.sbatch.launch import Launch, torchrun_args
from slurmtopo.plan.plandoc import TASK_SNIPPET
from slurmtopo.testing.slurm_backend import FakeSlurm

from test_binding import H100, _run_job  # noqa: E402  (tests/ is on sys.path)
from tests.fakes.small_limits import small_limits_python
from tests.rankenv import rank_env

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
    return api.load_cluster(str(H100))


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
    _check_srun_records(_records(tmp_path / "out", "rank"), p, alloc, cgroup, ["--lr", "3e-4"])
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
    with pytest.raises(SlurmtopoError) as exc:
        _script(h100, p, layout, ["python", "t.py"], launch=Launch(launcher="torchrun"))
    assert exc.value.render() == (
        "--launcher torchrun cannot start this plan: rank 2 is local rank 1 on gpu01 (node 0); "
        "torchrun would make it rank 1: the plan interleaves ranks across nodes (use --launcher "
        "srun, or an order with the intra-node kinds fastest)")
    uneven = fill_placement(h100, [("gpu01", [0, 1, 2]), ("gpu02", [0])], layout)
    assert "ranks per node differ" in node_contiguous(uneven)
    # no order evens out the free GPUs: the remedy says what does (issue 24)
    with pytest.raises(SlurmtopoError) as exc:
        _script(h100, uneven, layout, ["python", "t.py"], launch=Launch(launcher="torchrun"))
    assert exc.value.render().endswith(
        "torchrun starts the same number on every node (use --launcher srun, or "
        "--gpus-per-node K: K ranks on every node, queued until nodes have K free GPUs)")


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
    with pytest.raises(SlurmtopoError, match="--torchrun \"'python3 -m\": No closing"):
        Launch(launcher="torchrun", torchrun="'python3 -m").check()
    assert Launch(launcher="torchrun", torchrun="python3 -m torch.distributed.run").argv(
        ["python", "t.py"])[:3] == ["python3", "-m", "torch.distributed.run"]
    # srun runs the command itself: --torchrun plays no part
    assert Launch(torchrun="'unbalanced").argv(["t"]) == ["t"]


def test_a_missing_torchrun_fails_at_once_naming_the_node_and_the_fix(tmp_path, h100):
    """No torchrun on the compute node: every task stops before anything
    else with its node and the fix, not the shell's "exec: torchrun: not
    found" (exit 127)."""
    layout = Layout(tp=4, dp=2).resolved()
    alloc = {"gpu01": [4, 5, 6, 7], "gpu02": [1, 3, 5, 7]}
    p = fill_placement(h100, list(alloc.items()), layout)
    tb = _task_path(tmp_path)  # taskset only
    script = _script(h100, p, layout, ["python", "train.py"], launch=Launch(launcher="torchrun"))
    proc, _, _ = _run_job(tmp_path, script, alloc, False, extra_env={"FAKE_TASK_PATH": str(tb)})
    assert proc.returncode != 0
    for node in ("gpu01", "gpu02"):
        assert (f"({node}): error: torchrun: command not found on this node (PATH={tb}); give "
                "torchrun's path with --torchrun PATH, or use --torchrun 'python3 -m "
                "torch.distributed.run'") in proc.stderr
    assert "exec: torchrun: not found" not in proc.stderr
    # inside Apptainer torchrun is the image's: what the node lacks is apptainer
    script = _script(h100, p, layout, ["python", "train.py"],
                     launch=Launch(launcher="torchrun", apptainer="/images/x.sif"))
    (tmp_path / "box").mkdir()
    proc, _, _ = _run_job(tmp_path / "box", script, alloc, False,
                          extra_env={"FAKE_TASK_PATH": str(tb)})
    assert proc.returncode != 0
    assert (f"(gpu02): error: apptainer: command not found on this node (PATH={tb}); install "
            "Apptainer on the compute nodes, or submit without --apptainer") in proc.stderr


#: four nodes holding different GPUs, 4 ranks each: 16 ranks in 6 blocks of
#: 3, so blocks straddle nodes
BIG_ALLOC = {"gpu01": [4, 5, 6, 7], "gpu02": [1, 3, 5, 7], "gpu03": [0, 1, 2, 3],
             "gpu04": [0, 2, 4, 6]}


@pytest.mark.parametrize("cgroup", [False, True], ids=["no-cgroup", "cgroup"])
def test_big_job_tasks_read_only_their_block(tmp_path, h100, cgroup):
    """Above the environment limit each task reads the block of its
    SLURM_PROCID from the run directory (/bin/sh alone, no Python), and
    every rank gets its planned environment."""
    layout = Layout(tp=4, dp=4).resolved()
    p = fill_placement(h100, list(BIG_ALLOC.items()), layout)
    tb = _task_path(tmp_path, train=RECORDER.format(name="rank", tail=""))
    proc, _, _ = _run_job(tmp_path, _script(h100, p, layout, ["train", "a b"]), BIG_ALLOC,
                          cgroup, extra_env={"FAKE_TASK_PATH": str(tb),
                                             "SLURMTOPO_PYTHON": small_limits_python(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "each task reads its block of 3 ranks" in proc.stderr
    recs = _records(tmp_path / "out", "rank")
    _check_srun_records(recs, p, BIG_ALLOC, cgroup, ["a b"])
    run = tmp_path / ".slurmtopo/runs/4242"
    blocks = sorted((run / "task-env").iterdir(), key=lambda f: int(f.stem))
    assert [f.name for f in blocks] == [f"{k}.sh" for k in range(6)]
    for k, f in enumerate(blocks):
        tasks = [int(l.split(")")[0]) for l in f.read_text().splitlines()
                 if l.startswith("  ") and ") NODE_RANK=" in l]
        assert tasks == list(range(3 * k, min(3 * k + 3, 16)))
    # what travels in the environment holds no rank's line, only the loader
    envsh = (run / "env.sh").read_text()
    assert ") NODE_RANK=" not in envsh and "task-env" in envsh
    # the whole table stays in the run directory, and still works alone
    whole = (run / "task-env.sh").read_text()
    assert whole.count(") NODE_RANK=") == 16
    import subprocess
    got = subprocess.run(["/bin/sh", str(run / "task-env.sh"), "/usr/bin/env"],
                         env={"PATH": "/usr/bin:/bin", "SLURM_PROCID": "13",
                              "SLURMD_NODENAME": p.slots[13].host, "SLURMTOPO_CPU_BIND": "0"},
                         capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert "RANK=13" in got.stdout.splitlines()
    assert f"LOCAL_RANK={p.slots[13].local_rank}" in got.stdout.splitlines()


def _check_srun_records(recs, p, alloc, cgroup, args):
    """Each rank's recorded arguments and environment are the planned ones."""
    assert sorted(recs) == list(range(p.world_size))
    for r, d in recs.items():
        slot = p.slots[r]
        gpus = p.gpus_on(slot.host)
        env = d["env"]
        assert d["python"] == "no"
        assert d["args"] == args
        assert env["RANK"] == str(r) and env["WORLD_SIZE"] == str(p.world_size)
        # the shell text sets what rankmap.rank_vars (the one home) gives the
        # rank, CPUs aside (taskset's outcome depends on this machine)
        planned = rank_env(p, r, alloc[slot.host], cgroup)
        del planned["SLURMTOPO_CPUS"]
        assert {k: env.get(k) for k in planned} == planned
        assert env["SLURMD_NODENAME"] == slot.host
        assert env["LOCAL_RANK"] == str(slot.local_rank)
        assert env["NODE_RANK"] == env["GROUP_RANK"] == str(p.hosts.index(slot.host))
        assert env["LOCAL_WORLD_SIZE"] == str(len(gpus))
        want = ([str(sorted(alloc[slot.host]).index(g)) for g in gpus] if cgroup
                else [str(g) for g in gpus])
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(want)
        assert env["SLURMTOPO_GPU"] == str(slot.gpu)
        assert env["SLURMTOPO_NICS"] == ",".join(slot.nics)
        assert env["MASTER_ADDR"] == p.slots[0].host and env["MASTER_PORT"] == "24242"
        assert "SLURMTOPO_TASK_ENV" not in env and "SLURMTOPO_RANK_TABLE" not in env


@pytest.mark.parametrize("cgroup", [False, True], ids=["no-cgroup", "cgroup"])
def test_big_torchrun_job_reads_node_blocks(tmp_path, h100, cgroup):
    """torchrun: one task per node, blocks of 3 nodes."""
    layout = Layout(tp=4, dp=4).resolved()
    p = fill_placement(h100, list(BIG_ALLOC.items()), layout)
    tb = _task_path(tmp_path, torchrun=RECORDER.format(name="torchrun", tail=""))
    script = _script(h100, p, layout, ["python", "train.py"], launch=Launch(launcher="torchrun"))
    proc, _, _ = _run_job(tmp_path, script, BIG_ALLOC, cgroup,
                          extra_env={"FAKE_TASK_PATH": str(tb),
                                     "SLURMTOPO_PYTHON": small_limits_python(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    recs = _records(tmp_path / "out", "torchrun")
    assert sorted(recs) == [0, 1, 2, 3]
    assert sorted(f.name for f in (tmp_path / ".slurmtopo/runs/4242/task-env").iterdir()) == \
        ["0.sh", "1.sh"]
    for node, d in recs.items():
        host = p.hosts[node]
        env = d["env"]
        assert d["args"][:3] == ["--nnodes=4", "--nproc-per-node=4", f"--node-rank={node}"]
        assert env["SLURMD_NODENAME"] == host and env["NODE_RANK"] == str(node)
        gpus = p.gpus_on(host)
        want = ([str(sorted(BIG_ALLOC[host]).index(g)) for g in gpus] if cgroup
                else [str(g) for g in gpus])
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(want)
        assert "RANK" not in env and "SLURMTOPO_TASK_ENV" not in env


def _bound_in_blocks(tmp_path, h100, monkeypatch):
    """The run directory of a 16-rank job written in blocks of 3; returns
    (placement, env.sh's environment)."""
    import subprocess

    from slurmtopo.binding import limits
    from slurmtopo.binding.step import bind, write_run_dir
    from slurmtopo.plan.plandoc import read_plan

    layout = Layout(tp=4, dp=4).resolved()
    p = fill_placement(h100, list(BIG_ALLOC.items()), layout)
    req = SbatchRequest.from_plan(h100, p, layout, ["train"], inventory_path=H100)
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[01-04]", "SLURMD_NODENAME": "gpu01",
           "SLURM_JOB_GPUS": "4,5,6,7"}
    # the one in-memory backend with no answers: every question refused
    result = bind(read_plan(req.plan_json), env, slurm=FakeSlurm(), cgroup_mode="no",
                  probe=False)
    monkeypatch.setattr(limits, "ENV_TABLE_LIMIT", 10)
    monkeypatch.setattr(limits, "TASK_BLOCK", 3)
    write_run_dir(result, str(tmp_path), {})
    # what the batch script's `source env.sh` exports to srun's tasks
    dump = subprocess.run(["/bin/sh", "-c", '. "$1" && env -0', "sh", str(tmp_path / "env.sh")],
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          check=True).stdout
    tenv = dict(kv.split("=", 1) for kv in dump.split("\0") if "=" in kv)
    return p, {k: v for k, v in tenv.items() if k.startswith(("SLURMTOPO_", "MASTER_", "NCCL_"))}


def _task(tenv, procid, host, *cmd):
    import subprocess

    env = dict(tenv, PATH="/usr/bin:/bin", SLURMTOPO_CPU_BIND="0", SLURMD_NODENAME=host)
    if procid is not None:
        env["SLURM_PROCID"] = procid
    return subprocess.run(["/bin/sh", "-c", TASK_SNIPPET, "t", *(cmd or ("true",))], env=env,
                          capture_output=True, text=True)


@pytest.mark.parametrize("run_name", ["run", "run dir's $HOME `x`"])
def test_block_loader_checks_the_task(tmp_path, h100, monkeypatch, run_name):
    """A big job's task: its block gives its variables (whatever the run
    directory's name holds); a task beyond the job, a non-number, no
    SLURM_PROCID, a wrong host or an unreadable run directory each stop
    with one line and exit code 2."""
    tmp_path = tmp_path / run_name
    tmp_path.mkdir()
    p, tenv = _bound_in_blocks(tmp_path, h100, monkeypatch)
    for r in (0, 5, 15):
        host = p.slots[r].host
        got = _task(tenv, str(r), host, "/usr/bin/env")
        assert got.returncode == 0, got.stderr
        lines = got.stdout.splitlines()
        assert f"RANK={r}" in lines and f"LOCAL_RANK={p.slots[r].local_rank}" in lines
        assert f"SLURMTOPO_GPU={p.slots[r].gpu}" in lines
        assert f"CUDA_VISIBLE_DEVICES={','.join(map(str, p.gpus_on(host)))}" in lines
    for procid, why in (("16", "task 16 is not in this job's plan (16 tasks)"),
                        ("99999999", "task 99999999 is not in this job's plan"),
                        ("1x", "task 1x is not in this job's plan"),
                        (None, "task (no SLURM_PROCID) is not in this job's plan")):
        got = _task(tenv, procid, "gpu01")
        assert got.returncode == 2 and why in got.stderr, (procid, got.stderr)
        assert len(got.stderr.strip().splitlines()) == 1
    got = _task(tenv, "5", "gpu09")
    assert got.returncode == 2
    assert f"planned on {p.slots[5].host} but srun started it on gpu09" in got.stderr
    (tmp_path / "task-env" / "1.sh").unlink()
    got = _task(tenv, "4", p.slots[4].host)
    assert got.returncode == 2
    assert f"cannot read {tmp_path}/task-env/1.sh: the run directory must be readable" \
        in got.stderr


def test_wrong_host_is_refused(tmp_path, h100):
    """A task started on another host than planned stops with the reason."""
    from slurmtopo.binding.taskenv import task_env
    import subprocess
    layout = Layout(tp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1])], layout)
    text = task_env(p, {"gpu01": "0,1"}).whole
    env = {"PATH": "/usr/bin:/bin", "SLURM_PROCID": "1", "SLURMD_NODENAME": "gpu09",
           "SLURMTOPO_TASK_ENV": text}
    from slurmtopo.plan.plandoc import TASK_SNIPPET
    r = subprocess.run(["/bin/sh", "-c", TASK_SNIPPET, "t", "true"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "planned on gpu01 but srun started it on gpu09" in r.stderr
    env.update(SLURM_PROCID="7", SLURMD_NODENAME="gpu01")
    r = subprocess.run(["/bin/sh", "-c", TASK_SNIPPET, "t", "true"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "task 7 is not in this job's plan" in r.stderr


def test_a_swapped_block_is_not_run(tmp_path, h100, monkeypatch):
    """Another user who can rename entries above the run directory (a
    group-shared submit directory) can put any file where a task looks for
    its block. The task runs a block only when it starts with this
    binding's mark: planted code, a link to it, and a genuine block of
    another binding of the same job are each refused with one line, and the
    planted code never runs (issue 21)."""
    p, tenv = _bound_in_blocks(tmp_path / "run", h100, monkeypatch)
    block = tmp_path / "run" / "task-env" / "1.sh"
    marker = tmp_path / "PLANTED-RAN"
    planted = f"touch {marker}\nNODE_RANK=0 LOCAL_RANK=0\n"
    host = p.slots[4].host
    assert _task(tenv, "4", host).returncode == 0
    # 1. the block rewritten (whoever owns the file, without the mark)
    good = block.read_text()
    block.write_text(planted)
    got = _task(tenv, "4", host)
    assert got.returncode == 2 and "was not written for this job by slurmtopo bind" in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1 and not marker.exists()
    # 2. a link to planted code, with the mark's first words but a guessed token
    (tmp_path / "evil.sh").write_text("# slurmtopo task-env 00 block 1\n" + planted)
    block.unlink()
    block.symlink_to(tmp_path / "evil.sh")
    got = _task(tenv, "4", host)
    assert got.returncode == 2 and "not written for this job" in got.stderr
    assert not marker.exists()
    # 3. a genuine block of another binding (another job of the same user)
    _, other = _bound_in_blocks(tmp_path / "other", h100, monkeypatch)
    block.unlink()
    block.write_text((tmp_path / "other" / "task-env" / "1.sh").read_text())
    got = _task(tenv, "4", host)
    assert got.returncode == 2 and "not written for this job" in got.stderr
    # ... and block 0 of this binding in the place of block 1
    block.write_text((tmp_path / "run" / "task-env" / "0.sh").read_text())
    assert _task(tenv, "4", host).returncode == 2
    block.write_text(good)
    assert _task(tenv, "4", host).returncode == 0


def test_run_dir_files_are_private_whatever_the_umask(tmp_path, h100, monkeypatch):
    """umask 002 in a setgid group directory made the run directory
    group-writable; now every directory is 0700 and every file 0600, and a
    link planted at a file's name is replaced, not written through."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2775)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    old = os.umask(0o002)
    try:
        run = shared / ".slurmtopo" / "runs" / "7"
        run.mkdir(parents=True)          # as an earlier release left it: 0775
        (run / "env.sh").symlink_to(victim)
        p, _ = _bound_in_blocks(run, h100, monkeypatch)
    finally:
        os.umask(old)
    for d in (shared / ".slurmtopo", shared / ".slurmtopo" / "runs", run, run / "task-env"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in list(run.iterdir()) + list((run / "task-env").iterdir()):
        if f.is_file():
            assert stat.S_IMODE(f.lstat().st_mode) == 0o600, f
    assert not (run / "env.sh").is_symlink() and victim.read_text() == "keep"


# ---------------------------------------------------------------------------
# the launcher's requirement is part of the choice (issue #24)

EXAMPLES = Path(__file__).resolve().parents[1] / "etc" / "examples"


@pytest.mark.parametrize("how", ["nodelist", "busy-state"])
def test_torchrun_is_planned_node_contiguous_on_a_partly_busy_cluster(tmp_path, how):
    """Two free nodes hold a node-contiguous placement: torchrun gets it
    (the faster-modelled nesting that interleaves nodes is not chosen),
    where the choice used to ignore the launcher and the script then
    refused the plan."""
    from tests.clirun import run_cli

    if how == "nodelist":  # the issue's `plan --nodelist 'ws[3-4]'`
        where = ["plan", "--inventory", str(EXAMPLES / "a6000-4node-pcie.yaml"),
                 "--nodelist", "ws[3-4]", "--output-dir", str(tmp_path / "out")]
        hosts = ["ws3", "ws4"]
    else:  # `sbatch` with node1 and node2 held by other jobs
        state = tmp_path / "busy.yaml"
        state.write_text('slurmtopo: state\nversion: 1\nnodes:\n'
                         '  - {name: "node[1-2]", state: allocated}\n')
        where = ["sbatch", "--inventory", str(EXAMPLES / "devcluster.yaml"),
                 "--state", str(state), "--dry-run"]
        hosts = ["node3", "node4"]
    # a model whose activations weigh more than its gradients, so that the
    # nesting that keeps each pipeline inside a node (interleaving the
    # nodes' ranks) models clearly faster
    layout = ["--tp", "2", "--pp", "2", "--dp", "4",
              "--model", "params=1e9,layers=16,hidden=8192"]
    code, out, err = run_cli(where + layout + ["--launcher", "torchrun", "--", "python", "t.py"])
    assert code == 0, err
    script = (tmp_path / "out" / "job.sbatch").read_text() if how == "nodelist" else out
    from slurmtopo.plan.plandoc import planned_placement, read_plan
    from slurmtopo.sbatch.script import extract_plan

    p = planned_placement(read_plan(extract_plan(script)))
    assert node_contiguous(p) is None
    assert list(p.hosts) == hosts
    assert "# note: the job's launcher cannot start 2 of the 5 placements weighed (rank 8 " \
        "is local rank 4 on " + hosts[0] in script
    # srun is not held back: the same job with srun takes the faster nesting
    code, out, err = run_cli(where + layout + ["--", "python", "t.py"])
    assert code == 0, err
    script = (tmp_path / "out" / "job.sbatch").read_text() if how == "nodelist" else out
    assert node_contiguous(planned_placement(read_plan(extract_plan(script)))) is not None


def test_cheapest_weighs_only_what_the_launcher_admits(h100):
    """choice.cheapest: the admitted options only, with a note; all
    refused: the usual choice (the script's check then says why)."""
    from slurmtopo.job.request import JobRequest
    from slurmtopo.placement.planner import Proposal
    from slurmtopo.plan.choice import cheapest

    layout = Layout(tp=2, dp=2).resolved()
    req = JobRequest(layout=layout)
    hw = h100.nodes["gpu01"].hardware
    slots = tuple(RankSlot(rank=r, host=("gpu01", "gpu02")[r % 2], gpu=r // 2,
                           local_rank=r // 2, cpus=hw.gpus[r // 2].cpus) for r in range(4))
    interleaved = Placement(slots=slots, groups=dict(build_groups(layout)),
                            hosts=("gpu01", "gpu02"))
    contiguous = fill_placement(h100, [("gpu01", [0, 1]), ("gpu02", [0, 1])], layout)
    options = [Proposal("plan", interleaved), Proposal("nesting", contiguous)]
    got = cheapest(h100, req, options, admit=node_contiguous)
    assert [s.host for s in got.slots] == [s.host for s in contiguous.slots]
    assert got.notes[-1].startswith("the job's launcher cannot start 1 of the 2 placements "
                                    "weighed (rank 2 is local rank 1 on gpu01")
    refused = cheapest(h100, req, [Proposal("plan", interleaved)], admit=node_contiguous)
    assert refused is interleaved
    assert cheapest(h100, req, options, admit=lambda p: None) == \
        cheapest(h100, req, options)


# ---------------------------------------------------------------------------
# the registry: a launcher is one object, found by name everywhere

def test_the_registry_names_and_refuses():
    from slurmtopo.plan import launchers

    assert launchers.names() == ("srun", "torchrun")
    assert launchers.get("torchrun") is launchers.TORCHRUN
    with pytest.raises(SlurmtopoError, match="--launcher must be one of srun, torchrun, "
                                             "got 'mpirun'"):
        launchers.get("mpirun")
    with pytest.raises(ValueError, match="registered already"):
        launchers.register(launchers.SRUN)


def test_a_registered_launcher_reaches_the_script_the_plan_and_the_tasks(h100, monkeypatch):
    """Adding a launcher is one object in slurmtopo.plan.launchers: the script's
    srun line, the plan document, the task count, hostfile and the task
    shell's tail all come from it."""
    from slurmtopo.binding.taskenv import task_env
    from slurmtopo.plan import launchers
    from slurmtopo.plan.plandoc import launcher_of, read_plan
    from slurmtopo.sbatch.script import extract_plan

    class PerNode(launchers.Launcher):
        def argv(self, program, command):
            return [*program, '-n="$SLURMTOPO_NPROC_PER_NODE"', *command]

    mine = PerNode(name="pernode", per_node=True, summary="one starter per node",
                   help="pernode: test.", default_program=("starter",),
                   var_words=frozenset({'-n="$SLURMTOPO_NPROC_PER_NODE"'}),
                   task_tail='echo "pernode tail"\nexec "$@"\n')
    monkeypatch.setitem(launchers._REGISTRY, "pernode", mine)
    layout = Layout(tp=4, dp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1, 2, 3]), ("gpu02", [0, 1, 2, 3])], layout)
    script = _script(h100, p, layout, ["python", "t.py"],
                     launch=Launch(launcher="pernode", torchrun="/opt/bin/starter --x"))
    assert script.rstrip().endswith("slurmtopo-task \\\n"
                                    '    /opt/bin/starter --x -n="$SLURMTOPO_NPROC_PER_NODE" '
                                    "python t.py")
    assert "# launcher: pernode (one starter per node)" in script
    assert launcher_of(read_plan(extract_plan(script))) is mine
    assert Launch(launcher="pernode").argv(["t"])[0] == "starter"  # its own default
    assert mine.tasks(p) == 2 and mine.hostfile_hosts(p) == ["gpu01", "gpu02"]
    text = task_env(p, {"gpu01": "0,1,2,3", "gpu02": "0,1,2,3"}, mine).whole
    assert text.endswith('echo "pernode tail"\nexec "$@"\n')
    assert "  1) NODE_RANK=1 ;;" in text and "LOCAL_RANK=" not in text.split("esac")[0]
