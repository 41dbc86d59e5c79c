"""JobRequest: constraint parsing, validation, levels."""
from __future__ import annotations

import pytest

from slurmtopo.errors import LayoutError
from slurmtopo.inventory.links import LinkClass
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import (LEVEL_INDEX, LEVELS, JobRequest, level_of_class, normalise_kind,
                                   normalise_level, parse_pairs, satisfies)


def test_levels_are_ordered_tightest_first():
    assert LEVELS == ("nvlink", "pcie-switch", "numa", "node", "nvlink-domain", "leaf",
                      "spine", "any")
    assert [LEVEL_INDEX[x] for x in LEVELS] == list(range(len(LEVELS)))


@pytest.mark.parametrize("cls,level", [
    (LinkClass.SELF, "nvlink"),
    (LinkClass.NVLINK, "nvlink"),
    (LinkClass.NVLINK_DOMAIN, "nvlink-domain"),
    (LinkClass.PIX, "pcie-switch"),
    (LinkClass.PXB, "pcie-switch"),
    (LinkClass.PHB, "numa"),
    (LinkClass.NODE, "numa"),
    (LinkClass.SYS, "node"),
    (LinkClass.NET_LEAF, "leaf"),
    (LinkClass.NET_L1, "spine"),
    (LinkClass.NET_L2, "any"),
    (LinkClass.NET_FAR, "any"),
])
def test_level_of_class(cls, level):
    assert level_of_class(cls) == level


def test_satisfies_is_monotone_in_the_level():
    for cls in LinkClass:
        got = [satisfies(cls, lv) for lv in LEVELS]
        # once satisfied, every looser level is satisfied too
        first = got.index(True)
        assert all(got[first:]) and not any(got[:first])
        assert satisfies(cls, "any")


def test_satisfies_examples():
    assert satisfies(LinkClass.NVLINK, "pcie-switch")  # faster than PCIe
    assert satisfies(LinkClass.NVLINK_DOMAIN, "leaf")
    assert not satisfies(LinkClass.NVLINK_DOMAIN, "node")  # crosses trays
    assert satisfies(LinkClass.SYS, "node")
    assert not satisfies(LinkClass.SYS, "numa")
    assert not satisfies(LinkClass.NET_LEAF, "nvlink-domain")
    assert satisfies(LinkClass.NET_LEAF, "spine")
    assert not satisfies(LinkClass.NET_L1, "leaf")


def parse_constraints(require, prefer):
    """--require/--prefer texts as the command line reads them."""
    return parse_pairs(require, "require"), parse_pairs(prefer, "prefer")


def test_parse_constraints_simple():
    req, pref = parse_constraints(["tp=nvlink"], ["dp=leaf", "pp=spine"])
    assert req == {"tp": "nvlink"}
    assert pref == {"dp": "leaf", "pp": "spine"}


def test_parse_constraints_commas_aliases_and_spelling():
    req, pref = parse_constraints(["tp=NVLink, expert_tp=pcie"], ["dp-cp=socket"])
    assert req == {"tp": "nvlink", "expert-tp": "pcie-switch"}
    assert pref == {"dp-cp": "numa"}
    assert normalise_level("host") == "node"
    assert normalise_level("domain") == "nvlink-domain"
    assert normalise_level("nvlink_domain") == "nvlink-domain"
    assert normalise_kind("TP") == "tp"


def test_parse_constraints_empty():
    assert parse_constraints([], []) == ({}, {})
    assert parse_constraints(None, None) == ({}, {})


@pytest.mark.parametrize("text,match", [
    ("tp", "expected KIND=LEVEL"),
    ("tp:nvlink", "expected KIND=LEVEL"),
    ("xx=nvlink", "unknown group kind 'xx'"),
    ("tp=rack", "unknown level 'rack'"),
    ("tp=nvlink,tp=leaf", "names 'tp' twice"),
])
def test_parse_constraints_errors(text, match):
    with pytest.raises(LayoutError, match=match):
        parse_constraints([text], [])


def test_parse_error_lists_the_levels():
    with pytest.raises(LayoutError) as exc:
        parse_constraints([], ["tp=fast"])
    assert "nvlink, pcie-switch, numa, node, nvlink-domain, leaf, spine, any" in str(exc.value)


def test_request_resolves_the_layout():
    r = JobRequest(Layout(tp=2, world=8))
    assert r.layout.dp == 4 and r.layout.world == 8 and r.world == 8
    assert r.layout.expert_tp == 2


def test_request_rejects_bad_layout():
    with pytest.raises(LayoutError, match="not divisible"):
        JobRequest(Layout(tp=3, world=8))
    with pytest.raises(LayoutError, match="must be a Layout"):
        JobRequest("tp=2")


def test_request_normalises_and_freezes_maps():
    r = JobRequest(Layout(tp=2, dp=2), require={"tp": "NVLink"}, prefer={"dp": "pcie"},
                   message_bytes={"tp": 1024}, wait={"dp": 30})
    assert dict(r.require) == {"tp": "nvlink"}
    assert dict(r.prefer) == {"dp": "pcie-switch"}
    assert dict(r.message_bytes) == {"tp": 1024}
    assert dict(r.wait) == {"dp": 30.0}
    with pytest.raises(TypeError):
        r.require["tp"] = "leaf"
    # hashable: usable as a cache key by the daemon
    assert hash(r) == hash(JobRequest(Layout(tp=2, dp=2), require={"tp": "nvlink"},
                                      prefer={"dp": "pcie-switch"}, message_bytes={"tp": 1024},
                                      wait={"dp": 30.0}))
    assert r.require == {"tp": "nvlink"}


def test_request_constraint_lookup():
    r = JobRequest(Layout(tp=2, dp=2), require={"tp": "nvlink"}, prefer={"dp": "leaf"})
    assert r.constraint("tp") == ("nvlink", True)
    assert r.constraint("dp") == ("leaf", False)
    assert r.constraint("pp") == (None, False)


@pytest.mark.parametrize("kw,match", [
    (dict(require={"bogus": "node"}), "unknown group kind"),
    (dict(prefer={"tp": "rack"}), "unknown level"),
    (dict(gpus_per_node=0), "gpus_per_node"),
    (dict(gpus_per_node=2.5), "gpus_per_node"),
    (dict(gpus_per_node=True), "gpus_per_node"),
    (dict(message_bytes={"tp": -1}), "message_bytes"),
    (dict(message_bytes={"tp": 1.5}), "message_bytes"),
    (dict(wait={"tp": -3}), "wait"),
    (dict(require="tp=nvlink"), "require must map"),
])
def test_request_validation(kw, match):
    with pytest.raises(LayoutError, match=match):
        JobRequest(Layout(tp=2, dp=2), **kw)


def test_request_hosts_expand_hostlists():
    r = JobRequest(Layout(dp=2), nodelist="gpu[01-03]", exclude=["gpu02", "gpu[05-06]"])
    assert r.nodelist == ("gpu01", "gpu02", "gpu03")
    assert r.exclude == ("gpu02", "gpu05", "gpu06")
    assert JobRequest(Layout(dp=2)).nodelist is None
    with pytest.raises(LayoutError):
        JobRequest(Layout(dp=2), nodelist="gpu[01-")


def test_gpus_per_node_any_world():
    # at most g a node; a world that is not a multiple is allowed (one
    # node runs the remainder)
    assert JobRequest(Layout(dp=12), gpus_per_node=8).gpus_per_node == 8
