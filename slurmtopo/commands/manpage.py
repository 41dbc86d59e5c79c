"""slurmtopo(1), the man page, written from the click command tree.

The page is generated, never edited: every command and sub-command with
its usage, its help and each option's help, in the order ``--help`` shows
them, so it cannot drift from the CLI (tests/test_manpage.py regenerates
it and compares). ``scripts/gen-manpage.py`` writes docs/man/slurmtopo.1,
which pip installs as share/man/man1/slurmtopo.1.

Deterministic: no date, no terminal width, nothing from the environment;
the same CLI gives the same bytes.
"""
from __future__ import annotations

import inspect
from typing import Iterator, List, Optional, Tuple

import click

from slurmtopo import __version__
from slurmtopo.cli import cli

#: where the generated page lives in the checkout
MAN_PATH = "docs/man/slurmtopo.1"
#: how to regenerate it (said by the test that finds it stale)
REGENERATE = "python3 scripts/gen-manpage.py"

SEE_ALSO = ("sbatch(1)", "srun(1)", "scontrol(1)", "slurm.conf(5)", "topology.conf(5)",
            "gres.conf(5)", "nvidia-smi(1)", "torchrun(1)")


def _escape(text: str) -> str:
    """Text safe in roff: backslashes and hyphens escaped, and no line that
    starts with a control character ('.' or ')."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + ln) if ln.startswith((".", "'")) else ln
                     for ln in out.split("\n"))


def _paragraphs(help_text: str) -> Iterator[Tuple[bool, str]]:
    """(verbatim, text) of each paragraph of a click help text: click's
    ``\\b`` marks one not to rewrap; ``\\f`` ends what --help shows."""
    text = help_text.split("\f", 1)[0]

    text = inspect.cleandoc(text)
    for para in text.split("\n\n"):
        if not para.strip():
            continue
        if para.lstrip().startswith("\b"):
            yield True, para.lstrip()[1:].strip("\n")
        else:
            yield False, " ".join(para.split())


def _help_block(help_text: Optional[str]) -> List[str]:
    lines: List[str] = []
    for verbatim, para in _paragraphs(help_text or ""):
        lines.append(".PP")
        if verbatim:
            lines += [".nf", _escape(para), ".fi"]
        else:
            lines.append(_escape(para))
    return lines


def _options(cmd: click.Command, ctx: click.Context) -> List[str]:
    """Each option's ``.TP`` entry. Only options: arguments are in the
    usage line, and whether click gives them a help record of their own
    differs by release (8.5 does), so the page would change with click."""
    lines: List[str] = []
    params = list(cmd.params)
    if cmd.add_help_option and ctx.help_option_names:
        # built here, not click's get_help_option(): click caches that one on
        # the command the first time any context asks, with that context's
        # help names, so a Context made without the CLI's settings (by a
        # test, say) would change the page after it
        params.append(click.Option(list(ctx.help_option_names), is_flag=True,
                                   expose_value=False, help="Show this message and exit."))
    for param in params:
        if not isinstance(param, click.Option):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        lines += [".TP", f"\\fB{_escape(names)}\\fR"]
        lines.append(_escape(" ".join(help_text.split())) if help_text.strip() else "")
    return lines


def _walk(cmd: click.Command, ctx: click.Context) -> Iterator[Tuple[click.Command,
                                                                    click.Context]]:
    """Every command under ``cmd`` (itself first), in --help's order."""
    yield cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from _walk(sub, click.Context(sub, info_name=name, parent=ctx))


def render(cli: click.Command, version: str) -> str:
    """The whole page as roff text."""
    root = click.Context(cli, info_name="slurmtopo", **cli.context_settings)
    first = next(iter(_paragraphs(cli.help or "")), (False, ""))[1]
    out = [f'.TH SLURMTOPO 1 "" "slurmtopo {_escape(version)}" "User Commands"',
           ".SH NAME", f"slurmtopo \\- {_escape(first.rstrip('.'))}",
           ".SH SYNOPSIS", ".B slurmtopo", "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
           ".SH DESCRIPTION"]
    out += _help_block(cli.help)
    out += [".PP", "Every command takes \\fB\\-h\\fR/\\fB\\-\\-help\\fR. Errors are one "
            "line, \\fBslurmtopo: error: \\fR\\fIwhere\\fR\\fB: \\fR\\fIwhat\\fR, on stderr.",
            ".SH OPTIONS"]
    out += _options(cli, root)
    out.append(".SH COMMANDS")
    for cmd, ctx in _walk(cli, root):
        if ctx is root:
            continue
        usage = " ".join([ctx.command_path] + cmd.collect_usage_pieces(ctx))
        out.append(f'.SS "{_escape(usage)}"')
        out += _help_block(cmd.help or cmd.short_help)
        out += _options(cmd, ctx)
    out += [".SH SHELL COMPLETION",
            "Bash, zsh and fish complete commands and options through click; for bash, add",
            "to ~/.bashrc:", ".PP", ".nf",
            _escape('eval "$(_SLURMTOPO_COMPLETE=bash_source slurmtopo)"'), ".fi", ".PP",
            "(zsh: \\fBzsh_source\\fR, fish: \\fBfish_source\\fR).",
            ".SH SEE ALSO", ", ".join(f"\\fB{n.split('(')[0]}\\fR({n.split('(')[1]}"
                                      for n in SEE_ALSO),
            ".PP", "The project's docs/ (README.md, docs/sbatch.md, docs/admin.md).", ""]
    return "\n".join(out)


def generate() -> str:
    """slurmtopo(1) of this checkout's CLI."""
    return render(cli, __version__)
