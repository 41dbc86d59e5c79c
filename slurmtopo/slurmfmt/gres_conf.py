"""One gres.conf for the whole cluster, from the node agents' lines.

The agent knows each node's GPUs and prints one gres.conf line per GPU
(:func:`.gres_lines.gres_lines`): ``Name=gpu Type=h100
File=/dev/nvidia0 Cores=0-47 Links=-1,18,...``. Here the lines of all nodes
become one file: nodes with identical lines share one ``NodeName=<hostlist>``
block. gres.conf(5) allows a hostlist in NodeName and a range in File, but
"if Links is specified, then this line can only contain a single GRES
device", so only lines without ``Links`` are merged into
``File=/dev/nvidia[0-3]``; lines with ``Links`` stay one device each.

The reader (:func:`parse_gres_conf`) takes an existing gres.conf so
``--diff`` and the checks can compare, with ``file:line`` errors for lines
Slurm would refuse (unknown keys, ``Links`` on a multi-device line, ``Count``
not matching the files, ``File`` together with ``MultipleFiles``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from slurmtopo.errors import InventoryError
from slurmtopo.inventory.hostlist import fold_hostlist, natural_key
from slurmtopo.inventory.model import CpuTopology, Node, format_cpulist, parse_cpulist
from slurmtopo.slurmfmt.checks import ERROR, REFUSE, WARNING, Problem, sample_hosts
from slurmtopo.slurmfmt.gres_lines import gres_lines
from slurmtopo.slurmfmt.gres_strings import gres_by_type, gres_count
from slurmtopo.slurmfmt.slurm_conf import (SlurmConf, conf_lines, hostlist_at, parse_pairs,
                                           read_text, split_comment)

GRES_KEYS = {"nodename", "name", "type", "file", "multiplefiles", "cores", "cpus", "links",
             "count", "flags", "autodetect"}
#: GRES whose Count is a share of a device, not a device count (gres.conf(5))
SHARING = {"mps", "shard"}
_DEV_NUM = re.compile(r"^(.*?)(\d+)$")

#: (node, its report block or None) -> the node's gres.conf lines
LinesOf = Callable[[Node, Optional[Mapping[str, object]]], Sequence[str]]
Pairs = Tuple[Tuple[str, str], ...]


def agent_gres_lines(slurm_version=None, slurm: Optional[SlurmConf] = None) -> LinesOf:
    """The node agent's per-node gres.conf lines (:mod:`.gres_lines`):
    one line per GPU, leaving out GPUs the report says NVML lost, in the
    format of ``slurm_version`` (None: current releases).

    ``Cores=`` are Slurm's core indices, so CPU ids are translated with the
    node's layout: the report's, else the one ``slurm`` declares for the
    node (whose CPUs must then hold every CPU of the report: else the
    report and slurm.conf describe different machines, refused naming
    both), else one thread per core."""
    def lines_of(node: Node, report: Optional[Mapping[str, object]]) -> Sequence[str]:
        lost = tuple((report or {}).get("lost_gpus") or ())
        declared = None
        if node.hardware.cpu is None and slurm is not None:
            declared = slurm.cpu_layout(node.name)
            if declared is not None:
                _fits_declared(node, declared)
        return gres_lines(node, lost=lost, slurm_version=slurm_version, cpu=declared)

    return lines_of


def describe_layout(cpu: CpuTopology) -> str:
    """``2 socket(s) x 8 core(s) x 1 thread(s)`` (slurm.conf's Sockets,
    CoresPerSocket, ThreadsPerCore)."""
    return (f"{cpu.sockets} socket(s) x {cpu.cores_per_socket} core(s) x "
            f"{cpu.threads_per_core} thread(s)")


def _fits_declared(node: Node, cpu: CpuTopology) -> None:
    """Every GPU's CPUs exist in the layout slurm.conf declares, or
    InventoryError naming the node, the GPU and both numbers."""
    ncpus = cpu.cores * cpu.threads_per_core
    for gpu in node.hardware.gpus:
        if gpu.cpus and max(gpu.cpus) >= ncpus:
            raise InventoryError(
                f"node {node.name}: GPU {gpu.index}'s CPUs {format_cpulist(gpu.cpus)} go past "
                f"the {ncpus} CPUs slurm.conf declares for it ({describe_layout(cpu)}): the "
                "report and slurm.conf's NodeName line describe different machines; fix the "
                "NodeName line (slurmd -C prints the real one)")


def _normalise(line: str) -> Tuple[Pairs, str]:
    """(key/value pairs without NodeName, trailing comment) of one line."""
    body, comment = split_comment(line.strip())
    pairs = parse_pairs(body)
    return tuple((k, v) for k, v in pairs if k.lower() != "nodename"), comment


def _merge_devices(lines: List[Pairs]) -> List[Pairs]:
    """Consecutive one-device lines that differ only in File (and carry no
    Links or Count) become one line with a File range."""
    out: List[Pairs] = []
    run: List[Pairs] = []

    def key(pairs):
        keys = [k.lower() for k, _ in pairs]
        if "links" in keys or "count" in keys or keys.count("file") != 1:
            return None
        f = dict((k.lower(), v) for k, v in pairs)["file"]
        if "[" in f or "," in f or not _DEV_NUM.match(f):
            return None
        return tuple((k.lower(), v) for k, v in pairs if k.lower() != "file")

    def flush():
        if not run:
            return
        if len(run) == 1:
            out.append(run[0])
        else:
            files = [dict((k.lower(), v) for k, v in p)["file"] for p in run]
            out.append(tuple((k, fold_hostlist(files) if k.lower() == "file" else v)
                             for k, v in run[0]))
        run.clear()

    for pairs in lines:
        k = key(pairs)
        if run and (k is None or k != key(run[0])):
            flush()
        if k is None:
            out.append(pairs)
        else:
            run.append(pairs)
    flush()
    return out


def _text(pairs: Iterable[Tuple[str, str]]) -> str:
    return " ".join(f'{k}="{v}"' if (not v or any(c.isspace() for c in v)) else f"{k}={v}"
                    for k, v in pairs)


def cluster_gres_conf(nodes: Iterable[Node], reports: Optional[Mapping[str, Mapping]] = None,
                      lines_of: Optional[LinesOf] = None,
                      header: Sequence[str] = (), slurm_version=None,
                      slurm: Optional[SlurmConf] = None) -> Tuple[str, List[str]]:
    """(gres.conf text, notes) for ``nodes``; identical nodes folded.

    Trailing comments of the agent's lines (a MIG's ``# UniqueId=``) are
    kept for a node alone in its block; they differ per node, so they are
    not a reason to keep identical nodes apart."""
    lines_of = lines_of or agent_gres_lines(slurm_version, slurm)
    reports = reports or {}
    groups: Dict[Tuple[Pairs, ...], List[str]] = {}
    comments: Dict[str, Tuple[str, ...]] = {}
    no_gpus: List[str] = []
    for node in nodes:
        try:
            parsed = [_normalise(ln) for ln in lines_of(node, reports.get(node.name))
                      if ln.strip()]
        except ValueError as exc:
            raise InventoryError(f"gres line of node {node.name}: {exc}") from None
        lines = tuple(p for p, _c in parsed if p)
        if not lines:
            no_gpus.append(node.name)
            continue
        comments[node.name] = tuple(c for p, c in parsed if p)
        groups.setdefault(lines, []).append(node.name)
    notes = []
    if no_gpus:
        notes.append(f"{len(no_gpus)} node(s) have no GRES lines (no GPUs): "
                     f"{sample_hosts(no_gpus)}")
    out = [f"# {h}".rstrip() for h in header]
    ordered = sorted(groups.items(), key=lambda kv: natural_key(min(kv[1], key=natural_key)))
    for lines, names in ordered:
        nodelist = fold_hostlist(names)
        out.append(f"# {len(names)} node(s), {len(lines)} device line(s)")
        if len(names) == 1 and any(comments[names[0]]):
            for pairs, comment in zip(lines, comments[names[0]]):
                out.append(f"NodeName={nodelist} {_text(pairs)}"
                           + (f"  # {comment}" if comment else ""))
            continue
        for pairs in _merge_devices(list(lines)):
            out.append(f"NodeName={nodelist} {_text(pairs)}")
    return "\n".join(out) + "\n", notes


# --------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class GresLine:
    line: int
    nodes: Optional[Tuple[str, ...]]  # None: the line applies to every node
    name: Optional[str]
    type: Optional[str] = None
    files: Tuple[str, ...] = ()
    multiple_files: Tuple[str, ...] = ()
    cores: Optional[str] = None
    links: Optional[Tuple[int, ...]] = None
    count: Optional[int] = None
    flags: Optional[str] = None
    autodetect: Optional[str] = None

    @property
    def devices(self) -> int:
        """How many GRES this line gives each of its nodes."""
        if self.name in SHARING:
            return self.count or 0
        if self.files:
            return len(self.files)
        if self.multiple_files:
            return 1
        return self.count if self.count is not None else 1


def parse_gres_conf(text: str, path: str = "<gres.conf>") -> List[GresLine]:
    """Every line of a gres.conf; InventoryError at file:line for lines Slurm
    would refuse."""
    out: List[GresLine] = []
    for cl in conf_lines(text, path):
        d: Dict[str, str] = {}
        for i, (key, value) in enumerate(cl.pairs):
            k = key.lower()
            if k not in GRES_KEYS:
                raise InventoryError(f"unknown gres.conf key {key!r}", path, cl.line)
            if k in d:
                raise InventoryError(f"{key} given twice on one line", path, cl.line)
            if k == "nodename" and i != 0:
                raise InventoryError("NodeName must be the first parameter of the line",
                                     path, cl.line)
            d[k] = value
        nodes = tuple(hostlist_at(d["nodename"], path, cl.line, "NodeName")) \
            if "nodename" in d else None
        if "name" not in d:
            if "autodetect" not in d:
                raise InventoryError("a gres.conf line needs Name= (or AutoDetect=)", path, cl.line)
            out.append(GresLine(cl.line, nodes, None, autodetect=d["autodetect"]))
            continue
        if "file" in d and "multiplefiles" in d:
            raise InventoryError("File and MultipleFiles are mutually exclusive", path, cl.line)
        files = tuple(hostlist_at(d["file"], path, cl.line, "File")) if "file" in d else ()
        multi = tuple(hostlist_at(d["multiplefiles"], path, cl.line, "MultipleFiles")) \
            if "multiplefiles" in d else ()
        links = None
        if "links" in d:
            try:
                links = tuple(int(x) for x in d["links"].split(","))
            except ValueError:
                raise InventoryError(f"Links must be comma-separated numbers, got "
                                     f"{d['links']!r}", path, cl.line) from None
            if len(files) > 1:  # MultipleFiles is one device with several files
                raise InventoryError("Links= allows a single device per line, this line has "
                                     f"{len(files)} files", path, cl.line)
        cores = d.get("cores", d.get("cpus"))
        if cores is not None:
            try:
                parse_cpulist(cores)
            except ValueError as exc:
                raise InventoryError(f"bad Cores {cores!r}: {exc}", path, cl.line) from None
        count = None
        if "count" in d:
            try:
                count = gres_count(d["count"])
            except ValueError as exc:
                raise InventoryError(str(exc), path, cl.line) from None
            name = d["name"].lower()
            if files and name not in SHARING and count != len(files):
                raise InventoryError(f"Count={count} but File names {len(files)} device(s)",
                                     path, cl.line)
        out.append(GresLine(cl.line, nodes, d["name"], d.get("type"), files, multi, cores, links,
                            count, d.get("flags"), d.get("autodetect")))
    return out


def read_gres_conf(path) -> List[GresLine]:
    return parse_gres_conf(read_text(path), str(path))


def gres_counts(lines: Sequence[GresLine], node: str, name: str = "gpu") -> Dict[Optional[str], int]:
    """Type -> device count of GRES ``name`` that ``lines`` give ``node``."""
    out: Dict[Optional[str], int] = {}
    for ln in lines:
        if ln.name is None or ln.name.lower() != name:
            continue
        if ln.nodes is not None and node not in ln.nodes:
            continue
        out[ln.type] = out.get(ln.type, 0) + ln.devices
    return out


def check_gres(lines: Sequence[GresLine], slurm: Optional[SlurmConf] = None,
               path: Optional[str] = None) -> List[Problem]:
    """A gres.conf against slurm.conf: every node slurm.conf gives GPUs must
    get them here, with the same count (and types, when given), and Cores=
    Slurm can read for the node's declared layout (:func:`check_cores`).
    ``path`` (a file read back) locates the problems of one line."""
    out: List[Problem] = []
    named = {h for ln in lines if ln.nodes for h in ln.nodes}
    if slurm is None:
        return out
    out += check_cores(lines, slurm, path)
    unknown = named - set(slurm.nodes)
    if unknown:
        out.append(Problem(WARNING, f"{len(unknown)} node(s) of gres.conf are not in slurm.conf: "
                                    f"{sample_hosts(unknown)}"))
    lost, wrong, untyped = [], [], []
    for node in slurm.nodes:
        want = gres_by_type(slurm.gres(node))
        if not want:
            continue
        have = gres_counts(lines, node)
        if not have:
            lost.append(node)
            continue
        if None in want and len(want) == 1:
            ok = sum(have.values()) == want[None]
            if ok and any(t is not None for t in have):
                untyped.append(node)
        else:
            ok = all(have.get(t, 0) == n for t, n in want.items() if t is not None) and \
                sum(have.values()) == sum(want.values())
        if not ok:
            wrong.append(f"{node} (slurm.conf {want}, gres.conf {have})")
    if lost:
        out.append(Problem(REFUSE, f"{len(lost)} node(s) have GPUs in slurm.conf (Gres=gpu...) "
                                   f"but no GPU in gres.conf: {sample_hosts(lost)}"))
    if wrong:
        out.append(Problem(REFUSE, f"{len(wrong)} node(s) have GPU counts or types that differ "
                                   f"from slurm.conf (slurmd would mark them invalid): "
                                   + "; ".join(wrong[:3])))
    if untyped:
        # slurmd accepts this, but the controller then knows no GPU type on
        # these nodes: a job asking --gpus-per-node=<type>:N is refused
        types = sorted({t for h in untyped for t in gres_counts(lines, h) if t is not None})
        out.append(Problem(WARNING, f"{len(untyped)} node(s) have untyped Gres=gpu:N in "
                                    f"slurm.conf but Type={','.join(types)} in gres.conf: jobs "
                                    f"that ask for the type are refused; declare "
                                    f"Gres=gpu:<type>:N in slurm.conf: {sample_hosts(untyped)}"))
    return out


def check_cores(lines: Sequence[GresLine], slurm: SlurmConf,
                path: Optional[str] = None) -> List[Problem]:
    """``Cores=`` of every line against the layout slurm.conf declares for
    each of its nodes (nodes that declare none are not checked).

    gres.conf ``Cores=`` are Slurm's core indices, 0 to Sockets x
    CoresPerSocket - 1 of the node as slurm.conf declares it, not CPU ids.
    slurmctld reads them into a bitmap of that size: an index past it is
    ``invalid GRES core specification`` and the node goes INVAL (an error:
    never written). Slurm 25.11 also wants each line's cores to be one
    whole socket or all of them ("doesn't match socket boundaries", the
    node is drained); 22.05 accepts other sets, so that one is a refusal
    (``--force`` writes it). That rule is checked only where the NodeName
    line gives CoresPerSocket: from CPUs= alone Slurm's sockets are a guess.
    """
    past: Dict[Tuple[int, str, Tuple[str, ...]], List[GresLine]] = {}
    split: Dict[Tuple[int, int, Tuple[str, ...]], List[GresLine]] = {}
    for ln in lines:
        if ln.cores is None:
            continue
        cores = set(parse_cpulist(ln.cores))
        if not cores:
            continue
        over: Dict[Tuple[int, str], List[str]] = {}
        uneven: Dict[Tuple[int, int], List[str]] = {}
        for node in ln.nodes if ln.nodes is not None else tuple(slurm.nodes):
            cpu = slurm.cpu_layout(node)
            if cpu is None:
                continue
            if max(cores) >= cpu.cores:
                over.setdefault((cpu.cores, describe_layout(cpu)), []).append(node)
            elif ("corespersocket" in slurm.nodes[node] and len(cores) != cpu.cores
                  and not _one_socket(cores, cpu.cores_per_socket)):
                uneven.setdefault((cpu.sockets, cpu.cores_per_socket), []).append(node)
        for key, names in over.items():
            past.setdefault(key + (tuple(names),), []).append(ln)
        for key, names in uneven.items():
            split.setdefault(key + (tuple(names),), []).append(ln)
    out: List[Problem] = []
    for (total, layout, names), bad in past.items():
        out.append(Problem(ERROR, f"{_which(bad, path)}Cores={_cores_of(bad)} for "
                                  f"{sample_hosts(names)}, but slurm.conf declares {total} cores "
                                  f"there ({layout}: core indices 0-{total - 1}); slurmctld "
                                  "marks the node(s) INVAL ('invalid GRES core "
                                  "specification'). Cores= are core indices, not CPU ids: fix "
                                  "the reports or slurm.conf's NodeName line",
                           f"{path}:{bad[0].line}" if path else None))
    for (sockets, per_socket, names), bad in split.items():
        out.append(Problem(REFUSE, f"{_which(bad, path)}Cores={_cores_of(bad)} for "
                                   f"{sample_hosts(names)}: a line's cores must be one whole "
                                   f"socket or all {sockets} (slurm.conf: {per_socket} cores per "
                                   f"socket, socket 0 is cores 0-{per_socket - 1}); Slurm 25.11 "
                                   "drains the node(s) ('doesn't match socket boundaries'), "
                                   "22.05 takes it",
                           f"{path}:{bad[0].line}" if path else None))
    return out


def layout_differences(nodes: Iterable[Node], slurm: Optional[SlurmConf]) -> List[Problem]:
    """Nodes whose report gives another number of cores than slurm.conf
    declares (a warning: the Cores= check says what Slurm would refuse;
    this says why)."""
    if slurm is None:
        return []
    differ: Dict[Tuple[str, str], List[str]] = {}
    for node in nodes:
        have, declared = node.hardware.cpu, slurm.cpu_layout(node.name)
        if have is not None and declared is not None and have.cores != declared.cores:
            differ.setdefault((describe_layout(have), describe_layout(declared)),
                              []).append(node.name)
    return [Problem(WARNING, f"{sample_hosts(names)}: the node reports say {have}, slurm.conf "
                             f"declares {declared}")
            for (have, declared), names in sorted(differ.items())]


def _which(lines: Sequence[GresLine], path: Optional[str]) -> str:
    """``gres.conf line(s) 4-11: `` (nothing when ``path`` locates them)."""
    if path and len(lines) == 1:
        return ""
    numbers = format_cpulist(ln.line for ln in lines)
    return f"line(s) {numbers}: " if path else f"gres.conf line(s) {numbers}: "


def _cores_of(lines: Sequence[GresLine]) -> str:
    values = list(dict.fromkeys(ln.cores for ln in lines))
    return " / ".join(values[:4]) + (" ..." if len(values) > 4 else "")


def _one_socket(cores: Set[int], per_socket: int) -> bool:
    first = min(cores) // per_socket * per_socket
    return cores == set(range(first, first + per_socket))


def describe_changes(old: Sequence[GresLine], new: Sequence[GresLine]) -> List[str]:
    """Which nodes' GRES lines change."""
    def per_node(lines):
        out: Dict[str, List[Tuple]] = {}
        for ln in lines:
            for h in ln.nodes or ("(all nodes)",):
                out.setdefault(h, []).append((ln.name, ln.type, ln.files, ln.multiple_files,
                                              ln.cores, ln.links, ln.count, ln.flags,
                                              ln.autodetect))
        return out
    a, b = per_node(old), per_node(new)
    msgs = []
    for label, names in (("added", set(b) - set(a)), ("removed", set(a) - set(b)),
                         ("changed", {h for h in set(a) & set(b) if a[h] != b[h]})):
        names = [n for n in names if n != "(all nodes)"]
        if names:
            msgs.append(f"nodes {label}: {fold_hostlist(names)}")
    return msgs
