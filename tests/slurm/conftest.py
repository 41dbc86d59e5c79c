"""Shared helpers for the Slurm backend unit tests (no Slurm needed)."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@pytest.fixture
def fixture_text():
    def read(name: str) -> str:
        return (FIXTURES / name).read_text()
    return read


STANDIN = r'''#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
name = os.path.basename(sys.argv[0])
stdin = sys.stdin.read() if name == "sbatch" else None
with open(os.path.join(here, "calls.jsonl"), "a") as f:
    f.write(json.dumps({{"argv": [name] + sys.argv[1:], "stdin": stdin}}) + "\n")
rules = json.load(open(os.path.join(here, "rules.json")))
key = " ".join([name] + sys.argv[1:])
for prefix, answer in rules:
    if key.startswith(prefix):
        out = answer.get("stdout", "")
        if answer.get("file"):
            out = open(answer["file"]).read()
        sys.stdout.write(out)
        sys.stderr.write(answer.get("stderr", ""))
        sys.exit(answer.get("rc", 0))
sys.stderr.write(f"{{name}}: error: stand-in has no rule for {{key!r}}\n")
sys.exit(1)
'''


class Slurm:
    """The stand-in commands' directory: rules and the calls they saw."""

    def __init__(self, path: Path):
        self.path = path
        self.rules = []
        for name in ("sinfo", "squeue", "scontrol", "sbatch", "scancel"):
            p = path / name
            p.write_text(STANDIN.format(python=sys.executable))
            p.chmod(p.stat().st_mode | stat.S_IEXEC)
        self._save()

    def _save(self):
        (self.path / "rules.json").write_text(json.dumps(self.rules))

    def on(self, prefix, stdout="", stderr="", rc=0, file=None):
        self.rules.insert(0, (prefix, {"stdout": stdout, "stderr": stderr, "rc": rc,
                                       "file": str(FIXTURES / file) if file else None}))
        self._save()

    def calls(self):
        p = self.path / "calls.jsonl"
        return [json.loads(l) for l in p.read_text().splitlines()] if p.exists() else []

    @property
    def env(self):
        return {**os.environ, "PATH": f"{self.path}:{os.environ.get('PATH', '')}"}


#: what 22.05's scontrol (the recorded fixtures' version) says to --json
NO_SCONTROL_JSON = "scontrol: unrecognized option '--json'\nTry \"scontrol --help\" for more information\n"


@pytest.fixture
def slurm(tmp_path):
    """Stand-ins answering like Slurm 22.05 unless a test adds rules (a later
    rule wins): ``scontrol show nodes --json`` is refused as by 22.05."""
    d = tmp_path / "bin"
    d.mkdir()
    s = Slurm(d)
    s.on("scontrol show nodes --json", stderr=NO_SCONTROL_JSON, rc=1)
    return s
