"""The step model's GEMM pricing against published GEMM micro-benchmarks.

Each file in tests/fixtures/gemm/ is one published table of cuBLASLt GEMM
throughput (shapes m x n x k, TFLOP/s) on one GPU in one dtype, with its
source. None of them was used to fit a constant: the compute constants
(:class:`slurmtopo.cost.compute.ComputeFit`) are fitted on training runs
(bench/step_fit.py), so these tables are a held-out check of what the
step model assumes a GEMM reaches:

    python -m bench.gemm_check          # the table

Two model figures a shape: as a step prices one GEMM call
(:func:`slurmtopo.cost.compute.gemm_seconds`, its fixed time a call
included: what a training framework's call adds, the casts and scales of
its operands, its launch) and without that fixed time (the
throughput alone, what a benchmark loop of one shape measures).
tests/test_gemm_check.py asserts the large shapes (every dimension
:data:`LARGE` or more) in fp8 within :data:`TOLERANCE`; the rest is
reported in docs/cost-model.md with the reason.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

from slurmtopo.cost.compute import FIT, gemm_seconds, gpu_figures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "gemm")
#: a shape is large when its three dimensions are at least this
LARGE = 6144
#: model / measured allowed for large fp8 GEMMs
TOLERANCE = 1.20


@dataclass(frozen=True)
class Table:
    """One published table: the GPU, the dtype, (m, n, k, TFLOP/s) rows."""

    name: str
    path: str
    gpu: str
    dtype: str
    source: Dict[str, str]
    hardware: str
    points: Tuple[Tuple[int, int, int, float], ...]


def load_table(path: str) -> Table:
    with open(path) as fh:
        doc = yaml.safe_load(fh)
    if doc.get("columns") != ["m", "n", "k", "tflops"]:
        raise ValueError(f"{path}: columns must be [m, n, k, tflops]")
    points = tuple((int(m), int(n), int(k), float(t)) for m, n, k, t in doc["points"])
    return Table(doc["name"], path, doc["gpu"], doc["dtype"], doc["source"], doc["hardware"],
                 points)


def tables(directory: str = FIXTURES) -> Dict[str, Table]:
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        t = load_table(path)
        out[t.name] = t
    return out


@dataclass(frozen=True)
class Row:
    """One shape: measured TFLOP/s, the model's as a step prices a call,
    and the model's without a call's fixed time."""

    m: int
    n: int
    k: int
    measured: float
    priced: float
    throughput: float

    @property
    def large(self) -> bool:
        return min(self.m, self.n, self.k) >= LARGE

    @property
    def ratio(self) -> float:
        return self.priced / self.measured


def compare(table: Table, fit=FIT) -> List[Row]:
    """The model's TFLOP/s at every published shape of ``table``."""
    gpu, known = gpu_figures(table.gpu)
    if not known:
        raise ValueError(f"{table.path}: the model has no figures for GPU {table.gpu!r}")
    bare = replace(fit, gemm_latency_us=0.0)
    rows = []
    for m, n, k, tflops in table.points:
        flops = 2.0 * m * n * k
        rows.append(Row(m, n, k, tflops,
                        flops / gemm_seconds(m, n, k, gpu, table.dtype, fit) / 1e12,
                        flops / gemm_seconds(m, n, k, gpu, table.dtype, bare) / 1e12))
    return rows


def report(directory: str = FIXTURES) -> str:
    lines = ["| table | GPU | dtype | m x n x k | measured TFLOP/s | model (a call) | "
             "model / measured | model without a call's fixed time | / measured |",
             "|---|---|---|---|--:|--:|--:|--:|--:|"]
    for name, t in tables(directory).items():
        for r in compare(t):
            lines.append(f"| {name} | {t.gpu} | {t.dtype} | {r.m} x {r.n} x {r.k} | "
                         f"{r.measured:.0f} | {r.priced:.0f} | {r.ratio:.2f} | "
                         f"{r.throughput:.0f} | {r.throughput / r.measured:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", default=FIXTURES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sys.stdout.write(report(args.fixtures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
