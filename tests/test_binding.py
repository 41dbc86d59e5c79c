"""The start-time step, run for real under bash with a fake Slurm.

The batch script ``slurmtopo plan`` writes is executed by bash with a fake
SLURM_* environment and fake ``srun``/``scontrol`` first on PATH. The fake
srun does what Slurm does for ``--distribution=arbitrary`` (task r runs on
line r of SLURM_HOSTFILE; each task gets SLURM_PROCID, SLURMD_NODENAME and
the step's GPU variables, renumbered from 0 under a device cgroup) but runs
every task locally, so each rank's environment and CPU affinity can be
captured and checked. Unit tests of the pure parts follow.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurmtopo.plan import plandoc, planwrite
from slurmtopo.binding import limits
from slurmtopo.binding.allocation import (Allocation, detect_constrained, parse_probe,
                                          parse_scontrol_job, read_allocation)
from slurmtopo.binding.launcher import parse_rank_table, rank_launch, rank_main, rank_table
from slurmtopo.binding.replan import (allocation_state, differences, fill_placement, replan,
                                      with_allocated_nodes)
from slurmtopo.binding.step import bind, env_script, load_inventory_for_bind, write_run_dir
from slurmtopo.plan.plandoc import planned_placement, read_plan
from slurmtopo.plan.planwrite import dumps_plan, plan_document
from slurmtopo.errors import SlurmtopoError
from slurmtopo.job.groups import Layout
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.inventory.model import Inventory, Node
from slurmtopo.placement.common import nic_choice
from slurmtopo.inventory.presets import PRESETS, preset
from slurmtopo.sbatch import SbatchRequest
from slurmtopo.testing.slurm_backend import FakeSlurm

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "etc" / "examples"
H100 = EXAMPLES / "h100-4node-2leaf.yaml"

FAKE_SRUN = r'''#!PYTHON
"""Fake srun: runs every task locally with the variables Slurm would set."""
import json, os, subprocess, sys
from ClusterShell.NodeSet import NodeSet

args = sys.argv[1:]
opts = {}
while args and args[0].startswith("--"):
    key, _, val = args.pop(0)[2:].partition("=")
    opts[key] = val
with open(os.environ["FAKE_SLURM_LOG"], "a") as log:
    log.write(json.dumps({"prog": "srun", "opts": opts, "argv": args}) + "\n")
alloc = json.loads(os.environ["FAKE_ALLOC"])
cgroup = os.environ.get("FAKE_CGROUP") == "yes"
if opts.get("distribution") == "arbitrary":
    with open(os.environ["SLURM_HOSTFILE"]) as fh:
        hosts = [l.strip() for l in fh if l.strip()]
    tasks = hosts[: int(opts["ntasks"])]
else:
    tasks = list(NodeSet(os.environ["SLURM_JOB_NODELIST"]))
nodes = list(dict.fromkeys(tasks))
rc = 0
seen = {}
for procid, host in enumerate(tasks):
    env = dict(os.environ)
    gpus = alloc.get(host, [])
    env.update(SLURM_PROCID=str(procid), SLURMD_NODENAME=host,
               SLURM_LOCALID=str(seen.get(host, 0)), SLURM_NODEID=str(nodes.index(host)),
               SLURM_STEP_GPUS=",".join(map(str, gpus)),
               CUDA_VISIBLE_DEVICES=",".join(str(i) if cgroup else str(g)
                                             for i, g in enumerate(gpus)))
    if os.environ.get("FAKE_TASK_PATH"):  # a compute node without Python
        env["PATH"] = os.environ["FAKE_TASK_PATH"]
    seen[host] = seen.get(host, 0) + 1
    rc = max(rc, subprocess.call(args, env=env))
sys.exit(rc)
'''

FAKE_SCONTROL = r'''#!PYTHON
"""Fake scontrol: `show job -d` from FAKE_ALLOC, `show config` from FAKE_CONFIG."""
import json, os, sys
with open(os.environ["FAKE_SLURM_LOG"], "a") as log:
    log.write(json.dumps({"prog": "scontrol", "argv": sys.argv[1:]}) + "\n")
if os.environ.get("FAKE_SCONTROL_FAIL"):
    sys.exit(1)
a = sys.argv[1:]
if a[:2] == ["show", "job"]:
    alloc = json.loads(os.environ["FAKE_ALLOC"])
    print(f"JobId={a[-1]} JobName=train")
    print("   NodeList=" + ",".join(alloc))
    for host, gpus in alloc.items():
        idx = ",".join(map(str, gpus))
        print(f"     Nodes={host} CPU_IDs=0-1 Mem=0 GRES=gpu:{len(gpus)}(IDX:{idx})")
    print("   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0")
elif a[:2] == ["show", "config"]:
    print("Configuration data as of 2024-01-01T00:00:00")
    print(os.environ.get("FAKE_CONFIG", "TaskPlugin = task/affinity"))
else:
    sys.exit(1)
'''

DUMP_RANK = ("import json, os, sys; "
             "json.dump({'env': dict(os.environ), 'cpus': sorted(os.sched_getaffinity(0)), "
             "'argv': sys.argv[1:]}, "
             "open(os.path.join(os.environ['OUT_DIR'], 'rank-%s.json' % os.environ['RANK']), 'w'))")


@pytest.fixture(scope="module")
def h100():
    return load_inventory(H100)


def _fakes(tmp: Path) -> Path:
    bindir = tmp / "bin"
    bindir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        p = bindir / name
        p.write_text(text.replace("#!PYTHON", "#!" + sys.executable, 1))
        p.chmod(0o755)
    return bindir


def _script(inv, placement, layout, command, inventory_path=H100, **kw) -> str:
    return SbatchRequest.from_plan(inv, placement, layout, command, inventory_path=inventory_path,
                                   python=sys.executable, **kw).render()


def _run_job(tmp: Path, script: str, alloc: dict, cgroup: bool, batch_gpus_env=True,
             extra_env=None):
    """Run the batch script like slurmstepd would on the first node."""
    bindir = _fakes(tmp)
    out = tmp / "out"
    out.mkdir()
    (tmp / "job.sbatch").write_text(script)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "CUDA_", "NCCL_"))}
    hosts = list(alloc)
    batch = alloc[hosts[0]]
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", OUT_DIR=str(out),
               FAKE_SLURM_LOG=str(tmp / "slurm.log"), FAKE_ALLOC=json.dumps(alloc),
               FAKE_CGROUP="yes" if cgroup else "no", SLURM_JOB_ID="4242",
               SLURM_JOB_NODELIST=",".join(hosts), SLURMD_NODENAME=hosts[0],
               SLURM_SUBMIT_DIR=str(tmp), SLURMTOPO_PYTHON=sys.executable)
    if batch_gpus_env:
        env["SLURM_JOB_GPUS"] = ",".join(map(str, batch))
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) if cgroup else str(g)
                                               for i, g in enumerate(batch))
    env.update(extra_env or {})
    p = subprocess.run(["bash", str(tmp / "job.sbatch")], env=env, cwd=tmp,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    ranks = {}
    for f in out.glob("rank-*.json"):
        d = json.loads(f.read_text())
        ranks[int(d["env"]["RANK"])] = d
    log = [json.loads(l) for l in (tmp / "slurm.log").read_text().splitlines()] \
        if (tmp / "slurm.log").exists() else []
    return p, ranks, log


def _expect_cpus(planned):
    allowed = os.sched_getaffinity(0)
    inter = set(planned) & allowed
    return sorted(inter) if inter else sorted(allowed)


def _check_ranks(ranks, placement, alloc, cgroup, world=None):
    world = world or placement.world_size
    assert sorted(ranks) == list(range(world))
    for r, d in ranks.items():
        env = d["env"]
        slot = placement.slots[r]
        mates = placement.ranks_on(slot.host)
        gpus = [s.gpu for s in mates]
        if cgroup:
            order = sorted(alloc[slot.host])
            want_cvd = ",".join(str(order.index(g)) for g in gpus)
        else:
            want_cvd = ",".join(map(str, gpus))
        assert env["SLURMD_NODENAME"] == slot.host
        assert env["CUDA_VISIBLE_DEVICES"] == want_cvd, (r, env["CUDA_VISIBLE_DEVICES"])
        # device LOCAL_RANK of the visible list is the planned GPU
        assert gpus[int(env["LOCAL_RANK"])] == slot.gpu
        assert env["RANK"] == str(r)
        assert env["LOCAL_RANK"] == str(slot.local_rank)
        assert env["WORLD_SIZE"] == str(world)
        assert env["LOCAL_WORLD_SIZE"] == str(len(mates))
        assert env["MASTER_ADDR"] == placement.slots[0].host
        assert env["MASTER_PORT"] == str(20000 + 4242 % 10000)
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env["SLURMTOPO_GPU"] == str(slot.gpu)
        assert env["NCCL_IB_HCA"].startswith("=mlx5_")
        assert "NCCL_SOCKET_IFNAME" in env
        assert "SLURMTOPO_RANK_TABLE" not in env  # not leaked to the program
        assert d["cpus"] == _expect_cpus(slot.cpus)


# --------------------------------------------------------------------------
# the whole script under bash


@pytest.mark.parametrize("cgroup", [False, True], ids=["no-cgroup", "cgroup"])
def test_allocation_equals_plan(tmp_path, h100, cgroup):
    """Partial nodes with different GPU indices per node: gpu01 holds 4-7,
    gpu02 holds 1,3,5,7. Without the cgroup CUDA_VISIBLE_DEVICES carries the
    node's numbers, with it 0..3; LOCAL_RANK indexes the planned GPU."""
    layout = Layout(tp=4, dp=2).resolved()
    alloc = {"gpu01": [4, 5, 6, 7], "gpu02": [1, 3, 5, 7]}
    p = fill_placement(h100, list(alloc.items()), layout)
    proc, ranks, log = _run_job(tmp_path, _script(h100, p, layout, [sys.executable, "-c",
                                                                     DUMP_RANK]),
                                alloc, cgroup)
    assert proc.returncode == 0, proc.stderr
    _check_ranks(ranks, p, alloc, cgroup)
    assert "allocation matches the plan" in proc.stderr
    assert f"device cgroup renumbers GPUs: {'yes' if cgroup else 'no'}" in proc.stderr
    # NCCL block: the rails next to the planned GPUs, exact names, in order
    env0 = ranks[0]["env"]
    assert env0["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in (1, 3, 4, 5, 6, 7))
    # srun: arbitrary distribution over the hostfile, rank r on line r
    launch = [e for e in log if e["prog"] == "srun" and e["opts"].get("distribution")]
    assert len(launch) == 1
    # no --nodes: srun >= 24.05 refuses it next to --distribution=arbitrary
    assert launch[0]["opts"]["ntasks"] == "8" and "nodes" not in launch[0]["opts"]
    # every task is a POSIX shell, not Python
    assert launch[0]["argv"][:2] == ["/bin/sh", "-c"]
    assert launch[0]["opts"]["cpu-bind"] == "none"
    hostfile = (tmp_path / ".slurmtopo/runs/4242" / "hostfile").read_text().split()
    assert hostfile == [s.host for s in p.slots]
    rm = json.loads((tmp_path / ".slurmtopo/runs/4242" / "rankmap.json").read_text())
    assert rm["replanned"] is False and rm["cgroup_devices"] is cgroup


def test_cpu_binding_reduced_to_existing_cpus(tmp_path, h100):
    """The H100 type declares 224 CPUs; here only os.sched_getaffinity()
    exist. Ranks on NUMA 0 bind to the intersection, ranks on NUMA 1 (none of
    their CPUs exist) stay unbound, and both are logged."""
    layout = Layout(tp=8).resolved()
    alloc = {"gpu01": list(range(8))}
    p = fill_placement(h100, list(alloc.items()), layout)
    proc, ranks, _ = _run_job(tmp_path, _script(h100, p, layout, [sys.executable, "-c",
                                                                   DUMP_RANK]),
                              alloc, False)
    assert proc.returncode == 0, proc.stderr
    _check_ranks(ranks, p, alloc, False)
    allowed = os.sched_getaffinity(0)
    # one summary line, not one per rank
    summary = [l for l in proc.stderr.splitlines() if "CPU binding:" in l]
    assert len(summary) == 1, proc.stderr
    assert "8 of 8 rank(s) bound with taskset" in summary[0]
    if max(allowed) < 56:
        assert "rank(s) 4-7 run unbound" in summary[0]
    if len(allowed) < 112 and min(allowed) < 56:
        assert "rank(s) 0-3 get only the allowed ones" in summary[0]


def test_cpu_binding_can_be_switched_off(tmp_path, h100):
    layout = Layout(tp=2).resolved()
    alloc = {"gpu01": [0, 1]}
    p = fill_placement(h100, list(alloc.items()), layout)
    proc, ranks, _ = _run_job(tmp_path, _script(h100, p, layout, [sys.executable, "-c",
                                                                   DUMP_RANK]),
                              alloc, False, extra_env={"SLURMTOPO_CPU_BIND": "0"})
    assert proc.returncode == 0, proc.stderr
    assert all(d["cpus"] == sorted(os.sched_getaffinity(0)) for d in ranks.values())
    assert ranks[0]["env"]["SLURMTOPO_CPUS"] == ""


@pytest.mark.parametrize("cgroup", [False, True], ids=["no-cgroup", "cgroup"])
def test_allocation_differs_replans(tmp_path, h100, cgroup):
    """Planned on gpu01+gpu02; Slurm gave gpu03 (GPUs 2-5) and gpu04 (4-7).
    The step re-plans on exactly that and every rank gets the new mapping."""
    layout = Layout(tp=4, dp=2).resolved()
    planned = fill_placement(h100, [("gpu01", [0, 1, 2, 3]), ("gpu02", [0, 1, 2, 3])], layout)
    alloc = {"gpu03": [2, 3, 4, 5], "gpu04": [4, 5, 6, 7]}
    proc, ranks, _ = _run_job(tmp_path, _script(h100, planned, layout,
                                                 [sys.executable, "-c", DUMP_RANK]),
                              alloc, cgroup)
    assert proc.returncode == 0, proc.stderr
    assert "allocation differs from the plan" in proc.stderr
    assert "planned node gpu01 was not allocated" in proc.stderr
    rm = json.loads((tmp_path / ".slurmtopo/runs/4242" / "rankmap.json").read_text())
    assert rm["replanned"] is True
    actual = planned_placement({**rm, "layout": rm["layout"]})
    assert {s.host for s in actual.slots} == set(alloc)
    for s in actual.slots:
        assert s.gpu in alloc[s.host]
    _check_ranks(ranks, actual, alloc, cgroup)


def test_inventory_unreadable_uses_embedded_copy(tmp_path, h100):
    """The recorded inventory path does not exist on the compute node: bind
    falls back to the hardware embedded in the script."""
    inv_copy = tmp_path / "inv.yaml"
    shutil.copy(H100, inv_copy)
    layout = Layout(tp=2).resolved()
    alloc = {"gpu02": [6, 7]}
    p = fill_placement(h100, list(alloc.items()), layout)
    script = _script(h100, p, layout, [sys.executable, "-c", DUMP_RANK],
                     inventory_path=str(inv_copy))
    inv_copy.unlink()
    proc, ranks, _ = _run_job(tmp_path, script, alloc, False)
    assert proc.returncode == 0, proc.stderr
    assert "using the copy embedded in the script" in proc.stderr
    _check_ranks(ranks, p, alloc, False)


def test_scontrol_unavailable_probes_with_srun(tmp_path, h100):
    """No scontrol answer: the batch host uses SLURM_JOB_GPUS, other nodes
    are asked with an srun probe (one task per node)."""
    layout = Layout(tp=2, dp=2).resolved()
    alloc = {"gpu01": [0, 1], "gpu03": [6, 7]}
    p = fill_placement(h100, list(alloc.items()), layout)
    proc, ranks, log = _run_job(tmp_path, _script(h100, p, layout,
                                                   [sys.executable, "-c", DUMP_RANK]),
                                alloc, True, extra_env={"FAKE_SCONTROL_FAIL": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "from srun probe" in proc.stderr and "from SLURM_JOB_GPUS" in proc.stderr
    probes = [e for e in log if e["prog"] == "srun" and e["opts"].get("ntasks-per-node") == "1"]
    assert len(probes) == 1
    _check_ranks(ranks, p, alloc, True)


def test_user_exported_nccl_vars_win(tmp_path, h100):
    layout = Layout(tp=2).resolved()
    alloc = {"gpu01": [0, 1]}
    p = fill_placement(h100, list(alloc.items()), layout)
    proc, ranks, _ = _run_job(tmp_path, _script(h100, p, layout,
                                                 [sys.executable, "-c", DUMP_RANK]),
                              alloc, False, extra_env={"NCCL_SOCKET_IFNAME": "eth9"})
    assert proc.returncode == 0, proc.stderr
    assert "keeping NCCL_SOCKET_IFNAME=eth9" in proc.stderr
    assert ranks[0]["env"]["NCCL_SOCKET_IFNAME"] == "eth9"


# --------------------------------------------------------------------------
# hostile names and arguments


HOSTILE_ARGS = ["$(touch {p}/pwned1)", "`touch {p}/pwned2`", "'; touch {p}/pwned3; '",
                '"; touch {p}/pwned4; "', "a\nb; touch {p}/pwned5", "x;touch {p}/pwned6",
                "${{HOME}}", "--flag=it's", "\\", ""]


def test_hostile_arguments_arrive_intact(tmp_path, h100):
    """Every hostile word reaches the program unchanged and nothing runs."""
    layout = Layout(tp=2).resolved()
    alloc = {"gpu01": [0, 1]}
    p = fill_placement(h100, list(alloc.items()), layout)
    args = [a.format(p=tmp_path) for a in HOSTILE_ARGS]
    script = _script(h100, p, layout, [sys.executable, "-c", DUMP_RANK] + args,
                     job_name=f"$(touch {tmp_path}/pwned7)`touch {tmp_path}/pwned8`'\";x")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    proc, ranks, _ = _run_job(tmp_path, script, alloc, False)
    assert proc.returncode == 0, proc.stderr
    for d in ranks.values():
        assert d["argv"] == args
    assert not list(tmp_path.glob("pwned*"))
    name_line = [l for l in script.splitlines() if l.startswith("#SBATCH --job-name=")]
    assert name_line == ["#SBATCH --job-name=__touch_" + str(tmp_path).replace("/", "_")
                         + "_pwned7__touch_" + str(tmp_path).replace("/", "_")
                         + "_pwned8____x"]


def test_start_time_step_imports_nothing_from_the_submit_directory(tmp_path, h100):
    """Another member of a group-shared submit directory plants a
    ``slurmtopo`` package there. ``python -m slurmtopo bind`` run from the
    submit directory imported it first (code run as the job's user); the
    script now runs it from /, so the planted code never runs, even with an
    empty PYTHONPATH entry (which means the current directory) and a
    relative SLURMTOPO_RUN_DIR (made absolute before leaving)."""
    layout = Layout(tp=2).resolved()
    alloc = {"gpu01": [0, 1]}
    p = fill_placement(h100, list(alloc.items()), layout)
    planted = tmp_path / "slurmtopo"
    planted.mkdir()
    marker = tmp_path / "PLANTED-RAN"
    for name in ("__init__.py", "__main__.py"):
        (planted / name).write_text(f"open({str(marker)!r}, 'a').write('{name}\\n')\n")
    script = _script(h100, p, layout, [sys.executable, "-c", DUMP_RANK])
    proc, ranks, _ = _run_job(tmp_path, script, alloc, False, extra_env={
        "PYTHONPATH": ":" + str(ROOT), "SLURMTOPO_RUN_DIR": "myrun"})
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker.read_text()
    _check_ranks(ranks, p, alloc, False)
    assert (tmp_path / "myrun" / "hostfile").read_text().split() == ["gpu01", "gpu01"]
    # the shell takes the environment from bind's stdout: no env.sh is sourced
    assert "source " not in script and 'eval "$SLURMTOPO_ENV"' in script


def test_job_name_with_newline_is_rejected(h100):
    layout = Layout(tp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1])], layout)
    with pytest.raises(SlurmtopoError, match="newline"):
        SbatchRequest.from_plan(h100, p, layout, ["true"], job_name="a\n#SBATCH --x")


# --------------------------------------------------------------------------
# pure parts


def test_parse_scontrol_job_formats():
    text = textwrap.dedent("""\
        JobId=7 JobName=x
           NodeList=gpu[01-03]
             Nodes=gpu[01-02] CPU_IDs=0-111 Mem=0 GRES=gpu:h100:8(IDX:0-7)
             Nodes=gpu03 CPU_IDs=0-3 Mem=0 GRES=gpu:a:1(IDX:2),gpu:b:1(IDX:5)
             Nodes=old1 CPU_IDs=0 Mem=0 GRES_IDX=gpu(IDX:0-1)
             Nodes=cpu1 CPU_IDs=0 Mem=0 GRES=
             Nodes=bad1 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:N/A)
        """)
    got = parse_scontrol_job(text)
    assert got["gpu01"] == got["gpu02"] == tuple(range(8))
    assert got["gpu03"] == (2, 5)
    assert got["old1"] == (0, 1)
    assert got["cpu1"] == ()
    assert "bad1" not in got


def test_parse_probe():
    assert parse_probe("SLURMTOPO_PROBE n1 0,1\nnoise\nSLURMTOPO_PROBE n2 ?\n") == \
        {"n1": (0, 1), "n2": None}


def _slurm(**answers) -> FakeSlurm:
    """The one in-memory backend, answering the start-time step's questions
    (``job``, ``probe``, ``config``) with the text given, else refusing
    them (SlurmError) like an absent Slurm."""
    return FakeSlurm(answers=answers)


def test_read_allocation_sources(h100):
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "gpu[01-03]", "SLURMD_NODENAME": "gpu01",
           "SLURM_JOB_GPUS": "4,5"}
    run = _slurm(job="  Nodes=gpu02 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)\n",
                 probe="SLURMTOPO_PROBE gpu03 6,7\nSLURMTOPO_PROBE gpu01 4,5\n")
    a = read_allocation(env, run, h100)
    assert a.hosts == ["gpu01", "gpu02", "gpu03"]
    assert a.gpus == {"gpu01": (4, 5), "gpu02": (0, 1), "gpu03": (6, 7)}
    assert a.sources == {"gpu01": "SLURM_JOB_GPUS", "gpu02": "scontrol show job -d",
                         "gpu03": "srun probe (SLURM_STEP_GPUS)"}
    a = read_allocation(env, _slurm(), h100, probe=False)
    assert a.gpus["gpu03"] is None
    with pytest.raises(SlurmtopoError, match="SLURM_JOB_NODELIST"):
        read_allocation({}, _slurm())


def test_detect_constrained(tmp_path):
    none = _slurm()
    assert detect_constrained("yes", {}, none)[0] is True
    assert detect_constrained("no", {}, none)[0] is False
    env = {"SLURM_JOB_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert detect_constrained("auto", env, none)[0] is True
    env = {"SLURM_JOB_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "4,5"}
    assert detect_constrained("auto", env, none)[0] is False
    # undecidable from the numbers (0,1 both ways): scontrol show config
    env = {"SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"}
    cfg = _slurm(config="ConstrainDevices        = yes\n")
    yes, why = detect_constrained("auto", env, cfg, dev_dir=str(tmp_path))
    assert yes and "ConstrainDevices" in why
    yes, why = detect_constrained("auto", env, none, dev_dir=str(tmp_path))
    assert not yes and "could not tell" in why
    with pytest.raises(SlurmtopoError):
        detect_constrained("maybe", env, none)


def test_differences_and_state(h100):
    layout = Layout(tp=2, dp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1]), ("gpu02", [0, 1])], layout)
    ok = Allocation("1", ["gpu01", "gpu02"], {"gpu01": (0, 1, 2), "gpu02": None})
    assert differences(p, ok) == []
    bad = Allocation("1", ["gpu01", "gpu03"], {"gpu01": (2, 3), "gpu03": (0, 1)})
    assert differences(p, bad) == ["gpu01: planned GPUs 0-1, allocated 2-3",
                                   "planned node gpu02 was not allocated"]
    st = allocation_state(h100, bad)
    assert st.free_gpus(h100.nodes["gpu01"]) == (2, 3)
    assert st.free_gpus(h100.nodes["gpu02"]) == ()
    assert st.free_gpus(h100.nodes["gpu03"]) == (0, 1)


def test_replan_falls_back_when_planner_cannot(h100):
    from slurmtopo.errors import PlacementError

    layout = Layout(tp=2, dp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1]), ("gpu02", [0, 1])], layout)
    doc = plan_document(h100, p, layout)
    alloc = Allocation("1", ["gpu04", "gpu03"], {"gpu04": (6, 7), "gpu03": (0, 1)})
    calls = []

    def planner(inv, state, req):
        calls.append(req)
        raise PlacementError("no")

    log = []
    new = replan(doc, h100, alloc, log, planner)
    assert len(calls) == 2  # with, then without requirements
    assert [(s.host, s.gpu) for s in new.slots] == [("gpu04", 6), ("gpu04", 7),
                                                   ("gpu03", 0), ("gpu03", 1)]
    assert "falling back to ranks in allocation order" in log


def test_rank_table_roundtrip_and_local_truth(h100):
    layout = Layout(tp=2, dp=2).resolved()
    p = fill_placement(h100, [("gpu01", [6, 7]), ("gpu02", [0, 3])], layout)
    table = rank_table(p, {"gpu01": (6, 7), "gpu02": None}, constrained=False)
    info = parse_rank_table(table, 3)
    assert (info.host, info.local_rank, info.host_gpus, info.allocated) == \
        ("gpu02", 1, [0, 3], None)
    # the step on gpu02 is renumbered although the batch host was not
    env, cpus, log = rank_launch(info, {"SLURMD_NODENAME": "gpu02", "SLURM_STEP_GPUS": "0,3",
                                        "CUDA_VISIBLE_DEVICES": "0,1"}, {0, 1})
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["LOCAL_RANK"] == "1"
    assert any("renumbers" in line for line in log)
    assert cpus == (0, 1)
    with pytest.raises(SlurmtopoError, match="srun started it on gpu01"):
        rank_launch(info, {"SLURMD_NODENAME": "gpu01"}, {0})
    with pytest.raises(SlurmtopoError, match="rank 9"):
        parse_rank_table(table, 9)


def test_rank_main_errors_are_one_line(capsys):
    assert rank_main(["--", "true"], {}) == 2
    assert "SLURM_PROCID is not set" in capsys.readouterr().err
    assert rank_main(["--", "true"], {"SLURM_PROCID": "0"}) == 2
    assert "no rank table" in capsys.readouterr().err


def test_rank_main_uses_only_a_rank_table_of_the_users_alone(tmp_path, h100, capsys):
    """The Python launcher reads SLURMTOPO_RANK_TABLE_FILE by path; a table
    others may write (or another user's) is refused on the open file."""
    res = _bound_one_node(h100, tmp_path)
    table = write_run_dir(res, str(tmp_path / "run"), {}).paths
    path = next(p for p in table if p.endswith("ranktable"))
    env = {"SLURM_PROCID": "0", "SLURMD_NODENAME": "gpu01", "SLURMTOPO_RANK_TABLE_FILE": path,
           "PATH": os.environ["PATH"]}
    os.chmod(path, 0o664)
    assert rank_main(["--", "true"], env) == 2
    assert "is not yours alone" in capsys.readouterr().err


def test_read_plan_rejects_garbage():
    with pytest.raises(SlurmtopoError, match="not a slurmtopo plan"):
        read_plan("{nope")
    with pytest.raises(SlurmtopoError, match="not a slurmtopo plan"):
        read_plan('{"slurmtopo": "inventory"}')
    with pytest.raises(SlurmtopoError, match="newer"):
        read_plan('{"slurmtopo": "plan", "version": 99, "layout": {}, "ranks": []}')


def _bound_one_node(h100, tmp_path):
    """bind() of a 2-rank plan on gpu01 whose allocation matches."""
    layout = Layout(tp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1])], layout)
    doc = plan_document(h100, p, layout, inventory_path=str(H100))
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "gpu01", "SLURM_JOB_GPUS": "0,1",
           "CUDA_VISIBLE_DEVICES": "0,1"}
    return bind(doc, env, _slurm(), dev_dir=str(tmp_path))


def test_large_rank_table_goes_by_file(tmp_path, h100, monkeypatch):
    res = _bound_one_node(h100, tmp_path)
    monkeypatch.setattr(limits, "ENV_TABLE_LIMIT", 10)
    text, by_file = env_script(res, str(tmp_path), {}, [])
    assert by_file and "SLURMTOPO_RANK_TABLE_FILE=" in text


def test_replan_keeps_requirements(h100):
    """The request travels in the script: a re-plan still honours
    --require, and exclusivity (already granted) does not get in the way."""
    from slurmtopo.job.request import JobRequest

    layout = Layout(tp=8, dp=2).resolved()
    req = JobRequest(layout=layout, require={"tp": "node"}, exclusive=True, gpus_per_node=8,
                     message_bytes={"dp": 1 << 30})
    planned = fill_placement(h100, [("gpu01", range(8)), ("gpu02", range(8))], layout)
    doc = json.loads(dumps_plan(plan_document(h100, planned, layout, req)))
    assert doc["request"]["require"] == {"tp": "node"}
    alloc = Allocation("1", ["gpu04", "gpu03"], {"gpu03": tuple(range(8)),
                                                  "gpu04": tuple(range(8))})
    log = []
    new = replan(doc, h100, alloc, log)
    assert {s.host for s in new.slots} == {"gpu03", "gpu04"}
    assert not any("failed" in line for line in log), log
    for g in new.groups["tp"]:
        assert len({new.slots[r].host for r in g}) == 1


def test_local_numbers_that_cannot_tell_keep_the_table(h100):
    """GPUs 0,1 read the same with and without the cgroup: no override, no log."""
    layout = Layout(tp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1])], layout)
    info = parse_rank_table(rank_table(p, {"gpu01": (0, 1)}, constrained=True), 1)
    env, _, log = rank_launch(info, {"SLURM_STEP_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"},
                              {0})
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert not any("renumber" in line for line in log)


def test_big_inventory_is_embedded_cut_down(h100, monkeypatch):
    from slurmtopo.inventory.schema import parse_inventory

    fat = load_inventory(EXAMPLES / "h100-32node-fattree.yaml")
    layout = Layout(tp=8, dp=2).resolved()
    p = fill_placement(fat, [("dgx003", range(8)), ("dgx012", range(8))], layout)
    monkeypatch.setattr(planwrite, "EMBED_LIMIT", 0)
    doc = plan_document(fat, p, layout)
    inv = parse_inventory(doc["inventory"], "<embedded>")
    assert sorted(inv.nodes) == ["dgx003", "dgx012"]
    assert {s.name for s in inv.fabric.switches} == {"leaf01", "leaf02", "spine1", "spine2"}
    # a re-plan onto a node the cut-down copy lacks assumes the same hardware
    log = []
    alloc = Allocation("1", ["dgx003", "dgx020"], {"dgx003": tuple(range(8)),
                                                   "dgx020": tuple(range(8))})
    inv2 = with_allocated_nodes(inv, alloc, log)
    assert inv2.nodes["dgx020"].hardware == inv.nodes["dgx003"].hardware
    assert "dgx020" in log[0]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_one_nic_rule_for_plan_and_start_time(name):
    """The start-time fallback (ranks in allocation order) gives every GPU
    the NICs the planner gives it, on every preset (they once disagreed on
    hgx-a100-8 GPU 1: mlx5_1 first from the planner, mlx5_0 at start)."""
    hw = preset(name)
    inv = Inventory(nodes={"n1": Node(name="n1", hardware=hw)})
    p = fill_placement(inv, [("n1", [g.index for g in hw.gpus])],
                       Layout(tp=hw.gpu_count).resolved())
    assert [s.nics for s in p.slots] == [nic_choice(hw)[i] for i in range(hw.gpu_count)]


def test_hgx_a100_gpu1_nic_order():
    hw = preset("hgx-a100-8")
    inv = Inventory(nodes={"n1": Node(name="n1", hardware=hw)})
    p = fill_placement(inv, [("n1", [1])], Layout().resolved())
    assert p.slots[0].nics[0] == "mlx5_1"


# --------------------------------------------------------------------------
# the plan document's rank columns (version 2) and version 1


def _slots(p):
    return [(s.rank, s.host, s.gpu, s.local_rank, s.nics, s.cpus, s.numa_node) for s in p.slots]


@pytest.mark.parametrize("pack_bytes", [1 << 30, 0])
def test_plan_columns_round_trip_plain_and_packed(monkeypatch, pack_bytes):
    fat = load_inventory(EXAMPLES / "h100-32node-fattree.yaml")
    layout = Layout(tp=8, pp=2, dp=2).resolved()
    # hosts out of name order, GPUs out of index order: the columns keep both
    p = fill_placement(fat, [("dgx017", [7, 6, 5, 4, 3, 2, 1, 0]), ("dgx002", range(8)),
                             ("dgx031", range(8)), ("dgx009", range(8))], layout)
    monkeypatch.setattr(planwrite, "PACK_BYTES", pack_bytes)
    text = dumps_plan(plan_document(fat, p, layout))
    doc = read_plan(text)
    assert doc["version"] == 2
    assert ("packed" in doc["ranks"]) == (pack_bytes == 0)
    assert ("packed" in doc["inventory"]) == (pack_bytes == 0)
    assert all(line[:1] in ("{", "}", " ") for line in text.splitlines())
    back = planned_placement(doc)
    assert _slots(back) == _slots(p) and back.hosts == p.hosts
    assert back.groups == p.groups
    log = []
    inv = load_inventory_for_bind(dict(doc, inventory_path=None), None, log)
    assert set(inv.nodes) >= {"dgx017", "dgx002"}
    # deterministic: the same plan gives the same bytes
    assert dumps_plan(plan_document(fat, p, layout)) == text


def test_plan_version_1_is_still_read(h100):
    from slurmtopo.plan.rankmap import slot_dict

    layout = Layout(tp=2, dp=2).resolved()
    p = fill_placement(h100, [("gpu02", [1, 0]), ("gpu01", [0, 1])], layout)
    doc = plan_document(h100, p, layout)
    v1 = dict(doc, version=1, ranks=[slot_dict(s) for s in p.slots])
    back = planned_placement(read_plan(dumps_plan(v1)))
    assert _slots(back) == _slots(p)


def test_damaged_packed_ranks_are_one_error(h100, monkeypatch):
    layout = Layout(tp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1])], layout)
    monkeypatch.setattr(planwrite, "PACK_BYTES", 0)
    doc = json.loads(dumps_plan(plan_document(h100, p, layout)))
    doc["ranks"]["data"][0] = "!" + doc["ranks"]["data"][0][1:]
    with pytest.raises(SlurmtopoError, match="packed ranks are damaged"):
        planned_placement(doc)
    doc["ranks"] = {"packed": "lzma", "data": []}
    with pytest.raises(SlurmtopoError, match="unknown packing"):
        planned_placement(doc)
    good = plan_document(h100, p, layout)
    cols = plandoc.unpack(good["ranks"])
    cols["gpu"] = cols["gpu"][:1]
    with pytest.raises(SlurmtopoError, match="malformed rank columns"):
        planned_placement(dict(good, ranks=cols))


def test_run_dir_has_the_full_rank_table(tmp_path, h100):
    res = _bound_one_node(h100, tmp_path)
    paths = write_run_dir(res, str(tmp_path / "run"), {}).paths
    csv_text = (tmp_path / "run" / "rankmap.csv").read_text()
    assert str(tmp_path / "run" / "rankmap.csv") in paths
    assert [l.split(",")[:4] for l in csv_text.splitlines()[1:]] == \
        [["0", "gpu01", "0", "0"], ["1", "gpu01", "0", "1"]]


def test_big_job_log_names_a_few_nodes(tmp_path):
    """A 20-node job logs Slurm's node list as given, the first
    limits.LOG_HOSTS nodes one line each, then how many more and where
    every rank is, instead of a line a node."""
    inv = load_inventory(EXAMPLES / "h100-32node-fattree.yaml")
    layout = Layout(tp=8, dp=20).resolved()
    hosts = [f"dgx{i:03d}" for i in range(1, 21)]
    p = fill_placement(inv, [(h, range(8)) for h in hosts], layout)
    doc = plan_document(inv, p, layout, inventory_path=str(EXAMPLES / "h100-32node-fattree.yaml"))
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "dgx[001-020]", "SLURMD_NODENAME": "dgx001",
           "SLURM_JOB_GPUS": "0-7", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    job = "   Nodes=dgx[001-020] CPU_IDs=0-223 Mem=0 GRES=gpu:8(IDX:0-7)\n"
    res = bind(doc, env, _slurm(job=job), dev_dir=str(tmp_path), probe=False)
    assert res.log[1] == "job 5: 20 node(s) dgx[001-020]"
    gpus = [l for l in res.log if ": GPUs 0-7 (from" in l]
    ranks = [l for l in res.log if ": ranks " in l]
    assert [l.split(":")[0].strip() for l in gpus] == hosts[:limits.LOG_HOSTS]
    assert [l.split(":")[0].strip() for l in ranks] == hosts[:limits.LOG_HOSTS]
    assert ranks[1] == ("  dgx002: ranks 8-15 on GPUs 0,1,2,3,4,5,6,7 -> "
                        "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7")
    more = [l for l in res.log if l.startswith("  ... and ")]
    assert more == [f"  ... and {20 - limits.LOG_HOSTS} more node(s) (GPUs of every node: the "
                    "allocation in rankmap.json)",
                    f"  ... and {20 - limits.LOG_HOSTS} more node(s) (every rank: rankmap.csv "
                    "in the run directory)"]


# --------------------------------------------------------------------------
# MASTER_ADDR: rank 0's node by a name that resolves (binding.master)

def test_master_address_keeps_a_name_that_resolves():
    from slurmtopo.binding.master import master_address

    slurm = _slurm(**{"addr gpu01": "10.0.0.1"})
    assert master_address("gpu01", slurm, lambda n: True) == ("gpu01", None)
    assert slurm.asked == []                       # Slurm not even asked


def test_master_address_falls_back_to_node_addr():
    from slurmtopo.binding.master import master_address

    slurm = _slurm(**{"addr node1": "127.0.0.1"})
    addr, note = master_address("node1", slurm, lambda n: n != "node1")
    assert addr == "127.0.0.1" and slurm.asked == ["addr node1"]
    assert note == ("node name node1 does not resolve here: MASTER_ADDR is its NodeAddr "
                    "127.0.0.1 (scontrol show node)")
    # NodeAddr that does not resolve either, or none at all: the name, with a warning
    for slurm in (_slurm(**{"addr node1": "bad.example"}), _slurm()):
        addr, note = master_address("node1", slurm, lambda n: False)
        assert addr == "node1" and "the ranks may not find MASTER_ADDR" in note


def test_master_address_real_resolver():
    from slurmtopo.binding.master import resolves

    assert resolves("127.0.0.1") and resolves("localhost")
    assert not resolves("no-such-node.invalid")     # RFC 6761: never resolves
    assert not resolves("a" * 300)


def test_bind_logs_the_node_addr_it_gives(h100, tmp_path):
    from slurmtopo.binding.step import bind

    layout = Layout(tp=2).resolved()
    p = fill_placement(h100, [("gpu01", [0, 1])], layout)
    doc = json.loads(dumps_plan(plan_document(h100, p, layout, inventory_path=str(H100))))
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu01", "SLURMD_NODENAME": "gpu01",
           "SLURM_JOB_GPUS": "0,1"}
    slurm = _slurm(**{"addr gpu01": "192.0.2.7"})
    res = bind(doc, env, slurm, probe=False, allowed={0}, resolve=lambda n: n != "gpu01")
    assert res.job_env["MASTER_ADDR"] == "192.0.2.7"
    assert any("MASTER_ADDR is its NodeAddr 192.0.2.7" in line for line in res.log)
    res = bind(doc, env, _slurm(), probe=False, allowed={0}, resolve=lambda n: True)
    assert res.job_env["MASTER_ADDR"] == "gpu01"


# --------------------------------------------------------------------------
# NCCL_MNNVL_CLIQUE_ID per IMEX-channel segment (binding.imex)

def _one_clique_job(tmp_path):
    """Four GB200 trays of one NVLink clique (uuid r1, clique 7), a TP4 x
    DP4 job on all of them, its plan document and its environment."""
    from slurmtopo.inventory.model import NvlinkDomain

    hw = preset("gb200-nvl72-tray")
    dom = NvlinkDomain("uuid-r1", 7)
    hosts = [f"tray{i}" for i in range(1, 5)]
    inv = Inventory(nodes={h: Node(h, hw, nvlink_domain=dom) for h in hosts})
    layout = Layout(tp=4, dp=4).resolved()
    p = fill_placement(inv, [(h, range(4)) for h in hosts], layout)
    doc = json.loads(dumps_plan(plan_document(inv, p, layout)))
    env = {"SLURM_JOB_ID": "31", "SLURM_JOB_NODELIST": "tray[1-4]", "SLURMD_NODENAME": "tray1",
           "SLURM_JOB_GPUS": "0-3", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    job = "   Nodes=tray[1-4] CPU_IDs=0-71 Mem=0 GRES=gpu:4(IDX:0-3)\n"
    return doc, env, job, hosts


#: `scontrol show resources 31` (25.11, src/scontrol/info_job.c) when Slurm put
#: tray1+tray3 in one segment and tray2+tray4 in the other, a channel each
RESOURCES = "".join(f"Node=tray{i} AbstractCores=0-71 Memory=0 Channel={c}\n"
                    f" Gres=gpu Type=gb200 Count=4 Index=0-3\n"
                    for i, c in ((1, 5), (2, 9), (3, 5), (4, 9)))


def _bind_one_clique(tmp_path, extra_env, **answers):
    doc, env, job, hosts = _one_clique_job(tmp_path)
    env.update(extra_env)
    slurm = _slurm(job=job, **answers)
    res = bind(doc, env, slurm, dev_dir=str(tmp_path), probe=False, allowed={0},
               resolve=lambda n: True)
    return res, slurm


def test_clique_split_over_segments_gets_an_id_per_segment(tmp_path):
    """The plan asked one IMEX channel per segment (SLURM_NETWORK at start)
    and Slurm put the clique's trays in two segments: each segment's hosts
    get their own NCCL_MNNVL_CLIQUE_ID (NCCL: MNNVL only between ranks of
    one <UUID, clique>), above the fabric's clique 7, in every launch path."""
    from slurmtopo.binding.launcher import parse_rank_table, rank_launch
    from slurmtopo.binding.step import task_env_parts

    res, slurm = _bind_one_clique(tmp_path, {"SLURM_NETWORK": "unique-channel-per-segment"},
                                  resources=RESOURCES)
    assert "resources" in slurm.asked
    want = {"tray1": "8", "tray3": "8", "tray2": "9", "tray4": "9"}
    assert {h: e["NCCL_MNNVL_CLIQUE_ID"] for h, e in res.host_env.items()} == want
    assert "NCCL_MNNVL_CLIQUE_ID" not in res.job_env  # never job-wide
    # the task shell (what srun runs on each node) exports it for its host only
    whole = task_env_parts(res, {}).whole
    for r in (0, 5, 10, 15):
        host = res.placement.slots[r].host
        got = subprocess.run(["/bin/sh", "-c", whole, "sh", "/usr/bin/env"],
                             env={"PATH": "/usr/bin:/bin", "SLURM_PROCID": str(r),
                                  "SLURMD_NODENAME": host, "SLURMTOPO_CPU_BIND": "0"},
                             capture_output=True, text=True)
        assert got.returncode == 0, got.stderr
        assert f"NCCL_MNNVL_CLIQUE_ID={want[host]}" in got.stdout.splitlines(), (r, host)
    # the older per-rank launcher reads it from the rank table
    info = parse_rank_table(res.table, 6)
    env, _, _ = rank_launch(info, {"SLURMD_NODENAME": info.host}, {0})
    assert env["NCCL_MNNVL_CLIQUE_ID"] == want[info.host]
    # and rankmap.json records what each host got
    write_run_dir(res, str(tmp_path / "run"), {})
    doc = json.loads((tmp_path / "run" / "rankmap.json").read_text())
    assert doc["host_env"]["tray2"] == {"NCCL_MNNVL_CLIQUE_ID": "9"}


def test_clique_ids_only_with_unique_channels_and_a_split(tmp_path):
    # one channel for the job: nothing to split, Slurm not even asked
    res, slurm = _bind_one_clique(tmp_path, {}, resources=RESOURCES)
    assert res.host_env == {} and "resources" not in slurm.asked
    # per-segment channels, but one segment holds the whole clique
    same = RESOURCES.replace("Channel=9", "Channel=5")
    res, _ = _bind_one_clique(tmp_path, {"SLURM_NETWORK": "unique-channel-per-segment"},
                              resources=same)
    assert res.host_env == {}
    # Slurm cannot say where each host landed: each host alone (no MNNVL
    # between trays, never across two channels)
    res, _ = _bind_one_clique(tmp_path, {"SLURM_NETWORK": "unique-channel-per-segment"})
    assert sorted(e["NCCL_MNNVL_CLIQUE_ID"] for e in res.host_env.values()) == \
        ["10", "11", "8", "9"]
    assert any("each host taken as its own segment" in line for line in res.log)
    # the user's own value wins
    res, _ = _bind_one_clique(tmp_path, {"SLURM_NETWORK": "unique-channel-per-segment",
                                         "NCCL_MNNVL_CLIQUE_ID": "3"}, resources=RESOURCES)
    assert res.host_env == {}
    assert any("keeping NCCL_MNNVL_CLIQUE_ID=3" in line for line in res.log)


def test_parse_channels():
    from slurmtopo.binding.imex import parse_channels, wants_channels

    assert parse_channels(RESOURCES) == {"tray1": 5, "tray2": 9, "tray3": 5, "tray4": 9}
    assert parse_channels("Node=a AbstractCores=0 Memory=0\n") == {}
    assert wants_channels({"SLURM_NETWORK": "foo,unique-channel-per-segment"})
    assert not wants_channels({"SLURM_NETWORK": "unique-channel-per-segment-x"})
