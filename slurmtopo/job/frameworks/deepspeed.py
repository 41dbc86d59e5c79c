"""DeepSpeed's groups: the pipeline grid, ZeRO, and the MoE expert groups.

Read from DeepSpeed 0.19.8 (the PyPI source distribution):
``deepspeed/runtime/pipe/topology.py`` (``PipeModelDataParallelTopology``
and ``PipelineParallelGrid``), ``deepspeed/utils/groups.py`` (expert groups)
and ``deepspeed/moe/layer.py`` (which of them an ``MoE`` layer builds).

``PipeModelDataParallelTopology(num_pp, num_mp, num_dp)`` lays the axes
``pipe, data, model`` out row-major: ``model`` (tensor slicing) varies
fastest, ``pipe`` slowest. The grid builds, per rank, the groups its getters
return; each kind here is named after that getter:

``pipe_parallel``, ``data_parallel``, ``slice_parallel``
    the ranks that differ only along ``pipe``, ``data`` or ``model``;
``model_parallel``
    the ranks sharing a ``data`` coordinate (pipe and model together: what
    DeepSpeed checks overflow over);
``expert_parallel``, ``expert_data_parallel`` (ep > 1)
    as an ``MoE`` layer builds them. Without expert tensor parallelism (the
    default, or tp = 1) each pipeline stage's ranks are cut into blocks of
    ``ep`` consecutive ranks (expert parallel) and the ranks at one offset of
    every block form an expert-data-parallel group; with
    ``use_data_before_expert_parallelism`` the roles swap (blocks of
    stage/ep consecutive ranks are the expert-data groups). With
    ``enable_expert_tensor_parallelism`` and tp > 1, each data-parallel group
    is cut into ``ep`` consecutive members instead, so experts are split
    over tp like the dense layers.

ZeRO (any stage) partitions over the ``data_parallel`` group; it adds no
group of its own. DeepSpeed's pipeline engine refuses ZeRO stage 2 and 3.

For the planner (:meth:`DeepSpeed.terms`) the ``pipe, data, model`` grid is
Megatron's ``tp-dp-pp`` (model = tp); its MoE groups are Megatron's expert
layout with expert_tp = tp under expert tensor parallelism, 1 otherwise.
ZeRO-3 all-gathers the parameters over ``data_parallel`` every layer, so a
ZeRO-3 job prefers ``dp`` inside NVLink (as Megatron-FSDP's ``dp``/``dp-cp``
does). With ``use_data_before_expert_parallelism`` the expert groups are no
Megatron layout's: the dense groups are planned and the expert ones are not
(noted).

Its configuration is the JSON config (``--deepspeed_config``):
``zero_optimization.stage``, ``tensor_parallel.autotp_size`` and
``use_data_before_expert_parallelism`` (:func:`read_knobs`; pipeline stages
and expert-parallel size live in the model code, so they stay options),
the model (:func:`read_model`) and ``overlap_comm`` (:func:`read_overlaps`).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional

from slurmtopo.errors import LayoutError
from slurmtopo.files.boundedjson import JsonRefused, loads
from slurmtopo.job.frameworks.base import ConfigReader, Framework, RequestTerms
from slurmtopo.job.frameworks.common import (FrameworkLayout, Knob, check_world, integer,
                                             normalised, refuse)
from slurmtopo.job.frameworks.configs import MAX_CONFIG_DEPTH, at, degree, line_of, short
from slurmtopo.job.groups import Layout, mesh_groups

NAME = "deepspeed"

#: PipeModelDataParallelTopology's axes (pipe, data, model) under the knobs'
#: names, outermost first, and how the plan's header names them
MESH = ("pp", "dp", "tp")
MESH_WORDS = "axes pipe, data, model"

KNOBS = (
    Knob("pp", 1, "Pipeline stages (num_pp)."),
    Knob("tp", 1, "Tensor-slicing degree (num_mp)."),
    Knob("dp", None, "Data-parallel degree (num_dp; default: from --world)."),
    Knob("world", None, "World size (default: pp*tp*dp)."),
    Knob("zero_stage", 0, "ZeRO stage (zero_optimization.stage): 0-3."),
    Knob("ep", 1, "Expert-parallel size of the MoE layers (MoE ep_size)."),
    Knob("use_data_before_expert_parallelism", False,
         "Lay expert-data-parallel ranks out before expert-parallel ones.", bool),
    Knob("enable_expert_tensor_parallelism", False,
         "Split experts over tensor parallelism too (MoE argument).", bool),
)


def _divisible(numerator: int, denominator: int) -> None:
    """DeepSpeed's ``_ensure_divisibility``, with its message."""
    if numerator % denominator:
        raise refuse(NAME, f"{numerator} is not divisible by {denominator}")


def _expert_groups_plain(world: int, pp: int, ep: int, data_before: bool):
    """``groups._create_expert_and_data_parallel`` (an MoE layer without
    expert tensor parallelism): per pipeline stage."""
    stage = world // pp
    _divisible(stage, ep)
    ep_stride = stage // ep
    ep_groups: List[List[int]] = []
    edp_groups: List[List[int]] = []
    for start in range(0, world, stage):
        if data_before:
            edp_groups += [list(range(start + i * ep_stride, start + (i + 1) * ep_stride))
                           for i in range(ep)]
            ep_groups += [list(range(start + i, start + stage, ep_stride))
                          for i in range(ep_stride)]
        else:
            edp_groups += [list(range(start + i, start + stage, ep)) for i in range(ep)]
            ep_groups += [list(range(b, b + ep)) for b in range(start, start + stage, ep)]
    return ep_groups, edp_groups


def _expert_groups_tensor(world: int, tp: int, pp: int, ep: int, data_before: bool):
    """``groups._get_expert_parallel_ranks`` (expert tensor parallelism on)."""
    _divisible(world, tp * pp)
    dp = world // (tp * pp)
    _divisible(dp, ep)
    stage = world // pp
    data_groups: List[List[int]] = []
    for start in range(0, world, stage):
        for lane in range(tp):
            if data_before:
                stride = dp // ep
                members: List[int] = []
                for step in range(stride):
                    members += range(start + lane + step * tp, start + stage, stride * tp)
                data_groups.append(members)
            else:
                data_groups.append(list(range(start + lane, start + stage, tp)))
    ep_groups: List[List[int]] = []
    edp_groups: List[List[int]] = []
    for members in data_groups:
        parts = [members[i:i + ep] for i in range(0, dp, ep)]
        ep_groups += parts
        edp_groups += [list(column) for column in zip(*parts)]
    return ep_groups, edp_groups


def layout(pp: int = 1, tp: int = 1, dp: Optional[int] = None, world: Optional[int] = None,
           zero_stage: int = 0, ep: int = 1, use_data_before_expert_parallelism: bool = False,
           enable_expert_tensor_parallelism: bool = False) -> FrameworkLayout:
    """DeepSpeed's groups for this topology; refuses what DeepSpeed refuses."""
    for name, value in (("pp", pp), ("tp", tp), ("ep", ep)):
        if integer(name, value) < 1:
            raise refuse(NAME, f"{name}={value}: a parallel degree is at least 1")
    if dp is not None and integer("dp", dp) < 1:
        raise refuse(NAME, f"dp={dp}: a parallel degree is at least 1")
    if integer("zero_stage", zero_stage) not in (0, 1, 2, 3):
        raise refuse(NAME, f"zero_optimization.stage {zero_stage} is not a ZeRO stage (0-3)")
    for name, value in (("use_data_before_expert_parallelism", use_data_before_expert_parallelism),
                        ("enable_expert_tensor_parallelism", enable_expert_tensor_parallelism)):
        if not isinstance(value, bool):
            raise refuse(NAME, f"{name} must be true or false, got {value!r}")
    if world is None:
        world = pp * tp * (1 if dp is None else dp)
    check_world(world)
    if dp is None:
        _divisible(world, pp * tp)
        dp = world // (pp * tp)
    if pp * dp * tp != world:
        raise refuse(NAME, f"Invalid Grid: pipe({pp}) * data({dp}) * model({tp}) != "
                           f"world size ({world})")
    if pp > 1 and zero_stage >= 2:
        raise refuse(NAME, "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")

    grid = mesh_groups((pp, dp, tp), ("pipe", "data", "model"), flatten=[("pipe", "model")])
    groups = {
        "pipe_parallel": grid["pipe"],
        "data_parallel": grid["data"],
        "slice_parallel": grid["model"],
        "model_parallel": grid["pipe-model"],
    }
    if ep > 1:
        if tp > 1 and enable_expert_tensor_parallelism:
            ep_groups, edp_groups = _expert_groups_tensor(
                world, tp, pp, ep, use_data_before_expert_parallelism)
        else:
            ep_groups, edp_groups = _expert_groups_plain(
                world, pp, ep, use_data_before_expert_parallelism)
        groups["expert_parallel"] = ep_groups
        groups["expert_data_parallel"] = edp_groups
    knobs = (("pp", pp), ("tp", tp), ("dp", dp), ("world", world), ("zero_stage", zero_stage),
             ("ep", ep),
             ("use_data_before_expert_parallelism", use_data_before_expert_parallelism),
             ("enable_expert_tensor_parallelism", enable_expert_tensor_parallelism))
    return FrameworkLayout(NAME, world, knobs, normalised(groups))


# ---------------------------------------------------------------------------
# its configuration: the DeepSpeed JSON config

def _json(text: str, where: str):
    """A DeepSpeed JSON config, read within bounds (nesting, numbers)."""
    try:
        return loads(text, MAX_CONFIG_DEPTH)
    except JsonRefused as exc:
        raise LayoutError(f"{where}: not a DeepSpeed JSON config: {exc}") from None


def read_knobs(text: str, where: str) -> Dict[str, object]:
    """The parallel settings of a DeepSpeed JSON config."""
    doc = _json(text, where)
    if not isinstance(doc, dict):
        raise LayoutError(f"{where}: a DeepSpeed config is a JSON object, got "
                          f"{type(doc).__name__}")
    out: Dict[str, object] = {}

    def section(name: str) -> dict:
        value = doc.get(name, {})
        if not isinstance(value, dict):
            line = line_of(text, rf'"{re.escape(name)}"')
            raise LayoutError(f"{at(where, line)}: {name} must be an object, got "
                              f"{short(value)}")
        return value

    zero = section("zero_optimization")
    if "stage" in zero:
        line = line_of(text, r'"stage"')
        out["zero_stage"] = degree(zero["stage"], "zero_optimization.stage", at(where, line))
    tensor = section("tensor_parallel")
    if "autotp_size" in tensor:
        line = line_of(text, r'"autotp_size"')
        out["tp"] = degree(tensor["autotp_size"], "tensor_parallel.autotp_size",
                           at(where, line))
    if "use_data_before_expert_parallelism" in doc:
        value = doc["use_data_before_expert_parallelism"]
        if not isinstance(value, bool):
            line = line_of(text, r'"use_data_before_expert_parallelism"')
            raise LayoutError(f"{at(where, line)}: use_data_before_expert_parallelism must be "
                              f"true or false, got {short(value)}")
        out["use_data_before_expert_parallelism"] = value
    if not out and not any(k in doc for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                              "zero_optimization", "tensor_parallel")):
        raise LayoutError(f"{where}: not a DeepSpeed config: it sets none of "
                          "train_batch_size, train_micro_batch_size_per_gpu, "
                          "zero_optimization, tensor_parallel")
    return out


def read_model(text: str, where: str) -> Dict[str, object]:
    """The ``--model`` keys of a DeepSpeed JSON config."""
    doc = _json(text, where)
    if not isinstance(doc, dict):
        raise LayoutError(f"{where}: a DeepSpeed config is a JSON object")
    out: Dict[str, object] = {}
    for key, target in (("train_micro_batch_size_per_gpu", "micro_batch"),
                        ("train_batch_size", "global_batch")):
        if key in doc and doc[key] != "auto":
            out[target] = degree(doc[key], key, at(where, line_of(text, rf'"{key}"')))
    for key, dtype in (("bf16", "bf16"), ("fp16", "fp16")):
        sec = doc.get(key)
        if isinstance(sec, dict) and sec.get("enabled") is True:
            out["dtype"] = dtype
    ac = doc.get("activation_checkpointing")
    if isinstance(ac, dict) and ac:
        out["recompute"] = "full"
    return out


def read_overlaps(text: str, where: str) -> Dict[str, bool]:
    """The overlaps a DeepSpeed JSON config turns on (``overlap_comm``)."""
    out: Dict[str, bool] = {}
    try:
        doc = _json(text, where)
    except LayoutError:
        return out
    zero = doc.get("zero_optimization") if isinstance(doc, dict) else None
    if isinstance(zero, dict) and zero.get("overlap_comm") is True:
        out["overlap_grad_reduce"] = True
    return out


# ---------------------------------------------------------------------------
# the framework object

#: ZeRO stage -> the data-parallel style it runs
_ZERO_STYLES = {0: "ddp", 1: "zero12", 2: "zero12", 3: "fsdp"}


class DeepSpeed(Framework):
    """DeepSpeed: its pipeline grid, ZeRO stages, its buckets."""

    name = NAME
    knobs = KNOBS
    mesh = MESH
    mesh_words = MESH_WORDS
    config = ConfigReader("DeepSpeed JSON config",
                          read_knobs, read_model, read_overlaps)
    example = ("slurmtopo groups --framework deepspeed --world 16 --pp 2 --tp 2 --ep 2 "
               "--zero-stage 1")
    sequence_parallel = False
    gather_overlap = False
    tp_overlap_backward = True
    advised = True

    def build(self, **knobs) -> FrameworkLayout:
        return layout(**knobs)

    def terms(self, fl: FrameworkLayout) -> RequestTerms:
        k = dict(fl.knobs)
        tp, pp, dp, ep = k["tp"], k["pp"], k["dp"], k["ep"]
        notes = []
        if ep > 1 and k["use_data_before_expert_parallelism"]:
            notes.append("deepspeed: with use_data_before_expert_parallelism the expert groups "
                         "are planned as dense data-parallel ranks (no planner kind has them)")
            ep = 1
        expert_tp = (tp if k["enable_expert_tensor_parallelism"] else 1) if ep > 1 else None
        lay = Layout(tp=tp, pp=pp, dp=dp, ep=ep, expert_tp=expert_tp, world=fl.world).resolved()
        kinds = {"slice_parallel": "tp", "data_parallel": "dp", "pipe_parallel": "pp",
                 "model_parallel": "tp-pp"}
        if ep > 1:
            kinds.update(expert_parallel="ep", expert_data_parallel="expert-dp")
        prefer = {"dp": "nvlink"} if k["zero_stage"] == 3 and dp > 1 else {}
        return RequestTerms(lay, kinds, prefer, tuple(notes))

    def style(self, knobs: Mapping[str, Any]) -> str:
        """By ZeRO stage: 0 DDP, 1 and 2 ZeRO-1/2, 3 FSDP."""
        return _ZERO_STYLES[int(knobs["zero_stage"])]  # type: ignore[arg-type]

    def grad_overlap(self, style: str) -> bool:
        return style == "fsdp"  # ZeRO-3 overlaps; ZeRO-1/2 when overlap_comm says so

    def ddp_bucket_bytes(self, dp: int, d: int) -> int:
        """``reduce_bucket_size``: 5e8 elements."""
        return 500_000_000 * d

    def advice_variants(self, c, is_moe: bool, fsdp: bool, node_gpus: int) -> List[Any]:
        """ZeRO-1 (with a pipeline too) and ZeRO-3 (without: its pipeline
        engine refuses stages 2 and 3); no context parallelism (its
        sequence parallelism, Ulysses, is an all-to-all of its own) and no
        interleaving (its pipeline engine has none)."""
        if c.cp > 1 or c.vp > 1:
            return []
        out = [replace(c, zero=1)]
        if c.pp == 1:
            out.append(replace(c, style="fsdp", zero=3))
        return out

    def advice_knobs(self, c, gpus: int) -> Dict[str, object]:
        k = super().advice_knobs(c, gpus)
        del k["cp"]
        k["zero_stage"] = c.zero
        return k

    def advice_optimizer(self, c) -> str:
        return f"ZeRO-{c.zero}"


FRAMEWORK = DeepSpeed()
