"""The cluster as a tree of scopes, for choosing nodes.

The planner sees the cluster as::

    root -> network levels (L_max ... L1) -> pods -> nodes

A *pod* is the widest group of nodes whose GPUs talk without leaving a
network switch: a multi-node NVLink domain (GB200 NVL72 rack) when the
nodes have one, otherwise a leaf switch; in a fabric with no switches it is
a Slurm block (or the whole cluster). Nodes a leaf does not list are pods
of their own. Above the pods, L1 groups the pods under the same level-1
switch (spine), L2 under the same level-2 switch, and so on; with several
parents (a fat tree) the first by name is used, which is what
:meth:`~slurmtopo.inventory.topology.NetworkView.switch_at` returns.

Children of every scope are ordered by their first node's inventory index,
so a depth-first walk visits nodes in "tree order": all nodes of a pod
together, all pods of a spine together. The planner hands out consecutive
rank positions in that order.

The tree depends only on the inventory, so it is built once and cached on
the inventory object (invalidated when its nodes or fabric are replaced).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Inventory
from slurmtopo.inventory.topology import block_of, network_view


@dataclass
class Scope:
    """One scope of the tree: the root, a network level group, or a pod."""

    key: Tuple
    depth: int  # 0 = root, then network levels, the pods are deepest
    first: int = 1 << 60  # smallest inventory index below
    children: List["Scope"] = field(default_factory=list)
    #: for pods: inventory indices of member nodes, in inventory order
    members: List[int] = field(default_factory=list)
    is_pod: bool = False
    is_domain: bool = False
    #: a readable name ("leaf03", "NVLink domain 5b1a.../1", "spine1")
    name: str = ""
    #: for network scopes: the switch level (1 = spine); 0 for pods
    level: int = 0
    index: int = -1  # position in FabricTree.pods for pods


@dataclass
class FabricTree:
    root: Scope
    pods: List[Scope]
    #: inventory index -> pod index
    node_pod: List[int]
    #: inventory index -> position in depth-first (tree) order
    tree_order: List[int]
    names: List[str]
    #: inventory index -> Node
    nodes: List[object]
    #: the switch fabric is described (otherwise every host is on one
    #: virtual leaf and the leaf/spine levels constrain nothing)
    flat: bool
    levels: int  # number of network levels above the pods
    #: pod index -> its L1 scope (the spine group)
    pod_l1: List[Scope]
    has_domains: bool
    #: the scopes above the pods, each after its children (the root last):
    #: sums up the tree are one pass over the pods and one over this list
    upper: List[Scope]
    #: pod index -> its network scopes, level 1 (the spine group) first
    pod_up: List[Tuple[Scope, ...]] = field(default_factory=list)

    def meet_class(self, pods) -> LinkClass:
        """The network class at which the hosts of the pods ``pods`` (pod
        indices) meet, as the cost model names it: ``NET_LEAF`` inside one
        pod or on a fabric without switches, ``NET_L1`` under one spine
        group, ... ``NET_FAR`` when they share no switch (a host no leaf
        lists). The tree keeps one parent per level (the first by name),
        so on a fat tree whose leaves have different parents this can be
        a level above what the cost model finds."""
        pods = list(pods)
        if self.flat or len(pods) < 2:
            return LinkClass.NET_LEAF
        chains = [self.pod_up[p] for p in pods]
        for lvl in range(self.levels):
            first = chains[0][lvl]
            if all(c[lvl] is first for c in chains[1:]):
                return LinkClass.network(lvl + 1)
        return LinkClass.NET_FAR


def _pod_key(inv: Inventory, view, blocks, name: str, node) -> Tuple[Tuple, str, bool]:
    if node.nvlink_domain is not None:
        key = node.nvlink_domain.key
        return ("domain", key), f"NVLink domain {key}", True
    if not view.flat:
        leaf = view.leaf.get(name)
        if leaf is not None:
            return ("leaf", leaf), leaf, False
        return ("host", name), name, False
    if name in blocks:
        return ("block", blocks[name]), f"block {blocks[name]}", False
    return ("flat",), "the cluster", False


def build_tree(inv: Inventory) -> FabricTree:
    view = network_view(inv.fabric)
    blocks = block_of(inv) if view.flat else {}
    names = list(inv.nodes)
    max_level = max(view.levels.values()) if view.levels else 0
    pods: Dict[Tuple, Scope] = {}
    pod_list: List[Scope] = []
    node_pod: List[int] = []
    # leaf name -> its pod, once made: most nodes of a described fabric
    # join a pod that exists already, in one lookup (12,500 of them)
    leaf_pods: Dict[str, Scope] = {}
    leaf_of = {} if view.flat else view.leaf
    for i, (name, node) in enumerate(inv.nodes.items()):
        if node.nvlink_domain is None:
            pod = leaf_pods.get(leaf_of.get(name))  # type: ignore[arg-type]
            if pod is not None:
                pod.members.append(i)
                node_pod.append(pod.index)
                continue
        key, label, dom = _pod_key(inv, view, blocks, name, node)
        pod = pods.get(key)
        if pod is None:
            pod = Scope(key=key, depth=max_level + 1, first=i, is_pod=True, is_domain=dom,
                        name=label, index=len(pod_list))
            pods[key] = pod
            pod_list.append(pod)
            if key[0] == "leaf":
                leaf_pods[key[1]] = pod
        pod.members.append(i)
        node_pod.append(pod.index)

    root = Scope(key=("root",), depth=0, name="cluster", first=0, level=max_level + 1)
    # network scopes: level L groups by the first switch at level L above
    # the pod's first node; a pod with no switch at a level is alone there
    scopes: Dict[Tuple, Scope] = {}
    pod_l1: List[Scope] = []
    pod_up: List[Tuple[Scope, ...]] = []
    for pod in pod_list:
        rep = names[pod.first]
        parent = root
        l1 = None
        chain: List[Scope] = []
        for lvl in range(max_level, 0, -1):
            if view.flat:
                k = ("flat", lvl)
                label = "cluster"
            else:
                sw = view.switch_at(rep, lvl)
                k = ("sw", lvl, sw) if sw is not None else ("none", lvl, pod.key)
                label = sw if sw is not None else pod.name
            sc = scopes.get(k)
            if sc is None:
                sc = Scope(key=k, depth=max_level - lvl + 1, first=pod.first, name=label,
                           level=lvl)
                scopes[k] = sc
                parent.children.append(sc)
            parent = sc
            chain.append(sc)
            if lvl == 1:
                l1 = sc
        parent.children.append(pod)
        if l1 is None:  # no network levels: the pod is its own spine group
            l1 = pod
        pod_l1.append(l1)
        pod_up.append(tuple(reversed(chain)))

    # children in first-index order; depth-first order of nodes
    order: List[int] = [0] * len(names)
    counter = 0

    def walk(sc: Scope) -> None:
        nonlocal counter
        if sc.is_pod:
            for i in sc.members:
                order[i] = counter
                counter += 1
            return
        sc.children.sort(key=lambda c: c.first)
        for c in sc.children:
            walk(c)

    walk(root)
    upper: List[Scope] = []  # the scopes above the pods, children first

    def post(sc: Scope) -> None:
        for c in sc.children:
            if not c.is_pod:
                post(c)
        upper.append(sc)

    if not root.is_pod:
        post(root)
    return FabricTree(root=root, pods=pod_list, node_pod=node_pod, tree_order=order,
                      names=names, nodes=list(inv.nodes.values()), flat=view.flat,
                      levels=max_level, pod_l1=pod_l1,
                      has_domains=any(p.is_domain for p in pod_list), upper=upper,
                      pod_up=pod_up)


#: the tree's name in the inventory's derived tables
TABLE = "placement.fabric_tree"


def fabric_tree(inv: Inventory) -> FabricTree:
    """The tree of ``inv``, kept in its derived tables and rebuilt when
    ``inv.nodes`` or ``inv.fabric`` is replaced or the node count changes
    (:meth:`~slurmtopo.inventory.model.Inventory.derive`)."""
    return inv.derive(TABLE, lambda: build_tree(inv))


# --------------------------------------------------------------------------
# the tree as JSON, for a compiled inventory's entry (slurmtopo.inventory.cache)


def _runs(values: List[int], step: int) -> List[List[int]]:
    """``values`` as [first, count] runs that go up by ``step`` (0: equal
    values, 1: consecutive ones): a pod's members, the node -> pod table
    and the tree order are a few hundred runs for 12,500 nodes."""
    out: List[List[int]] = []
    for v in values:
        if out and out[-1][0] + step * out[-1][1] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def _unruns(runs, step: int) -> List[int]:
    out: List[int] = []
    for first, count in runs:
        if not isinstance(first, int) or not isinstance(count, int) or count < 1:
            raise ValueError("a run")
        out.extend(range(first, first + count) if step else [first] * count)
    return out


def _tuple(v):
    """A scope key read back from JSON: its lists as tuples again."""
    return tuple(_tuple(x) if type(x) is list else x for x in v)


def tree_json(tree: FabricTree) -> Dict[str, object]:
    """The tree, JSON-ready (its node list is the inventory's own and is
    not written): every scope once, the pods first, referred to by index."""
    scopes = tree.pods + tree.upper
    at = {id(s): i for i, s in enumerate(scopes)}
    return {"scopes": [[list(s.key), s.depth, s.first, [at[id(c)] for c in s.children],
                        _runs(s.members, 1), s.is_pod, s.is_domain, s.name, s.level, s.index]
                       for s in scopes],
            "pods": len(tree.pods), "node_pod": _runs(tree.node_pod, 0),
            "tree_order": _runs(tree.tree_order, 1), "flat": tree.flat, "levels": tree.levels,
            "pod_l1": [at[id(s)] for s in tree.pod_l1], "has_domains": tree.has_domains,
            "pod_up": [[at[id(s)] for s in up] for up in tree.pod_up]}


def same_tree(a: FabricTree, b: FabricTree) -> bool:
    """``a == b``, in one pass over the scopes: the dataclasses' own
    comparison walks every subtree again from each scope that refers to it
    (the upper scopes, each pod's chain: a tenth of a second at 12,500
    nodes)."""
    sa, sb = a.pods + a.upper, b.pods + b.upper
    if len(sa) != len(sb) or len(a.pods) != len(b.pods):
        return False
    at_a = {id(s): i for i, s in enumerate(sa)}
    at_b = {id(s): i for i, s in enumerate(sb)}

    def refs(at, scopes) -> List[int]:
        return [at.get(id(s), -1) for s in scopes]

    def shallow(s: Scope) -> Tuple:
        return (s.key, s.depth, s.first, s.members, s.is_pod, s.is_domain, s.name, s.level,
                s.index)

    return (all(shallow(x) == shallow(y) and refs(at_a, x.children) == refs(at_b, y.children)
                for x, y in zip(sa, sb))
            and refs(at_a, [a.root]) == refs(at_b, [b.root])
            and refs(at_a, a.pod_l1) == refs(at_b, b.pod_l1)
            and [refs(at_a, u) for u in a.pod_up] == [refs(at_b, u) for u in b.pod_up]
            and (a.node_pod, a.tree_order, a.names, a.nodes, a.flat, a.levels, a.has_domains)
            == (b.node_pod, b.tree_order, b.names, b.nodes, b.flat, b.levels, b.has_domains))


def tree_from_json(d, inv: Inventory) -> FabricTree:
    """The tree :func:`tree_json` wrote, for ``inv``; raises (KeyError,
    TypeError, ValueError, IndexError) on what it did not write."""
    scopes = [Scope(key=_tuple(key) if type(key) is list else key, depth=int(depth), first=int(first), members=_unruns(m, 1),
                    is_pod=bool(is_pod), is_domain=bool(is_dom), name=str(name),
                    level=int(level), index=int(index))
              for key, depth, first, _, m, is_pod, is_dom, name, level, index in d["scopes"]]
    for s, row in zip(scopes, d["scopes"]):
        s.children = [scopes[i] for i in row[3]]
    pods = scopes[:d["pods"]]
    n = len(inv.nodes)
    node_pod, order = _unruns(d["node_pod"], 0), _unruns(d["tree_order"], 1)
    if len(node_pod) != n or len(order) != n or (n and not 0 <= min(node_pod) <= max(
            node_pod) < len(pods)) or sum(len(p.members) for p in pods) != n:
        raise ValueError("the tree does not cover the inventory")
    return FabricTree(root=scopes[-1], pods=pods, node_pod=node_pod, tree_order=order,
                      names=list(inv.nodes), nodes=list(inv.nodes.values()),
                      flat=bool(d["flat"]), levels=int(d["levels"]),
                      pod_l1=[scopes[i] for i in d["pod_l1"]],
                      has_domains=bool(d["has_domains"]), upper=scopes[len(pods):],
                      pod_up=[tuple(scopes[i] for i in up) for up in d["pod_up"]])
