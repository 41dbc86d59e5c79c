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
from typing import Dict, Mapping, Optional, Sequence, Tuple

from slurmtopo.cost.compute import (FIT, ComputeFit, Dims, GpuFigures, StageCompute,
                                    model_flops_per_token, optimizer_seconds, stage_compute)
from slurmtopo.cost.memory import MemoryReport, memory_per_gpu
from slurmtopo.cost.model_spec import ModelSpec

__all__ = ["CommCall", "Overlaps", "WholeStep", "compose", "exposed_seconds", "step_json"]


@dataclass(frozen=True)
class CommCall:
    """One kind of collective of the step, priced: ``what`` (its role: tp,
    cp, ep, expert-tp, pp, dp, dp-gather, fsdp-shard, fsdp-replicate),
    the planner's ``kind`` it runs on, the seconds of all its calls, and
    the pass whose compute it may overlap (forward, backward, none)."""

    what: str
    kind: str
    seconds: float
    overlaps_with: str = "none"
    calls: int = 1


@dataclass(frozen=True)
class Overlaps:
    """Which overlaps the framework makes (None: its default)."""

    grad_reduce: bool = True
    param_gather: bool = True
    tp_comm: bool = False
    ep_comm: bool = False
    p2p: Optional[bool] = None  # None: with interleaving (Megatron's overlap_p2p_comm)


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
    tokens_per_step: float
    gpus: int
    mfu: float
    memory: MemoryReport
    stage: StageCompute
    micro_batches: int
    notes: Tuple[str, ...] = field(default=())

    @property
    def exposed_comm_s(self) -> float:
        return sum(v for _, v in self.exposed_comm)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.time_s if self.time_s > 0 else 0.0

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / max(1, self.gpus)


def exposed_seconds(call: CommCall, st: StageCompute, m: int, dims: Dims, ov: Overlaps) -> float:
    """The seconds of ``call`` no compute hides (the module doc's table)."""
    t = call.seconds
    parts = dict(st.parts)
    fwd, bwd = st.forward_s, st.backward_s + st.recompute_s
    w = call.what
    if w in ("dp", "fsdp-replicate") or (w == "fsdp-shard" and call.overlaps_with == "backward"):
        if w == "fsdp-shard":
            return max(0.0, t - m * bwd)
        return max(0.0, t - bwd) if ov.grad_reduce else t
    if w == "dp-gather":
        return max(0.0, t - fwd) if ov.param_gather else t
    if w == "fsdp-shard":  # the forward gathers
        return max(0.0, t - m * fwd)
    if w in ("tp", "expert-tp"):
        gemms = m * (parts.get("gemm", 0.0) + parts.get("expert_gemm", 0.0))
        return max(0.0, t - gemms) if ov.tp_comm else t
    if w == "cp":
        return max(0.0, t - m * parts.get("attention", 0.0))
    if w == "ep":
        hide = m * (parts.get("expert_gemm", 0.0) + parts.get("attention", 0.0))
        return max(0.0, t - hide) if ov.ep_comm else t
    if w == "pp":
        interleaved = dims.vp > 1 if ov.p2p is None else ov.p2p
        if interleaved and m > 0:
            return min(t, t / (2 * m) * 2 * (dims.pp - 1))
        return t
    return t


def compose(spec: ModelSpec, dims: Dims, gpu: GpuFigures, calls: Sequence[CommCall],
            overlaps: Overlaps = Overlaps(), style: str = "ddp", framework: str = "megatron",
            fit: ComputeFit = FIT, shard: int = 0, notes: Sequence[str] = ()) -> WholeStep:
    """The step of ``spec`` on a layout of ``dims`` with the priced
    communication ``calls`` (see the module doc)."""
    s = spec.resolved()
    st = stage_compute(s, dims, gpu, fit)
    m = s.micro_batches_for(dims.dp)
    vp = max(1, s.virtual_stages, dims.vp)
    mb = st.microbatch_s
    bubble = (dims.pp - 1) / vp * mb if dims.pp > 1 else 0.0
    # the optimizer updates the rank's share of the parameters
    mem = memory_per_gpu(s, dims, style, framework, gpu.memory_gib, shard)
    local = _local_params(s, dims, style)
    opt = optimizer_seconds(local, gpu)
    exposed: Dict[str, float] = {}
    total: Dict[str, float] = {}
    for c in calls:
        key = _kind_name(c.what)
        total[key] = total.get(key, 0.0) + c.seconds
        exposed[key] = exposed.get(key, 0.0) + exposed_seconds(c, st, m, dims, overlaps)
    compute = m * mb + opt
    time = compute + bubble + sum(exposed.values())
    tokens = float(m * s.micro_batch * dims.dp * s.seq_len)
    world = dims.world
    peak, _ = gpu.peak(s.dtype)
    mfu = (model_flops_per_token(s) * tokens / time / world / peak) if time > 0 else 0.0
    return WholeStep(time, compute, bubble, opt, tuple(sorted(exposed.items())),
                     tuple(sorted(total.items())), tokens, world, mfu, mem, st, m, tuple(notes))


def _kind_name(what: str) -> str:
    """The name a call's seconds are reported under: dp for every data-
    parallel call (gradients, parameter gathers, FSDP), else the role."""
    return "dp" if what in ("dp", "dp-gather", "fsdp-shard", "fsdp-replicate") else what


def _local_params(s: ModelSpec, dims: Dims, style: str) -> float:
    """Parameters the optimizer of one rank updates."""
    expert = s.moe_layers * s.experts * s.expert_params() if s.is_moe else 0.0
    dense = s.counted_params() - expert
    local = dense / (dims.tp * dims.pp) + expert / (dims.ep * dims.etp * dims.pp)
    if style != "ddp":
        local /= max(1, dims.dp * dims.cp)
    return local


def step_json(step: WholeStep) -> Dict[str, object]:
    """``plan --json``'s ``step`` numbers: time_s, tokens_per_s,
    tokens_per_s_per_gpu, mfu, memory_gib_per_gpu, exposed_comm_s per kind,
    and the parts."""
    r = _round
    return {"time_s": r(step.time_s), "tokens_per_s": r(step.tokens_per_s),
            "tokens_per_s_per_gpu": r(step.tokens_per_s_per_gpu), "mfu": r(step.mfu),
            "memory_gib_per_gpu": r(step.memory.total_gib),
            "memory_fits": step.memory.fits,
            "gpu_memory_gib": r(step.memory.gpu_gib),
            "memory_gib": {k: r(v) for k, v in step.memory.as_dict().items()},
            "exposed_comm_s": {k: r(v) for k, v in step.exposed_comm},
            "comm_s": {k: r(v) for k, v in step.comm},
            "compute_s": r(step.compute_s), "bubble_s": r(step.bubble_s),
            "optimizer_s": r(step.optimizer_s), "micro_batches": step.micro_batches,
            "notes": list(step.notes)}


def _round(x: float) -> float:
    """Six significant digits: stable output, no float noise."""
    if not x or not math.isfinite(x):
        return x
    return float(f"{x:.6g}")


def by_role(totals: Mapping[str, float]) -> Dict[str, float]:  # pragma: no cover - helper
    return dict(totals)
