"""The daemon's working state (Slurm's busy GPUs plus what it claimed and
reserved) and how good the free space left in it is (fragmentation), and
which GPUs Slurm will most likely give a released job."""
from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from slurmtopo.daemon.decisions import ClusterView
from slurmtopo.model import ClusterState, Inventory, NodeState, Placement


# --------------------------------------------------------------------------
# the working state: Slurm's view plus claims (released jobs) and reservations


class Work:
    """Mutable free/busy view: Slurm's busy GPUs, plus GPUs claimed by jobs
    the daemon released that Slurm has not started yet, plus reservations."""

    def __init__(self, inv: Inventory, view: ClusterView):
        self.inv = inv
        self.base = view.state
        self.view = view
        self.claimed: Dict[str, Set[int]] = {}
        self.claimed_whole: Set[str] = set()
        self.reserved: Dict[str, Set[int]] = {}
        self.cpus_claimed: Dict[str, int] = {}
        self._cache: Optional[ClusterState] = None
        #: (hardware, free GPUs, link bound) -> largest group: one pass asks
        #: the same few shapes over and over; kept with the pass, not the process
        self._largest: Dict[Tuple[object, Tuple[int, ...], int], int] = {}

    def largest_group(self, hw, free: Tuple[int, ...], bound) -> int:
        """:func:`slurmtopo.placement.intranode.largest_group`, remembered
        for this pass."""
        key = (hw, free, int(bound))
        v = self._largest.get(key)
        if v is None:
            from slurmtopo.placement.intranode import largest_group
            v = self._largest[key] = largest_group(hw, free, bound)
        return v

    def slurm_busy(self, name: str) -> FrozenSet[int]:
        return self.base.of(name).busy_gpus

    def state(self, freed: Iterable[str] = (), with_reserved: bool = True) -> ClusterState:
        """The ClusterState to plan on; ``freed`` nodes lose their Slurm
        busy GPUs (for reservations: "once the jobs there end")."""
        freed = set(freed)
        if not freed and with_reserved and self._cache is not None:
            return self._cache
        out: Dict[str, NodeState] = {}
        for name, st in self.base.nodes.items():
            out[name] = st
        touched = set(self.claimed) | self.claimed_whole | freed
        if with_reserved:
            touched |= set(self.reserved)
        for name in touched:
            st = self.base.of(name)
            busy = set() if name in freed else set(st.busy_gpus)
            excl = False if name in freed else st.exclusive
            state = st.state
            if name in freed and state in ("allocated", "mixed", "completing"):
                state = "idle"
            busy |= self.claimed.get(name, set())
            if with_reserved:
                busy |= self.reserved.get(name, set())
            if name in self.claimed_whole:
                excl = True
            node = self.inv.nodes.get(name)
            if node is not None and busy and state == "idle":
                state = "mixed"
            out[name] = NodeState(name=name, state=state, busy_gpus=frozenset(busy),
                                  flags=st.flags, exclusive=excl)
        cs = ClusterState(nodes=out, source=self.base.source)
        if not freed and with_reserved:
            self._cache = cs
        return cs

    def free_gpus(self, name: str, with_reserved: bool = True) -> Tuple[int, ...]:
        node = self.inv.nodes[name]
        return self.state(with_reserved=with_reserved).free_gpus(node)

    def cpus_free(self, name: str) -> Optional[int]:
        c = self.view.cpus_free.get(name)
        if c is None:
            return None
        return c - self.cpus_claimed.get(name, 0)

    def claim(self, gpus: Mapping[str, Iterable[int]], exclusive: bool = False,
              cpus: int = 0) -> None:
        for h, gs in gpus.items():
            self.claimed.setdefault(h, set()).update(gs)
            if exclusive:
                self.claimed_whole.add(h)
            if cpus:
                self.cpus_claimed[h] = self.cpus_claimed.get(h, 0) + cpus
        self._cache = None

    def reserve(self, gpus: Mapping[str, Iterable[int]]) -> None:
        for h, gs in gpus.items():
            self.reserved.setdefault(h, set()).update(gs)
        self._cache = None


def _whole_free(work: Work, name: str, extra: Mapping[str, Set[int]]) -> bool:
    node = work.inv.nodes[name]
    st = work.state()
    ns = st.of(name)
    if not ns.usable:
        return False
    free = set(st.free_gpus(node)) - extra.get(name, set())
    return len(free) == node.hardware.gpu_count


def free_space_key(work: Work, touched: Sequence[str], take: Mapping[str, Set[int]],
              leaf_of: Mapping[str, str], leaf_nodes: Mapping[str, Sequence[str]]):
    """How good the free space is after taking ``take`` (bigger is better)."""
    from slurmtopo.links import LinkClass

    st = work.state()
    keys = []
    whole_nodes = 0
    for name in touched:
        node = work.inv.nodes[name]
        if not st.of(name).usable:
            continue
        free = tuple(g for g in st.free_gpus(node) if g not in take.get(name, ()))
        if len(free) == node.hardware.gpu_count:
            whole_nodes += 1
        hw = node.hardware
        keys.append((work.largest_group(hw, free, LinkClass.NVLINK),
                     work.largest_group(hw, free, LinkClass.PXB),
                     work.largest_group(hw, free, LinkClass.NODE), len(free)))
    leaves = {leaf_of[n] for n in touched if n in leaf_of}
    whole_leaves = sum(1 for lf in leaves
                       if all(_whole_free(work, n, take) for n in leaf_nodes[lf]))
    return (whole_leaves, whole_nodes, sorted(keys, reverse=True))


def slurm_pick(hw, free: Sequence[int], k: int) -> Tuple[int, ...]:
    """The ``k`` GPUs Slurm's cons_tres most likely gives a job on a node
    with ``free`` GPUs: from the socket (NUMA node) with the most free GPUs
    first (ties: the lower socket), lowest indices first inside a socket.
    That is what 22.05 does when gres.conf binds GPUs to sockets
    (``Cores=``); without a binding every GPU is one socket and it is the
    lowest free indices. A prediction only: the loop compares it with what
    Slurm really gave, and ``slurmtopo bind`` plans on the real GPUs."""
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


def predicted_claim(work: Work, p: Placement, gpn: Optional[int], exclusive: bool
                    ) -> Dict[str, Tuple[int, ...]]:
    """The GPUs the job will hold on each host once Slurm starts it
    (:func:`slurm_pick` of as many GPUs as Slurm allocates there); every
    GPU of the node for an exclusive job."""
    out: Dict[str, Tuple[int, ...]] = {}
    for h in p.hosts:
        planned = p.gpus_on(h)
        node = work.inv.nodes[h]
        if exclusive:
            out[h] = tuple(g.index for g in node.gpus)
            continue
        want = max(gpn or 0, len(planned))
        out[h] = slurm_pick(node.hardware, work.free_gpus(h), want)
    return out
