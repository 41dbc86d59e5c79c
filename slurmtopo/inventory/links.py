"""Link classes: how two GPUs (or a GPU and a NIC, or two hosts) are connected.

Inside a node we use the vocabulary of ``nvidia-smi topo -m`` because that is
what admins read every day: ``NV#`` (a bonded set of # NVLinks), ``PIX``,
``PXB``, ``PHB``, ``NODE``, ``SYS``. Between nodes the link is the network, and
what matters is how high in the switch tree two hosts first meet.

:class:`LinkClass` orders all of these from fastest to slowest so that the
planner and the cost model can ask "what is the slowest link this group
crosses" with a plain ``max()``.
"""
from __future__ import annotations

import enum
import re
from typing import Optional, Tuple

_NV_RE = re.compile(r"^NV(\d+)$")


class LinkClass(enum.IntEnum):
    """Connection classes, ordered fastest (smallest) to slowest."""

    SELF = 0
    NVLINK = 1  # direct NVLink (bridge, mesh) or NVSwitch inside one node
    NVLINK_DOMAIN = 2  # multi-node NVLink (e.g. GB200 NVL72): same clique, other tray
    PIX = 3  # at most one PCIe bridge
    PXB = 4  # several PCIe bridges, no host bridge
    PHB = 5  # through a PCIe host bridge (the CPU)
    NODE = 6  # between host bridges within one NUMA node
    SYS = 7  # across the SMP interconnect between NUMA nodes (QPI/UPI/xGMI)
    NET_LEAF = 8  # other host, same leaf switch
    NET_L1 = 9  # other host, meet one level above the leaves (spine)
    NET_L2 = 10  # two levels above the leaves (core / super-spine)
    NET_L3 = 11
    NET_FAR = 12  # other host, no common switch known (separate trees)

    @property
    def is_network(self) -> bool:
        return self >= LinkClass.NET_LEAF

    @property
    def is_pcie(self) -> bool:
        return LinkClass.PIX <= self <= LinkClass.SYS

    @property
    def label(self) -> str:
        return _LABELS[self]

    @classmethod
    def network(cls, level: Optional[int]) -> "LinkClass":
        """The class for two hosts whose lowest common switch is ``level``
        above the leaves (0 = same leaf); ``None`` when they share none."""
        if level is None:
            return cls.NET_FAR
        return cls(min(cls.NET_LEAF + level, cls.NET_L3))


_LABELS = {
    LinkClass.SELF: "self",
    LinkClass.NVLINK: "NVLink",
    LinkClass.NVLINK_DOMAIN: "NVLink domain",
    LinkClass.PIX: "PCIe switch (PIX)",
    LinkClass.PXB: "PCIe switches (PXB)",
    LinkClass.PHB: "PCIe host bridge (PHB)",
    LinkClass.NODE: "PCIe within NUMA (NODE)",
    LinkClass.SYS: "PCIe across NUMA (SYS)",
    LinkClass.NET_LEAF: "network, same leaf",
    LinkClass.NET_L1: "network, via spine",
    LinkClass.NET_L2: "network, via core (2 levels up)",
    LinkClass.NET_L3: "network, 3+ levels up",
    LinkClass.NET_FAR: "network, no common switch",
}

#: tokens nvidia-smi prints for PCIe relations, oldest spellings included
PCIE_TOKENS = {
    "PIX": LinkClass.PIX,
    "PXB": LinkClass.PXB,
    "PHB": LinkClass.PHB,
    "NODE": LinkClass.NODE,
    "SYS": LinkClass.SYS,
    "SOC": LinkClass.SYS,  # drivers before 384 called SYS "SOC"
    "PSB": LinkClass.PXB,  # very old drivers
}


def parse_token(token: str) -> Tuple[LinkClass, int]:
    """Parse one ``nvidia-smi topo -m`` cell: returns (class, NVLink lanes).

    Raises ValueError on anything else; callers add file/line context.
    """
    t = token.strip().upper()
    if t in ("X", "SELF"):
        return LinkClass.SELF, 0
    m = _NV_RE.match(t)
    if m:
        lanes = int(m.group(1))
        if lanes < 1:
            raise ValueError(f"NVLink token {token!r} has no lanes")
        return LinkClass.NVLINK, lanes
    if t in PCIE_TOKENS:
        return PCIE_TOKENS[t], 0
    raise ValueError(f"unknown link {token!r} (expected X, NV<n>, PIX, PXB, PHB, NODE or SYS)")


def normalise_token(token: str) -> str:
    """Canonical spelling of a link token (``nv12`` -> ``NV12``, ``SOC`` -> ``SYS``)."""
    cls, lanes = parse_token(token)
    if cls is LinkClass.SELF:
        return "X"
    if cls is LinkClass.NVLINK:
        return f"NV{lanes}"
    return cls.name
