"""Discover a GPU node through NVML (``nvidia-ml-py``) and sysfs.

:func:`discover` takes the NVML module as an argument (default: the real
:mod:`pynvml`), so tests run this exact code against a fake of it.

What NVML gives and why each call is here:

* GPUs in NVML index order (= PCI bus id order, the order Slurm and
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` use), name, UUID, bus id, memory, minor
  (``/dev/nvidiaN``), CPU affinity;
* every NVLink port: active or not, and what is at the far end (a GPU, an
  NVSwitch, ...). Slurm's own autodetection counts only links whose far end
  is a GPU, so on NVSwitch machines it sees no NVLink at all; we record the
  switch and report all-to-all NVLink;
* MIG mode and MIG instances, the GPU fabric (cluster UUID + clique id of a
  multi-node NVLink domain such as GB200 NVL72), PCIe common ancestor and
  P2P status of every GPU pair.

Errors are data, not crashes: a lost GPU, a call the driver or GPU does not
support, a driver that is not loaded all end up in ``report.problems``; the
run is unusable only when no GPU could be read.
"""
from __future__ import annotations

import math
from ctypes import byref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from slurmtopo.agent.report import Discovery, report_block, short_hostname
from slurmtopo.errors import SlurmtopoError
from slurmtopo.agent.sysfs import IBMNPU_CLASS, NVSWITCH_CLASS, Sysfs, canonical_pci
from slurmtopo.inventory.model import (Gpu, Hardware, MigDevice, Nic, Node, NvlinkDomain,
                                       NvLinkPort, format_cpulist)
from slurmtopo.files.yamlio import BlockList

#: 64-bit words asked of nvmlDeviceGetCpuAffinity (as many CPUs as Slurm's MAX_CPUS)
CPU_SET_WORDS = 512


class GpuLost(Exception):
    """The GPU fell off the bus while we were reading it."""


@dataclass
class _Probe:
    """Everything read about one GPU (None: could not be read)."""

    index: int
    handle: Any = None
    name: Optional[str] = None
    uuid: Optional[str] = None
    pci: Optional[str] = None
    memory_mib: Optional[int] = None
    minor: Optional[int] = None
    cpus: Tuple[int, ...] = ()
    gpu_numa_id: Optional[int] = None
    mig_mode: bool = False
    migs: List[MigDevice] = field(default_factory=list)
    ports: List[NvLinkPort] = field(default_factory=list)
    fabric: Optional[Tuple[str, int]] = None
    #: why a GPU with fabric support has no domain yet: "not_started",
    #: "in_progress" or "failed" (registration status not success)
    fabric_pending: Optional[str] = None
    lost: bool = False


class _Reader:
    """Calls NVML, turning its exceptions into problems."""

    def __init__(self, nvml):
        self.nvml = nvml
        self.problems: List[str] = []
        self.quiet = {self._code("NVML_ERROR_NOT_SUPPORTED"),
                      self._code("NVML_ERROR_FUNCTION_NOT_FOUND")}

    def _code(self, name: str) -> int:
        return getattr(self.nvml, name, -1)

    def code(self, exc: Exception) -> Optional[int]:
        return getattr(exc, "value", None)

    def call(self, what: str, fn: Callable, *args, quiet: bool = True, default=None):
        """fn(*args); on NVMLError record a problem (unless it is just "not
        supported" and ``quiet``) and return ``default``. GPU_IS_LOST
        raises :class:`GpuLost`."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if self.code(exc) == self._code("NVML_ERROR_GPU_IS_LOST"):
                raise GpuLost(str(exc)) from None
            if not (quiet and self.code(exc) in self.quiet):
                self.problem(f"{what}: {exc}")
            return default

    def problem(self, text: str) -> None:
        if text not in self.problems:  # one line per kind of failure, not per port
            self.problems.append(text)


class NvmlMissing(SlurmtopoError):
    """nvidia-ml-py is not installed here: NVML cannot be asked at all
    (a login node, an admin's laptop, ``pip install .`` without the agent
    extra). ``--nvml auto`` carries on without it."""


def discover(nvml=None, sysfs_root: str = "/", node_name: Optional[str] = None,
             hostname: Optional[str] = None) -> Discovery:
    """Read this node. ``nvml`` defaults to the real :mod:`pynvml`."""
    if nvml is None:
        try:
            # lazy: optional dependency (the 'agent' extra; ~11 ms), only NVML on a GPU node
            import pynvml as nvml  # noqa: PLC0415
        except ImportError:
            raise NvmlMissing("NVML discovery needs nvidia-ml-py, which is not installed: "
                                 "pip install 'slurmtopo[agent]' on GPU nodes (or use "
                                 "--from-smi / --from-nccl-xml)") from None
    sysfs = Sysfs(sysfs_root)
    rd = _Reader(nvml)
    probes: List[_Probe] = []
    driver = nvml_version = None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        rd.problem(f"NVML cannot start: {exc}")
    else:
        try:
            driver = rd.call("driver version", nvml.nvmlSystemGetDriverVersion)
            nvml_version = rd.call("NVML version", nvml.nvmlSystemGetNVMLVersion)
            count = rd.call("GPU count", nvml.nvmlDeviceGetCount, quiet=False, default=0)
            probes = [_probe_gpu(rd, sysfs, i) for i in range(count)]
            links, p2p = _pairs(rd, sysfs, probes)
        finally:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass
    if not probes:
        links, p2p = (), []
    return _assemble(rd, sysfs, probes, links, p2p, driver, nvml_version, node_name, hostname)


# ---------------------------------------------------------------------------
# One GPU


def _probe_gpu(rd: _Reader, sysfs: Sysfs, i: int) -> _Probe:
    p = _Probe(index=i)
    what = f"GPU {i}"
    nv = rd.nvml
    try:
        p.handle = rd.call(what, nv.nvmlDeviceGetHandleByIndex, i, quiet=False)
        if p.handle is None:
            p.lost = True
            return p
        h = p.handle
        p.name = rd.call(f"{what} name", nv.nvmlDeviceGetName, h, quiet=False)
        p.uuid = rd.call(f"{what} UUID", nv.nvmlDeviceGetUUID, h, quiet=False)
        pci = rd.call(f"{what} PCI info", nv.nvmlDeviceGetPciInfo, h, quiet=False)
        p.pci = canonical_pci(pci.busId) if pci is not None else None
        mem = rd.call(f"{what} memory", nv.nvmlDeviceGetMemoryInfo, h, quiet=False)
        p.memory_mib = int(mem.total) // (1024 * 1024) if mem is not None else None
        p.minor = rd.call(f"{what} minor number", nv.nvmlDeviceGetMinorNumber, h, quiet=False)
        mask = rd.call(f"{what} CPU affinity", nv.nvmlDeviceGetCpuAffinity, h, CPU_SET_WORDS,
                       quiet=False)
        p.cpus = _cpus_of_mask(mask) if mask is not None else ()
        if hasattr(nv, "nvmlDeviceGetNumaNodeId"):
            p.gpu_numa_id = rd.call(f"{what} NUMA id", nv.nvmlDeviceGetNumaNodeId, h)
        mode = rd.call(f"{what} MIG mode", nv.nvmlDeviceGetMigMode, h)
        p.mig_mode = bool(mode) and mode[0] == nv.NVML_DEVICE_MIG_ENABLE
        if p.mig_mode:
            p.migs = _probe_migs(rd, sysfs, p)
        p.ports = _probe_nvlinks(rd, h, what)
        p.fabric, p.fabric_pending = _probe_fabric(rd, h, what)
    except GpuLost as exc:
        p.lost = True
        rd.problem(f"{what}: {exc}")
    return p


def _cpus_of_mask(mask) -> Tuple[int, ...]:
    """nvmlDeviceGetCpuAffinity's array of 64-bit words -> CPU ids."""
    out = []
    for w, word in enumerate(mask):
        word = int(word)
        b = 0
        while word:
            if word & 1:
                out.append(w * 64 + b)
            word >>= 1
            b += 1
    return tuple(out)


def _probe_migs(rd: _Reader, sysfs: Sysfs, p: _Probe) -> List[MigDevice]:
    """MIG instances as slurmd sees them: contiguous MIG indices, profile
    ``<slices>g.<round(MiB/1024)>gb``, cap minors from mig-minors."""
    nv, h, what = rd.nvml, p.handle, f"GPU {p.index} MIG"
    most = rd.call(f"{what} device count", nv.nvmlDeviceGetMaxMigDeviceCount, h, default=0)
    minors = sysfs.mig_minors()
    out: List[MigDevice] = []
    for j in range(most or 0):
        try:
            mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except nv.NVMLError as exc:
            if rd.code(exc) == nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost(str(exc)) from None
            if rd.code(exc) != nv.NVML_ERROR_NOT_FOUND:
                rd.problem(f"{what} {j}: {exc}")
            break  # like slurmd: MIG indices are contiguous from 0
        uuid = rd.call(f"{what} {j} UUID", nv.nvmlDeviceGetUUID, mh, quiet=False)
        gi = rd.call(f"{what} {j} GPU instance", nv.nvmlDeviceGetGpuInstanceId, mh, quiet=False)
        ci = rd.call(f"{what} {j} compute instance", nv.nvmlDeviceGetComputeInstanceId, mh,
                     quiet=False)
        attrs = rd.call(f"{what} {j} attributes", nv.nvmlDeviceGetAttributes, mh, quiet=False)
        if gi is None or ci is None or attrs is None:
            continue
        gb = math.floor(attrs.memorySizeMB / 1024 + 0.5)  # C roundl: halves go up
        minor = p.minor if p.minor is not None else p.index
        gi_minor = minors.get(f"gpu{minor}/gi{gi}/access")
        ci_minor = minors.get(f"gpu{minor}/gi{gi}/ci{ci}/access")
        if gi_minor is None or ci_minor is None:
            rd.problem(f"{what} {j} (GI {gi}, CI {ci}): no entry in "
                               "/proc/driver/nvidia-caps/mig-minors")
        out.append(MigDevice(gi_id=gi, ci_id=ci, profile=f"{attrs.gpuInstanceSliceCount}g.{gb}gb",
                             uuid=uuid, memory_mib=int(attrs.memorySizeMB),
                             gi_cap_minor=gi_minor, ci_cap_minor=ci_minor))
    if not out:
        rd.problem(f"GPU {p.index}: MIG mode is on but no MIG instance exists "
                           "(slurmd with AutoDetect=nvml refuses to start)")
    return out


_REMOTE_TYPES = {"NVML_NVLINK_DEVICE_TYPE_GPU": "gpu", "NVML_NVLINK_DEVICE_TYPE_SWITCH": "nvswitch",
                 "NVML_NVLINK_DEVICE_TYPE_IBMNPU": "ibmnpu"}


def _probe_nvlinks(rd: _Reader, h, what: str) -> List[NvLinkPort]:
    """Every NVLink port, as slurmd walks them: INVALID_ARGUMENT skips a
    port, NOT_SUPPORTED means the GPU has no NVLink."""
    nv = rd.nvml
    types = {getattr(nv, k): v for k, v in _REMOTE_TYPES.items() if hasattr(nv, k)}
    ports: List[NvLinkPort] = []
    for link in range(nv.NVML_NVLINK_MAX_LINKS):
        try:
            active = nv.nvmlDeviceGetNvLinkState(h, link) == nv.NVML_FEATURE_ENABLED
        except nv.NVMLError as exc:
            code = rd.code(exc)
            if code == nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost(str(exc)) from None
            if code == nv.NVML_ERROR_INVALID_ARGUMENT:
                continue
            if code not in rd.quiet:
                rd.problem(f"{what} NVLink state: {exc}")
            break
        if not active:
            ports.append(NvLinkPort(link=link, active=False))
            continue
        pci = rd.call(f"{what} NVLink remote PCI", nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
        code = None
        if hasattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType"):
            code = rd.call(f"{what} NVLink remote type",
                           nv.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
        remote = canonical_pci(pci.busId) if pci else None
        if remote == "0000:00:00.0":
            remote = None  # the far end has no PCI function (H100/B200 NVSwitch)
        ports.append(NvLinkPort(link=link, active=True, remote_pci_bus_id=remote,
                                remote_type=types.get(code, "unknown") if code is not None
                                else None))
    return ports


def _probe_fabric(rd: _Reader, h, what: str
                  ) -> Tuple[Optional[Tuple[str, int]], Optional[str]]:
    """(cluster UUID, clique id) of a multi-node NVLink domain, once the
    fabric manager has registered the GPU (nvml.h: ``status`` is valid only
    when ``state`` is COMPLETED), else None; and, for a GPU that has a
    fabric but no domain yet, why (``not_started``, ``in_progress``,
    ``failed``)."""
    nv = rd.nvml
    info = None
    for fn_name, struct_name in (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                                 ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")):
        fn, struct = getattr(nv, fn_name, None), getattr(nv, struct_name, None)
        if fn is None or struct is None:
            continue
        candidate = struct()
        try:
            fn(h, byref(candidate))
        except nv.NVMLError as exc:
            if rd.code(exc) == nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost(str(exc)) from None
            if rd.code(exc) not in rd.quiet:
                rd.problem(f"{what} fabric info: {exc}")
                return None, None
            continue
        info = candidate
        break
    if info is None or info.state == nv.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        return None, None
    if info.state != nv.NVML_GPU_FABRIC_STATE_COMPLETED:
        pending = ("not_started" if info.state == nv.NVML_GPU_FABRIC_STATE_NOT_STARTED
                   else "in_progress")
        return None, pending
    if info.status != nv.NVML_SUCCESS:
        rd.problem(f"{what}: NVLink fabric registration failed "
                           f"({nv.NVMLError(info.status)})")
        return None, "failed"
    raw = bytes(info.clusterUuid)
    if not any(raw):
        return None, None
    h32 = raw.hex()
    uuid = f"{h32[:8]}-{h32[8:12]}-{h32[12:16]}-{h32[16:20]}-{h32[20:]}"
    return (uuid, int(info.cliqueId)), None


# ---------------------------------------------------------------------------
# GPU pairs

_ANCESTOR = (("NVML_TOPOLOGY_INTERNAL", "PIX"), ("NVML_TOPOLOGY_SINGLE", "PIX"),
             ("NVML_TOPOLOGY_MULTIPLE", "PXB"), ("NVML_TOPOLOGY_HOSTBRIDGE", "PHB"),
             ("NVML_TOPOLOGY_NODE", "NODE"), ("NVML_TOPOLOGY_SYSTEM", "SYS"))
_P2P = (("NVML_P2P_STATUS_OK", "OK"), ("NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED", "CNS"),
        ("NVML_P2P_STATUS_GPU_NOT_SUPPORTED", "GNS"),
        ("NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED", "TNS"),
        ("NVML_P2P_STATUS_DISABLED_BY_REGKEY", "NS"), ("NVML_P2P_STATUS_NOT_SUPPORTED", "NS"))


def remote_kind(port: NvLinkPort, gpu_pcis: Dict[str, int], sysfs: Sysfs) -> str:
    """gpu | nvswitch | ibmnpu | unknown for an active port. NVML's answer
    first; else the far end's bus id: a local GPU, or a PCI class."""
    if port.remote_type in ("gpu", "nvswitch", "ibmnpu"):
        return port.remote_type
    if port.remote_pci_bus_id in gpu_pcis:
        return "gpu"
    cls = sysfs.pci_class(port.remote_pci_bus_id) if port.remote_pci_bus_id else None
    return {NVSWITCH_CLASS: "nvswitch", IBMNPU_CLASS: "ibmnpu"}.get(cls or "", "unknown")


def _pairs(rd: _Reader, sysfs: Sysfs, probes: List[_Probe]):
    """The link matrix (nvidia-smi tokens) and the P2P read status matrix."""
    nv = rd.nvml
    n = len(probes)
    pcis = {p.pci: p.index for p in probes if p.pci}
    direct = [[0] * n for _ in range(n)]
    fabric = [0] * n
    for p in probes:
        for port in p.ports:
            if not port.active:
                continue
            kind = remote_kind(port, pcis, sysfs)
            if kind == "gpu" and port.remote_pci_bus_id in pcis:
                if pcis[port.remote_pci_bus_id] != p.index:
                    direct[p.index][pcis[port.remote_pci_bus_id]] += 1
            elif kind in ("nvswitch", "unknown"):
                fabric[p.index] += 1
    ancestor = {getattr(nv, k): v for k, v in _ANCESTOR if hasattr(nv, k)}
    p2p_tokens = {getattr(nv, k): v for k, v in _P2P if hasattr(nv, k)}
    read_idx = getattr(nv, "NVML_P2P_CAPS_INDEX_READ", 0)
    if isinstance(read_idx, tuple):  # pynvml defines it as "0," (a tuple)
        read_idx = read_idx[0]
    links = [["X"] * n for _ in range(n)]
    p2p = [["X"] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            pa, pb = probes[a], probes[b]
            lanes = _lanes(direct[a][b], direct[b][a])
            if fabric[a] and fabric[b]:
                lanes += min(fabric[a], fabric[b])
            tok = f"NV{lanes}" if lanes else None
            status = "U"
            if not (pa.lost or pb.lost):
                try:
                    if tok is None:
                        level = rd.call(f"GPU {a}-{b} PCIe ancestor",
                                        nv.nvmlDeviceGetTopologyCommonAncestor, pa.handle,
                                        pb.handle)
                        tok = ancestor.get(level)
                    code = rd.call(f"GPU {a}-{b} P2P status", nv.nvmlDeviceGetP2PStatus,
                                   pa.handle, pb.handle, read_idx)
                    status = p2p_tokens.get(code, "U")
                except GpuLost as exc:
                    rd.problem(f"GPU {a}-{b}: {exc}")
            if tok is None:
                tok = sysfs.pcie_relation(pa.pci, pb.pci) if pa.pci and pb.pci else None
            if tok is None:
                rd.problem(f"GPU {a}-{b}: PCIe relation unknown, assumed SYS")
                tok = "SYS"
            links[a][b] = links[b][a] = tok
            p2p[a][b] = p2p[b][a] = status
    return tuple(tuple(r) for r in links), BlockList(" ".join(f"{t:<3}" for t in r).rstrip()
                                                     for r in p2p)


def _lanes(ab: int, ba: int) -> int:
    """Lanes between two GPUs as both ends count them (a link that is up
    on one end only is not usable)."""
    return min(ab, ba) if ab and ba else 0


# ---------------------------------------------------------------------------
# Node


def _assemble(rd: _Reader, sysfs: Sysfs, probes: List[_Probe], links, p2p, driver,
              nvml_version, node_name, hostname) -> Discovery:
    numa = sysfs.numa_cpus()
    gpus = []
    for p in probes:
        node = sysfs.pci_numa(p.pci) if p.pci else None
        if node is None and p.cpus:
            node = next((k for k, cpus in sorted(numa.items())
                         if cpus and set(p.cpus) <= set(cpus)), None)
        gpus.append(Gpu(index=p.index, model=p.name or "unknown", pci_bus_id=p.pci,
                        memory_mib=p.memory_mib, uuid=p.uuid, minor=p.minor, numa_node=node,
                        cpus=p.cpus, mig_mode=p.mig_mode, mig=tuple(p.migs),
                        nvlinks=tuple(p.ports)))
    gpu_pcis = {p.pci: p.index for p in probes if p.pci}
    nvswitch = any(port.active and remote_kind(port, gpu_pcis, sysfs) in ("nvswitch", "unknown")
                   for p in probes for port in p.ports)
    if any(port.active and remote_kind(port, gpu_pcis, sysfs) == "unknown"
           for p in probes for port in p.ports):
        rd.problem("NVLink far end is neither a local GPU nor a known NVSwitch; "
                           "assumed an NVSwitch fabric")
    nics = _nics(rd, sysfs, gpus)
    domains = sorted({p.fabric for p in probes if p.fabric})
    pending = sorted({p.fabric_pending for p in probes if p.fabric_pending})
    if pending:
        # one GPU not registered is enough: the tray cannot join its
        # rack's NVLink domain, so it stays out of the rack's block
        rd.problem(f"NVLink fabric not completed on this tray ({', '.join(pending)}): it is "
                   "left out of NVLink blocks until the fabric manager registers every GPU")
        domains = []
    domain = NvlinkDomain(*domains[0]) if len(domains) == 1 else None
    if len(domains) > 1:
        rd.problem(f"GPUs report {len(domains)} different NVLink domains: "
                           + ", ".join(f"{u}/{c}" for u, c in domains))
    hw = Hardware(gpus=tuple(gpus), links=links, nics=tuple(nics),
                  cpu=sysfs.cpu_topology(), nvswitch=nvswitch)
    host = hostname if hostname is not None else short_hostname()
    lost = [p.index for p in probes if p.lost]
    gpu_numa = [p.gpu_numa_id for p in probes]
    report = report_block(
        "nvml", rd.problems, hostname=host, driver_version=driver, nvml_version=nvml_version,
        numa_nodes={str(k): format_cpulist(v) for k, v in sorted(numa.items()) if v},
        gpu_numa_ids=gpu_numa if any(x is not None for x in gpu_numa) else None,
        p2p_read=p2p if len(probes) > 1 else None, lost_gpus=lost or None,
        nvlink_fabric={"state": pending[0] if len(pending) == 1 else "mixed",
                       "gpus": sorted(p.index for p in probes if p.fabric_pending)}
        if pending else None)
    return Discovery(node=Node(name=node_name or host, hardware=hw, nvlink_domain=domain),
                     report=report, lost_gpus=lost)


def _nics(rd: _Reader, sysfs: Sysfs, gpus: List[Gpu]) -> List[Nic]:
    out = []
    for info in sysfs.nics():
        rel = []
        for g in gpus:
            tok = sysfs.pcie_relation(info.pci_bus_id, g.pci_bus_id) if g.pci_bus_id else None
            if tok is None:
                rd.problem(f"NIC {info.name}: PCIe path to some GPU unknown, assumed SYS")
            rel.append(tok or "SYS")
        out.append(Nic(name=info.name, netdev=info.netdev, pci_bus_id=info.pci_bus_id,
                       link_layer=info.link_layer, rate_gbps=info.rate_gbps, state=info.state,
                       port=info.port, numa_node=info.numa_node, gpu_relation=tuple(rel),
                       role="compute" if info.rdma else "management"))
    return out
