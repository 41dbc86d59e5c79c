"""The topology-aware planner: :func:`plan`.

Global ranks keep the framework's numbering (:func:`~slurmtopo.groups.build_groups`);
the planner only decides which physical GPU runs each rank.

1. **Positions.** Every rank gets a *position* in a canonical order where
   the heaviest traffic is innermost: tensor parallel varies fastest, then
   context, data, and pipeline slowest (Megatron's default order, so for
   the default layout position == rank). Every group kind then lies in
   aligned blocks of consecutive positions: a TP group is a block of
   ``tp``, a DP group lies inside a block of ``tp*cp*dp``, ... The block
   size of a kind is its *span* (:func:`span_of`).

2. **Constraints.** ``require`` (hard), ``prefer`` (soft) and implicit
   preferences (TP and expert-TP on NVLink; CP, EP and the DP block inside
   a node) each say: blocks of this span stay inside that level. A level
   maps onto the cluster tree (:mod:`slurmtopo.placement.fabric`): in-node
   levels bound the ring class inside each node (``nvlink`` -> NVLINK...),
   ``leaf`` and ``nvlink-domain`` are *pods*, ``spine`` the level-1 switch
   groups. A scope keeps blocks whole exactly when it receives a multiple
   of the span, so every constraint becomes "this scope takes a multiple
   of M" plus, in nodes, a bound on the chunks.

3. **Feasibility and relaxation.** For a constraint set the capacity of
   every node is computed once per distinct (hardware, free GPUs)
   signature, then summed up the tree with the multiples applied. If the
   hard constraints do not fit, :class:`PlacementError` says which and why.
   Soft ones are relaxed lexicographically: most important first, each to
   the tightest level that still fits with those already fixed. When the
   most important relaxed one held for some blocks, those blocks are placed
   first under it and only the rest relaxed (two phases).

4. **Choosing nodes.** A job that fits one node gets the node where its
   GPUs are best connected, then the best fit. One that fits a pod gets the
   pod whose chosen nodes are best connected, then needs fewest nodes, then
   the best fit. Otherwise top-down over the tree: children by quality
   group, the largest while none can take the rest, the best fit for the
   rest. Ranks are spread evenly over a pod's chosen nodes in whole units,
   or packed block by block when that splits the groups that must span
   hosts more evenly (:meth:`_Planner._pack`). Multi-node NVLink domains
   count as nearly in-node: in-node preferences give way to keep a
   preference (the DP block, the whole job) inside one domain.
   Best fit keeps big free leaves and idle nodes for big jobs.

5. **Mapping.** Chosen nodes are walked in tree order and receive
   consecutive positions, so a block lands in one scope. Inside a node
   :func:`~slurmtopo.placement.intranode.select` picks the GPUs by NVLink
   island, PCIe switch and NUMA node; identical nodes are used identically,
   so data-parallel peers sit on the same local GPU index (the same rail).
   Each rank then gets its closest NIC(s) and its GPU's NUMA-local CPUs.

6. **Choosing among proposals.** The planner proposes a few placements
   (:func:`_proposals`: the plan; on PCIe nodes the same with at most half
   or a quarter of a node per host; on clusters mixing GPU models the job
   on each model) and the cost model picks the fastest. Slurm's default
   placement is one more candidate at every job size (``safety_net``), so
   the result is never modelled slower than what Slurm would give.

Pure and O(nodes + world) after the per-signature caches: a 16k-GPU job on
a 100k-GPU inventory plans in a few tenths of a second.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import PlacementError
from slurmtopo.groups import DENSE_DIMS, build_groups, span_of
from slurmtopo.links import LinkClass
from slurmtopo.model import ClusterState, Inventory, Node, Placement
from slurmtopo.placement.common import Candidates, build_placement, candidates, not_enough_gpus
from slurmtopo.placement.fabric import FabricTree, Scope, fabric_tree
from slurmtopo.placement.intranode import (capacity, hw_info, largest_group, nested_chain,
                                           select, select_scored)
from slurmtopo.placement.intranode import ring as ring_class
from slurmtopo.request import (LEVEL_INDEX, LEVEL_TEXT, LEVELS, NODE_LEVEL_BOUND, NODE_LEVELS,
                               JobRequest, implicit_preferences)

#: the pseudo group kind of the implicit "whole job inside one NVLink domain"
JOB = "job"

#: innermost (heaviest traffic) first
DEFAULT_DIMS: Tuple[str, ...] = ("tp", "cp", "dp", "pp")

_UNIT_TEXT = {
    "nvlink": "NVLink island",
    "pcie-switch": "group of GPUs under one PCIe switch",
    "numa": "group of GPUs on one NUMA node",
    "node": "node",
    "nvlink-domain": "NVLink domain",
    "leaf": "leaf",
    "spine": "spine group",
}


def _lcm(values) -> int:
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


@dataclass(frozen=True)
class Constraint:
    kind: str
    level: str
    hard: bool
    implicit: bool
    span: int  # aligned block of positions holding each group
    size: int  # ranks per group

    @property
    def text(self) -> str:
        return f"{self.kind}={self.level}"


# --------------------------------------------------------------------------
# positions


def _dense_sizes(lay) -> Dict[str, int]:
    return {"tp": lay.tp, "cp": lay.cp, "ep": 1, "dp": lay.dp, "pp": lay.pp}


def positions(lay, dims: Sequence[str] = DEFAULT_DIMS) -> Optional[List[int]]:
    """rank -> position in the canonical order ``dims`` (innermost first),
    or None when that is the identity (the layout's own order already has
    these dimensions in this order, e.g. Megatron's default)."""
    sizes = _dense_sizes(lay)
    user = [n for n in lay.fastest_first() if sizes[n] > 1]
    canon = [n for n in dims if sizes[n] > 1]
    if user == canon:
        return None
    stride: Dict[str, int] = {}
    s = 1
    for n in canon:
        stride[n] = s
        s *= sizes[n]
    pos = [0]
    for n in user:  # fastest first: rank digits
        st = stride[n]
        pos = [p + d * st for d in range(sizes[n]) for p in pos]
    return pos


# --------------------------------------------------------------------------
# one attempt: a constraint set -> capacities


class _Attempt:
    """Capacities of every scope under one set of constraints."""

    def __init__(self, P: "_Planner", cons: Sequence[Constraint]):
        self.P = P
        self.cons = tuple(cons)
        tree = P.tree
        node_spans: List[Tuple[int, LinkClass]] = []
        domain_spans: List[int] = []
        pod_spans: List[int] = []
        spine_spans: List[int] = []
        for c in cons:
            if c.level in NODE_LEVELS:
                node_spans.append((c.span, NODE_LEVEL_BOUND[c.level]))
            elif c.level == "nvlink-domain":
                domain_spans.append(c.span)
            elif c.level == "leaf":
                if not tree.flat:
                    pod_spans.append(c.span)
            elif c.level == "spine":
                if not tree.flat:
                    spine_spans.append(c.span)
        self.node_spans = node_spans
        #: per pod type (is_domain): node unit and in-node bounds
        u_dom = _lcm([s for s, _ in node_spans])
        u_node = _lcm([u_dom] + domain_spans)
        self.unit = {True: u_dom, False: u_node}
        b_dom = tuple(sorted(set(node_spans)))
        b_node = tuple(sorted(set(node_spans) | {(s, LinkClass.SYS) for s in domain_spans}))
        self.bounds = {True: b_dom, False: b_node}
        both = _lcm([u_dom, u_node] if tree.has_domains else [u_node])
        self.m_pod = _lcm([both] + pod_spans + domain_spans)
        if tree.levels == 0:
            self.m_pod = _lcm([self.m_pod] + spine_spans)
        self.m_l1 = _lcm([self.m_pod] + spine_spans)
        self._sig_caps: Dict[bool, List[int]] = {}
        self.scope_cap: Dict[int, int] = {}
        self.total = self._aggregate(tree.root)

    def sig_caps(self, dom: bool) -> List[int]:
        caps = self._sig_caps.get(dom)
        if caps is None:
            P = self.P
            u, b = self.unit[dom], self.bounds[dom]
            g = P.per_node
            caps = []
            for hw, free in P.sigs:
                c = capacity(hw, free, u, b)
                if g is not None:
                    c = min(c, g) // u * u
                caps.append(c)
            self._sig_caps[dom] = caps
        return caps

    def node_cap(self, idx: int) -> int:
        P = self.P
        dom = P.tree.pods[P.tree.node_pod[idx]].is_domain
        return self.sig_caps(dom)[P.sig_of[idx]]

    def _aggregate(self, sc: Scope) -> int:
        if sc.is_pod:
            counts = self.P.pod_sigs.get(sc.index)
            if not counts:
                cap = 0
            else:
                caps = self.sig_caps(sc.is_domain)
                cap = sum(n * caps[s] for s, n in counts.items())
                cap = cap // self.m_pod * self.m_pod
            self.scope_cap[id(sc)] = cap
            return cap
        cap = sum(self._aggregate(c) for c in sc.children)
        if sc.level == 1 and sc.depth > 0:
            cap = cap // self.m_l1 * self.m_l1
        self.scope_cap[id(sc)] = cap
        return cap

    @property
    def feasible(self) -> bool:
        return self.total >= self.P.need


# --------------------------------------------------------------------------
# the planner


class _Elig:
    """index -> (node, free GPUs) for the usable nodes, without building a
    dict of 100,000 entries: views over the candidates' signatures."""

    __slots__ = ("nodes", "sig_of", "sigs")

    def __init__(self, nodes: List[Node], cand: Candidates):
        self.nodes = nodes
        self.sig_of = cand.sig_of
        self.sigs = cand.sigs

    def __contains__(self, idx: int) -> bool:
        return idx in self.sig_of

    def __getitem__(self, idx: int) -> Tuple[Node, Tuple[int, ...]]:
        return self.nodes[idx], self.sigs[self.sig_of[idx]][1]

    def __iter__(self):
        return iter(self.sig_of)

    def items(self):
        nodes, sigs = self.nodes, self.sigs
        for idx, s in self.sig_of.items():
            yield idx, (nodes[idx], sigs[s][1])


class _Planner:
    def __init__(self, inv: Inventory, req: JobRequest, groups, cand: Candidates,
                 tree: FabricTree, need: Optional[int] = None, global_split: bool = True,
                 node_cap: Optional[int] = None, dims: Tuple[str, ...] = DEFAULT_DIMS,
                 two_phase: bool = True):
        self.inv = inv
        self.req = req
        self.lay = req.layout
        self.world = self.lay.world
        #: ranks to place (the world, or the rest of it in a second phase)
        self.need = self.world if need is None else need
        self.groups = groups
        self.cand = cand
        self.tree = tree
        g = req.gpus_per_node
        self.per_node = None if g is None else min(g, self.world)
        if node_cap is not None:  # a variant: at most node_cap ranks a node
            self.per_node = min(node_cap, self.per_node or node_cap)
        self.sigs = cand.sigs
        self.sig_of = cand.sig_of
        self.pod_sigs = cand.pod_sigs
        self.pod_free = cand.pod_free
        self.elig = _Elig(tree.nodes, cand)
        self._attempts: Dict[Tuple, _Attempt] = {}
        self.notes: List[str] = []
        self.natural: List[int] = []
        #: split spanning blocks over the whole job's nodes when that is
        #: better than pod by pod (:meth:`_global_pack`); set when it was
        self.global_split = global_split
        self.used_global = False
        self.node_cap = node_cap
        #: the nesting of the rank blocks, innermost first
        self.dims = dims
        #: keep the first relaxed preference for as many blocks as fit
        #: (:meth:`_two_phase`); set when that was done
        self.two_phase = two_phase
        self.used_two_phase = False

    # ---- constraints ----------------------------------------------------

    def _structural(self, level: str) -> int:
        """GPUs in the largest unit of ``level`` in the whole inventory
        (cached on the tree: it depends on the inventory only)."""
        cache = self.tree.__dict__.setdefault("_structural", {})
        got = cache.get(level)
        if got is None:
            got = cache[level] = self._structural_uncached(level)
        return got

    def _structural_uncached(self, level: str) -> int:
        inv, tree = self.inv, self.tree
        node_max = max(n.hardware.gpu_count for n in inv)
        if level in NODE_LEVELS:
            return node_max
        if level == "nvlink-domain":
            best = node_max
            for pod in tree.pods:
                if pod.is_domain:
                    best = max(best, sum(inv.nodes[tree.names[i]].hardware.gpu_count
                                         for i in pod.members))
            return best
        if tree.flat or level == "any":
            return 1 << 62
        if level == "leaf":
            return max(sum(inv.nodes[tree.names[i]].hardware.gpu_count for i in p.members)
                       for p in tree.pods)
        # spine: largest L1 group
        per: Dict[int, int] = {}
        for p in tree.pods:
            l1 = tree.pod_l1[p.index]
            per[id(l1)] = per.get(id(l1), 0) + sum(
                inv.nodes[tree.names[i]].hardware.gpu_count for i in p.members)
        return max(per.values())

    def constraints(self, pos) -> List[Constraint]:
        req, groups, lay = self.req, self.groups, self.lay
        out: List[Constraint] = []
        seen = set()
        spans: Dict[str, int] = {}

        def span(kind: str) -> int:
            if kind not in spans:
                spans[kind] = span_of(groups[kind], pos, self.world)
            return spans[kind]

        def add(kind: str, level: str, hard: bool, implicit: bool) -> None:
            if kind not in groups:
                if not implicit:
                    self.notes.append(f"{'require' if hard else 'prefer'} {kind}={level}: "
                                      f"this layout has no {kind} groups; ignored")
                return
            size = len(groups[kind][0])
            if size <= 1 or level == "any":
                return
            out.append(Constraint(kind, level, hard, implicit, span(kind), size))

        for kind, level in req.require.items():
            add(kind, level, True, False)
            seen.add(kind)
        for kind, level in req.prefer.items():
            add(kind, level, False, False)
            seen.add(kind)
        for kind, level in implicit_preferences(lay):
            if kind not in seen:
                add(kind, level, False, True)
        # multi-node NVLink domains: the whole job inside one when it fits
        # one (its pipeline and data-parallel traffic then never touches
        # the network); least important, but in-node constraints give way
        # to it (see _domain_relief)
        world = self.world
        if self.tree.has_domains and world > 1 and JOB not in seen \
                and world <= self._structural("nvlink-domain"):
            out.append(Constraint(JOB, "nvlink-domain", False, True, world, world))
        return out

    # ---- NVLink domains -----------------------------------------------------

    def _domain_relief(self, c: Constraint, placed: Optional[Constraint]) -> bool:
        """Should in-node preferences give way so that ``c`` fits one
        multi-node NVLink domain? Yes when ``c`` asked for a domain or
        tighter and only a network level (or nothing) fits: crossing trays
        over the domain's NVLink is barely slower than staying in a tray
        (``NVLINK_DOMAIN``: the same bandwidth, a little more latency),
        every network hop is many times slower."""
        dom = LEVEL_INDEX["nvlink-domain"]
        if not self.tree.has_domains or c.hard or LEVEL_INDEX[c.level] > dom:
            return False
        if placed is not None and LEVEL_INDEX[placed.level] <= dom:
            return False
        return c.span <= self._structural("nvlink-domain")

    def _demote_for(self, c: Constraint, fixed: List[Constraint]):
        """Move implicit in-node preferences of ``fixed`` to
        ``nvlink-domain``, the least important first, until ``c`` fits one
        NVLink domain; then put back those that are not needed (most
        important first). Returns (new fixed, [(old, new)]) or None."""
        target = replace(c, level="nvlink-domain")
        movable = [i for i, x in enumerate(fixed)
                   if not x.hard and x.implicit and x.level in NODE_LEVELS]
        if not movable:
            return None
        trial = list(fixed)
        moved: List[int] = []
        for i in reversed(movable):
            trial[i] = replace(fixed[i], level="nvlink-domain")
            moved.append(i)
            if self.attempt(trial + [target]).feasible:
                break
        else:
            return None
        for i in sorted(moved):  # most important first: keep it if it can be
            back = list(trial)
            back[i] = fixed[i]
            if self.attempt(back + [target]).feasible:
                trial = back
        demoted = [(fixed[i], trial[i]) for i in range(len(fixed)) if trial[i] is not fixed[i]]
        return (trial, demoted) if demoted else None

    def _demote_note(self, c: Constraint, demoted: Sequence[Constraint]) -> None:
        kinds = ", ".join(x.kind for x in demoted)
        what = (f"the job stays in one NVLink domain" if c.kind == JOB
                else f"{c.kind} groups stay in one NVLink domain")
        self.notes.append(f"{kinds} groups may cross nodes over "
                          f"the NVLink domain so that {what} (multi-node NVLink is nearly as "
                          f"fast as in-node NVLink, the network is not)")

    def _dims_for(self) -> Tuple[str, ...]:
        """The canonical dimension order: the default, unless a required
        single-dimension constraint cannot fit in it (``--require dp=node``
        with TP unconstrained), then required dimensions move inward."""
        req = self.req
        rank: Dict[str, int] = {}
        for kind, level in req.require.items():
            for d in DENSE_DIMS.get(kind, ()):
                rank[d] = min(rank.get(d, len(LEVELS)), LEVEL_INDEX[level])
        if not rank:
            return DEFAULT_DIMS
        dims = tuple(sorted(DEFAULT_DIMS, key=lambda d: rank.get(d, len(LEVELS))))
        return dims

    # ---- feasibility ----------------------------------------------------

    def attempt(self, cons: Sequence[Constraint]) -> _Attempt:
        key = tuple((c.kind, c.level, c.span, c.hard) for c in cons)
        att = self._attempts.get(key)
        if att is None:
            att = self._attempts[key] = _Attempt(self, cons)
        return att

    def _strided_bound(self, cons: Sequence[Constraint]) -> bool:
        """A hard link-class bound (nvlink, pcie-switch, numa) on a kind
        whose groups are strided inside their block, on hardware where that
        matters (not every GPU pair of the usable nodes is that fast)."""
        worst = {}
        for hw, _ in self.sigs:
            worst.setdefault(id(hw), hw_info(hw).max_class)
        for c in cons:
            if c.hard and c.level in NODE_LEVEL_BOUND and c.level != "node" \
                    and c.span > c.size:
                bound = NODE_LEVEL_BOUND[c.level]
                if any(w > bound for w in worst.values()):
                    return True
        return False

    def _reordered(self, why: str):
        alt = self._dims_for()
        if alt == DEFAULT_DIMS:
            return None
        saved = list(self.notes)
        pos = positions(self.lay, alt)
        cons = self.constraints(pos)
        note = (f"rank blocks reordered ({'-'.join(alt)} innermost first) {why}")
        return alt, pos, cons, saved, note

    def run(self) -> Placement:
        dims = self.dims
        pos = positions(self.lay, dims)
        cons = self.constraints(pos)
        if dims != DEFAULT_DIMS:
            used = "-".join(d for d in dims if _dense_sizes(self.lay)[d] > 1)
            self.notes.append(f"rank blocks nested {used} (innermost first), so that {dims[0]} "
                              f"groups get the fastest links")
        elif self._strided_bound(cons):
            got = self._reordered("so that each required group is one block of GPUs")
            if got is not None:
                dims, pos, cons, saved, note = got
                self.notes = saved + [note]
        hard = [c for c in cons if c.hard]
        soft = [c for c in cons if not c.hard]
        # most important first: the user's preferences (finest blocks
        # first), then the implicit ones in their listed order
        soft.sort(key=lambda c: (c.implicit, c.span if not c.implicit else 0))
        final = self.attempt(hard + soft)
        if final.feasible:
            return self.assemble(final, pos, dims)
        # without hard constraints the free-GPU check already proved it fits
        att = self.attempt(hard) if hard else None
        if att is not None and not att.feasible:
            got = self._reordered("so the required groups can fit") \
                if dims == DEFAULT_DIMS else None
            if got is not None:
                alt, pos2, cons2, saved, note = got
                hard2 = [c for c in cons2 if c.hard]
                att2 = self.attempt(hard2)
                if att2.feasible:
                    dims, pos, hard, att = alt, pos2, hard2, att2
                    soft = [c for c in cons2 if not c.hard]
                    soft.sort(key=lambda c: (c.implicit, c.span if not c.implicit else 0))
                    self.notes = saved + [note]
                else:
                    self.notes = saved
            if not att.feasible:
                raise self.diagnose(hard)
        fixed = list(hard)
        #: per soft constraint (by id): what it became (None: dropped)
        became: Dict[int, Optional[Constraint]] = {}
        origin: Dict[int, Constraint] = {}  # id of a fixed soft constraint -> the asked one
        for c in soft:
            placed = None
            for lvl in LEVELS[LEVEL_INDEX[c.level]:-1]:
                if c.span > self._structural(lvl):
                    continue  # no unit of this level is that big, free or not
                trial = replace(c, level=lvl)
                if self.attempt(fixed + [trial]).feasible:
                    placed = trial
                    break
            if self._domain_relief(c, placed):
                relief = self._demote_for(c, fixed)
                if relief is not None:
                    fixed, demoted = relief
                    placed = replace(c, level="nvlink-domain")
                    for old, new in demoted:
                        asked = origin.pop(id(old))
                        origin[id(new)] = asked
                        became[id(asked)] = new
                    self._demote_note(c, [new for _, new in demoted])
            if placed is None or placed.level != c.level:
                self._relax_note(c, placed, fixed)
            became[id(c)] = placed
            if placed is not None:
                origin[id(placed)] = c
                fixed.append(placed)
        final = self.attempt(fixed)
        first_relaxed = None
        for c in soft:  # the most important one not met as asked
            placed = became.get(id(c))
            if placed is None or placed.level != c.level:
                first_relaxed = (c, placed)
                break
        strict = None
        if first_relaxed is not None:
            # as many blocks as possible at the level asked for, the rest
            # relaxed (e.g. 1,525 of 2,048 TP groups on whole NVSwitch
            # nodes, not all of them spread because some must be)
            c, placed = first_relaxed
            c = self._strict_level(c, placed, fixed)
            if c is not None and c.span <= self._structural(c.level):
                if placed is not None and placed.level == "nvlink-domain" and \
                        self.tree.has_domains:
                    # relaxed into a multi-node NVLink domain: barely slower,
                    # so the coarser constraints (the job in one domain, DP
                    # in one domain) win over more blocks inside a tray
                    inner = [x for x in fixed if x is not placed]
                    relaxed = fixed
                else:
                    # coarser soft blocks straddle the two phases anyway: the
                    # phases keep only the hard and the finer constraints
                    inner = [x for x in fixed if x is not placed and (x.hard or x.span <= c.span)]
                    relaxed = inner + ([placed] if placed is not None else [])
                att = self.attempt(inner + [c])
                if 0 < att.total < self.need:
                    strict = (att, c, relaxed, self.attempt(hard))
        return self.assemble(final, pos, dims, strict)

    def _strict_level(self, c: Constraint, placed: Optional[Constraint],
                      fixed: Sequence[Constraint]) -> Optional[Constraint]:
        """The level at which the first relaxed preference ``c`` is kept for
        as many blocks as fit (the two phases): its own level when a unit of
        it can hold a block; otherwise the tightest level between it and
        where it was relaxed to that can (EP blocks of 32 ranks asked to
        stay in a 4-GPU tray: the NVL72 racks that hold one keep whole
        blocks, so only the blocks that do not fit any rack straddle
        racks). None when there is none."""
        if c.span <= self._structural(c.level):
            return c
        stop = LEVEL_INDEX[placed.level] if placed is not None else len(LEVELS) - 1
        for lvl in LEVELS[LEVEL_INDEX[c.level] + 1:stop]:
            if c.span <= self._structural(lvl):
                return replace(c, level=lvl)
        return None

    def verify(self, pl: Placement, cons: Sequence[Constraint]) -> None:
        """Check the hard link-class bounds on the groups themselves (a
        bound is planned on each group's block; a group strided inside its
        block, e.g. pipeline stages with tensor parallel inside, can still
        take a slower pair on PCIe or cube-mesh nodes)."""
        slots, nodes = pl.slots, self.inv.nodes
        for c in cons:
            if not (c.hard and c.level in NODE_LEVEL_BOUND and c.span > c.size):
                continue
            bound = NODE_LEVEL_BOUND[c.level]
            for i, g in enumerate(pl.groups[c.kind]):
                host = slots[g[0]].host
                hw = nodes[host].hardware
                gpus = [slots[r].gpu for r in g]
                if any(slots[r].host != host for r in g):
                    bad = True
                elif c.kind == "pp":  # point to point: consecutive stages
                    bad = any(hw.link(a, b) > bound for a, b in zip(gpus, gpus[1:]))
                else:
                    bad = ring_class(hw, tuple(sorted(gpus))) > bound
                if bad:
                    raise PlacementError(
                        f"needs every {c.kind} group on {LEVEL_TEXT[c.level] if c.level != 'nvlink' else 'NVLink'} "
                        f"({c.kind}={c.level}) together with the other requirements; on "
                        f"{host} {c.kind} group {i} would get GPUs {sorted(gpus)}, which are "
                        f"not connected that way; require fewer kinds at this level")

    # ---- messages -------------------------------------------------------

    def _largest(self, level: str) -> Tuple[int, int, str]:
        """(GPUs, count, where) of the largest free unit of ``level``."""
        tree = self.tree
        if level in NODE_LEVELS:
            bound = NODE_LEVEL_BOUND[level]
            best, count = 0, 0
            per_sig: Dict[int, int] = {}
            for idx in self.elig:
                s = self.sig_of[idx]
                if s not in per_sig:
                    hw, free = self.sigs[s]
                    per_sig[s] = largest_group(hw, free, bound)
                v = per_sig[s]
                if v > best:
                    best, count = v, 1
                elif v == best:
                    count += 1
            return best, count, "node"
        if level == "nvlink-domain":
            best, count, where = 0, 0, ""
            for p, free in self.pod_free.items():
                pod = tree.pods[p]
                if pod.is_domain and free >= best:
                    count = count + 1 if free == best else 1
                    best, where = free, pod.name
            if best == 0:
                b, n, _ = self._largest("node")
                return b, n, "node"
            return best, count, where
        if level == "leaf":
            best, count, where = 0, 0, ""
            for p, free in sorted(self.pod_free.items()):
                if free > best:
                    best, count, where = free, 1, tree.pods[p].name
                elif free == best:
                    count += 1
            return best, count, where
        # spine
        per: Dict[int, Tuple[int, str]] = {}
        for p, free in self.pod_free.items():
            l1 = tree.pod_l1[p]
            v, _ = per.get(id(l1), (0, l1.name))
            per[id(l1)] = (v + free, l1.name)
        best, count, where = 0, 0, ""
        for v, name in per.values():
            if v > best:
                best, count, where = v, 1, name
            elif v == best:
                count += 1
        return best, count, where

    def _why(self, c: Constraint, fixed: Sequence[Constraint] = ()) -> str:
        """Why blocks of ``c`` do not fit at ``c.level``, in one clause."""
        level = c.level
        unit = _UNIT_TEXT[level]
        if c.span > c.size and c.span > self._structural(level):
            return (f"in this layout each {c.kind} group sits in a block of {c.span} ranks, "
                    f"more than any {unit} holds")
        fit = self.attempt(list(fixed) + [c]).total // c.span
        need = self.world // c.span
        short = ""
        if 0 < fit < need:
            what = (f"{c.kind} groups of {c.size}" if c.span == c.size
                    else f"blocks of {c.span} ranks")
            also = " with the constraints already met" if fixed else ""
            short = f"only {fit} of the {need} {what} fit{also}; "
        best, count, where = self._largest(level)
        if level in NODE_LEVELS:
            on = f", on {count} node{'s' * (count != 1)}" if count else ""
            return f"{short}the largest free {unit} is {best} GPU{'s' * (best != 1)}{on}"
        if level == "nvlink-domain" and not self.tree.has_domains:
            return (f"{short}there are no multi-node NVLink domains and the largest free node "
                    f"has {best} GPUs")
        return f"{short}the largest free {unit} has {best} GPUs ({where})"

    def diagnose(self, hard: Sequence[Constraint]) -> PlacementError:
        world = self.world
        failing = [c for c in hard if not self.attempt([c]).feasible]
        if self.per_node is not None and not self.attempt([]).feasible:
            g = self.per_node
            return PlacementError(f"needs {-(-world // g)} nodes with {g} free GPUs each "
                                  f"(--gpus-per-node {g}); not enough usable nodes "
                                  f"{self.cand.summary()}")
        if not failing:
            texts = ", ".join(f"--require {c.text}" for c in hard)
            return PlacementError(f"needs {world} GPUs with {texts}: each constraint fits the "
                                  f"free GPUs alone but not all together")
        c = min(failing, key=lambda x: (LEVEL_INDEX[x.level], x.span))
        if c.span == c.size:
            grp = f"in groups of {c.size}"
        else:
            grp = f"in blocks of {c.span} (so that each {c.kind} group of {c.size} stays inside)"
        inside = "with NVLink" if c.level == "nvlink" else f"inside {LEVEL_TEXT[c.level]}"
        in_node = c.level in NODE_LEVELS or (c.level == "nvlink-domain" and not self.tree.has_domains)
        if in_node and self.per_node is not None and self.per_node < c.span:
            return PlacementError(
                f"needs {world} GPUs {grp} {inside} ({c.kind}={c.level}) but --gpus-per-node "
                f"{self.req.gpus_per_node} puts at most {self.per_node} ranks on a node")
        if c.level in NODE_LEVELS and c.span > self._structural(c.level):
            return PlacementError(
                f"needs {world} GPUs {grp} {inside} ({c.kind}={c.level}) but the largest node "
                f"has {self._structural(c.level)} GPUs")
        return PlacementError(f"needs {world} GPUs {grp} {inside} ({c.kind}={c.level}); "
                              f"{self._why(c)}")

    def _relax_note(self, c: Constraint, placed: Optional[Constraint],
                    fixed: Sequence[Constraint] = ()) -> None:
        why = self._why(c, fixed)
        if placed is None:
            got = "anywhere"
        else:
            got = "NVLink" if placed.level == "nvlink" else LEVEL_TEXT[placed.level]
        want = "NVLink" if c.level == "nvlink" else LEVEL_TEXT[c.level]
        if c.kind == JOB:
            best, _, where = self._largest("nvlink-domain")
            why = (f"the largest free one has {best} GPUs, {where}" if best < c.size
                   else "not together with the preferences above")
            self.notes.append(f"the job's {c.size} ranks do not fit one NVLink domain ({why}); "
                              f"placed {'' if got == 'anywhere' else 'inside '}{got}")
            return
        if c.implicit:
            self.notes.append(f"{c.kind} groups of {c.size} cannot all stay inside {want}: {why}; "
                              f"placed {'' if got == 'anywhere' else 'inside '}{got}")
        else:
            self.notes.append(f"prefer {c.text} not met: {why}; {c.kind} groups placed "
                              f"{'' if got == 'anywhere' else 'inside '}{got}")

    # ---- choosing nodes ---------------------------------------------------

    # Node quality. Comparing nodes by how fast their GPUs can talk needs a
    # common yardstick: the innermost block of the job (``s_ref``: tp, or
    # the first block bigger than one rank). A node that can hold a whole
    # block is rated by the best ring class of such a block on its free
    # GPUs; one that cannot is worse (the block will cross nodes) and rated
    # by how much of a block it holds, then by that part's ring class.

    def _s_ref(self, att: _Attempt) -> int:
        sizes = [s for s, _ in att.node_spans] + [c.span for c in att.cons] + list(self.natural)
        sizes = [x for x in sizes if x > 1]
        return min(sizes) if sizes else 1

    def _sig_quality(self, att: _Attempt, s: int, dom: bool) -> Tuple:
        cache = att.__dict__.setdefault("_q", {})
        key = (s, dom)
        q = cache.get(key)
        if q is None:
            hw, free = self.sigs[s]
            cap = att.sig_caps(dom)[s]
            ref = att.__dict__.get("_sref")
            if ref is None:
                ref = att.__dict__["_sref"] = self._s_ref(att)
            k = min(cap, ref, len(free))
            if k <= 1:
                cls = int(LinkClass.SELF)
            else:
                r = select_scored(hw, free, k, ((k, None),))
                cls = r[0][0] if r is not None else int(LinkClass.NET_FAR)
            speed = _hw_speed(hw)
            q = (0, 0, cls) + speed if cap >= ref else (1, -k, cls) + speed
            cache[key] = q
        return q

    def _node_q(self, att: _Attempt, idx: int) -> Tuple:
        dom = self.tree.pods[self.tree.node_pod[idx]].is_domain
        return self._sig_quality(att, self.sig_of[idx], dom)

    def _scope_q(self, att: _Attempt, sc: Scope) -> Tuple:
        """Best node quality available in a scope."""
        cache = att.__dict__.setdefault("_sq", {})
        q = cache.get(id(sc))
        if q is None:
            if sc.is_pod:
                counts = self.pod_sigs.get(sc.index, {})
                caps = att.sig_caps(sc.is_domain)
                qs = [self._sig_quality(att, s, sc.is_domain) for s in counts if caps[s] > 0]
            else:
                qs = [self._scope_q(att, c) for c in sc.children
                      if att.scope_cap.get(id(c), 0) > 0]
            q = min(qs) if qs else (9, 0, 99)
            cache[id(sc)] = q
        return q

    # Filling. Top-down: at each scope the children are taken by quality
    # group, best first; inside a group the largest while none can take the
    # rest alone, then the best fit for the rest.

    def _fill(self, att: _Attempt, sc: Scope, need: int, out: List[Tuple[int, int]]) -> None:
        if sc.is_pod:
            out.extend(self._fill_pod(att, sc, need))
            return
        kids = []
        for ch in sc.children:
            c = att.scope_cap.get(id(ch), 0)
            if c > 0:
                kids.append((self._scope_q(att, ch), c, self._scope_free(ch), ch.first, ch))
        self._pick(kids, need, lambda ch, n: self._fill(att, ch, n, out))

    def _pod_choice(self, att: _Attempt, pod: Scope, need: int) -> List[Tuple[int, int]]:
        if pod.is_domain and att.m_pod > att.unit[True]:
            return self._domain_choice(att, pod, need)
        kids = []
        for i in pod.members:
            if i in self.elig:
                c = att.node_cap(i)
                if c > 0:
                    kids.append((self._node_q(att, i), c, len(self.elig[i][1]), i, i))
        chosen: List[Tuple[int, int]] = []
        self._pick(kids, need, lambda i, n: chosen.append((i, n)))
        return chosen

    def _domain_choice(self, att: _Attempt, pod: Scope, need: int) -> List[Tuple[int, int]]:
        """Nodes of a multi-node NVLink domain that receives whole blocks
        (the attempt gives pods multiples of a block): the best connected
        first, then the *smallest* free pieces first. A block inside one
        domain rings over the domain's NVLink whatever its hosts hold, so
        the partly used trays are filled and the wholly free ones stay free
        for the blocks that must straddle domains (a whole tray there is a
        piece of 4 ranks, not 1: the all-to-all's network part shrinks
        with the smallest piece)."""
        kids = []
        for i in pod.members:
            if i in self.elig:
                c = att.node_cap(i)
                if c > 0:
                    q = self._node_q(att, i)
                    kids.append(((q[0],) + q[2:], c, i))
        kids.sort()
        chosen: List[Tuple[int, int]] = []
        for _, c, i in kids:
            if need <= 0:
                break
            k = min(c, need)
            chosen.append((i, k))
            need -= k
        if need > 0:  # pragma: no cover - the attempt's capacity says it fits
            raise PlacementError("internal: capacity accounting went wrong")
        return chosen

    def _fill_pod(self, att: _Attempt, pod: Scope, need: int) -> List[Tuple[int, int]]:
        """Nodes of ``pod`` for ``need`` ranks: the best connected first, as
        few as possible (largest capacity first, best fit for the rest),
        then the ranks spread as evenly as the unit allows (more ranks on
        the bottleneck host means a smaller slice of the inter-node ring;
        equal counts keep data-parallel peers on the same local GPU index)."""
        chosen = self._pod_choice(att, pod, need)
        if len(chosen) <= 1:
            return chosen
        unit = att.unit[pod.is_domain]
        base = _water_fill([(i, att.node_cap(i)) for i, _ in chosen], need, unit)
        if pod.is_domain:
            # a group inside one NVLink domain rings over the domain's
            # NVLink whatever its hosts' rank counts
            return base
        return self._balanced_split(att, pod, chosen, base, need, unit)

    # Splitting blocks over hosts. Consecutive positions over nodes with
    # uneven free GPUs can leave a block (a group that must span hosts) with
    # one or two ranks on some host; the cost of a hierarchical collective
    # over ``h`` hosts is set by the host with the fewest ranks ``l``
    # (each rank's slice of the inter-host ring is M / (l * h)). So when the
    # even spread leaves such a block, the pod's ranks are also packed block
    # by block: whole blocks on nodes that hold one, then each block split
    # evenly over the fewest nodes that can (best fit), and the better of
    # the two is used.

    def _split_spans(self, att: _Attempt, need: int) -> List[int]:
        spans = {s for s, _ in att.node_spans} | {c.span for c in att.cons} | set(self.natural)
        whole = need == self.world
        return sorted(s for s in spans
                      if 1 < s <= need and need % s == 0 and (whole or att.m_pod % s == 0))

    def _part_speed(self, idx: int, k: int) -> Tuple[float, float]:
        """(GB/s of the best ring over ``k`` of the node's free GPUs, the
        smallest network share among them), with the cost model's default
        parameters: what one piece of a split block gets on this node."""
        cache = self.__dict__.setdefault("_speed", {})
        s = self.sig_of[idx]
        key = (s, k)
        hit = cache.get(key)
        if hit is None:
            from slurmtopo.placement.intranode import _candidates
            hw, free = self.sigs[s]
            hc = _default_params().hw(hw)
            best = None
            for cand in _candidates(hw_info(hw), free, min(k, len(free))):
                cand = tuple(sorted(cand))
                c, bw = hc.intra(cand) if len(cand) > 1 else (LinkClass.SELF, math.inf)
                share = min(hc.net[g] for g in cand)
                sc = (-bw, -share)
                if best is None or sc < best[0]:
                    best = (sc, (bw, share))
            hit = cache[key] = best[1] if best is not None else (1.0, 1.0)
        return hit

    def _split_cost(self, seq: Sequence[Tuple[int, int]], spans: Sequence[int]) -> Tuple:
        """How well ``seq`` places the blocks of each span, innermost span
        first: the cost model's all-reduce of the worst block (one host: a
        ring on the node's best GPUs for it; several: hierarchical,
        :func:`_hier_share`, the in-node part on each piece's best ring,
        the inter-host ring at the slowest piece's NIC share and the
        smallest piece's slice), then the number of (node, piece) entries."""
        out = []
        for s in spans:
            worst = 0.0
            for pieces in _blocks_of(seq, s, whole=True):
                speeds = [self._part_speed(i, k) for i, k in pieces.items()]
                b_in = min(sp[0] for (i, k), sp in zip(pieces.items(), speeds) if k > 1) \
                    if any(k > 1 for k in pieces.values()) else math.inf
                b_net = min(sp[1] for sp in speeds)
                t = _hier_share(max(pieces.values()), min(pieces.values()), len(pieces),
                                b_in, b_net)
                worst = max(worst, t)
            out.append(round(worst, 12))
        out.append(len(seq))
        return tuple(out)

    def _pack(self, pool, need: int, S: int, v: int, spans,
              fast_only: bool = False) -> Optional[List[Tuple[int, int]]]:
        """``need`` ranks in blocks of ``S`` over the nodes of ``pool``
        ((quality, -capacity, tree order, node, capacity), best first),
        every amount a multiple of ``v``: whole blocks on nodes that hold
        one (best nodes first; with ``fast_only`` only where the block's
        ring is as fast as a half block's ring on the fastest node: a whole
        block on a ring across sockets can be slower than one split over
        NVLink pairs on two hosts); every other block split over 2-4 nodes.
        The patterns of piece sizes are ranked by the cost model's
        hierarchical all-reduce (:func:`_hier_share`) and the packing takes
        the best threshold for which every block fits with a pattern no
        worse (so no block gets a singleton piece when an even split fits
        every block). A node may hold pieces of several blocks, a block's
        pieces stay in one pod when they can. None when nothing fits."""
        if need % S or S % v:
            return None
        if S // v > PACK_MAX_UNITS:
            return self._pack_large(pool, need, S, v, spans)
        tree = self.tree
        order = tree.tree_order
        blocks = need // S
        seq: List[Tuple[int, int]] = []
        rest = []
        # a whole block only where its ring is as fast as a piece's could be
        fastest = max((self._part_speed(i, max(v, S // 2))[0] for *_, i, c in pool),
                      default=0.0) if fast_only else 0.0
        for _, _, _, i, c in pool:
            w = min(c // S, blocks)
            if fast_only and w and self._part_speed(i, S)[0] < fastest:
                w = 0
            if w > 0:
                seq.append((i, w * S))
                blocks -= w
                c -= w * S
            if c >= v:
                rest.append((c // v * v, self.sig_of[i], tree.node_pod[i], i))
        if blocks == 0:
            return seq
        if not rest:
            return None
        ref = max(self._part_speed(i, S)[1] for _, _, _, i in rest)
        pats = sorted(_patterns(S // v), key=lambda ps: (
            _hier_share(ps[0] * v, ps[-1] * v, len(ps), math.inf, ref), len(ps), ps))
        # nodes whose pieces of every size are equally fast share a class
        sizes = range(v, S, v)
        classes: Dict[Tuple, int] = {}
        of_sig: Dict[int, int] = {}
        ranks: List[Tuple] = []
        for _, sig, _, i in rest:
            if sig not in of_sig:
                key = tuple(self._part_speed(i, k) for k in sizes)
                if key not in classes:
                    classes[key] = len(ranks)
                    ranks.append(tuple((-bw, -share) for bw, share in key))
                of_sig[sig] = classes[key]
        rest = [(c, of_sig[sig], pod, i) for c, sig, pod, i in rest]

        def speed_class(cls: int, k: int) -> Tuple[float, float]:
            return ranks[cls][k // v - 1]

        # the best threshold pattern for which every block fits (binary
        # search: allowing more patterns only makes more blocks fit)
        lo, hi, got = 0, len(pats) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            trial = _split_blocks(rest, blocks, S, pats[:mid + 1], v, speed_class)
            if trial is None:
                lo = mid + 1
            else:
                got, hi = trial, mid - 1
        if got is not None:
            out = list(seq)
            for pieces in got:
                for i, k in pieces:
                    if out and out[-1][0] == i:
                        out[-1] = (i, out[-1][1] + k)
                    else:
                        out.append((i, k))
            return out
        return None

    def _pack_large(self, pool, need: int, S: int, v: int, spans) -> Optional[List[Tuple[int, int]]]:
        """Blocks of more than :data:`PACK_MAX_UNITS` units (a DP group of
        36 ranks with TP 1), too many for piece patterns: every block split
        with no piece below a threshold (:func:`_split_min_piece`), each
        threshold tried and the split the cost model's hierarchical
        all-reduce prices best kept. The smallest piece sets each rank's
        slice of the inter-host ring, so 8+8+8+6+6 beats 7+7+7+7+7+1."""
        tree = self.tree
        rest = [(c // v * v, tree.node_pod[i], i) for *_, i, c in pool if c >= v]
        if not rest:
            return None
        top = max(c for c, _, _ in rest)
        thresholds = list(range(min(top, S) // v * v, 0, -v))
        if len(thresholds) > PACK_MAX_THRESHOLDS:
            step = len(thresholds) / PACK_MAX_THRESHOLDS
            thresholds = sorted({thresholds[int(j * step)] for j in range(PACK_MAX_THRESHOLDS)}
                                | {v}, reverse=True)
        best = best_key = None
        for p in thresholds:
            seq = _split_min_piece(rest, need // S, S, v, p)
            if seq is None:
                continue
            key = self._split_cost(seq, spans)
            if best_key is None or key < best_key:
                best, best_key = seq, key
        return best

    def _balanced_split(self, att: _Attempt, pod: Scope, chosen, base, need: int,
                        unit: int) -> List[Tuple[int, int]]:
        order = self.tree.tree_order
        base = sorted(base, key=lambda t: order[t[0]])
        # blocks of a span dividing the unit never cross hosts
        spans = [s for s in self._split_spans(att, need) if unit % s]
        if not spans:
            return base
        amounts = {k for _, k in base}
        if len(amounts) == 1:
            a = amounts.pop()
            if all(s % a == 0 or a % s == 0 for s in spans):
                return base  # every block on one host or evenly over whole hosts
        if not any(_blocks_of(base, s) for s in spans):
            return base  # no block crosses hosts
        best_key = self._split_cost(base, spans)
        # nodes as well connected as the chosen ones (the share of a block
        # a node holds is what the packing decides, so it is not compared)
        worst = max((q[0],) + q[2:] for q in (self._node_q(att, i) for i, _ in chosen))
        pool = []
        for i in pod.members:
            if i in self.elig:
                c = att.node_cap(i)
                q = self._node_q(att, i)
                if c > 0 and (q[0],) + q[2:] <= worst:
                    pool.append((q, -c, order[i], i, c))
        pool.sort()
        best = self._best_packing(pool, need, unit, spans, base, best_key)
        if best is not base:
            self.__dict__.setdefault("_packed", set()).add(pod.index)
        return best

    def _global_pack(self, att: _Attempt, alloc) -> Optional[List[Tuple[int, int]]]:
        """Blocks that must span hosts, split over the whole job's nodes
        rather than pod by pod: when the pods are nearly full, a pod on its
        own can only split its last blocks 7+1 or 6+1+1, while the job's
        other pods have nodes with room for even pieces. Used when the cost
        model's hierarchical all-reduce of the worst split block
        (:meth:`_split_cost`) is smaller; only without
        hard pod- or spine-level constraints, and not on clusters
        with multi-node NVLink domains (pieces there ring over the domain).
        It may give up a soft pod- or spine-level preference; :func:`plan`
        then also prices the pod-by-pod placement and keeps the faster."""
        if self.tree.has_domains or any(c.level in ("leaf", "spine", "nvlink-domain") and
                                        c.hard for c in att.cons):
            return None
        need = self.need
        unit = att.unit[False]
        spans = [s for s in self._split_spans(att, need) if unit % s]
        if not spans:
            return None
        tree = self.tree
        order = tree.tree_order
        base = sorted(alloc, key=lambda t: (order[tree.pods[tree.node_pod[t[0]]].first],
                                            order[t[0]]))
        if not any(_blocks_of(base, s) for s in spans):
            return None
        base_key = self._split_cost(base, spans)
        worst = max((q[0],) + q[2:] for q in (self._node_q(att, i) for i, _ in alloc))
        pool = []
        for i in self.elig:
            c = att.node_cap(i)
            if c <= 0:
                continue
            q = self._node_q(att, i)
            if (q[0],) + q[2:] <= worst:
                pool.append(((q[0],) + q[2:], order[tree.pods[tree.node_pod[i]].first],
                             order[i], i, c))
        pool.sort()
        return self._best_packing(pool, need, unit, spans, None, base_key)

    def _best_packing(self, pool, need: int, unit: int, spans, best, best_key):
        """The packing (:meth:`_pack`) of the pool by each span and piece
        unit that the cost model prices below ``best_key``; ``best`` if none."""
        for S in spans:
            for v in sorted({unit} | {t for t in spans if t < S}, reverse=True):
                if S % v or v % unit:
                    continue
                for fast_only in (False, True):
                    seq = self._pack(pool, need, S, v, spans, fast_only)
                    if seq is None:
                        continue
                    key = self._split_cost(seq, spans)
                    if key < best_key:
                        best_key, best = key, seq
        return best

    def best_pod(self, att: _Attempt) -> Optional[Scope]:
        """When one pod can take the whole job: the pod whose chosen nodes
        are best connected, then needs the fewest nodes, then the best fit
        (least capacity, fewest free GPUs), so the job stays under one leaf
        and leaves big free leaves alone."""
        world = self.need
        cands = []
        for p, counts in self.pod_sigs.items():
            pod = self.tree.pods[p]
            cap = att.scope_cap.get(id(pod), 0)
            if cap < world:
                continue
            caps = att.sig_caps(pod.is_domain)
            top = max(caps[s] for s in counts)
            if top <= 0:
                continue
            lb = -(-world // top)
            cands.append((self._scope_q(att, pod), lb, cap, self.pod_free.get(p, 0),
                          pod.first, pod))
        if not cands:
            return None
        cands.sort(key=lambda t: t[:5])
        best = None
        for qbest, lb, cap, free, first, pod in cands:
            if best is not None and (qbest, lb) > best[0][:2]:
                break
            chosen = self._pod_choice(att, pod, world)
            qworst = max(self._node_q(att, i) for i, _ in chosen)
            key = (qworst, len(chosen), cap, free, first)
            if best is None or key < best[0]:
                best = (key, pod)
            if (qworst, len(chosen)) == (qbest, lb):
                break
        return best[1]

    def _quality(self, att: _Attempt, idx: int, k: int, offset: int = 0):
        """Score of the best choice of ``k`` GPUs on node ``idx`` (smaller is
        better; see :func:`~slurmtopo.placement.intranode.select_scored`)."""
        node, free = self.elig[idx]
        dom = self.tree.pods[self.tree.node_pod[idx]].is_domain
        levels = self._node_levels(att, dom, k, offset, self.natural)
        r = select_scored(node.hardware, free, k, levels)
        return (1,) if r is None else (0,) + tuple(r[0])

    def _single_node(self, att: _Attempt) -> Optional[int]:
        """When one node can take the whole job: the node where its GPUs
        are best connected, then the best fit (least capacity that suffices,
        then fewest free GPUs, then the fullest pod), so small jobs fill
        holes and leave idle nodes."""
        world = self.need
        best_cap = max((c for dom in att._sig_caps for c in att._sig_caps[dom]), default=0)
        if best_cap < world:
            return None
        best = None
        node_pod = self.tree.node_pod
        quality: Dict[Tuple[int, bool], Tuple] = {}
        for idx, (node, free) in self.elig.items():
            c = att.node_cap(idx)
            if c < world:
                continue
            qk = (self.sig_of[idx], self.tree.pods[node_pod[idx]].is_domain)
            q = quality.get(qk)
            if q is None:
                q = quality[qk] = self._quality(att, idx, world)
            key = (q, c, len(free), self.pod_free.get(node_pod[idx], 0), idx)
            if best is None or key < best:
                best = key
        return None if best is None else best[-1]

    def _scope_free(self, sc: Scope) -> int:
        cache = self.__dict__.setdefault("_free_cache", {})
        v = cache.get(id(sc))
        if v is None:
            if sc.is_pod:
                v = self.pod_free.get(sc.index, 0)
            else:
                v = sum(self._scope_free(c) for c in sc.children)
            cache[id(sc)] = v
        return v

    @staticmethod
    def _pick(kids, need: int, take) -> None:
        """``kids``: (quality, capacity, free, order, item). Quality groups
        best first; in a group the largest while none can take the rest
        alone, then the best fit (least capacity, fewest free GPUs)."""
        kids.sort(key=lambda t: (t[0], -t[1], t[3]))
        i, n = 0, len(kids)
        while need > 0:
            if i >= n:
                raise PlacementError("internal: capacity accounting went wrong")
            q = kids[i][0]
            j = i
            while j < n and kids[j][0] == q:
                j += 1
            # kids[i:j]: one quality group, capacity descending
            while need > 0 and i < j:
                cap = kids[i][1]
                if cap < need:
                    take(kids[i][4], cap)
                    need -= cap
                    i += 1
                    continue
                k = i
                while k < j and kids[k][1] >= need:
                    k += 1
                best = min(kids[i:k], key=lambda t: (t[1], t[2], t[3]))
                take(best[4], need)
                need = 0
            i = j

    # ---- mapping ------------------------------------------------------------

    def _allocate(self, att: _Attempt) -> List[Tuple[int, int]]:
        """(node index, ranks) for ``self.need`` ranks, in tree order."""
        alloc: List[Tuple[int, int]] = []
        self.__dict__.pop("_packed", None)  # the packed pods of this allocation only
        single = self._single_node(att)
        if single is not None:
            alloc.append((single, self.need))
        else:
            pod = self.best_pod(att)
            if pod is not None:
                alloc.extend(self._fill_pod(att, pod, self.need))
            else:
                self._fill(att, self.tree.root, self.need, alloc)
                if self.global_split:
                    packed = self._global_pack(att, alloc)
                    if packed is not None:
                        self.used_global = True
                        return packed
        tree = self.tree
        order, packed = tree.tree_order, self.__dict__.get("_packed", set())
        # tree order; inside a pod packed block by block, the packing's
        # order (a stable sort keeps it; a node may appear more than once)
        alloc.sort(key=lambda t: (order[tree.pods[tree.node_pod[t[0]]].first],
                                  0 if tree.node_pod[t[0]] in packed else order[t[0]]))
        return alloc

    def _map(self, att: _Attempt, alloc, offset: int, assign, inv_pos) -> Dict[int, Tuple]:
        """Choose the GPUs of each allocated node for consecutive positions
        from ``offset``; returns node index -> GPUs used."""
        used: Dict[int, Tuple[int, ...]] = {}
        for idx, k in alloc:
            node, free = self.elig[idx]
            if idx in used:  # a node holding pieces of several blocks
                free = tuple(g for g in free if g not in used[idx])
            dom = self.tree.pods[self.tree.node_pod[idx]].is_domain
            levels = self._node_levels(att, dom, k, offset, self.natural)
            gpus = select(node.hardware, free, k, levels)
            if gpus is None:
                bounded = nested_chain(tuple((s, b) for s, b in levels if b is not None), k)
                gpus = select(node.hardware, free, k, bounded)
            if gpus is None:  # pragma: no cover - capacity said it fits
                raise PlacementError(f"internal: no GPU choice on {node.name} for {k} ranks")
            name = node.name
            if inv_pos is None:
                for j, g in enumerate(gpus):
                    assign[offset + j] = (name, g)
            else:
                for j, g in enumerate(gpus):
                    assign[inv_pos[offset + j]] = (name, g)
            used[idx] = tuple(used.get(idx, ())) + tuple(gpus)
            offset += k
        return used

    def assemble(self, att: _Attempt, pos, dims, strict=None) -> Placement:
        world = self.world
        sizes = _dense_sizes(self.lay)
        self.natural = []
        s = 1
        for d in dims:
            if sizes[d] > 1:
                s *= sizes[d]
                self.natural.append(s)
        inv_pos = None
        if pos is not None:
            inv_pos = [0] * world
            for r, p in enumerate(pos):
                inv_pos[p] = r
        assign: List[Tuple[str, int]] = [("", 0)] * world
        alloc = None
        if strict is not None and self.two_phase:
            alloc = self._two_phase(att, strict, assign, inv_pos)
            self.used_two_phase = alloc is not None
        if alloc is None:
            alloc = self._allocate(att)
            self._map(att, alloc, 0, assign, inv_pos)
        self._summary_notes(att, alloc)
        pl = build_placement(self.inv, self.req, assign, self.notes, self.groups)
        self.verify(pl, att.cons)
        return pl

    def _two_phase(self, att: _Attempt, strict_c, assign, inv_pos):
        """Phase 1 places the first ``n1`` positions under ``strict``, phase
        2 the rest under ``att`` on what is left. ``n1`` is a multiple of
        both attempts' spine-level blocks, so no block of either straddles
        the boundary in a way the attempt did not allow. None when it does
        not work out (then everything is placed under ``att``)."""
        strict, c, relaxed, hard_only = strict_c
        m = _lcm([strict.m_l1, hard_only.m_l1])
        n1 = min(strict.total, self.need) // m * m
        if n1 <= 0 or n1 >= self.need:
            return None
        saved_need = self.need
        self.need = n1
        try:
            alloc1 = self._allocate(strict)
        finally:
            self.need = saved_need
        trial = list(assign)
        used = self._map(strict, alloc1, 0, trial, inv_pos)
        cand2 = self.cand.minus(used, self.tree.node_pod, drop_used=self.per_node is not None)
        p2 = _Planner(self.inv, self.req, self.groups, cand2, self.tree, need=self.need - n1,
                      global_split=self.global_split, node_cap=self.node_cap)
        p2.natural = self.natural
        att2 = p2.attempt(relaxed)
        if not att2.feasible:
            return None
        alloc2 = p2._allocate(att2)
        self.used_global = self.used_global or p2.used_global
        p2._map(att2, alloc2, n1, trial, inv_pos)
        assign[:] = trial
        want = "NVLink" if c.level == "nvlink" else LEVEL_TEXT[c.level]
        kept = n1 // c.span
        self.notes.append(f"ranks 0-{n1 - 1} in the canonical order ({kept} block"
                          f"{'s' * (kept != 1)} of {c.span}) keep {c.kind} inside {want}; "
                          f"only the other "
                          f"{self.need - n1} are relaxed")
        # one node may appear in both phases: merge for the summary
        merged: Dict[int, int] = {}
        for idx, k in alloc1 + alloc2:
            merged[idx] = merged.get(idx, 0) + k
        return list(merged.items())

    def _node_levels(self, att: _Attempt, dom: bool, k: int, offset: int, natural):
        """The nested chain of blocks a node's ``k`` positions starting at
        ``offset`` must respect (bounded) or should (scored)."""
        cache = att.__dict__.setdefault("_levels", {})
        sizes = cache.get(None)
        if sizes is None:
            sizes = cache[None] = sorted(
                {s for s, _ in att.bounds[True] + att.bounds[False]} |
                {c.span for c in att.cons} | set(natural))
        key = (dom, k, tuple(offset % x == 0 for x in sizes if x <= k))
        got = cache.get(key)
        if got is None:
            levels = []
            bound_spans = {s for s, _ in att.bounds[dom]}
            for s, b in att.bounds[dom]:
                levels.append((s, b))
            for c in att.cons:
                if c.span not in bound_spans:
                    levels.append((c.span, None))
            for s in natural:
                levels.append((s, None))
            levels = [(s, b) for s, b in levels if s <= k and k % s == 0 and offset % s == 0]
            got = cache[key] = nested_chain(levels, k)
        return got

    def _summary_notes(self, att: _Attempt, alloc) -> None:
        tree = self.tree
        pods = []
        seen = set()
        for idx, _ in alloc:
            p = tree.node_pod[idx]
            if p not in seen:
                seen.add(p)
                pods.append(tree.pods[p])
        per_node: Dict[int, int] = {}
        for idx, k in alloc:
            per_node[idx] = per_node.get(idx, 0) + k
        n = len(per_node)
        partial = sum(1 for idx, k in per_node.items()
                      if k < self.inv.nodes[tree.names[idx]].hardware.gpu_count)
        text = f"{self.world} ranks on {n} node{'s' * (n != 1)}"
        if partial:
            text += f" ({partial} shared or partly used)"
        kinds = {p.key[0] for p in pods}
        if pods and kinds <= {"leaf", "domain"}:
            word = "NVLink domain" if kinds == {"domain"} else (
                "leaf switch" if kinds == {"leaf"} else "leaf/domain")
            names = ", ".join(p.name for p in pods[:4]) + (", ..." if len(pods) > 4 else "")
            text += f" under {len(pods)} {word}{'es' if word.endswith('switch') and len(pods) != 1 else ('s' if len(pods) != 1 else '')} ({names})"
        self.notes.append(text)
        for c in att.cons:
            if c.hard:
                self.notes.append(f"required {c.text}: every {c.kind} group stays inside "
                                  f"{'NVLink' if c.level == 'nvlink' else LEVEL_TEXT[c.level]}")


def _water_fill(caps: List[Tuple[int, int]], need: int, unit: int) -> List[Tuple[int, int]]:
    """Spread ``need`` ranks over nodes ``(index, capacity)`` as evenly as
    whole units allow: the largest level t with sum(min(cap, t)) <= need,
    then one more unit to the first nodes with room."""
    units = [(i, c // unit) for i, c in caps]
    n = need // unit
    lo, hi = 0, max(c for _, c in units)
    while lo < hi:  # largest t with sum(min(c, t)) <= n
        mid = (lo + hi + 1) // 2
        if sum(min(c, mid) for _, c in units) <= n:
            lo = mid
        else:
            hi = mid - 1
    amount = {i: min(c, lo) for i, c in units}
    left = n - sum(amount.values())
    for i, c in units:
        if left <= 0:
            break
        if c > amount[i]:
            amount[i] += 1
            left -= 1
    return [(i, amount[i] * unit) for i, _ in units if amount[i] > 0]


def _blocks_of(seq: Sequence[Tuple[int, int]], s: int, whole: bool = False):
    """The pieces ({node: ranks}) of every block of ``s`` consecutive
    positions that ``seq`` ((node, ranks) in position order; a node may
    appear more than once) puts on more than one host (with ``whole``,
    of every block)."""
    out = []
    pieces: Dict[int, int] = {}
    pos = 0
    block = 0
    for idx, k in seq:
        while k > 0:
            b = pos // s
            if b != block:
                if len(pieces) > 1 or (whole and pieces):
                    out.append(pieces)
                pieces = {}
                block = b
            take = min(k, (b + 1) * s - pos)
            pieces[idx] = pieces.get(idx, 0) + take
            pos += take
            k -= take
    if len(pieces) > 1 or (whole and pieces):
        out.append(pieces)
    return out


def _hier_share(l_max: int, l_min: int, h: int, b_in: float, b_net: float) -> float:
    """Bandwidth term of the cost model's hierarchical all-reduce of one
    byte over ``h`` hosts (:func:`slurmtopo.cost.hier_time` without the
    latencies): the in-node reduce-scatter/all-gather over ``l_max`` ranks
    at ``b_in`` plus the inter-host ring of each rank's slice, priced by
    the host with the fewest ranks at the slowest NIC share ``b_net``."""
    t = 2 * (h - 1) / (l_min * h * b_net)
    if l_max > 1:
        t += 2 * (l_max - 1) / (l_max * b_in)
    return t


def _patterns(units: int, most: int = 4) -> List[Tuple[int, ...]]:
    """Ways to split a block of ``units`` units over 2..``most`` hosts
    (parts in units, largest first)."""
    out: List[Tuple[int, ...]] = []

    def rec(left: int, cap: int, parts: List[int]) -> None:
        if left == 0:
            if len(parts) >= 2:
                out.append(tuple(parts))
            return
        if len(parts) >= most:
            return
        for a in range(min(left, cap), 0, -1):
            rec(left - a, a, parts + [a])

    rec(units, units - 1, [])
    return out


#: blocks of at most this many units are packed by piece patterns (the
#: patterns of a bigger block are too many to try, and its pieces are whole
#: nodes anyway on the clusters seen so far)
PACK_MAX_UNITS = 16


#: thresholds of the smallest piece tried for a block too big for patterns
PACK_MAX_THRESHOLDS = 8


def _split_min_piece(rest: Sequence[Tuple[int, int, int]], blocks: int, S: int, v: int,
                     p: int) -> Optional[List[Tuple[int, int]]]:
    """``blocks`` blocks of ``S`` ranks over the nodes ``rest`` ((room, pod,
    node) in preference order), block after block, no piece smaller than
    ``p`` (amounts in multiples of ``v``) and the pieces of a block on
    distinct nodes, in the pod of its first piece when they can: the
    largest room while the rest of the block is bigger than it (keeping
    ``p`` for the last piece), then the least room that holds the rest.
    Returns (node, ranks) in position order, or None when a block finds no
    room."""
    # room -> pod -> stack of (preference, node), the preferred on top
    rooms: Dict[int, Dict[int, List[Tuple[int, int]]]] = {}
    for order, (c, pod, i) in reversed(list(enumerate(rest))):
        if c >= p:
            rooms.setdefault(c, {}).setdefault(pod, []).append((order, i))

    def take(c: int, pod: int) -> Tuple[int, int]:
        stack = rooms[c][pod]
        order, i = stack.pop()
        if not stack:
            del rooms[c][pod]
            if not rooms[c]:
                del rooms[c]
        return order, i

    def put(c: int, pod: int, order: int, i: int) -> None:
        stack = rooms.setdefault(c, {}).setdefault(pod, [])
        stack.append((order, i))
        stack.sort(reverse=True)

    def find(sizes, pod: Optional[int], avoid) -> Optional[Tuple[int, int]]:
        """(room, pod) of the first size with a node not in ``avoid``: in
        ``pod`` first, else the pod whose best node is preferred."""
        for want_pod in ((pod, None) if pod is not None else (None,)):
            for c in sizes:
                by_pod = rooms.get(c)
                if not by_pod:
                    continue
                if want_pod is not None:
                    stack = by_pod.get(want_pod)
                    if stack and stack[-1][1] not in avoid:
                        return c, want_pod
                    continue
                got = min(((st[-1][0], q) for q, st in by_pod.items()
                           if st and st[-1][1] not in avoid), default=None)
                if got is not None:
                    return c, got[1]
        return None

    out: List[Tuple[int, int]] = []
    for _ in range(blocks):
        left, pod, used, back = S, None, set(), []
        while left > 0:
            sizes = sorted(c for c in rooms if c >= left)
            hit = find(sizes, pod, used)
            if hit is not None:  # the least room that holds the rest
                c, q = hit
                k = left
            else:
                if left < 2 * p:
                    return None
                hit = find(sorted(rooms, reverse=True), pod, used)
                if hit is None:
                    return None
                c, q = hit
                k = c if left - c >= p else (left - p) // v * v
                if k < p:
                    return None
            order, i = take(c, q)
            if c - k >= p:
                back.append((c - k, q, order, i))
            used.add(i)
            pod = q if pod is None else pod
            out.append((i, k))
            left -= k
        for c, q, order, i in back:  # what is left of a node serves the next blocks
            put(c, q, order, i)
    return out


class _Room:
    """Nodes with room for pieces of split blocks, bucketed by free ranks
    left and by speed class (nodes whose pieces of every size are equally
    fast), so the best place for a piece is found without scanning every
    node (a fragmented 100k-GPU inventory has thousands)."""

    def __init__(self, rest: Sequence[Tuple[int, int, int, int]], S: int, speed_class):
        # rest: (capacity left, speed class, pod, node) in preference order
        self.S = S
        self.b: Dict[int, Dict[int, List[Tuple[int, int]]]] = {}
        for c, cls, pod, i in reversed(rest):  # stacks: the first is on top
            self.b.setdefault(min(c, S), {}).setdefault(cls, []).append((pod, i))
        self.speed_class = speed_class

    def take(self, want: int, avoid: Sequence[int], pod: Optional[int]):
        """Best node for a piece of ``want`` ranks: the fastest for that
        size, in ``pod`` when possible, then the least room that suffices.
        Returns an undo record, or None when no node has room."""
        best = None
        rank = self.speed_class
        for c in [x for x in self.b if x >= want]:
            for cls, stack in self.b[c].items():
                for j in range(len(stack) - 1, max(-1, len(stack) - 2 - len(avoid)), -1):
                    p_, i = stack[j]
                    if i in avoid:
                        continue
                    key = (rank(cls, want), pod is not None and p_ != pod, c)
                    if best is None or key < best[0]:
                        best = (key, c, cls, j)
                    break
        if best is None:
            return None
        _, c, cls, j = best
        p_, i = self.b[c][cls].pop(j)
        if c > want:
            self.b.setdefault(c - want, {}).setdefault(cls, []).append((p_, i))
        return (c, cls, j, p_, i, want)

    def undo(self, rec) -> None:
        c, cls, j, p_, i, want = rec
        if c > want:
            self.b[c - want][cls].pop()
        self.b[c][cls].insert(j, (p_, i))


def _split_blocks(rest, blocks: int, S: int, allowed: Sequence[Tuple[int, ...]], v: int,
                  speed_class) -> Optional[List[List[Tuple[int, int]]]]:
    """Split ``blocks`` blocks of ``S`` ranks over the nodes ``rest``, each
    block by the first pattern of ``allowed`` (piece sizes in units of
    ``v``, largest first) whose pieces all find room on distinct nodes.
    None when some block finds none."""
    room = _Room(rest, S, speed_class)
    out = []
    for _ in range(blocks):
        for parts in allowed:
            recs = []
            pod = None
            for a in parts:
                rec = room.take(a * v, [r[4] for r in recs], pod)
                if rec is None:
                    break
                pod = rec[3] if pod is None else pod
                recs.append(rec)
            if len(recs) == len(parts):
                out.append([(r[4], r[5]) for r in recs])
                break
            for rec in reversed(recs):
                room.undo(rec)
        else:
            return None
    return out


def plan(inv: Inventory, state: Optional[ClusterState], req: JobRequest,
         safety_net: bool = True) -> Placement:
    """Place every rank of ``req`` on a free GPU, topology-aware (gang: all
    ranks or :class:`PlacementError` saying why not). See the module doc.

    The planner proposes a few placements (:func:`_proposals`) and the cost
    model picks the fastest. With ``safety_net`` (the default) Slurm's
    default placement is one more candidate, at every job size, so the
    result is never modelled slower than what Slurm would give; tests turn
    it off to check the planner's own proposals."""
    tree = fabric_tree(inv)
    cand = candidates(inv, state, req, tree.node_pod)
    err = not_enough_gpus(req, cand)
    if err is not None:
        raise err
    groups = build_groups(req.layout)
    options = _proposals(inv, req, groups, cand, tree)
    if safety_net and req.layout.world > 1:
        from slurmtopo.placement.baselines import naive_from
        naive = naive_from(inv, req, cand, groups)
        if _meets_require(inv, req, naive):
            options.append(("naive", naive))
    return _cheapest(inv, req, options)


#: Up to this world size the planner also proposes the nestings with CP,
#: DP or PP innermost (the kind that then gets the fastest links): on a
#: DGX-1 the NV2 pairs, or a node's NVLink for DP when TP must cross
#: nodes anyway. Each is one more planning pass.
ALT_NESTING_MAX_WORLD = 4096
#: ... and uses one only when it models at least this much faster
ALT_NESTING_MARGIN = 0.05


def _proposals(inv: Inventory, req: JobRequest, groups, cand: Candidates,
               tree: FabricTree) -> List[Tuple[str, Placement]]:
    """The planner's candidates, best guess first: the plan; the same
    without splitting spanning blocks over the whole job (when it did);
    with CP, DP or PP nested innermost (no ``require`` or ``prefer``, up to
    :data:`ALT_NESTING_MAX_WORLD` ranks);
    on PCIe nodes (no NVLink ring over the whole node) at most half or a
    quarter of a node per host, so that rings stay on one socket or PCIe
    switch (not when the job asked for whole nodes or a count per node);
    on clusters mixing GPU models the job on each single model."""
    world = req.layout.world
    first = _Planner(inv, req, groups, cand, tree)
    out = [("plan", first.run())]
    if first.used_global:
        try:
            out.append(("plan", _Planner(inv, req, groups, cand, tree, global_split=False).run()))
        except PlacementError:
            pass
    if first.used_two_phase:
        # the blocks kept whole first leave fragments for the rest, whose
        # worst split can be worse than every block relaxed alike
        try:
            out.append(("one-phase", _Planner(inv, req, groups, cand, tree,
                                              two_phase=False).run()))
        except PlacementError:
            pass
    if not req.require and not req.prefer and world <= ALT_NESTING_MAX_WORLD:
        sizes = _dense_sizes(req.layout)
        for d in ("cp", "dp", "pp"):
            if sizes[d] > 1:
                dims = (d,) + tuple(x for x in DEFAULT_DIMS if x != d)
                try:
                    out.append(("dims", _Planner(inv, req, groups, cand, tree, dims=dims).run()))
                except PlacementError:
                    continue
    caps = [] if req.exclusive or req.gpus_per_node else _node_caps(cand, world)
    for cap in caps:
        try:
            out.append((f"cap{cap}", _Planner(inv, req, groups, cand, tree, node_cap=cap).run()))
        except PlacementError:
            continue
    models = _models(cand)
    if len(models) > 1:
        for model in models:
            sub = cand.restricted(lambda n, m=model: n.hardware.model == m, tree.node_pod)
            if sub.free_gpus < world:
                continue
            try:
                out.append((f"model:{model}", _Planner(inv, req, groups, sub, tree).run()))
            except PlacementError:
                continue
    return out


def _node_caps(cand: Candidates, world: int) -> List[int]:
    """Ranks-per-node limits worth proposing: half and a quarter of the
    node, on hardware whose ring over all its GPUs is not NVLink (PCIe-only
    nodes, NVLink pairs): there a ring on one socket or one PCIe switch on
    more nodes can beat a whole node whose ring crosses the sockets."""
    caps = set()
    for hw, _ in cand.sigs:
        n = hw.gpu_count
        if n < 4 or ring_class(hw, tuple(range(n))) <= LinkClass.NVLINK:
            continue
        for k in (n // 2, n // 4):
            if 1 < k < world:
                caps.add(k)
    return sorted(caps, reverse=True)


def _meets_require(inv: Inventory, req: JobRequest, pl: Placement) -> bool:
    if not req.require:
        return True
    from slurmtopo.cost import CostParams, evaluate
    from slurmtopo.request import satisfies
    rep = evaluate(inv, pl, req, CostParams())
    for kind, level in req.require.items():
        gc = rep.kinds.get(kind)
        if gc is not None and gc.size > 1 and not satisfies(gc.slowest, level):
            return False
    return True


_WHY = {
    "naive": "Slurm's default placement (nodes in hostname order, ranks in block order)",
    "plan": "splitting spanning groups pod by pod",
    "one-phase": "relaxing every block alike (none kept whole first)",
}


def _cheapest(inv: Inventory, req: JobRequest,
              options: List[Tuple[str, Placement]]) -> Placement:
    """The option the cost model prices fastest (the first on ties), with
    a note when it is not the planner's first proposal."""
    first = options[0][1]
    if len(options) == 1:
        return first
    from slurmtopo.cost import CostParams, evaluate
    from slurmtopo.errors import SlurmtopoError
    try:
        params = CostParams.from_inventory(inv)
    except SlurmtopoError:
        return first  # a bad cost block is reported where costs are shown
    reps = [evaluate(inv, pl, req, params, step_only=True) for _, pl in options]
    times = [r.step_time_s for r in reps]

    def tp_class(r):
        return max((r.kinds[k].slowest for k in ("tp", "expert-tp") if k in r.kinds),
                   default=LinkClass.SELF)

    def tp_time(r):
        return max((r.kinds[k].time_s for k in ("tp", "expert-tp") if k in r.kinds),
                   default=0.0)

    def slower_tp(r) -> bool:
        """Does ``r`` move tensor parallel to slower links than the first
        proposal: a slower class, or, where TP crosses the network anyway,
        a collective slowed by a larger factor than the whole step is sped
        up (TP groups spread one rank a host instead of 4+4). Such a trade
        is lost as soon as a step runs TP a little more often than the
        message sizes weigh it."""
        first_cls = tp_class(reps[0])
        if tp_class(r) > first_cls:
            return True
        t0, t1 = tp_time(reps[0]), tp_time(r)
        return first_cls.is_network and t0 > 0 and r.step_time_s > 0 and \
            t1 / t0 > reps[0].step_time_s / r.step_time_s

    best = 0
    for i, t in enumerate(times):
        # another nesting never moves tensor parallel to slower links: the
        # per-kind message sizes weigh one collective each, while a real
        # step runs TP's many times more often (docs/cost-model.md)
        margin = 1e-9
        if options[i][0] == "dims":
            if slower_tp(reps[i]):
                continue
            margin = ALT_NESTING_MARGIN  # the usual nesting unless clearly slower
        if t < times[best] * (1 - margin):
            best = i
    if best == 0:
        return first
    label, pl = options[best]
    a, b = times[0], times[best]
    if label.startswith("model:"):
        note = (f"all ranks on {label[6:]} nodes: the cluster mixes GPU models and this one "
                f"holds the job")
    elif label == "dims":
        note = "this nesting models faster than tensor parallel innermost"
    elif label.startswith("cap"):
        note = (f"at most {label[3:]} ranks a node, so rings stay on GPUs of one socket or "
                f"PCIe switch: models faster than filling whole nodes")
    else:
        note = f"{_WHY[label]} models faster here"
    # Slurm's default: the planner's notes say what it tried and why
    notes = [n for n in first.notes if not n.startswith(f"{req.layout.world} ranks on")] \
        if label == "naive" else list(pl.notes)
    notes.append(f"{note} ({b * 1e3:.3f} ms vs {a * 1e3:.3f} ms a step); using it")
    return Placement(slots=pl.slots, groups=pl.groups, hosts=pl.hosts, notes=tuple(notes))


_speed_cache: Dict[int, Tuple[object, Tuple]] = {}
_params: List[object] = []


def _default_params():
    """The cost model's default parameters (shared: they cache per-hardware
    figures), for the planner's own comparisons of link speeds."""
    if not _params:
        from slurmtopo.cost import CostParams
        _params.append(CostParams())
    return _params[0]


def _hw_speed(hw) -> Tuple:
    """Sort key of a node type's links, fastest first: NVLink bandwidth per
    GPU, network share per GPU, PCIe (default cost parameters). Ties nodes
    of equal link class apart on mixed clusters (an H100's NVLink and NIC
    before a V100's), so a job gathers on the fastest model it can."""
    hit = _speed_cache.get(id(hw))
    if hit is None or hit[0] is not hw:
        from slurmtopo.cost import CostParams
        hc = CostParams().hw(hw)
        key = (-(hc.lane * hc.max_lanes), -max(hc.net or [0.0]), -hc.pcie)
        if len(_speed_cache) >= 256:
            _speed_cache.clear()
        hit = _speed_cache[id(hw)] = (hw, key)
    return hit[1]


def _models(cand: Candidates) -> List[str]:
    """GPU models among the usable nodes, fastest interconnect first."""
    speed: Dict[str, Tuple] = {}
    for hw, _ in cand.sigs:
        model = hw.model
        key = _hw_speed(hw)
        if model not in speed or key < speed[model]:
            speed[model] = key
    return sorted(speed, key=lambda m: (speed[m], m))
