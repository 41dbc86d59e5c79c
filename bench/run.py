"""Run the slurmtopo benchmarks: one command, a table, JSON, plots.

    python -m bench.run                 # full run (under 10 minutes on 2 cores)
    python -m bench.run --quick         # a short pass (about 20 s of CPU)
    python -m bench.run --out DIR       # where JSON, PNG and report.md go
                                        # (default bench/results)

Writes ``quality.json`` (every scenario and the summary), ``speed.json``,
``meta.json`` (command, commit, machine), ``quality.png``, ``speed.png``
and ``report.md`` (the tables of docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from bench import quality, scenarios, speed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "bench", "results")
#: scenarios per (shape, size, busy level) in a full and a quick run
PER_CELL = 32
QUICK_PER_CELL = 2
#: the same, priced with the cost model's default model
SENSITIVITY_PER_CELL = 8


# --------------------------------------------------------------------------
# formatting


def fmt_ratio(x: Optional[float]) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def fmt_s(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if x < 1e-3:
        return f"{x * 1e6:.0f} µs"
    if x < 1:
        return f"{x * 1e3:.1f} ms"
    return f"{x:.2f} s"


def fmt_bytes(x: Optional[float]) -> str:
    if x is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return str(x)


def _dist(st: Dict[str, Any], keys=("median", "p95", "max")) -> List[str]:
    if not st or not st.get("n"):
        return ["-"] * len(keys)
    return [fmt_ratio(st.get(k)) for k in keys]


# --------------------------------------------------------------------------
# tables: each is (title, header, rows) so rich and markdown share them


def _row(name, blk):
    w = blk.get("within_5pct_of_lb")
    wj = blk.get("within_5pct_of_free")
    return ([name, str(blk["scenarios"])] + _dist(blk["slurmtopo/lb"])
            + [f"{w * 100:.0f}%" if w is not None else "-"]
            + _dist(blk.get("slurmtopo/free"), ("median", "p95"))
            + [f"{wj * 100:.0f}%" if wj is not None else "-"]
            + _dist(blk["slurm-default/slurmtopo"], ("median", "p95", "max", "min"))
            + _dist(blk["slurm-leaf/slurmtopo"], ("median", "p95", "max", "min"))
            + _dist(blk["random/slurmtopo"], ("median", "min"))
            + [str(blk["slurmtopo_failed"])])


QUALITY_HEADER = ["cluster / busy %", "n", "topo/LB med", "p95", "max", "≤5% of LB",
                  "topo/free med", "p95", "≤5% of free",
                  "default/topo med", "p95", "max", "min", "leaf/topo med", "p95", "max", "min",
                  "random/topo med", "min", "topo failed"]


def _factor_cells(w) -> List[str]:
    from bench.quality import factors
    f = factors(w) or {}
    idle = w["ratios"].get("slurmtopo-idle/lb")
    return [fmt_ratio(f.get(k)) for k in ("free", "planner")] + [fmt_ratio(idle)]


def quality_tables(summary: Dict[str, Any], sensitivity: Optional[Dict[str, Any]] = None
                   ) -> List[tuple]:
    tables = []
    rows = []
    for shape in scenarios.SHAPES:
        cells = sorted((int(k.split("/")[1]), k) for k in summary["by_cell"]
                       if k.split("/")[0] == shape)
        for busy, key in cells:
            rows.append(_row(f"{shape} / {busy}", summary["by_cell"][key]))
        if shape in summary["by_shape"] and len(cells) > 1:
            rows.append(_row(f"{shape} / all", summary["by_shape"][shape]))
    for busy in sorted(summary["by_busy"], key=int):
        rows.append(_row(f"all / {busy}", summary["by_busy"][busy]))
    rows.append(_row("all", summary["overall"]))
    tables.append(("Placement quality: modelled communication time of one training step, ratios "
                   "(topo = slurmtopo, LB = cost.lower_bound, free = cost.lower_bound on the free GPUs)",
                   QUALITY_HEADER, rows))

    from bench.quality import FACTORS
    causes = summary.get("over_5pct_causes") or {}
    facs = summary.get("over_5pct_factors") or {}
    crows = [[FACTORS[k], str(causes.get(k, 0))] + _dist(facs.get(k), ("median", "p95", "max"))
             for k in FACTORS]
    tables.append(("Why slurmtopo is more than 5% from the lower bound: slurmtopo/LB = "
                   "free x planner; scenarios by their largest factor",
                   ["factor", "largest in", "median", "p95", "max"], crows))

    def worst_rows(items, extra=None):
        out = []
        for w in items:
            gap = w.get("gap") or {}
            out.append([w["id"], w["layout"], str(w["free_gpus"]),
                        fmt_ratio(w["ratios"].get("slurmtopo/lb"))] + _factor_cells(w)
                       + [fmt_ratio(w["ratios"].get("slurm-default/slurmtopo")),
                          fmt_ratio(w["ratios"].get("slurm-leaf/slurmtopo")),
                          f"{gap.get('kind')}: {gap.get('slurmtopo_link')} vs {gap.get('lb_link')}"
                          if gap.get("kind") else "-"])
        return out

    head = ["scenario", "job", "free GPUs", "topo/LB", "free", "planner", "idle/LB", "default/topo",
            "leaf/topo", "biggest gap (kind: slurmtopo link vs LB link)"]
    tables.append(("Farthest from the lower bound (rerun: python -m bench.quality --scenario ID)",
                   head, worst_rows(summary["worst_vs_lb"])))
    tables.append(("Largest gaps on the idle cluster (slurmtopo on the idle cluster / LB)",
                   head, worst_rows(summary.get("worst_idle_gap") or [])))

    brows = []
    for w in summary["worse_than_baseline"]:
        gap = w.get("gap") or {}
        brows.append([w["id"], w["layout"], w["baseline"], fmt_ratio(w["ratio"]),
                      fmt_ratio(w["ratios"].get("slurmtopo/lb")),
                      f"{gap.get('kind')}: {gap.get('slurmtopo_link')}" if gap.get("kind") else "-"])
    tables.append(("Scenarios where a baseline beats slurmtopo",
                   ["scenario", "job", "baseline", "baseline/topo", "topo/LB", "biggest gap"],
                   brows))
    if sensitivity:
        srows = [_row(f"all / {b}", sensitivity["by_busy"][b])
                 for b in sorted(sensitivity["by_busy"], key=int)]
        srows.append(_row("all", sensitivity["overall"]))
        tables.append(("Sensitivity: the same kind of scenarios priced with the cost model's "
                       "the default model", QUALITY_HEADER, srows))
    return tables


def speed_tables(sp: Dict[str, Any]) -> List[tuple]:
    tables = []
    rows = []
    for r in sp.get("planner", []):
        if not r.get("fits"):
            rows.append([f"{r['inventory_gpus']:,}", f"{r['busy_pct']}%", f"{r['job_gpus']:,}",
                         "-", "-", "-", "-", "-", r.get("error", "")[:60]])
            continue
        rows.append([f"{r['inventory_gpus']:,}", f"{r['busy_pct']}%", f"{r['job_gpus']:,}",
                     r["layout"].split(" ")[0], fmt_s(r["plan_s"]), fmt_s(r["cold_s"]),
                     fmt_s(r["evaluate_s"]), fmt_bytes(r.get("peak_bytes")), ""])
    tables.append(("Planner speed (HGX H100, 8 GPUs a node, 3-level fat tree); "
                   "warm = median, cold = caches cleared",
                   ["inventory GPUs", "busy", "job GPUs", "layout", "plan (warm)", "plan (cold)",
                    "cost.evaluate", "peak mem (cold)", "note"], rows))
    grows = []
    for g in sp.get("growth", []):
        st = g.get("steepest_step") or {}
        flag = []
        if g["superlinear"]:
            flag.append("SUPER-LINEAR")
        if g.get("superlinear_step"):
            flag.append("super-linear step")
        grows.append([g["against"], g["fixed"].replace("_gpus", " GPUs"), f"{g['busy_pct']}%",
                      f"{g['range'][0]:,}-{g['range'][1]:,}",
                      "-" if g["slope"] is None else f"{g['slope']:.2f}",
                      "-" if g["cold_slope"] is None else f"{g['cold_slope']:.2f}",
                      "-" if st.get("slope") is None else
                      f"{st['slope']:.2f} ({st['from']:,}→{st['to']:,})",
                      ", ".join(flag)])
    tables.append(("Growth: log-log slope of plan time against GPUs (1.0 = linear)",
                   ["against", "fixed", "busy", "GPU range", "slope (warm)", "slope (cold)",
                    "steepest step", ""], grows))
    orows = []
    for r in sp.get("end_to_end", []):
        what = r["what"]
        if r.get("phases_s"):
            what += " (" + ", ".join(f"{k.replace('_', ' ')} {fmt_s(v)}"
                                     for k, v in r["phases_s"].items()) + ")"
        orows.append([what, fmt_s(r["median_s"]) if "median_s" in r else r.get("error", "-")])
    cli = sp.get("cli")
    if cli:
        if "error" in cli:
            orows.append([f"slurmtopo plan CLI: {cli['command']}", f"failed: {cli['error']}"])
        else:
            orows.append([cli["what"] + f" (of which imports {fmt_s(cli.get('imports_s'))})",
                          fmt_s(cli["median_s"])])
            orows.append(["  (bare `python -c pass` start, for reference)", fmt_s(cli["interpreter_s"])])
    for r in sp.get("inventory_load", []):
        orows.append([f"load inventory: {r['nodes']:,} nodes ({r['written']}, "
                      f"{fmt_bytes(r['file_bytes'])}), peak {fmt_bytes(r.get('peak_bytes'))}",
                      fmt_s(r["load_s"])])
    for key in ("agent_discovery", "topology_conf"):
        r = sp.get(key) or {}
        if "skipped" in r:
            orows.append([key.replace("_", " "), f"skipped: {r['skipped']}"[:100]])
        elif r:
            extra = ""
            if key == "topology_conf":
                extra = (f" (parse {fmt_s(r['parse_s'])}, derive tree {fmt_s(r['derive_s'])}, "
                         f"render {fmt_s(r['render_s'])})")
            elif "with_report_s" in r:
                extra = f" (with the node report rendered: {fmt_s(r['with_report_s'])})"
            orows.append([r["what"] + extra, fmt_s(r["median_s"])])
    tables.append(("Other timings (medians)", ["what", "time"], orows))
    return tables


def print_tables(tables, console) -> None:
    from rich.table import Table

    for title, header, rows in tables:
        t = Table(title=title, title_justify="left")
        for i, h in enumerate(header):
            t.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
        for r in rows:
            t.add_row(*[str(c) for c in r])
        console.print(t)


def markdown(tables) -> str:
    out = []
    for title, header, rows in tables:
        out.append(f"### {title}\n")
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join("---" if i == 0 else "--:" for i in range(len(header))) + "|")
        for r in rows:
            out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------
# plots


def plot_quality(records, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    for shape in scenarios.SHAPES:
        xs = sorted(r["ratios"]["slurmtopo/lb"] for r in records
                    if r["shape"] == shape and "slurmtopo/lb" in r["ratios"])
        if not xs:
            continue
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=f"{shape} (n={len(xs)})")
    ax.axvline(1.05, color="grey", ls=":", lw=1)
    ax.text(1.05, 0.02, " 5%", color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("slurmtopo / lower bound (step time)")
    ax.set_ylabel("fraction of scenarios ≤ x")
    ax.set_title("Distance from the lower bound")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)

    ax = axes[1]
    busy_levels = sorted({r["busy_pct"] for r in records})
    data, labels, colors = [], [], []
    palette = {"slurm-default": "tab:red", "slurm-leaf": "tab:orange", "random": "tab:purple"}
    for b in busy_levels:
        for base in quality.BASELINES:
            xs = [r["ratios"][f"{base}/slurmtopo"] for r in records
                  if r["busy_pct"] == b and f"{base}/slurmtopo" in r["ratios"]
                  and math.isfinite(r["ratios"][f"{base}/slurmtopo"])]
            data.append(xs or [float("nan")])
            labels.append(f"{b}%")
            colors.append(palette[base])
    pos = []
    for i, _ in enumerate(busy_levels):
        pos.extend([i * 4 + 1, i * 4 + 2, i * 4 + 3])
    bp = ax.boxplot(data, positions=pos, widths=0.8, whis=(5, 95), showfliers=True,
                    patch_artist=True, flierprops={"markersize": 2})
    for patch, c in zip(bp["boxes"], colors):
        patch.set_facecolor(c)
        patch.set_alpha(0.5)
    ax.set_xticks([i * 4 + 2 for i in range(len(busy_levels))])
    ax.set_xticklabels([f"{b}% busy" for b in busy_levels])
    ax.axhline(1.0, color="black", lw=1)
    ax.set_yscale("log")
    ax.set_ylabel("baseline / slurmtopo (>1: slurmtopo faster)")
    ax.set_title("Baselines against slurmtopo (whiskers p5-p95)")
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=palette[b], alpha=0.5, label=quality.LABELS[b].split(" (")[0])
                       for b in quality.BASELINES], fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_speed(sp, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in sp.get("planner", []) if r.get("fits")]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    invs = sorted({r["inventory_gpus"] for r in rows})
    cmap = plt.get_cmap("viridis")
    for ax, key, ylabel in ((axes[0], "plan_s", "plan wall time (s, median warm)"),
                            (axes[1], "peak_bytes", "peak traced memory (MiB, cold)")):
        for i, inv in enumerate(invs):
            for b, ls in ((0, "-"), (60, "--")):
                pts = sorted((r["job_gpus"], r[key]) for r in rows
                             if r["inventory_gpus"] == inv and r["busy_pct"] == b and key in r)
                if not pts:
                    continue
                ys = [p[1] / 2**20 if key == "peak_bytes" else p[1] for p in pts]
                ax.plot([p[0] for p in pts], ys, ls, marker="o", ms=3,
                        color=cmap(i / max(1, len(invs) - 1)),
                        label=f"inventory {inv:,}{', 60% busy' if b else ''}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("job GPUs")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].axhline(1.0, color="red", ls=":", lw=1)
    axes[0].text(8, 1.05, "1 s target (16,384 on 100,000)", color="red", fontsize=8)
    axes[0].axhline(0.05, color="orange", ls=":", lw=1)
    axes[0].text(8, 0.053, "50 ms", color="orange", fontsize=8)
    axes[0].set_title("Planner time (solid: empty, dashed: 60% busy)")
    axes[1].set_title("Planner peak memory")
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------


def _meta(argv) -> Dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "slurmtopo"], cwd=ROOT,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except Exception:
        commit, dirty = "", False
    import slurmtopo
    return {"command": "python -m bench.run " + " ".join(argv),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "commit": commit + (" (slurmtopo/ has uncommitted changes)" if dirty else ""),
            "slurmtopo": getattr(slurmtopo, "__version__", "?"),
            "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "platform": platform.platform(),
            "loadavg_at_start": _loadavg()}


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _jsonable(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def _rounded(obj, digits: int = 5):
    """Floats to ``digits`` significant digits (the per-scenario records)."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v, digits) for v in obj]
    return obj


def write_json(path: str, data, compact_key: Optional[str] = None) -> None:
    """Indented JSON; the list under ``compact_key`` one item a line."""
    data = _jsonable(data)
    if compact_key is None or compact_key not in data:
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1)
            fh.write("\n")
        return
    items = [_rounded(x) for x in data.pop(compact_key)]
    head = json.dumps(data, indent=1)
    body = ",\n".join("  " + json.dumps(x, separators=(",", ":")) for x in items)
    with open(path, "w") as fh:
        fh.write(head[:-2] + f',\n "{compact_key}": [\n{body}\n ]\n}}\n')


def shown_dir(path: str) -> str:
    """``path`` as the user can find it: relative when under the working
    directory (bench/results), else absolute (never ``../../../tmp/x``)."""
    rel = os.path.relpath(path, os.getcwd())
    return os.path.abspath(path) if rel == ".." or rel.startswith(".." + os.sep) else rel


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, few scenarios")
    ap.add_argument("--out", default=DEFAULT_OUT, help="results directory (default bench/results)")
    ap.add_argument("--only", choices=("quality", "speed", "cli"),
                    help="run one part (cli: the command-line timings at 100,000 GPUs)")
    ap.add_argument("--per-cell", type=int, default=None,
                    help=f"scenarios per (shape, size, busy level) (default {PER_CELL}, "
                         f"--quick {QUICK_PER_CELL})")
    ap.add_argument("--seed", type=int, default=1000, help="first scenario seed (default 1000)")
    ap.add_argument("--sensitivity-per-cell", type=int, default=None,
                    help="scenarios per cell priced with the cost model's default model "
                         f"(default {SENSITIVITY_PER_CELL}, --quick 1; 0: skip)")
    ap.add_argument("--budget", type=float, default=None,
                    help="stop starting quality scenarios after this many seconds")
    ap.add_argument("--shapes", help="comma-separated cluster shapes for the quality half "
                    f"(default all: {', '.join(k for k in scenarios.SHAPES if k != 'fattree3')})")
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)

    from rich.console import Console
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    os.makedirs(args.out, exist_ok=True)
    meta = _meta(argv)
    t0 = time.perf_counter()
    cpu0 = _cpu_seconds()
    tables: List[tuple] = []

    if args.only in (None, "quality"):
        per_cell = args.per_cell or (QUICK_PER_CELL if args.quick else PER_CELL)
        shapes = args.shapes.split(",") if args.shapes else None
        for name in shapes or ():
            if name not in scenarios.SHAPES:
                ap.error(f"unknown shape {name!r} (known: {', '.join(scenarios.SHAPES)})")
        specs = scenarios.quality_specs(per_cell, quick=args.quick, base_seed=args.seed,
                                        shapes=shapes)
        meta["quality"] = {"per_cell": per_cell, "scenarios": len(specs), "first_seed": args.seed}
        console.print(f"[bold]quality[/]: {len(specs)} scenarios ({per_cell} per shape, size "
                      "and busy level)")
        status = console.status("")
        status.start()

        def progress(i, n, rec):
            status.update(f"scenario {i}/{n}: {rec['id']}")

        try:
            res = quality.run(specs, progress=progress, time_budget_s=args.budget)
        finally:
            status.stop()
        meta["quality"]["wall_s"] = res["summary"]["wall_s"]
        sens = None
        sens_cell = (args.sensitivity_per_cell if args.sensitivity_per_cell is not None
                     else (1 if args.quick else SENSITIVITY_PER_CELL))
        if sens_cell > 0:
            sspecs = scenarios.quality_specs(sens_cell, quick=args.quick,
                                             base_seed=args.seed + 50000, shapes=shapes)
            status = console.status("")
            status.start()
            try:
                sres = quality.run(sspecs, progress=progress, default_messages=True)
            finally:
                status.stop()
            sens = sres["summary"]
            meta["quality"]["sensitivity"] = {"per_cell": sens_cell, "scenarios": len(sspecs),
                                              "first_seed": args.seed + 50000,
                                              "wall_s": sens["wall_s"]}
        write_json(os.path.join(args.out, "quality.json"),
                   {"meta": meta, "summary": res["summary"],
                    "records": [quality.slim(r) for r in res["records"]],
                    "sensitivity_summary": sens}, compact_key="records")
        qt = quality_tables(res["summary"], sens)
        print_tables(qt, console)
        tables.extend(qt)
        s = res["summary"]
        if s["problems"]:
            console.print(f"[red]{len(s['problems'])} scenarios with problems[/] "
                          "(see quality.json summary.problems):")
            for p in s["problems"][:10]:
                console.print(f"  {p['id']}: {'; '.join(p['problems'])[:200]}")
        if s.get("skipped_for_time"):
            console.print(f"[yellow]{s['skipped_for_time']} scenarios skipped (--budget)[/]")
        if not args.no_plots and res["records"]:
            plot_quality(res["records"], os.path.join(args.out, "quality.png"))

    if args.only in (None, "speed"):
        console.print("[bold]speed[/]")
        sp = speed.run(quick=args.quick, memory=not args.no_memory,
                       progress=lambda m: console.print(f"  {m}"))
        meta["speed"] = {"wall_s": sp["wall_s"]}
        write_json(os.path.join(args.out, "speed.json"), {"meta": meta, **sp})
        st = speed_tables(sp)
        print_tables(st, console)
        tables.extend(st)
        if not args.no_plots:
            plot_speed(sp, os.path.join(args.out, "speed.png"))

    if args.only in (None, "cli"):
        from bench import cli

        console.print("[bold]command line[/]")
        cr = cli.run(quick=args.quick, progress=lambda m: console.print(f"  {m}"))
        meta["cli"] = {"wall_s": cr["wall_s"]}
        write_json(os.path.join(args.out, "cli.json"), {"meta": meta, **cr})
        ct = cli.tables(cr)
        print_tables(ct, console)
        tables.extend(ct)
        if not args.no_plots:
            cli.plot(cr, os.path.join(args.out, "cli.png"))

    meta["wall_s"] = time.perf_counter() - t0
    # the work itself, whatever else the machine runs: the wall time on an
    # idle machine is about this (README's figure)
    meta["cpu_s"] = _cpu_seconds() - cpu0
    meta["loadavg_at_end"] = _loadavg()
    write_json(os.path.join(args.out, "meta.json"), meta)
    with open(os.path.join(args.out, "report.md"), "w") as fh:
        fh.write(f"<!-- generated by `{meta['command']}` at {meta['date']}, commit "
                 f"{meta['commit']}, {meta['cpus']} CPUs, Python {meta['python']} -->\n\n")
        fh.write(markdown(tables))
    console.print(f"results in {shown_dir(args.out)}/ "
                  f"({meta['wall_s']:.0f} s, {meta['cpu_s']:.0f} s of CPU)")
    return 0


def _cpu_seconds() -> float:
    """CPU seconds of this process and of the children it waited for (the
    `slurmtopo` subprocesses the command-line costs time)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


if __name__ == "__main__":
    sys.exit(main())
