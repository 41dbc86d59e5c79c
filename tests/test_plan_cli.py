"""`slurmtopo plan` end to end on every example, and its one-line errors."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtopo.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "etc" / "examples"

#: example -> extra arguments (layout, state)
CASES = {
    "h100-4node-2leaf": ["--tp", "8", "--pp", "2", "--dp", "2"],
    "h100-32node-fattree": ["--state", str(EXAMPLES / "h100-32node-state.yaml"),
                            "--tp", "8", "--pp", "2", "--dp", "4"],
    "a6000-4node-pcie": ["--tp", "2", "--pp", "2", "--dp", "4"],
    "dgx1-v100-pair": ["--tp", "4", "--dp", "4"],
    "gb200-nvl72-rack": ["--tp", "4", "--pp", "4", "--dp", "2", "--exclusive"],
}


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def _one_line_error(code, err, *parts):
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("slurmtopo: error: ")
    for p in parts:
        assert p in lines[0], lines[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_each_example(name, tmp_path, capsys):
    out_dir = tmp_path / "plan"
    code, out, err = run(["plan", "--inventory", str(EXAMPLES / f"{name}.yaml"), *CASES[name],
                          "--job-name", name, "--output-dir", str(out_dir), "--",
                          "python", "train.py", "--lr", "3e-4"], capsys)
    assert code == 0, err
    assert "Rank placement" in out and "Modelled communication" in out
    assert "GPU0" in out
    for f in ("rankmap.json", "rankmap.csv", "env.json", "job.sbatch"):
        assert (out_dir / f).exists(), f
    rm = json.loads((out_dir / "rankmap.json").read_text())
    world = rm["world_size"]
    assert [r["rank"] for r in rm["ranks"]] == list(range(world))
    assert set(rm["groups"]) >= {"tp", "pp", "dp"}
    assert len(list(csv.DictReader((out_dir / "rankmap.csv").open()))) == world
    script = (out_dir / "job.sbatch").read_text()
    assert os.access(out_dir / "job.sbatch", os.X_OK)
    assert subprocess.run(["bash", "-n", str(out_dir / "job.sbatch")]).returncode == 0
    assert f"#SBATCH --job-name={name}" in script
    assert script.rstrip().endswith("python train.py --lr 3e-4")
    hosts = {r["host"] for r in rm["ranks"]}
    assert f"#SBATCH --nodes={len(hosts)}" in script
    env = json.loads((out_dir / "env.json").read_text())
    assert len(env["ranks"]) == world and env["job"]["WORLD_SIZE"] == str(world)


def test_state_is_respected(tmp_path, capsys):
    code, out, err = run(["plan", "--inventory", str(EXAMPLES / "h100-32node-fattree.yaml"),
                          *CASES["h100-32node-fattree"], "--output-dir", str(tmp_path), "--json",
                          "--", "true"], capsys)
    assert code == 0, err
    rm = json.loads(out)["rankmap"]
    busy = {f"dgx{i:03d}" for i in list(range(1, 6)) + list(range(17, 21))} | {"dgx010",
                                                                                "dgx030"}
    partly = {"dgx006": {0, 1, 2, 3}, "dgx007": {0, 2, 5}, "dgx009": {4, 5, 6, 7},
              "dgx021": {6}}
    for r in rm["ranks"]:
        assert r["host"] not in busy
        assert r["gpu"] not in partly.get(r["host"], set())


def test_readme_command(tmp_path):
    """The README's first command, through the installed entry point."""
    exe = shutil.which("slurmtopo") or pytest.skip("slurmtopo entry point not installed")
    out_dir = tmp_path / "plan"
    p = subprocess.run([exe, "plan", "--inventory", "etc/examples/h100-4node-2leaf.yaml",
                        "--tp", "8", "--pp", "2", "--dp", "2", "--output-dir", str(out_dir),
                        "--", "python", "train.py"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "Rank placement (32 ranks on 4 nodes)" in p.stdout
    assert "job.sbatch" in p.stdout
    assert sorted(f.name for f in out_dir.iterdir()) == ["env.json", "job.sbatch",
                                                         "rankmap.csv", "rankmap.json"]


def test_json_output(tmp_path, capsys):
    code, out, err = run(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                          "--tp", "8", "--dp", "2", "--message-bytes", "dp=1GiB",
                          "--output-dir", str(tmp_path), "--json", "--", "python", "t.py"],
                         capsys)
    assert code == 0, err
    d = json.loads(out)  # nothing but JSON on stdout
    assert d["rankmap"]["world_size"] == 16
    assert set(d["cost"]) == {"plan", "naive", "bound_s"}
    assert "step_time_s" in d["cost"]["plan"] and "kinds" in d["cost"]["plan"]
    # the lower bound on the free GPUs: no placement beats it
    assert 0 < d["cost"]["bound_s"] <= d["cost"]["plan"]["step_time_s"]
    assert "--nodes=2" in d["sbatch"]["directives"]
    assert d["files"]["batch script"].endswith("job.sbatch")


def test_preview_and_json_show_every_split_and_the_bound(tmp_path, capsys):
    # two nodes with 4 free GPUs and two busy: one TP group of 8 must be
    # split, and it is split 4+4; the preview lists it, and so does --json
    state = tmp_path / "state.yaml"
    state.write_text("slurmtopo: state\nversion: 1\nnodes:\n"
                     "  - {name: gpu01, busy_gpus: \"0-3\"}\n"
                     "  - {name: gpu02, busy_gpus: \"0-3\"}\n"
                     "  - {name: gpu03, state: allocated}\n")
    args = ["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
            "--state", str(state), "--tp", "8", "--dp", "2"]
    code, text, err = run(args + ["--output-dir", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert "Groups split over hosts (1)" in text
    line = next(x.strip() for x in text.splitlines() if " split 4+4 over " in x)
    assert line.startswith("tp group ") and "gpu01" in line and "gpu02" in line
    code, out, err = run(args + ["--output-dir", str(tmp_path / "b"), "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["splits"] == [line]
    # the warning, in the preview and in --json, exactly when the plan
    # models 1.5x the bound on the free GPUs or more
    ratio = d["cost"]["plan"]["step_time_s"] / d["cost"]["bound_s"]
    far = d["far_from_bound"]
    assert (far is not None) == (ratio >= 1.5)
    assert ("the lower bound on the free GPUs" in " ".join(text.split())) == (far is not None)
    if far is not None:
        assert f"{ratio:.1f}x the lower bound on the free GPUs" in far


def test_default_output_dir_and_no_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["plan", "--inventory", str(EXAMPLES / "dgx1-v100-pair.yaml"),
                          "--tp", "8"], capsys)
    assert code == 0, err
    assert sorted(f.name for f in (tmp_path / "slurmtopo-plan").iterdir()) == \
        ["env.json", "rankmap.csv", "rankmap.json"]
    assert "job.sbatch not written" in out


def test_inventory_directory(tmp_path, capsys):
    inv_dir = tmp_path / "inv"
    inv_dir.mkdir()
    shutil.copy(EXAMPLES / "h100-4node-2leaf.yaml", inv_dir / "cluster.yaml")
    code, _, err = run(["plan", "--inventory", str(inv_dir), "--tp", "8",
                        "--output-dir", str(tmp_path / "o"), "--", "true"], capsys)
    assert code == 0, err


def test_hostile_job_name_sanitised_with_note(tmp_path, capsys):
    code, out, err = run(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                          "--tp", "8", "--job-name", "x$(touch pwned)", "--output-dir",
                          str(tmp_path), "--", "true"], capsys)
    assert code == 0, err
    assert "#SBATCH --job-name=x__touch_pwned_" in (tmp_path / "job.sbatch").read_text()
    assert "job name" in out


# --------------------------------------------------------------------------
# errors: one line, non-zero exit


def test_bad_inventory_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("slurmtopo: inventory\nversion: 1\nnodes:\n  - name: n1\n    type: nope\n")
    code, _, err = run(["plan", "--inventory", str(bad), "--tp", "2", "--", "true"], capsys)
    _one_line_error(code, err, f"{bad}:5", "nope")


def test_missing_inventory(tmp_path, capsys):
    code, _, err = run(["plan", "--inventory", str(tmp_path / "none.yaml"), "--", "true"],
                       capsys)
    _one_line_error(code, err, "no such file")


def test_impossible_layout(tmp_path, capsys):
    code, _, err = run(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                        "--tp", "8", "--pp", "2", "--dp", "4", "--output-dir", str(tmp_path),
                        "--", "true"], capsys)
    _one_line_error(code, err)
    assert not (tmp_path / "job.sbatch").exists()


def test_invalid_layout(tmp_path, capsys):
    code, _, err = run(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                        "--tp", "3", "--world", "8", "--", "true"], capsys)
    _one_line_error(code, err, "divisible")


def test_job_name_with_newline(tmp_path, capsys):
    code, _, err = run(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                        "--tp", "2", "--job-name", "a\nb", "--output-dir", str(tmp_path),
                        "--", "true"], capsys)
    _one_line_error(code, err, "newline")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args,part", [
    (["--job-name", "j" * 100_000], "job name of 100,000 characters"),
    (["--slurm-version", "99999999999999999999.1"], "not a Slurm version"),
    (["--slurm-version", "24.\u0665"], "not a Slurm version"),  # a digit, not ASCII
])
def test_unbounded_job_name_and_version_are_refused(args, part, tmp_path, capsys):
    """A 100,000-character job name went into the script (Slurm's accounting
    keeps 255 bytes of it); a 20-digit release number was taken as newer
    than any Slurm. One short line each, nothing written."""
    code, _, err = run(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                        "--tp", "2", *args, "--output-dir", str(tmp_path / "out"),
                        "--", "true"], capsys)
    _one_line_error(code, err, part)
    assert len(err) < 300 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,part", [(["--message-bytes", "dp"], "KIND=SIZE"),
                                       (["--message-bytes", "dp=lots"], "bad size"),
                                       (["--require", "tp"], "KIND=LEVEL"),
                                       (["--partition", "a;b"], "partition")])
def test_bad_options(args, part, tmp_path, capsys):
    code, _, err = run(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                        "--tp", "2", *args, "--output-dir", str(tmp_path), "--", "true"], capsys)
    _one_line_error(code, err, part)


def test_error_through_the_entry_point(tmp_path):
    """No traceback, one line on stderr, exit code from the error type."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("slurmtopo: inventory\nnodes: [\n")
    p = subprocess.run([sys.executable, "-m", "slurmtopo", "plan", "--inventory", str(bad),
                        "--", "true"], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"slurmtopo: error: {bad}")


def test_plan_turns_the_collector_back_on(tmp_path, capsys):
    """`plan` runs with the garbage collector off from the inventory's load
    on (a short command; its objects go by reference counting), and turns
    it back on when the command ends, also when the plan fails: a program
    calling main() keeps its collector."""
    import gc

    args = ["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"), "--tp", "8",
            "--dp", "2", "--output-dir", str(tmp_path / "o"), "--json"]
    assert run(args, capsys)[0] == 0
    assert gc.isenabled()
    assert run(args[:6] + ["64"] + args[7:], capsys)[0] != 0  # 512 GPUs: more than exist
    assert gc.isenabled()


def test_not_now_and_never_exit_as_docs_slurm_md_says(tmp_path, capsys):
    """Issue 32: "not now" exited 3, the code docs/slurm.md gives "never".
    Now 5 and 3, as the docs' exit-code paragraph says."""
    import re

    docs = (ROOT / "docs" / "slurm.md").read_text()
    codes = dict((m.group(2), int(m.group(1))) for m in re.finditer(
        r"(\d) (?:`plan` only: )?\"(not now|never)\"", docs))
    assert codes == {"never": 3, "not now": 5}, codes
    state = ["--state", str(EXAMPLES / "h100-32node-state.yaml")]
    inv = ["--inventory", str(EXAMPLES / "h100-32node-fattree.yaml")]
    code, out, err = run(["plan", *inv, *state, "--tp", "8", "--dp", "30", "--output-dir",
                          str(tmp_path / "a")], capsys)
    assert code == codes["not now"] and err.startswith("slurmtopo: error: not now: "), err
    code, out, err = run(["plan", *inv, "--tp", "8", "--dp", "64", "--output-dir",
                          str(tmp_path / "b")], capsys)
    assert code == codes["never"] and err.startswith("slurmtopo: error: never: "), err
