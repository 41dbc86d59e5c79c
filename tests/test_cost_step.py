"""One training step, priced once for every decision (cost/step.py).

The calls of a step per data-parallel style (DDP, ZeRO-1/2, FSDP, HSDP),
TP with and without sequence parallelism, CP, EP and PP per micro-batch,
with what each may overlap; the framework's own groups found among the
planner's; and one number: the planner's choice, the placement daemon,
``simulate``, ``audit`` and the preview (``plan --json``) all report the
same step for the same job and placement.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmtopo import api
from slurmtopo.cost import cost_params
from slurmtopo.cost.step import DEFAULT_MODEL, price_step, step_calls, subgroups
from slurmtopo.cost.model_spec import ModelSpec
from slurmtopo.inventory.links import LinkClass
from slurmtopo.job.frameworks.registry import framework_layout
from slurmtopo.job.groups import Layout, build_groups
from slurmtopo.job.request import JobRequest
from slurmtopo.job.spec import build_spec
from slurmtopo.job.workload import Workload
from slurmtopo.placement.common import build_placement
from tests.clirun import run_cli

EXAMPLE = str(Path(__file__).resolve().parents[1] / "etc" / "examples" / "h100-4node-2leaf.yaml")
MODEL = ModelSpec(params=8_000_000_000, layers=32, hidden=4096, seq_len=4096)

#: bus bytes a rank moves per byte of message on a large ring: an
#: all-reduce twice what an all-gather or a reduce-scatter moves
_WEIGHT = {"all-reduce": 2, "all-gather": 1, "reduce-scatter": 1}


def _volume(calls, what=None):
    return sum(_WEIGHT[c.collective] * c.message_bytes * c.calls for c in calls
               if what is None or c.what in what)


def _calls(framework, model=MODEL, **knobs):
    spec = build_spec(framework, knobs, model=model)
    return step_calls(spec.request.layout, spec.workload)


def test_fsdp_moves_one_and_a_half_times_ddp():
    """ZeRO-3/FSDP: all-gather forward and backward + reduce-scatter = 3 x
    half an all-reduce of the same weights."""
    ddp = _calls("torchtitan", world=8, dp_replicate=8, dp_shard=1)
    fsdp = _calls("torchtitan", world=8, dp_shard=8)
    assert _volume(fsdp) == pytest.approx(1.5 * _volume(ddp), rel=1e-6)
    assert [(c.what, c.collective, c.phase, c.overlaps_with, c.calls) for c in fsdp] == [
        ("fsdp-shard", "all-gather", "forward", "forward", 32),
        ("fsdp-shard", "all-gather", "backward", "backward", 32),
        ("fsdp-shard", "reduce-scatter", "backward", "backward", 32)]
    assert {c.kind for c in fsdp} == {"dp"}  # torchtitan's dp_shard is the planner's dp
    assert fsdp[0].message_bytes == 8_000_000_000 * 2 // 32


def test_zero_stages_and_the_distributed_optimizer():
    z0 = _calls("deepspeed", world=8, zero_stage=0)
    z1 = _calls("deepspeed", world=8, zero_stage=1)
    z3 = _calls("deepspeed", world=8, zero_stage=3)
    # ZeRO-1/2: reduce-scatter + all-gather of all gradients = one all-reduce's volume
    assert _volume(z1) == pytest.approx(_volume(z0), rel=1e-6)
    assert [(c.collective, c.phase) for c in z1] == [("reduce-scatter", "backward"),
                                                     ("all-gather", "optimizer")]
    assert _volume(z3) == pytest.approx(1.5 * _volume(z0), rel=1e-6)
    # DeepSpeed overlaps the gradient reduction with ZeRO-3, not below
    assert [c.overlaps_with for c in z0] == ["none"]
    assert z3[-1].overlaps_with == "backward"
    distopt = _calls("megatron", world=8, tp=2, use_distributed_optimizer=True)
    assert [(c.what, c.collective) for c in distopt if c.what == "dp"] == \
        [("dp", "reduce-scatter"), ("dp", "all-gather")]
    mfsdp = _calls("megatron", world=8, tp=2, use_megatron_fsdp=True)
    assert {c.what for c in mfsdp} == {"tp", "fsdp-shard"}


@pytest.mark.parametrize("rep,shard,cp", [(2, 4, 1), (4, 2, 1), (2, 4, 2)])
def test_hsdp_groups_are_the_frameworks_own(rep, shard, cp):
    """HSDP's shard group is a run of consecutive ranks of each planner
    ``dp-cp`` group and its replicate group every shard-th rank: exactly
    torchtitan's own ``fsdp``/``dp_shard`` and ``dp_replicate`` groups."""
    world = rep * shard * cp * 2
    knobs = dict(world=world, dp_replicate=rep, dp_shard=shard, cp=cp, tp=2)
    spec = build_spec("torchtitan", knobs, model=MODEL)
    fl = spec.layout
    fsdp = framework_layout("torchtitan", spmd_backend="partial_dtensor", **knobs)
    calls = step_calls(spec.request.layout, spec.workload)
    by = {c.what: c for c in calls}
    assert set(by) >= {"fsdp-shard", "fsdp-replicate"}
    planner = build_groups(spec.request.layout)
    shard_groups = subgroups(planner[by["fsdp-shard"].kind], by["fsdp-shard"].part)
    rep_groups = subgroups(planner[by["fsdp-replicate"].kind], by["fsdp-replicate"].part)
    assert sorted(map(sorted, shard_groups)) == sorted(map(sorted, fsdp.groups["fsdp"]))
    assert sorted(map(sorted, rep_groups)) == sorted(map(sorted, fl.groups["dp_replicate"]))
    rep_call = by["fsdp-replicate"]
    assert rep_call.collective == "all-reduce"
    assert rep_call.message_bytes * shard * cp == pytest.approx(by["fsdp-shard"].message_bytes,
                                                                abs=shard * cp)


def test_ep_calls_count_the_stage_layers_with_experts():
    """EP's all-to-alls run in the layers with experts only, as the stage's
    expert compute counts them: past three leading dense layers
    (DeepSeek-V3's), and on every other layer (Llama 4 Maverick's)."""
    lay = Layout(ep=8, dp=8, world=8).resolved()

    def a2a(**dims):
        m = ModelSpec(params=0, layers=16, hidden=1024, heads=8, kv_heads=8, ffn=4096,
                      vocab=32000, experts=16, top_k=2, expert_ffn=1024, seq_len=4096,
                      micro_batches=4, **dims)
        return {c.phase: c.calls for c in step_calls(lay, Workload(model=m)) if c.what == "ep"}

    assert a2a() == {"forward": 2 * 16 * 4, "backward": 2 * 16 * 4}
    assert a2a(dense_layers=3) == {"forward": 2 * 13 * 4, "backward": 2 * 13 * 4}
    assert a2a(moe_every=2) == {"forward": 2 * 8 * 4, "backward": 2 * 8 * 4}


def test_pp_sends_once_a_micro_batch_and_virtual_stage():
    """Megatron's interleaved schedule sends from each of a rank's model
    chunks: v sends a micro-batch each way, where 1F1B sends one."""
    lay = Layout(pp=4, dp=2, world=8).resolved()

    def sends(vp):
        m = ModelSpec(params=0, layers=16, hidden=1024, heads=8, kv_heads=8, ffn=4096,
                      vocab=32000, seq_len=4096, micro_batches=8, virtual_stages=vp)
        return {c.phase: c.calls for c in step_calls(lay, Workload(model=m)) if c.what == "pp"}

    assert sends(1) == {"forward": 8, "backward": 8}
    assert sends(2) == {"forward": 16, "backward": 16}
    assert sends(4) == {"forward": 32, "backward": 32}


def test_tp_ep_pp_cp_counts():
    m = ModelSpec(params=8_000_000_000, layers=32, hidden=4096, seq_len=4096, micro_batches=4,
                  top_k=2)
    lay = Layout(tp=2, cp=2, pp=2, ep=2, dp=2, world=16).resolved()
    calls = step_calls(lay, Workload(model=m))
    act = 4096 * 4096 * 2 // 2  # one micro-batch's activations, the sequence split over cp
    by = {}
    for c in calls:
        by.setdefault((c.what, c.collective, c.phase), c)
    # 16 layers a stage, 4 micro-batches: 2 all-reduces a layer each pass
    assert by[("tp", "all-reduce", "forward")].calls == 2 * 16 * 4
    assert by[("tp", "all-reduce", "backward")].message_bytes == act
    assert by[("ep", "all-to-all", "forward")].calls == 2 * 16 * 4
    assert by[("ep", "all-to-all", "backward")].message_bytes == 2 * act  # top_k 2
    assert by[("pp", "p2p", "forward")].calls == 4 and by[("pp", "p2p", "backward")].calls == 4
    # K and V of the whole sequence (cp x the rank's), the rank's half of the heads (tp 2)
    assert by[("cp", "all-gather", "forward")].message_bytes == 2 * act * 2 // 2
    assert by[("cp", "reduce-scatter", "backward")].calls == 16 * 4
    assert by[("dp", "all-reduce", "backward")].kind == "dp-cp"
    # what each may overlap: TP, EP and PP are exposed unless overlapped
    assert {c.overlaps_with for c in calls if c.what in ("tp", "ep", "pp")} == {"none"}
    assert {c.overlaps_with for c in calls if c.what == "cp"} == {"forward", "backward"}
    overlapped = step_calls(lay, Workload(model=m, tp_comm_overlap=True, ep_comm_overlap=True,
                                          overlap_grad_reduce=True))
    assert {(c.phase, c.overlaps_with) for c in overlapped if c.what in ("tp", "ep", "dp")} == \
        {("forward", "forward"), ("backward", "backward")}


@dataclass(frozen=True)
class _ExpertSpec(ModelSpec):
    """A model description that names its experts, as issue 35's ModelSpec
    does (is_moe, moe_layers, experts, expert_params(), counted_params()):
    here 8 experts a layer holding 80% of the parameters."""

    experts: int = 8

    @property
    def is_moe(self) -> bool:
        return True

    @property
    def moe_layers(self) -> int:
        return self.layers

    def expert_params(self) -> float:
        return 0.8 * self.params / (self.layers * self.experts)

    def counted_params(self) -> float:
        return float(self.params)


def test_expert_gradients_reduce_over_the_expert_data_parallel_groups():
    m = _ExpertSpec(params=8_000_000_000, layers=32, hidden=4096)
    lay = Layout(tp=2, ep=4, dp=8, expert_tp=1, world=16).resolved()
    calls = step_calls(lay, Workload(model=m))
    dense = [c for c in calls if c.what == "dp"]
    expert = [c for c in calls if c.what == "expert-dp"]
    assert {c.kind for c in dense} == {"dp"} and {c.kind for c in expert} == {"expert-dp"}
    # a rank holds its tp-th of the dense 20% and its ep-th of the experts' 80%
    assert sum(c.message_bytes * c.calls for c in dense) == pytest.approx(
        0.2 * 8e9 * 2 / 2, rel=1e-6)
    assert sum(c.message_bytes * c.calls for c in expert) == pytest.approx(
        0.8 * 8e9 * 2 / 4, rel=1e-6)
    # ZeRO-1/2 (Megatron's distributed optimizer) reduce-scatters both
    z = step_calls(lay, Workload(model=m, style="zero12"))
    assert [(c.what, c.collective) for c in z if c.what in ("dp", "expert-dp")] == [
        ("dp", "reduce-scatter"), ("dp", "all-gather"),
        ("expert-dp", "reduce-scatter"), ("expert-dp", "all-gather")]
    # priced on the planner's expert-data-parallel groups (4 ranks each)
    cluster = api.load_cluster(EXAMPLE)
    req = JobRequest(Layout(tp=2, ep=4, dp=8, expert_tp=1), workload=Workload(model=m))
    step = api.price_step(cluster, api.plan_job(cluster, None, req), req)
    priced = {c.call.what: c for c in step.calls}
    assert priced["expert-dp"].size == 4 and priced["expert-dp"].count == 4
    assert priced["dp"].size == 8
    # a model that does not name its experts keeps every parameter dense
    plain = step_calls(lay, Workload(model=ModelSpec(params=8_000_000_000, layers=32,
                                                      hidden=4096)))
    assert not [c for c in plain if c.what == "expert-dp"]
    assert sum(c.message_bytes * c.calls for c in plain if c.what == "dp") == pytest.approx(
        8e9 * 2 / 2, rel=1e-6)


def test_sequence_parallel_splits_each_all_reduce():
    """With sequence parallelism TP's all-reduce is an all-gather and a
    reduce-scatter (the same bytes on a ring), and the backward pass
    gathers the input once more for the weight gradients; the pipeline
    sends 1/tp of the activations."""
    lay = Layout(tp=4, pp=2, dp=2).resolved()
    plain = step_calls(lay, Workload(model=MODEL))
    sp = step_calls(lay, Workload(model=MODEL, sequence_parallel=True))
    tp_plain = [c for c in plain if c.what == "tp"]
    tp_sp = [c for c in sp if c.what == "tp"]
    fwd = [c for c in tp_sp if c.phase == "forward"]
    assert _volume(fwd) == _volume([c for c in tp_plain if c.phase == "forward"])
    assert _volume(tp_sp) == pytest.approx(1.25 * _volume(tp_plain))
    assert {c.collective for c in tp_sp} == {"all-gather", "reduce-scatter"}
    pp_plain = next(c for c in plain if c.what == "pp")
    pp_sp = next(c for c in sp if c.what == "pp")
    assert pp_sp.message_bytes * 4 == pp_plain.message_bytes


def test_ddp_buckets_per_framework():
    titan = _calls("torchtitan", world=8, dp_replicate=8, dp_shard=1)
    mega = _calls("megatron", world=8)
    grads = 8_000_000_000 * 2
    assert titan[0].calls == -(-grads // (25 * 1024 * 1024))
    assert mega[0].calls == -(-grads // (40_000_000 * 2))
    # PyTorch DDP overlaps the backward pass; Megatron only when asked
    assert titan[0].overlaps_with == "backward" and mega[0].overlaps_with == "none"


def test_the_default_model_is_what_the_message_sizes_describe():
    from slurmtopo.cost.defaults import DEFAULT_MESSAGE_BYTES

    m = DEFAULT_MODEL
    act = m.micro_batch * m.seq_len * m.hidden * m.value_bytes
    assert act == DEFAULT_MESSAGE_BYTES["tp"] == DEFAULT_MESSAGE_BYTES["pp"]
    # a request without a workload is priced as Megatron DDP on it
    lay = Layout(tp=8, pp=2, dp=2).resolved()
    assert step_calls(lay) == step_calls(lay, Workload())


def _plan(framework, **knobs):
    cluster = api.load_cluster(EXAMPLE)
    req = api.job_request(framework, model="70b", **knobs)
    placement = api.plan_job(cluster, None, req)
    return api.price_step(cluster, placement, req)


def test_priced_on_the_frameworks_groups():
    hsdp = _plan("torchtitan", world=32, dp_replicate=4, dp_shard=8)
    fsdp = _plan("torchtitan", world=32, dp_shard=32)
    by = {c.call.what: c for c in hsdp.calls}
    assert by["fsdp-shard"].slowest is LinkClass.NVLINK  # the shard group stays in a node
    assert by["fsdp-replicate"].slowest.is_network
    assert all(c.slowest.is_network for c in fsdp.calls)
    # sharding over NVLink and replicating across puts a fraction of the
    # bytes on the network that sharding over all 32 does
    def network_bytes(step):
        return sum(_WEIGHT[c.call.collective] * c.call.message_bytes * c.call.calls
                   for c in step.calls if c.slowest.is_network)
    assert network_bytes(hsdp) < network_bytes(fsdp) / 2
    assert hsdp.comm_s == pytest.approx(sum(c.seconds for c in hsdp.calls))
    # with the model given, the step adds its compute and hides what overlaps
    assert hsdp.time_s == pytest.approx(hsdp.compute_s + hsdp.bubble_s + hsdp.exposed_comm_s)
    assert hsdp.compute_s > 0 and hsdp.exposed_comm_s <= hsdp.comm_s


def test_message_bytes_set_the_size_of_every_call_of_the_kind():
    cluster = api.load_cluster(EXAMPLE)
    req = JobRequest(Layout(tp=8, dp=2))
    pl = api.plan_job(cluster, None, req)
    small = JobRequest(Layout(tp=8, dp=2), message_bytes={"tp": 1 << 20})
    a, b = price_step(cluster, pl, req), price_step(cluster, pl, small)
    tp_a = [c for c in a.calls if c.call.kind == "tp"]
    tp_b = [c for c in b.calls if c.call.kind == "tp"]
    assert [c.call.calls for c in tp_a] == [c.call.calls for c in tp_b]
    assert {c.call.message_bytes for c in tp_b} == {1 << 20}
    assert sum(c.seconds for c in tp_b) < sum(c.seconds for c in tp_a)
    assert a.seconds_on(["dp"]) == b.seconds_on(["dp"])


def test_plan_cli_model(tmp_path):
    code, out, err = run_cli(["plan", "--inventory", EXAMPLE, "--framework", "deepspeed",
                              "--world", "16", "--tp", "8", "--zero-stage", "1", "--model",
                              "70b,seq=8192", "--output-dir", str(tmp_path / "p"), "--json"])
    assert code == 0, err
    d = json.loads(out)
    step = d["step"]
    assert step["style"] == "zero12" and step["model"]["seq_len"] == 8192
    assert step["model_given"] is True
    assert [c["kind"] for c in step["calls"]] == ["tp", "tp", "dp", "dp"]
    assert step["time_s"] == pytest.approx(sum(c["exposed_s"] for c in step["calls"])
                                           + step["compute_s"] + step["bubble_s"])
    assert step["exposed_comm_s"] == {"tp": pytest.approx(sum(
        c["exposed_s"] for c in step["calls"] if c["kind"] == "tp")), "dp": pytest.approx(sum(
            c["exposed_s"] for c in step["calls"] if c["kind"] == "dp"))}
    assert step["tokens_per_s_per_gpu"] * 16 == pytest.approx(step["tokens_per_s"], rel=1e-5)
    assert 0 < step["mfu"] < 1 and step["memory_gib_per_gpu"] > 0
    # the step is the plan's cost: the one number
    assert d["cost"]["plan"]["step_time_s"] == step["time_s"]
    assert d["cost"]["plan"]["step"] == step
    code, out, err = run_cli(["plan", "--inventory", EXAMPLE, "--tp", "8", "--world", "16",
                              "--model", "70b", "--output-dir", str(tmp_path / "q")])
    assert code == 0, err
    assert "Modelled communication per step" in out and "megatron ddp" in out
    code, out, err = run_cli(["plan", "--inventory", EXAMPLE, "--tp", "8", "--world", "16",
                              "--model", "huge", "--output-dir", str(tmp_path / "r")])
    assert code != 0 and err.count("\n") == 1 and "no such preset" in err
    assert not (tmp_path / "r").exists()


def test_the_model_changes_the_plans_choice_input(tmp_path):
    """--model is part of the request the planner prices, not a report
    after it: a bigger model's step is slower on the same placement."""
    outs = {}
    for model in ("8b", "405b"):
        code, out, err = run_cli(["plan", "--inventory", EXAMPLE, "--tp", "8", "--world", "32",
                                  "--model", model, "--output-dir", str(tmp_path / model),
                                  "--json"])
        assert code == 0, err
        outs[model] = json.loads(out)
    assert outs["405b"]["cost"]["plan"]["step_time_s"] > outs["8b"]["cost"]["plan"]["step_time_s"]


# --------------------------------------------------------------------------
# one number: the planner, the daemon, simulate, audit and the preview


def test_one_step_number_everywhere(tmp_path, monkeypatch):
    """A 16-GPU job (simulate's and audit's layout rule: TP 8 inside a node,
    DP 2 across) on the 4-node example: the preview's step (``plan
    --json``), the number the planner's choice weighed for the placement it
    kept, the daemon's, simulate's best step and audit's step of the same
    placement are one number; and audit's and the daemon's of Slurm's
    block-order placement agree too."""
    from slurmtopo.audit.placements import Auditor, RunningJob
    from slurmtopo.daemon.scheduler import job_step_time
    from slurmtopo.inventory.model import ClusterState
    from slurmtopo.plan import choice
    from slurmtopo.simulate.layouts import BUILTIN, node_size, shape_of
    from slurmtopo.simulate.runner import prepare
    from slurmtopo.simulate.trace import Trace, TraceJob

    inv = api.load_cluster(EXAMPLE)
    params = cost_params(inv)
    rules = BUILTIN["default"]
    shape = shape_of(16, None, rules, node_size(inv))
    req = shape.request()
    assert (req.layout.tp, req.layout.dp, req.gpus_per_node) == (8, 2, 8)

    # the preview: plan --json with the same layout
    code, out, err = run_cli(["plan", "--inventory", EXAMPLE, "--tp", "8", "--dp", "2",
                              "--gpus-per-node", "8", "--output-dir", str(tmp_path / "p"),
                              "--json"])
    assert code == 0, err
    d = json.loads(out)
    preview = d["cost"]["plan"]["step_time_s"]
    assert d["step"]["time_s"] == preview and d["step"]["model_given"] is False
    assign = [(r["host"], r["gpu"]) for r in d["rankmap"]["ranks"]]
    placement = build_placement(inv, req, assign)

    # the planner: the number its choice weighed for the placement it kept
    weighed = []
    real = choice.price_step

    def spy(inv_, pl, req_, params_=None):
        step = real(inv_, pl, req_, params_)
        weighed.append((tuple((s.host, s.gpu) for s in pl.slots), step.time_s))
        return step
    monkeypatch.setattr(choice, "price_step", spy)
    planned = choice.plan(inv, None, req)
    monkeypatch.undo()
    key = tuple((s.host, s.gpu) for s in planned.slots)
    assert key == tuple(assign)
    planner = [t for k, t in weighed if k == key]
    assert planner, "the planner priced the placement it kept"

    daemon = job_step_time(inv, placement, req, params)
    sim = prepare(inv, Trace(jobs=(TraceJob("1", 0.0, 60.0, 16),), source="t", format="csv",
                             rows=1), rules, 0.5)
    (job,) = sim.jobs
    auditor = Auditor(inv, rules)
    alloc = {h: tuple(range(8)) for h in list(inv.nodes)[:2]}
    audited = auditor.audit(RunningJob("7", alloc), ClusterState())
    numbers = {"preview": preview, "planner": planner[0], "daemon": daemon,
               "simulate": job.best_step, "audit": audited.step_slurmtopo_s}
    assert len(set(numbers.values())) == 1, numbers
    assert preview > 0

    # Slurm's block order on the first two nodes: audit's "today" and the daemon's
    today = build_placement(inv, req, [(h, g) for h, gs in alloc.items() for g in gs])
    assert audited.step_today_s == job_step_time(inv, today, req, params) == \
        api.price(inv, today, req).step_time_s
