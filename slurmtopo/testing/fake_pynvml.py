"""A faithful fake of the pynvml functions the node agent calls.

Why a fake and not mocks: the agent must behave on machines we do not have
(DGX A100, HGX H100, GB200, ...). This fake answers like NVML on such a
machine, driven by a YAML fixture (tests/fixtures/nvml/*.yaml), with the
same function names, argument conventions, return types and exceptions as
the real :mod:`pynvml`:

* handles are real ``c_nvmlDevice_t`` pointers;
* structs are pynvml's own (``nvmlPciInfo_t``, ``c_nvmlMemory_t``,
  ``c_nvmlDeviceAttributes``, ``c_nvmlGpuFabricInfo*_t``, filled through
  ``byref`` like NVML does), arrays are ``c_ulonglong * n``;
* errors are pynvml's ``NVMLError`` subclasses built from its constants,
  e.g. ``NVMLError(NVML_ERROR_GPU_IS_LOST)`` is an ``NVMLError_GpuIsLost``;
* every other name (constants, error classes, structs) is the real
  module's; an NVML function this fake does not implement raises
  AttributeError, so a test never silently passes through an unmodelled
  call.

Error injection (in the fixture or by editing ``machine`` before use):

* ``init_error: DRIVER_NOT_LOADED`` - nvmlInit fails;
* ``errors: {nvmlDeviceGetX: NOT_SUPPORTED}`` - that call fails everywhere;
* per GPU ``errors: {...}``, ``lost: true`` (every call on it, the handle
  included, raises GPU_IS_LOST) or ``lost_on: nvmlDeviceGetX`` (fine until
  that call, lost from then on);
* ``missing: [nvmlDeviceGetX]`` - an older pynvml without that function.
"""
from __future__ import annotations

import ctypes
import uuid as _uuid
from typing import Any, Dict, List, Optional, Tuple

import pynvml as _real

from slurmtopo.inventory.model import parse_cpulist

_PCIE_LEVEL = {"PIX": _real.NVML_TOPOLOGY_SINGLE, "PXB": _real.NVML_TOPOLOGY_MULTIPLE,
               "PHB": _real.NVML_TOPOLOGY_HOSTBRIDGE, "NODE": _real.NVML_TOPOLOGY_NODE,
               "SYS": _real.NVML_TOPOLOGY_SYSTEM, "INTERNAL": _real.NVML_TOPOLOGY_INTERNAL}
_P2P = {"OK": _real.NVML_P2P_STATUS_OK, "CNS": _real.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED,
        "GNS": _real.NVML_P2P_STATUS_GPU_NOT_SUPPORTED,
        "TNS": _real.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED,
        "NS": _real.NVML_P2P_STATUS_NOT_SUPPORTED}
_FABRIC_STATE = {"NOT_SUPPORTED": _real.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED,
                 "NOT_STARTED": _real.NVML_GPU_FABRIC_STATE_NOT_STARTED,
                 "IN_PROGRESS": _real.NVML_GPU_FABRIC_STATE_IN_PROGRESS,
                 "COMPLETED": _real.NVML_GPU_FABRIC_STATE_COMPLETED}


def error(name: str) -> _real.NVMLError:
    """``error("GPU_IS_LOST")`` -> pynvml's NVMLError_GpuIsLost instance."""
    return _real.NVMLError(getattr(_real, f"NVML_ERROR_{name}"))


def nvml_bus_id(path_or_addr: str) -> str:
    """sysfs ``0000:07:00.0`` (last path component) -> NVML ``00000000:07:00.0``."""
    addr = path_or_addr.rstrip("/").split("/")[-1]
    dom, rest = addr.split(":", 1)
    return f"{int(dom, 16):08X}:{rest.upper()}"


def expand_nvlinks(spec) -> List[str]:
    """Fixture NVLink ports: a list (``gpu:1``, ``switch:0``, ``down``,
    ``down:gpu:1``) or ``{switch: 12}`` (12 ports spread over the switches)."""
    if spec is None:
        return []
    if isinstance(spec, dict):
        n, switches = int(spec["switch"]), int(spec.get("switches", 1))
        return [f"switch:{k % switches}" for k in range(n)]
    return [str(x) for x in spec]


class FakeNvml:
    """Stands in for the ``pynvml`` module (pass it as ``nvml=``)."""

    def __init__(self, machine: Dict[str, Any]):
        self.machine = machine
        self.calls: List[str] = []
        self._refs = 0
        self._keep: List[Any] = []
        self._handles: Dict[int, Tuple] = {}
        self._lost: set = {i for i, g in enumerate(self.gpus) if g.get("lost")}

    # -- module emulation ---------------------------------------------------

    def __getattribute__(self, name: str):
        if name.startswith("nvml") and name in (object.__getattribute__(self, "machine")
                                                .get("missing") or ()):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str):
        if name.startswith("nvml"):
            raise AttributeError(f"fake pynvml does not model {name}")
        return getattr(_real, name)

    @property
    def gpus(self) -> List[Dict[str, Any]]:
        defaults = self.machine.get("gpu_defaults") or {}
        return [{**defaults, **g} for g in self.machine.get("gpus") or []]

    def _enter(self, fn: str, gpu: Optional[int] = None) -> None:
        """Bookkeeping common to every call: log, initialised?, injected
        errors, lost GPUs."""
        self.calls.append(fn)
        if self._refs <= 0:
            raise error("UNINITIALIZED")
        if gpu is not None:
            g = self.gpus[gpu]
            if g.get("lost_on") == fn:
                self._lost.add(gpu)
            if gpu in self._lost:
                raise error("GPU_IS_LOST")
            if fn in (g.get("errors") or {}):
                raise error(g["errors"][fn])
        if fn in (self.machine.get("errors") or {}):
            raise error(self.machine["errors"][fn])

    def _handle(self, kind: Tuple) -> Any:
        s = _real.struct_c_nvmlDevice_t()
        self._keep.append(s)
        self._handles[ctypes.addressof(s)] = kind
        return _real.c_nvmlDevice_t(s)

    def _resolve(self, handle) -> Tuple:
        if not isinstance(handle, _real.c_nvmlDevice_t) or not handle:
            raise ctypes.ArgumentError("argument 1: expected a c_nvmlDevice_t handle")
        kind = self._handles.get(ctypes.addressof(handle.contents))
        if kind is None:
            raise error("INVALID_ARGUMENT")
        return kind

    def _gpu(self, fn: str, handle) -> Tuple[int, Dict[str, Any]]:
        kind = self._resolve(handle)
        if kind[0] != "gpu":
            self._enter(fn, kind[1])
            raise error("INVALID_ARGUMENT")
        self._enter(fn, kind[1])
        return kind[1], self.gpus[kind[1]]

    # -- system -------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.machine.get("init_error"):
            raise error(self.machine["init_error"])
        self._refs += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self._refs -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return str(self.machine.get("driver", "550.54.15"))

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return str(self.machine.get("nvml", "12.550.54.15"))

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int):
        if not isinstance(index, int):
            raise ctypes.ArgumentError("argument 1: expected an int")
        valid = 0 <= index < len(self.gpus)
        self._enter("nvmlDeviceGetHandleByIndex", index if valid else None)
        if not valid:
            raise error("INVALID_ARGUMENT")
        return self._handle(("gpu", index))

    # -- one device -----------------------------------------------------------

    def nvmlDeviceGetName(self, handle) -> str:
        _, g = self._gpu("nvmlDeviceGetName", handle)
        return g["name"]

    def nvmlDeviceGetUUID(self, handle) -> str:
        kind = self._resolve(handle)
        self._enter("nvmlDeviceGetUUID", kind[1])
        if kind[0] == "mig":
            return self._mig(kind)["uuid"]
        return self.gpus[kind[1]]["uuid"]

    def nvmlDeviceGetPciInfo(self, handle):
        _, g = self._gpu("nvmlDeviceGetPciInfo", handle)
        return _pci_info(nvml_bus_id(g["path"]))

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        _, g = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        total = int(g["memory_mib"]) * 1024 * 1024
        return _real.c_nvmlMemory_t(total=total, free=total - 512 * 1024 * 1024,
                                    used=512 * 1024 * 1024)

    def nvmlDeviceGetMinorNumber(self, handle) -> int:
        i, g = self._gpu("nvmlDeviceGetMinorNumber", handle)
        return int(g.get("minor", i))

    def nvmlDeviceGetCpuAffinity(self, handle, cpuSetSize: int):
        _, g = self._gpu("nvmlDeviceGetCpuAffinity", handle)
        arr = (ctypes.c_ulonglong * cpuSetSize)()
        for cpu in parse_cpulist(str(g.get("cpus", ""))):
            if cpu // 64 < cpuSetSize:
                arr[cpu // 64] |= 1 << (cpu % 64)
        return arr

    def nvmlDeviceGetNumaNodeId(self, handle) -> int:
        _, g = self._gpu("nvmlDeviceGetNumaNodeId", handle)
        if g.get("numa_id") is None:
            raise error("NOT_SUPPORTED")  # x86: GPU memory is not a NUMA node
        return int(g["numa_id"])

    # -- MIG ---------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle) -> List[int]:
        _, g = self._gpu("nvmlDeviceGetMigMode", handle)
        if g.get("mig_mode") is None:
            raise error("NOT_SUPPORTED")
        return [int(x) for x in g["mig_mode"]]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle) -> int:
        _, g = self._gpu("nvmlDeviceGetMaxMigDeviceCount", handle)
        if g.get("mig_mode") is None:
            raise error("NOT_SUPPORTED")
        return int(g.get("max_migs", 7))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index: int):
        i, g = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not g.get("mig_mode") or not g["mig_mode"][0]:
            raise error("INVALID_ARGUMENT")
        if index >= int(g.get("max_migs", 7)):
            raise error("INVALID_ARGUMENT")
        if index >= len(g.get("migs") or []):
            raise error("NOT_FOUND")
        return self._handle(("mig", i, index))

    def _mig(self, kind: Tuple) -> Dict[str, Any]:
        return self.gpus[kind[1]]["migs"][kind[2]]

    def _mig_call(self, fn: str, handle) -> Dict[str, Any]:
        kind = self._resolve(handle)
        self._enter(fn, kind[1])
        if kind[0] != "mig":
            raise error("INVALID_ARGUMENT")
        return self._mig(kind)

    def nvmlDeviceGetGpuInstanceId(self, handle) -> int:
        return int(self._mig_call("nvmlDeviceGetGpuInstanceId", handle)["gi"])

    def nvmlDeviceGetComputeInstanceId(self, handle) -> int:
        return int(self._mig_call("nvmlDeviceGetComputeInstanceId", handle)["ci"])

    def nvmlDeviceGetAttributes(self, handle):
        m = self._mig_call("nvmlDeviceGetAttributes", handle)
        return _real.c_nvmlDeviceAttributes(
            multiprocessorCount=14 * int(m["slices"]), gpuInstanceSliceCount=int(m["slices"]),
            computeInstanceSliceCount=int(m["slices"]), memorySizeMB=int(m["memory_mb"]))

    # -- NVLink -------------------------------------------------------------

    def _port(self, fn: str, handle, link: int) -> Tuple[int, str]:
        if not isinstance(link, int):
            raise ctypes.ArgumentError("argument 2: expected an int")
        i, g = self._gpu(fn, handle)
        ports = expand_nvlinks(g.get("nvlinks"))
        if not ports:
            raise error("NOT_SUPPORTED")
        if not 0 <= link < len(ports):
            raise error("INVALID_ARGUMENT")
        return i, ports[link]

    def nvmlDeviceGetNvLinkState(self, handle, link: int) -> int:
        _, spec = self._port("nvmlDeviceGetNvLinkState", handle, link)
        return _real.NVML_FEATURE_DISABLED if spec.startswith("down") else \
            _real.NVML_FEATURE_ENABLED

    def _remote(self, spec: str) -> Tuple[str, int]:
        kind, _, k = spec.replace("down:", "").partition(":")
        return kind, int(k or 0)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link: int):
        _, spec = self._port("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        if spec == "down":
            raise error("NOT_SUPPORTED")
        kind, k = self._remote(spec)
        if kind == "gpu":
            return _pci_info(nvml_bus_id(self.gpus[k]["path"]))
        switches = self.machine.get("nvswitches") or []
        if k < len(switches) and switches[k]:
            return _pci_info(nvml_bus_id(switches[k]))
        return _pci_info("00000000:00:00.0")  # no PCI function behind it

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link: int) -> int:
        _, spec = self._port("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        kind, _ = self._remote(spec)
        return {"gpu": _real.NVML_NVLINK_DEVICE_TYPE_GPU,
                "switch": _real.NVML_NVLINK_DEVICE_TYPE_SWITCH}.get(
                    kind, _real.NVML_NVLINK_DEVICE_TYPE_UNKNOWN)

    # -- fabric ---------------------------------------------------------------

    def _fabric(self, fn: str, handle, ref, versioned: bool) -> int:
        _, g = self._gpu(fn, handle)
        info = getattr(ref, "_obj", None)
        want = _real.c_nvmlGpuFabricInfo_v2_t if versioned else _real.c_nvmlGpuFabricInfo_t
        if not isinstance(info, want):
            raise ctypes.ArgumentError(f"argument 2: expected byref({want.__name__})")
        if versioned and info.version != _real.nvmlGpuFabricInfo_v2:
            raise error("ARGUMENT_VERSION_MISMATCH")
        fab = g.get("fabric")
        if not fab:
            raise error("NOT_SUPPORTED")
        raw = _uuid.UUID(fab["cluster_uuid"]).bytes
        for k, b in enumerate(raw):
            info.clusterUuid[k] = b
        status = fab.get("status", "SUCCESS")
        info.status = (_real.NVML_SUCCESS if status == "SUCCESS"
                       else getattr(_real, f"NVML_ERROR_{status}"))
        info.cliqueId = int(fab["clique"])
        info.state = _FABRIC_STATE[fab.get("state", "COMPLETED")]
        if versioned:
            info.healthMask = 0
        return _real.NVML_SUCCESS

    def nvmlDeviceGetGpuFabricInfoV(self, handle, gpuFabricInfo) -> int:
        return self._fabric("nvmlDeviceGetGpuFabricInfoV", handle, gpuFabricInfo, True)

    def nvmlDeviceGetGpuFabricInfo(self, handle, gpuFabricInfo) -> int:
        return self._fabric("nvmlDeviceGetGpuFabricInfo", handle, gpuFabricInfo, False)

    # -- pairs ------------------------------------------------------------------

    def _pair(self, fn: str, h1, h2) -> Tuple[int, int]:
        a, _ = self._gpu(fn, h1)
        b, _ = self._gpu(fn, h2)
        return a, b

    def nvmlDeviceGetTopologyCommonAncestor(self, device1, device2) -> int:
        a, b = self._pair("nvmlDeviceGetTopologyCommonAncestor", device1, device2)
        if a == b:
            return _real.NVML_TOPOLOGY_INTERNAL
        tok = str(self.machine["gpu_pcie"][a]).split()[b]
        return _PCIE_LEVEL[tok]

    def nvmlDeviceGetP2PStatus(self, device1, device2, p2pIndex) -> int:
        if not isinstance(p2pIndex, int):
            raise ctypes.ArgumentError("argument 3: expected an int")
        a, b = self._pair("nvmlDeviceGetP2PStatus", device1, device2)
        over = self.machine.get("p2p") or {}
        return _P2P[over.get(f"{min(a, b)}-{max(a, b)}", "OK")]


def _pci_info(bus_id: str):
    info = _real.nvmlPciInfo_t()
    dom, bus, devfn = bus_id.split(":")
    dev, fn = devfn.split(".")
    info.busId = bus_id.encode()
    info.busIdLegacy = f"{int(dom, 16):04X}:{bus}:{devfn}".encode()
    info.domain, info.bus, info.device = int(dom, 16), int(bus, 16), int(dev, 16)
    info.pciDeviceId = 0x20B010DE
    return info
