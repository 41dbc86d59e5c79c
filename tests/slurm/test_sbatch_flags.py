"""sbatch's own flags on `slurmtopo sbatch` and `slurmtopo plan` (issue 24):
short letters mean what they mean to sbatch, --wrap gives the command,
what the plan sets is refused with the reason, --dry-run previews and
writes nothing, `plan --state live` plans what `sbatch` submits."""
from __future__ import annotations

import os

import pytest

from tests.slurm.test_commands import INV, _ranks, onpath, run  # noqa: F401 (fixture)

DRY = ["sbatch", "--inventory", INV, "--tp", "2", "--state", "none", "--dry-run"]


def _directives(script: str):
    return [line[len("#SBATCH "):] for line in script.splitlines()
            if line.startswith("#SBATCH ")]


def test_short_flags_mean_what_they_mean_to_sbatch(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(DRY + ["-p", "gpu", "-t", "1:00:00", "-J", "myrun", "-A", "proj",
                                "-o", "slurm-%j.out", "-e", "slurm-%j.err", "-q", "high",
                                "-d", "afterok:12", "-w", "node[1-2]", "-x", "node4",
                                "--", "true"], capsys)
    assert code == 0, err
    got = _directives(out)
    for want in ("--partition=gpu", "--time=1:00:00", "--job-name=myrun", "--account=proj",
                 "--output=slurm-%j.out", "--error=slurm-%j.err", "--qos=high",
                 "--dependency=afterok:12", "--nodelist=node[1-2]", "--exclude=node4"):
        assert want in got, (want, got)
    # -o is a Slurm filename pattern now, never a directory made here
    assert os.listdir(tmp_path) == []


def test_constraint_short_flag_is_the_constraint(capsys):
    code, out, err = run(DRY + ["-C", "a100&ib", "--", "true"], capsys)
    assert code == 0, err
    assert "--constraint=a100&ib" in _directives(out)
    assert "--constraint a100&ib: no node features are known" in err


@pytest.mark.parametrize("argv, shown, why", [
    (["-N", "2"], "-N/--nodes", "the plan sets it"),
    (["-n", "4"], "-n/--ntasks", "the plan sets it"),
    (["--ntasks-per-node=2"], "--ntasks-per-node", "the plan sets it"),
    (["-G", "4"], "-G/--gpus", "the plan sets it"),
    (["--gpus-per-task=1"], "--gpus-per-task", "the plan sets it"),
    (["--gres=gpu:2"], "--gres", "the plan sets it"),
    (["-m", "block"], "-m/--distribution", "the launch line sets it"),
    (["--switches=1"], "--switches", "use --topology-request"),
    (["-F", "nodes.txt"], "-F/--nodefile", "use --nodelist"),
    (["-a", "1-3"], "-a/--array", "job arrays are not planned"),
])
def test_what_the_plan_sets_is_refused_with_the_reason(argv, shown, why, capsys):
    code, out, err = run(DRY + argv + ["--", "true"], capsys)
    assert code == 2 and out == ""
    assert f"{shown} is not a slurmtopo option: {why}" in err, err
    assert "No such option" not in err


@pytest.mark.parametrize("argv, shown, hint", [
    (["-c", "4"], "-c/--cpus-per-task", "--sbatch=--cpus-per-task=VALUE"),
    (["--cpus-per-task=4"], "-c/--cpus-per-task", "--sbatch=--cpus-per-task=VALUE"),
    (["--comment=x"], "--comment", "--sbatch=--comment=VALUE"),
    (["-H"], "-H/--hold", "--sbatch=--hold"),
])
def test_other_sbatch_options_say_how_to_pass_them(argv, shown, hint, capsys):
    """An sbatch option slurmtopo has no flag for: one line saying it is
    sbatch's and how to give it, not "No such option" with a suggestion
    of an option the plan sets (--gpus-per-task for --cpus-per-task)."""
    code, out, err = run(DRY + argv + ["--", "true"], capsys)
    assert code == 2 and out == ""
    assert f"{shown} is an sbatch option slurmtopo has no flag for: give it as {hint}" in err, err
    assert "No such option" not in err and "--gpus-per-task" not in err
    assert len(err.strip().splitlines()) == 1


def test_an_sbatch_option_that_sbatch_extras_refuse_too_gives_that_reason(capsys):
    code, _out, err = run(DRY + ["--tasks-per-node=2", "--", "true"], capsys)
    assert code == 2, err
    assert ("--tasks-per-node is not a slurmtopo option: --tasks-per-node (sbatch reads it as "
            "--ntasks-per-node) is set by the plan") in err, err
    assert "--sbatch=--tasks-per-node" not in err


def test_a_typo_is_still_no_such_option(capsys):
    code, _out, err = run(DRY + ["--tpp", "2", "--", "true"], capsys)
    assert code == 2 and "No such option '--tpp'" in err, err


def test_array_in_sbatch_extras_is_refused(capsys):
    code, _out, err = run(DRY + ["--sbatch=--array=1-3", "--", "true"], capsys)
    assert code != 0 and "--array: job arrays are not planned" in err, err
    code, _out, err = run(DRY + ["--sbatch=-a 1-3", "--", "true"], capsys)
    assert code != 0 and "job arrays are not planned" in err, err


def test_wrap_is_the_training_command(capsys):
    code, out, err = run(DRY + ["--wrap", "python train.py --lr 3e-4 > log", "--"], capsys)
    assert code == 0, err
    assert "--job-name=wrap" in _directives(out)  # sbatch's name for a --wrap job
    assert out.rstrip().endswith("/bin/sh -c 'python train.py --lr 3e-4 > log'"), out[-200:]
    code, out, err = run(DRY + ["-J", "mine", "--wrap", "true"], capsys)
    assert code == 0 and "--job-name=mine" in _directives(out), err


def test_wrap_and_a_command_are_refused_together(capsys):
    code, _out, err = run(DRY + ["--wrap", "true", "--", "python", "t.py"], capsys)
    assert code != 0 and "either with --wrap or after --" in err, err


def test_plan_output_dir_is_long_only(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _out, err = run(["plan", "--inventory", INV, "--tp", "2", "-o", "slurm-%j.out",
                           "--json", "--", "true"], capsys)
    assert code == 0, err
    # the files go to the default directory; -o became the script's --output
    assert sorted(os.listdir(tmp_path)) == ["slurmtopo-plan"]
    script = (tmp_path / "slurmtopo-plan" / "job.sbatch").read_text()
    assert "--output=slurm-%j.out" in _directives(script)


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, dirs, files in os.walk(root) for f in files + dirs)


def test_dry_run_previews_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from tests.test_compiled import _write_reports

    reports = tmp_path / "reports"
    _write_reports(reports)
    before = _tree(tmp_path)
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["sbatch", "--inventory", str(reports), "--tp", "8", "--dp", "2",
                          "--state", "none", "--dry-run", "--", "true"], capsys)
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n")
    # the preview: grid and cost table on stderr
    assert "Rank placement" in err and "Modelled communication per step" in err, err
    assert "nothing written" in err
    assert _tree(tmp_path) == before  # no run dir, no compiled inventory, no cache
    # without --dry-run the same inventory is compiled for next time (so the
    # check above could see a write)
    code, _out, err = run(["plan", "--inventory", str(reports), "--tp", "8",
                           "--output-dir", str(tmp_path / "p"), "--json"], capsys)
    assert code == 0, err
    assert ".slurmtopo-inventory.json" in os.listdir(reports)


def test_dry_run_refuses_output_dir(tmp_path, capsys):
    code, _out, err = run(DRY + ["--output-dir", str(tmp_path / "o"), "--", "true"], capsys)
    assert code != 0 and "--dry-run writes nothing" in err, err
    assert not (tmp_path / "o").exists()


def test_plan_state_live_is_what_sbatch_submits(onpath, tmp_path, capsys):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    code, out, err = run(["sbatch", "--inventory", INV, "--tp", "2", "--dp", "2", "--dry-run",
                          "--", "true"], capsys)
    assert code == 0, err
    submitted = _ranks(out)
    code, _out, err = run(["plan", "--inventory", INV, "--tp", "2", "--dp", "2", "--state",
                           "live", "--output-dir", str(tmp_path / "p"), "--json", "--", "true"],
                          capsys)
    assert code == 0, err
    assert _ranks((tmp_path / "p" / "job.sbatch").read_text()) == submitted
    # and the live state matters: on an idle cluster node1's GPUs 0-2 are used
    code, _out, err = run(["plan", "--inventory", INV, "--tp", "2", "--dp", "2",
                           "--output-dir", str(tmp_path / "q"), "--json", "--", "true"], capsys)
    assert _ranks((tmp_path / "q" / "job.sbatch").read_text()) != submitted


def test_sbatch_daemon_warns_when_no_daemon_runs(onpath, tmp_path, capsys):
    from slurmtopo.daemon.spool import SpoolLock, prepare_spool

    spool = str(tmp_path / "spool")
    prepare_spool(spool)
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("sbatch", stdout="56\n")
    argv = ["sbatch", "--inventory", INV, "--tp", "2", "--daemon", "--spool", spool, "--",
            "true"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert out == "Submitted batch job 56 (held for the placement daemon)\n"
    assert f"warning: no placement daemon is running with spool {spool}" in err
    lock = SpoolLock(spool)
    lock.acquire()
    try:
        code, out, err = run(argv, capsys)
    finally:
        lock.release()
    assert code == 0 and "no placement daemon" not in err, err
