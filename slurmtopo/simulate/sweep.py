"""``--sweep``: the same trace replayed at several offered loads, or with
several waits, and the trade-off between queue wait and slowdown read off
the results.

``--sweep load=0.5,0.8,0.95``
    one replay of every policy per offered load (``--load``'s meaning: the
    trace's inter-arrival times scaled so that its jobs offer that share of
    the cluster's GPU-seconds);
``--sweep wait=0,600,1800,3600``
    every policy with a ``wait`` option (``daemon``, ``slurm-switches``)
    replayed once per value; the others (``slurm``, ``slurmtopo``) once,
    as the baselines. Both may be given: every load with every wait.

The trade-off (:func:`tradeoff`): per load, each waiting policy against
``slurm`` (when it is replayed): how much of ``slurm``'s excess slowdown
(its mean slowdown minus 1: the part placement and shared links add) it
removes, and how much longer its p95 queue wait is. A wait *qualifies*
when it removes at least :data:`CUT` of the excess for at most
:data:`MORE_WAIT` more p95 wait (plus the daemon's cycle, a wait no
daemon can avoid: a job waits for the next cycle).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.simulate.policies import OPTIONS, PolicySpec, parse_time

#: the share of slurm's excess slowdown a wait must remove to qualify
CUT = 0.25
#: the most p95 queue wait it may add, as a share of slurm's
MORE_WAIT = 0.10
#: values one ``--sweep`` may list, and replays a sweep may make
MAX_VALUES = 16
MAX_RUNS = 64
#: the sweepable keys
KEYS = ("load", "wait")


@dataclass(frozen=True)
class Sweep:
    """The values swept: offered loads (None: the trace's own) and waits
    (seconds; None: each policy's own)."""

    loads: Tuple[Optional[float], ...] = (None,)
    waits: Optional[Tuple[float, ...]] = None


def parse_sweep(texts: Sequence[str]) -> Sweep:
    """``load=0.5,0.8`` and ``wait=0,10m,1h`` (each at most once)."""
    loads: Optional[Tuple[float, ...]] = None
    waits: Optional[Tuple[float, ...]] = None
    for text in texts:
        key, eq, rest = text.partition("=")
        key = key.strip().lower()
        if not eq or key not in KEYS:
            raise SlurmtopoError(f"--sweep {text!r}: expected load=X,Y,... or wait=T,U,...")
        values = [v.strip() for v in rest.split(",") if v.strip()]
        if not values:
            raise SlurmtopoError(f"--sweep {text!r}: no values")
        if len(values) > MAX_VALUES:
            raise SlurmtopoError(f"--sweep {text!r}: {len(values)} values, at most {MAX_VALUES}")
        if len(set(values)) != len(values):
            raise SlurmtopoError(f"--sweep {text!r}: a value is given twice")
        if key == "load":
            if loads is not None:
                raise SlurmtopoError("--sweep load=... is given twice")
            out = []
            for v in values:
                try:
                    x = float(v)
                except ValueError:
                    x = float("nan")
                if not 0.01 <= x <= 10.0:  # also refuses nan and inf
                    raise SlurmtopoError(f"--sweep load: {v!r} is not a load between 0.01 "
                                         "and 10")
                out.append(x)
            loads = tuple(out)
        else:
            if waits is not None:
                raise SlurmtopoError("--sweep wait=... is given twice")
            waits = tuple(parse_time(v, "--sweep wait") for v in values)
    return Sweep(loads=loads if loads is not None else (None,), waits=waits)


def expand(specs: Sequence[PolicySpec], sweep: Sweep) -> List[PolicySpec]:
    """The policies one load replays: each with a ``wait`` option once per
    swept wait, the others once (labels stay distinct)."""
    out: List[PolicySpec] = []
    for spec in specs:
        if sweep.waits is None or "wait" not in OPTIONS[spec.name]:
            out.append(spec)
            continue
        for w in sweep.waits:
            out.append(replace(spec, options={**spec.options, "wait": w}))
    seen = set()
    uniq = []
    for s in out:
        if s.label not in seen:
            seen.add(s.label)
            uniq.append(s)
    return uniq


def check_size(sweep: Sweep, per_load: int) -> None:
    runs = len(sweep.loads) * per_load
    if runs > MAX_RUNS:
        raise SlurmtopoError(f"--sweep makes {runs} replays; at most {MAX_RUNS}")


def _excess(p: Dict[str, Any]) -> Optional[float]:
    s = p["slowdown"]["mean"]
    return None if s is None else s - 1.0


def tradeoff(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Per waiting policy of one load's document, against ``slurm``: the
    share of slurm's excess slowdown removed, the p95 wait added, and
    whether it qualifies (see the module doc). Empty without ``slurm``."""
    base = next((p for p in doc["policies"] if p["name"] == "slurm"), None)
    if base is None:
        return []
    b_ex = _excess(base)
    b_p95 = base["queue_wait_s"]["p95"] or 0.0
    out = []
    for p in doc["policies"]:
        if "wait" not in p["options"]:
            continue
        ex = _excess(p)
        p95 = p["queue_wait_s"]["p95"] or 0.0
        cut = None if ex is None or not b_ex or b_ex <= 0 else (b_ex - ex) / b_ex
        cycle = float(p["options"].get("interval", 10.0)) if p["name"] == "daemon" else 0.0
        allowed = b_p95 * (1 + MORE_WAIT) + cycle
        out.append({"policy": p["policy"], "wait_s": p["options"]["wait"],
                    "slowdown_mean": p["slowdown"]["mean"],
                    "excess_cut": None if cut is None else round(cut, 6),
                    "p95_wait_s": p95, "p95_wait_added": round(p95 - b_p95, 3),
                    "p95_wait_ratio": None if b_p95 <= 0 else round(p95 / b_p95, 6),
                    "qualifies": bool(cut is not None and cut >= CUT and p95 <= allowed)})
    return out


def summary(runs: Sequence[Tuple[Optional[float], Dict[str, Any]]]) -> List[str]:
    """One line per load: the qualifying waits, or why none qualifies."""
    lines = []
    for load, doc in runs:
        at = f"offered load {doc['load']['offered']:.0%}" if doc["load"]["offered"] is not None \
            else "the trace's own load"
        rows = tradeoff(doc)
        if not rows:
            continue
        base = next(p for p in doc["policies"] if p["name"] == "slurm")
        good = [r for r in rows if r["qualifies"]]
        if good:
            best = min(good, key=lambda r: (r["p95_wait_s"], -(r["excess_cut"] or 0)))
            lines.append(f"{at}: {best['policy']} removes {best['excess_cut']:.0%} of slurm's "
                         f"excess slowdown ({base['slowdown']['mean']:.4f} -> "
                         f"{best['slowdown_mean']:.4f}) for p95 wait "
                         f"{best['p95_wait_s']:.0f}s against {base['queue_wait_s']['p95']:.0f}s"
                         f" ({len(good)} of {len(rows)} waits qualify)")
            continue
        if not base["slowdown"]["mean"] or base["slowdown"]["mean"] <= 1.0:
            lines.append(f"{at}: no wait can help: slurm's mean slowdown is "
                         f"{base['slowdown']['mean']} (nothing to remove)")
            continue
        best = max(rows, key=lambda r: r["excess_cut"] if r["excess_cut"] is not None else -1e9)
        lines.append(f"{at}: no wait qualifies (>= {CUT:.0%} of slurm's excess slowdown "
                     f"{base['slowdown']['mean'] - 1:.4f} removed for <= {MORE_WAIT:.0%} more "
                     f"p95 wait than its {base['queue_wait_s']['p95']:.0f}s): the most any "
                     f"removes is {best['excess_cut'] if best['excess_cut'] is not None else 0:.0%}"
                     f" ({best['policy']}, p95 wait {best['p95_wait_s']:.0f}s)")
    return lines
