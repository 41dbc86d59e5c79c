"""Spare nodes inside a job's domain (``--spares N``): which extra nodes a
job asks for so that, when one of its nodes is lost, a spare can take its
ranks without any group leaving its NVLink domain, block or leaf
(docs/sbatch.md, "Spare nodes").

A spare must be where a lost node's ranks can go without moving anyone
else: in the same multi-node NVLink domain (a rack) when the job's nodes
have one, else under the same topology/block block, else under the same
leaf switch; and it must have the GPUs of a planned node. The planned
nodes' domains are served in turn, the domain with most planned nodes
first, so that N spares cover as many of them as they can. Pure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import PlacementError
from slurmtopo.inventory.hostlist import fold_hostlist, natural_key
from slurmtopo.inventory.model import ClusterState, Inventory, Placement, free_gpus_of
from slurmtopo.inventory.topology import block_of, network_view


@dataclass(frozen=True)
class SpareChoice:
    hosts: Tuple[str, ...]
    #: the kind of domain the spares share with the planned nodes
    #: ("NVLink domain", "block", "leaf switch", "cluster")
    scope: str
    notes: Tuple[str, ...] = ()


def domain_of(inv: Inventory, host: str) -> Tuple[str, str]:
    """(scope, name) of the domain a replacement for ``host`` must share:
    its multi-node NVLink domain, else its block, else its leaf switch,
    else the whole cluster."""
    node = inv.nodes.get(host)
    if node is not None and node.nvlink_domain is not None:
        return "NVLink domain", node.nvlink_domain.key
    blocks = inv.derive("spares.block_of", lambda: block_of(inv))
    if host in blocks:
        return "block", blocks[host]
    view = network_view(inv.fabric)
    leaf = view.leaf.get(host)
    if leaf is not None:
        return "leaf switch", leaf
    return "cluster", ""


def choose_spares(inv: Inventory, state: Optional[ClusterState], placement: Placement,
                  count: int, queued: bool = False) -> SpareChoice:
    """``count`` spare nodes for ``placement``. A spare has every GPU a
    planned node uses (the same count, the same hardware as one of them),
    is free now (``queued``: when the job waits anyway, any node of the
    domain that could be, whatever runs there now) and sits in a planned
    node's domain. Raises PlacementError naming the domains when there are
    not enough."""
    if count <= 0:
        return SpareChoice((), "")
    state = state or ClusterState()
    by_host = placement.by_host()
    planned = [h for h, s in by_host.items() if s]
    per = {len(s) for s in by_host.values() if s}
    if len(per) != 1:
        raise PlacementError("--spares needs the same number of ranks on every planned node "
                             "(a spare takes a lost node's ranks as they are); give "
                             "--gpus-per-node")
    need = per.pop()
    hardware = {inv.nodes[h].hardware for h in planned}
    doms: Dict[Tuple[str, str], List[str]] = {}
    for h in planned:
        doms.setdefault(domain_of(inv, h), []).append(h)
    taken = set(planned)
    candidates: Dict[Tuple[str, str], List[str]] = {d: [] for d in doms}
    for node in sorted(inv, key=lambda n: natural_key(n.name)):
        if node.name in taken or node.hardware not in hardware:
            continue
        d = domain_of(inv, node.name)
        if d not in candidates:
            continue
        st = state.nodes.get(node.name)
        if queued:
            ok = st is None or st.usable or not _down(st)
        else:
            ok = len(free_gpus_of(node, st)) >= need
        if ok:
            candidates[d].append(node.name)
    order = sorted(doms, key=lambda d: (-len(doms[d]), natural_key(d[1])))
    chosen: List[str] = []
    while len(chosen) < count and any(candidates[d] for d in order):
        for d in order:
            if candidates[d] and len(chosen) < count:
                chosen.append(candidates[d].pop(0))
    scopes = sorted({d[0] for d in doms})
    scope = scopes[0] if len(scopes) == 1 else " or ".join(scopes)
    if len(chosen) < count:
        where = "; ".join(f"{d[0]} {d[1] or '(whole cluster)'}: planned {len(doms[d])}"
                          for d in order)
        raise PlacementError(f"--spares {count}: only {len(chosen)} free node(s) with the "
                             f"planned GPUs in the job's {scope} ({where}); ask for fewer "
                             "spares, or wait until nodes there are free")
    uncovered = [d for d in order if not any(domain_of(inv, h) == d for h in chosen)]
    notes: List[str] = []
    if uncovered:
        notes.append(f"no spare in {', '.join(f'{d[0]} {d[1]}' for d in uncovered)}: a node "
                     "lost there is replaced from another domain (its groups then leave it)")
    return SpareChoice(tuple(chosen), scope, tuple(notes))


def _down(st) -> bool:
    return st.state in ("down", "fail", "future") or bool(
        st.flags & {"down", "fail", "not_responding", "drain", "drained", "maint"})


def spare_hosts_line(spares: Sequence[str], scope: str, restarts: int) -> str:
    """The script comment and note about the spares."""
    return (f"spares: {fold_hostlist(list(spares))} (idle, in the job's {scope}; --no-kill: when "
            f"a node is lost the step restarts on a spare, at most {restarts} time"
            f"{'s' if restarts != 1 else ''})")
