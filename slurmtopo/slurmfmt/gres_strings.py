"""Slurm's GRES strings, read once for every place that meets them.

slurm.conf's ``Gres=gpu:h100:8(S:0-1)``, sinfo's ``gres``/``gres_used``
(``gpu:(null):3(IDX:0-2)``), squeue's ``gres_detail``, the ``GRES=`` of
``scontrol -d show job`` and TRES strings (``gres/gpu:h100=4``) share one
grammar: comma-separated ``name[:type][:count][(extra)]``, the count a
number with an optional K/M/G/T/P multiplier (1024-based, as gres.conf's
``Count``). :func:`parse_gres` reads it; the rest are views of its result.
"""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, List, Optional, Tuple

from slurmtopo.inventory.model import parse_cpulist

GPU_NAMES = ("gpu",)
_SUFFIX = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4, "p": 1024 ** 5}
_COUNT = re.compile(r"^\d+[kmgtpKMGTP]?$")


def gres_count(value: str) -> int:
    """``8`` -> 8, ``4K`` -> 4096: a GRES count with Slurm's multipliers."""
    v = value.strip().lower()
    mult = _SUFFIX.get(v[-1:], 1)
    if mult > 1:
        v = v[:-1]
    if not v.isdigit():
        raise ValueError(f"Count must be a number (with an optional K/M/G/T/P), got {value!r}")
    return int(v) * mult




def split_top(text: str, sep: str = ",") -> List[str]:
    """Split on ``sep`` outside parentheses: ``a(1,2),b`` -> [``a(1,2)``, ``b``]."""
    out, cur, depth = [], "", 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
            continue
        cur += ch
    out.append(cur)
    return [x.strip() for x in out if x.strip()]


def parse_gres(text: Optional[str]) -> List[Tuple[str, Optional[str], int, Optional[str]]]:
    """GRES string -> [(name, type or None, count, extra or None)].

    ``gpu:a6000:2(IDX:0-1),gpu:(null):1(IDX:4)`` -> [("gpu", "a6000", 2,
    "IDX:0-1"), ("gpu", None, 1, "IDX:4")]. Accepts the ``gres:``/``gres/``
    prefixes of TRES strings (``gres:gpu:2``, ``gres/gpu:h100=4``) and
    Slurm's ``(null)``/``N/A`` for "no GRES".
    """
    out: List[Tuple[str, Optional[str], int, Optional[str]]] = []
    text = (text or "").strip()
    if not text or text in ("(null)", "N/A", "none"):
        return out
    for item in split_top(text):
        extra = None
        if item.endswith(")") and "(" in item:
            # the last "(" opens the trailing group; "(null)" in the type is not it
            cut = item.rfind("(")
            head, extra = item[:cut], item[cut + 1:-1]
        else:
            head = item
        if head.startswith(("gres:", "gres/")):
            head = head[5:]
        head = head.replace("=", ":")
        parts = head.split(":")
        if len(parts) == 1:
            name, typ, count = parts[0], None, 1
        else:
            name = parts[0]
            if _COUNT.match(parts[-1]):
                count = gres_count(parts[-1])
                typ = ":".join(parts[1:-1]) or None
            else:  # "gpu:a6000" (a request without a count means 1)
                count = 1
                typ = ":".join(parts[1:]) or None
        if typ in ("(null)", "null"):
            typ = None
        out.append((name, typ, count, extra))
    return out


def _indices(extra: Optional[str]) -> Optional[FrozenSet[int]]:
    """``IDX:0-1,4`` -> {0, 1, 4}; ``IDX:N/A`` -> {}; no IDX -> None."""
    if not extra:
        return None
    m = re.search(r"(?:^|[\s;])IDX:([^)\s]*)", extra)
    if not m:
        return None
    value = m.group(1)
    if value in ("", "N/A", "(null)"):
        return frozenset()
    try:
        return frozenset(parse_cpulist(value))
    except ValueError:
        return None


def gpu_count(gres: Optional[str]) -> int:
    """Number of GPUs in a GRES string (all types summed)."""
    return sum(count for name, _t, count, _x in parse_gres(gres) if name in GPU_NAMES)


def gpu_indices(gres: Optional[str]) -> Tuple[int, Optional[FrozenSet[int]]]:
    """(count, indices) of the GPUs in a ``gres_used``/``GRES=`` string.

    indices is None when Slurm gave a count but no usable ``IDX``."""
    total, idx, known = 0, set(), True
    for name, _t, count, extra in parse_gres(gres):
        if name not in GPU_NAMES:
            continue
        total += count
        got = _indices(extra)
        if got is None:
            if count:
                known = False
        else:
            idx |= got
    return total, (frozenset(idx) if known else None)


#: a GPU entry's index list in ``scontrol -d show job``: ``gpu:h100:8(IDX:0-7)``
#: in ``GRES=`` (Slurm >= 20.02), ``gpu(IDX:0-3)`` in the older ``GRES_IDX=``
_GPU_IDX = re.compile(r"gpu(?::[^,(\s]*)*\((?:IDX|idx):([^)]*)\)")


def gpu_index_lists(gres: str) -> List[str]:
    """The ``IDX`` lists of the GPU entries of a job's ``GRES=`` or
    ``GRES_IDX=`` value, as written (``"0-7"``, ``"N/A"``), one per entry
    (several GPU types give several): the start-time step reads each
    strictly, where :func:`gpu_indices` (a node's ``gres_used``) takes
    ``N/A`` for none."""
    return _GPU_IDX.findall(gres)


def gres_by_type(gres: Optional[str], name: str = "gpu") -> Dict[Optional[str], int]:
    """``gpu:h100:8,gpu:a100:2(S:0)`` (slurm.conf's ``Gres=``) -> {type: count}
    of GRES ``name`` (None: untyped)."""
    out: Dict[Optional[str], int] = {}
    for gname, typ, count, _extra in parse_gres(gres):
        if gname.lower() == name:
            out[typ] = out.get(typ, 0) + count
    return out


def tres_gpu_terms(text: str) -> Tuple[Optional[str], Optional[str], List[str]]:
    """The node and GPU terms of a TRES string (sacct's ``AllocTRES``:
    ``billing=8,cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1``), as written:
    (``node``, the untyped ``gres/gpu``, every typed ``gres/gpu:TYPE``).
    Slurm prints the untyped total beside the typed counts when a type is
    configured, so a reader takes the untyped one when there is one and
    the typed ones' sum otherwise. The numbers are left to the caller,
    which knows the bounds its input may have."""
    nodes: Optional[str] = None
    untyped: Optional[str] = None
    typed: List[str] = []
    for item in text.split(","):
        key, _, value = item.strip().partition("=")
        key = key.strip().lower()
        if key == "node":
            nodes = value
        elif key == "gres/gpu":
            untyped = value
        elif key.startswith("gres/gpu:"):
            typed.append(value)
    return nodes, untyped, typed
