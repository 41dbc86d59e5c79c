"""The hooks' files as a site installs them (pure: templates and settings
in, file texts out).

The files ship with the package (``slurmtopo/data/hooks/``):
``cli_filter.lua`` (submit hosts), ``task_prolog.sh`` (compute nodes) and
``job_submit.lua`` (the controller, optional). Each has one block between
``@@SLURMTOPO CONFIG BEGIN@@`` and ``@@SLURMTOPO CONFIG END@@`` that holds
the site's settings; ``job_submit.lua`` also an ``OPTIONS`` block, the
directive's options with the kind of value each takes, written from the
installed slurmtopo's own option list so that the controller's check and
the planning call agree on what a directive may say. :func:`render`
replaces those blocks and nothing else; ``slurmtopo admin install-hooks``
writes the result.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Sequence, Tuple

import slurmtopo
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import read_text

#: the files, by name in slurmtopo/data/hooks
CLI_FILTER = "cli_filter.lua"
JOB_SUBMIT = "job_submit.lua"
TASK_PROLOG = "task_prolog.sh"
#: a line every file slurmtopo writes carries (an existing file without it
#: is the site's own, and is not replaced without --force)
MARK = "@@SLURMTOPO CONFIG BEGIN@@"

_BLOCK = re.compile(r"(?ms)^(?P<lead>\S+) @@SLURMTOPO (?P<name>[A-Z]+) BEGIN@@\n.*?"
                    r"^(?P=lead) @@SLURMTOPO (?P=name) END@@$")


def template_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(slurmtopo.__file__)), "data", "hooks")


def template(name: str) -> str:
    """A shipped file's text."""
    return read_text(os.path.join(template_dir(), name), limit=1 << 20)


@dataclass(frozen=True)
class HookSettings:
    """What a site chooses (docs/admin.md, "Slurm hooks")."""

    command: str                    # slurmtopo's absolute path, on every host
    inventory: str                  # the inventory's absolute path, on every host
    state: str = "live"
    plan_timeout: float = 5.0
    task_timeout: float = 120.0
    timeout_command: str = "timeout"
    on_bad_directive: str = "refuse"
    notes: bool = True
    hold_for_daemon: bool = False
    extra_args: Tuple[str, ...] = ()

    def check(self) -> None:
        for what, path in (("--command", self.command), ("--inventory", self.inventory)):
            if not os.path.isabs(path):
                raise SlurmtopoError(f"{what} {path!r}: give an absolute path (the hooks run "
                                     "in other directories, on other hosts)")
        if self.on_bad_directive not in ("refuse", "warn"):
            raise SlurmtopoError("--on-bad-directive must be refuse or warn")
        for value in (self.command, self.inventory, self.state, self.timeout_command,
                      *self.extra_args):
            if any(c in value for c in "\n\r\x00"):
                raise SlurmtopoError(f"{value!r}: a setting holds a newline")


def lua_string(text: str) -> str:
    """``text`` as a Lua string literal (5.1 to 5.4): quotes, backslashes and
    every control character escaped as decimal escapes."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\{ord(ch):03d}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _lua_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))   # Lua 5.4 writes 5.0 as "5.0" in the command line
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(_lua_value(v) for v in value) + "}"
    return lua_string(str(value))


def _lua_table(name: str, items: Sequence[Tuple[str, object]]) -> str:
    lines = [f"local {name} = {{"]
    for key, value in items:
        lines.append(f"  [{lua_string(key)}] = {_lua_value(value)},")
    lines.append("}")
    return "\n".join(lines)


def _replace(text: str, blocks: Mapping[str, str], name: str) -> str:
    found = set()

    def swap(m: "re.Match") -> str:
        block = m.group("name")
        if block not in blocks:
            return m.group(0)
        found.add(block)
        lead = m.group("lead")
        return (f"{lead} @@SLURMTOPO {block} BEGIN@@\n{blocks[block]}\n"
                f"{lead} @@SLURMTOPO {block} END@@")

    out = _BLOCK.sub(swap, text)
    missing = set(blocks) - found
    if missing:
        raise SlurmtopoError(f"{name}: no {sorted(missing)[0]} block to fill in")
    return out


def render_cli_filter(settings: HookSettings, text: str) -> str:
    return _replace(text, {"CONFIG": _lua_table("CONFIG", [
        ("enabled", True), ("command", settings.command), ("inventory", settings.inventory),
        ("state", settings.state),
        # job_submit.lua's hold_for_daemon needs the daemon's request in the job
        ("extra_args", list(settings.extra_args)
         + (["--tag-for-daemon"] if settings.hold_for_daemon else [])),
        ("timeout", settings.plan_timeout), ("timeout_command", settings.timeout_command),
        ("on_bad_directive", settings.on_bad_directive), ("notes", settings.notes)])},
        CLI_FILTER)


def render_job_submit(settings: HookSettings, options: Mapping[str, str], text: str) -> str:
    return _replace(text, {
        "CONFIG": _lua_table("CONFIG", [("enabled", True),
                                        ("hold_for_daemon", settings.hold_for_daemon)]),
        "OPTIONS": _lua_table("OPTIONS", sorted(options.items()))}, JOB_SUBMIT)


def render_task_prolog(settings: HookSettings, text: str) -> str:
    q = shlex.quote
    return _replace(text, {"CONFIG": "\n".join([
        f"SLURMTOPO_COMMAND={q(settings.command)}",
        f"SLURMTOPO_TIMEOUT={q(format(settings.task_timeout, 'g'))}",
        f"SLURMTOPO_TIMEOUT_COMMAND={q(settings.timeout_command)}"])}, TASK_PROLOG)


@dataclass(frozen=True)
class Rendered:
    """The files to write: (path, text, mode), and slurm.conf's lines."""

    files: List[Tuple[str, str, int]] = field(default_factory=list)
    conf_lines: List[str] = field(default_factory=list)


def render(settings: HookSettings, slurm_dir: str, task_prolog: str, job_submit: bool,
           options: Mapping[str, str], texts: Dict[str, str]) -> Rendered:
    """Every file of the installation and the slurm.conf lines that turn
    the hooks on. ``texts``: the shipped templates by name."""
    settings.check()
    files = [(os.path.join(slurm_dir, CLI_FILTER), render_cli_filter(settings, texts[CLI_FILTER]),
              0o644),
             (task_prolog, render_task_prolog(settings, texts[TASK_PROLOG]), 0o755)]
    conf = ["CliFilterPlugins=cli_filter/lua", f"TaskProlog={task_prolog}"]
    if job_submit:
        files.append((os.path.join(slurm_dir, JOB_SUBMIT),
                      render_job_submit(settings, options, texts[JOB_SUBMIT]), 0o644))
        conf.append("JobSubmitPlugins=lua")
    return Rendered(files=files, conf_lines=conf)
