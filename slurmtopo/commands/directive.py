"""What a ``#SLURMTOPO`` directive's words mean: the options of
``slurmtopo sbatch``, read by the same click definitions.

A directive (:mod:`slurmtopo.hooks.directive`) asks for a plan with any
planning option ``slurmtopo sbatch`` has: the layout (``--tp --pp --dp
--world --order``), the framework and its settings (``--framework
torchtitan --config train.toml``), the request (``--require --prefer
--gpus-per-node --message-bytes``), the launch (``--launcher``,
``--master-port``, ...) and ``--daemon``. The options are not declared
again here: the parser is ``slurmtopo sbatch``'s own option list, less
those a directive may not give, each refused with its reason
(:data:`REFUSED`):

* what the site's hooks configuration sets (``--inventory``, ``--state``,
  ``--python`` ...): a user must not point the site's hook at their own
  inventory or interpreter;
* sbatch's own options (``--partition``, ``--nodelist``, ``--exclusive``,
  ``-N`` ...): the job already gives them to sbatch, and the hook reads them
  from there;
* the srun line's (containers) and what only prints or writes files.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Optional

import click

from slurmtopo.commands.layout_options import LAYOUT_PARAMS
from slurmtopo.commands.sbatch import command as sbatch
from slurmtopo.hooks.directive import PREFIX, Directive, DirectiveError
from slurmtopo.sbatch.slurm_options import known_anywhere

_SITE = ("is set by the site's hooks configuration (docs/admin.md, Slurm hooks), not by a "
         "directive")
_SBATCH = ("is sbatch's own option: give it to sbatch (an #SBATCH line or its command line); "
           "the hook plans with it from there")
_SRUN = "belongs on your script's srun line, which the hooks leave as it is"
_OUTPUT = ("only changes what `slurmtopo sbatch` prints or writes; a directive has no output "
           "(`slurmtopo hooks check SCRIPT` shows what the hook would do)")

#: parameter name -> why a directive may not give it
REFUSED: Dict[str, str] = {
    **dict.fromkeys(("inventory_path", "slurm_topology", "slurm_conf", "python", "state_path",
                     "backend_name", "spool", "keep_runs"), _SITE),
    "run_dir": ("is where the job's files go: export SLURMTOPO_RUN_DIR before submitting "
                "instead (the start-time hook reads it)"),
    **dict.fromkeys(("job_name", "partition", "time_limit", "account", "nodelist", "exclude",
                     "exclusive", "extra_sbatch", "wrap"), _SBATCH),
    **dict.fromkeys(("container_image", "container_mounts", "container_workdir",
                     "apptainer_image"), _SRUN),
    **dict.fromkeys(("dry_run", "color_by", "parsable", "as_json", "output_dir"), _OUTPUT),
    "spares": ("needs the batch script `slurmtopo sbatch` writes (its restart loop moves a "
               "lost node's ranks to a spare); the hooks run your own script: submit with "
               "`slurmtopo sbatch --spares`"),
    "check": ("runs as the first step of the batch script `slurmtopo sbatch` writes; with "
              "the hooks, run `slurmtopo check` in your own script before its srun"),
}


def _command() -> click.Command:
    """``slurmtopo sbatch``'s options as a parser for a directive: every
    parameter but the refused-for-sbatch placeholders, none required."""
    params = []
    for p in sbatch.params:
        if not isinstance(p, click.Option) or p.name is None or p.name.startswith("refused_"):
            continue
        if p.name.startswith("sb_"):
            REFUSED.setdefault(p.name, _SBATCH)
        q = copy.copy(p)
        q.required = False
        params.append(q)
    return click.Command(PREFIX, params=params, add_help_option=False,
                         context_settings={"allow_interspersed_args": False})


#: the largest number a directive's whole-number option takes (the largest
#: world slurmtopo lays out; job_submit.lua checks the same bound)
MAX_NUMBER = 262144
#: the characters a directive's word may hold: what plan options take (names,
#: numbers, KIND=LEVEL pairs, host lists, paths); never a shell's ;|&$`<>()
#: quotes or backslashes (job_submit.lua checks the same set on the controller)
_WORD = re.compile(r"^[A-Za-z0-9._:/=,@+ -]*$")


def _sbatch_name(word: str) -> Optional[str]:
    """``--nodes`` / ``-N`` / ``--nodes=2`` -> ``nodes`` when sbatch has the
    option (None: it does not)."""
    table = known_anywhere()
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        return name[2:] if name[2:] in table else None
    if len(name) >= 2 and name[0] == "-":
        return next((o.name for o in table.values() if o.short == name[1]), None)
    return None


@dataclass(frozen=True)
class ParsedDirective:
    """A directive's option values, as ``slurmtopo sbatch``'s keyword
    arguments (every one, defaults filled in), and which it gave."""

    values: Dict[str, Any]
    given: FrozenSet[str]


def parse_directive(directive: Directive) -> ParsedDirective:
    """The option values ``slurmtopo sbatch`` would have for these words.
    DirectiveError, naming where the word came from, for anything a
    directive may not say."""
    cmd = _command()
    words = list(directive.words)
    for w in words:
        if not _WORD.match(w):
            bad = next(c for c in w if not _WORD.match(c))
            raise DirectiveError(f"{directive.where(w)}: {w[:40]!r} holds {bad!r}, which no "
                                 "plan option takes")
        if "/../" in f"/{w}/":
            raise DirectiveError(f"{directive.where(w)}: {w[:40]!r}: a path with '..' is not "
                                 "taken")
    try:
        ctx = cmd.make_context(PREFIX, words, resilient_parsing=False)
    except click.NoSuchOption as exc:
        name = _sbatch_name(exc.option_name)
        where = directive.where(exc.option_name)
        if name is not None:
            raise DirectiveError(f"{where}: {exc.option_name} {_SBATCH}") from None
        raise DirectiveError(f"{where}: no such option {exc.option_name} (the options of "
                             "`slurmtopo sbatch --help` that plan a job)") from None
    except click.UsageError as exc:
        raise DirectiveError(f"{', '.join(directive.sources)}: "
                             f"{' '.join(exc.format_message().split())}") from None
    extra = list(ctx.args) + list(ctx.params.get("cmd") or ())
    if extra:
        raise DirectiveError(f"{directive.where(extra[0])}: {extra[0]!r} is not an option (a "
                             f"directive holds options only)")
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if name in REFUSED and source is click.core.ParameterSource.COMMANDLINE:
            opt = next(p for p in cmd.params if p.name == name)
            shown = "/".join(opt.opts)
            word = next((w for w in words if w.split("=", 1)[0] in opt.opts), opt.opts[0])
            raise DirectiveError(f"{directive.where(word)}: {shown} {REFUSED[name]}")
    values = dict(ctx.params)
    values.pop("cmd", None)
    kinds = option_kinds()
    for p in cmd.params:
        if p.name not in values or not isinstance(values[p.name], int) \
                or isinstance(values[p.name], bool):
            continue
        kind = kinds.get(p.opts[0], "")
        lo, hi = {"int": (1, MAX_NUMBER), "int0": (-1, MAX_NUMBER), "port": (1, 65535)}.get(
            kind, (None, None))
        if lo is not None and not lo <= values[p.name] <= hi \
                and ctx.get_parameter_source(p.name) is click.core.ParameterSource.COMMANDLINE:
            raise DirectiveError(f"{directive.where(p.opts[0])}: {p.opts[0]} "
                                 f"{values[p.name]}: out of range ({lo} to {hi:,})")
    given = frozenset(n for n in values
                      if ctx.get_parameter_source(n) is click.core.ParameterSource.COMMANDLINE)
    return ParsedDirective(values=values, given=given)


def option_kinds() -> Dict[str, str]:
    """``--name`` -> the kind of value a directive's option takes, for the
    controller's check (job_submit.lua's OPTIONS table): ``flag``, ``int``
    (1 to 262,144), ``int0`` (from -1: a framework's "the rest", as
    torchtitan's ``--dp-shard -1``), ``port``, ``choice:a|b``, ``text``."""
    out: Dict[str, str] = {}
    for p in _command().params:
        if not isinstance(p, click.Option) or p.name in REFUSED or p.hidden:
            continue
        if p.is_flag:
            kind = "flag"
        elif isinstance(p.type, click.Choice):
            kind = "choice:" + "|".join(str(c) for c in p.type.choices)
        elif isinstance(p.type, click.IntRange) and p.type.max == 65535:
            kind = "port"
        elif p.type is click.INT or isinstance(p.type, click.IntRange):
            kind = "int" if p.name in LAYOUT_PARAMS or p.name == "gpus_per_node" else "int0"
        else:
            kind = "text"
        for name in (*p.opts, *p.secondary_opts):
            if name.startswith("--"):
                out[name] = "flag" if name in p.secondary_opts else kind
    return out
