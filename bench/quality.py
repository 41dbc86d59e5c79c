"""Placement quality: the modelled time of one training step.

For every scenario (bench/scenarios.py) the job is placed by slurmtopo and
by three baselines, and each placement is priced by the cost model
(``slurmtopo.cost.evaluate``: the step of :func:`slurmtopo.cost.step.price_step`,
the whole step where the job describes its model, else its
communication). The lower bound (``slurmtopo.cost.lower_bound``) puts
every group on the fastest link class it could possibly use (and, for a
whole step, the compute on the fastest GPUs that hold the job). Reported
per scenario:

* ``slurmtopo / lower bound`` (>= 1; 1 is optimal), and
* ``baseline / slurmtopo`` for each baseline (> 1: slurmtopo is faster).

Rerun one scenario, with its per-kind breakdown::

    python -m bench.quality --scenario hgx-fattree:256:60:1003 [--dump DIR]
"""
from __future__ import annotations

import argparse
import math
from dataclasses import replace
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence

from slurmtopo.inventory.model import ClusterState

from bench.scenarios import Scenario, ScenarioSpec, build, dump_state, free_gpus

#: placement -> the function that makes it: slurmtopo.plan.choice.plan, or a
#: baseline of slurmtopo.placement
PLANNERS = {
    "slurmtopo": "plan",
    "slurm-default": "naive_plan",
    "slurm-leaf": "leaf_constrained_plan",
    "random": "random_plan",
}
BASELINES = ("slurm-default", "slurm-leaf", "random")
LABELS = {
    "slurmtopo": "slurmtopo",
    "slurm-default": "Slurm default (hostname order, block, GPU index order)",
    "slurm-leaf": "Slurm + leaf-switch constraint (no intra-node awareness)",
    "random": "random feasible placement",
    "lower_bound": "lower bound",
}
EPS = 1e-9


def _api():
    from slurmtopo import cost, placement
    from slurmtopo.errors import PlacementError, SlurmtopoError
    from slurmtopo.plan import choice
    return placement, cost, PlacementError, SlurmtopoError, choice


def planner_function(name: str):
    """The function that makes placement ``name`` (:data:`PLANNERS`)."""
    placement, _, _, _, choice = _api()
    return getattr(choice if name == "slurmtopo" else placement, PLANNERS[name])


def cost_params(inv, params=None):
    """What ``slurmtopo plan`` prices with: the inventory's cost overrides
    (``CostParams.from_inventory``) unless ``params`` is given."""
    if params is not None:
        return params
    from slurmtopo import cost
    cp = getattr(cost, "CostParams", None)
    if cp is not None and hasattr(cp, "from_inventory"):
        return cp.from_inventory(inv)
    return None


def free_bound(inv, req, state, params=None) -> Optional[float]:
    """``cost.lower_bound`` on the free GPUs of ``state`` (the usable
    nodes' free GPUs, per node, domain and switch): what no placement of
    this job on this cluster *now* can beat. None when the cost module has
    no state-aware bound."""
    from slurmtopo import cost
    try:
        return float(cost.lower_bound(inv, req, params, state=state).step_time_s)
    except TypeError:  # an older cost module
        return None


def _kinds(report) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for kind, kc in (getattr(report, "kinds", None) or {}).items():
        slowest = getattr(kc, "slowest", None)
        out[kind] = {"time_s": float(getattr(kc, "time_s", 0.0) or 0.0),
                     "slowest": _label(slowest)}
    return out


def _label(value) -> Optional[str]:
    """A JSON-able description of a CostReport kind's ``slowest`` field."""
    if value is None:
        return None
    label = getattr(value, "label", None)
    if isinstance(label, str):
        return label
    for attr in ("link", "link_class", "cls"):
        inner = getattr(value, attr, None)
        if inner is not None and hasattr(inner, "label"):
            return inner.label
    if isinstance(value, (str, int, float)):
        return str(value)
    return str(value)[:120]


def place(name: str, sc: Scenario, req=None, params=None) -> Dict[str, Any]:
    """Place ``sc`` with one planner and price the placement."""
    placement, cost, PlacementError, SlurmtopoError, _ = _api()
    req = req if req is not None else sc.job.request()
    fn = planner_function(name)
    t0 = time.perf_counter()
    try:
        if name == "random":
            pl = fn(sc.inv, sc.state, req, seed=sc.spec.seed)
        else:
            pl = fn(sc.inv, sc.state, req)
    except PlacementError as exc:
        return {"ok": False, "error": exc.render(), "plan_s": time.perf_counter() - t0}
    plan_s = time.perf_counter() - t0
    rep = cost.evaluate(sc.inv, pl, req, params)
    return {"ok": True, "step_s": float(rep.step_time_s), "plan_s": plan_s,
            "kinds": _kinds(rep), "counted": list(getattr(rep, "counted", ()) or ()),
            "hosts": len(pl.hosts), "placement": pl}


def _check_placement(sc: Scenario, pl) -> Optional[str]:
    """A problem with a placement (a used GPU not free, a GPU used twice,
    wrong rank count), or None."""
    if pl.world_size != sc.job.world:
        return f"{pl.world_size} ranks placed for a world of {sc.job.world}"
    seen = set()
    for s in pl.slots:
        key = (s.host, s.gpu)
        if key in seen:
            return f"GPU {s.host}:{s.gpu} given to two ranks"
        seen.add(key)
        node = sc.inv.nodes.get(s.host)
        if node is None:
            return f"rank {s.rank} on unknown host {s.host}"
        if s.gpu not in sc.state.free_gpus(node):
            return f"rank {s.rank} on busy or unusable GPU {s.host}:{s.gpu}"
    return None


def run_scenario(spec, params=None, planners: Sequence[str] = tuple(PLANNERS),
                 keep_placements: bool = False, empty_reference: bool = True,
                 default_messages: bool = False) -> Dict[str, Any]:
    """One scenario: every planner, the lower bound, ratios, diagnostics.

    ``default_messages``: price the step of the cost model's default model
    (and its per-kind message sizes) instead of the scenario's model."""
    placement, cost, PlacementError, SlurmtopoError, _ = _api()
    sc = build(spec)
    if default_messages:
        sc.job = replace(sc.job, message_bytes=(), model_spec="")
    params = cost_params(sc.inv, params)
    rec: Dict[str, Any] = {
        "id": sc.id, "shape": sc.spec.shape, "nodes": sc.spec.nodes,
        "gpus": sc.inv.gpu_count, "busy_pct": sc.spec.busy_pct, "seed": sc.spec.seed,
        "free_gpus": free_gpus(sc.inv, sc.state), "job": sc.job.as_dict(),
        "layout": sc.job.describe(), "results": {}, "ratios": {}, "problems": [],
    }
    try:
        req = sc.job.request()
    except SlurmtopoError as exc:  # the generator made a layout the request refuses
        rec["problems"].append(f"request refused: {exc.render()}")
        return rec
    lb = cost.lower_bound(sc.inv, req, params)
    rec["lower_bound"] = {"step_s": float(lb.step_time_s), "kinds": _kinds(lb),
                          "counted": list(getattr(lb, "counted", ()) or ()),
                          "alone_s": getattr(lb, "alone_s", None)}
    fb = free_bound(sc.inv, req, sc.state, params) if sc.spec.busy_pct else lb.step_time_s
    if fb is not None:
        rec["free_bound_s"] = fb
    for name in planners:
        res = place(name, sc, req, params)
        if res["ok"]:
            pl = res.pop("placement")
            bad = _check_placement(sc, pl)
            if bad:
                rec["problems"].append(f"{name}: invalid placement: {bad}")
            if keep_placements:
                rec.setdefault("placements", {})[name] = pl
        rec["results"][name] = res
    mine = rec["results"].get("slurmtopo", {})
    lb_s = rec["lower_bound"]["step_s"]
    if empty_reference and sc.spec.busy_pct > 0 and "slurmtopo" in planners:
        # the same job on the idle cluster: separates what fragmentation
        # costs from what the planner (or the bound's optimism) costs
        idle = Scenario(spec=sc.spec, inv=sc.inv, state=ClusterState(), job=sc.job)
        ref = place("slurmtopo", idle, req, params)
        ref.pop("placement", None)
        rec["results"]["slurmtopo-idle"] = ref
    if mine.get("ok"):
        s = mine["step_s"]
        rec["ratios"]["slurmtopo/lb"] = (s / lb_s) if lb_s > 0 else (1.0 if s <= 0 else math.inf)
        if s < lb_s * (1 - 1e-6):
            rec["problems"].append(f"slurmtopo step time {s:.6g}s is below the lower bound "
                                   f"{lb_s:.6g}s")
        for b in BASELINES:
            r = rec["results"].get(b)
            if r and r.get("ok"):
                rec["ratios"][f"{b}/slurmtopo"] = (r["step_s"] / s) if s > 0 else (
                    1.0 if r["step_s"] <= 0 else math.inf)
        rec["gap"] = _gap(mine, rec["lower_bound"])
        idle = rec["results"].get("slurmtopo-idle")
        if idle and idle.get("ok"):
            rec["ratios"]["slurmtopo-idle/lb"] = idle["step_s"] / lb_s if lb_s > 0 else 1.0
        fb = rec.get("free_bound_s")
        if fb is not None:
            rec["ratios"]["slurmtopo/free"] = s / fb if fb > 0 else 1.0
            found = [r["step_s"] for n, r in rec["results"].items()
                     if r.get("ok") and n != "slurmtopo-idle"]
            if fb < lb_s * (1 - 1e-6):
                rec["problems"].append(f"the bound on the free GPUs {fb:.6g}s is below the "
                                       f"bound on the idle cluster {lb_s:.6g}s (cost bug)")
            if found and min(found) < fb * (1 - 1e-6):
                rec["problems"].append(f"a placement ({min(found):.6g}s) beats the bound on the "
                                       f"free GPUs {fb:.6g}s (cost bug)")
    else:
        placed = [b for b in BASELINES if rec["results"].get(b, {}).get("ok")]
        if placed and "slurmtopo" in planners:
            rec["problems"].append(f"slurmtopo found no placement but {', '.join(placed)} did: "
                                   f"{mine.get('error')}")
    return rec


def _gap(mine: Dict[str, Any], lb: Dict[str, Any]) -> Dict[str, Any]:
    """Which group kind contributes most to slurmtopo's distance from the
    bound, and on which link classes the two put it."""
    best_kind, best = None, 0.0
    counted = set(mine.get("counted") or mine["kinds"])
    for kind, kc in mine["kinds"].items():
        if kind not in counted:
            continue
        d = kc["time_s"] - lb["kinds"].get(kind, {}).get("time_s", 0.0)
        if d > best:
            best_kind, best = kind, d
    if best_kind is None:
        return {"kind": None, "excess_s": 0.0}
    return {"kind": best_kind, "excess_s": best,
            "slurmtopo_link": mine["kinds"][best_kind]["slowest"],
            "lb_link": lb["kinds"].get(best_kind, {}).get("slowest")}


def slim(rec: Dict[str, Any]) -> Dict[str, Any]:
    """A record as stored in quality.json: the numbers the report uses, no
    per-kind detail (``python -m bench.quality --scenario ID`` recomputes
    everything from the id)."""
    out = {k: v for k, v in rec.items() if k not in ("results", "lower_bound", "placements")}
    out["job"] = {k: v for k, v in rec["job"].items() if k != "message_bytes"}
    out["results"] = {name: {k: r[k] for k in ("ok", "step_s", "plan_s", "hosts", "error") if k in r}
                      for name, r in rec.get("results", {}).items()}
    if rec.get("lower_bound"):
        out["lower_bound_s"] = rec["lower_bound"]["step_s"]
    return out


# --------------------------------------------------------------------------
# summaries


def pct(values: Sequence[float], q: float) -> float:
    """Percentile with linear interpolation (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * q / 100.0
    f = math.floor(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def stats(values: Sequence[float]) -> Dict[str, float]:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"n": 0}
    return {"n": len(vals), "median": pct(vals, 50), "p95": pct(vals, 95), "max": max(vals),
            "min": min(vals)}


#: the factors slurmtopo/lower-bound splits into (their product)
FACTORS = {
    "free": "busy GPUs rule out the bound (bound on the free GPUs / bound on the idle cluster)",
    "planner": "the rest (slurmtopo / bound on the free GPUs)",
}


def factors(r: Dict[str, Any]) -> Optional[Dict[str, float]]:
    """slurmtopo / lower bound = free x planner (see :data:`FACTORS`)."""
    x = r["ratios"]
    if "slurmtopo/lb" not in x or "slurmtopo/free" not in x:
        return None
    total, rest = x["slurmtopo/lb"], x["slurmtopo/free"]
    return {"free": total / rest if rest > 0 else 1.0, "planner": rest}


def cause_of(r: Dict[str, Any]) -> str:
    """The largest of the three factors of slurmtopo / lower bound."""
    f = factors(r)
    if f is None:
        return "unknown"
    return max(f, key=lambda k: f[k])


def summarize(records: Sequence[Dict[str, Any]], worst: int = 10) -> Dict[str, Any]:
    """Distributions per shape and busy level, overall, and the worst cases."""
    ratio_keys = ["slurmtopo/lb"] + [f"{b}/slurmtopo" for b in BASELINES]

    def block(recs) -> Dict[str, Any]:
        out: Dict[str, Any] = {"scenarios": len(recs)}
        for key in ratio_keys:
            out[key] = stats([r["ratios"].get(key) for r in recs if key in r["ratios"]])
        lbs = [r["ratios"]["slurmtopo/lb"] for r in recs if "slurmtopo/lb" in r["ratios"]]
        out["within_5pct_of_lb"] = (sum(1 for x in lbs if x <= 1.05 + EPS) / len(lbs)) if lbs else None
        js = [r["ratios"]["slurmtopo/free"] for r in recs if "slurmtopo/free" in r["ratios"]]
        out["slurmtopo/free"] = stats(js)
        out["within_5pct_of_free"] = (sum(1 for x in js if x <= 1.05 + EPS) / len(js)) if js else None
        for b in BASELINES:
            xs = [r["ratios"][f"{b}/slurmtopo"] for r in recs if f"{b}/slurmtopo" in r["ratios"]]
            out[f"{b}_better"] = sum(1 for x in xs if x < 1 - 1e-6)
        out["slurmtopo_failed"] = sum(1 for r in recs
                                      if not r["results"].get("slurmtopo", {}).get("ok"))
        return out

    by_cell: Dict[str, Any] = {}
    by_shape: Dict[str, Any] = {}
    by_busy: Dict[str, Any] = {}
    groups: Dict[tuple, List] = {}
    for r in records:
        groups.setdefault(("cell", r["shape"], r["busy_pct"]), []).append(r)
        groups.setdefault(("shape", r["shape"]), []).append(r)
        groups.setdefault(("busy", r["busy_pct"]), []).append(r)
    for key, recs in groups.items():
        if key[0] == "cell":
            by_cell[f"{key[1]}/{key[2]}"] = block(recs)
        elif key[0] == "shape":
            by_shape[key[1]] = block(recs)
        else:
            by_busy[str(key[1])] = block(recs)

    def brief(r) -> Dict[str, Any]:
        res = r["results"]
        return {"id": r["id"], "layout": r["layout"], "free_gpus": r["free_gpus"],
                "gpus": r["gpus"], "busy_pct": r["busy_pct"],
                "ratios": r["ratios"], "gap": r.get("gap"),
                "slurmtopo_s": res.get("slurmtopo", {}).get("step_s"),
                "lb_s": r.get("lower_bound", {}).get("step_s")}

    ok = [r for r in records if "slurmtopo/lb" in r["ratios"]]
    worst_lb = sorted(ok, key=lambda r: -r["ratios"]["slurmtopo/lb"])[:worst]
    worse_than = []
    for r in ok:
        for b in BASELINES:
            x = r["ratios"].get(f"{b}/slurmtopo")
            if x is not None and x < 1 - 1e-6:
                worse_than.append((x, b, r))
    worse_than.sort(key=lambda t: t[0])
    problems = [{"id": r["id"], "problems": r["problems"]} for r in records if r["problems"]]
    gap_kinds: Dict[str, int] = {}
    causes = {k: 0 for k in FACTORS}
    fac: Dict[str, List[float]] = {k: [] for k in FACTORS}
    idle_gap = []
    for r in ok:
        if r["ratios"]["slurmtopo/lb"] > 1.05 + EPS:
            if r.get("gap", {}).get("kind"):
                gap_kinds[r["gap"]["kind"]] = gap_kinds.get(r["gap"]["kind"], 0) + 1
            cause = cause_of(r)
            causes[cause] = causes.get(cause, 0) + 1
            f = factors(r)
            if f:
                for k, v in f.items():
                    fac[k].append(v)
            idle = r["ratios"].get("slurmtopo-idle/lb", r["ratios"]["slurmtopo/lb"]
                                   if r["busy_pct"] == 0 else None)
            if idle is not None and idle > 1.05 + EPS:
                idle_gap.append((idle, r))
    idle_gap.sort(key=lambda t: -t[0])
    return {
        "overall": block(records),
        "by_shape": by_shape,
        "by_busy": by_busy,
        "by_cell": by_cell,
        "worst_vs_lb": [brief(r) for r in worst_lb],
        "worse_than_baseline": [dict(brief(r), baseline=b, ratio=x)
                                for x, b, r in worse_than[:worst]],
        "gap_kinds_over_5pct": dict(sorted(gap_kinds.items(), key=lambda kv: -kv[1])),
        # scenarios > 5% from the bound: within 5% on the idle cluster (the
        # busy GPUs are the reason) or not even there
        "over_5pct_causes": causes,
        "over_5pct_factors": {k: stats(v) for k, v in fac.items()},
        # the same job is > 5% from the bound even on the idle cluster
        "worst_idle_gap": [dict(brief(r), idle_factor=x) for x, r in idle_gap[:worst]],
        "problems": problems,
    }


def run(specs: Iterable[ScenarioSpec], params=None, progress=None,
        time_budget_s: Optional[float] = None, default_messages: bool = False) -> Dict[str, Any]:
    """Run scenarios; returns {"records": [...], "summary": {...}}.

    ``progress(i, n, record)`` is called after each scenario. With a time
    budget, scenarios past it are skipped (and counted)."""
    specs = list(specs)
    records = []
    t0 = time.perf_counter()
    skipped = 0
    for i, spec in enumerate(specs):
        if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
            skipped = len(specs) - i
            break
        rec = run_scenario(spec, params, default_messages=default_messages)
        records.append(rec)
        if progress:
            progress(i + 1, len(specs), rec)
    summary = summarize(records)
    summary["skipped_for_time"] = skipped
    summary["wall_s"] = time.perf_counter() - t0
    return {"records": records, "summary": summary}


# --------------------------------------------------------------------------
# one scenario, in detail


def explain(scenario_id: str, dump: Optional[str] = None, default_messages: bool = False) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    rec = run_scenario(scenario_id, keep_placements=True, default_messages=default_messages)
    console.print(f"[bold]{rec['id']}[/]: {rec['gpus']} GPUs on {rec['nodes']} nodes, "
                  f"{rec['busy_pct']}% busy ({rec['free_gpus']} free); job {rec['layout']}, "
                  f"{rec['job']['model']}")
    console.print(f"model: {rec['job']['model_spec'] or 'the default'}; message bytes: "
                  f"{rec['job']['message_bytes']}")
    if "lower_bound" not in rec:
        console.print(rec["problems"])
        return 1
    names = [n for n in PLANNERS if n in rec["results"]]
    kinds = sorted(set(rec["lower_bound"]["kinds"]).union(
        *(rec["results"][n].get("kinds", {}).keys() for n in names)))
    t = Table(title="time per group kind (ms); slowest link of the slowest group")
    t.add_column("kind")
    t.add_column("lower bound", justify="right")
    for n in names:
        t.add_column(n, justify="right")
    for k in kinds:
        lbk = rec["lower_bound"]["kinds"].get(k, {})
        row = [k, _cell(lbk)]
        for n in names:
            r = rec["results"][n]
            row.append(_cell(r.get("kinds", {}).get(k, {})) if r["ok"] else "-")
        t.add_row(*row)
    t.add_row("[bold]step[/]", f"{rec['lower_bound']['step_s'] * 1e3:.3f}",
              *[(f"{rec['results'][n]['step_s'] * 1e3:.3f}" if rec["results"][n]["ok"]
                 else "failed") for n in names])
    console.print(t)
    for n in names:
        r = rec["results"][n]
        if not r["ok"]:
            console.print(f"{n}: {r['error']}")
    console.print({k: round(v, 4) for k, v in rec["ratios"].items()})
    for p in rec["problems"]:
        console.print(f"[red]problem:[/] {p}")
    pl = rec.get("placements", {}).get("slurmtopo")
    if pl is not None:
        hosts = ", ".join(f"{h}:{','.join(map(str, pl.gpus_on(h)))}" for h in pl.hosts[:16])
        more = f" ... (+{len(pl.hosts) - 16} hosts)" if len(pl.hosts) > 16 else ""
        console.print(f"slurmtopo hosts (host:GPUs in local-rank order): {hosts}{more}")
        for note in pl.notes:
            console.print(f"note: {note}")
    if dump:
        _dump(scenario_id, dump, console)
    return 0


def _cell(kc: Dict[str, Any]) -> str:
    if not kc:
        return ""
    s = f"{kc.get('time_s', 0.0) * 1e3:.3f}"
    if kc.get("slowest"):
        s += f" ({kc['slowest']})"
    return s


def _dump(scenario_id: str, directory: str, console) -> None:
    """Write the scenario's inventory, state and job so that it can be
    replayed with the slurmtopo CLI."""
    import json
    import os

    from slurmtopo.inventory.schema import dump_inventory

    sc = build(scenario_id)
    os.makedirs(directory, exist_ok=True)
    base = sc.id.replace(":", "_")
    inv_p = os.path.join(directory, f"{base}.inventory.yaml")
    st_p = os.path.join(directory, f"{base}.state.yaml")
    job_p = os.path.join(directory, f"{base}.job.json")
    with open(inv_p, "w") as fh:
        fh.write(dump_inventory(sc.inv))
    with open(st_p, "w") as fh:
        fh.write(dump_state(sc.state))
    with open(job_p, "w") as fh:
        json.dump(sc.job.as_dict(), fh, indent=1)
    j = sc.job
    console.print(f"wrote {inv_p}, {st_p}, {job_p}")
    console.print(f"replay: slurmtopo plan --inventory {inv_p} --state {st_p} "
                  f"--tp {j.tp} --cp {j.cp} --ep {j.ep} --pp {j.pp} --dp {j.dp}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True, action="append",
                    help="scenario id shape:nodes:busy%%:seed (repeatable)")
    ap.add_argument("--dump", metavar="DIR", help="also write inventory, state and job files")
    ap.add_argument("--default-messages", action="store_true",
                    help="price the cost model's default model's step (the sensitivity pass "
                         "of bench.run)")
    args = ap.parse_args(argv)
    rc = 0
    for sid in args.scenario:
        try:
            ScenarioSpec.parse(sid)
        except ValueError as exc:
            print(f"bench.quality: {exc}", file=sys.stderr)
            return 2
        rc |= explain(sid, args.dump, args.default_messages)
    return rc


if __name__ == "__main__":
    sys.exit(main())
