"""The whole training step: compute, the communication left exposed, the
pipeline bubble and the optimizer, and the memory a GPU needs
(:func:`compose`).

The step function prices every collective of a step on the placement's
groups and says what compute each may overlap. This module adds what the
GPUs compute (:mod:`slurmtopo.cost.compute`) and decides how much of each
collective that compute hides:

===========================  ===============================================
call                         exposed seconds (``t``: all its calls)
===========================  ===============================================
DP gradient reduction        ``max(0, t - B)`` when the framework overlaps
(DDP all-reduce, ZeRO/FSDP   it with the backward pass (``B``: the backward
reduce-scatter, HSDP         of the micro-batch that produces the gradients,
all-reduce)                  the last one), else ``t``
ZeRO-1/2 parameter gather    ``max(0, t - F)`` when overlapped with the
                             next forward pass (``F``: one micro-batch's)
FSDP layer gathers           ``max(0, t - F_all)`` forward, ``max(0, t -
                             B_all)`` backward: every layer's gather hides
                             behind the previous layer's compute
TP (with tp-comm-overlap)    ``max(0, t - G)`` (``G``: the step's GEMMs that
                             Megatron's userbuffers pipeline them with),
                             else ``t``
CP                           ``max(0, t - A)`` (``A``: attention: the ring
                             passes K/V while it computes)
EP all-to-all                ``max(0, t - E)`` with the framework's overlap
                             (``E``: the experts' and attention's compute of
                             the other micro-batch), else ``t``
PP send/receive              ``t`` without interleaving; with it the steady
                             state overlaps (Megatron ``overlap_p2p_comm``)
                             and only warm-up and cool-down, ``2 (pp-1)``
                             sends, are exposed
===========================  ===============================================

Step time = ``M x (forward + backward + recompute)`` of the slowest stage
+ the bubble ``(pp - 1) / vp`` micro-batches of it (1F1B; interleaved with
``vp`` virtual stages) + the optimizer + the exposed communication.
Tokens a second are the global batch's tokens over that; MFU is model
FLOPs (:func:`~slurmtopo.cost.compute.model_flops_per_token`) over the
GPU's dense peak in the run's dtype.

Pure; no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.cost.compute import (FIT, ComputeFit, Dims, GpuFigures, StageCompute,
                                    host_link_gbps, model_flops_per_token, optimizer_seconds,
                                    placement_gpu, stage_compute)
from slurmtopo.cost.memory import MemoryReport, memory_per_gpu
from slurmtopo.cost.model_spec import ModelSpec
from slurmtopo.job.frameworks import registry

__all__ = ["CommCall", "WholeStep", "compose", "compose_at", "compose_priced",
           "exposed_per_call", "whole_json"]


@dataclass(frozen=True)
class CommCall:
    """One collective of the step, priced: its role ``what`` (tp, cp, ep,
    expert-tp, pp, dp, fsdp-shard, fsdp-replicate), the planner's ``kind``
    it runs on, the seconds of all its calls, the pass it runs in
    (``phase``: forward, backward, optimizer) and the compute the framework
    lets it overlap (``overlaps_with``: forward, backward, none) as the
    step function tags it (:class:`slurmtopo.cost.step.StepCall`)."""

    what: str
    kind: str
    seconds: float
    overlaps_with: str = "none"
    phase: str = "backward"
    collective: str = ""


@dataclass(frozen=True)
class WholeStep:
    """One step, composed (see the module doc). Seconds throughout."""

    time_s: float
    compute_s: float
    bubble_s: float
    optimizer_s: float
    #: per kind of call ("tp", "dp" ...): exposed seconds, and all seconds
    exposed_comm: Tuple[Tuple[str, float], ...]
    comm: Tuple[Tuple[str, float], ...]
    #: per call given, its exposed seconds (in the order given)
    exposed_per_call: Tuple[float, ...]
    tokens_per_step: float
    gpus: int
    mfu: float
    memory: MemoryReport
    stage: StageCompute
    micro_batches: int
    gpu: str = ""
    notes: Tuple[str, ...] = field(default=())
    #: what copying offloaded activations to and from host memory adds
    #: where the compute beside it is shorter (``offload_layers``)
    offload_s: float = 0.0

    @property
    def exposed_comm_s(self) -> float:
        return sum(v for _, v in self.exposed_comm)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.time_s if self.time_s > 0 else 0.0

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / max(1, self.gpus)


def _pool(c: CommCall, dims: Dims) -> Optional[str]:
    """Which compute window a call hides behind (None: it is exposed)."""
    w, ov = c.what, c.overlaps_with
    if w.startswith("expert-dp"):
        # the experts' gradients and parameters over the expert-data-parallel
        # groups hide in the same windows as the dense ones
        w = "dp" if w == "expert-dp" else "fsdp" + w[len("expert-dp"):]
    if w == "pp":
        return "pp"
    if ov == "none":
        return None
    if w == "fsdp-shard" and c.phase == "forward":
        return "fsdp-forward"
    if w == "fsdp-shard" and c.collective != "reduce-scatter":
        return "fsdp-backward"
    if w in ("dp", "fsdp-shard", "fsdp-replicate"):
        return "param-gather" if c.phase == "optimizer" or ov == "forward" else "grads"
    if w in ("tp", "expert-tp"):
        return "tp"
    if w in ("cp", "ep"):
        return w
    return None


def _windows(st: StageCompute, m: int) -> Dict[str, float]:
    """Seconds of compute each pool can hide behind in a step."""
    parts = dict(st.parts)
    fwd = st.forward_s
    bwd = st.backward_s + st.recompute_s
    return {"grads": bwd,  # the last micro-batch's backward
            "param-gather": fwd,  # the first micro-batch's forward
            "fsdp-forward": m * fwd, "fsdp-backward": m * bwd,
            "tp": m * (parts.get("gemm", 0.0) + parts.get("expert_gemm", 0.0)),
            "cp": m * parts.get("attention", 0.0),
            "ep": m * (parts.get("expert_gemm", 0.0) + parts.get("attention", 0.0))}


def exposed_per_call(calls: Sequence[CommCall], st: StageCompute, m: int,
                     dims: Dims, overlap_cost: float = 0.0) -> List[float]:
    """Each call's seconds no compute hides (the module doc's table): the
    calls sharing a window hide together (``max(0, their sum - window)``,
    shared in proportion) and the part hidden still costs ``overlap_cost``
    of itself (:attr:`ComputeFit.overlap_cost`: the collectives' kernels
    slow the compute they run beside); PP sends with interleaving only in
    warm-up and cool-down."""
    win = _windows(st, m)
    pools: Dict[str, float] = {}
    for c in calls:
        key = _pool(c, dims)
        if key and key != "pp":
            pools[key] = pools.get(key, 0.0) + c.seconds
    out = []
    for c in calls:
        key = _pool(c, dims)
        if key is None:
            out.append(c.seconds)
        elif key == "pp":
            interleaved = max(1, dims.vp) > 1
            out.append(min(c.seconds, c.seconds / m * (dims.pp - 1)) if interleaved and m
                       else c.seconds)
        else:
            total = pools[key]
            left = max(0.0, total - win[key])
            paid = left + overlap_cost * (total - left)
            out.append(c.seconds * paid / total if total > 0 else 0.0)
    return out


def compose(spec: ModelSpec, dims: Dims, gpu: GpuFigures, calls: Sequence[CommCall],
            style: str = "ddp", framework: str = registry.DEFAULT_FRAMEWORK,
            fit: ComputeFit = FIT, shard: int = 0, notes: Sequence[str] = (),
            attention: Optional[str] = None) -> WholeStep:
    """The step of ``spec`` on a layout of ``dims`` with the priced
    communication ``calls`` (see the module doc); ``attention`` the
    attention kernels' class (fused, flash2), by default the framework's
    (``Framework.attention_kernel``)."""
    s = spec.resolved()
    fw = registry.get(framework)
    st = stage_compute(s, dims, gpu, fit, attention or fw.attention_kernel,
                       fw.selective_recompute, fw.eager_kernels(s.compile))
    if st.eager and not s.compile:
        notes = tuple(notes) + (f"{framework} runs the norms, activation and rotary embedding "
                                "eagerly unless the model is compiled: priced so "
                                "(compile=on prices them fused)",)
    m = s.micro_batches_for(dims.dp)
    vp = max(1, dims.vp)
    mb = st.microbatch_s
    bubble = (dims.pp - 1) / vp * mb if dims.pp > 1 else 0.0
    mem = memory_per_gpu(s, dims, style, framework, gpu.memory_gib, shard)
    opt = optimizer_seconds(_local_params(s, dims, style), gpu)
    per_call = exposed_per_call(calls, st, m, dims, fit.overlap_cost)
    exposed: Dict[str, float] = {}
    total: Dict[str, float] = {}
    for c, e in zip(calls, per_call):
        key = _kind_name(c.what)
        total[key] = total.get(key, 0.0) + c.seconds
        exposed[key] = exposed.get(key, 0.0) + e
    compute = m * mb + opt
    offload = m * offload_seconds(mem.offloaded_bytes, gpu, st)
    time = compute + bubble + sum(exposed.values()) + offload
    tokens = float(m * s.micro_batch * dims.dp * s.seq_len)
    world = dims.world
    peak, _ = gpu.peak(s.dtype)
    mfu = (model_flops_per_token(s) * tokens / time / world / peak) if time > 0 else 0.0
    return WholeStep(time, compute, bubble, opt, tuple(sorted(exposed.items())),
                     tuple(sorted(total.items())), tuple(per_call), tokens, world, mfu, mem, st,
                     m, gpu.name, tuple(notes), offload)


def offload_seconds(offloaded: float, gpu: GpuFigures, st: StageCompute) -> float:
    """Seconds a micro-batch waits on offloaded activations: Megatron-LM
    copies each offloaded layer's activations to host memory while the
    next layers compute and back while the backward pass runs ahead of
    them, so a copy costs only what it outlasts the pass beside it (over
    the GPU's host link, :func:`~slurmtopo.cost.compute.host_link_gbps`)."""
    if not offloaded:
        return 0.0
    copy = offloaded / (host_link_gbps(gpu) * 1e9)
    return max(0.0, copy - st.forward_s) + max(0.0, copy - st.backward_s - st.recompute_s)


def _kind_name(what: str) -> str:
    """The name a call's seconds are reported under: dp for every data-
    parallel call (gradients, parameter gathers, FSDP), expert-dp for the
    experts' (the step function's expert-dp, expert-dp-shard and
    expert-dp-replicate calls), else the role."""
    if what.startswith("expert-dp"):
        return "expert-dp"
    return "dp" if what in ("dp", "dp-gather", "fsdp-shard", "fsdp-replicate") else what


def _local_params(s: ModelSpec, dims: Dims, style: str) -> float:
    """Parameters the optimizer of one rank updates."""
    expert = s.moe_layers * s.experts * s.expert_params() if s.is_moe else 0.0
    dense = (s.counted_params() - expert) / (dims.tp * dims.pp)
    expert = expert / (dims.ep * dims.etp * dims.pp)
    if style != "ddp":
        # the dense shards over the data-parallel ranks, the experts' over
        # the ranks holding the same experts (tp cp dp / (ep etp) of them)
        dense /= max(1, dims.dp * dims.cp)
        expert /= max(1, dims.tp * dims.cp * dims.dp // (dims.ep * dims.etp))
    return dense + expert


def whole_json(step: WholeStep) -> Dict[str, object]:
    """The whole step's numbers for ``plan --json``'s ``step``:
    tokens_per_s, tokens_per_s_per_gpu, mfu, memory_gib_per_gpu (and the
    memory by part, whether it fits), the compute, bubble and optimizer
    seconds, the micro-batches and the GPU it was priced at."""
    r = _round
    return {"tokens_per_s": r(step.tokens_per_s),
            "tokens_per_s_per_gpu": r(step.tokens_per_s_per_gpu), "mfu": r(step.mfu),
            "memory_gib_per_gpu": r(step.memory.total_gib),
            "memory_fits": step.memory.fits, "gpu_memory_gib": r(step.memory.gpu_gib),
            "memory_gib": {k: r(v) for k, v in step.memory.as_dict().items()},
            "compute_s": step.compute_s, "bubble_s": step.bubble_s,
            "optimizer_s": step.optimizer_s, "micro_batches": step.micro_batches,
            "gpu": step.gpu, **({"offload_s": step.offload_s} if step.offload_s else {})}


def _round(x: float) -> float:
    """Six significant digits: stable output, no float noise."""
    if not x or not math.isfinite(x):
        return x
    return float(f"{x:.6g}")


def compose_priced(inv, placement, layout, workload, model: ModelSpec, priced,
                   params, fit: ComputeFit = FIT) -> Optional[WholeStep]:
    """The whole step of the step function's priced calls (duck-typed
    :class:`slurmtopo.cost.step.CallPrice`: ``call.what``, ``call.kind``,
    ``call.phase``, ``call.overlaps_with``, ``call.collective``,
    ``seconds``) on ``placement`` for the planner's ``layout``, at the
    slowest GPU of its hosts (:func:`~slurmtopo.cost.compute.placement_gpu`);
    None when the job describes no model (the step is its communication
    alone)."""
    if workload is None or workload.model is None:
        return None
    gpu, notes = placement_gpu(inv, placement, getattr(params, "gpu_compute", ()))
    return compose_at(gpu, layout, workload, model, priced, fit, notes)


def compose_at(gpu: GpuFigures, layout, workload, model: ModelSpec, priced,
               fit: ComputeFit = FIT, notes: Sequence[str] = ()) -> WholeStep:
    """:func:`compose_priced` at a given GPU: the placement's slowest, or
    for the lower bound (:mod:`slurmtopo.cost.bound`) each GPU model a job
    could run at."""
    lay = layout.resolved()
    spec = model.resolved()
    dims = Dims(tp=lay.tp, cp=lay.cp, pp=lay.pp, ep=lay.ep, etp=lay.expert_tp, dp=lay.dp,
                vp=max(1, spec.virtual_stages))
    calls = [CommCall(c.call.what, c.call.kind, c.seconds, c.call.overlaps_with, c.call.phase,
                      c.call.collective) for c in priced]
    return compose(spec, dims, gpu, calls, workload.style, workload.framework, fit,
                   workload.shard, notes)
