"""What an audit comes to: a document (``--json``) and two tables.

Per job (multi-node GPU jobs only): its nodes and GPUs, the layout the
layout rule gives it, the leaves / blocks / NVLink domains it spans
(``spans``), the fewest it could have had (``fewest``, see
:mod:`slurmtopo.audit.placements`), slurmtopo's placement's spans, whether
it is optimal (no more than the fewest on every count), and the modelled
step of today's placement and of slurmtopo's with their ratio
(``slowdown``). The summary counts the jobs over the fewest and weighs the
steps by GPUs. Numbers are rounded (seconds to the nanosecond, ratios to
6 digits), jobs sorted by id, so the same input gives the same bytes.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Sequence

from rich import box
from rich.table import Table

from slurmtopo.audit.placements import JobAudit
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.show.tablefit import Fitted
from slurmtopo.show.termsafe import markup

#: the counts a job spans, in table order
COUNTS = ("leaves", "blocks", "domains")


def _ratio(x: Optional[float]) -> Optional[float]:
    return None if x is None else float(f"{x:.6g}")


def _s(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(float(x), 9)


def _when(t: Optional[float]) -> Optional[str]:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).replace(microsecond=0).isoformat()


def _job_key(job_id: str):
    head = job_id.split("_", 1)[0].split("+", 1)[0]
    return (0, int(head), job_id) if head.isdigit() else (1, 0, job_id)


def job_doc(a: JobAudit) -> Dict[str, Any]:
    extra = {}
    for k in COUNTS:
        t, f = getattr(a.today, k), getattr(a.fewest, k)
        extra[k] = None if t is None or f is None else t - f
    return {
        "job": a.job.job_id, "name": a.job.name, "start": _when(a.job.start),
        "nodes": fold_hostlist(a.job.alloc), "node_count": len(a.job.alloc),
        "gpus": a.job.gpus,
        "layout": {"tp": a.shape.tp, "pp": a.shape.pp, "dp": a.shape.dp,
                   "gpus_per_node": a.shape.gpus_per_node},
        "spans": a.today.as_dict(), "fewest": a.fewest.as_dict(),
        "slurmtopo_spans": None if a.slurmtopo is None else a.slurmtopo.as_dict(),
        "extra": extra, "optimal": a.optimal,
        "step_s": {"today": _s(a.step_today_s), "slurmtopo": _s(a.step_slurmtopo_s)},
        "slowdown": _ratio(a.slowdown), "note": a.note,
    }


def summary(audits: Sequence[JobAudit]) -> Dict[str, Any]:
    over = {k: sum(1 for a in audits if (getattr(a.today, k) or 0) > (getattr(a.fewest, k) or 0))
            for k in COUNTS}
    priced = [a for a in audits if a.slowdown is not None]
    today = sum(a.job.gpus * a.step_today_s for a in priced)
    best = sum(a.job.gpus * a.step_slurmtopo_s for a in priced)
    slows = sorted(a.slowdown for a in priced)
    return {
        "jobs": len(audits), "optimal": sum(1 for a in audits if a.optimal),
        "over_fewest": over,
        "extra_leaves": sum((a.today.leaves or 0) - (a.fewest.leaves or 0) for a in audits),
        "priced": len(priced),
        "slowdown_mean": _ratio(sum(slows) / len(slows)) if slows else None,
        "slowdown_max": _ratio(slows[-1]) if slows else None,
        "slowdown_gpu_weighted": _ratio(today / best) if best > 0 else None,
    }


def document(*, inventory: str, inv, source: str, rules, audits: Sequence[JobAudit],
             stranded=None, history=None, not_audited: Optional[Dict[str, int]] = None,
             contention=None, contention_by_job=None) -> Dict[str, Any]:
    """The whole audit as one JSON-ready document."""
    jobs = sorted(audits, key=lambda a: _job_key(a.job.job_id))
    if history is not None and contention is None:
        contention, contention_by_job = history.contention, history.contention_by_job
    doc: Dict[str, Any] = {
        "slurmtopo": "audit", "version": 1,
        "inventory": {"source": inventory, "nodes": len(inv.nodes), "gpus": inv.gpu_count},
        "source": source, "layout_rule": rules.describe(),
        "summary": summary(jobs),
        "not_audited": dict(sorted((not_audited or {}).items())),
        "jobs": [job_doc(a) for a in jobs],
    }
    if contention is not None:
        doc["contention"] = contention
        by = contention_by_job or {}
        for j in doc["jobs"]:
            hit = by.get(j["job"])
            if hit is not None:
                j["contention"] = {"stretch": _ratio(hit[0]), "alone": _ratio(hit[1])}
    if stranded is not None:
        doc["stranded"] = stranded.as_dict()
    if history is not None:
        doc["period"] = {
            "span_s": round(history.span_s, 3),
            "stranded_gpus_mean": None if history.stranded_mean is None
            else round(history.stranded_mean, 3),
            "stranded_gpus_peak": history.stranded_peak,
            "running_at_end": history.running,
            "skipped": [s.as_dict() for s in history.skipped],
        }
    return doc


# --------------------------------------------------------------------------
# the tables


def _n(x: Optional[int]) -> str:
    return "-" if x is None else str(x)


def _pair(job: Dict[str, Any], k: str) -> str:
    t, f = job["spans"][k], job["fewest"][k]
    if t is None:
        return "-"
    return f"{t}/{f}" + (" !" if f is not None and t > f else "")


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1e3:.1f} ms"


def job_table(doc: Dict[str, Any]):
    """One row per job: spans today / fewest (``!`` where over), steps, ratio."""
    s = doc["summary"]
    tab = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                title=f"{s['jobs']} multi-node GPU job{'s' * (s['jobs'] != 1)}, "
                      f"{s['optimal']} optimal "
                      f"(spans today/fewest; ! over the fewest)")
    tab.add_column("job", overflow="fold")
    tab.add_column("nodes", overflow="fold")
    for col in ("GPUs", "leaves", "blocks", "domains", "step\ntoday", "step\nslurmtopo",
                "slow-\ndown"):
        tab.add_column(col, justify="right", no_wrap=True)
    for j in doc["jobs"]:
        label = markup(j["job"]) + (f" {markup(j['name'], 24)}" if j["name"] else "")
        tab.add_row(label, markup(j["nodes"]), str(j["gpus"]), _pair(j, "leaves"),
                    _pair(j, "blocks"), _pair(j, "domains"), _ms(j["step_s"]["today"]),
                    _ms(j["step_s"]["slurmtopo"]),
                    "-" if j["slowdown"] is None else f"{j['slowdown']:.2f}")
    return Fitted(tab, ["job", "nodes", "GPUs", "leaves", "blocks", "domains", "step today",
                        "step slurmtopo", "slowdown"])


def stranded_table(doc: Dict[str, Any]):
    """Free and stranded GPUs per leaf and per multi-node NVLink domain."""
    st = doc["stranded"]
    tab = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                title=f"{st['stranded']} stranded of {st['free']} free GPUs")
    tab.add_column("where", overflow="fold")
    for col in ("GPUs", "free", "stranded"):
        tab.add_column(col, justify="right", no_wrap=True)
    for kind, groups in (("leaf", st["by_leaf"]), ("domain", st["by_domain"])):
        for g in groups:
            tab.add_row(f"{kind} {markup(g['name'])}", str(g["gpus"]), str(g["free"]),
                        str(g["stranded"]))
    return Fitted(tab)


def notes(doc: Dict[str, Any]) -> List[str]:
    """The lines under the tables: the cost summary, what was left out."""
    s = doc["summary"]
    out = []
    if s["jobs"]:
        over = ", ".join(f"{v} over the fewest {k}" for k, v in s["over_fewest"].items() if v)
        one = s["jobs"] == 1
        out.append(f"{s['optimal']} of {s['jobs']} job{'' if one else 's'} "
                   f"span{'s' if one else ''} no more than they could have"
                   + (f"; {over}" if over else ""))
    if s["slowdown_gpu_weighted"] is not None:
        out.append(f"modelled step, today against slurmtopo's: {s['slowdown_gpu_weighted']:.3f}"
                   f" weighted by GPUs (mean {s['slowdown_mean']:.3f}, worst "
                   f"{s['slowdown_max']:.3f})")
    c = doc.get("contention")
    if c is not None and c["jobs"]:
        share = c.get("gpu_hours", c.get("gpus"))
        what = "GPU-hours" if "gpu_hours" in c else "GPUs"
        st = c["stretch"]
        text = (f"shared links: {c['slowed']:.0%} of the jobs ({share:.0%} of their {what}) "
                f"slowed, {c['slowed_by_others']:.0%} by other jobs")
        if st["mean"] is not None:
            text += f"; their runs {st['mean']:.2f}x (p95 {st['p95']:.2f}x)"
        out.append(text)
    for j in doc["jobs"]:
        if j["note"]:
            out.append(f"job {j['job']}: {j['note']}")
    if doc["not_audited"]:
        out.append("not audited: " + ", ".join(f"{v} {k}" for k, v in doc["not_audited"].items()))
    if "stranded" in doc:
        out.append("stranded: free, but in no fully free NVLink domain (a node's NVLink "
                   "island, or its multi-node domain) and no fully free leaf")
    period = doc.get("period")
    if period is not None:
        mean = period["stranded_gpus_mean"]
        out.append(f"stranded GPUs over {period['span_s'] / 3600:.1f} h: mean "
                   f"{'-' if mean is None else f'{mean:.1f}'}, peak {period['stranded_gpus_peak']}")
        if period["running_at_end"]:
            out.append(f"{period['running_at_end']} still running at the end of the record "
                       "(holding their GPUs to its end)")
        for sk in period["skipped"]:
            out.append(f"skipped: {sk['rows']} {sk['reason']} (first {sk['first']})")
    out.append(f"layout rule: {doc['layout_rule']}")
    return out


def contracts_table(report):
    """One row per contract violation (audit/contracts.ContractReport):
    the job, the kind, what Slurm gave against what was asked or planned."""
    n = len(report.violations)
    tab = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                title=f"{n} contract violation{'s' * (n != 1)} in "
                      f"{len({v.job for v in report.violations})} of {len(report.jobs)} "
                      "running multi-node job(s)")
    tab.add_column("job", no_wrap=True)
    tab.add_column("kind", no_wrap=True)
    tab.add_column("what", overflow="fold")
    for v in report.shown():
        tab.add_row(markup(v.job), v.kind, markup(v.message))
    return Fitted(tab, ["job", "kind", "what"])
