"""One hostlist module: Slurm's syntax only, no group upcalls, bounded size."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from slurmtopo.cli import main
from slurmtopo.inventory.hostlist import (MAX_NAMES, HostlistError, expand_hostlist, expand_indices,
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


@pytest.mark.parametrize("text", ["n[0-+99999]", "n[0-99_999]", "n[+0-99999]",
                                  "n[0-\u0669\u0669\u0669\u0669\u0669\u0669]"])
def test_a_range_python_reads_leniently_is_refused_before_expanding(text):
    """int() (so ClusterShell) reads '+9', '9_999' and other scripts' digits;
    the size check used to count such an item as one name, and
    'n[0-+99999]' expanded to 100,000 names (10^8 with more nines: the
    daemon, reading a user's nodelist, ran out of memory)."""
    with pytest.raises(HostlistError, match="not N, N-M or N-M/S"):
        expand_hostlist(text)
    with pytest.raises(HostlistError, match="not N, N-M or N-M/S"):
        expand_indices(text[2:-1], "--gpus")


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


_NAME_PART = st.sampled_from(["", "gpu", "n", "rack-", "a.b", "x_", "-ib", "b"])
_NAMES = st.lists(st.one_of(
    st.builds(lambda p, i, pad, s: f"{p}{i:0{pad}d}{s}", _NAME_PART,
              st.integers(0, 1200), st.integers(0, 5), _NAME_PART),
    _NAME_PART.filter(bool),
    st.sampled_from(["gpu1-ib2", "node 1", "a%1", "n[1]", "gpu\u0661", "x" + "9" * 20])),
    min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(_NAMES)
def test_fold_is_clustershell_parsing_every_name(names):
    """fold_hostlist hands simple names to ClusterShell as patterns and index
    sets; the text must be what ClusterShell's parser gives for the same
    names (padding, duplicates, names without digits, and the names that
    take the parser's path: two indices, spaces, syntax, non-ASCII digits)."""
    from ClusterShell.NodeSet import NodeSet, NodeSetException, RESOLVER_NOGROUP

    try:
        want = str(NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP))
    except NodeSetException:
        with pytest.raises(NodeSetException):
            fold_hostlist(names)
        return
    assert fold_hostlist(names) == want
