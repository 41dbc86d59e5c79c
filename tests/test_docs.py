"""Every YAML example in README.md and docs/ loads as printed.

Whole documents load as what they say they are (``slurmtopo: inventory``,
``node-report``, ``state``); fragments (``nodes:``, ``fabric:``,
``cost:``) load inside an inventory of 128 HGX H100 nodes, the cluster
the examples describe. A failure names the file and line of the block.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from slurmtopo.cost import CostParams
from slurmtopo.inventory import load_inventory, parse_inventory
from slurmtopo.state import load_state

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("**/*.md"))
BASE_NODES = [{"name": "gpu[001-129]", "type": "hgx-h100-8"}]


def yaml_blocks():
    out = []
    for path in DOCS:
        text = path.read_text()
        for m in re.finditer(r"^```ya?ml\n(.*?)^```", text, re.S | re.M):
            line = text[:m.start()].count("\n") + 1
            out.append(pytest.param(path, line, m.group(1),
                                    id=f"{path.relative_to(ROOT)}:{line}"))
    return out


BLOCKS = yaml_blocks()


def test_there_are_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("path,line,body", BLOCKS)
def test_yaml_example_loads(path, line, body, tmp_path):
    where = f"{path.name}:{line}"
    doc = yaml.safe_load(body)
    assert isinstance(doc, dict), where
    kind = doc.get("slurmtopo")
    if kind == "inventory":
        inv = parse_inventory(doc, where)
        CostParams.from_inventory(inv)
        assert len(inv.nodes) > 0
    elif kind == "node-report":
        (tmp_path / "node.yaml").write_text(body)
        inv = load_inventory(str(tmp_path))
        assert len(inv.nodes) == 1
    elif kind == "state":
        inv = parse_inventory({"slurmtopo": "inventory", "version": 1, "nodes": BASE_NODES},
                              "base")
        (tmp_path / "state.yaml").write_text(body)
        state = load_state(str(tmp_path / "state.yaml"), inv)
        assert state.nodes
        if "jobs" in doc:  # slurmtopo audit --state reads them
            from slurmtopo.audit.statejobs import parse_jobs
            assert len(parse_jobs(doc, where, inv)) == len(doc["jobs"])
    elif kind == "layout-rules":
        from slurmtopo.simulate.layouts import load_rules
        (tmp_path / "rules.yaml").write_text(body)
        assert load_rules(str(tmp_path / "rules.yaml")).rules
    else:
        assert kind is None, f"{where}: unknown document kind {kind!r}"
        full = {"slurmtopo": "inventory", "version": 1, "nodes": BASE_NODES, **doc}
        inv = parse_inventory(full, where)
        CostParams.from_inventory(inv)


def shell_commands():
    """(where, argv) of every `slurmtopo ...` line in bash blocks (with
    backslash continuations joined; comments dropped)."""
    import shlex

    out = []
    for path in DOCS:
        text = path.read_text()
        for m in re.finditer(r"^```(?:bash|sh|console)?\n(.*?)^```", text, re.S | re.M):
            start = text[:m.start()].count("\n") + 2
            body = m.group(1).replace("\\\n", " ")
            for i, line in enumerate(body.splitlines()):
                line = line.strip().lstrip("$ ").strip()
                if not line.startswith("slurmtopo ") or "..." in line:
                    continue
                try:
                    words = shlex.split(line, comments=True)
                except ValueError:
                    continue
                if (len(words) < 2 or not re.match(r"^[a-z][a-z-]*$", words[1])
                        or any(w.startswith("(") for w in words[2:3])):
                    continue  # a log line (`slurmtopo bind: ...`) or a diagram
                out.append(pytest.param(words[1:], id=f"{path.relative_to(ROOT)}:{start + i}"))
    return out


@pytest.mark.parametrize("argv", shell_commands())
def test_shell_example_names_real_commands_and_options(argv):
    """Every `slurmtopo` command line printed in the docs names a command
    that exists and only options it has."""
    import click

    from slurmtopo.cli import cli

    ctx = click.Context(cli)
    cmd, rest = cli, list(argv)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(ctx, rest[0])
        assert sub is not None, f"no command {rest[0]!r} in {argv}"
        cmd, rest = sub, rest[1:]
    known = {o for p in cmd.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])}
    known |= {"-h", "--help"}
    for word in rest:
        if word == "--":
            break
        if word.startswith("-") and not re.match(r"^-\d", word):
            name = word.split("=", 1)[0]
            assert name in known, f"{name} is not an option of {cmd.name}: {argv}"
