"""Every `slurmtopo simulate` command line of docs/simulate.md and README.md
runs as printed, from the repository's root (a plot goes to a temporary
directory instead)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.clirun import doc_commands, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _commands():
    docs = (ROOT / "docs" / "simulate.md", ROOT / "README.md")
    return [pytest.param(argv, id=f"{i}") for i, argv in
            enumerate(doc_commands([str(d) for d in docs], "simulate"))]


COMMANDS = _commands()


def test_there_are_examples():
    assert len(COMMANDS) >= 5


@pytest.mark.parametrize("argv", COMMANDS)
def test_simulate_example_runs(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = list(argv)
    if "--plot" in argv:
        i = argv.index("--plot") + 1
        argv[i] = str(tmp_path / argv[i])
    code, out, err = run_cli(argv)
    assert code == 0, err
    assert out.strip()
