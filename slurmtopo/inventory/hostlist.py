"""Slurm hostlists, read and written the way Slurm reads them.

Every hostlist slurmtopo reads or writes (inventories, state files, Slurm's
own output, ``--nodelist``/``--exclude``, topology.conf, gres.conf) goes
through this module, so one rule holds everywhere:

* ClusterShell parses and folds, with group resolution **off**
  (``RESOLVER_NOGROUP``): a site's ClusterShell ``groups.conf`` upcall never
  runs on a login node because a user typed a node name.
* Only what Slurm itself accepts is accepted: names, ``prefix[ranges]``
  (several brackets in one name too) and commas. ClusterShell's extensions
  (the set operators ``!``, ``&``, ``^`` and ``@group`` names) are refused
  with an error, because Slurm would read ``gpu[1-4]!gpu2`` as one odd name
  and ``@gpus`` is no host at all: silently expanding them would plan on, or
  exclude, hosts the user never meant.
* A hostlist that names no host is an error (``--exclude ""`` would exclude
  nothing without a word).
* The size of an expansion is computed from the brackets *before* anything
  is expanded, and more than :data:`MAX_NAMES` names is refused: a typo such
  as ``gpu[0000001-9999999]`` fails at once instead of building ten million
  strings.

Errors are :class:`HostlistError`, a :class:`ValueError`, so every caller
wraps it in its own located error (``file:line``, or the option's name).
"""
from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache
from typing import Dict, Iterable, List, Optional, Set, Tuple, Union

from ClusterShell.NodeSet import NodeSet, NodeSetBase, NodeSetException, RESOLVER_NOGROUP
from ClusterShell.RangeSet import RangeSet, RangeSetParseError

# ClusterShell (~10 ms to import) is imported by the functions that parse or
# fold: inventories written one name a node, compiled inventories and plans
# never need it.

#: the most names one hostlist (or index range) may expand to; far above the
#: largest clusters slurmtopo plans for (12,500 nodes), far below what would
#: take noticeable time or memory to build.
MAX_NAMES = 65536

#: ClusterShell syntax that Slurm does not have
_REFUSED = {"!": "the set operator '!'", "&": "the set operator '&'",
            "^": "the set operator '^'", "@": "a group name ('@...')"}
#: one item of a bracket: ``N``, ``N-M`` or ``N-M/S``, ASCII digits only.
#: Python's ``int()`` (and so ClusterShell) also reads ``+9``, ``9_999`` and
#: other scripts' digits; an item this does not match is refused rather
#: than counted as one name, or ``n[0-+99999999]`` would pass the size
#: check and expand to 10^8 names.
_RANGE_ITEM = re.compile(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*(?:/\s*([0-9]+)\s*)?)?", re.ASCII)


def natural_key(name: str):
    """``gpu2`` < ``gpu10``, ``mlx5_2`` < ``mlx5_10``: sort names the way
    people number them (hosts, switches, blocks, devices)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


class HostlistError(ValueError):
    """A hostlist or index range that Slurm would not read as the same hosts."""


def expand_hostlist(text: Union[str, List[str]], what: str = "hostlist") -> List[str]:
    """``gpu[01-03],login1`` -> names, in the order ClusterShell gives.

    A list (a YAML sequence) expands item by item; an empty list is no hosts.
    ``what`` names the value in the error (``--exclude``, ``node name``).
    """
    if isinstance(text, list):
        out: List[str] = []
        for item in text:
            out.extend(expand_hostlist(item, what))
        return out
    return list(_parse(str(text), what))


def count_hostlist(text: str, what: str = "hostlist") -> int:
    """How many names :func:`expand_hostlist` gives for ``text`` (duplicates
    once), with the same checks and errors, without building the names:
    a reader that only needs the count (``slurmtopo simulate``'s sacct
    NodeList) skips ClusterShell's sorted expansion, half the cost."""
    return len(_parse(str(text), what))


def _checked_count(text: str, what: str) -> int:
    """How many names ``text`` counts from its brackets, after the syntax
    checks; more than :data:`MAX_NAMES` refused before anything is built."""
    _check_syntax(text, what)
    try:
        count = _count(text)
    except _BadRange as exc:
        raise HostlistError(f"bad {what} {_short(text)}: {exc}") from None
    if count > MAX_NAMES:
        raise HostlistError(f"{what} {_short(text)} names {count:,} hosts, more than the "
                            f"{MAX_NAMES:,} slurmtopo expands (a typo in a range?)")
    return count


def _parse(text: str, what: str):
    """``text`` as a list of one plain name, or a ClusterShell NodeSet
    (iterating gives the names, ``len`` their number)."""
    if not any(c in text for c in "[],@^!&"):  # a plain name: skip the parser
        name = text.strip()
        if name and not any(c.isspace() for c in name):
            return [name]
    count = _checked_count(text, what)

    try:
        names = NodeSet(text, resolver=RESOLVER_NOGROUP)
    except NodeSetException as exc:
        raise HostlistError(f"bad {what} {_short(text)}: {exc}") from None
    if not len(names):
        raise HostlistError(f"{what} {text!r} names no host")
    return names


#: a name ClusterShell reads as one pattern with at most one index: letters,
#: dots, dashes and underscores around one run of digits (``gpu007``,
#: ``rack1-a``) or none (``login``). Nothing in it is ClusterShell syntax
#: (brackets, commas, operators, ``@``, ``%``, wildcards, spaces); ASCII
#: digits, at most 18 (ClusterShell caps an index's size).
_SIMPLE_NAME = re.compile(r"([A-Za-z_.\-]*)([0-9]{0,18})([A-Za-z_.\-]*)")


def fold_hostlist(names: Iterable[str]) -> str:
    """Names -> the shortest hostlist expression (``gpu[01-03]``).

    ClusterShell folds. Names it would read as one pattern and one index
    (nearly every node name) are handed to it as those patterns and index
    sets instead of as strings for its parser to take apart one by one:
    the same sets, so the same text, in a tenth of the time (a 16,384-GPU
    plan folds some 8,000 names into its batch script). Any other name
    sends the whole list through the parser. The last few lists' texts
    are remembered: a plan folds its hosts for the batch script's
    comments, its embedded inventory and the preview."""
    return _fold(tuple(names))


@lru_cache(maxsize=8)
def _fold(names: Tuple[str, ...]) -> str:
    patterns: Dict[str, Optional[Set[str]]] = {}
    match = _SIMPLE_NAME.fullmatch
    for name in names:
        m = match(name)
        if m is None or not name:
            return str(NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP))
        pfx, idx, sfx = m.groups()
        if not idx:
            patterns.setdefault(name, None)
            continue
        # ClusterShell's own pattern for one index, and its element: the
        # digits as written (zero padding kept)
        pat = f"{pfx}%s{sfx}"
        idxs = patterns.get(pat)  # (a name without digits has no '%s')
        if idxs is None:
            idxs = patterns[pat] = set()
        idxs.add(idx)

    out = NodeSet(resolver=RESOLVER_NOGROUP)
    for pat, idxs in patterns.items():
        if idxs is None:
            NodeSetBase.update(out, NodeSetBase(pat, None))
        else:
            rs = RangeSet()
            rs.update(idxs)
            NodeSetBase.update(out, NodeSetBase(pat, rs, copy_rangeset=False))
    return str(out)


def expand_indices(text: str, what: str = "index range") -> Set[int]:
    """``0-3,8`` -> {0, 1, 2, 3, 8}: a range of numbers (GPU indices, sizes),
    with the same size cap as a hostlist."""
    try:
        total = _ranges_size(str(text))
    except _BadRange as exc:
        raise HostlistError(f"bad {what} {_short(text)}: {exc}") from None
    if total > MAX_NAMES:
        raise HostlistError(f"{what} {_short(text)} names {total:,} numbers, more than the "
                            f"{MAX_NAMES:,} slurmtopo expands")

    try:
        return {int(x) for x in RangeSet(text)}
    except (RangeSetParseError, ValueError) as exc:
        raise HostlistError(f"bad {what} {_short(text)}: {exc}") from None


def _check_syntax(text: str, what: str) -> None:
    for char, meaning in _REFUSED.items():
        if char in text:
            raise HostlistError(f"{what} {_short(text)} uses {meaning}, which Slurm does not "
                                "read as a hostlist; list the hosts (gpu[1-4] or gpu1,gpu3)")


def _count(text: str) -> int:
    """How many names ``text`` expands to, from its brackets alone (an upper
    bound: duplicates count twice). Malformed brackets count as one name and
    are left to ClusterShell to reject with its own message; a bracket item
    that is not a plain number or range raises :class:`_BadRange`."""
    total = 0
    for pattern in _split_top(text):
        n = 1
        for body in re.findall(r"\[([^\[\]]*)\]", pattern):
            n *= max(_ranges_size(body), 1)
            if n > MAX_NAMES:
                return n
        total += n
        if total > MAX_NAMES:
            break
    return total


class _BadRange(HostlistError):
    """A bracket item that is not ``N``, ``N-M`` or ``N-M/S``."""


def _ranges_size(body: str) -> int:
    """How many numbers ``0-7,9,10-20/2`` names; :class:`_BadRange` for an
    item that is none of those (its size could not be known before
    ClusterShell expands it)."""
    size = 0
    for item in body.split(","):
        m = _RANGE_ITEM.fullmatch(item)
        if m is None:
            raise _BadRange(f"range {item.strip()[:40]!r} is not N, N-M or N-M/S "
                            "(digits 0-9)")
        if m.group(2):
            lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
            size += (hi - lo) // max(step, 1) + 1 if hi >= lo else 1
        else:
            size += 1
    return size


def _split_top(text: str) -> List[str]:
    """Split at the commas outside brackets."""
    if "[" not in text and "]" not in text:
        return [p for p in text.split(",") if p.strip()]
    parts, depth, cur = [], 0, []
    for c in text:
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        if c == "," and depth <= 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def expand_in_order(text: str, what: str = "hostlist") -> List[str]:
    """A hostlist in the order written, as Slurm's ``hostlist_create`` and
    ``hostlist_shift`` take it (``node3,node[1-2]`` -> node3, node1, node2;
    :func:`expand_hostlist` sorts): the order of a ring, or of a torus's
    x-major fill. An item with one bracket expands range by range in
    the order given; one with several brackets in ClusterShell's order."""
    names: List[str] = []
    for item in _split_top(str(text)):
        m = _ONE_BRACKET.match(item.strip())
        if m is None:
            names.extend(expand_hostlist(item, what))
            continue
        for rng in m.group(2).split(","):
            names.extend(expand_hostlist(f"{m.group(1)}[{rng}]{m.group(3)}", what))
        if len(names) > MAX_NAMES:
            raise HostlistError(f"{what} {_short(str(text))} names more than the "
                                f"{MAX_NAMES:,} hosts slurmtopo expands")
    if not names:
        raise HostlistError(f"{what} {str(text)!r} names no host")
    return names


def fold_in_order(names: Iterable[str]) -> str:
    """Names -> a hostlist that :func:`expand_in_order` (and Slurm) reads
    back in the same order: runs of consecutive numbers folded
    (``node[1-4],node7,node5``), nothing sorted."""
    out: List[str] = []
    run: List[str] = []
    last: Optional[Tuple[str, int, int, str]] = None
    for name in names:
        m = _NUMBERED.match(name)
        key = (m.group(1), int(m.group(2)), len(m.group(2)), m.group(3)) if m else None
        if run and not (key and last and key[0] == last[0] and key[3] == last[3]
                        and key[2] == last[2] and key[1] == last[1] + 1):
            out.append(fold_hostlist(run))
            run = []
        run.append(name)
        last = key
    if run:
        out.append(fold_hostlist(run))
    return ",".join(out)


_ONE_BRACKET = re.compile(r"^([^\[\]]*)\[([^\[\]]*)\]([^\[\]]*)$")
_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")


# --------------------------------------------------------------------------
# a hostlist against a known set of names, never expanded


#: distinct bracket patterns (prefix, suffix, padding) and multi-bracket
#: items one hostlist may hold before :func:`select_hostlist` lets
#: ClusterShell expand it instead (within MAX_NAMES, so still bounded)
MAX_PATTERNS = 64


class HostIndex:
    """A set of host names (an inventory's nodes), prepared so that
    :func:`select_hostlist` can tell which of them a hostlist names without
    expanding the hostlist."""

    def __init__(self, names: Iterable[str]):
        self.names = frozenset(names)
        self._digits: Dict[Tuple[str, str], List[Tuple[str, int]]] = {}

    def with_pattern(self, prefix: str, suffix: str) -> List[Tuple[str, int]]:
        """(name, number) of every name ``prefix<digits>suffix``."""
        key = (prefix, suffix)
        hit = self._digits.get(key)
        if hit is None:
            hit = []
            lo, hi = len(prefix), len(suffix)
            for name in self.names:
                if len(name) > lo + hi and name.startswith(prefix) and name.endswith(suffix):
                    mid = name[lo:len(name) - hi]
                    if mid.isascii() and mid.isdigit() and len(mid) <= 18:
                        hit.append((name, int(mid)))
            self._digits[key] = hit
        return hit


def _width(lo: str) -> int:
    """The zero padding of a range ``lo-hi`` (``05-10``: 2), as ClusterShell
    and Slurm pad every number of it; 0 when none."""
    return len(lo) if len(lo) > 1 and lo.startswith("0") else 0


def select_hostlist(text: str, index: HostIndex, what: str = "hostlist") -> Tuple[List[str], int]:
    """(the names of ``index`` that ``text`` names, sorted; how many names
    ``text`` names, counted from its brackets). ``text`` is checked as
    :func:`expand_hostlist` checks it (Slurm's syntax only, at most
    :data:`MAX_NAMES` names), but never expanded: each bracket item is a
    range of numbers compared with the numbers of the index's names of the
    same pattern, so ``n[0-65535]`` against a 12-node inventory costs 12
    comparisons, not 65,536 strings. (More than :data:`MAX_PATTERNS`
    patterns, or several brackets in one name, and it is expanded, within
    the same bound.)"""
    text = str(text)
    if not any(c in text for c in "[],@^!&"):
        name = text.strip()
        if name and not any(c.isspace() for c in name):
            return ([name] if name in index.names else []), 1
    count = _checked_count(text, what)
    ranges: Dict[Tuple[str, str, int], _Spans] = {}
    plain: Set[str] = set()
    for item in _split_top(text):
        item = item.strip()
        if not item or any(c.isspace() for c in item):
            raise HostlistError(f"bad {what} {_short(text)}: {item[:40]!r} is no host name")
        if "[" not in item and "]" not in item:
            plain.add(item)
            continue
        m = _ONE_BRACKET.match(item)
        if m is None or len(ranges) >= MAX_PATTERNS:
            return sorted(set(_parse(text, what)) & index.names, key=natural_key), count
        prefix, body, suffix = m.groups()
        for part in body.split(","):
            r = _RANGE_ITEM.fullmatch(part)
            if r is None:  # _count has refused it already; kept for safety
                raise HostlistError(f"bad {what} {_short(text)}: range {part[:40]!r}")
            lo_text = r.group(1)
            lo, hi = int(lo_text), int(r.group(2) or lo_text)
            step = max(int(r.group(3) or 1), 1)
            if hi < lo:
                raise HostlistError(f"bad {what} {_short(text)}: range {part.strip()[:40]!r} "
                                    "runs backwards")
            spans = ranges.setdefault((prefix, suffix, _width(lo_text)), _Spans())
            if not spans.add(lo, hi, step):
                return sorted(set(_parse(text, what)) & index.names, key=natural_key), count
    found = set(plain) & index.names
    if not ranges:
        count = len(plain)  # (duplicates once, as Slurm reads them)
    for (prefix, suffix, width), spans in ranges.items():
        spans.close()
        for name, number in index.with_pattern(prefix, suffix):
            digits = name[len(prefix):len(name) - len(suffix)]
            if digits != (str(number).zfill(width) if width else str(number)):
                continue
            if number in spans:
                found.add(name)
    return sorted(found, key=natural_key), count


class _Spans:
    """The numbers of one bracket pattern: ranges merged and searched by
    bisection; stepped ranges (``0-10/2``) kept aside, at most
    :data:`MAX_PATTERNS` of them."""

    def __init__(self) -> None:
        self._runs: List[Tuple[int, int]] = []
        self._stepped: List[Tuple[int, int, int]] = []
        self._starts: List[int] = []

    def add(self, lo: int, hi: int, step: int) -> bool:
        if step == 1 or lo == hi:
            self._runs.append((lo, hi))
            return True
        self._stepped.append((lo, hi, step))
        return len(self._stepped) <= MAX_PATTERNS

    def close(self) -> None:
        merged: List[Tuple[int, int]] = []
        for lo, hi in sorted(self._runs):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        self._runs = merged
        self._starts = [lo for lo, _hi in merged]

    def __contains__(self, number: int) -> bool:
        i = bisect_right(self._starts, number) - 1
        if i >= 0 and self._runs[i][1] >= number:
            return True
        return any(lo <= number <= hi and (number - lo) % step == 0
                   for lo, hi, step in self._stepped)
