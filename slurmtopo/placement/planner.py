"""The topology-aware planner: the placements it proposes for a job
(:func:`proposals`); :func:`slurmtopo.plan.choice.plan` prices them with the
cost model and keeps the fastest.

Global ranks keep the framework's numbering (:func:`~slurmtopo.job.groups.build_groups`);
the planner only decides which physical GPU runs each rank.

1. **Positions and constraints** (:mod:`slurmtopo.placement.constraints`).
   Every rank gets a position in a canonical order where the heaviest
   traffic is innermost; every group kind lies in aligned blocks of
   positions, and ``require`` (hard), ``prefer`` (soft) and the implicit
   preferences each say "blocks of this span stay inside that level".

2. **Capacities and relaxation** (:class:`Planner`,
   :mod:`slurmtopo.placement.capacity`). A constraint set fits when the
   capacities of the cluster's scopes hold the job. Hard constraints that
   do not fit are refused with the reason
   (:mod:`slurmtopo.placement.explain`); soft ones are relaxed
   lexicographically, most important first, each to the tightest level
   that still fits with those already fixed. When the most important
   relaxed one held for some blocks, those blocks are placed first under
   it and only the rest relaxed (two phases). Multi-node NVLink domains
   count as nearly in-node: in-node preferences give way to keep a
   preference (the DP block, the whole job) inside one domain.

3. **Choosing nodes** (:mod:`slurmtopo.placement.search`): one node, one
   pod, or top-down over the tree; the groups that must span hosts split
   as evenly as the free GPUs allow (:mod:`slurmtopo.placement.packing`).

4. **Mapping** (:meth:`Planner.assemble`): chosen nodes are walked in tree
   order and receive consecutive positions, so a block lands in one
   scope. Inside a node :func:`~slurmtopo.placement.intranode.select`
   picks the GPUs by NVLink island, PCIe switch and NUMA node; identical
   nodes are used identically, so data-parallel peers sit on the same
   local GPU index (the same rail). Each rank then gets its closest NIC(s)
   and its GPU's NUMA-local CPUs.

5. **Proposals** (:func:`proposals`): the plan; on PCIe nodes the same
   with at most half or a quarter of a node per host; other nestings; on
   clusters mixing GPU models the job on each model.

Pure and O(nodes + world) after the per-signature caches: a 16k-GPU job on
a 100k-GPU inventory plans in a few tenths of a second.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import PlacementError
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Inventory, Placement
from slurmtopo.job.request import (LEVEL_INDEX, LEVEL_TEXT, LEVELS, NODE_LEVEL_BOUND, NODE_LEVELS,
                                   JobRequest)
from slurmtopo.placement.capacity import Capacities, UnitSizes, UsableNodes, unit_sizes
from slurmtopo.placement.common import Candidates, build_placement
from slurmtopo.placement.constraints import (DEFAULT_DIMS, Constraint, constraints_for,
                                             dense_sizes, importance, lcm, nested_blocks,
                                             positions, required_dims, strided_bound)
from slurmtopo.placement.explain import Explainer
from slurmtopo.placement.fabric import FabricTree
from slurmtopo.placement.intranode import nested_chain, select
from slurmtopo.placement.intranode import ring as ring_class
from slurmtopo.placement.packing import Allocation, BlockPacker, blocks_of
from slurmtopo.placement.search import NodeSearch
from slurmtopo.placement.speeds import LinkSpeeds

#: Up to this world size the planner also proposes the nestings with CP,
#: DP or PP innermost (the kind that then gets the fastest links): on a
#: DGX-1 the NV2 pairs, or a node's NVLink for DP when TP must cross
#: nodes anyway. Each is one more planning pass.
ALT_NESTING_MAX_WORLD = 4096


@dataclass(frozen=True)
class TwoPhase:
    """Keep ``kept`` (the first relaxed preference, at its level) for as
    many blocks as ``strict`` holds, then place the rest under ``relaxed``.
    ``hard_only``: the capacities under the hard constraints alone."""

    strict: Capacities
    kept: Constraint
    relaxed: List[Constraint]
    hard_only: Capacities
    #: when ``kept`` is a multi-node NVLink domain: the constraints under
    #: which more blocks stay in a domain once the in-node preferences
    #: finer than it give way (:meth:`Planner._loosened`), tried on what
    #: the first blocks leave before the rest is relaxed
    loose: Optional[List[Constraint]] = None


#: rank -> (host, GPU), filled position by position
Assignment = List[Tuple[str, int]]


class Planner:
    """One planning pass: the constraints of ``req`` on the candidates'
    free GPUs, ``need`` ranks (the world, or the rest of it in a second
    phase), optionally at most ``node_cap`` ranks a node, with the rank
    blocks nested ``dims`` (innermost first)."""

    def __init__(self, inv: Inventory, req: JobRequest, groups: Mapping[str, list],
                 cand: Candidates, tree: FabricTree, speeds: LinkSpeeds, sizes: UnitSizes,
                 need: Optional[int] = None, global_split: bool = True,
                 node_cap: Optional[int] = None, dims: Tuple[str, ...] = DEFAULT_DIMS,
                 two_phase: bool = True, even_domains: bool = False):
        self.inv = inv
        self.req = req
        self.lay = req.layout
        self.world = self.lay.world
        #: ranks to place (the world, or the rest of it in a second phase)
        self.need = self.world if need is None else need
        self.groups = groups
        self.cand = cand
        self.tree = tree
        self.speeds = speeds
        self.sizes = sizes
        g = req.gpus_per_node
        self.per_node = None if g is None else min(g, self.world)
        if node_cap is not None:  # a variant: at most node_cap ranks a node
            self.per_node = min(node_cap, self.per_node or node_cap)
        self.usable = UsableNodes(tree.nodes, cand)
        self.packer = BlockPacker(tree, cand, speeds)
        self._capacities: Dict[Tuple, Capacities] = {}
        self.notes: List[str] = []
        #: the block sizes of the nesting, innermost first (set by assemble)
        self.nested: List[int] = []
        #: split spanning blocks over the whole job's nodes when that is
        #: better than pod by pod (:meth:`NodeSearch.global_pack`)
        self.global_split = global_split
        self.used_global = False
        #: spread the ranks evenly over the NVLink domains taken
        #: (:meth:`NodeSearch.even_split`), and whether a pass left them
        #: uneven without
        self.even_domains = even_domains
        self.uneven_domains = False
        self.node_cap = node_cap
        #: the nesting of the rank blocks, innermost first
        self.dims = dims
        #: keep the first relaxed preference for as many blocks as fit
        #: (:meth:`two_phases`); set when that was done, and when some block
        #: of the preference then got a piece of a single rank
        self.two_phase = two_phase
        self.used_two_phase = False
        self.two_phase_singleton = False
        self.explain = Explainer(inv, req, self.world, tree, cand, self.usable, self.per_node,
                                 sizes, self.capacities)

    # ---- constraints and capacities -------------------------------------------

    def constraints(self, pos: Optional[List[int]]) -> List[Constraint]:
        domain_gpus = self.sizes("nvlink-domain") if self.tree.has_domains else None
        return constraints_for(self.req, self.groups, pos, self.world, domain_gpus, self.notes)

    def capacities(self, cons: Sequence[Constraint]) -> Capacities:
        """The capacities under ``cons`` (computed once per constraint set)."""
        key = tuple((c.kind, c.level, c.span, c.hard) for c in cons)
        caps = self._capacities.get(key)
        if caps is None:
            caps = self._capacities[key] = Capacities(cons, self.tree, self.cand, self.per_node,
                                                      self.need)
        return caps

    def _reordered(self, why: str):
        alt = required_dims(self.req)
        if alt == DEFAULT_DIMS:
            return None
        saved = list(self.notes)
        pos = positions(self.lay, alt)
        cons = self.constraints(pos)
        note = (f"rank blocks reordered ({'-'.join(alt)} innermost first) {why}")
        return alt, pos, cons, saved, note

    # ---- NVLink domains -----------------------------------------------------------

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
        return c.span <= self.sizes("nvlink-domain")

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
            if self.capacities(trial + [target]).feasible:
                break
        else:
            return None
        for i in sorted(moved):  # most important first: keep it if it can be
            back = list(trial)
            back[i] = fixed[i]
            if self.capacities(back + [target]).feasible:
                trial = back
        demoted = [(fixed[i], trial[i]) for i in range(len(fixed)) if trial[i] is not fixed[i]]
        return (trial, demoted) if demoted else None

    # ---- relaxation -----------------------------------------------------------------

    def run(self) -> Placement:
        dims = self.dims
        pos = positions(self.lay, dims)
        cons = self.constraints(pos)
        if dims != DEFAULT_DIMS:
            used = "-".join(d for d in dims if dense_sizes(self.lay)[d] > 1)
            self.notes.append(f"rank blocks nested {used} (innermost first), so that {dims[0]} "
                              f"groups get the fastest links")
        elif strided_bound(cons, (hw for hw, _ in self.cand.sigs)):
            got = self._reordered("so that each required group is one block of GPUs")
            if got is not None:
                dims, pos, cons, saved, note = got
                self.notes = saved + [note]
        hard = [c for c in cons if c.hard]
        soft = sorted((c for c in cons if not c.hard), key=importance)
        final = self.capacities(hard + soft)
        if final.feasible:
            return self.assemble(final, pos, dims)
        # without hard constraints the free-GPU check already proved it fits
        caps = self.capacities(hard) if hard else None
        if caps is not None and not caps.feasible:
            got = self._reordered("so the required groups can fit") \
                if dims == DEFAULT_DIMS else None
            if got is not None:
                alt, pos2, cons2, saved, note = got
                hard2 = [c for c in cons2 if c.hard]
                caps2 = self.capacities(hard2)
                if caps2.feasible:
                    dims, pos, hard, caps = alt, pos2, hard2, caps2
                    soft = sorted((c for c in cons2 if not c.hard), key=importance)
                    self.notes = saved + [note]
                else:
                    self.notes = saved
            if not caps.feasible:
                raise self.explain.diagnose(hard)
        # each preference at the finest level that still fits, in order of importance
        fixed, became = self._relax(hard, soft)
        final = self.capacities(fixed)
        phases = self._two_phases(hard, soft, fixed, became)
        return self.assemble(final, pos, dims, phases)

    def _relax(self, hard: List[Constraint], soft: List[Constraint]
               ) -> Tuple[List[Constraint], Dict[int, Optional[Constraint]]]:
        """(the constraints kept, per soft constraint by id what it became,
        None: dropped): each soft constraint, most important first, at its
        own level when everything kept so far still fits, else the next
        coarser level that does; where a multi-node NVLink domain would
        serve it, constraints kept before it may be demoted into the domain
        to make room (:meth:`_demote_for`)."""
        fixed = list(hard)
        #: per soft constraint (by id): what it became (None: dropped)
        became: Dict[int, Optional[Constraint]] = {}
        origin: Dict[int, Constraint] = {}  # id of a fixed soft constraint -> the asked one
        for c in soft:
            placed = None
            for lvl in LEVELS[LEVEL_INDEX[c.level]:-1]:
                if c.span > self.sizes(lvl):
                    continue  # no unit of this level is that big, free or not
                trial = replace(c, level=lvl)
                if self.capacities(fixed + [trial]).feasible:
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
                    self.notes.append(self.explain.demote_note(c, [new for _, new in demoted]))
            if placed is None or placed.level != c.level:
                self.notes.append(self.explain.relax_note(c, placed, fixed))
            became[id(c)] = placed
            if placed is not None:
                origin[id(placed)] = c
                fixed.append(placed)
        return fixed, became

    def _two_phases(self, hard: List[Constraint], soft: List[Constraint],
                    fixed: List[Constraint], became: Dict[int, Optional[Constraint]]
                    ) -> Optional[TwoPhase]:
        """The two phases when the most important preference not met as
        asked can still be met for some of its blocks (None: no such)."""
        first_relaxed = None
        for c in soft:  # the most important one not met as asked
            placed = became.get(id(c))
            if placed is None or placed.level != c.level:
                first_relaxed = (c, placed)
                break
        phases = None
        if first_relaxed is not None:
            # as many blocks as possible at the level asked for, the rest
            # relaxed (e.g. 1,525 of 2,048 TP groups on whole NVSwitch
            # nodes, not all of them spread because some must be)
            c, placed = first_relaxed
            kept = self._strict_level(c, placed)
            if kept is not None and kept.span <= self.sizes(kept.level):
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
                    inner = [x for x in fixed
                             if x is not placed and (x.hard or x.span <= kept.span)]
                    relaxed = inner + ([placed] if placed is not None else [])
                strict = self.capacities(inner + [kept])
                loose = self._loosened(inner, kept, placed)
                if loose is not None and strict.total < kept.span:
                    strict, loose = self.capacities(loose), None
                if 0 < strict.total < self.need:
                    phases = TwoPhase(strict, kept, relaxed, self.capacities(hard), loose)
        return phases

    def _loosened(self, inner: List[Constraint], kept: Constraint,
                  placed: Optional[Constraint]) -> Optional[List[Constraint]]:
        """``inner`` and ``kept`` with the in-node preferences finer than a
        multi-node NVLink domain moved to that domain, when ``kept`` is
        one and that holds more of its blocks (else None). EP blocks of 32
        ranks in a GB200 NVL72 rack with TP 4 on a tray: a rack with 57
        free GPUs on trays with a busy GPU or two holds one block by its
        GPUs but none by its whole trays, and the block went over the
        network to another rack. A TP group on two trays of one rack still
        talks over the rack's NVLink (barely slower, :meth:`_domain_relief`),
        so after the blocks that whole trays hold, the blocks that the
        racks' other free GPUs hold stay in a rack too (:meth:`two_phases`):
        no TP or EP group leaves its rack unless its block fits no rack.

        The same when ``kept`` is an in-node level and the preference was
        relaxed past the domains (TP 4 kept on a node where whole free
        GPUs allow, the rest relaxed to a leaf): the blocks that do not fit
        a node but fit a rack's free GPUs stay in the rack, at the domain
        level, before the rest goes to the network."""
        if not self.tree.has_domains:
            return None
        strict = self.capacities(inner + [kept]).total // kept.span
        if kept.level in NODE_LEVELS:
            if placed is not None and LEVEL_INDEX[placed.level] <= LEVEL_INDEX["nvlink-domain"]:
                return None
            kept = replace(kept, level="nvlink-domain")
        elif kept.level != "nvlink-domain":
            return None
        loose = [replace(x, level="nvlink-domain")
                 if not x.hard and x.implicit and x.level in NODE_LEVELS and x.span <= kept.span
                 else x for x in inner] + [kept]
        return loose if self.capacities(loose).total // kept.span > strict else None

    def _strict_level(self, c: Constraint, placed: Optional[Constraint]) -> Optional[Constraint]:
        """The level at which the first relaxed preference ``c`` is kept for
        as many blocks as fit (the two phases): its own level when a unit of
        it can hold a block; otherwise the tightest level between it and
        where it was relaxed to that can (EP blocks of 32 ranks asked to
        stay in a 4-GPU tray: the NVL72 racks that hold one keep whole
        blocks, so only the blocks that do not fit any rack straddle
        racks). None when there is none."""
        if c.span <= self.sizes(c.level):
            return c
        stop = LEVEL_INDEX[placed.level] if placed is not None else len(LEVELS) - 1
        for lvl in LEVELS[LEVEL_INDEX[c.level] + 1:stop]:
            if c.span <= self.sizes(lvl):
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

    # ---- mapping ----------------------------------------------------------------------

    def search(self) -> NodeSearch:
        return NodeSearch(self.tree, self.cand, self.usable, self.packer, self.speeds,
                          self.world, self.nested, self.global_split, self.even_domains)

    def map_positions(self, search: NodeSearch, caps: Capacities, alloc: Allocation, offset: int,
                      assign: Assignment, inv_pos: Optional[List[int]]) -> Dict[int, Tuple[int, ...]]:
        """Choose the GPUs of each allocated node for consecutive positions
        from ``offset``; returns node index -> GPUs used."""
        used: Dict[int, Tuple[int, ...]] = {}
        for idx, k in alloc:
            node, free = self.usable[idx]
            if idx in used:  # a node holding pieces of several blocks
                free = tuple(g for g in free if g not in used[idx])
            dom = self.tree.pods[self.tree.node_pod[idx]].is_domain
            levels = search.node_chain(caps, dom, k, offset)
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

    def assemble(self, caps: Capacities, pos: Optional[List[int]], dims: Tuple[str, ...],
                 phases: Optional[TwoPhase] = None) -> Placement:
        world = self.world
        self.nested = nested_blocks(self.lay, dims)
        inv_pos = None
        if pos is not None:
            inv_pos = [0] * world
            for r, p in enumerate(pos):
                inv_pos[p] = r
        assign: Assignment = [("", 0)] * world
        search = self.search()
        alloc = None
        if phases is not None and self.two_phase:
            alloc = self.two_phases(search, caps, phases, assign, inv_pos)
            self.used_two_phase = alloc is not None
        if alloc is None:
            alloc = search.allocate(caps, self.need)
            self.map_positions(search, caps, alloc, 0, assign, inv_pos)
        self.used_global = self.used_global or search.used_global
        self.uneven_domains = self.uneven_domains or search.uneven_domains
        self.notes.extend(self.explain.summary_notes(caps, alloc))
        pl = build_placement(self.inv, self.req, assign, self.notes, self.groups)
        self.verify(pl, caps.cons)
        return pl

    def _rest(self, cand: Candidates, need: int) -> "Planner":
        """A planner for the ``need`` ranks after the first ones, on ``cand``."""
        rest = Planner(self.inv, self.req, self.groups, cand, self.tree, self.speeds,
                       self.sizes, need=need, global_split=self.global_split,
                       node_cap=self.node_cap, even_domains=self.even_domains)
        rest.nested = self.nested
        return rest

    def two_phases(self, search: NodeSearch, caps: Capacities, phases: TwoPhase,
                   assign: Assignment, inv_pos: Optional[List[int]]) -> Optional[Allocation]:
        """Phase 1 places the first ``n1`` positions under ``phases.strict``,
        phase 2 the rest under ``phases.relaxed`` on what is left. ``n1`` is
        a multiple of both capacities' spine-level blocks, so no block of
        either straddles the boundary in a way it did not allow. None when
        it does not work out (then everything is placed under ``caps``)."""
        strict, c = phases.strict, phases.kept
        m = lcm([strict.spine_multiple, phases.hard_only.spine_multiple])
        n1 = min(strict.total, self.need) // m * m
        if n1 <= 0 or n1 >= self.need:
            return None
        alloc1 = search.allocate(strict, n1)
        trial = list(assign)
        used = self.map_positions(search, strict, alloc1, 0, trial, inv_pos)
        drop = self.per_node is not None
        cand2 = self.cand.minus(used, self.tree.node_pod, drop_used=drop)
        kept_allocs = list(alloc1)
        if phases.loose is not None:  # the blocks the domains' other free GPUs hold
            mid = self._rest(cand2, self.need - n1)
            loose = mid.capacities(phases.loose)
            m2 = lcm([loose.spine_multiple, phases.hard_only.spine_multiple])
            n2 = min(loose.total, mid.need) // m2 * m2
            if 0 < n2 < mid.need:
                search_mid = mid.search()
                alloc_mid = search_mid.allocate(loose, n2)
                used_mid = mid.map_positions(search_mid, loose, alloc_mid, n1, trial, inv_pos)
                cand2 = cand2.minus(used_mid, self.tree.node_pod, drop_used=drop)
                kept_allocs += alloc_mid
                n1 += n2
        rest = self._rest(cand2, self.need - n1)
        caps2 = rest.capacities(phases.relaxed)
        if not caps2.feasible:
            return None
        search2 = rest.search()
        alloc2 = search2.allocate(caps2, rest.need)
        self.used_global = self.used_global or search2.used_global
        self.uneven_domains = self.uneven_domains or search2.uneven_domains
        rest.map_positions(search2, caps2, alloc2, n1, trial, inv_pos)
        assign[:] = trial
        alloc1 = kept_allocs
        self.two_phase_singleton = any(min(pieces.values()) == 1
                                       for pieces in blocks_of(alloc1 + alloc2, c.span))
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


# --------------------------------------------------------------------------
# proposals

#: Proposal.kind values
FIRST, POD_BY_POD, ONE_PHASE, NESTING, NODE_CAP, MODEL, EVEN_DOMAINS = (
    "plan", "pod-by-pod", "one-phase", "nesting", "node-cap", "model", "even-domains")


@dataclass(frozen=True)
class Proposal:
    """One placement the planner proposes, and what makes it different
    from the first: ``node_cap`` (at most that many ranks a node), ``model``
    (only nodes of that GPU model)."""

    kind: str
    placement: Placement
    node_cap: Optional[int] = None
    model: Optional[str] = None


def proposals(inv: Inventory, req: JobRequest, groups: Mapping[str, list], cand: Candidates,
              tree: FabricTree, speeds: LinkSpeeds) -> List[Proposal]:
    """The planner's candidates, best guess first: the plan; the same
    without splitting spanning blocks over the whole job (when it did);
    the same with the ranks spread evenly over the NVLink domains (racks)
    it takes (when it left one with a smaller share than an even spread);
    the same with every block relaxed alike (when some were kept whole
    first; above :data:`ALT_NESTING_MAX_WORLD` ranks only when a block of
    the rest got a piece of one rank); with CP, DP or PP nested innermost
    (no ``require`` or
    ``prefer``, up to :data:`ALT_NESTING_MAX_WORLD` ranks); on PCIe nodes
    (no NVLink ring over the whole node) at most half or a quarter of a
    node per host, so that rings stay on one socket or PCIe switch (not
    when the job asked for whole nodes or a count per node); on clusters
    mixing GPU models the job on each single model. The first raises
    :class:`PlacementError` when the job cannot be placed."""
    world = req.layout.world
    sizes = unit_sizes(inv, tree)

    def planner(sub: Candidates = cand, **kw) -> Planner:
        return Planner(inv, req, groups, sub, tree, speeds, sizes, **kw)

    first = planner()
    out = [Proposal(FIRST, first.run())]
    variants: List[Tuple[str, Dict]] = []
    if first.used_global:
        variants.append((POD_BY_POD, {"global_split": False}))
    if first.uneven_domains:
        # the racks taken hold uneven shares (the last few ranks in one)
        variants.append((EVEN_DOMAINS, {"even_domains": True}))
    if first.used_two_phase and (first.two_phase_singleton or world <= ALT_NESTING_MAX_WORLD):
        # the blocks kept whole first left fragments for the rest, whose
        # worst split every block relaxed alike can better (one more pass:
        # above ALT_NESTING_MAX_WORLD ranks only when a rank was left alone
        # on a host)
        variants.append((ONE_PHASE, {"two_phase": False}))
    if not req.require and not req.prefer and world <= ALT_NESTING_MAX_WORLD:
        for dims in other_nestings(req.layout):
            variants.append((NESTING, {"dims": dims}))
    for kind, kw in variants:
        try:
            out.append(Proposal(kind, planner(**kw).run()))
        except PlacementError:
            continue
    caps = [] if req.exclusive or req.gpus_per_node else node_caps(cand, world)
    for cap in caps:
        try:
            out.append(Proposal(NODE_CAP, planner(node_cap=cap).run(), node_cap=cap))
        except PlacementError:
            continue
    models = gpu_models(cand, speeds)
    if len(models) > 1:
        for model in models:
            sub = cand.restricted(lambda n, m=model: n.hardware.model == m, tree.node_pod)
            if sub.free_gpus < world:
                continue
            try:
                out.append(Proposal(MODEL, planner(sub).run(), model=model))
            except PlacementError:
                continue
    return out


def other_nestings(lay) -> List[Tuple[str, ...]]:
    """The nestings proposed besides the default: CP, DP or PP innermost
    (the kind that then gets the fastest links), then TP still innermost
    with CP, DP or PP next to it (on PCIe nodes a pipeline stage next to
    its TP group can stay on the node while DP crosses nodes). Each once:
    dimensions of size 1 do not count."""
    dense = dense_sizes(lay)

    def used(dims):
        return tuple(d for d in dims if dense[d] > 1)

    seen = {used(DEFAULT_DIMS)}
    out: List[Tuple[str, ...]] = []
    candidates_ = [(d,) + tuple(x for x in DEFAULT_DIMS if x != d) for d in ("cp", "dp", "pp")]
    if dense["tp"] > 1:
        candidates_ += [("tp", d) + tuple(x for x in DEFAULT_DIMS if x not in ("tp", d))
                        for d in ("cp", "dp", "pp")]
    for dims in candidates_:
        if dense[dims[0]] > 1 and used(dims) not in seen:
            seen.add(used(dims))
            out.append(dims)
    return out


def node_caps(cand: Candidates, world: int) -> List[int]:
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


def gpu_models(cand: Candidates, speeds: LinkSpeeds) -> List[str]:
    """GPU models among the usable nodes, fastest interconnect first."""
    speed: Dict[str, Tuple] = {}
    for hw, _ in cand.sigs:
        model = hw.model
        key = speeds.hardware_order(hw)
        if model not in speed or key < speed[model]:
            speed[model] = key
    return sorted(speed, key=lambda m: (speed[m], m))
