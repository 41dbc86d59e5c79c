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

A benchmark adds its own fixed cost to every call (one thread launching
on 8 GPUs with ``-g 8``, Python and a barrier around each all_reduce),
which NCCL's time does not contain and no inventory can know. The
comparison takes it from each curve's own points below
:data:`CHECKED_FROM` bytes: the smallest gap there between the measured
time and the model's (never negative) is added to every model point. From
:data:`CHECKED_FROM` up, where bandwidth, protocols and algorithms decide,
the points are compared as they are.
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
#: points from this size up are checked (and below it give the fixed cost)
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
        c = load_curve(path)
        out[c.name] = c
    return out


def inventory_of(curve: Curve):
    """The curve's system loaded from its inventory text, through the same
    loader (and cost-block validation) every command uses."""
    from slurmtopo.inventory import load_inventory
    with tempfile.TemporaryDirectory(prefix="slurmtopo-calibration-") as d:
        path = os.path.join(d, curve.name + ".yaml")
        with open(path, "w") as fh:
            yaml.safe_dump(curve.inventory, fh, sort_keys=False)
        return load_inventory(path)


def model_times(curve: Curve, sizes: Sequence[int], inv=None) -> List[float]:
    """Seconds the cost model gives one collective of each size on
    ``curve.nodes`` nodes of its inventory, ranks in node order."""
    from slurmtopo.cost import evaluate
    from slurmtopo.groups import Layout
    from slurmtopo.placement.common import build_placement
    from slurmtopo.request import JobRequest
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
    for m in sizes:
        req = JobRequest(layout, message_bytes={kind: m})
        pl = build_placement(inv, req, assign)
        out.append(evaluate(inv, pl, req, warn=False).kinds[kind].time_s)
    return out


@dataclass
class Comparison:
    """The model against one curve: every published point, model busbw
    with the benchmark's fixed cost added, and the fixed cost itself."""

    curve: Curve
    fixed_us: float
    #: (bytes, published busbw, model busbw, model / published)
    rows: List[Tuple[int, float, float, float]] = field(default_factory=list)

    @property
    def checked(self) -> List[Tuple[int, float, float, float]]:
        return [r for r in self.rows if r[0] >= CHECKED_FROM]

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
    gaps = []
    for (m, bb, t), tm in zip(curve.points, model):
        meas = curve.time_us(m, bb, t)
        if 0 < m < CHECKED_FROM and meas is not None:
            gaps.append(meas - tm * 1e6)
    fixed = max(0.0, min(gaps)) if gaps else 0.0
    cmp = Comparison(curve, fixed)
    for (m, bb, _), tm in zip(curve.points, model):
        mb = curve.factor * m / ((tm * 1e6 + fixed) * 1e3)
        cmp.rows.append((m, bb, mb, mb / bb if bb > 0 else math.inf))
    return cmp


def slowdown(one: Comparison, many: Comparison, m: int = SLOWDOWN_AT) -> Tuple[float, float]:
    """(published, model) busbw of ``one`` over busbw of ``many`` at ``m``."""
    p1, m1 = one.busbw_at(m)
    pk, mk = many.busbw_at(m)
    return p1 / pk, m1 / mk


def compare_all(directory: str = FIXTURES) -> Dict[str, Comparison]:
    return {name: compare(c) for name, c in curves(directory).items()}


# --------------------------------------------------------------------------
# report


def _fmt_size(m: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if m >= 1 << k and m % (1 << k) == 0:
            return f"{m >> k} {unit}"
    return f"{m} B"


def table(cmps: Dict[str, Comparison]) -> str:
    """Markdown: per curve the worst point from 1 MiB up, and the slowdowns."""
    lines = ["| curve | collective | ranks | asserted | fixed cost (us) | worst point | "
             "published busbw | model busbw | model / published |",
             "|---|---|--:|---|--:|--:|--:|--:|--:|"]
    for name, c in cmps.items():
        m, bb, mb, r = c.worst
        held = ", held out" if c.curve.source.get("held_out") else ""
        lines.append(f"| {name} | {c.curve.collective} | {c.curve.ranks} | "
                     f"{'yes' if c.curve.asserted else 'no'}{held} | {c.fixed_us:.1f} | "
                     f"{_fmt_size(m)} | {bb:.2f} | {mb:.2f} | {r:.3f} |")
    lines += ["", "| slowdown (busbw of the smaller run / busbw of the larger) at 1 GiB | "
              "published | model | model / published |", "|---|--:|--:|--:|"]
    for name, c in cmps.items():
        if c.curve.compare_to and c.curve.compare_to in cmps:
            pub, mod = slowdown(cmps[c.curve.compare_to], c)
            lines.append(f"| {c.curve.compare_to} vs {name} | {pub:.3f} | {mod:.3f} | "
                         f"{mod / pub:.3f} |")
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
    ax.plot(xs, [r[2] for r in rows], "s--", color="#d62728",
            label=f"model (+ {cmp.fixed_us:.0f} us fixed cost)")
    ax.fill_between([x for x in xs if x >= CHECKED_FROM],
                    [r[1] / TOLERANCE for r in rows if r[0] >= CHECKED_FROM],
                    [r[1] * TOLERANCE for r in rows if r[0] >= CHECKED_FROM],
                    color="#1f77b4", alpha=0.12, label="±25% (checked from 1 MiB)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    c = cmp.curve
    note = "" if c.asserted else " (reported, not asserted)"
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
