"""The ``#SLURMTOPO`` directive: a plan request in a plain batch script (pure).

A site that installs slurmtopo's Slurm hooks (docs/admin.md, "Slurm hooks")
plans every job that carries a directive the way ``slurmtopo sbatch``
plans it, whoever submits it (a script, submitit, a CI job)::

    #!/bin/bash
    #SBATCH --nodes=4 --gpus-per-node=8
    set -e
    #SLURMTOPO --tp 8 --pp 4 --framework torchtitan --config train.toml
    srun python train.py

The directive comes from any of three places, read in this order:

* ``#SLURMTOPO`` lines of the batch script. They must follow the script's
  first command: sbatch reads every header line starting with ``#SLURM``
  (the old spelling of ``#SBATCH``) as its own directive, so in the header
  ``#SLURMTOPO --tp 8`` is sbatch's ``TOPO --tp 8`` and sbatch refuses the
  script ("Invalid directive found in batch script: TOPO") before any hook
  runs. :func:`header_problem` finds such a line, for the one-line error
  the hooks give instead;
* the environment variable ``SLURMTOPO_DIRECTIVE`` (tools that cannot
  edit the scripts they submit);
* a job comment starting with ``#SLURMTOPO`` (``sbatch
  --comment='#SLURMTOPO --tp 8'``: a script on stdin, which the hooks
  cannot read).

Every source present adds its words, in that order, to one argument vector
(the later value of an option wins, as sbatch's command line wins over its
script). The words are cut as sbatch cuts an ``#SBATCH`` line
(:func:`slurmtopo.sbatch.directives.split_directive`: blanks separate,
quotes group, a backslash escapes, an unquoted ``#`` ends the line); nothing
is expanded, so ``$(...)``, backticks and ``;`` are plain characters of a
word. What the words mean is read with the options ``slurmtopo plan`` has
(:mod:`slurmtopo.commands.directive`).

Bounded before anything is split: the directive's text at most
:data:`MAX_BYTES`, :data:`MAX_WORDS` words and :data:`MAX_LINES`
``#SLURMTOPO`` lines, no control characters; only the first
:data:`SCAN_BYTES` of a script are searched. Every error is a
:class:`DirectiveError` naming where (``job.sh:4``, ``$SLURMTOPO_DIRECTIVE``,
``--comment``).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.sbatch.directives import DirectiveError as SbatchDirectiveError
from slurmtopo.sbatch.directives import split_directive

#: the magic word of a directive line (and of a directive comment)
PREFIX = "#SLURMTOPO"
#: the environment variable holding a directive
ENV_VAR = "SLURMTOPO_DIRECTIVE"
#: where a comment directive comes from, for error lines
COMMENT_SOURCE = "--comment"
#: the directive's text over all sources, in bytes
MAX_BYTES = 4096
#: words over all sources
MAX_WORDS = 256
#: ``#SLURMTOPO`` lines in one script
MAX_LINES = 64
#: how much of a script is searched (sbatch's default max_script_size is
#: 4 MiB; a directive sits near the top)
SCAN_BYTES = 1 << 20

_LINE = re.compile(r"^#SLURMTOPO(?=$|[ \t])(.*)$")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_BLANKS = " \t\n\v\f\r"


class DirectiveError(SlurmtopoError):
    """A directive that cannot be read: the user's to fix (exit code 2)."""


@dataclass(frozen=True)
class Directive:
    """The words of a job's directive and where each came from."""

    words: Tuple[str, ...]
    #: one entry per word: ``job.sh:4``, ``$SLURMTOPO_DIRECTIVE`` or ``--comment``
    origins: Tuple[str, ...]

    @property
    def sources(self) -> Tuple[str, ...]:
        """Each place the words came from, once, in order."""
        return tuple(dict.fromkeys(self.origins))

    def where(self, word: str) -> str:
        """The place of the first word ``word`` (the sources when none)."""
        for w, o in zip(self.words, self.origins):
            if w == word or w.split("=", 1)[0] == word:
                return o
        return ", ".join(self.sources)

    def text(self) -> str:
        """The words, shell-quoted, for a reader."""
        return " ".join(shlex.quote(w) for w in self.words)


def directive_lines(script_text: str, name: str = "script") -> List[Tuple[int, str]]:
    """(line number, text after ``#SLURMTOPO``) of every directive line in
    the script's first :data:`SCAN_BYTES`; at most :data:`MAX_LINES`."""
    out: List[Tuple[int, str]] = []
    head = script_text[:SCAN_BYTES]
    if PREFIX not in head:  # the usual script: one search, no split
        return out
    for n, line in enumerate(head.split("\n"), 1):
        if not line.startswith(PREFIX):
            continue
        m = _LINE.match(line.rstrip("\r"))
        if m is None:
            continue  # #SLURMTOPOX: another word
        if len(out) >= MAX_LINES:
            raise DirectiveError(f"more than {MAX_LINES} {PREFIX} lines", name, n)
        out.append((n, m.group(1)))
    return out


def header_problem(script_text: str, name: str = "script") -> Optional[str]:
    """Why sbatch refuses this script before any hook runs (None: it does
    not for this reason): a ``#SLURMTOPO`` line in the header, which sbatch
    reads as its old ``#SLURM`` directive."""
    for n, line in enumerate(script_text[:SCAN_BYTES].split("\n"), 1):
        if line.startswith(PREFIX):
            return (f"{name}:{n}: sbatch reads {PREFIX} lines before the script's first "
                    "command as its own #SLURM directives (\"Invalid directive found in "
                    "batch script: TOPO\"); move the line below the first command (after "
                    "`set -e`, for instance)")
        rest = line.lstrip(_BLANKS)
        if rest and not rest.startswith("#"):
            return None  # the first command: sbatch reads no further
    return None


def _words(text: str, where: str) -> List[str]:
    if _CONTROL.search(text):
        raise DirectiveError(f"{where}: the directive contains a control character")
    try:
        return split_directive(text)
    except SbatchDirectiveError as exc:
        raise DirectiveError(f"{where}: {exc.message.replace('#SBATCH', PREFIX)}") from None


def find_directive(script_text: Optional[str], env: Mapping[str, str],
                   comment: Optional[str] = None, script_name: str = "script"
                   ) -> Optional[Directive]:
    """The job's directive (None: it carries none, and is left alone).

    ``script_text``: the batch script (None: not readable, e.g. on stdin);
    ``env``: the submitting environment; ``comment``: the job's comment."""
    parts: List[Tuple[str, str]] = []
    if script_text:
        parts += [(text, f"{script_name}:{n}") for n, text in
                  directive_lines(script_text, script_name)]
    value = env.get(ENV_VAR)
    if value is not None and value.strip():
        text = value.strip()
        if text.startswith(PREFIX) and (len(text) == len(PREFIX) or text[len(PREFIX)] in _BLANKS):
            text = text[len(PREFIX):]
        parts.append((text, f"${ENV_VAR}"))
    if comment is not None and comment.startswith(PREFIX) \
            and (len(comment) == len(PREFIX) or comment[len(PREFIX)] in _BLANKS):
        parts.append((comment[len(PREFIX):], COMMENT_SOURCE))
    if not parts:
        return None
    size = sum(len(t.encode("utf-8", "surrogatepass")) for t, _ in parts)
    if size > MAX_BYTES:
        raise DirectiveError(f"{parts[0][1]}: the directive is {size:,} bytes; at most "
                             f"{MAX_BYTES:,}")
    words: List[str] = []
    origins: List[str] = []
    for text, where in parts:
        got = _words(text, where)
        words += got
        origins += [where] * len(got)
    if len(words) > MAX_WORDS:
        raise DirectiveError(f"{parts[0][1]}: the directive has {len(words)} words; at most "
                             f"{MAX_WORDS}")
    return Directive(words=tuple(words), origins=tuple(origins))
