"""Read the text of ``nvidia-smi topo -m`` into a node report (offline).

Admins already collect this with pdsh, so the agent accepts it as a source
where NVML cannot be run. Real outputs vary a lot, and all of these are
read:

* tabs or runs of spaces, trailing tabs, CRLF line ends;
* GPU columns only, or NIC columns named ``NIC0``.. with a ``NIC Legend``
  mapping them to ``mlx5_*``, or RDMA names directly as column headers;
* trailing ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID`` columns
  (any of them missing), ``N/A`` values, hyper-thread CPU lists;
* the legend present or not, a pdsh ``host:`` prefix on every line (a file
  with several hosts is split with :func:`split_hosts`);
* names or cells run together by a lost tab (``NIC8NIC9``, ``NODEPXB``),
  and NIC columns whose rows were not copied (the GPU rows suffice).

What the text cannot say is said in the report: no GPU model, no device
minors (``/dev/nvidiaN`` assumed to follow the index), no per-port NVLink
detail, and a CPU layout inferred from the affinity lists. Bad text raises
:class:`~slurmtopo.errors.InventoryError` naming ``file:line``.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.agent.cpulayout import infer_cpu_layout
from slurmtopo.agent.report import Discovery, report_block, short_hostname
from slurmtopo.errors import InventoryError
from slurmtopo.inventory.links import parse_token, normalise_token
from slurmtopo.inventory.model import Gpu, Hardware, Nic, Node, parse_cpulist

#: cells of ``nvidia-smi topo -p2p r|w|n|a`` (a matrix of the same shape)
P2P_STATUS = frozenset(("OK", "CNS", "GNS", "TNS", "NS", "DR", "U"))
#: multi-word trailing column names, as nvidia-smi spells them
TRAILING = (("GPU", "NUMA", "ID"), ("CPU", "Affinity"), ("NUMA", "Affinity"))
#: most NVLink ports any GPU has had (Hopper and Blackwell: 18); more NVLink
#: lanes to its peers than this means an NVSwitch
MAX_DIRECT_NVLINKS = 18

_GPU_RE = re.compile(r"^GPU(\d+)$")
_HOST_RE = re.compile(r"^([A-Za-z0-9][\w.\-]*):\s(.*)$")
_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
#: terminal escapes (nvidia-smi underlines the header when it thinks it
#: writes to a terminal, e.g. in a batch job with a pseudo-terminal)
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[@-Z\\-_])")
_NIC_COLUMN_RE = re.compile(r"^NIC\d+$")
#: two or more column names or link cells run together: nvidia-smi pads with
#: tabs, and copies from a terminal (or a tab stop landing exactly at a
#: column's end) lose one now and then: ``NIC8NIC9``, ``NODENODE``, ``SYSSYS``
_GLUED_NAMES_RE = re.compile(r"^(?:(?:GPU|NIC)\d+){2,}$")
_GLUED_CELLS_RE = re.compile(r"^(?:X|SYS|NODE|PHB|PXB|PIX|NV\d+){2,}$")
_ONE_NAME_RE = re.compile(r"(?:GPU|NIC)\d+")
_ONE_CELL_RE = re.compile(r"X|SYS|NODE|PHB|PXB|PIX|NV\d+")


def unglue(tokens: List[str]) -> List[str]:
    """Split tokens that are several column names or link cells run
    together (``NIC8NIC9`` -> ``NIC8 NIC9``, ``NODEPXB`` -> ``NODE PXB``).
    No single name or cell has this shape (``NV12`` is one cell), so
    nothing that is read today is split."""
    out: List[str] = []
    for tok in tokens:
        if _GLUED_NAMES_RE.match(tok):
            out += _ONE_NAME_RE.findall(tok)
        elif _GLUED_CELLS_RE.match(tok):
            out += _ONE_CELL_RE.findall(tok)
        else:
            out.append(tok)
    return out


def strip_ansi(line: str) -> str:
    """``\\x1b[4mGPU0\\x1b[0m`` -> ``GPU0``."""
    return _ANSI_RE.sub("", line) if "\x1b" in line else line


def _numbered(text: str) -> "Lines":
    return [(i + 1, strip_ansi(ln.rstrip("\r"))) for i, ln in enumerate(text.splitlines())]


@dataclass
class SmiMatrix:
    """The parsed table, before it becomes a model Node."""

    columns: List[str]  # device columns in header order
    gpus: int
    cells: Dict[Tuple[str, str], str] = field(default_factory=dict)
    extras: Dict[str, Dict[str, Optional[str]]] = field(default_factory=dict)
    row_line: Dict[str, int] = field(default_factory=dict)
    legend: Dict[str, str] = field(default_factory=dict)
    missing_rows: List[str] = field(default_factory=list)  # NIC columns without a row

    @property
    def nic_columns(self) -> List[str]:
        return [c for c in self.columns if not _GPU_RE.match(c)]


#: lines of one host's text with their line numbers in the file
Lines = List[Tuple[int, str]]


def split_hosts(text: str) -> List[Tuple[Optional[str], Lines]]:
    """pdsh output (``host: line``) -> [(host, lines)], hosts in order of
    first appearance; text without host prefixes -> [(None, lines)]. Line
    numbers stay those of the file, so errors point at the right line."""
    numbered = _numbered(text)
    hosts: List[str] = []
    for _, line in numbered:
        m = _HOST_RE.match(line)
        if m and _is_header(m.group(2).split()) and m.group(1) not in hosts:
            hosts.append(m.group(1))
    if not hosts:
        return [(None, numbered)]
    parts: Dict[str, Lines] = {h: [] for h in hosts}
    for no, line in numbered:
        m = _HOST_RE.match(line)
        if m and m.group(1) in parts:
            parts[m.group(1)].append((no, m.group(2)))
    return [(h, parts[h]) for h in hosts]


def parse_matrix(text, path: str = "<nvidia-smi topo -m>") -> SmiMatrix:
    """Parse the table (text, or numbered lines from :func:`split_hosts`);
    raise InventoryError at the first bad line."""
    lines: Lines = text if isinstance(text, list) else _numbered(text)
    head = next((k for k, (_, ln) in enumerate(lines) if _is_header(ln.split())), None)
    if head is None:
        raise InventoryError("no 'nvidia-smi topo -m' table here (no header line starting "
                             "with GPU0)", path)
    head_no = lines[head][0]
    columns, trailing = _header(unglue(lines[head][1].split()), path, head_no)
    gpus = sum(1 for c in columns if _GPU_RE.match(c))
    mx = SmiMatrix(columns=columns, gpus=gpus)
    k = head + 1
    while k < len(lines) and lines[k][1].strip() and not lines[k][1].strip().startswith("Legend"):
        _row(mx, unglue(lines[k][1].split()), trailing, path, lines[k][0])
        k += 1
    for c in columns:
        if c not in mx.row_line:
            if not _GPU_RE.match(c) and mx.row_line:
                # every GPU->NIC relation is in the GPU rows; a NIC row only
                # repeats them (people often paste the GPU rows alone)
                mx.missing_rows.append(c)
                continue
            raise InventoryError(f"column {c} has no row of its own", path, head_no)
    for _, ln in lines[k:]:
        m = _LEGEND_RE.match(ln)
        if m:
            mx.legend[m.group(1)] = m.group(2)
    return mx


def _is_header(tokens: List[str]) -> bool:
    """``GPU0 GPU1 ...`` (not the GPU0 row, whose next cell is X)."""
    return tokens[:1] == ["GPU0"] and tokens[1:2] != ["X"]


def _header(tokens: List[str], path: str, line: int) -> Tuple[List[str], List[str]]:
    """Device columns, then trailing column names (multi-word merged)."""
    columns: List[str] = []
    trailing: List[str] = []
    k = 0
    while k < len(tokens):
        name = next((t for t in TRAILING if tuple(tokens[k:k + len(t)]) == t), None)
        if name is not None:
            trailing.append(" ".join(name))
            k += len(name)
            continue
        if trailing:
            trailing.append(tokens[k])  # an unknown trailing column
        elif tokens[k] in columns:
            raise InventoryError(f"column {tokens[k]} appears twice in the header", path, line)
        else:
            columns.append(tokens[k])
        k += 1
    gpus = [c for c in columns if _GPU_RE.match(c)]
    if [int(_GPU_RE.match(c).group(1)) for c in gpus] != list(range(len(gpus))):
        raise InventoryError(f"GPU columns must be GPU0..GPU{len(gpus) - 1} in order, got "
                             f"{' '.join(gpus)}", path, line)
    if columns[:len(gpus)] != gpus:
        raise InventoryError("GPU columns must come before NIC columns", path, line)
    return columns, trailing


def _row(mx: SmiMatrix, tokens: List[str], trailing: List[str], path: str, line: int) -> None:
    name, cells = tokens[0], tokens[1:]
    if name not in mx.columns:
        raise InventoryError(f"row {name!r} is not a column of the header "
                             f"({' '.join(mx.columns)})", path, line)
    if name in mx.row_line:
        raise InventoryError(f"row {name} appears twice (first on line {mx.row_line[name]})",
                             path, line)
    n = len(mx.columns)
    if len(cells) < n:
        raise InventoryError(f"row {name} has {len(cells)} link cells, expected {n} "
                             f"({' '.join(mx.columns)})", path, line)
    for col, tok in zip(mx.columns, cells):
        if tok.upper() == "N/A":
            tok = "SYS"
        try:
            cls, _ = parse_token(tok)
        except ValueError as exc:
            hint = ("; this is the P2P status matrix of 'nvidia-smi topo -p2p', not "
                    "'nvidia-smi topo -m'" if tok.upper() in P2P_STATUS else "")
            raise InventoryError(f"row {name}, column {col}: {exc}{hint}", path, line) from None
        if (col == name) != (cls.name == "SELF"):
            raise InventoryError(f"row {name}, column {col}: "
                                 + ("expected X on the diagonal" if col == name else
                                    "X is only allowed on the diagonal"), path, line)
        mx.cells[(name, col)] = normalise_token(tok)
    rest = cells[n:]
    if _GPU_RE.match(name):
        if len(rest) > len(trailing):
            raise InventoryError(f"row {name} has {len(rest) - len(trailing)} more values than "
                                 f"the header has columns", path, line)
        mx.extras[name] = place_trailing(rest, trailing)
    elif rest:
        raise InventoryError(f"row {name} has {len(rest)} values after its link cells",
                             path, line)
    mx.row_line[name] = line


_SHAPES = {
    "CPU Affinity": re.compile(r"^(N/A|\d+(-\d+)?(,\d+(-\d+)?)*)$", re.I),
    "NUMA Affinity": re.compile(r"^(N/A|\d+(-\d+)?(,\d+(-\d+)?)*)$", re.I),
    "GPU NUMA ID": re.compile(r"^(N/A|\d+)$", re.I),
}


def place_trailing(values: List[str], columns: List[str]) -> Dict[str, Optional[str]]:
    """Trailing values of a GPU row -> their columns, when cells are empty.

    Splitting on whitespace loses empty cells: inside a job step nvidia-smi
    leaves ``CPU Affinity`` empty for a GPU whose CPUs are outside the job,
    and ``0 N/A`` must then be NUMA Affinity 0 and GPU NUMA ID N/A, not CPU
    0. nvidia-smi prints every later column (N/A when it has nothing), so
    the missing cells are taken to be the first ones; the placement must
    fit each column's shape, else the row is taken to stop early
    (left-aligned), else any placement that fits.
    """
    missing = len(columns) - len(values)
    if missing <= 0:
        return dict(zip(columns, values))

    placements = [tuple(range(missing, len(columns))), tuple(range(len(values)))]
    placements += [p for p in itertools.combinations(range(len(columns)), len(values))
                   if p not in placements]
    for cols in placements:
        if all(_SHAPES.get(columns[c], re.compile(".")).match(v) for c, v in zip(cols, values)):
            out: Dict[str, Optional[str]] = {c: None for c in columns}
            out.update((columns[c], v) for c, v in zip(cols, values))
            return out
    out = {c: None for c in columns}
    out.update(zip(columns, values))
    return out


# ---------------------------------------------------------------------------
# Model


def looks_like_nvswitch(links: Sequence[Sequence[str]]) -> bool:
    """NV<n> between every pair with more lanes per GPU than any GPU has
    NVLink ports: the GPUs meet in an NVSwitch (HGX, DGX, NVL72 trays)."""
    n = len(links)
    if n < 3:
        return False
    for a in range(n):
        total = 0
        for b in range(n):
            if a == b:
                continue
            cls, lanes = parse_token(links[a][b])
            if not lanes:
                return False
            total += lanes
        if total <= MAX_DIRECT_NVLINKS:
            return False
    return True


def _int_or_none(value: Optional[str]) -> Optional[int]:
    return int(value) if value is not None and value.isdigit() else None


def _numa_list(value: Optional[str]) -> Tuple[int, ...]:
    if value is None or value.upper() == "N/A":
        return ()
    try:
        return parse_cpulist(value)
    except ValueError:
        return ()


def cpu_side_numa(value: Optional[str], gpu_memory_nodes: Sequence[int]) -> Optional[int]:
    """The NUMA node of a GPU's CPUs from the ``NUMA Affinity`` cell.

    A GB200 tray prints ``0,2-17``: the Grace CPU's node 0 plus the GPU
    memory nodes (2-17, also listed as ``GPU NUMA ID``). The CPU-side node
    is the first that is no GPU's memory; else the first listed."""
    nodes = _numa_list(value)
    if not nodes:
        return None
    cpu_side = [n for n in nodes if n not in set(gpu_memory_nodes)]
    return (cpu_side or list(nodes))[0]


def job_capture_signs(gpus: Sequence[Gpu], links,
                      empty_cpu_cells: Sequence[int] = ()) -> Tuple[List[str], List[str]]:
    """Signs that the text was captured inside a cgroup-restricted job.

    There nvidia-smi intersects each GPU's CPU list with the job's CPUs (a
    GPU near none of them gets an empty cell) and may report every GPU pair
    as SYS. Returns (certain signs: the CPU lists are cut, so no ``Cores=``
    may come from them; doubtful signs, only worth a warning).
    """
    certain: List[str] = []
    doubtful: List[str] = []
    n = len(gpus)
    if empty_cpu_cells:
        certain.append("CPU Affinity is empty for GPU " + ",".join(map(str, empty_cpu_cells))
                       + " while its row goes on (the CPU list was cut to a job's CPUs)")
    by_numa: Dict[int, set] = {}
    for g in gpus:
        if g.numa_node is not None and g.cpus:
            by_numa.setdefault(g.numa_node, set()).add(g.cpus)
    if any(len(v) > 1 for v in by_numa.values()):
        certain.append("GPUs on one NUMA node have different CPU lists")
    lists = [(node, set(c)) for node, v in by_numa.items() for c in v]
    if any(a[0] != b[0] and a[1] & b[1] for i, a in enumerate(lists) for b in lists[i + 1:]):
        certain.append("GPUs on different NUMA nodes share CPUs")
    if 0 in by_numa and all(0 not in c for c in by_numa[0]):
        certain.append("CPU 0 is missing from the CPU list of NUMA node 0")
    all_sys = n > 1 and all(parse_token(links[a][b])[0].name == "SYS"
                            for a in range(n) for b in range(n) if a != b)
    shared = len({g.numa_node for g in gpus if g.numa_node is not None}) < \
        len([g for g in gpus if g.numa_node is not None])
    if all_sys and shared:
        (certain if certain else doubtful).append(
            "every GPU pair is SYS although GPUs share a NUMA node (inside a job, a "
            "container or a VM?)")
    return certain, doubtful


def _nic_layer(name: str) -> str:
    """What a NIC's name alone says about its link layer: an ``mlx5_bond_N``
    RDMA device is a RoCE LAG (Ethernet); anything else is unknown from
    nvidia-smi (sysfs knows: ``agent discover`` on the node)."""
    return "Ethernet" if re.match(r"^mlx\d+_bond_\d+$", name) else "unknown"


def matrix_to_node(mx: SmiMatrix, name: str, model: Optional[str] = None,
                   threads_per_core: Optional[int] = None, path: str = "<smi>",
                   hostname: Optional[str] = None) -> Discovery:
    gnames = [f"GPU{i}" for i in range(mx.gpus)]
    links = tuple(tuple(mx.cells[(a, b)] for b in gnames) for a in gnames)
    for i, a in enumerate(gnames):
        for j in range(i + 1, mx.gpus):
            if links[i][j] != links[j][i]:
                raise InventoryError(f"GPU{i}-GPU{j} is {links[i][j]} but GPU{j}-GPU{i} is "
                                     f"{links[j][i]} (the matrix must be symmetric)", path,
                                     mx.row_line[gnames[j]])
    problems: List[str] = []
    notes: List[str] = []
    gpu_numa_ids = [_int_or_none(mx.extras.get(g, {}).get("GPU NUMA ID")) for g in gnames]
    memory_nodes = [x for x in gpu_numa_ids if x is not None]
    gpus = []
    for i, g in enumerate(gnames):
        ex = mx.extras.get(g, {})
        aff = ex.get("CPU Affinity")
        try:
            cpus = parse_cpulist(aff) if aff and aff.upper() != "N/A" else ()
        except ValueError as exc:
            raise InventoryError(f"row {g}: bad CPU Affinity {aff!r}: {exc}", path,
                                 mx.row_line[g]) from None
        numa = ex.get("NUMA Affinity")
        if numa and len(_numa_list(numa)) > 1:
            notes.append(f"GPU{i}: NUMA Affinity {numa}: node "
                         f"{cpu_side_numa(numa, memory_nodes)} taken as its CPUs' node")
        gpus.append(Gpu(index=i, model=model or "unknown",
                        numa_node=cpu_side_numa(numa, memory_nodes), cpus=cpus))
    empty_cells = [i for i, g in enumerate(gnames)
                   if "CPU Affinity" in mx.extras.get(g, {}) and mx.extras[g]["CPU Affinity"] is None
                   and any(v is not None for v in mx.extras[g].values())]
    certain, doubtful = job_capture_signs(gpus, links, empty_cells)
    job_capture = bool(certain)
    if job_capture:
        problems.append("captured inside a cgroup-restricted job: " + "; ".join(certain)
                        + ". CPU lists dropped (no Cores= from them); run nvidia-smi topo -m "
                          "outside any job, or use agent discover on the node")
        gpus = [Gpu(index=g.index, model=g.model, numa_node=g.numa_node) for g in gpus]
    for sign in doubtful:
        problems.append(f"suspicious: {sign}; if so, its link classes and CPU lists are not "
                        "the machine's")
    nics = []
    unnamed = []
    for col in mx.nic_columns:
        rel = tuple(mx.cells[(g, col)] for g in gnames)
        nic_name = mx.legend.get(col, col)
        if _NIC_COLUMN_RE.match(nic_name):
            unnamed.append(nic_name)
        nics.append(Nic(name=nic_name, gpu_relation=rel, link_layer=_nic_layer(nic_name)))
    if len({n.name for n in nics}) != len(nics):
        raise InventoryError("two NIC columns map to the same device name", path)
    if mx.missing_rows:
        problems.append(f"NIC columns {', '.join(mx.missing_rows)} have no row of their own "
                        "(a cut copy?): read from the GPU rows, which hold every GPU-NIC "
                        "relation")
    if unnamed:
        problems.append(f"NIC columns {', '.join(unnamed)} have no NIC Legend: their device "
                        "names (mlx5_N) are unknown, so NCCL_IB_HCA cannot name them")
    if nics and any(n.link_layer == "unknown" for n in nics):
        notes.append("NIC link layer (InfiniBand or Ethernet/RoCE) unknown from nvidia-smi: "
                     "agent discover on the node reads it from sysfs")
    guess = infer_cpu_layout([g.cpus for g in gpus], [g.numa_node for g in gpus],
                             threads_per_core)
    cpu = guess.cpu
    if cpu is not None:
        notes.append(f"CPU layout inferred from the affinity lists: {cpu.sockets} socket(s), "
                     f"{cpu.cores} cores, {cpu.threads_per_core} thread(s) per core"
                     + (", threads numbered consecutively per core"
                        if guess.numbering == "consecutive" else ""))
        problems += [f"guess: {g}" for g in guess.guesses]
    if not model:
        problems.append("GPU model unknown (nvidia-smi topo -m does not print it)")
    problems.append("device minors unknown: /dev/nvidiaN assumed to follow the GPU index")
    hw = Hardware(gpus=tuple(gpus), links=links, nics=tuple(nics), cpu=cpu,
                  nvswitch=looks_like_nvswitch(links))
    report = report_block("nvidia-smi topo -m", problems, hostname=hostname or name,
                          file=path, gpu_numa_ids=gpu_numa_ids
                          if any(x is not None for x in gpu_numa_ids) else None,
                          job_capture=True if job_capture else None, notes=notes)
    return Discovery(node=Node(name=name, hardware=hw), report=report)


def smi_discovery(text: str, path: str, node_name: Optional[str] = None,
                  model: Optional[str] = None, threads_per_core: Optional[int] = None
                  ) -> List[Discovery]:
    """One Discovery per host in the text (pdsh output may hold several)."""
    out = []
    hosts = split_hosts(text)
    if node_name and len(hosts) > 1:
        raise InventoryError(f"this file holds {len(hosts)} hosts; --node-name names one", path)
    for host, lines in hosts:
        mx = parse_matrix(lines, path)
        name = node_name or host or short_hostname()
        out.append(matrix_to_node(mx, name, model=model, threads_per_core=threads_per_core,
                                  path=path, hostname=host))
    return out
