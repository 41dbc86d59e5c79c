"""``slurmtopo hooks``: what Slurm's hooks run (docs/admin.md, "Slurm hooks").

* ``slurmtopo hooks plan`` is the planning call of cli_filter.lua: for a
  job with a ``#SLURMTOPO`` directive it plans the job as ``slurmtopo
  sbatch`` would, and prints the sbatch options to set, one per line, for
  the Lua script to apply (:data:`PROTOCOL`);
* ``slurmtopo hooks task-prolog`` is TaskProlog's: the ``export`` lines of
  one task (:mod:`slurmtopo.hooks.taskprolog`);
* ``slurmtopo hooks check SCRIPT`` shows a user what the hook would do to
  a script, without submitting it.

The planning call itself (the job's options, the api, the planner) lives
in :mod:`slurmtopo.commands.hook_plan`, loaded only by the two commands
that plan: TaskProlog runs for every task of every job and needs none of it.

The planning call never prints to stderr and never fails with a
traceback: every outcome is a line of its protocol on stdout and an exit
status (0 planned, 2 the directive is wrong, 3 the job could not be
planned and goes in unchanged), because it runs inside sbatch, where a
confused hook must never stop a submission.
"""
from __future__ import annotations

import os
import signal
import sys

import click

from slurmtopo.commands.helpgroup import SentenceGroup
from slurmtopo.errors import SlurmtopoError
from slurmtopo.show.termsafe import printable

#: the first line of the planning call's answer (its protocol's version);
#: then ``set<TAB>OPTION<TAB>VALUE``, ``note<TAB>TEXT``, and ``done``; or
#: ``error<TAB>TEXT`` (exit 2) / ``warning<TAB>TEXT`` (exit 3)
PROTOCOL = "slurmtopo-hook 1"
#: the planning call's default bound on itself (cli_filter.lua bounds the
#: process too, with timeout(1))
DEFAULT_DEADLINE = 5.0


@click.group("hooks", cls=SentenceGroup, context_settings={"help_option_names": ["-h", "--help"]})
def command():
    """Run what Slurm's cli_filter and TaskProlog hooks call."""


class _Late(Exception):
    """The planning call ran past its deadline."""


def _on_alarm(signum, frame):  # pragma: no cover - timing
    raise _Late()


def _clean(text: str) -> str:
    return " ".join(printable(str(text)).split())


def _planning():
    """:mod:`slurmtopo.commands.hook_plan`, the planning call (``hooks plan``
    and ``hooks check``), with the api and the planner it loads."""
    # lazy: the one place the plan hook's world is loaded: `hooks task-prolog`, run for every
    #   task of every job, loads this module without the api, the planner and the job's options
    from slurmtopo.commands import hook_plan

    return hook_plan


@command.command("plan")
@click.option("--inventory", required=True, metavar="PATH",
              help="The site's inventory (file or report directory).")
@click.option("--state", "state_path", default="live", show_default=True,
              metavar="live|none|FILE", help="Cluster state to plan against.")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm"]), help="How to talk to Slurm.")
@click.option("--slurm-topology", default=None, metavar="FILE",
              help="Plan on the site's topology.conf/topology.yaml instead of the inventory's "
                   "fabric.")
@click.option("--slurm-conf", default=None, metavar="FILE",
              help="slurm.conf naming each partition's Topology=.")
@click.option("--spool", default=None, help="The placement daemon's spool directory.")
@click.option("--tag-for-daemon", is_flag=True,
              help="Put the placement daemon's request in the job's environment "
                   "(SLURMTOPO_DAEMON_TAG), for job_submit.lua's hold_for_daemon.")
@click.option("--options", "options_json", required=True, metavar="JSON",
              help="The job's options: cli_filter's slurm.json_cli_options(options).")
@click.option("--kind", type=click.Choice(["sbatch", "srun", "salloc"]), default="sbatch",
              show_default=True, help="Which command submits the job.")
@click.option("--deadline", type=click.FloatRange(0.1, 600), default=DEFAULT_DEADLINE,
              show_default=True, metavar="SECONDS",
              help="Give up (the job goes in unchanged) after this long.")
def plan_command(inventory, state_path, backend_name, slurm_topology, slurm_conf, spool,
                 tag_for_daemon, options_json, kind, deadline):
    """Plan a job with a #SLURMTOPO directive for cli_filter.lua (its protocol on stdout)."""
    site = {"inventory": inventory, "state": state_path, "backend": backend_name,
            "slurm_topology": slurm_topology, "slurm_conf": slurm_conf, "spool": spool,
            "tag_for_daemon": tag_for_daemon}
    out = sys.stdout
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, deadline)
    try:
        lines, status = _planning().plan_answer(options_json, kind, site)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except _Late:
        _answer(out, [("warning", f"planning took longer than {deadline:g} s")])
        raise click.exceptions.Exit(3)
    except Exception as exc:  # a bug must not stop a submission: one line, never a traceback
        signal.setitimer(signal.ITIMER_REAL, 0)
        _answer(out, [("warning", f"internal error ({type(exc).__name__}: {exc})")])
        raise click.exceptions.Exit(3)
    finally:
        signal.signal(signal.SIGALRM, old)
    _answer(out, lines)
    if status:
        raise click.exceptions.Exit(status)


def _answer(out, lines) -> None:
    text = [PROTOCOL]
    for kind, value in lines:
        if value is None:
            text.append(kind)
        elif kind == "set":
            text.append(f"set\t{value}")
        else:
            text.append(f"{kind}\t{_clean(value)}")
    out.write("\n".join(text) + "\n")
    out.flush()


@command.command("task-prolog")
def task_prolog_command():
    """Print this task's TaskProlog lines (export/unset/print); always exits 0."""
    try:
        # lazy: TaskProlog's reader (hooks.taskprolog) is no part of `hooks plan`,
        #   which loads this module: 8 ms measured
        from slurmtopo.hooks.taskprolog import prolog_lines

        lines = prolog_lines(os.environ)
    except SlurmtopoError as exc:
        lines = [f"print slurmtopo: the task's variables are not set: {_clean(exc.render())}"]
    except Exception as exc:  # a bug must not stop a task: one line, never a traceback
        lines = [f"print slurmtopo: the task's variables are not set: internal error "
                 f"({_clean(f'{type(exc).__name__}: {exc}')})"]
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()


@command.command("check")
@click.argument("script", required=False, type=click.Path(dir_okay=False))
@click.option("--inventory", required=True, metavar="PATH",
              help="The inventory the site's hooks plan with.")
@click.option("--state", "state_path", default="live", show_default=True,
              metavar="live|none|FILE", help="Cluster state to plan against.")
@click.option("--backend", "backend_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cli", "pyslurm"]), help="How to talk to Slurm.")
@click.option("--sbatch", "sbatch_args", multiple=True, metavar="OPTION",
              help="An option as given on sbatch's command line, e.g. --sbatch=--nodes=2 "
                   "(repeatable; for a script on stdin or --wrap, give the directive in "
                   "$SLURMTOPO_DIRECTIVE).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: whether the job has a directive, the sbatch "
                   "options the hook sets (the plan's value shortened), the notes.")
def check_command(script, inventory, state_path, backend_name, sbatch_args, as_json):
    """Show what the cli_filter hook would do to a batch script (submits nothing)."""
    _planning().check_script(script, inventory, state_path, backend_name, sbatch_args, as_json)
