"""The layout advisor against published layouts.

Where a publication gives several runs of one model on one system
(bench/step_fit.py's groups, as its first-choice count takes them: one
publication, release, GPU count and sequence length, two runs or more,
layouts or precisions), this runs the advisor
(:func:`slurmtopo.advisor.advise`, what ``slurmtopo advise`` prints) for
that model with the best run's precision, batch and sequence length on
that many GPUs of the system (bench/step_fit.py's inventory of it),
limited to the publication's framework, and compares its first choice
with the best published run:

* against the model's price of the best published layout: does the
  advisor's search find a layout at least as good, by the model it ranks
  with (within 10% below counts);
* against the best published measurement.

    python -m bench.advisor_check          # the table
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence

from bench import step_fit
from slurmtopo.advisor import advise
from slurmtopo.cost.compute import FIT
from slurmtopo.errors import LayoutError

#: the advisor's first choice counts when its modelled tokens/s are at least
#: this share of the compared figure
WITHIN = 0.9


@dataclass(frozen=True)
class Check:
    """One group of published layouts and the advisor's first choice."""

    group: str
    runs: int
    best_id: str
    best_measured: float
    best_modelled: float
    advised: Optional[float]
    advised_layout: str
    error: str = ""

    @property
    def search(self) -> Optional[float]:
        """The advisor's first over the model's price of the best published."""
        return self.advised / self.best_modelled if self.advised else None

    @property
    def measured(self) -> Optional[float]:
        """The advisor's first over the best published measurement."""
        return self.advised / self.best_measured if self.advised else None


def _model_text(run: step_fit.Run) -> str:
    r = run.row
    return f"{run.model_text},dtype={r['dtype']},seq_len={r['seq_len']},global_batch={r['global_batch']}"


def check_all(rows: Optional[Sequence[step_fit.Row]] = None) -> List[Check]:
    """The advisor on every group of published layouts."""
    if rows is None:
        rows = step_fit.evaluate(step_fit.price_all(step_fit.load_runs()), FIT,
                                 step_fit.fit_ids())
    out = []
    for g in step_fit._groups(rows, by_dtype=False):
        best = max(g, key=lambda r: r.run.published)
        run = best.run
        name = f"{run.source} {run.row.get('release', '')} {run.system} {run.model_text} " \
               f"{run.row['dtype']} {run.gpus} GPUs".replace("  ", " ")
        inv = step_fit.system_inventory(run.system, run.gpus, run.gpu_compute)
        try:
            a = advise(inv, _model_text(run), run.gpus, f"({run.system})", top=1,
                       frameworks=(run.framework,))
        except LayoutError as exc:
            out.append(Check(name, len(g), run.id, run.published, best.predicted, None, "",
                             exc.message))
            continue
        first = a.ranked[0]
        c = first.candidate
        label = f"{c.label()} mbs{c.micro_batch} {c.recompute} {c.optimizer()}"
        out.append(Check(name, len(g), run.id, run.published, best.predicted,
                         first.tokens_per_s_per_gpu, label))
    return out


def report(checks: Sequence[Check]) -> str:
    lines = ["| group | layouts | best published (measured / modelled) | advisor's first "
             "choice (modelled) | / best modelled | / best measured |",
             "|---|--:|---|---|--:|--:|"]
    for c in checks:
        if c.advised is None:
            lines.append(f"| {c.group} | {c.runs} | {c.best_id} ({c.best_measured:.0f} / "
                         f"{c.best_modelled:.0f}) | refused: {c.error} | | |")
            continue
        lines.append(f"| {c.group} | {c.runs} | {c.best_id} ({c.best_measured:.0f} / "
                     f"{c.best_modelled:.0f}) | {c.advised_layout}: {c.advised:.0f} | "
                     f"{c.search:.2f} | {c.measured:.2f} |")
    done = [c for c in checks if c.advised is not None]
    lines.append("")
    lines.append(f"the advisor's first choice at least {WITHIN:.0%} of the best published "
                 f"layout, by the model: {sum(c.search >= WITHIN for c in done)} of "
                 f"{len(checks)} groups; of its measurement: "
                 f"{sum(c.measured >= WITHIN for c in done)} of {len(checks)}")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    sys.stdout.write(report(check_all()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
