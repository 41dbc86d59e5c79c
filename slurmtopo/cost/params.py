"""The cost model's parameters (:class:`CostParams`): the defaults with
an inventory's ``cost:`` block applied and validated, kept with the
loaded cluster (:func:`cost_params`)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

from slurmtopo.cost.defaults import (COST_KEYS, DEFAULT_ALPHA_US, DEFAULT_INTER_SOCKET_GBPS,
                                     DEFAULT_MESSAGE_BYTES, DEFAULT_NVLINK_LANE_GBPS,
                                     DEFAULT_PCIE_FACTOR, DEFAULT_PCIE_GBPS, NETWORK_CLASSES,
                                     GiB, KiB, MiB)
from slurmtopo.cost.hardware import HardwareFigures
from slurmtopo.errors import InventoryError
from slurmtopo.links import LinkClass
from slurmtopo.model import Hardware, Inventory
from slurmtopo.request import JobRequest

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
    _hw: Dict[Hardware, "HardwareFigures"] = field(default_factory=dict, repr=False, compare=False)

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

    def network_gbps(self, share: float, cls: LinkClass) -> float:
        """GB/s per direction a GPU whose NIC share is ``share`` gets when
        its ring's hosts meet at the network class ``cls``: the admin's
        figure for the class when given, else the share divided by the
        level's oversubscription. The pricing and the planner's view of
        link speeds (:class:`slurmtopo.choice.CostModelSpeeds`) both use it."""
        fixed = self.bandwidth.get(cls)
        if fixed is not None:
            return fixed
        return share / self.oversubscription.get(cls, 1.0)

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
