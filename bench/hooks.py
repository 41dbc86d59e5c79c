"""What the Slurm hooks cost (issue 39; docs/admin.md "Slurm hooks").

Measured as the hooks run, each a fresh process (interpreter start and
imports included, byte-code compiled beforehand as an installed package
has it), median of several runs, wall and CPU time:

* the cli_filter planning call, ``slurmtopo hooks plan``, for a job with a
  directive on a 1,000-node HGX H100 inventory (the 3-level fat tree of
  bench/scenarios.py), an idle cluster and one with every other node busy,
  jobs of 8 to 512 GPUs; the target is under half a second. The first call
  of a user writes the inventory's compiled form into their cache (shown
  apart: every later call reads it);
* what a job *without* a directive pays: cli_filter.lua's check (read the
  script's head, one getenv) and job_submit.lua's (a search of the script
  for the word), each run 2,000 times in the Lua interpreter Slurm embeds
  (lua5.1 and lua5.4) and divided; and TaskProlog's one shell test;
* TaskProlog for a task of a planned job: the first task (binds, writes
  the run directory) and every later one (reads the binding).

    python -m bench.hooks [--quick] [--repeats N] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.process import child_env, median_run, seconds, slurmtopo, write_inventory  # noqa: E402

#: the budget of one planning call (issue 39)
BUDGET_S = 0.5
NODES = 1000
WORLDS = (8, 64, 512)


def busy_state(directory: str, inv_path: str) -> str:
    """Every other node of the inventory taken whole (a busy cluster)."""
    from slurmtopo.files.yamlio import dump_yaml
    from slurmtopo.inventory.schema import load_inventory

    path = os.path.join(directory, "busy-state.yaml")
    inv = load_inventory(inv_path)
    names = sorted(inv.nodes)
    doc = {"slurmtopo": "state", "version": 1,
           "nodes": [{"name": n, "state": "allocated"} for n in names[::2]]}
    with open(path, "w") as fh:
        fh.write(dump_yaml(doc))
    return path


def planning_calls(inv: str, state: str, repeats: int, env: Dict[str, str]) -> List[Dict]:
    rows = []
    for world in WORLDS:
        tp = 8
        dp = world // tp if world >= tp else 1
        options = json.dumps({"wrap": "srun python train.py", "nodes": str(max(1, world // 8)),
                              "gpus-per-node": "8"})
        run_env = dict(env, SLURMTOPO_DIRECTIVE=f"--tp {min(tp, world)} --dp {dp}")
        for label, st in (("idle", "none"), ("half busy", state)):
            argv = slurmtopo("hooks", "plan", "--inventory", inv, "--state", st,
                             "--options", options)
            r = median_run(argv, repeats, env=run_env)
            # on a shared machine the wall time includes waiting for a core
            # (load_average in the result): the CPU time is what the call costs
            rows.append({"job_gpus": world, "state": label, **r,
                         "within_budget": min(r["median_s"], r["cpu_s"]) < BUDGET_S})
    return rows


def lua_checks(tmp: str, loops: int = 2000) -> Dict[str, Any]:
    """Per-call cost of the Lua hooks on a job without a directive."""
    from slurmtopo.commands.directive import option_kinds
    from slurmtopo.hooks import install

    settings = install.HookSettings(command="/nonexistent/slurmtopo", inventory="/x.yaml")
    cli = os.path.join(tmp, "cli_filter.lua")
    js = os.path.join(tmp, "job_submit.lua")
    with open(cli, "w") as fh:
        fh.write(install.render_cli_filter(settings, install.template(install.CLI_FILTER)))
    with open(js, "w") as fh:
        fh.write(install.render_job_submit(settings, option_kinds(),
                                           install.template(install.JOB_SUBMIT)))
    script = os.path.join(tmp, "job.sh")
    body = "#!/bin/bash\n#SBATCH --nodes=4 --gpus-per-node=8\n" + "echo step\n" * 2000
    with open(script, "w") as fh:
        fh.write(body)
    prog = f"""
slurm = {{SUCCESS = 0, ERROR = -1}}
dofile({json.dumps(cli)})
dofile({json.dumps(js)})
local o = setmetatable({{}}, {{__index = function(t, k)
  if k == "argv" then return {{{json.dumps(script)}}} end
  if k == "type" then return "sbatch" end
  return nil end}})
local job = {{script = {json.dumps(body)}, environment = {{HOME = "/home/u"}}}}
local t0 = os.clock()
for i = 1, {loops} do slurm_cli_setup_defaults(o, false); slurm_cli_pre_submit(o, 0) end
local t1 = os.clock()
for i = 1, {loops} do slurm_job_submit(job, {{}}, 1000) end
local t2 = os.clock()
io.write(string.format("%.9f %.9f\\n", (t1 - t0) / {loops}, (t2 - t1) / {loops}))
"""
    out: Dict[str, Any] = {"script_bytes": len(body)}
    for lua in ("lua5.1", "lua5.4"):
        exe = shutil.which(lua)
        if exe is None:
            out[lua] = None
            continue
        p = subprocess.run([exe, "-"], input=prog, capture_output=True, text=True, check=True)
        cli_s, js_s = map(float, p.stdout.split())
        out[lua] = {"cli_filter_s": cli_s, "job_submit_s": js_s}
    return out


def task_prolog(tmp: str, inv: str, repeats: int, env: Dict[str, str]) -> Dict[str, Any]:
    """TaskProlog's cost per task: not planned (the shell's one test), the
    first task of a planned job, a later one."""
    from bench.process import run_process
    from slurmtopo.hooks import install

    settings = install.HookSettings(command=sys.executable, inventory=inv)
    prolog = os.path.join(tmp, "task_prolog.sh")
    with open(prolog, "w") as fh:
        fh.write(install.render_task_prolog(settings, install.template(install.TASK_PROLOG)))
    os.chmod(prolog, 0o755)
    plain = median_run([prolog], repeats, env={"PATH": "/usr/bin:/bin"})
    # a plan from the planning call, 16 ranks on 2 nodes
    p = subprocess.run(slurmtopo("hooks", "plan", "--inventory", inv, "--state", "none",
                                 "--options", '{"wrap":"x","nodes":"2","gpus-per-node":"8"}'),
                       env=dict(env, SLURMTOPO_DIRECTIVE="--tp 8 --dp 2"), capture_output=True,
                       text=True, check=True)
    export = dict(l.split("\t")[1:] for l in p.stdout.splitlines() if l.startswith("set\t"))
    value = export["export"].split("SLURMTOPO_PLAN=", 1)[1]
    hosts = export.get("nodes")
    from slurmtopo.plan.plandoc import plan_from_env_value
    doc = plan_from_env_value(value)
    nodelist = ",".join(doc["hosts"])
    first, later = [], []
    for i in range(repeats):
        submit = tempfile.mkdtemp(dir=tmp)
        job_env = dict(env, SLURM_JOB_ID=str(1000 + i), SLURM_SUBMIT_DIR=submit,
                       SLURM_JOB_NODELIST=nodelist, SLURMTOPO_PLAN=value, PATH="/usr/bin:/bin")
        first.append(run_process(slurmtopo("hooks", "task-prolog"), env=job_env))
        task_env = dict(job_env, SLURM_STEP_ID="0", SLURMD_NODENAME=doc["hosts"][0],
                        SLURM_LOCALID="3", SLURM_STEP_NODELIST=nodelist,
                        SLURM_STEP_TASKS_PER_NODE="8(x2)")
        del task_env["SLURMTOPO_PLAN"]
        task_env["SLURMTOPO_JOB_PLAN"] = f"{1000 + i}:{value}"
        later.append(run_process(slurmtopo("hooks", "task-prolog"), env=task_env))
    import statistics

    def med(rs, key):
        return statistics.median(r[key] for r in rs)
    return {"not_planned": plain, "nodes": hosts,
            "first_task": {"median_s": med(first, "wall_s"), "cpu_s": med(first, "cpu_s")},
            "later_task": {"median_s": med(later, "wall_s"), "cpu_s": med(later, "cpu_s")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    import compileall
    compileall.compile_dir(os.path.join(ROOT, "slurmtopo"), quiet=1)
    tmp = tempfile.mkdtemp(prefix="bench-hooks.")
    try:
        env = child_env()
        env["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")   # a user's first call, then later
        inv = write_inventory(tmp, NODES)
        state = busy_state(tmp, inv)
        t0 = time.monotonic()
        first = median_run(slurmtopo("hooks", "plan", "--inventory", inv, "--state", "none",
                                     "--options", '{"wrap":"x"}'), 1,
                           env=dict(env, SLURMTOPO_DIRECTIVE="--tp 8"))
        result = {"nodes": NODES, "budget_s": BUDGET_S, "first_call_of_a_user": first,
                  "planning_calls": planning_calls(inv, state, repeats, env),
                  "lua_without_directive": lua_checks(tmp),
                  "task_prolog": task_prolog(tmp, inv, repeats, env),
                  "machine": os.uname().nodename, "cpus": os.cpu_count(),
                  "load_average": os.getloadavg(), "elapsed_s": time.monotonic() - t0}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "hooks.json"), "w") as fh:
        json.dump(result, fh, indent=1, sort_keys=True)
    print(f"load average {', '.join(f'{x:.1f}' for x in result['load_average'])} on "
          f"{result['cpus']} CPUs")
    print(f"planning call on {NODES:,} nodes (budget {BUDGET_S:g} s; the user's first call, "
          f"which compiles the inventory into their cache: {seconds(first['median_s'])})")
    for r in result["planning_calls"]:
        print(f"  {r['job_gpus']:>4} GPUs, {r['state']:<9}  {seconds(r['median_s']):>7} wall, "
              f"{seconds(r['cpu_s']):>7} CPU  {'ok' if r['within_budget'] else 'OVER'}")
    for lua, r in result["lua_without_directive"].items():
        if isinstance(r, dict):
            print(f"  {lua}: cli_filter.lua {r['cli_filter_s'] * 1e6:.0f} us, job_submit.lua "
                  f"{r['job_submit_s'] * 1e6:.0f} us per job without a directive")
    tp = result["task_prolog"]
    print(f"  TaskProlog: not planned {seconds(tp['not_planned']['median_s'])}, first task "
          f"{seconds(tp['first_task']['median_s'])}, later task "
          f"{seconds(tp['later_task']['median_s'])}")
    return 0 if all(r["within_budget"] for r in result["planning_calls"]) else 1


if __name__ == "__main__":
    sys.exit(main())
