"""The whole step (issue 35): the model description, FLOPs, the GPU's
compute, memory per GPU, the composition, plan --json / the preview, the
memory check, the advisor, and the fit against published training runs
(cost/model_spec.py, compute.py, memory.py, whole.py; advisor.py;
bench/step_fit.py)."""
from __future__ import annotations

import json
import os
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from slurmtopo.cost.compute import (FIT, GPU_PRESETS, Dims, gpu_figures, gemm_seconds,
                                    model_flops_per_token, stage_compute)
from slurmtopo.cost.memory import memory_finding, memory_per_gpu
from slurmtopo.cost.model_spec import MODEL_PRESETS, ModelSpec, model_with_config, parse_model
from slurmtopo.cost.whole import CommCall, compose, exposed_per_call
from slurmtopo.errors import LayoutError
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "etc" / "examples"
H100 = gpu_figures("NVIDIA H100 80GB HBM3", 81559)[0]


# ---------------------------------------------------------------------------
# the model description


@pytest.mark.parametrize("name,total,active,embedding", [
    # the model cards' totals and active parameters (billions), and whether
    # the card's active count includes the input embedding
    ("deepseek-v3", 671, 37, True), ("qwen3-30b-a3b", 30.5, 3.3, True),
    ("qwen3-235b-a22b", 235, 22, True), ("gpt-oss-120b", 116.8, 5.1, False),
    ("gpt-oss-20b", 20.9, 3.6, False),
    ("kimi-k2", 1026, 32, True), ("gpt3-175b", 175, 175, False),
    ("nemotron4-340b", 341, 341, True), ("llama4-scout-17b-16e", 109, 17, True),
    ("llama4-maverick-17b-128e", 400, 17, True),
])
def test_presets_count_the_published_parameters(name, total, active, embedding):
    s = MODEL_PRESETS[name]
    assert s.counted_params() / 1e9 == pytest.approx(total, rel=0.03)
    counted = s.active_params() + (s.vocab * s.hidden if embedding else 0)
    assert counted / 1e9 == pytest.approx(active, rel=0.08)


def test_grok_1_counts_its_published_total():
    """Grok-1: 314B parameters (xai-org/grok-1's README), 8 experts of
    32,768, the embedding shared with the output."""
    s = MODEL_PRESETS["grok-1"]
    assert s.counted_params() / 1e9 == pytest.approx(314, rel=0.01)
    assert (s.moe_layers, s.experts, s.top_k, s.tied) == (64, 8, 2, 1)


def test_dense_presets_count_what_their_cards_state():
    for name in ("llama3-8b", "llama3-70b", "llama3.1-405b", "llama2-70b", "mixtral-8x7b"):
        s = MODEL_PRESETS[name]
        assert s.counted_params() == pytest.approx(s.params, rel=0.002), name


def test_the_issues_keys_and_the_old_ones():
    s = parse_model("llama3-70b,seq_len=8192,global_batch=256,micro_batch=2,dtype=mxfp8,"
                    "virtual_stages=5,recompute=selective")
    assert (s.seq_len, s.global_batch, s.micro_batch, s.dtype, s.virtual_stages,
            s.recompute) == (8192, 256, 2, "mxfp8", 5, "selective")
    assert s.micro_batches_for(16) == 8  # 256 sequences over 16 replicas of 2
    old = parse_model("params=7e9,layers=32,hidden=4096,seq=2048,mbs=2,gas=4,top_k=2")
    assert (old.seq_len, old.micro_batch, old.micro_batches_for(8)) == (2048, 2, 4)
    assert old.counted_params() == pytest.approx(7e9, rel=0.01)  # the MLP solved from params
    moe = parse_model("layers=24,hidden=2048,heads=16,kv_heads=4,ffn=5632,vocab=32000,"
                      "experts=64,top_k=6,expert_ffn=1408,shared_experts=2")
    assert moe.is_moe and moe.active_params() < moe.counted_params() / 4
    # fp8 and its kin train with bf16 traffic
    assert parse_model("8b,dtype=fp8").value_bytes == 2
    assert parse_model("8b,dtype=fp32").value_bytes == 4


@pytest.mark.parametrize("text,fragment", [
    ("llama3-8b,top_k=9,experts=8", "top_k=9 is more than experts=8"),
    ("llama3-8b,recompute=sometimes", "recompute=sometimes"),
    ("llama3-8b,heads=30", "not a multiple of kv_heads"),
    ("layers=32,hidden=4096", "needs params (or ffn)"),
    ("llama3-8b,glu=2", "0 or 1"),
    ("llama3-8b,layers=1e6", "beyond any model"),
])
def test_inconsistent_models_are_refused_in_one_line(text, fragment):
    with pytest.raises(LayoutError, match=fragment.replace("(", r"\(").replace(")", r"\)")) \
            as exc:
        parse_model(text)
    assert "\n" not in str(exc.value)


def test_config_keys_are_a_base_that_model_overrides():
    spec = model_with_config("llama3-70b,micro_batch=4", {"seq_len": 8192, "micro_batch": 2,
                                                          "dtype": "fp8"})
    assert (spec.layers, spec.seq_len, spec.micro_batch, spec.dtype) == (80, 8192, 4, "fp8")
    assert model_with_config(None, {"seq_len": 8192}) is None  # no model described
    assert model_with_config(None, {"preset": "llama3-8b", "global_batch": 64}).layers == 32


def test_configs_give_the_model_keys():
    from slurmtopo.job.frameworks import registry

    def model_keys_from_config(framework, text, where):
        return registry.get(framework).config_model(text, where)

    def overlaps_from_config(framework, text, where):
        return registry.get(framework).config_overlaps(text, where)
    args = ("--tensor-model-parallel-size 4 --pipeline-model-parallel-size 4 --num-layers 80 "
            "--hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
            "--group-query-attention --num-query-groups 8 --seq-length 8192 "
            "--micro-batch-size 1 --global-batch-size 256 --swiglu --bf16 --fp8-format hybrid "
            "--num-layers-per-virtual-pipeline-stage 5 --recompute-granularity selective "
            "--num-experts 8 --moe-router-topk 2 --tp-comm-overlap --overlap-grad-reduce")
    keys = model_keys_from_config("megatron", args, "m.args")
    assert keys == {"layers": 80, "hidden": 8192, "ffn": 28672, "heads": 64, "kv_heads": 8,
                    "seq_len": 8192, "micro_batch": 1, "global_batch": 256,
                    "recompute": "selective", "experts": 8, "top_k": 2, "glu": 1, "tied": 1,
                    "dtype": "fp8", "virtual_stages": 4}
    assert overlaps_from_config("megatron", args, "m.args") == {
        "tp_comm_overlap": True, "overlap_grad_reduce": True}
    toml = ('[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["float8"]\n'
            '[training]\nseq_len = 8192\nlocal_batch_size = 2\n'
            '[activation_checkpoint]\nmode = "selective"\n[parallelism]\n')
    assert model_keys_from_config("torchtitan", toml, "t.toml") == {
        "preset": "llama3-8b", "seq_len": 8192, "micro_batch": 2, "dtype": "fp8",
        "recompute": "selective"}
    ds = json.dumps({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 512,
                     "bf16": {"enabled": True}, "activation_checkpointing": {"number": 1}})
    assert model_keys_from_config("deepspeed", ds, "d.json") == {
        "micro_batch": 2, "global_batch": 512, "dtype": "bf16", "recompute": "full"}
    with pytest.raises(LayoutError, match="m.args:1: --num-layers 'x'"):
        model_keys_from_config("megatron", "--num-layers x", "m.args")
    with pytest.raises(LayoutError, match="t.toml:2: .activation_checkpoint. mode"):
        model_keys_from_config("torchtitan", '[activation_checkpoint]\nmode = "most"\n',
                               "t.toml")
    # torch.compile: [compile] enable (torchtitan from 2025), [training] compile (before)
    assert model_keys_from_config("torchtitan", "[compile]\nenable = true\n",
                                  "t.toml") == {"compile": "on"}
    assert model_keys_from_config("torchtitan", "[training]\ncompile = false\n",
                                  "t.toml") == {"compile": "off"}
    # the loss compiled alone leaves the model's kernels eager
    assert model_keys_from_config("torchtitan", '[compile]\nenable = true\ncomponents = ["loss"]\n',
                                  "t.toml") == {"compile": "off"}
    with pytest.raises(LayoutError, match="t.toml:3: enable must be true or false"):
        model_keys_from_config("torchtitan", '[model]\n[compile]\nenable = "yes"\n', "t.toml")


def test_eager_kernels_are_priced_where_the_framework_runs_them():
    """torchtitan runs the norms, SwiGLU and the rotary embedding eagerly
    unless the model is compiled: the counted extra bytes (compute.eager_bytes)
    make its step slower; compile=on prices the fused kernels. Megatron-LM's
    are fused whatever the key says; a GPT-style model (LayerNorm, GELU:
    single kernels in eager PyTorch) pays nothing more."""
    from slurmtopo.cost.compute import eager_bytes
    from slurmtopo.job.frameworks.registry import get
    spec = parse_model("llama3-8b,seq_len=8192,micro_batch=2")
    dims = Dims(dp=8)

    def tokens(s, framework):
        return compose(s, dims, H100, (), "fsdp", framework).tokens_per_s_per_gpu
    eager, fused = tokens(spec, "torchtitan"), tokens(replace(spec, compile="on"), "torchtitan")
    assert eager < fused < 1.3 * eager
    assert tokens(replace(spec, compile="off"), "torchtitan") == eager
    assert tokens(replace(spec, compile="off"), "megatron") == \
        tokens(replace(spec, compile="on"), "megatron")
    # DeepSpeed's kernels are priced fused unless the job says compile=off
    assert tokens(replace(spec, compile="off"), "deepspeed") < tokens(spec, "deepspeed")
    assert [get(f).eager_kernels(c) for f in ("torchtitan", "megatron", "deepspeed")
            for c in ("", "on", "off")] == [True, False, True, False, False, False,
                                             False, False, True]
    # Llama 3 8B a token and layer, forward: two norms of 4096, SwiGLU's 14336,
    # the rotary embedding on 32 query heads and 8 key heads of 128
    assert eager_bytes(spec, 14336) == 32 * 2 * 4096 + 4 * 14336 + 16 * 40 * 128
    gpt = parse_model("layers=30,hidden=4096,heads=32,ffn=16384,glu=0,seq_len=4096")
    assert eager_bytes(gpt, 16384) == 0
    assert tokens(replace(gpt, compile="off"), "torchtitan") == \
        tokens(replace(gpt, compile="on"), "torchtitan")
    with pytest.raises(LayoutError, match="compile=maybe: on or off"):
        parse_model("llama3-8b,compile=maybe")
    # the step says so where the framework's default chose eager kernels
    eager_step = compose(spec, dims, H100, (), "fsdp", "torchtitan")
    assert eager_step.stage.eager and any("compile=on" in n for n in eager_step.notes)
    for s, fw in ((replace(spec, compile="on"), "torchtitan"), (spec, "megatron"),
                  (replace(gpt, compile="off"), "torchtitan")):
        step = compose(s, dims, H100, (), "fsdp", fw)
        assert not step.stage.eager and not step.notes, (s.compile, fw)
    code, out, err = run_cli(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                              "--framework", "torchtitan", "--world", "32", "--dp-shard", "-1",
                              "--model", "llama3-8b,seq_len=8192", "--state", "none"])
    assert code == 0, err
    assert "bf16, eager kernels," in " ".join(out.split())


# ---------------------------------------------------------------------------
# FLOPs and the GPU


def test_model_flops_are_nvidias():
    """NVIDIA's tables publish tokens/s and model TFLOP/s: their ratio is the
    FLOPs of a token they count (Megatron Bridge 25.11, DGX-H100 Llama 3 8B:
    744 TFLOP/s at 14451 tokens/s; GB300 DeepSeek-V3 without its MTP layer:
    961 at 3848)."""
    assert model_flops_per_token(parse_model("llama3-8b,seq_len=8192")) == \
        pytest.approx(744e12 / 14451, rel=0.003)
    assert model_flops_per_token(parse_model("deepseek-v3,seq_len=4096")) == \
        pytest.approx(961e12 / 3848, rel=0.01)
    # Megatron-LM r0.8 counted attention over the whole sequence
    gpt = parse_model("layers=30,hidden=4096,heads=32,ffn=16384,vocab=131072,glu=0,seq_len=4096")
    assert model_flops_per_token(gpt, causal=False) > model_flops_per_token(gpt)


def test_gpu_figures_by_model_and_by_inventory():
    assert gpu_figures("NVIDIA GB300", None)[0].peak("nvfp4")[0] == 15000e12
    a100, known = gpu_figures("NVIDIA A100-SXM4-80GB", 81920)
    assert known and a100.peak("fp8") == (312e12, "bf16")  # no fp8 tensor cores: bf16
    assert a100.memory_gib == pytest.approx(80.0)
    mystery, known = gpu_figures("Vendor X1", None)
    assert not known and mystery.name == "H100"
    from slurmtopo.cost.compute import parse_gpu_compute
    table = parse_gpu_compute({"X1": {"bf16": 1000, "fp8": 2000, "hbm_gbps": 5000}},
                              lambda msg, *a: LayoutError(msg))
    x1, known = gpu_figures("Vendor X1", None, table)
    assert known and x1.peak("fp8")[0] == 2000e12


def test_inventory_gpu_compute_is_validated_at_load(tmp_path):
    doc = (EXAMPLES / "h100-4node-2leaf.yaml").read_text()
    bad = tmp_path / "inv.yaml"
    bad.write_text(doc + "cost:\n  gpu_compute: {h100: {bf16: -1, hbm_gbps: 3350}}\n")
    code, out, err = run_cli(["plan", "--inventory", str(bad), "--tp", "8", "--world", "8",
                              "--output-dir", str(tmp_path / "p"), "--json"])
    assert code != 0 and err.count("\n") == 1 and "gpu_compute.h100.bf16" in err
    good = tmp_path / "good.yaml"
    good.write_text(doc + "cost:\n  gpu_compute: {h100: {bf16: 500, fp8: 1000, hbm_gbps: 3350}}\n")
    # matrices large enough that the peak, not the calls' fixed time, sets the pace
    model = "llama3-8b,seq_len=8192,micro_batch=4"
    code, out, err = run_cli(["plan", "--inventory", str(good), "--tp", "8", "--world", "8",
                              "--model", model, "--output-dir", str(tmp_path / "q"),
                              "--json"])
    assert code == 0, err
    slow = json.loads(out)["step"]
    code, out, err = run_cli(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                              "--tp", "8", "--world", "8", "--model", model,
                              "--output-dir", str(tmp_path / "r"), "--json"])
    fast = json.loads(out)["step"]
    assert slow["compute_s"] > 1.5 * fast["compute_s"]  # half the peak the inventory states


def test_small_per_gpu_matrices_run_slower():
    """TP splits the GEMMs: more TP, less of the peak (the same FLOPs a GPU
    group take longer than 1/tp of them); fp8 beats bf16 on big GEMMs."""
    big = gemm_seconds(8192, 8192, 8192, H100, "bf16")
    thin = gemm_seconds(8192, 8192 // 8, 8192, H100, "bf16")
    assert thin * 8 > big * 1.05
    assert gemm_seconds(8192, 8192, 8192, H100, "fp8") < 0.7 * big
    spec = parse_model("llama3-70b,seq_len=8192")
    one = stage_compute(spec, Dims(tp=1), H100).microbatch_s
    eight = stage_compute(spec, Dims(tp=8), H100).microbatch_s
    assert eight * 8 > one
    full = stage_compute(replace(spec, recompute="full"), Dims(tp=8), H100)
    assert full.recompute_s == pytest.approx(full.forward_s - dict(full.parts)["logits"] / 3)


def test_fine_grained_experts_pay_each_calls_fixed_time():
    """A rank computes the same expert FLOPs at EP 1 and EP 8 (its tokens'
    top_k copies), but at EP 1 in 128 expert GEMMs, at EP 8 in 16: the
    difference is the fixed time of 112 calls a layer, forward and backward
    (and the 112 more experts' weights read from HBM)."""
    from slurmtopo.cost.compute import FIT
    spec = parse_model("qwen3-30b-a3b,seq_len=4096,micro_batch=4")
    one = dict(stage_compute(spec, Dims(ep=1), H100).parts)["expert_gemm"]
    eight = dict(stage_compute(spec, Dims(ep=8), H100).parts)["expert_gemm"]
    calls = (128 - 16) * spec.resolved().moe_layers * 3  # forward + backward (2x)
    fixed = calls * FIT.gemm_latency_us * 1e-6
    r = spec.resolved()
    weights = (128 - 16) * r.mlp_matrices * r.hidden * r.expert_ffn * 2 * calls / 112 / 3.35e12
    assert one - eight == pytest.approx(fixed + weights, rel=0.02)


# ---------------------------------------------------------------------------
# memory


def test_memory_follows_zero_recompute_and_parallelism():
    spec = parse_model("llama3-70b,seq_len=8192,global_batch=128")
    d = Dims(tp=8, dp=8)
    ddp = memory_per_gpu(spec, d, "ddp", "megatron", 80).as_dict()
    z1 = memory_per_gpu(spec, d, "zero12", "megatron", 80).as_dict()
    fsdp = memory_per_gpu(spec, d, "fsdp", "megatron", 80).as_dict()
    assert z1["optimizer"] == pytest.approx(ddp["optimizer"] / 8)
    assert fsdp["gradients"] == pytest.approx(ddp["gradients"] / 8)
    none, sel, full = (memory_per_gpu(replace(spec, recompute=r), d, "zero12").as_dict()
                       ["activations"] for r in ("none", "selective", "full"))
    # Megatron-LM's default selective recomputation (core_attn) frees
    # nothing beside fused attention; full keeps each layer's input only
    assert none == sel > full
    cp2 = memory_per_gpu(spec, Dims(tp=8, cp=2, dp=4), "zero12").as_dict()["activations"]
    assert cp2 == pytest.approx(none / 2)
    moe = parse_model("deepseek-v3,seq_len=4096,global_batch=4096")
    e8 = memory_per_gpu(moe, Dims(pp=16, ep=8, dp=16), "zero12").as_dict()["weights"]
    e64 = memory_per_gpu(moe, Dims(pp=16, ep=64, dp=16), "zero12").as_dict()["weights"]
    assert e64 < e8 / 2



def test_megatron_recompute_modules_free_what_they_recompute():
    """Each of Megatron-LM's recompute modules frees its own tensors and
    costs its own forward again; a tensor two modules free is freed once."""
    moe = parse_model("deepseek-v3,seq_len=4096,global_batch=4096")
    d = Dims(pp=16, ep=8, dp=16)

    def act(**keys):
        rep = memory_per_gpu(replace(moe, **keys).resolved() if keys else moe, d, "zero12")
        return rep.as_dict()["activations"]

    def rec(**keys):
        s = replace(moe, **keys)
        return stage_compute(s, d, H100, selective="attention").recompute_s

    none = act()
    mla = act(recompute="selective", recompute_modules="mla_up_proj")
    moe_act = act(recompute="selective", recompute_modules="moe_act")
    both = act(recompute="selective", recompute_modules="mla_up_proj+moe_act")
    whole = act(recompute="selective", recompute_modules="moe")
    assert none > mla and none > moe_act
    assert none - both == pytest.approx((none - mla) + (none - moe_act), rel=1e-9)
    # the whole MoE layer frees the activation too: naming both frees it once
    assert act(recompute="selective", recompute_modules="moe+moe_act") == pytest.approx(whole)
    assert whole < moe_act
    assert 0 < rec(recompute="selective", recompute_modules="moe_act") \
        < rec(recompute="selective", recompute_modules="mla_up_proj") \
        < rec(recompute="selective", recompute_modules="moe")
    # modules are Megatron-LM's: torchtitan's selective recomputation refuses them
    with pytest.raises(LayoutError, match="Megatron-LM's modules"):
        memory_per_gpu(replace(moe, recompute="selective", recompute_modules="moe"), d,
                       "fsdp", "torchtitan")


def test_recompute_layers_offload_and_bf16_gradients():
    """Megatron-LM's block recomputation of some of a stage's layers, CPU
    offloading of some layers' activations (its copies cost only what they
    outlast the compute beside them) and gradients kept in bf16
    (--grad-reduce-in-bf16) as Megatron Bridge's performance recipes run."""
    spec = parse_model("llama3-70b,seq_len=8192,micro_batch=2,global_batch=256,dtype=fp8")
    d = Dims(dp=64)
    base = memory_per_gpu(spec, d, "fsdp", "megatron").as_dict()
    full = memory_per_gpu(replace(spec, recompute="full"), d, "fsdp", "megatron").as_dict()
    half = memory_per_gpu(replace(spec, recompute="full", recompute_layers=40), d, "fsdp",
                          "megatron").as_dict()
    assert full["activations"] < half["activations"] < base["activations"]
    t_full = stage_compute(replace(spec, recompute="full"), d, H100).recompute_s
    t_half = stage_compute(replace(spec, recompute="full", recompute_layers=40), d,
                           H100).recompute_s
    assert t_half == pytest.approx(t_full / 2)
    # the block method counts a model chunk's layers: with 5 virtual stages
    # of 4 layers on a stage of 20, one layer of each chunk is 5 of 20
    chunked = replace(spec, recompute="full", recompute_layers=1, virtual_stages=5)
    d4 = Dims(pp=4, dp=16, vp=5)
    assert chunked.recomputed_layers(20, 5) == 5
    assert stage_compute(chunked, d4, H100).recompute_s == pytest.approx(
        stage_compute(replace(chunked, recompute_layers=0), d4, H100).recompute_s / 4)
    off = memory_per_gpu(replace(spec, offload_layers=40), d, "fsdp", "megatron")
    assert off.as_dict()["activations"] < 0.6 * base["activations"]
    assert off.offloaded_bytes > 0
    # over Grace's C2C the copies hide behind the compute, over PCIe they do not
    gb200 = dict(GPU_PRESETS)["gb200"]
    fast = compose(replace(spec, offload_layers=40), d, gb200, [], "fsdp", "megatron")
    slow = compose(replace(spec, offload_layers=40), d, replace(gb200, name="B200"), [],
                   "fsdp", "megatron")
    kept = compose(spec, d, replace(gb200, name="B200"), [], "fsdp", "megatron")
    assert fast.offload_s == 0 < slow.offload_s
    assert slow.time_s == pytest.approx(kept.time_s + slow.offload_s)
    # Megatron-LM offloads without a pipeline and without recomputation only
    with pytest.raises(LayoutError, match="without a pipeline"):
        memory_per_gpu(replace(spec, offload_layers=4), Dims(pp=4, dp=16), "zero12")
    with pytest.raises(LayoutError, match="offload_layers"):
        parse_model("llama3-70b,offload_layers=10,recompute=full")
    z1 = memory_per_gpu(spec, Dims(tp=8, dp=8), "zero12", "megatron").as_dict()
    bf16 = memory_per_gpu(replace(spec, grad_dtype="bf16"), Dims(tp=8, dp=8), "zero12",
                          "megatron").as_dict()
    assert bf16["gradients"] == pytest.approx(z1["gradients"] / 2)


def test_dense_and_moe_layers_keep_their_own_activations():
    """Experts on every other layer (Llama 4 Maverick's pattern) with a
    dense MLP four times the active experts' width: a dense layer keeps its
    own MLP's activations and no routed copies, so the model's activations
    are the mean of an all-dense and an all-MoE model's, layer for layer;
    with leading dense layers the first pipeline stage counts them."""
    base = ("layers=8,hidden=1024,heads=8,kv_heads=8,ffn=16384,vocab=32000,experts=16,top_k=1,"
            "expert_ffn=2048,seq_len=4096,micro_batch=1,global_batch=8,recompute=none")
    d = Dims(dp=8, ep=8)

    def act(text, dims=d):
        return memory_per_gpu(parse_model(text), dims, "zero12").as_dict()["activations"]

    every = act(base)
    dense = act(base.replace("experts=16,top_k=1,expert_ffn=2048,", ""))
    half = act(base + ",moe_every=2")
    assert dense > 2 * every  # the dense MLP is the wider here
    assert half == pytest.approx((dense + every) / 2, rel=1e-9)
    # four leading dense layers: the first of two stages holds them, and
    # keeps more than the second's four MoE layers
    lead = act(base + ",dense_layers=4", Dims(dp=4, ep=4, pp=2))
    assert lead == pytest.approx(act(base.replace("experts=16,top_k=1,expert_ffn=2048,", ""),
                                     Dims(dp=4, pp=2)), rel=1e-9)
    # full recomputation holds one layer's working set: a first stage with a
    # leading dense layer holds the dense one's, the wider here
    full = base.replace("recompute=none", "recompute=full")
    assert act(full + ",dense_layers=1", Dims(dp=4, ep=4, pp=2)) > \
        act(full, Dims(dp=4, ep=4, pp=2))

def test_memory_finding_by_policy():
    spec = parse_model("llama3-70b,seq_len=8192")
    report = memory_per_gpu(spec, Dims(dp=8), "ddp", "megatron", 80)
    assert not report.fits
    assert memory_finding(report, "off") is None
    assert "does not fit" in memory_finding(report, "warn")
    with pytest.raises(LayoutError, match="--memory-check warn submits it anyway"):
        memory_finding(report, "error")
    fits = memory_per_gpu(parse_model("llama3-8b"), Dims(tp=8), "zero12", "megatron", 80)
    assert fits.fits and memory_finding(fits, "error") is None


# ---------------------------------------------------------------------------
# the composition


def test_step_is_compute_exposed_comm_and_bubble():
    spec = parse_model("llama3-70b,seq_len=8192,global_batch=64,virtual_stages=5")
    d = Dims(tp=8, pp=4, dp=2, vp=5)
    calls = [CommCall("tp", "tp", 3.0, "forward", "forward", "all-gather"),
             CommCall("dp", "dp", 0.1, "backward", "backward", "reduce-scatter"),
             CommCall("pp", "pp", 1.0, "none", "forward", "p2p")]
    step = compose(spec, d, H100, calls, "zero12")
    m = spec.micro_batches_for(2)
    assert step.micro_batches == m == 32
    assert step.bubble_s == pytest.approx(3 / 5 * step.stage.microbatch_s)
    assert step.time_s == pytest.approx(step.compute_s + step.bubble_s + step.exposed_comm_s)
    exposed = dict(step.exposed_comm)
    # hidden behind the last backward, at the price of the SMs it holds
    assert exposed["dp"] == pytest.approx(FIT.overlap_cost * 0.1)
    assert 0 < FIT.overlap_cost < 0.5
    assert exposed["pp"] == pytest.approx(1.0 / m * 3)  # interleaved: warm-up and cool-down
    assert step.tokens_per_s_per_gpu * 64 == pytest.approx(64 * 8192 / step.time_s)
    # the same calls exposed without overlap
    bare = [replace(c, overlaps_with="none") for c in calls[:2]]
    assert exposed_per_call(bare, step.stage, m, d) == [3.0, 0.1]
    # one model FLOP count, whatever the recomputation: MFU falls when it adds time
    full = compose(replace(spec, recompute="full"), d, H100, calls, "zero12")
    assert full.mfu < step.mfu and full.tokens_per_step == step.tokens_per_step


def test_plan_json_step_carries_the_whole_step(tmp_path):
    code, out, err = run_cli(["plan", "--inventory", str(EXAMPLES / "h100-32node-fattree.yaml"),
                              "--tp", "8", "--pp", "4", "--world", "64",
                              "--use-distributed-optimizer", "--model",
                              "llama3-70b,seq_len=8192,global_batch=128,virtual_stages=5",
                              "--output-dir", str(tmp_path / "p"), "--json"])
    assert code == 0, err
    d = json.loads(out)
    step = d["step"]
    for key in ("time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "memory_gib_per_gpu",
                "exposed_comm_s"):
        assert step[key] is not None, key
    assert step["tokens_per_s"] == pytest.approx(128 * 8192 / step["time_s"], rel=1e-5)
    assert step["time_s"] == pytest.approx(step["compute_s"] + step["bubble_s"]
                                           + sum(step["exposed_comm_s"].values()))
    assert 0.2 < step["mfu"] < 0.8 and step["memory_fits"] is True
    assert d["warnings"] == []
    # without a model described: the step is its communication, nothing else claimed
    code, out, err = run_cli(["plan", "--inventory", str(EXAMPLES / "h100-32node-fattree.yaml"),
                              "--tp", "8", "--world", "64", "--output-dir", str(tmp_path / "q"),
                              "--json"])
    step = json.loads(out)["step"]
    assert step["tokens_per_s"] is None and step["compute_s"] == 0


def test_preview_shows_the_step_beside_slurms_default(tmp_path):
    code, out, err = run_cli(["plan", "--inventory", str(EXAMPLES / "h100-32node-fattree.yaml"),
                              "--tp", "8", "--pp", "2", "--world", "32",
                              "--use-distributed-optimizer", "--model",
                              "llama3-70b,seq_len=8192,global_batch=64",
                              "--output-dir", str(tmp_path / "p")])
    assert code == 0, err
    for text in ("Modelled training step", "tokens/s per GPU", "MFU", "memory per GPU",
                 "The training step models", "Slurm default"):
        assert text in out, text


def test_a_layout_that_cannot_fit_is_flagged_before_submission(tmp_path):
    inv = str(EXAMPLES / "h100-4node-2leaf.yaml")
    args = ["--inventory", inv, "--tp", "8", "--world", "8", "--model", "llama3-70b,seq_len=8192"]
    code, out, err = run_cli(["plan", *args, "--output-dir", str(tmp_path / "p")])
    assert code == 0 and "warning: the layout does not fit in GPU memory" in out
    code, out, err = run_cli(["plan", *args, "--memory-check", "error",
                              "--output-dir", str(tmp_path / "q")])
    assert code != 0 and err.count("\n") == 1 and "does not fit" in err
    assert not (tmp_path / "q").exists()  # nothing written
    code, out, err = run_cli(["sbatch", *args, "--state", "none", "--dry-run", "--", "python",
                              "train.py"])
    assert code != 0 and err.count("\n") == 1 and "--memory-check warn" in err
    code, out, err = run_cli(["sbatch", *args, "--state", "none", "--dry-run",
                              "--memory-check", "off", "--", "python", "train.py"])
    assert code == 0, err
    assert "the layout does not fit" not in err  # the step sheet still says what it needs


def test_plan_reads_the_model_from_the_frameworks_config(tmp_path):
    cfg = tmp_path / "m.args"
    cfg.write_text("pretrain_gpt.py --tensor-model-parallel-size 8 --num-layers 32 "
                   "--hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
                   "--group-query-attention --num-query-groups 8 --swiglu "
                   "--untie-embeddings-and-output-weights --seq-length 8192 "
                   "--micro-batch-size 1 --global-batch-size 32 --bf16 "
                   "--use-distributed-optimizer --tp-comm-overlap --sequence-parallel\n")
    code, out, err = run_cli(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                              "--config", str(cfg), "--world", "16", "--model", "vocab=128256",
                              "--output-dir", str(tmp_path / "p"), "--json"])
    assert code == 0, err
    step = json.loads(out)["step"]
    m = step["model"]
    assert (m["layers"], m["hidden"], m["seq_len"], m["global_batch"], m["vocab"]) == \
        (32, 4096, 8192, 32, 128256)
    assert m["params"] == pytest.approx(8.03e9, rel=0.01)
    tp = [c for c in step["calls"] if c["what"] == "tp"]
    assert {c["collective"] for c in tp} == {"all-gather", "reduce-scatter"}  # --sequence-parallel
    assert all(c["overlaps_with"] != "none" for c in tp)  # --tp-comm-overlap


# ---------------------------------------------------------------------------
# the advisor


def test_advisor_ranks_fitting_layouts_and_its_plan_lines_run(tmp_path, monkeypatch):
    inv = str(EXAMPLES / "h100-32node-fattree.yaml")
    code, out, err = run_cli(["advise", "--inventory", inv, "--model",
                              "llama3-70b,seq_len=8192,global_batch=128", "--gpus", "64",
                              "--top", "3", "--json"])
    assert code == 0, err
    a = json.loads(out)
    layouts = a["layouts"]
    assert len(layouts) == 3 and a["fitting"] <= a["considered"]
    rates = [x["tokens_per_s_per_gpu"] for x in layouts]
    assert rates == sorted(rates, reverse=True)
    assert all(x["memory_gib_per_gpu"] <= a["gpu_memory_gib"] for x in layouts)
    assert all(x["tp"] * x["pp"] * x["cp"] * x["dp"] == 64 for x in layouts)
    monkeypatch.chdir(tmp_path)
    for x in layouts:
        argv = shlex.split(x["plan"])
        assert argv[:2] == ["slurmtopo", "plan"]
        code, out, err = run_cli(argv[1:] + ["--json"])
        assert code == 0, err
        step = json.loads(out)["step"]
        assert step["tokens_per_s_per_gpu"] == pytest.approx(x["tokens_per_s_per_gpu"],
                                                              rel=1e-4)
        assert step["memory_fits"] is True
    assert os.path.isdir(tmp_path / "slurmtopo-plan")
    # the table: each ready line whole on one line at any width (a command
    # broken over two lines would paste as two), the same as --json's
    args = ["advise", "--inventory", inv, "--model", "llama3-8b,global_batch=64", "--gpus", "16"]
    code, out, err = run_cli(args + ["--json"])
    assert code == 0, err
    plans = [x["plan"] for x in json.loads(out)["layouts"]]
    assert len(plans) >= 2 and all(len(p) > 80 for p in plans)
    for width in ("80", "40"):
        monkeypatch.setenv("COLUMNS", width)
        code, out, err = run_cli(args)
        assert code == 0, err
        lines = out.splitlines()
        ready = lines[lines.index("Ready to plan:") + 1:][:len(plans)]
        assert ready == [f"  {i}. {p}" for i, p in enumerate(plans, 1)], width
        assert all(len(ln) <= int(width) for ln in lines[:lines.index("Ready to plan:")])


def test_advisor_lays_out_for_torchtitan_and_deepspeed_too(tmp_path, monkeypatch):
    """FSDP and HSDP (torchtitan) and ZeRO-1/3 (DeepSpeed) are ranked beside
    Megatron's layouts, each with its own plan line that prices the same."""
    from slurmtopo.advisor import candidates
    from slurmtopo.cost.model_spec import parse_model
    spec = parse_model("llama3-8b,seq_len=8192,global_batch=256")
    cands = candidates(spec, 32, frameworks=("megatron", "torchtitan", "deepspeed"))
    kinds = {(c.framework, c.optimizer().split()[0]) for c in cands}
    assert kinds == {("megatron", "distributed"), ("megatron", "FSDP"), ("torchtitan", "FSDP"),
                     ("torchtitan", "HSDP"), ("deepspeed", "ZeRO-1"), ("deepspeed", "ZeRO-3")}
    # DeepSpeed: no context parallelism, no interleaving, ZeRO-3 without a pipeline
    ds = [c for c in cands if c.framework == "deepspeed"]
    assert all(c.cp == 1 and c.vp == 1 for c in ds)
    assert all(c.pp == 1 for c in ds if c.zero == 3)
    # HSDP shard groups: a node's or two nodes' data-parallel ranks
    assert {c.shard * c.tp * c.cp for c in cands if c.style == "hsdp"} <= {8, 16}
    inv = str(EXAMPLES / "h100-32node-fattree.yaml")
    code, out, err = run_cli(["advise", "--inventory", inv, "--model",
                              "llama3-8b,seq_len=8192,global_batch=256", "--gpus", "32",
                              "--framework", "torchtitan", "--framework", "deepspeed",
                              "--top", "40", "--json"])
    assert code == 0, err
    layouts = json.loads(out)["layouts"]
    assert {x["framework"] for x in layouts} == {"torchtitan", "deepspeed"}
    # torchtitan's layouts compiled, as its published runs train
    assert all((x.get("compile") == "on") == ("compile=on" in x["plan"])
               == (x["framework"] == "torchtitan") for x in layouts)
    monkeypatch.chdir(tmp_path)
    firsts = {}
    for x in layouts:
        firsts.setdefault((x["framework"], x["optimizer"].split()[0]), x)
    assert len(firsts) == 4
    for x in firsts.values():
        code, out, err = run_cli(shlex.split(x["plan"])[1:] + ["--json"])
        assert code == 0, err
        assert json.loads(out)["step"]["tokens_per_s_per_gpu"] == pytest.approx(
            x["tokens_per_s_per_gpu"], rel=1e-4)


def test_advisor_proposes_only_layouts_the_framework_accepts():
    """Every candidate of a MoE model is one its framework lays out (HSDP
    shard groups with expert parallelism inside dp_shard x cp x tp, as
    torchtitan requires), so none is dropped as refused after it took one
    of the places the advisor prices on the cluster."""
    from slurmtopo import api
    from slurmtopo.advisor import candidates
    from slurmtopo.cost.model_spec import parse_model
    spec = parse_model("llama4-maverick,seq_len=8192,global_batch=1024,dtype=fp8")
    cands = candidates(spec, 128, frameworks=("megatron", "torchtitan", "deepspeed"),
                       node_gpus=8)
    hsdp = [c for c in cands if c.style == "hsdp"]
    assert hsdp and any(c.ep > 1 for c in hsdp)
    for c in cands:
        api.job_request(c.framework, **c.knobs(128))  # raises LayoutError if refused
    code, out, err = run_cli(["advise", "--inventory", str(EXAMPLES / "h100-32node-fattree.yaml"),
                              "--model", "llama4-maverick,seq_len=8192,global_batch=1024,dtype=fp8",
                              "--gpus", "128", "--top", "3", "--json"])
    assert code == 0, err
    assert not [n for n in json.loads(out)["notes"] if "not placed" in n]


def test_advisor_turns_on_the_overlaps_megatron_runs_with(tmp_path):
    """Megatron-LM layouts are priced, and their plan lines written, with
    the overlaps its performance recipes turn on: the gradient reduction
    and the parameter gather always, sequence parallelism and TP overlap
    with TP, EP's overlap where Megatron-Core accepts it (no pipeline or an
    interleaved one, no full recomputation). The plan line prices the same."""
    from slurmtopo.advisor import candidates
    from slurmtopo.cost.model_spec import parse_model
    spec = parse_model("mixtral-8x7b,seq_len=4096,global_batch=256")
    seen = set()
    for c in candidates(spec, 64, frameworks=("megatron",), node_gpus=8):
        k = c.knobs(64)
        assert k["overlap_grad_reduce"] is True and k["overlap_param_gather"] is True
        assert bool(k.get("sequence_parallel")) == bool(k.get("tp_comm_overlap")) == (c.tp > 1)
        ep_ok = c.ep > 1 and (c.pp == 1 or c.vp > 1) and c.recompute != "full"
        assert bool(k.get("overlap_moe_expert_parallel_comm")) == ep_ok
        seen.add((c.tp > 1, ep_ok))
    assert seen == {(False, False), (False, True), (True, False), (True, True)}
    code, out, err = run_cli(["advise", "--inventory", str(EXAMPLES / "h100-32node-fattree.yaml"),
                              "--model", "llama3-70b,dtype=fp8,global_batch=256,seq_len=8192",
                              "--gpus", "64", "--framework", "megatron", "--top", "1", "--json"])
    assert code == 0, err
    first = json.loads(out)["layouts"][0]
    assert first["tp"] > 1
    for flag in ("--sequence-parallel", "--tp-comm-overlap", "--overlap-grad-reduce",
                 "--overlap-param-gather"):
        assert flag in first["plan"].split()
    # the line prices what the advisor said; without the overlaps it is slower
    argv = shlex.split(first["plan"])[1:] + ["--json", "--output-dir", str(tmp_path)]
    code, out, err = run_cli(argv)
    assert code == 0, err
    step = json.loads(out)["step"]
    assert step["tokens_per_s_per_gpu"] == pytest.approx(first["tokens_per_s_per_gpu"], rel=1e-4)
    bare = [w for w in argv if w not in ("--sequence-parallel", "--tp-comm-overlap",
                                         "--overlap-grad-reduce", "--overlap-param-gather")]
    code, out, err = run_cli(bare)
    assert code == 0, err
    slow = json.loads(out)["step"]
    assert slow["tokens_per_s_per_gpu"] < 0.97 * step["tokens_per_s_per_gpu"]
    assert slow["exposed_comm_s"]["tp"] > 1.2 * step["exposed_comm_s"]["tp"]

def test_advisor_says_when_nothing_fits():
    code, out, err = run_cli(["advise", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                              "--model", "llama3.1-405b,seq_len=8192,global_batch=32",
                              "--gpus", "8"])
    assert code != 0 and err.count("\n") == 1 and "fits" in err and "give more GPUs" in err


# ---------------------------------------------------------------------------
# simulate


def test_simulate_rule_with_a_model_stretches_by_the_whole_step(tmp_path):
    from slurmtopo.simulate.engine import JobSpec, stretched
    from slurmtopo.simulate.layouts import load_rules, shape_of
    from slurmtopo.simulate.trace import TraceJob

    rules = tmp_path / "rules.yaml"
    rules.write_text("slurmtopo: layout-rules\nversion: 1\nrules:\n"
                     "  - {up_to: 8, tp: 8, model: 'llama3-8b,seq_len=8192'}\n  - {tp: 8}\n")
    r = load_rules(str(rules))
    small, big = shape_of(8, None, r, 8), shape_of(16, None, r, 8)
    assert small.request().workload.model.layers == 32 and big.request().workload is None
    tj = TraceJob(job_id="1", submit=0.0, run_time=100.0, gpus=8)
    known = JobSpec(0, tj, small, small.request(), best_step=2.0)
    unknown = JobSpec(1, tj, big, big.request(), best_step=2.0)
    assert stretched(known, 3.0, 0.3) == pytest.approx(150.0)  # the whole step: 1.5x
    assert stretched(unknown, 3.0, 0.3) == pytest.approx(115.0)  # 1 + 0.3 x 0.5
    rules.write_text("slurmtopo: layout-rules\nversion: 1\nrules:\n  - {tp: 8, model: 71q}\n")
    with pytest.raises(Exception, match="rules.yaml:4"):
        load_rules(str(rules))


def test_a_power_limit_in_the_inventory_slows_compute_not_memory_traffic():
    from slurmtopo.cost.compute import parse_gpu_compute

    def fail(msg, *a):
        return ValueError(msg)
    table = parse_gpu_compute({"h100": {"power_w": 500, "hbm_gbps": 2400}}, fail)
    capped, known = gpu_figures("NVIDIA H100 80GB HBM3", 81559, table)
    assert known and capped.power_w == 500 and capped.tdp_w == 700
    assert capped.power_clock == pytest.approx((500 / 700) ** (1 / 3))
    assert H100.power_clock == 1.0 and capped.peak("fp8") == H100.peak("fp8")
    spec = parse_model("llama3-8b,seq_len=8192")
    fast = stage_compute(spec, Dims(), H100).microbatch_s
    slow = stage_compute(spec, Dims(), capped).microbatch_s
    assert fast * 1.1 < slow < fast / (500 / 700) ** (1 / 3) * 1.45
    with pytest.raises(ValueError, match="needs bf16"):
        parse_gpu_compute({"X9": {"power_w": 300}}, fail)


def test_attention_kernels_and_head_width():
    spec = parse_model("llama3-8b,seq_len=32768")
    fused = dict(stage_compute(spec, Dims(), H100, attention="fused").parts)["attention"]
    fa2 = dict(stage_compute(spec, Dims(), H100, attention="flash2").parts)["attention"]
    assert 1.5 < fa2 / fused < 2.2  # FlashAttention-2 against FA3's class on Hopper
    narrow = replace(spec, head_dim=64, heads=64, v_head_dim=64, kv_heads=8)
    wide = dict(stage_compute(narrow, Dims(), H100).parts)["attention"]
    assert 1.2 < wide / fused < 1.4  # the same FLOPs in heads of 64: FA3's ~0.77 of 128's


def test_advisor_prices_megatron_with_its_recipes_memory_settings(tmp_path):
    """Megatron-LM layouts are priced with bf16 main gradients (unless the
    user's --model names the dtype) and, for a MoE model, the recipes'
    cheap recompute modules between none and full recomputation; the plan
    lines carry them and price the same."""
    from slurmtopo.advisor import _fitting, candidates
    from slurmtopo.cost.model_spec import parse_model
    from slurmtopo.job.frameworks.registry import get
    spec = parse_model("deepseek-v3,seq_len=4096,global_batch=4096,dtype=fp8")
    ladder = get("megatron").advice_recompute(spec)
    assert [r for r, _ in ladder] == ["none", "selective", "full"]
    mods = dict(ladder[1][1])["recompute_modules"]
    # the literal is a model description's own spelling
    assert parse_model(f"deepseek-v3,recompute_modules={mods}").recompute_modules == mods
    assert [r for r, _ in get("megatron").advice_recompute(parse_model("llama3-70b"))] == \
        ["none", "full"]
    code, out, err = run_cli(["advise", "--inventory", str(EXAMPLES / "h100-32node-fattree.yaml"),
                              "--model", "deepseek-v3,seq_len=4096,global_batch=4096,dtype=fp8",
                              "--gpus", "256", "--framework", "megatron", "--top", "12", "--json"])
    assert code == 0, err
    layouts = json.loads(out)["layouts"]
    assert all(l["grad_dtype"] == "bf16" and "grad_dtype=bf16" in l["plan"] for l in layouts)
    sel = [l for l in layouts if l["recompute"] == "selective"]
    assert sel and all(l["recompute_modules"] == mods for l in sel)
    argv = shlex.split(sel[0]["plan"])[1:] + ["--json", "--output-dir", str(tmp_path)]
    code, out, err = run_cli(argv)
    assert code == 0, err
    assert json.loads(out)["step"]["tokens_per_s_per_gpu"] == \
        pytest.approx(sel[0]["tokens_per_s_per_gpu"], rel=1e-4)
    # the user's own gradient dtype wins
    fp32 = parse_model("llama3-70b,seq_len=8192,global_batch=256,grad_dtype=fp32")
    fitted = [f for f in (_fitting(fp32, c, H100) for c in
                          candidates(fp32, 64, frameworks=("megatron",), node_gpus=8)) if f]
    assert fitted and all("grad_dtype" not in dict(f.model_keys) for f in fitted)
    # a model offloading activations: no pipeline, no recomputation (Megatron-LM's rules)
    code, out, err = run_cli(["advise", "--inventory", str(EXAMPLES / "gb200-nvl72-rack.yaml"),
                              "--model", "llama3-70b,seq_len=8192,global_batch=128,dtype=fp8,"
                              "offload_layers=20", "--gpus", "64", "--top", "3", "--json"])
    assert code == 0, err
    layouts = json.loads(out)["layouts"]
    assert layouts and all(l["pp"] == 1 and l["recompute"] == "none" for l in layouts)


def test_advisor_recomputes_the_fewest_layers_that_fit(tmp_path):
    """Where a Megatron-LM layout fits only with full recomputation, the
    advisor recomputes the fewest layers of each model chunk that fit (the
    block method): fewer would not fit, and its plan line prices the same."""
    from slurmtopo.advisor import _fits, _fitting, candidates
    from slurmtopo.cost.model_spec import parse_model
    spec = parse_model("llama3-70b,seq_len=8192,global_batch=64,dtype=fp8")
    partial = []
    for c in candidates(spec, 16, frameworks=("megatron",), node_gpus=8):
        f = _fitting(spec, c, H100)
        n = dict(f.model_keys).get("recompute_layers") if f else None
        if n:
            assert f.recompute == "full" and _fits(spec, f, H100)
            keys = tuple(kv for kv in f.model_keys if kv[0] != "recompute_layers")
            assert n == 1 or not _fits(spec, replace(f, model_keys=keys
                                                     + (("recompute_layers", n - 1),)), H100)
            partial.append(f)
    assert partial
    code, out, err = run_cli(["advise", "--inventory", str(EXAMPLES / "h100-32node-fattree.yaml"),
                              "--model", "llama3-70b,seq_len=8192,global_batch=64,dtype=fp8",
                              "--gpus", "16", "--framework", "megatron", "--top", "8", "--json"])
    assert code == 0, err
    some = [l for l in json.loads(out)["layouts"] if l.get("recompute_layers")]
    assert some and "recompute_layers=" in some[0]["plan"]
    code, out, err = run_cli(shlex.split(some[0]["plan"])[1:]
                             + ["--json", "--output-dir", str(tmp_path)])
    assert code == 0, err
    assert json.loads(out)["step"]["tokens_per_s_per_gpu"] == \
        pytest.approx(some[0]["tokens_per_s_per_gpu"], rel=1e-4)
