"""``slurmtopo simulate`` at scale, through the command line.

Writes a 1,000-node HGX H100 inventory (the 3-level fat tree of
``bench.scenarios``, 8,000 GPUs) and a seeded synthetic trace of 15,000
jobs in the CSV shape of the public GPU traces, then times::

    slurmtopo simulate --inventory fattree3-1000.yaml --trace trace-15000.csv \\
        --policy slurm --policy slurm-switches:wait=600 --policy slurmtopo \\
        --policy daemon:wait=600 --json

(interpreter start, reading, the four replays and the output included) and
keeps the command's JSON beside the timing. The trace mimics the published
GPU-cluster traces' shape: half the jobs on one GPU, a tail up to 128 GPUs
(16 nodes), log-normal run times (median 30 minutes), Poisson arrivals
offering 110% of the cluster's GPU-hours over the submission period (jobs
queue at the peaks: a minute's wait on average under Slurm's own
placement).

    python -m bench.simulate [--jobs 15000] [--nodes 1000] [--workers 2] [--each] \\
        [--sacct-rows N] [--out bench/results/simulate.json]

``--sacct-rows N`` also times reading ``sacct -P`` history of N jobs of 120
nodes each (NodeList ``gpu[0001-0060,0100-0159]``-shaped: half of them on
one of a few hundred node sets a site reuses, half on sets of their own)
through ``slurmtopo simulate --trace sacct-N.txt --policy slurm --jobs 1
--json``: every row is read, one job replayed, so the time is the reader's.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: GPUs per job and their share of the jobs
SIZES = ((1, 0.50), (2, 0.10), (4, 0.10), (8, 0.15), (16, 0.07), (32, 0.05), (64, 0.02),
         (128, 0.01))
POLICIES = ("slurm", "slurm-switches:wait=600", "slurmtopo", "daemon:wait=600")


def write_trace(path: str, jobs: int, gpus: int, load: float = 1.1, seed: int = 26) -> None:
    """``jobs`` jobs arriving at ``load`` of ``gpus`` GPUs (see the module doc)."""
    rng = random.Random(f"simulate-trace-{seed}")
    sizes = [s for s, _ in SIZES]
    weights = [w for _, w in SIZES]
    mean_gpus = sum(s * w for s, w in SIZES)
    median, sigma = 1800.0, 1.5
    mean_run = median * math.exp(sigma * sigma / 2)
    rate = load * gpus / (mean_gpus * mean_run)  # jobs a second
    t = 0.0
    lines = ["job_id,gpu_num,submit_time,duration"]
    for i in range(jobs):
        t += rng.expovariate(rate)
        g = rng.choices(sizes, weights)[0]
        run = min(14 * 86400.0, median * math.exp(rng.gauss(0.0, sigma)))
        lines.append(f"j{i + 1},{g},{t:.0f},{run:.0f}")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def write_sacct(path: str, rows: int, seed: int = 26) -> None:
    """``rows`` finished jobs of 120 nodes (960 GPUs) in ``sacct -P`` shape
    (see the module doc)."""
    from datetime import datetime, timedelta

    rng = random.Random(f"simulate-sacct-{seed}")
    t0 = datetime(2025, 1, 1)
    lines = ["JobID|Submit|Start|End|AllocTRES|NodeList|NNodes|Timelimit|State"]
    for i in range(rows):
        a, b = (rng.randrange(1, 20), rng.randrange(100, 120)) if rng.random() < 0.5 else \
            (rng.randrange(1, 4000), rng.randrange(4100, 8000))
        at = [(t0 + timedelta(seconds=60 * i + d)).strftime("%Y-%m-%dT%H:%M:%S")
              for d in (0, 30, 3600)]
        lines.append(f"{i + 1}|{at[0]}|{at[1]}|{at[2]}|billing=960,cpu=960,gres/gpu=960,"
                     f"node=120|gpu[{a:04d}-{a + 59:04d},{b:04d}-{b + 59:04d}]|120|02:00:00|"
                     "COMPLETED")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def write_inventory(directory: str, nodes: int) -> str:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from bench.process import write_inventory as write

    return write(directory, nodes)


def machine() -> Dict[str, Any]:
    info: Dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                            "platform": platform.platform()}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        info["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    return info


def simulate(inv: str, trace: str, workers: int, policies: Sequence[str],
             workdir: str, extra: Sequence[str] = ()) -> Dict[str, Any]:
    """One ``slurmtopo simulate --json`` run: its wall and CPU seconds, and its output."""
    argv = [sys.executable, "-m", "slurmtopo", "simulate", "--inventory", inv, "--trace", trace,
            "--json", "--workers", str(workers), *extra]
    for p in policies:
        argv += ["--policy", p]
    env = dict(os.environ, PYTHONPATH=ROOT)
    before = os.times()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=workdir)
    wall = time.perf_counter() - t0
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"slurmtopo simulate failed ({proc.returncode}):\n{proc.stderr}")
    cpu = (after.children_user - before.children_user) + \
        (after.children_system - before.children_system)
    return {"command": " ".join(["slurmtopo"] + argv[3:]), "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "output": json.loads(proc.stdout)}


def run(jobs: int, nodes: int, workers: int, workdir: str,
        policies: Sequence[str] = POLICIES, each: bool = False,
        sacct_rows: int = 0) -> Dict[str, Any]:
    inv = write_inventory(workdir, nodes)
    trace = os.path.join(workdir, f"trace-{jobs}.csv")
    write_trace(trace, jobs, nodes * 8)
    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    whole = simulate(inv, trace, workers, policies, workdir)
    out: Dict[str, Any] = {"command": whole["command"], "jobs": jobs, "nodes": nodes,
                           "gpus": nodes * 8, "workers": workers, "wall_s": whole["wall_s"],
                           "cpu_s": whole["cpu_s"], "load_average_before": load,
                           "machine": machine(), "result": whole["output"]}
    if each:  # every policy alone, one process: what each costs
        out["each"] = {}
        for p in policies:
            one = simulate(inv, trace, 1, [p], workdir)
            out["each"][p] = {"wall_s": one["wall_s"], "cpu_s": one["cpu_s"]}
    if sacct_rows:  # reading sacct history of many-node jobs
        sacct = os.path.join(workdir, f"sacct-{sacct_rows}.txt")
        write_sacct(sacct, sacct_rows)
        one = simulate(inv, sacct, 1, ["slurm"], workdir, ["--jobs", "1"])
        out["sacct"] = {"command": one["command"], "rows": sacct_rows,
                        "wall_s": one["wall_s"], "cpu_s": one["cpu_s"]}
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=15000)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "simulate.json"))
    ap.add_argument("--workdir", default=None, help="keep the inventory and trace here")
    ap.add_argument("--each", action="store_true",
                    help="also time every policy alone (one process each)")
    ap.add_argument("--sacct-rows", type=int, default=0,
                    help="also time reading sacct history of that many 120-node jobs")
    args = ap.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="slurmtopo-bench-sim-")
    os.makedirs(workdir, exist_ok=True)
    res = run(args.jobs, args.nodes, args.workers, workdir, args.policy or POLICIES, args.each,
              args.sacct_rows)
    rows: List[str] = [f"{res['jobs']} jobs, {res['nodes']} nodes ({res['gpus']} GPUs), "
                       f"{res['workers']} workers: {res['wall_s']} s through the command line "
                       f"({res['cpu_s']} s CPU; load average before {res['load_average_before']})"]
    for name, t in res.get("each", {}).items():
        rows.append(f"  {name} alone: {t['wall_s']} s ({t['cpu_s']} s CPU)")
    if "sacct" in res:
        sa = res["sacct"]
        rows.append(f"  sacct history, {sa['rows']} jobs of 120 nodes, read: {sa['wall_s']} s "
                    f"({sa['cpu_s']} s CPU)")
    for p in res["result"]["policies"]:
        w, s = p["queue_wait_s"], p["slowdown"]
        rows.append(f"  {p['policy']}: wait mean {w['mean']} s p95 {w['p95']} s, slowdown mean "
                    f"{s['mean']}, utilisation {p['gpu_utilisation']}")
    print("\n".join(rows))
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=2, sort_keys=True)
        fh.write("\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
