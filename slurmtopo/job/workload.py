"""What a job runs, as far as one training step's communication depends on
it: the framework, its data-parallel style, the model and the overlaps the
framework is set to make (:class:`Workload`).

A :class:`~slurmtopo.job.request.JobRequest` carries one (``workload``), so the
planner's choice between proposals, the preview, ``plan --json``, the
placement daemon, ``simulate`` and ``audit`` all price the same step
(:func:`slurmtopo.cost.step.price_step`). A request without one gets
:data:`DEFAULT_WORKLOAD`: Megatron-LM's DDP on the default model
(:data:`slurmtopo.cost.step.DEFAULT_MODEL`, docs/cost-model.md).

Pure data, below the request: nothing here imports the cost model (the
model description is kept as given and read by it). The framework is kept
by name (a workload is hashed, pickled and sent to the placement daemon);
its conventions (the overlaps it makes by default, its buckets, its
kernels) are its registered object's, :attr:`Workload.conventions`.
"""
from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Any, Optional, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks import registry
from slurmtopo.job.frameworks.base import Framework

__all__ = ["STYLES", "Workload", "DEFAULT_WORKLOAD", "parse_nccl_version"]

#: the data-parallel styles a step is priced for: ``ddp`` (gradients
#: all-reduced in buckets), ``zero12`` (ZeRO-1/2, Megatron's distributed
#: optimizer: gradients reduce-scattered, parameters all-gathered), ``fsdp``
#: (ZeRO-3, FSDP, Megatron-FSDP: every layer's parameters all-gathered in
#: both passes, gradients reduce-scattered), ``hsdp`` (FSDP inside a shard
#: group, gradients all-reduced over the replicas)
STYLES: Tuple[str, ...] = ("ddp", "zero12", "fsdp", "hsdp")


def parse_nccl_version(text, what: str = "--nccl-version") -> Tuple[int, int, int]:
    """``2.27``, ``2.27.7``, ``v2.27.7-1``, ``2.27.5+cuda12.9`` -> (2, 27, 7);
    raises LayoutError naming ``what`` and the text (numbers of at most four
    digits, two or three of them). The one reader of an NCCL release: the
    cost model's input, the job's ``--nccl-version`` and the hazard checks'
    (slurmtopo.plan.hazards) all read it here."""
    t = str(text).strip()
    if t[:1] in ("v", "V"):
        t = t[1:]
    t = re.split(r"[-+]", t, maxsplit=1)[0]
    parts = t.split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() and len(p) <= 4
                                             for p in parts):
        raise LayoutError(f"{what} {str(text)[:40]!r} is not an NCCL version (expected "
                          "MAJOR.MINOR[.PATCH], e.g. 2.27.7)")
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return nums[0], nums[1], nums[2]


def _flag(value, what: str) -> Optional[bool]:
    if value is None or isinstance(value, bool):
        return value
    raise LayoutError(f"workload {what} must be true, false or unset, got {value!r}")


@dataclass(frozen=True)
class Workload:
    """One job's training step, as the cost model prices it.

    ``model``: the model description (a ``ModelSpec``; None: the default
    model). ``shard``: with ``hsdp``, the ranks of one shard group (dp_shard
    x cp; consecutive ranks of each ``dp-cp`` group), else 0.
    ``sequence_parallel``: TP's all-reduces split into all-gather +
    reduce-scatter (Megatron ``--sequence-parallel``; torchtitan always).
    ``tp_comm_overlap``: TP's collectives overlap the GEMMs (Megatron
    ``--tp-comm-overlap``, torchtitan async TP). ``ep_comm_overlap``: EP's
    all-to-alls overlap compute (Megatron's MoE A2A overlap, torchtitan's
    PP/EP overlap). ``overlap_grad_reduce``, ``overlap_param_gather``: the
    gradient reduction overlaps the backward pass, the parameter gather of
    ZeRO-1/2 the next forward; None: the framework's default (PyTorch DDP
    and FSDP overlap, Megatron does not unless asked, DeepSpeed overlaps
    with ZeRO-3). ``nccl_version``: the NCCL release the job loads, as
    ``(major, minor, patch)`` (:func:`parse_nccl_version`); None: the
    inventory's ``cost: nccl_version``, else the newest the cost model
    knows (its algorithm choices differ by release)."""

    framework: str = registry.DEFAULT_FRAMEWORK
    style: str = "ddp"
    model: Optional[Any] = None
    shard: int = 0
    sequence_parallel: bool = False
    tp_comm_overlap: bool = False
    ep_comm_overlap: bool = False
    overlap_grad_reduce: Optional[bool] = None
    overlap_param_gather: Optional[bool] = None
    nccl_version: Optional[Tuple[int, int, int]] = None

    def __post_init__(self):
        if not isinstance(self.framework, str) or self.framework not in registry.FRAMEWORKS:
            raise LayoutError(f"workload framework {self.framework!r} (known: "
                              f"{', '.join(registry.names())})")
        if self.style not in STYLES:
            raise LayoutError(f"workload style {self.style!r} (known: {', '.join(STYLES)})")
        s = self.shard
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise LayoutError(f"workload shard must be a whole number >= 0, got {s!r}")
        if self.style == "hsdp" and s < 1:
            raise LayoutError("workload style hsdp needs the shard group's size (shard >= 1)")
        for name in ("sequence_parallel", "tp_comm_overlap", "ep_comm_overlap"):
            if not isinstance(getattr(self, name), bool):
                raise LayoutError(f"workload {name} must be true or false, "
                                  f"got {getattr(self, name)!r}")
        _flag(self.overlap_grad_reduce, "overlap_grad_reduce")
        _flag(self.overlap_param_gather, "overlap_param_gather")
        if self.nccl_version is not None:
            v = self.nccl_version
            if (not isinstance(v, tuple) or len(v) != 3
                    or any(isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < 10000
                           for x in v)):
                raise LayoutError(f"workload nccl_version must be (major, minor, patch), got {v!r}")

    @property
    def conventions(self) -> Framework:
        """The registered framework whose conventions the step follows."""
        return registry.get(self.framework)

    @property
    def grad_overlap(self) -> bool:
        """Does the gradient reduction overlap the backward pass?"""
        if self.overlap_grad_reduce is not None:
            return self.overlap_grad_reduce
        return self.conventions.grad_overlap(self.style)

    @property
    def gather_overlap(self) -> bool:
        """Does ZeRO-1/2's parameter all-gather overlap the next forward?"""
        if self.overlap_param_gather is not None:
            return self.overlap_param_gather
        return self.conventions.gather_overlap


#: what a request without a workload is priced as
DEFAULT_WORKLOAD = Workload()
