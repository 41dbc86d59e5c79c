"""Running a `slurmtopo sbatch` job on a dev cluster and checking every
rank's environment against the rank map (shared by the integration tests
that submit through slurmtopo)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.integration.helpers import run_slurmtopo

ROOT = Path(__file__).resolve().parents[2]
INV = ROOT / "tests" / "fixtures" / "slurm" / "devcluster-inventory.yaml"

DUMP = ("import json, os, sys; json.dump({'env': dict(os.environ), "
        "'cpus': sorted(os.sched_getaffinity(0)), 'argv': sys.argv[1:]}, "
        "open(os.path.join(sys.argv[1], 'rank-%s.json' % os.environ['RANK']), 'w'))")


class Run:
    """One `slurmtopo sbatch` submission and what its ranks wrote."""

    def __init__(self, cluster, tmp: Path, plan_args, cmd_args=(), extra=(), command=None,
                 path=None, inv: Path = INV):
        self.cluster = cluster
        self.inv = inv
        self.tmp = tmp
        self.out = tmp / "ranks"
        self.out.mkdir()
        self.run_dir = tmp / "run"
        self.plan_dir = tmp / "plan"
        self.env = dict(cluster.env, PYTHONPATH=str(ROOT))
        if path is not None:  # what the job (and so every task) gets as PATH
            self.env["PATH"] = str(path)
        self.cmd_args = list(cmd_args)
        command = list(command) if command else [sys.executable, "-c", DUMP]
        args = ["sbatch", "--inventory", inv, "--python", sys.executable, "--run-dir",
                self.run_dir, "--output-dir", self.plan_dir, f"--sbatch=--output={tmp}/%j.out",
                "--parsable", *plan_args, *extra,
                "--", *command, self.out, *self.cmd_args]
        self.proc = run_slurmtopo(args, tmp, self.env)
        self.job_id = int(self.proc.stdout.strip())

    def wait(self, timeout=90):
        state = self.cluster.wait_job(self.job_id, timeout=timeout)
        self.job = self.cluster.job(self.job_id)
        assert state == "COMPLETED", (state, self.output())
        return self

    def output(self) -> str:
        p = self.tmp / f"{self.job_id}.out"
        return p.read_text() if p.exists() else "(no output)"

    @property
    def script(self) -> str:
        return (self.plan_dir / "job.sbatch").read_text()

    def planned(self):
        from slurmtopo.rankmap import placement_from_dict
        return placement_from_dict(json.loads((self.plan_dir / "rankmap.json").read_text()))

    def bound(self):
        """(placement, rankmap doc) that `slurmtopo bind` decided at start."""
        from slurmtopo.rankmap import placement_from_dict
        doc = json.loads((self.run_dir / "rankmap.json").read_text())
        return placement_from_dict(doc), doc

    def ranks(self):
        files = sorted(self.out.glob("rank-*.json"))
        return {int(f.stem.split("-")[1]): json.loads(f.read_text()) for f in files}


def check_ranks(run: Run):
    """Every rank's environment against the rank map bind wrote. Returns
    (placement, rankmap doc)."""
    from slurmtopo.inventory import load_inventory
    from slurmtopo.model import format_cpulist, parse_cpulist
    from slurmtopo.rankmap import nccl_env, node_ranks

    inv = load_inventory(str(run.inv))
    placement, doc = run.bound()
    ranks = run.ranks()
    world = placement.world_size
    assert sorted(ranks) == list(range(world)), run.output()
    alloc = {h: set(parse_cpulist(v)) for h, v in doc["allocation"].items()}
    # the allocation bind used is Slurm's: the job's node list
    from slurmtopo.hostlist import expand_hostlist
    assert set(alloc) == set(expand_hostlist(run.job["NodeList"]))
    nr = node_ranks(placement)
    nccl = nccl_env(inv, placement, None)
    allowed = os.sched_getaffinity(0)
    port = str(20000 + run.job_id % 10000)
    for r, got in ranks.items():
        env, slot = got["env"], placement.slots[r]
        host = slot.host
        gpus = placement.gpus_on(host)
        assert env["SLURMD_NODENAME"] == host, (r, env["SLURMD_NODENAME"], host)
        assert env["RANK"] == str(r)
        assert env["LOCAL_RANK"] == str(slot.local_rank)
        assert env["WORLD_SIZE"] == str(world)
        assert env["LOCAL_WORLD_SIZE"] == str(len(gpus))
        assert env["NODE_RANK"] == str(nr[host])
        # no device cgroup: the node's own GPU numbers, in local-rank order
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, gpus))
        assert env["CUDA_VISIBLE_DEVICES"].split(",")[slot.local_rank] == str(slot.gpu)
        assert env["SLURMTOPO_GPU"] == str(slot.gpu)
        assert set(gpus) <= alloc[host], (host, gpus, alloc[host])
        if env.get("SLURM_STEP_GPUS"):          # what Slurm itself gave the step here
            assert set(gpus) <= set(map(int, env["SLURM_STEP_GPUS"].split(",")))
        assert env["MASTER_ADDR"] == placement.slots[0].host
        assert env["MASTER_PORT"] == port
        for k, v in nccl.items():
            assert env.get(k) == v, (r, k, env.get(k), v)
        assert {k for k in env if k.startswith("NCCL_")} == set(nccl)
        assert env.get("SLURMTOPO_NICS", "") == ",".join(slot.nics)
        want_cpus = set(slot.cpus) & allowed or allowed
        assert set(got["cpus"]) == want_cpus, (r, got["cpus"], slot.cpus)
        # the planned CPUs; taskset binds the rank to those that exist and are allowed
        # here (a 2-CPU test machine has fewer than the inventory), "" when none are
        if set(slot.cpus) & allowed:
            assert env["SLURMTOPO_CPUS"] == format_cpulist(slot.cpus)
        else:
            assert env["SLURMTOPO_CPUS"] == ""
        assert got["argv"] == [str(run.out)] + run.cmd_args
    return placement, doc
