"""Checks run before a Slurm file is written (and on files read back).

slurmctld reads topology.conf/gres.conf when it starts or reconfigures; a
bad file stops it (``fatal()``) or quietly changes scheduling. Each check
mirrors a rule of Slurm's own parser (src/plugins/topology/tree/
switch_record.c, topology/block/block_record.c, common/parse_config.c, the
topology.conf(5) and gres.conf(5) pages) or protects against dropping nodes.
A :class:`Problem` has a severity:

* ``error``: Slurm would reject the file or misread it; never written;
* ``refuse``: valid for Slurm but it would drop or strand nodes (a node of
  slurm.conf on no switch, a switch cut off from the rest); written only
  with ``--force``;
* ``warning``: worth saying, written anyway.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set

from slurmtopo.errors import InventoryError, SlurmtopoError
from slurmtopo.inventory.hostlist import fold_hostlist, natural_key
from slurmtopo.inventory.model import Fabric
from slurmtopo.inventory.topology import switch_levels
from slurmtopo.slurmfmt.slurm_conf import MAX_LINE, SlurmConf, logical_lines

#: what Slurm and ClusterShell both read as one plain name
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

ERROR, REFUSE, WARNING = "error", "refuse", "warning"
#: Slurm's HOST_NAME_MAX check on SwitchName
MAX_SWITCH_NAME = 64
#: block levels Slurm accepts (BlockSizes ratio up to 2**15)
MAX_BLOCK_LEVEL = 15


@dataclass(frozen=True)
class Problem:
    severity: str
    message: str
    origin: Optional[str] = None  # path:line

    def render(self) -> str:
        return f"{self.origin}: {self.message}" if self.origin else self.message


def sample_hosts(names: Iterable[str], limit: int = 8) -> str:
    names = sorted(set(names), key=natural_key)
    text = fold_hostlist(names[:limit])
    return text if len(names) <= limit else f"{text} and {len(names) - limit} more"


def _names(names: Iterable[str], what: str, origins: Dict[str, Optional[str]],
           max_len: Optional[int] = None) -> List[Problem]:
    out: List[Problem] = []
    seen: Set[str] = set()
    for name in names:
        where = origins.get(name)
        if name in seen:
            out.append(Problem(ERROR, f"{what} name {name!r} is used twice", where))
        seen.add(name)
        if not NAME_RE.match(name):
            out.append(Problem(ERROR, f"{what} name {name!r} is not a plain name (letters, "
                                      "digits, '.', '_', '-'): Slurm reads it as a hostlist",
                               where))
        if max_len and len(name) > max_len:
            out.append(Problem(ERROR, f"{what} name {name!r} is longer than {max_len} "
                                      "characters", where))
    return out


def _coverage(placed: Set[str], slurm_nodes: Optional[Sequence[str]], what: str) -> List[Problem]:
    if slurm_nodes is None:
        return []
    known = set(slurm_nodes)
    out = []
    missing = known - placed
    if missing:
        out.append(Problem(REFUSE, f"{len(missing)} node(s) of slurm.conf are on no {what}: "
                                   f"{sample_hosts(missing)} (Slurm could not place jobs spanning "
                                   "them with the others)"))
    unknown = placed - known
    if unknown:
        out.append(Problem(REFUSE, f"{len(unknown)} node(s) are not in slurm.conf: "
                                   f"{sample_hosts(unknown)} (a typo, or slurm.conf is out of date)"))
    return out


def check_ring_torus(fabric: Fabric, slurm_nodes: Optional[Sequence[str]] = None
                     ) -> List[Problem]:
    """Node coverage of rings or toruses (Slurm's own rules are
    :mod:`slurmtopo.inventory.ringtree`'s, checked when they were read): a node
    slurm.conf lacks stops slurmctld's plugin; a node on no ring or torus
    only ever gets single-node jobs."""
    placed = {h for u in fabric.rings + fabric.toruses for h in u.nodes}
    return _coverage(placed, slurm_nodes, "ring or torus")


def ring_torus_release(fabric: Fabric, slurm_version=None) -> Optional[str]:
    """Why ``slurm_version`` (a tuple; None: current releases) cannot read
    the fabric's rings or toruses, or None."""
    if not (fabric.rings or fabric.toruses) or slurm_version is None \
            or tuple(slurm_version) >= RING_TORUS_SINCE:
        return None
    kind = "topology/ring" if fabric.rings else "topology/torus3d"
    return (f"Slurm {slurm_version[0]}.{slurm_version[1]:02d} has no {kind} (26.05 and later "
            "do): describe the fabric with switches or blocks for it")


def check_tree(fabric: Fabric, slurm_nodes: Optional[Sequence[str]] = None) -> List[Problem]:
    """Rules of topology/tree (switch_record.c) plus node coverage."""
    sw = fabric.switches
    if not sw:
        return [Problem(ERROR, "no switches: slurmctld stops on a topology/tree "
                               "configuration without switches, and from 23.11 every slurmd "
                               "that reads it dies ('No switches configured')")]
    origins = {s.name: s.origin for s in sw}
    out = _names([s.name for s in sw], "switch", origins, MAX_SWITCH_NAME)
    names = set(origins)
    parents: Dict[str, List[str]] = defaultdict(list)
    for s in sw:
        if s.nodes and s.switches:
            out.append(Problem(ERROR, f"switch {s.name!r} has both Nodes and Switches",
                               s.origin))
        if not s.nodes and not s.switches:  # fatal "lacks children" in Slurm 22.05
            out.append(Problem(ERROR, f"switch {s.name!r} has neither nodes nor switches",
                               s.origin))
        for child in s.switches:
            if child == s.name:
                out.append(Problem(ERROR, f"switch {s.name!r} lists itself as a child",
                                   s.origin))
            elif child not in names:
                out.append(Problem(ERROR, f"switch {s.name!r} has child {child!r}, which is "
                                          "not defined", s.origin))
            else:
                parents[child].append(s.name)
    if any(p.severity == ERROR for p in out):
        return out
    try:
        levels = switch_levels(fabric)
    except ValueError as exc:  # "switch loop through 'name'"
        looped = str(exc).split("'")[1] if str(exc).count("'") >= 2 else None
        return out + [Problem(ERROR, f"switches do not form a tree: {exc}", origins.get(looped))]
    roots = [s.name for s in sw if s.name not in parents]
    if len(roots) > 1:
        top = max(levels.values())
        low = sorted((r for r in roots if levels[r] < top), key=natural_key)
        if parents and low:
            out.append(Problem(REFUSE, f"switch(es) {', '.join(low[:8])} have no parent while "
                                       "others have one: jobs could not span them and the rest "
                                       "of the tree", origins.get(low[0])))
        else:
            shown = sorted(roots, key=natural_key)
            out.append(Problem(REFUSE, f"no switch reaches all nodes: {len(roots)} switches "
                                       f"have no common parent ({', '.join(shown[:8])}"
                                       f"{' ...' if len(shown) > 8 else ''}); Slurm warns 'no "
                                       "switch can reach all nodes' and jobs needing nodes under "
                                       "two of them never start (add a switch above them; "
                                       "`slurmtopo topology generate` does)",
                               origins.get(shown[0])))
    seen: Counter = Counter(h for s in sw for h in set(s.nodes))
    multi = [h for h, c in seen.items() if c > 1]
    if multi:
        out.append(Problem(WARNING, f"{len(multi)} node(s) are on more than one leaf switch: "
                                    f"{sample_hosts(multi)}"))
    return out + _coverage(set(seen), slurm_nodes, "switch")


def valid_block_sizes(sizes: Sequence[int]) -> Optional[str]:
    """Why ``sizes`` is not a valid BlockSizes list, or None (block_record.c:
    the first is the base block size, each later one is the base times a
    power of two, at most 2**15, and they grow)."""
    if not sizes:
        return None
    base = sizes[0]
    prev = 0
    for size in sizes:
        if size <= 0:
            return f"BlockSizes must be positive, got {size}"
        if size % base:
            return f"BlockSizes {size} is not a multiple of the base block size {base}"
        ratio = size // base
        if ratio & (ratio - 1):
            return f"BlockSizes {size} is not the base block size {base} times a power of two"
        if ratio.bit_length() - 1 > MAX_BLOCK_LEVEL:
            return f"BlockSizes {size} is more than 2^{MAX_BLOCK_LEVEL} base blocks"
        if size <= prev:
            return f"BlockSizes must grow: {size} follows {prev}"
        prev = size
    return None


def check_blocks(fabric: Fabric, slurm_nodes: Optional[Sequence[str]] = None) -> List[Problem]:
    """Rules of topology/block (block_record.c) plus node coverage."""
    blocks = fabric.blocks
    if not blocks:
        return [Problem(ERROR, "no blocks: slurmctld cannot use topology/block without them")]
    origins = {b.name: b.origin for b in blocks}
    out = _names([b.name for b in blocks], "block", origins)
    why = valid_block_sizes(fabric.block_sizes)
    if why:
        out.append(Problem(ERROR, why))
    base = fabric.block_sizes[0] if fabric.block_sizes else None
    if not any(b.nodes for b in blocks):
        out.append(Problem(ERROR, "no block has nodes: slurmctld needs at least one"
                                  + ("" if base else " (or BlockSizes)"), blocks[0].origin))
    for b in blocks:
        if not b.nodes:
            continue  # a placeholder: keeps the positions of the blocks after it
        if base is None:
            base = len(b.nodes)  # without BlockSizes the first block with nodes sets the base
        elif len(b.nodes) < base:
            # slurmctld loads it (block_record.c does not refuse it) but never
            # fills a base block there; topograph writes such blocks for a
            # sub-domain smaller than the largest
            out.append(Problem(WARNING, f"block {b.name!r} has {len(b.nodes)} nodes, fewer "
                                        f"than the base block size {base}: Slurm never "
                                        "places a whole base block there", b.origin))
    seen: Counter = Counter(h for b in blocks for h in set(b.nodes))
    multi = [h for h, c in seen.items() if c > 1]
    if multi:
        out.append(Problem(REFUSE, f"{len(multi)} node(s) are in more than one block: "
                                   f"{sample_hosts(multi)}"))
    return out + _coverage(set(seen), slurm_nodes, "block")


#: the first release that reads topology.yaml (and then ignores TopologyPlugin)
TOPOLOGY_YAML_SINCE = (25, 5, 0)
#: topology/ring and topology/torus3d are new in 26.05
RING_TORUS_SINCE = (26, 5, 0)
#: TopologyPlugin values that read no topology file (slurm.conf(5); the
#: default is topology/flat, called topology/none before 23.11)
_FLAT = {"", "none", "default", "flat"}


def topology_plugin(value: Optional[str]) -> str:
    """``topology/tree`` -> ``tree``; no TopologyPlugin (or none, default,
    flat) -> ``flat``."""
    name = (value or "").strip().lower()
    name = name[len("topology/"):] if name.startswith("topology/") else name
    return "flat" if name in _FLAT else name


def check_plugin(fmt: str, slurm: Optional[SlurmConf], slurm_version=None,
                 yaml_beside: bool = False) -> List[Problem]:
    """The file format against slurm.conf's ``TopologyPlugin`` (when
    ``slurm`` is given) and the Slurm release (``slurm_version``, a tuple;
    None: current releases).

    topology/tree and topology/block read topology.conf with different
    keys: a block file under topology/tree (or the reverse) stops
    slurmctld with ``fatal:`` (an error: never written). Without a
    TopologyPlugin nothing reads topology.conf (a warning). topology.yaml
    is read from 25.05 on, and then wins over TopologyPlugin and
    topology.conf: an older release ignores it (refused), and a
    topology.conf where ``yaml_beside`` (a topology.yaml next to
    slurm.conf) is ignored by current releases (refused)."""
    plugin = slurm.topology_plugin if slurm is not None else None
    have = topology_plugin(plugin) if slurm is not None else None
    old = slurm_version is not None and tuple(slurm_version) < TOPOLOGY_YAML_SINCE
    out: List[Problem] = []
    if fmt == "yaml":
        if old:
            out.append(Problem(REFUSE, f"Slurm {slurm_version[0]}.{slurm_version[1]:02d} reads no "
                                       "topology.yaml (25.05 and later do): write topology.conf "
                                       "(--format tree or block) for it"))
        elif have in ("tree", "block"):
            out.append(Problem(WARNING, f"slurm.conf's TopologyPlugin=topology/{have} is ignored "
                                        "once topology.yaml exists (Slurm 25.05+); remove it "
                                        "from slurm.conf"))
        return out
    if have is None:
        pass
    elif have in ("tree", "block") and have != fmt:
        out.append(Problem(ERROR, f"slurm.conf has TopologyPlugin=topology/{have}: slurmctld "
                                  f"stops with fatal: on a topology.conf for topology/{fmt}; "
                                  f"give --format {have}, or set TopologyPlugin=topology/{fmt} in "
                                  "slurm.conf and restart slurmctld before writing this file"))
    elif have == "flat":
        out.append(Problem(WARNING, f"slurm.conf sets no TopologyPlugin (topology/flat): Slurm "
                                    "does not read topology.conf until it says "
                                    f"TopologyPlugin=topology/{fmt} (slurmctld restarted)"))
    elif have != fmt:
        out.append(Problem(WARNING, f"slurm.conf has TopologyPlugin={plugin}, which does not "
                                    f"read a topology/{fmt} file"))
    if yaml_beside and not old:
        out.append(Problem(REFUSE, "a topology.yaml sits next to slurm.conf: Slurm 25.05+ reads "
                                   "it and ignores TopologyPlugin and topology.conf; remove it, "
                                   "or write topology.yaml (--format yaml); give --slurm-version "
                                   "for an older release"))
    return out


def check_text(text: str, what: str) -> List[Problem]:
    """The file as Slurm's parser reads it: not empty, no line it would cut."""
    out: List[Problem] = []
    has_content = any(body.strip() for _n, body, _c in logical_lines(text))
    for n, raw in enumerate(text.splitlines(), 1):
        if len(raw) > MAX_LINE:
            out.append(Problem(ERROR, f"{what} line {n} is {len(raw)} characters long; Slurm "
                                      f"reads at most {MAX_LINE}"))
    if not has_content:
        out.append(Problem(ERROR, f"{what} would be empty"))
    return out


def raise_first_error(problems: Sequence[Problem]) -> None:
    """For readers: the first error-level problem becomes an InventoryError."""
    for p in problems:
        if p.severity == ERROR:
            path, line = None, None
            if p.origin:
                head, _, tail = p.origin.rpartition(":")
                path, line = (head, int(tail)) if tail.isdigit() else (p.origin, None)
            raise InventoryError(p.message, path, line)


def enforce(problems: Sequence[Problem], what: str, force: bool = False, echo=None) -> None:
    """Print every problem; stop (SlurmtopoError) on errors, and on refusals
    unless ``force``."""
    echo = echo or (lambda s: None)
    for p in problems:
        tag = {"error": "error", "refuse": "refused" if not force else "forced",
               "warning": "warning"}[p.severity]
        echo(f"{tag}: {p.render()}")
    errors = [p for p in problems if p.severity == ERROR]
    refusals = [p for p in problems if p.severity == REFUSE]
    if errors:
        raise SlurmtopoError(f"not writing {what}: {len(errors)} problem(s) Slurm would reject; "
                             f"first: {errors[0].render()}")
    if refusals and not force:
        raise SlurmtopoError(f"not writing {what}: {refusals[0].render()} "
                             "(--force writes it anyway)")
