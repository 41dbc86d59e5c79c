"""``#SBATCH`` lines read the way sbatch reads them (pure).

slurmtopo refuses ``--sbatch`` extras that set what the plan decides
(``--nodes``, ``--nodelist``, ...). Comparing the text with those names is
not enough, because sbatch reads a directive with getopt_long: ``-vN3`` is
``-v -N 3``, ``--nodel=node4`` is ``--nodelist=node4`` (any unique prefix of
a long name), and ``-J --nodes=3`` is only a job name. So the extras are
read here exactly as sbatch reads its script (src/sbatch/opt.c):

* every ``#SBATCH`` line is cut into words by ``get_argument()``: blanks
  separate words, single or double quotes group them, a backslash takes
  the next character as it is, an unquoted ``#`` ends the line, and a word
  that is empty (``""``) ends the line too;
* the words of all lines form one argument vector, read by ``getopt_long``
  with sbatch's table (:mod:`slurmtopo.sbatch.slurm_options`) in ``+`` mode:
  bundled short options, a required argument attached or in the next word,
  an optional one only attached; long options by exact name or unique
  prefix (several matches are ambiguous unless they are one option); the
  first word that is not an option ends the options, and sbatch then
  refuses the script.

A batch script's own directives are read here too, for everyone who needs
them (the daemon's submit, the pyslurm backend): :func:`script_options`
finds the ``#SBATCH`` lines as ``_opt_batch_script()`` does (the magic word
at the start of a line, ``#SLURM`` too; the header ends at the first line
with anything but blanks before a ``#``), and :func:`option_values` applies
sbatch's precedence: the options are applied in order, the script's lines
first and the command line after (``process_options_second_pass()``), so
the last one given wins.

Where releases differ, a word is read with every release's table
(:func:`read_extras`) and the caller refuses what any of them would apply.
Input sbatch would fail on, or that releases read differently (a
backslash before a blank: 22.05 ends the word there, 25.11 keeps the
blank), is refused with one line.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.sbatch.slurm_options import NO, OPTIONAL, REQUIRED, VERSIONS, Option, \
    known_anywhere, table

#: isspace() in the C locale
_BLANKS = " \t\n\v\f\r"
#: words that separate the components of a heterogeneous job
_HET_WORDS = ("hetjob", "packjob")


@dataclass(frozen=True)
class Directive:
    """One option sbatch applies: ``written`` as it appears in the extra
    (``-N``, ``--nodel``), the ``option`` it is (None: no release knows it,
    a SPANK plugin's), its ``value`` (None: none given) and ``extra``, the
    index of the ``--sbatch`` text it came from."""

    written: str
    option: Optional[Option]
    value: Optional[str]
    extra: int


class DirectiveError(SlurmtopoError):
    """An extra sbatch would refuse or that releases read differently."""


def split_directive(text: str) -> List[str]:
    """The words sbatch's ``get_argument()`` makes of one ``#SBATCH`` line
    (``text`` is what follows ``#SBATCH``)."""
    if "\x00" in text or "\n" in text or "\r" in text:
        raise DirectiveError(f"{text!r} contains a newline or NUL; an #SBATCH directive is one "
                             "line")
    words: List[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _BLANKS:
            i += 1
        for het in _HET_WORDS:
            end = i + len(het)
            if text[i:end].lower() == het and (end == n or text[end] in _BLANKS):
                raise DirectiveError(f"{text!r}: {text[i:end]!r} separates heterogeneous job "
                                     "components, which slurmtopo does not plan")
        if i < n and text[i] == ":":
            raise DirectiveError(f"{text!r}: sbatch refuses a word starting with ':'")
        if i >= n:
            return words
        word: Optional[List[str]] = None
        quote = ""
        escaped = False
        while i < n and (quote or text[i] not in _BLANKS):
            c = text[i]
            if escaped:
                escaped = False
            elif c == "\\":
                i += 1
                if i < n and text[i] == " ":
                    raise DirectiveError(f"{text!r}: a backslash before a blank is read "
                                         "differently by Slurm releases (22.05 ends the word "
                                         "there); quote the word instead")
                escaped = True
                continue
            elif quote:
                if c == quote:
                    quote = ""
                    i += 1
                    continue
            elif c in "\"'":
                quote = c
                i += 1
                continue
            elif c == "#":
                break  # the rest of the line is a comment
            if word is None:
                word = []
            word.append(c)
            i += 1
        if quote:
            raise DirectiveError(f"{text!r}: unmatched {quote}")
        if word is None:
            return words  # get_argument returns NULL: sbatch reads no more of this line
        words.append("".join(word))
        if i < n and text[i] == "#":
            return words


def _long(name: str, options: Sequence[Option], version: str) -> Optional[Option]:
    """getopt_long's choice for ``--name``: the exact name, else the one
    option all names starting with it stand for (None: none does)."""
    for o in options:
        if o.name == name:
            return o
    found = [o for o in options if o.name.startswith(name)]
    if not found:
        return None
    first = found[0]
    if any((o.argument, o.val) != (first.argument, first.val) for o in found[1:]):
        names = ", ".join("--" + o.name for o in found[:6]) + (", ..." if len(found) > 6 else "")
        raise DirectiveError(f"--{name} is ambiguous to sbatch (Slurm {version}: {names}); "
                             "give the whole name")
    return first


def parse_words(words: Sequence[Tuple[str, int]], version: str) -> List[Directive]:
    """The options sbatch of ``version`` applies for ``words`` ((word,
    extra index) pairs, all lines in order): getopt_long in ``+`` mode.
    Raises DirectiveError where sbatch would refuse the script; stops (with
    what was read) at a long option only other releases know, which this
    release refuses."""
    options = table(version)
    shorts: Dict[str, Option] = {o.short: o for o in options if o.short}
    anywhere = known_anywhere()
    out: List[Directive] = []
    i = 0
    while i < len(words):
        word, extra = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            opt = _long(name, options, version)
            if opt is None:
                if any(n.startswith(name) for n in anywhere):
                    return out  # unknown to this release: its sbatch refuses the script
                out.append(Directive("--" + name, None, value if eq else None, extra))
                i += 1
                continue
            if eq and opt.argument == NO:
                raise DirectiveError(f"--{name} (--{opt.name}) takes no argument in Slurm "
                                     f"{version}")
            if not eq and opt.argument == REQUIRED:
                if i + 1 >= len(words):
                    raise DirectiveError(f"--{name} (--{opt.name}) needs an argument")
                i += 1
                value, eq = words[i][0], "="
            out.append(Directive("--" + name, opt, value if eq else None, extra))
            i += 1
            continue
        j = 1
        while j < len(word):
            opt = shorts.get(word[j])
            if opt is None:
                raise DirectiveError(f"sbatch has no option -{word[j]} (in {word!r})")
            rest = word[j + 1:]
            if opt.argument == NO:
                out.append(Directive("-" + word[j], opt, None, extra))
                j += 1
                continue
            if not rest and opt.argument == REQUIRED:
                if i + 1 >= len(words):
                    raise DirectiveError(f"-{word[j]} (--{opt.name}) needs an argument")
                i += 1
                rest = words[i][0]
            out.append(Directive("-" + word[j], opt, rest or None, extra))
            break
        i += 1
    if i < len(words):
        raise DirectiveError(f"{words[i][0]!r} is not an option: sbatch stops reading options "
                             "there and refuses the script (a value that starts a word must "
                             "follow its option, or use --option=value)")
    return out


def read_extras(extras: Sequence[str], versions: Sequence[str] = VERSIONS
                ) -> Dict[str, List[Directive]]:
    """release -> the options its sbatch applies for these ``#SBATCH``
    extras (each one line, in order, after slurmtopo's own directives)."""
    words = [(w, k) for k, text in enumerate(extras) for w in split_directive(text)]
    return {v: parse_words(words, v) for v in versions}


#: the words sbatch reads directives after (``#SLURM`` with a warning)
_MAGIC = ("#SBATCH", "#SLURM")


def script_directive_texts(script_text: str) -> List[str]:
    """What follows the magic word on each directive line of the script's
    header, in order, as sbatch's ``_opt_batch_script()`` finds them."""
    out: List[str] = []
    for line in script_text.splitlines():
        magic = next((m for m in _MAGIC if line.startswith(m)), None)
        if magic is None:
            rest = line.lstrip(_BLANKS)
            if rest and not rest.startswith("#"):
                break  # the first command ends the header
            continue
        out.append(line[len(magic):])
    return out


def script_options(script_text: str, args: Sequence[str] = (),
                   version: str = VERSIONS[-1]) -> List[Directive]:
    """Every option sbatch of ``version`` applies for the script and then
    for ``args`` (options on sbatch's command line), in the order it applies
    them. DirectiveError where sbatch would refuse them."""
    words = [(w, 0) for text in script_directive_texts(script_text)
             for w in split_directive(text)]
    return parse_words(words, version) + parse_words([(str(a), 1) for a in args], version)


def option_values(directives: Sequence[Directive]) -> Dict[str, Optional[str]]:
    """Long option name -> the value sbatch ends with (None: given without
    one): the last directive wins, as each one overrides what came before."""
    out: Dict[str, Optional[str]] = {}
    for d in directives:
        out[d.option.name if d.option is not None else d.written.lstrip("-")] = d.value
    return out
