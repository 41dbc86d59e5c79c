"""The sbatch options ``plan`` and ``sbatch`` write as ``#SBATCH`` lines
(beyond those the plan decides). One definition, so both commands accept
and check them the same way; the values are validated by
:class:`slurmtopo.sbatch.SbatchRequest`."""
from __future__ import annotations

from typing import List, Tuple

import click

#: option name (as sbatch spells it) -> help
SBATCH_OPTIONS = (
    ("qos", "#SBATCH --qos (quality of service)."),
    ("constraint", "#SBATCH --constraint: node features, e.g. 'a100&ib'; the planner only "
                   "considers nodes with them (inventory `features:` and Slurm's)."),
    ("mem", "#SBATCH --mem: memory per node, e.g. 64G."),
    ("mem-per-gpu", "#SBATCH --mem-per-gpu, e.g. 80G."),
    ("output", "#SBATCH --output: the job's stdout file (%j = job id, %x = name)."),
    ("error", "#SBATCH --error: the job's stderr file."),
    ("dependency", "#SBATCH --dependency, e.g. afterok:1234."),
    ("mail-type", "#SBATCH --mail-type, e.g. END,FAIL."),
    ("mail-user", "#SBATCH --mail-user."),
    ("signal", "#SBATCH --signal, e.g. B:USR1@120."),
    ("reservation", "#SBATCH --reservation."),
)
def sbatch_options(func):
    """Add --qos --constraint --mem --mem-per-gpu --output --error
    --dependency --mail-type --mail-user --signal --reservation --requeue."""
    opts = [click.option(f"--{name}", "sb_" + name.replace("-", "_"), default=None, help=text)
            for name, text in SBATCH_OPTIONS]
    opts.append(click.option("--requeue", "sb_requeue", is_flag=True,
                             help="#SBATCH --requeue (Slurm may requeue the job)."))
    for option in reversed(opts):
        func = option(func)
    return func


def options_from(**values) -> Tuple[List[Tuple[str, str]], bool]:
    """([(sbatch name, value)], requeue) for the given option values."""
    out = []
    for name, _ in SBATCH_OPTIONS:
        value = values.get("sb_" + name.replace("-", "_"))
        if value is not None:
            out.append((name, str(value)))
    return out, bool(values.get("sb_requeue"))
