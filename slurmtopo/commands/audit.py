"""``slurmtopo audit``: how today's multi-node GPU jobs are placed, against
the fewest leaves, blocks and NVLink domains they could have had and the
modelled step of slurmtopo's placement; the stranded GPUs per leaf and
NVLink domain.

    slurmtopo audit --inventory inv.yaml                     # the live cluster
    slurmtopo audit --inventory inv.yaml --state snap.yaml   # a snapshot with its jobs
    slurmtopo audit --inventory inv.yaml --sacct --starttime 2025-01-01 --endtime 2025-02-01
    slurmtopo audit --inventory inv.yaml --sacct-file jobs.txt [--json]

See docs/audit.md.
"""
from __future__ import annotations

import json
import time

import click

# through the package, so that a fake backend patched into slurmtopo.slurm reaches it
from slurmtopo import slurm as backends
from slurmtopo.api import load_cluster
from slurmtopo.audit.contracts import (JobSeen, PROBE_PROCESSES, SlurmView, check_jobs,
                                       metrics_text, parse_task_lines, report_dict)
from slurmtopo.audit.history import replay
from slurmtopo.audit.placements import Auditor, RunningJob
from slurmtopo.audit.report import contracts_table, document, job_table, notes, stranded_table
from slurmtopo.audit.run import audit_now
from slurmtopo.audit.statejobs import parse_jobs
from slurmtopo.commands.numbers import FiniteFloat
from slurmtopo.commands.report_console import report_console
from slurmtopo.daemon.metrics import TEXTFILE_MODE, check_textfile
from slurmtopo.errors import SlurmError, SlurmtopoError
from slurmtopo.files.fileio import Output, write_all
from slurmtopo.files.yamlio import dump_json, load_document
from slurmtopo.inventory.hostlist import HostIndex, fold_hostlist
from slurmtopo.inventory.state import parse_state
from slurmtopo.show.termsafe import printable
from slurmtopo.simulate.layouts import load_rules
from slurmtopo.simulate.trace_read import read_trace
from slurmtopo.simulate.trace_sacct import read_sacct
from slurmtopo.slurm.parse import parse_job_asks, parse_scontrol_blocks, parse_scontrol_topology

#: the sacct fields the audit asks for (what the sacct trace reader reads)
SACCT_FIELDS = ("JobID", "Submit", "Start", "End", "AllocTRES", "NodeList",
                "NNodes", "Timelimit", "State")


@click.command("audit", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--inventory", "inventory_path", metavar="PATH", required=True,
              help="Inventory file or directory of node reports.")
@click.option("--state", "state_path", default=None, metavar="FILE",
              help="A state snapshot with its running jobs (`slurmtopo state --jobs`) "
                   "instead of the live cluster.")
@click.option("--sacct", "use_sacct", is_flag=True,
              help="Audit a past period from Slurm's accounting (sacct), between "
                   "--starttime and --endtime.")
@click.option("--starttime", default=None, metavar="TIME",
              help="With --sacct: the period's start, as sacct -S reads it (2025-01-01, "
                   "2025-01-01T08:00, now-7days).")
@click.option("--endtime", default="now", show_default=True, metavar="TIME",
              help="With --sacct: the period's end, as sacct -E reads it.")
@click.option("--sacct-file", "sacct_file", default=None, metavar="FILE",
              help="Audit the jobs of saved `sacct -P` output (docs/audit.md) instead.")
@click.option("--layout-rule", default="default", show_default=True, metavar="RULE",
              help="How a job's GPU count becomes a layout to price: default, dp, or a YAML "
                   "rules file (as `slurmtopo simulate`).")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm"]), help="How to talk to Slurm.")
@click.option("--json", "as_json", is_flag=True,
              help="The whole audit as JSON (byte-identical for the same input).")
@click.option("--contracts", is_flag=True,
              help="Check every running multi-node job's contracts instead: segments and "
                   "switches as asked, blocks whole, nodes in their blocks, rank order, the "
                   "environment its tasks really got (docs/audit.md, Contracts).")
@click.option("--no-task-env", is_flag=True,
              help="With --contracts: do not start a probe step in each job to read its tasks' "
                   "environment (rank order and task-env go unchecked).")
@click.option("--metrics-textfile", "metrics_path", default=None, metavar="FILE.prom",
              help="With --contracts: also write Prometheus metrics (violations by kind) to "
                   "this node-exporter textfile after every check (as the daemon's).")
@click.option("--cycles", type=click.IntRange(1, 10**9), default=1, show_default=True,
              help="With --contracts: check this many times, --interval apart.")
@click.option("--interval", type=FiniteFloat(min=1), default=60.0, show_default=True,
              metavar="SECONDS", help="With --contracts --cycles N: seconds between checks.")
def command(inventory_path, state_path, use_sacct, starttime, endtime, sacct_file, layout_rule,
            backend_name, as_json, contracts, no_task_env, metrics_path, cycles, interval):
    """Audit the placements of running (or past) multi-node GPU jobs: leaves, blocks and
    NVLink domains spanned against the fewest possible, modelled cost against slurmtopo's,
    and stranded GPUs. With --contracts: what Slurm gave each running job against what it
    asked and what slurmtopo planned."""
    if contracts:
        if state_path or use_sacct or sacct_file:
            raise SlurmtopoError("--contracts checks the running jobs of the live cluster: "
                                 "drop --state, --sacct and --sacct-file")
        if backend_name == "pyslurm":
            raise SlurmtopoError("--contracts reads job details, the topology and the tasks "
                                 "through Slurm's commands (scontrol, srun): use --backend cli")
        inv = load_cluster(inventory_path)
        _contracts(inv, backends.get_backend("cli"), not no_task_env, metrics_path, as_json,
                   cycles, interval)
        return
    for name, given in (("--no-task-env", no_task_env), ("--metrics-textfile", metrics_path),
                        ("--cycles", cycles != 1)):
        if given:
            raise SlurmtopoError(f"{name} goes with --contracts")
    sources = [x for x in (state_path and "--state", use_sacct and "--sacct",
                           sacct_file and "--sacct-file") if x]
    if len(sources) > 1:
        raise SlurmtopoError(f"{' and '.join(sources)} exclude each other: give one")
    if starttime is not None and not use_sacct:
        raise SlurmtopoError("--starttime goes with --sacct")
    if use_sacct and starttime is None:
        raise SlurmtopoError("--sacct needs --starttime (the period's start, as sacct -S "
                             "reads it)")
    rules = load_rules(layout_rule)
    inv = load_cluster(inventory_path)
    auditor = Auditor(inv, rules)
    if use_sacct or sacct_file:
        within = HostIndex(inv.nodes)  # NodeLists compared with it, never expanded
        if sacct_file:
            trace = read_trace(sacct_file, "sacct", keep_running=True, within=within)
            source = sacct_file
        else:
            text = backends.get_backend(backend_name).accounting(starttime, endtime, SACCT_FIELDS)
            source = f"sacct -S {starttime} -E {endtime}"
            trace = read_sacct(text, source, keep_running=True, within=within)
        history = replay(inv, trace, auditor)
        doc = document(inventory=inventory_path, inv=inv, source=source, rules=rules,
                       audits=history.audits, history=history,
                       not_audited={"on one node": history.single_node}
                       if history.single_node else {})
    else:
        state, jobs, source = _now(inv, state_path, backend_name)
        now = audit_now(inv, state, jobs, auditor)
        doc = document(inventory=inventory_path, inv=inv, source=source, rules=rules,
                       audits=now.audits, stranded=now.stranded, not_audited=now.not_audited,
                       contention=now.contention, contention_by_job=now.contention_by_job)
    _show(doc, as_json)


def _now(inv, state_path, backend_name):
    """The state and its running jobs: from a snapshot, or from Slurm."""
    if state_path:
        data = load_document(state_path)
        state = parse_state(data, str(state_path), inv)
        return state, parse_jobs(data, str(state_path), inv), str(state_path)
    backend = backends.get_backend(backend_name)
    state = backend.cluster_state(inv)
    return state, running_jobs(backend), f"slurm ({backend.name} backend)"


def running_jobs(backend):
    """Slurm's running jobs with the GPUs they hold on each node (in
    Slurm's node order; a node where it holds none left out)."""
    return [RunningJob(job_id=str(j.job_id), name=j.name,
                       alloc={h: tuple(j.gpus[h]) for h in j.nodes if j.gpus.get(h)})
            for j in backend.jobs({"RUNNING"})]


def _show(doc, as_json: bool) -> None:
    if as_json:
        click.echo(dump_json(doc), nl=False)
        return
    console = report_console()
    if doc["jobs"]:
        console.print(job_table(doc))
    else:
        console.print("no multi-node GPU job to audit", highlight=False)
    if "stranded" in doc:
        console.print(stranded_table(doc))

    for line in notes(doc):  # job ids and names of a file someone else wrote: escaped
        console.print(printable(line), highlight=False, markup=False)


# --------------------------------------------------------------------------
# --contracts


def slurm_view(backend):
    """Slurm's topology now (blocks, leaf switches) as the contracts read it;
    empty where Slurm shows none or cannot say."""
    try:
        text = backend.topology_text()
    except SlurmError:
        return SlurmView()
    blocks = parse_scontrol_blocks(text)
    switches = parse_scontrol_topology(text)
    leaves = {name: tuple(sw["nodes"]) for name, sw in switches.items()
              if sw.get("level") == 0 and sw.get("nodes")}
    return SlurmView(blocks=blocks or None, leaves=leaves or None)


def job_seen(backend, job_id: int, nodes, name: str = "", probe: bool = True,
             tasks=None, planned=None, launch_probe: bool = False):
    """One running job as the contracts read it: what it asked
    (``scontrol -d show job``), and its tasks' environment (``tasks``
    given, or a probe step inside the job reading its processes)."""
    asks = None
    try:
        asks = parse_job_asks(backend.job_detail(int(job_id)))
    except SlurmError:
        pass
    nodes = tuple(asks.nodes) if asks is not None and asks.nodes else tuple(nodes)
    note = None
    if tasks is None and probe:
        tasks, note = probe_tasks(backend, job_id, nodes)
    elif tasks is None:
        note = "not probed (--no-task-env)"
    return JobSeen(job_id=str(job_id), nodes=nodes, name=name or (asks.name if asks else ""),
                   segment=asks.segment if asks else None,
                   switches=asks.switches if asks else None, tasks=tasks, probe_note=note,
                   planned=planned, launch_probe=launch_probe)


#: seconds a probe step may take
PROBE_TIMEOUT = 30


def probe_tasks(backend, job_id: int, nodes):
    """(tasks, None) as one probe task per node of the running job sees
    them (``srun --overlap --jobid``), or (None, why not)."""
    n = str(len(nodes))
    try:
        text = backend.step_output(
            ["--overlap", f"--jobid={int(job_id)}", f"--nodes={n}", f"--ntasks={n}",
             "--ntasks-per-node=1", f"--nodelist={fold_hostlist(list(nodes))}",
             "--cpu-bind=none", "--kill-on-bad-exit=0", f"--time={PROBE_TIMEOUT // 60 + 1}"],
            ["/bin/sh", "-c", PROBE_PROCESSES, "slurmtopo-probe", str(int(job_id))])
    except SlurmError as exc:
        return None, f"probe step failed: {exc}"
    return parse_task_lines(text), None


def _contracts(inv, backend, probe: bool, metrics_path, as_json: bool, cycles: int,
               interval: float) -> None:
    for cycle in range(cycles):
        if cycle:
            time.sleep(interval)
        view = slurm_view(backend)
        seen = [job_seen(backend, j.job_id, j.nodes, j.name, probe)
                for j in sorted(backend.jobs({"RUNNING"}), key=lambda j: j.job_id)
                if len(j.nodes) >= 2]
        report = check_jobs(inv, view, seen)
        show_contracts(report, f"slurm ({backend.name} backend)", as_json,
                       metrics_path)


def show_contracts(report, source: str, as_json: bool, metrics_path=None) -> None:
    """The report as a table (or JSON), and the metrics where asked."""
    if metrics_path:
        try:
            text = metrics_text(report, time.time())
        except ImportError:
            raise SlurmtopoError("--metrics needs prometheus-client (pip install "
                                 "prometheus-client, or Debian's python3-prometheus-client)"
                                 ) from None
        # the daemon's textfile rules: a *.prom file in a directory only root
        # or this user may write, replaced by a rename (never half read)
        write_all([Output(check_textfile(metrics_path), text, TEXTFILE_MODE)], sync=False)
    if as_json:
        click.echo(json.dumps(report_dict(report, source), sort_keys=True,
                              separators=(",", ":")))
        return
    console = report_console()
    counts = report.by_kind()
    if report.violations:
        console.print(contracts_table(report))
    total = sum(counts.values())
    console.print(printable(
        f"{len(report.jobs)} running multi-node job(s) checked, {total} violation(s)"
        + (": " + ", ".join(f"{k} {n}" for k, n in counts.items() if n) if total else "")),
        highlight=False, markup=False)
    for job, why in sorted(report.unchecked.items()):
        console.print(printable(f"job {job}: not checked: {'; '.join(why)}"), highlight=False,
                      markup=False)
