"""Slurm's TRES strings, read in slurmfmt/ for every place that meets them."""
from __future__ import annotations

import pytest

from slurmtopo.simulate.trace import BadRow
from slurmtopo.simulate.trace_sacct import _tres
from slurmtopo.slurmfmt.gres_strings import tres_gpu_terms


def test_tres_terms_as_written():
    assert tres_gpu_terms("billing=8,cpu=8,gres/gpu=4,gres/gpu:h100=4,mem=64G,node=1") == (
        "1", "4", ["4"])
    assert tres_gpu_terms("cpu=2,mem=1G") == (None, None, [])
    assert tres_gpu_terms("gres/gpu:a100=2, gres/gpu:h100=6 ,node=2") == ("2", None, ["2", "6"])


@pytest.mark.parametrize("text,want", [
    ("billing=8,cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1", (4, 1)),  # untyped total wins
    ("gres/gpu:a100=2,gres/gpu:h100=6,node=2", (8, 2)),              # else the typed sum
    ("cpu=4,node=1", (0, 1)),
    ("cpu=4", (0, None)),
])
def test_sacct_reader_counts(text, want):
    assert _tres(text) == want


@pytest.mark.parametrize("text", ["gres/gpu=x", "gres/gpu:h100=-1,gres/gpu=2", "node=1e99",
                                  "gres/gpu=99999999999"])
def test_sacct_reader_refuses_bad_counts(text):
    with pytest.raises(BadRow, match="AllocTRES"):
        _tres(text)
