"""A torchtitan or DeepSpeed plan speaks the framework's names (issue 32):
the preview's header gives its own layout (dp_replicate, dp_shard, ...), and
rankmap.json/rankmap.csv its own groups, as `slurmtopo groups --framework
NAME --json` prints them; a Megatron plan is unchanged (its kinds are the
planner's)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parents[1]
H100 = str(ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml")


def _plan(tmp_path, *args):
    out = tmp_path / "plan"
    code, stdout, err = run_cli(["plan", "--inventory", H100, "--output-dir", str(out), *args])
    assert code == 0, err
    return stdout, out


@pytest.mark.parametrize("framework,args,header", [
    ("torchtitan", ["--world", "16", "--dp-replicate", "2", "--dp-shard", "-1", "--tp", "2"],
     "Plan: torchtitan world 16 = dp_replicate 2 × dp_shard 4 × tp 2 (mesh pp, dp_replicate, "
     "dp_shard, cp, tp); nodes gpu[01-02]"),
    ("deepspeed", ["--world", "16", "--tp", "2", "--pp", "2"],
     "Plan: deepspeed world 16 = pp 2 × dp 4 × tp 2 (axes pipe, data, model); nodes "
     "gpu[01-02]"),
])
def test_the_plan_speaks_the_frameworks_names(tmp_path, framework, args, header):
    stdout, out = _plan(tmp_path, "--framework", framework, *args)
    assert " ".join(stdout.split()).startswith(header), stdout[:300]
    assert "megatron)" not in stdout.split("\n\n")[0]
    code, own, err = run_cli(["groups", "--framework", framework, *args, "--json"])
    assert code == 0, err
    doc = json.loads((out / "rankmap.json").read_text())
    assert doc["framework"] == framework
    assert doc["framework_groups"] == json.loads(own)
    assert "tp" in doc["groups"]  # the planner's kinds stay, for the tools that read them
    rows = list(csv.DictReader((out / "rankmap.csv").open()))
    kinds = [c[:-len("_group")] for c in rows[0] if c.endswith("_group")]
    assert kinds == list(json.loads(own))
    for kind, groups in json.loads(own).items():
        for i, g in enumerate(groups):
            assert {int(rows[r][f"{kind}_group"]) for r in g} == {i}


def test_a_megatron_plan_keeps_its_kinds(tmp_path):
    stdout, out = _plan(tmp_path, "--tp", "8", "--dp", "2")
    assert "(order tp-cp-ep-dp-pp, megatron)" in " ".join(stdout.split())
    doc = json.loads((out / "rankmap.json").read_text())
    assert "framework" not in doc and "framework_groups" not in doc
    header = (out / "rankmap.csv").read_text().splitlines()[0].split(",")
    assert [c[:-len("_group")] for c in header if c.endswith("_group")] == list(doc["groups"])


def test_sbatch_dry_run_header_and_output_rankmap(tmp_path):
    code, out, err = run_cli(["sbatch", "--inventory", H100, "--state", "none", "--dry-run",
                              "--framework", "torchtitan", "--config",
                              str(ROOT / "tests" / "fixtures" / "frameworks" / "train.toml"),
                              "--", "torchrun", "--nnodes", "2", "--nproc-per-node", "4",
                              "train.py"])
    assert code == 0, err
    assert " ".join(err.split()).startswith(
        "Plan: torchtitan world 8 = dp_replicate 2 × dp_shard 2 × tp 2")
