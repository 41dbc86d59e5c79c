"""`slurmtopo nccl-topo`, the cloud presets and NCCL_TOPO_FILE in jobs.

What is written must read back into the same hardware (GPUs, NUMA, CPU
masks, NVLink, NICs and every GPU-NIC relation), be deterministic, and a
job on a virtualised node type must find the file through NCCL_TOPO_FILE.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmtopo.agent.nccl_xml import check_written, parse_nccl_xml, read_nccl_xml
from slurmtopo.cli import main
from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Gpu, Hardware, Inventory, Nic, Node, Placement, RankSlot
from slurmtopo.inventory.presets import preset
from slurmtopo.inventory.schema import dump_inventory, load_inventory, parse_inventory
from slurmtopo.plan.nccl_topo import render
from slurmtopo.plan.rankmap import nccl_env, nccl_topo_plan

ROOT = Path(__file__).resolve().parents[1]
XML = ROOT / "tests" / "fixtures" / "nccl_xml"
CLOUD = ("aws-p4d.24xlarge", "azure-nd96asr-v4", "azure-nd96isr-h100-v5")


def view(hw: Hardware):
    """Everything an NCCL topology file carries, device by device."""
    return ([(g.index, g.pci_bus_id, g.numa_node, g.cpus, g.pci_path) for g in hw.gpus],
            [list(r) for r in hw.links], hw.nvswitch,
            [(n.name, n.pci_bus_id, n.rate_gbps, n.port, n.link_layer, n.numa_node,
              n.gpu_relation, n.pci_path) for n in hw.compute_nics()])


def back(text: str) -> Hardware:
    return parse_nccl_xml(text, "<written>").node.hardware


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


# -- round trip --------------------------------------------------------------------

@pytest.mark.parametrize("name", CLOUD)
def test_cloud_presets_round_trip(name):
    hw = preset(name)
    text = render(hw, name).text
    assert view(back(text)) == view(hw)
    assert check_written(hw, text, name) == []


@pytest.mark.parametrize("fixture", ["aws_p4d_like_skeleton.xml", "aws_p5_like_full.xml",
                                     "azure_ndv4_like_skeleton.xml", "azure_ndv5_like_full.xml",
                                     "pcie_pairs_full.xml"])
def test_files_read_write_read(fixture):
    hw = read_nccl_xml(str(XML / fixture), node_name="n").node.hardware
    once = render(hw).text
    assert view(back(once)) == view(hw)
    assert render(back(once)).text == once  # a fixed point: nothing drifts


def test_a_discovered_node_without_switch_ids_gets_made_up_switches():
    """Hardware from NVML has no pci_path: switches are made up from the
    relations (PIX: one switch, PXB: a common switch above two) and every
    relation survives."""
    hw = preset("hgx-a100-8")  # NICs PXB to a GPU pair, no bus ids
    hw = replace(hw, gpus=tuple(replace(g, pci_bus_id=f"0000:{0x10 * (g.index + 1):02x}:00.0")
                                for g in hw.gpus),
                 nics=tuple(replace(n, pci_bus_id=f"0000:{0x10 * (k + 1) + 8:02x}:00.0")
                            for k, n in enumerate(hw.nics)))
    text = render(hw).text
    assert "ffff:ff:01.0" in text and "pci_path" not in text
    got = back(text)
    assert [n.gpu_relation for n in got.nics] == [n.gpu_relation for n in hw.nics]
    assert got.links == hw.links and got.nvswitch
    assert check_written(hw, text, "x") == []


def test_relations_nccl_cannot_say_are_reported():
    """PHB (a shared host bridge) has no spelling in NCCL's format."""
    hw = Hardware(gpus=(Gpu(0, pci_bus_id="0000:01:00.0", numa_node=0),
                        Gpu(1, pci_bus_id="0000:02:00.0", numa_node=0)),
                  links=(("X", "PHB"), ("PHB", "X")),
                  nics=(Nic("mlx5_0", pci_bus_id="0000:03:00.0", numa_node=0,
                            gpu_relation=("PHB", "NODE")),))
    diffs = check_written(hw, render(hw).text, "x")
    assert "GPU0-GPU1 is PHB but reads back as NODE" in diffs
    assert "GPU0-mlx5_0 is PHB but reads back as NODE" in diffs


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_tree_round_trips(data):
    """Random machines: GPUs and NICs on NUMA nodes, under switches two
    levels deep, written and read back with the same relations."""
    n_gpu = data.draw(st.integers(1, 6))
    n_nic = data.draw(st.integers(0, 5))
    devs = []
    for k in range(n_gpu + n_nic):
        numa = data.draw(st.integers(0, 1))
        top = data.draw(st.sampled_from([(), ("0000:a0:00.0",), ("0000:b0:00.0",)]))
        leaf = data.draw(st.sampled_from([(), ("0000:a1:00.0",), ("0000:a2:00.0",)])) \
            if top == ("0000:a0:00.0",) else ()
        devs.append((numa, tuple(f"{numa}{b[1:]}" for b in top + leaf)))
    xml = ['<system version="1">']
    for numa in (0, 1):
        xml.append(f'<cpu numaid="{numa}" affinity="{"0000ffff" if numa == 0 else "ffff0000"}">')
        for k, (nm, path) in enumerate(devs):
            if nm != numa:
                continue
            opens = "".join(f'<pci busid="{b}" class="0x060400">' for b in path)
            bus = f"{0x10 + k:04x}:00:00.0"
            inner = (f'<pci busid="{bus}" class="0x030200"/>' if k < n_gpu else
                     f'<pci busid="{bus}" class="0x020700"><nic><net name="mlx5_{k}" '
                     f'dev="{k}" speed="200000" port="1"/></nic></pci>')
            xml.append(opens + inner + "</pci>" * len(path))
        xml.append("</cpu>")
    xml.append("</system>")
    hw = back("\n".join(xml))
    again = back(render(hw).text)
    assert view(again) == view(hw)
    # and when the switch ids are forgotten, made-up ones keep the relations
    bare = replace(hw, gpus=tuple(replace(g, pci_path=()) for g in hw.gpus),
                   nics=tuple(replace(n, pci_path=()) for n in hw.nics))
    made = back(render(bare).text)
    assert [n.gpu_relation for n in made.nics] == [n.gpu_relation for n in hw.nics]
    assert made.links == hw.links


def test_output_is_deterministic_across_hash_seeds(tmp_path):
    code = ("from slurmtopo.inventory.presets import preset; "
            "from slurmtopo.plan.nccl_topo import render; "
            "import sys; sys.stdout.write(render(preset('azure-nd96asr-v4'), 't').text)")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
            for seed in ("1", "2", "3")}
    assert len(outs) == 1


def test_nothing_to_match_is_an_error():
    with pytest.raises(SlurmtopoError, match="no GPU or NIC has a PCI bus id"):
        render(preset("hgx-h100-8"))


def test_p5_writes_the_efa_devices_below_the_switches_without_gpus():
    r = render(preset("aws-p5.48xlarge"), "p5")
    assert r.text.count("<net ") == 32 and "0x030200" not in r.text
    assert '<pci busid="0000:45:00.0" class="0x060400"' in r.text
    assert any("GPU0" in n and "left out" in n for n in r.notes)


# -- presets: what the providers' files say ----------------------------------------

def pix(hw, g):
    return [n.name for n in hw.nics if n.gpu_relation[g] == "PIX"]


def test_preset_facts():
    p4d = preset("aws-p4d.24xlarge")
    assert p4d.model == "NVIDIA A100-SXM4-40GB" and p4d.links[0][7] == "NV12" and p4d.nvswitch
    assert len(p4d.nics) == 4 and {n.rate_gbps for n in p4d.nics} == {100}
    assert [pix(p4d, g) for g in range(8)] == [["rdmap16s27"]] * 2 + [["rdmap32s27"]] * 2 \
        + [["rdmap144s27"]] * 2 + [["rdmap160s27"]] * 2
    p5 = preset("aws-p5.48xlarge")
    assert p5.model == "NVIDIA H100 80GB HBM3" and p5.links[0][1] == "NV18"
    assert len(p5.nics) == 32 and all(len(pix(p5, g)) == 4 for g in range(8))
    nd4 = preset("azure-nd96asr-v4")
    assert nd4.model == "NVIDIA A100-SXM4-80GB" and len({g.numa_node for g in nd4.gpus}) == 4
    assert len(nd4.nics) == 8 and {(n.rate_gbps, n.link_layer) for n in nd4.nics} \
        == {(200, "InfiniBand")}
    nd5 = preset("azure-nd96isr-h100-v5")
    assert {(n.rate_gbps, n.link_layer) for n in nd5.nics} == {(400, "InfiniBand")}
    assert [pix(nd5, g) for g in range(8)] == [[f"mlx5_ib{g}"] for g in range(8)]
    oci = preset("oci-bm.gpu.h100.8")
    assert not oci.virtualised and len(oci.nics) == 16
    assert {(n.rate_gbps, n.link_layer) for n in oci.nics} == {(200, "Ethernet")}
    assert all(len(pix(oci, g)) == 2 for g in range(8))
    assert all(preset(p).virtualised for p in CLOUD + ("aws-p5.48xlarge",))


def test_presets_agree_with_provider_style_files():
    """The project's provider-style fixtures and the presets describe the
    same machines: same bus ids, NUMA nodes and GPU-NIC pairs."""
    for name, fixture in (("aws-p4d.24xlarge", "aws_p4d_like_skeleton.xml"),
                          ("azure-nd96asr-v4", "azure_ndv4_like_skeleton.xml")):
        hw, got = preset(name), read_nccl_xml(str(XML / fixture), node_name="n").node.hardware
        assert [(g.pci_bus_id, g.numa_node, g.cpus) for g in hw.gpus] \
            == [(g.pci_bus_id, g.numa_node, g.cpus) for g in got.gpus]
        assert [(n.pci_bus_id, n.gpu_relation) for n in hw.nics] \
            == [(n.pci_bus_id, n.gpu_relation) for n in got.nics]


def test_virtualised_and_topo_file_keys_round_trip_through_the_schema(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("node_types:\n  vm:\n    preset: azure-nd96asr-v4\n"
                 "    nccl_topo_file: /opt/microsoft/ndv4-topo.xml\n"
                 "  bare:\n    preset: aws-p4d.24xlarge\n    virtualised: false\n"
                 "nodes:\n  - {name: 'a[1-2]', type: vm}\n  - {name: b1, type: bare}\n")
    inv = load_inventory(str(p))
    assert inv.nodes["a1"].hardware.virtualised and not inv.nodes["b1"].hardware.virtualised
    again = parse_inventory(__import__("yaml").safe_load(dump_inventory(inv)), "again")
    assert again.nodes["a1"].hardware == inv.nodes["a1"].hardware
    assert again.nodes["a1"].hardware.gpus[0].pci_path == ("ffff:ff:02.0",)
    p.write_text("nodes:\n  - name: x\n    type: aws-p4d.24xlarge\n    gpus:\n"
                 "      - {index: 0, pci_path: 'not-a-bus'}\n")
    with pytest.raises(SlurmtopoError, match=r"inv.yaml:5: .*not a PCI bus id"):
        load_inventory(str(p))


# -- the command -------------------------------------------------------------------

@pytest.fixture
def cloud(tmp_path):
    p = tmp_path / "cloud.yaml"
    p.write_text("nodes:\n  - {name: 'p4d-[01-04]', type: aws-p4d.24xlarge}\n"
                 "  - {name: 'nd-[01-02]', type: azure-nd96asr-v4}\n"
                 "  - {name: h1, type: hgx-h100-8}\n")
    return p


def test_command_writes_one_file_per_type(cloud, tmp_path, capsys):
    out = tmp_path / "topo"
    code, text, err = run(["nccl-topo", "-i", str(cloud), "-o", str(out),
                           "--virtualised-only"], capsys)
    assert code == 0, err
    assert sorted(os.listdir(out)) == ["aws-p4d.24xlarge.xml", "azure-nd96asr-v4.xml"]
    assert "for 4 node(s): p4d-[01-04]" in text
    hw = read_nccl_xml(str(out / "azure-nd96asr-v4.xml"), node_name="n").node.hardware
    assert view(hw) == view(preset("azure-nd96asr-v4"))
    code, text, _ = run(["nccl-topo", "-i", str(cloud), "-o", str(out), "--type",
                         "azure-nd96asr-v4"], capsys)
    assert code == 0 and text.startswith("unchanged") and len(os.listdir(out)) == 2


def test_command_output_dir_modes_backups_and_refusals(cloud, tmp_path, capsys):
    """The directory was made with the umask (0775 under umask 002) and
    used whoever could write it; files went in by path. Now: 0755 made,
    files 0644 (every user's jobs read them), the previous file kept as a
    backup; a directory others may write, or a link, is refused."""
    import stat

    out = tmp_path / "made" / "topo"
    args = ["nccl-topo", "-i", str(cloud), "-o", str(out), "--type", "aws-p4d.24xlarge"]
    old = os.umask(0o002)
    try:
        code, _, err = run(args + ["--no-nvlink"], capsys)
    finally:
        os.umask(old)
    assert code == 0, err
    assert [stat.S_IMODE(p.stat().st_mode) for p in (out.parent, out)] == [0o755, 0o755]
    first = (out / "aws-p4d.24xlarge.xml").read_text()
    assert stat.S_IMODE((out / "aws-p4d.24xlarge.xml").stat().st_mode) == 0o644
    code, text, err = run(args, capsys)
    assert code == 0, err
    (backup,) = [p for p in out.iterdir() if p.name.endswith(".bak")]
    assert backup.name.startswith("aws-p4d.24xlarge.xml.") and backup.read_text() == first
    assert f"(previous kept as {backup})" in text
    assert sorted(p.name for p in out.iterdir()) == sorted(["aws-p4d.24xlarge.xml", backup.name])
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    code, text, err = run(["nccl-topo", "-i", str(cloud), "-o", str(shared), "--type",
                           "aws-p4d.24xlarge"], capsys)
    assert code == 2 and text == "" and err.count("\n") == 1
    assert "other users may write in it" in err
    assert list(shared.iterdir()) == []
    link = tmp_path / "link"
    link.symlink_to(out)
    code, text, err = run(["nccl-topo", "-i", str(cloud), "-o", str(link), "--type",
                           "aws-p4d.24xlarge", "--no-nvlink"], capsys)
    assert code == 2 and "symbolic link" in err and (out / "aws-p4d.24xlarge.xml").read_text() != first


def test_command_fails_whole_before_writing(cloud, tmp_path, capsys):
    out = tmp_path / "topo"
    code, text, err = run(["nccl-topo", "-i", str(cloud), "-o", str(out)], capsys)
    assert code == 2 and text == "" and not out.exists()
    assert err.count("\n") == 1 and "node type hgx-h100-8: no GPU or NIC" in err
    code, _, err = run(["nccl-topo", "-i", str(cloud), "-o", str(out), "--type", "nope"], capsys)
    assert code == 2 and "no node of type nope" in err


def test_command_no_nvlink_leaves_gpus_bare(cloud, tmp_path, capsys):
    out = tmp_path / "topo"
    code, _, err = run(["nccl-topo", "-i", str(cloud), "-o", str(out), "--type",
                        "aws-p4d.24xlarge", "--no-nvlink"], capsys)
    assert code == 0, err
    text = (out / "aws-p4d.24xlarge.xml").read_text()
    assert "<gpu" not in text and "<nvlink" not in text
    # NVLink is then NCCL's business: the reader says so, and the check warns
    assert "GPU0-GPU1 is NV12 but reads back as PIX" in err


# -- NCCL_TOPO_FILE in the job ------------------------------------------------------

def _inv(*types):
    nodes = {}
    for k, t in enumerate(types):
        nodes[f"n{k}"] = Node(f"n{k}", preset(t), type=t)
    return Inventory(nodes=nodes)


def _placement(hosts):
    slots = tuple(RankSlot(rank=k, host=h, gpu=0, local_rank=0) for k, h in enumerate(hosts))
    return Placement(slots=slots, groups={}, hosts=tuple(hosts))


def test_topo_file_env_for_one_virtualised_type():
    inv = _inv("azure-nd96asr-v4", "azure-nd96asr-v4")
    plan = nccl_topo_plan(inv, _placement(["n0", "n1"]), "/runs/42")
    assert plan.env == {"NCCL_TOPO_FILE": "/runs/42/nccl-topo-azure-nd96asr-v4.xml"}
    assert plan.write == ("/runs/42/nccl-topo-azure-nd96asr-v4.xml", preset("azure-nd96asr-v4"))
    assert nccl_env(inv, _placement(["n0"]))["NCCL_TOPO_FILE"] \
        == "${SLURMTOPO_RUN_DIR}/nccl-topo-azure-nd96asr-v4.xml"


def test_topo_file_env_named_file_bare_metal_and_mixed_jobs():
    hw = replace(preset("azure-nd96asr-v4"), nccl_topo_file="/opt/microsoft/ndv4-topo.xml")
    inv = Inventory(nodes={"n0": Node("n0", hw, type="nd")})
    plan = nccl_topo_plan(inv, _placement(["n0"]), "/runs/1")
    assert plan.env == {"NCCL_TOPO_FILE": "/opt/microsoft/ndv4-topo.xml"} and plan.write is None
    assert "NCCL_TOPO_FILE" not in nccl_env(_inv("oci-bm.gpu.h100.8"), _placement(["n0"]))
    mixed = nccl_topo_plan(_inv("azure-nd96asr-v4", "hgx-h100-8"), _placement(["n0", "n1"]))
    assert mixed.env == {} and "spans node types" in mixed.note


def test_a_job_on_virtualised_nodes_gets_the_file(tmp_path):
    """The batch script run under bash with a fake Slurm: env.sh exports
    NCCL_TOPO_FILE, the file is in the run directory and reads back."""
    from slurmtopo.binding.replan import fill_placement
    from slurmtopo.job.groups import Layout
    from tests.test_binding import DUMP_RANK, _run_job, _script

    inv_path = tmp_path / "vm.yaml"
    inv_path.write_text("nodes:\n  - {name: 'nd[01-02]', type: azure-nd96asr-v4}\n")
    inv = load_inventory(str(inv_path))
    layout = Layout(tp=8, dp=2).resolved()
    alloc = {"nd01": list(range(8)), "nd02": list(range(8))}
    p = fill_placement(inv, list(alloc.items()), layout)
    script = _script(inv, p, layout, [sys.executable, "-c", DUMP_RANK], inventory_path=inv_path)
    assert "# NCCL_TOPO_FILE=${SLURMTOPO_RUN_DIR}/nccl-topo-azure-nd96asr-v4.xml" in script
    proc, ranks, _ = _run_job(tmp_path, script, alloc, cgroup=False)
    assert proc.returncode == 0, proc.stderr
    got = {r["env"]["NCCL_TOPO_FILE"] for r in ranks.values()}
    assert len(got) == 1 and len(ranks) == 16
    want = got.pop()
    run_dir = {r["env"]["SLURMTOPO_RUN_DIR"] for r in ranks.values()}.pop()
    assert want == os.path.join(run_dir, "nccl-topo-azure-nd96asr-v4.xml")
    assert Path(run_dir).is_relative_to(tmp_path)
    hw = read_nccl_xml(want, node_name="n").node.hardware
    assert view(hw) == view(preset("azure-nd96asr-v4"))
    assert "must be readable on every node" in proc.stderr


def _nvl72_vm_inventory(topo_file):
    """Two GB200 trays as VMs (a cloud's NVL72) in one NVLink domain, the
    admin naming the node type's topology file."""
    from slurmtopo.inventory.model import NvlinkDomain

    hw = replace(preset("gb200-nvl72-tray"), virtualised=True, nccl_topo_file=str(topo_file))
    dom = NvlinkDomain("5b1a2c3d-0000-4000-8000-000000000001", 1)
    return Inventory(nodes={f"n{k}": Node(f"n{k}", hw, type="gb200-vm", nvlink_domain=dom)
                            for k in range(2)}), hw


#: one GB200 tray as NCCL dumps it (4 GPUs under one Grace), trimmed
_TRAY_XML = """<system version="1">
  <cpu numaid="0" arch="arm64" vendor="NVIDIA">
    <pci busid="0008:01:00.0" class="0x030200"><gpu dev="0" sm="100" rank="0" gdr="1"/></pci>
    <pci busid="0009:01:00.0" class="0x030200"><gpu dev="1" sm="100" rank="1" gdr="1"/></pci>
  </cpu>
  <cpu numaid="1" arch="arm64" vendor="NVIDIA">
    <pci busid="0018:01:00.0" class="0x030200"><gpu dev="2" sm="100" rank="2" gdr="1"/></pci>
    <pci busid="0019:01:00.0" class="0x030200"><gpu dev="3" sm="100" rank="3" gdr="1"/></pci>
  </cpu>
</system>
"""


def test_rendered_files_describe_one_node():
    from slurmtopo.plan.nccl_topo import single_node_problem

    for name in ("aws-p5.48xlarge", "azure-nd96asr-v4", "azure-nd96isr-h100-v5"):
        hw = preset(name)
        assert single_node_problem(render(hw).text, hw) is None, name
    tray = preset("gb200-nvl72-tray")
    assert single_node_problem(_TRAY_XML, tray) is None
    rack = _TRAY_XML.replace("</system>", "").replace('<system version="1">', "") * 18
    assert "72 GPUs where a node has 4" in single_node_problem(
        '<system version="1">' + rack + "</system>", tray)


def test_a_domain_dump_as_nccl_topo_file_is_dropped_at_job_start(tmp_path):
    # NCCL_TOPO_DUMP_FILE on an NVL72 job writes every tray, each <cpu>
    # with its host_hash: NCCL wants one node's file (env.rst), so the
    # start-time step leaves NCCL_TOPO_FILE out and says why
    from slurmtopo.binding.step import _topo_file

    dump = tmp_path / "dump.xml"
    dump.write_text(_TRAY_XML.replace('<cpu numaid="0"', '<cpu host_hash="0x1a" numaid="0"')
                    .replace('<cpu numaid="1"', '<cpu host_hash="0x2b" numaid="1"'))
    inv, _ = _nvl72_vm_inventory(dump)
    p = _placement(["n0", "n1"])
    jenv = nccl_env(inv, p)
    assert jenv["NCCL_TOPO_FILE"] == str(dump)
    log = []
    _topo_file(inv, p, None, log, jenv)
    assert "NCCL_TOPO_FILE" not in jenv
    assert any("NCCL_TOPO_FILE not set" in line and "2 hosts" in line for line in log), log
    good = tmp_path / "tray.xml"
    good.write_text(_TRAY_XML)
    inv, _ = _nvl72_vm_inventory(good)
    jenv = nccl_env(inv, p)
    _topo_file(inv, p, None, [], jenv)
    assert jenv["NCCL_TOPO_FILE"] == str(good)


def test_no_file_rendered_no_variable(tmp_path):
    # a virtualised type whose hardware has no PCI bus ids cannot be
    # rendered: the job must not get NCCL_TOPO_FILE naming a file that is
    # never written (NCCL would fail to open it)
    from slurmtopo.binding.step import _topo_file

    hw = replace(preset("hgx-b200-8"), virtualised=True)
    inv = Inventory(nodes={"n0": Node("n0", hw, type="vm")})
    p = _placement(["n0"])
    jenv = nccl_env(inv, p, run_dir=str(tmp_path))
    assert jenv["NCCL_TOPO_FILE"].startswith(str(tmp_path))
    log = []
    assert _topo_file(inv, p, str(tmp_path), log, jenv) == {}
    assert "NCCL_TOPO_FILE" not in jenv
    assert any(line.startswith("no NCCL topology file") for line in log), log
