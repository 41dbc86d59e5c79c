"""Real torch.distributed ranks of each framework's layout, launched by
`slurmtopo sbatch` on the dev cluster (issue 23, docs/frameworks.md).

Every rank runs tests/integration/torch_rank.py: it joins the job over gloo
with the MASTER_ADDR/MASTER_PORT/RANK slurmtopo (or torchrun) gave it,
builds the framework's groups and all-gathers ``(rank, node, GPU)`` inside
each. The test checks that every group really formed with the members the
framework's own code gives (the fixtures recorded from torchtitan,
DeepSpeed and Megatron-LM, tests/fixtures/frameworks/), that each member
runs on the node and GPU the rank map `slurmtopo bind` wrote says, and that
the groups the style keeps inside a node (TP, the FSDP shard group) are
there while HSDP's replicas go across nodes.

One 8-rank job per framework style, 4 GPUs of each of two nodes, under
srun. And every launch line of the docs (tests/doclaunch.py, issue 32), run
as printed but for the inventory (the dev cluster's) and ``--dry-run``
(dropped: it submits), from a directory holding the ``train.py`` it names:
the framework pages' lines start real torch.distributed ranks (torchtitan's
through the command's own torchrun, once per node), the others a rank that
records its environment, and the refusals are checked as refusals.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doclaunch import HOW
from tests.integration.helpers import run_slurmtopo
from tests.integration.ranks import INV, Run, cluster, master_addr  # noqa: F401

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RANK = ROOT / "tests" / "integration" / "torch_rank.py"
FIXTURES = ROOT / "tests" / "fixtures" / "frameworks"

#: (framework, fixture case, slurmtopo options, knobs for torch_rank.py,
#:  kinds inside one node, kinds across two nodes)
JOBS = {
    # Megatron TP x DP with expert parallelism (MoE over the dp ranks)
    "megatron-tp-dp": ("megatron",
                       {"cp": 1, "dp": 4, "ep": 4, "expert_tp": 1, "order": "tp-cp-ep-dp-pp",
                        "pp": 1, "tp": 2},
                       ["--tp", "2", "--dp", "4", "--ep", "4", "--expert-tp", "1"],
                       {"tp": 2, "dp": 4, "ep": 4, "expert_tp": 1},
                       ["tp"], ["dp"]),
    # torchtitan HSDP + TP + MoE: shard x tp fills a node, replicas across
    "torchtitan-hsdp": ("torchtitan",
                        {"cp": 1, "dp_replicate": 2, "dp_shard": 2, "ep": 2, "pp": 1, "tp": 2,
                         "world_size": 8},
                        ["--dp-replicate", "2", "--dp-shard", "2", "--tp", "2", "--ep", "2"],
                        {"dp_replicate": 2, "dp_shard": 2, "tp": 2, "ep": 2},
                        ["tp", "dp_shard", "ep"], ["dp_replicate"]),
    # DeepSpeed pipe/data/model with ZeRO-1
    "deepspeed-zero1": ("deepspeed", {"dp": 2, "ep": 1, "pp": 2, "tp": 2},
                        ["--pp", "2", "--tp", "2", "--dp", "2", "--zero-stage", "1"],
                        {"pp": 2, "tp": 2, "dp": 2, "zero_stage": 1},
                        ["slice_parallel"], []),
}

CASES = [pytest.param(name, "srun", id=f"{name}-srun") for name in JOBS]


def _recorded(framework, case):
    """The groups the framework's own code built for ``case`` (fixture)."""
    doc = json.loads((FIXTURES / f"{framework}.json").read_text())
    for c in doc["cases"]:
        if c["case"] == case:
            return c["groups"]
    raise AssertionError(f"no {framework} fixture case {case}")


def _group_of(groups, rank):
    (g,) = [g for g in groups if rank in g]
    return g


def _check_groups(placement, files, ours, job_id, inside, across, hosts):
    """Every rank's torch_rank.py record against the rank map: the groups
    formed with exactly the framework's members, each on its planned node
    and GPU; ``inside`` kinds on one node, ``across`` kinds on ``hosts``."""
    slots = placement.slots
    world = placement.world_size
    assert sorted(files) == list(range(world))
    for r, got in files.items():
        assert got["world"] == world
        assert (got["host"], got["gpu"]) == (slots[r].host, slots[r].gpu), (r, got)
        assert got["master_addr"] == master_addr(slots[0].host)
        assert got["master_port"] == str(20000 + job_id % 10000)
        assert set(got["groups"]) == set(ours), r
        for kind, seen in got["groups"].items():
            want = _group_of(ours[kind], r)
            assert seen["ranks"] == want, (r, kind, seen["ranks"], want)
            # the members answered over the group itself, in group-rank order
            assert [m["rank"] for m in seen["gathered"]] == want, (r, kind)
            for m in seen["gathered"]:
                assert (m["host"], m["gpu"]) == (slots[m["rank"]].host, slots[m["rank"]].gpu)
    for kind in inside:
        for g in ours[kind]:
            assert len({slots[x].host for x in g}) == 1, (kind, g)
    for kind in across:
        for g in ours[kind]:
            assert len({slots[x].host for x in g}) == hosts, (kind, g)


@pytest.mark.parametrize("name,launcher", CASES)
def test_framework_groups_form_where_the_rank_map_says(cluster, tmp_path, name, launcher):
    from slurmtopo.job.frameworks.registry import framework_layout

    framework, case, options, knobs, inside, across = JOBS[name]
    recorded = _recorded(framework, case)
    ours = framework_layout(framework, world=8, **knobs).groups
    # slurmtopo's groups are the framework's, kind for kind
    assert {k: recorded.get(k) for k in ours} == dict(ours)
    run = Run(cluster, tmp_path, ["--framework", framework, *options, "--gpus-per-node", "4"],
              cmd_args=[framework, json.dumps(knobs)], command=[sys.executable, RANK],
              # the dev cluster's nodes are all this machine
              env={"GLOO_SOCKET_IFNAME": "lo"}).wait(timeout=240)
    placement, doc = run.bound()
    if master_addr(placement.slots[0].host) != placement.slots[0].host:  # the dev cluster's
        assert (f"node name {placement.slots[0].host} does not resolve here: MASTER_ADDR is "
                "its NodeAddr 127.0.0.1") in run.output()
    assert placement.world_size == 8 and len(placement.hosts) == 2, run.output()
    files = {int(f.stem.split("-")[1]): json.loads(f.read_text())
             for f in run.out.glob("torch-*.json")}
    assert sorted(files) == list(range(8)), run.output()
    _check_groups(placement, files, ours, run.job_id, inside, across, 2)
    assert not any(f["torchelastic"] for f in files.values())  # srun started every rank


# ---- every launch line of the docs, run as printed (issue 32) ----

#: the framework pages' lines: (framework, knobs for torch_rank.py as the
#: line and its job file give them, kinds inside a node, kinds across nodes,
#: nodes (None: the planner's choice), started by torchrun)
RANK_LINES = {
    "torchtitan": ({"dp_replicate": 2, "dp_shard": -1, "tp": 2}, ["tp", "dp_shard"],
                   ["dp_replicate"], 2, True),
    # the dev cluster's A6000s pair up over NVLink: TP stays on a pair, the
    # planner spreads the rest as it sees fit
    "deepspeed": ({"tp": 2, "zero_stage": 3}, ["slice_parallel"], [], None, False),
}

#: train.py of the lines that start torch ranks: tests/integration/torch_rank.py
TORCH_TRAIN = """import json, os, runpy, sys
sys.argv = [{rank!r}] + json.loads(os.environ["DOCLINE_RANK_ARGS"])
runpy.run_path({rank!r}, run_name="__main__")
"""
#: train.py of the others: a rank that records its environment and arguments
RECORD_TRAIN = """import json, os, sys
out = os.path.join(os.environ["DOCLINE_OUT"], "rank-%s.json" % os.environ["RANK"])
json.dump({"env": dict(os.environ), "argv": sys.argv[1:]}, open(out, "w"))
"""


def _on_the_dev_cluster(argv, tmp: Path):
    """The documented line as run here: the dev cluster's inventory,
    ``--dry-run`` dropped (the line is submitted), the checkout's etc/ and
    tests/ files by their path, /tmp paths in ``tmp``."""
    out, i = [], 0
    while i < len(argv):
        w = argv[i]
        if w == "--":
            out += argv[i:]
            break
        if w == "--inventory":
            out += [w, str(INV)]
            i += 2
            continue
        if w.startswith(("etc/", "tests/")):  # the checkout's files, as from its root
            out.append(str(ROOT / w))
        elif w != "--dry-run":
            out.append(str(tmp / w[len("/tmp/"):]) if w.startswith("/tmp/") else w)
        i += 1
    return out


def _line_env(cluster, tmp: Path, **extra):
    """The submitting shell's environment: `python`, `python3` and
    `torchrun` on PATH are this test's Python (with this checkout's
    slurmtopo), as a user's activated venv; every task inherits it."""
    bindir = tmp / "bin"
    bindir.mkdir()
    for name in ("python", "python3"):
        (bindir / name).symlink_to(sys.executable)
    (bindir / "torchrun").write_text(
        f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m torch.distributed.run \"$@\"\n")
    (bindir / "torchrun").chmod(0o755)
    env = dict(cluster.env, PYTHONPATH=str(ROOT), GLOO_SOCKET_IFNAME="lo",
               DOCLINE_OUT=str(tmp / "ranks"))
    env["PATH"] = f"{bindir}:{env['PATH']}"
    env.update(extra)
    (tmp / "ranks").mkdir()
    (tmp / "out").mkdir()
    return env


def _job_id(stdout: str) -> int:
    m = re.search(r"Submitted batch job (\d+)", stdout)
    assert m, stdout
    return int(m.group(1))


def _bound(tmp: Path, job_id: int):
    from slurmtopo.plan.rankmap import placement_from_dict

    doc = json.loads((tmp / ".slurmtopo" / "runs" / str(job_id) / "rankmap.json").read_text())
    return placement_from_dict(doc)


def _check_recorded(tmp: Path, job_id: int, script_args):
    """Every rank of the job recorded its planned node, GPU and rank, and
    the command's own arguments."""
    placement = _bound(tmp, job_id)
    files = {int(f.stem.split("-")[1]): json.loads(f.read_text())
             for f in (tmp / "ranks").glob("rank-*.json")}
    assert sorted(files) == list(range(placement.world_size))
    for r, got in files.items():
        env, slot = got["env"], placement.slots[r]
        assert env["SLURMD_NODENAME"] == slot.host and env["WORLD_SIZE"] == str(len(files))
        gpus = env["CUDA_VISIBLE_DEVICES"].split(",")
        assert gpus[int(env["LOCAL_RANK"])] == str(slot.gpu)
        assert got["argv"] == list(script_args)
    return placement


LINES = [pytest.param(line, how, id=f"{how}:{line[:60]}") for line, how in HOW.items()
         if not how.startswith("not run")]


@pytest.mark.parametrize("line,how", LINES)
def test_documented_launch_line_runs(cluster, tmp_path, line, how):
    from slurmtopo.job.frameworks.registry import framework_layout

    argv = _on_the_dev_cluster(shlex.split(line), tmp_path)
    env = _line_env(cluster, tmp_path)
    script_args = argv[argv.index("--") + 3:] if argv[argv.index("--") + 1].startswith(
        "python") else []
    framework = argv[argv.index("--framework") + 1] if "--framework" in argv else None
    if how == "ranks":
        knobs, inside, across, hosts, by_torchrun = RANK_LINES[framework]
        (tmp_path / "train.py").write_text(TORCH_TRAIN.format(rank=str(RANK)))
        env["DOCLINE_RANK_ARGS"] = json.dumps([str(tmp_path / "ranks"), framework,
                                               json.dumps(knobs)])
    else:
        (tmp_path / "train.py").write_text(RECORD_TRAIN)
    if how == "queued":  # the walk-through fills the cluster first, as printed there
        blocker = cluster.sbatch("-N", "4", "--exclusive", wrap="sleep 60")
        cluster.wait_state(blocker, ["RUNNING"])
    try:
        p = run_slurmtopo(argv, tmp_path, env, check=False)
        if how in ("never", "slurm-refuses", "refused"):
            code = {"never": 3, "slurm-refuses": 4, "refused": 2}[how]
            assert p.returncode == code and p.stdout == "", (p.stdout, p.stderr)
            assert len(p.stderr.splitlines()) == 1, p.stderr
            assert {"never": "never:", "slurm-refuses": "invalid partition",
                    "refused": "is not a slurmtopo option"}[how] in p.stderr.lower(), p.stderr
            assert not cluster.run(["squeue", "-h"]).stdout.strip()
            return
        assert p.returncode == 0, p.stderr
        if how == "plan-then-sbatch":  # the plan's job.sbatch, given to Slurm's sbatch
            out_dir = Path(argv[argv.index("--output-dir") + 1])
            script = (tmp_path / out_dir / "job.sbatch")
            assert "train.py" in script.read_text()
            p = subprocess.run(["sbatch", str(script)], cwd=tmp_path, env=env, text=True,
                               capture_output=True, timeout=60)
            assert p.returncode == 0, p.stderr
        job_id = _job_id(p.stdout)
        if how == "queued":
            # queued behind the job that holds every node, not refused
            assert cluster.wait_state(job_id, ["PENDING"]) == "PENDING"
            assert cluster.state(blocker) == "RUNNING"
            return
        state = cluster.wait_job(job_id, timeout=240)
        outputs = "".join(f.read_text() for f in tmp_path.glob("**/*.out"))
        assert state == "COMPLETED", (state, outputs)
        if how == "echo":
            placement = _bound(tmp_path, job_id)
            (log,) = (tmp_path / "out").glob(f"sh-{job_id}.out")
            lines = sorted(ln for ln in log.read_text().splitlines() if ln.startswith("rank "))
            want = sorted(f"rank {r} of {placement.world_size} on {s.host} GPUs "
                          f"{','.join(map(str, placement.gpus_on(s.host)))}"
                          for r, s in enumerate(placement.slots))
            assert lines == want, log.read_text()
        elif how == "ranks":
            placement = _bound(tmp_path, job_id)
            assert hosts is None or len(placement.hosts) == hosts, outputs
            ours = framework_layout(framework, world=placement.world_size, **knobs).groups
            files = {int(f.stem.split("-")[1]): json.loads(f.read_text())
                     for f in (tmp_path / "ranks").glob("torch-*.json")}
            assert sorted(files) == list(range(placement.world_size)), outputs
            _check_groups(placement, files, ours, job_id, inside, across, hosts)
            # torchtitan's line: the command's torchrun started the ranks, once per node
            assert all(f["torchelastic"] == by_torchrun for f in files.values())
        else:
            _check_recorded(tmp_path, job_id, script_args)
    finally:
        cluster.cancel_all()
