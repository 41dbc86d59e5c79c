"""Slurm's node choice (placement/slurm_select.py) on clusters small enough
to follow Slurm's source by hand.

The cluster: n1-n6 (8 H100 each), leaf1 = n1-n2, leaf2 = n3-n5, leaf3 = n6,
all under one spine; nodes in that order (slurm.conf order).
"""
from __future__ import annotations

import pytest

from slurmtopo.errors import PlacementError
from slurmtopo.job.groups import Layout
import yaml

from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.inventory.schema import parse_inventory
from slurmtopo.job.request import JobRequest
from slurmtopo.placement.baselines import slurm_plan
from slurmtopo.placement.slurm_select import leaves_used, slurm_pick, switch_table

INV = """slurmtopo: inventory
version: 1
nodes:
  - {name: "n[1-6]", type: hgx-h100-8}
fabric:
  switches:
    - {name: leaf1, nodes: "n[1-2]"}
    - {name: leaf2, nodes: "n[3-5]"}
    - {name: leaf3, nodes: n6}
    - {name: spine, switches: "leaf[1-3]"}
"""


def _six():
    return parse_inventory(yaml.safe_load(INV), "six.yaml")


@pytest.fixture(scope="module")
def inv():
    return _six()


def state(**busy) -> ClusterState:
    """n1="0-3" -> n1 with GPUs 0-3 busy."""
    out = {}
    for name, text in busy.items():
        gpus = set()
        for part in text.split(","):
            a, _, b = part.partition("-")
            gpus.update(range(int(a), int(b or a) + 1))
        out[name] = NodeState(name, state="mixed", busy_gpus=frozenset(gpus))
    return ClusterState(nodes=out)


def hosts(inv, st, world, gpn, topology="tree"):
    pl = slurm_plan(inv, st, JobRequest(Layout(dp=world), gpus_per_node=gpn), topology)
    return list(pl.hosts)


def test_the_switch_table(inv):
    t = switch_table(inv)
    assert t.names == ("leaf1", "leaf2", "leaf3", "spine")
    assert t.level == (0, 0, 0, 1) and t.parent == (3, 3, 3, None)
    assert t.nodes[1] == (2, 3, 4) and t.nodes[3] == (0, 1, 2, 3, 4, 5)
    assert t.dist[0] == (0, 2, 2, 1)
    assert leaves_used(inv, ["n1", "n2"]) == 1 and leaves_used(inv, ["n2", "n6"]) == 2


def test_tree_best_fit_leaf(inv):
    # 2 nodes: leaf1 (2 nodes) and leaf2 (3) hold it; the fewest wins
    assert hosts(inv, None, 16, 8) == ["n1", "n2"]
    # 3 nodes: only leaf2
    assert hosts(inv, None, 24, 8) == ["n3", "n4", "n5"]
    # one node, n1 partly busy: leaf1 and leaf3 have one eligible node
    # each, leaf2 three: the first of the fewest, leaf1, and its node n2
    assert hosts(inv, state(n1="0"), 8, 8) == ["n2"]
    # one node of 4: every node holds it; leaf3 has the fewest (one)
    assert hosts(inv, state(n2="0-3"), 4, 4) == ["n6"]
    # n6 too full for it: leaf1 (two) before leaf2 (three), and inside the
    # leaf node order, not the node with the fewest free GPUs (n2, 4 free)
    assert hosts(inv, state(n2="0-3", n6="0-4"), 4, 4) == ["n1"]


def test_tree_no_leaf_holds_it(inv):
    # 4 nodes: no leaf holds them. The largest leaf first (leaf2: n3-n5),
    # then, at equal distance, the leaf that holds the rest with the fewest
    # nodes (leaf3: n6) rather than leaf1
    assert hosts(inv, None, 32, 8) == ["n3", "n4", "n5", "n6"]
    # with n6 busy: leaf2, then leaf1's first node
    assert hosts(inv, state(n6="0"), 32, 8) == ["n1", "n3", "n4", "n5"]


def test_gpus_per_job_prefers_whole_free_nodes(inv):
    # --gpus=12 (no per-node count): a node weighs less the more GPUs it
    # can give, so the whole free nodes (n3, n6 here) are the first tier,
    # which holds 16 >= 12. The job asks one node at least, so every leaf
    # with one of them "holds" it: leaf2 and leaf3 tie (one node each) and
    # leaf2 comes first: n3 (8 GPUs); then, the nearest leaf with nodes of
    # the tier, leaf3: n6 gives the other 4
    st = state(n1="0-1", n2="0-5", n4="0-3", n5="0")
    pl = slurm_plan(inv, st, JobRequest(Layout(dp=12)), "tree")
    assert sorted(pl.hosts) == ["n3", "n6"]
    assert [s.gpu for s in pl.slots if s.host == "n3"] == list(range(8))


def test_flat_best_fit_runs(inv):
    # one run n1-n6: a 2-node job takes its first two nodes
    assert hosts(inv, None, 16, 8, "flat") == ["n1", "n2"]
    # n3 busy ends the run: [n1, n2] (16 free) beats [n4-n6] (24) for 2 nodes
    assert hosts(inv, state(n3="0"), 16, 8, "flat") == ["n1", "n2"]
    # 3 nodes: only [n4-n6] holds them
    assert hosts(inv, state(n3="0"), 24, 8, "flat") == ["n4", "n5", "n6"]
    # one node of 4: the node with the fewest free GPUs that holds it (n2, 5 free)
    assert hosts(inv, state(n2="0-2", n5="0-1"), 4, 4, "flat") == ["n2"]


def test_gpus_inside_a_node():
    inv = _six()
    hw = inv.nodes["n1"].hardware
    numa = [g.numa_node for g in hw.gpus]
    assert numa == [0, 0, 0, 0, 1, 1, 1, 1]
    # the socket with the most free GPUs first, lowest indices first
    assert slurm_pick(hw, [0, 1, 4, 5, 6], 2) == (4, 5)
    assert slurm_pick(hw, [0, 1, 4, 5, 6], 4) == (0, 4, 5, 6)
    # best fit without topology: n1 (5 free); its socket 1 has 4 free, socket 0 one
    pl = slurm_plan(inv, state(n1="0-2"), JobRequest(Layout(dp=2), gpus_per_node=2), "flat")
    assert [(s.host, s.gpu) for s in pl.slots] == [("n1", 4), ("n1", 5)]


def test_refusals(inv):
    with pytest.raises(PlacementError, match="needs 7 nodes"):
        slurm_plan(inv, None, JobRequest(Layout(dp=56), gpus_per_node=8))
    # every node partly busy: no node has 8 free
    st = state(**{f"n{i}": "0" for i in range(1, 7)})
    with pytest.raises(PlacementError):
        slurm_plan(inv, st, JobRequest(Layout(dp=8), gpus_per_node=8))
