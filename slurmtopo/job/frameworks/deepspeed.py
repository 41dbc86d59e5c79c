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
"""
from __future__ import annotations

from typing import List, Optional

from slurmtopo.job.frameworks.common import (FrameworkLayout, Knob, check_world, integer,
                                             normalised, refuse)
from slurmtopo.job.groups import mesh_groups

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
