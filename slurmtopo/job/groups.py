"""Parallel-group math: which ranks talk to which.

A training job splits its ``world`` ranks along five named dimensions:
tensor (``tp``), context (``cp``), expert (``ep``), pipeline (``pp``) and data
(``dp``) parallelism. Every rank has one coordinate per dimension, and a
*group* for a set of dimensions is the set of ranks that differ only in those
coordinates. This module computes those groups exactly as the two common
frameworks do:

``megatron``
    Megatron-LM's ``RankGenerator``. The order string (default
    ``tp-cp-ep-dp-pp``) lists the dimensions from the FASTEST varying to the
    slowest: rank = tp_rank + tp * (cp_rank + cp * (...)). Dense groups come
    from a generator with ``ep`` forced to 1; expert groups come from a
    second generator with tp := expert_tp, cp := 1 and
    dp := world // (expert_tp * ep * pp), using the same order string.

``torch``
    ``torch.distributed.init_device_mesh``. The order string names the mesh
    dimensions in row-major order, so the LAST name varies fastest. Reading
    an order under ``torch`` therefore equals reading the reversed order
    under ``megatron``: torch ``pp-dp-tp`` == megatron ``tp-dp-pp``.

In both conventions a group lists its ranks in ascending order and the
groups of a kind are listed by ascending first rank; that is the order both
Megatron and (since the layout-based DeviceMesh) torch create them in.

Everything here is plain list arithmetic, O(world) per group kind.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from slurmtopo.errors import LayoutError

__all__ = [
    "NAMES",
    "CONVENTIONS",
    "Convention",
    "ORDER_CONVENTIONS",
    "DEFAULT_CONVENTION",
    "DEFAULT_ORDER",
    "DENSE_DIMS",
    "DENSE_KINDS",
    "EXPERT_KINDS",
    "GROUP_KINDS",
    "DOMAIN_KINDS",
    "Layout",
    "Groups",
    "build_groups",
    "has_expert_groups",
    "mesh_groups",
    "rank_to_group",
    "group_of",
    "parse_order",
    "span_of",
]

#: The parallel dimensions, in Megatron's default (fastest-first) order.
NAMES: Tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True)
class Convention:
    """One way of reading an order string (see the module doc)."""

    #: the ``--convention`` value
    name: str
    #: its natural default order; every convention's gives the same groups
    default_order: str
    #: the first name varies fastest (Megatron's ``RankGenerator``); else
    #: the last does (a row-major ``DeviceMesh``)
    first_fastest: bool


#: The conventions, the default first: Megatron-LM's ``RankGenerator`` and
#: ``torch.distributed.init_device_mesh``.
ORDER_CONVENTIONS: Tuple[Convention, ...] = (
    Convention("megatron", "tp-cp-ep-dp-pp", first_fastest=True),
    Convention("torch", "pp-dp-ep-cp-tp", first_fastest=False),
)
CONVENTIONS: Tuple[str, ...] = tuple(c.name for c in ORDER_CONVENTIONS)
DEFAULT_CONVENTION: str = CONVENTIONS[0]
#: most ranks a layout may have: 2**18, more GPUs than the largest clusters
#: built hold, and a few seconds and a few hundred MiB of group lists
MAX_WORLD = 1 << 18

#: The natural default order of each convention; both give the same groups.
DEFAULT_ORDER: Dict[str, str] = {c.name: c.default_order for c in ORDER_CONVENTIONS}
_FIRST_FASTEST: Dict[str, bool] = {c.name: c.first_fastest for c in ORDER_CONVENTIONS}

#: Group kinds from the dense (non-expert) generator -> dimensions spanned
#: (the planner reads it to move required dimensions inward).
DENSE_DIMS: Dict[str, Tuple[str, ...]] = {
    "tp": ("tp",),
    "cp": ("cp",),
    "pp": ("pp",),
    "dp": ("dp",),
    "dp-cp": ("dp", "cp"),
    "tp-pp": ("tp", "pp"),  # Megatron's "model parallel" group
    "tp-cp": ("tp", "cp"),
    "tp-dp": ("tp", "dp"),
    "tp-dp-cp": ("tp", "dp", "cp"),
}

#: Group kinds from the expert generator -> dimensions spanned (in that
#: generator, "tp" is the expert-tensor size and "dp" the expert-data size).
_EXPERT: Dict[str, Tuple[str, ...]] = {
    "ep": ("ep",),
    "expert-tp": ("tp",),
    "expert-dp": ("dp",),
    "expert-tp-ep": ("tp", "ep"),
    "expert-tp-ep-pp": ("tp", "ep", "pp"),
}

DENSE_KINDS: List[str] = list(DENSE_DIMS)
EXPERT_KINDS: List[str] = list(_EXPERT)
#: the group kinds that must not leave an NVLink domain (a GB200 NVL72
#: rack, or one node elsewhere) where the planner kept them in one: the
#: planner uses a variant that sends more of them over the network only when
#: it models ``plan.choice.ALT_NESTING_MARGIN`` faster, and the pre-launch
#: check (``plan.hazards``) warns of one sent out where a domain had room
DOMAIN_KINDS = ("tp", "expert-tp", "ep")

#: Every key build_groups can return, in the order it returns them.
GROUP_KINDS: List[str] = DENSE_KINDS + EXPERT_KINDS


# --------------------------------------------------------------------------
# order strings


def parse_order(order: str) -> List[str]:
    """Split an order string into names; reject unknown or repeated names.

    Case and blanks around names are ignored (Megatron lower-cases it too).
    Names that are left out are *not* added here; see :meth:`Layout.resolved`.
    """
    if not isinstance(order, str):
        raise LayoutError(f"order must be a string like 'tp-cp-ep-dp-pp', got {order!r}")
    tokens = [t.strip().lower() for t in order.split("-")]
    if any(not t for t in tokens):
        raise LayoutError(
            f"order {order!r} has an empty name; write names joined by '-', e.g. 'tp-cp-ep-dp-pp'"
        )
    seen = set()
    for token in tokens:
        if token not in NAMES:
            raise LayoutError(
                f"order {order!r} names unknown dimension {token!r}; known: {', '.join(NAMES)}"
            )
        if token in seen:
            raise LayoutError(f"order {order!r} names {token!r} more than once")
        seen.add(token)
    return tokens


def _fastest_first(tokens: Sequence[str], convention: str) -> List[str]:
    return list(tokens) if _FIRST_FASTEST.get(convention, False) else list(reversed(tokens))


def _full_fastest_first(tokens: Sequence[str], convention: str) -> List[str]:
    """Fastest-first order of all five names; left-out names go last, in the
    order Megatron appends them (tp, pp, dp, ep, cp)."""
    fast = _fastest_first(tokens, convention)
    return fast + [n for n in ("tp", "pp", "dp", "ep", "cp") if n not in fast]


# --------------------------------------------------------------------------
# the layout


def _check_size(name: str, value, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise LayoutError(f"{name} must be a whole number, got {value!r}")
    if value < 1:
        raise LayoutError(f"{name} must be at least 1, got {value}")


@dataclass(frozen=True)
class Layout:
    """How a job splits its ranks. Build it, then call :meth:`resolved`.

    ``dp`` defaults to world // (tp*cp*pp); ``world`` defaults to
    tp*cp*pp*dp (dp=1 when both are missing); ``expert_tp`` defaults to ``tp``
    as in Megatron. ``order`` is read per ``convention`` (see module doc).
    """

    tp: int = 1
    cp: int = 1
    ep: int = 1
    pp: int = 1
    dp: Optional[int] = None  # dp derived from world when None
    expert_tp: Optional[int] = None  # defaults to tp like Megatron
    order: str = "tp-cp-ep-dp-pp"
    world: Optional[int] = None  # when None: tp*cp*pp*dp
    convention: str = "megatron"  # or "torch"

    # ---- derived values (each validates first; resolving is O(1)) ----

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel size, world // (expert_tp * ep * pp)."""
        lay = self.resolved()
        return lay.world // (lay.expert_tp * lay.ep * lay.pp)

    def sizes(self) -> Dict[str, int]:
        """Sizes by name after resolution (dense dp; ep as given)."""
        lay = self.resolved()
        return {"tp": lay.tp, "cp": lay.cp, "ep": lay.ep, "dp": lay.dp, "pp": lay.pp}

    def fastest_first(self) -> List[str]:
        """All five names, fastest varying first, whatever the convention.

        Names the order leaves out (all of size 1) come last, in Megatron's
        order of appending them: tp, pp, dp, ep, cp.
        """
        lay = self.resolved()
        return _full_fastest_first(parse_order(lay.order), lay.convention)

    # ---- validation ----

    def resolved(self) -> "Layout":
        """Fill dp, world and expert_tp, normalise ``order`` (lower case, no
        blanks), and check everything Megatron checks. Raises
        :class:`LayoutError`. Idempotent.

        The order keeps only the names given; names left out (necessarily of
        size 1) are treated as the slowest ones, see :meth:`fastest_first`.
        """
        if self.convention not in CONVENTIONS:
            raise LayoutError(
                f"convention must be one of {', '.join(CONVENTIONS)}, got {self.convention!r}"
            )
        for name in ("tp", "cp", "ep", "pp"):
            _check_size(name, getattr(self, name))
        _check_size("dp", self.dp, optional=True)
        _check_size("expert_tp", self.expert_tp, optional=True)
        _check_size("world", self.world, optional=True)
        tokens = parse_order(self.order)

        tp, cp, ep, pp = self.tp, self.cp, self.ep, self.pp
        model = tp * cp * pp
        if self.world is None:
            dp = 1 if self.dp is None else self.dp
            world = model * dp
        else:
            world = self.world
            if world % model:
                raise LayoutError(
                    f"world size {world} is not divisible by tp*cp*pp = {model} "
                    f"(tp={tp}, cp={cp}, pp={pp})"
                )
            dp = world // model
            if self.dp is not None and self.dp != dp:
                raise LayoutError(
                    f"dp={self.dp} does not fit: world {world} / (tp*cp*pp = {model}) gives dp={dp}"
                )
        if world > MAX_WORLD:
            raise LayoutError(f"world size {world:,} is larger than {MAX_WORLD:,} ranks, the most "
                              "slurmtopo lays out (a typo?)")

        expert_tp = tp if self.expert_tp is None else self.expert_tp
        expert_block = expert_tp * ep * pp
        if world % expert_block:
            extra = ""
            if expert_tp == tp:
                extra = f"; equivalently ep={ep} does not divide dp*cp = {dp * cp}"
            raise LayoutError(
                f"world size {world} is not divisible by expert_tp*ep*pp = {expert_block} "
                f"(expert_tp={expert_tp}, ep={ep}, pp={pp}){extra}"
            )
        expert_dp = world // expert_block

        # Megatron's RankGenerator only appends a missing name when its size is
        # 1. The dense generator runs with ep=1, the expert one with cp=1.
        dense = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
        expert = {"tp": expert_tp, "cp": 1, "ep": ep, "dp": expert_dp, "pp": pp}
        expert_labels = {"tp": "expert_tp", "dp": "expert_dp"}
        for sizes, labels in ((dense, {}), (expert, expert_labels)):
            for name in NAMES:
                if name not in tokens and sizes[name] != 1:
                    label = labels.get(name, name)
                    raise LayoutError(
                        f"order {self.order!r} leaves out {name!r} but {label}={sizes[name]}; "
                        f"only dimensions of size 1 may be left out"
                    )

        fast = _full_fastest_first(tokens, self.convention)
        # Megatron (order as written): unless pp is the slowest name, attention
        # and MoE layers must have the same data-parallel size.
        given_fast = _fastest_first(tokens, self.convention)
        if given_fast[-1] != "pp" and pp != 1 and expert_dp != dp:
            raise LayoutError(
                f"order {self.order!r} does not make pp the slowest dimension, so the expert "
                f"data-parallel size ({expert_dp}) must equal dp ({dp}) when pp={pp}"
            )
        # Megatron: dense and expert generators must give the same pp groups,
        # i.e. pp must have the same stride in both.
        if pp != 1:
            dense_stride = _stride_of("pp", fast, dense)
            expert_stride = _stride_of("pp", fast, expert)
            if dense_stride != expert_stride:
                raise LayoutError(
                    f"order {self.order!r} gives different pipeline groups for dense and expert "
                    f"layers (pp rank stride {dense_stride} vs {expert_stride}); make pp the "
                    f"slowest dimension"
                )

        return replace(
            self,
            dp=dp,
            world=world,
            expert_tp=expert_tp,
            order="-".join(tokens),
        )


def _stride_of(name: str, fast: Sequence[str], sizes: Mapping[str, int]) -> int:
    stride = 1
    for n in fast:
        if n == name:
            return stride
        stride *= sizes[n]
    raise AssertionError(name)  # pragma: no cover


# --------------------------------------------------------------------------
# group generation


def _orthogonal_groups(dims: Sequence[Tuple[str, int]], span: Iterable[str]) -> List[List[int]]:
    """Groups of ranks that differ only along the ``span`` dimensions.

    ``dims`` lists (name, size) from the fastest varying to the slowest, so a
    rank is sum(coord[i] * prod(size[:i])). Inside a group, ranks are listed
    with the fastest spanned dimension varying fastest (ascending); groups are
    listed with the fastest non-spanned dimension varying fastest (ascending
    first rank). That is Megatron's ``generate_masked_orthogonal_rank_groups``.
    """
    span = set(span)
    inside = [0]
    bases = [0]
    stride = 1
    for name, size in dims:
        if size > 1:
            steps = [i * stride for i in range(size)]
            if name in span:
                inside = [s + o for s in steps for o in inside]
            else:
                bases = [s + b for s in steps for b in bases]
        stride *= size
    # the same lists, made without a comprehension per group where their
    # shape allows (a 16,384-rank layout has some 22,000 groups, most of
    # them one rank or one stride apart)
    if len(inside) == 1:
        o = inside[0]
        return [[b + o] for b in bases]
    step = inside[1] - inside[0]
    if step > 0 and inside == list(range(inside[0], inside[0] + step * len(inside), step)):
        first, stop = inside[0], inside[0] + step * len(inside)
        return [list(range(b + first, b + stop, step)) for b in bases]
    return [[b + o for o in inside] for b in bases]


class Groups(dict):
    """``dict[kind, list[list[int]]]`` that caches rank -> group lookups.

    Treat it as read-only; it is an ordinary dict for everything else
    (``json.dumps`` included).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._index: Dict[str, Tuple[list, List[int]]] = {}


def has_expert_groups(layout: Layout) -> bool:
    """True when build_groups returns the expert kinds: ep > 1 or expert_tp != tp."""
    lay = layout.resolved()
    return lay.ep > 1 or lay.expert_tp != lay.tp


def build_groups(layout: Layout) -> Dict[str, List[List[int]]]:
    """All group kinds of ``layout`` (validated first; raises LayoutError).

    Keys, in :data:`GROUP_KINDS` order: the dense kinds always; the expert
    kinds only when :func:`has_expert_groups` (ep > 1 or expert_tp != tp).
    """
    return _groups_of(layout.resolved())


@lru_cache(maxsize=2)
def _groups_of(lay: Layout) -> Dict[str, List[List[int]]]:
    """build_groups of a resolved layout, remembered: one ``plan`` asks for
    a layout's groups three times (the framework's terms, the planner, the
    lower bound), and a 16,384-rank layout's take 10 ms to list. The
    result is shared, which :class:`Groups` already asks of its users
    (read-only), and so are its rank -> group lookups. Two layouts at
    most: a 32,768-rank layout's groups are some 10 MB, and a daemon
    planning many jobs keeps no more than that."""
    fast = lay.fastest_first()
    dense = {"tp": lay.tp, "cp": lay.cp, "ep": 1, "dp": lay.dp, "pp": lay.pp}
    dense_dims = [(n, dense[n]) for n in fast]
    out = Groups()
    for kind, span in DENSE_DIMS.items():
        out[kind] = _orthogonal_groups(dense_dims, span)
    if lay.ep > 1 or lay.expert_tp != lay.tp:
        expert = {"tp": lay.expert_tp, "cp": 1, "ep": lay.ep, "dp": lay.expert_dp, "pp": lay.pp}
        expert_dims = [(n, expert[n]) for n in fast]
        for kind, span in _EXPERT.items():
            out[kind] = _orthogonal_groups(expert_dims, span)
    return out


def mesh_groups(
    shape: Sequence[int],
    names: Sequence[str],
    flatten: Iterable[Union[str, Sequence[str]]] = (),
) -> Dict[str, List[List[int]]]:
    """Groups of a torch ``init_device_mesh(shape, mesh_dim_names=names)``.

    The mesh is ``arange(prod(shape)).reshape(shape)``: row-major, the last
    dimension varies fastest. For each name, its groups are the ranks that
    vary along that dimension with the others fixed. Each entry of
    ``flatten`` (a tuple of names, or a string 'a-b') adds the groups of the
    flattened sub-mesh of those dimensions, under the key 'a-b'.

    Groups are ascending and listed by ascending first rank, the order of
    the layout-based DeviceMesh. (torch releases that built groups with
    ``mesh.swapdims(-1, dim)`` list the same groups of a >= 3-D mesh in
    another order.)
    """
    shape = tuple(shape)
    names = tuple(names)
    if len(shape) != len(names):
        raise LayoutError(f"mesh shape {shape} and names {names} differ in length")
    if len(set(names)) != len(names):
        raise LayoutError(f"mesh names {names} repeat a name")
    for name, size in zip(names, shape):
        _check_size(f"mesh dimension {name!r}", size)
    fast = list(reversed(list(zip(names, shape))))
    out: Dict[str, List[List[int]]] = {}
    for name in names:
        out[name] = _orthogonal_groups(fast, (name,))
    for combo in flatten:
        parts = tuple(combo.split("-")) if isinstance(combo, str) else tuple(combo)
        for part in parts:
            if part not in names:
                raise LayoutError(f"cannot flatten {parts}: {part!r} is not a mesh dimension {names}")
        if len(set(parts)) != len(parts):
            raise LayoutError(f"cannot flatten {parts}: a name repeats")
        out["-".join(parts)] = _orthogonal_groups(fast, parts)
    return out


# --------------------------------------------------------------------------
# lookups


def rank_to_group(groups: Mapping[str, List[List[int]]], kind: str) -> List[int]:
    """A list mapping each rank to the index of its group of ``kind``.

    Cached on :class:`Groups` objects (what build_groups returns)."""
    try:
        lists = groups[kind]
    except KeyError:
        have = ", ".join(groups) or "none"
        raise LayoutError(f"no {kind!r} groups in this layout (have: {have})") from None
    cache = getattr(groups, "_index", None)
    if cache is not None:
        hit = cache.get(kind)
        if hit is not None and hit[0] is lists:
            return hit[1]
    size = sum(len(g) for g in lists)
    index = [-1] * size
    for i, group in enumerate(lists):
        for rank in group:
            if rank >= size or index[rank] != -1:
                raise LayoutError(f"{kind!r} groups are not a partition of ranks 0..{size - 1}")
            index[rank] = i
    if cache is not None:
        cache[kind] = (lists, index)
    return index


def group_of(groups: Mapping[str, List[List[int]]], kind: str, rank: int) -> int:
    """Index in ``groups[kind]`` of the group holding ``rank``."""
    index = rank_to_group(groups, kind)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(index):
        raise LayoutError(f"rank {rank!r} is outside 0..{len(index) - 1}")
    return index[rank]


def _divisors(n: int) -> List[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def span_of(groups: List[List[int]], pos: Optional[List[int]], world: int) -> int:
    """Smallest aligned block size (a divisor of world) such that every
    group lies inside one block of positions (``pos[rank]``; None: the rank
    itself). The planner turns constraints into multiples of it and the
    cost model prices a group against the best placement of its block."""
    gsize = len(groups[0])
    if pos is None:
        bounds = [(g[0], g[-1]) for g in groups]
    else:
        bounds = []
        for g in groups:
            ps = [pos[r] for r in g]
            bounds.append((min(ps), max(ps)))
    width = max(hi - lo + 1 for lo, hi in bounds)
    for s in _divisors(world):
        if s < width or s % gsize:
            continue
        if all(lo // s == hi // s for lo, hi in bounds):
            return s
    return world
