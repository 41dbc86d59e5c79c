"""One error type for everything a user can get wrong.

Every failure a user can cause (a bad file, a layout that cannot fit, Slurm
refusing a job) is raised as :class:`SlurmtopoError`. The CLI catches it and
prints exactly one line, ``slurmtopo: error: <where>: <what>``, and exits
non-zero, so no user ever sees a traceback for their own input.
"""
from __future__ import annotations

from typing import Optional


class SlurmtopoError(Exception):
    """A user-facing error: one line, optionally located at ``file:line``."""

    exit_code = 2

    def __init__(self, message: str, path: Optional[str] = None, line: Optional[int] = None):
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        super().__init__(self.render())

    @property
    def where(self) -> str:
        if self.path and self.line:
            return f"{self.path}:{self.line}"
        return self.path or ""

    def render(self) -> str:
        text = " ".join(self.message.split())  # always one line
        return f"{self.where}: {text}" if self.where else text

    def render_with(self, argv) -> str:
        """The line the command line prints, given the arguments the user
        typed (``argv``): :meth:`render`, unless an error suggests a whole
        command line made from them (slurmtopo.plan.launch_detect)."""
        return self.render()


class InventoryError(SlurmtopoError):
    """Bad inventory, node report, state snapshot or fabric description."""


class LayoutError(SlurmtopoError):
    """A parallel layout that is invalid (the frameworks would reject it)."""


class PlacementError(SlurmtopoError):
    """The free resources cannot hold the job; the message says why."""

    exit_code = 3


class NotNowError(PlacementError):
    """The job fits the cluster, but not what is free in the state planned
    against ("not now"): ``slurmtopo sbatch`` would plan it for the queue.
    Its own exit code, so a script can tell it from "never" (3): a job that
    cannot run here even on an idle cluster (docs/slurm.md, "Exit codes")."""

    exit_code = 5


class SlurmError(SlurmtopoError):
    """Slurm refused something; the message carries Slurm's own words."""

    exit_code = 4


class UnreadableFile(SlurmtopoError):
    """The file a check was given cannot be read or parsed: the worst verdict
    a check gives (exit status 1), not a usage error. ``stage`` says which
    ("cannot be read", "cannot be parsed")."""

    exit_code = 1

    def __init__(self, stage: str, message: str, path: Optional[str] = None,
                 line: Optional[int] = None):
        super().__init__(message, path, line)
        self.stage = stage
