"""Reading Slurm's ``key=value`` configuration files the way Slurm does.

slurm.conf, topology.conf and gres.conf share one syntax (Slurm's
``parse_config.c``): ``#`` starts a comment unless escaped, a line ending in
an odd number of backslashes continues on the next one, keys are
case-insensitive, a value is either ``"quoted with spaces"`` or runs to the
next whitespace. Slurm reads a logical line into a 4096-byte buffer, so a
longer line is silently cut; :data:`MAX_LINE` lets the writers refuse it.

:func:`conf_lines` is the one tokenizer the readers share; it keeps the line
number of every logical line (and its trailing comment) so each complaint can
name ``file:line``. :func:`read_slurm_conf` pulls out what the admin tooling
needs from slurm.conf: the nodes (``NodeName=``, with ``NodeHostname=`` and
``Gres=``), following ``Include`` lines, and the ``TopologyPlugin``.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

from slurmtopo.errors import InventoryError
from slurmtopo.files.fileio import read_text as read_bounded
from slurmtopo.inventory.hostlist import expand_hostlist, expand_in_order
from slurmtopo.inventory.model import CpuTopology
from slurmtopo.inventory.schema import NODE_NAME

#: Slurm's parse buffer is 4096 bytes including the terminating NUL
MAX_LINE = 4095

_KV = re.compile(r'\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')


@dataclass(frozen=True)
class ConfLine:
    """One logical line: ``pairs`` in order, keys as written."""

    line: int
    pairs: Tuple[Tuple[str, str], ...]
    comment: str = ""

    @property
    def first_key(self) -> str:
        return self.pairs[0][0].lower()

    def get(self, key: str) -> Optional[str]:
        key = key.lower()
        for k, v in self.pairs:
            if k.lower() == key:
                return v
        return None


def split_comment(text: str) -> Tuple[str, str]:
    """Cut at the first ``#`` not preceded by an odd run of backslashes."""
    bs = 0
    for i, ch in enumerate(text):
        if ch == "#" and bs % 2 == 0:
            return text[:i], text[i + 1:].strip()
        bs = bs + 1 if ch == "\\" else 0
    return text, ""


def _continues(text: str) -> Tuple[str, bool]:
    stripped = text.rstrip()
    run = len(stripped) - len(stripped.rstrip("\\"))
    if run % 2 == 1:
        return stripped[:-1], True
    return text, False


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def logical_lines(text: str) -> Iterator[Tuple[int, str, str]]:
    """(first line number, content without comment, comment) per logical line."""
    buf: List[str] = []
    comments: List[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        if not buf:
            start = n
        body, comment = split_comment(raw)
        if comment:
            comments.append(comment)
        body, more = _continues(body)
        buf.append(body)
        if more:
            continue
        yield start, _unescape("".join(buf)), " ".join(comments)
        buf, comments = [], []
    if buf:
        yield start, _unescape("".join(buf)), " ".join(comments)


def parse_pairs(body: str) -> List[Tuple[str, str]]:
    """``A=1 B="x y"`` -> [("A", "1"), ("B", "x y")]; ValueError on junk."""
    pairs: List[Tuple[str, str]] = []
    pos = 0
    while pos < len(body):
        if body[pos:].strip() == "":
            break
        m = _KV.match(body, pos)
        if not m:
            junk = body[pos:].split()[0]
            raise ValueError(f"expected Key=Value, got {junk!r}")
        if m.group(2):
            raise ValueError(f"operator {m.group(2)}= is not supported here ({m.group(1)})")
        value = m.group(3) if m.group(3) is not None else m.group(4)
        pairs.append((m.group(1), value))
        pos = m.end()
    return pairs


def conf_lines(text: str, path: str) -> Iterator[ConfLine]:
    """Every non-empty logical line of a Slurm config file, tokenized."""
    for n, body, comment in logical_lines(text):
        if not body.strip():
            continue
        try:
            pairs = parse_pairs(body)
        except ValueError as exc:
            raise InventoryError(str(exc), path, n) from None
        yield ConfLine(n, tuple(pairs), comment)


def read_text(path) -> str:
    """A Slurm config file's text (bounded: :func:`slurmtopo.files.fileio.read_text`)."""
    return read_bounded(path)


def hostlist_at(value: str, path: str, line: int, what: str,
                ordered: bool = False) -> List[str]:
    """Expand a hostlist from a config file, or fail at file:line;
    ``ordered``: in the order written (a ring's, a torus's), not sorted."""
    try:
        names = expand_in_order(value, what) if ordered else expand_hostlist(value, what)
    except ValueError as exc:
        raise InventoryError(str(exc), path, line) from None
    for name in names:
        if not name or any(c.isspace() for c in name) or not name.isprintable():
            raise InventoryError(f"bad {what} {value!r}", path, line)
    return names


# --------------------------------------------------------------------------
# slurm.conf


@dataclass
class SlurmConf:
    """What the admin tooling needs from slurm.conf."""

    #: node name -> its NodeName line's keys (lower-case) and values
    nodes: Dict[str, Dict[str, str]] = field(default_factory=dict)
    #: NodeHostname -> NodeName, where they differ
    hostnames: Dict[str, str] = field(default_factory=dict)
    topology_plugin: Optional[str] = None
    path: Optional[str] = None
    #: partition name -> its PartitionName line's keys (lower-case) and values
    partitions: Dict[str, Dict[str, str]] = field(default_factory=dict)
    #: node name -> the CPU layout its NodeName line declares (absent: none)
    layouts: Dict[str, CpuTopology] = field(default_factory=dict)
    #: SwitchType (switch/nvidia_imex: IMEX channels per job or segment)
    switch_type: Optional[str] = None
    #: TopologyParam, as written (e.g. SwitchAsNodeRank,BlockAsNodeRank)
    topology_param: Optional[str] = None

    def partition_topology(self, partition: Optional[str]) -> Optional[str]:
        """The ``Topology=`` of a partition (Slurm 25.05+ topology.yaml
        name); None when it sets none (the cluster default applies)."""
        if partition is None:
            defaults = [n for n, v in self.partitions.items() if v.get("default", "").upper() == "YES"]
            partition = defaults[0] if defaults else None
        if partition is None:
            return None
        return self.partitions.get(partition, {}).get("topology")

    def node_names(self) -> List[str]:
        return list(self.nodes)

    def cpu_layout(self, node: str) -> Optional[CpuTopology]:
        """The sockets, cores and threads slurm.conf declares for ``node``
        (Slurm's own inference from CPUs=, Boards=, ...), or None when its
        NodeName line declares none of them. gres.conf ``Cores=`` index
        this layout's cores: 0 to sockets x cores_per_socket - 1."""
        return self.layouts.get(node)

    def gres(self, node: str) -> str:
        return self.nodes.get(node, {}).get("gres", "")


_INCLUDE = re.compile(r"^\s*include\s+(\S.*?)\s*$", re.IGNORECASE)


def parse_slurm_conf(text: str, path: str = "<slurm.conf>", _depth: int = 0,
                     conf: Optional[SlurmConf] = None) -> SlurmConf:
    """Nodes and TopologyPlugin of a slurm.conf text (Include files read too)."""
    conf = conf if conf is not None else SlurmConf(path=path)
    defaults: Dict[str, str] = {}
    part_defaults: Dict[str, str] = {}
    for n, body, _comment in logical_lines(text):
        if not body.strip():
            continue
        inc = _INCLUDE.match(body)
        if inc:
            _include(inc.group(1), path, n, _depth, conf)
            continue
        try:
            pairs = parse_pairs(body)
        except ValueError as exc:
            raise InventoryError(str(exc), path, n) from None
        if not pairs:
            continue
        key = pairs[0][0].lower()
        if key == "topologyplugin":
            conf.topology_plugin = pairs[0][1]
        if key == "switchtype":
            conf.switch_type = pairs[0][1]
        if key == "topologyparam":
            conf.topology_param = pairs[0][1]
        if key == "partitionname":
            values = {k.lower(): v for k, v in pairs[1:]}
            if pairs[0][1].upper() == "DEFAULT":
                part_defaults.update(values)
            else:
                conf.partitions[pairs[0][1]] = dict(part_defaults, **values)
            continue
        if key != "nodename":
            continue
        values = {k.lower(): v for k, v in pairs[1:]}
        if pairs[0][1].upper() == "DEFAULT":
            defaults.update(values)
            continue
        names = hostlist_at(pairs[0][1], path, n, "NodeName")

        odd = next((name for name in names if not NODE_NAME.match(name)), None)
        if odd is not None:
            raise InventoryError(f"NodeName {odd!r} is not a host name (letters, digits, '.', "
                                 "'_' and '-' only)", path, n)
        merged = dict(defaults, **values)
        layout = declared_layout(merged, path, n)
        hosts = None
        if "nodehostname" in values:
            hosts = hostlist_at(values["nodehostname"], path, n, "NodeHostname")
            if len(hosts) != len(names):
                raise InventoryError(f"NodeHostname lists {len(hosts)} hosts for {len(names)} "
                                     "nodes", path, n)
        for i, name in enumerate(names):
            conf.nodes[name] = merged
            if layout is not None:
                conf.layouts[name] = layout
            if hosts is not None and hosts[i] != name:
                conf.hostnames[hosts[i]] = name
    return conf


#: NodeName keys that describe the CPU layout (Slurm reads each as uint16),
#: lower case -> as written in slurm.conf(5)
LAYOUT_KEYS = {"cpus": "CPUs", "procs": "Procs", "boards": "Boards", "sockets": "Sockets",
               "socketsperboard": "SocketsPerBoard", "corespersocket": "CoresPerSocket",
               "threadspercore": "ThreadsPerCore"}


def declared_layout(values: Dict[str, str], path: str, line: int) -> Optional[CpuTopology]:
    """The CPU layout of a NodeName line's (lower-case) keys, inferred the
    way slurmctld does (read_config.c): missing CoresPerSocket, ThreadsPerCore
    and Boards are 1, a zero is read as 1; Sockets are Boards x
    SocketsPerBoard when that is given, else Sockets=, else CPUs / (cores x
    threads) when that divides, else Boards. None when the line gives none
    of these keys (the layout is then whatever slurmd reports)."""
    if not any(k in values for k in LAYOUT_KEYS):
        return None

    def number(key: str) -> Optional[int]:
        if key not in values:
            return None
        text = values[key].strip()
        if not text.isdigit() or int(text) > 0xFFFF:
            raise InventoryError(f"{LAYOUT_KEYS[key]}={values[key]!r} is not a number from 0 to "
                                 "65535", path, line)
        return int(text) or 1

    cores, threads = number("corespersocket") or 1, number("threadspercore") or 1
    boards, per_board = number("boards") or 1, number("socketsperboard")
    cpus = number("cpus") or number("procs")
    if per_board is not None:
        sockets = boards * per_board
    elif number("sockets") is not None:
        sockets = number("sockets")
    elif cpus and cpus // (cores * threads) and not cpus % (cores * threads):
        sockets = cpus // (cores * threads)
    else:
        sockets = boards
    return CpuTopology(sockets=sockets, cores_per_socket=cores, threads_per_core=threads)


def _include(pattern: str, path: str, line: int, depth: int, conf: SlurmConf) -> None:
    if depth > 8:
        raise InventoryError("Include nested too deeply", path, line)
    pattern = pattern.strip().strip('"')
    if not os.path.isabs(pattern):
        pattern = os.path.join(os.path.dirname(os.path.abspath(path)), pattern)
    matches = sorted(glob.glob(pattern))
    if not matches:
        raise InventoryError(f"Include: no file matches {pattern}", path, line)
    for inc in matches:
        parse_slurm_conf(read_text(inc), inc, depth + 1, conf)


def read_slurm_conf(path) -> SlurmConf:
    path = os.fspath(path)
    conf = parse_slurm_conf(read_text(path), path)
    if not conf.nodes:
        raise InventoryError("no NodeName= lines found", path)
    return conf
