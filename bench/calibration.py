"""The cost model against published collective measurements.

Each file in tests/fixtures/calibration/ is one published busbw curve
(all_reduce_perf, all_gather_perf, alltoall_perf or a PyTorch loop around NCCL) with its
source, NCCL version and hardware, and the system described as an admin
would describe it in an inventory. This module prices every published
size with :func:`slurmtopo.cost.evaluate` on that inventory and compares:

    python -m bench.calibration                 # the table of errors
    python -m bench.calibration --plots docs/calibration   # and one PNG per curve

tests/test_cost_calibration.py asserts the numbers (docs/cost-model.md,
"Calibration").

The model's time is compared as it is: it carries every collective's
fixed cost (``launch_us``, what a training framework's call and the
benchmarks' loops add to NCCL's own latency), and nothing is taken from
the curve itself. From :data:`CHECKED_FROM` bytes up every point counts.

The curves the fitted constants were chosen on are declared in
``fit-set.yaml`` beside the fixtures (:func:`fit_set`); every other curve
is held out, and the report gives both.
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "calibration")
#: the file naming the curves the fitted constants were chosen on
FIT_SET = "fit-set.yaml"
#: points from this size up are checked
CHECKED_FROM = 1 << 20
#: the size at which a curve's cross-node slowdown is compared
SLOWDOWN_AT = 1 << 30
#: what the calibration suite allows: model / measured busbw in [1/1.25, 1.25]
TOLERANCE = 1.25

_KINDS = {"all-reduce": "dp", "all-gather": "cp", "all-to-all": "ep"}


@dataclass
class Curve:
    """One published curve, as its fixture file records it."""

    name: str
    path: str
    collective: str
    nodes: int
    gpus_per_node: int
    source: Dict[str, str]
    hardware: str
    nic: str
    inventory: dict
    #: (bytes, busbw GB/s, time in us or None) as published
    points: List[Tuple[int, float, Optional[float]]]
    compare_to: Optional[str] = None
    #: False: reported in docs/cost-model.md, not asserted (``why`` says why)
    asserted: bool = True
    why: str = ""

    @property
    def nccl_version(self):
        """The NCCL release the curve names, as the cost model reads one
        (:func:`slurmtopo.job.workload.parse_nccl_version`); None when it is not
        stated (the model then prices its newest)."""
        from slurmtopo.errors import LayoutError
        from slurmtopo.job.workload import parse_nccl_version
        text = str(self.source.get("nccl", "")).split(" ", 1)[0]
        try:
            return parse_nccl_version(text)
        except LayoutError:
            return None

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def factor(self) -> float:
        """busbw / algbw (nccl-tests' PERFORMANCE.md)."""
        n = self.ranks
        # all-gather's M is the gathered size, all-to-all's what a rank sends
        return 2 * (n - 1) / n if self.collective == "all-reduce" else (n - 1) / n

    def time_us(self, m: int, busbw: float, t_us: Optional[float]) -> Optional[float]:
        """Measured microseconds of a point (its own column when published)."""
        if t_us is not None:
            return t_us
        if busbw <= 0:
            return None
        return self.factor * m / (busbw * 1e3)


def _size(value) -> int:
    from slurmtopo.cost import parse_bytes
    return parse_bytes(value)


def load_curve(path: str) -> Curve:
    with open(path) as fh:
        doc = yaml.safe_load(fh)
    cols = doc["columns"]
    points = []
    for row in doc["points"]:
        r = dict(zip(cols, row))
        m = _size(r["size"] if "size" in r else r["bytes"])
        t = r.get("time_us")
        points.append((m, float(r["busbw_gbps"]), float(t) if t is not None else None))
    return Curve(name=doc["name"], path=path, collective=doc["collective"],
                 nodes=int(doc["nodes"]), gpus_per_node=int(doc["gpus_per_node"]),
                 source=doc["source"], hardware=doc["hardware"], nic=doc["nic"],
                 inventory=doc["inventory"], points=points, compare_to=doc.get("compare_to"),
                 asserted=bool(doc.get("asserted", True)), why=str(doc.get("why", "")))


def curves(directory: str = FIXTURES) -> Dict[str, Curve]:
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        if os.path.basename(path) == FIT_SET:
            continue
        c = load_curve(path)
        out[c.name] = c
    return out


def fit_set(directory: str = FIXTURES) -> Dict[str, List[str]]:
    """The declared fit set: curve name -> the fitted constants it set."""
    with open(os.path.join(directory, FIT_SET)) as fh:
        doc = yaml.safe_load(fh)
    return {e["curve"]: list(e["sets"]) for e in doc["fit"]}


def inventory_of(curve: Curve):
    """The curve's system loaded from its inventory text, through the same
    loader (and cost-block validation) every command uses."""
    from slurmtopo.inventory.schema import load_inventory
    with tempfile.TemporaryDirectory(prefix="slurmtopo-calibration-") as d:
        path = os.path.join(d, curve.name + ".yaml")
        with open(path, "w") as fh:
            yaml.safe_dump(curve.inventory, fh, sort_keys=False)
        return load_inventory(path)


def model_times(curve: Curve, sizes: Sequence[int], inv=None) -> List[float]:
    """Seconds the cost model gives one collective of each size on
    ``curve.nodes`` nodes of its inventory, ranks in node order."""
    from slurmtopo.cost import evaluate
    from slurmtopo.job.groups import Layout
    from slurmtopo.job.request import JobRequest
    from slurmtopo.job.workload import Workload
    from slurmtopo.placement.common import build_placement
    inv = inv if inv is not None else inventory_of(curve)
    hosts = [n.name for n in inv][:curve.nodes]
    if len(hosts) < curve.nodes:
        raise ValueError(f"{curve.path}: the inventory has {len(hosts)} nodes, "
                         f"the curve {curve.nodes}")
    kind = _KINDS[curve.collective]
    n = curve.ranks
    layout = {"dp": Layout(dp=n), "cp": Layout(cp=n), "ep": Layout(dp=n, ep=n)}[kind]
    assign = [(h, g) for h in hosts for g in range(curve.gpus_per_node)]
    out = []
    # the curve's NCCL release, as a job names its own (--nccl-version)
    work = Workload(nccl_version=curve.nccl_version)
    for m in sizes:
        req = JobRequest(layout, message_bytes={kind: m}, workload=work)
        pl = build_placement(inv, req, assign)
        out.append(evaluate(inv, pl, req, warn=False).kinds[kind].time_s)
    return out


@dataclass
class Comparison:
    """The model against one curve: every published point and the model's
    busbw there."""

    curve: Curve
    #: (bytes, published busbw, model busbw, model / published)
    rows: List[Tuple[int, float, float, float]] = field(default_factory=list)

    @property
    def checked(self) -> List[Tuple[int, float, float, float]]:
        return [r for r in self.rows if r[0] >= CHECKED_FROM]

    @property
    def within(self) -> int:
        """Checked points within the tolerance."""
        return sum(1 for r in self.checked if 1 / TOLERANCE <= r[3] <= TOLERANCE)

    @property
    def worst(self) -> Tuple[int, float, float, float]:
        return max(self.checked, key=lambda r: abs(math.log(r[3])))

    def busbw_at(self, m: int) -> Tuple[float, float]:
        for r in self.rows:
            if r[0] == m:
                return r[1], r[2]
        raise KeyError(m)


def compare(curve: Curve, inv=None) -> Comparison:
    sizes = [m for m, _, _ in curve.points]
    model = model_times(curve, sizes, inv)
    cmp = Comparison(curve)
    for (m, bb, _), tm in zip(curve.points, model):
        mb = curve.factor * m / (tm * 1e9)
        cmp.rows.append((m, bb, mb, mb / bb if bb > 0 else math.inf))
    return cmp


def slowdown(one: Comparison, many: Comparison, m: int = SLOWDOWN_AT) -> Tuple[float, float]:
    """(published, model) busbw of ``one`` over busbw of ``many`` at ``m``."""
    p1, m1 = one.busbw_at(m)
    pk, mk = many.busbw_at(m)
    return p1 / pk, m1 / mk


def slowdowns(one: Comparison, many: Comparison) -> List[Tuple[int, float, float]]:
    """(bytes, published, model) slowdown at every checked size both have."""
    a = {r[0]: r for r in one.checked}
    out = []
    for m, pb, mb, _ in many.checked:
        if m in a and pb > 0 and mb > 0:
            out.append((m, a[m][1] / pb, a[m][2] / mb))
    return out


def compare_all(directory: str = FIXTURES) -> Dict[str, Comparison]:
    return {name: compare(c) for name, c in curves(directory).items()}


# --------------------------------------------------------------------------
# report


def _fmt_size(m: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if m >= 1 << k and m % (1 << k) == 0:
            return f"{m >> k} {unit}"
    return f"{m} B"


def table(cmps: Dict[str, Comparison], fit: Optional[Sequence[str]] = None) -> str:
    """Markdown: per curve (fit set first, then held out) the points from
    1 MiB up within 25%, the range and the worst point; per pair of runs
    of one cluster the slowdown at every size both have."""
    fit = list(fit_set()) if fit is None else list(fit)
    lines = ["| curve | set | collective | ranks | within 25% from 1 MiB | model / published "
             "| worst point | published busbw | model busbw | asserted |",
             "|---|---|---|--:|--:|--:|--:|--:|--:|---|"]
    totals = {"fit": [0, 0], "held out": [0, 0]}
    order = [n for n in cmps if n in fit] + [n for n in cmps if n not in fit]
    for name in order:
        c = cmps[name]
        which = "fit" if name in fit else "held out"
        m, bb, mb, r = c.worst
        rs = [x[3] for x in c.checked]
        totals[which][0] += c.within
        totals[which][1] += len(rs)
        lines.append(f"| {name} | {which} | {c.curve.collective} | {c.curve.ranks} | "
                     f"{c.within}/{len(rs)} | {min(rs):.2f}-{max(rs):.2f} | {_fmt_size(m)} | "
                     f"{bb:.2f} | {mb:.2f} | {'yes' if c.curve.asserted else 'no'} |")
    for which, (k, n) in totals.items():
        lines.append(f"| **{which}, all curves** | | | | **{k}/{n}** | | | | | |")
    lines += ["", "| slowdown (busbw of the smaller run / busbw of the larger) | sizes within "
              "25% | model / published | at 1 GiB: published | model |", "|---|--:|--:|--:|--:|"]
    for name, c in cmps.items():
        if c.curve.compare_to and c.curve.compare_to in cmps:
            sd = slowdowns(cmps[c.curve.compare_to], c)
            rs = [mo / pu for _, pu, mo in sd]
            ok = sum(1 for r in rs if 1 / TOLERANCE <= r <= TOLERANCE)
            at = {m: (pu, mo) for m, pu, mo in sd}.get(SLOWDOWN_AT)
            at_text = f"{at[0]:.3f} | {at[1]:.3f}" if at else "- | -"
            lines.append(f"| {c.curve.compare_to} vs {name} | {ok}/{len(rs)} | "
                         f"{min(rs):.2f}-{max(rs):.2f} | {at_text} |")
    return "\n".join(lines) + "\n"


def plot(cmp: Comparison, path: str) -> None:
    """busbw against size, published and modelled, on log-log axes."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "slurmtopo"
    import matplotlib.pyplot as plt
    rows = [r for r in cmp.rows if r[1] > 0]
    xs = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    ax.plot(xs, [r[1] for r in rows], "o-", color="#1f77b4", label="published")
    ax.plot(xs, [r[2] for r in rows], "s--", color="#d62728", label="model")
    ax.fill_between([x for x in xs if x >= CHECKED_FROM],
                    [r[1] / TOLERANCE for r in rows if r[0] >= CHECKED_FROM],
                    [r[1] * TOLERANCE for r in rows if r[0] >= CHECKED_FROM],
                    color="#1f77b4", alpha=0.12, label="±25% (checked from 1 MiB)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    c = cmp.curve
    note = (" (fit)" if c.name in fit_set(os.path.dirname(c.path)) else " (held out)")
    note += "" if c.asserted else ", not asserted"
    ax.set_title(f"{c.name}: {c.collective}, {c.nodes} x {c.gpus_per_node} GPUs{note}",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plots", metavar="DIR",
                    help="write calibration-<curve>.png for every curve into DIR")
    ap.add_argument("--fixtures", default=FIXTURES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cmps = compare_all(args.fixtures)
    sys.stdout.write(table(cmps))
    if args.plots:
        os.makedirs(args.plots, exist_ok=True)
        for name, c in cmps.items():
            plot(c, os.path.join(args.plots, f"calibration-{name}.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
