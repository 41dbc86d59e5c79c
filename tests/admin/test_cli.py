"""The admin commands end to end: stdout, diff, safe writes, refusals,
reconfigure, and every source of the fabric."""
from __future__ import annotations

import os
import stat
import textwrap

import pytest

from slurmtopo.slurmfmt import gres_conf
from slurmtopo.slurmfmt.topology_files import read_topology_conf

from .conftest import REPO, fake_gres_lines, fixture, hardware, node, run_main, write_reports

FAT = fixture("fat_tree_4x2_dual.topo")
SLURM8 = "NodeName=gpu[001-008] Gres=gpu:h100:8\n"


@pytest.fixture
def slurm_conf(tmp_path):
    def make(text=SLURM8):
        p = tmp_path / "slurm.conf"
        p.write_text(text)
        return str(p)
    return make


def test_stdout_when_no_output(capsys):
    rc, out, err = run_main(["topology", "generate", "--ibnetdiscover", FAT], capsys)
    assert rc == 0
    assert out.splitlines()[0].startswith("# topology.conf for topology/tree")
    assert "SwitchName=ib-leaf1 Nodes=gpu[001-002]" in out
    assert "note: skipped 1 CA(s): SHARP aggregation node" in err


def test_write_unchanged_backup_and_mode(tmp_path, capsys, slurm_conf):
    out = tmp_path / "topology.conf"
    args = ["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out),
            "--slurm-conf", slurm_conf()]
    rc, _, err = run_main(args, capsys)
    assert rc == 0 and f"wrote {out}" in err and "next: scontrol reconfigure" in err
    first = out.read_text()
    assert read_topology_conf(out).switches[0].nodes == ("gpu001", "gpu002")
    os.chmod(out, 0o640)
    rc, _, err = run_main(args, capsys)
    assert "unchanged, not rewritten" in err
    assert list(tmp_path.glob("topology.conf.*.bak")) == []
    # a changed fabric: only gpu[001-006] in slurm.conf, the rest filtered out
    args[-1] = slurm_conf("NodeName=gpu[001-006]\n")
    rc, _, err = run_main(args, capsys)
    assert rc == 0
    backups = list(tmp_path.glob("topology.conf.*.bak"))
    assert len(backups) == 1 and backups[0].read_text() == first
    assert stat.S_IMODE(out.stat().st_mode) == 0o640  # mode kept
    assert "gpu007" not in out.read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".topology.conf")]  # no temp


def test_diff_changes_nothing(tmp_path, capsys, slurm_conf):
    out = tmp_path / "topology.conf"
    out.write_text("SwitchName=old Nodes=gpu[001-008]\n")
    rc, stdout, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out),
                                "--diff"], capsys)
    assert rc == 0
    assert out.read_text() == "SwitchName=old Nodes=gpu[001-008]\n"
    assert f"--- {out} (current)" in stdout and f"+++ {out} (new)" in stdout
    assert "-SwitchName=old Nodes=gpu[001-008]" in stdout
    assert "+SwitchName=ib-leaf1 Nodes=gpu[001-002]" in stdout
    assert "change: switches added: ib-leaf1" in err
    assert "change: switches removed: old" in err
    assert "change: nodes moved to another leaf/block: gpu[001-008]" in err
    assert list(tmp_path.iterdir()) == [out]
    # after a real write, --diff says there is nothing to do
    run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out)], capsys)
    rc, stdout, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out),
                                "--diff"], capsys)
    assert rc == 0 and stdout == "" and "no change" in err


def test_refused_when_slurm_conf_nodes_would_be_dropped(tmp_path, capsys, slurm_conf):
    out = tmp_path / "topology.conf"
    conf = slurm_conf("NodeName=gpu[001-010]\n")
    args = ["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out), "--slurm-conf", conf]
    rc, _, err = run_main(args, capsys)
    assert rc == 2 and not out.exists()
    assert "refused: 2 node(s) of slurm.conf are on no switch: gpu[009-010]" in err
    assert err.splitlines()[-1].startswith("slurmtopo: error: not writing topology.conf")
    rc, _, err = run_main(args + ["--diff"], capsys)
    assert rc == 2 and "would refuse" in err and not out.exists()
    rc, _, err = run_main(args + ["--force"], capsys)
    assert rc == 0 and out.exists() and "forced:" in err


def test_never_written_when_slurm_would_reject_even_with_force(tmp_path, capsys):
    fab = tmp_path / "fabric.yaml"
    fab.write_text(textwrap.dedent("""\
        slurmtopo: fabric
        fabric:
          switches:
            - {name: "a-very-long-switch-name-that-slurm-refuses-because-it-is-over-64-chars",
               nodes: "n[1-2]"}
        """))
    out = tmp_path / "topology.conf"
    rc, _, err = run_main(["topology", "generate", "--fabric", str(fab), "-o", str(out),
                           "--force"], capsys)
    assert rc == 2 and not out.exists() and "longer than 64" in err


def test_reconfigure_runs_scontrol_only_when_asked(tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexit ${{FAIL:-0}}\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "topology.conf"
    run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out)], capsys)
    assert not log.exists()
    out.unlink()
    rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out),
                           "--reconfigure"], capsys)
    assert rc == 0 and log.read_text() == "reconfigure\n" and "ran: scontrol reconfigure" in err
    out.write_text("SwitchName=x Nodes=y\n")
    monkeypatch.setenv("FAIL", "1")
    rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out),
                           "--reconfigure"], capsys)
    assert rc == 4 and "scontrol reconfigure failed" in err
    # 23.11+ slurmctld keeps running the old file, but slurmd would die on the
    # new one at its next start: the previous file is back, the backup kept
    assert out.read_text() == "SwitchName=x Nodes=y\n"
    assert "previous" in err and "back in place" in err
    assert [b.read_text() for b in tmp_path.glob("topology.conf.*")] == ["SwitchName=x Nodes=y\n"]
    out.unlink()          # no previous file: the refused one does not stay either
    rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out),
                           "--reconfigure"], capsys)
    assert rc == 4 and not out.exists() and "removed again" in err
    rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "--reconfigure"],
                          capsys)
    assert rc == 2 and "need --output" in err


def test_write_through_a_symlink_keeps_the_link(tmp_path, capsys):
    real = tmp_path / "shared" / "topology.conf"
    real.parent.mkdir()
    real.write_text("SwitchName=x Nodes=y\n")
    link = tmp_path / "topology.conf"
    link.symlink_to(real)
    rc, _, _ = run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(link)], capsys)
    assert rc == 0 and link.is_symlink() and "ib-leaf1" in real.read_text()
    assert len(list(real.parent.glob("topology.conf.*.bak"))) == 1


def test_ibnetdiscover_with_reports_and_hca_selection(tmp_path, capsys):
    rail_nics = [("mlx5_0", "compute"), ("mlx5_1", "compute"), ("mlx5_2", "storage")]
    reports = write_reports(tmp_path / "reports",
                            [node(f"gpu{i:03d}", hardware(nics=rail_nics)) for i in range(1, 9)])
    rc, out, err = run_main(["topology", "generate", "--ibnetdiscover",
                             fixture("two_rails.topo"), "--reports", reports], capsys)
    assert rc == 0, err
    assert "SwitchName=su1 Nodes=gpu[001-004]" in out and "SwitchName=su2 Nodes=gpu[005-008]" in out
    assert "SwitchName=spine Switches=su[1-2]" in out
    assert "8 node report(s)" in out
    assert "storage/service" in err and "mgmt01" in err
    # the same from names, without reports
    rc, out2, _ = run_main(["topology", "generate", "--ibnetdiscover", fixture("two_rails.topo"),
                            "--hca", "mlx5_[0-1]", "--nodes", "gpu[001-008]"], capsys)
    assert [ln for ln in out2.splitlines() if not ln.startswith("#")] == \
        [ln for ln in out.splitlines() if not ln.startswith("#")]
    rc, out3, _ = run_main(["topology", "generate", "--ibnetdiscover", fixture("two_rails.topo"),
                            "--rails", "0-1", "--nodes", "gpu[001-008]"], capsys)
    assert out3 == out2


def test_nvlink_domains_become_blocks(tmp_path, capsys):
    uuid_a, uuid_b = "5b1a2c3d-0000-4000-8000-00000000a001", "77aa2c3d-0000-4000-8000-00000000a002"
    nodes = [node(f"r1t{i:02d}", domain=(uuid_a, 1)) for i in range(1, 19)] + \
        [node(f"r2t{i:02d}", domain=(uuid_b, 1)) for i in range(1, 17)]
    reports = write_reports(tmp_path / "reports", nodes)
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "block"],
                            capsys)
    assert rc == 0, err
    body = [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert body == ["BlockName=nvl-5b1a2c3d-1 Nodes=r1t[01-18]",
                    "BlockName=nvl-77aa2c3d-1 Nodes=r2t[01-16]",
                    "BlockSizes=16,32"]
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "tree"],
                            capsys)
    assert rc == 2 and "no switches to write" in err
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "yaml"],
                            capsys)
    assert rc == 0 and "- topology: block\n  cluster_default: true\n" in out


def test_fabric_description_and_conversion(tmp_path, capsys):
    example = str(REPO / "etc" / "fabric.example.yaml")
    conf = tmp_path / "topology.conf"
    rc, _, err = run_main(["topology", "generate", "--fabric", example, "-o", str(conf)], capsys)
    assert rc == 0, err
    assert [s.name for s in read_topology_conf(conf).switches][-1] == "spine"
    # a hand-written topology.conf converts to topology.yaml
    yml = tmp_path / "topology.yaml"
    rc, _, err = run_main(["topology", "generate", "--fabric", str(conf), "-o", str(yml)], capsys)
    assert rc == 0, err
    assert yml.read_text().count("- switch:") == 5
    rc, out, _ = run_main(["topology", "generate", "--fabric", example, "--format", "block"],
                          capsys)
    assert "BlockSizes=16,32,64" in out
    rc, _, err = run_main(["topology", "generate", "--fabric", example, "--ibnetdiscover", FAT],
                          capsys)
    assert rc == 2 and "not both" in err


def test_format_follows_slurm_conf_and_output_name(tmp_path, capsys, slurm_conf):
    conf = slurm_conf("TopologyPlugin=topology/block\nNodeName=gpu[001-008]\n")
    rc, out, _ = run_main(["topology", "generate", "--ibnetdiscover", FAT, "--slurm-conf", conf],
                          capsys)
    assert rc == 0 and "BlockName=ib-leaf1 Nodes=gpu[001-002]" in out and "BlockSizes=2,4,8" in out
    yml = tmp_path / "topology.yaml"
    rc, _, _ = run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(yml)], capsys)
    assert yml.read_text().startswith("# topology.yaml")


def test_topology_check(tmp_path, capsys, slurm_conf):
    conf = tmp_path / "topology.conf"
    run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(conf)], capsys)
    rc, out, _ = run_main(["topology", "check", str(conf), "--slurm-conf", slurm_conf()], capsys)
    assert rc == 0 and out == f"{conf}: 5 switches, 2 level(s), 8 nodes: OK\n"
    rc, out, err = run_main(["topology", "check", str(conf), "--slurm-conf",
                             slurm_conf("NodeName=gpu[001-009]\n")], capsys)
    assert rc == 1 and out == "" and "gpu009" in err
    assert err.splitlines()[-1] == (f"slurmtopo: error: {conf}: 5 switches, 2 level(s), 8 nodes: "
                                    "1 problem(s)")


def test_empty_fabric_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.topo"
    empty.write_text("# nothing\n")
    rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", str(empty)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "no Switch or Ca records" in err


# --------------------------------------------------------------------------
# gres


@pytest.fixture
def fake_agent(monkeypatch):
    monkeypatch.setattr(gres_conf, "agent_gres_lines",
                        lambda slurm_version=None, slurm=None: fake_gres_lines)


def test_gres_generate(tmp_path, capsys, fake_agent, slurm_conf):
    nodes = [node(f"gpu{i:03d}") for i in range(1, 9)]
    reports = write_reports(tmp_path / "reports", nodes,
                            {"gpu008": {"source": "nvml", "stale": True}})
    out = tmp_path / "gres.conf"
    rc, _, err = run_main(["gres", "generate", "--reports", reports, "-o", str(out),
                           "--slurm-conf", slurm_conf()], capsys)
    assert rc == 0, err
    text = out.read_text()
    assert text.count("NodeName=gpu[001-008] Name=gpu Type=h100 File=/dev/nvidia") == 8
    assert "1 stale report(s) used" in err and "copy gres.conf to every node" in err
    rc, _, err = run_main(["gres", "check", str(out), "--slurm-conf", slurm_conf()], capsys)
    assert rc == 0
    # slurm.conf wants 4 GPUs on gpu001: refused, nothing written
    rc, _, err = run_main(["gres", "generate", "--reports", reports, "-o", str(out), "--diff",
                           "--slurm-conf", slurm_conf("NodeName=gpu001 Gres=gpu:4\n"
                                                      "NodeName=gpu[002-008] Gres=gpu:8\n")],
                          capsys)
    assert rc == 2 and "differ from slurm.conf" in err and out.read_text() == text
    rc, _, err = run_main(["gres", "generate", "--reports", reports, "--nodes", "gpu[001-010]"],
                          capsys)
    assert rc == 2 and "no report for 2 node(s) of --nodes: gpu[009-010]" in err


def test_gres_diff_names_changed_nodes(tmp_path, capsys, fake_agent):
    reports = write_reports(tmp_path / "reports", [node("gpu001"), node("gpu002", hardware(4))])
    out = tmp_path / "gres.conf"
    out.write_text("NodeName=gpu[001-002] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n")
    rc, stdout, err = run_main(["gres", "generate", "--reports", reports, "-o", str(out),
                                "--diff"], capsys)
    assert rc == 0 and "change: nodes changed: gpu[001-002]" in err
    assert stdout.startswith(f"--- {out} (current)")


def test_gres_check_bad_file(tmp_path, capsys):
    bad = tmp_path / "gres.conf"
    bad.write_text("NodeName=a Name=gpu File=/dev/nvidia[0-1] Links=-1,2\n")
    rc, _, err = run_main(["gres", "check", str(bad)], capsys)
    assert rc == 1 and err == (f"slurmtopo: error: {bad}:1: Links= allows a single device per "
                               "line, this line has 2 files\n")


def test_gres_generate_writes_mig_lines_for_the_slurm_release(tmp_path, capsys):
    from slurmtopo.inventory.model import Gpu, Hardware, MigDevice, Node

    migs = tuple(MigDevice(gi_id=g, ci_id=0, profile="3g.20gb", uuid=f"MIG-{g}",
                           gi_cap_minor=10 + 2 * g, ci_cap_minor=11 + 2 * g) for g in (1, 2))
    hw = Hardware(gpus=(Gpu(index=0, model="NVIDIA A100-SXM4-40GB", mig_mode=True, mig=migs,
                            cpus=tuple(range(8))),), links=(("X",),))
    reports = write_reports(tmp_path / "r", [Node(name=f"gpu{i}", hardware=hw) for i in (1, 2)])
    rc, now, _ = run_main(["gres", "generate", "--reports", reports], capsys)
    assert rc == 0 and "MultipleFiles=" in now and "Links=" not in now
    rc, old, _ = run_main(["gres", "generate", "--reports", reports, "--slurm-version",
                           "22.05.9"], capsys)
    assert rc == 0
    lines = [ln for ln in old.splitlines() if "MultipleFiles=" in ln]
    assert [ln.rsplit(" ", 1)[1] for ln in lines] == ["Links=-1,0", "Links=0,-1"]


@pytest.mark.parametrize("plugin, fmt", [("tree", "block"), ("block", "tree")])
def test_format_the_topology_plugin_cannot_read_is_never_written(tmp_path, capsys, slurm_conf,
                                                                 plugin, fmt):
    """A block file for topology/tree (or the reverse) made slurmctld stop
    with fatal:. Refused before anything is written, --force or not, with
    the fix in the message."""
    conf = slurm_conf(f"TopologyPlugin=topology/{plugin}\nNodeName=gpu[001-008]\n")
    out = tmp_path / "topology.conf"
    out.write_text("# the old file\n")
    for extra in ([], ["--force"], ["--reconfigure"]):
        rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "--format", fmt,
                               "--slurm-conf", conf, "-o", str(out), *extra], capsys)
        assert rc == 2, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("slurmtopo: error: not writing topology.conf: "), last
        assert f"TopologyPlugin=topology/{plugin}" in last and f"--format {plugin}" in last
        assert "ran: scontrol" not in err
        assert out.read_text() == "# the old file\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["slurm.conf", "topology.conf"]
    # the check command says the same of a file already there
    run_main(["topology", "generate", "--ibnetdiscover", FAT, "--format", fmt, "-o", str(out)],
             capsys)
    rc, _, err = run_main(["topology", "check", str(out), "--slurm-conf", conf], capsys)
    assert rc == 1 and f"TopologyPlugin=topology/{plugin}" in err, err


def test_topology_conf_beside_a_topology_yaml_is_refused(tmp_path, capsys, slurm_conf):
    conf = slurm_conf("TopologyPlugin=topology/tree\nNodeName=gpu[001-008]\n")
    (tmp_path / "topology.yaml").write_text("- topology: default\n")
    out = tmp_path / "topology.conf"
    argv = ["topology", "generate", "--ibnetdiscover", FAT, "--slurm-conf", conf, "-o", str(out)]
    rc, _, err = run_main(argv, capsys)
    assert rc == 2 and not out.exists() and "ignores TopologyPlugin and topology.conf" in err
    rc, _, err = run_main(argv + ["--slurm-version", "24.11"], capsys)
    assert rc == 0 and out.exists(), err


def test_topology_yaml_for_a_release_that_reads_none(tmp_path, capsys):
    out = tmp_path / "topology.yaml"
    rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out),
                           "--slurm-version", "24.05"], capsys)
    assert rc == 2 and not out.exists() and "Slurm 24.05 reads no topology.yaml" in err
    rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", FAT, "-o", str(out),
                           "--slurm-version", "25.05"], capsys)
    assert rc == 0 and out.exists(), err


@pytest.mark.parametrize("keep, expect", [(None, 5), ("2", 2), ("0", 0)])
def test_backups_of_a_generated_file_are_bounded(tmp_path, capsys, keep, expect):
    """Every changed write kept a backup forever (26 after 30 writes): now
    the newest --keep-backups (default 5), 0 keeping none."""
    out = tmp_path / "topology.conf"
    two = [FAT, fixture("two_rails.topo")]
    for i in range(8):  # each write changes the file
        rc, _, err = run_main(["topology", "generate", "--ibnetdiscover", two[i % 2], "-o",
                               str(out), *(["--keep-backups", keep] if keep else [])], capsys)
        assert rc == 0 and f"wrote {out}" in err, err
    backups = sorted(tmp_path.glob("topology.conf.*.bak"))
    assert len(backups) == expect  # which ones: tests/test_hostile_input.py
    assert all(read_topology_conf(b).switches for b in backups)


def _nested_reports(tmp_path):
    """One NVLink fabric (cluster UUID) with two cliques of 4 and 3 trays,
    and a second fabric with one clique of 4."""
    fab, other = "5b1a2c3d-0000-4000-8000-00000000a001", "77aa2c3d-0000-4000-8000-00000000a002"
    nodes = ([node(f"r1t{i}", domain=(fab, 1)) for i in range(1, 5)]
             + [node(f"r2t{i}", domain=(fab, 2)) for i in range(1, 4)]
             + [node(f"r3t{i}", domain=(other, 1)) for i in range(1, 5)])
    return write_reports(tmp_path / "reports", nodes)


def test_domains_inside_domains_give_two_levels_and_placeholders(tmp_path, capsys):
    reports = _nested_reports(tmp_path)
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "block"],
                            capsys)
    assert rc == 0, err
    body = [ln for ln in out.splitlines() if not ln.startswith("#") or ln.startswith("# block")]
    # topograph: largest clique 4, largest domain 7 -> [4, 8]; the second
    # domain gets the same two-block slot as the first, one left empty
    assert body == ["# block001=5b1a2c3d-0000-4000-8000-00000000a001:1",
                    "BlockName=block001 Nodes=r1t[1-4]",
                    "# block002=5b1a2c3d-0000-4000-8000-00000000a001:2",
                    "BlockName=block002 Nodes=r2t[1-3]",
                    "# block003=77aa2c3d-0000-4000-8000-00000000a002",
                    "BlockName=block003 Nodes=r3t[1-4]",
                    "BlockName=block004",
                    "BlockSizes=4,8"]
    assert "1 placeholder(s) keeping block positions" in err
    assert "# 3 blocks, 11 nodes, 1 placeholder block(s)" in out
    rc, yout, err = run_main(["topology", "generate", "--reports", reports, "--format", "yaml"],
                             capsys)
    assert rc == 0, err
    assert "    - block: block004\n" in yout and "block_sizes:\n    - 4\n    - 8\n" in yout
    conf, yml = tmp_path / "topology.conf", tmp_path / "topology.yaml"
    conf.write_text(out)
    yml.write_text(yout)
    for path in (conf, yml):  # the files read back, placeholders included
        rc, cout, err = run_main(["topology", "check", str(path)], capsys)
        assert rc == 0, err


def test_block_names_from_node_names(tmp_path, capsys):
    reports = _nested_reports(tmp_path)
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "block",
                             "--block-name", r"^r([0-9]+)t=rack$1"], capsys)
    assert rc == 0, err
    names = [ln.split()[0] for ln in out.splitlines() if ln.startswith("BlockName=")]
    assert names == ["BlockName=rack1", "BlockName=rack2", "BlockName=rack3",
                     "BlockName=block004"]
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "block",
                             "--block-name", r"^(r)=x$1"], capsys)
    assert rc == 2 and "the same name" in err and "Traceback" not in err
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "block",
                             "--block-name", "nothing"], capsys)
    assert rc == 2 and "REGEXP=FORMAT" in err


def test_block_sizes_given_lay_out_placeholders(tmp_path, capsys):
    uuids = [f"{c}0000000-0000-4000-8000-00000000a00{c}" for c in "123"]
    nodes = [node(f"r{r}t{i}", domain=(u, 1)) for r, u in enumerate(uuids, 1)
             for i in range(1, 3)]
    reports = write_reports(tmp_path / "reports", nodes)
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "block",
                             "--block-sizes", "2,8"], capsys)
    assert rc == 0, err
    body = [ln for ln in out.splitlines() if ln.startswith(("BlockName", "BlockSizes"))]
    assert body == ["BlockName=block001 Nodes=r1t[1-2]", "BlockName=block002 Nodes=r2t[1-2]",
                    "BlockName=block003 Nodes=r3t[1-2]", "BlockName=block004",
                    "BlockSizes=2,8"]


def test_trays_with_fabric_not_completed_are_left_out_with_a_note(tmp_path, capsys):
    uuid = "5b1a2c3d-0000-4000-8000-00000000a001"
    nodes = [node(f"r1t{i}", domain=(uuid, 1)) for i in range(1, 4)] + [node("r1t4")]
    reports = write_reports(tmp_path / "reports", nodes, {
        **{f"r1t{i}": {"source": "nvml"} for i in range(1, 4)},
        "r1t4": {"source": "nvml", "nvlink_fabric": {"state": "in_progress", "gpus": [0]}}})
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "block"],
                            capsys)
    assert rc == 0, err
    assert "BlockName=nvl-5b1a2c3d-1 Nodes=r1t[1-3]\n" in out and "r1t4" not in out
    assert "1 tray(s) left out of NVLink blocks, their NVLink fabric not completed: " \
           "r1t4 (in_progress)" in err


def test_trays_of_another_clique_are_left_out_of_a_declared_rack(tmp_path, capsys):
    # the fabric document declares the rack; r1t3's agent reports clique 2
    # where the rack's other trays report 1: no NVLink to them, so it is
    # flagged and left out of the rack's block
    uuid = "5b1a2c3d-0000-4000-8000-00000000a001"
    nodes = [node(f"r1t{i}", domain=(uuid, 2 if i == 3 else 1)) for i in range(1, 5)]
    reports = write_reports(tmp_path / "reports", nodes)
    fab = tmp_path / "fabric.yaml"
    fab.write_text("slurmtopo: fabric\nfabric:\n  blocks:\n    - {name: rack1, nodes: \"r1t[1-4]\"}\n")
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--fabric", str(fab),
                             "--format", "block"], capsys)
    assert rc == 0, err
    assert "BlockName=rack1 Nodes=r1t[1-2,4]\n" in out
    assert "1 tray(s) left out of NVLink blocks, their NVLink clique not their rack's: " \
           "r1t3 (clique 2, rack rack1: 1)" in err


def test_with_reports_alone_a_lone_clique_is_a_sub_domain_not_a_stray(tmp_path, capsys):
    # reports only: no rack is declared, so nothing differs from one; r1t4
    # alone in clique 7 is a sub-domain of one tray, laid out as topograph
    # lays out sub-domains (its own block, BlockSizes from the largest
    # clique), never left out
    uuid = "5b1a2c3d-0000-4000-8000-00000000a001"
    nodes = [node(f"r1t{i}", domain=(uuid, 7 if i == 4 else 1)) for i in range(1, 5)]
    reports = write_reports(tmp_path / "reports", nodes)
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "block"],
                            capsys)
    assert rc == 0, err
    assert "clique not their rack's" not in err
    assert "Nodes=r1t[1-3]\n" in out and "Nodes=r1t4\n" in out, out
    halves = [node(f"r1t{i}", domain=(uuid, 1 + (i > 2))) for i in range(1, 5)]
    reports = write_reports(tmp_path / "halves", halves)
    rc, out, err = run_main(["topology", "generate", "--reports", reports, "--format", "block"],
                            capsys)
    assert rc == 0, err
    assert "clique not their rack's" not in err
    assert "Nodes=r1t[3-4]" in out
