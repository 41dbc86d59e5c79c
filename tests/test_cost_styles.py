"""One training step's collectives per data-parallel style (cost/styles.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtopo import api
from slurmtopo.cost.styles import (MODEL_PRESETS, ModelSpec, data_parallel_style, parse_model,
                                   step_calls)
from slurmtopo.errors import LayoutError
from slurmtopo.frameworks.registry import framework_layout
from tests.clirun import run_cli

EXAMPLE = str(Path(__file__).resolve().parents[1] / "etc" / "examples" / "h100-4node-2leaf.yaml")
MODEL = ModelSpec(params=8_000_000_000, layers=32, hidden=4096, seq_len=4096)

#: bus bytes a rank moves per byte of message on a ring of n (n large):
#: an all-reduce moves twice what an all-gather or reduce-scatter moves
_WEIGHT = {"all-reduce": 2, "all-gather": 1}


def _volume(calls, what):
    return sum(_WEIGHT[c.collective] * c.message_bytes * c.calls for c in calls if c.what in what)


def _calls(framework, model=MODEL, **knobs):
    fl = framework_layout(framework, **knobs)
    return step_calls(framework, dict(fl.knobs), model)


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


def test_fsdp_moves_one_and_a_half_times_ddp():
    """ZeRO-3/FSDP: all-gather forward and backward + reduce-scatter = 3 x
    half an all-reduce of the same weights."""
    ddp = _calls("torchtitan", world=8, dp_replicate=8, dp_shard=1)
    fsdp = _calls("torchtitan", world=8, dp_shard=8)
    assert data_parallel_style("torchtitan", {"dp_shard": 8, "cp": 1, "dp_replicate": 1}) == "fsdp"
    assert _volume(fsdp, ("fsdp-shard",)) == pytest.approx(1.5 * _volume(ddp, ("dp",)), rel=1e-6)
    (shard,) = fsdp
    assert shard.kind == "dp_shard" and shard.calls == 3 * 32
    assert shard.message_bytes == 8_000_000_000 * 2 // 32


def test_zero_stages_and_the_distributed_optimizer():
    z0 = _calls("deepspeed", world=8, zero_stage=0)
    z1 = _calls("deepspeed", world=8, zero_stage=1)
    z3 = _calls("deepspeed", world=8, zero_stage=3)
    assert {c.kind for c in z0 + z1 + z3} == {"data_parallel"}
    # ZeRO-1/2: reduce-scatter + all-gather of all gradients = one all-reduce's volume
    assert _volume(z1, ("dp",)) == pytest.approx(_volume(z0, ("dp",)), rel=1e-6)
    assert [c.calls for c in z1] == [2]
    assert _volume(z3, ("fsdp-shard",)) == pytest.approx(1.5 * _volume(z0, ("dp",)), rel=1e-6)
    distopt = _calls("megatron", world=8, tp=2, use_distributed_optimizer=True)
    assert [(c.what, c.collective, c.calls) for c in distopt if c.what == "dp"] == \
        [("dp", "all-gather", 2)]
    mfsdp = _calls("megatron", world=8, tp=2, use_megatron_fsdp=True)
    assert [c.what for c in mfsdp] == ["tp", "fsdp-shard"]


def test_hsdp_adds_the_replicate_all_reduce():
    calls = {c.what: c for c in _calls("torchtitan", world=16, dp_replicate=2, dp_shard=8)}
    assert set(calls) == {"fsdp-shard", "fsdp-replicate"}
    rep = calls["fsdp-replicate"]
    assert rep.kind == "dp_replicate" and rep.collective == "all-reduce"
    assert rep.message_bytes * 8 == pytest.approx(calls["fsdp-shard"].message_bytes, abs=8)


def test_tp_ep_pp_cp_counts():
    m = ModelSpec(params=8_000_000_000, layers=32, hidden=4096, seq_len=4096, micro_batches=4,
                  top_k=2)
    calls = {c.what: c for c in _calls("torchtitan", m, world=16, dp_shard=2, tp=2, pp=2, ep=2,
                                       cp=2)}
    act = 4096 * 4096 * 2 // 2  # one micro-batch's activations, sequence split over cp
    assert (calls["tp"].calls, calls["tp"].message_bytes) == (4 * 16 * 4, act)
    assert (calls["ep"].calls, calls["ep"].message_bytes) == (4 * 16 * 4, 2 * act)
    assert (calls["pp"].calls, calls["pp"].collective) == (2 * 4, "p2p")
    assert (calls["cp"].calls, calls["cp"].message_bytes) == (3 * 16 * 4, 2 * act * 2)
    assert calls["fsdp-shard"].kind == "fsdp"  # dp_shard x cp with context parallelism


def test_ddp_buckets_per_framework():
    titan = _calls("torchtitan", world=8, dp_replicate=8, dp_shard=1)
    mega = _calls("megatron", world=8)
    grads = 8_000_000_000 * 2
    assert titan[0].calls == -(-grads // (25 * 1024 * 1024))
    assert mega[0].calls == -(-grads // (40_000_000 * 2))


def _plan(framework, **knobs):
    cluster = api.load_cluster(EXAMPLE)
    placement = api.plan_job(cluster, None, api.job_request(framework, **knobs))
    return api.step_communication(cluster, placement, "70b", framework, **knobs)


def test_priced_on_the_frameworks_groups():
    hsdp = _plan("torchtitan", world=32, dp_replicate=4, dp_shard=8)
    fsdp = _plan("torchtitan", world=32, dp_shard=32)
    by = {c.what: (t, cls) for c, t, cls in hsdp.calls}
    assert by["fsdp-shard"][1] == "NVLink"  # the shard group stays in a node
    assert by["fsdp-replicate"][1].startswith("network")
    (only,) = fsdp.calls
    assert only[2].startswith("network")
    # sharding over NVLink and replicating across puts a fraction of the
    # bytes on the network that sharding over all 32 does. (Which is faster
    # depends on the network: with eight 400G rails a node, the calibrated
    # model prices a 32-way ring that uses every rail at once below the
    # replicas' gradient all-reduce, each replica group on one rail; that is
    # what the published 4-node curves say, docs/cost-model.md.)
    def network_bytes(rep):
        return sum(_WEIGHT[c.collective] * c.message_bytes * c.calls
                   for c, _, cls in rep.calls if cls.startswith("network"))
    assert network_bytes(hsdp) < network_bytes(fsdp) / 2
    assert hsdp.step_comm_s == pytest.approx(sum(t for _, t, _ in hsdp.calls))


def test_plan_cli_model(tmp_path):
    code, out, err = run_cli(["plan", "--inventory", EXAMPLE, "--framework", "deepspeed",
                              "--world", "16", "--tp", "8", "--zero-stage", "1", "--model",
                              "70b,seq=8192", "--output-dir", str(tmp_path / "p"), "--json"])
    assert code == 0, err
    step = json.loads(out)["step"]
    assert step["style"] == "zero12" and step["model"]["seq_len"] == 8192
    assert [c["kind"] for c in step["calls"]] == ["slice_parallel", "data_parallel"]
    assert step["step_comm_s"] == pytest.approx(sum(c["time_s"] for c in step["calls"]))
    code, out, err = run_cli(["plan", "--inventory", EXAMPLE, "--tp", "8", "--world", "16",
                              "--model", "70b", "--output-dir", str(tmp_path / "q")])
    assert code == 0, err
    assert "Communication per step (megatron, ddp" in out
    code, out, err = run_cli(["plan", "--inventory", EXAMPLE, "--tp", "8", "--world", "16",
                              "--model", "huge", "--output-dir", str(tmp_path / "r")])
    assert code == 2 and err.count("\n") == 1 and "no such preset" in err
    assert not (tmp_path / "r").exists()
