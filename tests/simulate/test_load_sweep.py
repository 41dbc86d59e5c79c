"""``--load``, ``--sweep`` and the trade-off read off a sweep; the low-load
warning; the slowdown distribution and the contention shares in the
document."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmtopo.api import load_cluster
from slurmtopo.errors import SlurmtopoError
from slurmtopo.simulate.layouts import BUILTIN
from slurmtopo.simulate.policies import parse_policy
from slurmtopo.simulate.runner import offered_load, prepare
from slurmtopo.simulate.sweep import Sweep, expand, parse_sweep, tradeoff
from slurmtopo.simulate.trace import Trace, TraceJob
from tests.clirun import one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[2]
INV = str(ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml")
PHILLY = str(ROOT / "etc" / "examples" / "traces" / "philly-excerpt.csv")


def _trace(*rows):
    jobs = tuple(TraceJob(f"j{i}", float(t), float(run), g, where=f"t:{i + 1}")
                 for i, (t, g, run) in enumerate(rows))
    return Trace(jobs=jobs, source="t", format="csv", rows=len(jobs))


def test_offered_load_and_scaling():
    """32 GPUs; jobs of 8 GPUs x 100 s every 100 s: 4 jobs over 300 s of
    submissions offer 3200 / (32 x 300) = 1/3. Asked for 2/3, the
    inter-arrival times halve."""
    inv = load_cluster(INV)
    trace = _trace((0, 8, 100), (100, 8, 100), (200, 8, 100), (300, 8, 100))
    assert offered_load(inv, trace.jobs) == pytest.approx(1 / 3)
    setup = prepare(inv, trace, BUILTIN["default"], 0.3, contention="off", load=2 / 3)
    assert [j.submit for j in setup.jobs] == pytest.approx([0, 50, 100, 150])
    assert setup.offered == pytest.approx(2 / 3) and setup.offered_native == pytest.approx(1 / 3)
    with pytest.raises(SlurmtopoError, match="all submitted at once"):
        prepare(inv, _trace((0, 8, 100), (0, 8, 100)), BUILTIN["default"], 0.3, load=0.5)


def test_parse_and_expand_sweeps():
    sw = parse_sweep(["load=0.5,0.8", "wait=0,10m"])
    assert sw == Sweep(loads=(0.5, 0.8), waits=(0.0, 600.0))
    specs = [parse_policy(p) for p in ("slurm", "daemon:wait=600", "slurm-switches:wait=60")]
    assert [s.label for s in expand(specs, sw)] == [
        "slurm", "daemon:wait=0", "daemon:wait=600", "slurm-switches:wait=0",
        "slurm-switches:wait=600"]
    assert parse_sweep(["load=0.9"]).waits is None
    for bad, what in (("rate=1", "expected load="), ("load=", "no values"),
                      ("load=0.5,0.5", "given twice"), ("load=nan", "not a load"),
                      ("load=20", "not a load"), ("wait=soon", "is not a time")):
        with pytest.raises(SlurmtopoError, match=what):
            parse_sweep([bad])


def _doc(slurm, waits):
    """A run document with slurm's (mean slowdown, p95 wait) and a daemon's per wait."""
    pols = [{"name": "slurm", "policy": "slurm", "options": {},
             "slowdown": {"mean": slurm[0]}, "queue_wait_s": {"p95": slurm[1]}}]
    for w, (s, p95) in waits.items():
        pols.append({"name": "daemon", "policy": f"daemon:wait={w}", "options": {"wait": w},
                     "slowdown": {"mean": s}, "queue_wait_s": {"p95": p95}})
    return {"policies": pols, "load": {"offered": 0.8}}


def test_tradeoff_against_slurm():
    """slurm: mean slowdown 1.40, p95 wait 1000 s. wait=600 removes
    (0.40-0.20)/0.40 = 50% of the excess for 1050 s <= 1000 x 1.1 + 10:
    it qualifies; wait=3600 removes 75% but waits 2000 s: it does not;
    wait=0 removes 10%: not enough."""
    rows = {r["policy"]: r for r in tradeoff(_doc((1.4, 1000.0), {
        0: (1.36, 1000.0), 600: (1.2, 1050.0), 3600: (1.1, 2000.0)}))}
    assert rows["daemon:wait=600"]["excess_cut"] == pytest.approx(0.5)
    assert rows["daemon:wait=600"]["qualifies"]
    assert not rows["daemon:wait=3600"]["qualifies"]
    assert rows["daemon:wait=3600"]["excess_cut"] == pytest.approx(0.75)
    assert not rows["daemon:wait=0"]["qualifies"]
    assert tradeoff({"policies": [], "load": {}}) == []


def test_cli_load_distribution_and_warning():
    code, out, err = run_cli(["simulate", "--inventory", INV, "--trace", PHILLY, "--jobs", "60",
                              "--policy", "slurm", "--policy", "slurmtopo", "--json",
                              "--workers", "1"])
    assert code == 0, err
    doc = json.loads(out)
    native = doc["load"]["offered"]
    assert doc["settings"]["contention"] == "ecmp" and doc["settings"]["arrival_scale"] == 1
    for p in doc["policies"]:
        dist = p["slowdown_distribution"]
        assert [b["from"] for b in dist][:2] == [1.0, 1.01] and dist[-1]["to"] is None
        assert sum(b["jobs"] for b in dist) == pytest.approx(1.0, abs=1e-5)
        c = p["contention"]
        assert 0 <= c["jobs_by_others"] <= c["jobs"] <= 1
    code, out, err = run_cli(["simulate", "--inventory", INV, "--trace", PHILLY, "--jobs", "60",
                              "--policy", "slurm", "--load", "0.2", "--workers", "1"])
    assert code == 0, err
    assert "offered load 20% of the GPUs (--load" in out
    assert f"{native:.0%} as read" in out
    assert "warning: the trace offers 20% of the GPUs" in out and "--load 0.8" in out


def test_cli_sweep(tmp_path):
    plot = tmp_path / "sweep.png"
    argv = ["simulate", "--inventory", INV, "--trace", PHILLY, "--jobs", "40", "--policy", "slurm",
            "--policy", "daemon:wait=60", "--sweep", "load=0.5,0.9", "--sweep", "wait=0,600",
            "--workers", "2"]
    code, out, err = run_cli(argv + ["--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["slurmtopo"] == "simulate-sweep" and doc["sweep"]["loads"] == [0.5, 0.9]
    assert [r["load"]["offered"] for r in doc["runs"]] == pytest.approx([0.5, 0.9])
    assert [p["policy"] for p in doc["runs"][0]["policies"]] == [
        "slurm", "daemon:wait=0", "daemon:wait=600"]
    assert [len(t["rows"]) for t in doc["tradeoff"]] == [2, 2]
    assert len(doc["summary"]) == 2
    code, again, err = run_cli(argv + ["--json", "--workers", "1"])
    assert again == out  # the workers change nothing
    code, out, err = run_cli(argv + ["--plot", str(plot)])
    assert code == 0, err
    assert "offered" in out and "slurm's" in out and plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("extra, what", [
    (["--load", "0"], "--load"),
    (["--load", "0.5", "--sweep", "load=0.5"], "exclude each other"),
    (["--sweep", "speed=2"], "expected load="),
    (["--contention", "magic"], "--contention"),
])
def test_refusals(extra, what):
    code, _out, err = run_cli(["simulate", "--inventory", INV, "--trace", PHILLY, "--jobs", "10"]
                              + extra)
    one_line_error(code, err, what)
