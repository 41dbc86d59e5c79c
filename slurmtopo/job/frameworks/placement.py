"""A framework's layout in the planner's terms (:mod:`slurmtopo.job.request`).

The planner plans a :class:`~slurmtopo.job.groups.Layout` and its group kinds
(``tp``, ``dp``, ``dp-cp``, ``ep``, ``expert-dp`` ...). Every framework here
numbers its ranks the way one Megatron layout does, so the planner needs no
special case: :func:`request_terms` gives that layout, which of the
framework's kinds ARE one of its kinds (the same groups, rank for rank:
tests/test_frameworks.py checks it on every fixture), and the preferences
the framework's data-parallel style asks for:

* torchtitan ranks are ``(pp, dp_replicate, dp_shard, cp, tp)`` row-major,
  which is Megatron's ``tp-cp-ep-dp-pp`` with dp = dp_replicate*dp_shard; its
  MoE ``ep`` (innermost of dp_shard*cp*tp) is Megatron's expert layout with
  expert_tp = 1. FSDP shards over ``dp_shard`` (cp folded in), so with
  dp_replicate = 1 the shard group is ``dp-cp`` (``dp`` without cp) and the
  job prefers it inside NVLink. With HSDP the shard group is the inner
  dp_shard ranks of each ``dp`` group: consecutive positions, which the
  planner keeps together as it fills nodes in rank order, and the replicate
  group strides across them.
* DeepSpeed's ``pipe, data, model`` grid is Megatron's ``tp-dp-pp``
  (model = tp); its MoE groups are Megatron's expert layout with expert_tp =
  tp under expert tensor parallelism, 1 otherwise. ZeRO-3 all-gathers the
  parameters over ``data_parallel`` every layer, so a ZeRO-3 job prefers
  ``dp`` inside NVLink (as Megatron-FSDP's ``dp``/``dp-cp`` does). With
  ``use_data_before_expert_parallelism`` the
  expert groups are no Megatron layout's: the dense groups are planned and
  the expert ones are not (noted).

A preference here is soft: the planner relaxes it, as every preference, when
it does not fit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks.common import FrameworkLayout
from slurmtopo.job.groups import Layout
from slurmtopo.job.workload import Workload

__all__ = ["RequestTerms", "request_terms", "translate_kinds", "data_parallel_style",
           "workload_of"]


@dataclass(frozen=True)
class RequestTerms:
    """What the planner is given for a framework's layout."""

    #: the Megatron layout numbering the ranks as the framework does
    layout: Layout
    #: framework kind -> the planner's kind with exactly the same groups
    kinds: Mapping[str, str]
    #: planner kind -> level: what the framework's style prefers
    prefer: Mapping[str, str]
    notes: Tuple[str, ...] = ()


def _megatron(fl: FrameworkLayout) -> RequestTerms:
    from slurmtopo.job.frameworks.megatron import layout_knobs, resolved_layout

    layout = resolved_layout(**layout_knobs(fl))
    prefer = {}
    if fl.knob("use_megatron_fsdp") and layout.dp * layout.cp > 1:
        prefer["dp-cp" if layout.cp > 1 else "dp"] = "nvlink"  # the FSDP shard group
    return RequestTerms(layout, {k: k for k in fl.groups}, prefer)


def _torchtitan(fl: FrameworkLayout) -> RequestTerms:
    k = dict(fl.knobs)
    rep, shard, cp, tp, pp, ep = (k[n] for n in ("dp_replicate", "dp_shard", "cp", "tp", "pp",
                                                 "ep"))
    layout = Layout(tp=tp, cp=cp, pp=pp, dp=rep * shard, ep=ep,
                    expert_tp=1 if ep > 1 else None, world=fl.world).resolved()
    kinds = {"tp": "tp", "cp": "cp", "pp": "pp", "batch": "dp", "dp": "dp", "loss": "dp-cp"}
    if ep > 1:
        kinds["ep"] = "ep"
    if rep == 1:
        kinds.update(dp_shard="dp", fsdp="dp-cp", efsdp="expert-dp")
    if shard == 1:
        kinds["dp_replicate"] = "dp"
    prefer: Dict[str, str] = {}
    if rep == 1 and shard * cp > 1:
        prefer["dp-cp" if cp > 1 else "dp"] = "nvlink"
    return RequestTerms(layout, {a: b for a, b in kinds.items() if a in fl.groups}, prefer)


def _deepspeed(fl: FrameworkLayout) -> RequestTerms:
    k = dict(fl.knobs)
    tp, pp, dp, ep = k["tp"], k["pp"], k["dp"], k["ep"]
    notes = []
    if ep > 1 and k["use_data_before_expert_parallelism"]:
        notes.append("deepspeed: with use_data_before_expert_parallelism the expert groups are "
                     "planned as dense data-parallel ranks (no planner kind has them)")
        ep = 1
    expert_tp = (tp if k["enable_expert_tensor_parallelism"] else 1) if ep > 1 else None
    layout = Layout(tp=tp, pp=pp, dp=dp, ep=ep, expert_tp=expert_tp, world=fl.world).resolved()
    kinds = {"slice_parallel": "tp", "data_parallel": "dp", "pipe_parallel": "pp",
             "model_parallel": "tp-pp"}
    if ep > 1:
        kinds.update(expert_parallel="ep", expert_data_parallel="expert-dp")
    prefer = {"dp": "nvlink"} if k["zero_stage"] == 3 and dp > 1 else {}
    return RequestTerms(layout, kinds, prefer, tuple(notes))


_TERMS = {"megatron": _megatron, "torchtitan": _torchtitan, "deepspeed": _deepspeed}


def request_terms(fl: FrameworkLayout) -> RequestTerms:
    """The planner's layout, kinds and preferences for ``fl``."""
    return _TERMS[fl.framework](fl)


def translate_kinds(terms: RequestTerms, framework: str,
                    levels: Mapping[str, str], what: str) -> Dict[str, str]:
    """``--require``/``--prefer`` given in the framework's kind names ->
    the planner's kinds. Megatron's kinds are the planner's own and pass
    unchanged (JobRequest checks them); a framework kind the planner has no
    kind for is refused by name."""
    if framework == "megatron":  # the planner's own kinds, checked by JobRequest
        return dict(levels)
    out: Dict[str, str] = {}
    for kind, level in levels.items():
        if kind in terms.kinds:
            target = terms.kinds[kind]
        else:
            have = ", ".join(sorted(terms.kinds))
            raise LayoutError(f"--{what} {kind}={level}: this {framework} layout has no {kind!r} "
                              f"groups the planner can place (it places: {have})")
        if target in out and out[target] != level:
            raise LayoutError(f"--{what} names the {target!r} groups twice ({out[target]} and "
                              f"{level})")
        out[target] = level
    return out


def data_parallel_style(framework: str, knobs: Mapping[str, object]) -> str:
    """``ddp``, ``zero12`` (ZeRO-1/2, Megatron's distributed optimizer),
    ``fsdp`` or ``hsdp``, from the framework's own settings: torchtitan
    shards (FSDP) when dp_shard x cp > 1, with replicas (HSDP) when
    dp_replicate > 1; DeepSpeed by ZeRO stage; Megatron-FSDP, the
    distributed optimizer, else DDP."""
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


#: the Workload flags a job's configuration may set
_WORKLOAD_FLAGS = ("sequence_parallel", "tp_comm_overlap", "ep_comm_overlap",
                   "overlap_grad_reduce", "overlap_param_gather")


def workload_of(fl: FrameworkLayout, model=None, nccl_version=None,
                overlaps: Optional[Mapping[str, bool]] = None) -> Workload:
    """The step ``fl`` runs (:class:`~slurmtopo.job.workload.Workload`) for
    ``model`` (a ModelSpec; None: the default model): its data-parallel
    style, HSDP's shard group (dp_shard x cp consecutive ranks of each
    ``dp-cp`` group, its replicas every that many), and sequence
    parallelism where the framework always runs it (torchtitan's TP plan
    shards the norms' sequence); ``overlaps`` the Workload flags the job's
    configuration turns on (``tp_comm_overlap``, ``sequence_parallel`` ...)."""
    k = dict(fl.knobs)
    style = data_parallel_style(fl.framework, k)
    shard = int(k["dp_shard"]) * int(k["cp"]) if style == "hsdp" else 0
    flags = {"sequence_parallel": fl.framework == "torchtitan"}
    flags.update({n: v for n, v in (overlaps or {}).items()
                  if n in _WORKLOAD_FLAGS and v is not None})
    return Workload(framework=fl.framework, style=style, model=model, shard=shard,
                    nccl_version=nccl_version, **flags)
