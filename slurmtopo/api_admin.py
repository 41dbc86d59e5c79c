"""The admin's use cases: Slurm's files from the node reports and the
fabric, generated, checked and published; node reports collected and
compiled; NCCL topology files written.

``slurmtopo topology``, ``gres``, ``collect``, ``inventory compile`` and
``nccl-topo`` parse their options, call these and print; a site's own
tooling calls the same functions, as :mod:`slurmtopo.api` exports them
(``api.generate_topology``, ...; docs/api.md), with the same values: the
option values as text (hostlists, rail ranges, block sizes, read by
:mod:`slurmtopo.admin.inputs`), the files as paths. Messages go to ``echo``
as they happen, in the words the commands print them (a no-op by default),
so a note printed before a later error is still printed first; what is made
comes back as typed results. Generating never writes: :func:`publish_file`
shows, diffs or writes what :func:`generate_topology` or
:func:`generate_gres` made.

A module of its own, below the command line and beside the job's use cases
(:mod:`slurmtopo.api`, which loads it only when one of these is asked for:
the admin side would add about 100 ms to every plan's start).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace as dc_replace
from typing import Callable, List, Optional, Sequence, Tuple

from slurmtopo import __version__
from slurmtopo.admin import COLLECT_COMMAND, collect
from slurmtopo.admin.generate import build_topology, header
from slurmtopo.admin.ibnetdiscover import read_ibnetdiscover
from slurmtopo.admin.inputs import (block_naming, load_fabric, load_reports, load_slurm_conf,
                                    parse_nameset, parse_nodes, parse_rangeset, parse_sizes,
                                    yaml_beside)
from slurmtopo.admin.node_rank import node_rank_problems
from slurmtopo.admin.publish import publish
from slurmtopo.agent.nccl_xml import check_written
from slurmtopo.errors import SlurmtopoError, UnreadableFile
from slurmtopo.files import safedir
from slurmtopo.files.fileio import KEEP_BACKUPS, atomic_write
from slurmtopo.files.rundirs import open_output_dir, read_file_at
from slurmtopo.inventory import compiled
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.inventory.model import Fabric, Inventory
from slurmtopo.inventory.schema import (compile_report_dir, dump_inventory, load_inventory,
                                        parse_document_text)
from slurmtopo.inventory.topology import made_from, switch_levels
from slurmtopo.plan import nccl_topo
from slurmtopo.slurmfmt import gres_conf, topology_files
from slurmtopo.slurmfmt.checks import (ERROR, REFUSE, Problem, check_plugin, check_text,
                                       ring_torus_release, sample_hosts)
from slurmtopo.slurmfmt.gres_lines import parse_slurm_version
from slurmtopo.slurmfmt.slurm_conf import read_text
from slurmtopo.slurmfmt.topology_conf import parse_topology_conf
from slurmtopo.slurmfmt.topology_yaml import parse_topology_yaml

__all__ = ["GeneratedFile", "FileCheck", "UnreadableFile", "CollectedReports",
           "CompiledInventory", "NcclTopologyFile", "generate_topology", "generate_gres",
           "publish_file", "check_topology", "check_gres", "collect_reports",
           "compile_inventory", "nccl_topology_files"]


def _quiet(_text: str) -> None:
    """The default ``echo``: the messages are not wanted."""


def _version(value):
    """``slurm_version`` as the writers take it: "25.11" or (25, 11, 0)."""

    try:
        return parse_slurm_version(value)
    except ValueError as exc:
        raise SlurmtopoError(f"slurm_version: {exc}") from None


@dataclass(frozen=True)
class GeneratedFile:
    """A file an admin use case made and checked, for :func:`publish_file`
    to show or write, or for the caller to read."""

    #: what it is, as messages name it: "topology.conf", "topology.yaml",
    #: "gres.conf" or "fabric document"
    what: str
    text: str
    #: the checks' findings (slurmfmt.checks.Problem): errors refuse the
    #: write, refusals refuse it unless forced, warnings are printed
    problems: Tuple[Problem, ...] = ()
    #: what the admin should know (also given to ``echo`` as "note: ...")
    notes: Tuple[str, ...] = ()
    #: what to do after writing it (printed as "next: ..." unless reconfigured)
    next_steps: Tuple[str, ...] = ()
    #: (current text, its path) -> what changes, one line each, for --diff
    changes: Optional[Callable[[str, str], List[str]]] = field(default=None, compare=False,
                                                               repr=False)


@dataclass(frozen=True)
class FileCheck:
    """A check's verdict on an existing topology.conf/topology.yaml or
    gres.conf."""

    path: str
    #: one line: what the file holds ("12 switches, 3 level(s), 128 nodes")
    summary: str
    problems: Tuple[Problem, ...] = ()
    #: how many of ``problems`` would make Slurm (or slurmtopo) refuse the file
    blocking: int = 0

    @property
    def ok(self) -> bool:
        return not self.blocking


@dataclass(frozen=True)
class CollectedReports:
    """What :func:`collect_reports` gathered into ``output``."""

    output: str
    #: one admin.collect.Result per node, in the order asked (or found)
    results: Tuple[collect.Result, ...]
    collected: int
    failed: int
    #: failed nodes whose last good report is kept, marked stale
    stale_kept: int


@dataclass(frozen=True)
class CompiledInventory:
    """A directory of node reports folded by :func:`compile_inventory`."""

    directory: str
    inventory: Inventory
    #: the node types the reports folded into, sorted
    node_types: Tuple[str, ...]
    #: one line: nodes, node types, fabric
    summary: str
    #: the file the whole inventory was written to (None: not asked)
    output: Optional[str] = None
    #: its size in bytes (None: not written)
    size: Optional[int] = None


@dataclass(frozen=True)
class NcclTopologyFile:
    """One node type's NCCL topology file, as :func:`nccl_topology_files`
    left it."""

    node_type: str
    path: str
    nodes: Tuple[str, ...]
    #: False: the file already held this text and was not rewritten
    changed: bool
    #: where the replaced file was kept (None: nothing replaced)
    backup: Optional[str]
    notes: Tuple[str, ...] = ()
    #: relations of the node type that read back differently from the file
    warnings: Tuple[str, ...] = ()


def generate_topology(*, reports: Optional[str] = None, ibnetdiscover: Optional[str] = None,
                      fabric: Optional[str] = None, fmt: Optional[str] = None,
                      hca: Optional[str] = None, rails: Optional[str] = None,
                      allow_missing: bool = False, block_sizes: Optional[str] = None,
                      block_name: Optional[str] = None, slurm_conf: Optional[str] = None,
                      nodes: Optional[str] = None, output: Optional[str] = None,
                      slurm_version=None, reconfigure: bool = False,
                      echo: Callable[[str], None] = _quiet) -> GeneratedFile:
    """Slurm's topology.conf or topology.yaml (or, ``fmt="fabric"``, the
    ``slurmtopo: fabric`` document the planner reads) from the node reports
    (``reports``: a directory or an inventory) and the network
    (``ibnetdiscover`` output, or ``fabric``: a fabric document or an
    existing Slurm topology file), checked: nothing Slurm would reject, no
    node of ``slurm_conf`` left off every switch. The arguments are
    ``slurmtopo topology generate``'s options (docs/admin.md); ``output``
    is where the file will go (a ``.yaml`` one defaults the format to
    topology.yaml), ``reconfigure`` whether slurmctld will be told to reread
    it (refused for a fabric document, which Slurm never reads). Nothing is
    written: hand the result to :func:`publish_file`."""

    if fmt not in (None, "tree", "block", "ring", "yaml", "fabric"):
        raise SlurmtopoError(f"unknown topology format {fmt!r} (tree, block, ring, yaml or "
                             "fabric)")
    slurm_version = _version(slurm_version)
    if ibnetdiscover and fabric:
        raise SlurmtopoError("give --ibnetdiscover or --fabric, not both")
    if not ibnetdiscover and (hca or rails or allow_missing):
        raise SlurmtopoError("--hca, --rails and --allow-missing select the hosts of an "
                             "--ibnetdiscover dump: give one, or drop them")
    slurm = load_slurm_conf(slurm_conf)
    inv = load_reports(reports)
    fabric_doc = load_fabric(fabric)
    if fmt == "fabric":
        return _fabric_document(inv, fabric_doc, fabric, ibnetdiscover, slurm, nodes, hca, rails,
                                allow_missing, block_sizes, block_name, reconfigure, echo)
    if fmt is None:
        ours = Fabric() if ibnetdiscover else \
            (fabric_doc or (inv.fabric if inv else None) or Fabric())
        if output and output.endswith((".yaml", ".yml")):
            fmt = "yaml"
        elif slurm is not None and (slurm.topology_plugin or "").endswith(("block", "ring")):
            fmt = "block" if slurm.topology_plugin.endswith("block") else "ring"
        else:
            fmt = "ring" if ours.rings else "yaml" if ours.toruses else "tree"
    built = build_topology(
        fmt, ib=read_ibnetdiscover(ibnetdiscover) if ibnetdiscover else None,
        fabric_doc=fabric_doc, fabric_source=fabric, inv=inv, slurm=slurm,
        nodes=parse_nodes(nodes), hcas=parse_nameset(hca, "--hca"),
        rails=parse_rangeset(rails, "--rails"), block_sizes=parse_sizes(block_sizes),
        block_naming=block_naming(block_name), allow_missing=allow_missing)
    too_old = ring_torus_release(built.fabric, slurm_version)
    if too_old:
        raise SlurmtopoError(too_old)
    for note in built.notes:
        echo(f"note: {note}")
    what = "topology.yaml" if fmt == "yaml" else "topology.conf"
    text = topology_files.render(built.fabric, fmt, header(what, fmt, built))
    slurm_nodes = slurm.node_names() if slurm is not None else None
    problems = check_text(text, what) + topology_files.check(built.fabric, fmt, slurm_nodes)
    problems += check_plugin(fmt, slurm, slurm_version, yaml_beside=yaml_beside(slurm))
    if fmt == "block":  # is Slurm's node order the blocks'? (TopologyParam=BlockAsNodeRank)
        problems += node_rank_problems(built.fabric, slurm.topology_param if slurm else None,
                                       slurm_version)
    # what Slurm will read is the text: it must read back as the same topology
    if fmt == "yaml":
        back = [fab.switches for _n, _d, fab in parse_topology_yaml(text, f"<generated {what}>")]
    else:
        back = [parse_topology_conf(text, f"<generated {what}>").switches]
    if (built.fabric.rings or built.fabric.toruses) and \
            [s for sw in back for s in sw] != list(built.fabric.switches):
        raise SlurmtopoError(f"the generated {what} does not read back as the inventory's "
                             "rings or toruses (a slurmtopo bug; nothing written)")

    def changes(_old_text: str, path: str) -> List[str]:
        if built.fabric.rings or built.fabric.toruses:  # the old file's ring/torus trees
            old = topology_files.read_one_topology(path)[1]
            return topology_files.describe_changes(old if made_from(old) else Fabric(),
                                                   built.fabric)
        return topology_files.describe_changes(topology_files.read_topology_conf(path),
                                               built.fabric)

    return GeneratedFile(what=what, text=text, problems=tuple(problems), notes=tuple(built.notes),
                         next_steps=("scontrol reconfigure   (slurmctld rereads the topology; "
                                     "or pass --reconfigure)",),
                         changes=changes)


def _fabric_document(inv, fabric_doc, fabric_path, ibnet, slurm, nodes, hca, rails,
                     allow_missing, block_sizes, block_name, reconfigure,
                     echo) -> GeneratedFile:
    """``topology generate --format fabric``: the fabric (switches from
    ibnetdiscover or a Slurm topology.conf/topology.yaml, blocks from the
    reports' NVLink domains) as the ``slurmtopo: fabric`` document the
    planner reads beside the node reports (docs/admin.md, "From the fabric
    to the planner"). A fabric document already among the reports is the
    one being replaced, so it is not a source; hosts without a report are
    left out (a note counts them): the planner plans only on reported
    nodes, and a fabric naming others does not load with them."""

    if reconfigure:
        raise SlurmtopoError("--reconfigure: a fabric document is slurmtopo's, not Slurm's "
                             "(plan and sbatch read it as it is written)")
    if not (ibnet or fabric_path):
        raise SlurmtopoError("--format fabric needs the network: give --ibnetdiscover FILE, or "
                             "--fabric with Slurm's topology.conf or topology.yaml")
    if inv is not None:
        inv = dc_replace(inv, fabric=Fabric())
    built = build_topology(
        "yaml", ib=read_ibnetdiscover(ibnet) if ibnet else None, fabric_doc=fabric_doc,
        fabric_source=fabric_path, inv=inv, slurm=slurm, nodes=parse_nodes(nodes),
        hcas=parse_nameset(hca, "--hca"), rails=parse_rangeset(rails, "--rails"),
        block_sizes=parse_sizes(block_sizes), block_naming=block_naming(block_name),
        allow_missing=allow_missing)
    fabric = built.fabric
    if fabric_doc is not None and (fabric_doc.rings or fabric_doc.toruses):
        fabric = Fabric(rings=fabric_doc.rings, toruses=fabric_doc.toruses)
    elif inv is not None:
        fabric = topology_files.apply_fabric(inv, fabric, whole=True).fabric
        named = {h for s in built.fabric.switches for h in s.nodes} | \
            {h for b in built.fabric.blocks for h in b.nodes}
        unreported = sorted(named - set(inv.nodes))
        if unreported:
            built.notes.append(f"{len(unreported)} host(s) of the fabric have no node report "
                               "and are left out (the planner plans on reported nodes only)")
    for note in built.notes:
        echo(f"note: {note}")
    text = ("# slurmtopo fabric document, generated by `slurmtopo topology generate --format "
            "fabric`\n# from " + (", ".join(built.sources) or "nothing") + "\n"
            + dump_inventory(Inventory(nodes={}, fabric=fabric), kind="fabric"))
    parse_document_text(text, "<generated fabric>")  # reads back, or nothing is written

    def changes(old_text: str, path: str) -> List[str]:
        return topology_files.describe_changes(parse_document_text(old_text, path).fabric,
                                               fabric)

    return GeneratedFile(what="fabric document", text=text, notes=tuple(built.notes),
                         next_steps=("slurmtopo plan --inventory DIR ...   (reads it with the "
                                     "node reports of DIR)",),
                         changes=changes)


def generate_gres(reports: str, *, slurm_conf: Optional[str] = None,
                  nodes: Optional[str] = None, slurm_version=None,
                  echo: Callable[[str], None] = _quiet) -> GeneratedFile:
    """The cluster's gres.conf from its node reports (a directory or an
    inventory), the GPUs of each node as slurmd's NVML autodetection finds
    them (``slurm_version``: the release that reads it, "23.02.7" or a
    tuple; None: current releases). Nodes with identical GPUs share one
    ``NodeName=<hostlist>`` block. Checked against ``slurm_conf``: a node
    with ``Gres=gpu`` there must get the same GPUs here; ``nodes`` (a
    hostlist) keeps only those. Nothing is written: hand the result to
    :func:`publish_file`."""

    slurm_version = _version(slurm_version)
    inv = load_reports(reports)
    slurm = load_slurm_conf(slurm_conf)
    wanted = parse_nodes(nodes)
    chosen = [inv.nodes[n] for n in wanted if n in inv.nodes] if wanted is not None else list(inv)
    stale = [n.name for n in chosen if (inv.reports.get(n.name) or {}).get("stale")]
    found: List[str] = []
    if stale:
        found.append(f"{len(stale)} stale report(s) used (their node did not answer the last "
                     f"collect): {fold_hostlist(stale)}")
        echo(f"note: {found[-1]}")
    head = [f"gres.conf generated by slurmtopo {__version__} from {len(chosen)} node report(s)"
            + (f", {len(stale)} stale" if stale else ""),
            "Do not edit: regenerate with `slurmtopo gres generate`."]
    text, notes = gres_conf.cluster_gres_conf(chosen, inv.reports, header=head,
                                                        slurm_version=slurm_version, slurm=slurm)
    for note in notes:
        echo(f"note: {note}")
    lines = gres_conf.parse_gres_conf(text, "<generated gres.conf>")
    problems = (check_text(text, "gres.conf") + gres_conf.check_gres(lines, slurm)
                + gres_conf.layout_differences(chosen, slurm))
    if wanted is not None:
        missing = [n for n in wanted if n not in inv.nodes]
        if missing:
            problems.append(Problem(REFUSE, f"no report for {len(missing)} node(s) of --nodes: "
                                            f"{sample_hosts(missing)}"))

    def changes(_old_text: str, path: str) -> List[str]:
        return gres_conf.describe_changes(gres_conf.read_gres_conf(path), lines)

    return GeneratedFile(
        what="gres.conf", text=text, problems=tuple(problems), notes=tuple(found + list(notes)),
        next_steps=("copy gres.conf to every node unless the cluster runs configless",
                    "scontrol reconfigure   (a change of Type or Cores needs slurmctld "
                    "and slurmd restarted, see gres.conf(5))"),
        changes=changes)


def publish_file(made: GeneratedFile, output: Optional[str], *, diff: bool = False,
                 force: bool = False, reconfigure: bool = False,
                 keep_backups: Optional[int] = None, echo: Callable[[str], None] = _quiet,
                 out: Callable[[str], None] = _quiet) -> bool:
    """Show or write a :class:`GeneratedFile`, never leaving a broken one
    (slurmtopo.admin.publish): without ``output`` its text goes to ``out``;
    with ``diff`` the unified diff against ``output`` goes to ``out`` and
    nothing is touched; else the checks run (``force`` passes refusals,
    never errors) and the file is replaced atomically, the previous one kept
    as a backup (the ``keep_backups`` newest; None: fileio.KEEP_BACKUPS),
    then ``scontrol reconfigure`` runs when asked (the old file put back if
    slurmctld refuses the new one). Messages go to ``echo``. Returns
    whether the file changed (or would)."""

    changes = made.changes
    return publish(made.text, output, what=made.what, problems=made.problems, echo=echo, out=out,
                   diff=diff, force=force,
                   changes=None if changes is None else (lambda old: changes(old, output)),
                   reconfigure=reconfigure, next_steps=made.next_steps,
                   keep_backups=KEEP_BACKUPS if keep_backups is None else keep_backups)


def _read_checked(path: str, parse):
    """``(text, parse(text, path))`` of the file a check checks; a file that
    cannot be read or parsed is :class:`UnreadableFile`."""

    stage = "cannot be read"
    try:
        text = read_text(path)
        stage = "cannot be parsed"
        return text, parse(text, path)
    except SlurmtopoError as exc:
        raise UnreadableFile(stage, exc.message, exc.path, exc.line) from None


def _verdict(path: str, summary: str, problems) -> FileCheck:
    return FileCheck(path=path, summary=summary, problems=tuple(problems),
                     blocking=sum(p.severity in (ERROR, REFUSE) for p in problems))


def check_topology(path: str, slurm_conf: Optional[str] = None) -> FileCheck:
    """Read an existing topology.conf or topology.yaml (tree, block, or
    26.05's ring and torus3d) and check it as Slurm's parsers would, and
    against ``slurm_conf``: every node covered, a format its TopologyPlugin
    reads, Slurm's node order following the blocks."""

    text, fabric = _read_checked(path, topology_files.topology_from_text)
    slurm = load_slurm_conf(slurm_conf)
    fmt = "yaml" if topology_files.is_yaml_path(path) else ("block" if fabric.blocks else "tree")
    rings = _rings(text, path, fabric)  # 26.05 ring/torus3d: checked as they were read
    if rings and not fabric.blocks and (fmt == "tree" or not fabric.switches):
        return _verdict(path, rings, check_text(text, path))
    problems = check_text(text, path) + \
        topology_files.check(fabric, fmt, slurm.node_names() if slurm else None)
    problems += check_plugin(fmt, slurm)
    if fmt == "block":  # is Slurm's node order the blocks'? (TopologyParam=BlockAsNodeRank)
        problems += node_rank_problems(fabric, slurm.topology_param if slurm else None)
    parts = []
    if fabric.switches:
        levels = 1 + max(switch_levels(fabric).values())
        hosts = {h for s in fabric.switches for h in s.nodes}
        parts.append(f"{len(fabric.switches)} switches, {levels} level(s), {len(hosts)} nodes")
    if fabric.blocks:
        parts.append(f"{len(fabric.blocks)} blocks"
                     + (f", BlockSizes={','.join(map(str, fabric.block_sizes))}"
                        if fabric.block_sizes else ""))
    return _verdict(path, "; ".join(parts + ([rings] if rings else [])) or "empty", problems)


def _rings(text: str, path: str, fabric) -> str:
    """What rings and toruses a topology file holds, for
    :func:`check_topology`'s summary ("" when none): a topology.conf's rings
    are its fabric, a topology.yaml's are read again (its checked fabric
    leaves them out)."""

    if topology_files.is_yaml_path(path):
        found = [(name, fab) for name, _default, fab in parse_topology_yaml(text, path)
                 if made_from(fab)]
    else:
        found = [("", fabric)] if made_from(fabric) else []
    out = []
    for name, fab in found:
        kind = made_from(fab)
        units = sorted({(s.description or "").split()[-1] for s in fab.switches})
        hosts = {h for s in fab.switches for h in s.nodes}
        what = {"ring": ("ring", "rings"), "torus3d": ("torus", "toruses")}[kind][len(units) != 1]
        out.append(f"topology/{kind}{' ' + repr(name) if name else ''}: {len(units)} {what}, "
                   f"{len(hosts)} nodes")
    return "; ".join(out)


def check_gres(path: str, slurm_conf: Optional[str] = None) -> FileCheck:
    """Read an existing gres.conf and check it as slurmd would, and against
    ``slurm_conf``: GPU counts and types must agree with its ``Gres=``."""

    text, lines = _read_checked(path, gres_conf.parse_gres_conf)
    slurm = load_slurm_conf(slurm_conf)
    problems = check_text(text, path) + gres_conf.check_gres(lines, slurm, path)
    nodes = {h for ln in lines if ln.nodes for h in ln.nodes}
    return _verdict(path, f"{len(lines)} line(s), {len(nodes)} node(s)", problems)


def collect_reports(output: str, *, nodes: Optional[str] = None,
                    from_dir: Optional[str] = None, max_age: Optional[float] = None,
                    command: Optional[str] = None, read_path: Optional[str] = None,
                    workers: int = 32, timeout: float = 60.0, ssh_config: Optional[str] = None,
                    known_hosts: Sequence[str] = (), user: Optional[str] = None,
                    identity: Optional[str] = None, port: Optional[int] = None,
                    progress: Optional[Callable[[int, Optional[collect.Result]], None]] = None,
                    ) -> CollectedReports:
    """Gather the node reports into the directory ``output``: from
    ``from_dir``, where the agents write them (reports older than
    ``max_age`` seconds refused), or over SSH from each node of ``nodes``
    (a hostlist), running ``command`` (``{node}`` replaced; default
    :data:`slurmtopo.admin.COLLECT_COMMAND`, the agent's discovery) or
    printing the report at ``read_path``, ``workers`` nodes at a time, ``timeout`` seconds each,
    host keys checked against ``known_hosts`` (an unknown key is a failure,
    never added). A node that fails keeps its last good report, marked
    stale. Over SSH, ``progress(total, None)`` is called before the first
    node is contacted and ``progress(total, result)`` as each answers."""

    names = parse_nodes(nodes)
    if from_dir:
        if command or read_path:
            raise SlurmtopoError("--from-dir reads files; --command and --read are for SSH")
        results = collect.collect_dir(from_dir, output, names, max_age=max_age)
    else:
        if names is None:
            raise SlurmtopoError("--nodes is required to collect over SSH")
        if command and read_path:
            raise SlurmtopoError("give --command or --read, not both")
        fetcher = collect.SshFetcher(command=None if read_path else (command or COLLECT_COMMAND),
                                     read_path=read_path, timeout=timeout,
                                     ssh_config=ssh_config, known_hosts=known_hosts or None,
                                     user=user, identity=identity, port=port)
        tick = None
        if progress is not None:
            progress(len(names), None)
            tick = functools.partial(progress, len(names))
        results = collect.collect_ssh(names, output, fetcher, workers=workers, progress=tick)
    ok, failed, stale = collect.summary(results)
    return CollectedReports(output=output, results=tuple(results), collected=ok, failed=failed,
                            stale_kept=stale)


def compile_inventory(directory: str, output: Optional[str] = None,
                      echo: Callable[[str], None] = _quiet) -> CompiledInventory:
    """Fold a directory of node reports into its compiled form (identical
    hardware into node types; what ``--inventory DIR`` reads, kept up to
    date here), and with ``output`` write the whole inventory as one JSON
    document that ``--inventory FILE`` reads on its own (the previous one
    kept as a backup)."""

    if not os.path.isdir(directory):
        raise SlurmtopoError("not a directory", directory)
    doc, inv, log = compile_report_dir(directory)
    for line in log:
        echo(line)
    summary = compiled.describe(doc, inv)
    echo(summary)
    size = None
    if output:
        text = compiled.dumps_compiled(doc)
        atomic_write(output, text, backup=True)
        size = len(text.encode())
        echo(f"wrote {output} ({len(text):,} bytes)")
    return CompiledInventory(directory=directory, inventory=inv,
                             node_types=tuple(sorted(doc.get("node_types") or {})),
                             summary=summary, output=output, size=size)


def nccl_topology_files(inventory: str, output_dir: str, *, types: Sequence[str] = (),
                        virtualised_only: bool = False,
                        nvlink: bool = True) -> Tuple[NcclTopologyFile, ...]:
    """Write an NCCL topology file (what NCCL reads from
    ``NCCL_TOPO_FILE``, docs/nccl-topo.md) per node type of ``inventory``
    (``types`` only, or the virtualised ones) into ``output_dir``, as
    ``<node type>.xml``. Every file is rendered before any is written, all
    are replaced at once or none, unchanged ones left alone, the old ones
    kept as backups; the directory is checked as every ``--output-dir`` is
    (the user's, writable by nobody else, no link followed), made 0755 and
    the files 0644: they are for every user's jobs. Each file is read back
    and any relation that did not survive is in its ``warnings``."""

    def same(where, name: str, text: str) -> bool:
        try:
            return read_file_at(where, name) == text
        except SlurmtopoError:  # not a regular file of the user's: it gets replaced
            return False

    inv = load_inventory(inventory)
    files = nccl_topo.topo_files(inv, types, virtualised_only)
    if not files:
        raise SlurmtopoError("no node type to write (none is marked virtualised)"
                             if virtualised_only else "no node type to write", inventory)
    rendered = []
    for f in files:  # every file is rendered before any is written
        title = (f"NCCL topology for node type {f.name}, written by slurmtopo {__version__} "
                 f"(slurmtopo nccl-topo); use with NCCL_TOPO_FILE")
        try:
            rendered.append((f, nccl_topo.render(f.hardware, title, nvlink=nvlink)))
        except SlurmtopoError as exc:
            raise SlurmtopoError(f"node type {f.name}: {exc.message} (or leave the type out: "
                                 "--type, --virtualised-only)", inventory) from None
    with open_output_dir(output_dir, published=True) as where:
        changed = [(f"{f.name}.xml", done.text) for f, done in rendered
                   if not same(where, f"{f.name}.xml", done.text)]
        backups = safedir.write_files([(where, name, text) for name, text in changed],
                                      mode=safedir.PUBLISHED_FILE, backup=True)
        paths = {f.name: where.child(f"{f.name}.xml") for f, _ in rendered}
    out = []
    for f, done in rendered:
        path, name = paths[f.name], f"{f.name}.xml"
        backup = backups.get(name)
        out.append(NcclTopologyFile(
            node_type=f.name, path=path, nodes=tuple(f.nodes), changed=name in backups,
            backup=os.path.join(os.path.dirname(path), backup) if backup else None,
            notes=tuple(done.notes), warnings=tuple(check_written(f.hardware, done.text, path))))
    return tuple(out)
