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
from slurmtopo.inventory.schema import load_inventory, parse_inventory
from slurmtopo.inventory.state import load_state

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


def fenced_blocks(text):
    """(language, first line number, body) of every fenced code block, the
    fences paired in order: a regex from a bare fence to the next one would
    take a closing fence for an opening one after any ```yaml block and
    read the prose between blocks instead of the next block."""
    blocks, lang, start, body = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), number + 1, []
            else:
                blocks.append((lang, start, "".join(body)))
                lang = None
        elif lang is not None:
            body.append(line + "\n")
    return blocks


#: the exit code a documented command line shows (`# exit 2` at its end)
EXPECTED_EXIT = {}


def _uncomment(line: str) -> str:
    """``line`` without its shell comment: a ``#`` that starts a word,
    outside quotes (shlex's ``comments=True`` also cuts a word such as
    ``nvcr.io#nvidia/pytorch`` at its ``#``, which the shell does not)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
            elif ch == "\\" and quote == '"':
                continue
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def shell_commands():
    """(where, argv) of every `slurmtopo ...` line in bash blocks (with
    backslash continuations joined; comments dropped)."""
    import shlex

    out = []
    for path in DOCS:
        for lang, start, body in fenced_blocks(path.read_text()):
            if lang not in ("bash", "sh", "console", ""):
                continue
            body = body.replace("\\\n", " ")
            for i, line in enumerate(body.splitlines()):
                line = line.strip().lstrip("$ ").strip()
                line = re.sub(r"\$\([^()]*\)", "SUBST", line)  # `$(hostname -s)`: one word
                if not line.startswith("slurmtopo ") or "..." in line:
                    continue
                try:
                    words = shlex.split(_uncomment(line))
                except ValueError:
                    continue
                if (len(words) < 2 or not re.match(r"^[a-z][a-z-]*$", words[1])
                        or any(w.startswith("(") for w in words[2:3])):
                    continue  # a log line (`slurmtopo bind: ...`) or a diagram
                where = f"{path.relative_to(ROOT)}:{start + i}"
                code = re.search(r"#\s*exit (\d+)\s*$", line)
                if code:  # the doc shows it failing: `... # exit 2`
                    EXPECTED_EXIT[where] = int(code.group(1))
                out.append(pytest.param(words[1:], id=where))
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


#: commands whose printed examples need a live Slurm, a GPU node, SSH or the
#: network, or that are run by their own page's test (tests/test_frameworks.py
#: runs docs/frameworks*, tests/audit/test_docs_examples.py runs `audit`);
#: `simulate` replays whole traces (a minute each on 2 cores)
NOT_RUN_HERE = {"collect", "daemon", "show", "state", "bind", "audit", "simulate"}


def runnable_examples():
    """(where, argv) of every documented `slurmtopo` line that needs only the
    checkout: its input files are under etc/ or tests/, its outputs under
    /tmp or the current directory, and it neither submits nor asks Slurm."""
    out = []
    for param in shell_commands():
        argv, = param.values
        where = param.id
        if where.startswith("docs/frameworks") or argv[0] in NOT_RUN_HERE:
            continue
        if argv[:2] == ["agent", "discover"] and not any(
                a.startswith(("--from-", "tests/")) for a in argv):
            continue  # NVML on this machine
        if argv[0] == "sbatch" and "--dry-run" not in argv:
            continue  # submits
        if any("$" in w for w in argv):
            continue  # the dev cluster's $SLURM_CONF
        words = [w for w in argv if "/" in w and not w.startswith("-")]
        if any(w.startswith("/") and not w.startswith("/tmp/") for w in words):
            continue  # the site's /etc/slurm, /var/lib/slurmtopo: not here
        if any(not w.startswith(("/tmp/", "./")) and not (ROOT / w).exists()
               for w in words if w.startswith(("etc/", "tests/"))):
            raise AssertionError(f"{where}: names a file the checkout lacks: {argv}")
        if not any(w.startswith(("etc/", "tests/")) for w in words) and argv[0] != "groups":
            continue  # a placeholder inventory (inv.yaml, cluster.yaml)
        out.append(pytest.param(argv, id=where))
    return out


RUNNABLE = runnable_examples()


def test_the_readme_quick_start_is_among_the_runnable_examples():
    ids = [p.id for p in RUNNABLE]
    assert any(i.startswith("README.md:") and "plan" in p.values[0]
               for i, p in zip(ids, RUNNABLE))
    assert len(RUNNABLE) >= 15


@pytest.mark.parametrize("argv", RUNNABLE)
def test_shell_example_runs_as_printed(argv, tmp_path, monkeypatch, request):
    """Every documented command that needs only the checkout runs, from a
    directory other than the checkout (its etc/ and tests/ paths made
    absolute, /tmp outputs moved into the test's directory), and exits 0
    unless the doc shows it failing."""
    from tests.clirun import run_cli

    def localise(word: str) -> str:
        if word.startswith(("etc/", "tests/")):
            return str(ROOT / word)
        if word.startswith("/tmp/"):
            return str(tmp_path / word[len("/tmp/"):])
        return word

    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli([localise(w) for w in argv])
    expected = 2 if argv[0] == "sbatch" and "-N" in argv else 0  # docs/sbatch.md shows the refusal
    expected = EXPECTED_EXIT.get(request.node.callspec.id, expected)
    assert code == expected, err
    if expected == 0:
        assert out or err


def test_every_launch_line_is_run_by_the_integration_tests():
    """Every documented `sbatch`/`plan` line with a training command has an
    entry in tests/doclaunch.py (which tests/integration/
    test_framework_ranks.py runs on the dev cluster, issue 32), and every
    entry is still a documented line; a line not run says why."""
    from tests.doclaunch import HOW, key, launch_lines

    found = {key(argv): where for where, argv in launch_lines()}
    assert set(found) - set(HOW) == set(), "documented launch lines the integration tests do " \
        "not run (add them to tests/doclaunch.py): " + "; ".join(
            f"{found[k]}: {k}" for k in sorted(set(found) - set(HOW)))
    assert set(HOW) - set(found) == set(), "tests/doclaunch.py entries no doc prints any more"
    for line, how in HOW.items():
        assert how in ("ranks", "submit", "plan-then-sbatch", "echo", "never", "queued",
                       "slurm-refuses", "refused") or how.startswith("not run: "), line
