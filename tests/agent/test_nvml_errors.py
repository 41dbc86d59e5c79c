"""NVML errors are data: lost GPUs, unsupported calls, no driver. And the
fake behaves like pynvml (types, exceptions), or these tests prove nothing."""
from __future__ import annotations

import ctypes

import pynvml
import pytest

from slurmtopo.slurmfmt.gres_lines import gres_lines, gres_text
from slurmtopo.agent.nvml_discovery import _cpus_of_mask
from slurmtopo.inventory.schema import load_inventory

from slurmtopo.testing.fake_pynvml import FakeNvml, error


# -- the fake is pynvml-shaped -------------------------------------------------


def test_fake_uses_real_pynvml_types_and_errors(machine):
    nv = machine("gb200_tray").nvml()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(h, pynvml.c_nvmlDevice_t)
    pci = nv.nvmlDeviceGetPciInfo(h)
    assert isinstance(pci, pynvml.nvmlPciInfo_t) and pci.busId == "00000008:01:00.0"
    assert isinstance(nv.nvmlDeviceGetMemoryInfo(h), pynvml.c_nvmlMemory_t)
    mask = nv.nvmlDeviceGetCpuAffinity(h, 4)
    assert isinstance(mask, ctypes.Array) and len(mask) == 4
    assert _cpus_of_mask(mask) == tuple(range(72))
    info = pynvml.c_nvmlGpuFabricInfoV_t()
    assert nv.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info)) == pynvml.NVML_SUCCESS
    assert info.cliqueId == 32766 and info.state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    with pytest.raises(ctypes.ArgumentError):
        nv.nvmlDeviceGetGpuFabricInfoV(h, info)  # NVML wants a pointer
    assert nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, 0) == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetNvLinkState(h, 18)
    with pytest.raises(ctypes.ArgumentError):
        nv.nvmlDeviceGetP2PStatus(h, h, pynvml.NVML_P2P_CAPS_INDEX_READ)  # "0," is a tuple
    assert nv.NVML_ERROR_GPU_IS_LOST == pynvml.NVML_ERROR_GPU_IS_LOST
    assert nv.NVMLError is pynvml.NVMLError
    with pytest.raises(AttributeError):
        nv.nvmlDeviceGetPowerUsage(h)  # not modelled: a test must not pass through it
    nv.nvmlShutdown()


def test_fake_mig_handles(machine):
    nv = machine("a100_mig").nvml()
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    attrs = nv.nvmlDeviceGetAttributes(mh)
    assert isinstance(attrs, pynvml.c_nvmlDeviceAttributes) and attrs.gpuInstanceSliceCount == 3
    with pytest.raises(pynvml.NVMLError_NotFound):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(h, 3)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetGpuInstanceId(h)  # a full GPU is no MIG device
    nv2 = machine("l40s_pcie").nvml()
    nv2.nvmlInit()
    l40s = nv2.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv2.nvmlDeviceGetMigMode(l40s)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetName(l40s)  # a handle of another "process" is not valid here


def test_error_helper_builds_pynvml_subclasses():
    assert isinstance(error("GPU_IS_LOST"), pynvml.NVMLError_GpuIsLost)
    assert isinstance(error("NOT_SUPPORTED"), pynvml.NVMLError_NotSupported)


# -- driver not loaded ---------------------------------------------------------


def test_driver_not_loaded_gives_a_report_with_nics_and_no_gpu(machine, tmp_path):
    m = machine("hgx_h100")
    m.spec["init_error"] = "DRIVER_NOT_LOADED"
    d = m.discover()
    assert d.node.gpus == () and not d.usable
    assert d.problems == ["NVML cannot start: Driver Not Loaded"]
    assert len(d.node.hardware.nics) == 10  # sysfs still read
    assert all(n.gpu_relation == () for n in d.node.hardware.nics)
    p = tmp_path / "r.yaml"
    p.write_text(d.render())
    assert load_inventory(str(p)).node("node01").hardware.gpu_count == 0
    assert gres_lines(d.node) == []


def test_library_not_found(machine):
    m = machine("l40s_pcie")
    m.spec["init_error"] = "LIBRARY_NOT_FOUND"
    d = m.discover()
    assert not d.usable and "NVML Shared Library Not Found" in d.problems[0]


def test_device_count_failure(machine):
    m = machine("l40s_pcie")
    m.spec["errors"] = {"nvmlDeviceGetCount": "UNKNOWN"}
    d = m.discover()
    assert not d.usable and any("GPU count" in p for p in d.problems)


# -- lost GPUs -------------------------------------------------------------------


def test_gpu_lost_from_the_start_keeps_its_index(machine):
    m = machine("dgx_a100")
    m.spec["gpus"][3]["lost"] = True
    d = m.discover()
    assert d.usable and d.lost_gpus == [3]
    assert d.report["lost_gpus"] == [3]
    assert "GPU 3: GPU is lost" in d.problems
    g3 = d.node.gpus[3]
    assert (g3.index, g3.model, g3.uuid, g3.pci_bus_id) == (3, "unknown", None, None)
    assert d.node.hardware.links[3][0] == "SYS" and d.node.hardware.links[0][1] == "NV12"
    text = gres_text(d.node, d.report)
    assert "File=/dev/nvidia1 " not in text and "lost" in text  # GPU 3 has minor 1
    assert len(gres_lines(d.node, lost=d.lost_gpus)) == 7


def test_gpu_lost_in_the_middle_of_discovery(machine):
    m = machine("dgx1_v100")
    m.spec["gpus"][5]["lost_on"] = "nvmlDeviceGetNvLinkState"
    d = m.discover()
    assert d.lost_gpus == [5]
    assert d.node.gpus[5].uuid == "GPU-c1000000-0000-4000-8000-000000000005"  # read before
    assert any(p.startswith("GPU 5") and "lost" in p for p in d.problems)
    # GPU 1 still sees its two lanes to GPU 5, but a lost GPU is no peer
    assert d.node.hardware.links[1][5] == "SYS"


def test_every_gpu_lost_is_not_usable(machine):
    m = machine("a6000_nvlink_pairs")
    for g in m.spec["gpus"]:
        g["lost"] = True
    d = m.discover()
    assert len(d.node.gpus) == 8 and not d.usable


# -- unsupported calls -------------------------------------------------------------


def test_nvlink_not_supported_means_pcie_only(machine):
    """L40S: nvmlDeviceGetNvLinkState is NOT_SUPPORTED; not a problem."""
    d = machine("l40s_pcie").discover()
    assert d.problems == [] and all(g.nvlinks == () for g in d.node.gpus)


def test_cpu_affinity_not_supported_is_recorded_and_cores_left_out(machine):
    m = machine("hgx_h100")
    m.spec["gpus"][0]["errors"] = {"nvmlDeviceGetCpuAffinity": "NOT_SUPPORTED"}
    d = m.discover()
    assert "GPU 0 CPU affinity: Not Supported" in d.problems
    assert d.node.gpus[0].cpus == () and d.node.gpus[0].numa_node == 0  # from sysfs
    assert gres_lines(d.node)[0] == ("Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 "
                                     "Links=-1,0,0,0,0,0,0,0")


def test_remote_type_unsupported_falls_back_to_pci_class(machine):
    """Without nvmlDeviceGetNvLinkRemoteDeviceType an A100's NVSwitches are
    still recognised: their PCI class is 0x068000."""
    m = machine("dgx_a100")
    m.spec["errors"] = {"nvmlDeviceGetNvLinkRemoteDeviceType": "NOT_SUPPORTED"}
    d = m.discover()
    assert d.problems == []
    assert d.node.hardware.nvswitch and d.node.hardware.links[0][7] == "NV12"


def test_remote_unknown_is_assumed_to_be_a_switch_fabric(machine):
    """H100 NVSwitches have no PCI function: with no remote type either, the
    far end is unknown; the GPUs still meet, with a note."""
    m = machine("hgx_h100")
    m.spec["missing"] = ["nvmlDeviceGetNvLinkRemoteDeviceType"]
    d = m.discover()
    assert d.node.hardware.nvswitch and d.node.hardware.links[2][5] == "NV18"
    assert any("assumed an NVSwitch fabric" in p for p in d.problems)


def test_old_pynvml_without_fabric_functions(machine):
    m = machine("gb200_tray")
    m.spec["missing"] = ["nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetNumaNodeId"]
    d = m.discover()
    assert d.node.nvlink_domain.clique_id == 32766  # the legacy call still answers
    assert "gpu_numa_ids" not in d.report


def test_fabric_function_not_found_in_the_driver(machine):
    m = machine("gb200_tray")
    m.spec["errors"] = {"nvmlDeviceGetGpuFabricInfoV": "FUNCTION_NOT_FOUND",
                        "nvmlDeviceGetGpuFabricInfo": "FUNCTION_NOT_FOUND"}
    d = m.discover()
    assert d.node.nvlink_domain is None and d.problems == []


def test_remote_pci_errors_are_reported_once_per_gpu(machine):
    m = machine("dgx_a100")
    m.spec["gpus"][2]["errors"] = {"nvmlDeviceGetNvLinkRemotePciInfo": "UNKNOWN"}
    d = m.discover()
    assert [p for p in d.problems if "remote PCI" in p] == [
        "GPU 2 NVLink remote PCI: Unknown Error"]


def test_nvlink_port_down_lowers_the_lane_count(machine):
    m = machine("dgx_a100")
    m.spec["gpus"][4]["nvlinks"] = ["switch:0"] * 10 + ["down", "down"]
    hw = m.discover().node.hardware
    assert hw.links[4][0] == "NV10" and hw.links[0][1] == "NV12"
    assert [p.active for p in hw.gpus[4].nvlinks].count(False) == 2


def test_unreadable_name_and_uuid_are_problems_not_crashes(machine):
    m = machine("l40s_pcie")
    m.spec["gpus"][1]["errors"] = {"nvmlDeviceGetName": "UNKNOWN", "nvmlDeviceGetUUID": "UNKNOWN"}
    d = m.discover()
    assert d.node.gpus[1].model == "unknown" and d.node.gpus[1].uuid is None
    assert {"GPU 1 name: Unknown Error", "GPU 1 UUID: Unknown Error"} <= set(d.problems)


def test_fake_logs_calls_and_shutdown(machine):
    from slurmtopo.agent.nvml_discovery import discover

    m = machine("a100_mig")
    nv = FakeNvml(m.spec)
    discover(nv, sysfs_root=str(m.root), node_name="x", hostname="x")
    assert nv.calls[0] == "nvmlInit" and nv.calls[-1] == "nvmlShutdown"
    assert nv._refs == 0


def test_missing_nvml_binding_names_the_extra(monkeypatch):
    """nvidia-ml-py is the `agent` extra: without it, NVML discovery says
    which extra to install instead of an ImportError traceback."""
    import sys

    import pytest
    from slurmtopo.agent.nvml_discovery import discover
    from slurmtopo.errors import SlurmtopoError

    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` fails
    with pytest.raises(SlurmtopoError, match=r"slurmtopo\[agent\]"):
        discover()
