"""The placement daemon under load: 1,000 held jobs on 100,000 GPUs.

Builds the daemon tests' Slurm in memory (``tests/daemon/conftest.py``'s
``FakeSlurm``) over the 3-level fat tree of ``bench.scenarios`` with about
half of the GPUs busy, submits held, tagged jobs of 8 to 256 GPUs (TP 8 on
NVLink, DP the rest) and times ``Daemon.cycle()``: the first cycle decides
every job (most are released), the next ones see the rest still waiting.
Slurm's own scheduling of released jobs (the fake's ``schedule()``) is not
part of the daemon's cycle and is switched off while timing.

    python -m bench.daemon_load [--nodes 12500] [--jobs 1000]
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(nodes: int, jobs: int, busy: float = 0.5, seed: int = 7):
    """(FakeSlurm, inventory, job ids) ready for a cycle."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from bench.scenarios import cluster
    from slurmtopo.daemon.submit import submit_for_daemon
    from slurmtopo.groups import Layout
    from slurmtopo.request import JobRequest
    from tests.daemon.conftest import FakeSlurm

    inv = cluster("fattree3", nodes)
    slurm = FakeSlurm(nodes=0, auto_schedule=False)
    names = list(inv.nodes)
    slurm.node_names = names
    slurm.cpus = {n: 224 for n in names}
    slurm.busy = {n: {} for n in names}
    slurm.cpu_used = {n: 0 for n in names}
    slurm.excl = {n: None for n in names}
    slurm.node_state = {n: "idle" for n in names}
    slurm.node_flags = {n: set() for n in names}
    slurm.partitions = {n: ("gpu",) for n in names}
    rng = random.Random(seed)
    i = 0
    while i < len(names) * busy:  # whole-node jobs in runs, and some partial nodes
        run = rng.randint(1, max(1, min(32, nodes // 8)))
        for n in names[i:i + run]:
            slurm.occupy(n, range(8))
        i += run
        gap = rng.randint(1, 16)
        for n in names[i:i + gap]:
            if rng.random() < 0.3:
                slurm.occupy(n, range(rng.choice((2, 4))))
        i += gap
    ids = []
    for _ in range(jobs):
        world = 8 * min(rng.choice((1, 1, 2, 4, 8, 16, 32)), max(1, nodes // 16))
        req = JobRequest(layout=Layout(tp=8, dp=world // 8), gpus_per_node=8,
                         require={"tp": "nvlink"})
        text = (f"#!/bin/bash\n#SBATCH --nodes={world // 8}\n#SBATCH --ntasks-per-node=8\n"
                "#SBATCH --gpus-per-node=8\nsrun true\n")
        ids.append(submit_for_daemon(slurm, req, text))
    return slurm, inv, ids


def cycle_timing(nodes: int = 12500, jobs: int = 1000, cycles: int = 3) -> Dict[str, Any]:
    from slurmtopo.daemon.loop import Daemon

    slurm, inv, ids = build(nodes, jobs)
    spool = tempfile.mkdtemp(prefix="slurmtopo-bench-spool-")
    try:
        d = Daemon(slurm, inv, spool)
        times, actions = [], []
        for _ in range(cycles):
            t0 = time.perf_counter()
            decisions = d.cycle()
            times.append(time.perf_counter() - t0)
            counts: Dict[str, int] = {}
            for x in decisions:
                counts[x.action] = counts.get(x.action, 0) + 1
            actions.append(counts)
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    return {"what": f"daemon cycle, {jobs} held jobs, {nodes * 8:,} GPUs about half busy",
            "nodes": nodes, "jobs": jobs, "cycles_s": times, "first_s": times[0],
            "median_s": statistics.median(times), "actions": actions}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=12500)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args(argv)
    if a.profile:
        import cProfile
        import pstats

        slurm, inv, ids = build(a.nodes, a.jobs)
        from slurmtopo.daemon.loop import Daemon
        d = Daemon(slurm, inv, tempfile.mkdtemp())
        cProfile.runctx("d.cycle()", globals(), locals(), "/tmp/daemon.prof")
        pstats.Stats("/tmp/daemon.prof").sort_stats("cumtime").print_stats(30)
        return 0
    print(cycle_timing(a.nodes, a.jobs, a.cycles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
