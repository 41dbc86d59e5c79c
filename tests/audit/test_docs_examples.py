"""Every `slurmtopo audit` line in a bash block of docs/audit.md and
README.md runs as printed from the repository's root, and the table printed
in docs/audit.md is what the first one prints (the lines that need Slurm
sit in a plain block: tests/test_docs.py checks their options)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.clirun import doc_commands, run_cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "audit.md", ROOT / "README.md")


def _commands():
    return [pytest.param(argv, id=f"{i}") for i, argv in
            enumerate(doc_commands([str(d) for d in DOCS], "audit"))]


COMMANDS = _commands()


def test_there_are_examples():
    assert len(COMMANDS) >= 5


@pytest.mark.parametrize("argv", COMMANDS)
def test_audit_example_runs(argv, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli(argv)
    assert code == 0, err
    assert "multi-node GPU job" in out or out.startswith("{")


def test_the_printed_table_is_what_the_command_prints(monkeypatch):
    monkeypatch.chdir(ROOT)
    text = (ROOT / "docs" / "audit.md").read_text()
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:], []
            else:
                blocks.append((lang, "\n".join(body)))
                lang = None
        elif lang is not None:
            body.append(line)
    printed = next(b for k, b in blocks if k == "")  # the first output block
    _code, out, _err = run_cli(COMMANDS[0].values[0])
    strip = lambda s: [ln.rstrip() for ln in s.strip("\n").splitlines()]  # noqa: E731
    assert strip(out) == strip(printed)
