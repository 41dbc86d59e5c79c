"""The calls of one training step, as a framework runs them: the call
(:class:`StepCall`) and the sizes every call is built from
(:class:`StepSizes`).

A framework composes its step's list of calls
(:meth:`slurmtopo.job.frameworks.base.Framework.step_calls`) from these;
the cost model (:func:`slurmtopo.cost.step.price_step`) prices the list it
returns, each call on the planner's groups of its kind. The types live here,
below both, because the job's wing sits under the cost model's: a framework
may not import the cost model, and the cost model reads what the framework
built.

The model description is read by attribute (the cost model's
``ModelSpec``, or anything with its fields), so nothing here imports it.
Pure arithmetic: docs/cost-model.md, "One training step", has the formulas
and their sources.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Tuple

from slurmtopo.job.groups import Layout

__all__ = ["PHASES", "OVERLAPS", "StepCall", "StepSizes", "step_sizes", "micro_batches",
           "moe_layers", "gradient_bytes", "kv_bytes"]

#: when a call runs: in the forward pass, the backward pass, or around the
#: optimizer step
PHASES = ("forward", "backward", "optimizer")

#: what compute a call may overlap ("none": it is exposed, the GPUs wait)
OVERLAPS = ("forward", "backward", "none")


@dataclass(frozen=True)
class StepCall:
    """A collective a step runs ``calls`` times on every group of ``kind``
    (the planner's kind: ``tp``, ``dp-cp``, ``ep`` ...).

    ``part`` splits each group when the framework's group is a part of the
    planner's: ``("block", k)`` consecutive runs of ``k`` ranks (an HSDP
    shard group inside a ``dp-cp`` group), ``("stride", k)`` every k-th rank
    (its replicate group); ``("all", 0)`` the whole group."""

    what: str  # the role: tp, cp, ep, expert-tp, pp, dp, fsdp-shard, fsdp-replicate
    kind: str
    collective: str  # all-reduce, all-gather, reduce-scatter, all-to-all, p2p
    message_bytes: int
    calls: int
    phase: str  # PHASES
    overlaps_with: str  # OVERLAPS
    part: Tuple[str, int] = ("all", 0)
    note: str = ""


def micro_batches(model: Any, dp: int) -> int:
    """Micro-batches a pipeline runs a step: the model description's
    ``micro_batches_for(dp)`` where it has one (a global batch split over
    ``dp`` replicas, issue 35), else its ``micro_batches``."""
    per = getattr(model, "micro_batches_for", None)
    return int(per(dp)) if per is not None else int(model.micro_batches)


def moe_layers(model: Any) -> int:
    """Layers with experts (a model description's ``moe_layers`` where it
    has one, else every layer)."""
    return int(getattr(model, "moe_layers", model.layers) or model.layers)


def _resolved(model: Any) -> Any:
    return model.resolved() if hasattr(model, "resolved") else model


def virtual_stages(model: Any) -> int:
    """Model chunks a pipeline rank holds (interleaving; 1 without)."""
    return max(1, int(getattr(_resolved(model), "virtual_stages", 1) or 1))


def stage_moe_layers(model: Any, stage_layers: int) -> int:
    """Layers with experts in the pipeline stage with the most of them (a
    MoE model description's ``moe_layers_in``: past the leading dense
    layers, every ``moe_every``-th), else every layer of the stage (a job
    that asks for expert parallelism of a model described without experts)."""
    r = _resolved(model)
    if getattr(r, "is_moe", False) and hasattr(r, "moe_layers_in"):
        return int(r.moe_layers_in(stage_layers))
    return stage_layers


@dataclass(frozen=True)
class StepSizes:
    """One step of a layout and a model, in the numbers its calls are
    built from: with L layers, h hidden, s tokens a micro-batch, b
    micro-batch size and d bytes a value, ``stage_layers`` Lp = L/pp,
    ``micro_batches`` M, ``activations`` A = b·s/cp·h·d (one micro-batch's,
    a rank), ``sequence_parallel`` whether TP's all-reduces are split
    (the workload asks it and tp > 1)."""

    layout: Layout  # resolved
    workload: Any  # slurmtopo.job.workload.Workload
    model: Any  # the model description (the cost model's ModelSpec)
    value_bytes: int
    stage_layers: int
    micro_batches: int
    activations: int
    sequence_parallel: bool

    @property
    def moe(self) -> bool:
        """Experts spread over expert-parallel groups (ep > 1)."""
        return self.layout.ep > 1


def step_sizes(layout: Layout, workload: Any, model: Any) -> StepSizes:
    """The sizes of one step of ``layout`` (a Megatron layout, the
    planner's) for ``workload`` and ``model``."""
    lay = layout.resolved()
    d = model.value_bytes
    return StepSizes(
        layout=lay, workload=workload, model=model, value_bytes=d,
        stage_layers=max(1, math.ceil(model.layers / lay.pp)),
        micro_batches=micro_batches(model, lay.dp),
        activations=model.micro_batch * model.seq_len * model.hidden * d // lay.cp,
        sequence_parallel=workload.sequence_parallel and lay.tp > 1)


def kv_bytes(s: StepSizes) -> int:
    """K and V of one micro-batch's whole sequence on a TP rank, which CP
    gathers: kv_heads x head_dim wide each (GQA); with latent attention,
    the up-projected K (with its rope part) and V. A TP rank holds its share
    of the heads (K/V heads replicate when tp exceeds them)."""
    m, tp = s.model, s.layout.tp
    r = _resolved(m)
    if getattr(r, "kv_lora_rank", 0):
        kv_width = r.heads * (r.head_dim + r.rope_head_dim + r.v_head_dim) / tp
    elif getattr(r, "kv_heads", 0):
        kv_width = r.kv_heads * (r.head_dim + r.v_head_dim) / min(tp, r.kv_heads)
    else:
        kv_width = 2 * m.hidden / tp
    return int(m.micro_batch * m.seq_len * kv_width * s.value_bytes)


def gradient_bytes(model: Any, lay: Layout) -> Tuple[int, int]:
    """(dense, expert) gradient bytes a rank holds: with experts (the
    model describes them and ep > 1) a rank holds its tp·pp-th of the
    dense parameters and its expert_tp·ep·pp-th of the experts, reduced
    over different groups; else every parameter is dense (P/(tp·pp))."""
    d = model.value_bytes
    spec = _resolved(model)
    if lay.ep > 1 and getattr(spec, "is_moe", False):
        expert = spec.moe_layers * spec.experts * spec.expert_params()
        dense = (spec.counted_params() - expert) / (lay.tp * lay.pp)
        return int(dense * d), int(expert / (lay.expert_tp * lay.ep * lay.pp) * d)
    return model.params * d // (lay.tp * lay.pp), 0
