"""What a framework is to slurmtopo: one :class:`Framework` object each,
registered by name (:mod:`slurmtopo.job.frameworks.registry`).

A training framework (Megatron-LM, torchtitan, DeepSpeed) differs from the
others in how it lays out its ranks and in how it runs a step. Everything
slurmtopo knows of one lives on its object, so that no caller compares a
framework's name:

* its **knobs** (its parallel settings under its own names, with its
  defaults) and its **layout** (the groups it builds, named its way:
  :meth:`Framework.layout`);
* its **planner terms** (:meth:`Framework.terms`): the Megatron layout that
  numbers the ranks as it does, which of its kinds are the planner's, and
  what its data-parallel style prefers;
* its **configuration reader** (:meth:`Framework.config_knobs`,
  :meth:`Framework.config_model`, :meth:`Framework.config_overlaps`: the
  file the job itself runs with);
* its **step conventions**, which the workload (:mod:`slurmtopo.job.workload`)
  and the cost model read: the data-parallel style of its settings, the
  overlaps it makes by default, its gradient buckets, its attention
  kernels, what its loss and its gradients hold in memory;
* the **advisor's layouts** of it (``slurmtopo advise``);
* its **docs example** (a line of docs/frameworks/NAME.md, run by
  tests/test_frameworks.py).

A new framework is one subclass here (overriding what differs from the
defaults, which are PyTorch's) and one
:func:`~slurmtopo.job.frameworks.registry.register` call.
tests/test_framework_registry.py registers a fourth one in one file and
follows it through groups, plan, cost and configuration.

Pure: no I/O, no framework imported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks.common import FrameworkLayout, Knob
from slurmtopo.job.groups import Layout

__all__ = ["Framework", "RequestTerms", "ConfigReader"]


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


@dataclass(frozen=True)
class ConfigReader:
    """A framework's own configuration file: what it is called (help
    texts) and the functions reading it, each ``(text, where) -> dict``
    with refusals naming ``where`` (and its line where there is one)."""

    #: what ``--config`` reads, in words
    format: str
    #: the framework's settings the file sets
    knobs: Callable[[str, str], Dict[str, object]]
    #: the ``--model`` keys it gives (``preset``: a model preset)
    model: Callable[[str, str], Dict[str, object]]
    #: the Workload overlaps it turns on
    overlaps: Callable[[str, str], Dict[str, bool]]


class Framework:
    """One training framework (see the module doc). The class attributes
    are its defaults, PyTorch's; a framework overrides what differs."""

    #: the ``--framework`` value, the rank map's and the step's name
    name: str = ""
    #: its parallel settings under its own names, in the order it lists them
    knobs: Tuple[Knob, ...] = ()
    #: its dense mesh's dimensions, outermost first, and how a plan's header
    #: names it (empty: its layout is the planner's own)
    mesh: Tuple[str, ...] = ()
    mesh_words: str = ""
    #: its group kinds are the planner's own (Megatron's): ``--require``
    #: and ``--prefer`` name planner kinds, and the rank map adds nothing
    planner_kinds: bool = False
    #: its configuration file's reader (None: it has no ``--config``)
    config: Optional[ConfigReader] = None
    #: a ``slurmtopo groups`` line of docs/frameworks/NAME.md
    example: str = ""

    # the step's conventions (slurmtopo.job.workload, slurmtopo.cost)

    #: TP's all-reduces are always split into all-gather + reduce-scatter
    #: (torchtitan's TP plan shards the norms' sequence)
    sequence_parallel: bool = False
    #: ZeRO-1/2's parameter all-gather overlaps the next forward by default
    gather_overlap: bool = True
    #: with TP overlap on, the backward pass's TP collectives are hidden
    #: too (Megatron's userbuffers); PyTorch's async TP fuses only the
    #: forward's all-gather and reduce-scatter into the matmuls
    tp_overlap_backward: bool = True
    #: the attention kernels it runs (slurmtopo.cost.compute's
    #: ATTENTION_EFFICIENCY): ``flash2``, PyTorch's SDPA or flash-attn 2
    attention_kernel: str = "flash2"
    #: bytes a token and vocabulary entry the output layer and the loss
    #: hold: PyTorch's the bf16 logits, their fp32 copy and its gradient
    logit_bytes: int = 10
    #: it keeps fp32 gradients whatever its data-parallel style (Megatron's
    #: main grads); else fp32 under FSDP/HSDP only, the weights' width
    #: otherwise
    fp32_grads: bool = False
    #: what its selective activation recomputation keeps: ``per-op``
    #: (PyTorch's per-op checkpointing: every other matrix product's
    #: output) or ``attention`` (Megatron's: attention's core recomputed)
    selective_recompute: str = "per-op"
    #: the advisor lays models out for it (:meth:`advice_variants`)
    advised: bool = False

    def __repr__(self) -> str:
        return f"<framework {self.name}>"

    # ------------------------------------------------------------------
    # the layout

    def layout(self, **knobs) -> FrameworkLayout:
        """Resolve ``knobs`` (its names; None: its default) as the framework
        does and list its groups. A knob it does not have is refused by
        name; a layout it refuses raises LayoutError with its reason."""
        own = {k.name for k in self.knobs}
        for name in knobs:
            if name not in own:
                raise LayoutError(f"{self.name} has no {name.replace('_', '-')!r} setting; its "
                                  f"settings: {', '.join(k.name for k in self.knobs)}")
        return self.build(**{k: v for k, v in knobs.items() if v is not None})

    def build(self, **knobs) -> FrameworkLayout:
        """The groups for these (known, given) knobs."""
        raise NotImplementedError

    def terms(self, fl: FrameworkLayout) -> RequestTerms:
        """The planner's layout, kinds and preferences for ``fl``."""
        raise NotImplementedError

    def sizes_world(self, knobs: Mapping[str, Any]) -> bool:
        """Do ``knobs`` give the world size without ``world`` (so a
        torchrun command's ``--nnodes`` x ``--nproc-per-node`` is not
        needed)? By default no: the world is asked."""
        return False

    def describe(self, fl: FrameworkLayout) -> str:
        """The layout in the framework's own words, for a plan's header:
        ``torchtitan world 16 = dp_replicate 2 × dp_shard 4 × tp 2 (mesh pp,
        dp_replicate, dp_shard, cp, tp; ...)``; an MoE layout's ``ep`` last."""
        knobs = dict(fl.knobs)
        names = list(self.mesh) + ["ep"]
        dims = " × ".join(f"{n} {knobs[n]}" for n in names
                          if isinstance(knobs.get(n), int) and not isinstance(knobs.get(n), bool)
                          and knobs[n] > 1) or "1 rank"
        words = self.mesh_words
        return f"{fl.framework} world {fl.world} = {dims}" + (f" ({words})" if words else "")

    def title(self, fl: FrameworkLayout) -> str:
        """``slurmtopo groups``' table title: the settings as resolved."""
        settings = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                            for k, v in fl.knobs)
        return f"{fl.framework}: {settings}"

    # ------------------------------------------------------------------
    # its own configuration file

    def _reader(self) -> ConfigReader:
        if self.config is None:
            raise LayoutError(f"--config: no configuration format for {self.name!r}")
        return self.config

    def config_knobs(self, text: str, where: str) -> Dict[str, object]:
        """The settings ``text`` (the contents of ``where``) sets."""
        return self._reader().knobs(text, where)

    def config_model(self, text: str, where: str) -> Dict[str, object]:
        """The ``--model`` keys the file gives (``preset`` naming a model
        preset when it names a known model); empty when it describes none."""
        return self._reader().model(text, where)

    def config_overlaps(self, text: str, where: str) -> Dict[str, bool]:
        """The Workload overlaps the file turns on."""
        return self.config.overlaps(text, where) if self.config is not None else {}

    # ------------------------------------------------------------------
    # the step it runs

    def style(self, knobs: Mapping[str, Any]) -> str:
        """Its data-parallel style for these resolved knobs: ``ddp``,
        ``zero12``, ``fsdp`` or ``hsdp`` (slurmtopo.job.workload.STYLES)."""
        return "ddp"

    def hsdp_shard(self, knobs: Mapping[str, Any]) -> int:
        """With ``hsdp``: the ranks of one shard group, consecutive ranks of
        each ``dp-cp`` group (its replicas every that many); else 0."""
        return 0

    def grad_overlap(self, style: str) -> bool:
        """Does the gradient reduction overlap the backward pass unless the
        job says otherwise? PyTorch's DDP and FSDP overlap."""
        return True

    def ddp_bucket_bytes(self, dp: int, d: int) -> int:
        """The gradient bucket of its DDP in bytes for ``d``-byte values:
        PyTorch DDP's ``bucket_cap_mb=25``."""
        return 25 * 1024 * 1024

    # ------------------------------------------------------------------
    # the layout advisor (slurmtopo.advisor); ``c`` is its Candidate

    def advice_variants(self, c, is_moe: bool, fsdp: bool, node_gpus: int) -> List[Any]:
        """The data-parallel styles it runs the advisor's layout ``c``
        with (``fsdp``: Megatron-FSDP may be tried)."""
        return []

    def advice_knobs(self, c, gpus: int) -> Dict[str, object]:
        """Its settings for the advisor's layout ``c`` on ``gpus`` GPUs."""
        return {"tp": c.tp, "pp": c.pp, "cp": c.cp, "ep": c.ep, "world": gpus}

    def advice_optimizer(self, c) -> str:
        """How the data-parallel ranks share the model, as the advisor's
        table says it."""
        if c.style == "hsdp":
            return f"HSDP {c.shard}"
        if c.style == "fsdp":
            return "FSDP"
        return "distributed"

    def plan_line_options(self, knobs: Mapping[str, object]) -> Dict[str, object]:
        """The options of a ``slurmtopo plan`` line for ``knobs``: the
        layout sizes of 1 are its defaults and left out."""
        return {k: v for k, v in knobs.items()
                if not (k in ("tp", "pp", "cp", "ep") and v == 1)}
