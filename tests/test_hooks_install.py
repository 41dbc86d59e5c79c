"""`slurmtopo admin install-hooks`: the site's files, written all or none
with its settings, a site's own hook never overwritten without --force
(slurmtopo/hooks/install.py, slurmtopo/commands/admin.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmtopo.cli import main
from slurmtopo.hooks import install

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(["admin", "install-hooks", *map(str, args)])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_writes_the_files_and_prints_slurm_conf_lines(capsys, tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    rc, out, err = run(capsys, "--inventory", "/etc/slurmtopo/c.json", "--slurm-dir", etc,
                       "--command", "/usr/bin/slurmtopo", "--job-submit", "--plan-timeout", "3")
    assert rc == 0
    assert out.splitlines() == ["CliFilterPlugins=cli_filter/lua",
                                f"TaskProlog={etc}/slurmtopo-task-prolog.sh",
                                "JobSubmitPlugins=lua"]
    cli = (etc / "cli_filter.lua").read_text()
    assert '["command"] = "/usr/bin/slurmtopo"' in cli and '["timeout"] = 3,' in cli
    assert '["inventory"] = "/etc/slurmtopo/c.json"' in cli
    prolog = etc / "slurmtopo-task-prolog.sh"
    assert "SLURMTOPO_COMMAND=/usr/bin/slurmtopo" in prolog.read_text()
    assert oct(prolog.stat().st_mode & 0o777) == "0o755"
    assert oct((etc / "cli_filter.lua").stat().st_mode & 0o777) == "0o644"
    js = (etc / "job_submit.lua").read_text()
    assert '["--tp"] = "int",' in js and '["hold_for_daemon"] = false,' in js
    # what was written runs: Lua loads it, sh parses it
    for lua in ("lua5.1", "lua5.4"):
        for f in ("cli_filter.lua", "job_submit.lua"):
            p = subprocess.run([shutil.which(lua), "-e", "slurm={SUCCESS=0,ERROR=-1}",
                                str(etc / f)], capture_output=True, text=True)
            assert p.returncode == 0, (lua, f, p.stderr)
    assert subprocess.run(["/bin/sh", "-n", str(prolog)]).returncode == 0
    # again: the old files kept as backups
    rc, _, _ = run(capsys, "--inventory", "/etc/slurmtopo/c.json", "--slurm-dir", etc,
                   "--command", "/usr/bin/slurmtopo")
    assert rc == 0 and list(etc.glob("cli_filter.lua.*.bak"))


def test_task_prolog_costs_one_test_for_other_jobs(tmp_path):
    settings = install.HookSettings(command="/nonexistent/slurmtopo", inventory="/x.yaml")
    prolog = tmp_path / "tp.sh"
    prolog.write_text(install.render_task_prolog(settings, install.template(install.TASK_PROLOG)))
    prolog.chmod(0o755)
    p = subprocess.run([str(prolog)], capture_output=True, text=True, env={"PATH": "/bin"})
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")
    # a planned job with slurmtopo missing: still exit 0, nothing printed
    p = subprocess.run([str(prolog)], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "SLURMTOPO_PLAN": "z1:x"})
    assert (p.returncode, p.stdout) == (0, "")


def test_a_sites_own_hook_is_not_replaced(capsys, tmp_path):
    (tmp_path / "cli_filter.lua").write_text("function slurm_cli_pre_submit() end\n")
    rc, _, err = run(capsys, "--inventory", "/x.json", "--slurm-dir", tmp_path,
                     "--command", "/usr/bin/slurmtopo")
    assert rc == 2 and "was not written by slurmtopo" in err and "--force" in err
    assert (tmp_path / "cli_filter.lua").read_text().startswith("function")
    assert not (tmp_path / "slurmtopo-task-prolog.sh").exists()   # all or none
    rc, _, _ = run(capsys, "--inventory", "/x.json", "--slurm-dir", tmp_path,
                   "--command", "/usr/bin/slurmtopo", "--force")
    assert rc == 0 and install.MARK in (tmp_path / "cli_filter.lua").read_text()


@pytest.mark.parametrize("args,why", [
    (["--command", "slurmtopo"], "give an absolute path"),
    (["--command", "/usr/bin/slurmtopo", "--hold-for-daemon"], "needs --job-submit"),
])
def test_refused(capsys, tmp_path, args, why):
    rc, _, err = run(capsys, "--inventory", "/x.json", "--slurm-dir", tmp_path, *args)
    assert rc == 2 and why in err and not os.listdir(tmp_path)


def test_dry_run_writes_nothing(capsys, tmp_path):
    rc, out, _ = run(capsys, "--inventory", "/x.json", "--slurm-dir", tmp_path,
                     "--command", "/usr/bin/slurmtopo", "--dry-run")
    assert rc == 0 and f"# {tmp_path}/cli_filter.lua (mode 644)" in out
    assert not os.listdir(tmp_path)


def test_lua_string_escapes_everything():
    assert install.lua_string('a"b\\c\nd\x00') == '"a\\"b\\\\c\\010d\\000"'
    text = install.render_cli_filter(
        install.HookSettings(command='/x/"y', inventory="/i\n.yaml"),
        install.template(install.CLI_FILTER))
    p = subprocess.run([shutil.which("lua5.4"), "-"], input=text.split(
        "-- @@SLURMTOPO CONFIG END@@")[0] + "\nio.write(CONFIG.command, '|', CONFIG.inventory)",
        capture_output=True, text=True)
    assert p.stdout == '/x/"y|/i\n.yaml'


def test_json(capsys, tmp_path):
    import json

    rc, out, _ = run(capsys, "--inventory", "/x.json", "--slurm-dir", tmp_path,
                     "--command", "/usr/bin/slurmtopo", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["dry_run"] is False
    assert doc["slurm_conf"][0] == "CliFilterPlugins=cli_filter/lua"
    assert [f["path"] for f in doc["files"]] == [str(tmp_path / "cli_filter.lua"),
                                                 str(tmp_path / "slurmtopo-task-prolog.sh")]
    assert (tmp_path / "cli_filter.lua").is_file()
