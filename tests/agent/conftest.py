"""Shared helpers for the node agent tests: machine fixtures, fake NVML and
fake sysfs, a fake ``scontrol`` on PATH."""
from __future__ import annotations

import copy
import json
import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes.fake_pynvml import FakeNvml  # noqa: E402
from tests.fakes.fake_sysfs import build_sysfs  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
MACHINES = sorted(p.stem for p in (FIXTURES / "nvml").glob("*.yaml"))
REAL_SMI = sorted((FIXTURES / "smi" / "real").glob("*.txt"))


def load_machine(name: str) -> dict:
    with open(FIXTURES / "nvml" / f"{name}.yaml", encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def split(rows) -> list:
    return [r.split() for r in rows]


class Machine:
    """A fake node: fixture dict + sysfs tree + NVML fake, re-discoverable.

    Edit ``spec`` and call :meth:`rebuild` to change what sysfs shows; trees
    are built once per distinct spec (file creation is the slow part) and
    treated as read-only."""

    _trees: dict = {}

    def __init__(self, name: str, tmp_path: Path, node_name: str = "node01"):
        self.name = name
        self.spec = copy.deepcopy(load_machine(name))
        self.base = tmp_path
        self.node_name = node_name
        self.rebuild()

    def rebuild(self) -> None:
        import hashlib

        key = hashlib.sha1(json.dumps(self.spec, sort_keys=True, default=str).encode()).hexdigest()
        root = self._trees.get(key)
        if root is None or not root.exists():
            root = self.base / f"sysroot-{key[:12]}"
            root.mkdir(parents=True)
            build_sysfs(str(root), self.spec)
            self._trees[key] = root
        self.root = root

    def nvml(self) -> FakeNvml:
        return FakeNvml(self.spec)

    def discover(self):
        from slurmtopo.agent.nvml_discovery import discover

        return discover(self.nvml(), sysfs_root=str(self.root), node_name=self.node_name,
                        hostname=self.node_name)

    @property
    def expect(self) -> dict:
        return self.spec["expect"]


@pytest.fixture
def machine(tmp_path):
    def make(name: str, node_name: str = "node01") -> Machine:
        return Machine(name, tmp_path, node_name)
    return make


FAKE_SCONTROL = r'''#!{python}
"""Fake scontrol: logs its argv, keeps the node's reason in a state file."""
import json, os, sys
log = os.environ["FAKE_SCONTROL_LOG"]
state = log + ".state"
with open(log, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
reason = open(state).read() if os.path.exists(state) else ""
if os.environ.get("FAKE_SCONTROL_FAIL"):
    sys.stderr.write("slurm_update error: Invalid node name specified\n")
    sys.exit(1)
if sys.argv[1:3] == ["show", "node"]:
    print("NodeName=%s Arch=x86_64 CoresPerSocket=56" % sys.argv[3])
    print("   State=IDLE+DRAIN ThreadsPerCore=2")
    if reason:
        print("   Reason=%s [root@2026-01-01T00:00:00]" % reason)
elif sys.argv[1] == "update":
    args = dict(a.split("=", 1) for a in sys.argv[2:])
    if args.get("State") == "DRAIN":
        open(state, "w").write(args["Reason"])
    elif args.get("State") == "RESUME" and os.path.exists(state):
        os.unlink(state)
'''


class FakeScontrol:
    def __init__(self, tmp_path: Path, monkeypatch):
        bindir = tmp_path / "bin"
        bindir.mkdir(exist_ok=True)
        script = bindir / "scontrol"
        script.write_text(FAKE_SCONTROL.replace("{python}", sys.executable))
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        self.log = tmp_path / "scontrol.log"
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
        monkeypatch.setenv("FAKE_SCONTROL_LOG", str(self.log))
        self.monkeypatch = monkeypatch

    @property
    def calls(self) -> list:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def set_reason(self, reason: str) -> None:
        Path(str(self.log) + ".state").write_text(reason)

    def fail(self, on: bool = True) -> None:
        if on:
            self.monkeypatch.setenv("FAKE_SCONTROL_FAIL", "1")
        else:
            self.monkeypatch.delenv("FAKE_SCONTROL_FAIL", raising=False)


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    return FakeScontrol(tmp_path, monkeypatch)
