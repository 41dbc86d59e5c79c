"""The communication of one training step, per data-parallel style.

:func:`slurmtopo.cost.evaluate` prices one collective per group kind. A
real step runs many, and which ones depends on how the framework does data
parallelism: DDP all-reduces the gradients once (in buckets), ZeRO-1/2 and
Megatron's distributed optimizer reduce-scatter the gradients and
all-gather the parameters once, FSDP/ZeRO-3 all-gather every layer's
parameters in the forward and again in the backward pass and reduce-scatter
its gradients (about 1.5 times DDP's volume, and many small, latency-bound
messages), and HSDP adds an all-reduce of each shard over the replicate
group. This module lists those calls from a model description
(:class:`ModelSpec`, ``--model 70b`` or explicit numbers) and prices them on
the framework's own groups (:func:`price_step`). docs/cost-model.md has the
formulas and their sources.

Per step and rank, with P parameters, L layers, h hidden size, s sequence
length, b micro-batch, d bytes per value, M micro-batches per step and the
framework's tp, cp, pp, shard and replicate sizes (``calls`` x message):

======== =========================== ================================================
kind     collective                  calls x bytes
======== =========================== ================================================
tp       all-reduce                  4·L/pp·M x b·s/cp·h·d (2 forward, 2 backward)
cp       all-gather, reduce-scatter  2·L/pp·M all-gather + L/pp·M reduce-scatter
                                     x 2·b·s·h·d (K and V)
dp DDP   all-reduce                  ceil(G / bucket) x G/calls, G = P/(tp·pp)·d
ZeRO-1/2 reduce-scatter + all-gather 1 + 1 x G (distributed optimizer alike)
FSDP     all-gather, reduce-scatter  2·L/pp·M all-gather + L/pp reduce-scatter
                                     x P/(L·tp)·d over the shard group
HSDP     all-reduce                  L/pp x P/(L·tp)·d/shard over the replicate group
ep       all-to-all                  4·L/pp·M x b·s/cp·h·d·top_k (dispatch and
                                     combine, forward and backward)
pp       point-to-point              2·M x b·s/cp·h·d (activations, gradients)
======== =========================== ================================================

A reduce-scatter costs what an all-gather of the same total costs on a ring
((n-1) steps of m/n), so both are priced as ``all-gather``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Mapping, Tuple

from slurmtopo.cost.model_spec import (DTYPE_BYTES, MODEL_PRESETS, ModelSpec,  # noqa: F401
                                        model_dict, parse_model)

__all__ = ["ModelSpec", "MODEL_PRESETS", "DTYPE_BYTES", "StyleCall", "StepReport",
           "parse_model", "data_parallel_style", "step_calls", "price_step", "step_dict",
           "ddp_bucket_bytes"]

#: the gradient bucket of each framework's DDP, in bytes for ``d``-byte
#: values: PyTorch DDP's ``bucket_cap_mb=25`` (torchtitan's replicate),
#: Megatron's ``max(40M, 1M*dp)`` parameters, DeepSpeed's
#: ``reduce_bucket_size`` 5e8 elements
def ddp_bucket_bytes(framework: str, dp: int, d: int) -> int:
    if framework == "megatron":
        return max(40_000_000, 1_000_000 * dp) * d
    if framework == "deepspeed":
        return 500_000_000 * d
    return 25 * 1024 * 1024


@dataclass(frozen=True)
class StyleCall:
    """One kind of collective a step runs ``calls`` times."""

    what: str  # "tp", "dp", "fsdp-shard" ... (the role)
    kind: str  # the framework's group kind it runs over
    collective: str  # all-reduce, all-gather (also for reduce-scatter), all-to-all, p2p
    message_bytes: int
    calls: int
    note: str = ""


def data_parallel_style(framework: str, knobs: Mapping[str, object]) -> str:
    """``ddp``, ``zero12`` (ZeRO-1/2, Megatron's distributed optimizer),
    ``fsdp`` or ``hsdp``, from the framework's own settings."""
    if framework == "torchtitan":
        shard = int(knobs["dp_shard"]) * int(knobs["cp"])  # type: ignore[arg-type]
        if shard > 1:
            return "hsdp" if int(knobs["dp_replicate"]) > 1 else "fsdp"  # type: ignore
        return "ddp"
    if framework == "deepspeed":
        stage = int(knobs["zero_stage"])  # type: ignore[arg-type]
        return {0: "ddp", 1: "zero12", 2: "zero12", 3: "fsdp"}[stage]
    if knobs.get("use_megatron_fsdp"):
        return "fsdp"
    return "zero12" if knobs.get("use_distributed_optimizer") else "ddp"


def _sizes(framework: str, k: Mapping[str, object]) -> Dict[str, int]:
    g = {n: int(v) for n, v in k.items() if isinstance(v, int) and not isinstance(v, bool)}
    if framework == "torchtitan":
        return {"tp": g["tp"], "cp": g["cp"], "pp": g["pp"], "ep": g["ep"],
                "dp": g["dp_replicate"] * g["dp_shard"]}
    if framework == "deepspeed":
        return {"tp": g["tp"], "cp": 1, "pp": g["pp"], "ep": g["ep"], "dp": g["dp"]}
    return {"tp": g["tp"], "cp": g["cp"], "pp": g["pp"], "ep": g["ep"], "dp": g["dp"]}


#: the framework's kind for each role
_KINDS: Dict[str, Dict[str, str]] = {
    "megatron": {"tp": "tp", "cp": "cp", "pp": "pp", "ep": "ep", "dp": "dp",
                 "dp-cp": "dp-cp", "replicate": ""},
    "torchtitan": {"tp": "tp", "cp": "cp", "pp": "pp", "ep": "ep", "dp": "dp_replicate",
                   "dp-cp": "fsdp", "replicate": "dp_replicate"},
    "deepspeed": {"tp": "slice_parallel", "cp": "", "pp": "pipe_parallel",
                  "ep": "expert_parallel", "dp": "data_parallel", "dp-cp": "data_parallel",
                  "replicate": ""},
}


def step_calls(framework: str, knobs: Mapping[str, object], model: ModelSpec) -> List[StyleCall]:
    """The collectives of one step of this framework layout (see module doc)."""
    s = _sizes(framework, knobs)
    names = _KINDS[framework]
    style = data_parallel_style(framework, knobs)
    d = model.value_bytes
    per_stage_layers = max(1, math.ceil(model.layers / s["pp"]))
    M = model.micro_batches
    act = model.micro_batch * model.seq_len * model.hidden * d // s["cp"]
    grads = model.params * d // (s["tp"] * s["pp"])
    layer = model.params * d // (model.layers * s["tp"])
    out: List[StyleCall] = []
    if s["tp"] > 1:
        out.append(StyleCall("tp", names["tp"], "all-reduce", act, 4 * per_stage_layers * M))
    if s["cp"] > 1:
        kv = 2 * act * s["cp"]
        out.append(StyleCall("cp", names["cp"], "all-gather", kv, 3 * per_stage_layers * M,
                             "K/V all-gather forward and backward, reduce-scatter backward"))
    if s["ep"] > 1:
        out.append(StyleCall("ep", names["ep"], "all-to-all", act * model.top_k,
                             4 * per_stage_layers * M, "dispatch and combine, both passes"))
    if s["pp"] > 1:
        out.append(StyleCall("pp", names["pp"], "p2p", act, 2 * M))
    dp_block = names["dp-cp"] if framework != "torchtitan" else names["dp"]
    if framework == "megatron" and s["cp"] == 1:
        dp_block = names["dp"]
    if style == "ddp":
        if framework == "torchtitan":
            dp_block = names["dp"]
        calls = max(1, math.ceil(grads / ddp_bucket_bytes(framework, s["dp"], d)))
        out.append(StyleCall("dp", dp_block, "all-reduce", grads // calls, calls,
                             "gradients, one all-reduce per bucket"))
    elif style == "zero12":
        out.append(StyleCall("dp", dp_block, "all-gather", grads, 2,
                             "gradient reduce-scatter + parameter all-gather"))
    else:
        shard_kind = names["dp-cp"]
        if s["cp"] == 1 and framework != "deepspeed":
            shard_kind = "dp_shard" if framework == "torchtitan" else names["dp"]
        out.append(StyleCall("fsdp-shard", shard_kind, "all-gather", layer,
                             2 * per_stage_layers * M + per_stage_layers,
                             "per layer: all-gather forward and backward, reduce-scatter"))
        if style == "hsdp":
            shard = int(knobs["dp_shard"]) * int(knobs["cp"])  # type: ignore[arg-type]
            out.append(StyleCall("fsdp-replicate", names["replicate"], "all-reduce",
                                 max(1, layer // shard), per_stage_layers,
                                 "per layer: the shard's gradients over the replicas"))
    return out


@dataclass(frozen=True)
class StepReport:
    """The priced calls of one step and their sum (the slowest group of each)."""

    framework: str
    style: str
    model: ModelSpec
    #: (call, seconds for all its calls, slowest link class name)
    calls: Tuple[Tuple[StyleCall, float, str], ...]

    @property
    def step_comm_s(self) -> float:
        return sum(t for _, t, _ in self.calls)


def price_step(inv, placement, framework_layout, model: ModelSpec, params=None) -> StepReport:
    """Price :func:`step_calls` of ``framework_layout`` (a FrameworkLayout)
    on ``placement``: per call, its slowest group's time, times its count."""
    from slurmtopo.cost.params import cost_params
    from slurmtopo.cost.pricing import PlacementPricer, shape_time
    from slurmtopo.frameworks.torchtitan import layout as titan_layout

    p = params if params is not None else cost_params(inv)
    pricer = PlacementPricer(inv, p, placement)
    fl = framework_layout
    knobs = dict(fl.knobs)
    groups = dict(fl.groups)
    if fl.framework == "torchtitan" and "fsdp" not in groups:
        # FSDP shards over dp_shard x cp whatever the spmd backend lists
        groups["fsdp"] = titan_layout(**{**knobs, "spmd_backend": "partial_dtensor"}
                                      ).groups["fsdp"]
    priced = []
    for call in step_calls(fl.framework, knobs, model):
        gl = groups[call.kind]
        n = len(gl[0])
        worst, slowest = 0.0, None
        if call.collective == "p2p":
            for cls, t in map(pricer.p2p_pricer(call.message_bytes), gl):
                if t >= worst:
                    worst, slowest = t, cls
        else:
            shape = pricer.shaper(n)
            for sh in {shape(g) for g in gl}:
                t = shape_time(p, sh, call.collective, n, call.message_bytes)
                if t >= worst:
                    worst, slowest = t, sh[0]
        label = slowest.label if slowest is not None else "self"
        priced.append((call, worst * call.calls, label))
    style = data_parallel_style(fl.framework, knobs)
    return StepReport(fl.framework, style, model, tuple(priced))


def step_dict(report: StepReport) -> dict:
    """The report as plain data (``plan --json``'s ``step``)."""
    m = report.model
    return {"framework": report.framework, "style": report.style,
            "model": {"params": m.params, "layers": m.layers, "hidden": m.hidden,
                      "seq_len": m.seq_len, "micro_batch": m.micro_batch, "dtype": m.dtype,
                      "micro_batches": m.micro_batches, "top_k": m.top_k},
            "calls": [{"what": c.what, "kind": c.kind, "collective": c.collective,
                       "message_bytes": c.message_bytes, "calls": c.calls, "time_s": t,
                       "slowest_link": cls, "note": c.note} for c, t, cls in report.calls],
            "step_comm_s": report.step_comm_s}
