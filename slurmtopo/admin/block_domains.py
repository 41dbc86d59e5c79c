"""Accelerator domains (and domains inside them) as topology/block blocks,
by the rules of NVIDIA topograph 1.0's Slurm engine.

Why match topograph: sites move between the two tools, and a block file
whose BlockSizes or block positions change with the tool that wrote it
re-plans every running rack. The rules (topograph's ``pkg/translate`` and
``pkg/topology/domain.go``, read at commit e2b6250):

* **BlockSizes, one level** (no host has a sub-domain, none configured):
  ``[D, 2D, ..., 2^k D]`` with ``D`` the smallest domain's node count and
  ``k = floor(log2(number of blocks))``.
* **BlockSizes, two levels** (some host has a sub-domain): ``[S, S*2^n]``
  with ``S`` the largest sub-domain and ``n`` the smallest power that
  reaches the largest domain; just ``[S]`` when ``S`` already does.
* **Placeholders**: with two levels, or with BlockSizes given, every domain
  gets the same power-of-two run of base blocks (sized by the largest
  sibling), and the whole list is padded to a multiple of the last size
  with empty blocks, so a rack that goes away (or has not arrived) leaves
  an empty ``BlockName=`` line instead of shifting the racks after it.
* **Names**: ``block001``, ``block002``, ... by position; a block with
  nodes carries its domain as a comment. With a naming rule (a regular
  expression and a ``${1}``-style format), every node of a block must give
  the same non-empty name and names must be unique; empty blocks keep the
  positional name.

Pure: domains in, blocks out. ``generate`` feeds it the NVLink domains of
the node reports (cluster UUID as the domain, clique id as the sub-domain
where one cluster UUID holds several cliques).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError

#: domain -> host -> sub-domain ("" when the host has none)
DomainMap = Mapping[str, Mapping[str, str]]


@dataclass(frozen=True)
class DomainBlock:
    """One block line: positional id, the domain it holds (comment), nodes."""

    name: str
    domain: str = ""
    nodes: Tuple[str, ...] = ()


@dataclass(frozen=True)
class BlockNaming:
    """Block names from node names (topograph's ``blockName``): ``regexp``
    is searched in each node name, ``fmt`` expands its groups (``$1``,
    ``${1}``, ``${name}``, ``$$`` for a dollar)."""

    regexp: str
    fmt: str

    def compiled(self) -> "re.Pattern[str]":
        if not self.regexp:
            raise SlurmtopoError("the block naming regular expression must not be empty")
        if not self.fmt:
            raise SlurmtopoError("the block naming format must not be empty")
        try:
            return re.compile(self.regexp)
        except re.error as e:
            raise SlurmtopoError(f"bad block naming regular expression {self.regexp!r}: {e}") \
                from None


# --- BlockSizes -------------------------------------------------------------

def doubling_sizes(block_node_counts: Sequence[int]) -> Tuple[int, ...]:
    """One-level BlockSizes: the smallest block and one doubling per power
    of two in the number of blocks."""
    if not block_node_counts:
        raise SlurmtopoError("cannot infer BlockSizes: there are no blocks")
    base = min(block_node_counts)
    levels = int(math.log2(len(block_node_counts)))
    return tuple(base << i for i in range(levels + 1))


def two_level_sizes(domains: DomainMap) -> Tuple[int, ...]:
    """Two-level BlockSizes, or () when no host has a sub-domain."""
    max_domain = max_sub = 0
    has_sub = False
    for hosts in domains.values():
        counts: Dict[str, int] = {}
        for sub in hosts.values():
            if sub:
                has_sub = True
                counts[sub] = counts.get(sub, 0) + 1
        max_domain = max(max_domain, len(hosts))
        max_sub = max([max_sub, *counts.values()])
    if not has_sub:
        return ()
    aggregate = max_sub
    while aggregate < max_domain:
        aggregate *= 2
    return (max_sub,) if aggregate == max_sub else (max_sub, aggregate)


# --- the block tree ----------------------------------------------------------

@dataclass
class _Vertex:
    """A domain (hosts, or sub-domain children) with its live node count."""

    name: str
    hosts: Optional[List[str]] = None
    children: Optional[Dict[str, "_Vertex"]] = None
    count: int = 0
    max_child: int = 0


@dataclass
class _Slot:
    """One base block: the id it was packed under ("" for an empty one)."""

    ident: str
    hosts: Tuple[str, ...]


def _domain_tree(domains: DomainMap) -> _Vertex:
    root = _Vertex(name="", children={})
    for name, hosts in domains.items():
        v = _Vertex(name=name)
        if not any(hosts.values()):
            v.hosts = sorted(hosts)
            v.count = len(hosts)
        else:
            v.children = {}
            for host, sub in hosts.items():
                key = sub or name  # hosts without a sub-domain: one named after the domain
                child = v.children.setdefault(key, _Vertex(name=key, hosts=[]))
                assert child.hosts is not None
                child.hosts.append(host)
                child.count += 1
            for child in v.children.values():
                child.hosts = sorted(child.hosts or ())
                v.max_child = max(v.max_child, child.count)
            v.count = len(hosts)
        root.children[name] = v  # type: ignore[index]
        root.max_child = max(root.max_child, v.count)
    return root


def _capacity(max_sibling: int, base: int) -> int:
    """The smallest power-of-two multiple of ``base`` holding ``max_sibling``."""
    cap = base
    while cap < max_sibling:
        cap *= 2
    return cap


def _primary(ident: str) -> str:
    for i, c in enumerate(ident):
        if c in "/#+":
            return ident[:i]
    return ident


def _pack(ident: str, hosts: Sequence[str], n_blocks: int, base: int) -> List[_Slot]:
    out = [_Slot(ident if i == 0 else f"{ident}#{i // base + 1}", tuple(hosts[i:i + base]))
           for i in range(0, len(hosts), base)]
    out += [_Slot("", ()) for _ in range(n_blocks - len(out))]
    return out


def _leaf_blocks(v: _Vertex, n_blocks: int, base: int) -> List[_Slot]:
    return _pack(v.name, v.hosts or [], max(n_blocks, 1), base)


def _single_level(v: _Vertex, max_sibling: int, sizes: Sequence[int]) -> List[_Slot]:
    base = sizes[0]
    if len(sizes) == 1:
        n = -(-v.count // base)
    else:
        n = _capacity(max_sibling, base) // base
    return _leaf_blocks(v, n, base)


def _domain(v: _Vertex, max_sibling: int, sizes: Sequence[int]) -> List[_Slot]:
    base, last = sizes[0], sizes[-1]
    if v.hosts is not None:
        if last < max_sibling:  # oversized: no power-of-two rounding
            n = -(-v.count // base)
        else:
            n = _capacity(max_sibling, base) // base
        return _leaf_blocks(v, n, base)
    want = max(_capacity(min(last, max_sibling), base) // base, 1)
    slots: List[_Slot] = []
    for name in sorted(v.children or {}):
        slots += _domain((v.children or {})[name], v.max_child, sizes)
    if len(slots) > want and len(sizes) >= 2:
        # overflowing sub-domains end on an aggregate boundary
        nodes = len(slots) * base
        align = next((s for s in sizes[1:] if s >= nodes), nodes)
        width = _capacity(align, base) // base
        want = -(-len(slots) // width) * width
    slots += [_Slot("", ()) for _ in range(want - len(slots))]
    return slots


def _complement(domains: DomainMap, sizes: Sequence[int]) -> List[_Slot]:
    root = _domain_tree(domains)
    children = root.children or {}
    single = bool(children) and all(c.hosts is not None for c in children.values())
    base, last = sizes[0], sizes[-1]
    slots: List[_Slot] = []
    child_cap = 0
    for name in sorted(children):
        part = (_single_level if single else _domain)(children[name], root.max_child, sizes)
        slots += part
        cap = len(part) * base
        child_cap = cap if child_cap == 0 else math.gcd(child_cap, cap)
    total = len(slots) * base
    if total and child_cap and total % last:
        step = child_cap // math.gcd(child_cap, last) * last
        target = -(-total // step) * step
        while total < target:
            slots += [_Slot("", ()) for _ in range(child_cap // base)]
            total += child_cap
    return slots


# --- names -------------------------------------------------------------------

_EXPAND = re.compile(r"\$(?:\$|\{([A-Za-z0-9_]*)\}|([A-Za-z0-9_]+))")


def _expand(m: "re.Match[str]", fmt: str) -> str:
    """Go's Regexp.Expand: ``$name`` takes the longest run of word
    characters; an unknown or unmatched group expands to nothing."""
    def one(e: "re.Match[str]") -> str:
        if e.group(0) == "$$":
            return "$"
        key = e.group(1) if e.group(1) is not None else e.group(2)
        if key.isdigit():
            idx = int(key)
            return (m.group(idx) or "") if idx <= (m.re.groups) else ""
        return (m.group(key) or "") if key in m.re.groupindex else ""
    return _EXPAND.sub(one, fmt)


def name_blocks(blocks: Sequence[DomainBlock], naming: Optional[BlockNaming]) -> List[DomainBlock]:
    """``blocks`` renamed by ``naming`` (unchanged without one)."""
    if naming is None:
        return list(blocks)
    pat = naming.compiled()
    out: List[DomainBlock] = []
    seen: Dict[str, str] = {}
    for b in blocks:
        name = b.name
        if b.nodes:
            what = f"block {b.name!r}" + (f" (domain {b.domain!r})" if b.domain else "")
            name = ""
            for node in b.nodes:
                m = pat.search(node)
                if m is None:
                    raise SlurmtopoError(f"node {node!r} in {what} does not match the block "
                                         f"naming expression {naming.regexp!r}")
                got = _expand(m, naming.fmt)
                if not got:
                    raise SlurmtopoError(f"block naming format {naming.fmt!r} gives an empty "
                                         f"name for node {node!r} in {what}")
                if name and got != name:
                    raise SlurmtopoError(f"nodes in {what} give different block names "
                                         f"{name!r} and {got!r}")
                name = got
        if name in seen:
            raise SlurmtopoError(f"blocks {seen[name]!r} and {b.name!r} get the same name "
                                 f"{name!r}")
        seen[name] = b.name
        out.append(DomainBlock(name=name, domain=b.domain, nodes=b.nodes))
    return out


# --- the whole step ----------------------------------------------------------

def domain_blocks(domains: DomainMap, sizes: Sequence[int] = (),
                  naming: Optional[BlockNaming] = None
                  ) -> Tuple[List[DomainBlock], Tuple[int, ...]]:
    """The block lines and BlockSizes for ``domains`` (topograph's
    ``toBlockTopology``): complemented with placeholders when the domains
    have sub-domains or ``sizes`` are given, else one block per domain."""
    domains = {d: h for d, h in domains.items() if h}
    if not domains:
        raise SlurmtopoError("cannot infer BlockSizes: there are no blocks")
    eff = tuple(sizes) or two_level_sizes(domains)
    if eff:
        slots = _complement(domains, eff)
        blocks = [DomainBlock(name=f"block{i:03d}", domain=_primary(s.ident) or s.ident,
                              nodes=s.hosts) for i, s in enumerate(slots, 1)]
    else:
        blocks = [DomainBlock(name=f"block{i:03d}", domain=d, nodes=tuple(sorted(domains[d])))
                  for i, d in enumerate(sorted(domains), 1)]
    blocks = name_blocks(blocks, naming)
    if not eff:
        eff = doubling_sizes([len(b.nodes) for b in blocks])
    return blocks, eff
