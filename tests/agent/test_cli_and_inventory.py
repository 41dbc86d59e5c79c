"""``slurmtopo agent ...`` end to end (NVML faked in sys.modules), and the
planner reading a directory of agent reports with no conversion step."""
from __future__ import annotations

import json
import socket
import sys

import pytest
import yaml

from slurmtopo.cli import COMMANDS, main
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.inventory.topology import nvlink_islands

from slurmtopo.testing.fake_pynvml import FakeNvml

from .conftest import FIXTURES


def run(capsys, *args):
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def node(machine, monkeypatch):
    """Make this test's 'local machine' one of the fixtures."""
    def use(name, hostname="gpu42.cluster.example"):
        m = machine(name)
        monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(m.spec))
        monkeypatch.setattr(socket, "gethostname", lambda: hostname)
        return m
    return use


def test_agent_is_registered():
    assert COMMANDS["agent"] == "agent"


def test_help(capsys):
    code, out, _ = run(capsys, "agent", "--help")
    assert code == 0 and all(c in out for c in ("discover", "gres", "run"))


def test_discover_prints_the_report_named_after_the_short_hostname(node, capsys):
    m = node("dgx_a100")
    code, out, err = run(capsys, "agent", "discover", "--sysfs-root", str(m.root))
    assert code == 0 and err == ""
    doc = yaml.safe_load(out)
    assert doc["slurmtopo"] == "node-report" and doc["nodes"][0]["name"] == "gpu42"
    assert doc["report"]["hostname"] == "gpu42"


def test_discover_to_a_json_file(node, capsys, tmp_path):
    m = node("gb200_tray")
    out = tmp_path / "r.json"
    code, _, _ = run(capsys, "agent", "discover", "--sysfs-root", str(m.root), "--node-name",
                     "tray07", "-o", str(out))
    assert code == 0
    assert json.loads(out.read_text())["nodes"][0]["nvlink_domain"]["clique_id"] == 32766
    assert load_inventory(str(out)).node("tray07").hardware.gpu_count == 4


def test_discover_without_driver_exits_1_with_the_report(node, capsys):
    m = node("l40s_pcie")
    m.spec["init_error"] = "DRIVER_NOT_LOADED"
    code, out, err = run(capsys, "agent", "discover", "--sysfs-root", str(m.root))
    assert code == 1
    assert yaml.safe_load(out)["report"]["problems"] == ["NVML cannot start: Driver Not Loaded"]
    assert "Driver Not Loaded" in err and "error: no usable GPU on gpu42" in err


def test_gres_command(node, capsys):
    m = node("a100_mig")
    code, out, _ = run(capsys, "agent", "gres", "--sysfs-root", str(m.root))
    assert code == 0
    lines = [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert "\n".join(lines) + "\n" == m.expect["gres"]
    assert "# GPU 0 MIG 0 (GI 1, CI 0, 3g.20gb): UniqueId=MIG-91000000-" in out
    code, out, _ = run(capsys, "agent", "gres", "--sysfs-root", str(m.root), "--type", "a100")
    assert "Type=a100_3g.20gb" in out and "Type=a100 File=/dev/nvidia1" in out


def test_gres_command_for_an_older_slurm(node, capsys):
    m = node("a100_mig")
    code, out, _ = run(capsys, "agent", "gres", "--sysfs-root", str(m.root),
                       "--slurm-version", "23.02.6")
    assert code == 0
    mig = [ln for ln in out.splitlines() if "MultipleFiles=" in ln]
    assert len(mig) == 3 and mig[0].endswith(" Cores=0-15 Links=-1,0,0")
    code, _, err = run(capsys, "agent", "gres", "--sysfs-root", str(m.root),
                       "--slurm-version", "latest")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "not a Slurm version (like 23.11 or 23.02.7): 'latest'" in err


def test_gres_from_a_saved_report(node, capsys, tmp_path):
    m = node("dgx1_v100")
    report = tmp_path / "n.yaml"
    run(capsys, "agent", "discover", "--sysfs-root", str(m.root), "-o", str(report))
    code, out, _ = run(capsys, "agent", "gres", "--report", str(report))
    assert code == 0 and m.expect["gres"] in out


def test_gres_from_smi(capsys, tmp_path):
    path = FIXTURES / "smi" / "real" / "stas00_h100_sxm_8gpu_2numa_ht.txt"
    out_file = tmp_path / "gres.conf"
    code, _, err = run(capsys, "agent", "gres", "--from-smi", str(path), "--node-name", "h1",
                       "--model", "NVIDIA H100 80GB HBM3", "-o", str(out_file))
    assert code == 0
    text = out_file.read_text()
    assert "Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 Cores=0-51 " \
           "Links=-1,0,0,0,0,0,0,0" in text
    assert "# NVSwitch" in text and "device minors unknown" in err


def test_discover_from_pdsh_output(capsys, tmp_path):
    path = FIXTURES / "smi" / "pdsh_two_hosts.txt"
    code, _, err = run(capsys, "agent", "discover", "--from-smi", str(path))
    assert code == 2 and "give --output-dir" in err
    code, _, _ = run(capsys, "agent", "discover", "--from-smi", str(path), "--output-dir",
                     str(tmp_path))
    assert code == 0
    inv = load_inventory(str(tmp_path))
    assert sorted(inv.nodes) == ["gpu-a100-01", "gpu-l40s-07"]


def test_discover_output_dir_whatever_the_umask(capsys, tmp_path):
    """umask 002 made the report directory 0775 and its reports 0664: any
    group member could rewrite the hardware every user's planner reads.
    Now reports are 0644 in directories made 0755 (missing parents too)."""
    import os
    import stat

    path = FIXTURES / "smi" / "pdsh_two_hosts.txt"
    out = tmp_path / "new" / "reports"
    old = os.umask(0o002)
    try:
        code, _, err = run(capsys, "agent", "discover", "--from-smi", str(path),
                           "--output-dir", str(out))
    finally:
        os.umask(old)
    assert code == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert stat.S_IMODE(out.parent.stat().st_mode) == 0o755
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {
        "gpu-a100-01.yaml": 0o644, "gpu-l40s-07.yaml": 0o644}


def test_discover_output_dir_others_may_write_or_a_link_is_refused(capsys, tmp_path):
    """A directory others may write (or a link to one), e.g. a /tmp/reports
    someone else made first: they could replace a report after it was
    written. Refused before anything is written, one line."""
    import os

    path = FIXTURES / "smi" / "pdsh_two_hosts.txt"
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    code, out, err = run(capsys, "agent", "discover", "--from-smi", str(path),
                         "--output-dir", str(shared))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert str(shared) in err and "other users may write in it" in err
    assert list(shared.iterdir()) == []
    os.chmod(shared, 0o755)
    link = tmp_path / "link"
    link.symlink_to(shared)
    code, _, err = run(capsys, "agent", "discover", "--from-smi", str(path),
                       "--output-dir", str(link))
    assert code == 2 and "symbolic link" in err and len(err.strip().splitlines()) == 1
    assert list(shared.iterdir()) == []


def test_bad_smi_text_is_one_error_line_with_file_and_line(capsys, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV2\t Y \n")
    code, out, err = run(capsys, "agent", "discover", "--from-smi", str(bad), "--node-name", "x")
    assert code == 2 and out == ""
    assert err.startswith(f"slurmtopo: error: {bad}:3: row GPU1, column GPU1: unknown link 'Y'")
    assert len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "agent", "discover", "--from-smi", str(tmp_path / "nope.txt"))
    assert code == 2 and "cannot read" in err


def test_run_once_drains_through_scontrol_on_path(node, capsys, tmp_path, scontrol):
    m = node("gb200_tray", hostname="tray03")
    reports = tmp_path / "reports"
    reports.mkdir()
    args = ["agent", "run", "--once", "--drain", "--report-dir", str(reports),
            "--sysfs-root", str(m.root)]
    code, _, _ = run(capsys, *args)
    assert code == 0 and (reports / "tray03.yaml").exists() and scontrol.calls == []
    m.spec["gpus"][1]["nvlinks"] = ["switch:0"] * 16 + ["down", "down"]
    code, _, err = run(capsys, *args)
    assert code == 1 and "slurmtopo: error: degraded: GPU 1" in err
    (call,) = scontrol.calls
    assert call[:3] == ["update", "NodeName=tray03", "State=DRAIN"]
    assert call[3] == ("Reason=slurmtopo: GPU 1 (GPU-f1000000-0000-4000-8000-000000000001) "
                       "NVLink 16,17 down")
    m.spec["gpus"][1]["nvlinks"] = {"switch": 18, "switches": 9}
    code, _, _ = run(capsys, *args)
    assert code == 0 and scontrol.calls[-1] == ["update", "NodeName=tray03", "State=RESUME"]


def test_run_needs_an_existing_report_dir(capsys, tmp_path):
    code, _, err = run(capsys, "agent", "run", "--once", "--report-dir", str(tmp_path / "x"))
    assert code == 2 and "does not exist" in err


# -- the planner reads a directory of reports ---------------------------------------


def test_reports_of_many_nodes_are_an_inventory(machine, tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    for name, nodes in (("dgx_a100", ["dgx01", "dgx02"]), ("hgx_h100", ["h100-01"]),
                        ("gb200_tray", ["tray01", "tray02"]), ("a100_mig", ["mig01"]),
                        ("dgx1_v100", ["v100-01"])):
        for n in nodes:
            d = machine(name, node_name=n).discover()
            (reports / f"{n}.yaml").write_text(d.render())
    from slurmtopo.agent.smi import smi_discovery

    path = FIXTURES / "smi" / "real" / "berkeley_savio4_n0123_8x_rtxa5000_pcie_switch_2mlx5.txt"
    (d,) = smi_discovery(path.read_text(), str(path), node_name="n0123",
                         model="NVIDIA RTX A5000")
    (reports / "n0123.json").write_text(d.render("json"))
    (reports / "fabric.yaml").write_text(yaml.safe_dump({
        "slurmtopo": "fabric", "fabric": {"switches": [
            {"name": "leaf1", "nodes": "dgx[01-02],h100-01"},
            {"name": "leaf2", "nodes": "tray[01-02],mig01,v100-01,n0123"},
            {"name": "spine", "switches": ["leaf1", "leaf2"]}]}}))
    inv = load_inventory(str(reports))
    assert sorted(inv.nodes) == ["dgx01", "dgx02", "h100-01", "mig01", "n0123", "tray01",
                                 "tray02", "v100-01"]
    assert inv.gpu_count == 8 * 4 + 4 * 2 + 2 + 8
    assert inv.node("tray01").nvlink_domain == inv.node("tray02").nvlink_domain
    assert nvlink_islands(inv.node("dgx02").hardware) == (tuple(range(8)),)
    assert inv.reports["n0123"]["source"] == "nvidia-smi topo -m"
    assert inv.reports["dgx01"]["source"] == "nvml"
    assert len(inv.fabric.switches) == 3
