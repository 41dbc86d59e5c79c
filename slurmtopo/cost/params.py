"""The cost model's parameters (:class:`CostParams`): the defaults with
an inventory's ``cost:`` block applied and validated, kept with the
loaded cluster (:func:`cost_params`)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Dict, Mapping, Optional, Tuple

from slurmtopo.cost.defaults import (ALGORITHM_SINCE, ALGORITHMS, COST_KEYS, DEFAULT_ALPHA_US,
                                     DEFAULT_A2A_PEERS, DEFAULT_COLLNET_US, DEFAULT_EFFICIENCY,
                                     DEFAULT_INTER_SOCKET_GBPS, DEFAULT_LAUNCH_US,
                                     DEFAULT_MESSAGE_BYTES, DEFAULT_NET_HOP_US,
                                     DEFAULT_NETWORK_LATENCY, EFA_ORDERED_FROM,
                                     DEFAULT_NVLINK_LANE_GBPS, DEFAULT_NVLS_EFFICIENCY,
                                     DEFAULT_DOMAIN_NICS, DEFAULT_NVLS_MIN_RANKS,
                                     DEFAULT_NVLS_TREE_STAGE, DEFAULT_NVLS_US, DEFAULT_PCIE_FACTOR,
                                     DEFAULT_PCIE_GBPS, DEFAULT_PROTOCOLS, DEFAULT_RING_PLATEAU,
                                     NETWORK_CLASSES, NETWORK_KIND_PROTOCOLS, NETWORK_KINDS,
                                     NEWEST_NCCL, PROTOCOL_NAMES, GiB, KiB, MiB, Protocol)
from slurmtopo.cost.compute import GpuFigures, parse_gpu_compute
from slurmtopo.cost.hardware import HardwareFigures
from slurmtopo.errors import InventoryError, LayoutError
from slurmtopo.files.yamlio import Reader
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import Hardware, Inventory
from slurmtopo.job.request import JobRequest, normalise_kind
from slurmtopo.job.workload import parse_nccl_version

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


def _positive(value, what: str, allow_zero: bool = False, most: Optional[float] = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    v = float(value)
    if v != v or v < 0 or (v == 0 and not allow_zero) or math.isinf(v):
        raise ValueError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    if most is not None and v > most:
        raise ValueError(f"{what} must be at most {most:g}, got {value!r}")
    return v


def _protocol_name(text) -> str:
    for name in PROTOCOL_NAMES:
        if str(text).strip().lower() == name.lower():
            return name
    raise ValueError(f"unknown protocol {text!r} (known: {', '.join(PROTOCOL_NAMES)})")


@dataclass
class CostParams:
    """Link parameters of the alpha-beta model.

    ``alpha``: seconds per ring step with NCCL's Simple protocol, per
    LinkClass. ``bandwidth``: explicit GB/s per direction per GPU for a
    LinkClass; a class not listed is derived from the hardware (NVLink
    lanes x ``nvlink_lane_gbps``, PCIe bandwidth x ``pcie_factor``, the
    GPU's NIC share / ``oversubscription``). ``efficiency``: the share of
    a class's bandwidth a Simple ring reaches. ``protocols``,
    ``network_protocols``, ``algorithms``, ``nvls_*``, ``ring_plateau``,
    ``launch``: how NCCL's protocol and algorithm choice is modelled
    (docs/cost-model.md).
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
    #: the kinds whose size the inventory sets (``cost: message_bytes``):
    #: every call of the step on them takes it (slurmtopo.cost.step)
    message_overrides: Dict[str, int] = field(default_factory=dict)
    #: share of each class's bandwidth a Simple ring reaches (0 < x <= 1)
    efficiency: Dict[LinkClass, float] = field(default_factory=lambda: dict(DEFAULT_EFFICIENCY))
    protocols: Dict[str, Protocol] = field(default_factory=lambda: dict(DEFAULT_PROTOCOLS))
    #: protocols a ring or tree may use once it crosses the network; None:
    #: those of the network's kind (AWS EFA: Simple only)
    network_protocols: Optional[Tuple[str, ...]] = None
    algorithms: Tuple[str, ...] = ALGORITHMS
    #: the NCCL release priced (its algorithms: ALGORITHM_SINCE)
    nccl_version: Tuple[int, int, int] = NEWEST_NCCL
    #: what the compute NICs are, for every node (None: each node type's
    #: own, cost.hardware.network_kind)
    network: Optional[str] = None
    #: a network step's latency by network kind, times ``alpha``
    network_latency: Dict[str, float] = field(
        default_factory=lambda: dict(DEFAULT_NETWORK_LATENCY))
    #: seconds a network step adds by network kind (the transport's own
    #: latency: AWS EFA's)
    net_hop: Dict[str, float] = field(
        default_factory=lambda: {k: us * 1e-6 for k, us in DEFAULT_NET_HOP_US.items()})
    #: the share of an NVLS pass each stage of an NVLSTree's pipeline waits
    nvls_tree_stage: float = DEFAULT_NVLS_TREE_STAGE
    #: NICs of an NVLink domain an NVLSTree drives across domains
    domain_nics: int = DEFAULT_DOMAIN_NICS
    #: seconds of one pass through the switches of an in-network reduction
    collnet: float = DEFAULT_COLLNET_US * 1e-6
    #: remote peers an all-to-all keeps in flight at once
    a2a_peers: int = DEFAULT_A2A_PEERS
    nvls_efficiency: Tuple[Tuple[str, float], ...] = DEFAULT_NVLS_EFFICIENCY
    default_nvls_efficiency: float = 0.0
    #: microseconds of NVLS's fixed latency by GPU model (a model not in
    #: the table: the slowest listed)
    nvls_us: Tuple[Tuple[str, float], ...] = DEFAULT_NVLS_US
    default_nvls_us: float = max(us for _, us in DEFAULT_NVLS_US)
    nvls_min_ranks: int = DEFAULT_NVLS_MIN_RANKS
    ring_plateau: float = DEFAULT_RING_PLATEAU
    #: seconds: every collective's launch
    launch: float = DEFAULT_LAUNCH_US * 1e-6
    #: GPU model substring -> compute figures (``gpu_compute``; the step
    #: model's, slurmtopo.cost.compute)
    gpu_compute: Tuple[Tuple[str, "GpuFigures"], ...] = ()
    _hw: Dict[Hardware, "HardwareFigures"] = field(default_factory=dict, repr=False, compare=False)
    _versions: Dict[Tuple[int, int, int], "CostParams"] = field(default_factory=dict, repr=False,
                                                               compare=False)

    # ---- construction ----------------------------------------------------

    @classmethod
    def from_inventory(cls, inv: Inventory) -> "CostParams":
        """Defaults with the inventory's ``cost:`` overrides applied.

        Keys (all optional; see docs/cost-model.md)::

            cost:
              alpha_us: {NVLINK: 3.4, NET_LEAF: 14}      # per class, us a Simple ring step
              bandwidth_gbps: {SYS: 10, NET_L1: 40}      # per class, GB/s per GPU and direction
              nvlink_lane_gbps: {H100: 25, A6000: 14}    # GPU model substring -> GB/s per lane
              pcie_gbps: 25                              # or {model substring: GB/s}
              pcie_factor: {PHB: 0.8, SYS: 0.5}          # share of PCIe bandwidth per class
              inter_socket_gbps: 22                      # GB/s between sockets (caps SYS)
              oversubscription: {NET_L1: 2, NET_L2: 4}   # divides the NIC share per level
              default_nic_gbit: 400                      # when a node lists no compute NIC
              message_bytes: {tp: 64MiB, dp: 268435456}  # per group kind
              efficiency: {NVLINK: 0.8, NET_LEAF: 0.9}   # share of the bandwidth a ring reaches
              protocols: {LL128: {bandwidth: 0.9, latency: 0.5, base_us: 14, node_gbps: 330}}
              network_protocols: [Simple]                # AWS EFA
              algorithms: [ring, nvls]                   # no tree
              nvls_efficiency: {H100: 0.6}               # or one number; 0: no NVLS
              nvls_us: {B200: 55}                        # NVLS latency, or one number
              nvls_min_ranks: 5
              ring_plateau: 1.4                          # Simple ring latency factor across hosts
              launch_us: 5                               # fixed cost of every collective
              gpu_compute: {MI300X: {bf16: 1307, fp8: 2615, hbm_gbps: 5300}}  # dense TFLOP/s

        Raises :class:`InventoryError` naming the key on bad values.
        """
        p = cls()
        cost = inv.cost or {}
        if not cost:
            return p
        block = _CostBlock(cost, inv.source)
        for c, us in block.per_class("alpha_us", True).items():
            p.alpha[c] = us * 1e-6
        p.bandwidth.update(block.per_class("bandwidth_gbps", False))
        p.pcie_factor.update(block.per_class("pcie_factor", False, tuple(DEFAULT_PCIE_FACTOR)))
        p.oversubscription.update(block.per_class("oversubscription", False, NETWORK_CLASSES))
        block.model_tables(p)
        block.numbers(p)
        p.efficiency.update(block.per_class("efficiency", False, most=1.0))
        _parse_model(p, block.cost, block.fail, block.mapping)
        block.message_bytes(p)
        p.gpu_compute = parse_gpu_compute(block.mapping("gpu_compute"), block.fail)
        return p

    # ---- NCCL's algorithms and protocols ---------------------------------

    def has(self, algorithm: str) -> bool:
        """Does the priced NCCL release run ``algorithm`` (and is it
        allowed: ``algorithms``)? ``nvls-tree``, ``mnnvl``: NVLS's
        variants, allowed with ``nvls``."""
        allowed = "nvls" if algorithm in ("nvls-tree", "mnnvl") else algorithm
        since = ALGORITHM_SINCE.get(algorithm)
        return allowed in self.algorithms and (since is None or self.nccl_version >= since)

    def protocols_for(self, kind: str, gen: int, across: bool) -> Tuple[str, ...]:
        """The protocols NCCL runs on nodes whose NICs are of ``kind`` and
        whose GPUs are of generation ``gen`` (:mod:`~slurmtopo.cost.tuner`),
        inside a node or NVLink domain or (``across``) between them: across,
        the inventory's ``network_protocols`` if it sets them; and where EFA
        cannot deliver LL's and LL128's bytes in order (EFA v1, p4d and
        older: no RDMA write) AWS's plugin sets NCCL_PROTO=Simple for the
        whole process, inside the node too, unless the inventory lists the
        protocols. From p5 (Hopper) EFA can."""
        names = tuple(n for n in PROTOCOL_NAMES if n in self.protocols)
        if self.network_protocols is not None:
            return self.network_protocols if across else names
        if kind == "efa" and gen < EFA_ORDERED_FROM:
            return tuple(n for n in NETWORK_KIND_PROTOCOLS["efa"] if n in self.protocols)
        return names

    def for_version(self, version: Optional[Tuple[int, int, int]]) -> "CostParams":
        """These parameters for another NCCL release (a job's own; kept, so
        its prices share the per-placement tables)."""
        if version is None or version == self.nccl_version:
            return self
        hit = self._versions.get(version)
        if hit is None:
            hit = self._versions[version] = replace(self, nccl_version=version, _versions={})
        return hit

    # ---- per-hardware figures ---------------------------------------------

    def hw(self, hw: Hardware) -> "HardwareFigures":
        """This hardware's figures under these parameters, built once per
        hardware value (equal node types share them)."""
        hit = self._hw.get(hw)
        if hit is None:
            hit = self._hw[hw] = HardwareFigures(self, hw)
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

    def nvls(self, hw: Hardware) -> Tuple[float, float]:
        """(share of the GPU's NVLink bandwidth, seconds of latency) of an
        NVLS all-reduce on ``hw``; share 0: the hardware has no NVLink SHARP."""
        if not hw.nvswitch:
            return 0.0, 0.0
        return (self._match(self.nvls_efficiency, hw.model, self.default_nvls_efficiency),
                self._match(self.nvls_us, hw.model, self.default_nvls_us) * 1e-6)

    def network_gbps(self, share: float, cls: LinkClass) -> float:
        """GB/s per direction a GPU whose NIC share is ``share`` gets when
        its ring's hosts meet at the network class ``cls``: the admin's
        figure for the class when given, else the share divided by the
        level's oversubscription. The pricing and the planner's view of
        link speeds (:class:`slurmtopo.plan.choice.CostModelSpeeds`) both use it."""
        fixed = self.bandwidth.get(cls)
        if fixed is not None:
            return fixed
        return share / self.oversubscription.get(cls, 1.0)

    def message(self, kind: str, req: Optional[JobRequest] = None) -> int:
        if req is not None and kind in req.message_bytes:
            return int(req.message_bytes[kind])
        return int(self.message_bytes.get(kind, DEFAULT_MESSAGE_BYTES.get(kind, MiB)))


class _CostBlock:
    """An inventory's ``cost:`` block, read key by key: every bad value is
    one :class:`InventoryError` naming the key (and its line)."""

    def __init__(self, cost: Mapping, source: Optional[str]):
        self.cost = cost
        self.src = source
        for key in cost:
            if key not in COST_KEYS:
                raise self.fail(f"unknown key {key!r} (allowed: {', '.join(COST_KEYS)})")

    def fail(self, msg, obj=None, key=None) -> InventoryError:
        return InventoryError(f"cost: {msg}", self.src,
                              Reader.line(obj, key) if obj is not None else None)

    def mapping(self, key):
        v = self.cost.get(key)
        if v is None:
            return None
        if not isinstance(v, Mapping):
            raise self.fail(f"{key} must be a mapping, got {v!r}", v)
        return v

    def per_class(self, key, allow_zero, only=None, most=None):
        """``key`` as link class -> figure (``only``: the classes it takes)."""
        m = self.mapping(key)
        out = {}
        for k, v in (m or {}).items():
            try:
                c = _class_key(k)
                if only is not None and c not in only:
                    raise ValueError(f"{key} takes only {', '.join(x.name for x in only)}, "
                                     f"not {c.name}")
                out[c] = _positive(v, f"{key}.{k}", allow_zero, most)
            except ValueError as exc:
                raise self.fail(str(exc), m, k) from None
        return out

    def model_tables(self, p: "CostParams") -> None:
        """The figures given per GPU model substring, or as one number."""
        cost, fail = self.cost, self.fail
        # a table by GPU model substring (entries given first), or one
        # number for every model (the table emptied, the default set)
        for key, allow_zero, most in (("nvlink_lane_gbps", False, None),
                                      ("pcie_gbps", False, None),
                                      ("nvls_efficiency", True, 1.0), ("nvls_us", True, None)):
            v = cost.get(key)
            if isinstance(v, Mapping):
                out = []
                for k, x in v.items():
                    try:
                        out.append((str(k).lower(), _positive(x, f"{key}.{k}", allow_zero, most)))
                    except ValueError as exc:
                        raise fail(str(exc), v, k) from None
                setattr(p, key, tuple(out) + tuple(getattr(p, key)))
            elif v is not None:
                try:
                    flat = _positive(v, key, allow_zero, most)
                except ValueError as exc:
                    raise fail(str(exc), cost) from None
                setattr(p, key, ())
                setattr(p, f"default_{key}", flat)

    def numbers(self, p: "CostParams") -> None:
        """The plain numbers (default NIC speed, inter-socket bandwidth)."""
        cost, fail = self.cost, self.fail
        for key in ("default_nic_gbit", "inter_socket_gbps"):
            if cost.get(key) is not None:
                try:
                    setattr(p, key, _positive(cost[key], key))
                except ValueError as exc:
                    raise fail(str(exc), cost) from None

    def message_bytes(self, p: "CostParams") -> None:
        """The collective size per group kind."""
        fail = self.fail
        mb = self.mapping("message_bytes")
        for k, v in (mb or {}).items():
            try:
                kind = normalise_kind(k)
                p.message_bytes[kind] = p.message_overrides[kind] = parse_bytes(v)
            except (ValueError, LayoutError) as exc:
                text = exc.message if isinstance(exc, LayoutError) else str(exc)
                raise fail(f"message_bytes: {text}", mb, k) from None


def _parse_model(p: CostParams, cost: Mapping, fail, mapping) -> None:
    """The keys describing NCCL's protocols and algorithms (validated the
    same way as the rest: one line naming the key on a bad value)."""
    def number(key, allow_zero=True, most=None):
        try:
            return _positive(cost[key], key, allow_zero, most)
        except ValueError as exc:
            raise fail(str(exc), cost) from None

    def names(key, parse):
        v = cost.get(key)
        if v is None:
            return None
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)) or not v:
            raise fail(f"{key} must be a non-empty list, got {v!r}", cost)
        out = []
        for x in v:
            try:
                name = parse(x)
            except ValueError as exc:
                raise fail(f"{key}: {exc}", v) from None
            if name not in out:
                out.append(name)
        return tuple(out)

    prot = mapping("protocols")
    for k, v in (prot or {}).items():
        try:
            name = _protocol_name(k)
        except ValueError as exc:
            raise fail(f"protocols: {exc}", prot, k) from None
        fields = dict(vars(p.protocols[name]))
        if not isinstance(v, Mapping):
            raise fail(f"protocols.{name} must be a mapping of {', '.join(fields)}, got {v!r}",
                       prot, k)
        for f, x in v.items():
            if f not in fields:
                raise fail(f"protocols.{name}: unknown field {f!r} (allowed: "
                           f"{', '.join(fields)})", v, f)
            try:
                fields[f] = _positive(x, f"protocols.{name}.{f}",
                                      f in ("latency", "network_latency", "base_us"),
                                      1.0 if f == "bandwidth" else None)
            except ValueError as exc:
                raise fail(str(exc), v, f) from None
        p.protocols[name] = Protocol(**fields)
    got = names("network_protocols", _protocol_name)
    if got is not None:
        p.network_protocols = tuple(n for n in PROTOCOL_NAMES if n in got)
    if cost.get("nccl_version") is not None:
        try:
            p.nccl_version = parse_nccl_version(cost["nccl_version"], "nccl_version:")
        except LayoutError as exc:
            raise fail(exc.message, cost) from None
    if cost.get("network") is not None:
        kind = str(cost["network"]).strip().lower()
        if kind not in NETWORK_KINDS:
            raise fail(f"network {cost['network']!r}: known: {', '.join(NETWORK_KINDS)}", cost)
        p.network = kind
    def per_kind(key, target, allow_zero, scale):
        """``key`` as network kind -> figure, into ``target``."""
        table = mapping(key)
        for k, v in (table or {}).items():
            kind = str(k).strip().lower()
            if kind not in NETWORK_KINDS:
                raise fail(f"{key}: unknown network {k!r} (known: "
                           f"{', '.join(NETWORK_KINDS)})", table, k)
            try:
                target[kind] = _positive(v, f"{key}.{k}", allow_zero) * scale
            except ValueError as exc:
                raise fail(str(exc), table, k) from None

    per_kind("network_latency", p.network_latency, False, 1.0)
    per_kind("net_hop_us", p.net_hop, True, 1e-6)
    if cost.get("nvls_tree_stage") is not None:
        p.nvls_tree_stage = number("nvls_tree_stage")
    if cost.get("collnet_us") is not None:
        p.collnet = number("collnet_us") * 1e-6
    for key in ("domain_nics", "a2a_peers"):
        v = cost.get(key)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise fail(f"{key} must be a whole number >= 1, got {v!r}", cost)
            setattr(p, key, v)

    def algorithm(x) -> str:
        t = str(x).strip().lower()
        if t not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {x!r} (known: {', '.join(ALGORITHMS)})")
        return t

    got = names("algorithms", algorithm)
    if got is not None:
        if "ring" not in got:
            raise fail("algorithms must include ring (every collective can ring)", cost)
        p.algorithms = tuple(a for a in ALGORITHMS if a in got)
    if cost.get("launch_us") is not None:
        p.launch = number("launch_us") * 1e-6
    if cost.get("ring_plateau") is not None:
        x = number("ring_plateau", allow_zero=False)
        if x < 1:
            raise fail(f"ring_plateau must be at least 1, got {x:g}", cost)
        p.ring_plateau = x
    v = cost.get("nvls_min_ranks")
    if v is not None:
        if isinstance(v, bool) or not isinstance(v, int) or v < 2:
            raise fail(f"nvls_min_ranks must be a whole number >= 2, got {v!r}", cost)
        p.nvls_min_ranks = v


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
