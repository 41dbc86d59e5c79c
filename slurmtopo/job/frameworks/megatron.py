"""Megatron-LM's groups: :mod:`slurmtopo.job.groups` under the framework's knobs.

:func:`slurmtopo.job.groups.build_groups` is Megatron-LM's ``RankGenerator``
(``megatron/core/parallel_state.py``; checked against NVIDIA/Megatron-LM
commit d98e8a64ddf34856e74b24714e3bedb2f5a39553, 2026-08-22): a dense
generator and an expert one over the order string ``tp-cp-ep-dp-pp``. This
module only gives it the registry's shape; the groups, their kind names
(``tp``, ``dp-cp``, ``expert-dp`` ...) and their order are exactly what
``groups`` printed before frameworks existed.
"""
from __future__ import annotations

from typing import Optional

from slurmtopo.job.frameworks.common import FrameworkLayout, Knob
from slurmtopo.job.groups import CONVENTIONS, DEFAULT_ORDER, Layout, build_groups

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
    Knob("convention", "megatron", "How to read --order.", CONVENTIONS),
    Knob("use_distributed_optimizer", False, "Shard the optimizer state over dp: gradients "
         "reduce-scattered, parameters all-gathered (--use-distributed-optimizer).", bool),
    Knob("use_megatron_fsdp", False, "Shard parameters over dp (Megatron-FSDP, "
         "--use-megatron-fsdp).", bool),
)

#: the knobs that choose the data-parallel style, not the groups
STYLE_KNOBS = ("use_distributed_optimizer", "use_megatron_fsdp")


def resolved_layout(tp: int = 1, cp: int = 1, ep: int = 1, pp: int = 1, dp: Optional[int] = None,
                    expert_tp: Optional[int] = None, world: Optional[int] = None,
                    order: Optional[str] = None, convention: Optional[str] = None) -> Layout:
    """The resolved :class:`~slurmtopo.job.groups.Layout` (raises LayoutError)."""
    convention = convention or "megatron"
    if convention not in DEFAULT_ORDER:
        # Layout.resolved names the conventions; keep its message
        return Layout(convention=convention).resolved()
    return Layout(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, expert_tp=expert_tp,
                  order=DEFAULT_ORDER[convention] if order is None else order,
                  world=world, convention=convention).resolved()


def layout(use_distributed_optimizer: bool = False, use_megatron_fsdp: bool = False,
           **knobs) -> FrameworkLayout:
    """Megatron's groups for these knobs (see :func:`resolved_layout`)."""
    from slurmtopo.job.frameworks.common import refuse

    for name, value in (("use_distributed_optimizer", use_distributed_optimizer),
                        ("use_megatron_fsdp", use_megatron_fsdp)):
        if not isinstance(value, bool):
            raise refuse(NAME, f"{name} must be true or false, got {value!r}")
    lay = resolved_layout(**knobs)
    values = (("tp", lay.tp), ("cp", lay.cp), ("ep", lay.ep), ("pp", lay.pp), ("dp", lay.dp),
              ("expert_tp", lay.expert_tp), ("world", lay.world), ("order", lay.order),
              ("convention", lay.convention),
              ("use_distributed_optimizer", use_distributed_optimizer),
              ("use_megatron_fsdp", use_megatron_fsdp))
    return FrameworkLayout(NAME, lay.world, values, build_groups(lay))


def layout_knobs(fl: FrameworkLayout) -> dict:
    """The knobs of ``fl`` that :func:`resolved_layout` takes."""
    return {k: v for k, v in fl.knobs if k not in STYLE_KNOBS}
