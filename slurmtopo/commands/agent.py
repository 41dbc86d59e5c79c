"""``slurmtopo agent``: the node agent (discover, gres, run).

Runs on a GPU node (NVML + sysfs), or anywhere with ``--from-smi FILE``,
the saved text of ``nvidia-smi topo -m`` (pdsh output with ``host:``
prefixes holds several nodes). ``--from-nccl-xml FILE`` (NCCL's topology
file, what cloud providers publish for their GPU VMs) and ``--from-hwloc
FILE`` (``lstopo --of xml``) give the PCI tree; on a node where NVML works
it is merged with what NVML sees (``--nvml``). Exit status: 0 when at least one GPU could
be read, 1 when nothing usable was found (the report is still written, with
its ``problems``), 2 on bad input.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading

import click

from slurmtopo.agent.nvml_discovery import discover
from slurmtopo.agent.report import short_hostname
from slurmtopo.agent.sources import discoveries
from slurmtopo.agent.watch import Agent
from slurmtopo.commands.cliutil import slurm_version_option
from slurmtopo.commands.helpgroup import SentenceGroup
from slurmtopo.commands.numbers import FiniteFloat
from slurmtopo.errors import InventoryError, SlurmtopoError
from slurmtopo.files.fileio import atomic_write
from slurmtopo.files.rundirs import write_output_files
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.slurmfmt.checks import NAME_RE
from slurmtopo.slurmfmt.gres_lines import gres_text


class NothingUsable(SlurmtopoError):
    """No GPU could be read (or the node is degraded, for ``run --once``):
    exit 1, after the report was written."""

    exit_code = 1


def _warn(discoveries) -> None:
    for d in discoveries:
        for p in d.problems:
            click.echo(f"slurmtopo agent: {d.node.name}: {p}", err=True)


def _source_options(f):
    f = click.option("--threads-per-core", type=click.IntRange(1, 8), default=None,
                     help="With a file: threads per core (default: inferred from the "
                          "CPU affinity lists).")(f)
    f = click.option("--model", default=None,
                     help="With a file: the GPU model name as NVML prints it, e.g. "
                          "'NVIDIA H100 80GB HBM3'.")(f)
    f = click.option("--sysfs-root", default="/", show_default=True,
                     type=click.Path(file_okay=False),
                     help="Where /sys and /proc are (tests, containers).")(f)
    f = click.option("--node-name", default=None,
                     help="Node name in the report (default: short hostname).")(f)
    f = click.option("--from-smi", type=click.Path(dir_okay=False), default=None,
                     help="Read the text of 'nvidia-smi topo -m' instead of NVML.")(f)
    f = click.option("--from-nccl-xml", type=click.Path(dir_okay=False), default=None,
                     help="Read an NCCL topology file (NCCL_TOPO_FILE; what cloud providers "
                          "publish for their GPU VMs).")(f)
    f = click.option("--from-hwloc", type=click.Path(dir_okay=False), default=None,
                     help="Read hwloc's XML ('lstopo --of xml').")(f)
    f = click.option("--nvml", type=click.Choice(["auto", "yes", "no"]), default="auto",
                     show_default=True,
                     help="With --from-nccl-xml/--from-hwloc: merge what NVML sees on this "
                          "node (auto: when NVML can read it).")(f)
    return f


@click.group("agent", cls=SentenceGroup)
def command():
    """Discover this GPU node, print its gres.conf, watch its health."""


@command.command("discover")
@_source_options
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the node report here (atomically) instead of stdout.")
@click.option("--output-dir", type=click.Path(file_okay=False), default=None,
              help="Write one <node>.yaml per node (for --from-smi files with several hosts).")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default=None,
              help="Report format (default: from the --output suffix, else yaml).")
def discover_cmd(from_smi, from_nccl_xml, from_hwloc, nvml, node_name, sysfs_root, model,
                 threads_per_core, output, output_dir, fmt):
    """Print (or write) this node's report: the inventory schema, one node."""
    found = discoveries(from_smi, node_name, sysfs_root, model, threads_per_core,
                        from_nccl_xml, from_hwloc, nvml)
    if len(found) > 1 and not output_dir:
        raise SlurmtopoError(f"{len(found)} hosts in this file: give --output-dir", from_smi)
    if output_dir:  # one report per host of the file: all of them or none
        f = fmt or "yaml"
        source = None if node_name else (from_smi or from_nccl_xml or from_hwloc)
        # reports are for everyone's planner: 0644, but in a directory that
        # is the user's and nobody else's to change (docs/security.md)
        write_output_files(output_dir, [(f"{_file_name(d.node.name, source)}.{f}", d.render(f))
                                        for d in found], published=True)
    elif output:
        f = fmt or ("json" if output.endswith(".json") else "yaml")
        for d in found:  # one at most (checked above)
            atomic_write(output, d.render(f))
    else:
        for d in found:
            click.echo(d.render(fmt or "yaml"), nl=False)
    _warn(found)
    _check_usable(found)


def _file_name(node: str, where=None) -> str:
    """``node`` as the stem of the report file named after it: a plain
    Slurm node name, so that a --node-name (or a host named in a file)
    such as '../x' cannot write outside the report directory."""
    if not NAME_RE.match(node) or len(node) > 255:
        raise SlurmtopoError(f"node name {node[:64]!r} is not a plain name (letters, digits, "
                             "'.', '_', '-'; starting with a letter or digit): it names the "
                             "report file", where)
    return node


def _check_usable(found) -> None:
    bad = [d.node.name for d in found if not d.usable]
    if bad:
        raise NothingUsable(f"no usable GPU on {', '.join(bad)} (see the report's problems)")


@command.command("gres")
@_source_options
@click.option("--report", "report_path", type=click.Path(exists=True), default=None,
              help="Make the lines from a saved node report (or inventory) instead.")
@click.option("--type", "type_name", default=None,
              help="GRES Type for every GPU (default: the NVML name, lower case, "
                   "spaces as underscores).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the gres.conf lines here (atomically) instead of stdout.")
@slurm_version_option
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: per node its gres.conf lines.")
def gres_cmd(from_smi, from_nccl_xml, from_hwloc, nvml, node_name, sysfs_root, model,
             threads_per_core, report_path, type_name, output, slurm_version, as_json):
    """Print this node's gres.conf lines, as slurmd -G (AutoDetect=nvml) would."""
    if report_path:
        inv = load_inventory(report_path)
        nodes = [n for n in inv if node_name in (None, n.name)]
        if not nodes:
            raise InventoryError(f"no node {node_name!r} in this inventory", report_path)
        per_node = [(n.name, gres_text(n, inv.reports.get(n.name), type_name, slurm_version))
                    for n in nodes]
    else:
        found = discoveries(from_smi, node_name, sysfs_root, model, threads_per_core,
                            from_nccl_xml, from_hwloc, nvml)
        per_node = [(d.node.name, gres_text(d.node, d.report, type_name, slurm_version))
                    for d in found]
        _warn(found)
    text = "".join(t for _, t in per_node)
    if as_json:
        click.echo(json.dumps({"output": output, "nodes": [
            {"node": name, "lines": [l for l in t.splitlines() if l and not l.startswith("#")]}
            for name, t in per_node]}, separators=(",", ":")))
    if output:
        atomic_write(output, text)
    elif not as_json:
        click.echo(text, nl=False)
    if not report_path:
        _check_usable(found)


@command.command("run")
@click.option("--interval", type=FiniteFloat(min=1), default=300, show_default=True,
              help="Seconds between discoveries.")
@click.option("--report-dir", required=True, type=click.Path(file_okay=False),
              help="Where <node>.yaml is written (e.g. a shared directory the planner reads).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Where the last good report and the drain marker live "
                   "(default: --report-dir).")
@click.option("--drain/--no-drain", default=False, show_default=True,
              help="Drain the node in Slurm on degradation, resume it when healthy again.")
@click.option("--gres-conf", type=click.Path(dir_okay=False), default=None,
              help="Also keep this gres.conf file up to date.")
@click.option("--node-name", default=None, help="Slurm node name (default: short hostname).")
@click.option("--sysfs-root", default="/", show_default=True, type=click.Path(file_okay=False),
              help="Where /sys and /proc are.")
@click.option("--once", is_flag=True, help="Run one cycle and exit (1 if degraded).")
@click.option("--new-baseline", is_flag=True,
              help="Forget the last good report and accept the node as it is now (after a "
                   "GPU or NIC was replaced or removed on purpose).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
@slurm_version_option
def run_cmd(interval, report_dir, state_dir, drain, gres_conf, node_name, sysfs_root, once,
            new_baseline, log_level, slurm_version):
    """Rediscover every --interval seconds; rewrite the report on change; drain on
    a missing GPU, a down NVLink or a down NIC."""
    logging.basicConfig(level=getattr(logging, log_level.upper()),
                        format="%(asctime)s slurmtopo-agent %(levelname)s: %(message)s")
    for d in (report_dir, state_dir):
        if d and not os.path.isdir(d):
            raise SlurmtopoError("directory does not exist", d)
    host = short_hostname()
    if report_dir or state_dir:
        _file_name(node_name or host)
    agent = Agent(lambda: discover(sysfs_root=sysfs_root, node_name=node_name or host,
                                   hostname=host),
                  report_dir=report_dir, state_dir=state_dir, drain=drain, gres_conf=gres_conf,
                  slurm_version=slurm_version)
    if new_baseline:
        agent.forget_baseline(node_name or host)
    if once:
        res = agent.cycle()
        if res.degraded:
            raise NothingUsable("degraded: " + "; ".join(str(x) for x in res.degraded))
        if not res.usable:
            raise NothingUsable("no usable GPU (see the report's problems)")
        return
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    agent.run(interval, stop=stop)
