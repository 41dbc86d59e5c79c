"""One hostlist module: Slurm's syntax only, no group upcalls, bounded size."""
from __future__ import annotations

import pytest

from slurmtopo.cli import main
from slurmtopo.hostlist import (MAX_NAMES, HostlistError, expand_hostlist, expand_indices,
                                fold_hostlist)
from tests.test_plan_cli import EXAMPLES, _one_line_error, run


def test_expand_and_fold_round_trip():
    names = expand_hostlist("gpu[01-03],login1")
    assert names == ["gpu01", "gpu02", "gpu03", "login1"]
    assert fold_hostlist(names) == "gpu[01-03],login1"
    assert expand_hostlist("rack[0-1]-gpu[1-2]") == ["rack0-gpu1", "rack0-gpu2",
                                                    "rack1-gpu1", "rack1-gpu2"]
    assert expand_hostlist(["gpu[1-2]", "gpu9"]) == ["gpu1", "gpu2", "gpu9"]
    assert expand_hostlist([]) == []


@pytest.mark.parametrize("text, word", [
    ("gpu[1-4]!gpu2", "'!'"), ("gpu[1-4]&gpu[2-3]", "'&'"), ("gpu[1-4]^gpu2", "'^'"),
    ("@gpus", "group name"), ("gpu1,@typo", "group name"),
])
def test_clustershell_extensions_are_refused(text, word):
    with pytest.raises(HostlistError) as exc:
        expand_hostlist(text, "--exclude")
    assert word in str(exc.value) and "--exclude" in str(exc.value)


@pytest.mark.parametrize("text", ["", " "])
def test_empty_hostlist_is_refused(text):
    with pytest.raises(HostlistError, match="names no host"):
        expand_hostlist(text, "--nodelist")


def test_groups_are_never_resolved(tmp_path, monkeypatch):
    """A ClusterShell groups.conf on the host must not be consulted: a group
    name is refused before any resolver could run, and folding never turns
    names into a group."""
    conf = tmp_path / "groups.conf"
    conf.write_text("[Main]\ndefault: local\n[local]\nmap: echo gpu1 gpu2\n")
    monkeypatch.setenv("CLUSTERSHELL_GROUPS_CONF", str(conf))
    with pytest.raises(HostlistError):
        expand_hostlist("@all")
    assert fold_hostlist(["gpu1", "gpu2"]) == "gpu[1-2]"


def test_huge_range_refused_before_expanding():
    with pytest.raises(HostlistError, match="more than the"):
        expand_hostlist("gpu[0000001-9999999]")
    with pytest.raises(HostlistError, match="more than the"):
        expand_hostlist("a[0-999]b[0-999]")  # a product of two brackets
    assert len(expand_hostlist(f"gpu[1-{MAX_NAMES}]")) == MAX_NAMES
    with pytest.raises(HostlistError, match="more than the"):
        expand_indices("0-99999999", "--gpus")


def test_bad_syntax_is_a_hostlist_error():
    with pytest.raises(HostlistError, match="bad node name"):
        expand_hostlist("gpu[3-", "node name")
    assert expand_indices("0-3,8") == {0, 1, 2, 3, 8}
    with pytest.raises(HostlistError, match="bad --gpus"):
        expand_indices("x-y", "--gpus")


@pytest.mark.parametrize("args, part", [
    (["--exclude", "@typo"], "group name"),
    (["--nodelist", "gpu[1-4]!gpu2"], "'!'"),
    (["--exclude", "gpu[0000001-9999999]"], "more than the"),
])
def test_plan_refuses_what_slurm_would_not_read(args, part, tmp_path, capsys):
    code, _, err = run(["plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
                        "--tp", "8", "--output-dir", str(tmp_path / "p"), *args], capsys)
    _one_line_error(code, err, part)


def _clustershell_fold(names):
    from ClusterShell.NodeSet import NodeSet, RESOLVER_NOGROUP

    return str(NodeSet.fromlist(list(names), resolver=RESOLVER_NOGROUP))


def _names():
    from hypothesis import strategies as st

    prefix = st.sampled_from(["n", "gpu", "a-", "a_", "a.", "A", "x", "rack1-n", "n0"])
    number = st.integers(min_value=0, max_value=1200)
    padded = st.tuples(prefix, number, st.sampled_from([0, 1, 3, 5])).map(
        lambda t: f"{t[0]}{t[1]:0{t[2]}d}" if t[2] else f"{t[0]}{t[1]}")
    bare = st.sampled_from(["login", "a", "A-b", "x.y"])
    return st.lists(st.one_of(padded, bare), min_size=1, max_size=40)


def test_folding_is_clustershells():
    # the usual names are folded without ClusterShell's parser, the rest by
    # it; either way the text is the one ClusterShell prints
    from hypothesis import given, settings

    @settings(max_examples=400, deadline=None)
    @given(_names())
    def check(names):
        assert fold_hostlist(names) == _clustershell_fold(names)

    check()
    big = [f"n{i:05d}" for i in range(1, 12501) if i % 7 and i % 64 != 3]
    assert fold_hostlist(big) == _clustershell_fold(big)
    assert fold_hostlist(["n1", "n01"]) == _clustershell_fold(["n1", "n01"])  # mixed widths
