"""What a replay comes to: per policy, the numbers an admin sizing a
cluster asks for, as a document (``--json``), a table and a plot.

Per policy:

``jobs``                  jobs that ran (of the trace's jobs that fit the cluster)
``queue_wait_s``          start - submit: p50, p95, mean
``slowdown``              modelled step / the job's best step on the idle
                          cluster, shared links included: p50, p95, mean
``placement_slowdown``    the same without shared links (the placement alone)
``contention``            the share of jobs and of GPU-hours slowed by shared
                          links (more than :data:`SLOWED`), of them slowed by
                          other jobs' traffic, the share of GPU-hours lost to
                          it, and how much the slowed jobs' runs stretched
                          (mean, p95, max)
``slowdown_distribution`` the share of jobs and of GPU-hours in each slowdown
                          bucket (:data:`BUCKETS`)
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

from rich import box
from rich.table import Table

from slurmtopo.errors import SlurmtopoError
from slurmtopo.simulate.engine import Replay, effective_slowdown, slowdown
from slurmtopo.simulate.freestate import SEGMENTS
from slurmtopo.simulate.policies import PolicySpec
from slurmtopo.simulate.racks import capacity_table
from slurmtopo.simulate.runner import LOW_LOAD
from slurmtopo.simulate.sweep import CUT, MORE_WAIT, summary, tradeoff

#: jobs listed by name in the document when they cannot run here
LISTED = 20
#: a run stretched by more than this by shared links counts as slowed
SLOWED = 1.001
#: the slowdown buckets' lower edges (the last open)
BUCKETS = (1.0, 1.01, 1.05, 1.1, 1.25, 1.5, 2.0)


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


def _bucket(x: float) -> int:
    for i in range(len(BUCKETS) - 1, -1, -1):
        if x >= BUCKETS[i] - 1e-12:
            return i
    return 0


def _rack_trays(setup) -> Dict[str, int]:
    """Nodes (trays) per multi-node NVLink domain (rack) of the inventory."""
    sizes: Dict[str, int] = {}
    for node in setup.inv.nodes.values():
        if node.nvlink_domain is not None:
            key = node.nvlink_domain.key
            sizes[key] = sizes.get(key, 0) + 1
    return sizes


def setup_state_segments(setup) -> Optional[Tuple[Tuple[int, ...], int]]:
    """(segment sizes counted, racks) when the inventory has multi-node
    NVLink domains; None otherwise."""
    sizes = _rack_trays(setup)
    if not sizes:
        return None
    biggest = max(sizes.values())
    return tuple(k for k in SEGMENTS if 1 < k <= biggest), len(sizes)


def summarize(setup, spec: PolicySpec, rep: Replay) -> Dict[str, Any]:
    """One policy's numbers (see the module doc)."""
    waits: List[float] = []
    slows: List[float] = []
    placed: List[float] = []
    jcts: List[float] = []
    stretches: List[float] = []
    gpu_s = 0.0
    multi_leaf = 0
    not_run = 0
    slowed = by_others = 0
    slowed_gpu_s = lost_gpu_s = 0.0
    hist_jobs = [0] * len(BUCKETS)
    hist_gpu_s = [0.0] * len(BUCKETS)
    f = setup.fraction
    for job, o in zip(setup.jobs, rep.outcomes):
        if o.start is None or o.end is None:
            not_run += 1
            continue
        waits.append(o.start - job.submit)
        s = slowdown(o.step, job.best_step)
        stretch = o.stretch
        eff = effective_slowdown(job, o.step, f, stretch)
        placed.append(s)
        slows.append(eff)
        jcts.append(o.end - job.submit)
        held = o.gpus_held * (o.end - o.start)
        gpu_s += held
        b = _bucket(eff)
        hist_jobs[b] += 1
        hist_gpu_s[b] += held
        if stretch > SLOWED:
            slowed += 1
            slowed_gpu_s += held
            lost_gpu_s += o.gpus_held * (o.end - o.start - o.run_base)
            stretches.append(stretch)
            if stretch > o.alone * SLOWED:
                by_others += 1
        if o.leaves > 1:
            multi_leaf += 1
    span = rep.end
    gpus = setup.inv.gpu_count
    ran = len(waits)

    def share(x: float, whole: float) -> Optional[float]:
        return _ratio(x / whole) if whole > 0 else None

    out: Dict[str, Any] = {
        "policy": spec.label, "name": spec.name,
        "options": {k: v for k, v in spec.options.items()},
        "jobs": ran, "not_run": not_run,
        "queue_wait_s": {"p50": _r(percentile(waits, 50)), "p95": _r(percentile(waits, 95)),
                         "mean": _r(_mean(waits))},
        "slowdown": {"p50": _ratio(percentile(slows, 50)),
                     "p95": _ratio(percentile(slows, 95)), "mean": _ratio(_mean(slows))},
        "placement_slowdown": {"p50": _ratio(percentile(placed, 50)),
                               "p95": _ratio(percentile(placed, 95)),
                               "mean": _ratio(_mean(placed))},
        "contention": {"jobs": share(slowed, ran), "jobs_by_others": share(by_others, ran),
                       "gpu_hours": share(slowed_gpu_s, gpu_s),
                       "gpu_hours_lost": share(lost_gpu_s, gpu_s),
                       "stretch": {"mean": _ratio(_mean(stretches)),
                                   "p95": _ratio(percentile(stretches, 95)),
                                   "max": _ratio(max(stretches) if stretches else None)}},
        "slowdown_distribution": [
            {"from": BUCKETS[i], "to": BUCKETS[i + 1] if i + 1 < len(BUCKETS) else None,
             "jobs": share(hist_jobs[i], ran), "gpu_hours": share(hist_gpu_s[i], gpu_s)}
            for i in range(len(BUCKETS))],
        "jct_s": {"mean": _r(_mean(jcts)), "p95": _r(percentile(jcts, 95))},
        "gpu_utilisation": _ratio(gpu_s / (gpus * span)) if span > 0 and gpus else None,
        "makespan_s": _r(span),
        "stranded_gpus_mean": _r(rep.stranded_gpu_s / span) if span > 0 else None,
        "multi_leaf_jobs": multi_leaf,
    }
    st = setup_state_segments(setup)
    if st is not None and span > 0:
        segs, racks = st
        out["racks"] = {
            "domains": racks,
            "whole_free_mean": _r(rep.whole_domain_s / span),
            "partly_free_mean": _r(rep.partial_domain_s / span),
            "unusable_trays_mean": {str(k): _r(v / span)
                                    for k, v in zip(segs, rep.unusable_tray_s)}}
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
                     "seed": setup.seed, "contention": setup.contention,
                     "arrival_scale": _ratio(setup.arrival_scale)},
        "load": {"offered": _ratio(setup.offered), "offered_as_read": _ratio(setup.offered_native)},
        "policies": [summarize(setup, s, r) for s, r in zip(specs, replays)],
        **_racks_doc(setup),
    }


def _racks_doc(setup) -> Dict[str, Any]:
    """With multi-node NVLink domains: the usable share of a rack per
    segment size and tray failure rate (:mod:`slurmtopo.simulate.racks`)."""
    sizes = _rack_trays(setup)
    if not sizes:
        return {}
    trays = max(sizes.values())
    return {"racks": {"count": len(sizes), "trays": trays,
                      "capacity": capacity_table(trays)}}


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
    load = doc.get("load", {})
    offered = load.get("offered")
    if offered is not None:
        text = f"offered load {offered:.0%} of the GPUs"
        if doc["settings"].get("arrival_scale", 1) != 1:
            text += (f" (--load: inter-arrival times x{doc['settings']['arrival_scale']:.3g}; "
                     f"{load['offered_as_read']:.0%} as read)")
        achieved = [p["gpu_utilisation"] for p in doc["policies"]
                    if p["gpu_utilisation"] is not None]
        if achieved:
            text += f"; achieved {min(achieved):.0%}-{max(achieved):.0%}"
        out.append(text)
        if offered < LOW_LOAD:
            out.append(f"warning: the trace offers {offered:.0%} of the GPUs: below about "
                       f"{LOW_LOAD:.0%} jobs seldom compete for places or links and the "
                       "policies hardly differ; replay it busier with --load 0.8")
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


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.0%}"


def table(doc: Dict[str, Any]):
    """The policies side by side, as a rich Table (three numbers a cell:
    p50 / p95 / mean for waits and slowdowns, mean / p95 for JCT; the
    share of jobs / GPU-hours slowed by shared links)."""
    title = (f"{doc['inventory']['nodes']} nodes, {doc['inventory']['gpus']} GPUs, "
             f"{_replayed(doc)} jobs; comm fraction {doc['settings']['comm_fraction']:g}")
    offered = doc.get("load", {}).get("offered")
    if offered is not None:
        title += f"; offered load {offered:.0%}"
    tab = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=title)
    width = max(len(p["policy"]) for p in doc["policies"]) if doc["policies"] else 6
    tab.add_column("policy", overflow="fold", min_width=min(width, 14))
    for col in ("jobs", "wait\np50/p95/mean", "slowdown\np50/p95/mean", "contended\njobs/GPU-h",
                "JCT\nmean/p95", "GPU\nutil", "make-\nspan", "stran-\nded"):
        tab.add_column(col, justify="right", no_wrap=True)
    for p in doc["policies"]:
        w, s, j = p["queue_wait_s"], p["slowdown"], p["jct_s"]
        c = p.get("contention", {})
        util = p["gpu_utilisation"]
        tab.add_row(p["policy"], str(p["jobs"]),
                    f"{_t(w['p50'])}/{_t(w['p95'])}/{_t(w['mean'])}",
                    f"{_x(s['p50'])}/{_x(s['p95'])}/{_x(s['mean'])}",
                    f"{_pct(c.get('jobs'))}/{_pct(c.get('gpu_hours'))}",
                    f"{_t(j['mean'])}/{_t(j['p95'])}",
                    "-" if util is None else f"{util:.0%}", _t(p["makespan_s"]),
                    "-" if p["stranded_gpus_mean"] is None else f"{p['stranded_gpus_mean']:.1f}")
    return tab


def distribution_table(doc: Dict[str, Any]):
    """Per policy, the share of jobs in each slowdown bucket, and how much
    shared links stretched the slowed ones."""
    tab = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                title="slowdown distribution (share of jobs) and contention")
    width = max(len(p["policy"]) for p in doc["policies"]) if doc["policies"] else 6
    tab.add_column("policy", overflow="fold", min_width=min(width, 14))
    for lo, hi in zip(BUCKETS, BUCKETS[1:] + (None,)):
        tab.add_column(f"{lo:g}-{hi:g}" if hi is not None else f">={lo:g}", justify="right",
                       no_wrap=True)
    for col in ("by other\njobs", "stretch\nmean/p95", "GPU-h\nlost"):
        tab.add_column(col, justify="right", no_wrap=True)
    for p in doc["policies"]:
        c = p.get("contention", {})
        st = c.get("stretch", {})
        cells = [_pct(b["jobs"]) for b in p.get("slowdown_distribution", [])]
        tab.add_row(p["policy"], *cells, _pct(c.get("jobs_by_others")),
                    f"{_x(st.get('mean'))}/{_x(st.get('p95'))}", _pct(c.get("gpu_hours_lost")))
    return tab


def _replayed(doc: Dict[str, Any]) -> int:
    return doc["trace"]["jobs"] - doc["trace"]["never_fit"]


def racks_table(doc: Dict[str, Any]):
    """Rack-scale domains: per policy, racks wholly and partly free and the
    free trays no segment can use, per segment size (averaged over the
    replay); None without multi-node domains."""
    if "racks" not in doc:
        return None
    pols = [p for p in doc["policies"] if "racks" in p]
    if not pols:
        return None
    segs = list(pols[0]["racks"]["unusable_trays_mean"])
    tab = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                title=f"{doc['racks']['count']} racks of {doc['racks']['trays']} trays: free "
                      "trays no --segment=S job can use (mean over the replay)")
    tab.add_column("policy", overflow="fold")
    for col in ("racks\nwhole free", "racks\npartly free"):
        tab.add_column(col, justify="right", no_wrap=True)
    for k in segs:
        tab.add_column(f"S={k}", justify="right", no_wrap=True)
    for p in pols:
        r = p["racks"]
        tab.add_row(p["policy"], f"{r['whole_free_mean']:.1f}", f"{r['partly_free_mean']:.1f}",
                    *[f"{r['unusable_trays_mean'][k]:.1f}" for k in segs])
    return tab


def capacity_table_rich(doc: Dict[str, Any]):
    """The usable share of a rack per segment size and tray failure rate."""
    if "racks" not in doc:
        return None
    rows = doc["racks"]["capacity"]
    rates = list(rows[0]["usable"]) if rows else []
    tab = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                title=f"usable share of a {doc['racks']['trays']}-tray rack for --segment=S jobs, "
                      "by share of trays down")
    tab.add_column("segment", justify="right")
    for r in rates:
        tab.add_column(f"{float(r):.1%} down", justify="right", no_wrap=True)
    for row in rows:
        tab.add_row(str(row["segment"]), *[f"{row['usable'][r]:.1%}" for r in rates])
    return tab


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
    # lazy: the one import of matplotlib (optional, the 'bench' extra; ~300 ms): only --plot
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SlurmtopoError("--plot needs matplotlib, which is not installed (pip install "
                             "matplotlib, or slurmtopo's 'bench' extra)") from None
    return plt


def _png(fig) -> bytes:
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def plot_png(doc: Dict[str, Any]) -> bytes:
    """Queue wait against slowdown and the slowdown distribution
    (:func:`plot_figure`) as PNG bytes."""
    return _png(plot_figure(doc))


def plot_figure(doc: Dict[str, Any]):
    """Queue wait against slowdown, one point per policy (mean, with the p95
    as whiskers), the wait values of one policy joined by a line. The axes
    print plain numbers (no ``1e-5+1`` offset when every slowdown is about
    1) over a range of at least 2% of the values, and every family has its
    own hollow marker, smaller than the one before: points that coincide
    stay visible. Beside it, when the policies carry it, the slowdown
    distribution of every policy (the share of jobs at or below each
    slowdown bucket)."""
    plt = pyplot()
    families: Dict[str, List[Tuple[float, float, float, float, str]]] = {}
    for p in doc["policies"]:
        w, s = p["queue_wait_s"], p["slowdown"]
        if w["mean"] is None or s["mean"] is None:
            continue
        families.setdefault(p["name"], []).append(
            (w["mean"], s["mean"], w["p95"], s["p95"], p["policy"]))
    with_dist = any(p.get("slowdown_distribution") for p in doc["policies"])
    if with_dist:
        fig, (ax, cdf) = plt.subplots(1, 2, figsize=(12.5, 5.0), dpi=100)
    else:
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
    ax.set_ylabel("modelled slowdown, shared links included (mean; whisker to p95)")
    ax.set_title(f"{_replayed(doc)} jobs of {doc['trace']['source'].rsplit('/', 1)[-1]} "
                 f"on {doc['inventory']['nodes']} nodes")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _readable(ax, [p for pts in families.values() for p in pts])
    if with_dist:
        _distribution(cdf, doc)
    fig.tight_layout()
    return fig


def _distribution(ax, doc: Dict[str, Any]) -> None:
    """Every policy's share of jobs at or below each slowdown bucket."""
    for p in doc["policies"]:
        xs, ys, acc = [], [], 0.0
        for b in p.get("slowdown_distribution") or []:
            acc += b["jobs"] or 0.0
            xs.append(b["to"] if b["to"] is not None else BUCKETS[-1] * 1.25)
            ys.append(acc)
        if xs:
            ax.step([BUCKETS[0]] + xs, [0.0] + ys, where="post", label=p["policy"])
    ax.set_xscale("log")
    ax.set_xticks(list(BUCKETS) + [BUCKETS[-1] * 1.25])
    ax.set_xticklabels([f"{b:g}" for b in BUCKETS] + [f">{BUCKETS[-1]:g}"], fontsize=7)
    ax.set_xlabel("slowdown at most (buckets)")
    ax.set_ylabel("share of jobs")
    ax.set_ylim(0.0, 1.02)
    ax.set_title("slowdown distribution, shared links included")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)


def _readable(ax, pts) -> None:
    """Plain tick labels (matplotlib otherwise writes slowdowns of 1.00001
    as ``1e-5+1`` with ticks 3.00-5.00) over a range of at least 2% of the
    values on each axis, so equal values sit mid-axis instead of on a
    magnified noise scale."""
    ScalarFormatter = pyplot().ScalarFormatter  # matplotlib.ticker's, which pyplot exports
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


# --------------------------------------------------------------------------
# a sweep (--sweep): one document per load, the trade-off read off them


def sweep_document(sweep, runs: Sequence[Tuple[Optional[float], Dict[str, Any]]]
                   ) -> Dict[str, Any]:
    """The ``--json`` document of a sweep: every load's run document, and
    per load the waiting policies against ``slurm``
    (:func:`slurmtopo.simulate.sweep.tradeoff`)."""
    return {"slurmtopo": "simulate-sweep", "version": 1,
            "sweep": {"loads": [x for x in sweep.loads if x is not None],
                      "waits": list(sweep.waits) if sweep.waits is not None else None,
                      "criterion": {"excess_slowdown_cut": CUT, "more_p95_wait": MORE_WAIT}},
            "runs": [{"load": load, **doc} for load, doc in runs],
            "tradeoff": [{"load": load, "rows": tradeoff(doc)} for load, doc in runs],
            "summary": summary(runs)}


def sweep_table(sdoc: Dict[str, Any]):
    """Every (load, policy) replay of a sweep, one row each."""
    first = sdoc["runs"][0]
    tab = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                title=f"{first['inventory']['nodes']} nodes, {first['inventory']['gpus']} GPUs, "
                      f"{_replayed(first)} jobs; comm fraction "
                      f"{first['settings']['comm_fraction']:g}")
    tab.add_column("offered\nload", justify="right", no_wrap=True)
    width = max(len(p["policy"]) for r in sdoc["runs"] for p in r["policies"])
    tab.add_column("policy", overflow="fold", min_width=min(width, 14))
    for col in ("wait\np95/mean", "slowdown\nmean/p95", "contended\njobs/GPU-h",
                "GPU\nutil", "stran-\nded", "slurm's\nexcess cut"):
        tab.add_column(col, justify="right", no_wrap=True)
    for run, trade in zip(sdoc["runs"], sdoc["tradeoff"]):
        cuts = {r["policy"]: r for r in trade["rows"]}
        load = run["load"]["offered"]
        for p in run["policies"]:
            w, s, c = p["queue_wait_s"], p["slowdown"], p["contention"]
            util = p["gpu_utilisation"]
            cut = cuts.get(p["policy"])
            cell = "-" if cut is None or cut["excess_cut"] is None else \
                f"{cut['excess_cut']:.0%}" + (" *" if cut["qualifies"] else "")
            tab.add_row(_pct(load), p["policy"], f"{_t(w['p95'])}/{_t(w['mean'])}",
                        f"{s['mean']:.4f}/{_x(s['p95'])}" if s["mean"] is not None else "-",
                        f"{_pct(c['jobs'])}/{_pct(c['gpu_hours'])}",
                        "-" if util is None else f"{util:.0%}",
                        "-" if p["stranded_gpus_mean"] is None else
                        f"{p['stranded_gpus_mean']:.1f}", cell)
    return tab


def sweep_plot_png(sdoc: Dict[str, Any]) -> bytes:
    """Mean slowdown (left) and p95 queue wait (right) against the swept
    value: the offered load, or the wait when waits are swept (one line
    per policy family and load)."""
    plt = pyplot()
    by_wait = sdoc["sweep"]["waits"] is not None
    fig, (sl, wt) = plt.subplots(1, 2, figsize=(12.5, 5.0), dpi=100)
    lines: Dict[str, List[Tuple[float, float, float]]] = {}
    for run in sdoc["runs"]:
        load = run["load"]["offered"]
        for p in run["policies"]:
            if p["slowdown"]["mean"] is None:
                continue
            if by_wait:
                if "wait" not in p["options"]:
                    continue
                x = float(p["options"]["wait"])
                key = p["name"] + (f" @ {load:.0%}" if len(sdoc["runs"]) > 1 and load else "")
            else:
                x = load if load is not None else 0.0
                key = p["policy"]
            lines.setdefault(key, []).append((x, p["slowdown"]["mean"],
                                              p["queue_wait_s"]["p95"] or 0.0))
    for key, pts in lines.items():
        pts.sort()
        sl.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key)
        wt.plot([p[0] for p in pts], [p[2] for p in pts], marker="o", label=key)
    if by_wait:  # the baselines as flat lines
        for run in sdoc["runs"]:
            for p in run["policies"]:
                if "wait" in p["options"] or p["slowdown"]["mean"] is None:
                    continue
                sl.axhline(p["slowdown"]["mean"], ls="--", lw=0.8, alpha=0.6)
                wt.axhline(p["queue_wait_s"]["p95"] or 0.0, ls="--", lw=0.8, alpha=0.6)
                sl.annotate(p["policy"], (0, p["slowdown"]["mean"]), fontsize=7)
                wt.annotate(p["policy"], (0, p["queue_wait_s"]["p95"] or 0.0), fontsize=7)
    xlabel = "wait, s" if by_wait else "offered load"
    sl.set_xlabel(xlabel)
    sl.set_ylabel("mean slowdown, shared links included")
    wt.set_xlabel(xlabel)
    wt.set_ylabel("p95 queue wait, s")
    for ax in (sl, wt):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{_replayed(sdoc['runs'][0])} jobs of "
                 f"{sdoc['runs'][0]['trace']['source'].rsplit('/', 1)[-1]}", fontsize=10)
    fig.tight_layout()
    return _png(fig)
