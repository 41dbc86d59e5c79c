"""Build a fake /sys and /proc tree in a directory, from a machine fixture.

The layout copies the kernel's: devices live under
``sys/devices/pci<domain>:<bus>/<bridge>/.../<device>`` and everything
else (``sys/bus/pci/devices/<addr>``, ``sys/class/infiniband/<dev>``,
``sys/class/net/<if>``, a device's ``device`` link) is a *relative*
symlink into that tree, as on a real node, so the agent resolves paths
exactly as it would there.
"""
from __future__ import annotations

import os
from typing import Any, Dict

from slurmtopo.inventory.model import format_cpulist, parse_cpulist

GPU_CLASS, BRIDGE_CLASS, NVSWITCH_CLASS = "0x030200", "0x060400", "0x068000"
IB_CLASS, ETH_CLASS = "0x020700", "0x020000"


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")


def _link(target_abs: str, link_path: str) -> None:
    os.makedirs(os.path.dirname(link_path), exist_ok=True)
    os.symlink(os.path.relpath(target_abs, os.path.dirname(link_path)), link_path)


def _pci_device(root: str, path: str, cls: str, numa: Dict[str, int]) -> str:
    """Create the device and its bridges; return the device directory."""
    comps = path.strip("/").split("/")
    node = numa.get(comps[0], -1)
    devroot = os.path.join(root, "sys/devices")
    for k in range(1, len(comps)):
        d = os.path.join(devroot, *comps[:k + 1])
        if not os.path.isdir(d):
            os.makedirs(d)
            _write(os.path.join(d, "numa_node"), str(node))
            _write(os.path.join(d, "vendor"), "0x10de" if cls == GPU_CLASS else "0x8086")
            _link(d, os.path.join(root, "sys/bus/pci/devices", comps[k]))
        _write(os.path.join(d, "class"), cls if k == len(comps) - 1 else BRIDGE_CLASS)
    return os.path.join(devroot, *comps)


def build_sysfs(root: str, machine: Dict[str, Any]) -> str:
    """Write the tree for ``machine`` below ``root``; returns ``root``."""
    numa = machine.get("pci_numa") or {}
    defaults = machine.get("gpu_defaults") or {}
    for g in machine.get("gpus") or []:
        path = {**defaults, **g}.get("path")
        if path:
            _pci_device(root, path, GPU_CLASS, numa)
    for path in machine.get("nvswitches") or []:
        if path:
            _pci_device(root, path, NVSWITCH_CLASS, numa)
    for nic in machine.get("nics") or []:
        _nic(root, nic, numa)
    vdir = os.path.join(root, "sys/devices/virtual/net/lo")
    _write(os.path.join(vdir, "operstate"), "unknown")
    _link(vdir, os.path.join(root, "sys/class/net/lo"))
    _cpus(root, machine)
    if machine.get("mig_minors"):
        _write(os.path.join(root, "proc/driver/nvidia-caps/mig-minors"), mig_minors_text())
    return root


def _nic(root: str, nic: Dict[str, Any], numa: Dict[str, int]) -> None:
    rdma = nic.get("rdma", True)
    dev = _pci_device(root, nic["path"], IB_CLASS if rdma else ETH_CLASS, numa)
    if rdma:
        ibdir = os.path.join(dev, "infiniband", nic["name"])
        _link(dev, os.path.join(ibdir, "device"))
        for port in range(1, int(nic.get("ports", 1)) + 1):
            pdir = os.path.join(ibdir, "ports", str(port))
            _write(os.path.join(pdir, "state"), nic.get("state", "4: ACTIVE"))
            _write(os.path.join(pdir, "phys_state"), "5: LinkUp")
            _write(os.path.join(pdir, "rate"), nic.get("rate", "200 Gb/sec (4X HDR)"))
            if nic.get("link_layer", "InfiniBand") is not None:  # None: no such file
                _write(os.path.join(pdir, "link_layer"), nic.get("link_layer", "InfiniBand"))
        _link(ibdir, os.path.join(root, "sys/class/infiniband", nic["name"]))
    netdev = nic.get("netdev")
    if netdev:
        ndir = os.path.join(dev, "net", netdev)
        _write(os.path.join(ndir, "operstate"), nic.get("operstate", "up"))
        _write(os.path.join(ndir, "speed"), str(nic.get("speed", -1)))
        _write(os.path.join(ndir, "dev_port"), "0")
        _link(dev, os.path.join(ndir, "device"))
        _link(ndir, os.path.join(root, "sys/class/net", netdev))


def _cpus(root: str, machine: Dict[str, Any]) -> None:
    cpu = machine.get("cpu")
    if not cpu:
        return
    sockets, per, threads = int(cpu["sockets"]), int(cpu["cores_per_socket"]), \
        int(cpu.get("threads", 1))
    cores = sockets * per
    base = os.path.join(root, "sys/devices/system/cpu")
    for c in range(cores * threads):
        if cpu.get("numbering", "split") == "split":  # Linux on most x86 servers
            core = c % cores
        else:  # "adjacent": sibling threads numbered next to each other
            core = c // threads
        tdir = os.path.join(base, f"cpu{c}", "topology")
        _write(os.path.join(tdir, "physical_package_id"), str(core // per))
        _write(os.path.join(tdir, "core_id"), str((core % per) * int(cpu.get("core_id_step", 1))))
    _write(os.path.join(base, "online"), f"0-{cores * threads - 1}")
    for node, cpulist in (machine.get("numa") or {}).items():
        _write(os.path.join(root, f"sys/devices/system/node/node{node}/cpulist"),
               format_cpulist(parse_cpulist(str(cpulist))) if cpulist else "")


def mig_minors_text(gpus: int = 8) -> str:
    """/proc/driver/nvidia-caps/mig-minors as the driver writes it: minors
    from 3 upwards, per GPU 15 GPU instances, each followed by 8 compute
    instances (e.g. gpu4/gi7/access 606, gpu4/gi7/ci0/access 607)."""
    out = ["config 1", "monitor 2"]
    minor = 3
    for g in range(gpus):
        for gi in range(15):
            out.append(f"gpu{g}/gi{gi}/access {minor}")
            minor += 1
            for ci in range(8):
                out.append(f"gpu{g}/gi{gi}/ci{ci}/access {minor}")
                minor += 1
    return "\n".join(out)
