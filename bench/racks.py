"""Do TP and EP groups stay in their rack? The NVL72 scenarios through the
command line, as a user runs them (issue 25).

For every scenario of the rack-scale shapes (``nvl72``, ``nvl72-ep8`` and
the mixed ``nvl72-hgx``: bench/scenarios.py) the inventory and the state
are written as files, ``slurmtopo plan --json`` places the job (with the
scenario's model, ``--model``), and the
rank map it prints is read back: a TP, expert-TP or EP group *straddles*
when its ranks sit in more than one NVLink domain (a GB200 NVL72 rack;
a node outside one is its own). A group's block (the ranks of the layout
that must move together: the TP group, the EP group's TP x EP block)
*must* straddle only when the domains' free GPUs cannot hold every
block: ``blocks - sum(free GPUs of a domain // block span)`` of them. The
rest are *avoidable*; the planner's rule is that there are none, with the
scenario's model and with the default one (a user who gives none:
Slurm's default placement, the safety net, must not win by sending TP or
EP groups out of their rack either)::

    python -m bench.racks                      # 4 scenarios a cell, both sizes
    python -m bench.racks --per-cell 2 --shapes nvl72-hgx --sizes default
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

from bench.process import child_env as _env
from bench.scenarios import Scenario, build, dump_state, quality_specs
from slurmtopo.inventory.schema import dump_inventory

#: the rack-scale shapes
SHAPES = ("nvl72", "nvl72-ep8", "nvl72-hgx")

#: the kinds checked, with the kinds whose product is their block's span
BLOCKS = {"tp": ("tp",), "expert-tp": ("expert_tp",), "ep": ("expert_tp", "ep")}


#: which model (and message sizes) the plans are made with
SIZES = ("scenario", "default")


def plan_cli(sc: Scenario, workdir: str, sizes: str = "scenario") -> Dict[str, Any]:
    """``slurmtopo plan --json`` on the scenario's files: the rank map
    (``sizes``: the scenario's model and message sizes, or ``default``: none
    given)."""
    base = os.path.join(workdir, sc.id.replace(":", "_"))
    with open(base + ".inventory.yaml", "w") as fh:
        fh.write(dump_inventory(sc.inv))
    with open(base + ".state.yaml", "w") as fh:
        fh.write(dump_state(sc.state))
    j = sc.job
    argv = [sys.executable, "-m", "slurmtopo", "plan", "--inventory", base + ".inventory.yaml",
            "--state", base + ".state.yaml", "--tp", str(j.tp), "--cp", str(j.cp),
            "--ep", str(j.ep), "--pp", str(j.pp), "--dp", str(j.dp), "--json",
            "-o", base + ".out"]
    for kind, size in (j.message_bytes if sizes == "scenario" else ()):
        argv += ["--message-bytes", f"{kind}={size}"]  # as the quality benchmark prices it
    if sizes == "scenario" and j.model_spec:
        argv += ["--model", j.model_spec]
    p = subprocess.run(argv, env=_env(), capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{sc.id}: {p.stderr.strip()[-500:]}")
    return json.loads(p.stdout)["rankmap"]


def domain_of(sc: Scenario, host: str) -> str:
    d = sc.inv.nodes[host].nvlink_domain
    return host if d is None else f"{d.cluster_uuid}/{d.clique_id}"


def check(sc: Scenario, rankmap: Dict[str, Any]) -> Dict[str, Dict[str, int]]:
    """Per kind: groups, straddling groups, blocks that must straddle,
    straddling blocks, avoidable (straddling blocks beyond those that must)."""
    hosts = [r["host"] for r in sorted(rankmap["ranks"], key=lambda r: r["rank"])]
    free: Counter = Counter()
    for n in sc.inv:
        free[domain_of(sc, n.name)] += len(sc.state.free_gpus(n))
    lay = rankmap["layout"]
    out: Dict[str, Dict[str, int]] = {}
    for kind, dims in BLOCKS.items():
        groups = rankmap["groups"].get(kind) or []
        span = 1
        for d in dims:
            span *= int(lay.get(d) or 1)
        if not groups or span <= 1 or len(groups[0]) <= 1:
            continue
        crossing = [g for g in groups if len({domain_of(sc, hosts[r]) for r in g}) > 1]
        blocks = {min(g) // span for g in groups}
        crossing_blocks = {min(g) // span for g in crossing}
        fit = sum(gpus // span for gpus in free.values())
        must = max(0, len(blocks) - fit)
        out[kind] = {"groups": len(groups), "straddling": len(crossing), "blocks": len(blocks),
                     "must": must, "straddling_blocks": len(crossing_blocks),
                     "avoidable": max(0, len(crossing_blocks) - must)}
    return out


def run(per_cell: int, shapes: Sequence[str], quick: bool = False,
        workdir: Optional[str] = None, sizes: Sequence[str] = SIZES) -> List[Dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="slurmtopo-racks-") as tmp:
        work = workdir or tmp
        for spec in quality_specs(per_cell, quick=quick, shapes=shapes):
            sc = build(spec)
            for size in sizes:
                rows.append({"scenario": sc.id, "sizes": size, "layout": sc.job.as_dict(),
                             "kinds": check(sc, plan_cli(sc, work, size))})
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.racks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-cell", type=int, default=4)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--quick", action="store_true", help="the quick sizes only")
    ap.add_argument("--sizes", choices=SIZES + ("both",), default="both",
                    help="plan with the scenario's model, the default one, or both")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    a = ap.parse_args(argv)
    rows = run(a.per_cell, a.shapes.split(","), a.quick,
               sizes=SIZES if a.sizes == "both" else (a.sizes,))
    total = Counter()
    for r in rows:
        cells = " ".join(f"{k} {v['straddling_blocks']}/{v['blocks']} (must {v['must']})"
                         for k, v in r["kinds"].items()) or "no TP/EP group of 2 or more"
        print(f"{r['scenario']:24} {r['sizes']:8} {cells}")
        for k, v in r["kinds"].items():
            total[k + " avoidable"] += v["avoidable"]
            total[k + " straddling blocks"] += v["straddling_blocks"]
            total[k + " must"] += v["must"]
    print(f"{len(rows)} plans: " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1, sort_keys=True)
    return 1 if any(v for k, v in total.items() if k.endswith("avoidable")) else 0


if __name__ == "__main__":
    sys.exit(main())
