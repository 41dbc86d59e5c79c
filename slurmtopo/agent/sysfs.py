"""What NVML does not tell: NICs, PCIe paths, CPU layout, MIG device minors.

Everything is read below a *root* directory (default ``/``) so the tests
build fake ``/sys`` and ``/proc`` trees in a temporary directory and run the
same code. Every read is forgiving: a missing or unreadable file gives
``None``, never an exception, because a node agent must report what it can
rather than crash on one odd device.

PCIe relations follow the vocabulary of ``nvidia-smi topo -m``:

* ``PIX``: both devices hang off one PCIe switch (at most one bridge);
* ``PXB``: they meet at a switch, through more than one bridge;
* ``PHB``: they meet only at the host bridge (same root complex);
* ``NODE``: different root complexes of one NUMA node;
* ``SYS``: different NUMA nodes (across the socket interconnect).

They are computed from the device's real path, e.g.
``/sys/devices/pci0000:00/0000:00:01.1/0000:02:00.0/0000:03:00.0``: the
components after the root bus are the bridges above the device.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import read_text
from slurmtopo.inventory.hostlist import natural_key
from slurmtopo.inventory.model import CpuTopology, parse_cpulist

PCI_RE = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
ROOT_BUS_RE = re.compile(r"^pci([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2})$")

#: PCI class codes NCCL uses to recognise the far end of an NVLink
NVSWITCH_CLASS = "0x068000"
IBMNPU_CLASS = "0x068001"
#: the most read of one sysfs/procfs attribute (the kernel's are a page)
MAX_ATTRIBUTE_BYTES = 1 << 20


def canonical_pci(bus_id) -> Optional[str]:
    """``00000000:07:00.0`` (NVML) or ``0000:07:00.0`` -> ``0000:07:00.0``.

    NVML prints an 8-digit domain, sysfs a 4-digit one; both name the same
    device. Returns None for anything that is not a PCI address.
    """
    if bus_id is None:
        return None
    m = PCI_RE.match(str(bus_id).strip())
    if not m:
        return None
    dom, bus, dev, fn = m.groups()
    return f"{int(dom, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


@dataclass(frozen=True)
class NicInfo:
    """One NIC port as sysfs shows it (before it becomes a model Nic)."""

    name: str
    netdev: Optional[str]
    pci_bus_id: Optional[str]
    link_layer: str
    rate_gbps: Optional[float]
    state: str  # active | down | unknown
    port: int
    numa_node: Optional[int]
    rdma: bool


class Sysfs:
    """Read-only view of ``/sys`` and ``/proc`` below ``root``."""

    def __init__(self, root: str = "/"):
        self.root = os.fspath(root)

    # -- primitives --------------------------------------------------------

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *[p.lstrip("/") for p in parts])

    def read(self, *parts: str) -> Optional[str]:
        """The attribute's text, stripped; None when it is missing,
        unreadable or not a regular file (a FIFO under a test root is
        refused, never waited on)."""
        try:
            return read_text(self.path(*parts), MAX_ATTRIBUTE_BYTES, errors="replace").strip()
        except SlurmtopoError:
            return None

    def read_int(self, *parts: str) -> Optional[int]:
        text = self.read(*parts)
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def listdir(self, *parts: str) -> List[str]:
        try:
            return sorted(os.listdir(self.path(*parts)), key=natural_key)
        except OSError:
            return []

    # -- PCI ---------------------------------------------------------------

    def pci_chain(self, bus_id) -> Optional[Tuple[str, ...]]:
        """Root bus, bridges and the device itself, top down; None if the
        device is not in sysfs."""
        addr = canonical_pci(bus_id)
        if addr is None:
            return None
        link = self.path("sys/bus/pci/devices", addr)
        if not os.path.exists(link):
            return None
        parts = os.path.realpath(link).split(os.sep)
        for i, comp in enumerate(parts):
            if ROOT_BUS_RE.match(comp):
                rest = [p.lower() for p in parts[i + 1:] if PCI_RE.match(p) or ROOT_BUS_RE.match(p)]
                return (comp.lower(),) + tuple(rest)
        return None

    def pci_numa(self, bus_id) -> Optional[int]:
        addr = canonical_pci(bus_id)
        if addr is None:
            return None
        node = self.read_int("sys/bus/pci/devices", addr, "numa_node")
        return node if node is not None and node >= 0 else None

    def pci_class(self, bus_id) -> Optional[str]:
        addr = canonical_pci(bus_id)
        return self.read("sys/bus/pci/devices", addr, "class") if addr else None

    def pcie_relation(self, a, b) -> Optional[str]:
        """nvidia-smi's PIX/PXB/PHB/NODE/SYS between two PCI devices, or
        None when either is unknown to sysfs."""
        ca, cb = self.pci_chain(a), self.pci_chain(b)
        if ca is None or cb is None:
            return None
        if ca[0] != cb[0]:
            na, nb = self.pci_numa(a), self.pci_numa(b)
            return "NODE" if na == nb else "SYS"
        common = 0
        while common < min(len(ca), len(cb)) and ca[common] == cb[common]:
            common += 1
        if common == 1:
            return "PHB"  # only the root bus (host bridge) is shared
        if common == len(ca) or common == len(cb):
            return "PIX"  # one device sits below the other
        # below the deepest shared bridge: "bridge + device" is one switch hop
        below = max(len(ca) - common, len(cb) - common)
        return "PIX" if below <= 2 else "PXB"

    # -- NICs --------------------------------------------------------------

    def _pci_of(self, *parts: str) -> Optional[str]:
        link = self.path(*parts)
        if not os.path.exists(link):
            return None
        return canonical_pci(os.path.basename(os.path.realpath(link)))

    def nics(self) -> List[NicInfo]:
        """RDMA ports from /sys/class/infiniband, then every other physical
        netdev from /sys/class/net (virtual ones have no PCI device)."""
        out: List[NicInfo] = []
        used_netdevs = set()
        for dev in self.listdir("sys/class/infiniband"):
            base = f"sys/class/infiniband/{dev}"
            addr = self._pci_of(base, "device")
            if addr is None:
                continue  # soft RDMA (rxe, siw): no hardware of its own
            netdevs = self.listdir(base, "device/net")
            ports = [p for p in self.listdir(base, "ports") if p.isdigit()]
            for p in ports:
                port = int(p)
                pdir = f"{base}/ports/{p}"
                netdev = self._netdev_for_port(netdevs, port)
                if netdev:
                    used_netdevs.add(netdev)
                out.append(NicInfo(
                    name=dev if len(ports) == 1 else f"{dev}:{port}",
                    netdev=netdev, pci_bus_id=addr,
                    link_layer=_layer(self.read(pdir, "link_layer")),
                    rate_gbps=_ib_rate(self.read(pdir, "rate")),
                    state=_ib_state(self.read(pdir, "state")),
                    port=port, numa_node=self.pci_numa(addr), rdma=True))
        for ifname in self.listdir("sys/class/net"):
            if ifname in used_netdevs:
                continue
            base = f"sys/class/net/{ifname}"
            addr = self._pci_of(base, "device")
            if addr is None:
                continue  # lo, bridges, bonds, veths ...
            speed = self.read_int(base, "speed")
            out.append(NicInfo(
                name=ifname, netdev=ifname, pci_bus_id=addr, link_layer="Ethernet",
                rate_gbps=speed / 1000.0 if speed and speed > 0 else None,
                state=_oper_state(self.read(base, "operstate")),
                port=1, numa_node=self.pci_numa(addr), rdma=False))
        return out

    def _netdev_for_port(self, netdevs: List[str], port: int) -> Optional[str]:
        if len(netdevs) <= 1:
            return netdevs[0] if netdevs else None
        for nd in netdevs:  # dual-port on one function: dev_port is 0-based
            if self.read_int("sys/class/net", nd, "dev_port") == port - 1:
                return nd
        return netdevs[0]

    # -- CPUs --------------------------------------------------------------

    def numa_cpus(self) -> Dict[int, Tuple[int, ...]]:
        """NUMA node -> CPU ids, from /sys/devices/system/node/node*/cpulist."""
        out: Dict[int, Tuple[int, ...]] = {}
        for name in self.listdir("sys/devices/system/node"):
            m = re.match(r"^node(\d+)$", name)
            text = self.read("sys/devices/system/node", name, "cpulist") if m else None
            if m and text is not None:
                try:
                    out[int(m.group(1))] = parse_cpulist(text)
                except ValueError:
                    continue
        return out

    def cpu_topology(self) -> Optional[CpuTopology]:
        """Sockets, cores and threads, with Slurm's abstract core order:
        cores sorted by (package, core id), threads of a core together."""
        base = "sys/devices/system/cpu"
        online = self.read(base, "online")
        try:
            cpus = parse_cpulist(online) if online else ()
        except ValueError:
            cpus = ()
        if not cpus:
            cpus = tuple(sorted(int(n[3:]) for n in self.listdir(base)
                                if re.match(r"^cpu\d+$", n)))
        cores: Dict[Tuple[int, int], List[int]] = {}
        for cpu in cpus:
            pkg = self.read_int(base, f"cpu{cpu}", "topology/physical_package_id")
            core = self.read_int(base, f"cpu{cpu}", "topology/core_id")
            if pkg is None or core is None:
                return None
            cores.setdefault((pkg, core), []).append(cpu)
        if not cores:
            return None
        keys = sorted(cores)
        packages = sorted({k[0] for k in keys})
        per_pkg = {p: sum(1 for k in keys if k[0] == p) for p in packages}
        threads = max(len(v) for v in cores.values())
        core_cpus = tuple(tuple(sorted(cores[k])) for k in keys)
        if len(set(per_pkg.values())) == 1:
            return CpuTopology(sockets=len(packages), cores_per_socket=per_pkg[packages[0]],
                               threads_per_core=threads, core_cpus=core_cpus)
        return CpuTopology(sockets=1, cores_per_socket=len(keys), threads_per_core=threads,
                           core_cpus=core_cpus)

    # -- MIG ---------------------------------------------------------------

    def mig_minors(self) -> Dict[str, int]:
        """``gpu0/gi1/access`` -> minor of /dev/nvidia-caps/nvidia-capN, from
        /proc/driver/nvidia-caps/mig-minors (the file slurmd reads)."""
        text = self.read("proc/driver/nvidia-caps/mig-minors") or ""
        out: Dict[str, int] = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                out[parts[0]] = int(parts[1])
        return out


def _ib_state(text: Optional[str]) -> str:
    # "4: ACTIVE", "1: DOWN", "2: INIT"
    if not text:
        return "unknown"
    word = text.split(":")[-1].strip().upper()
    return "active" if word == "ACTIVE" else "down"


def _oper_state(text: Optional[str]) -> str:
    t = (text or "").strip().lower()
    return {"up": "active", "down": "down", "lowerlayerdown": "down",
            "notpresent": "down"}.get(t, "unknown")


def _ib_rate(text: Optional[str]) -> Optional[float]:
    # "400 Gb/sec (4X NDR)", "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)"
    m = re.match(r"^\s*([0-9.]+)\s*Gb/sec", text or "")
    return float(m.group(1)) if m else None


def _layer(text: Optional[str]) -> str:
    """The port's link_layer file; "unknown" when there is none (never assumed)."""
    t = (text or "").strip().lower()
    return {"ethernet": "Ethernet", "infiniband": "InfiniBand"}.get(t, "unknown")
