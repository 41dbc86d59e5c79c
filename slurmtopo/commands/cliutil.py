"""Pieces the admin commands share: the write options and the output.

``topology generate`` and ``gres generate`` write the same way (``--output``,
``--diff``, ``--force``, ``--reconfigure``, ``--slurm-conf``), so they share
one option decorator, and every admin command prints its messages, its JSON
object and a check's verdict the same way. What they do is the api's
(:func:`slurmtopo.api.generate_topology` and its siblings), which reads
their option values through :mod:`slurmtopo.admin.inputs`.
"""
from __future__ import annotations

import functools
import json
from typing import List, Optional

import click

from slurmtopo.errors import SlurmtopoError, UnreadableFile
from slurmtopo.files.fileio import KEEP_BACKUPS
from slurmtopo.slurmfmt.gres_lines import parse_slurm_version


class Failed(SlurmtopoError):
    """Some nodes failed / a checked file has problems: exit status 1 (the
    details were printed before)."""

    exit_code = 1


def echo_err(text: str) -> None:
    click.echo(text, err=True)


def echo_out(text: str) -> None:
    click.echo(text)


def _slurm_version(_ctx, _param, value):
    try:
        return parse_slurm_version(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _version_option(help_text: str):
    def decorate(func):
        return click.option("--slurm-version", "slurm_version", default=None,
                            callback=_slurm_version, metavar="X.Y[.Z]", help=help_text)(func)
    return decorate


#: --slurm-version: the release whose gres.conf format to write
slurm_version_option = _version_option(
    "Slurm release the gres.conf lines are for, where formats differ (MIG lines carry Links= "
    "before 23.02.7). Default: current releases.")
#: --slurm-version: the release that will read the topology file
topology_version_option = _version_option(
    "Slurm release that reads the file: topology.yaml needs 25.05+, which then ignores "
    "topology.conf. Default: current releases.")


def write_options(func):
    """--output, --diff, --force, --reconfigure, --keep-backups, --slurm-conf,
    --nodes."""
    opts = [
        click.option("-o", "--output", type=click.Path(dir_okay=False),
                     help="File to write (default: print to stdout)."),
        click.option("--diff", is_flag=True,
                     help="Show what would change in --output (unified diff); change nothing."),
        click.option("--slurm-conf", "slurm_conf", type=click.Path(dir_okay=False),
                     help="slurm.conf to check against: every NodeName must be covered."),
        click.option("--nodes", default=None,
                     help="Only these hosts (a hostlist, e.g. 'gpu[001-128]')."),
        click.option("--force", is_flag=True,
                     help="Write even if nodes would be dropped or stranded (never output "
                          "Slurm would reject)."),
        click.option("--reconfigure", is_flag=True,
                     help="Run 'scontrol reconfigure' after a successful write."),
        click.option("--keep-backups", "keep_backups", type=click.IntRange(0, 1000),
                     default=KEEP_BACKUPS, show_default=True,
                     help="Backups of the replaced file to keep (<file>.<stamp>.bak, the "
                          "oldest removed first); 0 keeps none."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def guard(func):
    """Turn stray OSErrors from file arguments into one-line errors."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except OSError as exc:
            raise SlurmtopoError(f"{exc.strerror or exc}", getattr(exc, "filename", None)) from None
    return wrapper


def json_option(func):
    """--json: one JSON object on stdout instead of the text (the messages
    go into it too); errors stay one line on stderr."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print one JSON object instead of text (messages included).")(func)


def emit_json(doc) -> None:
    click.echo(json.dumps(doc, separators=(",", ":"), default=str))


def problems_json(problems) -> List[dict]:
    return [{"severity": p.severity, "message": p.message, "origin": p.origin}
            for p in problems]


class Messages:
    """Where a command's messages (stderr) and output (stdout) go: printed,
    or, with --json, collected for the one JSON object."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.messages: List[str] = []
        self.output: List[str] = []

    def echo(self, text: str) -> None:
        if self.as_json:
            self.messages.append(text)
        else:
            echo_err(text)

    def out(self, text: str) -> None:
        if self.as_json:
            self.output.append(text)
        else:
            echo_out(text)


def publish_report(msgs: "Messages", what: str, output: Optional[str], diff: bool, changed: bool,
                   problems) -> None:
    """With --json, the one object a generate command prints."""
    if not msgs.as_json:
        return
    text = "\n".join(msgs.output) + ("\n" if msgs.output else "")
    emit_json({"what": what, "output": output, "changed": changed,
               "written": bool(output) and not diff and changed,
               "text": text if output is None else None,
               "diff": text if diff else None,
               "problems": problems_json(problems), "messages": msgs.messages})


def checked(check, path: str, slurm_conf, as_json: bool = False):
    """``check(path, slurm_conf)`` (:func:`slurmtopo.api.check_topology` or
    :func:`~slurmtopo.api.check_gres`): its verdict.

    A file that cannot be read or parsed is the worst verdict a check can
    give, not a usage error: exit 1 like any file with problems, the one
    ``slurmtopo: error: file:line: ...`` line on stderr, and with
    ``as_json`` the verdict object on stdout as well (``ok`` false, the
    error as its one problem), so a monitoring script reads every outcome
    the same way."""
    try:
        return check(path, slurm_conf)
    except UnreadableFile as exc:
        if as_json:
            emit_json({"path": path, "summary": exc.stage, "ok": False,
                       "problems": [{"severity": "error", "message": exc.message,
                                     "origin": exc.where or None}]})
        raise Failed(exc.message, exc.path, exc.line) from None


def report_check(verdict, as_json: bool = False) -> None:
    """The end of every ``check`` command (``verdict``: an
    :class:`slurmtopo.api.FileCheck`): each problem on stderr, then a
    one-line failure (exit 1) if any would make Slurm reject the file, else
    ``path: summary: OK``. With ``as_json`` the verdict is one JSON object
    on stdout (``path``, ``summary``, ``ok``, ``problems``); exit 1 all
    the same when it is not OK."""
    if as_json:
        emit_json({"path": verdict.path, "summary": verdict.summary, "ok": verdict.ok,
                   "problems": problems_json(verdict.problems)})
    else:
        for p in verdict.problems:
            echo_err(f"{p.severity}: {p.render()}")
    if not verdict.ok:
        raise Failed(f"{verdict.summary}: {verdict.blocking} problem(s)", verdict.path)
    if not as_json:
        echo_out(f"{verdict.path}: {verdict.summary}: OK")
