"""The whole-step model against the published training runs of
tests/fixtures/training_runs/ (bench/step_fit.py; docs/cost-model.md, "How
well it fits"): the fit set and the held-out runs stay as accurate as
reported, and the fixtures stay honest (cited, unique, the fit set
declared)."""
from __future__ import annotations

import os
import re
from dataclasses import fields

import pytest
import yaml

from bench import step_fit
from slurmtopo.cost.compute import FIT


@pytest.fixture(scope="module")
def rows():
    runs = step_fit.load_runs()
    priced = step_fit.price_all(runs)
    return step_fit.evaluate(priced, FIT, step_fit.fit_ids())


def test_fixtures_are_cited_and_the_fit_set_declared():
    runs = step_fit.load_runs()
    ids = {r.id for r in runs}
    fit = step_fit.fit_ids()
    assert set(fit) <= ids and len(set(fit)) == len(fit)
    assert 0 < len(fit) < len(ids) / 4  # most runs are held out
    for path in sorted(step_fit.glob.glob(step_fit.FIXTURES + "/*.yaml")):
        if path.endswith("fit-set.yaml"):
            continue
        with open(path) as fh:
            src = yaml.safe_load(fh)["source"]
        assert src["url"].startswith("https://") and src["publication"], path
    assert all(r.published > 0 for r in runs)


def test_every_run_is_placed_and_priced(rows):
    assert all(r.predicted for r in rows), [r.run.id for r in rows if not r.predicted]


def test_the_fit_set_fits(rows):
    s = step_fit.summary([r for r in rows if r.fitted])
    assert s["within_20"] >= 0.90 and s["beyond_40"] == 0, s


def test_held_out_runs_as_reported(rows):
    """The numbers docs/cost-model.md reports (below the issue's aim of 80%
    within 20% and 5% beyond 40% over all held-out runs: GPT-OSS 120B and
    the early releases' MoE runs are the misses listed there; without
    GPT-OSS the held-out runs meet it)."""
    held = [r for r in rows if not r.fitted]
    s = step_fit.summary(held)
    assert s["n"] >= 345 and s["within_20"] >= 0.78 and s["beyond_40"] <= 0.095, s
    t = step_fit.summary([r for r in held if "gpt-oss" not in r.run.model_text])
    assert t["within_20"] >= 0.80 and t["beyond_40"] <= 0.05, t
    for source, least in (("megatron-lm-readme", 0.85), ("nemo-24.07", 0.85),
                          ("automodel", 0.6), ("llama3-paper", 0.33), ("torchtitan", 0.65),
                          ("nemo-25", 0.6), ("dgxc-benchmarking", 0.95)):
        t = step_fit.summary([r for r in held if r.run.source == source])
        assert t["within_20"] >= least, (source, t)
    # the fine-grained MoE models of every release, held out (the GEMM calls' fixed time)
    for model, least in (("qwen3-30b-a3b", 0.7), ("qwen3-235b-a22b", 0.8)):
        t = step_fit.summary([r for r in held if r.run.model_text == model])
        assert t["within_20"] >= least, (model, t)
    # the dense Llama runs of every source, held out
    dense = [r for r in held if r.run.model_text.startswith(("llama3-", "llama3.1-"))]
    t = step_fit.summary(dense)
    assert t["n"] >= 90 and t["within_20"] >= 0.85 and t["beyond_40"] <= 0.05, t
    # the newest Megatron Bridge release of the full table
    t = step_fit.summary([r for r in held if r.run.row.get("release") == "26.06"])
    assert t["within_20"] >= 0.8, t
    # DGX Cloud's weak scaling on H100, 8 to 2,304 GPUs, with the attention
    # kernels and expert layout its recipes ran: none beyond 25%
    dgxc = [r for r in held if r.run.source == "dgxc-benchmarking"]
    assert len(dgxc) == 72 and all(abs(r.ratio - 1) <= 0.25 for r in dgxc)
    # torchtitan's eager rows priced with eager kernels, as near as the compiled ones
    titan = {r.run.id: r.ratio for r in held if r.run.id.startswith("titan-h100-8b-fsdp-")}
    assert all(abs(titan[f"titan-h100-8b-fsdp-{n}"] - titan[f"titan-h100-8b-fsdp-compile-{n}"])
               <= 0.05 for n in (8, 128)), titan
    # Llama 4 (interleaved experts, chunked attention), held out: within 25%
    l4 = [r for r in held if r.run.model_text.startswith("llama4-")]
    assert len(l4) == 3 and all(abs(r.ratio - 1) <= 0.25 for r in l4), \
        [(r.run.id, round(r.ratio, 2)) for r in l4]
    # NeMo's long-context runs on B200 (8K to 1M tokens, CP 1 to 16): within 11%
    lc = [r for r in held if r.run.id.startswith("nemolc-b200")]
    assert len(lc) == 8 and all(abs(r.ratio - 1) <= 0.11 for r in lc), \
        [(r.run.id, round(r.ratio, 2)) for r in lc]


def test_the_first_choice_among_published_layouts(rows):
    good, total, _ = step_fit.first_choices(rows)
    assert total >= 30 and good == total
    good, total, _ = step_fit.order_agreement(rows, by_dtype=False)
    assert good >= 0.95 * total


def test_memory_against_torchtitans_published_peaks():
    """torchtitan publishes each run's peak memory: the model's count is
    within 26% of it on its H100 runs (selective and full recomputation,
    long contexts, FSDP with TP and PP, 4D with CP); its H200 runs (a later
    PyTorch that compiles the loss, 47-48 GiB) it overcounts by 40%
    (docs/cost-model.md)."""
    from slurmtopo.cost.whole import compose
    runs = [r for r in step_fit.load_runs() if "memory_gib" in r.row]
    assert len(runs) >= 15
    ratios = {}
    for run in runs:
        p = step_fit.price_run(run)
        step = compose(p.spec, p.dims, p.gpu, p.calls, p.style, run.framework, FIT, p.shard)
        ratios[run.id] = step.memory.total_gib / run.row["memory_gib"]
    h100 = {k: v for k, v in ratios.items() if run_system(k) == "h100"}
    assert len(h100) == 18 and all(0.74 <= v <= 1.26 for v in h100.values()), h100
    assert all(v > 1.25 for k, v in ratios.items() if k not in h100)


def run_system(run_id: str) -> str:
    return run_id.split("-")[1]


def test_docs_report_the_fitted_constants_and_the_tables(rows):
    """docs/cost-model.md's constants table gives ComputeFit's values (to the
    digits it prints), and its tables of the runs by source and by release
    are what bench/step_fit.py prints now."""
    with open(os.path.join(step_fit.ROOT, "docs", "cost-model.md")) as fh:
        doc = fh.read()
    table = {}
    for line in doc.splitlines():
        cells = line.split(" | ")
        if not line.startswith("| `") or len(cells) < 4 \
                or not re.fullmatch(r"[0-9.]+-[0-9.]+", cells[2]):
            continue
        names = re.findall(r"`(\w+)`", cells[0])
        values = cells[1].split(", ") if len(names) > 1 else [cells[1]]
        table.update(zip(names, values))
    fitted = {f.name for f in fields(FIT)} - {"moe_passes"}
    assert fitted <= set(table), sorted(fitted - set(table))
    for name in fitted:
        value = getattr(FIT, name)
        if name == "sustained":
            printed = dict(re.findall(r"([A-Z0-9]+) ([0-9.]+)", table[name]))
            assert {k: float(v) for k, v in printed.items()} == \
                {k: round(v, 2) for k, v in value}, name
        else:
            shown = table[name]
            digits = len(shown.split(".")[1]) if "." in shown else 0
            assert float(shown) == round(value, digits), (name, shown, value)
    assert step_fit.table(rows) in doc
    assert step_fit.release_table(rows) in doc
