"""Plan a job that will wait in Slurm's queue: "not now" versus "never".

On a shared cluster most large jobs do not fit in the GPUs free right now.
That is Slurm's business: it queues the job, and the start-time step
re-plans on whatever Slurm gives. So a submission is planned on what is
free now when it fits, else on the nodes that *could* run it (busy ones
counted idle, then down/drained ones too), and is refused only when it can
never run: bigger than the eligible nodes (partition, ``--constraint``)
even with all of them idle, or a hard requirement no node can meet.

Also here: which nodes are eligible at all (a partition's members, a
``--constraint`` feature expression), as a state that marks the others
taken. Pure: the caller reads Slurm.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from slurmtopo.errors import PlacementError, SlurmtopoError
from slurmtopo.inventory.model import ClusterState, Inventory, NodeState, Placement

#: the state given to nodes a job may never use (not in its partition, not
#: matching its constraint); unusable for the planner, whatever Slurm says
INELIGIBLE = "ineligible"


@dataclass(frozen=True)
class QueuedPlan:
    """A placement and what it means for when the job starts."""

    placement: Placement
    #: "now" (fits what is free), "busy" (waits for running jobs), or
    #: "down" (also needs nodes that are down or drained now)
    when: str
    note: Optional[str] = None


# --------------------------------------------------------------------------
# --constraint


_TOKEN = re.compile(r"\s*([A-Za-z0-9_.:+-]+|[&|()\[\],]|\*\d+)")


def parse_constraint(text: str) -> Tuple[Optional[Callable[[Set[str]], bool]], Optional[str]]:
    """(predicate over a node's features, note). Understands feature names
    joined by ``&`` (or ``,``), ``|`` and parentheses; ``[a|b]`` (all nodes
    with the same one) is read as ``a|b``. Counts (``a*2``) cannot be judged
    node by node: (None, note) and Slurm alone applies the constraint."""
    text = str(text).strip()
    if not text or "\n" in text:
        raise SlurmtopoError(f"--constraint {text!r}: give a feature expression such as "
                             "'a100&ib' or 'rack1|rack2'")
    pos, toks = 0, []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise SlurmtopoError(f"--constraint {text!r}: unexpected {text[pos:]!r} (features "
                                 "are joined with &, | and parentheses)")
        toks.append(m.group(1))
        pos = m.end()
    if any(t.startswith("*") for t in toks):
        return None, (f"--constraint {text}: counts (*N) are left to Slurm; the planner "
                      "considers every node")
    toks = ["(" if t == "[" else ")" if t == "]" else "&" if t == "," else t for t in toks]
    i = 0

    def level(op, combine, operand):
        """operand (op operand)*: | binds looser than &."""
        nonlocal i
        parts = [operand()]
        while i < len(toks) and toks[i] == op:
            i += 1
            parts.append(operand())
        return lambda f: combine(p(f) for p in parts)

    def expr():
        return level("|", any, term)

    def term():
        return level("&", all, factor)

    def factor():
        nonlocal i
        if i >= len(toks):
            raise SlurmtopoError(f"--constraint {text!r}: ends too early")
        t = toks[i]
        i += 1
        if t == "(":
            e = expr()
            if i >= len(toks) or toks[i] != ")":
                raise SlurmtopoError(f"--constraint {text!r}: unbalanced parentheses")
            i += 1
            return e
        if t in ("&", "|", ")"):
            raise SlurmtopoError(f"--constraint {text!r}: {t!r} where a feature was expected")
        return lambda f, name=t: name in f

    pred = expr()
    if i != len(toks):
        raise SlurmtopoError(f"--constraint {text!r}: unexpected {toks[i]!r}")
    return pred, None


def eligible_state(inv: Inventory, state: ClusterState,
                   partition_members: Optional[Iterable[str]] = None,
                   constraint: Optional[str] = None,
                   features: Optional[Mapping[str, Sequence[str]]] = None
                   ) -> Tuple[ClusterState, Sequence[str]]:
    """``state`` with the nodes this job may never use marked
    :data:`INELIGIBLE`, and notes. ``features``: node -> features Slurm
    reports (joined with the inventory's own)."""
    notes = []
    out: Dict[str, NodeState] = dict(state.nodes)
    keep = set(inv.nodes)
    if partition_members is not None:
        members = set(partition_members)
        keep &= members
    if constraint:
        pred, note = parse_constraint(constraint)
        if note:
            notes.append(note)
        else:
            feats = {n.name: set(n.features) | set((features or {}).get(n.name, ()))
                     for n in inv}
            if not any(feats.values()):
                notes.append(f"--constraint {constraint}: no node features are known (inventory "
                             "`features:` or Slurm); the planner considers every node")
            else:
                keep = {n for n in keep if pred(feats[n])}
    for name in inv.nodes:
        if name not in keep:
            out[name] = NodeState(name, state=INELIGIBLE, exclusive=True)
    return ClusterState(nodes=out, source=state.source), notes


# --------------------------------------------------------------------------
# now, later, never


def _only_ineligible(state: ClusterState, keep_down: bool) -> ClusterState:
    """Every node idle except the ineligible ones (and, with ``keep_down``,
    those down or drained now)."""
    nodes = {}
    for name, st in state.nodes.items():
        if st.state == INELIGIBLE or (keep_down and not st.usable):
            nodes[name] = NodeState(name, state=st.state, flags=st.flags, exclusive=True)
    return ClusterState(nodes=nodes, source=state.source)


def plan_for_queue(inv: Inventory, state: ClusterState, req, planner: Callable
                   ) -> QueuedPlan:
    """Plan on what is free now; else on the eligible nodes with busy ones
    counted idle ("not now": Slurm queues it); else with down/drained nodes
    too. Raises PlacementError worded "never" when even every eligible node
    idle cannot hold it."""
    try:
        return QueuedPlan(planner(inv, state, req), "now")
    except PlacementError as exc:
        now = exc
    try:
        p = planner(inv, _only_ineligible(state, keep_down=True), req)
        return QueuedPlan(p, "busy", (
            f"not now: {now.message}. The job fits the cluster once running jobs end, so it "
            "is planned on the nodes that could run it and queued; Slurm starts it when they "
            "free up and the start-time step re-plans on the nodes Slurm gives"))
    except PlacementError:
        pass
    try:
        p = planner(inv, _only_ineligible(state, keep_down=False), req)
        return QueuedPlan(p, "down", (
            f"not now: {now.message}. The job needs nodes that are down or drained now; it is "
            "queued and starts when enough of them are back"))
    except PlacementError as exc:
        never = exc
    raise PlacementError(f"never: this job cannot run here even with every eligible node idle: "
                         f"{never.message}")


def fits_ever(inv: Inventory, state: ClusterState, req, planner: Callable) -> Optional[str]:
    """None when the job fits the eligible nodes all idle, else why not."""
    try:
        planner(inv, _only_ineligible(state, keep_down=False), req)
        return None
    except PlacementError as exc:
        return exc.message


# --------------------------------------------------------------------------
# preferences the placement daemon is to wait for


def _shape(p: Placement) -> str:
    per = sorted({len(p.ranks_on(h)) for h in p.hosts})
    return (f"{len(p.hosts)} node(s) x {per[0]} GPU(s)" if len(per) == 1
            else f"{len(p.hosts)} node(s), {'/'.join(map(str, per))} GPUs")


def shape_for_preferences(inv: Inventory, state: ClusterState, req, placement: Placement,
                          planner: Callable) -> Tuple[Placement, List[str]]:
    """For a job the placement daemon releases later: the script's shape
    (nodes x GPUs per node) is fixed at submit time, and the daemon can
    only wait for a ``--prefer`` that this shape can meet. Each preference
    the shape cannot meet even on the idle cluster is reported; when another
    shape can meet it, the job is shaped that way instead (so the daemon
    waits for it), else the note says it can never be met and the daemon
    will not wait for it. Returns (placement to use, notes)."""
    prefer = dict(getattr(req, "prefer", {}) or {})
    if not prefer:
        return placement, []
    idle = _only_ineligible(state, keep_down=True)
    per = {len(placement.ranks_on(h)) for h in placement.hosts}
    fixed = replace(req, gpus_per_node=per.pop()) if len(per) == 1 else req

    def meets(base, kinds) -> Optional[Placement]:
        try:
            return planner(inv, idle, replace(
                base, require={**dict(req.require), **{k: prefer[k] for k in kinds}},
                prefer={k: v for k, v in prefer.items() if k not in kinds}))
        except PlacementError:
            return None

    unmet = [k for k in prefer if meets(fixed, [k]) is None]
    if not unmet:
        return placement, []
    notes: List[str] = []
    other = [k for k in unmet if meets(req, [k]) is not None]
    for k in unmet:
        if k not in other:
            notes.append(f"--prefer {k}={prefer[k]} can never be met on this cluster; the "
                         "placement daemon will not wait for it")
    if other:
        met = [k for k in prefer if k not in unmet or k in other]
        better = meets(req, met)
        if better is not None:
            notes.append(f"--prefer {', '.join(f'{k}={prefer[k]}' for k in other)} cannot be "
                         f"met with the shape planned on the free GPUs ({_shape(placement)}); "
                         f"the job is shaped for it instead ({_shape(better)}) so the placement "
                         "daemon can wait for it")
            return better, notes
        notes.append(f"--prefer {', '.join(f'{k}={prefer[k]}' for k in other)} cannot be met "
                     f"with the submitted shape ({_shape(placement)}); the placement daemon "
                     "will not wait for it (--gpus-per-node can set another shape)")
    return placement, notes
