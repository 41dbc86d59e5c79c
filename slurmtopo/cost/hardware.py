"""One node type's figures under some cost parameters: GB/s of a ring or a
GPU pair inside the node by link class, each GPU's network share (its
closest compute NICs' rate split among the GPUs that use them) and the
algbw of an NVLink SHARP all-reduce on its NVSwitch."""
from __future__ import annotations

import math
from typing import Dict, List, Tuple

from slurmtopo.cost.defaults import DEFAULT_GPU_GENERATION, DEFAULT_PCIE_FACTOR, GPU_GENERATIONS
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Hardware
from slurmtopo.placement.intranode import hw_info, ring


def network_kind(hw: Hardware) -> str:
    """``efa`` when a compute NIC is an AWS EFA device (the kernel names
    them ``rdmap*``, the presets ``efa*``), else ``roce`` for RDMA over
    Ethernet, else ``infiniband`` (also when nothing says: most GPU
    clusters)."""
    nics = hw.compute_nics()
    if any(n.name.startswith(("efa", "rdmap")) for n in nics):
        return "efa"
    if nics and all(n.link_layer == "Ethernet" for n in nics):
        return "roce"
    return "infiniband"


def generation(hw: Hardware) -> int:
    """The GPUs' generation as NCCL's tables index it (0 Volta, 1 Ampere,
    2 Hopper, 3 Blackwell; :data:`~slurmtopo.cost.defaults.GPU_GENERATIONS`)."""
    model = hw.model.lower()
    for key, gen in GPU_GENERATIONS:
        if key in model:
            return gen
    return DEFAULT_GPU_GENERATION


#: AWS instance families whose network plugin's tuner overrules NCCL
#: (:func:`slurmtopo.cost.tuner.plugin_choice`), by GPU generation with EFA:
#: p5/p5e/p5en (Hopper), p6-b200 (Blackwell)
_AWS_TUNED = {2: "p5", 3: "p6"}


def tuned_platform(hw: Hardware, kind: str) -> str:
    """``p5`` or ``p6`` for 8-GPU EFA nodes of those instance families (the
    inventory knows the NICs and GPUs, not the instance type), else ``""``."""
    if kind != "efa" or hw.gpu_count != 8 or not hw.nvswitch:
        return ""
    return _AWS_TUNED.get(generation(hw), "")


def _ring(hw: Hardware, gpus: Tuple[int, ...]) -> LinkClass:
    return ring(hw, gpus)


class HardwareFigures:
    """Bandwidths of one hardware type under some CostParams."""

    def __init__(self, p: "CostParams", hw: Hardware):
        self.p = p
        self.hw = hw
        info = hw_info(hw)
        self.lc = info.lc
        self.lanes = info.lanes
        self.lane = p.lane_gbps(hw)
        n = hw.gpu_count
        lanes = [info.lanes[a][b] for a in range(n) for b in range(n) if a != b]
        self.max_lanes = max(lanes) if lanes else 0
        self.pcie = p.pcie(hw)
        self.net = self._net_share()
        self.no_nics = not hw.compute_nics()
        #: what the compute NICs are: infiniband, roce or efa (the cost
        #: block's ``network`` overrides it)
        self.net_kind = p.network or network_kind(hw)
        #: the GPUs' generation (NCCL's tables), and the platform whose
        #: network plugin tunes NCCL ("" for none)
        self.gen = generation(hw)
        self.platform = tuned_platform(hw, self.net_kind)
        #: an NVLS all-reduce on this node's NVSwitch: GB/s of algbw (its
        #: share of the GPU's NVLink bandwidth; 0: no NVLink SHARP), seconds
        #: of latency
        share, self.nvls_lat = p.nvls(hw)
        self.nvls_bw = share * self.class_bw(LinkClass.NVLINK) if self.max_lanes else 0.0
        self._intra: Dict[Tuple[int, ...], Tuple[LinkClass, float]] = {}

    def _net_share(self) -> List[float]:
        """Per GPU, GB/s of network: its share of its closest compute NICs."""
        hw, p = self.hw, self.p
        nics = [x for x in hw.compute_nics() if x.state != "down"] or list(hw.compute_nics())
        n = hw.gpu_count
        if not nics:
            return [p.default_nic_gbit / 8.0 / max(1, n)] * n
        best = []
        for g in range(n):
            rel = [x.relation_to(g) for x in nics]
            top = min(rel)
            best.append([i for i, r in enumerate(rel) if r == top])
        users = [sum(1 for b in best if i in b) for i in range(len(nics))]
        out = []
        for g in range(n):
            out.append(sum((nics[i].rate_gbps or p.default_nic_gbit) / 8.0 / users[i]
                           for i in best[g]))
        return out

    def class_bw(self, cls: LinkClass, lanes: int = 0) -> float:
        """GB/s of a ring hop of class ``cls`` inside this node."""
        p = self.p
        if cls in p.bandwidth:
            return p.bandwidth[cls]
        if cls is LinkClass.SELF:
            return math.inf
        if cls is LinkClass.NVLINK:
            return self.lane * (lanes or self.max_lanes or 1)
        if cls is LinkClass.NVLINK_DOMAIN:
            return self.lane * (self.max_lanes or 1)
        if cls.is_pcie:
            bw = self.pcie * p.pcie_factor.get(cls, DEFAULT_PCIE_FACTOR[cls])
            return min(bw, p.inter_socket_gbps) if cls is LinkClass.SYS else bw
        raise ValueError(cls)

    def intra(self, gpus: Tuple[int, ...]) -> Tuple[LinkClass, float]:
        """(ring class, GB/s) of a ring over ``gpus`` (sorted) in this node."""
        hit = self._intra.get(gpus)
        if hit is None:
            cls = _ring(self.hw, gpus)
            if cls is LinkClass.NVLINK:
                lm = self.lanes
                lanes = min(lm[a][b] for i, a in enumerate(gpus)
                            for b in gpus[i + 1:] if self.lc[a][b] is LinkClass.NVLINK)
                hit = (cls, self.class_bw(cls, lanes))
            else:
                hit = (cls, self.class_bw(cls))
            self._intra[gpus] = hit
        return hit

    def pair(self, a: int, b: int) -> Tuple[LinkClass, float]:
        cls = self.lc[a][b]
        if cls is LinkClass.NVLINK:
            return cls, self.class_bw(cls, self.lanes[a][b])
        return cls, self.class_bw(cls)
