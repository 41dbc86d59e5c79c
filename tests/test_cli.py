"""The CLI hub: every error is one line on stderr with a non-zero exit."""
from __future__ import annotations

import subprocess
import sys

import pytest

from slurmtopo.cli import COMMANDS, main


def run(*args):
    return subprocess.run([sys.executable, "-m", "slurmtopo", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("args, text", [
    (("plan", "--tp", "x", "--inventory", "i.yaml"), "Invalid value for '--tp'"),
    (("nosuch",), "No such command 'nosuch'"),
    (("gres", "generate", "--reports", "/nonexistent"), "does not exist"),
])
def test_usage_errors_are_one_line(args, text):
    p = run(*args)
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmtopo: error: ") and text in lines[0]
    assert "--help')" in lines[0]


@pytest.mark.parametrize("args", [(), ("agent",), ("topology",), ("gres",),
                                  ("inventory",)])
def test_a_bare_group_prints_its_help(args):
    """`slurmtopo` (or a group) alone prints its help on stdout and exits 0,
    as git and click groups do, not the help folded into one error line
    with exit 2 (issue 32)."""
    p = run(*args)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.startswith(f"Usage: slurmtopo{''.join(' ' + a for a in args)} [OPTIONS] "
                               "COMMAND [ARGS]...\n")
    assert "\nCommands:\n" in p.stdout and "error" not in p.stdout


def test_every_registered_command_loads_and_has_help():
    for name in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0, name


def test_exit_code_set_by_a_command_reaches_the_shell(monkeypatch):
    # click returns ctx.exit(n)'s code instead of raising it when the hub runs
    # it with standalone_mode=False; the hub must still exit with n
    import types

    import click

    @click.command("fail3")
    @click.pass_context
    def fail3(ctx):
        ctx.exit(3)

    module = types.ModuleType("slurmtopo.commands.fail3")
    module.command = fail3
    monkeypatch.setitem(sys.modules, "slurmtopo.commands.fail3", module)
    monkeypatch.setitem(COMMANDS, "fail3", "fail3")
    with pytest.raises(SystemExit) as exc:
        main(["fail3"])
    assert exc.value.code == 3


@pytest.mark.parametrize("group", ["agent", "topology", "gres", "daemon", "inventory"])
def test_every_group_help_shows_whole_first_sentences(group):
    """Sub-command lists too (click cuts them at 45 characters with '...':
    `slurmtopo agent --help` showed "the inventory schema,...")."""
    import click
    from click.testing import CliRunner

    from slurmtopo.cli import cli

    out = CliRunner().invoke(cli, [group, "--help"], terminal_width=80).output
    commands = out.split("Commands:", 1)[1]
    assert "..." not in commands
    flat = " ".join(commands.split())
    grp = cli.get_command(click.Context(cli), group)
    for name in grp.list_commands(click.Context(grp)):
        sub = grp.get_command(click.Context(grp), name)
        first = " ".join(sub.help.split("\n\n")[0].split())
        assert f"{name} {first}" in flat


def test_top_level_help_shows_whole_lines():
    """Each command's whole first sentence, never cut with '...'."""
    from click.testing import CliRunner

    from slurmtopo.cli import cli

    out = CliRunner().invoke(cli, ["--help"], terminal_width=80).output
    commands = out.split("Commands:", 1)[1]
    assert "..." not in commands
    flat = " ".join(commands.split())
    assert "plan Place a job on the cluster, preview it, write the rank map and script." in flat
    assert "show Show a job's planned and actual rank map." in flat


def test_require_help_lists_kinds_and_levels():
    from click.testing import CliRunner

    from slurmtopo.cli import cli
    from slurmtopo.job.groups import GROUP_KINDS
    from slurmtopo.job.request import LEVELS

    out = " ".join(CliRunner().invoke(cli, ["plan", "--help"]).output.split())
    out = out.replace("- ", "-")  # help wrapping may break a name at its hyphen
    for name in tuple(GROUP_KINDS) + tuple(LEVELS):
        assert name in out, name


def test_shell_completion_scripts_as_the_readme_installs_them():
    """README's completion lines: each shell's script names the completion
    function for slurmtopo (click's completion, wired to the entry point)."""
    import os
    import subprocess
    import sys

    for shell, marker in (("bash", "complete -o nosort -F _slurmtopo_completion slurmtopo"),
                          ("zsh", "#compdef slurmtopo"), ("fish", "complete --no-files --command slurmtopo")):
        p = subprocess.run([sys.executable, "-m", "slurmtopo"], capture_output=True, text=True,
                           env=dict(os.environ, _SLURMTOPO_COMPLETE=f"{shell}_source"), timeout=60)
        assert p.returncode == 0, p.stderr
        assert marker in p.stdout, (shell, p.stdout[-300:])


def test_the_program_ends_without_teardown_but_with_every_output(tmp_path):
    # `python -m slurmtopo` (cli.run) ends the process at once after the
    # command: exit handlers have run, stdout is whole (a pipe, so it is
    # block-buffered), the files are written, the exit code is the command's
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "etc" / "examples"
    marker = tmp_path / "atexit-ran"
    code = ("import atexit, sys; from pathlib import Path; "
            f"atexit.register(Path({str(marker)!r}).write_text, 'yes'); "
            "sys.argv = ['slurmtopo'] + sys.argv[1:]; "
            "from slurmtopo.cli import run; run()")
    out = tmp_path / "plan"
    p = subprocess.run([sys.executable, "-c", code, "plan", "--inventory",
                        str(examples / "h100-32node-fattree.yaml"), "--tp", "8", "--dp", "4",
                        "--json", "--output-dir", str(out), "--", "python", "train.py"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    import json

    doc = json.loads(p.stdout)  # all of it, not cut at a buffer's end
    assert len(doc["rankmap"]["ranks"]) == 32
    assert sorted(f.name for f in out.iterdir()) == ["env.json", "job.sbatch", "rankmap.csv",
                                                     "rankmap.json"]
    assert marker.read_text() == "yes"
    p = subprocess.run([sys.executable, "-c", code, "plan", "--inventory",
                        str(tmp_path / "missing.yaml"), "--tp", "8"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and p.stderr.startswith("slurmtopo: error: ")


def test_every_help_summary_in_the_registry_is_what_its_command_declares():
    """`slurmtopo --help` lists the commands from cli.SUMMARIES without
    importing them; each line must stay what the command's own module says
    (its short_help or first help paragraph), or the listing drifts."""
    import click

    from slurmtopo.cli import SUMMARIES, cli
    from slurmtopo.commands.helpgroup import summary

    assert set(SUMMARIES) == set(COMMANDS)
    for name in COMMANDS:
        cmd = cli.get_command(click.Context(cli), name)
        assert not cmd.hidden, name
        assert SUMMARIES[name] == summary(cmd), name


def test_top_level_help_imports_no_command_module():
    """The point of the registry: --help stays fast because it loads none of
    the command modules (their imports sit at their module tops)."""
    code = ("import sys\nfrom slurmtopo.cli import COMMANDS, main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in COMMANDS.values() "
            "if 'slurmtopo.commands.' + m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "[]"
