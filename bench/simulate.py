"""``slurmtopo simulate`` at scale, through the command line.

Writes an inventory with ``slurmtopo inventory synthetic fat-tree --nodes N``
(HGX H100 nodes, 16 a leaf under 4 spines; 128 nodes, 1,024 GPUs by
default: the size of the Helios and Lingjun slices the issue replays) and a
seeded synthetic trace of 15,000 jobs in the public traces' shape (most on
one GPU, a tail up to 128 GPUs, log-normal run times with a long tail,
bursts of submissions), then times::

    slurmtopo simulate --inventory fat-tree-128.yaml --trace trace-15000.csv --load 0.8 \
        --policy slurm --policy slurm-switches:wait=600 --policy slurmtopo \
        --policy daemon:wait=600 --json --workers 2

(interpreter start, reading, the four replays with shared links and the
output included; wall, CPU and peak resident memory of the process tree's
largest process) and keeps the command's JSON beside the timing.

    python -m bench.simulate [--jobs 15000] [--nodes 128] [--load 0.8] [--workers 2]
        [--each] [--queue] [--sacct-rows N] [--out bench/results/simulate.json]

``--each`` also times every policy alone (one process each). ``--queue``
measures how the cost grows with the queue: ``slurm`` and ``daemon:wait=600``
alone on the first 3,000 jobs at offered loads 0.8, 1.0, 1.3 and 1.6, each
with its mean queue length (Little's law: the jobs' total wait over the
submission period) and the daemon's cycles.

``--tradeoff`` also sweeps the daemon's wait against ``slurm`` (``--sweep
wait=0,600,1800``, with and without the daemon's reservation) and keeps the
trade-off the sweep reads off (docs/simulate.md, "Load, and the wait
trade-off").

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

#: GPUs per job and their share of the jobs (the public traces: most jobs
#: on one GPU, a few on many)
SIZES = ((1, 0.70), (2, 0.08), (4, 0.08), (8, 0.08), (16, 0.03), (32, 0.02), (64, 0.007),
         (128, 0.003))
POLICIES = ("slurm", "slurm-switches:wait=600", "slurmtopo", "daemon:wait=600")
#: offered loads of --queue
QUEUE_LOADS = (0.8, 1.0, 1.3, 1.6)
#: jobs of --queue's replays
QUEUE_JOBS = 3000


def write_trace(path: str, jobs: int, gpus: int, load: float = 1.0, seed: int = 26) -> None:
    """``jobs`` jobs arriving at about ``load`` of ``gpus`` GPUs (see the
    module doc; ``simulate --load`` sets the load exactly)."""
    rng = random.Random(f"simulate-trace-{seed}")
    sizes = [s for s, _ in SIZES]
    weights = [w for _, w in SIZES]
    mean_gpus = sum(s * w for s, w in SIZES)
    median, sigma = 900.0, 2.0
    mean_run = median * math.exp(sigma * sigma / 2)
    rate = load * gpus / (mean_gpus * mean_run)  # jobs a second
    t = 0.0
    lines = ["job_id,gpu_num,submit_time,duration"]
    i = 0
    while i < jobs:
        t += rng.expovariate(rate / 1.6)
        burst = 1 if rng.random() < 0.9 else rng.randint(2, 12)  # users submit in bursts
        g = rng.choices(sizes, weights)[0]
        for _ in range(min(burst, jobs - i)):
            run = min(30 * 86400.0, median * math.exp(rng.gauss(0.0, sigma)))
            lines.append(f"j{i + 1},{g},{t:.0f},{run:.0f}")
            i += 1
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
    """``slurmtopo inventory synthetic fat-tree --nodes N``, through the command line."""
    path = os.path.join(directory, f"fat-tree-{nodes}.yaml")
    if not os.path.exists(path):
        subprocess.run([sys.executable, "-m", "slurmtopo", "inventory", "synthetic", "fat-tree",
                        "--nodes", str(nodes), "-o", path], check=True, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    return path


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
    """One ``slurmtopo simulate --json`` run: its wall and CPU seconds, peak
    RSS, and its output."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from bench.process import run_process

    argv = [sys.executable, "-m", "slurmtopo", "simulate", "--inventory", inv, "--trace", trace,
            "--json", "--workers", str(workers), *extra]
    for p in policies:
        argv += ["--policy", p]
    out = os.path.join(workdir, "out.json")
    measured = run_process(["/bin/sh", "-c", " ".join(
        f"'{a}'" for a in argv) + f" > '{out}'"], cwd=workdir,
        env=dict(os.environ, PYTHONPATH=ROOT))
    if measured["rc"] != 0:
        raise SystemExit(f"slurmtopo simulate failed ({measured['rc']}):\n{measured['stderr']}")
    with open(out) as fh:
        doc = json.load(fh)
    return {"command": " ".join(["slurmtopo"] + argv[3:]), "wall_s": round(measured["wall_s"], 1),
            "cpu_s": round(measured["cpu_s"], 1), "rss_mib": round(measured["rss_bytes"] / 2**20),
            "output": doc}


def queue_scaling(inv: str, trace: str, workdir: str) -> List[Dict[str, Any]]:
    """``slurm`` and the daemon alone at rising loads: CPU against the mean
    queue length (see the module doc)."""
    with open(trace) as fh:
        submits = [float(line.split(",")[2]) for line in list(fh)[1:QUEUE_JOBS + 1]]
    rows = []
    for load in QUEUE_LOADS:
        for policy in ("slurm", "daemon:wait=600"):
            one = simulate(inv, trace, 1, [policy], workdir,
                           ["--jobs", str(QUEUE_JOBS), "--load", str(load)])
            p = one["output"]["policies"][0]
            waits = p["queue_wait_s"]["mean"] * p["jobs"]
            # Little's law over the submission period: jobs waiting on average
            span = (max(submits) - min(submits)) * one["output"]["settings"]["arrival_scale"]
            queue = waits / span if span else 0.0
            rows.append({"load": load, "policy": policy, "cpu_s": one["cpu_s"],
                         "wall_s": one["wall_s"], "mean_queue": round(queue, 1),
                         "daemon_cycles": p.get("daemon_cycles"),
                         "wait_mean_s": p["queue_wait_s"]["mean"]})
    return rows


def tradeoff(inv: str, trace: str, workers: int, workdir: str, load: float) -> Dict[str, Any]:
    """The wait sweep against slurm (see the module doc)."""
    one = simulate(inv, trace, workers, ["slurm", "daemon:wait=0",
                                         "daemon:wait=0,reservations=0"], workdir,
                   ["--load", str(load), "--sweep", "wait=0,600,1800"])
    doc = one["output"]
    rows = [{"policy": p["policy"], "slowdown_mean": p["slowdown"]["mean"],
             "wait_p95_s": p["queue_wait_s"]["p95"], "wait_mean_s": p["queue_wait_s"]["mean"],
             "contended": p["contention"]["jobs"]} for p in doc["runs"][0]["policies"]]
    return {"wall_s": one["wall_s"], "cpu_s": one["cpu_s"], "policies": rows,
            "tradeoff": doc["tradeoff"][0]["rows"], "summary": doc["summary"]}


def run(jobs: int, nodes: int, workers: int, workdir: str, load: float = 0.8,
        policies: Sequence[str] = POLICIES, each: bool = False, queue: bool = False,
        sacct_rows: int = 0, trade: bool = False) -> Dict[str, Any]:
    inv = write_inventory(workdir, nodes)
    trace = os.path.join(workdir, f"trace-{jobs}.csv")
    write_trace(trace, jobs, nodes * 8)
    before = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    whole = simulate(inv, trace, workers, policies, workdir, ["--load", str(load)])
    out: Dict[str, Any] = {"command": whole["command"], "jobs": jobs, "nodes": nodes,
                           "gpus": nodes * 8, "load": load, "workers": workers,
                           "wall_s": whole["wall_s"], "cpu_s": whole["cpu_s"],
                           "rss_mib": whole["rss_mib"], "load_average_before": before,
                           "machine": machine(), "result": whole["output"]}
    if each:  # every policy alone, one process: what each costs
        out["each"] = {}
        for p in policies:
            one = simulate(inv, trace, 1, [p], workdir, ["--load", str(load)])
            out["each"][p] = {"wall_s": one["wall_s"], "cpu_s": one["cpu_s"],
                              "rss_mib": one["rss_mib"]}
    if queue:
        out["queue"] = queue_scaling(inv, trace, workdir)
    if trade:
        out["tradeoff"] = tradeoff(inv, trace, workers, workdir, load)
    if sacct_rows:  # reading sacct history of many-node jobs
        sacct = os.path.join(workdir, f"sacct-{sacct_rows}.txt")
        write_sacct(sacct, sacct_rows)
        big = write_inventory(workdir, 8000 // 8 if nodes < 1000 else nodes)
        one = simulate(big, sacct, 1, ["slurm"], workdir, ["--jobs", "1"])
        out["sacct"] = {"command": one["command"], "rows": sacct_rows,
                        "wall_s": one["wall_s"], "cpu_s": one["cpu_s"]}
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=15000)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "simulate.json"))
    ap.add_argument("--workdir", default=None, help="keep the inventory and trace here")
    ap.add_argument("--each", action="store_true",
                    help="also time every policy alone (one process each)")
    ap.add_argument("--queue", action="store_true",
                    help="also measure the cost against the queue length")
    ap.add_argument("--tradeoff", action="store_true",
                    help="also sweep the daemon's wait against slurm")
    ap.add_argument("--sacct-rows", type=int, default=0,
                    help="also time reading sacct history of that many 120-node jobs")
    args = ap.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="slurmtopo-bench-sim-")
    os.makedirs(workdir, exist_ok=True)
    res = run(args.jobs, args.nodes, args.workers, workdir, args.load, args.policy or POLICIES,
              args.each, args.queue, args.sacct_rows, args.tradeoff)
    rows: List[str] = [f"{res['jobs']} jobs, {res['nodes']} nodes ({res['gpus']} GPUs), offered "
                       f"load {res['load']:.0%}, {res['workers']} workers: {res['wall_s']} s "
                       f"through the command line ({res['cpu_s']} s CPU, {res['rss_mib']} MiB "
                       f"peak; load average before {res['load_average_before']})"]
    for name, t in res.get("each", {}).items():
        rows.append(f"  {name} alone: {t['wall_s']} s ({t['cpu_s']} s CPU, {t['rss_mib']} MiB)")
    for q in res.get("queue", []):
        rows.append(f"  load {q['load']:.0%} {q['policy']}: {q['cpu_s']} s CPU, mean queue "
                    f"{q['mean_queue']} jobs, mean wait {q['wait_mean_s']} s"
                    + (f", {q['daemon_cycles']} cycles" if q["daemon_cycles"] else ""))
    if "tradeoff" in res:
        for r in res["tradeoff"]["policies"]:
            rows.append(f"  trade-off {r['policy']}: slowdown mean {r['slowdown_mean']}, wait "
                        f"p95 {r['wait_p95_s']} s mean {r['wait_mean_s']} s")
        rows.extend(f"  {line}" for line in res["tradeoff"]["summary"])
    if "sacct" in res:
        sa = res["sacct"]
        rows.append(f"  sacct history, {sa['rows']} jobs of 120 nodes, read: {sa['wall_s']} s "
                    f"({sa['cpu_s']} s CPU)")
    for p in res["result"]["policies"]:
        w, s, c = p["queue_wait_s"], p["slowdown"], p["contention"]
        rows.append(f"  {p['policy']}: wait mean {w['mean']} s p95 {w['p95']} s, slowdown mean "
                    f"{s['mean']}, contended jobs {c['jobs']} (by others {c['jobs_by_others']}), "
                    f"utilisation {p['gpu_utilisation']}")
    print("\n".join(rows))
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=2, sort_keys=True)
        fh.write("\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
