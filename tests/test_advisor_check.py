"""The advisor against published layouts (bench/advisor_check.py): its first
choice is at least 90% of the best published layout of the group, by the
model it ranks with. Two groups where its search order matters: DeepSeek-V3
on 256 B200 (the published layout, PP 16 with EP 8 inside nodes, ranks low
by compute alone: it is placed for its step on Slurm's default placement)
and on 256 GB300 (EP 64 inside an NVL72 rack: Slurm's default placement
spreads it, compute alone ranks it first). The whole table:
``python -m bench.advisor_check`` (docs/cost-model.md, "The layout
advisor")."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # bench/ is not installed; plain `pytest` must find it
    sys.path.insert(0, ROOT)

from bench import advisor_check, step_fit  # noqa: E402
from slurmtopo.cost.compute import FIT  # noqa: E402

GROUPS = {"25.09-b200-deepseek-v3": ("mb-25.09-b200-deepseek-v3-fp8-256",
                                     "mb-25.09-b200-deepseek-v3-mxfp8-256"),
          "26.06-gb300-deepseek-v3": ("mb-26.06-gb300-deepseek-v3-mxfp8-256",
                                      "mb-26.06-gb300-deepseek-v3-mxfp8-256-2")}


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_the_advisor_finds_a_layout_as_good_as_the_published_one(group):
    runs = [r for r in step_fit.load_runs() if r.id in GROUPS[group]]
    assert len(runs) == 2
    rows = step_fit.evaluate(step_fit.price_all(runs), FIT, ())
    checks = advisor_check.check_all(rows)
    assert len(checks) == 1
    c = checks[0]
    assert c.advised is not None, c.error
    assert c.search >= advisor_check.WITHIN, c
    assert "advisor's first choice at least 90%" in advisor_check.report(checks)
