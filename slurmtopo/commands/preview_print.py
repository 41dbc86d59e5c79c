"""Printing the plan preview: without rich where rich would print no
colours (a file, a pipe, CI: ``slurmtopo.show.plainout``, the same bytes), with
rich on a terminal."""
from __future__ import annotations

import sys
from typing import Sequence

from slurmtopo.show import plainout


def print_parts(parts: Sequence[object], stderr: bool = False) -> None:
    """Print :func:`slurmtopo.show.preview.plan_parts` on stdout (or stderr)."""
    stream = sys.stderr if stderr else sys.stdout
    width = plainout.plain_width(stream)
    if width is not None and plainout.all_narrow(parts):
        stream.write(plainout.render(parts, width))
        stream.flush()
        return
    # lazy: a plan / sbatch --dry-run printed into a file or a pipe (scripts, CI) never
    # loads rich (~25 ms for these two); only a terminal does
    from rich.console import Console
    from slurmtopo.show import tablefit

    tablefit.print_parts(Console(stderr=stderr, soft_wrap=False), parts)
