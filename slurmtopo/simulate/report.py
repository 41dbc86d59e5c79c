"""What a replay comes to: per policy, the numbers an admin sizing a
cluster asks for, as a document (``--json``), a table and a plot.

Per policy:

``jobs``                  jobs that ran (of the trace's jobs that fit the cluster)
``queue_wait_s``          start - submit: p50, p95, mean
``slowdown``              modelled step / the job's best step on the idle
                          cluster: p50, p95, mean
``jct_s``                 end - submit (job completion time): mean, p95
``gpu_utilisation``       GPU-seconds held / (GPUs * makespan)
``makespan_s``            from the first submission to the last end
``stranded_gpus_mean``    free GPUs in no fully free NVLink domain or leaf,
                          averaged over the makespan
``multi_leaf_jobs``       jobs whose nodes span more than one leaf switch
``not_run``               jobs the policy never started (it could not
                          place them, or the daemon rejected them)

Percentiles interpolate linearly between the two nearest values. Numbers
are rounded (seconds to the millisecond, ratios to 6 digits) so that the
same input gives the same bytes.
"""
from __future__ import annotations

import io
from typing import Any, Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.simulate.engine import Replay, slowdown
from slurmtopo.simulate.policies import PolicySpec

#: jobs listed by name in the document when they cannot run here
LISTED = 20


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The ``q``-th percentile (0-100) of ``values``, linearly interpolated;
    None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def _r(x: Optional[float], digits: int = 3) -> Optional[float]:
    return None if x is None else round(float(x), digits)


def _ratio(x: Optional[float]) -> Optional[float]:
    return None if x is None else float(f"{x:.6g}")


def summarize(setup, spec: PolicySpec, rep: Replay) -> Dict[str, Any]:
    """One policy's numbers (see the module doc)."""
    waits: List[float] = []
    slows: List[float] = []
    jcts: List[float] = []
    gpu_s = 0.0
    multi_leaf = 0
    not_run = 0
    for job, o in zip(setup.jobs, rep.outcomes):
        if o.start is None or o.end is None:
            not_run += 1
            continue
        waits.append(o.start - job.submit)
        slows.append(slowdown(o.step, job.best_step))
        jcts.append(o.end - job.submit)
        gpu_s += o.gpus_held * (o.end - o.start)
        if o.leaves > 1:
            multi_leaf += 1
    span = rep.end
    gpus = setup.inv.gpu_count
    out: Dict[str, Any] = {
        "policy": spec.label, "name": spec.name,
        "options": {k: v for k, v in spec.options.items()},
        "jobs": len(waits), "not_run": not_run,
        "queue_wait_s": {"p50": _r(percentile(waits, 50)), "p95": _r(percentile(waits, 95)),
                         "mean": _r(_mean(waits))},
        "slowdown": {"p50": _ratio(percentile(slows, 50)),
                     "p95": _ratio(percentile(slows, 95)), "mean": _ratio(_mean(slows))},
        "jct_s": {"mean": _r(_mean(jcts)), "p95": _r(percentile(jcts, 95))},
        "gpu_utilisation": _ratio(gpu_s / (gpus * span)) if span > 0 and gpus else None,
        "makespan_s": _r(span),
        "stranded_gpus_mean": _r(rep.stranded_gpu_s / span) if span > 0 else None,
        "multi_leaf_jobs": multi_leaf,
    }
    if rep.cycles:
        out["daemon_cycles"] = rep.cycles
    if rep.notes:
        out["notes"] = rep.notes[:LISTED] + ([f"... and {len(rep.notes) - LISTED} more"]
                                             if len(rep.notes) > LISTED else [])
    return out


def document(setup, inventory: str, specs: Sequence[PolicySpec],
             replays: Sequence[Replay]) -> Dict[str, Any]:
    """The ``--json`` document of a run."""
    trace = setup.trace
    never = [{"job": tj.job_id, "where": tj.where, "gpus": tj.gpus, "why": why}
             for tj, why in setup.never[:LISTED]]
    return {
        "slurmtopo": "simulate", "version": 1,
        "inventory": {"source": inventory, "nodes": len(setup.inv),
                      "gpus": setup.inv.gpu_count},
        "trace": {"source": trace.source, "format": trace.format, "rows": trace.rows,
                  "jobs": len(trace.jobs), "beyond_limit": trace.beyond_limit,
                  "skipped": [s.as_dict() for s in trace.skipped],
                  "never_fit": len(setup.never), "never_fit_jobs": never},
        "settings": {"comm_fraction": setup.fraction, "layout_rule": setup.rules.describe(),
                     "seed": setup.seed},
        "policies": [summarize(setup, s, r) for s, r in zip(specs, replays)],
    }


def notes(doc: Dict[str, Any]) -> List[str]:
    """What the reader should know besides the table."""
    out = []
    t = doc["trace"]
    skipped = sum(s["rows"] for s in t["skipped"])
    text = f"trace: {t['jobs']} jobs from {t['source']} ({t['format']})"
    if t["beyond_limit"]:
        text += f", the first {t['jobs']} of {t['jobs'] + t['beyond_limit']} (--jobs)"
    if skipped:
        text += f"; {skipped} rows skipped: " + ", ".join(
            f"{s['rows']} {s['reason']} (first {s['first']})" for s in t["skipped"])
    out.append(text)
    if t["never_fit"]:
        first = t["never_fit_jobs"][0]
        out.append(f"{t['never_fit']} jobs can never run on this inventory and are left out "
                   f"(first: {first['job']} at {first['where']}, {first['gpus']} GPUs: "
                   f"{first['why']})")
    for p in doc["policies"]:
        if p["not_run"]:
            out.append(f"{p['policy']}: {p['not_run']} jobs never started")
    return out


# --------------------------------------------------------------------------
# the table


def _t(x: Optional[float]) -> str:
    """Seconds, short: ``45s``, ``12m``, ``3.2h``, ``1.5d``."""
    if x is None:
        return "-"
    if x < 99.5:
        return f"{x:.0f}s"
    if x < 5940:
        return f"{x / 60:.0f}m"
    if x < 172800:
        return f"{x / 3600:.1f}h"
    return f"{x / 86400:.1f}d"


def _x(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(doc: Dict[str, Any]):
    """The policies side by side, as a rich Table (three numbers a cell:
    p50 / p95 / mean for waits and slowdowns, mean / p95 for JCT)."""
    from rich import box
    from rich.table import Table

    tab = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=f"{doc['inventory']['nodes']} nodes, {doc['inventory']['gpus']} GPUs, "
                      f"{_replayed(doc)} jobs; comm fraction {doc['settings']['comm_fraction']:g}")
    width = max(len(p["policy"]) for p in doc["policies"]) if doc["policies"] else 6
    tab.add_column("policy", overflow="fold", min_width=min(width, 14))
    for col in ("jobs", "wait\np50/p95/mean", "slowdown\np50/p95/mean", "JCT\nmean/p95",
                "GPU\nutil", "make-\nspan", "stran-\nded"):
        tab.add_column(col, justify="right", no_wrap=True)
    for p in doc["policies"]:
        w, s, j = p["queue_wait_s"], p["slowdown"], p["jct_s"]
        util = p["gpu_utilisation"]
        tab.add_row(p["policy"], str(p["jobs"]),
                    f"{_t(w['p50'])}/{_t(w['p95'])}/{_t(w['mean'])}",
                    f"{_x(s['p50'])}/{_x(s['p95'])}/{_x(s['mean'])}",
                    f"{_t(j['mean'])}/{_t(j['p95'])}",
                    "-" if util is None else f"{util:.0%}", _t(p["makespan_s"]),
                    "-" if p["stranded_gpus_mean"] is None else f"{p['stranded_gpus_mean']:.1f}")
    return tab


def _replayed(doc: Dict[str, Any]) -> int:
    return doc["trace"]["jobs"] - doc["trace"]["never_fit"]


# --------------------------------------------------------------------------
# the plot


#: one marker per policy family, drawn hollow and each smaller than the
#: last, so that families whose points coincide stay visible, one inside
#: the other
_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")


def pyplot():
    """matplotlib's pyplot on the Agg backend, or the one-line error; the
    command asks before the replay, so a missing matplotlib costs no
    minutes."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SlurmtopoError("--plot needs matplotlib, which is not installed (pip install "
                             "matplotlib, or slurmtopo's 'bench' extra)") from None
    return plt


def plot_png(doc: Dict[str, Any]) -> bytes:
    """Queue wait against slowdown (:func:`plot_figure`) as PNG bytes."""
    plt = pyplot()
    fig = plot_figure(doc)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def plot_figure(doc: Dict[str, Any]):
    """Queue wait against slowdown, one point per policy (mean, with the p95
    as whiskers), the wait values of one policy joined by a line. The axes
    print plain numbers (no ``1e-5+1`` offset when every slowdown is about
    1) over a range of at least 2% of the values, and every family has its
    own hollow marker, smaller than the one before: points that coincide
    stay visible."""
    plt = pyplot()
    families: Dict[str, List[Tuple[float, float, float, float, str]]] = {}
    for p in doc["policies"]:
        w, s = p["queue_wait_s"], p["slowdown"]
        if w["mean"] is None or s["mean"] is None:
            continue
        families.setdefault(p["name"], []).append(
            (w["mean"], s["mean"], w["p95"], s["p95"], p["policy"]))
    fig, ax = plt.subplots(figsize=(7.5, 5.0), dpi=100)
    for k, (name, pts) in enumerate(families.items()):
        pts.sort()
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        line = ax.plot(xs, ys, marker=_MARKERS[k % len(_MARKERS)], fillstyle="none",
                       markersize=max(4.0, 12.0 - 2.0 * k), markeredgewidth=1.5,
                       label=name)[0]
        for x, y, x95, y95, label in pts:
            ax.errorbar([x], [y], xerr=[[0], [max(0.0, x95 - x)]],
                        yerr=[[0], [max(0.0, y95 - y)]], color=line.get_color(), alpha=0.35,
                        capsize=2)
            if len(pts) > 1 or label != name:
                ax.annotate(label.split(":", 1)[-1], (x, y), textcoords="offset points",
                            xytext=(4, 4), fontsize=7)
    ax.set_xlabel("queue wait, s (mean; whisker to p95)")
    ax.set_ylabel("modelled slowdown, step / best step (mean; whisker to p95)")
    ax.set_title(f"{_replayed(doc)} jobs of {doc['trace']['source'].rsplit('/', 1)[-1]} "
                 f"on {doc['inventory']['nodes']} nodes")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _readable(ax, [p for pts in families.values() for p in pts])
    fig.tight_layout()
    return fig


def _readable(ax, pts) -> None:
    """Plain tick labels (matplotlib otherwise writes slowdowns of 1.00001
    as ``1e-5+1`` with ticks 3.00-5.00) over a range of at least 2% of the
    values on each axis, so equal values sit mid-axis instead of on a
    magnified noise scale."""
    from matplotlib.ticker import ScalarFormatter

    for axis, lo_hi, setter in ((ax.yaxis, [v for p in pts for v in (p[1], p[3])], ax.set_ylim),
                                (ax.xaxis, [v for p in pts for v in (p[0], p[2])], ax.set_xlim)):
        formatter = ScalarFormatter(useOffset=False)
        formatter.set_scientific(False)
        axis.set_major_formatter(formatter)
        if not lo_hi:
            continue
        lo, hi = min(lo_hi), max(lo_hi)
        least = 0.02 * max(abs(lo), abs(hi), 1.0)
        if hi - lo < least:  # (nearly) equal values: a 2% range around them
            mid = (lo + hi) / 2
            lo, hi = mid - least / 2, mid + least / 2
        pad = 0.1 * (hi - lo)
        setter(lo - pad, hi + pad)
