"""The memory model against published training runs: every run a
publication reports ran, so its layout fit in its GPUs' memory; the model
should say so.

Each run of ``tests/fixtures/training_runs/`` is planned and priced as
``bench.step_fit`` does (the same loader, the recipes' memory settings
where the fixture records them: Megatron-LM's recompute modules and layers,
CPU offloading, bf16 main gradients) and its memory per GPU
(:func:`slurmtopo.cost.memory.memory_per_gpu`) is set against the GPU's.
Nothing here is fitted: a run the model says does not fit is a miss of the
memory model or of what the fixture knows of the recipe, and is listed.

``python3 -m bench.memory_check`` prints the table per source;
``--runs`` every run the model puts above its GPU's memory.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from bench import step_fit

#: a run "fits" when the model asks for at most this share of its GPU's
#: memory (the model's reserve is an estimate; a percent or two over is
#: within what it cannot know)
MARGIN = 1.02


@dataclass(frozen=True)
class MemoryRow:
    """One run: the memory the model counts a GPU, the GPU's, by part."""

    run: step_fit.Run
    need_gib: float
    gpu_gib: float
    parts: Dict[str, float]

    @property
    def share(self) -> float:
        return self.need_gib / self.gpu_gib if self.gpu_gib else 0.0


def memory_rows(runs: Optional[Sequence[step_fit.Run]] = None) -> List[MemoryRow]:
    """The model's memory for every run that is placed and priced."""
    from slurmtopo.cost.memory import memory_per_gpu
    out: List[MemoryRow] = []
    for p in step_fit.price_all(runs if runs is not None else step_fit.load_runs()):
        if p.error:
            continue
        m = memory_per_gpu(p.spec, p.dims, p.style, p.run.framework, p.gpu.memory_gib, p.shard)
        out.append(MemoryRow(p.run, m.total_gib, m.gpu_gib, m.as_dict()))
    return out


def summary(rows: Sequence[MemoryRow]) -> Dict[str, float]:
    """Runs, the share the model fits, the share within :data:`MARGIN`,
    the largest need over GPU memory."""
    if not rows:
        return {"n": 0}
    return {"n": len(rows), "fits": sum(r.share <= 1.0 for r in rows) / len(rows),
            "within": sum(r.share <= MARGIN for r in rows) / len(rows),
            "worst": max(r.share for r in rows)}


def table(rows: Sequence[MemoryRow]) -> str:
    out = ["| source | runs | the model fits | within 2% | largest need / GPU memory |",
           "|---|--:|--:|--:|--:|"]
    for src in sorted({r.run.source for r in rows}) + ["all"]:
        s = summary([r for r in rows if src == "all" or r.run.source == src])
        out.append(f"| {src} | {s['n']} | {s['fits']:.0%} | {s['within']:.0%} | "
                   f"{s['worst']:.2f} |")
    return "\n".join(out)


def misses(rows: Sequence[MemoryRow]) -> str:
    out = ["| run | GiB a GPU (model) | GPU GiB | need / GPU | largest parts (GiB) |",
           "|---|--:|--:|--:|---|"]
    for r in sorted(rows, key=lambda r: (-r.share, r.run.id)):
        if r.share <= MARGIN:
            continue
        top = sorted(r.parts.items(), key=lambda kv: -kv[1])[:3]
        parts = ", ".join(f"{k} {v:.1f}" for k, v in top)
        out.append(f"| {r.run.id} | {r.need_gib:.1f} | {r.gpu_gib:.1f} | {r.share:.2f} | "
                   f"{parts} |")
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", action="store_true",
                    help="list every run the model puts above its GPU's memory")
    args = ap.parse_args(argv)
    rows = memory_rows()
    print(table(rows))
    if args.runs:
        print()
        print(misses(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
