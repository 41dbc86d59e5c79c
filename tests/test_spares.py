"""Spare nodes inside the job's domain (``--spares N``): choosing them
(placement/spares.py), the script that asks for them, the pure re-plan
after a loss (binding/spares.py), and the whole retry loop run under bash
with a fake Slurm whose first step loses a node."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtopo.binding.replan import fill_placement
from slurmtopo.binding.spares import replan_after_loss
from slurmtopo.errors import PlacementError, SlurmtopoError
from slurmtopo.inventory.model import ClusterState, Fabric, Inventory, Node, NodeState, NvlinkDomain
from slurmtopo.inventory.presets import preset
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.job.groups import Layout
from slurmtopo.placement.spares import choose_spares, domain_of
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml"
ONE_LEAF = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-one-leaf.yaml"


@pytest.fixture(scope="module")
def h100():
    return load_inventory(H100)


@pytest.fixture(scope="module")
def one_leaf():
    return load_inventory(ONE_LEAF)


def _racks(trays: int = 3) -> Inventory:
    hw = preset("gb200-nvl72-tray")
    nodes = {}
    for r in range(2):
        dom = NvlinkDomain(f"5b1a2c3d-0000-4000-8000-00000000b00{r}", 1)
        for t in range(trays):
            nodes[f"r{r}t{t}"] = Node(f"r{r}t{t}", hw, nvlink_domain=dom)
    return Inventory(nodes=nodes, fabric=Fabric())


def _p(inv, host_gpus, **layout):
    return fill_placement(inv, host_gpus, Layout(**layout))


# --------------------------------------------------------------------------
# choosing spares


def test_a_spare_is_in_the_jobs_leaf(h100, one_leaf):
    p = _p(h100, [("gpu01", range(8))], tp=8)
    got = choose_spares(h100, None, p, 1)
    assert got.hosts == ("gpu02",) and got.scope == "leaf switch"
    # a two-node job fills leaf1: no spare in it
    full = _p(h100, [("gpu01", range(8)), ("gpu02", range(8))], tp=8, dp=2)
    with pytest.raises(PlacementError, match="only 0 free node.*leaf switch leaf1: planned 2"):
        choose_spares(h100, None, full, 1)
    two = _p(one_leaf, [("node1", range(4)), ("node2", range(4))], tp=4, dp=2)
    assert choose_spares(one_leaf, None, two, 2).hosts == ("node3", "node4")


def test_a_spare_is_free_now_unless_the_job_waits(one_leaf):
    two = _p(one_leaf, [("node1", range(4)), ("node2", range(4))], tp=4, dp=2)
    busy = ClusterState(nodes={"node3": NodeState("node3", "mixed", frozenset({0, 1, 2, 3, 4})),
                               "node4": NodeState("node4", "down")})
    # node3 has 3 free GPUs of the 4 a planned node runs; node4 is down
    with pytest.raises(PlacementError):
        choose_spares(one_leaf, busy, two, 1)
    assert choose_spares(one_leaf, busy, two, 1, queued=True).hosts == ("node3",)


def test_spares_stay_in_the_nvlink_rack():
    inv = _racks()
    p = _p(inv, [("r0t0", range(4)), ("r0t1", range(4))], tp=4, dp=2)
    got = choose_spares(inv, None, p, 1)
    assert got.hosts == ("r0t2",) and got.scope == "NVLink domain"
    with pytest.raises(PlacementError, match="NVLink domain"):
        choose_spares(inv, None, p, 2)        # rack 0 has one tray left


def test_spares_need_even_ranks(h100):
    uneven = _p(h100, [("gpu01", range(8)), ("gpu03", range(4))], dp=12)
    with pytest.raises(PlacementError, match="same number of ranks on every planned node"):
        choose_spares(h100, None, uneven, 1)


# --------------------------------------------------------------------------
# the re-plan after a loss (pure)


def test_a_lost_node_is_replaced_like_for_like(one_leaf):
    p = _p(one_leaf, [("node1", range(4)), ("node2", range(4))], tp=4, dp=2)
    out = replan_after_loss(one_leaf, p, ["node1", "node3", "node4"], {"node2": "down: dead"})
    assert out.replaced == {"node2": "node3"} and out.in_domain
    assert [(s.host, s.gpu, s.local_rank) for s in out.placement.slots] == \
        [("node1", g, g) for g in range(4)] + [("node3", g, g) for g in range(4)]
    assert out.placement.groups == p.groups
    assert out.moves == ("ranks 4-7: node2 (down: dead) -> node3 (same leaf switch leaf1)",)
    # NICs and CPUs come from the spare's hardware, as the planner builds them
    assert out.placement.slots[4].cpus == p.slots[4].cpus


def test_a_spare_with_other_gpus_takes_them_in_order(one_leaf):
    p = _p(one_leaf, [("node1", [0, 1]), ("node2", [2, 3])], tp=2, dp=2)
    out = replan_after_loss(one_leaf, p, ["node1", "node3"], {"node2": "drained"},
                            gpus={"node1": (0, 1), "node3": (4, 5)})
    assert [(s.host, s.gpu) for s in out.placement.slots[2:]] == [("node3", 4), ("node3", 5)]


def test_a_spare_of_another_rack_says_which_groups_left():
    inv = _racks()
    p = _p(inv, [("r0t0", range(4)), ("r0t1", range(4))], ep=8, dp=8)
    kept = replan_after_loss(inv, p, ["r0t0", "r0t2", "r1t0"], {"r0t1": "down"})
    assert kept.replaced == {"r0t1": "r0t2"} and kept.in_domain
    moved = replan_after_loss(inv, p, ["r0t0", "r1t0"], {"r0t1": "down"})
    assert moved.replaced == {"r0t1": "r1t0"} and not moved.in_domain
    assert ("ep", 0) in moved.left
    assert "another NVLink domain" in moved.moves[0]


def test_no_spare_left_is_one_line(one_leaf):
    p = _p(one_leaf, [("node1", range(4)), ("node2", range(4))], tp=4, dp=2)
    with pytest.raises(SlurmtopoError, match="node2 was lost .* no spare left"):
        replan_after_loss(one_leaf, p, ["node1"], {"node2": "down"})
    with pytest.raises(SlurmtopoError, match="no node of the step was lost"):
        replan_after_loss(one_leaf, p, ["node1", "node2", "node3"], {"node4": "down"})


def test_domain_of_prefers_racks_then_blocks_then_leaves(h100):
    assert domain_of(h100, "gpu01") == ("leaf switch", "leaf1")
    assert domain_of(_racks(), "r1t0")[0] == "NVLink domain"
    nvl = load_inventory(ROOT / "etc" / "examples" / "gb200-nvl72-rack.yaml")
    assert domain_of(nvl, "nvl72r1-t01")[0] == "NVLink domain"


# --------------------------------------------------------------------------
# the script


def _dry(*args):
    code, out, err = run_cli(["sbatch", "--inventory", str(ONE_LEAF), "--state", "none",
                              "--tp", "4", "--dp", "2", "--gpus-per-node", "4", *args,
                              "--dry-run", "--", "python", "train.py"])
    assert code == 0, err
    return out, err


def test_the_script_asks_for_the_spares_with_no_kill():
    out, err = _dry("--spares", "1")
    assert "#SBATCH --nodes=3\n" in out and "#SBATCH --no-kill\n" in out
    assert "#SBATCH --switches=1@5:00\n" in out          # the spare inside the leaf
    assert "# spares: node3 (idle, in the job's leaf switch" in out
    assert '"guardrails": {"spares": 1}' in out
    assert 'bind --plan - --print-env "$@" \\' in out
    assert 'slurmtopo_bind --restart "$SLURMTOPO_RESTART" --step-exit "$slurmtopo_rc"' in out
    assert "spares: node3" in err
    plain, _ = _dry()
    assert "--no-kill" not in plain and "while :" not in plain and '"$@"' not in plain


def test_no_room_for_spares_is_refused():
    code, out, err = run_cli(["sbatch", "--inventory", str(H100), "--state", "none", "--tp", "8",
                              "--dp", "2", "--spares", "1", "--dry-run", "--", "true"])
    assert code == 3 and out == ""          # a placement error, as "does not fit"
    assert "--spares 1: only 0 free node(s)" in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------
# the retry loop under bash, with a fake Slurm that loses a node

FAKE_SRUN = r'''#!PYTHON
"""srun: every task locally (task r on hostfile line r); a step that
places tasks on a host of FAKE_LOSE fails once, and from then on Slurm
reports that host down."""
import json, os, subprocess, sys
args = sys.argv[1:]
opts = {}
while args and args[0].startswith("--"):
    key, _, val = args.pop(0)[2:].partition("=")
    opts[key] = val
alloc = json.loads(os.environ["FAKE_ALLOC"])
with open(os.environ["SLURM_HOSTFILE"]) as fh:
    tasks = [l.strip() for l in fh if l.strip()][: int(opts["ntasks"])]
lost = os.environ.get("FAKE_LOSE", "")
down = os.path.join(os.environ["FAKE_DIR"], "down")
with open(os.path.join(os.environ["FAKE_DIR"], "steps"), "a") as f:
    f.write(json.dumps(tasks) + "\n")
if lost in tasks and not os.path.exists(down):
    open(down, "w").write(lost)
    print(f"srun: error: Node failure on {lost}", file=sys.stderr)
    sys.exit(137)
rc, seen = 0, {}
for procid, host in enumerate(tasks):
    env = dict(os.environ, SLURM_PROCID=str(procid), SLURMD_NODENAME=host,
               SLURM_STEP_GPUS=",".join(map(str, alloc[host])),
               CUDA_VISIBLE_DEVICES=",".join(map(str, alloc[host])))
    rc = max(rc, subprocess.call(args, env=env))
sys.exit(rc)
'''

FAKE_SCONTROL = r'''#!PYTHON
import json, os, sys
a = sys.argv[1:]
alloc = json.loads(os.environ["FAKE_ALLOC"])
down_file = os.path.join(os.environ["FAKE_DIR"], "down")
down = open(down_file).read().strip() if os.path.exists(down_file) else None
if "--json" in a:
    print("scontrol: unrecognized option '--json'", file=sys.stderr); sys.exit(1)
if a[:2] == ["show", "job"]:
    print(f"JobId={a[-1]} JobName=train")
    print("   NodeList=" + ",".join(h for h in alloc if h != down))
    for host, gpus in alloc.items():
        if host != down:
            idx = ",".join(map(str, gpus))
            print(f"     Nodes={host} CPU_IDs=0-1 Mem=0 GRES=gpu:{len(gpus)}(IDX:{idx})")
elif a[:3] == ["-d", "-o", "show"] and a[3] == "node":
    for host in alloc:
        state = "DOWN Reason=gone [root@2026-01-01T00:00:00]" if host == down else "ALLOCATED"
        print(f"NodeName={host} State={state} Gres=gpu:8 CPUTot=16 CPUAlloc=16")
elif a[:2] == ["show", "config"]:
    print("ConstrainDevices = no")
else:
    sys.exit(1)
'''

FAKE_SINFO = "#!/bin/sh\necho \"sinfo: unrecognized option '--json'\" >&2\nexit 1\n"

PROGRAM = ("import json, os, sys; out = sys.argv[1]; "
           "json.dump(dict(os.environ), open(os.path.join(out, 'rank-%s-attempt-%s.json' % "
           "(os.environ['RANK'], os.environ['SLURMTOPO_RESTART'])), 'w'))")


def _job(tmp_path, lose, spares=1, extra_env=None, program=PROGRAM, extra_args=()):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL), ("sinfo", FAKE_SINFO)):
        p = bindir / name
        p.write_text(text.replace("#!PYTHON", "#!" + sys.executable, 1))
        p.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    code, script, err = run_cli(["sbatch", "--inventory", str(ONE_LEAF), "--state", "none",
                                 "--tp", "4", "--dp", "2", "--gpus-per-node", "4", "--spares",
                                 str(spares), "--python", sys.executable, *extra_args,
                                 "--dry-run", "--",
                                 sys.executable, "-c", program, str(out)])
    assert code == 0, err
    (tmp_path / "job.sbatch").write_text(script)
    alloc = {"node1": [0, 1, 2, 3], "node2": [0, 1, 2, 3], "node3": [4, 5, 6, 7]}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "CUDA_", "NCCL_"))}
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", FAKE_DIR=str(tmp_path),
               FAKE_ALLOC=json.dumps(alloc), FAKE_LOSE=lose, SLURM_JOB_ID="77",
               SLURM_JOB_NODELIST="node[1-3]", SLURMD_NODENAME="node1",
               SLURM_SUBMIT_DIR=str(tmp_path), SLURMTOPO_PYTHON=sys.executable,
               SLURMTOPO_LOST_WAIT="0", SLURM_JOB_GPUS="0,1,2,3", CUDA_VISIBLE_DEVICES="0,1,2,3",
               PYTHONPATH=str(ROOT), **(extra_env or {}))
    if "PATH_PREFIX" in env:  # more stand-ins (torchrun) for the tasks
        env["PATH"] = env.pop("PATH_PREFIX") + os.pathsep + env["PATH"]
    p = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    ranks = {}
    for f in out.glob("rank-*-attempt-*.json"):
        _, r, _, attempt = f.stem.split("-")
        ranks[(int(r), int(attempt))] = json.loads(f.read_text())
    return p, ranks


def test_the_job_finishes_on_the_spare(tmp_path):
    p, ranks = _job(tmp_path, lose="node2")
    assert p.returncode == 0, p.stderr
    # the first step never ran its tasks (node2 failed); the second ran all 8
    assert sorted(ranks) == [(r, 1) for r in range(8)]
    hosts = {r: env["SLURMD_NODENAME"] for (r, _), env in ranks.items()}
    assert hosts == {**{r: "node1" for r in range(4)}, **{r: "node3" for r in range(4, 8)}}
    for (r, _), env in ranks.items():
        assert env["RANK"] == str(r) and env["WORLD_SIZE"] == "8"
        assert env["LOCAL_RANK"] == str(r % 4) and env["NODE_RANK"] == str(r // 4)
        want = "0,1,2,3" if r < 4 else "4,5,6,7"  # the spare's own GPUs, no cgroup
        assert env["CUDA_VISIBLE_DEVICES"] == want
        assert env["SLURMTOPO_GPU"] == want.split(",")[r % 4]
        assert env["SLURMTOPO_RESTART"] == "1"
    assert "restart 1 of 1: the step failed (exit 137); lost: node2 (down: gone)" in p.stderr
    assert "ranks 4-7: node2 (down: gone) -> node3 (same leaf switch leaf1)" in p.stderr
    assert "every group is still inside its domain" in p.stderr
    assert "0 restart(s) left" in p.stderr
    assert "keeping NCCL_" not in p.stderr     # its own variables are replaced, not kept
    steps = [json.loads(l) for l in (tmp_path / "steps").read_text().splitlines()]
    assert steps == [["node1"] * 4 + ["node2"] * 4, ["node1"] * 4 + ["node3"] * 4]
    bound = json.loads((tmp_path / ".slurmtopo" / "runs" / "77" / "rankmap.json").read_text())
    assert bound["hosts"] == ["node1", "node3"]


def test_a_failure_that_lost_no_node_is_not_restarted(tmp_path):
    p, ranks = _job(tmp_path, lose="nobody", program="import sys; sys.exit(3)")
    assert p.returncode == 3, p.stderr          # the step's own exit code
    assert ("the step failed (exit 3) but none of its nodes (node1, node2) is down, drained "
            "or gone from the job") in p.stderr
    assert "restart 1 of 1" not in p.stderr


def test_the_batch_hosts_loss_ends_the_job_and_says_why(tmp_path):
    """node1 runs the script (SLURMD_NODENAME): its loss is not replaced
    although node3 is an idle spare of its leaf; the job ends with the
    step's exit code and one line saying why."""
    p, ranks = _job(tmp_path, lose="node1")
    assert p.returncode == 137, p.stderr
    assert ranks == {}                         # no step ran again
    assert ("slurmtopo: error: restart 1 of 1: the step failed (exit 137) and the job's batch "
            "host node1 was lost (down: gone): the batch host runs this job's script, so a "
            "spare cannot replace it; the job ends with the step's exit code, its spare "
            "node(s) unused") in p.stderr, p.stderr
    steps = (tmp_path / "steps").read_text().splitlines()
    assert len(steps) == 1
    assert "-> node3" not in p.stderr


FAKE_TORCHRUN = r'''#!PYTHON
"""torchrun: records its arguments and environment, one file per node."""
import json, os, sys
out = os.environ["TORCHRUN_OUT"]
name = "torchrun-node%s-attempt%s.json" % (os.environ["NODE_RANK"], os.environ["SLURMTOPO_RESTART"])
json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, open(os.path.join(out, name), "w"))
'''


def test_a_static_rendezvous_torchrun_restarts_on_the_spare(tmp_path):
    tr = tmp_path / "torchrun-bin"
    tr.mkdir()
    (tr / "torchrun").write_text(FAKE_TORCHRUN.replace("#!PYTHON", "#!" + sys.executable, 1))
    (tr / "torchrun").chmod(0o755)
    rec = tmp_path / "torchrun-out"
    rec.mkdir()
    (tmp_path / "job").mkdir()
    p, _ = _job(tmp_path / "job", lose="node2", program="print(1)",
                extra_args=["--launcher", "torchrun"],
                extra_env={"TORCHRUN_OUT": str(rec),
                           "PATH_PREFIX": str(tr)})
    assert p.returncode == 0, p.stderr
    recs = {f.name: json.loads(f.read_text()) for f in rec.glob("*.json")}
    assert sorted(recs) == ["torchrun-node0-attempt1.json", "torchrun-node1-attempt1.json"]
    for node_rank, host, gpus in ((0, "node1", "0,1,2,3"), (1, "node3", "4,5,6,7")):
        r = recs[f"torchrun-node{node_rank}-attempt1.json"]
        assert r["env"]["SLURMD_NODENAME"] == host
        assert r["env"]["CUDA_VISIBLE_DEVICES"] == gpus
        assert r["argv"][:4] == ["--nnodes=2", "--nproc-per-node=4", f"--node-rank={node_rank}",
                                 "--master-addr=node1"]
    assert "ranks 4-7: node2 (down: gone) -> node3 (same leaf switch leaf1)" in p.stderr
