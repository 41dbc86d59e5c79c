"""The benchmark entry points on tiny sizes, so that bench/ does not rot.

No timing is asserted. What is asserted could fail for real: the lower
bound is not above slurmtopo's cost, every placement uses free GPUs only,
scenario generation is reproducible, and the result files have the
structure docs/benchmarks.md and the plots read.
"""
from __future__ import annotations

import json
import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # bench/ is not installed; plain `pytest` must find it
    sys.path.insert(0, ROOT)

from bench import scenarios  # noqa: E402
from bench.scenarios import ScenarioSpec, build, busy_state, cluster, free_gpus  # noqa: E402

EPS = 1e-9


# --------------------------------------------------------------------------
# the generator (needs only the model)


def test_scenario_ids_round_trip():
    spec = ScenarioSpec("hgx-fattree", 64, 60, 1003)
    assert spec.id == "hgx-fattree:64:60:1003"
    assert ScenarioSpec.parse(spec.id) == spec
    with pytest.raises(ValueError):
        ScenarioSpec.parse("hgx-fattree:64:60")
    with pytest.raises(ValueError):
        ScenarioSpec.parse("no-such-shape:64:60:1")


def test_scenarios_are_reproducible():
    a, b = build("mixed:64:60:7"), build("mixed:64:60:7")
    assert a.state.nodes == b.state.nodes
    assert a.job == b.job
    c = build("mixed:64:60:8")
    assert (c.state.nodes, c.job) != (a.state.nodes, a.job)


@pytest.mark.parametrize("shape,nodes", [("hgx-fattree", 16), ("hgx-fattree", 1024),
                                         ("pcie-pairs", 16), ("dgx1-cubemesh", 16),
                                         ("nvl72", 36), ("mixed", 64), ("fattree3", 40),
                                         ("nvl72-hgx", 72)])
def test_shapes_build(shape, nodes):
    inv = cluster(shape, nodes)
    assert len(inv) == nodes
    hosts = {h for s in inv.fabric.switches for h in s.nodes}
    assert hosts == set(inv.nodes)  # every node hangs under a leaf


@pytest.mark.parametrize("busy", [0.0, 0.3, 0.6, 0.85])
def test_busy_state_hits_its_target(busy):
    import random

    inv = cluster("hgx-fattree", 64)
    st = busy_state(inv, busy, random.Random(busy))
    got = 1 - free_gpus(inv, st) / inv.gpu_count
    assert abs(got - busy) <= 0.03
    if busy:
        kinds = {"whole": 0, "partial": 0}
        for ns in st.nodes.values():
            if ns.exclusive:
                kinds["whole"] += 1
            elif ns.busy_gpus:
                kinds["partial"] += 1
        assert kinds["whole"] and kinds["partial"]  # both patterns present


def test_jobs_fit_and_are_valid_layouts():
    from slurmtopo.job.groups import build_groups

    for spec in scenarios.quality_specs(1, quick=True, base_seed=5):
        sc = build(spec)
        assert 1 <= sc.job.world <= free_gpus(sc.inv, sc.state)
        groups = build_groups(sc.job.layout())  # raises LayoutError when invalid
        assert sum(len(g) for g in groups["tp"]) == sc.job.world


# --------------------------------------------------------------------------
# quality (needs the planner and the cost model)


TINY = ["hgx-fattree:16:0:1", "hgx-fattree:16:60:2", "pcie-pairs:16:30:3",
        "dgx1-cubemesh:16:85:4", "nvl72:36:30:5", "mixed:64:60:6"]


def test_racks_through_the_command_line(tmp_path):
    # bench.racks runs `slurmtopo plan --json` and reads its rank map: on
    # 4 racks 85% busy the one EP block of this job fits no rack's free
    # GPUs, so it must straddle, and nothing else may
    from bench import racks

    sc = build("nvl72-ep8:72:85:1001")
    got = racks.check(sc, racks.plan_cli(sc, str(tmp_path)))
    assert got["ep"]["must"] == 1 and got["ep"]["straddling_blocks"] == 1
    assert all(v["avoidable"] == 0 for v in got.values()), got
    assert got["tp"]["straddling"] == 0


@pytest.mark.parametrize("sid", TINY)
def test_quality_scenario(sid):
    from bench import quality

    rec = quality.run_scenario(sid)
    assert rec["id"] == sid
    assert not [p for p in rec["problems"] if "invalid placement" in p or "below" in p], rec["problems"]
    assert set(quality.PLANNERS) <= set(rec["results"])
    if rec["busy_pct"]:  # the same job on the idle cluster, for attribution
        assert rec["results"]["slurmtopo-idle"]["ok"]
        assert rec["ratios"]["slurmtopo-idle/lb"] >= 1 - 1e-6
    mine = rec["results"]["slurmtopo"]
    assert mine["ok"], mine.get("error")
    lb = rec["lower_bound"]["step_s"]
    assert lb >= 0 and mine["step_s"] >= lb * (1 - 1e-6) - EPS
    assert rec["ratios"]["slurmtopo/lb"] >= 1 - 1e-6
    for b in quality.BASELINES:
        if rec["results"][b]["ok"]:
            x = rec["ratios"][f"{b}/slurmtopo"]
            assert x > 0 and not math.isnan(x)
    for kind, kc in mine["kinds"].items():
        assert kc["time_s"] >= 0


def test_run_writes_results(tmp_path):
    from bench import run

    out = tmp_path / "results"
    rc = run.main(["--quick", "--only", "quality", "--per-cell", "1", "--shapes", "hgx-fattree",
                   "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "quality.json").read_text())
    s = data["summary"]
    assert s["overall"]["scenarios"] == len(data["records"]) == 8  # 2 sizes x 4 busy levels
    for key in ("slurmtopo/lb", "slurm-default/slurmtopo", "slurm-leaf/slurmtopo",
                "random/slurmtopo"):
        assert s["overall"][key]["n"] >= 1
    assert s["overall"]["slurmtopo/lb"]["min"] >= 1 - 1e-6
    assert (out / "quality.png").stat().st_size > 0
    assert "Placement quality" in (out / "report.md").read_text()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["command"].startswith("python -m bench.run")
    # README's figure for --quick is CPU seconds: the run records them
    assert meta["cpu_s"] > 0 and meta["wall_s"] > 0


# --------------------------------------------------------------------------
# speed (tiny sizes; nothing about the times themselves)


def test_speed_entry_points(tmp_path):
    from bench import run, speed

    rows = speed.planner_grid(inventories=(64, 256), jobs=(8, 64), busy=(0, 60), quick=True)
    fits = [r for r in rows if r.get("fits")]
    assert fits
    for r in fits:
        assert r["plan_s"] > 0 and r["cold_s"] > 0 and r["evaluate_s"] > 0
        assert r["peak_bytes"] > 0
        assert len(r["plan_samples_s"]) == 3
    assert any(not r.get("fits") for r in rows)  # 64 GPUs do not fit in 64 * 40% free
    g = speed.growth(rows + [dict(rows[0], job_gpus=1 << 20, inventory_gpus=64)])
    assert isinstance(g, list)
    load = speed.inventory_load(str(tmp_path), nodes=40, repeats=1)
    assert [r["nodes"] for r in load] == [40, 40, 40]
    e2e = speed.end_to_end(str(tmp_path), repeats=1, sizes=(32,))
    assert e2e[0]["median_s"] > 0
    sp = {"planner": rows, "growth": g, "end_to_end": e2e, "inventory_load": load,
          "agent_discovery": {"skipped": "test"}, "topology_conf": {"skipped": "test"}}
    tables = run.speed_tables(sp)
    assert "Planner speed" in run.markdown(tables)
    pytest.importorskip("matplotlib")  # the bench extra; plain `pytest` needs only [test]
    run.plot_speed(sp, str(tmp_path / "speed.png"))
    assert os.path.getsize(tmp_path / "speed.png") > 0


def test_loglog_slope():
    from bench.speed import loglog_slope

    assert loglog_slope([(1, 2), (2, 4), (4, 8)]) == pytest.approx(1.0)
    assert loglog_slope([(1, 1), (2, 4), (4, 16)]) == pytest.approx(2.0)
    assert loglog_slope([(1, 1)]) is None


def test_cli_entry_points(tmp_path):
    """bench.cli end to end on 16 nodes: every part runs, its commands
    succeed, and the tables and plot are made from what it returns."""
    from bench import cli

    res = cli.run(workdir=str(tmp_path), nodes=16, worlds=(8, 64), repeats=1, daemon_jobs=3,
                  start_worlds=(64,))
    assert [r["job_gpus"] for r in res["plan"]] == [8, 64]
    for r in res["plan"]:
        assert "error" not in r, r
        assert r["script_bytes"] and r["rss_bytes"] > 0
        assert set(r["files_bytes"]) == {"env.json", "job.sbatch", "rankmap.csv", "rankmap.json"}
    rd = res["report_dir"]
    assert rd["reports"] == 16 and rd["compiled_bytes"] and "error" not in rd["warm"]
    start = res["start"]
    assert [r["ranks"] for r in start] == [64]
    for r in start:
        assert "error" not in r["bind"], r["bind"]
        assert "error" not in r["launch"] and "error" not in r["bare_shell"], r
        assert r["task_env_var_bytes"] > 0 and r["run_dir_bytes"] > r["task_env_bytes"] > 0
        assert "launch_bound_own_s" in r
    assert {"release"} <= set(res["daemon"]["actions"][0]), res["daemon"]
    titles = [t[0] for t in cli.tables(res)]
    assert any("slurmtopo plan" in t for t in titles) and any("Start time" in t for t in titles)
    growth = next(rows for title, _, rows in cli.tables(res) if title.startswith("Growth"))
    assert growth[0][0] == "8 -> 64" and len(growth) == 3
    cli.plot(res, str(tmp_path / "cli.png"))
    assert os.path.getsize(tmp_path / "cli.png") > 0


def test_launch_entry_point(tmp_path, capsys):
    """`python -m bench.launch` on 16 nodes: bind and one task's launch at
    64 ranks, and the table printed."""
    from bench import launch

    assert launch.main(["--workdir", str(tmp_path), "--nodes", "16", "--worlds", "64",
                        "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Start time through the command line")
    assert "  64 | " in out and "failed" not in out


def test_daemon_load_entry_point(tmp_path, capsys):
    """`python -m bench.daemon_load` on 16 nodes, two queue sizes: every
    cycle decides every held job, the caps hold, the JSON has what
    docs/benchmarks.md reads."""
    from bench import daemon_load

    out = tmp_path / "daemon.json"
    assert daemon_load.main(["--nodes", "16", "--jobs", "3,12", "--cycles", "2",
                             "--max-releases", "4", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["max_releases"] == 4
    assert [r["jobs"] for r in doc["runs"]] == [3, 12]
    for r in doc["runs"]:
        for c in r["cycles"]:
            assert c["cpu_s"] >= 0 and c["wall_s"] >= 0
            assert c["actions"].get("release", 0) <= 4
        first = r["cycles"][0]["actions"]
        assert sum(first.values()) == r["jobs"]          # one decision per held job
    assert "held jobs" in capsys.readouterr().out


def test_the_results_directory_is_shown_as_the_user_can_find_it(tmp_path, monkeypatch):
    """`--out /tmp/x` from a checkout printed "results in ../../../tmp/x/"
    (issue 24's bench check): a path outside the working directory is shown
    absolute, one inside it relative."""
    from bench.run import shown_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert shown_dir(str(tmp_path / "sub")) == "sub"
    assert shown_dir("/tmp/elsewhere-bench") == "/tmp/elsewhere-bench"


def test_fixed_costs_with_a_baseline(tmp_path):
    """bench.cli's fixed-cost part with ``--baseline`` (here this checkout
    again) on 2,048 nodes (the 16,384-GPU plan fits): both trees' --help, plan --help and
    plans run, each plan gets its ratios over its own tree's plan --help, and the baseline's
    commit is named."""
    from bench import cli
    from bench.process import write_inventory

    inv = write_inventory(str(tmp_path), 2048)
    res = cli.fixed_costs(inv, str(tmp_path), 1, lambda msg: None, baseline=cli.ROOT)
    for tag in ("", "baseline: "):
        for w in cli.FIXED_TARGETS:
            row = res["runs"][f"{tag}plan {w:,} GPUs"]
            assert "error" not in row, row
            assert row["wall_ratio"] > 0 and row["cpu_ratio"] > 0
            ref = res["runs"][f"{tag}{cli.REFERENCE}"]
            assert "error" not in ref and ref["command"].endswith("plan --help"), ref
            assert row["cpu_ratio"] == pytest.approx(row["cpu_s"] / ref["cpu_s"])
        assert "error" not in res["runs"][f"{tag}help"]
    assert res["baseline"]["root"] == os.path.abspath(cli.ROOT)
    assert res["commit"] == res["baseline"]["commit"]


def test_fixed_breakdown_entry_point(tmp_path, capsys):
    """`python -m bench.fixed_breakdown` on 64 nodes: every step of the
    plan is timed in a child that made the plan's files, and the steps
    add up to the total it prints against --help."""
    from bench import fixed_breakdown

    assert fixed_breakdown.main(["--world", "64", "--repeats", "1", "--nodes", "64",
                                 "--workdir", str(tmp_path)]) == 0
    res = json.loads(capsys.readouterr().out)
    steps = res["steps_cpu_s"]
    assert "preview: laid out as into a pipe (without rich)" in steps and "plan: candidates, planner, Slurm's default, " \
        "pricing, bound, script" in steps
    assert all(v >= 0 for v in steps.values()) and res["help_cpu_s"] > 0
    assert math.isclose(sum(steps.values()), res["total_cpu_s"])
    for name in ("rankmap.json", "rankmap.csv", "env.json", "job.sbatch"):
        assert (tmp_path / "breakdown-64" / name).stat().st_size > 0
