"""One training step of a placement, priced: the one step number every
decision and every report uses (:func:`price_step`).

The preview, ``plan --json``, the planner's choice between its proposals
(:mod:`slurmtopo.plan.choice`), the placement daemon, ``simulate`` and ``audit``
all call :func:`price_step` with the job's request, so the weights the
planner and the daemon trade against queue time are the numbers in front
of the user.

The step is the list of collectives the job's framework runs, as its
registered object builds it
(:meth:`~slurmtopo.job.frameworks.base.Framework.step_calls`, through
:func:`step_calls`, from the request's
:class:`~slurmtopo.job.workload.Workload`: its data-parallel style, the
model, sequence parallelism and the overlaps it is set to make), each on
the planner's groups of its kind, priced here as returned, by the cost
model on the slowest group of that kind and counted as many times as
the step runs it. Each call says in which pass it runs and what compute it
may overlap (``overlaps_with``): a gradient reduce-scatter the backward
pass, an FSDP all-gather the forward pass; TP's collectives are exposed
unless the framework overlaps them, EP's all-to-alls likewise, PP's sends
always.

:class:`StepPrice` is the result. Today it holds the communication only:
``time_s`` is the sum of every call's seconds (``exposed_s`` equals
``seconds``: with no compute time known nothing is taken as hidden), and
``compute_s`` and ``bubble_s`` are 0. A compute model (issue 35) fills
those and each call's ``exposed_s`` through :func:`compose`, and every
caller gets the new ``time_s`` without a change.

Without a model description the step is priced for :data:`DEFAULT_MODEL`
(Llama 3 70B's shape, 4,096 tokens a micro-batch, bf16, one micro-batch a
step: the message sizes :data:`slurmtopo.cost.defaults.DEFAULT_MESSAGE_BYTES`
describe), with Megatron-LM's DDP: docs/cost-model.md, "One training step".
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from slurmtopo.cost.params import CostParams, cost_params
from slurmtopo.cost.shapes import group_shapes, placement_pricer, shape_time
from slurmtopo.cost.model_spec import MODEL_PRESETS, ModelSpec, model_dict
from slurmtopo.cost.whole import compose_priced, whole_json
from slurmtopo.job.groups import Layout, build_groups
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Inventory, Placement
# the call and its phases are the framework's (it builds the list); priced here
from slurmtopo.job.frameworks.stepcalls import OVERLAPS, PHASES, StepCall
from slurmtopo.job.request import JobRequest
from slurmtopo.job.workload import DEFAULT_WORKLOAD, Workload

__all__ = ["DEFAULT_MODEL", "PHASES", "OVERLAPS", "StepCall", "CallPrice", "StepPrice",
           "step_calls", "price_step", "compose", "step_dict", "subgroups", "call_bytes",
           "compared_seconds", "compute_differs"]

#: the model a step is priced for when the job names none: Llama 3 70B
#: (hidden 8192, 80 layers), 4,096 tokens a micro-batch in bf16, one
#: micro-batch a step. Its activations are the 64 MiB TP all-reduce and PP
#: send of :data:`~slurmtopo.cost.defaults.DEFAULT_MESSAGE_BYTES`.
DEFAULT_MODEL: ModelSpec = MODEL_PRESETS["70b"]


@dataclass(frozen=True)
class CallPrice:
    """One :class:`StepCall` priced on its slowest group."""

    call: StepCall
    #: seconds of one call on the slowest group
    per_call_s: float
    #: seconds of all its calls
    seconds: float
    #: of those, seconds not hidden behind compute (today: all of them)
    exposed_s: float
    #: the slowest link class any of its groups crosses
    slowest: LinkClass
    size: int  # ranks a group
    count: int  # groups


@dataclass(frozen=True)
class StepPrice:
    """The price of one training step (see the module doc).

    ``time_s`` is the step number every decision uses: ``compute_s +
    exposed_comm_s + bubble_s``; today ``compute_s`` and ``bubble_s`` are 0
    and no communication is taken as hidden, so it is the communication."""

    workload: Workload
    model: ModelSpec
    calls: Tuple[CallPrice, ...]
    compute_s: float = 0.0
    bubble_s: float = 0.0
    #: what the compute model (if any) says of this step, for the reports
    notes: Tuple[str, ...] = field(default_factory=tuple)
    #: the whole step (slurmtopo.cost.whole.WholeStep: tokens/s, MFU,
    #: memory, exposed communication per kind) when the job describes its
    #: model; None: the step is its communication
    whole: Optional[object] = None

    @property
    def comm_s(self) -> float:
        """Seconds of all communication, hidden or not."""
        return sum(c.seconds for c in self.calls)

    @property
    def exposed_comm_s(self) -> float:
        return sum(c.exposed_s for c in self.calls)

    @property
    def time_s(self) -> float:
        return self.compute_s + self.exposed_comm_s + self.bubble_s

    def by_kind(self, exposed: bool = True) -> Dict[str, float]:
        """Seconds per planner kind (exposed ones by default)."""
        out: Dict[str, float] = {}
        for c in self.calls:
            out[c.call.kind] = out.get(c.call.kind, 0.0) + (c.exposed_s if exposed else c.seconds)
        return out

    def seconds_on(self, kinds: Iterable[str]) -> float:
        """Seconds of the calls on ``kinds`` (hidden or not)."""
        ks = set(kinds)
        return sum(c.seconds for c in self.calls if c.call.kind in ks)

    def slowest_on(self, kinds: Iterable[str]) -> LinkClass:
        """The slowest link the calls on ``kinds`` cross (SELF: none)."""
        ks = set(kinds)
        return max((c.slowest for c in self.calls if c.call.kind in ks and c.size > 1),
                   default=LinkClass.SELF)

    @property
    def kinds(self) -> Tuple[str, ...]:
        """The planner kinds the step communicates over, in call order."""
        return tuple(dict.fromkeys(c.call.kind for c in self.calls if c.size > 1))


# ---------------------------------------------------------------------------
# the calls of a step


def _model_of(w: Workload) -> ModelSpec:
    return w.model if w.model is not None else DEFAULT_MODEL


def step_calls(layout: Layout, workload: Optional[Workload] = None) -> List[StepCall]:
    """The collectives of one step of ``layout`` (a resolved Megatron
    layout, the planner's) for ``workload``, per rank, as the workload's
    framework runs them: its
    :meth:`~slurmtopo.job.frameworks.base.Framework.step_calls`, for the
    workload's model (:data:`DEFAULT_MODEL` when it names none).
    docs/cost-model.md, "One training step", has the table and its
    sources."""
    w = workload if workload is not None else DEFAULT_WORKLOAD
    return w.conventions.step_calls(layout, w, _model_of(w))


# ---------------------------------------------------------------------------
# pricing


def subgroups(groups: Sequence[Sequence[int]], part: Tuple[str, int]) -> List[List[int]]:
    """``groups`` split per :attr:`StepCall.part`."""
    how, k = part
    if how == "all" or k <= 1:
        return [list(g) for g in groups]
    out: List[List[int]] = []
    for g in groups:
        if how == "block":
            out.extend(list(g[i:i + k]) for i in range(0, len(g), k))
        elif how == "stride":
            out.extend(list(g[i::k]) for i in range(k))
        else:
            raise ValueError(f"unknown part {part!r}")
    return out


def call_bytes(call: StepCall, p: CostParams, req: JobRequest) -> int:
    """The call's bytes, or the size the job or the inventory sets for
    every collective of its kind (``message_bytes``)."""
    if call.kind in req.message_bytes:
        return int(req.message_bytes[call.kind])
    fixed = p.message_overrides.get(call.kind)
    return int(fixed) if fixed is not None else call.message_bytes


def compose(inv: Inventory, placement: Placement, layout: Layout, workload: Workload,
            model: ModelSpec, priced: Sequence[CallPrice], params: CostParams) -> StepPrice:
    """The step from its priced calls: with a model described, compute,
    the pipeline bubble and the optimizer added and each call's exposed
    seconds taken from what compute hides it
    (:func:`slurmtopo.cost.whole.compose_priced`, issue 35); without one,
    communication only, nothing hidden."""
    whole = compose_priced(inv, placement, layout, workload, model, priced, params)
    if whole is None:
        return StepPrice(workload=workload, model=model, calls=tuple(priced))
    calls = tuple(replace(c, exposed_s=e) for c, e in zip(priced, whole.exposed_per_call))
    return StepPrice(workload=workload, model=model, calls=calls,
                     compute_s=whole.compute_s, bubble_s=whole.bubble_s, notes=whole.notes,
                     whole=whole)


def price_step(inv: Inventory, placement: Placement, req: JobRequest,
               params: Optional[CostParams] = None) -> StepPrice:
    """One training step of ``req`` on ``placement``: every call of
    :func:`step_calls` priced on the slowest of its groups, times its count.

    Groups of the same shape (hosts, ranks a host, links) are priced once
    per message, with the shapes kept with the placement
    (:func:`slurmtopo.cost.shapes.group_shapes`), so the planner's
    proposals and the report share them."""

    p = params if params is not None else cost_params(inv)
    w = req.workload if req.workload is not None else DEFAULT_WORKLOAD
    p = p.for_version(w.nccl_version)  # the job's own NCCL release, if it names one
    model = _model_of(w)
    groups = placement.groups if placement.groups else build_groups(req.layout)
    pricer = placement_pricer(inv, p, placement)
    priced: List[CallPrice] = []
    memo = pricer.priced_calls  # kept with the placement under these parameters
    for call in step_calls(req.layout, w):
        gl = groups.get(call.kind)
        if not gl:
            continue
        if call.part[0] != "all":
            gl = subgroups(gl, call.part)
        n = len(gl[0])
        if n <= 1:
            continue
        m = call_bytes(call, p, req)
        key = (call.kind, call.part, call.collective, m)
        hit = memo.get(key)
        if hit is None:
            worst, slowest = 0.0, LinkClass.SELF
            if call.collective == "p2p":
                for cls, t in map(pricer.p2p_pricer(m), gl):
                    worst = max(worst, t)
                    slowest = max(slowest, cls)
            else:
                for sh in set(group_shapes(inv, p, placement, (call.kind, call.part), gl)):
                    t = shape_time(p, sh, call.collective, n, m)
                    worst = max(worst, t)
                    slowest = max(slowest, sh[0])
            hit = memo[key] = (worst, slowest)
        t, cls = hit
        c = call if m == call.message_bytes else replace(call, message_bytes=m)
        priced.append(CallPrice(c, t, t * call.calls, t * call.calls, cls, n, len(gl)))
    return compose(inv, placement, req.layout, w, model, priced, p)


def compute_differs(steps: Sequence[StepPrice]) -> bool:
    """Do the placements of one job differ in what their GPUs compute
    (compute, optimizer and pipeline bubble)? They do where the cluster
    mixes GPU models: a step runs at its slowest GPU
    (:func:`slurmtopo.cost.compute.placement_gpu`)."""
    if len(steps) < 2 or all(s.whole is None for s in steps):
        return False
    busy = [s.compute_s + s.bubble_s for s in steps]
    return max(busy) - min(busy) > 1e-9 * max(busy)


def compared_seconds(steps: Sequence[StepPrice]) -> List[float]:
    """What placements of one job are compared on (the planner's choice
    among its proposals, :mod:`slurmtopo.plan.choice`): the part of the
    step that differs between them, so that margins stay relative to it.

    Without a model described the step is its communication: its
    ``time_s``. With the whole step, the seconds above the least compute
    and bubble of any of them (their GPUs' own: a placement that mixes GPU
    models runs at its slowest, so its compute is part of the difference)
    plus the communication each leaves exposed. Where every placement hides
    all of its communication (exposed below 1% of it), all of the
    communication instead of the exposed (a hidden collective still loads
    the network and is the first to show when the model is off). On one
    GPU model the compute is the same on every placement and this is the
    exposed communication alone. The order of two placements is that of
    their ``time_s`` (all but the tie-break when every call is hidden)."""
    if all(s.whole is None for s in steps):
        return [s.time_s for s in steps]
    busy = [s.compute_s + s.bubble_s for s in steps]
    base = min(busy)
    extra = [b - base for b in busy] if compute_differs(steps) else [0.0] * len(steps)
    if all(s.exposed_comm_s <= 0.01 * s.comm_s for s in steps):
        return [x + s.comm_s for x, s in zip(extra, steps)]
    return [x + s.exposed_comm_s for x, s in zip(extra, steps)]


def step_dict(step: StepPrice) -> dict:
    """The step as plain data (``plan --json``'s ``step``): its calls, and
    ``time_s``, ``tokens_per_s``, ``tokens_per_s_per_gpu``, ``mfu``,
    ``memory_gib_per_gpu`` (None without a model described) and
    ``exposed_comm_s`` per planner kind (docs/cost-model.md, "The whole
    step")."""
    m, w = step.model, step.workload
    out = {"framework": w.framework, "style": w.style, "model": model_dict(m),
           "model_given": w.model is not None,
           "calls": [{"what": c.call.what, "kind": c.call.kind,
                      "collective": c.call.collective, "message_bytes": c.call.message_bytes,
                      "calls": c.call.calls, "phase": c.call.phase,
                      "overlaps_with": c.call.overlaps_with, "groups": c.count,
                      "size": c.size, "per_call_s": c.per_call_s, "time_s": c.seconds,
                      "exposed_s": c.exposed_s, "slowest_link": c.slowest.label,
                      "note": c.call.note} for c in step.calls],
           "comm_s": step.comm_s, "exposed_comm_s": step.by_kind(exposed=True),
           "exposed_comm_total_s": step.exposed_comm_s,
           "compute_s": step.compute_s, "bubble_s": step.bubble_s,
           "time_s": step.time_s, "tokens_per_s": None, "tokens_per_s_per_gpu": None,
           "mfu": None, "memory_gib_per_gpu": None, "notes": list(step.notes)}
    if step.whole is not None:
        out.update(whole_json(step.whole))
        out["time_s"] = step.time_s
    return out
