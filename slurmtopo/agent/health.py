"""Compare a node against its last good report: what degraded?

Three things make a GPU node unfit for topology-aware training while
Slurm still happily schedules on it: a GPU that disappeared (fell off the
bus, GPU_IS_LOST), an NVLink that went down (the job runs, at a fraction of
the bandwidth the planner assumed), a NIC that went down. Each is found by
comparing the current discovery with the *last good* one (the baseline):

* GPUs are matched by UUID, else PCI bus id, else index (NVML indices shift
  when a GPU vanishes, so the index alone would blame the wrong GPU);
* NVLink: a port active in the baseline and not active now; where a source
  has no per-port detail, fewer lanes between a pair than before;
* NICs: active in the baseline, down or gone now.

A GPU that is present but listed in the report's ``lost_gpus`` counts as
missing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

from slurmtopo.inventory.links import parse_token
from slurmtopo.inventory.model import Gpu, Node

#: Slurm keeps node reasons short; longer summaries are cut
MAX_SUMMARY = 200


@dataclass(frozen=True)
class Degradation:
    kind: str  # gpu_missing | nvlink_down | nic_down
    detail: str

    def __str__(self) -> str:
        return self.detail


def _label(g: Gpu) -> str:
    ident = g.uuid or g.pci_bus_id
    return f"GPU {g.index}" + (f" ({ident})" if ident else "")


def match_gpus(good: Node, now: Node, lost=()) -> Dict[int, Optional[Gpu]]:
    """Baseline GPU index -> the same GPU now (None: missing)."""
    lost = set(lost)
    usable = [g for g in now.gpus if g.index not in lost]
    by_uuid = {g.uuid: g for g in usable if g.uuid}
    by_pci = {g.pci_bus_id: g for g in usable if g.pci_bus_id}
    by_index = {g.index: g for g in usable}
    out: Dict[int, Optional[Gpu]] = {}
    for g in good.gpus:
        if g.uuid:
            out[g.index] = by_uuid.get(g.uuid)
        elif g.pci_bus_id:
            out[g.index] = by_pci.get(g.pci_bus_id)
        else:
            out[g.index] = by_index.get(g.index)
    return out


def degradations(good: Node, now: Node, report: Optional[Mapping] = None) -> List[Degradation]:
    """What is worse in ``now`` than in the baseline ``good``."""
    lost = (report or {}).get("lost_gpus") or ()
    match = match_gpus(good, now, lost)
    out: List[Degradation] = []
    for g in good.gpus:
        if match[g.index] is None:
            out.append(Degradation("gpu_missing", f"{_label(g)} missing"))
    for g in good.gpus:
        cur = match[g.index]
        if cur is None or not g.nvlinks:
            continue
        active_now = {p.link for p in cur.nvlinks if p.active}
        down = [p.link for p in g.nvlinks if p.active and p.link not in active_now]
        if down:
            out.append(Degradation("nvlink_down", f"{_label(cur)} NVLink "
                                   + ",".join(map(str, down)) + " down"))
    out.extend(_lane_loss(good, now, match))
    now_nics = {n.name: n for n in now.hardware.nics}
    for nic in good.hardware.nics:
        if nic.state != "active":
            continue
        cur = now_nics.get(nic.name)
        if cur is None:
            out.append(Degradation("nic_down", f"NIC {nic.name} missing"))
        elif cur.state != "active":
            out.append(Degradation("nic_down", f"NIC {nic.name} {cur.state}"))
    return out


def _lane_loss(good: Node, now: Node, match: Dict[int, Optional[Gpu]]) -> List[Degradation]:
    """NVLink loss seen only in the link matrix (sources without ports)."""
    out = []
    gpus = good.gpus
    for a in range(len(gpus)):
        for b in range(a + 1, len(gpus)):
            ga, gb = gpus[a], gpus[b]
            ca, cb = match[a], match[b]
            if ca is None or cb is None or (ga.nvlinks and gb.nvlinks):
                continue
            before = parse_token(good.hardware.links[a][b])[1]
            after = parse_token(now.hardware.links[ca.index][cb.index])[1]
            if after < before:
                out.append(Degradation("nvlink_down", f"GPU {ca.index}-GPU {cb.index} NVLink "
                                       f"NV{before} -> " + (f"NV{after}" if after else "none")))
    return out


def summary(found: List[Degradation]) -> str:
    """One line for a Slurm node reason (without the ``slurmtopo:`` tag)."""
    text = "; ".join(str(d) for d in found)
    return text if len(text) <= MAX_SUMMARY else text[:MAX_SUMMARY - 3] + "..."
