"""What the planner tells the user: why a constraint does not fit
(:meth:`Explainer.why`, :meth:`Explainer.diagnose` for a refusal), what
was relaxed and where the ranks went. Messages only: nothing here changes
a placement.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import PlacementError
from slurmtopo.inventory.model import Inventory
from slurmtopo.job.request import LEVEL_INDEX, LEVEL_TEXT, NODE_LEVEL_BOUND, NODE_LEVELS, JobRequest
from slurmtopo.placement.capacity import Capacities, UnitSizes, UsableNodes
from slurmtopo.placement.common import Candidates
from slurmtopo.placement.constraints import JOB, UNIT_TEXT, Constraint
from slurmtopo.placement.fabric import FabricTree
from slurmtopo.placement.intranode import largest_group
from slurmtopo.placement.packing import Allocation


class Explainer:
    """Messages about one planning pass. ``capacities`` gives the
    capacities under a constraint set (the planner's cached ones)."""

    def __init__(self, inv: Inventory, req: JobRequest, world: int, tree: FabricTree,
                 cand: Candidates, usable: UsableNodes, per_node: Optional[int],
                 sizes: UnitSizes, capacities: Callable[[Sequence[Constraint]], Capacities]):
        self.inv = inv
        self.req = req
        self.world = world
        self.tree = tree
        self.cand = cand
        self.usable = usable
        self.per_node = per_node
        self.sizes = sizes
        self.capacities = capacities

    def largest_unit(self, level: str) -> int:
        """GPUs of the largest unit of node ``level`` (NVLink island, PCIe
        switch, socket, node) on any node of the inventory, busy or not: when
        a group is bigger, no state would let it fit, and the message says
        so instead of blaming busy GPUs. One pass per node type."""
        bound = NODE_LEVEL_BOUND[level]
        types = {n.hardware for n in self.inv.nodes.values()}
        return max((largest_group(hw, tuple(g.index for g in hw.gpus), bound) for hw in types),
                   default=0)

    def largest_free(self, level: str) -> Tuple[int, int, str]:
        """(GPUs, count, where) of the largest free unit of ``level``."""
        tree = self.tree
        if level in NODE_LEVELS:
            bound = NODE_LEVEL_BOUND[level]
            best, count = 0, 0
            per_sig: Dict[int, int] = {}
            for idx in self.usable:
                s = self.cand.sig_of[idx]
                if s not in per_sig:
                    hw, free = self.cand.sigs[s]
                    per_sig[s] = largest_group(hw, free, bound)
                v = per_sig[s]
                if v > best:
                    best, count = v, 1
                elif v == best:
                    count += 1
            return best, count, "node"
        if level == "nvlink-domain":
            best, count, where = 0, 0, ""
            for p, free in self.cand.pod_free.items():
                pod = tree.pods[p]
                if pod.is_domain and free >= best:
                    count = count + 1 if free == best else 1
                    best, where = free, pod.name
            if best == 0:
                b, n, _ = self.largest_free("node")
                return b, n, "node"
            return best, count, where
        if level == "leaf":
            best, count, where = 0, 0, ""
            for p, free in sorted(self.cand.pod_free.items()):
                if free > best:
                    best, count, where = free, 1, tree.pods[p].name
                elif free == best:
                    count += 1
            return best, count, where
        # spine
        per: Dict[int, Tuple[int, str]] = {}
        for p, free in self.cand.pod_free.items():
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

    def why(self, c: Constraint, fixed: Sequence[Constraint] = ()) -> str:
        """Why blocks of ``c`` do not fit at ``c.level``, in one clause."""
        level = c.level
        unit = UNIT_TEXT[level]
        if c.span > c.size and c.span > self.sizes(level):
            return (f"in this layout each {c.kind} group sits in a block of {c.span} ranks, "
                    f"more than any {unit} holds")
        if level in NODE_LEVELS:
            most = self.largest_unit(level)
            if c.span > most:  # the hardware's limit, whatever is busy
                return f"no {unit} of the cluster has more than {most} GPU{'s' * (most != 1)}"
            if self.per_node is not None and c.span > self.per_node:
                return self._capped(c)
        fit = self.capacities(list(fixed) + [c]).total // c.span
        need = self.world // c.span
        short = ""
        if 0 < fit < need:
            what = (f"{c.kind} groups of {c.size}" if c.span == c.size
                    else f"blocks of {c.span} ranks")
            also = " with the constraints already met" if fixed else ""
            short = f"only {fit} of the {need} {what} fit{also}; "
        best, count, where = self.largest_free(level)
        if level in NODE_LEVELS:
            on = f", on {count} node{'s' * (count != 1)}" if count else ""
            return f"{short}the largest free {unit} is {best} GPU{'s' * (best != 1)}{on}"
        if level == "nvlink-domain" and not self.tree.has_domains:
            return (f"{short}there are no multi-node NVLink domains and the largest free node "
                    f"has {best} GPUs")
        return f"{short}the largest free {unit} has {best} GPUs ({where})"

    def _capped(self, c: Constraint) -> str:
        """Why: fewer ranks a node than a block of ``c``, by the user's
        --gpus-per-node or by the plan's own choice (a node cap that keeps
        rings on one socket or PCIe switch, said plainly as a choice: the
        nodes themselves hold the block)."""
        block = (f"a {c.kind} group has {c.size} ranks" if c.span == c.size
                 else f"each {c.kind} group sits in a block of {c.span} ranks")
        g = self.req.gpus_per_node
        if g is not None and self.per_node == min(g, self.world):
            return f"{block} and --gpus-per-node {g} puts at most {self.per_node} on a node"
        return (f"{block} and this plan puts at most {self.per_node} ranks on a node by choice "
                f"(see the note on rings)")

    def diagnose(self, hard: Sequence[Constraint]) -> PlacementError:
        world = self.world
        failing = [c for c in hard if not self.capacities([c]).feasible]
        if self.per_node is not None and not self.capacities([]).feasible:
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
        if c.level in NODE_LEVELS and c.span > self.sizes(c.level):
            return PlacementError(
                f"needs {world} GPUs {grp} {inside} ({c.kind}={c.level}) but the largest node "
                f"has {self.sizes(c.level)} GPUs")
        return PlacementError(f"needs {world} GPUs {grp} {inside} ({c.kind}={c.level}); "
                              f"{self.why(c)}")

    def relax_note(self, c: Constraint, placed: Optional[Constraint],
                   fixed: Sequence[Constraint] = ()) -> str:
        why = self.why(c, fixed)
        if placed is None:
            got = "anywhere"
        else:
            got = "NVLink" if placed.level == "nvlink" else LEVEL_TEXT[placed.level]
        want = "NVLink" if c.level == "nvlink" else LEVEL_TEXT[c.level]
        if c.kind == JOB:
            best, _, where = self.largest_free("nvlink-domain")
            why = (f"the largest free one has {best} GPUs, {where}" if best < c.size
                   else "not together with the preferences above")
            return (f"the job's {c.size} ranks do not fit one NVLink domain ({why}); "
                    f"placed {'' if got == 'anywhere' else 'inside '}{got}")
        if c.implicit:
            return (f"{c.kind} groups of {c.size} cannot all stay inside {want}: {why}; "
                    f"placed {'' if got == 'anywhere' else 'inside '}{got}")
        return (f"prefer {c.text} not met: {why}; {c.kind} groups placed "
                f"{'' if got == 'anywhere' else 'inside '}{got}")

    # ---- choosing nodes ---------------------------------------------------

    def demote_note(self, c: Constraint, demoted: Sequence[Constraint]) -> str:
        kinds = ", ".join(x.kind for x in demoted)
        what = ("the job stays in one NVLink domain" if c.kind == JOB
                else f"{c.kind} groups stay in one NVLink domain")
        return (f"{kinds} groups may cross nodes over "
                f"the NVLink domain so that {what} (multi-node NVLink is nearly as "
                f"fast as in-node NVLink, the network is not)")


    def summary_notes(self, caps: Capacities, alloc: Allocation) -> List[str]:
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
        part = [(k, self.inv.nodes[tree.names[idx]].hardware.gpu_count)
                for idx, k in per_node.items()]
        part = [(k, g) for k, g in part if k < g]
        text = f"{self.world} ranks on {n} node{'s' * (n != 1)}"
        if part:
            # the rest of those GPUs are busy or left to other jobs
            text += (f" ({len(part)} not filled: {sum(k for k, _ in part)} of their "
                     f"{sum(g for _, g in part)} GPUs)")
        kinds = {p.key[0] for p in pods}
        if pods and kinds <= {"leaf", "domain"}:
            word = "NVLink domain" if kinds == {"domain"} else (
                "leaf switch" if kinds == {"leaf"} else "leaf/domain")
            names = ", ".join(p.name for p in pods[:4]) + (", ..." if len(pods) > 4 else "")
            text += f" under {len(pods)} {word}{'es' if word.endswith('switch') and len(pods) != 1 else ('s' if len(pods) != 1 else '')} ({names})"
        notes = [text]
        for c in caps.cons:
            if c.hard:
                notes.append(f"required {c.text}: every {c.kind} group stays inside "
                             f"{'NVLink' if c.level == 'nvlink' else LEVEL_TEXT[c.level]}")
        return notes

