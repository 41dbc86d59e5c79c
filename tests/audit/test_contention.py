"""``slurmtopo audit``: the running jobs' slowdown by shared links
(slurmtopo/audit/contention.py), now and over a past period."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmtopo.api import load_cluster
from slurmtopo.audit.contention import LinkWatch, summary
from slurmtopo.audit.placements import Auditor, RunningJob
from slurmtopo.simulate.layouts import BUILTIN
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parents[2]
INV = str(ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml")

STATE = """slurmtopo: state
version: 1
nodes: []
jobs:
  - {id: "7", name: a, nodes: "gpu[01,03]", gpus: "0-7"}
  - {id: "8", name: b, nodes: "gpu[02,04]", gpus: "0-7"}
"""


@pytest.fixture(scope="module")
def inv():
    return load_cluster(INV)


def test_two_jobs_across_the_spine_share_its_ports(inv):
    """Jobs 7 and 8 both span the two leaves: 8 flows each cross from
    leaf1 to leaf2 and back, on leaf1's 16 ports. Each job's multiplier
    is at least what its own flows give it, and the second job on the
    ports slows the first."""
    auditor = Auditor(inv, BUILTIN["default"])
    a = RunningJob("7", {"gpu01": tuple(range(8)), "gpu03": tuple(range(8))})
    b = RunningJob("8", {"gpu02": tuple(range(8)), "gpu04": tuple(range(8))})
    watch = LinkWatch(inv, auditor)
    watch.add(0, a)
    alone = watch.now()[0].stretch
    watch.add(1, b)
    recs = {r.job_id: r for r in watch.now()}
    assert recs["7"].stretch >= alone >= 1.0 and recs["7"].alone == pytest.approx(alone)
    assert recs["7"].stretch > 1.0 or recs["8"].stretch > 1.0
    doc = summary(list(recs.values()), False)
    assert doc["jobs"] == 2 and 0 < doc["slowed"] <= 1
    assert doc["slowed_by_others"] <= doc["slowed"]
    assert sum(b["jobs"] for b in doc["distribution"]) == pytest.approx(1.0)


def test_a_past_period_averages_each_run(inv):
    """Job 7 runs 0-100 alone, job 8 50-150 beside it: job 7's multiplier
    over its run is its alone value for 50 s and the shared one for 50."""
    auditor = Auditor(inv, BUILTIN["default"])
    watch = LinkWatch(inv, auditor)
    watch.add(0, RunningJob("7", {"gpu01": tuple(range(8)), "gpu03": tuple(range(8))}), 0.0)
    alone = watch.mult[0]
    watch.add(1, RunningJob("8", {"gpu02": tuple(range(8)), "gpu04": tuple(range(8))}), 50.0)
    shared = watch.mult[0]
    r7 = watch.remove(0, 100.0)
    assert r7.seconds == 100.0 and r7.stretch == pytest.approx((alone + shared) / 2)
    r8 = watch.remove(1, 150.0)
    assert r8.seconds == 100.0
    doc = summary([r7, r8], True)
    assert "gpu_hours" in doc and "gpus" not in doc


def test_cli_reports_it(tmp_path):
    state = tmp_path / "state.yaml"
    state.write_text(STATE)
    code, out, err = run_cli(["audit", "--inventory", INV, "--state", str(state), "--json"])
    assert code == 0, err
    doc = json.loads(out)
    c = doc["contention"]
    assert c["jobs"] == 2 and c["comm_fraction"] == 0.3 and "gpus" in c
    for j in doc["jobs"]:
        assert j["contention"]["stretch"] >= j["contention"]["alone"] >= 1.0
    code, out, err = run_cli(["audit", "--inventory", INV, "--state", str(state)])
    assert "shared links: " in out and "slowed" in out
    code, out, err = run_cli(["audit", "--inventory", str(ROOT / "etc" / "examples" /
                                                         "devcluster.yaml"),
                              "--sacct-file", str(ROOT / "etc" / "examples" / "traces" /
                                                  "devcluster-sacct.txt"), "--json"])
    assert code == 0, err
    assert "gpu_hours" in json.loads(out)["contention"]
