"""``slurmtopo admin install-hooks``: turn the #SLURMTOPO directive on for a
site (docs/admin.md, "Slurm hooks").

    slurmtopo admin install-hooks --inventory /etc/slurmtopo/cluster.json \\
        --slurm-dir /etc/slurm [--job-submit]

writes ``cli_filter.lua`` (and with ``--job-submit`` ``job_submit.lua``)
into the directory of slurm.conf and the TaskProlog script, each with the
site's settings filled in (:mod:`slurmtopo.hooks.install`), all or none,
keeping a backup of what each replaces; then prints the slurm.conf lines
that turn them on. slurm.conf itself is the admin's to edit. A
``cli_filter.lua`` or ``job_submit.lua`` slurmtopo did not write (a site's
own) is not replaced without ``--force``: merge ours into it instead.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import click

from slurmtopo.commands.directive import option_kinds
from slurmtopo.commands.helpgroup import SentenceGroup
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import Output, read_text, write_all
from slurmtopo.hooks import install


@click.group("admin", cls=SentenceGroup, context_settings={"help_option_names": ["-h", "--help"]})
def command():
    """Install slurmtopo into a site's Slurm."""


def _default_slurm_dir() -> str:
    conf = os.environ.get("SLURM_CONF")
    return os.path.dirname(os.path.abspath(conf)) if conf else "/etc/slurm"


def _default_command() -> str:
    found = shutil.which("slurmtopo")
    if found:
        return os.path.abspath(found)
    return os.path.abspath(sys.argv[0]) if os.path.basename(sys.argv[0]) == "slurmtopo" else ""


@command.command("install-hooks")
@click.option("--inventory", required=True, metavar="PATH",
              help="The inventory every planning call reads (absolute; readable on the submit "
                   "hosts and, for re-plans at start, the compute nodes).")
@click.option("--slurm-dir", default=None, metavar="DIR",
              help="Where slurm.conf is: cli_filter.lua and job_submit.lua go there (default: "
                   "the directory of $SLURM_CONF, else /etc/slurm).")
@click.option("--command", "slurmtopo_command", default=None, metavar="PATH",
              help="slurmtopo's absolute path on the submit hosts and compute nodes (default: "
                   "the one on PATH).")
@click.option("--task-prolog", default=None, metavar="PATH",
              help="Where the TaskProlog script goes (default: "
                   "<slurm dir>/slurmtopo-task-prolog.sh).")
@click.option("--state", default="live", show_default=True, metavar="live|none|FILE",
              help="The cluster state the planning call plans against.")
@click.option("--plan-timeout", type=click.FloatRange(0.5, 60), default=5.0, show_default=True,
              metavar="SECONDS", help="The most a planning call may add to a submission.")
@click.option("--task-timeout", type=click.FloatRange(1, 3600), default=120.0,
              show_default=True, metavar="SECONDS",
              help="The most TaskProlog may take (the job's first task binds the plan).")
@click.option("--on-bad-directive", type=click.Choice(["refuse", "warn"]), default="refuse",
              show_default=True,
              help="A directive that cannot be read: refuse the submission with its reason, or "
                   "submit the job unplanned with a warning.")
@click.option("--job-submit", is_flag=True,
              help="Also install job_submit.lua (the controller rejects unreadable directives).")
@click.option("--hold-for-daemon", is_flag=True,
              help="With --job-submit: hold every planned job for the placement daemon.")
@click.option("--slurm-topology", default=None, metavar="FILE",
              help="Planning calls plan on this topology.conf/topology.yaml.")
@click.option("--spool", default=None, metavar="DIR",
              help="The placement daemon's spool (for long requests of --daemon directives).")
@click.option("--force", is_flag=True,
              help="Replace a cli_filter.lua/job_submit.lua that slurmtopo did not write.")
@click.option("--dry-run", is_flag=True, help="Print what would be written; write nothing.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: the files (path, mode, and with --dry-run their "
                   "text) and the slurm.conf lines.")
def install_hooks(inventory, slurm_dir, slurmtopo_command, task_prolog, state, plan_timeout,
                  task_timeout, on_bad_directive, job_submit, hold_for_daemon, slurm_topology,
                  spool, force, dry_run, as_json):
    """Write the cli_filter, TaskProlog (and job_submit) hooks for #SLURMTOPO directives."""
    if hold_for_daemon and not job_submit:
        raise SlurmtopoError("--hold-for-daemon needs --job-submit (the controller holds the "
                             "jobs)")
    slurm_dir = os.path.abspath(slurm_dir or _default_slurm_dir())
    command_path = slurmtopo_command or _default_command()
    if not command_path:
        raise SlurmtopoError("no slurmtopo on PATH: give its absolute path with --command")
    extra = []
    if slurm_topology:
        extra += ["--slurm-topology", os.path.abspath(slurm_topology)]
    if spool:
        extra += ["--spool", os.path.abspath(spool)]
    settings = install.HookSettings(
        command=command_path, inventory=os.path.abspath(inventory), state=state,
        plan_timeout=plan_timeout, task_timeout=task_timeout,
        on_bad_directive=on_bad_directive, hold_for_daemon=hold_for_daemon,
        extra_args=tuple(extra))
    texts = {n: install.template(n) for n in (install.CLI_FILTER, install.TASK_PROLOG,
                                              install.JOB_SUBMIT)}
    done = install.render(settings, slurm_dir, task_prolog or os.path.join(
        slurm_dir, "slurmtopo-task-prolog.sh"), job_submit, option_kinds(), texts)
    for path, _, _ in done.files:
        if os.path.lexists(path) and not force and not dry_run:
            try:
                old = read_text(path, limit=4 << 20)
            except (OSError, SlurmtopoError):
                old = ""
            if install.MARK not in old:
                raise SlurmtopoError("exists and was not written by slurmtopo (the site's own "
                                     "hook?): merge slurmtopo's into it (docs/admin.md, Slurm "
                                     "hooks) or give --force", path)
    if not dry_run:
        if not os.path.isdir(slurm_dir):
            raise SlurmtopoError("no such directory", slurm_dir)
        write_all([Output(path, text, mode) for path, text, mode in done.files], backup=True)
    if as_json:
        click.echo(json.dumps({
            "dry_run": dry_run, "slurm_conf": done.conf_lines,
            "files": [dict({"path": path, "mode": f"{mode:o}"},
                           **({"text": text} if dry_run else {}))
                      for path, text, mode in done.files]}, separators=(",", ":")))
        return
    for path, text, mode in done.files:
        if dry_run:
            click.echo(f"# {path} (mode {mode:o})")
            click.echo(text, nl=False)
        else:
            click.echo(f"slurmtopo: wrote {path} (mode {mode:o})", err=True)
    click.echo("slurmtopo: add to slurm.conf on every host (then `scontrol reconfigure`; "
               "JobSubmitPlugins takes a slurmctld restart on Slurm 22.05):", err=True)
    for line in done.conf_lines:
        click.echo(line)
