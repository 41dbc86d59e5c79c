"""Acme (NSDI'24) job traces, read by the CSV reader as published
(tests/fixtures/traces/SOURCES.md), and replayed on their own cluster's
inventory (``slurmtopo inventory synthetic acme-seren``)."""
from __future__ import annotations

import json
from pathlib import Path

from slurmtopo.simulate.trace_read import read_trace
from tests.clirun import run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SEREN = str(FIXTURES / "acme-seren-sample.csv")
KALOS = str(FIXTURES / "acme-kalos-sample.csv")


def test_seren():
    """GPUs from gpu_num, nodes from node_num, run time from duration, the
    submissions (ISO times with their +08:00 zone) from the first; the CPU
    job skipped and counted."""
    t = read_trace(SEREN)
    assert [(j.job_id, j.gpus, j.nodes, j.submit, j.run_time) for j in t.jobs] == [
        ("5778432", 8, 1, 0.0, 117.0), ("5778469", 8, 1, 336.0, 2693.0),
        ("5778501", 32, 4, 698.0, 7200.0)]
    assert [(s.reason, s.count, s.first) for s in t.skipped] == [
        ("without GPUs (CPU jobs)", 1, f"{SEREN}:5")]


def test_kalos_with_its_extra_and_empty_columns():
    t = read_trace(KALOS)
    assert [(j.job_id, j.gpus, j.nodes, j.submit, j.run_time) for j in t.jobs] == [
        ("dlctk696s0jbvitv", 64, 8, 0.0, 18.0), ("dlc1t2ypl09b8qtp", 64, 8, 1664.0, 82.0)]
    assert t.skipped == ()


def test_replayed_on_seren_itself(tmp_path):
    inv = tmp_path / "seren.yaml"
    code, _, err = run_cli(["inventory", "synthetic", "acme-seren", "-o", str(inv)])
    assert code == 0, err
    assert "286 nodes, 2288 GPUs" in err
    code, out, err = run_cli(["simulate", "--inventory", str(inv), "--trace", SEREN,
                              "--policy", "slurm", "--json", "--workers", "1"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["inventory"]["gpus"] == 2288 and doc["policies"][0]["jobs"] == 3
