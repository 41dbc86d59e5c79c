"""The whole-step model against published training runs: fit, held-out
error, order among layouts, plots.

Each file in tests/fixtures/training_runs/ records published runs (tokens
per second per GPU, the whole job's tokens per second, a step's seconds,
or TFLOP/s per GPU with the FLOP convention of the publication: whichever
the publication printed) with their model, system and parallel layout
(``etp``: the expert tensor parallelism, 1 unless given), and cites its
source. ``fit-set.yaml`` names the runs the compute constants
(:class:`slurmtopo.cost.compute.ComputeFit`) are fitted on; every other run
is held out. For each run this module builds the system as an admin would
describe it (the node preset, NVL72 racks as NVLink domains, a leaf switch
a rack or scalable unit under one spine), places the job with the real
planner, prices its communication with the step function, composes the
step (:func:`slurmtopo.cost.whole.compose`) and compares tokens per second
per GPU:

    python -m bench.step_fit                    # the tables (fit and held out)
    python -m bench.step_fit --fit              # fit the constants again, print them
    python -m bench.step_fit --plots docs/step  # and the PNGs of docs/cost-model.md

tests/test_step_model.py asserts the headline numbers (docs/cost-model.md,
"The whole step").
"""
from __future__ import annotations

import argparse
import glob
import inspect
import math
import os
import sys
import tempfile
from dataclasses import dataclass, fields, replace
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "training_runs")
FIT_SET = os.path.join(FIXTURES, "fit-set.yaml")
#: what the issue asks: within 20% on at least 80%, at most 5% beyond 40%
WITHIN, FAR = 0.20, 0.40
#: the constants the fit moves, with their bounds: what is physically
#: plausible, so that the fit cannot trade one term for another beyond it (a
#: large GEMM reaches 50-85% of the peak; a GEMM call's fixed time at most
#: 100 us, a few launches and a wave's tail; the memory-bound
#: kernels 10-120 bytes a value; an overlapped collective costs at most half
#: of itself)
FIT_BOUNDS = {"gemm_efficiency": (0.5, 0.85), "fp8_factor": (0.5, 1.0),
              "mxfp8_factor": (0.5, 1.0), "fp4_factor": (0.5, 1.0),
              "gemm_latency_us": (0.0, 100.0),
              "elementwise_passes": (10.0, 120.0), "overlap_cost": (0.0, 0.5)}


@dataclass
class Run:
    """One published run, as its fixture records it."""

    id: str
    source: str
    system: str
    model_text: str
    gpus: int
    row: dict
    published: float  # tokens/s per GPU
    framework: str
    note: str = ""
    #: the GPU figures the publication states for its system (the
    #: inventory's ``cost: gpu_compute:`` entry: a power limit, HBM)
    gpu_compute: Optional[dict] = None
    #: the attention kernels the publication names (fused, flash2), when
    #: not its framework's own
    attention: Optional[str] = None


def load_runs(directory: str = FIXTURES) -> List[Run]:
    """Every run of every fixture, its published tokens/s per GPU computed
    from TFLOP/s where that is what was published."""
    from slurmtopo.cost.compute import model_flops_per_token
    out: List[Run] = []
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        if os.path.basename(path) == "fit-set.yaml":
            continue
        with open(path) as fh:
            doc = yaml.safe_load(fh)
        src = doc["source"]
        models = doc.get("models", {})
        for row in doc["runs"]:
            # what every run of the publication ran with, unless the row says
            row = {**doc.get("run_defaults", {}), **row}
            text = models.get(row["model"], row["model"])
            published = row.get("tokens_per_s_per_gpu")
            if published is None and "tokens_per_s" in row:  # the whole job's, as published
                published = row["tokens_per_s"] / row["gpus"]
            if published is None and "step_s" in row:  # a step's seconds, as published
                published = row["seq_len"] * row["global_batch"] / row["step_s"] / row["gpus"]
            if published is None:
                spec = _spec(text, row)
                per_token = model_flops_per_token(spec, src.get("flops_convention") != "full")
                published = row["tflops_per_gpu"] * 1e12 / per_token
            system = doc.get("systems", {}).get(row["system"], {})
            out.append(Run(row["id"], src["name"], row["system"], text, row["gpus"], row,
                           float(published), row.get("framework", src["framework"]),
                           row.get("note", ""), system.get("gpu_compute"),
                           row.get("attention", src.get("attention"))))
    ids = [r.id for r in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"duplicate run ids: {sorted(dup)}")
    return out


def fit_ids(path: str = FIT_SET) -> List[str]:
    with open(path) as fh:
        return list(yaml.safe_load(fh)["fit"])


#: a publication that runs an interleaved pipeline schedule without saying
#: how many virtual stages (``vp: interleaved``): two layers a virtual stage,
#: at most 4 of them, as Megatron's performance recipes mostly set it
INTERLEAVED_LAYERS, INTERLEAVED_MAX = 2, 4


def virtual_stages(row: dict, layers: int) -> int:
    """A row's virtual pipeline stages: as published, or, for ``vp:
    interleaved``, :data:`INTERLEAVED_LAYERS` layers each, at most
    :data:`INTERLEAVED_MAX`."""
    vp = row.get("vp", 1) or 1
    if vp != "interleaved":
        return int(vp)
    per_stage = math.ceil(layers / max(1, row.get("pp", 1)))
    return max(1, min(INTERLEAVED_MAX, per_stage // INTERLEAVED_LAYERS))


def _spec(text: str, row: dict):
    from slurmtopo.cost.model_spec import parse_model
    base = parse_model(text)
    extra = {"seq_len": row["seq_len"], "micro_batch": row["micro_batch"],
             "global_batch": row["global_batch"], "dtype": row["dtype"],
             "virtual_stages": virtual_stages(row, base.resolved().layers),
             "recompute": row.get("recompute", "none")}
    # the recipes' memory settings (Megatron-LM's recompute modules and
    # layers, CPU offloading, bf16 main gradients) and torch.compile where
    # the row has them
    for key in ("recompute_modules", "recompute_layers", "offload_layers", "grad_dtype",
                "compile"):
        if row.get(key):
            extra[key] = row[key]
    return parse_model(text + "," + ",".join(f"{k}={v}" for k, v in extra.items()))


#: the node preset, GPUs a node, nodes an NVLink domain (0: the node)
_SYSTEMS = {"h100": ("hgx-h100-8", 8, 0), "h200": ("hgx-h200-8", 8, 0),
            "h800": ("hgx-h100-8", 8, 0), "b200": ("dgx-b200", 8, 0),
            "b300": ("dgx-b300", 8, 0), "gb200": ("gb200-nvl72-tray", 4, 18),
            "gb300": ("gb300-nvl72-tray", 4, 18)}
_INVENTORIES: Dict[Tuple, object] = {}


def system_inventory(system: str, gpus: int, gpu_compute: Optional[dict] = None):
    """The cluster of a run: enough nodes of the system's preset (whole
    NVL72 racks), NVL72 racks as NVLink domains, a leaf switch a rack (GB) or 32 nodes (a DGX
    scalable unit), one spine above the leaves; H800 nodes with NVLink at
    400 GB/s (DeepSeek-V3's report); the GPU figures the publication states
    (a power limit, HBM) as the inventory's ``cost: gpu_compute:``."""
    from slurmtopo.inventory.schema import load_inventory
    preset, per, domain = _SYSTEMS[system]
    nodes = max(1, math.ceil(gpus / per))
    if domain:  # whole racks, as a job of that size gets them: the planner picks the trays
        nodes = math.ceil(nodes / domain) * domain
    key = (system, nodes, yaml.safe_dump(gpu_compute) if gpu_compute else "")
    if key in _INVENTORIES:
        return _INVENTORIES[key]
    leaf = domain or 32
    doc: dict = {"slurmtopo": "inventory", "version": 1, "name": f"{system}-{nodes}", "nodes": []}
    switches = []
    for r in range(math.ceil(nodes / leaf)):
        lo, hi = r * leaf + 1, min(nodes, (r + 1) * leaf)
        names = f"n{r:04d}-[{lo:05d}-{hi:05d}]" if hi > lo else f"n{r:04d}-{lo:05d}"
        entry = {"name": names, "type": preset}
        if domain:
            entry["nvlink_domain"] = {"cluster_uuid": f"00000000-0000-4000-8000-{r:012x}",
                                      "clique_id": 1}
        doc["nodes"].append(entry)
        switches.append({"name": f"leaf{r:04d}", "nodes": names})
    if len(switches) > 1:
        switches.append({"name": "spine", "switches": ",".join(s["name"] for s in switches)})
    doc["fabric"] = {"switches": switches}
    if system == "h800":
        doc["cost"] = {"nvlink_lane_gbps": {"h100": 11.1}}
    if gpu_compute:
        doc.setdefault("cost", {})["gpu_compute"] = gpu_compute
    with tempfile.TemporaryDirectory(prefix="slurmtopo-stepfit-") as d:
        path = os.path.join(d, "inventory.yaml")
        with open(path, "w") as fh:
            yaml.safe_dump(doc, fh, sort_keys=False)
        inv = load_inventory(path, write_cache=False)
    _INVENTORIES[key] = inv
    return inv


@dataclass
class Priced:
    """A run's layout, placement and communication: all the fit needs,
    computed once (the compute constants do not change them)."""

    run: Run
    spec: object
    dims: object
    style: str
    calls: tuple
    gpu: object
    shard: int = 0
    error: str = ""


def knobs_of(run: Run) -> Tuple[str, dict]:
    r = run.row
    tp, pp, cp, ep = r.get("tp", 1), r.get("pp", 1), r.get("cp", 1), r.get("ep", 1) or 1
    dp = run.gpus // (tp * pp * cp)
    if run.framework == "torchtitan":
        knobs = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dp_shard": dp if r.get("fsdp") else 1,
                 "dp_replicate": 1 if r.get("fsdp") else dp, "world": run.gpus}
        return "torchtitan", knobs
    knobs = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "world": run.gpus}
    if ep > 1:
        # the performance recipes' expert tensor parallelism (1 unless the row says)
        knobs["expert_tp"] = r.get("etp", 1)
    if r.get("fsdp"):
        knobs["use_megatron_fsdp"] = True
    else:
        knobs["use_distributed_optimizer"] = True
    return "megatron", knobs


def overlaps_of(run: Run, framework: str) -> dict:
    """The overlaps a run's framework made: Megatron's performance recipes
    run sequence parallelism and TP overlap with TP and overlap the
    gradient reduction and the parameter gather; EP's all-to-all overlaps
    only where the row says so (``ep_comm_overlap``: Megatron Bridge's
    recipes of that release, ``moe_a2a_overlap`` /
    ``overlap_moe_expert_parallel_comm``, off by default); a row may say
    otherwise for any of them."""
    r = run.row
    tp = r.get("tp", 1) > 1
    out = {"overlap_grad_reduce": True, "overlap_param_gather": True}
    if framework == "megatron":
        out.update(sequence_parallel=tp, tp_comm_overlap=tp)
    for k in ("tp_comm_overlap", "ep_comm_overlap", "sequence_parallel"):
        if k in r:
            out[k] = bool(r[k])
    return out


def price_run(run: Run) -> Priced:
    """Plan the run on its system and price its step with the step
    function (:func:`slurmtopo.cost.step.price_step`)."""
    from slurmtopo import api
    from slurmtopo.cost.compute import Dims
    from slurmtopo.cost.step import price_step
    from slurmtopo.cost.whole import CommCall

    spec = _spec(run.model_text, run.row)
    framework, knobs = knobs_of(run)
    r = run.row
    dims = Dims(tp=r.get("tp", 1), cp=r.get("cp", 1), pp=r.get("pp", 1), ep=r.get("ep", 1) or 1,
                etp=r.get("etp", 1) if (r.get("ep", 1) or 1) > 1 else 1, dp=run.gpus // (r.get("tp", 1) * r.get("pp", 1) * r.get("cp", 1)),
                vp=spec.virtual_stages)
    inv = system_inventory(run.system, run.gpus, run.gpu_compute)
    try:
        req = api.job_request(framework, model=spec, overlaps=overlaps_of(run, framework),
                              **knobs)
        placement = api.plan_job(inv, None, req)
    except Exception as exc:  # noqa: BLE001 - reported per run
        return Priced(run, spec, dims, "", (), None, 0, f"not placed: {exc}")
    step = price_step(inv, placement, req)
    w = req.workload
    calls = tuple(CommCall(c.call.what, c.call.kind, c.seconds, c.call.overlaps_with,
                           c.call.phase, c.call.collective) for c in step.calls)
    return Priced(run, spec, dims, w.style, calls, _gpu(inv, placement), w.shard)


def _gpu(inv, placement):
    from slurmtopo.cost.params import cost_params
    from slurmtopo.cost.compute import placement_gpu
    return placement_gpu(inv, placement, cost_params(inv).gpu_compute)[0]


def predict(p: Priced, fit) -> Optional[float]:
    """Tokens/s per GPU the model predicts for a priced run."""
    from slurmtopo.cost.whole import compose
    if p.error:
        return None
    step = compose(p.spec, p.dims, p.gpu, p.calls, p.style, p.run.framework, fit, p.shard,
                   attention=p.run.attention)
    return step.tokens_per_s_per_gpu


def _log_errors(priced: Sequence[Priced], fit) -> List[float]:
    out = []
    for p in priced:
        y = predict(p, fit)
        if y:
            out.append(math.log(y / p.run.published))
    return out


def nelder_mead(f, x0: Sequence[float], step: Sequence[float], iters: int = 600,
                tol: float = 1e-7) -> Tuple[List[float], float]:
    """A plain Nelder-Mead minimiser (no dependency for a bench)."""
    n = len(x0)
    pts = [list(x0)] + [[x0[j] + (step[j] if j == i else 0.0) for j in range(n)]
                        for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol:
            break
        c = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        xr = [c[j] + (c[j] - pts[-1][j]) for j in range(n)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [c[j] + 2 * (c[j] - pts[-1][j]) for j in range(n)]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [c[j] + 0.5 * (pts[-1][j] - c[j]) for j in range(n)]
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    pts[i] = [pts[0][j] + 0.5 * (pts[i][j] - pts[0][j]) for j in range(n)]
                    vals[i] = f(pts[i])
    best = min(range(n + 1), key=lambda i: vals[i])
    return pts[best], vals[best]


#: the GPUs whose sustained clock is fitted (relative to H100's, fixed at 1)
SUSTAINED = ("B200", "B300", "GB200", "GB300")


def fit_constants(priced: Sequence[Priced], start=None):
    """The ComputeFit that minimises the mean squared log error on ``priced``."""
    from slurmtopo.cost.compute import FIT
    base = start or FIT
    names = list(FIT_BOUNDS)
    clocks = dict(base.sustained)

    def make(x):
        fixed = {k: min(max(v, FIT_BOUNDS[k][0]), FIT_BOUNDS[k][1])
                 for k, v in zip(names, x)}
        sus = tuple((g, min(max(v, 0.8), 1.2)) for g, v in zip(SUSTAINED, x[len(names):]))
        return replace(base, sustained=sus, **fixed)

    def loss(x):
        errs = _log_errors(priced, make(x))
        return sum(e * e for e in errs) / max(1, len(errs))

    x0 = [getattr(base, k) for k in names] + [clocks.get(g, 1.0) for g in SUSTAINED]
    bounds = [FIT_BOUNDS[k] for k in names] + [(0.8, 1.2)] * len(SUSTAINED)
    best, val = nelder_mead(loss, x0, [max(0.05, abs(v) * 0.3) for v in x0])
    for _ in range(2):  # restart from the best: Nelder-Mead stalls
        best, val = nelder_mead(loss, best, [max(0.02, abs(v) * 0.1) for v in best])
    for _ in range(3):  # then each constant alone, inside its bounds
        for i, (lo, hi) in enumerate(bounds):
            best[i] = golden(lambda v: loss(best[:i] + [v] + best[i + 1:]), lo, hi)
        val = loss(best)
    return make(best), math.sqrt(val)


def golden(f, lo: float, hi: float, iters: int = 30) -> float:
    """The minimum of ``f`` on [lo, hi] by golden-section search."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


@dataclass
class Row:
    run: Run
    predicted: Optional[float]
    fitted: bool
    error: str = ""

    @property
    def ratio(self) -> Optional[float]:
        return self.predicted / self.run.published if self.predicted else None


def evaluate(priced: Sequence[Priced], fit, fitted: Sequence[str]) -> List[Row]:
    fs = set(fitted)
    return [Row(p.run, predict(p, fit), p.run.id in fs, p.error) for p in priced]


def summary(rows: Sequence[Row]) -> Dict[str, float]:
    rs = [r.ratio for r in rows if r.ratio]
    if not rs:
        return {"n": 0}
    errs = sorted(abs(x - 1) for x in rs)
    return {"n": len(rs), "within_20": sum(e <= WITHIN for e in errs) / len(errs),
            "beyond_40": sum(e > FAR for e in errs) / len(errs),
            "median": errs[len(errs) // 2], "worst": errs[-1]}


def _groups(rows: Sequence[Row], by_dtype: bool = True) -> List[List[Row]]:
    """Runs of one model on one system in one publication (release, GPU
    count and, with ``by_dtype``, precision alike), two or more of them."""
    groups: Dict[tuple, List[Row]] = {}
    for r in rows:
        if not r.predicted:
            continue
        row = r.run.row
        key = (r.run.source, row.get("release", ""), r.run.system, r.run.model_text,
               row["dtype"] if by_dtype else "", r.run.gpus, row.get("seq_len"))
        groups.setdefault(key, []).append(r)
    return [g for g in groups.values() if len(g) > 1]


def first_choices(rows: Sequence[Row], by_dtype: bool = False) -> Tuple[int, int, List[str]]:
    """Of each group of published layouts (:func:`_groups`), is the one the
    model ranks first within 10% of the best measured? (within, groups,
    the misses)"""
    good = total = 0
    bad: List[str] = []
    for g in _groups(rows, by_dtype):
        pick = max(g, key=lambda r: r.predicted)
        best = max(r.run.published for r in g)
        total += 1
        if pick.run.published >= 0.9 * best:
            good += 1
        else:
            bad.append(f"{pick.run.id} ({pick.run.published:.0f}) vs best {best:.0f}")
    return good, total, bad


def order_agreement(rows: Sequence[Row], by_dtype: bool = True) -> Tuple[int, int, List[str]]:
    """Pairs of layouts of one model on one system in one publication
    (same release, GPU count and, with ``by_dtype``, precision) whose
    measured order the model predicts: (agreeing, pairs, the
    disagreements). Pairs measured within 3% of each other are ties and
    not counted."""
    groups = {i: g for i, g in enumerate(_groups(rows, by_dtype))}
    good = total = 0
    bad: List[str] = []
    for members in groups.values():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if abs(a.run.published / b.run.published - 1) < 0.03:
                    continue
                total += 1
                if (a.run.published > b.run.published) == (a.predicted > b.predicted):
                    good += 1
                else:
                    bad.append(f"{a.run.id} vs {b.run.id}")
    return good, total, bad


def table(rows: Sequence[Row]) -> str:
    """Per source and fit/held out: runs, within 20%, beyond 40%, median."""
    out = ["| source | set | runs | within 20% | beyond 40% | median error | worst |",
           "|---|---|--:|--:|--:|--:|--:|"]
    sources = sorted({r.run.source for r in rows})
    for src in sources + ["all"]:
        for fitted in (True, False):
            rs = [r for r in rows if (src == "all" or r.run.source == src) and r.fitted == fitted]
            s = summary(rs)
            if not s["n"]:
                continue
            out.append(f"| {src} | {'fit' if fitted else 'held out'} | {s['n']} | "
                       f"{s['within_20']:.0%} | {s['beyond_40']:.0%} | {s['median']:.0%} | "
                       f"{s['worst']:.0%} |")
    return "\n".join(out)


def release_table(rows: Sequence[Row]) -> str:
    """The held-out runs of the sources published release by release, per
    release (a later release runs the same layouts on newer software)."""
    out = ["| source | release | held-out runs | within 20% | beyond 40% | median error |",
           "|---|---|--:|--:|--:|--:|"]
    keys = sorted({(r.run.source, r.run.row["release"]) for r in rows
                   if r.run.row.get("release")})
    for src, rel in keys:
        s = summary([r for r in rows if r.run.source == src and r.run.row.get("release") == rel
                     and not r.fitted])
        if s["n"]:
            out.append(f"| {src} | {rel} | {s['n']} | {s['within_20']:.0%} | "
                       f"{s['beyond_40']:.0%} | {s['median']:.0%} |")
    return "\n".join(out)


def run_table(rows: Sequence[Row]) -> str:
    out = ["| run | set | published tok/s/GPU | model | model / published |", "|---|---|--:|--:|--:|"]
    for r in rows:
        pred = f"{r.predicted:.0f}" if r.predicted else r.error or "-"
        ratio = f"{r.ratio:.2f}" if r.ratio else "-"
        out.append(f"| {r.run.id} | {'fit' if r.fitted else 'held out'} | "
                   f"{r.run.published:.0f} | {pred} | {ratio} |")
    return "\n".join(out)


def plots(rows: Sequence[Row], directory: str) -> List[str]:
    """Predicted against published tokens/s per GPU (log-log), one marker
    per source, fit runs filled; and the error per source."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(directory, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    markers = "osD^v<>ph*"
    sources = sorted({r.run.source for r in rows})
    for i, src in enumerate(sources):
        for fitted in (True, False):
            rs = [r for r in rows if r.run.source == src and r.fitted == fitted and r.predicted]
            if not rs:
                continue
            ax.scatter([r.run.published for r in rs], [r.predicted for r in rs],
                       marker=markers[i % len(markers)], s=28,
                       facecolors=f"C{i}" if fitted else "none", edgecolors=f"C{i}",
                       label=f"{src} ({'fit' if fitted else 'held out'})")
    lo = min(min(r.run.published, r.predicted) for r in rows if r.predicted) * 0.8
    hi = max(max(r.run.published, r.predicted) for r in rows if r.predicted) * 1.25
    xs = [lo, hi]
    ax.plot(xs, xs, "k-", lw=0.8)
    for f in (0.8, 1.2):
        ax.plot(xs, [x * f for x in xs], "k:", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("published tokens/s per GPU")
    ax.set_ylabel("model tokens/s per GPU")
    ax.set_title("Whole-step model against published training runs (dotted: +-20%)")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path = os.path.join(directory, "step-fit.png")
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    paths.append(path)
    data, labels = [], []
    for src in sources:
        for fitted in (True, False):
            rs = [r.ratio - 1 for r in rows if r.run.source == src and r.fitted == fitted
                  and r.ratio]
            if rs:
                data.append([100 * x for x in rs])
                labels.append(f"{src} ({'fit' if fitted else 'held out'}, {len(rs)})")
    # one source a row, top to bottom: the names stay readable however many
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.32 * len(data)))
    # horizontal boxes: ``orientation`` from Matplotlib 3.10 (``vert``,
    # deprecated there, before)
    horizontal = ({"orientation": "horizontal"}
                  if "orientation" in inspect.signature(ax.boxplot).parameters
                  else {"vert": False})
    ax.boxplot(data[::-1], **horizontal)
    ax.set_yticks(range(1, len(labels) + 1), labels[::-1], fontsize=7)
    ax.axvline(0, color="k", lw=0.8)
    for x in (-20, 20):
        ax.axvline(x, color="k", lw=0.6, ls=":")
    ax.set_xlabel("model / published - 1 (%)")
    ax.set_title("Error per source")
    fig.tight_layout()
    path = os.path.join(directory, "step-error.png")
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    paths.append(path)
    return paths


def price_all(runs: Sequence[Run]) -> List[Priced]:
    return [price_run(r) for r in runs]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", action="store_true", help="fit the constants again and print them")
    ap.add_argument("--plots", metavar="DIR", help="write the PNGs into DIR")
    ap.add_argument("--runs", action="store_true", help="print the table of every run")
    args = ap.parse_args(argv)
    from slurmtopo.cost.compute import FIT
    runs = load_runs()
    fitted = fit_ids()
    missing = sorted(set(fitted) - {r.id for r in runs})
    if missing:
        print(f"fit-set.yaml names unknown runs: {missing}", file=sys.stderr)
        return 2
    priced = price_all(runs)
    fit = FIT
    if args.fit:
        fs = set(fitted)
        fit, rms = fit_constants([p for p in priced if p.run.id in fs])
        print("fitted constants (rms log error %.3f):" % rms)
        for f in fields(fit):
            v = getattr(fit, f.name)
            if isinstance(v, tuple):
                v = "(" + ", ".join(f"({k!r}, {x:.4g})" for k, x in v) + ")"
            else:
                v = f"{v:.4g}"
            print(f"    {f.name}: {'Tuple[Tuple[str, float], ...]' if f.name == 'sustained' else 'float'} = {v}")
    rows = evaluate(priced, fit, fitted)
    print(table(rows))
    print()
    print(release_table(rows))
    for by_dtype in (True, False):
        good, total, bad = order_agreement(rows, by_dtype)
        what = "precision alike" if by_dtype else "any precision"
        print(f"\norder of layouts (one model, system, publication, {what}): {good} of {total} "
              "pairs")
        for b in bad:
            print(f"    wrong: {b}")
    good, total, bad = first_choices(rows)
    print(f"\nthe model's first choice among the published layouts within 10% of the best "
          f"measured: {good} of {total} groups")
    for b in bad:
        print(f"    miss: {b}")
    if args.runs:
        print()
        print(run_table(rows))
    if args.plots:
        for p in plots(rows, args.plots):
            print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
