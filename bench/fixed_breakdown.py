"""Where a plan's fixed cost goes: the steps of ``slurmtopo plan`` in a
fresh process, each step's CPU time, beside ``slurmtopo --help``'s.

bench.cli's fixed-cost part says how far a plan is from ``--help``; this
says what the distance is made of. Each run is a fresh interpreter (the
imports are part of the cost) that goes through the steps of
``slurmtopo/commands/plan.py`` in its order, importing each part where
the command first needs it, and reads its CPU clock between them; the
per-inventory tables (network view, fabric tree, the lower bound's
statistics) are built on their own before the planner, which would build
them otherwise. Medians over ``--repeats`` runs::

    python -m bench.fixed_breakdown [--world 64] [--repeats 5] [--workdir DIR]

The inventory is bench's 12,500-node fat tree (written into the work
directory, compiled by a first plan that is not counted).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.process import (NODES, child_env, layout_for, run_process, slurmtopo,  # noqa: E402
                           write_inventory)

#: run in the child: argv = inventory, world, output directory; prints
#: one JSON object {step: CPU seconds} in the order of the steps
_CHILD = r"""
import io, json, sys, time
T = time.process_time
marks = [("interpreter and site", T())]
def mark(name):
    marks.append((name, T()))
inv_path, world, out_dir, tp, pp, dp = sys.argv[1:7]
import slurmtopo.cli
from slurmtopo.show.termsafe import printable
mark("click and the command table (what --help imports)")
import slurmtopo.commands.plan as planmod
mark("import the plan command (its options: sbatch, model, launchers)")
from slurmtopo import api
import slurmtopo.plan.rankmap  # noqa: F401
from slurmtopo.commands.job_options import (LazyBackend, command_from, load_job_cluster,
                                            script_options_from, spec_from, state_for)
mark("import the api and the rank map")
ctx = planmod.command.make_context("plan", [
    "--inventory", inv_path, "--tp", tp, "--pp", pp, "--dp", dp, "--output-dir", out_dir,
    "--", "python", "train.py"])
ctx.__enter__()  # as the command runs: in its context (the collector is off from the load on)
o = dict(ctx.params)
cmd = command_from(o, o.pop("cmd"))
state_path, backend_name = o.pop("state_path"), o.pop("backend_name")
mark("parse the command line")
inv, topo_notes = load_job_cluster(o)
mark("load the inventory (its compiled form, when it has one)")
live = state_for(inv, state_path, LazyBackend(backend_name), o.get("partition"))
spec = spec_from(o, command=cmd)
mark("state and request (layout, groups)")
import slurmtopo.plan.choice, slurmtopo.cost, slurmtopo.placement.queue
from slurmtopo.placement.fabric import fabric_tree
from slurmtopo.cost.bound import inventory_stats
from slurmtopo.inventory.topology import network_view
mark("import the planner and the cost model")
network_view(inv.fabric)
mark("per-inventory table: network view")
fabric_tree(inv)
mark("per-inventory table: fabric tree")
inventory_stats(inv)
mark("per-inventory table: lower bound's statistics")
job = api.prepare(inv, live.state, spec, cmd, script_options_from(o, o["inventory_path"]),
                  queue=False, partition_members=live.partition_members,
                  features=live.features or None)
mark("plan: candidates, planner, Slurm's default, pricing, bound, script")
from slurmtopo.files.fileio import Output, ensure_dir, write_all
import os
ensure_dir(out_dir)
docs = job.documents
outs = {"rank map": Output(os.path.join(out_dir, "rankmap.json"), docs.rankmap_json),
        "CSV": Output(os.path.join(out_dir, "rankmap.csv"), docs.rankmap_csv),
        "per-rank environment": Output(os.path.join(out_dir, "env.json"), docs.env_json),
        "batch script": Output(os.path.join(out_dir, "job.sbatch"), job.script_text,
                               mode=0o755)}
mark("per-rank files and the script: text")
write_all(list(outs.values()))
mark("write the files (staged, fsynced, renamed)")
from slurmtopo.show import plainout
from slurmtopo.show.preview import plan_parts
mark("import the preview (rich only for a terminal)")
parts = plan_parts(job.placement, inv, job.request.layout, job.costs.plan, job.costs.naive,
                   live.state, None, list(topo_notes) + list(job.notes), job.script,
                   {w: x.path for w, x in outs.items()}, bound=job.costs.bound,
                   idle_bound=job.costs.idle_bound)
mark("preview: its parts (grid, cost table, splits, warnings)")
assert plainout.all_narrow(parts)
io.StringIO().write(plainout.render(parts, plainout.DEFAULT_WIDTH))
mark("preview: laid out as into a pipe (without rich)")
steps = {}
prev = 0.0
for name, t in marks:
    steps[name] = t - prev
    prev = t
print(json.dumps(steps))
"""


def breakdown(inv_path: str, world: int, workdir: str, repeats: int) -> Dict[str, object]:
    """Median CPU seconds of each step over ``repeats`` fresh runs, their
    sum, and ``slurmtopo --help``'s CPU time measured in the same rounds."""
    tp, pp, dp = layout_for(world)
    out_dir = os.path.join(workdir, f"breakdown-{world}")
    # the first plan compiles the inventory: not counted
    first = run_process(slurmtopo("plan", "--inventory", inv_path, "--tp", str(tp), "--pp",
                                  str(pp), "--dp", str(dp), "--output-dir", out_dir, "--",
                                  "python", "train.py"), cwd=workdir)
    if first["rc"] != 0:
        raise RuntimeError(first["stderr"].strip().splitlines()[-1:])
    runs: List[Dict[str, float]] = []
    helps: List[float] = []
    for _ in range(max(1, repeats)):
        p = subprocess.run([sys.executable, "-c", _CHILD, inv_path, str(world), out_dir,
                            str(tp), str(pp), str(dp)], cwd=workdir, env=child_env(),
                           capture_output=True, text=True, check=True)
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        helps.append(run_process(slurmtopo("--help"), cwd=workdir)["cpu_s"])
    steps = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
    return {"world": world, "inventory": os.path.basename(inv_path), "steps_cpu_s": steps,
            "total_cpu_s": sum(steps.values()), "help_cpu_s": statistics.median(helps),
            "loadavg": list(os.getloadavg())}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=64, help="the job's GPUs (default 64)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=NODES, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", default=None, help="keep the inventory and outputs here")
    args = ap.parse_args(argv)
    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="slurmtopo-breakdown-"))
    os.makedirs(workdir, exist_ok=True)
    res = breakdown(write_inventory(workdir, args.nodes), args.world, workdir, args.repeats)
    help_ms = res["help_cpu_s"] * 1e3
    print(f"`slurmtopo plan` at {args.world:,} GPUs on {res['inventory']}, CPU ms (median of "
          f"{args.repeats}; load average {res['loadavg'][0]:.1f}); `slurmtopo --help` "
          f"{help_ms:.0f} ms", file=sys.stderr)
    for name, s in res["steps_cpu_s"].items():
        print(f"  {s * 1e3:7.1f}  {name}", file=sys.stderr)
    print(f"  {res['total_cpu_s'] * 1e3:7.1f}  total ({res['total_cpu_s'] * 1e3 / help_ms:.2f}x "
          f"--help)", file=sys.stderr)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
