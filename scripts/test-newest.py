#!/usr/bin/env python3
"""Run the unit tests against the newest releases pip picks today, and
name any release that breaks them.

    python3 scripts/test-newest.py             a fresh venv in a temporary directory
    python3 scripts/test-newest.py --venv DIR  that venv (made if missing, kept)
    python3 scripts/test-newest.py -- -k man   extra pytest arguments

CI installs the releases pinned in constraints.txt, so a new upstream
release cannot turn main red by itself; this command is how we learn that
one is coming. It installs the project with its ``test`` and ``bench``
extras into the venv *without* the constraints, lists every package whose
newest release differs from its pin, and runs the unit tests
(``pytest -m "not integration"``). When some fail, it finds the release to
blame: for each package that moved it puts every other moved package back
to its pin, keeps that one at its newest release, and runs the failed tests
again. A package whose newest release alone makes them fail is named.

Exit status: 0 when the unit tests pass on the newest releases, 1 when they
fail (the culprits named on stdout), 2 when the venv could not be set up.
Needs network access to the package index (or its mirror), like pip.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONSTRAINTS = os.path.join(ROOT, "constraints.txt")
EXTRAS = "test,bench"


def canonical(name: str) -> str:
    """PEP 503's normalised name, so ``PyYAML`` and ``pyyaml`` match."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: str = CONSTRAINTS) -> Dict[str, str]:
    """``name==version`` lines of the constraints file, by canonical name."""
    pins: Dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, version = line.partition("==")
            if sep:
                pins[canonical(name)] = version.strip()
    return pins


def run(cmd: Sequence[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), text=True, **kw)


def pip_env() -> Dict[str, str]:
    """pip without the project's pins (nor a PIP_CONSTRAINT of the caller)."""
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PIP_CONSTRAINT", None)
    return env


def installed(py: str) -> Dict[str, str]:
    out = run([py, "-m", "pip", "list", "--format", "json"], capture_output=True,
              env=pip_env(), check=True).stdout
    return {canonical(d["name"]): d["version"] for d in json.loads(out)}


#: a pytest plugin that writes the node id of every failed test, one a line
PLUGIN = """
import os
def pytest_runtest_logreport(report):
    if report.failed:
        with open(os.environ["SLURMTOPO_NEWEST_FAILED"], "a", encoding="utf-8") as fh:
            fh.write(report.nodeid + "\\n")
"""


def unit_tests(py: str, work: str, extra: Sequence[str], only: Sequence[str] = ()) -> List[str]:
    """Run the unit tests (or ``only`` those node ids) in ``py``; the ids
    that failed (in any phase: setup, call or teardown)."""
    plugin_dir = os.path.join(work, "plugin")
    os.makedirs(plugin_dir, exist_ok=True)
    with open(os.path.join(plugin_dir, "newest_failed.py"), "w", encoding="utf-8") as fh:
        fh.write(PLUGIN)
    record = os.path.join(work, "failed.txt")
    open(record, "w").close()
    env = dict(os.environ, SLURMTOPO_NEWEST_FAILED=record,
               PYTHONPATH=os.pathsep.join(filter(None, [plugin_dir,
                                                        os.environ.get("PYTHONPATH")])))
    cmd = [py, "-m", "pytest", "-m", "not integration", "-q", "-p", "no:cacheprovider",
           "-p", "newest_failed", *extra, *only]
    proc = run(cmd, cwd=ROOT, env=env)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"test-newest: pytest exited {proc.returncode} (not a test failure): "
                         "see its output above")
    with open(record, encoding="utf-8") as fh:
        return list(dict.fromkeys(line.strip() for line in fh if line.strip()))


def main(argv: Sequence[str] = ()) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", help="use (and keep) this venv; default a temporary one")
    ap.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = ap.parse_args(argv)
    pins = read_pins()
    tmp = None
    venv = args.venv
    if not venv:
        tmp = tempfile.mkdtemp(prefix="slurmtopo-newest.")
        venv = os.path.join(tmp, "venv")
    try:
        py = os.path.join(venv, "bin", "python")
        if not os.path.exists(py):
            if run([sys.executable, "-m", "venv", venv]).returncode:
                print("test-newest: could not make a venv", file=sys.stderr)
                return 2
        # setuptools too: a fresh venv holds the one Python bundled, not
        # the release pip picks today (constraints.txt pins it for CI)
        print(f"test-newest: pip install --upgrade setuptools '.[{EXTRAS}]' into {venv} "
              "(no constraints)", flush=True)
        proc = run([py, "-m", "pip", "install", "-q", "--upgrade", "setuptools", f".[{EXTRAS}]"],
                   cwd=ROOT, env=pip_env())
        if proc.returncode:
            print("test-newest: pip install failed", file=sys.stderr)
            return 2
        have = installed(py)
        moved = {n: v for n, v in sorted(have.items()) if n in pins and pins[n] != v}
        print("test-newest: releases that differ from constraints.txt:")
        for n, v in moved.items():
            print(f"  {n:24} pinned {pins[n]:14} newest {v}")
        if not moved:
            print("  (none: the pins are the newest releases)")
        work = tmp or venv
        failed = unit_tests(py, work, args.pytest_args)
        if not failed:
            print("test-newest: PASSED: the unit tests pass on the newest releases")
            return 0
        print(f"test-newest: {len(failed)} unit test(s) fail on the newest releases:")
        for f in failed:
            print(f"  {f}")
        blamed = []
        for name, newest in moved.items():
            back = [f"{n}=={pins[n]}" for n in moved if n != name]
            keep = [f"{name}=={newest}"]
            run([py, "-m", "pip", "install", "-q", "--no-deps", *back, *keep], cwd=ROOT,
                env=pip_env(), check=True)
            still = unit_tests(py, work, [*args.pytest_args, "--tb=no"], failed)
            if still:
                blamed.append((name, newest, still))
        # leave the venv on the newest releases again
        run([py, "-m", "pip", "install", "-q", "--no-deps",
             *[f"{n}=={v}" for n, v in moved.items()]], cwd=ROOT, env=pip_env(), check=True)
        if blamed:
            for name, newest, still in blamed:
                print(f"test-newest: BREAKS: {name} {newest} (tested: {pins[name]}) alone "
                      f"fails {len(still)}: {', '.join(still)}")
        else:
            print("test-newest: no single new release fails them alone: several together, "
                  "or a release outside constraints.txt")
        return 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
