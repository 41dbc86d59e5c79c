"""The pins CI installs and the ranges the docs state agree with setup.cfg.

constraints.txt is what CI installs (scripts/install-deps.sh), setup.cfg
what a user's pip reads, docs/dependencies.md what we promise: a
dependency added to one and not the others, or a pin outside setup.cfg's
range, fails here instead of on a user's machine.
"""
from __future__ import annotations

import configparser
import re
import runpy
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
NEWEST = runpy.run_path(str(ROOT / "scripts" / "test-newest.py"))


def _requirements():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    reqs = [line for line in cfg["options"]["install_requires"].splitlines() if line.strip()]
    extras = cfg["options.extras_require"]
    for extra in extras:
        if extra == "pyslurm":  # built against the Slurm under test (install-pyslurm.sh)
            continue
        reqs += [line for line in extras[extra].splitlines() if line.strip()]
    return [Requirement(r) for r in reqs]


def _doc_table():
    """package -> (oldest, newest) columns of docs/dependencies.md's table."""
    rows = {}
    for line in (ROOT / "docs" / "dependencies.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and not set(cells[0]) <= set("- ") and cells[0] != "package":
            name = re.sub(r"\s*\(.*\)", "", cells[0])
            rows[name] = (cells[2], cells[3])
    return rows


def test_every_dependency_is_pinned_inside_its_range():
    pins = NEWEST["read_pins"]()
    for req in _requirements():
        name = NEWEST["canonical"](req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name]), (req, pins[name])


def test_the_docs_state_the_tested_range():
    pins = NEWEST["read_pins"]()
    table = _doc_table()
    runtime = {NEWEST["canonical"](r.name): r for r in _requirements()}
    assert {"click", "PyYAML", "rich", "ClusterShell", "defusedxml"} <= set(table)
    for name, (oldest, newest) in table.items():
        for doc_name, version in zip(name.split(", "), newest.split(", ")):
            key = NEWEST["canonical"](doc_name)
            assert pins[key] == version, f"docs/dependencies.md: {doc_name} {version}, " \
                                         f"constraints.txt {pins[key]}"
        req = runtime.get(NEWEST["canonical"](name))
        if req is not None and oldest[:1].isdigit():
            # setup.cfg's lower bound is the oldest release tested
            assert f">={oldest}" in str(req.specifier), (name, oldest, str(req.specifier))


def test_pins_are_exact_and_unique(tmp_path):
    lines = [ln.split("#", 1)[0].strip()
             for ln in (ROOT / "constraints.txt").read_text().splitlines()]
    lines = [ln for ln in lines if ln]
    names = [NEWEST["canonical"](ln.split("==")[0]) for ln in lines]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+!\-]+", ln) for ln in lines), lines
    assert len(names) == len(set(names))
    (tmp_path / "c.txt").write_text("# c\nFoo_Bar==1.0  # why\n\nbaz==2\n")
    assert NEWEST["read_pins"](str(tmp_path / "c.txt")) == {"foo-bar": "1.0", "baz": "2"}


def test_newest_check_has_a_help():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "test-newest.py"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--venv" in p.stdout, p.stderr
