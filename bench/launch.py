"""The start-time step and the per-task launch, through the command line.

What a big job pays when it starts, measured as the batch script runs it:

* ``slurmtopo bind`` (a fresh ``python -m slurmtopo bind`` process on the
  batch host, interpreter start included) for jobs of 1,024 to 32,768 ranks
  whose allocation is the plan; Slurm is a fake ``scontrol`` on PATH that
  answers ``show job -d`` as Slurm folds it (nodes with the same GPUs on one
  line). Wall and CPU time (user + system, from ``wait4``: this VM is
  shared) and peak RSS, median of several runs; the files it wrote.
* One task's launch: ``/bin/sh -c TASK_SNIPPET slurmtopo-task true`` with
  exactly what env.sh exports (the batch script evaluates that text), for the job's last
  rank, minus a bare ``/bin/sh -c 'exec true'`` (wall: best of 20 runs
  each, CPU: medians): the wrapper's own cost per rank, with CPU binding off and, when ``taskset`` is installed, on
  (the snippet then runs ``taskset`` twice: a check, then the command
  under it).

    python -m bench.launch [--quick] [--workdir DIR] [--worlds 1024,4096] [--nodes N]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.process import (NODES, QUICK_NODES, child_env as _env, kib as _kb,  # noqa: E402
                           layout_for, median_run, mib as _mib, seconds as _s, show,
                           slurmtopo, write_inventory)

#: job sizes (ranks) of the start-time table
WORLDS = (1024, 4096, 16384, 32768)
QUICK_WORLDS = (512, 4096)

FAKE_SCONTROL = """#!/bin/sh
# answers `scontrol show job -d ID` from a file, like Slurm would
cat "$SLURMTOPO_BENCH_SCONTROL"
"""


def _plan(inv_path: str, workdir: str, world: int) -> str:
    """The plan directory of a ``world``-GPU job (made once)."""
    tp, pp, dp = layout_for(world)
    plan_dir = os.path.join(workdir, f"plan-{world}")
    if not os.path.exists(os.path.join(plan_dir, "job.sbatch")):
        subprocess.run(slurmtopo("plan", "--inventory", inv_path, "--tp", str(tp), "--pp",
                                 str(pp), "--dp", str(dp), "--output-dir", plan_dir, "--",
                                 "python", "train.py"), env=_env(), check=True,
                       stdout=subprocess.DEVNULL)
    return plan_dir


def _job_env(workdir: str, world: int, rm: Mapping[str, Any]) -> Dict[str, str]:
    """The batch step's environment: SLURM_* as Slurm sets them for an
    allocation equal to the plan, and the fake scontrol first on PATH."""
    from slurmtopo.inventory.hostlist import fold_hostlist
    from slurmtopo.inventory.model import format_cpulist

    per_host: Dict[str, List[int]] = {}
    for r in rm["ranks"]:
        per_host.setdefault(r["host"], []).append(r["gpu"])
    job = ["JobId=4242 JobName=bench", "   JobState=RUNNING Reason=None",
           f"   NodeList={fold_hostlist(per_host)}"]
    by_gpus: Dict[str, List[str]] = {}  # Slurm folds nodes with the same GPUs into one line
    for h, gpus in per_host.items():
        by_gpus.setdefault(format_cpulist(gpus), []).append(h)
    for idx, hosts in by_gpus.items():
        job.append(f"     Nodes={fold_hostlist(hosts)} CPU_IDs=0-223 Mem=0 "
                   f"GRES=gpu:8(IDX:{idx})")
    bindir = os.path.join(workdir, "fakebin")
    os.makedirs(bindir, exist_ok=True)
    with open(os.path.join(bindir, "scontrol"), "w") as fh:
        fh.write(FAKE_SCONTROL)
    os.chmod(os.path.join(bindir, "scontrol"), 0o755)
    answer = os.path.join(workdir, f"scontrol-{world}.txt")
    with open(answer, "w") as fh:
        fh.write("\n".join(job) + "\n")
    first = next(iter(per_host))
    env = _env()
    env.update({"PATH": bindir + os.pathsep + env.get("PATH", ""),
                "SLURMTOPO_BENCH_SCONTROL": answer, "SLURM_JOB_ID": "4242",
                "SLURM_JOB_NODELIST": fold_hostlist(per_host), "SLURMD_NODENAME": first,
                "SLURM_JOB_GPUS": ",".join(map(str, sorted(per_host[first]))),
                "CUDA_VISIBLE_DEVICES": ",".join(map(str, sorted(per_host[first])))})
    return env


def bind_run(inv_path: str, workdir: str, world: int, repeats: int,
             progress: Callable[[str], None]) -> Dict[str, Any]:
    """``slurmtopo bind`` on the batch host of a ``world``-rank job whose
    allocation is the plan, and one task's launch."""
    from slurmtopo.plan.plandoc import TASK_NAME, TASK_SNIPPET
    from slurmtopo.sbatch.script import extract_plan

    plan_dir = _plan(inv_path, workdir, world)
    with open(os.path.join(plan_dir, "job.sbatch")) as fh:
        script = fh.read()
    plan_path = os.path.join(workdir, f"plan-{world}.json")
    with open(plan_path, "w") as fh:
        fh.write(extract_plan(script))
    with open(os.path.join(plan_dir, "rankmap.json")) as fh:
        rm = json.load(fh)
    env = _job_env(workdir, world, rm)
    run_dir = os.path.join(workdir, f"run-{world}")
    argv = slurmtopo("bind", "--plan", plan_path, "--run-dir", run_dir, "--cgroup-devices",
                     "no", "--no-probe")
    progress(f"bind {world} ranks")
    bind = median_run(argv, repeats, env=env)
    out: Dict[str, Any] = {"ranks": world, "command": show(argv), "bind": bind,
                           "script_bytes": len(script.encode())}
    if "error" in bind:
        return out
    # one task as the script's srun line starts it: /bin/sh running the task
    # snippet with what env.sh exported, then exec'ing the command
    dump = subprocess.run(["sh", "-c", '. "$1" && env -0', "sh",
                           os.path.join(run_dir, "env.sh")], env=env, check=True,
                          capture_output=True).stdout.decode()
    tenv = dict(kv.split("=", 1) for kv in dump.split("\0") if "=" in kv)
    last = rm["ranks"][-1]
    tenv.update(SLURM_PROCID=str(world - 1), SLURMD_NODENAME=last["host"],
                SLURMTOPO_CPU_BIND="0")
    progress(f"one task's launch ({world} ranks)")
    launch = median_run(["/bin/sh", "-c", TASK_SNIPPET, TASK_NAME, "true"], repeats * 4,
                        env=tenv)
    bare = median_run(["/bin/sh", "-c", "exec true"], repeats * 4, env=tenv)
    # with CPU binding as a real rank has it: the snippet tries `taskset -c
    # CPUS true`, then execs the command under taskset (two more programs)
    bound = (median_run(["/bin/sh", "-c", TASK_SNIPPET, TASK_NAME, "true"], repeats * 4,
                        env=dict(tenv, SLURMTOPO_CPU_BIND="1"))
             if shutil.which("taskset") else None)
    blocks = os.path.join(run_dir, "task-env")
    out.update({"launch": launch, "bare_shell": bare,
                # a few ms of launch on a busy machine: the best of 20 runs
                # (what the launch costs when it gets a core) against the
                # best bare shell; CPU time is the median
                "launch_own_s": min(launch["samples_s"]) - min(bare["samples_s"]),
                "launch_own_cpu_s": launch["cpu_s"] - bare["cpu_s"],
                "launch_bound_own_s": (min(bound["samples_s"]) - min(bare["samples_s"])
                                       if bound and "error" not in bound else None),
                "task_env_var_bytes": len(tenv.get("SLURMTOPO_TASK_ENV", "").encode()),
                "task_env_bytes": os.path.getsize(os.path.join(run_dir, "task-env.sh")),
                "block_files": len(os.listdir(blocks)) if os.path.isdir(blocks) else 0,
                "run_dir_bytes": sum(os.path.getsize(os.path.join(d, f))
                                     for d, _, fs in os.walk(run_dir) for f in fs)})
    return out


def run(inv_path: str, workdir: str, worlds: Sequence[int], repeats: int,
        progress: Optional[Callable[[str], None]] = None) -> List[Dict[str, Any]]:
    """:func:`bind_run` for every size."""
    progress = progress or (lambda msg: None)
    return [bind_run(inv_path, workdir, w, repeats, progress) for w in worlds]


def tables(rows: Sequence[Mapping[str, Any]]) -> List[tuple]:
    """(title, header, rows) for bench.run's markdown and console."""
    from bench.speed import loglog_slope

    body = []
    for r in rows:
        b = r.get("bind", {})
        if "error" in b:
            body.append([f"{r['ranks']:,}", "failed: " + "; ".join(b["error"])] + [""] * 7)
            continue
        where = (f"{r['block_files']} block files" if r.get("block_files")
                 else "in the environment")
        body.append([f"{r['ranks']:,}", _s(b.get("median_s")), _s(b.get("cpu_s")),
                     _mib(b.get("rss_bytes")), _kb(r.get("run_dir_bytes")), where,
                     f"{r['launch_own_s'] * 1e3:.2f} ms" if "launch_own_s" in r else "-",
                     f"{r['launch_own_cpu_s'] * 1e3:.2f} ms" if "launch_own_cpu_s" in r
                     else "-",
                     f"{r['launch_bound_own_s'] * 1e3:.2f} ms" if r.get("launch_bound_own_s")
                     is not None else "-"])
    ok = [r for r in rows if "error" not in r.get("bind", {})]
    for key, label in (("cpu_s", "CPU"), ("median_s", "wall")):
        slope = loglog_slope([(r["ranks"], r["bind"][key]) for r in ok])
        if slope is not None:
            body.append(["growth", f"bind {label}: log-log slope {slope:.2f} over "
                         f"{ok[0]['ranks']:,}-{ok[-1]['ranks']:,} ranks (1 = linear)"]
                        + [""] * 7)
    return [("Start time through the command line: `slurmtopo bind` on the batch host "
             "(interpreter start included; medians) and one task's own launch (`/bin/sh` and "
             "the srun line's snippet, minus a bare `sh -c 'exec true'`; wall: best of 20, "
             "CPU: median)",
             ["ranks", "bind wall", "bind CPU", "bind peak RSS", "run directory",
              "task environment", "task launch, own wall", "own CPU",
              "own wall with CPU binding (taskset)"], body)]


def main(argv: Optional[Sequence[str]] = None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workdir", default=None, help="keep inputs and outputs here")
    ap.add_argument("--nodes", type=int, default=None, help="inventory size (default 12,500)")
    ap.add_argument("--worlds", default=None,
                    help="comma-separated job sizes in ranks (default "
                         f"{','.join(map(str, WORLDS))})")
    ap.add_argument("--repeats", type=int, default=None, help="runs per median (default 5)")
    args = ap.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="slurmtopo-bench-launch-")
    os.makedirs(workdir, exist_ok=True)
    nodes = args.nodes or (QUICK_NODES if args.quick else NODES)
    worlds = ([int(w) for w in args.worlds.split(",")] if args.worlds
              else QUICK_WORLDS if args.quick else WORLDS)
    inv_path = write_inventory(workdir, nodes)
    rows = run(inv_path, workdir, [w for w in worlds if w <= nodes * 8],
               args.repeats or (2 if args.quick else 5),
               lambda m: print(f"  {m}", file=sys.stderr))
    for title, header, body in tables(rows):
        print(title)
        for r in [header] + body:
            print("  " + " | ".join(str(c) for c in r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
