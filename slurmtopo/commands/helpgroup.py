"""The one way every command group lists its sub-commands in ``--help``.

click cuts each sub-command's summary at 45 characters with '...', so
``slurmtopo agent --help`` showed "Print (or write) this node's report:
the inventory schema,..." while ``slurmtopo --help`` showed whole
sentences. Every group (the top level and ``agent``, ``topology``,
``gres``, ``daemon``, ``inventory``) uses :class:`SentenceGroup` instead.
"""
from __future__ import annotations

import click


class SentenceGroup(click.Group):
    """A click group whose command list gives each command's whole first
    paragraph (its ``short_help`` when set); the formatter wraps long ones."""

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            text = cmd.short_help or " ".join((cmd.help or "").split("\n\n")[0].split())
            rows.append((name, text))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
