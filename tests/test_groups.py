"""Parallel-group math: worked examples, properties, torch meshes, CLI."""
from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from slurmtopo.errors import LayoutError
from slurmtopo.job.groups import (DEFAULT_ORDER, DENSE_KINDS, EXPERT_KINDS, GROUP_KINDS, Layout,
                                  build_groups, group_of, has_expert_groups, mesh_groups,
                                  parse_order, rank_to_group)

# ---------------------------------------------------------------------------
# Independent references (deliberately written differently from the module)


def _prefix(sizes):
    out = [1]
    for s in sizes:
        out.append(out[-1] * s)
    return out


def _digits(index, shape):
    """Mixed-radix digits of index, first digit least significant."""
    out = []
    for s in shape:
        out.append(index % s)
        index //= s
    return out


def masked_reference(world, sizes, mask):
    """Megatron's masked orthogonal rank groups, computed index by index."""
    stride = _prefix(sizes)[:-1]
    in_shape = [s for s, m in zip(sizes, mask) if m]
    out_shape = [s for s, m in zip(sizes, mask) if not m]
    in_stride = [d for d, m in zip(stride, mask) if m]
    out_stride = [d for d, m in zip(stride, mask) if not m]
    size = math.prod(in_shape)
    groups = []
    for g in range(world // size):
        base = sum(a * b for a, b in zip(_digits(g, out_shape), out_stride))
        groups.append(
            [base + sum(a * b for a, b in zip(_digits(r, in_shape), in_stride)) for r in range(size)]
        )
    return groups


def megatron_reference(tp, cp, ep, pp, world, order, expert_tp=None):
    """What Megatron's two rank generators return, kind by kind."""
    tokens = order.split("-")
    dp = world // (tp * cp * pp)
    etp = tp if expert_tp is None else expert_tp
    edp = world // (etp * ep * pp)

    def generator(sizes):
        full = list(tokens) + [n for n in ("tp", "pp", "dp", "ep", "cp") if n not in tokens]
        ordered = [sizes[n] for n in full]

        def get(token):
            wanted = token.split("-")
            return masked_reference(world, ordered, [n in wanted for n in full])

        return get

    dense = generator({"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp})
    expert = generator({"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp})
    out = {
        "tp": dense("tp"), "cp": dense("cp"), "pp": dense("pp"), "dp": dense("dp"),
        "dp-cp": dense("dp-cp"), "tp-pp": dense("tp-pp"), "tp-cp": dense("tp-cp"),
        "tp-dp": dense("tp-dp"), "tp-dp-cp": dense("tp-dp-cp"),
    }
    if ep > 1 or etp != tp:
        out.update({
            "ep": expert("ep"), "expert-tp": expert("tp"), "expert-dp": expert("dp"),
            "expert-tp-ep": expert("tp-ep"), "expert-tp-ep-pp": expert("tp-ep-pp"),
        })
    return out


def mesh_reference(shape, names, dims):
    """Groups of a row-major mesh along ``dims``, by enumerating coordinates."""
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    keep = [i for i, n in enumerate(names) if n in dims]
    rest = [i for i, n in enumerate(names) if n not in dims]
    groups = []
    for outer in itertools.product(*(range(shape[i]) for i in rest)):
        base = sum(c * strides[i] for c, i in zip(outer, rest))
        group = [
            base + sum(c * strides[i] for c, i in zip(inner, keep))
            for inner in itertools.product(*(range(shape[i]) for i in keep))
        ]
        groups.append(group)
    return groups


# ---------------------------------------------------------------------------
# Worked examples (Megatron's own documented cases and hand-derived ones)


def test_megatron_docstring_16_gpus_tp2_pp4():
    g = build_groups(Layout(tp=2, pp=4, world=16))
    assert g["dp"] == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]]
    assert g["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert g["pp"] == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]
    assert g["tp-pp"] == [[0, 1, 4, 5, 8, 9, 12, 13], [2, 3, 6, 7, 10, 11, 14, 15]]
    assert g["tp-dp"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert g["dp-cp"] == g["dp"]
    assert g["cp"] == [[r] for r in range(16)]
    assert list(g) == DENSE_KINDS


def test_megatron_docstring_cp_example_8_gpus_tp4_cp2():
    g = build_groups(Layout(tp=4, cp=2, world=8))
    assert g["cp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g["tp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert g["tp-cp"] == [list(range(8))]


def test_megatron_docstring_tp_pp_dp_order():
    g = build_groups(Layout(tp=2, pp=2, world=8, order="tp-pp-dp"))
    assert g["dp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g["pp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["tp-pp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert Layout(tp=2, pp=2, world=8, order="tp-pp-dp").resolved().order == "tp-pp-dp"


def test_megatron_docstring_tp_dp_pp_2_3_4():
    g = build_groups(Layout(tp=2, pp=4, world=24, order="tp-dp-pp"))
    assert len(g["dp"]) == 8
    assert g["dp"][0] == [0, 2, 4]
    assert g["dp"][1] == [1, 3, 5]
    assert g["dp"][7] == [19, 21, 23]


def test_world_16_tp2_cp2_pp2():
    g = build_groups(Layout(tp=2, cp=2, pp=2, world=16))
    assert g["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert g["cp"] == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]]
    assert g["dp"] == [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]]
    assert g["dp-cp"] == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert g["pp"] == [[r, r + 8] for r in range(8)]
    assert g["tp-cp"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert g["tp-dp"] == [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]
    assert g["tp-dp-cp"] == [list(range(8)), list(range(8, 16))]
    assert g["tp-pp"] == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13], [6, 7, 14, 15]]


def test_world_8_tp2_cp2_pp2_has_dp_1():
    lay = Layout(tp=2, cp=2, pp=2, world=8).resolved()
    assert lay.dp == 1
    g = build_groups(lay)
    assert g["dp"] == [[r] for r in range(8)]
    assert g["dp-cp"] == g["cp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_moe_ep4_expert_tp1():
    g = build_groups(Layout(tp=2, ep=4, pp=2, expert_tp=1, world=16))
    assert g["ep"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert g["expert-tp"] == [[r] for r in range(16)]
    assert g["expert-dp"] == [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]]
    assert g["expert-tp-ep"] == g["ep"]
    assert g["expert-tp-ep-pp"] == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    # dense side ignores ep entirely
    assert g["dp"] == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert g["pp"] == [[r, r + 8] for r in range(8)]
    assert list(g) == GROUP_KINDS


def test_moe_expert_generator_reuses_cp_slot():
    # tp2 cp2 ep2: the expert generator sets cp=1, so ep takes cp's strides.
    g = build_groups(Layout(tp=2, cp=2, ep=2, world=8))
    assert g["cp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["ep"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["expert-tp"] == g["tp"]
    assert g["expert-dp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g["expert-tp-ep"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert Layout(tp=2, cp=2, ep=2, world=8).expert_dp == 2


def test_expert_groups_only_when_needed():
    assert "ep" not in build_groups(Layout(tp=2, world=8))
    assert not has_expert_groups(Layout(tp=2, world=8, expert_tp=2))
    g = build_groups(Layout(tp=2, world=8, expert_tp=1))
    assert g["expert-tp"] == [[r] for r in range(8)]
    assert g["ep"] == [[r] for r in range(8)]
    assert g["expert-dp"] == [list(range(8))]


def test_pp_not_last_accepted_when_strides_match():
    # ep-tp-pp-dp: dense pp stride = tp = 2, expert pp stride = ep*etp = 2
    lay = Layout(tp=2, ep=2, pp=2, expert_tp=1, world=8, order="ep-tp-pp-dp")
    g = build_groups(lay)
    assert g["pp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["ep"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g == megatron_reference(2, 1, 2, 2, 8, "ep-tp-pp-dp", expert_tp=1)


def test_defaults_world_from_sizes_and_dp():
    lay = Layout(tp=2, pp=2, dp=3).resolved()
    assert (lay.world, lay.dp, lay.expert_tp, lay.order) == (12, 3, 2, "tp-cp-ep-dp-pp")
    assert Layout().resolved().world == 1
    assert build_groups(Layout()) == {k: [[0]] for k in DENSE_KINDS}
    assert Layout(tp=2, world=8, dp=4).resolved().dp == 4


def test_order_is_case_and_blank_tolerant():
    assert parse_order(" TP - dp-PP ") == ["tp", "dp", "pp"]
    assert build_groups(Layout(tp=2, pp=2, world=8, order="TP-PP-DP")) == build_groups(
        Layout(tp=2, pp=2, world=8, order="tp-pp-dp")
    )


def test_ep_in_order_with_ep_1_is_fine():
    # the default order names ep; the dense generator always has ep=1
    a = build_groups(Layout(tp=2, pp=2, world=16, order="tp-ep-dp-pp"))
    b = build_groups(Layout(tp=2, pp=2, world=16, order="tp-dp-pp"))
    assert a == b


# ---------------------------------------------------------------------------
# torch convention and init_device_mesh


def test_mesh_2d_dp_tp():
    g = mesh_groups((2, 4), ("dp", "tp"))
    assert g["tp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert g["dp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_mesh_3d_and_flatten():
    g = mesh_groups((2, 2, 2), ("pp", "dp", "tp"), flatten=[("dp", "tp"), "pp-tp"])
    assert g["tp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g["dp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g["dp-tp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert g["pp-tp"] == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_mesh_rejects_bad_input():
    with pytest.raises(LayoutError):
        mesh_groups((2, 2), ("dp",))
    with pytest.raises(LayoutError):
        mesh_groups((2, 2), ("dp", "dp"))
    with pytest.raises(LayoutError):
        mesh_groups((2, 0), ("dp", "tp"))
    with pytest.raises(LayoutError):
        mesh_groups((2, 2), ("dp", "tp"), flatten=["dp-xx"])


def test_torch_convention_reverses_order():
    t = Layout(tp=2, pp=4, world=16, order="pp-dp-tp", convention="torch")
    m = Layout(tp=2, pp=4, world=16, order="tp-dp-pp")
    assert build_groups(t) == build_groups(m)
    assert t.resolved().order == "pp-dp-tp"
    assert t.resolved().fastest_first() == ["tp", "dp", "pp", "ep", "cp"]
    assert Layout(order="tp-dp-pp").fastest_first() == ["tp", "dp", "pp", "ep", "cp"]


def test_torch_default_order_matches_megatron_default():
    kw = dict(tp=2, cp=2, ep=2, pp=2, world=32)
    t = Layout(order=DEFAULT_ORDER["torch"], convention="torch", **kw)
    assert build_groups(t) == build_groups(Layout(**kw))


def test_torch_convention_matches_device_mesh():
    lay = Layout(tp=2, cp=2, pp=2, world=16, order="pp-dp-cp-tp", convention="torch")
    g = build_groups(lay)
    mesh = mesh_groups((2, 2, 2, 2), ("pp", "dp", "cp", "tp"),
                       flatten=[("dp", "cp"), ("pp", "tp"), ("cp", "tp"), ("dp", "tp"),
                                ("dp", "cp", "tp")])
    for kind in ("tp", "cp", "pp", "dp", "dp-cp", "tp-cp", "tp-dp", "tp-dp-cp"):
        name = {"tp-cp": "cp-tp", "tp-dp": "dp-tp", "tp-dp-cp": "dp-cp-tp"}.get(kind, kind)
        assert g[kind] == mesh[name], kind
    assert g["tp-pp"] == mesh["pp-tp"]


# ---------------------------------------------------------------------------
# Rejections


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(tp=3, world=8), "not divisible by tp*cp*pp"),
        (dict(tp=2, cp=2, pp=2, world=12), "not divisible by tp*cp*pp = 8"),
        (dict(tp=2, world=8, dp=3), "dp=3 does not fit"),
        (dict(tp=2, ep=3, world=8), "expert_tp*ep*pp"),
        (dict(tp=1, ep=3, world=8), "ep=3 does not divide dp*cp"),
        (dict(tp=2, expert_tp=3, world=8), "expert_tp*ep*pp"),
        (dict(tp=0, world=8), "tp must be at least 1"),
        (dict(cp=-1, world=8), "cp must be at least 1"),
        (dict(ep=0, world=8), "ep must be at least 1"),
        (dict(pp=0, world=8), "pp must be at least 1"),
        (dict(dp=0), "dp must be at least 1"),
        (dict(world=0), "world must be at least 1"),
        (dict(expert_tp=0, world=8), "expert_tp must be at least 1"),
        (dict(tp=2.0, world=8), "whole number"),
        (dict(tp=True, world=8), "whole number"),
        (dict(order="tp-xp-dp"), "unknown dimension 'xp'"),
        (dict(order="tp-dp-tp"), "more than once"),
        (dict(order="tp--dp"), "empty name"),
        (dict(order=""), "empty name"),
        (dict(convention="jax"), "convention must be"),
        (dict(tp=2, cp=2, world=8, order="tp-pp-dp"), "leaves out 'cp' but cp=2"),
        (dict(ep=2, world=8, order="tp-dp-pp"), "leaves out 'ep' but ep=2"),
        (dict(tp=2, world=8, order="cp-dp-pp"), "leaves out 'tp' but tp=2"),
        (dict(tp=2, world=8, expert_tp=1, order="tp-pp"), "leaves out 'dp' but dp=4"),
        (dict(pp=2, world=8, order="tp-dp"), "leaves out 'pp' but pp=2"),
        (dict(ep=2, pp=2, world=8, order="tp-pp-ep-dp"), "pp the slowest"),
        (dict(tp=2, ep=2, pp=2, expert_tp=1, world=8, order="tp-pp-ep-dp"),
         "different pipeline groups"),
        (dict(ep=2, pp=2, world=8, order="ep-pp-dp-tp", convention="torch"), "pp the slowest"),
    ],
)
def test_rejections(kwargs, fragment):
    with pytest.raises(LayoutError) as err:
        build_groups(Layout(**kwargs))
    text = str(err.value)
    assert fragment in text
    assert "\n" not in text


def test_expert_dims_missing_from_order_named_as_expert():
    with pytest.raises(LayoutError, match="leaves out 'dp' but expert_dp=4"):
        Layout(tp=2, cp=2, expert_tp=1, world=4, order="tp-cp").resolved()


def test_group_of_errors():
    g = build_groups(Layout(tp=2, world=4))
    with pytest.raises(LayoutError, match="no 'ep' groups"):
        group_of(g, "ep", 0)
    with pytest.raises(LayoutError, match="outside"):
        group_of(g, "tp", 4)
    assert group_of(g, "tp", 3) == 1
    assert group_of({"tp": [[0, 1], [2, 3]]}, "tp", 2) == 1  # plain dict works too


def test_big_world():
    """32,768 ranks: every kind indexed, the index cached (how long it takes
    is bench/'s business, not a test's)."""
    g = build_groups(Layout(tp=8, cp=2, ep=8, pp=4, world=32768))
    idx = [rank_to_group(g, k) for k in g]
    assert len(idx) == len(GROUP_KINDS)
    assert group_of(g, "tp", 32767) == len(g["tp"]) - 1
    assert rank_to_group(g, "tp") is idx[0]  # cached


# ---------------------------------------------------------------------------
# Properties over random valid layouts

NAMES = ("tp", "cp", "ep", "dp", "pp")
SPANS = {
    "tp": ("tp",), "cp": ("cp",), "pp": ("pp",), "dp": ("dp",), "dp-cp": ("dp", "cp"),
    "tp-pp": ("tp", "pp"), "tp-cp": ("tp", "cp"), "tp-dp": ("tp", "dp"),
    "tp-dp-cp": ("tp", "dp", "cp"), "ep": ("ep",), "expert-tp": ("tp",),
    "expert-dp": ("dp",), "expert-tp-ep": ("tp", "ep"), "expert-tp-ep-pp": ("tp", "ep", "pp"),
}


@st.composite
def layouts(draw):
    size = st.sampled_from([1, 1, 2, 3, 4])
    tp, cp, ep, pp, dp = (draw(size) for _ in range(5))
    world = tp * cp * pp * dp
    expert_tp = draw(st.sampled_from([None, 1, 2, 4]))
    order = draw(st.permutations(NAMES))
    etp = tp if expert_tp is None else expert_tp
    edp = world // (etp * ep * pp) if world % (etp * ep * pp) == 0 else 0
    trivial = {n for n, a, b in zip(NAMES, (tp, cp, 1, dp, pp), (etp, 1, ep, edp, pp))
               if a == 1 and b == 1}
    # sometimes leave out names of size 1 (Megatron appends them)
    order = tuple(n for n in order if n not in trivial or draw(st.booleans()))
    assume(order)
    return dict(tp=tp, cp=cp, ep=ep, pp=pp, world=world, expert_tp=expert_tp,
                order="-".join(order))


def _valid(kw, convention="megatron"):
    try:
        return Layout(convention=convention, **kw).resolved()
    except LayoutError as exc:
        assert "\n" not in str(exc)
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(layouts())
def test_property_matches_megatron_reference(kw):
    lay = _valid(kw)
    assume(lay is not None)
    got = build_groups(Layout(**kw))
    want = megatron_reference(kw["tp"], kw["cp"], kw["ep"], kw["pp"], kw["world"],
                              kw["order"].lower(), kw["expert_tp"])
    assert got == want


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(layouts())
def test_property_partitions_and_sizes(kw):
    lay = _valid(kw)
    assume(lay is not None)
    g = build_groups(lay)
    world = lay.world
    dense = {"tp": lay.tp, "cp": lay.cp, "ep": 1, "dp": lay.dp, "pp": lay.pp}
    expert = {"tp": lay.expert_tp, "cp": 1, "ep": lay.ep, "dp": lay.expert_dp, "pp": lay.pp}
    assert lay.tp * lay.cp * lay.pp * lay.dp == world
    assert lay.expert_tp * lay.ep * lay.pp * lay.expert_dp == world
    for kind, groups in g.items():
        sizes = expert if kind in EXPERT_KINDS else dense
        size = math.prod(sizes[n] for n in SPANS[kind])
        assert all(len(grp) == size for grp in groups), kind
        assert len(groups) == world // size
        flat = sorted(r for grp in groups for r in grp)
        assert flat == list(range(world)), kind  # each rank in exactly one group
        assert all(grp == sorted(grp) for grp in groups)
        assert [grp[0] for grp in groups] == sorted(grp[0] for grp in groups)
        assert len(rank_to_group(g, kind)) == world
        for rank in range(0, world, max(1, world // 7)):
            assert rank in groups[group_of(g, kind, rank)]
    if "expert-tp-ep-pp" in g:  # pipeline stages agree between dense and expert numbering
        assert g["pp"] == [sorted(grp) for grp in g["pp"]]
        stage = {r: i for grp in g["pp"] for i, r in enumerate(grp)}
        assert all(len({stage[r] for r in grp}) == 1 for grp in g["expert-tp-ep"])
    assert set(g) == set(DENSE_KINDS) | (set(EXPERT_KINDS) if has_expert_groups(lay) else set())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(layouts())
def test_property_first_name_fastest(kw):
    lay = _valid(kw)
    assume(lay is not None)
    sizes = lay.sizes()
    sizes["ep"] = 1
    first = next((n for n in lay.fastest_first() if sizes[n] > 1), None)
    assume(first is not None)
    g = build_groups(lay)
    # the fastest non-trivial dimension's groups are runs of consecutive ranks
    assert g[first][0] == list(range(sizes[first]))
    assert all(grp == list(range(grp[0], grp[0] + len(grp))) for grp in g[first])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(layouts())
def test_property_torch_equals_reversed_megatron(kw):
    lay = _valid(kw)
    assume(lay is not None)
    torch_kw = dict(kw, order="-".join(reversed(kw["order"].split("-"))))
    tl = _valid(torch_kw, "torch")
    assert tl is not None
    assert build_groups(tl) == build_groups(lay)
    assert tl.fastest_first() == lay.fastest_first()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=4),
    st.data(),
)
def test_property_mesh_groups_match_reference(shape, data):
    names = tuple(f"d{i}" for i in range(len(shape)))
    combo = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    combo = tuple(n for n in names if n in combo)
    g = mesh_groups(tuple(shape), names, flatten=[combo])
    for n in names:
        assert g[n] == mesh_reference(shape, names, (n,))
    assert g["-".join(combo)] == mesh_reference(shape, names, combo)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(layouts())
def test_property_torch_layout_matches_mesh(kw):
    lay = _valid(dict(kw, order="-".join(reversed(kw["order"].split("-")))), "torch")
    assume(lay is not None)
    names = tuple(reversed(lay.fastest_first()))  # torch mesh order, all five names
    sizes = lay.sizes()
    sizes["ep"] = 1
    mesh = mesh_groups(tuple(sizes[n] for n in names), names,
                       flatten=[("dp", "cp"), ("tp", "pp"), ("tp", "dp", "cp")])
    g = build_groups(lay)
    for kind in ("tp", "cp", "pp", "dp"):
        assert g[kind] == mesh[kind]
    assert g["dp-cp"] == mesh["dp-cp"]
    assert g["tp-pp"] == mesh["tp-pp"]
    assert g["tp-dp-cp"] == mesh["tp-dp-cp"]


# ---------------------------------------------------------------------------
# CLI


def test_cli_json_via_runner():
    from slurmtopo.commands.groups import command

    result = CliRunner().invoke(command, ["--world", "16", "--tp", "2", "--pp", "4", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data) == DENSE_KINDS
    assert data["pp"] == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]


def test_cli_json_moe_and_torch():
    from slurmtopo.commands.groups import command

    args = ["--world", "16", "--tp", "2", "--ep", "4", "--pp", "2", "--expert-tp", "1", "--json"]
    data = json.loads(CliRunner().invoke(command, args).output)
    assert list(data) == GROUP_KINDS
    assert data["ep"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    torch = json.loads(CliRunner().invoke(command, args + ["--convention", "torch"]).output)
    assert torch == data  # each convention has its own default order
    flipped = json.loads(CliRunner().invoke(
        command, ["--world", "8", "--tp", "2", "--pp", "2", "--order", "dp-pp-tp",
                  "--convention", "torch", "--json"]).output)
    assert flipped["dp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_cli_table():
    from slurmtopo.commands.groups import command

    result = CliRunner().invoke(command, ["--world", "16", "--tp", "2", "--pp", "2", "--ep", "2"])
    assert result.exit_code == 0, result.output
    for kind in GROUP_KINDS:
        assert kind in result.output
    assert "[0, 1]" in result.output


def _run(*args):
    return subprocess.run([sys.executable, "-m", "slurmtopo", "groups", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli_subprocess_json():
    proc = _run("--world", "8", "--tp", "2", "--cp", "2", "--pp", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]


@pytest.mark.parametrize("args", [
    ("--world", "10", "--tp", "4"),
    ("--world", "8", "--order", "tp-zz"),
    ("--world", "8", "--tp", "0"),
    ("--world", "8", "--ep", "3", "--json"),
])
def test_cli_subprocess_errors(args):
    proc = _run(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("slurmtopo: error: ")


def test_cli_main_exit_code(capsys):
    from slurmtopo.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["groups", "--world", "6", "--tp", "4"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not divisible" in err
    with pytest.raises(SystemExit) as exc:
        main(["groups", "--world", "4", "--tp", "2", "--json"])
    assert exc.value.code == 0
    assert json.loads(capsys.readouterr().out)["tp"] == [[0, 1], [2, 3]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcde"), st.integers(1, 6)), min_size=1, max_size=5,
                unique_by=lambda d: d[0]),
       st.sets(st.sampled_from("abcde")))
def test_orthogonal_groups_by_coordinates(dims, span):
    """_orthogonal_groups (with its shortcuts for one-rank and evenly
    strided groups) against the definition: ranks that agree on every
    dimension outside ``span`` form a group, in ascending order, groups
    ordered by their first rank."""
    from slurmtopo.job.groups import _orthogonal_groups

    world = math.prod(size for _, size in dims)
    by_key = {}
    for rank in range(world):
        rest, key = rank, []
        for name, size in dims:
            rest, coord = divmod(rest, size)
            if name not in span:
                key.append(coord)
        by_key.setdefault(tuple(key), []).append(rank)
    want = sorted(by_key.values(), key=lambda g: g[0])
    assert _orthogonal_groups(dims, span) == want
