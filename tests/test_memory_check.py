"""The memory model against the published runs (bench/memory_check.py;
docs/cost-model.md, "Memory against the published runs"): a published run
ran, so its layout fit; with the recipes' memory settings the fixtures
record (Megatron-LM's recompute modules and layers, CPU offloading, bf16
main gradients) the model says so for Megatron Bridge's runs."""
from __future__ import annotations

import os
from dataclasses import replace

from bench import memory_check, step_fit


def test_megatron_bridge_runs_fit_with_their_recipes_memory_settings():
    runs = [r for r in step_fit.load_runs() if r.source == "megatron-bridge"]
    rows = memory_check.memory_rows(runs)
    s = memory_check.summary(rows)
    assert s["n"] == len(runs) >= 220
    assert s["within"] >= 0.97, memory_check.misses(rows)
    # without the recipes' settings (fp32 main gradients, no recomputation
    # or offloading) a third of them would not fit
    keys = ("recompute_modules", "recompute_layers", "offload_layers", "grad_dtype")
    bare = [replace(r, row={k: v for k, v in r.row.items() if k not in keys}) for r in runs]
    t = memory_check.summary(memory_check.memory_rows(bare))
    assert t["within"] <= 0.75, t


def test_nemo_runs_fit_with_their_recipes_gradient_dtype():
    """DGX Cloud's recipes reduce gradients in bf16 (optim.grad_sync_dtype)
    for all but Nemotron-4 15B, NeMo's 25.02-25.07 performance scripts too
    in FP8 (and 25.07's offload Llama 3.1 405B's activations): with that,
    their runs fit."""
    for source, n, least in (("dgxc-benchmarking", 72, 0.97), ("nemo-25", 20, 1.0)):
        runs = [r for r in step_fit.load_runs() if r.source == source]
        s = memory_check.summary(memory_check.memory_rows(runs))
        assert s["n"] == len(runs) == n and s["within"] >= least, (source, s)


def test_every_source_is_reported():
    rows = memory_check.memory_rows()
    table = memory_check.table(rows)
    for src in {r.run.source for r in rows}:
        assert f"| {src} |" in table
    s = memory_check.summary([r for r in rows if r.run.source in ("megatron-lm-readme",
                                                                  "nemo-long-context")])
    assert s["fits"] == 1.0, s
    # docs/cost-model.md prints the table as the bench prints it now
    with open(os.path.join(step_fit.ROOT, "docs", "cost-model.md")) as fh:
        assert table.strip() in fh.read()
