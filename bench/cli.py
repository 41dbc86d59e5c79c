"""Timings through the command line, as users run slurmtopo, at 100,000 GPUs.

Every number here is a fresh ``python -m slurmtopo ...`` process (interpreter
start and imports included; byte-code compiled beforehand, as an installed
package is), wall clock, the child's CPU time (user + system) and peak resident memory
(``os.wait4``), median of several runs; CPU time is the figure to read on a
shared machine, where wall time includes waiting for a core:

* ``plan``: jobs of 8 to 32,768 GPUs (TP 8, PP up to 16, DP the rest) on a
  12,500-node (100,000-GPU) inventory written with a node type and a
  3-level fat tree, every output written (rank map, CSV, env.json, batch
  script); the script's size too;
* ``plan --inventory DIR`` on a directory of node reports (one YAML per
  node, as the agents write them): the first run (which compiles them), a
  run after one report changed, and the usual run;
* ``bind``, the start-time step, on the batch host of jobs of 1,024 to
  32,768 ranks, and one task's own launch cost (bench/launch.py);
* the placement daemon's scheduling cycle with 1,000 held jobs on the
  100,000-GPU cluster (in-process, the fake backend of the daemon tests);
* the in-process phases of the 16,384-GPU plan, to see where time goes;
* the fixed costs of a plan against the machine itself: ``slurmtopo
  --help``, ``slurmtopo plan --help`` (the plan command loaded, nothing
  planned), and a 64-GPU and a 16,384-GPU plan on the 12,500-node
  inventory (its compiled form written by a first run, as every run after
  a user's first finds it), as ratios to ``plan --help`` measured in the
  same run, with the machine named (targets: 2x and 5x).

    python -m bench.cli [--quick] [--out DIR] [--parts fixed,...] [--repeats N]
                        [--baseline DIR]
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.process import (NODES, QUICK_NODES, child_env as _env,  # noqa: E402
                           kib as _kb, layout_for, median_run, mib as _mib, run_process,
                           seconds as _s, show, slurmtopo, write_inventory)

#: job sizes of the growth table (GPUs)
WORLDS = (8, 64, 512, 1024, 4096, 8192, 16384, 32768)
QUICK_WORLDS = (8, 64, 512)
#: held jobs of the daemon cycle. The target is 1,000 on 100,000 GPUs; a
#: cycle plans every held job several times (minutes at that size today), so
#: the full run measures 100 and docs/benchmarks.md says so
DAEMON_JOBS = 100
DAEMON_JOBS_QUICK = 20


# --------------------------------------------------------------------------
# inputs


def write_report_dir(directory: str, nodes: int) -> str:
    """One agent node report per node (YAML, each GPU with its own UUID;
    every 500th node with its first NIC down) plus the fabric file."""
    from dataclasses import replace

    from bench.scenarios import cluster
    from slurmtopo.files.yamlio import dump_yaml
    from slurmtopo.inventory.schema import inventory_dict, node_report

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


def _compiled_form(report_dir: str) -> Optional[str]:
    """Where the report directory's compiled form lives for this user."""
    from slurmtopo.inventory.compiled import cache_slot

    slot = cache_slot(report_dir)
    if slot is None:
        return None
    with slot:
        return slot.where


def report_dir_runs(report_dir: str, workdir: str, repeats: int,
                    progress: Callable[[str], None]) -> Dict[str, Any]:
    """First plan on the directory (compiles it), then after touching one
    report (re-reads that one), then the usual case."""
    stale = _compiled_form(report_dir)
    if stale is not None and os.path.exists(stale):
        os.unlink(stale)
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
    cache = _compiled_form(report_dir)
    cache = cache if cache is not None and os.path.exists(cache) else None
    reports = sum(1 for f in os.listdir(report_dir) if f.endswith(".yaml")) - 1
    return {"reports": reports, "command": show(argv),
            "first_s": first["wall_s"], "first_cpu_s": first["cpu_s"],
            "first_rss_bytes": first["rss_bytes"], "one_changed_s": changed["wall_s"],
            "one_changed_cpu_s": changed["cpu_s"], "warm": warm,
            "compiled_bytes": os.path.getsize(cache) if cache else None,
            "reports_bytes": sum(os.path.getsize(os.path.join(report_dir, f))
                                 for f in os.listdir(report_dir) if f.endswith(".yaml"))}


#: the fixed-cost targets: a plan's wall (and CPU) time over ``slurmtopo plan
#: --help``'s. Issue 27 set them over ``slurmtopo --help`` when that loaded every
#: command module; since ``--help`` reads the commands' lines from a registry
#: (issue 36) it no longer pays for loading a command, so the reference is the
#: command a plan starts with (docs/benchmarks.md, "Fixed costs").
FIXED_TARGETS = {64: 2.0, 16384: 5.0}
#: the row the ratios are taken over
REFERENCE = "plan help"


def machine() -> str:
    """The machine in words: CPU model, cores, OS, Python."""
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return (f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def fixed_costs(inv_path: str, workdir: str, repeats: int,
                progress: Callable[[str], None], baseline: Optional[str] = None
                ) -> Dict[str, Any]:
    """``slurmtopo --help``, ``slurmtopo plan --help`` and a 64- and a
    16,384-GPU plan on the 12,500-node inventory, median of ``repeats`` each,
    interleaved so that the load of a shared machine weighs on all alike; the
    first plan (which writes the inventory's compiled form) is reported apart.
    Ratios to ``plan --help`` (``REFERENCE``), by wall and by CPU time.

    ``baseline``: the root of another checkout of slurmtopo (``git worktree
    add DIR COMMIT``), measured the same way in the same rounds (its
    commands rows prefixed ``baseline:``, its ratios to its own reference),
    on a copy of the inventory so that each keeps its own compiled form:
    a before/after under the same load."""
    def cache_of(path: str) -> str:
        try:
            from slurmtopo.inventory.cache import SUFFIX
        except ImportError:  # a commit before the compiled form of files: measured as it is
            SUFFIX = None
        return os.path.join(os.path.dirname(path),
                            "." + os.path.basename(path) + (SUFFIX or ".none"))

    trees = {"": (inv_path, None)}
    if baseline:
        base_dir = os.path.join(workdir, "baseline-inventory")
        os.makedirs(base_dir, exist_ok=True)
        base_inv = os.path.join(base_dir, os.path.basename(inv_path))
        shutil.copyfile(inv_path, base_inv)
        compileall.compile_dir(os.path.join(baseline, "slurmtopo"), quiet=1)
        env = _env()
        env["PYTHONPATH"] = os.path.abspath(baseline) + os.pathsep + env["PYTHONPATH"]
        trees["baseline: "] = (base_inv, env)
    for path, _ in trees.values():
        if os.path.exists(cache_of(path)):
            os.unlink(cache_of(path))

    def plan(path: str, world: int, tag: str) -> List[str]:
        tp, pp, dp = layout_for(world)
        out = os.path.join(workdir, f"fixed-{world}" + ("-baseline" if tag else ""))
        return slurmtopo("plan", "--inventory", path, "--tp", str(tp), "--pp", str(pp),
                         "--dp", str(dp), "--output-dir", out, "--", "python", "train.py")

    cases: Dict[str, Tuple[List[str], Optional[Dict[str, str]]]] = {}
    first: Dict[str, Dict[str, Any]] = {}
    for tag, (path, env) in trees.items():
        cases[f"{tag}help"] = (slurmtopo("--help"), env)
        cases[f"{tag}{REFERENCE}"] = (slurmtopo("plan", "--help"), env)
        for w in FIXED_TARGETS:
            cases[f"{tag}plan {w:,} GPUs"] = (plan(path, w, tag), env)
        progress(f"fixed costs: {tag}the first plan (writes the compiled form)")
        first[tag] = run_process(cases[f"{tag}plan 64 GPUs"][0], cwd=workdir, env=env)
    runs: Dict[str, List[Dict[str, Any]]] = {k: [] for k in cases}
    for i in range(max(1, repeats)):
        progress(f"fixed costs: round {i + 1} of {repeats}")
        for k, (argv, env) in cases.items():
            # from the work directory: ``python -m`` puts the current
            # directory first on the path, before PYTHONPATH
            runs[k].append(run_process(argv, cwd=workdir, env=env))
    rows = {}
    for k, rs in runs.items():
        bad = [r for r in rs if r["rc"] != 0]
        rows[k] = {"command": show(cases[k][0]),
                   "median_s": statistics.median(r["wall_s"] for r in rs),
                   "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                   "samples_s": [r["wall_s"] for r in rs]}
        if bad:
            rows[k]["error"] = bad[0]["stderr"].strip().splitlines()[-1:] or ["failed"]
    for tag in trees:
        help_ = rows[f"{tag}{REFERENCE}"]
        for w, target in FIXED_TARGETS.items():
            r = rows[f"{tag}plan {w:,} GPUs"]
            r["target"] = target
            r["wall_ratio"] = r["median_s"] / help_["median_s"]
            r["cpu_ratio"] = r["cpu_s"] / help_["cpu_s"]
    out = {"machine": machine(), "inventory": os.path.basename(inv_path),
           "first_plan_64": {"wall_s": first[""]["wall_s"], "cpu_s": first[""]["cpu_s"]},
           "compiled_bytes": (os.path.getsize(cache_of(inv_path))
                              if os.path.exists(cache_of(inv_path)) else None),
           "runs": rows, "loadavg": list(os.getloadavg())}
    if baseline:
        out["baseline"] = {"root": os.path.abspath(baseline), "commit": _commit(baseline),
                           "first_plan_64": {"wall_s": first["baseline: "]["wall_s"],
                                             "cpu_s": first["baseline: "]["cpu_s"]}}
    out["commit"] = _commit(ROOT)
    return out


def _commit(root: str) -> Optional[str]:
    """The short commit of the checkout at ``root`` (None outside git)."""
    p = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return p.stdout.strip() or None if p.returncode == 0 else None


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
    """The plan command's phases in-process (after imports), as
    ``commands/plan.py`` runs them, to see where its time goes."""
    from slurmtopo import api
    from slurmtopo.cost import CostParams, lower_bound
    from slurmtopo.inventory.model import ClusterState
    from slurmtopo.job.groups import Layout
    from slurmtopo.job.request import JobRequest
    from slurmtopo.placement import naive_plan
    from slurmtopo.plan.rankmap import env_json, rankmap_csv, rankmap_json
    from slurmtopo.sbatch import SbatchRequest
    from slurmtopo.show.preview import render_plan

    tp, pp, dp = layout_for(world)
    out: Dict[str, float] = {}

    def t(name, fn):
        t0 = time.perf_counter()
        v = fn()
        out[name] = time.perf_counter() - t0
        return v

    inv = t("load inventory (+ cost block check)", lambda: api.load_cluster(inv_path))
    lay = Layout(tp=tp, pp=pp, dp=dp)
    req = JobRequest(layout=lay)
    st = ClusterState()
    p = t("plan (planner)", lambda: api.plan_job(inv, st, req))
    n = t("Slurm's default placement", lambda: naive_plan(inv, st, req))
    costs = t("cost.evaluate x2", lambda: (api.price(inv, p, req), api.price(inv, n, req)))
    bound = t("cost.lower_bound", lambda: lower_bound(inv, req, CostParams.from_inventory(inv),
                                                      state=st))
    script = t("batch script", lambda: SbatchRequest.from_plan(inv, p, lay, ["python", "t.py"],
                                                               req))
    t("batch script render", script.render)
    t("rankmap.json", lambda: rankmap_json(p, lay))
    t("rankmap.csv", lambda: rankmap_csv(p))
    t("env.json", lambda: env_json(p, inv, "x", None))

    def preview():
        from rich.console import Console

        with open(os.devnull, "w") as sink:
            Console(soft_wrap=False, file=sink).print(render_plan(
                p, inv, lay, costs[0], costs[1], st, None, [], script, {}, bound=bound))

    t("preview (rich)", preview)
    return out


# --------------------------------------------------------------------------
# tables and the plot (bench.run prints and writes them)


def growth_rows(rows: Sequence[Mapping[str, Any]]) -> List[List[str]]:
    """The growth table: for each step between neighbouring job sizes the
    log-log slope of CPU time, wall time and peak RSS (1 = linear), and the
    slope of what a job costs above the smallest one (the fixed start,
    imports and inventory taken out)."""
    from bench.speed import loglog_slope

    ok = [r for r in rows if "error" not in r]
    out = []

    def slope(pts) -> str:
        v = loglog_slope(pts)
        return "-" if v is None else f"{v:.2f}"

    for a, b in zip(ok, ok[1:]):
        pts = lambda key: [(a["job_gpus"], a[key]), (b["job_gpus"], b[key])]  # noqa: E731
        out.append([f"{a['job_gpus']:,} -> {b['job_gpus']:,}", slope(pts("cpu_s")),
                    slope(pts("median_s")), slope(pts("rss_bytes"))])
    if len(ok) >= 2:
        first, big = ok[0], [r for r in ok if r["job_gpus"] >= 512]
        whole = lambda key: [(r["job_gpus"], r[key]) for r in ok]  # noqa: E731
        out.append([f"all, {first['job_gpus']:,} -> {ok[-1]['job_gpus']:,}",
                    slope(whole("cpu_s")), slope(whole("median_s")), slope(whole("rss_bytes"))])
        above = lambda key: [(r["job_gpus"], r[key] - first[key]) for r in big]  # noqa: E731
        out.append([f"above the {first['job_gpus']}-GPU run, {big[0]['job_gpus']:,} -> "
                    f"{ok[-1]['job_gpus']:,}" if big else "-",
                    slope(above("cpu_s")), slope(above("median_s")), slope(above("rss_bytes"))])
    return out


def tables(res: Mapping[str, Any]) -> List[tuple]:
    """(title, header, rows) for bench.run's markdown and console."""
    out = []
    gpus = res.get("gpus", 0)
    rows = []
    for r in res.get("plan", []):
        rows.append([f"{r['job_gpus']:,}", r.get("layout", "-"), _s(r.get("median_s")),
                     _s(r.get("cpu_s")), _mib(r.get("rss_bytes")), _kb(r.get("script_bytes")),
                     "; ".join(r.get("error", [])) or ""])
    load = res.get("loadavg")
    out.append((f"`slurmtopo plan` through the command line, {gpus:,}-GPU inventory "
                f"(wall = process start to exit, bare interpreter "
                f"{_s(res.get('bare_interpreter', {}).get('median_s'))}"
                + (f"; load average {load[0]:.1f} at the start, {load[1]:.1f} at the end"
                   if load else "") + ")",
                ["job GPUs", "layout", "wall (median)", "CPU", "peak RSS", "job.sbatch", "error"],
                rows))
    out.append(("Growth of `slurmtopo plan` with the job (log-log slope; 1 = linear)",
                ["job GPUs", "CPU time", "wall time", "peak RSS"],
                growth_rows(res.get("plan", []))))
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
    fx = res.get("fixed")
    if fx:
        rows = []
        for k, r in fx["runs"].items():
            ratio = "-" if "target" not in r else \
                f"{r['wall_ratio']:.2f}x ({r['cpu_ratio']:.2f}x)"
            rows.append([k, _s(r["median_s"]), _s(r["cpu_s"]), ratio,
                         f"<= {r['target']:.0f}x" if "target" in r else "",
                         "; ".join(r.get("error", []))])
        first = fx.get("first_plan_64") or {}
        rows.append(["plan 64 GPUs, first run (compiles the inventory)",
                     _s(first.get("wall_s")), _s(first.get("cpu_s")), "", "", ""])
        base = fx.get("baseline")
        if base:
            rows.append(["baseline: plan 64 GPUs, first run (compiles the inventory)",
                         _s(base["first_plan_64"].get("wall_s")),
                         _s(base["first_plan_64"].get("cpu_s")), "", "", ""])
        out.append((f"Fixed costs against the machine itself: {fx['inventory']} "
                    f"(12,500 nodes; compiled form {_kb(fx.get('compiled_bytes'))}); "
                    f"{fx['machine']}; load average {fx['loadavg'][0]:.1f}"
                    + (f"; commit {fx['commit']}" if fx.get("commit") else "")
                    + (f"; baseline: {base['root']} at {base['commit']}" if base else ""),
                    ["command", "wall (median)", "CPU", "over plan --help: wall (CPU)", "target",
                     "error"], rows))
    if res.get("start"):
        from bench import launch

        out.extend(launch.tables(res["start"]))
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
    start = [r for r in res.get("start", []) if "launch_own_s" in r]
    fig, axes = plt.subplots(1, 3 if start else 2, figsize=(16 if start else 11, 4.2))
    xs = [r["job_gpus"] for r in rows]
    axes[0].plot(xs, [r["median_s"] for r in rows], "o-", label="wall (median)")
    axes[0].plot(xs, [r["cpu_s"] for r in rows], "s--", label="CPU")
    axes[0].axhline(1.0, color="red", ls=":", lw=1, label="1 s target (16,384 GPUs)")
    axes[0].axhline(0.3, color="orange", ls=":", lw=1, label="0.3 s target (64 GPUs)")
    axes[1].plot(xs, [r["rss_bytes"] / 2**20 for r in rows], "o-", label="peak RSS")
    axes[1].plot(xs, [(r.get("script_bytes") or 0) / 2**10 for r in rows], "s--",
                 label="job.sbatch (KiB)")
    panels = [(axes[0], "`slurmtopo plan`, interpreter start included", "job GPUs"),
              (axes[1], "memory (MiB) and script size (KiB)", "job GPUs")]
    if start:
        sx = [r["ranks"] for r in start]
        axes[2].plot(sx, [r["bind"]["median_s"] for r in start], "o-", label="bind wall (s)")
        axes[2].plot(sx, [r["bind"]["cpu_s"] for r in start], "s--", label="bind CPU (s)")
        axes[2].plot(sx, [max(r["launch_own_s"], 1e-5) * 1e3 for r in start], "^-",
                     label="one task's own launch (ms)")
        axes[2].axhline(2.0, color="red", ls=":", lw=1, label="2 s bind target (16,384)")
        axes[2].axhline(50, color="orange", ls=":", lw=1, label="50 ms a task target")
        panels.append((axes[2], "start time: `slurmtopo bind` and one task", "ranks"))
    for ax, title, xlabel in panels:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(f"{xlabel} ({res.get('gpus', 0):,}-GPU inventory)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------


#: the parts of :func:`run`, in the order they run
PARTS = ("fixed", "plan", "reports", "start", "daemon")


def run(quick: bool = False, workdir: Optional[str] = None,
        progress: Optional[Callable[[str], None]] = None, nodes: Optional[int] = None,
        worlds: Optional[Sequence[int]] = None, repeats: Optional[int] = None,
        daemon_jobs: Optional[int] = None, start_worlds: Optional[Sequence[int]] = None,
        parts: Sequence[str] = PARTS, baseline: Optional[str] = None) -> Dict[str, Any]:
    """Everything above (or the named ``parts``); ``quick`` (or explicit
    sizes) for a short pass; ``baseline``: see :func:`fixed_costs`."""
    from bench import launch

    progress = progress or (lambda msg: None)
    t0 = time.perf_counter()
    compileall.compile_dir(os.path.join(ROOT, "slurmtopo"), quiet=1)
    own = workdir is None
    workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="slurmtopo-bench-cli-"))
    os.makedirs(workdir, exist_ok=True)
    nodes = nodes or (QUICK_NODES if quick else NODES)
    worlds = tuple(w for w in (worlds or (QUICK_WORLDS if quick else WORLDS)) if w <= nodes * 8)
    start_worlds = tuple(w for w in (start_worlds or (launch.QUICK_WORLDS if quick
                                                      else launch.WORLDS)) if w <= nodes * 8)
    repeats = repeats or (2 if quick else 5)
    out: Dict[str, Any] = {"nodes": nodes, "gpus": nodes * 8, "loadavg": [os.getloadavg()[0]]}
    try:
        progress("writing the inventory")
        inv_path = write_inventory(workdir, nodes)
        out["bare_interpreter"] = median_run([sys.executable, "-c", "pass"], repeats)
        if "fixed" in parts:
            # always on the 12,500-node inventory: the targets are stated for it
            fixed_inv = inv_path if nodes == NODES else write_inventory(workdir, NODES)
            out["fixed"] = fixed_costs(fixed_inv, workdir, repeats, progress, baseline)
        if "plan" in parts:
            out["plan"] = plan_growth(inv_path, workdir, worlds, repeats, progress)
            big = 16384 if 16384 in worlds else worlds[-1]
            out["phases"] = {"job_gpus": big, "seconds": phases(inv_path, big)}
        if "reports" in parts:
            progress("writing the node reports")
            rdir = write_report_dir(workdir, nodes)
            out["report_dir"] = report_dir_runs(rdir, workdir, repeats, progress)
        if "start" in parts:
            out["start"] = launch.run(inv_path, workdir, start_worlds, repeats, progress)
        if "daemon" in parts:
            progress("daemon cycle")
            jobs = daemon_jobs or (DAEMON_JOBS_QUICK if quick else DAEMON_JOBS)
            out["daemon"] = daemon_cycle(nodes, jobs, 2 if quick else 3)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    out["loadavg"].append(os.getloadavg()[0])
    out["wall_s"] = time.perf_counter() - t0
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None, help="write cli.json here")
    ap.add_argument("--workdir", default=None, help="keep inputs and outputs here")
    ap.add_argument("--repeats", type=int, default=None,
                    help="runs of each command (default 5; 2 with --quick)")
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="the fixed-cost part also measures the slurmtopo checkout in DIR "
                         "(git worktree add DIR COMMIT), interleaved: a before/after")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma-separated parts to run (default all: {','.join(PARTS)})")
    args = ap.parse_args(argv)
    parts = args.parts.split(",")
    for part in parts:
        if part not in PARTS:
            ap.error(f"unknown part {part!r} (known: {', '.join(PARTS)})")
    res = run(args.quick, args.workdir, progress=lambda m: print(f"  {m}", file=sys.stderr),
              parts=parts, baseline=args.baseline, repeats=args.repeats)
    for title, header, rows in tables(res):
        print(f"\n{title}", file=sys.stderr)
        for r in [header] + rows:
            print("  " + " | ".join(str(c) for c in r), file=sys.stderr)
    text = json.dumps(res, indent=1)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "cli.json"), "w") as fh:
            fh.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
