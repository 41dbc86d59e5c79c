"""Domains inside domains as topograph 1.0 writes them.

Cases marked TOPOGRAPH are taken from NVIDIA/topograph at commit
e2b625071e327ee5c3bb119d8a31289a818c30fc (pkg/translate/block_complement_test.go,
pkg/translate/block_test.go, pkg/topology/domain_test.go and the table in
docs/engines/slurm.md): the same input must give the same BlockSizes, the
same placeholders and the same names.
"""
import pytest

from slurmtopo.admin.block_domains import (BlockNaming, DomainBlock, domain_blocks,
                                           doubling_sizes, two_level_sizes)
from slurmtopo.errors import SlurmtopoError


def flat(**domains):
    """domain -> hosts, no sub-domains."""
    return {d: {h: "" for h in hosts} for d, hosts in domains.items()}


def lines(blocks):
    """(name, domain, nodes) per block, placeholders as (name,)."""
    return [(b.name, b.domain, b.nodes) if b.nodes else (b.name,) for b in blocks]


# TOPOGRAPH pkg/translate/block_test.go TestGetBlockSizes (cases 1-3)
@pytest.mark.parametrize("counts,want", [
    ([2, 2], (2, 4)),
    ([2, 3], (2, 4)),
    ([2, 2, 2], (2, 4)),
    ([3, 3, 3, 3], (3, 6, 12)),
    ([18], (18,)),
])
def test_doubling_sizes(counts, want):
    assert doubling_sizes(counts) == want


def test_doubling_sizes_needs_blocks():
    with pytest.raises(SlurmtopoError, match="no blocks"):
        doubling_sizes([])


# TOPOGRAPH docs/engines/slurm.md (sub-domain table) and
# pkg/topology/domain_test.go TestInferTwoLevelBlockSizes
@pytest.mark.parametrize("sub,domain,want", [
    (8, 8, (8,)),
    (8, 12, (8, 16)),
    (8, 16, (8, 16)),
    (9, 135, (9, 144)),
])
def test_two_level_sizes(sub, domain, want):
    hosts = {f"h{i:03d}": f"s{i // sub}" for i in range(domain)}
    assert two_level_sizes({"d": hosts}) == want


def test_two_level_sizes_none_without_sub_domains():
    assert two_level_sizes(flat(a=["h1", "h2"])) == ()
    assert two_level_sizes({}) == ()


# TOPOGRAPH block_complement_test.go TestComplementMissingBaseBlock
def test_missing_domain_leaves_a_placeholder():
    doms = flat(B1=["Node104", "Node105", "Node106"], B3=["Node304", "Node305", "Node306"],
                B4=["Node401", "Node402", "Node403"])
    blocks, sizes = domain_blocks(doms, (4, 8, 16))
    assert sizes == (4, 8, 16)
    assert lines(blocks) == [
        ("block001", "B1", ("Node104", "Node105", "Node106")),
        ("block002", "B3", ("Node304", "Node305", "Node306")),
        ("block003", "B4", ("Node401", "Node402", "Node403")),
        ("block004",),
    ]


# TOPOGRAPH block_complement_test.go TestComplementMultiGroupRootExpansion3x72
def test_three_racks_of_72_pad_to_the_top_level():
    doms = flat(**{f"D{d}": [f"D{d}-n{h:02d}" for h in range(72)] for d in range(3)})
    blocks, sizes = domain_blocks(doms, (18, 144))
    assert sizes == (18, 144)
    assert len(blocks) == 16
    assert [b.domain for b in blocks[:12]] == ["D0"] * 4 + ["D1"] * 4 + ["D2"] * 4
    assert blocks[4].nodes == tuple(f"D1-n{h:02d}" for h in range(18))
    assert [b.nodes for b in blocks[12:]] == [()] * 4
    assert [b.name for b in blocks] == [f"block{i:03d}" for i in range(1, 17)]


# TOPOGRAPH block_complement_test.go TestComplementUnequalDomainSubDomainCounts
def test_unequal_sub_domain_counts():
    a = {f"a-sd{sd}-h{h}": f"a.sd{sd}" for sd in range(4) for h in range(9)}
    b = {f"b-h{h:02d}": "b.sd0" for h in range(36)}
    blocks, sizes = domain_blocks({"a": a, "b": b}, (18, 72, 288))
    assert [b.domain for b in blocks[:6]] == ["a.sd0", "a.sd1", "a.sd2", "a.sd3",
                                              "b.sd0", "b.sd0"]
    assert blocks[5].nodes == tuple(f"b-h{h:02d}" for h in range(18, 36))
    assert len(blocks) == 16 and all(not b.nodes for b in blocks[6:])


# TOPOGRAPH block_complement_test.go TestComplementOverflowRoundedToAggregateBoundary
def test_overflowing_sub_domains_end_on_an_aggregate_boundary():
    a = {f"a-sd{sd}-h{h}": f"a.sd{sd}" for sd in range(5) for h in range(3)}
    b = {f"b-sd{sd}-h{h}": f"b.sd{sd}" for sd in range(4) for h in range(2)}
    blocks, _ = domain_blocks({"a": a, "b": b}, (8, 32))
    assert [b.domain or None for b in blocks] == (
        [f"a.sd{i}" for i in range(5)] + [None] * 3 + [f"b.sd{i}" for i in range(4)])


# TOPOGRAPH block_complement_test.go TestComplementOddSubDomainCount
def test_odd_sub_domain_count_has_no_padding():
    d = {f"d-sd{sd}-h{h}": f"d.sd{sd}" for sd in range(5) for h in range(3)}
    blocks, sizes = domain_blocks({"d": d}, (8,))
    assert sizes == (8,) and [len(b.nodes) for b in blocks] == [3] * 5


# TOPOGRAPH block_complement_test.go TestComplementSubDomainGranularityWithoutBlockSizes
def test_sub_domains_infer_sizes_and_split_blocks():
    hosts = {f"NodeA{i:03d}": "fabric-1.rack-a" for i in range(1, 9)}
    hosts.update({f"NodeB{i:03d}": "fabric-1.rack-b" for i in range(1, 9)})
    blocks, sizes = domain_blocks({"fabric-1": hosts})
    assert sizes == (8, 16)
    assert lines(blocks) == [
        ("block001", "fabric-1.rack-a", tuple(f"NodeA{i:03d}" for i in range(1, 9))),
        ("block002", "fabric-1.rack-b", tuple(f"NodeB{i:03d}" for i in range(1, 9))),
    ]


# TOPOGRAPH block_complement_test.go TestComplementSingleLevelOversizedDomain
def test_oversized_single_level_domain():
    blocks, _ = domain_blocks(flat(d=[f"h{i}" for i in range(5)]), (2,))
    assert [b.nodes for b in blocks] == [("h0", "h1"), ("h2", "h3"), ("h4",)]
    assert [b.domain for b in blocks] == ["d"] * 3


# TOPOGRAPH block_complement_test.go TestComplementFormatterProducesPerSubDomainBlocks
def test_names_from_node_names():
    hosts = {f"{r}-h{h}": r for r in ("r1", "r2", "r3", "r4") for h in range(2)}
    blocks, sizes = domain_blocks({"d": hosts}, (8, 16),
                                  BlockNaming(r"^(r[0-9]+)-", "${1}"))
    assert sizes == (8, 16)
    assert [b.name for b in blocks] == ["r1", "r2", "r3", "r4"]


def test_without_sub_domains_or_sizes_one_block_per_domain():
    blocks, sizes = domain_blocks(flat(nvl2=["c", "d", "e"], nvl1=["a", "b"]))
    assert lines(blocks) == [("block001", "nvl1", ("a", "b")),
                             ("block002", "nvl2", ("c", "d", "e"))]
    assert sizes == (2, 4)


def test_naming_keeps_placeholders_positional_and_expands_like_go():
    doms = flat(x=["gpu-d05-r04-srv1", "gpu-d05-r04-srv2"])
    blocks, _ = domain_blocks(doms, (2, 4),
                              BlockNaming(r"d(?P<dom>[0-9]{2})-r([0-9]{2})",
                                          "domain${dom}_rack$2$$"))
    assert [b.name for b in blocks] == ["domain05_rack04$", "block002"]


@pytest.mark.parametrize("doms,naming,words", [
    (flat(x=["a1", "zz"]), BlockNaming(r"^a([0-9])", "$1"), "does not match"),
    (flat(x=["a1", "a2"]), BlockNaming(r"^a([0-9])", "$1"), "different block names"),
    (flat(x=["a1"], y=["a1b"]), BlockNaming(r"^(a)", "$1"), "the same name"),
    (flat(x=["a1"]), BlockNaming(r"^a([0-9])", "${9}"), "empty name"),
    (flat(x=["a1"]), BlockNaming(r"(", "$1"), "bad block naming"),
    (flat(x=["a1"]), BlockNaming("", "$1"), "must not be empty"),
])
def test_naming_errors_say_what(doms, naming, words):
    with pytest.raises(SlurmtopoError, match=words):
        domain_blocks(doms, (), naming)


def test_same_input_same_output():
    hosts = {f"n{i}": f"s{i % 3}" for i in range(11)}
    assert domain_blocks({"d": hosts}) == domain_blocks({"d": dict(reversed(hosts.items()))})
    assert isinstance(domain_blocks({"d": hosts})[0][0], DomainBlock)
