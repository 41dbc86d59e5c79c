"""NVML + sysfs discovery on every machine fixture: the node report and the
gres.conf lines are exactly the expected ones."""
from __future__ import annotations

import pytest

from slurmtopo.slurmfmt.gres_lines import gres_lines, gres_text
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.topology import nvlink_islands

from .conftest import MACHINES, split


def test_all_machine_types_have_a_fixture():
    assert set(MACHINES) == {"dgx_a100", "hgx_h100", "dgx1_v100", "a6000_nvlink_pairs",
                             "l40s_pcie", "gb200_tray", "a100_mig"}


@pytest.mark.parametrize("name", MACHINES)
def test_link_matrix(machine, name):
    m = machine(name)
    hw = m.discover().node.hardware
    assert [list(r) for r in hw.links] == split(m.expect["links"])
    assert hw.nvswitch is m.expect["nvswitch"]


@pytest.mark.parametrize("name", MACHINES)
def test_nics_and_their_relation_to_every_gpu(machine, name):
    m = machine(name)
    hw = m.discover().node.hardware
    got = {n.name: list(n.gpu_relation) for n in hw.nics}
    assert got == {k: v.split() for k, v in m.expect["nics"].items()}
    states = {n.name: n.state for n in hw.nics}
    for nic, state in (m.expect.get("nic_state") or {}).items():
        assert states[nic] == state
    for n in hw.nics:
        assert n.pci_bus_id and n.numa_node is not None or n.name == "lo"
        assert n.role == ("management" if n.netdev == n.name else "compute")


@pytest.mark.parametrize("name", MACHINES)
def test_gres_lines_are_slurmd_minus_G(machine, name):
    m = machine(name)
    d = m.discover()
    assert "\n".join(gres_lines(d.node)) + "\n" == m.expect["gres"]


@pytest.mark.parametrize("name", MACHINES)
def test_cpu_layout_numa_and_gpu_identity(machine, name):
    m = machine(name)
    d = m.discover()
    hw = d.node.hardware
    cpu = m.expect["cpu"]
    assert (hw.cpu.sockets, hw.cpu.cores_per_socket, hw.cpu.threads_per_core) == (
        cpu["sockets"], cpu["cores_per_socket"], cpu["threads_per_core"])
    assert [g.numa_node for g in hw.gpus] == m.expect["numa_nodes"]
    specs = [{**m.spec.get("gpu_defaults", {}), **g} for g in m.spec["gpus"]]
    for g, spec in zip(hw.gpus, specs):
        assert g.uuid == spec["uuid"]
        assert g.model == spec["name"]
        assert g.memory_mib == spec["memory_mib"]
        assert g.pci_bus_id == spec["path"].split("/")[-1]
        assert g.minor == spec.get("minor", g.index)
        assert g.cpus and min(g.cpus) >= 0
    assert d.report["problems"] == []
    assert d.usable and d.lost_gpus == []


@pytest.mark.parametrize("name", MACHINES)
def test_report_metadata(machine, name):
    m = machine(name)
    r = m.discover().report
    assert r["source"] == "nvml"
    assert r["hostname"] == "node01"
    from slurmtopo import __version__
    assert r["agent_version"] == __version__
    assert r["driver_version"] == m.spec["driver"]
    assert r["nvml_version"] == m.spec["nvml"]
    assert r["generated_at"].endswith("Z")
    assert set(r["numa_nodes"]) >= {str(k) for k, v in m.spec["numa"].items() if v}
    assert list(r)[-1] == "problems"


@pytest.mark.parametrize("name", MACHINES)
def test_report_round_trips_through_the_inventory_loader(machine, tmp_path, name):
    m = machine(name)
    d = m.discover()
    path = tmp_path / "node01.yaml"
    path.write_text(d.render())
    inv = load_inventory(str(path))
    node = inv.node("node01")
    assert node.hardware.links == d.node.hardware.links
    assert node.hardware.gpus == d.node.hardware.gpus
    assert node.hardware.nics == d.node.hardware.nics
    assert node.hardware.cpu == d.node.hardware.cpu
    assert node.nvlink_domain == d.node.nvlink_domain
    assert inv.reports["node01"]["source"] == "nvml"
    assert gres_lines(node) == gres_lines(d.node)
    jpath = tmp_path / "node01.json"
    jpath.write_text(d.render("json"))
    assert load_inventory(str(jpath)).node("node01").hardware == node.hardware


def test_nvswitch_machines_are_one_nvlink_island(machine):
    for name in ("dgx_a100", "hgx_h100", "gb200_tray"):
        hw = machine(name).discover().node.hardware
        assert nvlink_islands(hw) == (tuple(range(hw.gpu_count)),)
        assert all(p.remote_type == "nvswitch" for g in hw.gpus for p in g.nvlinks)


def test_dgx1_hybrid_cube_mesh_without_remote_type_support(machine):
    """Driver 418 has no nvmlDeviceGetNvLinkRemoteDeviceType: the far end is
    found by its PCI bus id, and Links count lanes per peer."""
    hw = machine("dgx1_v100").discover().node.hardware
    assert not hw.nvswitch
    assert all(p.remote_type is None for g in hw.gpus for p in g.nvlinks)
    assert hw.link(0, 3) is LinkClass.NVLINK and hw.nvlink_lanes(0, 3) == 2
    assert hw.link(0, 5) is LinkClass.SYS
    assert nvlink_islands(hw) == (tuple(range(8)),)


def test_nvlink_pairs_are_islands_of_two(machine):
    hw = machine("a6000_nvlink_pairs").discover().node.hardware
    assert nvlink_islands(hw) == ((0, 1), (2, 3), (4, 5), (6, 7))


def test_p2p_status_is_reported(machine):
    r = machine("a6000_nvlink_pairs").discover().report
    rows = [row.split() for row in r["p2p_read"]]
    assert rows[0][4] == rows[4][0] == "CNS"
    assert rows[1][4] == "CNS" and rows[0][1] == "OK" and rows[3][3] == "X"


def test_gb200_nvlink_domain_and_gpu_numa_ids(machine):
    m = machine("gb200_tray")
    d = m.discover()
    dom = d.node.nvlink_domain
    assert (dom.cluster_uuid, dom.clique_id) == (m.expect["domain"]["cluster_uuid"],
                                                 m.expect["domain"]["clique_id"])
    assert d.report["gpu_numa_ids"] == m.expect["gpu_numa_ids"]
    assert [g.pci_bus_id for g in d.node.gpus][0] == "0008:01:00.0"


def test_fabric_not_registered_yet_gives_no_domain(machine):
    m = machine("gb200_tray")
    m.spec["gpu_defaults"]["fabric"]["state"] = "IN_PROGRESS"
    d = m.discover()
    assert d.node.nvlink_domain is None
    # flagged: the report says why the tray is in no NVLink block
    assert d.report["nvlink_fabric"] == {"state": "in_progress", "gpus": [0, 1, 2, 3]}
    assert any("NVLink fabric not completed on this tray (in_progress)" in p
               for p in d.problems)


def test_one_gpu_not_started_keeps_the_whole_tray_out(machine):
    m = machine("gb200_tray")
    m.spec["gpus"][2]["fabric"] = dict(m.spec["gpu_defaults"]["fabric"], state="NOT_STARTED")
    d = m.discover()
    assert d.node.nvlink_domain is None
    assert d.report["nvlink_fabric"] == {"state": "not_started", "gpus": [2]}


def test_completed_fabric_adds_no_flag(machine):
    d = machine("gb200_tray").discover()
    assert d.node.nvlink_domain is not None and "nvlink_fabric" not in d.report


def test_fabric_registration_failure_is_a_problem(machine):
    m = machine("gb200_tray")
    m.spec["gpu_defaults"]["fabric"]["status"] = "UNKNOWN"
    d = m.discover()
    assert d.node.nvlink_domain is None
    assert any("fabric registration failed" in p for p in d.problems)
    assert d.report["nvlink_fabric"]["state"] == "failed"


def test_two_cliques_on_one_tray_is_a_problem(machine):
    m = machine("gb200_tray")
    m.spec["gpus"][3]["fabric"] = {"cluster_uuid": "3c0b5b4e-1d2e-4f6a-9b8c-7d6e5f4a3b2c",
                                   "clique": 1}
    d = m.discover()
    assert d.node.nvlink_domain is None
    assert any("2 different NVLink domains" in p for p in d.problems)


def test_mig_instances(machine):
    m = machine("a100_mig")
    d = m.discover()
    g0, g1 = d.node.gpus
    assert g0.mig_mode and not g1.mig_mode
    assert [x.profile for x in g0.mig] == m.expect["mig_profiles"]
    assert [(x.gi_id, x.ci_id, x.gi_cap_minor, x.ci_cap_minor) for x in g0.mig] == [
        (1, 0, 12, 13), (5, 0, 48, 49), (13, 0, 120, 121)]
    assert g0.mig[0].uuid.startswith("MIG-") and g0.mig[2].memory_mib == 4864


def test_mig_without_instances_is_a_problem(machine):
    m = machine("a100_mig")
    m.spec["gpus"][0]["migs"] = []
    d = m.discover()
    assert any("MIG mode is on but no MIG instance" in p for p in d.problems)
    assert "refuses to start" in gres_text(d.node, d.report)


def test_mig_minors_missing(machine):
    m = machine("a100_mig")
    m.spec["mig_minors"] = False
    m.rebuild()
    d = m.discover()
    assert any("mig-minors" in p for p in d.problems)
    lines = gres_lines(d.node)
    assert lines == ["Name=gpu Type=nvidia_a100-pcie-40gb File=/dev/nvidia1 Cores=0-15 "
                     "Links=0,-1"]
    assert "left out" in gres_text(d.node, d.report)


def test_nvml_index_order_is_kept_with_scrambled_minors(machine):
    d = machine("dgx_a100").discover()
    assert [g.index for g in d.node.gpus] == list(range(8))
    assert [g.minor for g in d.node.gpus] == [2, 3, 0, 1, 6, 7, 4, 5]
    pcis = [g.pci_bus_id for g in d.node.gpus]
    assert pcis == sorted(pcis)
