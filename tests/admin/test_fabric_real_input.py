"""The fabric as real dumps give it: record order, mixed HCA names, leaves
with no common parent, non-compute hosts.

``dgx_mixed_hca_names.topo`` is in the shape of a DGX SuperPOD dump (the
one in NVIDIA topograph's tests): rail leaves ``A09-P1-IBLEAF-<rail>-<unit>``,
spines ``A10-P1-IBSPINE-NN``, some hosts naming their HCAs ``mlx5_N`` and
others ``HCA-(N+1)``, SHARP aggregation nodes, unnamed ConnectX CAs, and a
UFM server, a host called ``ubuntu`` and ``localhost`` on a leaf. It was
written with :mod:`bench.ibgen` (see FatTreeSpec.legacy_hca_hosts).
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtopo.slurmfmt.checks import REFUSE, check_tree
from slurmtopo.admin.switch_tree import HostSelection, derive_fabric, non_compute_reason
from slurmtopo.admin.ibnetdiscover import parse_ibnetdiscover, read_ibnetdiscover
from slurmtopo.slurmfmt.topology_conf import parse_topology_conf
from slurmtopo.slurmfmt.topology_files import describe_changes
from slurmtopo.inventory.model import Fabric, Switch

from .conftest import REPO, fixture, run_main

DGX = fixture("dgx_mixed_hca_names.topo")
DIRECT = fixture("leaves_cabled_directly.topo")
HOSTS = [f"a05-p1-dgx-c{i:02d}" for i in range(1, 13)]
LEGACY = {"a05-p1-dgx-c02", "a05-p1-dgx-c03", "a05-p1-dgx-c08"}  # HCA-1..HCA-4


def shuffled_records(text: str, seed: int) -> str:
    """The same dump with its records (blank-line separated) and the port
    lines inside each record in another order."""
    records = [r for r in text.split("\n\n") if r.strip()]
    rng = random.Random(seed)
    out = []
    for rec in records:
        lines = rec.splitlines()
        head = [ln for ln in lines if not ln.startswith("[")]
        ports = [ln for ln in lines if ln.startswith("[")]
        rng.shuffle(ports)
        out.append("\n".join(head + ports))
    rng.shuffle(out)
    return "\n\n".join(out) + "\n"


def _generate(path, fmt, seed):
    env = dict(os.environ, PYTHONHASHSEED=str(seed), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "slurmtopo", "topology", "generate",
                           "--ibnetdiscover", str(path), "--format", fmt],
                          capture_output=True, env=env, cwd=str(REPO), timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


@pytest.mark.parametrize("fmt", ["tree", "block"])
def test_same_bytes_whatever_the_hash_seed_and_record_order(tmp_path, fmt):
    text = Path(DGX).read_text()
    outputs = set()
    for k, seed in enumerate((0, 1, 42, 12345)):
        # the file name is printed in the header: keep it, change the order
        d = tmp_path / str(k)
        d.mkdir()
        path = d / "dgx_mixed_hca_names.topo"
        path.write_text(text if k == 0 else shuffled_records(text, seed))
        outputs.add(_generate(path, fmt, seed))
    assert len(outputs) == 1
    out = outputs.pop().decode()
    assert "a05-p1-dgx-c[01-06]" in out and "a05-p1-dgx-c[07-12]" in out


def test_derivation_ignores_record_order():
    text = Path(DGX).read_text()
    first = derive_fabric(parse_ibnetdiscover(text))
    for seed in (3, 4, 5):
        other = derive_fabric(parse_ibnetdiscover(shuffled_records(text, seed)))
        assert other.fabric == first.fabric
        assert other.notes == first.notes


def test_units_get_distinct_names_and_block_names_match_the_tree(capsys):
    rc, tree, _ = run_main(["topology", "generate", "--ibnetdiscover", DGX], capsys)
    assert rc == 0
    rc, block, _ = run_main(["topology", "generate", "--ibnetdiscover", DGX,
                             "--format", "block"], capsys)
    assert rc == 0
    leaves = {s.name: s.nodes for s in parse_topology_conf(tree).switches if s.nodes}
    blocks = {b.name: b.nodes for b in parse_topology_conf(block).blocks}
    assert leaves == blocks
    # each unit has its own name: the row stem A09-P1-IBLEAF is shared by both
    # units and goes to neither; the unit number is kept
    assert sorted(leaves) == ["A09-P1-IBLEAF-01", "A09-P1-IBLEAF-02"]


def test_diff_of_a_regenerated_file_reports_no_move(tmp_path, capsys):
    out = tmp_path / "topology.conf"
    assert run_main(["topology", "generate", "--ibnetdiscover", DGX, "-o", str(out)],
                    capsys)[0] == 0
    rc, stdout, err = run_main(["topology", "generate", "--ibnetdiscover", DGX, "-o", str(out),
                                "--diff"], capsys)
    assert rc == 0 and stdout == "" and "no change" in err and "moved" not in err


def test_a_renamed_leaf_is_a_rename_not_a_move():
    old = Fabric(switches=(Switch("a", nodes=("n1", "n2")), Switch("b", nodes=("n3",)),
                           Switch("top", switches=("a", "b"))))
    new = Fabric(switches=(Switch("unit1", nodes=("n1", "n2")), Switch("b", nodes=("n3",)),
                           Switch("top", switches=("unit1", "b"))))
    changes = describe_changes(old, new)
    assert "switches renamed (same nodes): a -> unit1" in changes
    assert not any("moved" in c for c in changes)
    assert "switches changed: top" in changes
    moved = Fabric(switches=(Switch("a", nodes=("n1",)), Switch("b", nodes=("n2", "n3")),
                             Switch("top", switches=("a", "b"))))
    assert "nodes moved to another leaf/block: n2" in describe_changes(old, moved)


# --------------------------------------------------------------------------
# HCA names: mlx5_N and HCA-(N+1) are one port


def _derive(**kw):
    return derive_fabric(read_ibnetdiscover(DGX), HostSelection(**kw))


@pytest.mark.parametrize("select", [dict(hcas={f"mlx5_{i}" for i in range(8)}),
                                    dict(hcas={f"HCA-{i}" for i in range(1, 9)}),
                                    dict(rails=set(range(8)))])
def test_both_naming_schemes_select_every_host(select):
    d = _derive(**select)
    assert d.hosts == HOSTS and d.left_out == {}
    assert set(LEGACY) <= set(d.hosts)


@pytest.mark.parametrize("select", [dict(hcas={"mlx5_1"}), dict(hcas={"HCA-2"}),
                                    dict(rails={1})])
def test_one_rail_is_one_physical_rail(select):
    d = _derive(**select)
    assert d.hosts == HOSTS
    leaves = sorted(p for s in d.fabric.switches if s.nodes for p in d.members[s.name])
    assert leaves == ["A09-P1-IBLEAF-02-01", "A09-P1-IBLEAF-02-02"]  # rail 1 only
    assert not any("another rail" in n for n in d.notes)


def test_a_cable_on_the_wrong_rail_is_noted():
    text = Path(DGX).read_text()
    # c01's mlx5_1 plugged into the rail-2 leaf of its unit, mlx5_2 into rail 1's
    a, b = '"a05-p1-dgx-c01 mlx5_1"', '"a05-p1-dgx-c01 mlx5_2"'
    swapped = text.replace(a, "@@").replace(b, a).replace("@@", b)
    for select in (HostSelection(rails={0, 1, 2, 3}), HostSelection(rails={1})):
        d = derive_fabric(parse_ibnetdiscover(swapped), select)
        note = next(n for n in d.notes if "another rail" in n)
        assert note.startswith("2 leaf switch(es) carry HCAs of another rail")
        assert "A09-P1-IBLEAF-02-01 (rail 1): a05-p1-dgx-c01 mlx5_2" in note
        assert "A09-P1-IBLEAF-03-01 (rail 2): a05-p1-dgx-c01 mlx5_1" in note


def test_selection_that_leaves_hosts_out_stops_with_counts(capsys):
    args = ["topology", "generate", "--ibnetdiscover", DGX, "--hca", "mlx5_[4-7]"]
    rc, out, err = run_main(args, capsys)
    assert rc != 0 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("slurmtopo: error: ") and "12 host(s) left out: 12 with no HCA " \
        "matching --hca mlx5_[4-7]" in last and "--allow-missing" in last
    assert "Traceback" not in err


def test_allow_missing_writes_the_rest_and_says_so(tmp_path, capsys):
    text = Path(DGX).read_text()
    # c12 has lost every compute HCA name but its storage one: only its rail 3 remains
    for r in range(3):
        text = text.replace(f'"a05-p1-dgx-c12 mlx5_{r}"', f'"a05-p1-dgx-c12 mlx5_storage{r}"')
    path = tmp_path / "f.topo"
    path.write_text(text)
    base = ["topology", "generate", "--ibnetdiscover", str(path), "--rails", "0-2"]
    rc, _, err = run_main(base, capsys)
    assert rc != 0 and "1 host(s) left out: 1 with no HCA matching --rails 0,1,2" in err
    rc, out, err = run_main(base + ["--allow-missing"], capsys)
    assert rc == 0
    assert {h for s in parse_topology_conf(out).switches for h in s.nodes} == set(HOSTS[:11])
    assert "note: 1 host(s) left out" in err


# --------------------------------------------------------------------------
# Leaves with no common parent


def test_leaves_cabled_directly_get_a_top_switch(capsys):
    rc, out, err = run_main(["topology", "generate", "--ibnetdiscover", DIRECT], capsys)
    assert rc == 0
    fabric = parse_topology_conf(out)
    assert check_tree(fabric) == []
    top = [s for s in fabric.switches if s.switches]
    assert [(s.name, s.switches) for s in top] == [("top", ("ib-leaf1", "ib-leaf2"))]
    assert "no common parent" in err and "added switch 'top'" in err


FIVE_LEAVES = "".join(f"SwitchName=leaf{i} Nodes=cn[{i}01-{i}04]\n" for i in range(1, 6))


def test_check_flags_leaves_without_a_common_parent(tmp_path, capsys):
    conf = tmp_path / "topology.conf"
    conf.write_text(FIVE_LEAVES)
    rc, _, err = run_main(["topology", "check", str(conf)], capsys)
    assert rc != 0
    assert "refuse: " in err and "no switch reaches all nodes: 5 switches have no common " \
        "parent (leaf1, leaf2, leaf3, leaf4, leaf5)" in err
    problems = check_tree(parse_topology_conf(FIVE_LEAVES))
    assert [p.severity for p in problems] == [REFUSE]


def test_generate_from_such_a_file_adds_the_top_switch(tmp_path, capsys):
    conf = tmp_path / "topology.conf"
    conf.write_text(FIVE_LEAVES)
    rc, out, err = run_main(["topology", "generate", "--fabric", str(conf)], capsys)
    assert rc == 0 and "SwitchName=top Switches=leaf[1-5]" in out
    fixed = tmp_path / "fixed.conf"
    fixed.write_text(out)
    rc, out, _ = run_main(["topology", "check", str(fixed)], capsys)
    assert rc == 0 and "OK" in out


def test_top_switch_name_does_not_clash():
    from slurmtopo.admin.generate import join_roots
    sws = (Switch("top", nodes=("a",)), Switch("b", nodes=("c",)))
    joined, note = join_roots(sws)
    assert joined[-1].name == "top2" and joined[-1].switches == ("b", "top") and note


# --------------------------------------------------------------------------
# Non-compute hosts


@pytest.mark.parametrize("host,why", [
    ("ubuntu", "default OS host name"), ("localhost", "default OS host name"),
    ("localhost6", "default OS host name"),
    ("B11-P1-CUFM-02", "management host ('CUFM' in its name)"),
    ("ufm01", "management host"), ("opensm2", "management host"), ("mgmt-01", "management"),
    ("lustre-oss3", "storage or login host ('lustre' in its name)"),
    ("vast-cnode-01", "storage or login host"), ("login02", "storage or login host"),
    ("gpu001", None), ("a05-p1-dgx-c01", None), ("smith01", None), ("dgxsum", None),
    ("storageless-gpu1", None), ("ossian", None),
])
def test_non_compute_names(host, why):
    reason = non_compute_reason(host)
    assert (reason is None) if why is None else (why in reason)


def test_non_compute_hosts_are_left_out_without_slurm_conf(capsys):
    rc, out, err = run_main(["topology", "generate", "--ibnetdiscover", DGX], capsys)
    assert rc == 0
    for name in ("ubuntu", "CUFM", "localhost"):
        assert name not in out
    assert "not compute nodes by their name (default OS host name): localhost,ubuntu" in err
    assert "B11-P1-CUFM-02" in err


def test_with_slurm_conf_its_node_list_decides(tmp_path, capsys):
    conf = tmp_path / "slurm.conf"
    conf.write_text("NodeName=a05-p1-dgx-c[01-12],ubuntu\n")
    rc, out, err = run_main(["topology", "generate", "--ibnetdiscover", DGX,
                             "--slurm-conf", str(conf)], capsys)
    assert rc == 0
    leaves = {h for s in parse_topology_conf(out).switches for h in s.nodes}
    assert leaves == set(HOSTS) | {"ubuntu"}
    assert "B11-P1-CUFM-02" in err and "not in the node list" in err


def test_a_dual_port_hca_cabled_twice_to_one_leaf():
    """Both ports of one HCA on the same leaf (the man page's example has
    one): one host, one leaf, whatever the order."""
    text = Path(fixture("leaves_cabled_directly.topo")).read_text()
    ca = 'vendid=0x2c9\ncaguid=0x77\nCa\t2 "H-0000000000000077"\t\t# "cn099 mlx5_0"\n' \
         '[1](77)\t"S-b83fd20300000000"[40]\t\t# lid 90 lmc 0 "x" lid 1 4xHDR\n' \
         '[2](78)\t"S-b83fd20300000000"[41]\t\t# lid 91 lmc 0 "x" lid 1 4xHDR\n'
    d = derive_fabric(parse_ibnetdiscover(text + "\n" + ca))
    assert d.host_leaves["cn099"] == ["ib-leaf1"]



def _cut(text: str, a: str, b: str) -> str:
    """The dump without the cables between switches named a and b."""
    out, current = [], ""
    for line in text.splitlines():
        if line.startswith("Switch"):
            current = line
        if line.startswith("[") and ((f";{a}:" in current and f";{b}:" in line)
                                     or (f";{b}:" in current and f";{a}:" in line)):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def test_a_spine_missing_a_cable_stays_with_its_layer():
    from bench.ibgen import FatTreeSpec, generate
    text = generate(FatTreeSpec(hosts=16, hosts_per_unit=4, rails=1, spines=3))
    d = derive_fabric(parse_ibnetdiscover(_cut(text, "leaf002", "spine-02")))
    tops = [s for s in d.fabric.switches if s.switches]
    assert [(s.name, s.switches) for s in tops] == [
        ("spine", ("leaf001", "leaf002", "leaf003", "leaf004"))]
    assert d.members["spine"] == ["spine-01", "spine-02", "spine-03"]
    assert any(n.startswith("spine-02 (level 1) has no link to leaf002") for n in d.notes)
    assert check_tree(d.fabric) == []
    # a spine that reaches under half of the leaves is not taken for one of them
    for leaf in ("leaf001", "leaf002", "leaf003"):
        text = _cut(text, leaf, "spine-03")
    d = derive_fabric(parse_ibnetdiscover(text))
    assert len([s for s in d.fabric.switches if s.switches]) == 2


def test_report_nic_names_select_the_older_hca_names_too():
    nics = {h: {f"mlx5_{r}" for r in range(4)} for h in HOSTS}
    d = _derive(nodes=set(HOSTS), compute_nics=nics)
    assert d.hosts == HOSTS and d.left_out == {}
    only_rail0 = {h: {"mlx5_0"} for h in HOSTS}
    d = _derive(nodes=set(HOSTS), compute_nics=only_rail0)
    leaves = sorted(p for s in d.fabric.switches if s.nodes for p in d.members[s.name])
    assert leaves == ["A09-P1-IBLEAF-01-01", "A09-P1-IBLEAF-01-02"]
