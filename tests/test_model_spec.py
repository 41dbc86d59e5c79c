"""The model description a step is sized from (cost/model_spec.py: ``--model``).
The step itself: tests/test_cost_step.py."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtopo.cost.model_spec import MODEL_PRESETS, parse_model
from slurmtopo.errors import LayoutError


def test_presets_and_overrides():
    assert parse_model("70b") == MODEL_PRESETS["70b"]
    assert parse_model("70B,seq=8192,dtype=fp32").seq_len == 8192
    assert parse_model("70b,dtype=fp32").value_bytes == 4
    spec = parse_model("params=7e9,layers=32,hidden=4k,mbs=2")
    assert (spec.params, spec.hidden, spec.micro_batch) == (7_000_000_000, 4000, 2)


@pytest.mark.parametrize("text,fragment", [
    ("", "empty"), ("71b", "no such preset"), ("params=7e9,layers=32", "needs hidden"),
    ("70b,seq=x", "not a number"), ("70b,seq=0", "between 1"), ("70b,dtype=int3", "dtype"),
    ("70b,colour=red", "KEY=VALUE"), ("70b,seq=1.5", "whole number"), ("70b,seq=nan", "number"),
])
def test_bad_models_are_refused_by_name(text, fragment):
    with pytest.raises(LayoutError, match=fragment):
        parse_model(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_property_garbage_models_end_in_one_error(text):
    try:
        spec = parse_model(text)
    except LayoutError as exc:
        assert "\n" not in str(exc)
    else:
        assert spec.params >= 1 and spec.layers >= 1
