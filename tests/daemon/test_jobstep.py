"""The job's training step travels in the daemon's request (``work``,
slurmtopo/daemon/jobstep.py): the daemon prices the step plan priced, for the
job's own model, on the same placement; requests without it still read;
whatever a user writes in it ends as one ProtocolError."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmtopo import api
from slurmtopo.cost.params import cost_params
from slurmtopo.daemon.protocol import PREFIX, ProtocolError, make_comment, parse_comment
from slurmtopo.daemon.scheduler import job_step_time
from slurmtopo.daemon.jobstep import MAX_MODEL_KEYS, work_from_dict, work_to_dict
from slurmtopo.placement.common import build_placement

from tests.clirun import run_cli

EXAMPLE = "etc/examples/h100-32node-fattree.yaml"
MODEL = "llama3-70b,seq_len=8192,global_batch=128,virtual_stages=5,dtype=fp8"


def test_the_daemon_prices_the_step_plan_priced(tmp_path):
    """plan --json for a job with its model, and the daemon's number for the
    request sbatch --daemon would hand it, on the same placement: one
    number (and not the default model's)."""
    knobs = ["--tp", "4", "--pp", "4", "--world", "64", "--use-distributed-optimizer"]
    code, out, err = run_cli(["plan", "--inventory", EXAMPLE, *knobs, "--model", MODEL,
                              "--output-dir", str(tmp_path / "p"), "--json"])
    assert code == 0, err
    d = json.loads(out)
    inv = api.load_cluster(EXAMPLE)
    req = api.job_request("megatron", model=MODEL, tp=4, pp=4, world=64,
                          use_distributed_optimizer=True)
    placement = build_placement(inv, req, [(r["host"], r["gpu"]) for r in d["rankmap"]["ranks"]])
    spec = parse_comment(make_comment(req))
    assert spec.request.workload == req.workload
    daemon = job_step_time(inv, placement, spec.request, cost_params(inv))
    assert daemon == pytest.approx(d["step"]["time_s"], rel=1e-12)
    assert d["step"]["tokens_per_s_per_gpu"] is not None  # the whole step, with compute
    # the request of an earlier release (no work): the default model's step
    old = parse_comment(PREFIX + json.dumps({"layout": {"tp": 4, "pp": 4, "dp": 4}},
                                            separators=(",", ":")))
    assert old.request.workload is None
    other = job_step_time(inv, placement, old.request, cost_params(inv))
    assert other is not None and other != pytest.approx(daemon, rel=0.01)


def test_every_field_round_trips():
    req = api.job_request("torchtitan", model="deepseek-v3,global_batch=512,dtype=mxfp8",
                          dp_shard=8, dp_replicate=2, ep=8, pp=4, world=64,
                          nccl_version="2.27.7",
                          overlaps={"ep_comm_overlap": True, "overlap_grad_reduce": False})
    w = req.workload
    assert w.style == "hsdp" and w.shard and w.nccl_version == (2, 27, 7)
    wire = work_to_dict(w)
    assert wire["epo"] is True and wire["ogr"] is False and "opg" not in wire
    assert work_from_dict(json.loads(json.dumps(wire))) == w
    assert work_from_dict(None) is None
    # what JSON cannot carry but a caller could hand the decoder
    for bad in (float("nan"), float("inf"), 2.5):
        with pytest.raises(ValueError, match="params"):
            work_from_dict({"model": {"layers": 80, "hidden": 8192, "params": bad}})


@pytest.mark.parametrize("work, why", [
    ([1], "work must be an object"),
    ({"fw": "jax"}, "work.fw must be one of"),
    ({"style": "zero9"}, "work.style must be one of"),
    ({"shard": -1}, "work.shard must be"),
    ({"shard": True}, "work.shard must be"),
    ({"sp": "yes"}, "work.sp must be true or false"),
    ({"ogr": 1}, "work.ogr must be true or false"),
    ({"nccl": [2, 27]}, "work.nccl must be"),
    ({"nccl": "2.27.7"}, "work.nccl must be"),
    ({"model": {}}, "work.model must be an object"),
    ({"model": {"layers": 80, "hidden": 8192, "colour": 3}}, "unknown key"),
    ({"model": {"layers": [80], "hidden": 8192, "params": 1}}, "must be a number"),
    ({"model": {"layers": 80, "hidden": 8192, "params": 1e300}}, "params"),
    ({"model": {"layers": 80, "hidden": 8192, "params": float("nan")}}, "NaN is not a number"),
    ({"model": {"layers": 10 ** 9, "hidden": 8192, "params": 1}}, "beyond any model"),
    ({"model": {"layers": 80, "hidden": 8192, "params": 1, "dtype": "x" * 99}}, "short name"),
    ({"model": {"layers": 80, "hidden": 8192, "params": 1, "dtype": "fp64"}}, "dtype"),
    ({"model": {f"k{i}": 1 for i in range(MAX_MODEL_KEYS + 1)}}, "1 to 40 model keys"),
    ({"colour": 1}, "unknown work field"),
])
def test_a_bad_work_field_is_one_protocol_error(work, why):
    text = json.dumps({"layout": {"tp": 2}, "work": work}, separators=(",", ":"),
                      allow_nan=True)
    with pytest.raises(ProtocolError, match=why) as info:
        parse_comment(PREFIX + text)
    assert "\n" not in str(info.value)


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
_values = st.recursive(_scalars, lambda c: st.lists(c, max_size=4)
                       | st.dictionaries(st.text(max_size=12), c, max_size=4), max_leaves=12)
_keys = st.sampled_from(["fw", "style", "shard", "sp", "tpo", "epo", "ogr", "opg", "nccl",
                         "model", "x"])
_model_keys = st.sampled_from(["params", "layers", "hidden", "heads", "seq_len", "dtype",
                               "experts", "top_k", "recompute", "window", "z"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(work=st.dictionaries(_keys, _values, max_size=6),
       model=st.dictionaries(_model_keys, _scalars, max_size=8))
def test_any_work_field_reads_or_is_refused(work, model):
    """Whatever a user writes in ``work``: a Workload or a ProtocolError,
    nothing else, in bounded time."""
    if model:
        work = dict(work, model=model)
    text = json.dumps({"layout": {"tp": 2}, "work": work}, separators=(",", ":"))
    try:
        spec = parse_comment(PREFIX + text)
    except ProtocolError:
        return
    assert spec.request.workload is not None


def test_an_old_request_still_reads():
    """A comment of an earlier release (no work) is read as before."""
    spec = parse_comment(PREFIX + '{"layout":{"tp":8}}')
    assert spec.request.workload is None
