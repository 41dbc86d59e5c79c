"""``slurmtopo simulate`` through the command line."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.clirun import one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[2]
INV = str(ROOT / "etc" / "examples" / "devcluster.yaml")
SWF = str(ROOT / "etc" / "examples" / "traces" / "nasa-ipsc-excerpt.swf")
PHILLY = str(ROOT / "etc" / "examples" / "traces" / "philly-excerpt.csv")
BASE = ["simulate", "--inventory", INV, "--trace", SWF, "--jobs", "80"]
POLICIES = ["--policy", "slurm", "--policy", "slurm-switches:wait=300", "--policy", "slurmtopo",
            "--policy", "daemon:wait=300", "--policy", "random"]


@pytest.fixture(scope="module")
def doc_text():
    code, out, err = run_cli(BASE + POLICIES + ["--json", "--workers", "1"])
    assert code == 0, err
    return out


def test_json_document(doc_text):
    doc = json.loads(doc_text)
    assert (doc["slurmtopo"], doc["version"]) == ("simulate", 1)
    assert doc["inventory"] == {"source": INV, "nodes": 4, "gpus": 32}
    t = doc["trace"]
    assert (t["format"], t["jobs"], t["beyond_limit"]) == ("swf", 80, 220)
    # the excerpt's 64- and 128-GPU jobs cannot run on 32 GPUs
    assert t["never_fit"] == len(t["never_fit_jobs"]) > 0
    assert all(j["gpus"] > 32 for j in t["never_fit_jobs"])
    assert [p["policy"] for p in doc["policies"]] == [
        "slurm", "slurm-switches:wait=300", "slurmtopo", "daemon:wait=300", "random"]
    ran = t["jobs"] - t["never_fit"]
    for p in doc["policies"]:
        assert p["jobs"] + p["not_run"] == ran
        w, s = p["queue_wait_s"], p["slowdown"]
        assert 0 <= w["p50"] <= w["p95"] and w["mean"] >= 0
        assert s["p50"] <= s["p95"] and s["mean"] >= 0.999
        assert 0 < p["gpu_utilisation"] <= 1 and p["makespan_s"] > 0
        assert p["jct_s"]["mean"] >= w["mean"]
    by = {p["name"]: p for p in doc["policies"]}
    # the planner's placements are the best by the cost model; random's are not
    assert by["slurmtopo"]["placement_slowdown"]["mean"] == 1.0
    assert by["random"]["placement_slowdown"]["mean"] > 1.0
    for p in doc["policies"]:
        # shared links only ever slow a job down
        assert p["slowdown"]["mean"] >= p["placement_slowdown"]["mean"]
        assert sum(b["jobs"] for b in p["slowdown_distribution"]) == pytest.approx(1.0, abs=1e-5)
    assert by["daemon"]["daemon_cycles"] > 0


def test_json_is_byte_identical_whatever_the_workers(doc_text):
    code, again, err = run_cli(BASE + POLICIES + ["--json", "--workers", "1"])
    assert code == 0, err
    assert again == doc_text
    code, forked, err = run_cli(BASE + POLICIES + ["--json", "--workers", "3"])
    assert code == 0, err
    assert forked == doc_text


def test_seed_moves_only_the_random_policy_without_shared_links():
    """Without shared links the seed is the random policy's alone; with
    them it also hashes every flow onto its uplink (tests/simulate/
    test_contention.py)."""
    runs = []
    for seed in ("0", "7"):
        code, out, err = run_cli(BASE + POLICIES + ["--json", "--workers", "1", "--seed", seed,
                                                    "--contention", "off"])
        assert code == 0, err
        runs.append(json.loads(out))
    for pa, pb in zip(*(r["policies"] for r in runs)):
        assert (pa == pb) == (pa["name"] != "random"), pa["name"]


def test_table_and_plot(tmp_path):
    plot = tmp_path / "wait.png"
    code, out, err = run_cli(BASE + ["--policy", "slurm", "--policy", "daemon:wait=0",
                                     "--plot", str(plot)])
    assert code == 0, err
    assert "daemon:wait=0" in out and "slowdown" in out and "p50/p95/mean" in out
    assert "can never run on this inventory" in out and f"plot: {plot}" in out
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert os.stat(plot).st_mode & 0o002 == 0


def test_default_policies_and_csv(tmp_path):
    code, out, err = run_cli(["simulate", "--inventory", INV, "--trace", PHILLY, "--jobs", "40",
                              "--json", "--comm-fraction", "0.5", "--layout-rule", "dp"])
    assert code == 0, err
    doc = json.loads(out)
    assert [p["policy"] for p in doc["policies"]] == [
        "slurm", "slurm-switches:wait=600", "slurmtopo", "daemon:wait=600"]
    assert doc["settings"]["comm_fraction"] == 0.5
    assert doc["settings"]["layout_rule"].startswith("dp ")


@pytest.mark.parametrize("extra, what", [
    (["--policy", "fifo"], "unknown policy 'fifo'"),
    (["--policy", "slurm", "--policy", "slurm"], "given twice"),
    (["--plot", "out.svg"], "name it .png"),
    (["--layout-rule", "nope"], "not a built-in rule"),
    (["--comm-fraction", "2"], "comm-fraction"),
    (["--trace-format", "swf", "--jobs", "0"], "--jobs"),
])
def test_refusals(extra, what):
    code, _out, err = run_cli(BASE + extra)
    one_line_error(code, err, what)


def test_refused_inputs(tmp_path):
    code, _out, err = run_cli(["simulate", "--inventory", INV, "--trace",
                               str(tmp_path / "missing.csv")])
    one_line_error(code, err, "missing.csv", "no such file")
    big = tmp_path / "big.csv"
    big.write_text("gpu_num,submit_time,duration\n64,0,10\n128,5,10\n")
    code, _out, err = run_cli(["simulate", "--inventory", INV, "--trace", str(big)])
    one_line_error(code, err, "no job of the trace can run on this inventory", "big.csv:2")
    assert not list(tmp_path.glob("*.png"))


def test_byte_identical_across_processes(tmp_path):
    """Two runs in fresh interpreters with different hash seeds (set and
    dict orders of strings differ) print the same bytes."""
    import subprocess
    import sys

    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        p = subprocess.run([sys.executable, "-m", "slurmtopo"] + BASE[:-1] + ["40"] + POLICIES
                           + ["--json", "--workers", "2"], capture_output=True, env=env,
                           cwd=tmp_path, timeout=300)
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout)
    assert outs[0] == outs[1]


@pytest.mark.parametrize("why,setup", [
    ("no such directory", lambda tmp, mp: str(tmp / "missing" / "w.png")),
    ("is a directory", lambda tmp, mp: str((tmp / "d.png").mkdir() or tmp / "d.png")),
    ("needs matplotlib", lambda tmp, mp: mp.setitem(__import__("sys").modules, "matplotlib",
                                                    None) or str(tmp / "w.png")),
])
def test_plot_refused_before_the_replay(tmp_path, monkeypatch, why, setup):
    """Issue 32: a bad --plot path or a missing matplotlib was found after
    the replay (minutes lost); now before any job is replayed."""
    path = setup(tmp_path, monkeypatch)

    def no_replay(*a, **k):
        raise AssertionError("replayed before --plot was checked")
    monkeypatch.setattr("slurmtopo.commands.simulate._run", no_replay)
    monkeypatch.setattr("slurmtopo.simulate.runner.prepare", no_replay)
    code, out, err = run_cli(BASE + ["--plot", path])
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert why in err


def test_plot_axes_are_readable_and_coinciding_points_visible():
    """Issue 32: slowdowns of about 1 were labelled `1e-5+1` with ticks
    3.00-5.00, and one policy's point hid another's."""
    from slurmtopo.simulate.report import plot_figure

    def pol(name, policy, wait, slow):
        return {"name": name, "policy": policy,
                "queue_wait_s": {"mean": wait, "p95": wait}, "slowdown": {"mean": slow,
                                                                         "p95": slow}}
    doc = {"policies": [pol("slurm", "slurm", 120.0, 1.00001),
                        pol("slurmtopo", "slurmtopo", 120.0, 1.0),
                        pol("daemon", "daemon:wait=300", 120.0, 1.00003)],
           "trace": {"source": "t.swf", "jobs": 3, "never_fit": 0},
           "inventory": {"nodes": 4}}
    fig = plot_figure(doc)
    fig.canvas.draw()
    (ax,) = fig.axes
    assert ax.yaxis.get_offset_text().get_text() == ""
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all("e" not in x for x in labels)
    lo, hi = ax.get_ylim()
    assert lo < 1.0 < 1.00003 < hi and hi - lo >= 0.02  # the points mid-axis, not magnified
    lines = [ln for ln in ax.lines if ln.get_label() in ("slurm", "slurmtopo", "daemon")]
    assert len({ln.get_marker() for ln in lines}) == 3
    assert len({ln.get_markersize() for ln in lines}) == 3
    assert all(ln.get_fillstyle() == "none" for ln in lines)
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_the_trace_path_is_escaped_on_the_terminal(tmp_path):
    """A trace named with an escape sequence was printed raw (issue 33)."""
    path = tmp_path / "t\x1b]0;PWNED\x07[bold].txt"
    path.write_text((ROOT / "etc" / "examples" / "traces" / "devcluster-sacct.txt").read_text())
    code, out, err = run_cli(["simulate", "--inventory", INV, "--trace", str(path),
                              "--policy", "slurm"])
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "t\\x1b]0;PWNED\\x07[bold].txt" in out


@pytest.mark.parametrize("text, why", [
    ('[{"jobid":"a","submitted_time":"2017-10-07 01:11:39","attempts":'
     + "[" * 50_000 + "]" * 50_000 + "}]", "nested deeper"),
    ('[{"jobid":' + "9" * 5000 + ',"submitted_time":"2017-10-07 01:11:39","attempts":[]}]',
     "a number of thousands of digits"),
    ('[{"jobid":' + "9" * 4000 + ',"submitted_time":"2017-10-07 01:11:39","attempts":[{'
     '"start_time":"2017-10-07 01:11:40","end_time":"2017-10-07 02:11:40",'
     '"detail":[{"ip":"x","gpus":["gpu0"]}]}]}]', "1 job id out of range"),
])
def test_a_hostile_philly_log_is_one_line(tmp_path, text, why):
    """Philly job logs with deep lists and huge ids gave RecursionError and
    ValueError tracebacks (issue 33)."""
    path = tmp_path / "cluster_job_log"
    path.write_text(text)
    code, out, err = run_cli(["simulate", "--inventory", INV, "--trace", str(path),
                              "--trace-format", "philly"])
    assert code == 2 and why in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1
