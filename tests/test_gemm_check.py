"""The step model's GEMM pricing against published cuBLASLt micro-benchmarks
(tests/fixtures/gemm/, bench/gemm_check.py), held out: no compute constant
was fitted on them. Large FP8 GEMMs, as a step prices one call, must be
within 20% of what was measured on H100, H200 and GB200, and the model's
throughput without a call's fixed time within 20% from 2048 up in every
dimension. Smaller shapes and FP4 are reported in docs/cost-model.md with
the reason, not asserted."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # bench/ is not installed; plain `pytest` must find it
    sys.path.insert(0, ROOT)

from bench import gemm_check as gc  # noqa: E402

TABLES = gc.tables()


def test_the_tables_cover_three_gpus_and_large_shapes():
    assert {t.gpu for t in TABLES.values()} >= {"H100", "H200", "GB200"}
    for t in TABLES.values():
        assert t.source["url"].startswith("https://github.com/Azure/AI-benchmarking-guide/blob/")
        assert t.source.get("tool") and t.source.get("software") and t.hardware
        assert any(min(m, n, k) >= gc.LARGE for m, n, k, _ in t.points) or t.dtype != "fp8"


@pytest.mark.parametrize("name", sorted(n for n, t in TABLES.items() if t.dtype == "fp8"))
def test_large_fp8_gemms_are_priced_as_measured(name):
    rows = gc.compare(TABLES[name])
    large = [r for r in rows if r.large]
    assert large, name
    for r in large:
        assert 1 / gc.TOLERANCE <= r.ratio <= gc.TOLERANCE, (name, r)
    for r in rows:
        if min(r.m, r.n, r.k) >= 2048:
            assert 1 / gc.TOLERANCE <= r.throughput / r.measured <= gc.TOLERANCE, (name, r)
        # a call's fixed time only ever slows the priced figure
        assert r.priced < r.throughput


def test_a_table_with_other_columns_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngpu: H100\ndtype: fp8\nsource: {}\nhardware: h\n"
                   "columns: [m, n, tflops]\npoints: [[1, 2, 3]]\n")
    with pytest.raises(ValueError, match="columns must be"):
        gc.load_table(str(bad))


def test_the_report_runs_as_users_run_it(capsys):
    assert gc.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 2 + sum(len(t.points) for t in TABLES.values())
    assert "| azure-nd-h100-v5 | H100 | fp8 | 8192 x 8192 x 8192 | 1290 |" in out
