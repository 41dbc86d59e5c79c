"""Shared by the planner and the baselines: which nodes a job may use, and
turning a rank -> (host, GPU) map into a :class:`~slurmtopo.inventory.model.Placement`
with each rank's NICs and CPUs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import PlacementError
from slurmtopo.inventory.model import (UNKNOWN_TO_SLURM, USABLE_STATES, ClusterState, Hardware,
                                       Inventory, Node, NodeState, Placement, RankSlot)
from slurmtopo.job.groups import build_groups
from slurmtopo.job.request import JobRequest


#: why a node takes no rank: the counts of :class:`Candidates` besides ``excluded``
REFUSALS = ("unusable", "unknown", "full", "partial", "small")


@dataclass
class Candidates:
    """The nodes a job may use, in inventory order, with their free GPUs."""

    #: (inventory index, node, free GPU indices) for nodes with a free GPU
    nodes: List[Tuple[int, Node, Tuple[int, ...]]]
    total_nodes: int
    excluded: int  # by --nodelist / --exclude
    unusable: int  # drained, down, reserved, ...
    full: int  # usable but no GPU free (or held exclusively)
    partial: int  # dropped by --exclusive because some GPU is busy
    small: int  # dropped because fewer than --gpus-per-node GPUs are free
    free_gpus: int = 0
    #: inventory nodes Slurm does not know (not counted in ``unusable``)
    unknown: int = 0
    #: distinct (hardware, free GPUs) signatures, and each usable node's one
    sigs: List[Tuple[Hardware, Tuple[int, ...]]] = field(default_factory=list)
    sig_of: Dict[int, int] = field(default_factory=dict)
    #: filled when a pod map is given: pod -> {signature: nodes}, pod -> free GPUs
    pod_sigs: Dict[int, Dict[int, int]] = field(default_factory=dict)
    pod_free: Dict[int, int] = field(default_factory=dict)

    def restricted(self, keep, node_pod: Optional[List[int]] = None) -> "Candidates":
        """The candidates whose node satisfies ``keep(node)`` (signatures
        shared; per-pod counts recomputed when ``node_pod`` is given)."""
        nodes = [rec for rec in self.nodes if keep(rec[1])]
        sig_of = {i: self.sig_of[i] for i, _, _ in nodes}
        pod_sigs, pod_free = _pod_counts(nodes, sig_of, node_pod) if node_pod is not None \
            else ({}, {})
        return Candidates(nodes=nodes, total_nodes=self.total_nodes, excluded=self.excluded,
                          unusable=self.unusable, unknown=self.unknown, full=self.full,
                          partial=self.partial, small=self.small,
                          free_gpus=sum(len(f) for _, _, f in nodes),
                          sigs=self.sigs, sig_of=sig_of, pod_sigs=pod_sigs, pod_free=pod_free)

    def minus(self, used: Dict[int, Tuple[int, ...]], node_pod: List[int],
              drop_used: bool = False) -> "Candidates":
        """The candidates once the GPUs ``used`` (node index -> GPUs) are
        taken: those nodes keep their other free GPUs (new signatures), or
        are dropped with ``drop_used`` (``--gpus-per-node``: a node's ranks
        must not exceed the count once more)."""
        index = {(id(hw), free): s for s, (hw, free) in enumerate(self.sigs)}
        sigs = list(self.sigs)
        nodes = []
        sig_of: Dict[int, int] = {}
        for i, node, free in self.nodes:
            s = self.sig_of[i]
            if i in used:
                if drop_used:
                    continue
                taken = set(used[i])
                free = tuple(g for g in free if g not in taken)
                if not free:
                    continue
                s = signature_of(index, sigs, node.hardware, free)
            nodes.append((i, node, free))
            sig_of[i] = s
        pod_sigs, pod_free = _pod_counts(nodes, sig_of, node_pod)
        return Candidates(nodes=nodes, total_nodes=self.total_nodes, excluded=self.excluded,
                          unusable=self.unusable, unknown=self.unknown, full=self.full,
                          partial=self.partial, small=self.small,
                          free_gpus=sum(len(f) for _, _, f in nodes), sigs=sigs, sig_of=sig_of,
                          pod_sigs=pod_sigs, pod_free=pod_free)

    def summary(self) -> str:
        """" on 12 usable nodes of 32 (20 nodes fully busy, 2 drained...)"."""
        bits = []
        if self.full:
            bits.append(f"{self.full} node{'s' * (self.full != 1)} fully busy")
        if self.unusable:
            bits.append(f"{self.unusable} drained, down or reserved")
        if self.unknown:
            bits.append(f"{self.unknown} not in Slurm's node list")
        if self.partial:
            bits.append(f"{self.partial} partly busy (not usable with --exclusive)")
        if self.small:
            bits.append(f"{self.small} with fewer free GPUs than --gpus-per-node")
        if self.excluded:
            bits.append(f"{self.excluded} left out by --nodelist/--exclude")
        n = len(self.nodes)
        text = f"on {n} usable node{'s' * (n != 1)} of {self.total_nodes}"
        return text + (f" ({', '.join(bits)})" if bits else "")


def signature_of(index: Dict[Tuple[int, Tuple[int, ...]], int],
                 sigs: List[Tuple[Hardware, Tuple[int, ...]]], hw: Hardware,
                 free: Tuple[int, ...]) -> int:
    """The number of the signature (node type, free GPUs) in ``sigs``,
    appended when new; ``index`` maps each signature to its number (keyed
    by the node type's identity: the objects live in ``sigs``)."""
    key = (id(hw), free)
    s = index.get(key)
    if s is None:
        s = index[key] = len(sigs)
        sigs.append((hw, free))
    return s


def node_refusal(st: Optional[NodeState], hw: Hardware, exclusive: bool) -> Optional[str]:
    """Why a node in state ``st`` takes no rank of a job whatever its free
    GPUs: the :class:`Candidates` count it adds to ("unknown", "unusable",
    "full", "partial"); None when its free GPUs may be used. The one rule,
    for :func:`candidates` and the daemon's kept candidates."""
    if st is None:
        return None
    if (st.state not in USABLE_STATES or st.flags) and not st.usable:
        return "unknown" if UNKNOWN_TO_SLURM in st.flags else "unusable"
    if st.exclusive:
        return "full"
    busy = st.busy_gpus
    if exclusive and (busy or st.state in ("allocated", "mixed")):
        return "partial" if len(busy) < hw.gpu_count else "full"
    return None


def too_small(n_free: int, hw: Hardware, gpus_per_node: Optional[int],
              min_free: Optional[int]) -> bool:
    """``--gpus-per-node``: fewer free GPUs than a node must give the job,
    or fewer GPUs than the count at all (``min_free``: the count, or the
    whole job when it is smaller)."""
    return min_free is not None and (n_free < min_free or hw.gpu_count < gpus_per_node)


def _pod_counts(nodes: List[Tuple[int, Node, Tuple[int, ...]]], sig_of: Dict[int, int],
                node_pod: List[int]) -> Tuple[Dict[int, Dict[int, int]], Dict[int, int]]:
    """pod -> {signature: nodes} and pod -> free GPUs of ``nodes``."""
    pod_sigs: Dict[int, Dict[int, int]] = {}
    pod_free: Dict[int, int] = {}
    for i, _, free in nodes:
        p = node_pod[i]
        d = pod_sigs.setdefault(p, {})
        d[sig_of[i]] = d.get(sig_of[i], 0) + 1
        pod_free[p] = pod_free.get(p, 0) + len(free)
    return pod_sigs, pod_free


def candidates(inv: Inventory, state: Optional[ClusterState], req: JobRequest,
               node_pod: Optional[List[int]] = None) -> Candidates:
    """Nodes that may take ranks of ``req``: in ``--nodelist`` (when
    given), not in ``--exclude``, usable in ``state``, with free GPUs;
    with ``exclusive`` only wholly free nodes; with ``gpus_per_node=g``
    only nodes with at least ``g`` free GPUs.

    One pass over the inventory (this is the hot loop on a 100,000-GPU
    cluster): nodes are grouped into signatures (hardware, free GPUs) on
    the way, and, given ``node_pod`` (inventory index -> pod), counted per
    pod."""
    allowed = None
    if req.nodelist is not None:
        allowed = set(req.nodelist)
        unknown = [h for h in req.nodelist if h not in inv.nodes]
        if unknown:
            raise PlacementError(f"--nodelist names {len(unknown)} node(s) not in the inventory: "
                                 f"{', '.join(unknown[:5])}")
    excluded_set = set(req.exclude)
    g = req.gpus_per_node
    min_free = None if g is None else min(g, req.layout.world)
    if g is not None:
        # Slurm refuses --gpus-per-node above what a node has: say so now,
        # not after the script is written
        most = max((n.hardware.gpu_count for n in inv.nodes.values()), default=0)
        if g > most:
            raise PlacementError(f"needs {g} GPUs per node (--gpus-per-node), more than any "
                                 f"node has (the most is {most})")
    out = []
    excluded = 0
    refused = dict.fromkeys(REFUSALS, 0)
    states = state.nodes if state is not None else {}
    exclusive = req.exclusive
    # signature key: (id(hardware), busy frozenset or None) -> signature
    sig_index: Dict[Tuple[int, object], int] = {}
    sigs: List[Tuple[Hardware, Tuple[int, ...]]] = []
    sig_len: List[int] = []
    sig_of: Dict[int, int] = {}
    pod_sigs: Dict[int, Dict[int, int]] = {}
    pod_free: Dict[int, int] = {}
    total_free = 0
    filter_names = allowed is not None or bool(excluded_set)
    # the signature of the last node of an idle run (the previous node's
    # hardware, not in the state): the next such node of that hardware
    # takes the same in one comparison
    run_hw = run_free = None
    run_s = run_n = 0
    for i, node in enumerate(inv.nodes.values()):
        if node.hardware is run_hw and not filter_names and node.name not in states:
            s, free, n_free = run_s, run_free, run_n
        else:
            run_hw = None
            if filter_names:
                name = node.name
                if (allowed is not None and name not in allowed) or name in excluded_set:
                    excluded += 1
                    continue
            hw = node.hardware
            st = states.get(node.name) if states else None
            if st is None:
                key = (id(hw), None)
            else:
                why = node_refusal(st, hw, exclusive)
                if why is not None:
                    refused[why] += 1
                    continue
                key = (id(hw), st.busy_gpus or None)
            s = sig_index.get(key)
            if s is None:
                busy = key[1]
                free = tuple(x.index for x in hw.gpus if busy is None or x.index not in busy)
                s = len(sigs)
                sig_index[key] = s
                sigs.append((hw, free))
                sig_len.append(len(free))
            n_free = sig_len[s]
            if not n_free:
                refused["full"] += 1
                continue
            if too_small(n_free, hw, g, min_free):
                refused["small"] += 1
                continue
            free = sigs[s][1]
            if key[1] is None:
                run_hw, run_free, run_s, run_n = hw, free, s, n_free
        out.append((i, node, free))
        sig_of[i] = s
        total_free += n_free
        if node_pod is not None:
            p = node_pod[i]
            d = pod_sigs.get(p)
            if d is None:
                pod_sigs[p] = {s: 1}
                pod_free[p] = n_free
            else:
                d[s] = d.get(s, 0) + 1
                pod_free[p] += n_free
    return Candidates(nodes=out, total_nodes=len(inv.nodes), excluded=excluded, **refused,
                      free_gpus=total_free, sigs=sigs, sig_of=sig_of, pod_sigs=pod_sigs,
                      pod_free=pod_free)


def not_enough_gpus(req: JobRequest, cand: Candidates) -> Optional[PlacementError]:
    """The error when the usable nodes cannot hold the job whatever the
    topology, or None when they have enough GPUs."""
    world = req.layout.world
    g = req.gpus_per_node
    if g is not None and world > g:
        need = -(-world // g)
        if len(cand.nodes) < need:
            return PlacementError(
                f"needs {need} nodes with {g} free GPUs each (--gpus-per-node {g}); only "
                f"{len(cand.nodes)} of {cand.total_nodes} nodes have {g} free"
                f"{_tail(cand)}")
    if cand.free_gpus < world:
        return PlacementError(f"needs {world} GPUs; only {cand.free_gpus} are free "
                              f"{cand.summary()}")
    return None


def _tail(cand: Candidates) -> str:
    s = cand.summary()
    i = s.find(" (")
    return s[i:] if i >= 0 else ""


# --------------------------------------------------------------------------
# NICs and CPUs


def nic_choice(hw: Hardware) -> Tuple[Tuple[str, ...], ...]:
    """Per GPU: the compute NICs with the best PCIe relation to it (all
    ties), best first. Ties are ordered by rate (fastest first), then by how
    few GPUs share the NIC, then rotated by the GPU's position among the
    GPUs that tie on the same NICs, so GPUs 0 and 1 sharing mlx5_0 and
    mlx5_1 get (mlx5_0, mlx5_1) and (mlx5_1, mlx5_0): both NICs carry
    traffic when each rank uses its first NIC. NICs reported down are used
    only when no compute NIC is up. Kept in the hardware's derived tables."""
    return hw.derived.get("placement.nic_choice", lambda: _nic_choice(hw))


def _nic_choice(hw: Hardware) -> Tuple[Tuple[str, ...], ...]:
    nics = [n for n in hw.compute_nics() if n.state != "down"] or list(hw.compute_nics())
    best: List[Tuple[int, ...]] = []
    for g in range(hw.gpu_count):
        if not nics:
            best.append(())
            continue
        rel = [n.relation_to(g) for n in nics]
        top = min(rel)
        best.append(tuple(i for i, r in enumerate(rel) if r == top))
    share = [sum(1 for b in best if i in b) for i in range(len(nics))]
    out: List[Tuple[str, ...]] = []
    tie_groups: Dict[Tuple[int, ...], List[int]] = {}
    for g, b in enumerate(best):
        tie_groups.setdefault(b, []).append(g)
    for g, b in enumerate(best):
        ordered = sorted(b, key=lambda i: (-(nics[i].rate_gbps or 0.0), share[i], i))
        if len(ordered) > 1:
            peers = tie_groups[b]
            r = peers.index(g) % len(ordered)
            ordered = ordered[r:] + ordered[:r]
        out.append(tuple(nics[i].name for i in ordered))
    return tuple(out)


# --------------------------------------------------------------------------
# building the Placement


def _per_gpu(hw: Hardware) -> Dict[int, Tuple]:
    """GPU index -> (NICs, CPUs, NUMA node), once per hardware object."""
    def build() -> Dict[int, Tuple]:
        nics = nic_choice(hw)
        return {g.index: (nics[i] if i < len(nics) else (), g.cpus, g.numa_node)
                for i, g in enumerate(hw.gpus)}
    return hw.derived.get("placement.per_gpu", build)


def build_placement(inv: Inventory, req: JobRequest, assign: Sequence[Tuple[str, int]],
                    notes: Sequence[str] = (), groups=None) -> Placement:
    """``assign[rank] = (host, gpu)`` -> Placement. Local ranks number the
    ranks of a host in global-rank order (what Slurm's SLURM_LOCALID is when
    tasks are laid out by a hostfile); hosts are listed in order of first
    use by rank 0, 1, ..."""
    if groups is None:
        groups = build_groups(req.layout)
    local: Dict[str, int] = {}
    hosts: List[str] = []
    slots: List[RankSlot] = []
    nodes = inv.nodes
    tables: Dict[str, Dict[int, Tuple]] = {}
    # RankSlot is a NamedTuple: built as the tuple it is, without its
    # generated __new__ (a Python call a rank)
    new_slot, append = tuple.__new__, slots.append
    for rank, (host, gpu) in enumerate(assign):
        lr = local.get(host)
        if lr is None:
            lr = 0
            hosts.append(host)
            tables[host] = _per_gpu(nodes[host].hardware)
        local[host] = lr + 1
        nics, cpus, numa = tables[host][gpu]
        append(new_slot(RankSlot, (rank, host, gpu, lr, nics, cpus, numa)))
    return Placement(slots=tuple(slots), groups=groups, hosts=tuple(hosts), notes=tuple(notes))
