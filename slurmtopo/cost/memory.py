"""Memory per GPU of a layout: will the job fit in HBM before it is
submitted (:func:`memory_per_gpu`, :func:`memory_verdict`).

Per rank of the most loaded pipeline stage (the first: it holds the
input embedding and the most micro-batches in flight), in bytes:

* **weights** ``Pd / (tp pp) + Pe / (ep etp pp)`` parameters (dense and
  expert weights, the embedding on the stages that hold it), 2 bytes each
  (bf16; fp32 runs 4), sharded further by the FSDP/ZeRO-3 shard group;
* **gradients**: Megatron-LM accumulates in fp32 (``main_grad``, 4 bytes;
  bf16 with ``grad_dtype=bf16``, its ``--grad-reduce-in-bf16``, as Megatron
  Bridge's performance recipes run), DeepSpeed and FSDP in the parameters'
  dtype after the reduction (FSDP: fp32 sharded); ZeRO-2 and FSDP shard
  them;
* **optimizer state**: Adam's fp32 master weights and two moments (12
  bytes a parameter), sharded over the data-parallel group by ZeRO-1 and
  beyond and by Megatron's distributed optimizer;
* **activations** of one micro-batch a layer (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", §4, for
  a flash-attention layer: the norms' and projections' inputs, Q, K, V and
  the attention output, the MLP's inputs and activation; with sequence
  parallelism all of it split by tp, with context parallelism by cp; MoE
  layers: the routed tokens' expert inputs and activations, ``top_k`` of
  them a token, dense layers their own MLP's; of a stage's two possible
  mixes, the first stage's leading dense layers or a later stage's most
  MoE layers, the one that keeps more), times the micro-batches in flight on the first stage (``pp``
  with 1F1B, ``pp (1 + (pp-1)/(pp vp))`` interleaved, capped by the
  micro-batches a step); ``selective`` recomputation drops what
  Megatron-LM's ``recompute_modules`` recompute (:func:`_freed`; its
  default, core_attn, nothing beside fused attention) or keeps every other
  matrix product's output and attention's (PyTorch's per-op selective
  checkpointing, torchtitan's), ``full`` keeps only each layer's input
  (of ``recompute_layers`` layers a model chunk when given, the others keep
  everything) plus one layer's working set; ``offload_layers`` layers keep
  theirs in host memory (Megatron-LM's CPU offloading, no pipeline), one
  layer's on its way;
* the **logits** of a micro-batch on the last stage (``T V / tp`` values:
  Megatron's fused cross-entropy keeps them in bf16 with their fp32
  softmax, 6 bytes; PyTorch's loss the bf16 logits, an fp32 copy and its
  gradient, 10); FSDP with a pipeline keeps the stage's layers gathered
  and their gradients unsharded for the whole step
  and a **reserve**: 2 GiB for the CUDA context and NCCL's buffers, and
  8% of the counted parts for the caching allocator's fragmentation.

Pure; no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from slurmtopo.cost.compute import Dims, placement_gpu
from slurmtopo.cost.model_spec import ModelSpec
from slurmtopo.cost.params import cost_params
from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks import registry

__all__ = ["MemoryReport", "memory_per_gpu", "memory_verdict", "MEMORY_POLICIES",
           "RESERVE_FRACTION", "RESERVE_GIB"]

GiB = 1024 ** 3
#: what a layout that does not fit does at submission: refuse it (plan and
#: sbatch exit with an error), warn, or say nothing (docs/cost-model.md)
MEMORY_POLICIES = ("error", "warn", "off")
#: memory a GPU keeps for what the model does not count: CUDA context and
#: kernels and NCCL's buffers (a fixed ``RESERVE_GIB``), and the caching
#: allocator's fragmentation, a share of what the job allocates
#: (``RESERVE_FRACTION`` of the counted parts, not of the GPU: a 288 GB GPU
#: fragments no more than an 80 GB one running the same job)
RESERVE_FRACTION = 0.08
RESERVE_GIB = 2.0


@dataclass(frozen=True)
class MemoryReport:
    """Bytes per GPU by part, the total, and what the GPU has."""

    parts: Tuple[Tuple[str, float], ...]
    gpu_gib: float
    #: bytes a micro-batch's offloaded layers copy to host memory in the
    #: forward pass (and back in the backward): ``offload_layers``
    offloaded_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        return sum(v for _, v in self.parts)

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GiB

    @property
    def fits(self) -> bool:
        return not self.gpu_gib or self.total_gib <= self.gpu_gib

    def as_dict(self) -> Dict[str, float]:
        return {k: v / GiB for k, v in self.parts}


def _style_shards(style: str, dp: int, shard: int) -> Tuple[int, int, int]:
    """(weight, gradient, optimizer) shard counts of a data-parallel style."""
    group = shard or dp
    if style == "fsdp":
        return dp, dp, dp
    if style == "hsdp":
        return group, group, group
    if style == "zero2":
        return 1, dp, dp
    if style == "zero12":
        return 1, 1, dp
    return 1, 1, 1


def memory_per_gpu(spec: ModelSpec, dims: Dims, style: str = "ddp",
                   framework: str = registry.DEFAULT_FRAMEWORK, gpu_gib: float = 0.0,
                   shard: int = 0) -> MemoryReport:
    """The memory of a rank of the first pipeline stage (see the module
    doc). ``style``: ddp, zero12 (ZeRO-1, Megatron's distributed
    optimizer), zero2, fsdp (ZeRO-3, FSDP, Megatron-FSDP), hsdp (FSDP over
    ``shard`` ranks); ``gpu_gib`` the GPU's memory (0: unknown)."""
    s = spec.resolved()
    fw = registry.get(framework)
    tp, cp, pp = max(1, dims.tp), max(1, dims.cp), max(1, dims.pp)
    ep, etp, vp = max(1, dims.ep), max(1, dims.etp), max(1, s.virtual_stages, dims.vp)
    dp = max(1, dims.dp)
    wb = 4 if s.dtype == "fp32" else 2
    # parameters on a rank of the first stage
    # the stated total wins over the dimensions' count (a description that
    # gives params, layers and hidden alone may not add up): every part
    # scaled to it
    counted = s.counted_params()
    scale = s.params / counted if s.params and counted else 1.0
    expert = (s.moe_layers * s.experts * s.expert_params() if s.is_moe else 0.0) * scale
    embed = s.vocab * s.hidden * scale
    body = counted * scale - expert - s.embedding_params() * scale
    stage_layers = math.ceil(s.layers / pp)
    dense_local = (body * stage_layers / s.layers + embed) / tp
    expert_local = expert * s.moe_layers_in(stage_layers) / max(1, s.moe_layers) / (ep * etp) \
        if s.is_moe else 0.0
    if pp == 1 and not s.tied:
        dense_local += embed / tp  # the output layer too
    params = dense_local + expert_local
    # dense weights are data-parallel over dp x cp ranks, expert weights
    # over the ranks that hold the same experts: tp cp dp / (ep etp)
    edp = max(1, tp * cp * dp // (ep * etp))
    if s.grad_dtype:
        grad_bytes = 4 if s.grad_dtype == "fp32" else 2
    else:
        grad_bytes = 4 if fw.fp32_grads or style in ("fsdp", "hsdp") else wb
    weights = grads = optimizer = 0.0
    for n, group in ((dense_local, dp * cp), (expert_local, edp)):
        w_sh, g_sh, o_sh = _style_shards(style, group, shard)
        weights += n * wb / w_sh
        grads += n * grad_bytes / g_sh
        optimizer += n * 12 / o_sh
    if style in ("fsdp", "hsdp"):
        if pp > 1:
            # with a pipeline the stage's layers stay gathered across the
            # micro-batches, and their gradients unsharded until the last
            weights += params * wb
            grads += params * grad_bytes
        else:
            # two layers' parameters gathered at a time (prefetch) in bf16
            weights += 2 * params / max(1, stage_layers) * 2
    # activations of one micro-batch, one layer (bytes)
    T = s.micro_batch * s.seq_len / cp
    h = s.hidden
    q = s.heads * (s.head_dim + s.rope_head_dim)
    kv = s.kv_heads * (s.head_dim + s.rope_head_dim) + s.kv_heads * s.v_head_dim \
        if not s.kv_lora_rank else s.heads * (s.head_dim + s.rope_head_dim + s.v_head_dim)
    # what a layer keeps for its backward pass, 2-byte values; fp8, mxfp8
    # and nvfp4 keep the GEMMs' inputs in 1 byte (Transformer Engine)
    gi = 0.5 if s.dtype in ("fp8", "mxfp8", "nvfp4") else 1.0
    qkv = q + kv
    mm = s.mlp_matrices
    norms = 2 * h

    modules = set(s.recompute_modules.split("+")) if s.recompute_modules else {"core_attn"}
    if s.recompute == "selective" and s.recompute_modules and \
            fw.selective_recompute != "attention":
        raise LayoutError(f"recompute_modules={s.recompute_modules}: Megatron-LM's modules; "
                          f"{fw.name} recomputes selectively its own way")
    if s.offload_layers and pp > 1:
        raise LayoutError(f"offload_layers={s.offload_layers} with pp {pp}: Megatron-LM "
                          "offloads activations only without a pipeline")

    def kept(moe: bool) -> Tuple[float, float]:
        """(values a token keeps, values the layer holds whole, as it
        does without recomputation or while its backward runs) for a
        dense layer or a MoE one: the MLP's width is the dense ``ffn`` or
        the active experts' (``top_k`` routed plus the shared ones), and a
        MoE layer keeps the routed copies of its input"""
        ffn_w = (s.top_k + s.shared_experts) * s.expert_ffn if moe else s.ffn
        route = s.top_k * h if moe else 0
        gemm_inputs = h + s.heads * s.v_head_dim + h + route + ffn_w  # qkv, proj, fc1, fc2
        inner = (mm - 1) * ffn_w  # the MLP's up (and gate) outputs
        whole = gi * gemm_inputs + qkv + inner + norms
        if s.recompute == "none":
            return whole, whole
        if s.recompute == "full":
            return h, whole
        if fw.selective_recompute == "attention":
            # Megatron-LM: what its recompute_modules recompute
            return whole - _freed(s, modules, moe, gi, qkv), whole
        # PyTorch's per-op selective checkpointing (torchtitan's
        # "selective", op): every other matrix product's output and
        # attention's output kept, the norms and activations recomputed,
        # plus the layer's input
        mm_out = qkv + h + mm * ffn_w + h
        return mm_out / 2 + 2 * h, whole

    # a stage's layers with experts and without: the first stage holds the
    # leading dense ones, a later one the most MoE layers (experts every
    # moe_every-th layer, the others dense); the one that keeps more counts
    keep_moe, whole_moe = kept(True) if s.is_moe else (0.0, 0.0)
    keep_dense, whole_dense = kept(False)
    most = s.moe_layers_in(stage_layers) if s.is_moe else 0
    fewest = s.moe_layers_first(stage_layers) if s.is_moe else 0
    mixes = (most, fewest)
    per_stage = max(n * keep_moe + (stage_layers - n) * keep_dense for n in mixes)
    recomputed = s.recomputed_layers(stage_layers, vp)
    if s.recompute == "full" and recomputed < stage_layers:
        # Megatron-LM's block method: that many layers of each model chunk
        # recomputed, the others keep everything
        full_stage = max(n * whole_moe + (stage_layers - n) * whole_dense for n in mixes)
        per_stage = (recomputed * per_stage
                     + (stage_layers - recomputed) * full_stage) / stage_layers
    # one layer's whole working set: the larger of the kinds of layer a
    # stage may hold
    whole = max([whole_moe] * (most > 0) + [whole_dense] * (fewest < stage_layers))
    if s.offload_layers:
        # Megatron-LM's CPU offloading: that many layers' activations wait
        # in host memory (the first ones), one layer's on its way
        kept_layers = max(0, stage_layers - s.offload_layers)
        offloaded = 2 * T * per_stage * s.offload_layers / stage_layers / tp
        per_stage = per_stage * kept_layers / stage_layers + whole
    else:
        offloaded = 0.0
    # sequence parallelism splits all of it
    stage_keep = 2 * T * per_stage / tp
    # while a recomputed layer's backward runs it holds what was recomputed:
    # with full recomputation its whole working set, with selective the
    # larger of its kinds' recomputed parts
    if s.recompute == "full":
        working = 2 * T * whole / tp
    elif s.recompute == "selective":
        working = 2 * T * max(whole_moe - keep_moe if most > 0 else 0.0,
                              whole_dense - keep_dense if fewest < stage_layers else 0.0) / tp
    else:
        working = 0.0
    m = s.micro_batches_for(max(1, dp))
    if pp > 1:
        inflight = pp * (1 + (pp - 1) / (pp * vp)) if vp > 1 else pp
        inflight = min(inflight, m + pp - 1)
    else:
        inflight = 1
    activations = stage_keep * inflight + working
    # the logits of a micro-batch and what the loss keeps: Megatron's fused
    # cross-entropy the bf16 logits and their fp32 softmax (6 bytes a value),
    # PyTorch's the bf16 logits, their fp32 copy and its gradient (10)
    logit_bytes = fw.logit_bytes
    logits = (T * s.vocab / tp * logit_bytes) if pp == 1 else 0.0
    counted = weights + grads + optimizer + activations + logits
    reserve = RESERVE_GIB * GiB + RESERVE_FRACTION * counted
    parts = (("weights", weights), ("gradients", grads), ("optimizer", optimizer),
             ("activations", activations), ("logits", logits), ("reserve", reserve))
    return MemoryReport(parts, gpu_gib, offloaded)


def _freed(s: ModelSpec, modules, moe: bool, gi: float, qkv: float) -> float:
    """Values a token of one layer no longer keeps when Megatron-LM's
    selective recomputation recomputes ``modules`` (Megatron-Core's
    ``recompute_modules``), each tensor once however many modules free it.

    * ``core_attn``: nothing with fused attention: its checkpoint keeps Q,
      K and V as inputs and the kernel keeps no more (Megatron-Core warns
      it is not needed then);
    * ``layernorm``: the outputs of the norms Megatron-Core keeps apart
      from their GEMMs (a MoE layer's pre-MLP norm, multi-head latent
      attention's input norm; Transformer Engine fuses the others);
    * ``mla_up_proj``: multi-head latent attention's up-projected, rotated
      Q, K and V, less the latents its checkpoint keeps;
    * ``moe_act``: the routed experts' activation outputs (fc2's input);
    * ``mlp``: a dense layer's MLP but its input (fc1's outputs, fc2's
      input);
    * ``shared_experts``: the shared experts' likewise;
    * ``moe``: the MoE layer but its input (routed copies, the experts'
      and shared experts' outputs and activations)."""
    h, mm = s.hidden, s.mlp_matrices
    routed = s.top_k * s.expert_ffn if moe else 0
    shared = s.shared_experts * s.expert_ffn if moe else 0
    tensors: Dict[str, float] = {}
    if "layernorm" in modules:
        # the norms Megatron-Core keeps apart from their GEMMs (Transformer
        # Engine fuses the others into them: nothing to recompute): a MoE
        # layer's pre-MLP norm, multi-head latent attention's input norm
        tensors["norm_out"] = gi * h * ((1 if moe else 0) + (1 if s.kv_lora_rank else 0))
    if "mla_up_proj" in modules and s.kv_lora_rank:
        tensors["qkv"] = max(0.0, qkv - (s.q_lora_rank + s.kv_lora_rank + s.rope_head_dim))
    if moe:
        if "moe_act" in modules or "moe" in modules:
            tensors["act_routed"] = gi * routed
        if "moe" in modules:
            tensors["route"] = gi * s.top_k * h
            tensors["inner_routed"] = (mm - 1) * routed
        if "shared_experts" in modules or "moe" in modules:
            tensors["act_shared"] = gi * shared
            tensors["inner_shared"] = (mm - 1) * shared
    elif "mlp" in modules:
        tensors["act"] = gi * s.ffn
        tensors["inner"] = (mm - 1) * s.ffn
    return sum(tensors.values())


def memory_verdict(report: MemoryReport) -> str:
    """One line: ``fits: 61.2 of 79.6 GiB`` or ``does not fit: ...``."""
    need = report.total_gib
    if not report.gpu_gib:
        return f"needs {need:.1f} GiB a GPU (GPU memory unknown)"
    word = "fits" if report.fits else "does not fit"
    return f"{word}: {need:.1f} of {report.gpu_gib:.1f} GiB a GPU"


def memory_of_request(cluster, placement, request) -> Optional[MemoryReport]:
    """The memory a GPU of ``placement`` needs for ``request``'s model
    (its workload's ModelSpec) on its layout; None when the job describes
    no model."""
    w = getattr(request, "workload", None)
    if w is None or w.model is None:
        return None
    lay = request.layout.resolved()
    spec = w.model.resolved()
    dims = Dims(tp=lay.tp, cp=lay.cp, pp=lay.pp, ep=lay.ep, etp=lay.expert_tp, dp=lay.dp,
                vp=max(1, spec.virtual_stages))
    gpu, _ = placement_gpu(cluster, placement, cost_params(cluster).gpu_compute)
    return memory_per_gpu(spec, dims, w.style, w.framework, gpu.memory_gib, w.shard)


def memory_finding(report: Optional[MemoryReport], policy: str) -> Optional[str]:
    """What the memory check says under ``policy`` (:data:`MEMORY_POLICIES`):
    None when the layout fits (or nothing is known, or the policy is off),
    else the warning; with ``error`` a LayoutError is raised instead."""
    if policy not in MEMORY_POLICIES:
        raise LayoutError(f"--memory-check {policy!r}: one of {', '.join(MEMORY_POLICIES)}")
    if report is None or report.fits or policy == "off":
        return None
    parts = ", ".join(f"{k} {v:.1f}" for k, v in report.as_dict().items() if v >= 0.05)
    text = (f"the layout does not fit in GPU memory: {memory_verdict(report)} ({parts} GiB); "
            "recompute activations (recompute=selective or full; Megatron-LM's "
            "recompute_modules, recompute_layers), offload them (offload_layers), keep the "
            "gradients in bf16 (grad_dtype=bf16), split the model over more GPUs (tp, pp, ep, "
            "cp) or shard it (ZeRO, FSDP, the distributed optimizer)")
    if policy == "error":
        raise LayoutError(text + "; --memory-check warn submits it anyway")
    return text
