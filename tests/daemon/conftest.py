"""The daemon's unit-test fixtures, over the one in-memory Slurm backend
(slurmtopo/testing/slurm_backend.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurmtopo.testing.slurm_backend import FakeSlurm, FJob  # noqa: F401  (re-exported)

QUAD8 = (Path(__file__).resolve().parents[1] / "fixtures" / "daemon" /
         "quad8-inventory.yaml").read_text()


def quad8_inventory(tmp_path):
    """4 nodes x 8 GPUs, two NVLink quads per node (0-3 on socket 0, 4-7 on
    socket 1), node[1-2] on leaf1, node[3-4] on leaf2: the dev cluster."""
    from slurmtopo.inventory.schema import load_inventory

    path = tmp_path / "inv.yaml"
    path.write_text(QUAD8)
    return load_inventory(str(path))


class Crash(BaseException):
    """Raised by a hook to simulate the daemon being killed."""


@pytest.fixture
def inv(tmp_path):
    return quad8_inventory(tmp_path)


@pytest.fixture
def slurm():
    return FakeSlurm()


@pytest.fixture
def inv_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(QUAD8)
    return str(path)


@pytest.fixture
def spool(tmp_path):
    """Where a daemon of the test keeps its spool (made by the daemon)."""
    return str(tmp_path / "spool")


@pytest.fixture
def killed():
    """The exception a hook raises to simulate the daemon being killed."""
    return Crash
