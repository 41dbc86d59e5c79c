"""The placement a job gets: the planner's proposals
(:func:`slurmtopo.placement.planner.proposals`) and Slurm's default
placement, priced by the cost model, the fastest kept (:func:`plan`).

This is the layer above both the planner and the cost model, so that
dependencies run one way: groups -> placement -> cost -> choice. The
planner compares link speeds in the cost model's figures through
:class:`CostModelSpeeds`, never by importing the cost model itself.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from slurmtopo.cost import CostParams, cost_params, evaluate
from slurmtopo.cost.step import StepPrice, compared_seconds, compute_differs, price_step
from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import ClusterState, Hardware, Inventory, Placement
from slurmtopo.job.groups import DOMAIN_KINDS, build_groups
from slurmtopo.job.request import JobRequest, level_of_class, satisfies
from slurmtopo.placement.baselines import naive_from
from slurmtopo.placement.common import Candidates, candidates, not_enough_gpus
from slurmtopo.placement.fabric import fabric_tree
from slurmtopo.placement.planner import (EVEN_DOMAINS, MODEL, NESTING, NODE_CAP, ONE_PHASE,
                                         POD_BY_POD, Proposal, proposals)

#: another nesting is used only when it models at least this much faster;
#: one that sends more groups of :data:`slurmtopo.job.groups.DOMAIN_KINDS`
#: over the network must model this much faster
ALT_NESTING_MARGIN = 0.05


#: Proposal.kind of Slurm's default placement (the safety net)
NAIVE = "naive"

#: what the launcher requires of a placement: None when it can start it,
#: else why not (slurmtopo.plan.launchers.Launcher.requirement)
Admit = Callable[[Placement], Optional[str]]

#: why a proposal other than the first was kept, for the note
_WHY = {
    NAIVE: "Slurm's default placement (nodes in hostname order, ranks in block order)",
    POD_BY_POD: "splitting spanning groups pod by pod",
    ONE_PHASE: "relaxing every block alike (none kept whole first)",
    EVEN_DOMAINS: "spreading the ranks evenly over the NVLink domains (racks) taken",
}


class CostModelSpeeds:
    """The planner's view of link speeds (:class:`~slurmtopo.placement.speeds.LinkSpeeds`)
    in the cost model's figures under ``params`` (:func:`plan` passes the
    inventory's, :func:`params_of`: the planner then weighs an
    oversubscribed spine or an admin's NIC rate as the choice among its
    proposals will; the defaults when none are given)."""

    def __init__(self, params: Optional[CostParams] = None):
        self.params = params if params is not None else CostParams()
        self._order: Dict[Hardware, Tuple[float, ...]] = {}

    def ring(self, hw: Hardware, gpus: Tuple[int, ...]) -> Tuple[LinkClass, float]:
        return self.params.hw(hw).intra(gpus)

    def network_share(self, hw: Hardware) -> Sequence[float]:
        return self.params.hw(hw).net

    def network(self, share: float, cls: LinkClass) -> float:
        return self.params.network_gbps(share, cls)

    def hardware_order(self, hw: Hardware) -> Tuple[float, ...]:
        hit = self._order.get(hw)
        if hit is None:
            hc = self.params.hw(hw)
            hit = self._order[hw] = (-(hc.lane * hc.max_lanes), -max(hc.net or [0.0]), -hc.pcie)
        return hit


def plan(inv: Inventory, state: Optional[ClusterState], req: JobRequest,
         safety_net: bool = True, cand: Optional[Candidates] = None,
         admit: Optional[Admit] = None) -> Placement:
    """See :func:`plan_and_default`: the placement alone."""
    return plan_and_default(inv, state, req, safety_net, cand, admit)[0]


def plan_and_default(inv: Inventory, state: Optional[ClusterState], req: JobRequest,
                     safety_net: bool = True, cand: Optional[Candidates] = None,
                     admit: Optional[Admit] = None
                     ) -> Tuple[Placement, Optional[Placement]]:
    """Place every rank of ``req`` on a free GPU, topology-aware (gang: all
    ranks or :class:`~slurmtopo.errors.PlacementError` saying why not). See
    docs/placement.md.

    The planner proposes a few placements and the cost model picks the
    fastest (:func:`cheapest`). With ``safety_net`` (the default) Slurm's
    default placement is one more candidate, at every job size, so the
    result is never modelled slower than what Slurm would give, except
    where Slurm's would send TP or EP groups out of their rack by slowing
    them more than it speeds the step (the plan's notes say so); tests
    turn it off to check the planner's own proposals.

    ``cand``: the candidate nodes of ``req`` on ``state``, when the caller
    keeps them up to date itself (the placement daemon, which plans
    hundreds of jobs on one changing state); None: computed here.

    ``admit``: what the job's launcher requires of a placement (torchrun:
    node-contiguous ranks); only the proposals it admits are weighed, so
    the launcher is part of the choice and not a refusal after it (see
    :func:`cheapest`).

    Returns the placement and Slurm's default placement when it was
    weighed (None otherwise: one rank, or no safety net), so that a caller
    comparing the two (:func:`slurmtopo.api.prepare`) does not build it
    again (a 16,384-rank placement is a twentieth of a second)."""
    tree = fabric_tree(inv)
    if cand is None:
        cand = candidates(inv, state, req, tree.node_pod)
    err = not_enough_gpus(req, cand)
    if err is not None:
        raise err
    groups = build_groups(req.layout)
    # the link speeds in the inventory's own cost figures, with their
    # per-node-type tables, kept with the inventory rather than rebuilt for
    # every job
    speeds = inv.derive("choice.speeds", lambda: CostModelSpeeds(params_of(inv)))
    options = proposals(inv, req, groups, cand, tree, speeds)
    naive = None
    if safety_net and req.layout.world > 1:
        naive = naive_from(inv, req, cand, groups)
        if meets_require(inv, req, naive):
            options.append(Proposal(NAIVE, naive))
    return cheapest(inv, req, options, admit), naive


def params_of(inv: Inventory) -> CostParams:
    """The inventory's cost parameters, or the defaults when its cost
    block is bad: that is reported where costs are shown, and the plan
    (and the safety net) still holds under the default figures. The one
    policy for a cost block that cannot be read: the planner, the
    placement daemon, ``simulate`` and ``audit`` all price with it (a
    cluster loaded by :func:`slurmtopo.plan.cluster.load_cluster` had its
    block checked already, so only an inventory built otherwise gets the
    defaults)."""
    try:
        return cost_params(inv)
    except SlurmtopoError:
        return CostParams()


def meets_require(inv: Inventory, req: JobRequest, pl: Placement) -> bool:
    """Does ``pl`` keep every required kind inside its level?"""
    if not req.require:
        return True
    # link classes do not depend on the cost figures: a bad cost block
    # (reported where costs are shown) must not change this answer
    report = constraint_report(inv, pl, req, CostParams())
    return all(met for _, _, met, hard in report.values() if hard)


#: the tensor-parallel kinds (:func:`slower_tp`)
TP_KINDS = ("tp", "expert-tp")


def slower_on(r: StepPrice, first: StepPrice, kinds: Sequence[str]) -> bool:
    """Does ``r`` move ``kinds`` to slower links than ``first``: a slower
    class, or, where they cross the network anyway, their collectives
    slowed by a larger factor than the whole step is sped up. Both steps
    count every call (the model's step for the job), but that step is a
    model's: a trade that slows TP or EP to win elsewhere rests on the
    model's balance between the kinds, and the training runs these kinds'
    calls on its critical path; it is not taken on a thin margin."""
    first_cls = first.slowest_on(kinds)
    if r.slowest_on(kinds) > first_cls:
        return True
    t0, t1 = first.seconds_on(kinds), r.seconds_on(kinds)
    return first_cls.is_network and t0 > 0 and r.time_s > 0 and \
        t1 / t0 > first.time_s / r.time_s


def slower_tp(r: StepPrice, first: StepPrice) -> bool:
    """:func:`slower_on` tensor parallel (TP groups spread one rank a host
    instead of 4+4, say)."""
    return slower_on(r, first, TP_KINDS)


def domain_crossings(inv: Inventory, pl: Placement, racks_only: bool = False) -> int:
    """How many groups of :data:`DOMAIN_KINDS` span more than one NVLink
    domain (a node outside a multi-node domain is its own). The cost
    model prices a kind by its slowest group, so one EP block over the
    network costs a step as much as eleven; the spine's load and the
    issue's rule (a TP or EP group never leaves its rack when it fits
    one) count them all. ``racks_only``: only groups with a rank in a
    multi-node domain (a rack) count."""
    nodes = inv.nodes
    dom: Dict[str, object] = {}
    rack: Dict[str, bool] = {}
    for h in pl.hosts:
        d = nodes[h].nvlink_domain
        dom[h] = h if d is None else d.key
        rack[h] = d is not None
    slots = pl.slots
    return sum(1 for kind in DOMAIN_KINDS for g in pl.groups.get(kind, ())
               if len(g) > 1 and len({dom[slots[r].host] for r in g}) > 1
               and (not racks_only or any(rack[slots[r].host] for r in g)))


def cheapest(inv: Inventory, req: JobRequest, options: List[Proposal],
             admit: Optional[Admit] = None) -> Placement:
    """The option whose step (:func:`slurmtopo.cost.step.price_step`, the
    job's every call) the cost model prices fastest (the first on ties),
    with a note when it is not the planner's first proposal. Another
    nesting must be :data:`ALT_NESTING_MARGIN` faster and keep tensor
    parallel on links as fast (:func:`slower_tp`). A variant of the plan
    (pod by pod, every block relaxed alike) that sends more TP or EP
    groups out of their NVLink domain (:func:`domain_crossings`), and so
    does Slurm's default placement (the safety net) when it sends more of
    them out of a multi-node domain (a rack): such an option must also not
    slow those groups' collectives more than it speeds the step
    (:func:`slower_on`). Elsewhere Slurm's default stays the floor: the
    plan is never modelled slower than it.

    ``admit`` (the launcher's requirement) drops the options it refuses
    first, with a note; when it refuses them all the usual choice is made,
    and the caller's check of the launcher says why it cannot start it."""
    kept = options if admit is None else [o for o in options if admit(o.placement) is None]
    if not kept or len(kept) == len(options):
        return _cheapest(inv, req, kept or options)
    pl = _cheapest(inv, req, kept)
    why = next(w for w in map(admit, (o.placement for o in options)) if w is not None)
    note = (f"the job's launcher cannot start {len(options) - len(kept)} of the "
            f"{len(options)} placements weighed ({why}); chose among the others")
    return Placement(slots=pl.slots, groups=pl.groups, hosts=pl.hosts,
                     notes=tuple(pl.notes) + (note,))


def placement_times(reps: Sequence[StepPrice]) -> List[float]:
    """What the options of one job are compared on: the part of the step
    a placement changes (:func:`slurmtopo.cost.step.compared_seconds`):
    the communication left exposed, plus the compute of slower GPUs where
    the cluster mixes GPU models (a step runs at its slowest GPU)."""
    return compared_seconds(reps)


def _cheapest(inv: Inventory, req: JobRequest, options: List[Proposal]) -> Placement:
    """:func:`cheapest` among ``options``, all admitted."""
    first = options[0].placement
    if len(options) == 1:
        return first
    params = params_of(inv)
    reps = [price_step(inv, o.placement, req, params) for o in options]
    times = placement_times(reps)
    best = 0
    crossings: Dict[bool, int] = {}
    declined: Optional[int] = None  # the fastest option refused by slower_on
    for i, t in enumerate(times):
        margin = 1e-9
        if options[i].kind in (ONE_PHASE, POD_BY_POD, EVEN_DOMAINS, NAIVE) and \
                t < times[best] * (1 - margin):
            # Slurm's default is weighed against racks only: elsewhere (a
            # TP group over two HGX nodes) it stays the floor the plan is
            # never modelled slower than
            racks = options[i].kind == NAIVE
            if racks not in crossings:
                crossings[racks] = domain_crossings(inv, first, racks)
            if domain_crossings(inv, options[i].placement, racks) > crossings[racks]:
                # more TP/EP groups out of their rack: only when clearly
                # faster, and not by slowing those groups' own collectives
                if slower_on(reps[i], reps[0], DOMAIN_KINDS):
                    if declined is None or t < times[declined]:
                        declined = i
                    continue
                margin = ALT_NESTING_MARGIN
        if options[i].kind == NESTING:
            if slower_tp(reps[i], reps[0]):
                continue
            margin = ALT_NESTING_MARGIN  # the usual nesting unless clearly slower
        if t < times[best] * (1 - margin):
            best = i
    refused = _refused_note(inv, options, times, best, declined, first)
    if best == 0:
        if refused is None:
            return first
        return Placement(slots=first.slots, groups=first.groups, hosts=first.hosts,
                         notes=tuple(first.notes) + (refused,))
    chosen = options[best]
    a, b = times[0], times[best]
    if chosen.kind == MODEL:
        note = (f"all ranks on {chosen.model} nodes: the cluster mixes GPU models and this one "
                f"holds the job")
    elif chosen.kind == NESTING:
        note = "this nesting models faster than the usual one (tp, cp, dp, pp innermost first)"
    elif chosen.kind == NODE_CAP:
        note = (f"at most {chosen.node_cap} ranks a node, so rings stay on GPUs of one socket "
                f"or PCIe switch: models faster than filling whole nodes")
    else:
        note = f"{_WHY[chosen.kind]} models faster here"
    # Slurm's default: the planner's notes say what it tried and why
    notes = [n for n in first.notes if not n.startswith(f"{req.layout.world} ranks on")] \
        if chosen.kind == NAIVE else list(chosen.placement.notes)
    if compute_differs(reps):
        # their GPUs differ: the whole step says it
        b, a = reps[best].time_s, reps[0].time_s
        what = "a step, compute included"
    else:
        what = "of communication a step"
    notes.append(f"{note} ({b * 1e3:.3f} ms vs {a * 1e3:.3f} ms {what}); using it")
    if refused is not None:
        notes.append(refused)
    pl = chosen.placement
    return Placement(slots=pl.slots, groups=pl.groups, hosts=pl.hosts, notes=tuple(notes))


def _refused_note(inv: Inventory, options: List[Proposal], times: List[float], best: int,
                  declined: Optional[int], first: Placement) -> Optional[str]:
    """Why a faster option was not used (None: none was refused)."""
    if declined is None or times[declined] >= times[best]:
        return None
    kind = options[declined].kind
    what = "Slurm's default placement" if kind == NAIVE else _WHY.get(kind, kind)
    racks = kind == NAIVE
    extra = (domain_crossings(inv, options[declined].placement, racks)
             - domain_crossings(inv, first, racks))
    return (f"{what} models faster ({times[declined] * 1e3:.3f} ms vs "
            f"{times[best] * 1e3:.3f} ms a step) but sends {extra} more TP/EP group(s) out "
            f"of their {'rack' if racks else 'NVLink domain'}, slowing their collectives more "
            "than it speeds the step: not used")


def constraint_report(inv: Inventory, placement: Placement, req: JobRequest,
                      params=None) -> Dict[str, Tuple[str, str, bool, bool]]:
    """For every kind in ``req.require`` and ``req.prefer``: (level asked,
    tightest level its groups actually stay inside, met, hard):
    :func:`meets_require` and the public API's answer to "did the plan
    keep what I asked for". Kinds the layout lacks (or of size 1) are met."""
    rep = evaluate(inv, placement, req, params, warn=False)
    out: Dict[str, Tuple[str, str, bool, bool]] = {}
    for hard, mapping in ((False, req.prefer), (True, req.require)):
        for kind, level in mapping.items():
            gc = rep.kinds.get(kind)
            if gc is None or gc.size <= 1:
                out[kind] = (level, "nvlink", True, hard)
                continue
            out[kind] = (level, level_of_class(gc.slowest), satisfies(gc.slowest, level), hard)
    return out
