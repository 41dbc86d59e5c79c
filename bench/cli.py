"""Timings through the command line, as users run slurmtopo, at 100,000 GPUs.

Every number here is a fresh ``python -m slurmtopo ...`` process (interpreter
start and imports included; byte-code compiled beforehand, as an installed
package is), wall clock and the child's peak resident memory
(``os.wait4``), median of several runs:

* ``plan``: jobs of 8 to 32,768 GPUs (TP 8, PP up to 16, DP the rest) on a
  12,500-node (100,000-GPU) inventory written with a node type and a
  3-level fat tree, every output written (rank map, CSV, env.json, batch
  script); the script's size too;
* ``plan --inventory DIR`` on a directory of node reports (one YAML per
  node, as the agents write them): the first run (which compiles them), a
  run after one report changed, and the usual run;
* ``bind``, the start-time step, on the batch host of a 16,384-rank job
  (a fake ``scontrol`` on PATH answers for Slurm), and the per-rank
  launcher's own cost (one rank started, minus a bare interpreter);
* the placement daemon's scheduling cycle with 1,000 held jobs on the
  100,000-GPU cluster (in-process, the fake backend of the daemon tests);
* the in-process phases of the 16,384-GPU plan, to see where time goes.

    python -m bench.cli [--quick] [--out DIR]
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: job sizes of the growth table (GPUs)
WORLDS = (8, 64, 512, 4096, 16384, 32768)
QUICK_WORLDS = (8, 64, 512)
NODES = 12500
QUICK_NODES = 512
#: held jobs of the daemon cycle. The target is 1,000 on 100,000 GPUs; a
#: cycle plans every held job several times (minutes at that size today), so
#: the full run measures 100 and docs/benchmarks.md says so
DAEMON_JOBS = 100
DAEMON_JOBS_QUICK = 20


def layout_for(world: int) -> Tuple[int, int, int]:
    """(tp, pp, dp): TP 8 in a node, PP up to 16, DP the rest
    (16,384 GPUs = tp 8, pp 16, dp 128)."""
    tp = min(8, world)
    pp = max(1, min(16, world // tp // 8))
    return tp, pp, world // (tp * pp)


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc
    return env


def run_process(argv: Sequence[str], cwd: Optional[str] = None, env=None,
                stdin: Optional[str] = None) -> Dict[str, Any]:
    """Wall seconds, peak RSS (bytes) and exit code of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(list(argv), cwd=cwd, env=env or _env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE,
                         stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
    if stdin is not None:
        p.stdin.write(stdin.encode())
        p.stdin.close()
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    rss = usage.ru_maxrss * 1024  # KiB on Linux
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_bytes": rss,
            "rc": p.returncode,
            "stderr": err.decode(errors="replace")[-2000:]}


def median_run(argv: Sequence[str], repeats: int, **kw) -> Dict[str, Any]:
    runs = [run_process(argv, **kw) for _ in range(max(1, repeats))]
    bad = [r for r in runs if r["rc"] != 0]
    out = {"median_s": statistics.median(r["wall_s"] for r in runs),
           "cpu_s": statistics.median(r["cpu_s"] for r in runs),
           "samples_s": [r["wall_s"] for r in runs],
           "rss_bytes": max(r["rss_bytes"] for r in runs)}
    if bad:
        out["error"] = bad[0]["stderr"].strip().splitlines()[-1:] or ["failed"]
    return out


def slurmtopo(*args: str) -> List[str]:
    return [sys.executable, "-m", "slurmtopo", *args]


def show(argv: Sequence[str]) -> str:
    """The command as a user would type it."""
    words = ["slurmtopo"] + list(argv[3:]) if list(argv[1:3]) == ["-m", "slurmtopo"] else argv
    return " ".join(shlex.quote(str(w)) for w in words)


# --------------------------------------------------------------------------
# inputs


def write_inventory(directory: str, nodes: int) -> str:
    """The 3-level fat tree of HGX H100 nodes, folded (one node type)."""
    sys.path.insert(0, ROOT)
    from bench.scenarios import cluster
    from slurmtopo.inventory import dump_inventory

    path = os.path.join(directory, f"fattree3-{nodes}.yaml")
    if not os.path.exists(path):
        with open(path, "w") as fh:
            fh.write(dump_inventory(cluster("fattree3", nodes)))
    return path


def write_report_dir(directory: str, nodes: int) -> str:
    """One agent node report per node (YAML, each GPU with its own UUID;
    every 500th node with its first NIC down) plus the fabric file."""
    from dataclasses import replace

    from bench.scenarios import cluster
    from slurmtopo.inventory import inventory_dict, node_report
    from slurmtopo.yamlio import dump_yaml

    inv = cluster("fattree3", nodes)
    out = os.path.join(directory, f"reports-{nodes}")
    if os.path.isdir(out):
        return out
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    template: Dict[bool, str] = {}
    for i, n in enumerate(inv):
        odd = i % 500 == 499
        if odd not in template:  # render once, substitute the name (fast, same text)
            hw = n.hardware
            if odd:
                hw = replace(hw, nics=tuple(replace(x, state="down") if j == 0 else x
                                            for j, x in enumerate(hw.nics)))
            hw = replace(hw, gpus=tuple(replace(g, uuid=f"GPU-@@NODE@@-{g.index:04d}")
                                        for g in hw.gpus))
            template[odd] = node_report(replace(n, name="@@NODE@@", hardware=hw, type=None),
                                        {"generated_at": "2026-11-23T00:00:00+00:00",
                                         "agent_version": 1, "source": "nvml",
                                         "hostname": "@@NODE@@"})
        with open(os.path.join(tmp, n.name + ".yaml"), "w") as fh:
            fh.write(template[odd].replace("@@NODE@@", n.name))
    fabric = {"slurmtopo": "fabric", "version": 1, "fabric": inventory_dict(inv)["fabric"]}
    with open(os.path.join(tmp, "fabric.yaml"), "w") as fh:
        fh.write(dump_yaml(fabric))
    os.rename(tmp, out)
    return out


# --------------------------------------------------------------------------
# measurements


def plan_growth(inv_path: str, workdir: str, worlds: Sequence[int], repeats: int,
                progress: Callable[[str], None]) -> List[Dict[str, Any]]:
    rows = []
    for world in worlds:
        tp, pp, dp = layout_for(world)
        out_dir = os.path.join(workdir, f"plan-{world}")
        argv = slurmtopo("plan", "--inventory", inv_path, "--tp", str(tp), "--pp", str(pp),
                         "--dp", str(dp), "--output-dir", out_dir, "--", "python", "train.py")
        progress(f"plan {world} GPUs")
        r = median_run(argv, repeats)
        row = {"job_gpus": world, "layout": f"tp{tp}-pp{pp}-dp{dp}", "command": show(argv),
               **r}
        if "error" not in r:
            row["files_bytes"] = {f: os.path.getsize(os.path.join(out_dir, f))
                                  for f in sorted(os.listdir(out_dir))}
            row["script_bytes"] = row["files_bytes"].get("job.sbatch")
        rows.append(row)
    return rows


def report_dir_runs(report_dir: str, workdir: str, repeats: int,
                    progress: Callable[[str], None]) -> Dict[str, Any]:
    """First plan on the directory (compiles it), then after touching one
    report (re-reads that one), then the usual case."""
    from slurmtopo.compiled import cache_paths

    for p in cache_paths(report_dir):
        if os.path.exists(p):
            os.unlink(p)
    argv = slurmtopo("plan", "--inventory", report_dir, "--tp", "8", "--pp", "2", "--dp", "4",
                     "--output-dir", os.path.join(workdir, "plan-reports"), "--", "python",
                     "train.py")
    progress("plan on the report directory (first run: compiles it)")
    first = run_process(argv)
    if first["rc"] != 0:
        return {"reports": None, "command": show(argv), "error": first["stderr"][-300:]}
    victim = sorted(f for f in os.listdir(report_dir) if f.endswith(".yaml"))[0]
    path = os.path.join(report_dir, victim)
    with open(path) as fh:
        text = fh.read()
    with open(path, "w") as fh:
        fh.write(text.replace("source: nvml", "source: nvml-again"))
    progress("plan on the report directory (one report changed)")
    changed = run_process(argv)
    progress("plan on the report directory (compiled form up to date)")
    warm = median_run(argv, repeats)
    cache = next((p for p in cache_paths(report_dir) if os.path.exists(p)), None)
    reports = sum(1 for f in os.listdir(report_dir) if f.endswith(".yaml")) - 1
    return {"reports": reports, "command": show(argv),
            "first_s": first["wall_s"], "first_cpu_s": first["cpu_s"],
            "first_rss_bytes": first["rss_bytes"], "one_changed_s": changed["wall_s"],
            "one_changed_cpu_s": changed["cpu_s"], "warm": warm,
            "compiled_bytes": os.path.getsize(cache) if cache else None,
            "reports_bytes": sum(os.path.getsize(os.path.join(report_dir, f))
                                 for f in os.listdir(report_dir) if f.endswith(".yaml"))}


FAKE_SCONTROL = """#!/bin/sh
# answers `scontrol show job -d ID` from a file, like Slurm would
cat "$SLURMTOPO_BENCH_SCONTROL"
"""


def bind_run(inv_path: str, workdir: str, world: int, repeats: int,
             progress: Callable[[str], None]) -> Dict[str, Any]:
    """``slurmtopo bind`` on the batch host of a ``world``-rank job whose
    allocation is the plan, and one rank's launch."""
    sys.path.insert(0, ROOT)
    tp, pp, dp = layout_for(world)
    plan_dir = os.path.join(workdir, f"plan-{world}")
    script = os.path.join(plan_dir, "job.sbatch")
    if not os.path.exists(script):
        subprocess.run(slurmtopo("plan", "--inventory", inv_path, "--tp", str(tp), "--pp",
                                 str(pp), "--dp", str(dp), "--output-dir", plan_dir, "--",
                                 "python", "train.py"), env=_env(), check=True,
                       stdout=subprocess.DEVNULL)
    with open(script) as fh:
        text = fh.read()
    plan_text = text.split("<<'SLURMTOPO_PLAN_JSON'\n", 1)[1].split("\nSLURMTOPO_PLAN_JSON\n")[0]
    plan_path = os.path.join(workdir, f"plan-{world}.json")
    with open(plan_path, "w") as fh:
        fh.write(plan_text)
    with open(os.path.join(plan_dir, "rankmap.json")) as fh:
        rm = json.load(fh)
    from slurmtopo.hostlist import fold_hostlist
    from slurmtopo.model import format_cpulist

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
    run_dir = os.path.join(workdir, f"run-{world}")
    argv = slurmtopo("bind", "--plan", plan_path, "--run-dir", run_dir, "--cgroup-devices",
                     "no", "--no-probe")
    progress(f"bind {world} ranks")
    bind = median_run(argv, repeats, env=env)
    out: Dict[str, Any] = {"ranks": world, "command": show(argv), "bind": bind}
    if "error" in bind:
        return out
    with open(os.path.join(run_dir, "env.sh")) as fh:
        envsh = fh.read()
    # one task as the script's srun line starts it: /bin/sh running the task
    # snippet with what env.sh exported, then exec'ing the command
    from slurmtopo.plandoc import TASK_NAME, TASK_SNIPPET

    dump = subprocess.run(["sh", "-c", '. "$1" && env -0', "sh",
                           os.path.join(run_dir, "env.sh")], env=env, check=True,
                          capture_output=True).stdout.decode()
    tenv = dict(kv.split("=", 1) for kv in dump.split("\0") if "=" in kv)
    last = rm["ranks"][-1]
    tenv.update(SLURM_PROCID=str(world - 1), SLURMD_NODENAME=last["host"],
                SLURMTOPO_CPU_BIND="0")
    progress("one task's launch")
    launch = median_run(["/bin/sh", "-c", TASK_SNIPPET, TASK_NAME, "true"], repeats * 2,
                        env=tenv)
    bare = median_run(["/bin/sh", "-c", "exec true"], repeats * 2, env=tenv)
    task_file = os.path.join(run_dir, "task-env.sh")
    out.update({"launch": launch, "bare_shell": bare,
                "launch_own_s": launch["median_s"] - bare["median_s"],
                "env_sh_bytes": len(envsh),
                "task_env_bytes": os.path.getsize(task_file) if os.path.exists(task_file)
                else None})
    return out


def daemon_cycle(nodes: int, jobs: int, cycles: int) -> Dict[str, Any]:
    """One scheduling cycle of the placement daemon with ``jobs`` held jobs
    on ``nodes`` 8-GPU nodes (in-process; the daemon tests' fake backend)."""
    sys.path.insert(0, ROOT)
    try:
        from bench.daemon_load import cycle_timing
    except ImportError as exc:
        return {"skipped": str(exc)}
    return cycle_timing(nodes, jobs, cycles)


def phases(inv_path: str, world: int) -> Dict[str, float]:
    """The 16,384-GPU plan's phases in-process (after imports)."""
    from slurmtopo.cost import CostParams, evaluate
    from slurmtopo.groups import Layout
    from slurmtopo.inventory import load_inventory
    from slurmtopo.model import ClusterState
    from slurmtopo.placement import naive_plan, plan
    from slurmtopo.rankmap import dumps_rankmap, env_document, rankmap_csv, rankmap_dict
    from slurmtopo.request import JobRequest
    from slurmtopo.sbatch import SbatchRequest

    tp, pp, dp = layout_for(world)
    out: Dict[str, float] = {}

    def t(name, fn):
        t0 = time.perf_counter()
        v = fn()
        out[name] = time.perf_counter() - t0
        return v

    inv = t("load inventory", lambda: load_inventory(inv_path))
    lay = Layout(tp=tp, pp=pp, dp=dp)
    req = JobRequest(layout=lay)
    st = ClusterState()
    p = t("plan", lambda: plan(inv, st, req))
    n = t("naive plan", lambda: naive_plan(inv, st, req))
    params = CostParams.from_inventory(inv)
    t("evaluate x2", lambda: (evaluate(inv, p, req, params), evaluate(inv, n, req, params)))
    t("batch script", lambda: SbatchRequest.from_plan(inv, p, lay, ["python", "t.py"],
                                                      req).render())
    t("rankmap.json", lambda: dumps_rankmap(rankmap_dict(p, lay)))
    t("rankmap.csv", lambda: rankmap_csv(p))
    t("env.json", lambda: dumps_rankmap(env_document(p, inv, "x", None)))
    return out


# --------------------------------------------------------------------------
# tables and the plot (bench.run prints and writes them)


def _s(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def _mib(x: Optional[float]) -> str:
    return "-" if x is None else f"{x / 2**20:.0f} MiB"


def _kb(x: Optional[float]) -> str:
    return "-" if x is None else (f"{x / 1024:.0f} KiB" if x < 2**20 else f"{x / 2**20:.1f} MiB")


def tables(res: Mapping[str, Any]) -> List[tuple]:
    """(title, header, rows) for bench.run's markdown and console."""
    out = []
    gpus = res.get("gpus", 0)
    rows = []
    for r in res.get("plan", []):
        rows.append([f"{r['job_gpus']:,}", r.get("layout", "-"), _s(r.get("median_s")),
                     _s(r.get("cpu_s")), _mib(r.get("rss_bytes")), _kb(r.get("script_bytes")),
                     "; ".join(r.get("error", [])) or ""])
    from bench.speed import loglog_slope

    fit = [r for r in res.get("plan", []) if "error" not in r and r["job_gpus"] >= 512]
    for key, label in (("cpu_s", "CPU time"), ("median_s", "wall time"),
                       ("rss_bytes", "peak RSS")):
        slope = loglog_slope([(r["job_gpus"], r[key]) for r in fit])
        if slope is not None:
            rows.append(["growth", f"{label}: log-log slope {slope:.2f} over "
                         f"{fit[0]['job_gpus']:,}-{fit[-1]['job_gpus']:,} GPUs (1 = linear)",
                         "", "", "", "", ""])
    out.append((f"`slurmtopo plan` through the command line, {gpus:,}-GPU inventory "
                f"(wall = process start to exit, bare interpreter "
                f"{_s(res.get('bare_interpreter', {}).get('median_s'))})",
                ["job GPUs", "layout", "wall (median)", "CPU", "peak RSS", "job.sbatch", "error"],
                rows))
    ph = res.get("phases")
    if ph:
        out.append((f"In-process phases of the {ph['job_gpus']:,}-GPU plan", ["phase", "time"],
                    [[k, _s(v)] for k, v in ph["seconds"].items()]))
    rd = res.get("report_dir") or {}
    if rd.get("reports"):
        w = rd.get("warm", {})
        out.append((f"`plan --inventory DIR` on {rd['reports']:,} node reports "
                    f"({_kb(rd.get('reports_bytes'))} of YAML; compiled form "
                    f"{_kb(rd.get('compiled_bytes'))})",
                    ["run", "wall", "CPU", "peak RSS"],
                    [["first (compiles every report)", _s(rd.get("first_s")),
                      _s(rd.get("first_cpu_s")), _mib(rd.get("first_rss_bytes"))],
                     ["one report changed", _s(rd.get("one_changed_s")),
                      _s(rd.get("one_changed_cpu_s")), "-"],
                     ["compiled form up to date (median)", _s(w.get("median_s")),
                      _s(w.get("cpu_s")), _mib(w.get("rss_bytes"))]]))
    b = res.get("bind") or {}
    if b.get("bind"):
        rows = [["slurmtopo bind (batch host)", _s(b["bind"].get("median_s")),
                 _s(b["bind"].get("cpu_s")), _mib(b["bind"].get("rss_bytes"))]]
        if "launch" in b:
            rows.append(["one task's launch (/bin/sh, the srun line's snippet)", _s(b["launch"]["median_s"]),
                         _s(b["launch"].get("cpu_s")), _mib(b["launch"].get("rss_bytes"))])
            rows.append(["... of which its own (minus a bare `sh -c true`)",
                         _s(b.get("launch_own_s")), "-", "-"])
        out.append((f"Start time, {b['ranks']:,} ranks", ["step", "wall", "CPU", "peak RSS"],
                    rows))
    d = res.get("daemon") or {}
    if d.get("cycles_s"):
        out.append((d["what"], ["cycle", "time", "decisions"],
                    [[str(i + 1), _s(t), ", ".join(f"{k} {v}" for k, v in a.items())]
                     for i, (t, a) in enumerate(zip(d["cycles_s"], d["actions"]))]))
    return out


def plot(res: Mapping[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in res.get("plan", []) if "error" not in r]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [r["job_gpus"] for r in rows]
    axes[0].plot(xs, [r["median_s"] for r in rows], "o-", label="wall (median)")
    axes[0].plot(xs, [r["cpu_s"] for r in rows], "s--", label="CPU")
    axes[0].axhline(1.0, color="red", ls=":", lw=1, label="1 s target (16,384 GPUs)")
    axes[0].axhline(0.3, color="orange", ls=":", lw=1, label="0.3 s target (64 GPUs)")
    axes[1].plot(xs, [r["rss_bytes"] / 2**20 for r in rows], "o-", label="peak RSS")
    axes[1].plot(xs, [(r.get("script_bytes") or 0) / 2**10 for r in rows], "s--",
                 label="job.sbatch (KiB)")
    for ax, title in ((axes[0], "`slurmtopo plan`, interpreter start included"),
                      (axes[1], "memory (MiB) and script size (KiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(f"job GPUs ({res.get('gpus', 0):,}-GPU inventory)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------


def run(quick: bool = False, workdir: Optional[str] = None,
        progress: Optional[Callable[[str], None]] = None, nodes: Optional[int] = None,
        worlds: Optional[Sequence[int]] = None, repeats: Optional[int] = None,
        daemon_jobs: Optional[int] = None) -> Dict[str, Any]:
    """Everything above; ``quick`` (or explicit sizes) for a short pass."""
    progress = progress or (lambda msg: None)
    t0 = time.perf_counter()
    compileall.compile_dir(os.path.join(ROOT, "slurmtopo"), quiet=1)
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="slurmtopo-bench-cli-")
    os.makedirs(workdir, exist_ok=True)
    nodes = nodes or (QUICK_NODES if quick else NODES)
    worlds = tuple(w for w in (worlds or (QUICK_WORLDS if quick else WORLDS)) if w <= nodes * 8)
    repeats = repeats or (2 if quick else 5)
    out: Dict[str, Any] = {"nodes": nodes, "gpus": nodes * 8}
    try:
        progress("writing the inventory")
        inv_path = write_inventory(workdir, nodes)
        out["bare_interpreter"] = median_run([sys.executable, "-c", "pass"], repeats)
        out["plan"] = plan_growth(inv_path, workdir, worlds, repeats, progress)
        big = 16384 if 16384 in worlds else worlds[-1]
        out["phases"] = {"job_gpus": big, "seconds": phases(inv_path, big)}
        progress("writing the node reports")
        rdir = write_report_dir(workdir, nodes)
        out["report_dir"] = report_dir_runs(rdir, workdir, repeats, progress)
        out["bind"] = bind_run(inv_path, workdir, big, repeats, progress)
        progress("daemon cycle")
        jobs = daemon_jobs or (DAEMON_JOBS_QUICK if quick else DAEMON_JOBS)
        out["daemon"] = daemon_cycle(nodes, jobs, 2 if quick else 3)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    out["wall_s"] = time.perf_counter() - t0
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None, help="write cli.json here")
    ap.add_argument("--workdir", default=None, help="keep inputs and outputs here")
    args = ap.parse_args(argv)
    res = run(args.quick, args.workdir, progress=lambda m: print(f"  {m}", file=sys.stderr))
    text = json.dumps(res, indent=1)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "cli.json"), "w") as fh:
            fh.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
