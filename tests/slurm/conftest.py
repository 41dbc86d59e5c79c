"""Shared helpers for the Slurm backend unit tests (no Slurm needed)."""
from __future__ import annotations


import pytest

from tests.fakes.slurm_commands import FIXTURES, SlurmCommands


@pytest.fixture
def fixture_text():
    def read(name: str) -> str:
        return (FIXTURES / name).read_text()
    return read


#: the one stand-in for Slurm's commands (tests/fakes/slurm_commands.py)
Slurm = SlurmCommands


#: what 22.05's scontrol (the recorded fixtures' version) says to --json
NO_SCONTROL_JSON = "scontrol: unrecognized option '--json'\nTry \"scontrol --help\" for more information\n"


@pytest.fixture
def slurm(tmp_path):
    """Stand-ins answering like Slurm 22.05 unless a test adds rules (a later
    rule wins): ``scontrol show nodes --json`` and ``scontrol --json show job``
    are refused as by 22.05."""
    d = tmp_path / "bin"
    d.mkdir()
    s = Slurm(d)
    s.on("scontrol show nodes --json", stderr=NO_SCONTROL_JSON, rc=1)
    s.on("scontrol --json", stderr=NO_SCONTROL_JSON, rc=1)
    return s
