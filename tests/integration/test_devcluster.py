"""The dev cluster itself: a real slurmctld/slurmd that schedule fake GPUs
and honour gres.conf/topology.conf files, including ones handed in later
(the way slurmtopo-generated files are loaded)."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.helpers import it_config, node_records, scontrol_topology

ROOT = Path(__file__).resolve().parents[2]
# scripts/devcluster.py, as loaded by this directory's conftest.py
devcluster_mod = sys.modules.get("slurmtopo_devcluster")
if devcluster_mod is None:
    _spec = importlib.util.spec_from_file_location("slurmtopo_devcluster", ROOT / "scripts" / "devcluster.py")
    devcluster_mod = importlib.util.module_from_spec(_spec)
    sys.modules["slurmtopo_devcluster"] = devcluster_mod
    _spec.loader.exec_module(devcluster_mod)
DevClusterError = devcluster_mod.DevClusterError

pytestmark = pytest.mark.integration


def _env_of(text: str) -> dict:
    return dict(l.split("=", 1) for l in text.splitlines() if "=" in l)


def _ts(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S")


def _blockers(cluster, *nodes):
    """One exclusive long job per node; returns {node: jobid} once all run."""
    jobs = {n: cluster.sbatch("-w", n, "--exclusive", "-t", "2", wrap="sleep 120") for n in nodes}
    for j in jobs.values():
        cluster.wait_state(j, {"RUNNING"})
    return jobs


def test_nodes_are_idle_with_their_gpus(devcluster):
    nodes = node_records(devcluster)
    assert sorted(n["name"] for n in nodes) == sorted(devcluster.nodes) == \
        ["node1", "node2", "node3", "node4"]
    for n in nodes:
        assert n["state"] == "idle", n
        # S:0-1: slurmctld took the Cores= of gres.conf (GPUs 0-3 socket 0, 4-7 socket 1)
        assert n["gres"] == "gpu:8(S:0-1)", n
    for name in devcluster.nodes:
        text = devcluster.run(["scontrol", "show", "node", name]).stdout
        assert re.search(r"\bGres=gpu:8\b", text), text
        assert "CPUTot=16" in text and "Sockets=2" in text, text


def test_topology_has_two_leaves_under_a_spine(devcluster):
    topo = scontrol_topology(devcluster)
    assert topo["leaf1"]["Nodes"] == "node[1-2]"
    assert topo["leaf2"]["Nodes"] == "node[3-4]"
    assert topo["spine"]["Switches"] == "leaf[1-2]"
    assert topo["spine"]["Level"] == "1"


def test_gpu_job_sees_the_gpus_it_was_given(devcluster):
    release = devcluster.dir / "release-gpu-job"
    release.unlink(missing_ok=True)
    job = devcluster.sbatch("-w", "node1", "--gres=gpu:2",
                            wrap=f"env; while [ ! -e {release} ]; do sleep 0.1; done")
    devcluster.wait_state(job, {"RUNNING"})
    held = devcluster.gpus(job)          # only shown while it runs
    release.touch()
    assert devcluster.wait_job(job, timeout=30) == "COMPLETED"
    env = _env_of(devcluster.output(job))
    assert list(held) == ["node1"] and len(held["node1"]) == 2, devcluster.job(job)
    ids = ",".join(map(str, held["node1"]))
    assert env["SLURM_JOB_GPUS"] == ids
    assert env["CUDA_VISIBLE_DEVICES"] == ids       # no device cgroup: the node's own numbers
    assert env["GPU_DEVICE_ORDINAL"] == ids
    assert env["SLURM_CONF"] == str(devcluster.conf)


def test_gpus_are_handed_out_once(devcluster):
    a = devcluster.sbatch("-w", "node2", "--gres=gpu:4", wrap="sleep 60")
    b = devcluster.sbatch("-w", "node2", "--gres=gpu:4", wrap="sleep 60")
    c = devcluster.sbatch("-w", "node2", "--gres=gpu:1", wrap="true")
    devcluster.wait_state(a, {"RUNNING"})
    devcluster.wait_state(b, {"RUNNING"})
    ga, gb = devcluster.gpus(a)["node2"], devcluster.gpus(b)["node2"]
    assert sorted(ga + gb) == list(range(8)), (ga, gb)
    time.sleep(2)                                   # a couple of scheduling passes
    assert devcluster.job(c)["JobState"] == "PENDING"
    assert devcluster.job(c)["Reason"] == "Resources"
    devcluster.run(["scancel", str(a)])
    assert devcluster.wait_job(c, timeout=30) == "COMPLETED"


def test_srun_across_two_nodes(devcluster):
    p = devcluster.run("srun -N2 --ntasks-per-node=1 --gres=gpu:1 "
                       "bash -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES'", timeout=60)
    lines = sorted(p.stdout.split("\n")[:-1])
    assert len(lines) == 2, p.stdout
    assert len({l.split()[0] for l in lines}) == 2, p.stdout
    assert all(l.split()[1] == "0" for l in lines), p.stdout


def test_switches_holds_a_job_until_one_leaf_can_take_it(devcluster):
    # node1 (leaf1) and node3 (leaf2) busy: node2 + node4 are free, but on two leaves
    blockers = _blockers(devcluster, "node1", "node3")
    job = devcluster.sbatch("-N2", "--exclusive", "--switches=1", wrap="true")
    time.sleep(3)
    info = devcluster.job(job)
    assert info["JobState"] == "PENDING", info
    devcluster.run(["scancel", str(blockers["node1"])])
    assert devcluster.wait_job(job, timeout=30) == "COMPLETED"
    assert devcluster.job(job)["NodeList"] == "node[1-2]"      # one leaf


def test_switches_wait_time_runs_across_leaves_after_it(devcluster):
    _blockers(devcluster, "node1", "node3")
    job = devcluster.sbatch("-N2", "--exclusive", "--switches=1@00:00:03", wrap="true")
    assert devcluster.wait_job(job, timeout=40) == "COMPLETED"
    info = devcluster.job(job)
    assert info["NodeList"] == "node[2,4]", info
    waited = (_ts(info["StartTime"]) - _ts(info["SubmitTime"])).total_seconds()
    assert waited >= 2, info                       # it did wait for one leaf first


def test_reconfigure_loads_a_newscontrol_topology(devcluster):
    try:
        devcluster.reconfigure(topology_conf="# one leaf, as a generator might write it\n"
                                             "SwitchName=rack0 Nodes=node[1-4]\n")
        topo = scontrol_topology(devcluster)
        assert list(topo) == ["rack0"] and topo["rack0"]["Nodes"] == "node[1-4]"
        # four nodes under one switch now: --switches=1 is satisfied at once
        job = devcluster.sbatch("-N4", "--switches=1@00:01:00", wrap="true")
        assert devcluster.wait_job(job, timeout=20) == "COMPLETED"
        info = devcluster.job(job)
        assert (_ts(info["StartTime"]) - _ts(info["SubmitTime"])).total_seconds() < 10, info
    finally:
        devcluster.reset()
    assert set(scontrol_topology(devcluster)) == {"leaf1", "leaf2", "spine"}


def test_a_bad_topology_never_takes_the_controller_down(devcluster, monkeypatch):
    cycle = "SwitchName=a Switches=b\nSwitchName=b Switches=a\n"
    with pytest.raises(DevClusterError, match="cycle"):
        devcluster.reconfigure(topology_conf=cycle)
    # and if it gets past the check, slurmctld dies ("not a tree") and is brought back
    monkeypatch.setattr(devcluster_mod, "check_topology", lambda text, nodes, plugin="tree": [])
    with pytest.raises(DevClusterError, match=r"(?s)restored.*not a tree"):
        devcluster.reconfigure(topology_conf=cycle)
    assert set(scontrol_topology(devcluster)) == {"leaf1", "leaf2", "spine"}
    job = devcluster.sbatch("--gres=gpu:1", wrap="true")
    assert devcluster.wait_job(job, timeout=20) == "COMPLETED"


def test_reconfigure_loads_a_generated_gres_conf(devcluster):
    # what a generator writes for real nodes: /dev paths, per-GPU Cores= and Links=
    lines = ["AutoDetect=off"]
    for g in range(8):
        links = ",".join("-1" if o == g else "18" for o in range(8))
        lines.append(f"NodeName=node[1-4] Name=gpu File=/dev/nvidia{g} Cores=0-7 Links={links}")
    try:
        devcluster.reconfigure(gres_conf="\n".join(lines) + "\n")
        installed = (devcluster.dir / "etc" / "gres.conf").read_text()
        assert f"File={devcluster.dir}/dev/nvidia3 " in installed    # /dev rewritten
        nodes = node_records(devcluster)
        assert {n["gres"] for n in nodes} == {"gpu:8(S:0)"}            # new Cores= taken
        job = devcluster.sbatch("--gres=gpu:8", wrap="env")
        assert devcluster.wait_job(job, timeout=20) == "COMPLETED"
        assert _env_of(devcluster.output(job))["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    finally:
        devcluster.reset()
    nodes = node_records(devcluster)
    assert {n["gres"] for n in nodes} == {"gpu:8(S:0-1)"}


def test_command_line_status_and_env(devcluster):
    script = str(ROOT / "scripts" / "devcluster.py")
    st = devcluster.run([sys.executable, script, "status", "--dir", str(devcluster.dir)])
    assert "slurmctld" in st.stdout and "not running" not in st.stdout, st.stdout
    env = devcluster.run([sys.executable, script, "env", "--dir", str(devcluster.dir)]).stdout
    assert f"export SLURM_CONF={devcluster.conf}" in env
    # the printed env is enough for the client tools
    p = subprocess.run(["bash", "-c", env + "\nsinfo -h -o %D"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"})
    assert p.stdout.strip() == "4", p


def test_cgroup_devices_mode_fences_off_other_gpus(tmp_path):
    """--cgroup-devices: a job can open only the GPU devices it was given
    (its own small cluster; node names differ so its cgroups cannot clash)."""
    cfg = it_config(dir=str(tmp_path / "cg"), nodes=1, gpus=4, node_prefix="cgnode",
                    cgroup_devices=True, port=devcluster_mod.free_port_base(1, start=36817))
    dc = devcluster_mod.DevCluster.up(cfg)
    try:
        dev = dc.dir / "dev"
        script = ("echo CVD=$CUDA_VISIBLE_DEVICES; "
                  f"for i in 0 1 2 3; do python3 -c \"import os\ntry: os.open('{dev}/nvidia$i', os.O_RDONLY)\n"
                  "except OSError as e: print('errno$i', e.errno)\"; done")
        p = dc.run(["srun", "-w", "cgnode1", "--gres=gpu:2", "bash", "-c", script], timeout=60)
        out = p.stdout
        assert "CVD=0,1" in out, out
        # the given GPUs pass the device cgroup (ENXIO: no driver behind the fake node);
        # the others are refused by it (EPERM)
        assert "errno0 6" in out and "errno1 6" in out, out
        assert "errno2 1" in out and "errno3 1" in out, out
    finally:
        dc.down()


def test_the_topology_param_under_test_is_in_force(devcluster):
    """scripts/test.sh runs 25.11 with TopologyParam=SwitchAsNodeRank (nodes
    ordered by switch): the rank checks of that run are made with it on."""
    want = os.environ.get("SLURMTOPO_IT_TOPOLOGY_PARAM", "")
    conf = devcluster.run(["scontrol", "show", "config"]).stdout
    line = next((l for l in conf.splitlines() if l.startswith("TopologyParam")), "")
    if want:
        assert want in line, line
    else:
        assert line.split("=", 1)[-1].strip() in ("", "(null)"), line
