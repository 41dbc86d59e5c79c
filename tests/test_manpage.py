"""slurmtopo(1) stays the CLI's: the committed docs/man/slurmtopo.1 is what
slurmtopo.commands.manpage writes from the click command tree today, byte
for byte, and every command is on it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from slurmtopo.cli import cli
from slurmtopo.commands.manpage import MAN_PATH, REGENERATE, generate, render

ROOT = Path(__file__).resolve().parents[1]


def test_committed_page_is_the_generated_one():
    committed = (ROOT / MAN_PATH).read_text(encoding="utf-8")
    assert generate() == committed, (f"{MAN_PATH} is stale (a command or an option changed): "
                                     f"run `{REGENERATE}` and commit the result")


def _paths(cmd, prefix):
    yield prefix
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _paths(cmd.get_command(ctx, name), f"{prefix} {name}")


def test_every_command_and_option_is_on_the_page():
    page = generate()
    paths = list(_paths(cli, "slurmtopo"))[1:]
    assert "slurmtopo plan" in paths and "slurmtopo topology check" in paths
    for path in paths:
        assert f'.SS "{path.replace("-", chr(92) + "-")} ' in page, path
    # an option and its help, roff-escaped
    assert "\\fB\\-\\-state live|none|FILE\\fR" in page
    assert ".SH SHELL COMPLETION" in page and "_SLURMTOPO_COMPLETE=bash_source" in page


def test_roff_escapes_and_verbatim_blocks():
    @click.command(help=".leading dot and a back\\slash -x\n\n\b\nkeep\n  these lines")
    @click.option("--a-b", help="'quoted' start")
    def tool(a_b):
        pass

    group = click.Group("g", commands={"tool": tool}, help="G does things.")
    page = render(group, "1.0")
    assert "\\&.leading dot and a back\\eslash \\-x" in page
    assert ".nf\nkeep\n  these lines\n.fi" in page
    assert "\\fB\\-\\-a\\-b TEXT\\fR\n\\&'quoted' start" in page
    assert page == render(group, "1.0")  # deterministic


def test_setup_installs_the_page():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["options.data_files"]["share/man/man1"].strip() == MAN_PATH


def test_arguments_never_get_entries_of_their_own(monkeypatch):
    """click 8.5 gives arguments a help record (``.TP PATH`` with no
    text); earlier releases give none. The page lists options only, so it
    is the same bytes under either."""
    before = generate()
    monkeypatch.setattr(click.Argument, "get_help_record",
                        lambda self, ctx: (self.name.upper(), ""), raising=False)
    assert generate() == before


def test_a_context_without_the_clis_settings_does_not_change_the_page():
    """click caches a command's help option with the help names of the first
    context that asks; a bare ``click.Context(cmd)`` (tests make them) would
    cache ``--help`` alone. The page builds its own, so it stays the same.
    In a fresh interpreter: this one's commands have cached theirs already."""
    code = """
import click, sys
from slurmtopo.cli import cli
from slurmtopo.commands.manpage import generate
def walk(cmd):
    cmd.get_params(click.Context(cmd))
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(click.Context(cmd)):
            walk(cmd.get_command(click.Context(cmd), name))
walk(cli)
sys.stdout.write(generate())
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    assert p.stdout == (ROOT / MAN_PATH).read_text(encoding="utf-8")
