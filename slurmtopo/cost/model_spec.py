"""What a job trains: one model description for every part of the step model.

``--model`` takes a preset (``llama3-70b``, ``deepseek-v3`` ...), a preset
changed (``llama3-70b,seq_len=8192,micro_batch=2``) or explicit dimensions
(``params=7e9,layers=32,hidden=4096``); :func:`parse_model` reads all three
and the framework configurations (torchtitan TOML, DeepSpeed JSON,
Megatron-LM arguments, :mod:`slurmtopo.job.frameworks.configs`) give the same
keys. :class:`ModelSpec` is what the communication of a step is sized from
(each framework's :meth:`~slurmtopo.job.frameworks.base.Framework.step_calls`,
priced by :mod:`slurmtopo.cost.step`), what its FLOPs are counted from
(:mod:`slurmtopo.cost.compute`) and what its memory per GPU is counted from
(:mod:`slurmtopo.cost.memory`), so the three never disagree about the model.

Keys (docs/cost-model.md, "The model"):

====================  ========================================================
params                total parameters (0: counted from the dimensions)
layers, hidden        transformer layers, hidden size
heads, kv_heads       attention heads, key/value heads (GQA; 0: = heads)
head_dim              per-head size (0: hidden/heads)
ffn                   MLP inner size of a dense layer (0: from params, else 4h)
vocab                 vocabulary (0: 32000)
seq_len               tokens a sequence
global_batch          sequences a step (0: micro_batch x micro_batches x dp)
micro_batch           sequences a micro-batch
micro_batches         micro-batches a step per pipeline when global_batch is 0
dtype                 bf16, fp16, fp32, fp8, mxfp8, nvfp4 (the GEMMs' precision)
virtual_stages        interleaved pipeline stages per rank (1: plain 1F1B)
experts, top_k        routed experts of a MoE layer and how many a token takes
expert_ffn            an expert's inner size (0: ffn)
shared_experts        experts every token takes (of expert_ffn each)
recompute             none, selective or full activation recomputation
recompute_modules     what selective recomputation recomputes, Megatron-LM's
                      modules joined by ``+`` (core_attn, moe_act, layernorm,
                      mla_up_proj, mlp, moe, shared_experts; "": core_attn)
recompute_layers      full recomputation of this many layers of each model
                      chunk of a pipeline stage (Megatron-LM's block method;
                      0: every layer)
offload_layers        layers whose activations wait in host memory
                      (Megatron-LM's --cpu-offloading-num-layers)
grad_dtype            the accumulated gradients' dtype, fp32 or bf16
                      (Megatron-LM's --grad-reduce-in-bf16; "": the
                      framework's)
compile               torch.compile: ``on`` fuses the memory-bound kernels
                      (norms, activation, rotary embedding), ``off`` runs
                      them eagerly; "": the framework's (torchtitan's eager
                      unless compiled; Megatron-LM's fused by Transformer
                      Engine whatever is said)
====================  ========================================================

and the architecture details the presets need to count FLOPs and memory
exactly: ``glu`` (1: gated MLP such as SwiGLU, three matrices; 0: two),
``dense_layers`` (the leading dense layers of a MoE model), ``q_lora_rank``,
``kv_lora_rank``, ``rope_head_dim``, ``v_head_dim`` (multi-head latent
attention), ``tied`` (1: input and output embeddings shared), ``window`` and
``window_layers`` (sliding-window attention on that many layers; chunked
attention of C tokens is the window C/2: the same keys a query on
average), ``moe_every`` (experts on every n-th layer after the dense ones).

Pure: no I/O; every refusal is one :class:`LayoutError` naming the key.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import Dict, Mapping, Optional, Tuple

from slurmtopo.errors import LayoutError
# what Megatron-LM's selective recomputation may recompute, in its own
# vocabulary: the memory each frees is in slurmtopo.cost.memory, the time
# each costs in slurmtopo.cost.compute
from slurmtopo.job.frameworks.megatron import RECOMPUTE_MODULES

__all__ = ["ModelSpec", "MODEL_PRESETS", "PRESET_SOURCES", "PRESET_ALIASES", "preset_key",
           "DTYPE_BYTES", "COMPUTE_DTYPES", "RECOMPUTE", "RECOMPUTE_MODULES", "GRAD_DTYPES",
           "COMPILE",
           "MODEL_KEYS", "parse_model",
           "model_pairs", "model_from_mapping", "model_dict", "model_number"]

#: bytes per value of the dtypes a model description may name (the GEMM
#: inputs; fp8, mxfp8 and nvfp4 runs keep activations, gradients and what
#: they communicate in bf16: :attr:`ModelSpec.value_bytes`)
DTYPE_BYTES: Dict[str, float] = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2,
                                 "float16": 2, "fp8": 1, "mxfp8": 1, "nvfp4": 0.5}
#: the spelling each dtype is kept under
_DTYPE_CANON = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "fp8-cs": "fp8",
                "fp8-mx": "mxfp8", "fp8_cs": "fp8", "fp8_mx": "mxfp8", "fp4": "nvfp4"}
COMPUTE_DTYPES = ("fp32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")
RECOMPUTE = ("none", "selective", "full")
#: the dtypes gradients may be accumulated and reduced in
GRAD_DTYPES = ("fp32", "bf16")
#: the ``compile`` key's values ("" is the framework's default)
COMPILE = ("on", "off")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, dense or MoE, and how a step feeds it.

    The first eight fields are the historical ones, in their old order
    (positional construction keeps working); 0 in a dimension means "not
    given": :meth:`resolved` fills it in from the others."""

    params: int
    layers: int
    hidden: int
    seq_len: int = 4096
    micro_batch: int = 1
    dtype: str = "bf16"
    micro_batches: int = 1  # per step and pipeline, when global_batch is 0
    top_k: int = 1
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    ffn: int = 0
    vocab: int = 0
    global_batch: int = 0
    virtual_stages: int = 1
    experts: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    recompute: str = "none"
    glu: int = 1
    dense_layers: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0
    v_head_dim: int = 0
    tied: int = 0
    window: int = 0
    window_layers: int = 0
    moe_every: int = 1
    recompute_modules: str = ""
    recompute_layers: int = 0
    offload_layers: int = 0
    grad_dtype: str = ""
    compile: str = ""

    # ---- what the communication is sized from (historical meaning) -------

    @property
    def value_bytes(self) -> int:
        """Bytes of one activation or gradient value a step communicates:
        the dtype's for fp32/bf16/fp16; 2 for fp8, mxfp8 and nvfp4, whose
        runs keep activations, gradients and their collectives in bf16
        (Transformer Engine casts only the GEMM inputs)."""
        return 4 if self.dtype == "fp32" else 2

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    def micro_batches_for(self, dp: int) -> int:
        """Micro-batches a step runs on each pipeline: ``global_batch /
        (micro_batch x dp)`` when the global batch is given (at least 1),
        else the ``micro_batches`` field."""
        if self.global_batch:
            return max(1, self.global_batch // (self.micro_batch * max(1, dp)))
        return self.micro_batches

    # ---- the dimensions, filled in -----------------------------------------

    def resolved(self) -> "ModelSpec":
        """This description with every dimension filled in: heads from the
        hidden size (128 a head), key/value heads = heads, vocabulary 32000,
        the MLP size solved from ``params`` when it is given (else 4h,
        or 8h/3 for a gated MLP), then ``params`` counted when it was not.
        Idempotent."""
        s = self
        heads = s.heads or max(1, s.hidden // 128)
        changes: Dict[str, int] = {"heads": heads, "kv_heads": s.kv_heads or heads,
                                   "head_dim": s.head_dim or max(1, s.hidden // heads),
                                   "vocab": s.vocab or 32000}
        s = replace(s, **changes)
        if not s.v_head_dim:
            s = replace(s, v_head_dim=s.head_dim)
        if not s.ffn:
            s = replace(s, ffn=_solve_ffn(s))
        if s.is_moe and not s.expert_ffn:
            s = replace(s, expert_ffn=s.ffn)
        if not s.params:
            s = replace(s, params=max(1, round(s.counted_params())))
        return s

    # ---- parameter counts (of a resolved spec) ------------------------------

    def attention_params(self) -> float:
        """Weights of one layer's attention (projections; norms left out)."""
        h, hd, n = self.hidden, self.head_dim, self.heads
        if self.kv_lora_rank:  # multi-head latent attention (DeepSeek-V2/V3)
            qk = hd + self.rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * n * qk) if self.q_lora_rank \
                else h * n * qk
            kv = h * (self.kv_lora_rank + self.rope_head_dim) \
                + self.kv_lora_rank * n * (hd + self.v_head_dim)
            return q + kv + n * self.v_head_dim * h
        q = h * n * hd
        return 2 * q + 2 * h * self.kv_heads * hd

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.glu else 2

    def dense_mlp_params(self) -> float:
        return self.mlp_matrices * self.hidden * self.ffn

    def expert_params(self) -> float:
        """One expert's weights."""
        return self.mlp_matrices * self.hidden * self.expert_ffn

    @property
    def moe_layers(self) -> int:
        """Layers with experts: after the ``dense_layers`` leading dense
        ones, every ``moe_every``-th (Llama 4 Maverick: every other)."""
        return max(0, self.layers - self.dense_layers) // max(1, self.moe_every) \
            if self.is_moe else 0

    def moe_layers_in(self, layers: int) -> int:
        """The most layers with experts a run of ``layers`` consecutive
        layers holds (a pipeline stage: the slowest one is past the
        leading dense layers)."""
        return min(self.moe_layers, math.ceil(layers / max(1, self.moe_every)))

    def moe_layers_first(self, layers: int) -> int:
        """Layers with experts among the first ``layers`` (the first
        pipeline stage: the leading dense layers, then every
        ``moe_every``-th)."""
        return min(self.moe_layers_in(layers),
                   max(0, layers - self.dense_layers) // max(1, self.moe_every))

    def recomputed_layers(self, stage_layers: int, virtual_stages: int = 1) -> int:
        """Layers of a pipeline stage of ``stage_layers`` that full
        recomputation recomputes: every one, or with ``recompute_layers``
        (Megatron-LM's block method) that many of each of the stage's
        ``virtual_stages`` model chunks (Megatron-Core's TransformerBlock
        counts them a chunk)."""
        if self.recompute != "full":
            return 0
        if not self.recompute_layers:
            return stage_layers
        vp = max(1, virtual_stages)
        chunk = math.ceil(stage_layers / vp)
        return min(stage_layers, vp * min(self.recompute_layers, chunk))

    def embedding_params(self) -> float:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def counted_params(self) -> float:
        """Every weight, counted from the dimensions."""
        dense = self.layers - self.moe_layers
        moe = self.moe_layers * ((self.experts + self.shared_experts) * self.expert_params()
                                 + self.hidden * self.experts)
        return (self.layers * self.attention_params() + dense * self.dense_mlp_params() + moe
                + self.embedding_params())

    def active_params(self) -> float:
        """Weights one token goes through (every dense weight, its top_k and
        the shared experts of each MoE layer, the output embedding)."""
        dense = self.layers - self.moe_layers
        moe = self.moe_layers * ((self.top_k + self.shared_experts) * self.expert_params()
                                 + self.hidden * self.experts)
        return (self.layers * self.attention_params() + dense * self.dense_mlp_params() + moe
                + self.vocab * self.hidden)


def _solve_ffn(s: ModelSpec) -> int:
    """The dense MLP size that makes the counted parameters ``params`` (a
    description that gives only params, layers and hidden), else the
    usual 4h (8h/3 rounded up to 256 for a gated MLP)."""
    default = 4 * s.hidden if not s.glu else 256 * math.ceil(8 * s.hidden / 3 / 256)
    if not s.params or s.is_moe:
        return default
    probe = replace(s, ffn=1, experts=0)
    fixed = probe.counted_params() - probe.dense_mlp_params() * s.layers
    per = probe.mlp_matrices * s.hidden * s.layers
    ffn = (s.params - fixed) / per
    return max(1, round(ffn)) if ffn >= 1 else default


#: the keys ``--model`` takes, with their types, in the order they are shown
MODEL_KEYS: Dict[str, type] = {
    "params": int, "layers": int, "hidden": int, "heads": int, "kv_heads": int, "ffn": int,
    "vocab": int, "seq_len": int, "global_batch": int, "micro_batch": int, "dtype": str,
    "virtual_stages": int, "experts": int, "top_k": int, "expert_ffn": int,
    "shared_experts": int, "recompute": str, "micro_batches": int, "head_dim": int, "glu": int,
    "dense_layers": int, "q_lora_rank": int, "kv_lora_rank": int, "rope_head_dim": int,
    "v_head_dim": int, "tied": int, "window": int, "window_layers": int, "moe_every": int,
    "recompute_modules": str, "recompute_layers": int, "offload_layers": int,
    "grad_dtype": str, "compile": str}
#: keys that may be 0 (meaning "none" or "not given")
_ZERO_OK = frozenset(("params", "heads", "kv_heads", "ffn", "vocab", "global_batch", "experts",
                      "expert_ffn", "shared_experts", "head_dim", "glu", "dense_layers",
                      "q_lora_rank", "kv_lora_rank", "rope_head_dim", "v_head_dim", "tied",
                      "window", "window_layers", "recompute_layers", "offload_layers"))
_ALIASES = {"seq": "seq_len", "sequence_length": "seq_len", "seq_length": "seq_len",
            "mbs": "micro_batch", "gbs": "global_batch", "hidden_size": "hidden",
            "num_layers": "layers", "gas": "micro_batches", "vp": "virtual_stages",
            "vpp": "virtual_stages", "num_experts": "experts", "moe_topk": "top_k",
            "num_heads": "heads", "n_heads": "heads", "num_kv_heads": "kv_heads",
            "n_kv_heads": "kv_heads", "ffn_hidden_size": "ffn", "intermediate_size": "ffn",
            "vocab_size": "vocab", "precision": "dtype", "moe_ffn": "expert_ffn",
            "activation_checkpointing": "recompute", "ac": "recompute",
            "interleave_moe_layer_step": "moe_every", "moe_layer_freq": "moe_every",
            "decoder_sparse_step": "moe_every", "cpu_offloading_num_layers": "offload_layers",
            "recompute_num_layers": "recompute_layers"}


def _ffn_for(hidden, mult=8 / 3, of=256):
    return of * math.ceil(mult * hidden / of)


def _llama(params, layers, hidden, heads, kv, ffn, vocab):
    return ModelSpec(params=params, layers=layers, hidden=hidden, heads=heads, kv_heads=kv,
                     ffn=ffn, vocab=vocab)


#: named models, their dimensions from the model cards / config.json files
#: named in :data:`PRESET_SOURCES`. The short names are the Llama shapes
#: ``--model`` always took (7b, 13b: Llama 2; 8b, 70b, 405b: Llama 3).
MODEL_PRESETS: Dict[str, ModelSpec] = {
    "llama2-7b": _llama(6_738_415_616, 32, 4096, 32, 32, 11008, 32000),
    "llama2-13b": _llama(13_015_864_320, 40, 5120, 40, 40, 13824, 32000),
    "llama2-70b": _llama(68_976_648_192, 80, 8192, 64, 8, 28672, 32000),
    "llama3-8b": _llama(8_030_261_248, 32, 4096, 32, 8, 14336, 128256),
    "llama3-70b": _llama(70_553_706_496, 80, 8192, 64, 8, 28672, 128256),
    "llama3.1-405b": _llama(405_853_388_800, 126, 16384, 128, 8, 53248, 128256),
    "mixtral-8x7b": ModelSpec(params=46_702_792_704, layers=32, hidden=4096, heads=32,
                              kv_heads=8, ffn=14336, vocab=32000, experts=8, top_k=2),
    "mixtral-8x22b": ModelSpec(params=140_620_634_112, layers=56, hidden=6144, heads=48,
                               kv_heads=8, ffn=16384, vocab=32000, experts=8, top_k=2),
    "deepseek-v3": ModelSpec(params=0, layers=61, hidden=7168, heads=128, kv_heads=128,
                             head_dim=128, rope_head_dim=64, v_head_dim=128,
                             q_lora_rank=1536, kv_lora_rank=512, ffn=18432, vocab=129280,
                             experts=256, top_k=8, expert_ffn=2048, shared_experts=1,
                             dense_layers=3),
    "kimi-k2": ModelSpec(params=0, layers=61, hidden=7168, heads=64, kv_heads=64, head_dim=128,
                         rope_head_dim=64, v_head_dim=128, q_lora_rank=1536, kv_lora_rank=512,
                         ffn=18432, vocab=163840, experts=384, top_k=8, expert_ffn=2048,
                         shared_experts=1, dense_layers=1),
    "qwen3-30b-a3b": ModelSpec(params=0, layers=48, hidden=2048, heads=32, kv_heads=4,
                               head_dim=128, ffn=6144, vocab=151936, experts=128, top_k=8,
                               expert_ffn=768),
    "qwen3-235b-a22b": ModelSpec(params=0, layers=94, hidden=4096, heads=64, kv_heads=4,
                                 head_dim=128, ffn=12288, vocab=151936, experts=128, top_k=8,
                                 expert_ffn=1536),
    "qwen2-57b-a14b": ModelSpec(params=0, layers=28, hidden=3584, heads=28, kv_heads=4,
                                ffn=18944, vocab=151936, experts=64, top_k=8, expert_ffn=2560,
                                shared_experts=8),
    "gpt-oss-120b": ModelSpec(params=0, layers=36, hidden=2880, heads=64, kv_heads=8,
                              head_dim=64, ffn=2880, vocab=201088, experts=128, top_k=4,
                              expert_ffn=2880, window=128, window_layers=18),
    "gpt-oss-20b": ModelSpec(params=0, layers=24, hidden=2880, heads=64, kv_heads=8,
                             head_dim=64, ffn=2880, vocab=201088, experts=32, top_k=4,
                             expert_ffn=2880, window=128, window_layers=12),
    # Llama 4: a shared expert in every MoE layer, chunked attention of 8192
    # tokens on three layers in four (the window of 4096: the same keys a
    # query), Maverick's experts on every other layer
    "llama4-scout-17b-16e": ModelSpec(params=0, layers=48, hidden=5120, heads=40, kv_heads=8,
                                      head_dim=128, ffn=16384, vocab=202048, experts=16,
                                      top_k=1, expert_ffn=8192, shared_experts=1, window=4096,
                                      window_layers=36),
    "llama4-maverick-17b-128e": ModelSpec(params=0, layers=48, hidden=5120, heads=40,
                                          kv_heads=8, head_dim=128, ffn=16384, vocab=202048,
                                          experts=128, top_k=1, expert_ffn=8192,
                                          shared_experts=1, window=4096, window_layers=36,
                                          moe_every=2),
    "grok-1": ModelSpec(params=0, layers=64, hidden=6144, heads=48, kv_heads=8, head_dim=128,
                        ffn=32768, vocab=131072, experts=8, top_k=2, expert_ffn=32768,
                        tied=1),
    "nemotron4-15b": ModelSpec(params=0, layers=32, hidden=6144, heads=48, kv_heads=8,
                               ffn=24576, vocab=256000, glu=0),
    "nemotron4-340b": ModelSpec(params=0, layers=96, hidden=18432, heads=96, kv_heads=8,
                                ffn=73728, vocab=256000, glu=0),
    "gpt3-175b": ModelSpec(params=0, layers=96, hidden=12288, heads=96, ffn=49152,
                           vocab=50257, glu=0, tied=1, seq_len=2048),
}
# the short names --model always took: Llama 2 7B/13B, Llama 3 8B/70B/405B
MODEL_PRESETS.update({"7b": MODEL_PRESETS["llama2-7b"], "8b": MODEL_PRESETS["llama3-8b"],
                      "13b": MODEL_PRESETS["llama2-13b"], "70b": MODEL_PRESETS["llama3-70b"],
                      "405b": MODEL_PRESETS["llama3.1-405b"]})
MODEL_PRESETS = {k: v.resolved() for k, v in MODEL_PRESETS.items()}

_HF = "https://huggingface.co/"
#: where each preset's dimensions come from (config.json of the released
#: checkpoint, or the paper's table)
PRESET_SOURCES: Dict[str, str] = {
    "llama2-7b": _HF + "meta-llama/Llama-2-7b-hf/blob/main/config.json",
    "llama2-13b": _HF + "meta-llama/Llama-2-13b-hf/blob/main/config.json",
    "llama2-70b": _HF + "meta-llama/Llama-2-70b-hf/blob/main/config.json",
    "llama3-8b": _HF + "meta-llama/Meta-Llama-3-8B/blob/main/config.json",
    "llama3-70b": _HF + "meta-llama/Meta-Llama-3-70B/blob/main/config.json",
    "llama3.1-405b": _HF + "meta-llama/Llama-3.1-405B/blob/main/config.json",
    "mixtral-8x7b": _HF + "mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
    "mixtral-8x22b": _HF + "mistralai/Mixtral-8x22B-v0.1/blob/main/config.json",
    "deepseek-v3": _HF + "deepseek-ai/DeepSeek-V3/blob/main/config.json (the multi-token "
                         "prediction module left out)",
    "kimi-k2": _HF + "moonshotai/Kimi-K2-Base/blob/main/config.json",
    "qwen3-30b-a3b": _HF + "Qwen/Qwen3-30B-A3B/blob/main/config.json",
    "qwen3-235b-a22b": _HF + "Qwen/Qwen3-235B-A22B/blob/main/config.json",
    "qwen2-57b-a14b": _HF + "Qwen/Qwen2-57B-A14B/blob/main/config.json (shared expert of "
                            "20480 = 8 x moe_intermediate_size 2560)",
    "gpt-oss-120b": _HF + "openai/gpt-oss-120b/blob/main/config.json (sliding window of 128 "
                          "on every other layer)",
    "gpt-oss-20b": _HF + "openai/gpt-oss-20b/blob/main/config.json (24 layers, 32 experts, "
                         "sliding window of 128 on every other layer)",
    "llama4-scout-17b-16e": _HF + "meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json "
                                  "(text_config: intermediate_size 8192 an expert and the "
                                  "shared one, attention_chunk_size 8192, NoPE every 4th layer)",
    "llama4-maverick-17b-128e": _HF + "meta-llama/Llama-4-Maverick-17B-128E/blob/main/"
                                      "config.json (text_config: interleave_moe_layer_step 2, "
                                      "intermediate_size_mlp 16384 the dense layers')",
    "grok-1": "https://github.com/xai-org/grok-1/blob/main/run.py (TransformerConfig: emb_size "
              "48 x 128, 48 query and 8 key/value heads of 128, 64 layers, 8 experts, 2 a "
              "token, widening_factor 8: experts 32,768 wide, model.py's ffn_size 8 x 6144 x "
              "2/3; vocabulary 128 x 1024; InOutEmbed: the input embedding is the output's)",
    "nemotron4-15b": "Parmar et al. 2024, 'Nemotron-4 15B Technical Report' (arXiv:2402.16819), "
                     "Table 1 (32 layers, hidden 6144, 48 heads, 8 KV heads, squared-ReLU MLP "
                     "of 4h, 256k vocabulary)",
    "nemotron4-340b": _HF + "nvidia/Nemotron-4-340B-Base (model card: 96 layers, hidden 18432, "
                            "96 heads, 8 KV heads, squared-ReLU MLP 73728, 256k vocabulary)",
    "gpt3-175b": "Brown et al. 2020, 'Language Models are Few-Shot Learners', Table 2.1 "
                 "(96 layers, d_model 12288, 96 heads, d_ff = 4 d_model, context 2048)",
}


#: other names of a preset's shapes: later releases of the same
#: architecture whose config.json gives the same dimensions (they changed
#: the training data, the context extension or the post-training only):
#: Llama 3.1 8B and 70B and Llama 3.3 70B (meta-llama/Llama-3.1-8B,
#: Llama-3.1-70B, Llama-3.3-70B-Instruct: the Llama 3 dimensions, a
#: ``rope_scaling`` added), DeepSeek-R1 and V3.1 (deepseek-ai/DeepSeek-R1,
#: DeepSeek-V3.1: DeepseekV3ForCausalLM, V3's dimensions)
PRESET_ALIASES: Dict[str, str] = {
    "llama3.1-8b": "llama3-8b", "llama3.1-70b": "llama3-70b", "llama3.3-70b": "llama3-70b",
    "llama3-405b": "llama3.1-405b", "deepseek-r1": "deepseek-v3", "deepseek-v3.1": "deepseek-v3",
    "llama4-scout": "llama4-scout-17b-16e", "llama4-maverick": "llama4-maverick-17b-128e",
}
#: an organisation before a model's name (a Hugging Face repository id)
_ORG = re.compile(r"^[a-z0-9][a-z0-9._-]*/")
#: what a release's name adds after the architecture's
_SUFFIX = re.compile(r"-(hf|base|instruct|chat|it|v0\.1|fp8|bf16)$")
#: a family's name written with a separator before its version
_FAMILY = re.compile(r"^(llama|qwen|nemotron)-(\d)")


def preset_key(name: str) -> Optional[str]:
    """The preset a model's name means, as people and publications write
    it: any case, ``_`` or spaces for ``-``, a Hugging Face repository id
    (``meta-llama/Meta-Llama-3-70B``), the release's suffix (``-Instruct``,
    ``-Base``, ``-hf``), ``Llama-3.1`` for ``llama3.1``, and the other
    names of a preset's architecture (:data:`PRESET_ALIASES`). None: no
    preset."""
    key = re.sub(r"[\s_]+", "-", str(name).strip().lower())
    key = _ORG.sub("", key, count=1)
    if key.startswith("meta-llama"):
        key = key[len("meta-"):]
    while True:
        shorter = _SUFFIX.sub("", key)
        if shorter == key:
            break
        key = shorter
    key = _FAMILY.sub(r"\1\2", key)
    key = PRESET_ALIASES.get(key, key)
    return key if key in MODEL_PRESETS else None


def model_number(text: str, what: str = "value") -> int:
    """``70e9``, ``70B``, ``4096``, ``8k`` -> int (0 allowed; the caller
    decides). Raises LayoutError naming ``what``."""
    t = str(text).strip().lower().replace("_", "")
    scale = {"k": 10 ** 3, "m": 10 ** 6, "b": 10 ** 9, "t": 10 ** 12}.get(t[-1:], 1)
    if scale != 1:
        t = t[:-1]
    try:
        value = float(t) * scale
    except ValueError:
        raise LayoutError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value) or value != int(value) or value < 0 or value > 10 ** 16:
        raise LayoutError(f"{what}: {text!r} is not a whole number between 1 and 1e16")
    return int(value)


def _canon_key(key: str) -> str:
    k = str(key).strip().lower().replace("-", "_")
    return _ALIASES.get(k, k)


def _value(key: str, value, where: str):
    """One key's value, checked."""
    kind = MODEL_KEYS[key]
    if kind is str:
        v = str(value).strip().lower()
        if key == "dtype":
            v = _DTYPE_CANON.get(v, v)
            if v not in COMPUTE_DTYPES:
                raise LayoutError(f"{where} dtype={value}: known: {', '.join(COMPUTE_DTYPES)}")
        elif key == "recompute":
            v = {"no": "none", "off": "none", "false": "none", "0": "none",
                 "op": "selective", "true": "full"}.get(v, v)
            if v not in RECOMPUTE:
                raise LayoutError(f"{where} recompute={value}: known: {', '.join(RECOMPUTE)}")
        elif key == "recompute_modules":
            names = [n for n in re.split(r"[+\s]+", v) if n]
            unknown = [n for n in names if n not in RECOMPUTE_MODULES]
            if unknown or len(v) > 200:
                raise LayoutError(f"{where} recompute_modules={str(value)[:60]}: known: "
                                  f"{', '.join(RECOMPUTE_MODULES)} (joined by +)")
            # one spelling: Megatron-Core's order, each once
            v = "+".join(n for n in RECOMPUTE_MODULES if n in names)
        elif key == "grad_dtype":
            v = _DTYPE_CANON.get(v, v)
            if v not in GRAD_DTYPES:
                raise LayoutError(f"{where} grad_dtype={value}: known: {', '.join(GRAD_DTYPES)}")
        elif key == "compile":
            v = {"true": "on", "yes": "on", "1": "on", "false": "off", "no": "off",
                 "0": "off"}.get(v, v)
            if v not in COMPILE:
                raise LayoutError(f"{where} compile={value}: on or off")
        return v
    if isinstance(value, bool):
        raise LayoutError(f"{where} {key}={value!r}: expected a whole number")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    n = value if isinstance(value, int) else model_number(value, f"{where} {key}")
    if n < 0 or n > 10 ** 16 or (n == 0 and key not in _ZERO_OK):
        raise LayoutError(f"{where} {key}={value}: not a whole number between 1 and 1e16")
    if key in ("glu", "tied") and n > 1:
        raise LayoutError(f"{where} {key}={value}: 0 or 1")
    return n


def _check(spec: ModelSpec, where: str) -> ModelSpec:
    """Consistency the dimensions need before anything is counted."""
    if spec.experts and spec.top_k > spec.experts:
        raise LayoutError(f"{where}: top_k={spec.top_k} is more than experts={spec.experts}")
    if spec.dense_layers > spec.layers:
        raise LayoutError(f"{where}: dense_layers={spec.dense_layers} is more than "
                          f"layers={spec.layers}")
    if spec.moe_every > spec.layers:
        raise LayoutError(f"{where}: moe_every={spec.moe_every} is more than "
                          f"layers={spec.layers}")
    if spec.window_layers > spec.layers:
        raise LayoutError(f"{where}: window_layers={spec.window_layers} is more than "
                          f"layers={spec.layers}")
    if spec.recompute_modules and spec.recompute == "full":
        raise LayoutError(f"{where}: recompute_modules={spec.recompute_modules} is for "
                          "selective recomputation, not recompute=full")
    if spec.recompute_layers and spec.recompute == "selective":
        raise LayoutError(f"{where}: recompute_layers={spec.recompute_layers} is for full "
                          "recomputation, not recompute=selective")
    if spec.offload_layers and (spec.recompute != "none" or spec.recompute_modules
                                or spec.recompute_layers):
        raise LayoutError(f"{where}: offload_layers={spec.offload_layers} with recomputation "
                          "(Megatron-LM offloads activations only without it)")
    for key in ("recompute_layers", "offload_layers"):
        if getattr(spec, key) and spec.layers and getattr(spec, key) >= spec.layers:
            raise LayoutError(f"{where}: {key}={getattr(spec, key)} is not fewer than "
                              f"layers={spec.layers}")
    if spec.recompute_modules and spec.recompute == "none":
        # naming the modules asks for selective recomputation (Megatron
        # Bridge's recipes set the granularity so), recompute_layers for full
        spec = replace(spec, recompute="selective")
    if spec.recompute_layers and spec.recompute == "none":
        spec = replace(spec, recompute="full")
    if spec.heads and spec.kv_heads and spec.heads % spec.kv_heads:
        raise LayoutError(f"{where}: heads={spec.heads} is not a multiple of "
                          f"kv_heads={spec.kv_heads}")
    if spec.micro_batch > 10 ** 7 or spec.seq_len > 10 ** 8 or spec.layers > 10 ** 5 \
            or spec.hidden > 10 ** 7 or spec.experts > 10 ** 6 or spec.virtual_stages > 10 ** 4:
        raise LayoutError(f"{where}: a dimension is beyond any model (layers <= 1e5, hidden "
                          "<= 1e7, seq_len <= 1e8, micro_batch <= 1e7, experts <= 1e6, "
                          "virtual_stages <= 1e4)")
    return spec.resolved()


def model_from_mapping(given: Mapping[str, object], where: str = "--model",
                       base: Optional[ModelSpec] = None) -> ModelSpec:
    """A ModelSpec from keys (aliases allowed) and their values, over
    ``base`` (a preset) when given. Raises LayoutError naming the key."""
    out: Dict[str, object] = {}
    for key, value in given.items():
        k = _canon_key(key)
        if k not in MODEL_KEYS:
            raise LayoutError(f"{where} {key!r}: expected KEY=VALUE with KEY one of "
                              f"{', '.join(MODEL_KEYS)}")
        out[k] = _value(k, value, where)
    if base is None:
        missing = [k for k in ("layers", "hidden") if k not in out]
        if not missing and "params" not in out and "ffn" not in out:
            missing = ["params (or ffn)"]
        if missing:
            raise LayoutError(f"{where} needs {', '.join(missing)} (or a preset: "
                              f"{', '.join(_preset_names())})")
        out.setdefault("params", 0)
        return _check(ModelSpec(**out), where)  # type: ignore[arg-type]
    # a changed dimension: what was derived from the preset's is counted again
    derived = {}
    if any(k in out for k in ("layers", "hidden", "heads", "ffn", "vocab", "experts",
                              "expert_ffn", "shared_experts", "kv_heads", "head_dim",
                              "dense_layers", "glu", "tied", "moe_every")) \
            and "params" not in out:
        derived["params"] = 0
    return _check(replace(base, **{**derived, **out}), where)  # type: ignore[arg-type]


def _preset_names() -> Tuple[str, ...]:
    return tuple(MODEL_PRESETS)


def parse_model(text: str) -> ModelSpec:
    """``70b`` or ``deepseek-v3`` (a preset), ``70b,seq_len=8192`` (a preset,
    changed) or ``params=7e9,layers=32,hidden=4096`` -> :class:`ModelSpec`
    (resolved). Raises LayoutError naming the bad part."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise LayoutError("--model is empty; give a preset "
                          f"({', '.join(_preset_names())}) or params=...,layers=...,hidden=...")
    base: Optional[ModelSpec] = None
    if "=" not in parts[0]:
        name = parts.pop(0)
        key = preset_key(name)
        if key is None:
            raise LayoutError(f"--model {name[:60]!r}: no such preset (known: "
                              f"{', '.join(_preset_names())})")
        base = MODEL_PRESETS[key]
    return model_from_mapping(model_pairs(parts), "--model", base)


def model_pairs(parts) -> Dict[str, object]:
    """``KEY=VALUE`` parts of a --model text as a mapping (keys checked)."""
    given: Dict[str, object] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or _canon_key(key) not in MODEL_KEYS:
            raise LayoutError(f"--model {part[:60]!r}: expected KEY=VALUE with KEY one of "
                              f"{', '.join(MODEL_KEYS)}")
        given[key] = value
    return given


def model_dict(spec: ModelSpec) -> Dict[str, object]:
    """The description as plain data (``plan --json``'s ``step.model``):
    every key, resolved, plus the counted total and active parameters."""
    s = spec.resolved()
    out: Dict[str, object] = {f.name: getattr(s, f.name) for f in fields(s)}
    out["active_params"] = int(round(s.active_params()))
    return out


def model_with_config(text: Optional[str], config: Mapping[str, object],
                      where: str = "--config") -> Optional[ModelSpec]:
    """The model of ``--model TEXT`` and the keys a framework
    configuration gives (its ``config_model``: :class:`slurmtopo.job.spec.FrameworkConfig`):
    the preset (``--model``'s, else the file's ``preset``), then the file's
    keys, then ``--model``'s own keys, the later winning. None when
    neither describes a model (no preset, no layers and hidden size)."""
    keys = {k: v for k, v in config.items() if k != "preset"}
    preset = config.get("preset")
    if text is None:
        if preset is None and not ("layers" in keys and "hidden" in keys):
            return None
        base = MODEL_PRESETS[preset_key(str(preset)) or str(preset)] if preset is not None \
            else None
        return model_from_mapping(keys, where, base)
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if parts and "=" not in parts[0]:
        spec = parse_model(parts[0])
        parts = parts[1:]
    elif preset is not None:
        spec = MODEL_PRESETS[preset_key(str(preset)) or str(preset)]
    else:
        spec = None
    given = model_pairs(parts)
    if spec is not None:
        spec = model_from_mapping(keys, where, spec) if keys else spec
        return model_from_mapping(given, "--model", spec) if given else spec
    merged = {**keys, **{_canon_key(k): v for k, v in given.items()}}
    return model_from_mapping(merged, "--model")
