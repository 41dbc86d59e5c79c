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

import click

from slurmtopo.errors import SlurmtopoError

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
def command(inventory_path, state_path, use_sacct, starttime, endtime, sacct_file, layout_rule,
            backend_name, as_json):
    """Audit the placements of running (or past) multi-node GPU jobs: leaves, blocks and
    NVLink domains spanned against the fewest possible, modelled cost against slurmtopo's,
    and stranded GPUs."""
    from slurmtopo.api import load_cluster
    from slurmtopo.audit.placements import Auditor
    from slurmtopo.audit.report import document
    from slurmtopo.simulate.layouts import load_rules

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
        from slurmtopo.audit.history import replay
        from slurmtopo.simulate.trace_read import read_trace
        from slurmtopo.simulate.trace_sacct import read_sacct

        from slurmtopo.hostlist import HostIndex

        within = HostIndex(inv.nodes)  # NodeLists compared with it, never expanded
        if sacct_file:
            trace = read_trace(sacct_file, "sacct", keep_running=True, within=within)
            source = sacct_file
        else:
            from slurmtopo.slurm import get_backend

            text = get_backend(backend_name).accounting(starttime, endtime, SACCT_FIELDS)
            source = f"sacct -S {starttime} -E {endtime}"
            trace = read_sacct(text, source, keep_running=True, within=within)
        history = replay(inv, trace, auditor)
        doc = document(inventory=inventory_path, inv=inv, source=source, rules=rules,
                       audits=history.audits, history=history,
                       not_audited={"on one node": history.single_node}
                       if history.single_node else {})
    else:
        from slurmtopo.audit.run import audit_now

        state, jobs, source = _now(inv, state_path, backend_name)
        now = audit_now(inv, state, jobs, auditor)
        doc = document(inventory=inventory_path, inv=inv, source=source, rules=rules,
                       audits=now.audits, stranded=now.stranded, not_audited=now.not_audited)
    _show(doc, as_json)


def _now(inv, state_path, backend_name):
    """The state and its running jobs: from a snapshot, or from Slurm."""
    if state_path:
        from slurmtopo.audit.statejobs import parse_jobs
        from slurmtopo.state import parse_state
        from slurmtopo.yamlio import load_document

        data = load_document(state_path)
        state = parse_state(data, str(state_path), inv)
        return state, parse_jobs(data, str(state_path), inv), str(state_path)
    from slurmtopo.slurm import get_backend

    backend = get_backend(backend_name)
    state = backend.cluster_state(inv)
    return state, running_jobs(backend), f"slurm ({backend.name} backend)"


def running_jobs(backend):
    """Slurm's running jobs with the GPUs they hold on each node (in
    Slurm's node order; a node where it holds none left out)."""
    from slurmtopo.audit.placements import RunningJob

    return [RunningJob(job_id=str(j.job_id), name=j.name,
                       alloc={h: tuple(j.gpus[h]) for h in j.nodes if j.gpus.get(h)})
            for j in backend.jobs({"RUNNING"})]


def _show(doc, as_json: bool) -> None:
    from slurmtopo.audit.report import job_table, notes, stranded_table

    if as_json:
        from slurmtopo.yamlio import dump_json

        click.echo(dump_json(doc), nl=False)
        return
    from slurmtopo.commands.report_console import report_console

    console = report_console()
    if doc["jobs"]:
        console.print(job_table(doc))
    else:
        console.print("no multi-node GPU job to audit", highlight=False)
    if "stranded" in doc:
        console.print(stranded_table(doc))
    from slurmtopo.termsafe import printable

    for line in notes(doc):  # job ids and names of a file someone else wrote: escaped
        console.print(printable(line), highlight=False, markup=False)
