"""``slurmtopo simulate``: replay a job trace under several placement policies.

    slurmtopo simulate --inventory etc/examples/devcluster.yaml \\
        --trace etc/examples/traces/nasa-ipsc-excerpt.swf \\
        --policy slurm --policy slurm-switches:wait=600 --policy slurmtopo \\
        --policy daemon:wait=600 [--json] [--plot wait-vs-slowdown.png]

See docs/simulate.md.
"""
from __future__ import annotations

import os

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from slurmtopo.api import load_cluster
from slurmtopo.commands.numbers import FiniteFloat
from slurmtopo.commands.report_console import report_console
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import atomic_write
from slurmtopo.files.yamlio import dump_json
from slurmtopo.show.termsafe import printable
from slurmtopo.simulate import runner
from slurmtopo.simulate.layouts import load_rules
from slurmtopo.simulate.policies import DEFAULT_POLICIES, parse_policy
from slurmtopo.simulate.report import (capacity_table_rich, distribution_table, document, notes,
                                       plot_png, pyplot, racks_table, sweep_document,
                                       sweep_plot_png, sweep_table, table)
from slurmtopo.simulate.sweep import check_size, expand, parse_sweep
from slurmtopo.simulate.trace_read import read_trace


@click.command("simulate")
@click.option("--inventory", "inventory_path", metavar="PATH", required=True,
              help="Inventory file or directory of node reports.")
@click.option("--trace", "trace_path", required=True, metavar="FILE",
              help="Job trace: CSV (Helios, Philly, Alibaba shape), SWF, sacct -P output, or "
                   "the JSON job log of the Philly trace (cluster_job_log).")
@click.option("--trace-format", type=click.Choice(["csv", "swf", "sacct", "philly"]),
              default=None,
              help="The trace's format (default: told from the file).")
@click.option("--policy", "policies", multiple=True, metavar="NAME[:key=value,...]",
              help="A policy to replay the trace with, repeatable: slurm[:topology=tree|flat], "
                   "slurm-switches:wait=T, slurmtopo, daemon:wait=T[,level=L,reservations=N,"
                   "max_releases=N,interval=S], random. Default: slurm, slurm-switches:wait=600, "
                   "slurmtopo, daemon:wait=600.")
@click.option("--comm-fraction", type=FiniteFloat(0.0, 1.0), default=0.3,
              show_default=True,
              help="Share of a job's run time spent communicating: a placement that models a "
                   "step N times slower stretches the run by 1 + f*(N-1).")
@click.option("--load", "load", type=FiniteFloat(0.01, 10.0), default=None, metavar="X",
              help="Scale the trace's inter-arrival times so that its jobs offer X of the "
                   "cluster's GPU-seconds (0.8: 80%%); default: as read.")
@click.option("--contention", type=click.Choice(["ecmp", "ideal", "off"]), default="ecmp",
              show_default=True,
              help="Shared links: running jobs' flows on the fabric's links, each on an uplink "
                   "picked by a seeded hash as ECMP does (ecmp), spread over all uplinks "
                   "(ideal), or not modelled (off).")
@click.option("--layout-rule", default="default", show_default=True, metavar="RULE",
              help="How a trace's GPU count becomes a layout: default, dp, or a YAML rules "
                   "file (docs/simulate.md).")
@click.option("--jobs", "limit", type=click.IntRange(min=1), default=None, metavar="N",
              help="Replay only the first N jobs (by submission).")
@click.option("--sweep", "sweeps", multiple=True, metavar="KEY=V1,V2,...",
              help="Replay at several offered loads (load=0.5,0.8,0.95) or with several waits "
                   "for the policies that wait (wait=0,600,3600), or both: a table and plot "
                   "of the trade-off per policy.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the results as JSON (byte-identical for the same input and seed).")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png",
              help="Draw queue wait against slowdown for every policy (needs matplotlib).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the random policy and of the flows' hash onto uplinks.")
@click.option("--workers", type=click.IntRange(min=1, max=256), default=None,
              help="Policies replayed at once, in separate processes (default: one per CPU, "
                   "at most one per policy). The results do not depend on it.")
def command(inventory_path, trace_path, trace_format, policies, comm_fraction, load, contention,
            layout_rule, limit, sweeps, as_json, plot_path, seed, workers):
    """Replay a job trace on the inventory under each placement policy: queue wait,
    modelled slowdown, JCT, GPU utilisation and stranded GPUs, side by side."""
    specs = [parse_policy(p) for p in (policies or DEFAULT_POLICIES)]
    seen = set()
    for s in specs:
        if s.label in seen:
            raise SlurmtopoError(f"--policy {s.label} is given twice")
        seen.add(s.label)
    if plot_path is not None:  # before the replay, which can take minutes
        _check_plot(plot_path)
    sweep = None
    if sweeps:
        sweep = parse_sweep(sweeps)
        if load is not None and sweep.loads != (None,):
            raise SlurmtopoError("--load and --sweep load=... exclude each other")
    rules = load_rules(layout_rule)
    inv = load_cluster(inventory_path)
    # the replay places every job itself: where sacct says it ran is not read
    trace = read_trace(trace_path, trace_format, limit, hosts=False)
    if sweep is not None:
        return _sweep(inv, inventory_path, trace, rules, comm_fraction, load, contention, seed,
                      specs, sweep, workers, as_json, plot_path)
    setup = runner.prepare(inv, trace, rules, comm_fraction, seed, contention, load)
    if not setup.jobs:
        first = setup.never[0]
        raise SlurmtopoError(f"no job of the trace can run on this inventory (first: "
                             f"{first[0].job_id} at {first[0].where}: {first[1]})")
    if workers is None:
        workers = max(1, min(len(specs), os.cpu_count() or 1))
    results = _run([(setup, s) for s in specs], workers)
    doc = document(setup, inventory_path, specs, [r for r, _ in results])
    image = plot_png(doc) if plot_path is not None else None
    if image is not None:
        atomic_write(plot_path, image)
    if as_json:
        click.echo(dump_json(doc), nl=False)
        return
    console = report_console()
    console.print(table(doc))
    console.print(distribution_table(doc))
    for extra in (racks_table(doc), capacity_table_rich(doc)):
        if extra is not None:
            console.print(extra)
    # the trace's path and its job ids are someone's text: escaped, never
    # read as markup (termsafe)
    for line in notes(doc):
        console.print(Text(printable(line)), highlight=False)
    if plot_path is not None:
        console.print(Text(printable(f"plot: {plot_path}")), highlight=False)


def _sweep(inv, inventory_path, trace, rules, comm_fraction, load, contention, seed, specs,
           sweep, workers, as_json, plot_path):
    """``--sweep``: every load's replays in one pool of workers, then the
    sweep's table (or document) and plot."""
    per_load = expand(specs, sweep)
    check_size(sweep, len(per_load))
    setups = []
    for x in sweep.loads:
        setup = runner.prepare(inv, trace, rules, comm_fraction, seed, contention,
                               x if x is not None else load)
        if not setup.jobs:
            first = setup.never[0]
            raise SlurmtopoError(f"no job of the trace can run on this inventory (first: "
                                 f"{first[0].job_id} at {first[0].where}: {first[1]})")
        setups.append(setup)
    tasks = [(setup, s) for setup in setups for s in per_load]
    if workers is None:
        workers = max(1, min(len(tasks), os.cpu_count() or 1))
    results = _run(tasks, workers)
    runs = []
    for i, (x, setup) in enumerate(zip(sweep.loads, setups)):
        reps = [r for r, _ in results[i * len(per_load):(i + 1) * len(per_load)]]
        runs.append((x, document(setup, inventory_path, per_load, reps)))
    sdoc = sweep_document(sweep, runs)
    if plot_path is not None:
        atomic_write(plot_path, sweep_plot_png(sdoc))
    if as_json:
        click.echo(dump_json(sdoc), nl=False)
        return
    console = report_console()
    console.print(sweep_table(sdoc))
    for line in sdoc["summary"]:
        console.print(Text(printable(line)), highlight=False)
    seen = set()
    for _, doc in runs:
        for line in notes(doc):
            if line.startswith("offered load") or line in seen:
                continue
            seen.add(line)
            console.print(Text(printable(line)), highlight=False)
    if plot_path is not None:
        console.print(Text(printable(f"plot: {plot_path}")), highlight=False)


def _check_plot(path: str) -> None:
    """``--plot`` is refused before any replay: a name that is no PNG, a
    directory, a directory that is missing or not writable, no matplotlib."""
    if not path.lower().endswith(".png"):
        raise SlurmtopoError(f"--plot {path}: the plot is a PNG file (name it .png)")
    if os.path.isdir(path):
        raise SlurmtopoError(f"--plot {path}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise SlurmtopoError(f"--plot {path}: no such directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SlurmtopoError(f"--plot {path}: cannot write in {parent}")
    pyplot()


def _run(tasks, workers: int):
    """The replays, with a progress bar per replay when stderr is a terminal
    (with --json too: the document goes to stdout)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        return runner.run_tasks(tasks, workers)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=False) as progress:
        many = len({id(s) for s, _ in tasks}) > 1
        bars = [progress.add_task(
            s.label + (f" @ {setup.offered:.0%}" if many and setup.offered else ""),
            total=len(setup.jobs)) for setup, s in tasks]

        def tick(k: int, done: int) -> None:
            progress.update(bars[k], completed=done)

        return runner.run_tasks(tasks, workers, tick)
