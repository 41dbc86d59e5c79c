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
* its **step**: the list of collectives one training step runs
  (:meth:`Framework.step_calls`, composed here of one method a part: TP,
  CP, EP, PP, the gradients), which the cost model
  (:func:`slurmtopo.cost.step.price_step`) prices as returned, and the
  conventions the workload (:mod:`slurmtopo.job.workload`) and the cost
  model read: the data-parallel style of its settings, the overlaps it
  makes by default, its gradient buckets, its attention kernels, what its
  loss and its gradients hold in memory;
* the **advisor's layouts** of it (``slurmtopo advise``);
* its **docs example** (a line of docs/frameworks/NAME.md, run by
  tests/test_frameworks.py).

A new framework is one subclass here (overriding what differs from the
defaults, which are PyTorch's: a convention, a part of the step, or
:meth:`Framework.step_calls` itself to add calls of its own) and one
:func:`~slurmtopo.job.frameworks.registry.register` call, at any time:
``--framework`` reads the registry when the command line is parsed.
tests/test_framework_registry.py registers a fourth one in one file and
follows it through groups, plan, cost (a call of its own, priced in the
step), configuration and ``slurmtopo plan --framework``.

Pure: no I/O, no framework imported.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks.common import FrameworkLayout, Knob
from slurmtopo.job.frameworks.stepcalls import (StepCall, StepSizes, gradient_bytes, kv_bytes,
                                                moe_layers, stage_moe_layers, step_sizes,
                                                virtual_stages)
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
    #: its settings that turn on one of the step's overlaps, under its own
    #: names (knob -> Workload flag: Megatron-LM's ``tp_comm_overlap`` ...),
    #: options beside its ``--config`` file's flags
    overlap_knobs: Mapping[str, str] = MappingProxyType({})
    #: a ``slurmtopo groups`` line of docs/frameworks/NAME.md
    example: str = ""

    # the step's conventions (slurmtopo.job.workload, slurmtopo.cost, and
    # step_calls below)

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
    #: its memory-bound kernels (norms, activation, rotary embedding) run
    #: eagerly unless the job compiles the model (torchtitan's, PyTorch
    #: modules without torch.compile): :meth:`eager_kernels`
    eager_by_default: bool = False
    #: its kernels are fused whatever the job says (Megatron-LM's:
    #: Transformer Engine's and its own fused kernels)
    always_fused: bool = False
    #: what its selective activation recomputation keeps: ``per-op``
    #: (PyTorch's per-op checkpointing: every other matrix product's
    #: output) or ``attention`` (Megatron's: attention's core recomputed)
    selective_recompute: str = "per-op"
    #: the advisor lays models out for it (:meth:`advice_variants`)
    advised: bool = False
    #: full recomputation of only some layers of each model chunk
    #: (Megatron-LM's block method, the ``recompute_layers`` model key): the
    #: advisor recomputes the fewest layers that make a layout fit
    block_recompute: bool = False

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

    def eager_kernels(self, compile: str) -> bool:
        """Does a job of it run its memory-bound kernels eagerly, given the
        model's ``compile`` key (on, off, or "": the framework's default)?
        The step model prices eager kernels' extra passes
        (:func:`slurmtopo.cost.compute.eager_bytes`)."""
        if self.always_fused:
            return False
        if compile:
            return compile == "off"
        return self.eager_by_default

    def ddp_bucket_bytes(self, dp: int, d: int) -> int:
        """The gradient bucket of its DDP in bytes for ``d``-byte values:
        PyTorch DDP's ``bucket_cap_mb=25``."""
        return 25 * 1024 * 1024

    # ------------------------------------------------------------------
    # the calls of its step, which slurmtopo.cost.step prices; each part a
    # method, so a framework overrides the part that differs (or adds its
    # own calls to what :meth:`step_calls` returns)

    def step_calls(self, layout: Layout, workload, model) -> List[StepCall]:
        """The collectives of one step of ``layout`` (a Megatron layout,
        the planner's) for ``workload`` (a Workload naming this framework)
        and ``model`` (the model description), per rank, in the order the
        step's report lists them: TP, CP, EP, PP, then the gradients'
        (docs/cost-model.md, "One training step", has the table and its
        sources).

        With P parameters, L layers, h hidden, s tokens a micro-batch, b
        micro-batch size, d bytes a value, M micro-batches a step, Lp = L/pp
        layers a stage and A = b·s/cp·h·d one micro-batch's activations
        (:class:`~slurmtopo.job.frameworks.stepcalls.StepSizes`):

        * TP (:meth:`tp_step_calls`): per layer two all-reduces of A forward
          and two backward; with sequence parallelism each is an all-gather
          and a reduce-scatter, and the backward pass gathers the input
          again for the weight gradients. Exposed unless ``tp_comm_overlap``.
          With experts (ep > 1) the MLP's half runs on ``expert-tp``.
        * CP (:meth:`cp_step_calls`): K and V all-gathered forward and
          backward, their gradients reduce-scattered, overlapping attention.
        * EP (:meth:`ep_step_calls`): dispatch and combine all-to-alls of
          A·top_k, both passes; exposed unless ``ep_comm_overlap``.
        * PP (:meth:`pp_step_calls`): one send of the activations forward
          and of their gradient backward per micro-batch and virtual stage;
          exposed.
        * DP per style (:meth:`gradient_step_calls`): DDP all-reduces
          G = P/(tp·pp)·d in its buckets; ZeRO-1/2 reduce-scatters G and
          all-gathers the parameters; FSDP all-gathers each layer's
          W = P/(L·tp)·d forward and backward per micro-batch and
          reduce-scatters its gradient; HSDP adds the shard's all-reduce
          over the replicas. Overlapping the backward pass when the
          framework does.
        """
        s = step_sizes(layout, workload, model)
        return [*self.tp_step_calls(s), *self.cp_step_calls(s), *self.ep_step_calls(s),
                *self.pp_step_calls(s), *self.gradient_step_calls(s)]

    def tp_overlaps(self, workload) -> Tuple[str, str]:
        """What TP's forward and backward collectives overlap: with
        ``tp_comm_overlap`` the forward's the forward pass, the backward's
        the backward pass where :attr:`tp_overlap_backward`; else nothing."""
        if not workload.tp_comm_overlap:
            return "none", "none"
        return "forward", "backward" if self.tp_overlap_backward else "none"

    def tp_step_calls(self, s: StepSizes) -> List[StepCall]:
        """TP's calls: per layer on ``tp``, or with experts on their own
        TP size the attention's half on ``tp`` and the MLP's on
        ``expert-tp``."""
        lay = s.layout
        if s.moe and lay.expert_tp != lay.tp:
            return (self._tp_calls(s, "tp", lay.tp, 1, "tp")
                    + self._tp_calls(s, "expert-tp", lay.expert_tp, 1, "expert-tp"))
        return self._tp_calls(s, "tp", lay.tp, 2, "tp")

    def _tp_calls(self, s: StepSizes, kind: str, size: int, per_layer: int,
                  what: str) -> List[StepCall]:
        if size <= 1:
            return []
        fwd, bwd = self.tp_overlaps(s.workload)
        n, act = per_layer * s.stage_layers * s.micro_batches, s.activations
        if not s.sequence_parallel:
            return [StepCall(what, kind, "all-reduce", act, n, "forward", fwd,
                             note="per layer: after attention and the MLP"),
                    StepCall(what, kind, "all-reduce", act, n, "backward", bwd,
                             note="per layer: the gradients of their inputs")]
        return [StepCall(what, kind, "all-gather", act, n, "forward", fwd,
                         note="sequence parallel: the input gathered"),
                StepCall(what, kind, "reduce-scatter", act, n, "forward", fwd,
                         note="sequence parallel: the output reduced"),
                StepCall(what, kind, "all-gather", act, 2 * n, "backward", bwd,
                         note="the gradient gathered, and the input again for wgrad"),
                StepCall(what, kind, "reduce-scatter", act, n, "backward", bwd,
                         note="the input's gradient reduced")]

    def cp_step_calls(self, s: StepSizes) -> List[StepCall]:
        """CP's calls: K and V gathered for every layer's attention
        (:func:`~slurmtopo.job.frameworks.stepcalls.kv_bytes`), both passes,
        and their gradients reduced."""
        if s.layout.cp <= 1:
            return []
        kv, n = kv_bytes(s), s.stage_layers * s.micro_batches
        return [StepCall("cp", "cp", "all-gather", kv, n, "forward", "forward",
                         note="K and V gathered for attention"),
                StepCall("cp", "cp", "all-gather", kv, n, "backward", "backward",
                         note="K and V gathered again"),
                StepCall("cp", "cp", "reduce-scatter", kv, n, "backward", "backward",
                         note="their gradients reduced")]

    def ep_step_calls(self, s: StepSizes) -> List[StepCall]:
        """EP's dispatch and combine all-to-alls, both passes."""
        if not s.moe:
            return []
        # the stage's layers with experts, as its compute counts them
        w, n = s.workload, 2 * stage_moe_layers(s.model, s.stage_layers) * s.micro_batches
        tokens = s.activations * s.model.top_k // (s.layout.tp if s.sequence_parallel else 1)
        ov_f = "forward" if w.ep_comm_overlap else "none"
        ov_b = "backward" if w.ep_comm_overlap else "none"
        return [StepCall("ep", "ep", "all-to-all", tokens, n, "forward", ov_f,
                         note="dispatch and combine"),
                StepCall("ep", "ep", "all-to-all", tokens, n, "backward", ov_b,
                         note="dispatch and combine, their gradients")]

    def pp_step_calls(self, s: StepSizes) -> List[StepCall]:
        """PP's sends, a micro-batch's activations each way: once a
        micro-batch, and with interleaving once a virtual stage (each of a
        rank's model chunks sends to the next rank's)."""
        if s.layout.pp <= 1:
            return []
        send = s.activations // (s.layout.tp if s.sequence_parallel else 1)
        n = s.micro_batches * virtual_stages(s.model)
        return [StepCall("pp", "pp", "p2p", send, n, "forward", "none",
                         note="each micro-batch's activations to the next stage"),
                StepCall("pp", "pp", "p2p", send, n, "backward", "none",
                         note="their gradients back")]

    def gradient_step_calls(self, s: StepSizes) -> List[StepCall]:
        """The gradients' calls: the dense ones over ``dp`` (``dp-cp``
        with context parallelism), the experts' over ``expert-dp``, each
        per the workload's data-parallel style (:meth:`reduce_step_calls`)."""
        lay, m, lp = s.layout, s.model, s.stage_layers
        out: List[StepCall] = []
        grads, experts = gradient_bytes(m, lay)
        if lay.dp * lay.cp > 1:
            layer = grads // lp if experts else m.params * s.value_bytes // (m.layers * lay.tp)
            out += self.reduce_step_calls(s, "dp", "dp-cp" if lay.cp > 1 else "dp", grads,
                                          layer, lp, lay.dp, lay.dp * lay.cp)
        if experts and lay.expert_dp > 1:
            # the experts' gradients over the expert-data-parallel groups (the
            # ranks holding the same experts: world / (expert_tp ep pp), the
            # context ranks among them): Megatron-Core reduces them apart from
            # the dense ones, with the same data-parallel style
            moe_lp = max(1, math.ceil(moe_layers(m) / lay.pp))
            out += self.reduce_step_calls(s, "expert-dp", "expert-dp", experts,
                                          max(1, experts // moe_lp), moe_lp, lay.expert_dp,
                                          lay.expert_dp)
        return out

    def reduce_step_calls(self, s: StepSizes, what: str, kind: str, grads: int, layer: int,
                          lp: int, dp: int, size: int) -> List[StepCall]:
        """The calls reducing ``grads`` bytes of gradients (``layer`` bytes
        a layer, ``lp`` layers a stage) over the groups of ``kind`` (``size``
        ranks, ``dp`` of them data-parallel replicas), per the workload's
        data-parallel style: DDP in :meth:`ddp_bucket_bytes` buckets,
        ZeRO-1/2, FSDP/HSDP. With a pipeline (pp > 1) sharded layers stay
        gathered for the step's micro-batches (torchtitan and PyTorch's
        pipeline schedules turn resharding after forward off), so they are
        gathered once a step."""
        w, d, mb = s.workload, s.value_bytes, s.micro_batches
        red = "backward" if w.grad_overlap else "none"
        if w.style == "ddp":
            calls = max(1, math.ceil(grads / self.ddp_bucket_bytes(dp, d)))
            return [StepCall(what, kind, "all-reduce", grads // calls, calls, "backward",
                             red, note="gradients, one all-reduce per bucket")]
        if w.style == "zero12":
            return [StepCall(what, kind, "reduce-scatter", grads, 1, "backward", red,
                             note="gradients reduced to their shards"),
                    StepCall(what, kind, "all-gather", grads, 1, "optimizer",
                             "forward" if w.gather_overlap else "none",
                             note="updated parameters gathered")]
        shard = "fsdp-shard" if what == "dp" else f"{what}-shard"
        part: Tuple[str, int] = ("all", 0)
        if w.style == "hsdp" and what == "dp" and 1 < w.shard < size:
            part = ("block", w.shard)
        if s.layout.pp > 1:
            out = [StepCall(shard, kind, "all-gather", layer, lp, "forward",
                            "forward", part, "per layer: parameters gathered once")]
        else:
            out = [StepCall(shard, kind, "all-gather", layer, lp * mb, "forward",
                            "forward", part, "per layer: parameters gathered"),
                   StepCall(shard, kind, "all-gather", layer, lp * mb,
                            "backward", "backward", part, "per layer: gathered again")]
        out.append(StepCall(shard, kind, "reduce-scatter", layer, lp,
                            "backward", "backward", part, "per layer: gradients reduced"))
        if part[0] == "block":
            rep = "fsdp-replicate" if what == "dp" else f"{what}-replicate"
            out.append(StepCall(rep, kind, "all-reduce",
                                max(1, layer // w.shard), lp, "backward", "backward",
                                ("stride", w.shard),
                                "per layer: the shard's gradients over the replicas"))
        return out

    # ------------------------------------------------------------------
    # the layout advisor (slurmtopo.advisor); ``c`` is its Candidate

    def advice_variants(self, c, is_moe: bool, fsdp: bool, node_gpus: int) -> List[Any]:
        """The data-parallel styles it runs the advisor's layout ``c``
        with (``fsdp``: Megatron-FSDP may be tried)."""
        return []

    def advice_recompute(self, spec) -> Tuple[Tuple[str, Tuple[Tuple[str, object], ...]], ...]:
        """The recomputations the advisor tries for ``spec`` (a
        :class:`~slurmtopo.cost.model_spec.ModelSpec`), the least first: each
        the ``recompute`` value and the model keys that go with it."""
        return (("none", ()), ("selective", ()), ("full", ()))

    def advice_model_keys(self, spec) -> Tuple[Tuple[str, object], ...]:
        """Model keys the advisor prices every layout of the framework with
        (a user's own value of a key wins)."""
        return ()

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
