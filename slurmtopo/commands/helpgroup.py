"""The one way every command group lists its sub-commands in ``--help``.

click cuts each sub-command's summary at 45 characters with '...', so
``slurmtopo agent --help`` showed "Print (or write) this node's report:
the inventory schema,..." while ``slurmtopo --help`` showed whole
sentences. Every group (the top level and ``agent``, ``topology``,
``gres``, ``daemon``, ``inventory``) uses :class:`SentenceGroup` instead.
"""
from __future__ import annotations

import click


def summary(cmd: click.Command) -> str:
    """The one line a group's ``--help`` gives ``cmd``: its ``short_help``
    when set, else its help's whole first paragraph on one line."""
    return cmd.short_help or " ".join((cmd.help or "").split("\n\n")[0].split())


class SentenceGroup(click.Group):
    """A click group whose command list gives each command's whole first
    paragraph (its ``short_help`` when set); the formatter wraps long ones."""

    def command_summary(self, ctx, name):
        """``name``'s line in the command list, or None to leave it out
        (unknown or hidden). A group whose commands load lazily overrides
        this to list them without loading them (slurmtopo.cli.LazyGroup)."""
        cmd = self.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            return None
        return summary(cmd)

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            text = self.command_summary(ctx, name)
            if text is not None:
                rows.append((name, text))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
