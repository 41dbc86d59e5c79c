"""The placement daemon under load: 1,000 held jobs on 100,000 GPUs.

Builds the daemon tests' Slurm in memory (``slurmtopo.testing.slurm_backend``'s
``FakeSlurm``, the test double tests and bench share) over the 3-level fat tree of
``bench.scenarios`` with about
half of the GPUs busy, submits held, tagged jobs of 8 to 256 GPUs (TP 8 on
NVLink, DP the rest) and times ``Daemon.cycle()``: the first cycle decides
every job (most are released), the next ones see the rest still waiting.
Slurm's own scheduling of released jobs (the fake's ``schedule()``) is not
part of the daemon's cycle and is switched off while timing.

    python -m bench.daemon_load --gpus 100000 --jobs 100,300,1000 \
        --out bench/results/daemon.json
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
    from slurmtopo.job.groups import Layout
    from slurmtopo.job.request import JobRequest
    from slurmtopo.testing.slurm_backend import FakeSlurm

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


def cycle_timing(nodes: int = 12500, jobs: int = 1000, cycles: int = 3,
                 config=None) -> Dict[str, Any]:
    """Time ``cycles`` daemon cycles: wall and CPU seconds of each, what
    each decided, and the load average (a shared machine: CPU time is the
    figure that does not depend on the other processes)."""
    from slurmtopo.daemon.loop import Daemon

    slurm, inv, ids = build(nodes, jobs)
    spool = tempfile.mkdtemp(prefix="slurmtopo-bench-spool-")
    try:
        d = Daemon(slurm, inv, spool, config)
        out = []
        for _ in range(cycles):
            load = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            decisions = d.cycle()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            counts: Dict[str, int] = {}
            for x in decisions:
                counts[x.action] = counts.get(x.action, 0) + 1
            out.append({"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                        "load_1min": round(load, 2), "actions": counts})
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    return {"what": f"daemon cycle, {jobs} held jobs, {nodes * 8:,} GPUs",
            "nodes": nodes, "gpus": nodes * 8, "jobs": jobs, "cycles": out,
            # the shape bench.cli's table reads
            "cycles_s": [c["wall_s"] for c in out], "actions": [c["actions"] for c in out],
            "first_wall_s": out[0]["wall_s"], "first_cpu_s": out[0]["cpu_s"],
            "max_cpu_s": max(c["cpu_s"] for c in out),
            "median_wall_s": statistics.median(c["wall_s"] for c in out)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=None, help="nodes of 8 GPUs (default 12,500)")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs (nodes = GPUs / 8)")
    ap.add_argument("--jobs", default="1000",
                    help="held jobs; a comma-separated list measures each (growth)")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--out", help="write the results as JSON here (bench/results/daemon.json)")
    ap.add_argument("--max-releases", type=int, default=None,
                    help="the daemon's --max-releases (0: no limit; default: the daemon's)")
    ap.add_argument("--best-fit-releases", type=int, default=None,
                    help="the daemon's --best-fit-releases (0: all; default: the daemon's)")
    ap.add_argument("--profile", action="store_true", help="cProfile the first cycle")
    a = ap.parse_args(argv)
    nodes = a.nodes or (a.gpus // 8 if a.gpus else 12500)
    counts = [int(x) for x in str(a.jobs).split(",") if x.strip()]
    from slurmtopo.daemon.decisions import Config
    cfg = Config()
    if a.max_releases is not None:
        cfg.max_releases = a.max_releases
    if a.best_fit_releases is not None:
        cfg.best_fit_releases = a.best_fit_releases
    if a.profile:
        import cProfile
        import pstats

        slurm, inv, ids = build(nodes, counts[-1])
        from slurmtopo.daemon.loop import Daemon
        d = Daemon(slurm, inv, tempfile.mkdtemp(), cfg)
        prof = cProfile.Profile()
        prof.runcall(d.cycle)
        pstats.Stats(prof).sort_stats(os.environ.get("SORT", "cumtime")).print_stats(30)
        return 0
    runs = []
    for n in counts:
        r = cycle_timing(nodes, n, a.cycles, cfg)
        runs.append(r)
        print(f"{n:>6} held jobs, {nodes * 8:,} GPUs: " + "; ".join(
            f"cycle {k + 1}: {c['wall_s']:.2f} s wall, {c['cpu_s']:.2f} s CPU (load "
            f"{c['load_1min']:.1f}) {c['actions']}" for k, c in enumerate(r["cycles"])),
            flush=True)
    if a.out:
        import json
        import platform

        doc = {"command": "python -m bench.daemon_load " + " ".join(argv if argv is not None
                                                                   else sys.argv[1:]),
               "config": {"max_releases": cfg.max_releases,
                          "best_fit_releases": cfg.best_fit_releases,
                          "alternatives": cfg.alternatives},
               "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                           "note": "shared machine: compare CPU seconds"},
               "runs": runs}
        with open(a.out + ".tmp", "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(a.out + ".tmp", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
