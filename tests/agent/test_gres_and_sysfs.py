"""Slurm's gres.conf rules and the sysfs readers, one rule at a time."""
from __future__ import annotations

import os

import pytest

from slurmtopo.slurmfmt.gres_lines import (abstract_cores, gres_lines, gres_notes, mig_type_name,
                                           slurm_links, slurm_type_name)
from slurmtopo.agent.sysfs import Sysfs, canonical_pci
from slurmtopo.inventory.model import CpuTopology, Gpu, Hardware, Node
from slurmtopo.inventory.presets import preset

from slurmtopo.testing.fake_sysfs import build_sysfs, mig_minors_text


@pytest.mark.parametrize("model,want", [
    ("NVIDIA RTX A6000", "nvidia_rtx_a6000"),
    ("NVIDIA H100 80GB HBM3", "nvidia_h100_80gb_hbm3"),
    ("NVIDIA A100-SXM4-80GB", "nvidia_a100-sxm4-80gb"),
    ("Tesla V100-SXM2-32GB", "tesla_v100-sxm2-32gb"),
    ("NVIDIA GeForce RTX 4090", "nvidia_geforce_rtx_4090"),
    ("NVIDIA A100 80GB PCIe", "nvidia_a100_80gb_pcie"),
])
def test_type_name_like_gpu_common_underscorify_tolower(model, want):
    assert slurm_type_name(model) == want


def test_mig_type_names_cut_the_gpu_type_at_the_first_dash():
    assert mig_type_name("nvidia_a100-sxm4-40gb", "1g.5gb") == "nvidia_a100_1g.5gb"
    assert mig_type_name("nvidia_a100_80gb_pcie", "1g.10gb") == "nvidia_a100_80gb_pcie_1g.10gb"
    assert mig_type_name("nvidia_h100_80gb_hbm3", "3g.40gb") == "nvidia_h100_80gb_hbm3_3g.40gb"


def test_abstract_cores_with_split_and_adjacent_thread_numbering():
    split = CpuTopology(sockets=2, cores_per_socket=52, threads_per_core=2)
    assert abstract_cores(tuple(range(0, 52)) + tuple(range(104, 156)), split) == tuple(range(52))
    assert abstract_cores((104,), split) == (0,)  # one thread is enough for its core
    adjacent = CpuTopology(sockets=1, cores_per_socket=4, threads_per_core=2,
                           core_cpus=((0, 1), (2, 3), (4, 5), (6, 7)))
    assert abstract_cores((2, 3, 4), adjacent) == (1, 2)
    assert abstract_cores((5, 9), None) == (5, 9)


def test_links_from_a_preset_without_port_detail():
    node = Node(name="x", hardware=preset("dgx1-v100"))
    assert slurm_links(node.hardware, 0) == [-1, 1, 1, 2, 2, 0, 0, 0]
    h100 = Node(name="h", hardware=preset("hgx-h100-8"))
    assert slurm_links(h100.hardware, 3) == [0, 0, 0, -1, 0, 0, 0, 0]
    lines = gres_lines(h100)
    assert lines[0] == ("Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 Cores=0-55 "
                        "Links=-1,0,0,0,0,0,0,0")
    assert any("NVSwitch" in n for n in gres_notes(h100))
    assert not any("NVSwitch" in n for n in gres_notes(node))


def test_type_override_and_hardware_gres_type():
    hw = preset("pcie-l40s-8")
    assert gres_lines(Node("x", hw), type_name="l40s")[0].startswith("Name=gpu Type=l40s ")
    from dataclasses import replace
    assert gres_lines(Node("x", replace(hw, gres_type="l40")))[0].startswith(
        "Name=gpu Type=l40 ")


def test_single_gpu_node_links_is_minus_one():
    hw = Hardware(gpus=(Gpu(index=0, model="NVIDIA L4", cpus=(0, 1, 2, 3)),), links=(("X",),))
    assert gres_lines(Node("x", hw)) == [
        "Name=gpu Type=nvidia_l4 File=/dev/nvidia0 Cores=0-3 Links=-1"]


# -- sysfs ------------------------------------------------------------------------


def test_canonical_pci():
    assert canonical_pci("00000000:07:00.0") == "0000:07:00.0"
    assert canonical_pci("00000008:01:00.0") == "0008:01:00.0"
    assert canonical_pci("0000:BD:00.1") == "0000:bd:00.1"
    assert canonical_pci("garbage") is None and canonical_pci(None) is None


def _tree(tmp_path, nics=(), gpus=(), pci_numa=None, cpu=None, **extra):
    spec = {"pci_numa": pci_numa or {"pci0000:00": 0, "pci0000:80": 1},
            "gpus": [{"path": p} for p in gpus], "nics": list(nics), "cpu": cpu, **extra}
    build_sysfs(str(tmp_path), spec)
    return Sysfs(str(tmp_path))


def test_pcie_relations(tmp_path):
    a = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"
    b = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
    c = "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:05:00.0/0000:06:00.0/0000:07:00.0"
    d = "pci0000:00/0000:00:02.0/0000:08:00.0"
    e = "pci0000:80/0000:80:01.0/0000:81:00.0"
    f = "pci0000:40/0000:40:01.0/0000:41:00.0"
    s = _tree(tmp_path, gpus=[a, b, c, d, e, f],
              pci_numa={"pci0000:00": 0, "pci0000:40": 0, "pci0000:80": 1})
    rel = s.pcie_relation
    assert rel("0000:03:00.0", "0000:04:00.0") == "PIX"
    assert rel("0000:03:00.0", "0000:07:00.0") == "PXB"
    assert rel("0000:03:00.0", "0000:08:00.0") == "PHB"
    assert rel("0000:03:00.0", "0000:41:00.0") == "NODE"
    assert rel("0000:03:00.0", "0000:81:00.0") == "SYS"
    assert rel("00000000:03:00.0", "0000:04:00.0") == "PIX"  # NVML spelling
    assert rel("0000:03:00.0", "0000:99:00.0") is None
    assert s.pci_numa("0000:81:00.0") == 1 and s.pci_class("0000:01:00.0") == "0x060400"


def test_nics_from_sysfs(tmp_path):
    s = _tree(tmp_path, nics=[
        {"name": "mlx5_10", "netdev": "ibp1s0", "rate": "400 Gb/sec (4X NDR)",
         "path": "pci0000:00/0000:00:01.0/0000:01:00.0"},
        {"name": "mlx5_2", "netdev": "ens2np0", "link_layer": "Ethernet", "state": "1: DOWN",
         "path": "pci0000:00/0000:00:02.0/0000:02:00.0"},
        {"name": "mlx4_0", "ports": 2, "rate": "56 Gb/sec (4X FDR)",
         "path": "pci0000:80/0000:80:01.0/0000:81:00.0"},
        {"name": "eno1", "netdev": "eno1", "rdma": False, "speed": 25000, "operstate": "down",
         "path": "pci0000:00/0000:00:1c.0/0000:03:00.0"},
    ])
    got = {n.name: n for n in s.nics()}
    assert list(got) == ["mlx4_0:1", "mlx4_0:2", "mlx5_2", "mlx5_10", "eno1"]
    assert got["mlx5_10"].rate_gbps == 400 and got["mlx5_10"].state == "active"
    assert got["mlx5_10"].netdev == "ibp1s0" and got["mlx5_10"].pci_bus_id == "0000:01:00.0"
    assert got["mlx5_2"].link_layer == "Ethernet" and got["mlx5_2"].state == "down"
    assert got["mlx4_0:2"].port == 2 and got["mlx4_0:2"].numa_node == 1
    assert got["eno1"].rate_gbps == 25 and got["eno1"].state == "down"
    assert not got["eno1"].rdma
    assert "lo" not in got  # virtual: no PCI device


def test_soft_rdma_devices_are_skipped(tmp_path):
    s = _tree(tmp_path)
    os.makedirs(tmp_path / "sys/class/infiniband/rxe0/ports/1")
    assert s.nics() == []


def test_cpu_topology_and_numa(tmp_path):
    s = _tree(tmp_path, cpu={"sockets": 2, "cores_per_socket": 4, "threads": 2},
              numa={0: "0-3,8-11", 1: "4-7,12-15"})
    topo = s.cpu_topology()
    assert (topo.sockets, topo.cores_per_socket, topo.threads_per_core) == (2, 4, 2)
    assert topo.core_cpus[0] == (0, 8) and topo.core_cpus[5] == (5, 13)
    assert s.numa_cpus() == {0: (0, 1, 2, 3, 8, 9, 10, 11), 1: (4, 5, 6, 7, 12, 13, 14, 15)}


def test_cpu_topology_with_adjacent_siblings_and_sparse_core_ids(tmp_path):
    s = _tree(tmp_path, cpu={"sockets": 1, "cores_per_socket": 3, "threads": 2,
                             "numbering": "adjacent", "core_id_step": 4})
    topo = s.cpu_topology()
    assert topo.core_cpus == ((0, 1), (2, 3), (4, 5))
    assert abstract_cores((3, 4), topo) == (1, 2)


def test_no_cpu_information(tmp_path):
    assert Sysfs(str(tmp_path)).cpu_topology() is None
    assert Sysfs(str(tmp_path)).nics() == []
    assert Sysfs(str(tmp_path)).mig_minors() == {}


def test_mig_minors_file(tmp_path):
    p = tmp_path / "proc/driver/nvidia-caps"
    p.mkdir(parents=True)
    (p / "mig-minors").write_text(mig_minors_text())
    minors = Sysfs(str(tmp_path)).mig_minors()
    assert minors["gpu4/gi7/access"] == 606 and minors["gpu4/gi7/ci0/access"] == 607
    assert minors["gpu0/gi1/access"] == 12
