"""`agent discover --from-nccl-xml / --from-hwloc`: NCCL's topology XML and
hwloc's XML read into node reports, merged with NVML on the node, and
broken or hostile files refused in one line."""
from __future__ import annotations

import sys
import tempfile

import pytest
import yaml

from slurmtopo.agent.hwloc_xml import read_hwloc_xml
from slurmtopo.agent.nccl_xml import read_nccl_xml
from slurmtopo.agent.nvml_discovery import discover
from slurmtopo.agent.overlay import overlay_tree
from slurmtopo.cli import main
from slurmtopo.errors import InventoryError
from slurmtopo.inventory.model import format_cpumask, parse_cpumask
from slurmtopo.inventory.presets import preset
from slurmtopo.inventory.schema import load_inventory

from .conftest import FIXTURES
from slurmtopo.testing.fake_pynvml import FakeNvml
from slurmtopo.testing.fake_sysfs import build_sysfs

XML = FIXTURES / "nccl_xml"
HWLOC = FIXTURES / "hwloc" / "two_socket_gpu_node.xml"


def rels(hw):
    return {n.name: " ".join(n.gpu_relation) for n in hw.nics}


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


# -- NCCL XML: skeleton style (PCI classes only) -------------------------------

def test_aws_like_skeleton_efa_nics_next_to_gpu_pairs():
    d = read_nccl_xml(str(XML / "aws_p4d_like_skeleton.xml"), node_name="p4d-1")
    hw = d.node.hardware
    assert [g.pci_bus_id for g in hw.gpus] == ["0000:10:1c.0", "0000:10:1d.0", "0000:20:1c.0",
                                               "0000:20:1d.0", "0000:90:1c.0", "0000:90:1d.0",
                                               "0000:a0:1c.0", "0000:a0:1d.0"]
    assert [g.numa_node for g in hw.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    # EFA (class 0x020000) is a NIC, Ethernet, one per switch of two GPUs
    assert len(hw.nics) == 4 and {n.link_layer for n in hw.nics} == {"Ethernet"}
    assert rels(hw)["nic-0000:10:1b.0"] == "PIX PIX NODE NODE SYS SYS SYS SYS"
    assert rels(hw)["nic-0000:a0:1b.0"] == "SYS SYS SYS SYS NODE NODE PIX PIX"
    assert hw.links[0][1] == "PIX" and hw.links[0][2] == "NODE" and hw.links[0][4] == "SYS"
    # the CPU masks: numa 0 = 0-23 + 48-71 (hyper-threads)
    assert hw.gpus[0].cpus == tuple(range(24)) + tuple(range(48, 72))
    assert hw.cpu.threads_per_core == 2
    assert any("does not describe NVLink" in p for p in d.problems)
    assert any("does not name some NICs" in p for p in d.problems)


def test_azure_like_skeleton_four_numa_nodes_and_ib_class():
    hw = read_nccl_xml(str(XML / "azure_ndv4_like_skeleton.xml"), node_name="v").node.hardware
    assert [g.numa_node for g in hw.gpus] == [1, 1, 0, 0, 3, 3, 2, 2]
    assert [n.pci_bus_id for n in hw.nics] == [f"01{k:02x}:00:00.0" for k in range(1, 9)]
    assert {n.link_layer for n in hw.nics} == {"InfiniBand"}
    assert rels(hw)["nic-0101:00:00.0"] == "PIX PIX SYS SYS SYS SYS SYS SYS"
    assert rels(hw)["nic-0108:00:00.0"] == "SYS SYS SYS SYS SYS SYS PIX PIX"
    assert hw.gpus[0].pci_path == ("ffff:ff:02.0",)


# -- NCCL XML: NCCL's own dump style --------------------------------------------

def test_full_style_nvswitch_names_speed_and_four_efa_per_gpu():
    d = read_nccl_xml(str(XML / "aws_p5_like_full.xml"), node_name="p5-1",
                      model="NVIDIA H100 80GB HBM3")
    hw = d.node.hardware
    assert hw.nvswitch and {hw.links[a][b] for a in range(8) for b in range(8) if a != b} \
        == {"NV18"}
    assert len(hw.nics) == 32 and {n.rate_gbps for n in hw.nics} == {100.0}
    assert [n.name for n in hw.nics[:4]] == ["rdmap79s0", "rdmap80s0", "rdmap81s0", "rdmap82s0"]
    for g in range(8):
        near = [n.name for n in hw.nics if n.gpu_relation[g] == "PIX"]
        assert len(near) == 4, (g, near)
    assert {g.model for g in hw.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert not any("model unknown" in p for p in d.problems)


def test_nvlink_counts_per_switch_add_up():
    hw = read_nccl_xml(str(XML / "azure_ndv5_like_full.xml"), node_name="v5").node.hardware
    assert hw.links[0][7] == "NV18"  # 5 + 4 + 4 + 5 links to four NVSwitches
    assert [n.rate_gbps for n in hw.nics] == [400.0] * 8
    assert rels(hw)["mlx5_3"] == "NODE NODE NODE PIX SYS SYS SYS SYS"


def test_direct_nvlink_two_switch_levels_and_a_nic_on_the_cpu():
    hw = read_nccl_xml(str(XML / "pcie_pairs_full.xml"), node_name="w").node.hardware
    assert [list(r) for r in hw.links] == [["X", "NV4", "SYS", "SYS"], ["NV4", "X", "SYS", "SYS"],
                                           ["SYS", "SYS", "X", "NV4"], ["SYS", "SYS", "NV4", "X"]]
    assert not hw.nvswitch
    assert rels(hw) == {"mlx5_0": "PXB PXB SYS SYS", "mlx5_1": "SYS SYS NODE NODE"}


def test_report_from_a_file_is_an_inventory(tmp_path, capsys):
    out = tmp_path / "v.yaml"
    code, _, err = run(["agent", "discover", "--from-nccl-xml",
                        str(XML / "azure_ndv5_like_full.xml"), "--node-name", "v5",
                        "--nvml", "no", "-o", str(out)], capsys)
    assert code == 0, err
    inv = load_inventory(str(out))
    hw = inv.nodes["v5"].hardware
    assert hw.gpus[3].pci_path == ("ffff:ff:04.0",)
    assert rels(hw)["mlx5_0"].startswith("PIX NODE")
    assert inv.reports["v5"]["source"] == "nccl-topology-xml"


# -- hwloc -------------------------------------------------------------------------

def test_hwloc_tree_names_and_roles():
    d = read_hwloc_xml(str(HWLOC), node_name="h")
    hw = d.node.hardware
    assert [g.model for g in hw.gpus] == ["NVIDIA H100 80GB HBM3"] * 4
    assert [g.numa_node for g in hw.gpus] == [0, 0, 1, 1]
    assert hw.gpus[2].cpus == tuple(range(16, 32))
    assert [list(r) for r in hw.links][0] == ["X", "PXB", "SYS", "SYS"]
    by = {n.name: n for n in hw.nics}
    assert by["mlx5_0"].netdev == "ibp23s0" and by["mlx5_0"].link_layer == "InfiniBand"
    assert " ".join(by["mlx5_0"].gpu_relation) == "PIX PXB SYS SYS"
    assert " ".join(by["rdmap32s0"].gpu_relation) == "PHB PHB SYS SYS"  # EFA: a compute NIC
    assert by["rdmap32s0"].role == "compute" and by["rdmap32s0"].link_layer == "Ethernet"
    assert by["ens5"].role == "management"  # plain Ethernet (ENA), no RDMA device
    assert " ".join(by["mlx5_1"].gpu_relation) == "SYS SYS PIX PXB"


# -- merged with NVML ------------------------------------------------------------

@pytest.fixture
def vm(tmp_path):
    spec = yaml.safe_load((FIXTURES / "vm" / "azure_ndv4_like_vm.yaml").read_text())
    root = tmp_path / "sysroot"
    build_sysfs(str(root), spec)
    return spec, root


def test_nvml_alone_in_the_vm_sees_no_nic_near_any_gpu(vm):
    spec, root = vm
    hw = discover(FakeNvml(spec), sysfs_root=str(root), node_name="vm1").node.hardware
    assert not any("PIX" in n.gpu_relation or "PXB" in n.gpu_relation for n in hw.nics)


def test_overlay_takes_the_tree_from_the_file_and_the_rest_from_nvml(vm):
    spec, root = vm
    seen = discover(FakeNvml(spec), sysfs_root=str(root), node_name="vm1", hostname="vm1")
    tree = read_nccl_xml(str(XML / "azure_ndv4_like_skeleton.xml"), node_name="vm1")
    m = overlay_tree(seen, tree, "nccl-topology-xml")
    hw = m.node.hardware
    # NVML's: model, NVLink through the NVSwitches, RDMA names, the management port
    assert {g.model for g in hw.gpus} == {"NVIDIA A100-SXM4-80GB"} and hw.nvswitch
    assert hw.links[0][5] == "NV12"
    assert [n.name for n in hw.nics] == [f"mlx5_ib{k}" for k in range(8)] + ["eth0"]
    # the file's: which HCA sits next to which GPU, NUMA and CPU affinity
    ref = preset("azure-nd96asr-v4")
    assert rels(hw) == {**rels(ref), "eth0": rels(seen.node.hardware)["eth0"]}
    assert [g.numa_node for g in hw.gpus] == [g.numa_node for g in ref.gpus]
    assert [g.cpus for g in hw.gpus] == [g.cpus for g in ref.gpus]
    assert m.report["source"] == "nvml+nccl-topology-xml"
    assert m.problems == []


def test_overlay_says_what_the_file_and_the_node_disagree_on(vm, tmp_path):
    spec, root = vm
    seen = discover(FakeNvml(spec), sysfs_root=str(root), node_name="vm1", hostname="vm1")
    tree = read_nccl_xml(str(XML / "aws_p4d_like_skeleton.xml"), node_name="vm1")
    m = overlay_tree(seen, tree, "nccl-topology-xml")
    assert any("not in the file" in p for p in m.problems)
    assert any("NVML does not see" in p for p in m.problems)
    assert m.node.hardware.links == seen.node.hardware.links


def test_cli_merges_with_nvml_when_it_works(vm, monkeypatch, capsys):
    spec, root = vm
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(spec))
    code, out, err = run(["agent", "discover", "--from-nccl-xml",
                          str(XML / "azure_ndv4_like_skeleton.xml"), "--node-name", "vm1",
                          "--sysfs-root", str(root)], capsys)
    assert code == 0, err
    doc = yaml.safe_load(out)
    nics = {n["name"]: n["gpu_relation"] for n in doc["nodes"][0]["nics"]}
    assert nics["mlx5_ib0"] == "PIX PIX SYS SYS SYS SYS SYS SYS"
    assert doc["report"]["source"] == "nvml+nccl-topology-xml"


def test_cli_without_nvml_uses_the_file_alone_or_refuses_with_yes(monkeypatch, capsys):
    spec = {"init_error": "DRIVER_NOT_LOADED", "gpus": []}
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(spec))
    code, out, err = run(["agent", "discover", "--from-hwloc", str(HWLOC), "--node-name", "h",
                          "--sysfs-root", tempfile.gettempdir()], capsys)
    assert code == 0, err
    assert "NVML not usable here" in err and "mlx5_0" in out
    code, _, err = run(["agent", "discover", "--from-hwloc", str(HWLOC), "--nvml", "yes",
                        "--sysfs-root", tempfile.gettempdir()], capsys)
    assert code == 2 and err.startswith("slurmtopo: error: --nvml yes")


def test_one_source_at_a_time(capsys):
    code, _, err = run(["agent", "discover", "--from-hwloc", str(HWLOC), "--from-nccl-xml",
                        str(XML / "pcie_pairs_full.xml")], capsys)
    assert code == 2 and "not several" in err


# -- broken and hostile files: one line, file:line, nothing else ------------------

@pytest.mark.parametrize("name, line, words", [
    ("broken_entity_bomb.xml", 3, "declares entities"),
    ("broken_truncated.xml", 15, "not well-formed XML"),
    ("broken_wrong_root.xml", 2, "root element is <topology>"),
    ("broken_bad_numaid.xml", 5, "numaid='one' is not a number"),
    ("broken_duplicate_busid.xml", 4, "appears twice (first on line 3)"),
])
def test_broken_files_fail_in_one_line(name, line, words, capsys):
    path = XML / name
    code, out, err = run(["agent", "discover", "--from-nccl-xml", str(path), "--nvml", "no"],
                         capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"slurmtopo: error: {path}:{line}: ") and words in err


def test_hwloc_reader_refuses_an_nccl_file_and_big_files(tmp_path, monkeypatch):
    with pytest.raises(InventoryError, match="root element is <system>"):
        read_hwloc_xml(str(XML / "pcie_pairs_full.xml"))
    from slurmtopo.agent import xmlsafe
    monkeypatch.setattr(xmlsafe, "MAX_BYTES", 100)
    with pytest.raises(InventoryError, match="larger than"):
        read_hwloc_xml(str(HWLOC))
    with pytest.raises(InventoryError, match="is a device"):
        read_nccl_xml("/dev/zero")


def test_no_gpu_and_deep_nesting_are_refused(tmp_path):
    p = tmp_path / "nogpu.xml"
    p.write_text('<system version="1"><cpu numaid="0">'
                 '<pci busid="0000:01:00.0" class="0x020000"/></cpu></system>')
    with pytest.raises(InventoryError, match="no GPU"):
        read_nccl_xml(str(p))
    deep = '<pci busid="0000:01:00.0" class="0x060400">' * 40 + "</pci>" * 40
    p.write_text(f'<system version="1"><cpu numaid="0">{deep}</cpu></system>')
    with pytest.raises(InventoryError, match="nested deeper"):
        read_nccl_xml(str(p))


def test_affinity_masks_round_trip():
    cpus = tuple(range(0, 48)) + tuple(range(96, 144))
    text = format_cpumask(cpus, 6)
    assert text == "00000000,0000ffff,ffffffff,00000000,0000ffff,ffffffff"
    assert parse_cpumask(text) == cpus
    with pytest.raises(ValueError, match="hex digits"):
        parse_cpumask("123456789")
    with pytest.raises(ValueError, match="wider than"):  # bounded work on a hostile mask
        parse_cpumask(",".join(["ffffffff"] * 5000))


def test_gpu_elements_without_nvlinks_do_not_describe_nvlink(tmp_path):
    """NCCL's dump style with bare <gpu> elements (NCCL then asks NVML)."""
    p = tmp_path / "bare.xml"
    p.write_text('<system version="1"><cpu numaid="0" affinity="0000ffff">'
                 '<pci busid="0000:01:00.0" class="0x030200"><gpu dev="0" sm="90"/></pci>'
                 '<pci busid="0000:02:00.0" class="0x030200"><gpu dev="1" sm="90"/></pci>'
                 '</cpu></system>')
    d = read_nccl_xml(str(p), node_name="b")
    assert d.node.hardware.links[0][1] == "NODE" and not d.node.hardware.nvswitch
    assert any("does not describe NVLink" in x for x in d.problems)


def test_a_file_of_unclassified_devices_says_how_many(tmp_path):
    """AWS's p5 file style: switches and leaves without a class."""
    p = tmp_path / "p5.xml"
    p.write_text('<system version="1"><cpu numaid="0"><pci busid="0000:45:00.0">'
                 '<pci busid="0000:4f:00.0" link_speed="32 GT/s PCIe/s" link_width="16"/>'
                 '<pci busid="0000:50:00.0" link_speed="32 GT/s PCIe/s" link_width="16"/>'
                 '</pci></cpu></system>')
    with pytest.raises(InventoryError, match=r"p5.xml:1: no GPU .*2 PCI device\(s\) have neither"):
        read_nccl_xml(str(p))


def test_overlay_keeps_nvml_relations_for_gpus_the_file_lacks(vm, tmp_path):
    """A file that knows only some GPUs: the others keep NVML's paths."""
    spec, root = vm
    seen = discover(FakeNvml(spec), sysfs_root=str(root), node_name="vm1", hostname="vm1")
    text = (XML / "azure_ndv4_like_skeleton.xml").read_text()
    part = tmp_path / "part.xml"
    part.write_text(text.replace('<pci busid="000e:00:00.0" class="0x030200" '
                                 'link_speed="16 GT/s" link_width="16"/>', ""))
    m = overlay_tree(seen, read_nccl_xml(str(part), node_name="vm1"), "nccl-topology-xml")
    got = {n.name: n.gpu_relation for n in m.node.hardware.nics}
    nvml = {n.name: n.gpu_relation for n in seen.node.hardware.nics}
    assert got["mlx5_ib6"][:7] == ("SYS",) * 6 + ("PIX",)
    assert got["mlx5_ib6"][7] == nvml["mlx5_ib6"][7] == "NODE"  # NVML's, not made-up SYS
    assert any("GPU(s) 7 are not in the file" in p for p in m.problems)


@pytest.mark.parametrize("fixture", ["aws_p4d_like_skeleton.xml", "azure_ndv5_like_full.xml"])
def test_a_provider_file_needs_no_nvml_module(fixture, monkeypatch, capsys):
    """Issue 32: on a machine without nvidia-ml-py (a login node, an admin's
    laptop), `--from-nccl-xml` with the default `--nvml auto` reads the file
    alone and says why; `--nvml yes` refuses, naming the missing module."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.raises(ImportError):
        import pynvml  # noqa: F401
    code, out, err = run(["agent", "discover", "--from-nccl-xml", str(XML / fixture),
                          "--node-name", "vm1", "--sysfs-root", tempfile.gettempdir()], capsys)
    assert code == 0, err
    doc = yaml.safe_load(out)
    assert doc["report"]["source"] == "nccl-topology-xml" and doc["nodes"][0]["gpus"]
    assert "NVML not usable here (nvidia-ml-py is not installed): the report is the file " \
           "alone" in err
    code, out, err = run(["agent", "discover", "--from-nccl-xml", str(XML / fixture),
                          "--nvml", "yes", "--node-name", "vm1"], capsys)
    assert code == 2 and out == ""
    assert "--nvml yes: NVML cannot read this node's GPUs (nvidia-ml-py is not installed)" \
        in err


def test_saved_smi_text_needs_no_nvml_module(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    code, out, err = run(["agent", "discover", "--from-smi",
                          str(FIXTURES / "smi" / "hgx_h100.txt"), "--node-name", "n1"], capsys)
    assert code == 0, err
    assert len(yaml.safe_load(out)["nodes"][0]["gpus"]) == 8
