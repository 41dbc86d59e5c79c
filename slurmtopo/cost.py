"""An alpha-beta cost model of a placement's collectives.

Every transfer step costs ``alpha + bytes / bandwidth`` on the link it
crosses. Per group kind the model prices one collective of a stated size
(:data:`DEFAULT_MESSAGE_BYTES`, overridable per request and in the
inventory) on every group of that kind and reports the slowest group.
The formulas (``n`` ranks, ``M`` bytes, ``a``/``B`` alpha and bandwidth of
the link class):

* **all-reduce** inside one node or one NVLink domain: a ring,
  ``2(n-1) * (a + M/(n B))``. Across ``h`` hosts with ``l`` ranks each:
  hierarchical (intra-node reduce-scatter, inter-node ring all-reduce of
  each rank's ``M/l`` slice over its own NIC, intra-node all-gather)::

      2(l-1) * (a_in + M/(l B_in)) + 2(h-1) * (a_net + M/(l h B_net))

  With ``l = 1`` this is the flat ring over the network. Hosts with uneven
  rank counts use the largest ``l`` for the intra-node part and the smallest
  for the slice size (the bottleneck host).
* **all-gather** (``M`` = the gathered size): ``(n-1) * (a + M/(n B))``;
  across hosts ``(h-1) * (a_net + M/(n B_net)) + (l-1) * (a_in + M/(l B_in))``.
* **all-to-all** (``M`` = what one rank sends in total, ``M/n`` to each
  peer): ``(l-1) * (a_in + M/(n B_in)) + (n-l) * (a_net + M/(n B_net))``
  (pairwise exchange, one peer per step).
* **p2p** (pipeline): ``a + M/B`` over the slowest hop between consecutive
  stages of the group.

Link parameters (:class:`CostParams`, defaults in docs/cost-model.md):
NVLink bandwidth is lanes x lane bandwidth by GPU generation (an NVSwitch
node reports ``NV18`` for every pair, so an H100 gets 18 x 25 = 450 GB/s);
PCIe classes are a fraction of the GPU's PCIe bandwidth; the network is the
GPU's share of its closest NICs' rate (a NIC shared by 4 GPUs gives each a
quarter), divided by an oversubscription factor per switch level. All are
overridable in the inventory's ``cost:`` block and ``Hardware`` fields.

Per kind the time is that of its slowest group; the *step time* sums the
kinds that carry distinct traffic (:func:`counted_kinds`): ``tp``, ``cp``,
``pp``, ``dp-cp`` when ``cp > 1`` else ``dp`` (gradients are reduced over
data x context parallel, the plain ``dp`` groups are a subset of it), and
with experts ``ep``, ``expert-tp``, ``expert-dp``. Combined kinds
(``tp-pp``, ``tp-dp-cp``, ``expert-tp-ep``...) are priced for the preview
with a small latency-bound message and not counted, so no traffic is
counted twice.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import InventoryError
from slurmtopo.groups import build_groups, span_of
from slurmtopo.links import LinkClass
from slurmtopo.model import Hardware, Inventory, Node, Placement
from slurmtopo.request import JobRequest
from slurmtopo.topology import network_view

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: Per group kind, the bytes of one collective the model prices. They
#: describe one layer of a large dense transformer (hidden 8192, sequence
#: 4096 tokens per micro-batch, bf16) so the kinds weigh against each
#: other as in training; pass your own per job (``message_bytes``).
DEFAULT_MESSAGE_BYTES: Dict[str, int] = {
    # all-reduce of a layer's output activations: 4096 x 8192 x 2 bytes
    "tp": 64 * MiB,
    # all-gather of keys and values (GQA, 2048-wide K and V): 2 x 4096 x 2048 x 2
    "cp": 32 * MiB,
    # all-to-all dispatch of a micro-batch's tokens to the experts: 4096 x 8192 x 2
    "ep": 64 * MiB,
    # expert tensor parallel all-reduce: like tp
    "expert-tp": 64 * MiB,
    # one gradient bucket (Megatron buckets ~40M parameters; 128 MiB of bf16 ~ 64M)
    "dp": 128 * MiB,
    "dp-cp": 128 * MiB,
    "expert-dp": 128 * MiB,
    # activations of one micro-batch sent to the next stage: 4096 x 8192 x 2
    "pp": 64 * MiB,
    # combined kinds carry small reductions (gradient norm, loss, flags):
    # latency-bound; reported but not counted in the step time
    "tp-pp": 8,
    "tp-cp": 8,
    "tp-dp": 8,
    "tp-dp-cp": 8,
    "expert-tp-ep": 8,
    "expert-tp-ep-pp": 8,
}

#: Which collective each kind runs.
COLLECTIVES: Dict[str, str] = {
    "tp": "all-reduce", "cp": "all-gather", "ep": "all-to-all", "expert-tp": "all-reduce",
    "dp": "all-reduce", "dp-cp": "all-reduce", "expert-dp": "all-reduce", "pp": "p2p",
    "tp-pp": "all-reduce", "tp-cp": "all-reduce", "tp-dp": "all-reduce",
    "tp-dp-cp": "all-reduce", "expert-tp-ep": "all-reduce", "expert-tp-ep-pp": "all-reduce",
}

_C = LinkClass

#: alpha (latency per step), microseconds
DEFAULT_ALPHA_US: Dict[LinkClass, float] = {
    _C.SELF: 0.0, _C.NVLINK: 1.0, _C.NVLINK_DOMAIN: 1.5, _C.PIX: 2.0, _C.PXB: 2.5,
    _C.PHB: 3.0, _C.NODE: 3.5, _C.SYS: 5.0, _C.NET_LEAF: 6.0, _C.NET_L1: 7.0,
    _C.NET_L2: 8.0, _C.NET_L3: 9.0, _C.NET_FAR: 12.0,
}

#: GB/s per NVLink lane and direction by GPU model (first substring match)
DEFAULT_NVLINK_LANE_GBPS: Tuple[Tuple[str, float], ...] = (
    ("gb300", 50.0), ("gb200", 50.0), ("b300", 50.0), ("b200", 50.0), ("b100", 50.0),
    ("gh200", 25.0), ("h200", 25.0), ("h100", 25.0), ("h800", 25.0), ("h20", 25.0),
    ("a100", 25.0), ("a800", 25.0), ("a30", 25.0),
    ("a6000", 14.0625), ("a5000", 14.0625), ("a40", 14.0625), ("rtx", 14.0625),
    ("v100", 25.0), ("p100", 20.0),
)

#: GB/s per direction a GPU gets over PCIe by model (PCIe 5: ~50, 4: ~25, 3: ~12)
DEFAULT_PCIE_GBPS: Tuple[Tuple[str, float], ...] = (
    ("gb300", 50.0), ("gb200", 50.0), ("b300", 50.0), ("b200", 50.0), ("b100", 50.0),
    ("gh200", 50.0), ("h200", 50.0), ("h100", 50.0), ("h800", 50.0), ("h20", 50.0),
    ("a100", 25.0), ("a800", 25.0), ("a30", 25.0), ("a6000", 25.0), ("a5000", 25.0),
    ("a40", 25.0), ("l40", 25.0), ("l4", 25.0), ("a10", 25.0), ("rtx", 25.0),
    ("v100", 12.0), ("p100", 12.0), ("t4", 12.0),
)

#: share of the GPU's PCIe bandwidth a ring gets per PCIe class, after
#: NCCL's topology model (src/graph/topo.h, paths.cc): a path is as fast as
#: its slowest link; peer to peer under PCIe switches (PIX, PXB) runs at
#: the GPU's PCIe link speed; through the CPU's root complex (PHB, NODE,
#: SYS) Intel CPUs split GPU peer traffic into 64-byte TLPs, which NCCL
#: charges as 6/5 of the bandwidth (``INTEL_P2P_OVERHEAD``), so 5/6 of it
#: is left. SYS is further capped by the link between the sockets
#: (:data:`DEFAULT_INTER_SOCKET_GBPS`).
DEFAULT_PCIE_FACTOR: Dict[LinkClass, float] = {
    _C.PIX: 1.0, _C.PXB: 1.0, _C.PHB: 5 / 6, _C.NODE: 5 / 6, _C.SYS: 5 / 6,
}

#: GB/s of the link between CPU sockets, which a SYS ring crosses: NCCL's
#: ``SKL_QPI_BW`` (Skylake-and-later UPI; the same table has ``BDW_QPI_BW``
#: 6 for Broadwell, ``SRP_QPI_BW`` 22 for Sapphire Rapids, ``ERP_QPI_BW``
#: 40 for Emerald Rapids, ``AMD_BW`` 16, ``P9_BW`` 32, ``ARM_BW`` 6). The
#: inventory does not know the CPU model; set ``cost: inter_socket_gbps``.
DEFAULT_INTER_SOCKET_GBPS = 10.0

NETWORK_CLASSES = (_C.NET_LEAF, _C.NET_L1, _C.NET_L2, _C.NET_L3, _C.NET_FAR)

#: keys of the inventory's ``cost:`` block
COST_KEYS = ("alpha_us", "bandwidth_gbps", "nvlink_lane_gbps", "pcie_gbps", "pcie_factor",
             "inter_socket_gbps", "oversubscription", "default_nic_gbit", "message_bytes")


# --------------------------------------------------------------------------
# parameters


def _class_key(text) -> LinkClass:
    t = str(text).strip().upper().replace("-", "_").replace(" ", "_")
    aliases = {"NV": "NVLINK", "NVL": "NVLINK", "DOMAIN": "NVLINK_DOMAIN", "LEAF": "NET_LEAF",
               "SPINE": "NET_L1", "CORE": "NET_L2", "FAR": "NET_FAR", "SOC": "SYS"}
    t = aliases.get(t, t)
    try:
        return LinkClass[t]
    except KeyError:
        raise ValueError(f"unknown link class {text!r} (known: "
                         f"{', '.join(c.name for c in LinkClass)})") from None


_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": KiB, "ki": KiB, "m": 10**6, "mb": 10**6,
          "mib": MiB, "mi": MiB, "g": 10**9, "gb": 10**9, "gib": GiB, "gi": GiB,
          "t": 10**12, "tb": 10**12, "tib": 1 << 40, "ti": 1 << 40}


def parse_bytes(value) -> int:
    """``67108864``, ``"64MiB"``, ``"1.5 GB"`` -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size in bytes, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0 or value != int(value):
            raise ValueError(f"expected a whole number of bytes >= 0, got {value!r}")
        return int(value)
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ValueError(f"expected a size like 67108864 or '64MiB', got {value!r}")
    unit = (m.group(2) or "").lower()
    if unit not in _UNITS:
        raise ValueError(f"unknown size unit in {value!r}")
    return int(float(m.group(1)) * _UNITS[unit])


def _positive(value, what: str, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    v = float(value)
    if v != v or v < 0 or (v == 0 and not allow_zero) or math.isinf(v):
        raise ValueError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return v


@dataclass
class CostParams:
    """Link parameters of the alpha-beta model.

    ``alpha``: seconds per step, per LinkClass. ``bandwidth``: explicit
    GB/s per direction per GPU for a LinkClass; a class not listed is
    derived from the hardware (NVLink lanes x ``nvlink_lane_gbps``, PCIe
    bandwidth x ``pcie_factor``, the GPU's NIC share / ``oversubscription``).
    """

    alpha: Dict[LinkClass, float] = field(
        default_factory=lambda: {c: us * 1e-6 for c, us in DEFAULT_ALPHA_US.items()})
    bandwidth: Dict[LinkClass, float] = field(default_factory=dict)
    nvlink_lane_gbps: Tuple[Tuple[str, float], ...] = DEFAULT_NVLINK_LANE_GBPS
    pcie_gbps: Tuple[Tuple[str, float], ...] = DEFAULT_PCIE_GBPS
    default_nvlink_lane_gbps: float = 25.0
    default_pcie_gbps: float = 25.0
    pcie_factor: Dict[LinkClass, float] = field(default_factory=lambda: dict(DEFAULT_PCIE_FACTOR))
    oversubscription: Dict[LinkClass, float] = field(default_factory=dict)
    #: per-node network rate (Gbit/s) assumed when a node lists no compute NIC
    default_nic_gbit: float = 400.0
    #: GB/s between CPU sockets: the ceiling of a SYS ring
    inter_socket_gbps: float = DEFAULT_INTER_SOCKET_GBPS
    message_bytes: Dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MESSAGE_BYTES))
    _hw: Dict[Hardware, "_HwCost"] = field(default_factory=dict, repr=False, compare=False)

    # ---- construction ----------------------------------------------------

    @classmethod
    def from_inventory(cls, inv: Inventory) -> "CostParams":
        """Defaults with the inventory's ``cost:`` overrides applied.

        Keys (all optional; see docs/cost-model.md)::

            cost:
              alpha_us: {NVLINK: 1.0, NET_LEAF: 6}       # per link class, microseconds
              bandwidth_gbps: {SYS: 10, NET_L1: 40}      # per class, GB/s per GPU and direction
              nvlink_lane_gbps: {H100: 25, A6000: 14}    # GPU model substring -> GB/s per lane
              pcie_gbps: 25                              # or {model substring: GB/s}
              pcie_factor: {PHB: 0.8, SYS: 0.5}          # share of PCIe bandwidth per class
              inter_socket_gbps: 22                      # GB/s between sockets (caps SYS)
              oversubscription: {NET_L1: 2, NET_L2: 4}   # divides the NIC share per level
              default_nic_gbit: 400                      # when a node lists no compute NIC
              message_bytes: {tp: 64MiB, dp: 268435456}  # per group kind

        Raises :class:`InventoryError` naming the key on bad values.
        """
        p = cls()
        cost = inv.cost or {}
        if not cost:
            return p
        src = inv.source

        def line(obj, key=None):
            from slurmtopo.yamlio import Reader
            return Reader.line(obj, key)

        def fail(msg, obj=None, key=None):
            return InventoryError(f"cost: {msg}", src, line(obj, key) if obj is not None else None)

        for key in cost:
            if key not in COST_KEYS:
                raise fail(f"unknown key {key!r} (allowed: {', '.join(COST_KEYS)})")

        def mapping(key):
            v = cost.get(key)
            if v is None:
                return None
            if not isinstance(v, Mapping):
                raise fail(f"{key} must be a mapping, got {v!r}", v)
            return v

        def per_class(key, allow_zero, only=None):
            m = mapping(key)
            out = {}
            for k, v in (m or {}).items():
                try:
                    c = _class_key(k)
                    if only is not None and c not in only:
                        raise ValueError(f"{key} takes only {', '.join(x.name for x in only)}, "
                                         f"not {c.name}")
                    out[c] = _positive(v, f"{key}.{k}", allow_zero)
                except ValueError as exc:
                    raise fail(str(exc), m, k) from None
            return out

        for c, us in per_class("alpha_us", True).items():
            p.alpha[c] = us * 1e-6
        p.bandwidth.update(per_class("bandwidth_gbps", False))
        p.pcie_factor.update(per_class("pcie_factor", False, tuple(DEFAULT_PCIE_FACTOR)))
        p.oversubscription.update(per_class("oversubscription", False, NETWORK_CLASSES))

        def by_model(key, current):
            v = cost.get(key)
            if v is None:
                return current, None
            if isinstance(v, Mapping):
                out = []
                for k, x in v.items():
                    try:
                        out.append((str(k).lower(), _positive(x, f"{key}.{k}")))
                    except ValueError as exc:
                        raise fail(str(exc), v, k) from None
                return tuple(out) + tuple(current), None
            try:
                return current, _positive(v, key)
            except ValueError as exc:
                raise fail(str(exc), cost) from None

        p.nvlink_lane_gbps, flat = by_model("nvlink_lane_gbps", p.nvlink_lane_gbps)
        if flat is not None:
            p.nvlink_lane_gbps, p.default_nvlink_lane_gbps = (), flat
        p.pcie_gbps, flat = by_model("pcie_gbps", p.pcie_gbps)
        if flat is not None:
            p.pcie_gbps, p.default_pcie_gbps = (), flat
        for key in ("default_nic_gbit", "inter_socket_gbps"):
            if cost.get(key) is not None:
                try:
                    setattr(p, key, _positive(cost[key], key))
                except ValueError as exc:
                    raise fail(str(exc), cost) from None
        mb = mapping("message_bytes")
        for k, v in (mb or {}).items():
            from slurmtopo.errors import LayoutError
            from slurmtopo.request import normalise_kind
            try:
                kind = normalise_kind(k)
                p.message_bytes[kind] = parse_bytes(v)
            except (ValueError, LayoutError) as exc:
                text = exc.message if isinstance(exc, LayoutError) else str(exc)
                raise fail(f"message_bytes: {text}", mb, k) from None
        return p

    # ---- per-hardware figures ---------------------------------------------

    def hw(self, hw: Hardware) -> "_HwCost":
        """This hardware's figures under these parameters, built once per
        hardware value (equal node types share them)."""
        hit = self._hw.get(hw)
        if hit is None:
            hit = self._hw[hw] = _HwCost(self, hw)
        return hit

    def _match(self, table, model: str, default: float) -> float:
        m = model.lower()
        for key, v in table:
            if key in m:
                return v
        return default

    def lane_gbps(self, hw: Hardware) -> float:
        if hw.nvlink_lane_gbps:
            return float(hw.nvlink_lane_gbps)
        return self._match(self.nvlink_lane_gbps, hw.model, self.default_nvlink_lane_gbps)

    def pcie(self, hw: Hardware) -> float:
        if hw.pcie_gbps:
            return float(hw.pcie_gbps)
        return self._match(self.pcie_gbps, hw.model, self.default_pcie_gbps)

    def message(self, kind: str, req: Optional[JobRequest] = None) -> int:
        if req is not None and kind in req.message_bytes:
            return int(req.message_bytes[kind])
        return int(self.message_bytes.get(kind, DEFAULT_MESSAGE_BYTES.get(kind, MiB)))


def cost_params(inv: Inventory) -> CostParams:
    """The inventory's cost parameters, validated and built once per load
    and kept in its derived tables (rebuilt if its ``cost`` block is
    replaced): every command, the daemon and the start-time step price with
    the same figures, and their per-hardware figures are computed once.
    Raises :class:`InventoryError` at ``file:line`` on a bad block, which
    :func:`slurmtopo.api.load_cluster` and the start-time step call at load,
    so a typo fails there and not only where a plan is priced."""
    kept = inv.derived.get("cost.params", lambda: [None, None])
    if kept[1] is None or kept[0] is not inv.cost:
        kept[:] = [inv.cost, CostParams.from_inventory(inv)]
    return kept[1]


def _ring(hw: Hardware, gpus: Tuple[int, ...]) -> LinkClass:
    from slurmtopo.placement.intranode import ring
    return ring(hw, gpus)


class _HwCost:
    """Bandwidths of one hardware type under some CostParams."""

    def __init__(self, p: CostParams, hw: Hardware):
        self.p = p
        self.hw = hw
        from slurmtopo.placement.intranode import hw_info
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


# --------------------------------------------------------------------------
# formulas


def flat_time(collective: str, n: int, m: float, alpha: float, gbps: float) -> float:
    """One collective over ``n`` ranks on one link class (ring)."""
    if n <= 1:
        return 0.0
    bw = gbps * 1e9
    if collective == "all-reduce":
        return 2 * (n - 1) * (alpha + m / (n * bw))
    if collective in ("all-gather", "all-to-all"):
        return (n - 1) * (alpha + m / (n * bw))
    if collective == "p2p":
        return alpha + m / bw
    raise ValueError(f"unknown collective {collective!r}")


def hier_time(collective: str, n: int, h: int, l_max: int, l_min: int, m: float,
              a_in: float, gbps_in: float, a_net: float, gbps_net: float) -> float:
    """One collective over ``n`` ranks on ``h`` hosts, ``l_min..l_max`` a host."""
    if h <= 1:
        return flat_time(collective, n, m, a_in, gbps_in)
    b_in = gbps_in * 1e9
    b_net = gbps_net * 1e9
    if collective == "all-reduce":
        t = 2 * (h - 1) * (a_net + m / (l_min * h * b_net))
        if l_max > 1:
            t += 2 * (l_max - 1) * (a_in + m / (l_max * b_in))
        return t
    if collective == "all-gather":
        t = (h - 1) * (a_net + m / (n * b_net))
        if l_max > 1:
            t += (l_max - 1) * (a_in + m / (l_max * b_in))
        return t
    if collective == "all-to-all":
        t = (n - l_min) * (a_net + m / (n * b_net))
        if l_max > 1:
            t += (l_max - 1) * (a_in + m / (n * b_in))
        return t
    if collective == "p2p":
        return a_net + m / b_net
    raise ValueError(f"unknown collective {collective!r}")


# --------------------------------------------------------------------------
# reports


@dataclass
class GroupCost:
    kind: str
    count: int  # groups of this kind
    size: int  # ranks per group
    collective: str  # all-reduce | all-gather | all-to-all | p2p
    message_bytes: int
    slowest: LinkClass  # slowest link any group of the kind crosses
    time_s: float  # modelled time of one collective on the slowest group
    worst_group: int  # index (in groups[kind]) of the slowest group


@dataclass
class CostReport:
    kinds: Dict[str, GroupCost]
    step_time_s: float
    warnings: List[str] = field(default_factory=list)
    counted: Tuple[str, ...] = ()  # kinds summed into step_time_s
    #: lower bounds only: the per-kind bounds summed (each kind alone,
    #: <= step_time_s, which prices the kinds jointly)
    alone_s: Optional[float] = None


def counted_kinds(groups: Mapping[str, list], cp: int) -> Tuple[str, ...]:
    """Kinds whose times make the step time (see the module doc)."""
    out = ["tp", "cp", "dp-cp" if cp > 1 else "dp", "pp"]
    for k in ("ep", "expert-tp", "expert-dp"):
        if k in groups:
            out.append(k)
    return tuple(k for k in out if k in groups)


class _Net:
    """Network class of a set of hosts, cached by the set of their leaves."""

    def __init__(self, inv: Inventory):
        self.inv = inv
        self.view = network_view(inv.fabric)
        self._cache: Dict[frozenset, LinkClass] = {}

    def hosts_class(self, nodes: Sequence[Node]) -> LinkClass:
        if len(nodes) <= 1:
            return LinkClass.SELF
        dom = nodes[0].nvlink_domain
        if dom is not None and all(n.nvlink_domain == dom for n in nodes):
            return LinkClass.NVLINK_DOMAIN
        view = self.view
        if view.flat:
            return LinkClass.NET_LEAF
        leaves = {}
        for n in nodes:
            leaf = view.leaf.get(n.name)
            if leaf is None:
                return LinkClass.NET_FAR
            leaves.setdefault(leaf, n.name)
        if len(leaves) == 1:
            return LinkClass.NET_LEAF
        key = frozenset(leaves)
        hit = self._cache.get(key)
        if hit is None:
            common = None
            for host in leaves.values():
                anc = view.ancestors.get(host, {})
                common = set(anc) if common is None else common & set(anc)
            if not common:
                hit = LinkClass.NET_FAR
            else:
                anc0 = view.ancestors[next(iter(leaves.values()))]
                hit = LinkClass.network(min(anc0[s] for s in common))
            self._cache[key] = hit
        return hit


def _net_gbps(p: CostParams, cls: LinkClass, shares: Iterable[float]) -> float:
    if cls in p.bandwidth:
        return p.bandwidth[cls]
    return min(shares) / p.oversubscription.get(cls, 1.0)


class _Pricer:
    """What :func:`evaluate` needs per rank, computed once per placement
    (host index, GPU, network share), and per host (hardware costs, leaf,
    NVLink domain), so that pricing a group is a few list look-ups: 32,768
    ranks in a few hundredths of a second."""

    def __init__(self, inv: Inventory, p: CostParams, net: _Net, placement: Placement):
        self.p = p
        self.net = net
        hidx: Dict[str, int] = {}
        hosts: List[str] = []
        rank_h: List[int] = []
        rank_g: List[int] = []
        for s in placement.slots:
            i = hidx.get(s.host)
            if i is None:
                i = hidx[s.host] = len(hosts)
                hosts.append(s.host)
            rank_h.append(i)
            rank_g.append(s.gpu)
        self.nodes = [inv.nodes[h] for h in hosts]
        self.hcs = [p.hw(n.hardware) for n in self.nodes]
        self.rank_h = rank_h
        self.rank_g = rank_g
        self.rank_share = [self.hcs[h].net[g] for h, g in zip(rank_h, rank_g)]
        view = net.view
        self.dom = [n.nvlink_domain for n in self.nodes]
        self.leaf = [None if view.flat else view.leaf.get(n.name) for n in self.nodes]
        self._pair: Dict[Tuple[int, int], LinkClass] = {}

    def hosts_class(self, hs) -> LinkClass:
        """Network class (or NVLINK_DOMAIN) of the distinct host indices ``hs``."""
        dom = self.dom
        d0 = dom[hs[0]]
        if d0 is not None and all(dom[h] == d0 for h in hs):
            return LinkClass.NVLINK_DOMAIN
        if len(hs) == 2:
            key = (hs[0], hs[1])
            hit = self._pair.get(key)
            if hit is None:
                hit = self._pair[key] = self.net.hosts_class([self.nodes[h] for h in hs])
            return hit
        return self.net.hosts_class([self.nodes[h] for h in hs])

    def cost(self, ranks: Sequence[int], collective: str, m: int) -> Tuple[LinkClass, float]:
        """(slowest class, seconds) of one collective over ``ranks``."""
        p = self.p
        rank_h, rank_g, hcs = self.rank_h, self.rank_g, self.hcs
        if collective == "p2p":
            return self.p2p_pricer(m)(ranks)
        hs = [rank_h[r] for r in ranks]
        h0 = hs[0]
        n = len(ranks)
        if hs.count(h0) == n:  # one host
            cls, bw = hcs[h0].intra(tuple(sorted([rank_g[r] for r in ranks])))
            return cls, flat_time(collective, n, m, p.alpha[cls], bw)
        by_host: Dict[int, List[int]] = {}
        for r, h in zip(ranks, hs):
            lst = by_host.get(h)
            if lst is None:
                by_host[h] = [rank_g[r]]
            else:
                lst.append(rank_g[r])
        net_cls = self.hosts_class(list(by_host))
        in_cls, in_bw = LinkClass.SELF, math.inf
        l_max, l_min = 0, n
        for h, gpus in by_host.items():
            k = len(gpus)
            if k > 1:
                c, b = hcs[h].intra(tuple(sorted(gpus)))
                if c > in_cls:
                    in_cls = c
                if b < in_bw:
                    in_bw = b
            if k > l_max:
                l_max = k
            if k < l_min:
                l_min = k
        slowest = max(net_cls, in_cls)
        if net_cls is LinkClass.NVLINK_DOMAIN:
            # one NVLink fabric: a flat ring over all ranks
            bw = min(min(hcs[h].class_bw(net_cls) for h in by_host), in_bw)
            return slowest, flat_time(collective, n, m, p.alpha[slowest], bw)
        if net_cls in p.bandwidth:
            net_bw = p.bandwidth[net_cls]
        else:
            share = self.rank_share
            net_bw = min([share[r] for r in ranks]) / p.oversubscription.get(net_cls, 1.0)
        t = hier_time(collective, n, len(by_host), l_max, l_min, m, p.alpha[in_cls],
                      in_bw if in_bw != math.inf else 1.0, p.alpha[net_cls], net_bw)
        return slowest, t

    def p2p_pricer(self, m: int):
        """A function pricing one pipeline chain for a message of ``m``
        bytes: hop costs of a GPU pair inside a host, and of a host pair,
        are computed once per distinct pair."""
        p = self.p
        rank_h, rank_g, hcs, share = self.rank_h, self.rank_g, self.hcs, self.rank_share
        inside: Dict[Tuple[int, int, int], Tuple[LinkClass, float]] = {}
        across: Dict[Tuple[int, int], Tuple[LinkClass, float, float]] = {}
        alpha, over, fixed = p.alpha, p.oversubscription, p.bandwidth
        dom_cls = LinkClass.NVLINK_DOMAIN

        def chain(ranks: Sequence[int]) -> Tuple[LinkClass, float]:
            worst_c, worst_t = LinkClass.SELF, 0.0
            prev = ranks[0]
            for r in ranks[1:]:
                ha, hb = rank_h[prev], rank_h[r]
                if ha == hb:
                    hc = hcs[ha]
                    key = (id(hc), rank_g[prev], rank_g[r])
                    hit = inside.get(key)
                    if hit is None:
                        cls, bw = hc.pair(rank_g[prev], rank_g[r])
                        hit = inside[key] = (cls, alpha[cls] + m / (bw * 1e9))
                    cls, t = hit
                else:
                    hit = across.get((ha, hb))
                    if hit is None:
                        cls = self.hosts_class((ha, hb))
                        if cls is dom_cls:
                            bw = min(hcs[ha].class_bw(cls), hcs[hb].class_bw(cls))
                            hit = (cls, alpha[cls] + m / (bw * 1e9), 0.0)
                        elif cls in fixed:
                            hit = (cls, alpha[cls] + m / (fixed[cls] * 1e9), 0.0)
                        else:
                            hit = (cls, alpha[cls], m * over.get(cls, 1.0) / 1e9)
                        across[(ha, hb)] = hit
                    cls, t, per = hit
                    if per:
                        t += per / min(share[prev], share[r])
                if t > worst_t:
                    worst_t = t
                if cls > worst_c:
                    worst_c = cls
                prev = r
            return worst_c, worst_t

        return chain


_PHRASE = {
    LinkClass.NVLINK_DOMAIN: "spans nodes over multi-node NVLink",
    LinkClass.PIX: "runs over PCIe through one switch (PIX)",
    LinkClass.PXB: "crosses PCIe switches (PXB)",
    LinkClass.PHB: "goes through a PCIe host bridge (PHB)",
    LinkClass.NODE: "crosses PCIe host bridges inside a NUMA node (NODE)",
    LinkClass.SYS: "crosses PCIe between NUMA nodes (SYS)",
    LinkClass.NET_LEAF: "crosses the network (same leaf switch)",
    LinkClass.NET_L1: "crosses the network through a spine switch",
    LinkClass.NET_L2: "crosses the network through a core switch (2 levels up)",
    LinkClass.NET_L3: "crosses the network 3 or more switch levels up",
    LinkClass.NET_FAR: "crosses the network between hosts with no common switch",
}

_HEAVY = ("tp", "expert-tp", "cp", "ep", "dp", "dp-cp", "expert-dp", "pp")


def evaluate(inv: Inventory, placement: Placement, req: JobRequest,
             params: Optional[CostParams] = None, step_only: bool = False) -> CostReport:
    """Price one collective of every group kind of ``placement``.

    Per kind: the slowest link any group crosses, and the time of the
    slowest group. ``warnings`` name the worst group of each traffic-heavy
    kind whose link is slower than the best its size allows on this
    cluster (e.g. "TP group 3 crosses PCIe between NUMA nodes (SYS)").
    ``step_only``: price only the kinds counted in the step time, no
    warnings (what the planner needs to compare placements).
    """
    p = params if params is not None else cost_params(inv)
    groups = placement.groups if placement.groups else build_groups(req.layout)
    counted = counted_kinds(groups, req.layout.cp)
    pricer = _Pricer(inv, p, _Net(inv), placement)
    priced: Dict[str, Tuple[list, str, int]] = {}
    seen: Dict[str, Tuple[float, int, LinkClass, List[int]]] = {}
    kinds: Dict[str, GroupCost] = {}
    warnings: List[str] = []
    warned: List[list] = []
    lb = None
    for kind, gl in groups.items():
        if step_only and kind not in counted:
            continue
        size = len(gl[0]) if gl else 0
        coll = COLLECTIVES.get(kind, "all-reduce")
        m = p.message(kind, req)
        if size <= 1:
            kinds[kind] = GroupCost(kind, len(gl), size, coll, m, LinkClass.SELF, 0.0, 0)
            continue
        same = next((k for k, (g2, c2, m2) in priced.items()
                     if c2 == coll and m2 == m and g2 == gl), None)
        if same is not None:  # dp-cp is dp when cp == 1, tp-dp-cp is tp-dp...
            worst_t, worst_i, slowest, at_slowest = seen[same]
        else:
            worst_t, worst_i, slowest = -1.0, 0, LinkClass.SELF
            at_slowest: List[int] = []
            price = pricer.p2p_pricer(m) if coll == "p2p" else None
            for i, g in enumerate(gl):
                cls, t = price(g) if price is not None else pricer.cost(g, coll, m)
                if t > worst_t:
                    worst_t, worst_i = t, i
                if cls > slowest:
                    slowest = cls
                    at_slowest = [i]
                elif cls == slowest:
                    at_slowest.append(i)
            priced[kind] = (gl, coll, m)
            seen[kind] = (worst_t, worst_i, slowest, at_slowest)
        kinds[kind] = GroupCost(kind, len(gl), size, coll, m, slowest, worst_t, worst_i)
        if kind in _HEAVY and slowest > LinkClass.NVLINK and not step_only:
            if lb is None:
                lb = _LowerBound(inv, p)
            # compare with the best for the block the group sits in (a DP
            # group of 2 with TP=8 inside spans 16 ranks: two nodes)
            span = span_of(gl, None, req.layout.world)
            best_cls, _ = lb.best(span, coll, m)
            # dp-cp is dp when cp == 1 (and tp-cp is tp ...): say it once
            if slowest > best_cls and not any(gl == w for w in warned):
                warned.append(gl)
                more = f" (and {len(at_slowest) - 1} more)" if len(at_slowest) > 1 else ""
                what = f"a group of {size}" if span == size else f"its block of {span} ranks"
                warnings.append(f"{kind.upper()} group {at_slowest[0]}{more} {_PHRASE[slowest]}; "
                                f"{what} could use {best_cls.label}")
    if not step_only and len(placement.hosts) > 1 and any(hc.no_nics for hc in pricer.hcs):
        warnings.append(f"some nodes list no compute NIC: their network share assumes "
                        f"{p.default_nic_gbit:g} Gbit/s a node (cost.default_nic_gbit)")
    step = sum(kinds[k].time_s for k in counted)
    return CostReport(kinds=kinds, step_time_s=step, warnings=warnings, counted=counted)


# --------------------------------------------------------------------------
# lower bound


class _InvStats:
    """What the lower bound needs to know about an inventory's shape (not
    about the cost parameters): the GPU sets a group could use (per
    hardware type all its GPUs; with a cluster state the free GPUs of each
    usable node), NVLink domain sizes, the GPUs under the largest switch of
    each level. Cached on the inventory when no state is given."""

    def __init__(self, inv: Inventory, state=None):
        sets: Dict[Tuple[int, Tuple[int, ...]], Tuple[Hardware, Tuple[int, ...]]] = {}
        dom_gpus: Dict[str, int] = {}
        dom_sets: Dict[Tuple[int, Tuple[int, ...]], Tuple[Hardware, Tuple[int, ...]]] = {}
        free_of: Dict[str, int] = {}
        #: GPUs (free ones, given a state) per node -> number of such nodes
        self.node_sizes: Dict[int, int] = {}
        for n in inv:
            hw = n.hardware
            gpus = tuple(range(hw.gpu_count)) if state is None else tuple(state.free_gpus(n))
            if not gpus:
                continue
            free_of[n.name] = len(gpus)
            sets.setdefault((hw, gpus), (hw, gpus))
            self.node_sizes[len(gpus)] = self.node_sizes.get(len(gpus), 0) + 1
            if n.nvlink_domain is not None:
                k = n.nvlink_domain.key
                dom_gpus[k] = dom_gpus.get(k, 0) + len(gpus)
                dom_sets.setdefault((hw, gpus), (hw, gpus))
        self.sets = list(sets.values())
        self.dom_sets = list(dom_sets.values())
        self.node_max = max((len(g) for _, g in self.sets), default=0)
        self.dom_max = max(dom_gpus.values()) if dom_gpus else 0
        self.dom_sizes = sorted(dom_gpus.values())
        view = network_view(inv.fabric)
        total = sum(free_of.values())
        self.scope_cap: Dict[LinkClass, int] = {}
        if view.flat:
            for c in NETWORK_CLASSES:
                self.scope_cap[c] = total
            return
        per_sw: Dict[str, int] = {}
        for name, g in free_of.items():
            for sw in view.ancestors.get(name, ()):
                per_sw[sw] = per_sw.get(sw, 0) + g
        per_leaf: Dict[str, int] = {}
        for host, leaf in view.leaf.items():
            g = free_of.get(host)
            if g:
                per_leaf[leaf] = per_leaf.get(leaf, 0) + g
        self.scope_cap[LinkClass.NET_LEAF] = max(per_leaf.values()) if per_leaf else 1
        top = 0
        for lvl in range(1, 4):
            caps = [v for sw, v in per_sw.items() if view.levels.get(sw) == lvl]
            if caps:
                self.scope_cap[LinkClass.network(lvl)] = max(caps)
                top = lvl
        if any(l > 3 for l in view.levels.values()):
            caps = [v for sw, v in per_sw.items() if view.levels.get(sw, 0) >= 3]
            self.scope_cap[LinkClass.NET_L3] = max(caps)
            top = 3
        # levels above the top described one hold no more than it does
        for lvl in range(top + 1, 4):
            self.scope_cap[LinkClass.network(lvl)] = self.scope_cap[LinkClass.network(top)]
        self.scope_cap[LinkClass.NET_FAR] = total


def _inv_stats(inv: Inventory, state=None) -> _InvStats:
    """The idle cluster's statistics are kept in the inventory's derived
    tables; those of a state are built for it."""
    if state is not None:
        return _InvStats(inv, state)
    return inv.derive("cost.inventory_stats", lambda: _InvStats(inv))


class _LowerBound:
    """The fastest each group size could possibly be on this inventory
    (on its free GPUs, given a state)."""

    def __init__(self, inv: Inventory, p: CostParams, state=None):
        self.p = p
        st = _inv_stats(inv, state)
        self.sets = st.sets
        self.node_max = st.node_max
        self.best_net = max((max(p.hw(h).net[g] for g in gpus) for h, gpus in self.sets),
                            default=1.0)
        self.dom_max = st.dom_max
        self.dom_bw = max((p.hw(h).class_bw(LinkClass.NVLINK_DOMAIN) for h, _ in st.dom_sets),
                          default=0.0)
        self.scope_cap = st.scope_cap
        self.node_sizes = st.node_sizes
        self.dom_sizes = st.dom_sizes
        self._best_in: Dict[Tuple[int, Tuple[int, ...], int], Tuple[LinkClass, float]] = {}
        self._cache: Dict[Tuple[int, str, int, int], Tuple[LinkClass, float]] = {}

    def fit(self, n: int, count: int) -> Tuple[bool, bool]:
        """Can ``count`` disjoint groups of ``n`` all stay inside one node
        each / inside one NVLink domain each? When not, the slowest of them
        cannot have that scope."""
        nodes = sum(k * (size // n) for size, k in self.node_sizes.items())
        doms = sum(d // n for d in self.dom_sizes)
        return nodes >= count, doms >= count

    def best_intra(self, hw: Hardware, gpus: Tuple[int, ...], l: int) -> Tuple[LinkClass, float]:
        """Fastest (class, GB/s) of a ring over some ``l`` of ``gpus`` of ``hw``."""
        key = (hw, gpus, l)
        hit = self._best_in.get(key)
        if hit is None:
            if l <= 1:
                hit = (LinkClass.SELF, math.inf)
            else:
                from slurmtopo.placement.intranode import _candidates, hw_info
                hc = self.p.hw(hw)
                best = None
                for cand in _candidates(hw_info(hw), gpus, l):
                    c, b = hc.intra(tuple(sorted(cand)))
                    k = (c, -b)
                    if best is None or k < best[0]:
                        best = (k, (c, b))
                hit = best[1]
            self._best_in[key] = hit
        return hit

    def best_pair(self) -> Tuple[LinkClass, float]:
        best = None
        for hw, gpus in self.sets:
            hc = self.p.hw(hw)
            for i, a in enumerate(gpus):
                for b in gpus[i + 1:]:
                    c, bw = hc.pair(a, b)
                    if best is None or (c, -bw) < (best[0], -best[1]):
                        best = (c, bw)
        return best

    def best(self, n: int, collective: str, m: int, count: int = 1,
             l_cap: int = 0) -> Tuple[LinkClass, float]:
        """(class, seconds) of the fastest option for the slowest of
        ``count`` disjoint groups of ``n`` (over the network at most
        ``l_cap`` ranks a host, when given)."""
        key = (n, collective, m, count, l_cap)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        p = self.p
        if n <= 1:
            return LinkClass.SELF, 0.0
        opts: List[Tuple[float, LinkClass]] = []
        in_node, in_dom = self.fit(n, count) if count > 1 else (True, True)
        # inside one node
        if n <= self.node_max and in_node:
            if collective == "p2p":
                c, bw = self.best_pair()
                opts.append((p.alpha[c] + m / (bw * 1e9), c))
            else:
                for hw, gpus in self.sets:
                    if len(gpus) >= n:
                        c, bw = self.best_intra(hw, gpus, n)
                        opts.append((flat_time(collective, n, m, p.alpha[c], bw), c))
        # inside one NVLink domain
        if self.dom_max >= n and n > 1 and in_dom:
            c = LinkClass.NVLINK_DOMAIN
            bw = p.bandwidth.get(c, self.dom_bw)
            opts.append((flat_time(collective, n, m, p.alpha[c], bw), c))
        # over the network, packing l ranks a host
        first = None
        for c in NETWORK_CLASSES:
            if self.scope_cap.get(c, 0) >= n:
                first = c
                break
        if first is None:
            first = LinkClass.NET_FAR
        for c in NETWORK_CLASSES:
            if c < first:
                continue
            b_net = p.bandwidth.get(c, self.best_net / p.oversubscription.get(c, 1.0))
            if collective == "p2p":
                opts.append((p.alpha[c] + m / (b_net * 1e9), c))
                continue
            for hw, gpus in self.sets:
                for l in range(1, min(len(gpus), n, l_cap or n) + 1):
                    h = -(-n // l)
                    if h < 2:
                        continue
                    ci, bi = self.best_intra(hw, gpus, l)
                    t = hier_time(collective, n, h, l, l, m, p.alpha[ci],
                                  bi if bi != math.inf else 1.0, p.alpha[c], b_net)
                    opts.append((t, max(c, ci)))
        if not opts:  # no free GPU anywhere (a state with nothing free)
            opts.append((math.inf, LinkClass.NET_FAR))
        t, c = min(opts, key=lambda x: (x[0], x[1]))
        hit = (c, t)
        self._cache[key] = hit
        return hit


#: dimensions each counted group kind spans, per rank generator (dense
#: kinds and expert kinds number ranks differently, see slurmtopo.groups)
_DENSE_DIMS = {"tp": ("tp",), "cp": ("cp",), "pp": ("pp",), "dp": ("dp",), "dp-cp": ("dp", "cp")}
_EXPERT_DIMS = {"ep": ("ep",), "expert-tp": ("etp",), "expert-dp": ("edp",)}


def _joint(base: "_LowerBound", p: CostParams, req: JobRequest, groups, counted) -> float:
    """The cheapest assignment of the counted kinds to three scopes (inside
    one node; across nodes inside one NVLink domain; over the network),
    each priced at the cost model's optimum for that scope, in which the
    kinds kept inside one node span at most a node's GPUs and those kept
    inside a node or a domain at most a domain's, per rank generator: if
    TP of 8 and DP of 2 each stay inside one node, so does their product
    of 16 ranks, which no 8-GPU node holds."""
    import copy
    import itertools

    lay = req.layout
    off_node = copy.copy(base)
    off_node.node_max = 1
    off_node._cache = {}
    net_only = copy.copy(off_node)
    net_only.dom_max = 0
    net_only._cache = {}
    sizes = {"tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "dp": lay.dp, "ep": lay.ep,
             "etp": lay.expert_tp,
             "edp": lay.expert_dp if lay.ep > 1 or lay.expert_tp != lay.tp else 1}
    kinds = [k for k in counted if len(groups[k][0]) > 1]
    scopes = (base, off_node, net_only)
    node_cap = max(base.node_max, 1)
    dom_cap = max(base.node_max, base.dom_max, 1)
    cache: Dict[Tuple[str, int, int], float] = {}

    def cost(k: str, level: int, assign) -> float:
        # kinds kept inside one node leave a kind over the network at most
        # node / (their ranks) of its own ranks a host: with TP 8 in every
        # node a DP group has one rank a host
        l_cap = 0
        if level:
            dims_of = _DENSE_DIMS if k in _DENSE_DIMS else _EXPERT_DIMS
            inner = set()
            for j, lv in assign.items():
                if lv == 0 and j in dims_of:
                    inner.update(dims_of[j])
            inner -= set(dims_of[k])
            l_cap = max(1, node_cap // math.prod(sizes[d] for d in inner)) if inner else 0
        key = (k, level, l_cap)
        hit = cache.get(key)
        if hit is None:
            n = len(groups[k][0])
            hit = cache[key] = scopes[level].best(n, COLLECTIVES.get(k, "all-reduce"),
                                                  p.message(k, req), len(groups[k]), l_cap)[1]
        return hit

    def fits(assign) -> bool:
        for dims_of in (_DENSE_DIMS, _EXPERT_DIMS):
            for level, cap in ((0, node_cap), (1, dom_cap)):
                dims = set()
                for k, lv in assign.items():
                    if k in dims_of and lv <= level:
                        dims.update(dims_of[k])
                if math.prod(sizes[d] for d in dims) > cap:
                    return False
        return True

    best = math.inf
    for levels in itertools.product((0, 1, 2), repeat=len(kinds)):
        assign = dict(zip(kinds, levels))
        if not fits(assign):
            continue
        total = sum(cost(k, lv, assign) for k, lv in assign.items())
        if total < best:
            best = total
    return 0.0 if not kinds else best


def lower_bound(inv: Inventory, req: JobRequest, params: Optional[CostParams] = None,
                state=None) -> CostReport:
    """What no placement of ``req`` can beat under the same parameters.

    Per kind (``kinds``): every group on the fastest link class its size
    could possibly use: inside one node's best GPUs if it fits a node,
    inside an NVLink domain if it fits one, else over the smallest switch
    scope that holds that many GPUs, packing as many ranks per host as the
    fastest option wants, with the best NIC share; a scope counts only when
    every group of the kind can have one (18 TP groups of 8 and 17 free
    nodes: the slowest TP group crosses a node). ``alone_s`` sums these.
    ``step_time_s`` is tighter: the kinds *jointly* (:func:`_joint`: two
    kinds cannot both stay inside a node when their product of ranks
    exceeds it). Given the cluster ``state``, only the free GPUs of usable
    nodes count (the largest free set of a node, the free GPUs of a domain
    or under a switch), so the bound describes this job on this cluster
    now rather than on an idle one.
    """
    p = params if params is not None else cost_params(inv)
    lay = req.layout
    groups = build_groups(lay)
    lb = _LowerBound(inv, p, state)
    kinds: Dict[str, GroupCost] = {}
    for kind, gl in groups.items():
        size = len(gl[0])
        coll = COLLECTIVES.get(kind, "all-reduce")
        m = p.message(kind, req)
        c, t = lb.best(size, coll, m, len(gl))
        kinds[kind] = GroupCost(kind, len(gl), size, coll, m, c, t, 0)
    counted = counted_kinds(groups, lay.cp)
    alone = sum(kinds[k].time_s for k in counted)
    step = max(alone, _joint(lb, p, req, groups, counted))
    return CostReport(kinds=kinds, step_time_s=step, warnings=[], counted=counted,
                      alone_s=alone)
