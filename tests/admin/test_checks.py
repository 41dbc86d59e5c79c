"""The checks before writing: what Slurm rejects, what would drop nodes."""
from __future__ import annotations

import pytest

from slurmtopo.slurmfmt.checks import (ERROR, REFUSE, WARNING, Problem, check_blocks, check_text,
                                       check_tree, enforce, valid_block_sizes)
from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Block, Fabric, Switch

TREE = Fabric(switches=(Switch("l1", nodes=("a1", "a2")), Switch("l2", nodes=("a3", "a4")),
                        Switch("top", switches=("l1", "l2"))))


def kinds(problems):
    return [(p.severity, p.message) for p in problems]


def test_good_tree_has_no_problem():
    assert check_tree(TREE, ["a1", "a2", "a3", "a4"]) == []


def test_node_of_slurm_conf_on_no_switch_is_refused():
    problems = check_tree(TREE, ["a1", "a2", "a3", "a4", "a5", "a6"])
    assert [p.severity for p in problems] == [REFUSE]
    assert "2 node(s) of slurm.conf are on no switch: a[5-6]" in problems[0].message


def test_node_unknown_to_slurm_conf_is_refused():
    problems = check_tree(TREE, ["a1", "a2", "a3"])
    assert [p.severity for p in problems] == [REFUSE]
    assert "not in slurm.conf: a4" in problems[0].message


def test_switch_without_parent_when_others_have_one():
    f = Fabric(switches=TREE.switches + (Switch("l3", nodes=("a5",)),))
    problems = check_tree(f)
    assert [p.severity for p in problems] == [REFUSE]
    assert problems[0].message.startswith("switch(es) l3 have no parent")


def test_two_roots_are_refused_but_a_lone_leaf_is_fine():
    two = Fabric(switches=TREE.switches + (Switch("l3", nodes=("a5",)),
                                           Switch("top2", switches=("l3",))))
    assert [p.severity for p in check_tree(two)] == [REFUSE]
    assert check_tree(Fabric(switches=(Switch("only", nodes=("a1",)),))) == []


@pytest.mark.parametrize("switches,words", [
    ((), "no switches"),
    ((Switch("s", nodes=("a1",)), Switch("s", nodes=("a2",))), "used twice"),
    ((Switch("s" * 65, nodes=("a1",)),), "longer than 64"),
    ((Switch("s[1]", nodes=("a1",)),), "not a plain name"),
    ((Switch("s", nodes=("a1",), switches=("t",)), Switch("t", nodes=("a2",))), "both Nodes"),
    ((Switch("s", switches=("x",)),), "not defined"),
    ((Switch("s", switches=("s",)),), "itself"),
    ((Switch("s"),), "neither nodes nor switches"),
    ((Switch("s", switches=("t",)), Switch("t", switches=("s",))), "do not form a tree"),
])
def test_what_slurm_rejects(switches, words):
    problems = check_tree(Fabric(switches=switches))
    assert any(p.severity == ERROR and words in p.message for p in problems), kinds(problems)


def test_node_on_two_leaves_is_a_warning():
    f = Fabric(switches=(Switch("l1", nodes=("a1", "a2")), Switch("l2", nodes=("a2",)),
                         Switch("top", switches=("l1", "l2"))))
    assert [p.severity for p in check_tree(f)] == [WARNING]


@pytest.mark.parametrize("sizes,ok", [
    ((), True), ((18,), True), ((18, 36, 72), True), ((30, 120), True), ((4, 16, 1024), True),
    ((4, 12), False), ((4, 6), False), ((8, 4), False), ((4, 4), False), ((0,), False),
    ((1, 2 ** 16), False), ((1, 2 ** 15), True),
])
def test_block_sizes_rules(sizes, ok):
    assert (valid_block_sizes(sizes) is None) == ok


def test_block_checks():
    good = Fabric(blocks=(Block("b1", ("a1", "a2")), Block("b2", ("a3", "a4", "a5"))),
                  block_sizes=(2, 4))
    assert check_blocks(good, ["a1", "a2", "a3", "a4", "a5"]) == []
    small = Fabric(blocks=(Block("b1", ("a1", "a2")), Block("b2", ("a3",))))
    assert "fewer than the base block size 2" in check_blocks(small)[0].message
    # slurmctld loads a block smaller than the base (topograph writes them for
    # small sub-domains): a warning, not a refusal
    assert check_blocks(Fabric(blocks=(Block("b1", ("a1",)),), block_sizes=(2,)))[0].severity \
        == WARNING
    # placeholders (no nodes) keep positions; all placeholders is an error
    holder = Fabric(blocks=(Block("b1", ("a1", "a2")), Block("b2", ())), block_sizes=(2, 4))
    assert check_blocks(holder, ["a1", "a2"]) == []
    empty = check_blocks(Fabric(blocks=(Block("b1", ()),), block_sizes=(2,)))
    assert [p.severity for p in empty] == [ERROR] and "no block has nodes" in empty[0].message
    shared = Fabric(blocks=(Block("b1", ("a1", "a2")), Block("b2", ("a2", "a3"))))
    assert [p.severity for p in check_blocks(shared)] == [REFUSE]
    assert check_blocks(Fabric())[0].message.startswith("no blocks")
    missing = check_blocks(good, ["a1", "a2", "a3", "a4", "a5", "a6"])
    assert [p.severity for p in missing] == [REFUSE]


def test_text_checks():
    assert check_text("# only a comment\n\n", "topology.conf")[0].message == \
        "topology.conf would be empty"
    long = "SwitchName=s Nodes=" + ",".join(f"n{i}x" for i in range(2000)) + "\n"
    problems = check_text(long, "topology.conf")
    assert problems and "Slurm reads at most 4095" in problems[0].message
    assert check_text("SwitchName=s Nodes=a1\n", "topology.conf") == []


def test_enforce():
    said = []
    enforce([Problem(WARNING, "w")], "x", echo=said.append)
    assert said == ["warning: w"]
    with pytest.raises(SlurmtopoError, match="not writing x: r .--force"):
        enforce([Problem(REFUSE, "r")], "x")
    enforce([Problem(REFUSE, "r")], "x", force=True, echo=said.append)
    assert said[-1] == "forced: r"
    with pytest.raises(SlurmtopoError, match="Slurm would reject"):
        enforce([Problem(ERROR, "e"), Problem(REFUSE, "r")], "x", force=True)


# -- the file format against slurm.conf's TopologyPlugin and the release ----------

from slurmtopo.slurmfmt.checks import check_plugin, topology_plugin  # noqa: E402


@pytest.mark.parametrize("value, name", [
    (None, "flat"), ("", "flat"), ("none", "flat"), ("topology/none", "flat"),
    ("topology/default", "flat"), ("topology/flat", "flat"), ("topology/tree", "tree"),
    ("Topology/Block", "block"), ("tree", "tree"), ("topology/3d_torus", "3d_torus"),
])
def test_topology_plugin_names(value, name):
    assert topology_plugin(value) == name


@pytest.mark.parametrize("fmt, plugin, version, beside, want", [
    ("tree", "topology/tree", None, False, []),
    ("block", "topology/block", None, False, []),
    ("block", "topology/tree", None, False, [ERROR]),   # slurmctld: fatal
    ("tree", "topology/block", None, False, [ERROR]),
    ("tree", "topology/block", (22, 5, 0), False, [ERROR]),
    ("tree", None, None, False, [WARNING]),               # nothing reads topology.conf
    ("tree", "topology/tree", None, True, [REFUSE]),     # 25.05+ reads topology.yaml instead
    ("tree", "topology/tree", (24, 11, 0), True, []),    # ... older releases do not
    ("yaml", None, None, False, []),
    ("yaml", None, (25, 5, 0), False, []),
    ("yaml", None, (24, 11, 6), False, [REFUSE]),         # reads no topology.yaml
    ("yaml", "topology/tree", None, False, [WARNING]),   # TopologyPlugin is ignored
])
def test_format_against_topology_plugin(fmt, plugin, version, beside, want):
    from slurmtopo.slurmfmt.slurm_conf import SlurmConf

    problems = check_plugin(fmt, SlurmConf(topology_plugin=plugin), version, yaml_beside=beside)
    assert [p.severity for p in problems] == want
    if fmt != "yaml" or version is None:  # without slurm.conf: only the release counts
        assert check_plugin(fmt, None, version) == []
