"""Shared helpers for the node agent tests: machine fixtures, fake NVML and
fake sysfs, a fake ``scontrol`` on PATH."""
from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from slurmtopo.testing.fake_pynvml import FakeNvml  # noqa: E402
from slurmtopo.testing.fake_sysfs import build_sysfs  # noqa: E402
from tests.fakes.slurm_commands import SlurmCommands  # noqa: E402

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


class FakeScontrol:
    """The agent's view of the one Slurm stand-in (tests/fakes/slurm_commands.py):
    ``scontrol`` on PATH keeping each node's drain reason; ``calls`` are
    its argv without the command name."""

    def __init__(self, tmp_path: Path, monkeypatch):
        self.commands = SlurmCommands(tmp_path / "bin")
        self.commands.keep_node_reasons()
        monkeypatch.setenv("PATH", f"{self.commands.path}{os.pathsep}{os.environ.get('PATH', '')}")

    @property
    def calls(self) -> list:
        return [c["argv"][1:] for c in self.commands.calls() if c["argv"][0] == "scontrol"]

    def set_reason(self, reason: str) -> None:
        self.commands.set_reason(reason)

    def fail(self, on: bool = True) -> None:
        if on:
            self.commands.on("scontrol", stderr="slurm_update error: Invalid node name specified\n",
                             rc=1)
        else:
            self.commands.off("scontrol")


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    return FakeScontrol(tmp_path, monkeypatch)
