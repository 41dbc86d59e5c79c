"""Slurm's own choice of nodes and GPUs for a job, as a pure function.

What slurmctld's ``select/cons_tres`` does with a GPU job (Slurm 25.11:
``src/plugins/topology/tree/eval_nodes_tree.c``, ``.../common/eval_nodes.c``,
``src/plugins/select/cons_tres/job_test.c``), reduced to what a placement
depends on. Used by the baselines (:func:`~slurmtopo.placement.baselines.naive_plan`
and :func:`~slurmtopo.placement.baselines.leaf_constrained_plan`), which the
benchmarks compare the planner with and ``slurmtopo simulate`` replays a
trace with; tests/integration/test_simulate_slurm.py measures how often it
names the nodes a real slurmctld picks.

Which nodes can take the job
    The candidates of :func:`~slurmtopo.placement.common.candidates`: usable
    nodes with free GPUs (``--gpus-per-node=g``: at least ``g``). CPUs and
    memory are not modelled: a node's free CPUs are taken to follow its
    free GPUs (jobs asking ``--cpus-per-gpu``), so "fewest CPUs" below is
    "fewest free GPUs".

Node weight
    Nodes are grouped by scheduling weight and lower weights are used
    first. An inventory carries no ``Weight=``, so every node weighs the
    same, except what cons_tres adds itself: for a job that asks GPUs per
    job (``--gpus=N``, no per-node count) a node's weight falls with the
    GPUs it can give (``0xff - min(free, N)``, "favor nodes with more
    co-located GPUs"), so nodes with the most free GPUs, whole nodes first,
    are taken first. With ``--gpus-per-node=g`` every eligible node can
    give ``g`` and the weights tie.

``tree`` (topology/tree, without ``TopologyParam=TopoOptional``: every job,
with or without ``--switches``)
    The top switch is the highest-level switch with enough eligible nodes
    (the last such in switch-table order); only nodes under it are used.
    If one leaf holds the job, the leaf with the fewest eligible nodes
    that suffice (the first on ties), else leaves one after another: the
    one whose ancestors hold the job best, then the largest, then those
    closest (in switch hops) to the leaves taken. Inside a leaf, nodes in
    node order. ``--switches=N@T`` changes no choice: a job whose choice
    spans more leaves waits until T has passed (the caller's business).

``flat`` (no topology plugin, or ``TopoOptional`` and no ``--switches``)
    Eligible nodes form runs of consecutive nodes (in node order, an
    ineligible node or a change of weight ends a run). The run taken is
    the one that suffices with the fewest free GPUs (best fit; when none
    suffices, the largest, and then the next). A one-node job takes the
    node of that run with the fewest free GPUs that hold it; a larger job
    takes the run's nodes from its first.

``block`` (topology/block: ``src/plugins/topology/block/eval_nodes_block.c``,
block_record.c, 25.11.7), reduced to its node choice
    The base block size ``B`` is the first ``BlockSizes`` value (else the
    node count of the first block); the enabled levels are the
    ``BlockSizes`` as powers of two of ``B`` (without ``BlockSizes``: 1, 2,
    4 and 8 base blocks). A job asking ``--segment=S`` is cut into
    ``N/S`` segments placed one after another (a job without it is one
    segment of all its nodes). A segment goes to the smallest enabled
    level of ``2^k`` consecutive base blocks holding ``S`` nodes (none:
    the whole cluster), into the block of that level with the fewest
    eligible nodes that hold it (best fit; lowest index on ties), and
    inside it into as few base blocks as it can: the one that holds what
    is left with the fewest eligible nodes, else the one with the most,
    nodes in node order. Not modelled: node weights, required nodes,
    ``--spread-segments`` and ``--consolidate-segments``, nodes outside
    every block (never used).

GPUs inside a node (:func:`slurm_pick`)
    From the socket with the most free GPUs first, lowest indices first.

Node order is the inventory's (the order slurm.conf lists the nodes in),
and the switch table's order the fabric's (the order topology.conf lists
the switches in, as ``slurmtopo topology generate`` writes them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import PlacementError
from slurmtopo.inventory.model import Hardware, Inventory, Node
from slurmtopo.inventory.topology import switch_levels

TREE = "tree"
FLAT = "flat"
BLOCK = "block"
TOPOLOGIES = (TREE, FLAT, BLOCK)

#: one candidate node: (inventory index, node, free GPU indices)
Rec = Tuple[int, Node, Tuple[int, ...]]


def slurm_pick(hw: Hardware, free: Sequence[int], k: int) -> Tuple[int, ...]:
    """The ``k`` GPUs cons_tres gives a job on a node with ``free`` GPUs:
    from the socket (NUMA node) with the most free GPUs first (ties: the
    lower socket), lowest indices first inside a socket. That is what it
    does when gres.conf binds GPUs to sockets (``Cores=``); without a
    binding every GPU is one socket and it is the lowest free indices."""
    numa = {g.index: (g.numa_node if g.numa_node is not None else 0) for g in hw.gpus}
    by_socket: Dict[int, List[int]] = {}
    for g in sorted(free):
        by_socket.setdefault(numa.get(g, 0), []).append(g)
    out: List[int] = []
    for _, gs in sorted(by_socket.items(), key=lambda t: (-len(t[1]), t[0])):
        for g in gs:
            if len(out) < k:
                out.append(g)
    return tuple(sorted(out))


# --------------------------------------------------------------------------
# the switch table as topology/tree holds it


@dataclass(frozen=True)
class SwitchTable:
    """topology/tree's switch table: switches in topology.conf order, each
    with its level, its one parent (the last switch listing it; None at
    the top), the inventory indices of the nodes under it (sorted), and
    the hop distance to every other switch (None: not connected)."""

    names: Tuple[str, ...]
    level: Tuple[int, ...]
    parent: Tuple[Optional[int], ...]
    nodes: Tuple[Tuple[int, ...], ...]
    dist: Tuple[Tuple[Optional[int], ...], ...]
    #: per inventory index, the switches (of every level) above the node
    above: Tuple[Tuple[int, ...], ...] = ()
    #: node name -> inventory index
    node_index: Optional[Dict[str, int]] = None

    @property
    def leaves(self) -> List[int]:
        return [i for i, lv in enumerate(self.level) if lv == 0]


def switch_table(inv: Inventory) -> SwitchTable:
    """The inventory's :class:`SwitchTable`, kept with the inventory."""
    return inv.derive("placement.slurm_switch_table", lambda: _switch_table(inv))


def _switch_table(inv: Inventory) -> SwitchTable:
    switches = inv.fabric.switches
    names = tuple(s.name for s in switches)
    at = {n: i for i, n in enumerate(names)}
    levels = switch_levels(inv.fabric)
    index = {name: i for i, name in enumerate(inv.nodes)}
    parent: List[Optional[int]] = [None] * len(names)
    for i, s in enumerate(switches):
        for child in s.switches:
            if child in at:
                parent[at[child]] = i
    below: Dict[int, set] = {}

    def under(i: int, seen: frozenset = frozenset()) -> set:
        if i in below:
            return below[i]
        out = {index[h] for h in switches[i].nodes if h in index}
        for child in switches[i].switches:
            if child in at and at[child] not in seen:
                out |= under(at[child], seen | {i})
        below[i] = out
        return out

    nodes = tuple(tuple(sorted(under(i))) for i in range(len(names)))
    adj: List[List[int]] = [[] for _ in names]
    for i, s in enumerate(switches):
        for child in s.switches:
            if child in at:
                adj[i].append(at[child])
                adj[at[child]].append(i)
    dist = []
    for i in range(len(names)):  # breadth first from every switch (a few hundred at most)
        d: List[Optional[int]] = [None] * len(names)
        d[i] = 0
        todo = [i]
        for a in todo:
            for b in adj[a]:
                if d[b] is None:
                    d[b] = d[a] + 1
                    todo.append(b)
        dist.append(tuple(d))
    above: List[List[int]] = [[] for _ in index]
    for sw, members in enumerate(nodes):
        for i in members:
            above[i].append(sw)
    return SwitchTable(names=names, level=tuple(levels.get(n, 0) for n in names),
                       parent=tuple(parent), nodes=nodes, dist=tuple(dist),
                       above=tuple(tuple(a) for a in above), node_index=index)


# --------------------------------------------------------------------------
# the choice


@dataclass
class _Ask:
    """What is left to find: nodes (``--gpus-per-node``) or GPUs (``--gpus``)."""

    world: int
    gpn: Optional[int]
    rem_nodes: int
    gpus: int = 0
    chosen: Optional[List[Rec]] = None

    def take(self, rec: Rec) -> None:
        self.chosen.append(rec)
        self.rem_nodes -= 1
        self.gpus += min(len(rec[2]), self.world) if self.gpn is None else self.gpn

    @property
    def done(self) -> bool:
        return self.rem_nodes <= 0 and self.gpus >= self.world


def _weight(rec: Rec, world: int, gpn: Optional[int]) -> int:
    """cons_tres's addition to a node's weight (0 when GPUs are asked per node)."""
    return 0 if gpn is not None else 0xff - min(len(rec[2]), world, 0xff)


def choose_nodes(inv: Inventory, nodes: Sequence[Rec], world: int, gpn: Optional[int],
                 topology: str = TREE, segment: Optional[int] = None
                 ) -> List[Tuple[Rec, Tuple[int, ...]]]:
    """The nodes Slurm gives a job of ``world`` GPUs (``gpn`` on each of
    its nodes, or None: ``--gpus=world`` over as few nodes as it takes)
    among the candidate ``nodes`` (in inventory order), each with the GPUs
    Slurm allocates there (:func:`slurm_pick`), in node order. Raises
    PlacementError when Slurm would not start it now."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}")
    need = -(-world // gpn) if gpn is not None else 1
    ask = _Ask(world=world, gpn=gpn, rem_nodes=need, chosen=[])
    if len(nodes) < need:
        raise PlacementError(f"needs {need} nodes with {gpn} free GPUs each; only "
                             f"{len(nodes)} have them")
    if topology == BLOCK and inv.fabric.blocks:
        _block(inv, list(nodes), ask, segment)
    elif topology == TREE and inv.fabric.switches:
        _tree(inv, list(nodes), ask)
    else:
        _flat(list(nodes), ask)
    if not ask.done:
        raise PlacementError(f"needs {world} GPUs; Slurm's node selection finds only "
                             f"{ask.gpus} on {len(ask.chosen)} node(s)")
    out = []
    left = world
    for rec in sorted(ask.chosen, key=lambda r: r[0]):
        k = gpn if gpn is not None else min(len(rec[2]), left)
        k = min(k, len(rec[2]))
        left -= k
        out.append((rec, slurm_pick(rec[1].hardware, rec[2], k)))
    return out


def _flat(nodes: List[Rec], ask: _Ask) -> None:
    """_eval_nodes_consec (see the module doc)."""
    runs: List[List[Rec]] = []
    last_i, last_w = None, None
    for rec in nodes:
        w = _weight(rec, ask.world, ask.gpn)
        if last_i is None or rec[0] != last_i + 1 or w != last_w:
            runs.append([])
        runs[-1].append(rec)
        last_i, last_w = rec[0], w
    weights = [_weight(r[0], ask.world, ask.gpn) for r in runs]
    while not ask.done:
        best, best_cpus, best_ok, best_w = -1, 0, False, 0
        for i, run in enumerate(runs):
            if not run:
                continue
            cpus = sum(len(r[2]) for r in run)
            gpus = sum(min(len(r[2]), ask.world) for r in run)
            ok = (cpus >= ask.world - ask.gpus and len(run) >= ask.rem_nodes
                  and (ask.gpn is not None or gpus >= ask.world - ask.gpus))
            new = best < 0 or weights[i] < best_w
            if not new and weights[i] == best_w and (
                    (ok and not best_ok) or (ok and cpus < best_cpus)
                    or (not ok and cpus > best_cpus)):
                new = True
            if new:
                best, best_cpus, best_ok, best_w = i, cpus, ok, weights[i]
        if best < 0:
            return
        run = runs[best]
        if ask.rem_nodes <= 1:  # best-fit single node
            want = ask.world - ask.gpus
            fit = None
            for rec in run:
                if len(rec[2]) < want:
                    continue
                if fit is None or len(rec[2]) < len(fit[2]):
                    fit = rec
                    if len(rec[2]) == want:
                        break
            if fit is not None:
                run = [fit]
        for rec in run:
            if ask.done:
                break
            ask.take(rec)
        runs[best] = []


def block_levels(inv: Inventory) -> Tuple[int, Tuple[int, ...]]:
    """(base block size in nodes, enabled levels as powers of two of it)
    of the inventory's topology/block (see the module doc)."""
    blocks = [b for b in inv.fabric.blocks if b.nodes]
    base = inv.fabric.block_sizes[0] if inv.fabric.block_sizes else \
        (len(blocks[0].nodes) if blocks else 1)
    base = max(1, base)
    if not inv.fabric.block_sizes:
        return base, (0, 1, 2, 3)
    levels = []
    for size in inv.fabric.block_sizes:
        k = (size // base).bit_length() - 1
        if size % base == 0 and (1 << k) * base == size:
            levels.append(k)
    return base, tuple(sorted(set(levels)))


def _block(inv: Inventory, nodes: List[Rec], ask: _Ask, segment: Optional[int]) -> None:
    """eval_nodes_block, reduced (see the module doc)."""
    index = {n: i for i, n in enumerate(inv.nodes)}
    by_index = {rec[0]: rec for rec in nodes}
    base, levels = block_levels(inv)
    bblocks: List[List[int]] = [sorted(index[h] for h in b.nodes if h in index)
                                for b in inv.fabric.blocks]
    total = ask.rem_nodes
    size = segment if segment and segment < total and total % segment == 0 else total
    taken: set = set()
    while not ask.done:
        want = min(size, ask.rem_nodes) if ask.gpn is not None else ask.rem_nodes
        need_bb = -(-want // base)
        k = max(0, (need_bb - 1).bit_length())
        level = next((lv for lv in levels if lv >= k), None)
        per = len(bblocks) if level is None else (1 << level)
        free = [[i for i in bb if i in by_index and i not in taken] for bb in bblocks]
        groups = [list(range(g, min(g + per, len(bblocks)))) for g in range(0, len(bblocks), per)]
        fits = [(sum(len(free[b]) for b in g), gi) for gi, g in enumerate(groups)
                if sum(len(free[b]) for b in g) >= want]
        if not fits:
            return
        _, gi = min(fits)
        group = groups[gi]
        left = want
        used: set = set()
        while left > 0:
            cands = [b for b in group if b not in used and free[b]]
            if not cands:
                return
            fit = [b for b in cands if len(free[b]) >= left]
            b = min(fit, key=lambda x: (len(free[x]), x)) if fit else \
                max(cands, key=lambda x: (len(free[x]), -x))
            used.add(b)
            for i in free[b]:
                if left <= 0:
                    break
                ask.take(by_index[i])
                taken.add(i)
                left -= 1
        if ask.gpn is None:
            return


def _tree(inv: Inventory, nodes: List[Rec], ask: _Ask) -> None:
    """_eval_nodes_topo (see the module doc)."""
    table = switch_table(inv)
    n_sw = len(table.names)
    by_index = {rec[0]: rec for rec in nodes}
    weight = {rec[0]: _weight(rec, ask.world, ask.gpn) for rec in nodes}
    elig = [0] * n_sw
    lightest: List[Optional[int]] = [None] * n_sw
    for rec in nodes:
        w = weight[rec[0]]
        for s in table.above[rec[0]]:
            elig[s] += 1
            if lightest[s] is None or w < lightest[s]:
                lightest[s] = w
    # the top switch: the highest with enough nodes (and its lightest nodes)
    top, top_w = -1, 0
    for s in range(n_sw):
        if elig[s] < ask.rem_nodes or not elig[s]:
            continue
        w = lightest[s]
        if top < 0 or (table.level[s] >= table.level[top] and w <= top_w):
            top, top_w = s, w
    if top < 0:
        return
    # the lightest nodes that suffice, weight by weight; all weights but the
    # last are taken whole, like required nodes
    tiers: Dict[int, List[int]] = {}
    for i in table.nodes[top]:
        if i not in by_index:
            continue
        tiers.setdefault(weight[i], []).append(i)
    best: List[int] = []
    forced: List[int] = []
    gpus = 0
    for w in sorted(tiers):
        if best:
            forced = list(best)
        for i in tiers[w]:
            best.append(i)
            gpus += min(len(by_index[i][2]), ask.world) if ask.gpn is None else ask.gpn
        if len(best) >= ask.rem_nodes and gpus >= ask.world:
            break
    if len(best) < ask.rem_nodes or gpus < ask.world:
        return
    best_set = set(best)
    count = [0] * n_sw
    for i in best:
        for s in table.above[i]:
            count[s] += 1
    required = [False] * n_sw
    taken = set()
    for i in sorted(forced):
        ask.take(by_index[i])
        taken.add(i)
    if forced and ask.done:
        return
    if forced:
        for s in range(n_sw):
            if any(i in taken for i in table.nodes[s]):
                required[s] = True
        # more nodes from the leaves already in use
        for s in range(n_sw):
            if not required[s] or table.level[s] != 0:
                continue
            got = 0
            for i in table.nodes[s]:
                if i in taken or i not in best_set:
                    continue
                ask.take(by_index[i])
                taken.add(i)
                got += 1
                if ask.done:
                    return
            _decrement(table, count, s, got)
    dist = [0] * n_sw
    for s in range(n_sw):
        if required[s]:
            _add_dist(table, dist, s)
    prev = ask.rem_nodes + 1
    while not ask.done:
        if prev == ask.rem_nodes:
            return  # stalled
        prev = ask.rem_nodes
        pick = -1
        for s in table.leaves:
            if required[s]:
                continue
            pick = _better(table, dist, count, ask.rem_nodes, s, pick)
        if pick < 0:
            return
        _add_dist(table, dist, pick)
        for i in table.nodes[pick]:
            if i in taken or i not in best_set:
                continue
            ask.take(by_index[i])
            taken.add(i)
            if ask.done:
                return
        _decrement(table, count, pick, count[pick])
        count[pick] = 0


def _add_dist(table: SwitchTable, dist: List[Optional[int]], s: int) -> None:
    for i, d in enumerate(table.dist[s]):
        dist[i] = None if d is None or dist[i] is None else dist[i] + d


def _decrement(table: SwitchTable, count: List[int], s: Optional[int], n: int) -> None:
    while s is not None:
        count[s] = max(0, count[s] - n)
        s = table.parent[s]


def _better(table: SwitchTable, dist, count, rem_nodes: int, i: int, best: int) -> int:
    """_topo_choose_best_switch: ``i`` or ``best``."""
    if best < 0 or dist[i] is None or not count[i]:
        return i if count[i] and dist[i] is not None and best < 0 else best
    cmp, i_fit = _compare(table, count, rem_nodes, i, best)
    if (dist[best] is None or dist[i] < dist[best]) and i_fit:
        return i
    if dist[i] == dist[best] and cmp > 0:
        return i
    return best


def _compare(table: SwitchTable, count, rem_nodes: int, i: int, j: int) -> Tuple[int, bool]:
    """_topo_compare_switches: 1 when ``i`` fits better, -1 when ``j``,
    with whether ``i`` (or the ancestor compared) holds the job."""
    while True:
        i_fit = count[i] >= rem_nodes
        j_fit = count[j] >= rem_nodes
        if i_fit and j_fit:
            if count[i] != count[j]:
                return (1 if count[i] < count[j] else -1), i_fit
            break
        if i_fit or j_fit:
            return (1 if i_fit else -1), i_fit
        pi, pj = table.parent[i], table.parent[j]
        if pi is not None and pj is not None and pi != pj:
            i, j = pi, pj
            continue
        break
    if count[i] != count[j]:
        return (1 if count[i] > count[j] else -1), i_fit
    if table.level[i] != table.level[j]:
        return (1 if table.level[i] < table.level[j] else -1), i_fit
    return 0, i_fit


def leaves_used(inv: Inventory, hosts: Sequence[str]) -> int:
    """How many leaf switches ``hosts`` span (what ``--switches`` counts)."""
    table = switch_table(inv)
    index = table.node_index or {}
    leaves = set()
    for h in hosts:
        i = index.get(h)
        if i is not None:
            leaves.update(s for s in table.above[i] if table.level[s] == 0)
    return len(leaves)
