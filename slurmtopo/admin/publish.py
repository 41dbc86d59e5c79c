"""Showing or writing a generated Slurm file, never leaving a broken one.

Every admin command ends here. ``--diff`` prints a unified diff against the
current file (and a summary of what changes, from the readers) and touches
nothing. A real write runs the checks first (:func:`~.checks.enforce`), then
goes through :func:`slurmtopo.files.fileio.atomic_write`: a temporary file in the
same directory, fsynced, renamed over the old one, with a timestamped backup
and the old file's mode and owner kept. slurmctld only rereads the file on
``scontrol reconfigure``; we print that step and run it only when asked.
"""
from __future__ import annotations

import difflib
import os
from typing import Callable, List, Optional, Sequence

from slurmtopo.slurmfmt.checks import ERROR, REFUSE, Problem, enforce
from slurmtopo.errors import SlurmError, SlurmtopoError
from slurmtopo.files.fileio import KEEP_BACKUPS, atomic_write, read_text
from slurmtopo.slurm.cli_backend import CliBackend

Echo = Callable[[str], None]


def current_text(path: str) -> Optional[str]:
    if not os.path.lexists(path):
        return None
    try:
        return read_text(path)
    except SlurmtopoError as exc:
        raise SlurmtopoError(f"cannot read the current file: {exc.message}", path) from None


def unified_diff(old: Optional[str], new: str, path: str) -> str:
    return "".join(difflib.unified_diff(
        (old or "").splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"{path} (current)" if old is not None else "/dev/null",
        tofile=f"{path} (new)"))


def run_reconfigure(echo: Echo, slurm=None) -> None:
    """``scontrol reconfigure`` through the Slurm backend (``slurm``; the
    command-line one unless given): slurmctld re-reads the files just
    written. Slurm's refusal is a SlurmError in Slurm's own words."""
    if slurm is None:
        slurm = CliBackend(timeout=120)
    try:
        slurm.reconfigure()
    except SlurmError as exc:
        raise SlurmError(f"scontrol reconfigure failed: {exc.message}") from None
    echo("ran: scontrol reconfigure")


def restore_after_refusal(path: str, old: Optional[str], output: str, echo: Echo) -> None:
    """Put the previous file back after slurmctld refused the new one.

    Slurm 23.11 and later keep the controller running on a refused
    ``scontrol reconfigure`` (22.05's slurmctld died), but the new file stays
    on disk, and every slurmd reads topology.conf when it (re)starts: a node
    rebooting later dies with ``fatal:`` on it (an empty one gives ``No
    switches configured``). So the old file goes back at once; when there was
    none, the new one is removed."""
    if old is None:
        try:
            os.unlink(path)
        except OSError:
            pass
        echo(f"removed {output}: slurmctld refused it")
        return
    atomic_write(path, old, mode=0o644, backup=False, keep_owner=True)
    echo(f"restored the previous {output}: slurmctld refused the new one")


def restored_note(old: Optional[str], output: str) -> str:
    return (f"the previous {output} is back in place" if old is not None
            else f"{output} was removed again")


def publish(text: str, output: Optional[str], *, what: str, problems: Sequence[Problem],
            echo: Echo, out: Echo, diff: bool = False, force: bool = False,
            changes: Optional[Callable[[str], List[str]]] = None,
            reconfigure: bool = False, next_steps: Sequence[str] = (),
            keep_backups: int = KEEP_BACKUPS) -> bool:
    """Check, then diff or write ``text``. ``out`` gets file content and
    diffs, ``echo`` messages. ``changes(old_text)`` summarises what changes.
    The replaced file is kept as a backup, the ``keep_backups`` newest
    (none with 0). Returns whether the file changed (or would change)."""
    if output is None:
        if diff or reconfigure:
            raise SlurmtopoError("--diff and --reconfigure need --output FILE")
        enforce(problems, what, force, echo)
        out(text.rstrip("\n"))
        return True
    path = os.path.realpath(output)  # write through a symlink, keep the link
    old = current_text(path)
    if diff:
        for p in problems:
            echo(f"{'would refuse' if p.severity in (ERROR, REFUSE) else 'warning'}: {p.render()}")
        if old == text:
            echo(f"{output}: no change")
        else:
            out(unified_diff(old, text, output).rstrip("\n"))
            if old is not None and changes is not None:
                try:
                    for line in changes(old):
                        echo(f"change: {line}")
                except SlurmtopoError as exc:
                    echo(f"note: the current file does not parse ({exc.render()})")
        blocking = [p for p in problems if p.severity == ERROR or (p.severity == REFUSE and not force)]
        if blocking:
            raise SlurmtopoError(f"{output} would not be written: {blocking[0].render()}")
        return old != text
    enforce(problems, what, force, echo)
    if old == text:
        echo(f"{output}: unchanged, not rewritten")
        changed = False
    else:
        backup = atomic_write(path, text, mode=0o644, backup=keep_backups > 0, keep_owner=True,
                              keep_backups=max(keep_backups, 1))
        echo(f"wrote {output}" + (f" (previous version kept as {backup})" if backup else ""))
        changed = True
    if reconfigure:
        if changed:
            try:
                run_reconfigure(echo)
            except SlurmError as exc:
                restore_after_refusal(path, old, output, echo)
                raise SlurmError(f"{exc.render()}; {restored_note(old, output)}") from None
    else:
        for step in next_steps:
            echo(f"next: {step}")
    return changed
