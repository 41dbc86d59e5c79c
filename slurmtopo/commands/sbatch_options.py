"""sbatch's own options on ``plan`` and ``sbatch``, each declared once.

A user who knows sbatch types ``-p gpu -t 1:00:00 -J run -o slurm-%j.out``;
those letters mean here what they mean to sbatch. Each option sbatch has is
declared in one row below, by its sbatch name; its short letter and
whether it takes a value come from sbatch's own option table
(:mod:`slurmtopo.sbatch.slurm_options`), so they cannot drift from Slurm.
Three kinds:

* written as ``#SBATCH`` lines (:data:`SBATCH_OPTIONS`, values checked by
  :class:`slurmtopo.sbatch.SbatchRequest`);
* read by slurmtopo itself first (``--job-name``, ``--partition``,
  ``--nodelist``, ...): declared with :func:`sbatch_flag` where they live;
* set by the plan (``-N``, ``-n``, ``--gpus``, ...) or not planned
  (``--array``): accepted by the parser only to be refused with the reason
  (:func:`refused_options`), never "No such option".
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import click

from slurmtopo.sbatch.script import NOT_PLANNED, PLANNED, extras_problem
from slurmtopo.sbatch.slurm_options import NO, OPTIONAL, known_anywhere

#: option name (as sbatch spells it) -> help
SBATCH_OPTIONS = (
    ("qos", "#SBATCH --qos (quality of service)."),
    ("constraint", "#SBATCH --constraint: node features, e.g. 'a100&ib'; the planner only "
                   "considers nodes with them (inventory `features:` and Slurm's)."),
    ("mem", "#SBATCH --mem: memory per node, e.g. 64G."),
    ("mem-per-gpu", "#SBATCH --mem-per-gpu, e.g. 80G."),
    ("output", "#SBATCH --output: the job's stdout file, a Slurm filename pattern "
               "(%j = job id, %x = name), as for sbatch."),
    ("error", "#SBATCH --error: the job's stderr file (a Slurm filename pattern)."),
    ("dependency", "#SBATCH --dependency, e.g. afterok:1234."),
    ("mail-type", "#SBATCH --mail-type, e.g. END,FAIL."),
    ("mail-user", "#SBATCH --mail-user."),
    ("signal", "#SBATCH --signal, e.g. B:USR1@120."),
    ("reservation", "#SBATCH --reservation."),
)

def short_letter(name: str) -> str:
    """sbatch's short letter for ``--name`` ("" when it has none)."""
    return known_anywhere()[name].short


def sbatch_flag(name: str, dest: str, **kwargs):
    """The click option for sbatch's ``--name``, with sbatch's short
    letter when it has one (``-p`` for ``--partition``)."""
    letter = short_letter(name)
    decls = [f"--{name}"] + ([f"-{letter}"] if letter else [])
    return click.option(*decls, dest, **kwargs)


def sbatch_options(func):
    """Add --qos --constraint --mem --mem-per-gpu --output --error
    --dependency --mail-type --mail-user --signal --reservation --requeue."""
    opts = [sbatch_flag(name, "sb_" + name.replace("-", "_"), default=None, help=text)
            for name, text in SBATCH_OPTIONS]
    opts.append(click.option("--requeue", "sb_requeue", is_flag=True,
                             help="#SBATCH --requeue (Slurm may requeue the job)."))
    opts.extend(refused_options())
    for option in reversed(opts):
        func = option(func)
    return func


def refusals() -> List[Tuple[str, str]]:
    """(sbatch name, why slurmtopo refuses it) for the options a user of
    sbatch may type that slurmtopo does not take: those the plan sets
    (:data:`~slurmtopo.sbatch.script.PLANNED`, but for those slurmtopo
    takes under the same name) and :data:`~slurmtopo.sbatch.script.NOT_PLANNED`."""
    out = []
    for name, owner in sorted(PLANNED.items()):
        if owner == "the plan":
            out.append((name, "the plan sets it: the planner decides nodes, tasks and GPUs "
                              "from the layout (--tp/--pp/--dp/--world, --gpus-per-node)"))
        elif owner.startswith("the "):
            out.append((name, f"{owner} sets it: srun starts every rank on its planned host "
                              "and GPU"))
        elif owner != "--" + name:  # slurmtopo's own option of another name
            out.append((name, f"use {owner} (slurmtopo must see it: the planner or the "
                              "script acts on it)"))
    out.extend(sorted(NOT_PLANNED.items()))
    return out


def refused_options():
    """Hidden options for :func:`refusals`, each failing with its reason."""
    table = known_anywhere()
    opts = []
    for name, why in refusals():
        letter = table[name].short
        decls = [f"--{name}"] + ([f"-{letter}"] if letter else [])
        shown = "/".join(reversed(decls))

        def refuse(ctx, param, value, shown=shown, why=why):
            if value is None or value is False:
                return value
            raise click.UsageError(f"{shown} is not a slurmtopo option: {why}", ctx=ctx)

        kind = {"is_flag": True} if table[name].argument == NO else {"default": None}
        opts.append(click.option(*decls, "refused_" + name.replace("-", "_"), hidden=True,
                                 expose_value=False, callback=refuse, **kind))
    return opts


def sbatch_hint(typed: str) -> Optional[str]:
    """For an option click does not know on ``plan``/``sbatch``: when it is
    one of sbatch's (exact long name, or short letter), the one line that
    says how to give it (``--sbatch=--cpus-per-task=VALUE``), else None (a
    typo stays "No such option"). Without it, a user who types sbatch's
    ``-c 4`` reads "No such option" and a suggestion of ``--gpus-per-task``,
    which the plan sets."""
    table = known_anywhere()
    name = typed.split("=", 1)[0]
    if name.startswith("--"):
        opt = table.get(name[2:])
    elif len(name) == 2 and name[0] == "-":
        opt = next((o for o in table.values() if o.short == name[1]), None)
    else:
        opt = None
    if opt is None:
        return None

    decls = [f"--{opt.name}"] + ([f"-{opt.short}"] if opt.short else [])
    shown = "/".join(reversed(decls))
    problem = extras_problem([f"--{opt.name}" + ("" if opt.argument == NO else "=x")])
    if problem is not None:  # --sbatch refuses it too (--tasks-per-node, --test-only)
        return f"{shown} is not a slurmtopo option: {problem.split(': ', 1)[-1]}"
    arg = {NO: "", OPTIONAL: "[=VALUE]"}.get(opt.argument, "=VALUE")
    return (f"{shown} is an sbatch option slurmtopo has no flag for: "
            f"give it as --sbatch=--{opt.name}{arg} (each --sbatch text becomes an #SBATCH "
            f"line)")


def options_from(**values) -> Tuple[List[Tuple[str, str]], bool]:
    """([(sbatch name, value)], requeue) for the given option values."""
    out = []
    for name, _ in SBATCH_OPTIONS:
        value = values.get("sb_" + name.replace("-", "_"))
        if value is not None:
            out.append((name, str(value)))
    return out, bool(values.get("sb_requeue"))
