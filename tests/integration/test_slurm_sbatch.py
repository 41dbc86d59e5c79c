"""`slurmtopo sbatch` on the dev cluster: the job runs, and every rank's
environment is exactly what the plan (or the start-time re-plan) says.

The dev cluster runs with the gres.conf and topology.conf slurmtopo
generates from tests/fixtures/slurm/devcluster-inventory.yaml. Every rank
runs a Python one-liner that writes its environment, CPU affinity and argv
to ``rank-<RANK>.json``; the checks compare each file with the rank map
``slurmtopo bind`` wrote for the job (``rankmap.json`` in the run dir) and,
where Slurm gave what was planned, with the submit-time plan.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import run_slurmtopo
from tests.integration.ranks import DUMP, Run, check_ranks, cluster, master_addr  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
INV = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-inventory.yaml"

def _same_slots(a, b):
    return [(s.rank, s.host, s.gpu, s.local_rank, s.cpus) for s in a.slots] == \
           [(s.rank, s.host, s.gpu, s.local_rank, s.cpus) for s in b.slots]


def _blockers(cluster, *nodes):
    jobs = [cluster.sbatch("-w", n, "--exclusive", "-t", "2", wrap="sleep 120") for n in nodes]
    for j in jobs:
        cluster.wait_state(j, {"RUNNING"})
    return jobs


def test_whole_nodes(cluster, tmp_path):
    run = Run(cluster, tmp_path, ["--tp", "8", "--dp", "2", "--exclusive"]).wait()
    assert "#SBATCH --exclusive" in run.script
    assert "#SBATCH --switches=1@5:00" in run.script          # one leaf planned
    placement, doc = check_ranks(run)
    assert not doc["replanned"] and _same_slots(placement, run.planned())
    assert sorted(placement.hosts) == ["node1", "node2"]           # leaf1
    assert all(sorted(placement.gpus_on(h)) == list(range(8)) for h in placement.hosts)
    assert doc["allocation"] == {"node1": "0-7", "node2": "0-7"}


def test_partial_node_where_slurm_picks_the_gpus(cluster, tmp_path):
    """node1 has GPUs 0-2 taken; the plan (live state) avoids them, Slurm
    picks the 4 indices itself, and the ranks use exactly those."""
    blocker = cluster.sbatch("-w", "node1", "--gres=gpu:3", "-t", "2", wrap="sleep 120")
    cluster.wait_state(blocker, {"RUNNING"})
    taken = set(cluster.gpus(blocker)["node1"])
    run = Run(cluster, tmp_path, ["--tp", "2", "--dp", "2", "--nodelist", "node1"]).wait()
    planned = run.planned()
    assert not {s.gpu for s in planned.slots} & taken                  # planned around them
    assert "#SBATCH --gpus-per-node=4" in run.script
    assert "#SBATCH --nodelist=node1" in run.script
    placement, doc = check_ranks(run)
    from slurmtopo.inventory.model import parse_cpulist
    got = set(parse_cpulist(doc["allocation"]["node1"]))
    assert len(got) == 4 and not got & taken                           # Slurm's pick
    assert set(placement.gpus_on("node1")) == got                      # ranks use Slurm's GPUs
    assert doc["replanned"] == (set(planned.gpus_on("node1")) != got)


def test_two_leaf_switches(cluster, tmp_path):
    """With node2 and node4 busy, 16 ranks need node1 (leaf1) and node3
    (leaf2): the script asks for two switches and runs there."""
    _blockers(cluster, "node2", "node4")
    run = Run(cluster, tmp_path, ["--tp", "8", "--dp", "2"]).wait()
    assert "#SBATCH --switches=2@5:00" in run.script
    placement, doc = check_ranks(run)
    assert not doc["replanned"] and _same_slots(placement, run.planned())
    assert sorted(placement.hosts) == ["node1", "node3"]
    assert run.job["NodeList"] == "node[1,3]"
    assert placement.slots[0].host == "node1"


def test_allocation_differs_from_the_plan_and_bind_replans(cluster, tmp_path):
    """Planned against a snapshot in which node1-3 are busy (so on node4),
    but node4 is the busy one when the job starts: Slurm gives another node
    and the start-time step re-plans on it."""
    snapshot = tmp_path / "state.yaml"
    snapshot.write_text("slurmtopo: state\nnodes:\n  - {name: 'node[1-3]', state: allocated}\n")
    _blockers(cluster, "node4")
    run = Run(cluster, tmp_path, ["--tp", "2", "--dp", "2", "--state", snapshot]).wait()
    assert run.planned().hosts == ("node4",)
    placement, doc = check_ranks(run)
    assert doc["replanned"] is True
    assert placement.hosts != ("node4",) and len(placement.hosts) == 1
    assert placement.hosts[0] in ("node1", "node2", "node3")
    assert "re-planning on the allocated nodes and GPUs" in run.output()


def test_gpus_differ_from_the_plan_and_bind_replans(cluster, tmp_path):
    """Planned on node1's GPUs 0-3 (the snapshot says 4-7 are busy), but
    really 0-2 are taken: Slurm hands out four of 3-7 and the ranks run on
    exactly those, re-planned at start."""
    snapshot = tmp_path / "state.yaml"
    snapshot.write_text("slurmtopo: state\nnodes:\n  - {name: node1, busy_gpus: '4-7'}\n"
                        "  - {name: 'node[2-4]', state: allocated}\n")
    blocker = cluster.sbatch("-w", "node1", "--gres=gpu:3", "-t", "2", wrap="sleep 120")
    cluster.wait_state(blocker, {"RUNNING"})
    taken = set(cluster.gpus(blocker)["node1"])
    run = Run(cluster, tmp_path, ["--tp", "2", "--dp", "2", "--nodelist", "node1", "--state",
                                  snapshot]).wait()
    assert sorted(run.planned().gpus_on("node1")) == [0, 1, 2, 3]
    placement, doc = check_ranks(run)
    from slurmtopo.inventory.model import parse_cpulist
    got = set(parse_cpulist(doc["allocation"]["node1"]))
    assert len(got) == 4 and not got & taken
    assert doc["replanned"] is True
    assert set(placement.gpus_on("node1")) == got
    # the re-plan keeps tensor-parallel pairs on NVLink bridges where Slurm's pick allows
    assert "re-planning on the allocated nodes and GPUs" in run.output()


def test_shell_metacharacters_arrive_verbatim(cluster, tmp_path):
    name = "n$(touch M1)`touch M2`;x y"
    args = ["$(touch MARKER)", "`touch MARKER2`", "a'b\"c", "; touch MARKER3", "$HOME",
            "*", "two\nlines", "-- --x=1", "${IFS}&&|<>"]
    run = Run(cluster, tmp_path, ["--tp", "2"], cmd_args=args,
              extra=["--job-name", name]).wait()
    check_ranks(run)                          # argv of every rank == args, verbatim
    assert run.job["JobName"] == "n__touch_M1__touch_M2__x_y"
    for d in (tmp_path, run.run_dir, ROOT, Path.home()):
        for marker in ("M1", "M2", "MARKER", "MARKER2", "MARKER3"):
            assert not (d / marker).exists(), d / marker
    assert f"'$(touch MARKER)'" in run.script


def test_dry_run_submits_nothing(cluster, tmp_path):
    env = dict(cluster.env, PYTHONPATH=str(ROOT))
    p = run_slurmtopo(["sbatch", "--inventory", INV, "--tp", "4", "--dry-run", "--", "hostname"],
                   tmp_path, env)
    # the job name comes from the command (docs/sbatch.md)
    assert p.stdout.startswith("#!/bin/bash\n#SBATCH --job-name=hostname\n#SBATCH --nodes=1\n")
    assert "dry run: nothing submitted" in p.stderr
    assert cluster.run(["squeue", "-h"]).stdout.strip() == ""


def test_daemon_submission_is_held_and_tagged(cluster, tmp_path):
    from slurmtopo.slurm.cli_backend import CliBackend

    env = dict(cluster.env, PYTHONPATH=str(ROOT))
    p = run_slurmtopo(["sbatch", "--inventory", INV, "--tp", "4", "--require", "tp=nvlink-domain",
                    "--daemon", "--parsable", "--", "hostname"], tmp_path, env)
    jid = int(p.stdout.strip())
    job = CliBackend(env=cluster.env).job(jid)
    assert job.held and job.state == "PENDING" and job.reason == "JobHeldUser"
    assert job.comment.startswith("slurmtopo:v1:") and '"tp":4' in job.comment
    from slurmtopo.daemon.protocol import parse_comment  # the daemon reads it back
    assert parse_comment(job.comment) is not None


# --------------------------------------------------------------------------
# compute nodes without Python: the tasks get a PATH with Slurm's clients,
# taskset and /bin/sh stand-ins only; the batch step runs `slurmtopo bind`
# with the absolute --python, as a first node with slurmtopo would

#: a stand-in that records its arguments and environment; the output
#: directory is its first argument (the program) or its last (torchrun)
# (no coreutils on that PATH either: only shell built-ins, /usr/bin/env and /bin/sed)
RECORD = """#!/bin/sh
if [ "${0##*/}" = torchrun ]; then for a in "$@"; do out=$a; done
else out=$1; shift; fi
if command -v python3 >/dev/null 2>&1 || command -v python >/dev/null 2>&1; then py=yes
else py=no; fi
{ printf 'PYTHON %s\\n' "$py"
  for a in "$@"; do printf 'ARG %s\\n' "$a"; done
  /usr/bin/env | /bin/sed 's/^/ENV /'; } > "$out/${0##*/}-${NODE_RANK}-${RANK:-node}.txt"
"""


def _no_python_path(cluster, tmp: Path, *scripts: str) -> Path:
    import shutil
    d = tmp / "nopython-bin"
    d.mkdir()
    slurm_bin = Path(shutil.which("srun", path=cluster.env["PATH"])).parent
    for name in ("srun", "sbatch", "scontrol", "squeue", "sinfo", "scancel", "sacct"):
        if (slurm_bin / name).exists():
            (d / name).symlink_to(slurm_bin / name)
    (d / "taskset").symlink_to(shutil.which("taskset"))
    for name in scripts:
        (d / name).write_text(RECORD)
        (d / name).chmod(0o755)
    assert shutil.which("python3", path=str(d)) is None
    return d


def _records(out: Path, prefix: str):
    recs = {}
    for f in sorted(out.glob(f"{prefix}-*.txt")):
        rec = {"args": [], "env": {}}
        for line in f.read_text().splitlines():
            tag, _, rest = line.partition(" ")
            if tag == "PYTHON":
                rec["python"] = rest
            elif tag == "ARG":
                rec["args"].append(rest)
            elif tag == "ENV" and "=" in rest:
                k, _, v = rest.partition("=")
                rec["env"][k] = v
        recs[f.stem] = rec
    return recs


def test_ranks_run_without_python(cluster, tmp_path):
    """Every rank starts through /bin/sh alone: no Python on its PATH, and
    its environment is what `slurmtopo bind` decided."""
    path = _no_python_path(cluster, tmp_path, "train")
    run = Run(cluster, tmp_path, ["--tp", "2", "--dp", "2"], cmd_args=["--lr", "3e-4"],
              command=[str(tmp_path / "nopython-bin" / "train")], path=path).wait()
    placement, doc = run.bound()
    recs = {int(k.rsplit("-", 1)[1]): v for k, v in _records(run.out, "train").items()}
    assert sorted(recs) == list(range(placement.world_size)), run.output()
    for r, rec in recs.items():
        slot = placement.slots[r]
        env = rec["env"]
        assert rec["python"] == "no"
        assert rec["args"] == ["--lr", "3e-4"]
        assert env["SLURMD_NODENAME"] == slot.host
        assert env["RANK"] == str(r) and env["LOCAL_RANK"] == str(slot.local_rank)
        assert env["CUDA_VISIBLE_DEVICES"].split(",")[slot.local_rank] == str(slot.gpu)
        assert env["SLURMTOPO_GPU"] == str(slot.gpu)
        assert "SLURMTOPO_TASK_ENV" not in env
    assert "CPU binding:" in run.output()


def test_torchrun_one_per_node_without_python(cluster, tmp_path):
    """--launcher torchrun: one task per node runs a /bin/sh stand-in named
    torchrun with --nnodes/--nproc-per-node/--node-rank in plan order."""
    path = _no_python_path(cluster, tmp_path, "torchrun", "train")
    run = Run(cluster, tmp_path, ["--tp", "4", "--dp", "2", "--gpus-per-node", "4",
                                  "--launcher", "torchrun"],
              command=[str(tmp_path / "nopython-bin" / "train")], path=path).wait()
    placement, doc = run.bound()
    recs = _records(run.out, "torchrun")
    assert len(recs) == len(placement.hosts) == 2, run.output()
    for node, host in enumerate(placement.hosts):
        rec = recs[f"torchrun-{node}-node"]
        assert rec["python"] == "no"
        assert rec["args"][:5] == ["--nnodes=2", "--nproc-per-node=4", f"--node-rank={node}",
                                   f"--master-addr={master_addr(placement.hosts[0])}",
                                   f"--master-port={20000 + run.job_id % 10000}"]
        assert rec["args"][5:] == ["--no-python", str(tmp_path / "nopython-bin" / "train"),
                                   str(run.out)]
        env = rec["env"]
        assert env["SLURMD_NODENAME"] == host
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, placement.gpus_on(host)))


def test_big_job_tasks_read_their_block_through_real_srun(cluster, tmp_path):
    """The big-job path under real Slurm: the batch step runs with its
    limits shrunk (tests/fakes/small_limits.py), so an 8-rank job's tasks
    each read their block of 3 ranks from the run directory through srun
    --distribution=arbitrary, with no Python on their PATH."""
    from tests.fakes.small_limits import small_limits_python

    path = _no_python_path(cluster, tmp_path, "train")
    run = Run(cluster, tmp_path, ["--tp", "2", "--dp", "4"], cmd_args=["--lr", "3e-4"],
              command=[str(tmp_path / "nopython-bin" / "train")], path=path,
              extra=["--python", small_limits_python(tmp_path)]).wait()
    assert "each task reads its block of 3 ranks" in run.output(), run.output()
    assert sorted(f.name for f in (run.run_dir / "task-env").iterdir()) == \
        ["0.sh", "1.sh", "2.sh"]
    placement, doc = run.bound()
    recs = {int(k.rsplit("-", 1)[1]): v for k, v in _records(run.out, "train").items()}
    assert sorted(recs) == list(range(8)), run.output()
    for r, rec in recs.items():
        slot = placement.slots[r]
        env = rec["env"]
        assert rec["python"] == "no" and rec["args"] == ["--lr", "3e-4"]
        assert env["SLURMD_NODENAME"] == slot.host
        assert env["RANK"] == str(r) and env["LOCAL_RANK"] == str(slot.local_rank)
        assert env["CUDA_VISIBLE_DEVICES"].split(",")[slot.local_rank] == str(slot.gpu)
        assert env["SLURMTOPO_GPU"] == str(slot.gpu) and env["WORLD_SIZE"] == "8"
        assert "SLURMTOPO_TASK_ENV" not in env


def test_torchrun_on_a_partly_busy_cluster(cluster, tmp_path):
    """node1 and node2 held by other jobs: `--launcher torchrun` gets a
    node-contiguous plan on node3-4 from the live state (the faster-modelled
    interleaved nesting is left out) instead of being refused, and torchrun
    starts as planned (issue #24)."""
    _blockers(cluster, "node1", "node2")
    path = _no_python_path(cluster, tmp_path, "torchrun", "train")
    run = Run(cluster, tmp_path, ["--tp", "2", "--pp", "2", "--dp", "4",
                                  "--launcher", "torchrun"],
              command=[str(tmp_path / "nopython-bin" / "train")], path=path).wait()
    assert "# note: the job's launcher cannot start" in run.script
    placement, doc = run.bound()
    assert not doc["replanned"], run.output()
    assert list(placement.hosts) == ["node3", "node4"]
    recs = _records(run.out, "torchrun")
    assert len(recs) == 2, run.output()
    for node, host in enumerate(placement.hosts):
        rec = recs[f"torchrun-{node}-node"]
        assert rec["args"][:3] == ["--nnodes=2", "--nproc-per-node=8", f"--node-rank={node}"]
        assert rec["env"]["SLURMD_NODENAME"] == host


def test_a_missing_torchrun_fails_at_once_naming_the_node(cluster, tmp_path):
    """No torchrun on the nodes: the job fails in its first moment with
    the node and the fix, not `exec: torchrun: not found` (exit 127)."""
    path = _no_python_path(cluster, tmp_path, "train")
    run = Run(cluster, tmp_path, ["--tp", "4", "--dp", "2", "--gpus-per-node", "4",
                                  "--launcher", "torchrun"],
              command=[str(tmp_path / "nopython-bin" / "train")], path=path)
    assert cluster.wait_job(run.job_id, timeout=90) != "COMPLETED"
    out = run.output()
    assert "error: torchrun: command not found on this node (PATH=" in out, out
    assert "--torchrun 'python3 -m torch.distributed.run'" in out
    assert "exec: torchrun: not found" not in out


def test_container_image_without_pyxis_is_refused_at_submit(cluster, tmp_path):
    """The dev cluster has no pyxis: srun --help on the login node does not
    list --container-image, so sbatch refuses with the fix and submits
    nothing (it used to fail at run time: srun "unrecognized option")."""
    env = dict(cluster.env, PYTHONPATH=str(ROOT))
    p = run_slurmtopo(["sbatch", "--inventory", INV, "--tp", "2", "--container-image",
                       "nvcr.io#nvidia/pytorch:24.05-py3", "--run-dir", tmp_path / "run",
                       "--", "hostname"], tmp_path, env, check=False)
    assert p.returncode != 0
    assert p.stderr.strip() == (
        "slurmtopo: error: --container-image: this cluster's srun has no such option (its "
        "pyxis plugin, which runs containers through enroot, is not installed: `srun --help` "
        "does not list it); ask the admins for pyxis, or run the image with --apptainer IMAGE "
        "instead"), p.stderr
    assert cluster.run(["squeue", "-h"]).stdout.strip() == ""


def test_sbatch_short_flags_wrap_and_show_from_elsewhere(cluster, tmp_path):
    """sbatch's own letters and --wrap reach Slurm as sbatch would send
    them; `slurmtopo show` finds the finished job's run directory from
    another directory through Slurm's WorkDir."""
    env = dict(cluster.env, PYTHONPATH=str(ROOT))
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    p = run_slurmtopo(["sbatch", "--inventory", INV, "--tp", "2", "--python", sys.executable,
                       "-p", cluster.partition, "-t", "3", "-J", "shortflags",
                       "-o", "out-%j.txt", "-e", "err-%j.txt", "--parsable",
                       "--wrap", 'echo "rank=$RANK of $WORLD_SIZE"'], submit_dir, env)
    job_id = int(p.stdout.strip())
    assert cluster.wait_job(job_id, timeout=90) == "COMPLETED"
    info = cluster.job(job_id)
    assert info["JobName"] == "shortflags" and info["Partition"] == cluster.partition
    assert info["TimeLimit"] == "00:03:00"
    out = (submit_dir / f"out-{job_id}.txt").read_text()  # -o: Slurm's pattern, expanded
    assert sorted(line for line in out.splitlines() if line.startswith("rank=")) == \
        ["rank=0 of 2", "rank=1 of 2"]
    assert (submit_dir / f"err-{job_id}.txt").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = run_slurmtopo(["show", str(job_id), "--json"], elsewhere, env)
    doc = json.loads(p.stdout)
    assert doc["state"] == "COMPLETED"
    assert doc["run_dir"] == str(submit_dir / ".slurmtopo" / "runs" / str(job_id))
    assert doc["actual"] is not None and len(doc["actual"]["ranks"]) == 2
    assert not (elsewhere / ".slurmtopo").exists()


def _without_fabric(src: Path, tmp_path: Path) -> Path:
    import yaml

    doc = yaml.safe_load(src.read_text())
    del doc["fabric"]
    path = tmp_path / "flat.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_an_inventory_without_fabric_plans_on_slurms_live_topology(cluster, tmp_path):
    """Issue 32: the inventory has no fabric, so `plan --state live` reads
    the tree slurmctld runs with (`scontrol show topology`: leaf1 node[1-2],
    leaf2 node[3-4], spine) and says so; the job of 8 GPUs stays on one
    leaf."""
    flat = _without_fabric(INV, tmp_path)
    env = dict(cluster.env, PYTHONPATH=str(ROOT))
    p = run_slurmtopo(["plan", "--inventory", flat, "--state", "live", "--tp", "2", "--dp",
                       "4", "--gpus-per-node", "4", "--json", "--output-dir", tmp_path / "p"],
                      tmp_path, env)
    doc = json.loads(p.stdout)
    assert any(n.startswith("the inventory has no fabric: planned on Slurm's live topology "
                            "(scontrol show topology: 3 switch(es))") for n in doc["notes"])
    assert set(doc["rankmap"]["hosts"]) in ({"node1", "node2"}, {"node3", "node4"})
    # against a snapshot (none) Slurm is not asked, and nothing is said of it
    p = run_slurmtopo(["plan", "--inventory", flat, "--tp", "2", "--dp", "4", "--json",
                       "--output-dir", tmp_path / "q"], tmp_path, env)
    assert not any("Slurm" in n for n in json.loads(p.stdout)["notes"])
