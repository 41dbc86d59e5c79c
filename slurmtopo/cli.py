"""The ``slurmtopo`` command: a thin click layer over the library.

Each sub-command lives in ``slurmtopo/commands/<name>.py`` and exposes a
click object named ``command``. This module only wires them together and
turns :class:`~slurmtopo.errors.SlurmtopoError` into one line on stderr and a
non-zero exit code.
"""
from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from typing import Optional

import click

from slurmtopo import __version__
from slurmtopo.commands.helpgroup import SentenceGroup
from slurmtopo.errors import SlurmtopoError
from slurmtopo.show.termsafe import printable

# sub-command name -> module under slurmtopo.commands (imported lazily, so
# `slurmtopo groups` does not pay for paramiko or pynvml).
COMMANDS = {
    "advise": "advise",
    "agent": "agent",
    "audit": "audit",
    "groups": "groups",
    "collect": "collect",
    "topology": "topology",
    "gres": "gres",
    "inventory": "inventory",
    "plan": "plan",
    "bind": "bind",
    "check": "check",
    "daemon": "daemon",
    "sbatch": "sbatch",
    "state": "state",
    "show": "show",
    "nccl-topo": "nccl_topo",
    "simulate": "simulate",
    "hooks": "hooks",
    "admin": "admin",
}


# sub-command name -> its line in `slurmtopo --help`, so that listing the
# commands imports none of their modules (importing all of them took --help
# from ~97 to ~345 ms once their imports moved to module tops). Each must
# equal what its module declares (helpgroup.summary of its ``command``):
# tests/test_cli.py checks that they have not drifted.
SUMMARIES = {
    "advise": (
        "Rank the layouts (framework, TP, PP and interleaving, CP, EP, micro-batch, "
        "recomputation, distributed optimizer, FSDP, HSDP or a ZeRO stage) that fit in memory by "
        "their modelled step on this cluster, placed by the planner; print the best as ready "
        "`slurmtopo plan` lines."),
    "agent": "Discover this GPU node, print its gres.conf, watch its health.",
    "audit": (
        "Audit the placements of running (or past) multi-node GPU jobs: leaves, blocks and NVLink"
        " domains spanned against the fewest possible, modelled cost against slurmtopo's, and "
        "stranded GPUs. With --contracts: what Slurm gave each running job against what it asked "
        "and what slurmtopo planned."),
    "groups": "Show which ranks form each group kind, as the chosen framework builds them.",
    "collect": "Collect node reports, from a shared directory or over SSH.",
    "topology": "Generate or check Slurm's network topology file.",
    "gres": "Generate or check Slurm's gres.conf.",
    "inventory": (
        "Compile a directory of node reports into one inventory file, or write a synthetic one."),
    "plan": "Place a job on the cluster, preview it, write the rank map and script.",
    "bind": "Bind a planned job to its real allocation (runs inside the batch job).",
    "check": (
        "Check this job's contracts from inside it: what Slurm gave and what its tasks really "
        "got, against what it asked and what slurmtopo bound."),
    "daemon": "The placement daemon: gang release of held jobs onto topology-good nodes.",
    "sbatch": "Plan a job on the live cluster and submit it with sbatch.",
    "state": "Dump the live Slurm cluster state as a state snapshot.",
    "show": "Show a job's planned and actual rank map.",
    "nccl-topo": "Write NCCL topology files (NCCL_TOPO_FILE) for the inventory's node types.",
    "simulate": (
        "Replay a job trace on the inventory under each placement policy: queue wait, modelled "
        "slowdown, JCT, GPU utilisation and stranded GPUs, side by side."),
    "hooks": "Run what Slurm's cli_filter and TaskProlog hooks call.",
    "admin": "Install slurmtopo into a site's Slurm.",
}


class LazyGroup(SentenceGroup):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def command_summary(self, ctx, name):
        # a registered command without a summary here (a test's) loads
        if name in COMMANDS and name in SUMMARIES:
            return SUMMARIES[name]
        return super().command_summary(ctx, name)

    def get_command(self, ctx, name):
        module = COMMANDS.get(name)
        if module is None:
            return None
        return importlib.import_module(f"slurmtopo.commands.{module}").command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmtopo")
def cli():
    """Topology-aware placement of distributed GPU training on Slurm."""


def _not_utf8(argv) -> Optional[str]:
    """The first argument that is not UTF-8 text, as one error line.

    Python hands undecodable argv bytes over as lone surrogates; every
    file slurmtopo writes (batch script, plan, reports) is UTF-8, so such
    a word failed deep inside with a UnicodeEncodeError traceback."""
    for i, word in enumerate(argv, 1):
        word = word if isinstance(word, str) else str(word)  # callers pass Paths too
        try:
            word.encode("utf-8")
        except UnicodeEncodeError:
            return (f"argument {i} ({word[:64]!r}) is not valid UTF-8: slurmtopo reads and "
                    "writes UTF-8 text only")
    return None


#: click 8.2+ raises this for a bare group (``slurmtopo``); older clicks
#: print the help and exit 0 themselves
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    bad = _not_utf8(args)
    if bad is not None:
        click.echo(f"slurmtopo: error: {printable(bad)}", err=True)
        sys.exit(2)
    try:
        # standalone_mode=False returns ctx.exit(n)'s code instead of exiting
        rc = cli.main(args=argv, prog_name="slurmtopo", standalone_mode=False)
    except SlurmtopoError as exc:
        # messages quote what the user or someone else wrote: escaped
        click.echo(f"slurmtopo: error: {printable(exc.render_with(args))}", err=True)
        sys.exit(exc.exit_code)
    except _NO_ARGS_IS_HELP as exc:
        # a bare group (`slurmtopo`, `slurmtopo agent`): its help, exit 0, as
        # git and click's own standalone mode do
        click.echo(exc.ctx.get_help() if exc.ctx is not None else cli.get_help(
            click.Context(cli, info_name="slurmtopo")))
        sys.exit(0)
    except click.exceptions.Abort:
        click.echo("slurmtopo: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # one line like every other error, naming the command's --help
        where = exc.ctx.command_path if exc.ctx is not None else "slurmtopo"
        if isinstance(exc, click.exceptions.NoSuchOption) and exc.ctx is not None \
                and any("--sbatch" in p.opts for p in exc.ctx.command.params):
            # lazy: a registry entry's module, needed only for this mistake (start-up time)
            from slurmtopo.commands.sbatch_options import sbatch_hint
            hint = sbatch_hint(exc.option_name)
            if hint is not None:  # sbatch's own option: say how to give it
                exc = click.UsageError(hint, ctx=exc.ctx)
        click.echo(f"slurmtopo: error: {printable(' '.join(exc.format_message().split()))} "
                   f"(see '{where} --help')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"slurmtopo: error: {printable(' '.join(exc.format_message().split()))}",
                   err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(1)
    except OSError as exc:
        # last resort for a file-system failure no command anticipated: still
        # one line naming the file, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"slurmtopo: error: {printable(f'{where}{exc.strerror or exc}')}", err=True)
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)


def run() -> None:
    """The program (``slurmtopo``, ``python -m slurmtopo``): :func:`main`,
    then the process ends without tearing the interpreter down.

    A command on a 12,500-node inventory leaves about a million objects
    behind, and freeing them one by one at exit costs a sixth of a small
    plan's time; the operating system takes the whole process back at
    once. The exit handlers still run and the standard streams are
    flushed first; with other threads alive, or on an uncaught exception,
    Python exits as usual. :func:`main` itself (which tests call in
    process) exits as usual too."""
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if not isinstance(code, int) or threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, a closed stream
            code = code or 1
    os._exit(code)
