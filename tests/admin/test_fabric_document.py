"""From the network to the planner (issue 32): `topology generate --format
fabric` turns ibnetdiscover, or Slurm's own topology.conf/topology.yaml,
into the `slurmtopo: fabric` document that `plan --inventory DIR` reads
beside the agents' node reports; Slurm's topology.yaml dropped into that
directory is named for what it is, with the command to run."""
from __future__ import annotations

import json

from slurmtopo import api

from .conftest import fixture, node, run_main, write_reports

FAT = fixture("fat_tree_4x2_dual.topo")


def _reports(tmp_path, names):
    return write_reports(tmp_path / "reports", [node(n) for n in names])


def test_ibnetdiscover_to_the_plan_in_one_command(tmp_path, capsys):
    d = _reports(tmp_path, [f"gpu{i:03d}" for i in range(1, 9)])
    out = tmp_path / "reports" / "fabric.yaml"
    args = ["topology", "generate", "--ibnetdiscover", FAT, "--reports", d, "--format",
            "fabric", "-o", str(out)]
    rc, _, err = run_main(args, capsys)
    assert rc == 0 and f"wrote {out}" in err, err
    text = out.read_text()
    assert "slurmtopo: fabric" in text
    cluster = api.load_cluster(d)  # the directory as plan and sbatch read it
    leaves = {s.name: s.nodes for s in cluster.fabric.switches if s.nodes}
    assert leaves == {"ib-leaf1": ("gpu001", "gpu002"), "ib-leaf2": ("gpu003", "gpu004"),
                      "ib-leaf3": ("gpu005", "gpu006"), "ib-leaf4": ("gpu007", "gpu008")}
    rc, stdout, err = run_main(["plan", "--inventory", d, "--tp", "8", "--dp", "2", "--json",
                                "--output-dir", str(tmp_path / "plan")], capsys)
    assert rc == 0, err
    doc = json.loads(stdout)
    notes = doc["notes"] + doc["rankmap"]["notes"]
    assert any("under 1 leaf switch (ib-leaf" in n for n in notes), notes
    # again: the fabric document being replaced is no source of itself
    rc, _, err = run_main(args, capsys)
    assert rc == 0 and "unchanged, not rewritten" in err
    assert out.read_text() == text


def test_hosts_without_a_report_are_left_out(tmp_path, capsys):
    d = _reports(tmp_path, ["gpu001", "gpu002", "gpu003"])
    out = tmp_path / "reports" / "fabric.yaml"
    rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "--reports", d,
                           "--format", "fabric", "-o", str(out), "--allow-missing"], capsys)
    assert rc == 0, err
    cluster = api.load_cluster(d)
    assert sorted(h for s in cluster.fabric.switches for h in s.nodes) == \
        ["gpu001", "gpu002", "gpu003"]


def test_slurms_own_topology_conf_becomes_the_fabric(tmp_path, capsys):
    d = _reports(tmp_path, ["gpu001", "gpu002", "gpu003", "gpu004"])
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=s1 Nodes=gpu[001-002]\nSwitchName=s2 Nodes=gpu[003-004],cpu01\n"
                    "SwitchName=top Switches=s[1-2]\n")
    rc, stdout, err = run_main(["topology", "generate", "--fabric", str(conf), "--reports", d,
                                "--format", "fabric"], capsys)
    assert rc == 0, err
    (tmp_path / "reports" / "fabric.yaml").write_text(stdout + "\n")
    cluster = api.load_cluster(d)
    assert {s.name: s.nodes for s in cluster.fabric.switches} == {
        "s1": ("gpu001", "gpu002"), "s2": ("gpu003", "gpu004"), "top": ()}
    assert "1 host(s) of the fabric have no node report" in err  # cpu01


def test_slurms_topology_yaml_among_the_reports_is_named(tmp_path, capsys):
    d = _reports(tmp_path, ["gpu001", "gpu002"])
    (tmp_path / "reports" / "topology.yaml").write_text(
        "- topology: t1\n  cluster_default: true\n  tree:\n    switches:\n"
        "      - switch: s1\n        nodes: gpu[001-002]\n")
    rc, out, err = run_main(["plan", "--inventory", d, "--tp", "8"], capsys)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert "topology.yaml: this is Slurm's topology.yaml" in err
    assert "must be a mapping" not in err
    assert (f"`slurmtopo topology generate --fabric topology.yaml --reports {d} --format fabric "
            f"-o {d}/fabric.yaml`") in err


def test_the_fabric_format_needs_the_network(tmp_path, capsys):
    d = _reports(tmp_path, ["gpu001"])
    rc, _, err = run_main(["topology", "generate", "--reports", d, "--format", "fabric"],
                          capsys)
    assert rc == 2 and "--format fabric needs the network" in err
