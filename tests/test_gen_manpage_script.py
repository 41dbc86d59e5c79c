"""scripts/gen-manpage.py answers --help with its help and writes nothing
(it used to rewrite the man page whatever it was given, issue 32)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen-manpage.py"
PAGE = ROOT / "docs" / "man" / "slurmtopo.1"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)


def test_help_prints_help_and_writes_nothing():
    before = (PAGE.read_bytes(), PAGE.stat().st_mtime_ns)
    p = _run("--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: scripts/gen-manpage.py")
    assert "--check" in p.stdout and "wrote" not in p.stdout
    assert (PAGE.read_bytes(), PAGE.stat().st_mtime_ns) == before
    p = _run("--no-such-option")
    assert p.returncode == 2 and "unrecognized arguments" in p.stderr
    assert (PAGE.read_bytes(), PAGE.stat().st_mtime_ns) == before


def test_check_tells_a_stale_page(tmp_path, monkeypatch):
    p = _run("--check")
    assert p.returncode == 0 and "up to date" in p.stdout
    # the same check against a page that differs, in a copy of the script's tree
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_manpage", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "docs" / "man").mkdir(parents=True)
    (tmp_path / "docs" / "man" / "slurmtopo.1").write_text("stale\n")
    monkeypatch.setattr(mod, "ROOT", str(tmp_path))
    assert mod.main(["--check"]) == 1
    assert (tmp_path / "docs" / "man" / "slurmtopo.1").read_text() == "stale\n"
