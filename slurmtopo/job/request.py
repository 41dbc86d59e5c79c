"""What a job asks the planner for: its layout and its placement constraints.

A :class:`JobRequest` is the planner's whole input besides the inventory and
the cluster state. It holds the resolved parallel :class:`~slurmtopo.job.groups.Layout`
and what the user said about locality:

``require`` / ``prefer``
    group kind -> *level*: every group of that kind must (``require``) or
    should (``prefer``) stay inside one unit of the level. Levels, from the
    tightest to the loosest (:data:`LEVELS`)::

        nvlink         every hop of the group is NVLink inside one node
        pcie-switch    no hop slower than PXB (GPUs behind PCIe switches, no CPU)
        numa           no hop slower than NODE (one NUMA node / socket)
        node           one node (SYS allowed)
        nvlink-domain  one node or one multi-node NVLink domain (GB200 NVL72)
        leaf           hosts on one leaf switch (or one NVLink domain)
        spine          hosts under one level-1 switch
        any            no constraint

    A level is a bound on the *slowest link* the group crosses
    (:func:`level_of_class` maps a :class:`~slurmtopo.inventory.links.LinkClass` to the
    tightest level it satisfies), so an NVLink hop satisfies ``pcie-switch``
    although it does not go through a PCIe switch: it is faster.

``gpus_per_node``, ``exclusive``, ``nodelist``, ``exclude``
    the Slurm-level knobs (``--gpus-per-node``, ``--exclusive``,
    ``--nodelist``, ``--exclude``). With ``gpus_per_node=g`` every node used
    must have ``g`` free GPUs (Slurm allocates ``g`` on each) and runs at
    most ``g`` ranks; all run exactly ``g`` when the world is a multiple of
    ``g``, otherwise one node runs the remainder.

``message_bytes``
    per group kind, the size of one collective for the cost model.

``wait``
    per group kind, how long the placement daemon may wait for a ``prefer``
    to become possible before giving up on it (kept here, used there).

``workload``
    what the job runs (framework, data-parallel style, model, overlaps:
    :class:`~slurmtopo.job.workload.Workload`), which sizes and counts the
    collectives of one step for every price made of the job (None: the
    default, :data:`~slurmtopo.job.workload.DEFAULT_WORKLOAD`).

Everything is validated on construction and raises
:class:`~slurmtopo.errors.LayoutError` with a one-line reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from slurmtopo.errors import LayoutError
from slurmtopo.inventory.hostlist import expand_hostlist
from slurmtopo.inventory.links import LinkClass
from slurmtopo.job.groups import GROUP_KINDS, Layout
from slurmtopo.job.workload import Workload

#: Locality levels, from the tightest (fastest) scope to the loosest.
LEVELS: Tuple[str, ...] = ("nvlink", "pcie-switch", "numa", "node", "nvlink-domain", "leaf",
                           "spine", "any")

LEVEL_INDEX: Dict[str, int] = {name: i for i, name in enumerate(LEVELS)}

#: Levels that are decided inside one node (a bound on the node's link class).
NODE_LEVELS: Tuple[str, ...] = ("nvlink", "pcie-switch", "numa", "node")

#: For the in-node levels: the slowest LinkClass a group may cross.
NODE_LEVEL_BOUND: Dict[str, LinkClass] = {
    "nvlink": LinkClass.NVLINK,
    "pcie-switch": LinkClass.PXB,
    "numa": LinkClass.NODE,
    "node": LinkClass.SYS,
}

#: The preferences every job has without asking, per group kind, most
#: important first: TP (and expert-TP) on NVLink, CP, EP and the DP block in
#: one node. The planner applies them (the DP block is ``dp-cp`` when CP > 1,
#: see :func:`implicit_preferences`); the placement daemon waits for them when
#: a job sets a ``wait`` on a kind it did not ``prefer``. One table, so the
#: two never disagree.
IMPLICIT_PREFER: Dict[str, str] = {"tp": "nvlink", "expert-tp": "nvlink", "cp": "node",
                                   "ep": "node", "dp": "node", "dp-cp": "node"}


def implicit_preferences(layout: Layout) -> List[Tuple[str, str]]:
    """(kind, level) pairs of :data:`IMPLICIT_PREFER` that apply to
    ``layout``, most important first: the DP block is ``dp-cp`` when the
    layout has context parallelism, else ``dp``."""
    dp_block = "dp-cp" if layout.cp > 1 else "dp"
    return [(k, v) for k, v in IMPLICIT_PREFER.items() if k not in ("dp", "dp-cp") or k == dp_block]


#: How each level reads in messages ("inside one ...").
LEVEL_TEXT: Dict[str, str] = {
    "nvlink": "NVLink",
    "pcie-switch": "one PCIe switch",
    "numa": "one NUMA node",
    "node": "one node",
    "nvlink-domain": "one NVLink domain",
    "leaf": "one leaf switch",
    "spine": "one spine (level-1 switch)",
    "any": "anywhere",
}

#: Spellings accepted on the command line for levels.
LEVEL_ALIASES: Dict[str, str] = {
    "nvl": "nvlink",
    "pcie": "pcie-switch",
    "pcie_switch": "pcie-switch",
    "pix": "pcie-switch",
    "pxb": "pcie-switch",
    "socket": "numa",
    "host": "node",
    "domain": "nvlink-domain",
    "nvlink_domain": "nvlink-domain",
    "nvl72": "nvlink-domain",
    "switch": "leaf",
    "tor": "leaf",
    "l1": "spine",
    "none": "any",
}


def level_of_class(cls: LinkClass) -> str:
    """The tightest level a group whose slowest link is ``cls`` satisfies."""
    if cls <= LinkClass.NVLINK:
        return "nvlink"
    if cls is LinkClass.NVLINK_DOMAIN:
        return "nvlink-domain"
    if cls <= LinkClass.PXB:
        return "pcie-switch"
    if cls <= LinkClass.NODE:
        return "numa"
    if cls is LinkClass.SYS:
        return "node"
    if cls is LinkClass.NET_LEAF:
        return "leaf"
    if cls is LinkClass.NET_L1:
        return "spine"
    return "any"


def satisfies(cls: LinkClass, level: str) -> bool:
    """Does a group whose slowest link is ``cls`` stay inside ``level``?"""
    return LEVEL_INDEX[level_of_class(cls)] <= LEVEL_INDEX[level]


def normalise_kind(text: str) -> str:
    """``expert_tp`` -> ``expert-tp``; raises LayoutError for unknown kinds."""
    kind = str(text).strip().lower().replace("_", "-")
    if kind not in GROUP_KINDS:
        raise LayoutError(f"unknown group kind {text!r} (known: {', '.join(GROUP_KINDS)})")
    return kind


def normalise_level(text: str) -> str:
    """``PCIe`` -> ``pcie-switch``; raises LayoutError for unknown levels."""
    level = str(text).strip().lower()
    level = LEVEL_ALIASES.get(level, level).replace("_", "-")
    if level not in LEVEL_INDEX:
        raise LayoutError(f"unknown level {text!r} (known: {', '.join(LEVELS)})")
    return level


class FrozenMap(dict):
    """A read-only, hashable dict, so a JobRequest can be a cache key (and
    still serialises as a plain mapping)."""

    __slots__ = ("_h",)

    def __init__(self, data: Optional[Mapping] = None):
        super().__init__(data or {})
        self._h = None

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(frozenset(self.items()))
        return self._h

    def _readonly(self, *args, **kwargs):
        raise TypeError("JobRequest mappings are read-only; build a new request instead")

    __setitem__ = __delitem__ = _readonly
    clear = pop = popitem = setdefault = update = _readonly  # type: ignore[assignment]

    def __reduce__(self):
        return (FrozenMap, (dict(self),))

    def __repr__(self) -> str:
        return dict.__repr__(self)


def parse_pairs(items: Iterable[str], what: str, kind_of=None) -> Dict[str, str]:
    """``KIND=LEVEL`` texts (comma-separated too) -> {kind: level}.

    ``kind_of`` turns a written kind into the key (default
    :func:`normalise_kind`, the planner's kinds); a framework's own kind
    names pass with their spelling kept and are mapped later
    (:func:`slurmtopo.job.spec.translate_kinds`)."""
    kind_of = normalise_kind if kind_of is None else kind_of
    out: Dict[str, str] = {}
    for item in items or ():
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise LayoutError(f"--{what} {part!r}: expected KIND=LEVEL, e.g. tp=nvlink "
                                  f"(levels: {', '.join(LEVELS)})")
            k, _, v = part.partition("=")
            kind = kind_of(k)
            level = normalise_level(v)
            if kind in out and out[kind] != level:
                raise LayoutError(f"--{what} names {kind!r} twice ({out[kind]} and {level})")
            out[kind] = level
    return out


def _check_levels(mapping: Mapping, what: str) -> Dict[str, str]:
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise LayoutError(f"{what} must map group kinds to levels, got {mapping!r}")
    return {normalise_kind(k): normalise_level(v) for k, v in mapping.items()}


def _hosts(value, what: str) -> Tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            return tuple(expand_hostlist(value, what))
        except ValueError as exc:
            raise LayoutError(str(exc)) from None
    out: List[str] = []
    for v in value:
        out.extend(_hosts(str(v), what) if any(c in str(v) for c in "[,") else (str(v),))
    return tuple(out)


@dataclass(frozen=True)
class JobRequest:
    """One job's layout and placement constraints (validated, hashable)."""

    layout: Layout
    require: Mapping[str, str] = field(default_factory=dict)
    prefer: Mapping[str, str] = field(default_factory=dict)
    gpus_per_node: Optional[int] = None
    exclusive: bool = False
    nodelist: Optional[Tuple[str, ...]] = None
    exclude: Tuple[str, ...] = ()
    message_bytes: Mapping[str, int] = field(default_factory=dict)
    wait: Mapping[str, float] = field(default_factory=dict)
    workload: Optional[Workload] = None

    def __post_init__(self):
        if not isinstance(self.layout, Layout):
            raise LayoutError(f"layout must be a Layout, got {type(self.layout).__name__}")
        set_ = object.__setattr__
        set_(self, "layout", self.layout.resolved())
        require = _check_levels(self.require, "require")
        prefer = _check_levels(self.prefer, "prefer")
        set_(self, "require", FrozenMap(require))
        set_(self, "prefer", FrozenMap(prefer))
        g = self.gpus_per_node
        if g is not None:
            if isinstance(g, bool) or not isinstance(g, int) or g < 1:
                raise LayoutError(f"gpus_per_node must be a whole number >= 1, got {g!r}")
        set_(self, "exclusive", bool(self.exclusive))
        set_(self, "nodelist", None if self.nodelist is None else _hosts(self.nodelist, "nodelist"))
        set_(self, "exclude", _hosts(self.exclude, "exclude"))
        mb: Dict[str, int] = {}
        for k, v in dict(self.message_bytes or {}).items():
            kind = normalise_kind(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
                raise LayoutError(f"message_bytes[{kind!r}] must be a whole number of bytes >= 0, "
                                  f"got {v!r}")
            mb[kind] = int(v)
        set_(self, "message_bytes", FrozenMap(mb))
        wait: Dict[str, float] = {}
        for k, v in dict(self.wait or {}).items():
            kind = normalise_kind(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise LayoutError(f"wait[{kind!r}] must be a number of seconds >= 0, got {v!r}")
            wait[kind] = float(v)
        set_(self, "wait", FrozenMap(wait))
        if self.workload is not None and not isinstance(self.workload, Workload):
            raise LayoutError(f"workload must be a Workload, got {type(self.workload).__name__}")

    @property
    def world(self) -> int:
        return self.layout.world

    def constraint(self, kind: str) -> Tuple[Optional[str], bool]:
        """(level, hard) for ``kind``: the require level if any, else the
        prefer level (soft), else (None, False)."""
        if kind in self.require:
            return self.require[kind], True
        if kind in self.prefer:
            return self.prefer[kind], False
        return None, False
