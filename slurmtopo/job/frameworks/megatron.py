"""Megatron-LM's groups: :mod:`slurmtopo.job.groups` under the framework's knobs.

:func:`slurmtopo.job.groups.build_groups` is Megatron-LM's ``RankGenerator``
(``megatron/core/parallel_state.py``; checked against NVIDIA/Megatron-LM
commit d98e8a64ddf34856e74b24714e3bedb2f5a39553, 2026-08-22): a dense
generator and an expert one over the order string ``tp-cp-ep-dp-pp``. This
module gives it the registry's shape (:data:`FRAMEWORK`); the groups, their
kind names (``tp``, ``dp-cp``, ``expert-dp`` ...) and their order are
exactly what ``groups`` printed before frameworks existed. Its kinds are the
planner's own, so its layout is planned as it is.

Its configuration is a file holding Megatron-LM's argument list (as passed
to ``pretrain_gpt.py``, any lines, shell quoting): the ``--*-parallel-size``
options, ``--use-distributed-optimizer`` and ``--use-megatron-fsdp``
(:func:`read_knobs`; other options are passed over, Megatron has hundreds,
except one that starts like a parallel-size option but is not one: a typo),
the model (:func:`read_model`) and the overlaps (:func:`read_overlaps`).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks.base import ConfigReader, Framework, RequestTerms
from slurmtopo.job.frameworks.common import FrameworkLayout, Knob, refuse
from slurmtopo.job.frameworks.configs import at, line_of, short
from slurmtopo.job.groups import (CONVENTIONS, DEFAULT_CONVENTION, DEFAULT_ORDER, Layout,
                                  build_groups)

NAME = "megatron"

KNOBS = (
    Knob("tp", 1, "Tensor-parallel size."),
    Knob("cp", 1, "Context-parallel size."),
    Knob("ep", 1, "Expert-parallel size."),
    Knob("pp", 1, "Pipeline-parallel size."),
    Knob("dp", None, "Data-parallel size (default: from --world)."),
    Knob("expert_tp", None, "Expert tensor-parallel size (default: --tp)."),
    Knob("world", None, "Total ranks (default: tp*cp*pp*dp)."),
    Knob("order", None, "Rank order. megatron: first name fastest (default tp-cp-ep-dp-pp); "
                        "torch: last name fastest (default pp-dp-ep-cp-tp).", str),
    Knob("convention", DEFAULT_CONVENTION, "How to read --order.", CONVENTIONS),
    Knob("use_distributed_optimizer", False, "Shard the optimizer state over dp: gradients "
         "reduce-scattered, parameters all-gathered (--use-distributed-optimizer).", bool),
    Knob("use_megatron_fsdp", False, "Shard parameters over dp (Megatron-FSDP, "
         "--use-megatron-fsdp).", bool),
    Knob("sequence_parallel", False, "TP's all-reduces split into all-gather and "
         "reduce-scatter over the sequence (--sequence-parallel).", bool),
    Knob("tp_comm_overlap", False, "TP's collectives overlapped with the GEMMs "
         "(--tp-comm-overlap; with --sequence-parallel).", bool),
    Knob("overlap_grad_reduce", False, "The gradient reduction overlapped with the "
         "backward pass (--overlap-grad-reduce).", bool),
    Knob("overlap_param_gather", False, "The distributed optimizer's parameter gather "
         "overlapped with the forward pass (--overlap-param-gather).", bool),
    Knob("overlap_moe_expert_parallel_comm", False, "EP's all-to-alls overlapped with "
         "another micro-batch's compute (--overlap-moe-expert-parallel-comm).", bool),
)


#: Megatron-LM flags -> the step's overlaps (the Workload's flags); each
#: is also a setting of its own name (``slurmtopo plan --tp-comm-overlap``)
_MEGATRON_OVERLAPS = {"--sequence-parallel": "sequence_parallel",
                      "--tp-comm-overlap": "tp_comm_overlap",
                      "--overlap-grad-reduce": "overlap_grad_reduce",
                      "--overlap-param-gather": "overlap_param_gather",
                      "--overlap-moe-expert-parallel-comm": "ep_comm_overlap"}
#: the settings among KNOBS that turn an overlap on -> the Workload flag
OVERLAP_KNOBS = {flag[2:].replace("-", "_"): field for flag, field in _MEGATRON_OVERLAPS.items()}


def resolved_layout(tp: int = 1, cp: int = 1, ep: int = 1, pp: int = 1, dp: Optional[int] = None,
                    expert_tp: Optional[int] = None, world: Optional[int] = None,
                    order: Optional[str] = None, convention: Optional[str] = None) -> Layout:
    """The resolved :class:`~slurmtopo.job.groups.Layout` (raises LayoutError)."""
    convention = convention or DEFAULT_CONVENTION
    if convention not in DEFAULT_ORDER:
        # Layout.resolved names the conventions; keep its message
        return Layout(convention=convention).resolved()
    return Layout(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, expert_tp=expert_tp,
                  order=DEFAULT_ORDER[convention] if order is None else order,
                  world=world, convention=convention).resolved()


def layout(use_distributed_optimizer: bool = False, use_megatron_fsdp: bool = False,
           **knobs) -> FrameworkLayout:
    """Megatron's groups for these knobs (see :func:`resolved_layout`); the
    Layout they come from is kept with them (``planner_layout``), and the
    overlaps set (:data:`OVERLAP_KNOBS`, which change no group) after it."""
    flags = {name: knobs.pop(name) for name in OVERLAP_KNOBS if name in knobs}
    for name, value in (("use_distributed_optimizer", use_distributed_optimizer),
                        ("use_megatron_fsdp", use_megatron_fsdp), *flags.items()):
        if not isinstance(value, bool):
            raise refuse(NAME, f"{name} must be true or false, got {value!r}")
    lay = resolved_layout(**knobs)
    values = (("tp", lay.tp), ("cp", lay.cp), ("ep", lay.ep), ("pp", lay.pp), ("dp", lay.dp),
              ("expert_tp", lay.expert_tp), ("world", lay.world), ("order", lay.order),
              ("convention", lay.convention),
              ("use_distributed_optimizer", use_distributed_optimizer),
              ("use_megatron_fsdp", use_megatron_fsdp),
              *((name, True) for name in OVERLAP_KNOBS if flags.get(name)))
    return FrameworkLayout(NAME, lay.world, values, build_groups(lay), planner_layout=lay)


# ---------------------------------------------------------------------------
# its configuration: Megatron-LM's argument list

#: Megatron-LM option -> (setting, takes a value)
_MEGATRON = {"--tensor-model-parallel-size": ("tp", True),
             "--pipeline-model-parallel-size": ("pp", True),
             "--context-parallel-size": ("cp", True),
             "--expert-model-parallel-size": ("ep", True),
             "--expert-tensor-parallel-size": ("expert_tp", True),
             "--use-distributed-optimizer": ("use_distributed_optimizer", False),
             "--use-megatron-fsdp": ("use_megatron_fsdp", False)}
_OPTION = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_.-]*$")


def read_knobs(text: str, where: str) -> Dict[str, object]:
    """The parallel settings of a file holding Megatron-LM's argument list."""
    try:
        words = shlex.split(text.replace("\\\n", "  "), comments=True)
    except ValueError as exc:
        raise LayoutError(f"{where}: cannot split the arguments: {exc}") from None

    def here(word: str) -> str:
        return at(where, line_of(text, re.escape(word)))

    out: Dict[str, object] = {}
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if not name.startswith("--"):
            i += 1  # the command, or a value of an option not read here
            continue
        if not _OPTION.match(name):
            raise LayoutError(f"{here(name[:20])}: {short(name)} is not an option name")
        known = _MEGATRON.get(name)
        if known is None:
            near = next((k for k in _MEGATRON if name.startswith(k)
                         or (k.startswith(name) and len(name) > 12)), None)
            if near is not None:
                raise LayoutError(f"{here(name)}: {name} is not a Megatron-LM option (did you "
                                  f"mean {near}?)")
            i += 1
            continue
        setting, takes_value = known
        if not takes_value:
            if eq:
                raise LayoutError(f"{here(name)}: {name} takes no value")
            out[setting] = True
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        else:
            if i + 1 >= len(words):
                raise LayoutError(f"{here(name)}: {name} needs a value")
            value = words[i + 1]
            i += 2
        if not re.fullmatch(r"[0-9]{1,9}", value):
            raise LayoutError(f"{here(name)}: {name} {short(value)}: expected a whole number")
        out[setting] = int(value)
    if not out:
        raise LayoutError(f"{where}: names none of Megatron-LM's parallel settings "
                          f"({', '.join(_MEGATRON)})")
    return out


#: Megatron-LM option -> model key (the value a whole number)
_MEGATRON_MODEL = {"--num-layers": "layers", "--hidden-size": "hidden",
                   "--ffn-hidden-size": "ffn", "--num-attention-heads": "heads",
                   "--num-query-groups": "kv_heads", "--kv-channels": "head_dim",
                   "--seq-length": "seq_len", "--micro-batch-size": "micro_batch",
                   "--global-batch-size": "global_batch", "--num-experts": "experts",
                   "--moe-router-topk": "top_k", "--moe-ffn-hidden-size": "expert_ffn",
                   "--vocab-size": "vocab", "--q-lora-rank": "q_lora_rank",
                   "--kv-lora-rank": "kv_lora_rank", "--qk-head-dim": "head_dim",
                   "--qk-pos-emb-head-dim": "rope_head_dim", "--v-head-dim": "v_head_dim",
                   "--num-virtual-stages-per-pipeline-rank": "virtual_stages",
                   "--num-layers-per-virtual-pipeline-stage": "_layers_per_virtual_stage",
                   "--moe-shared-expert-intermediate-size": "_shared_expert_size",
                   "--recompute-granularity": "recompute", "--fp8-format": "_fp8",
                   "--fp8-recipe": "_fp8_recipe", "--fp4-format": "_fp4",
                   "--recompute-method": "_recompute_method",
                   "--recompute-num-layers": "_recompute_num_layers",
                   "--cpu-offloading-num-layers": "_offload_layers"}
#: Megatron-LM flags -> (key, value)
_MEGATRON_FLAGS = {"--bf16": ("dtype", "bf16"), "--fp16": ("dtype", "fp16"),
                   "--swiglu": ("glu", 1), "--untie-embeddings-and-output-weights": ("tied", 0),
                   "--grad-reduce-in-bf16": ("grad_dtype", "bf16"),
                   "--cpu-offloading": ("_cpu_offloading", 1)}
#: Megatron-LM options that take a list of values (option -> model key)
_MEGATRON_LISTS = {"--recompute-modules": "recompute_modules"}
#: what its selective recomputation may recompute (Megatron-Core's
#: ``TransformerConfig.recompute_modules``, default ``core_attn``), in its
#: order: the one spelling a model description keeps them in
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                     "shared_experts")


def _megatron_words(text: str, where: str):
    try:
        return shlex.split(text.replace("\\\n", "  "), comments=True)
    except ValueError as exc:
        raise LayoutError(f"{where}: cannot split the arguments: {exc}") from None


def read_model(text: str, where: str) -> Dict[str, object]:
    """The ``--model`` keys of Megatron-LM's arguments."""
    words = _megatron_words(text, where)
    raw: Dict[str, object] = {}
    flags = set()
    i = 0
    while i < len(words):
        name, eq, inline = words[i].partition("=")
        if name in _MEGATRON_FLAGS:
            flags.add(name)
        if name in _MEGATRON_LISTS:
            here = at(where, line_of(text, re.escape(name)))
            values = [inline] if eq else []
            i += 1
            while not eq and i < len(words) and not words[i].startswith("--"):
                values.append(words[i])
                i += 1
            if not values or any(v not in RECOMPUTE_MODULES for v in values):
                raise LayoutError(f"{here}: {name} {short(' '.join(values))}: known: "
                                  f"{', '.join(RECOMPUTE_MODULES)}")
            raw[_MEGATRON_LISTS[name]] = "+".join(values)
            continue
        key = _MEGATRON_MODEL.get(name)
        if key is None:
            i += 1
            continue
        here = at(where, line_of(text, re.escape(name)))
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            value, i = words[i + 1], i + 2
        else:
            raise LayoutError(f"{here}: {name} needs a value")
        if key in ("recompute", "_fp8", "_fp8_recipe", "_fp4", "_recompute_method"):
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", value):
                raise LayoutError(f"{here}: {name} {value[:40]!r}: not a Megatron-LM value")
            raw[key] = value.lower()
        else:
            if not re.fullmatch(r"[0-9]{1,12}", value):
                raise LayoutError(f"{here}: {name} {value[:40]!r}: expected a whole number")
            raw[key] = int(value)
    out: Dict[str, object] = {k: v for k, v in raw.items() if not k.startswith("_")}
    for flag in flags:
        key, value = _MEGATRON_FLAGS[flag]
        if not key.startswith("_"):
            out.setdefault(key, value)
    if raw.get("recompute") == "full" and raw.get("_recompute_method") == "block":
        # the block method recomputes that many layers of each stage (the
        # uniform one every layer, in chunks of that many)
        out["recompute_layers"] = raw.get("_recompute_num_layers", 0)
    if "--cpu-offloading" in flags and raw.get("_offload_layers"):
        out["offload_layers"] = raw["_offload_layers"]
    if "--fp16" in flags and "--bf16" in flags:
        raise LayoutError(f"{where}: both --bf16 and --fp16")
    if any(k in out for k in ("layers", "hidden")):
        # Megatron-LM's own defaults: a GELU MLP, tied embeddings
        out.setdefault("glu", 0)
        out.setdefault("tied", 1)
    if "_fp4" in raw:
        out["dtype"] = "nvfp4"
    elif "_fp8" in raw or "_fp8_recipe" in raw:
        out["dtype"] = "mxfp8" if raw.get("_fp8_recipe") == "mxfp8" else "fp8"
    if "_shared_expert_size" in raw:
        size = int(raw["_shared_expert_size"])  # type: ignore[arg-type]
        per = int(out.get("expert_ffn") or out.get("ffn") or 0)
        out["shared_experts"] = max(1, round(size / per)) if per else 1
    if "_layers_per_virtual_stage" in raw and "layers" in out:
        knobs = read_knobs(text, where) if any(w.startswith("--pipeline-model-parallel-size")
                                              for w in words) else {}
        pp = int(knobs.get("pp", 1))  # type: ignore[arg-type]
        per = max(1, int(raw["_layers_per_virtual_stage"]))  # type: ignore[arg-type]
        out["virtual_stages"] = max(1, int(out["layers"]) // (pp * per))  # type: ignore
    return out


def read_overlaps(text: str, where: str) -> Dict[str, bool]:
    """The overlaps Megatron-LM's flags turn on."""
    out: Dict[str, bool] = {}
    for word in _megatron_words(text, where):
        name = word.partition("=")[0]
        if name in _MEGATRON_OVERLAPS:
            out[_MEGATRON_OVERLAPS[name]] = True
    return out


# ---------------------------------------------------------------------------
# the framework object


class Megatron(Framework):
    """Megatron-LM: the planner's own layout and kinds, its distributed
    optimizer and Megatron-FSDP, Transformer Engine's kernels."""

    name = NAME
    knobs = KNOBS
    planner_kinds = True
    config = ConfigReader("file with Megatron-LM's argument list",
                          read_knobs, read_model, read_overlaps)
    overlap_knobs = OVERLAP_KNOBS
    example = ("slurmtopo groups --framework megatron --config "
               "tests/fixtures/frameworks/megatron.args --world 16")
    sequence_parallel = False  # --sequence-parallel, when the job says so
    gather_overlap = False  # --overlap-param-gather, when the job says so
    tp_overlap_backward = True
    #: Megatron-LM (and NeMo) run Transformer Engine's fused (cuDNN) attention
    attention_kernel = "fused"
    #: its fused cross-entropy keeps the bf16 logits and their fp32 softmax
    logit_bytes = 6
    fp32_grads = True  # its main grads
    selective_recompute = "attention"
    always_fused = True  # Transformer Engine's and Megatron-Core's fused kernels
    advised = True
    block_recompute = True

    def build(self, **knobs) -> FrameworkLayout:
        return layout(**knobs)

    def terms(self, fl: FrameworkLayout) -> RequestTerms:
        lay = fl.planner_layout
        prefer = {}
        if fl.knob("use_megatron_fsdp") and lay.dp * lay.cp > 1:
            prefer["dp-cp" if lay.cp > 1 else "dp"] = "nvlink"  # the FSDP shard group
        return RequestTerms(lay, {k: k for k in fl.groups}, prefer)

    def sizes_world(self, knobs: Mapping[str, Any]) -> bool:
        return knobs.get("dp") is not None  # tp*cp*pp*dp

    def title(self, fl: FrameworkLayout) -> str:
        lay = fl.planner_layout
        return (f"world={lay.world} tp={lay.tp} cp={lay.cp} ep={lay.ep} "
                f"pp={lay.pp} dp={lay.dp} expert_tp={lay.expert_tp} "
                f"expert_dp={lay.expert_dp} order={lay.order} ({lay.convention})")

    def style(self, knobs: Mapping[str, Any]) -> str:
        """Megatron-FSDP, the distributed optimizer (ZeRO-1/2), else DDP."""
        if knobs.get("use_megatron_fsdp"):
            return "fsdp"
        return "zero12" if knobs.get("use_distributed_optimizer") else "ddp"

    def grad_overlap(self, style: str) -> bool:
        return False  # --overlap-grad-reduce, when the job says so

    def ddp_bucket_bytes(self, dp: int, d: int) -> int:
        """Megatron's ``max(40M, 1M*dp)`` parameters a bucket."""
        return max(40_000_000, 1_000_000 * dp) * d

    def advice_variants(self, c, is_moe: bool, fsdp: bool, node_gpus: int) -> List[Any]:
        """Its distributed optimizer, or Megatron-FSDP for dense models
        without a pipeline."""
        out = [c]
        if fsdp and c.pp == 1 and not is_moe:
            out.append(replace(c, style="fsdp"))
        return out

    def advice_recompute(self, spec) -> Tuple[Tuple[str, Tuple[Tuple[str, object], ...]], ...]:
        """None; for a MoE model the modules Megatron Bridge's performance
        recipes recompute to save memory cheaply (the pre-MLP norm and the
        experts' activation, with multi-head latent attention its
        up-projections: ``recompute_modules`` of their GPT-OSS, Qwen3 and
        DeepSeek-V3 configs); then full, of as few layers of each model
        chunk as fit (:attr:`block_recompute`, its block method, as those
        recipes' ``recompute_num_layers``). Its default selective
        recomputation (core_attn) frees nothing beside fused attention, so
        it is not tried."""
        ladder: List[Tuple[str, Tuple[Tuple[str, object], ...]]] = [("none", ())]
        if spec.is_moe:
            # in a model description's spelling (Megatron-Core's order)
            mods = "moe_act+layernorm+mla_up_proj" if spec.kv_lora_rank else "moe_act+layernorm"
            ladder.append(("selective", (("recompute_modules", mods),)))
        ladder.append(("full", ()))
        return tuple(ladder)

    def advice_model_keys(self, spec) -> Tuple[Tuple[str, object], ...]:
        """Main gradients in bf16 (--grad-reduce-in-bf16), as Megatron
        Bridge's performance recipes run (``grad_reduce_in_fp32 = False``)."""
        return (("grad_dtype", "bf16"),)

    def advice_knobs(self, c, gpus: int) -> Dict[str, object]:
        """Its layout, with the overlaps its performance recipes turn on: the
        gradient reduction and the parameter gather; with TP, sequence
        parallelism and TP's overlap (which needs it); with EP, EP's
        all-to-all overlap where Megatron-Core accepts it (its
        TransformerConfig checks, at the commit this module names: without
        a pipeline or with interleaving, and without full recomputation)."""
        k = super().advice_knobs(c, gpus)
        if c.ep > 1:
            k["expert_tp"] = 1
        k["use_megatron_fsdp" if c.style == "fsdp" else "use_distributed_optimizer"] = True
        if c.tp > 1:
            k["sequence_parallel"] = k["tp_comm_overlap"] = True
        k["overlap_grad_reduce"] = k["overlap_param_gather"] = True
        if c.ep > 1 and (c.pp == 1 or c.vp > 1) and c.recompute != "full":
            k["overlap_moe_expert_parallel_comm"] = True
        return k

    def plan_line_options(self, knobs: Mapping[str, object]) -> Dict[str, object]:
        return dict(knobs)  # its layout options, sizes of 1 included


FRAMEWORK = Megatron()
