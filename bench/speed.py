"""Planner speed and memory at scale, and the other timings users wait on.

* planner wall time (median of several warm runs, plus the first "cold" run
  after every slurmtopo cache is cleared) and peak traced memory
  (tracemalloc, cold run) for jobs of 8 to 32,768 GPUs on inventories of 64
  to 100,000 GPUs: HGX H100 nodes of 8 GPUs in a 3-level fat tree, empty
  and 60% busy;
* the cost model (``cost.evaluate``) on the same placements;
* a 64-GPU job end to end (load inventory and state files, plan, price),
  in-process, and through the CLI minus a bare interpreter start;
* loading a 12,500-node inventory written with node types (folded hostlists,
  one entry per node, JSON);
* node-agent discovery on the fake NVML (8 GPUs), and topology.conf
  generation from a synthetic ibnetdiscover fabric of 10,000 hosts, when
  those modules are present;
* growth: log-log slopes of time against GPUs (1 = linear).
"""
from __future__ import annotations

import gc
import importlib
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from bench.quality import cost_params
from bench.scenarios import Job, busy_state, cluster, dump_state, free_gpus, job_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: inventory sizes (GPUs) and job sizes (GPUs) of the planner grid
INVENTORIES = (64, 512, 4096, 32768, 100000)
JOBS = (8, 64, 512, 4096, 16384, 32768)
QUICK_INVENTORIES = (64, 512, 4096)
QUICK_JOBS = (8, 64, 512)
BUSY = (0, 60)


def clear_caches(*objs) -> None:
    """Empty every functools cache and every module-level ``*cache*`` dict of
    every loaded slurmtopo module (the node-type presets excepted), and the
    tables slurmtopo derives and keeps with ``objs`` (an inventory's fabric
    tree, its node types' and fabric's tables: :class:`slurmtopo.inventory.model.Derived`),
    so the next call pays for the derived topology like a fresh process would."""
    from slurmtopo.inventory.model import Derived, Inventory

    def reset(obj) -> None:
        if isinstance(getattr(obj, "derived", None), Derived):
            object.__setattr__(obj, "derived", Derived())

    for obj in objs:
        reset(obj)
        if isinstance(obj, Inventory):
            reset(obj.fabric)
            for hw in {id(n.hardware): n.hardware for n in obj}.values():
                reset(hw)
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "slurmtopo" or name.startswith("slurmtopo.")):
            continue
        for attr, obj in list(vars(mod).items()):
            clear = getattr(obj, "cache_clear", None)
            if callable(clear):
                try:
                    clear()
                except TypeError:
                    pass
            elif (isinstance(obj, dict) and "cache" in attr.lower()
                  and name != "slurmtopo.inventory.presets"):
                obj.clear()


def timed(fn: Callable[[], Any]) -> Tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def median_time(fn: Callable[[], Any], repeats: int, before: Optional[Callable[[], None]] = None
                ) -> Dict[str, Any]:
    """Median (and all samples) of ``repeats`` runs; ``before`` runs untimed
    before each."""
    samples = []
    for _ in range(max(1, repeats)):
        if before:
            before()
        gc.collect()
        dt, _ = timed(fn)
        samples.append(dt)
    return {"median_s": statistics.median(samples), "samples_s": samples}


def peak_memory(fn: Callable[[], Any]) -> int:
    """Peak bytes allocated (tracemalloc) while ``fn`` runs."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return max(0, peak - base)


def speed_job(world: int) -> Job:
    """The layout used at every size: TP 8 in a node, PP up to 8, DP the
    rest (a dense GPT-style job)."""
    tp = min(8, world)
    pp = max(1, min(8, world // tp // 2)) if world >= 32 else 1
    dp = world // (tp * pp)
    spec, desc = job_model(tp, 1, 1, pp, dp, random.Random(0))
    return Job(tp=tp, pp=pp, dp=dp, model_spec=spec, model=desc)


def _repeats(world: int, quick: bool) -> int:
    return 3 if quick else 5


def planner_grid(inventories: Sequence[int] = INVENTORIES, jobs: Sequence[int] = JOBS,
                 busy: Sequence[int] = BUSY, quick: bool = False, memory: bool = True,
                 progress: Optional[Callable[[str], None]] = None) -> List[Dict[str, Any]]:
    from slurmtopo import cost
    from slurmtopo.errors import PlacementError
    from slurmtopo.plan import choice

    rows = []
    for inv_gpus in inventories:
        inv = cluster("fattree3", max(1, inv_gpus // 8))
        for b in busy:
            state = busy_state(inv, b / 100.0, random.Random(f"slurmtopo-bench/speed/{inv_gpus}/{b}"))
            free = free_gpus(inv, state)
            for world in jobs:
                if world > inv.gpu_count:
                    continue
                row: Dict[str, Any] = {"inventory_gpus": inv.gpu_count, "nodes": len(inv),
                                       "busy_pct": b, "free_gpus": free, "job_gpus": world}
                rows.append(row)
                if world > free:
                    row["fits"] = False
                    row["error"] = f"{world} GPUs > {free} free"
                    continue
                job = speed_job(world)
                req = job.request()
                row["layout"] = job.describe()

                def do_plan():
                    return choice.plan(inv, state, req)

                clear_caches(inv, state)
                gc.collect()
                try:
                    cold_s, pl = timed(do_plan)
                except PlacementError as exc:
                    row["fits"] = False
                    row["error"] = exc.render()
                    continue
                row["fits"] = True
                row["cold_s"] = cold_s
                warm = median_time(do_plan, _repeats(world, quick))
                row["plan_s"] = warm["median_s"]
                row["plan_samples_s"] = warm["samples_s"]
                params = cost_params(inv)
                ev = median_time(lambda: cost.evaluate(inv, pl, req, params),
                                 min(3, _repeats(world, quick)))
                row["evaluate_s"] = ev["median_s"]
                if memory:
                    clear_caches(inv, state)
                    row["peak_bytes"] = peak_memory(do_plan)
                if progress:
                    progress(f"plan {world:>6} GPUs on {inv.gpu_count:>6} ({b}% busy): "
                             f"{row['plan_s'] * 1e3:9.2f} ms warm, {cold_s * 1e3:9.2f} ms cold")
    return rows


# --------------------------------------------------------------------------
# growth


def loglog_slope(points: Sequence[Tuple[float, float]]) -> Optional[float]:
    """Least-squares slope of log(y) against log(x); None with < 2 points."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def growth(rows: Sequence[Dict[str, Any]], superlinear: float = 1.15,
           local: float = 1.5) -> List[Dict[str, Any]]:
    """Slopes of plan time against job size (at each inventory size, jobs
    of >= 512 GPUs, where fixed costs no longer dominate) and against
    inventory size (at each job size). Slopes above ``superlinear``, and
    steps between neighbouring sizes steeper than ``local``, are flagged."""
    out = []
    ok = [r for r in rows if r.get("fits")]
    for key, fixed, vary, floor in (("job", "inventory_gpus", "job_gpus", 512),
                                    ("inventory", "job_gpus", "inventory_gpus", 0)):
        for b in sorted({r["busy_pct"] for r in ok}):
            for f in sorted({r[fixed] for r in ok}):
                pts = sorted((r[vary], r["plan_s"]) for r in ok
                             if r["busy_pct"] == b and r[fixed] == f and r[vary] >= floor)
                if len(pts) < 3:
                    continue
                slope = loglog_slope(pts)
                cold = loglog_slope(sorted((r[vary], r["cold_s"]) for r in ok
                                           if r["busy_pct"] == b and r[fixed] == f
                                           and r[vary] >= floor))
                # the steepest step between neighbouring sizes, where the
                # times are long enough (>= 20 ms) not to be noise
                steps = [(loglog_slope([a, b]), a[0], b[0]) for a, b in zip(pts, pts[1:])
                         if min(a[1], b[1]) >= 0.02]
                steep = max(steps, default=(None, None, None))
                out.append({"against": key, "fixed": f"{fixed}={f}", "busy_pct": b,
                            "points": len(pts), "range": [pts[0][0], pts[-1][0]],
                            "slope": slope, "cold_slope": cold,
                            "steepest_step": {"slope": steep[0], "from": steep[1], "to": steep[2]},
                            "superlinear": slope is not None and slope > superlinear,
                            "superlinear_step": steep[0] is not None and steep[0] > local})
    return out


# --------------------------------------------------------------------------
# end to end, inventory loading


def _write_cluster_files(directory: str, nodes: int, busy: int, seed: str,
                         per_node: bool = False, fmt: str = "yaml") -> Tuple[str, str]:
    from slurmtopo.files.yamlio import dump_json, dump_yaml
    from slurmtopo.inventory.schema import inventory_dict

    inv = cluster("fattree3", nodes)
    data = inventory_dict(inv)
    if per_node:
        data["nodes"] = [{"name": n.name, "type": n.type} for n in inv]
    suffix = "json" if fmt == "json" else "yaml"
    tag = "per-node" if per_node else "folded"
    inv_p = os.path.join(directory, f"fattree3-{nodes}-{tag}.{suffix}")
    with open(inv_p, "w") as fh:
        fh.write(dump_json(data) if fmt == "json" else dump_yaml(data))
    st_p = os.path.join(directory, f"fattree3-{nodes}-busy{busy}.state.yaml")
    with open(st_p, "w") as fh:
        fh.write(dump_state(busy_state(inv, busy / 100.0, random.Random(seed))))
    return inv_p, st_p


def inventory_load(directory: str, nodes: int = 12500, repeats: int = 3,
                   memory: bool = True) -> List[Dict[str, Any]]:
    from slurmtopo.inventory.schema import load_inventory

    rows = []
    for per_node, fmt in ((False, "yaml"), (True, "yaml"), (True, "json")):
        inv_p, _ = _write_cluster_files(directory, nodes, 0, "load", per_node, fmt)
        size = os.path.getsize(inv_p)
        t = median_time(lambda: load_inventory(inv_p), repeats, before=clear_caches)
        inv = load_inventory(inv_p)
        row = {"nodes": len(inv), "gpus": inv.gpu_count,
               "written": f"{'one entry per node' if per_node else 'folded hostlists'}, {fmt}",
               "file_bytes": size, "load_s": t["median_s"], "samples_s": t["samples_s"]}
        if memory and not per_node:  # tracemalloc triples the time of the big ones
            row["peak_bytes"] = peak_memory(lambda: load_inventory(inv_p))
        rows.append(row)
    return rows


def end_to_end(directory: str, repeats: int = 7, world: int = 64,
               sizes: Sequence[int] = (32, 128, 1024), busy: int = 60) -> List[Dict[str, Any]]:
    """Load inventory + state files, build the request, plan, price: what
    ``slurmtopo plan`` does for a user, minus imports and printing,
    in-process with every cache cleared first. Each phase is timed too."""
    from slurmtopo import cost
    from slurmtopo.errors import PlacementError
    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.inventory.state import load_state
    from slurmtopo.plan import choice

    job = speed_job(world)
    rows = []
    for nodes in sizes:
        inv_p, st_p = _write_cluster_files(directory, nodes, busy, f"e2e/{nodes}")
        phases: Dict[str, List[float]] = {"load_inventory": [], "load_state": [], "plan": [],
                                          "evaluate": [], "total": []}

        def pipeline():
            t0 = time.perf_counter()
            inv = load_inventory(inv_p)
            t1 = time.perf_counter()
            st = load_state(st_p, inv)
            t2 = time.perf_counter()
            req = job.request()
            pl = choice.plan(inv, st, req)
            t3 = time.perf_counter()
            cost.evaluate(inv, pl, req, cost_params(inv))
            t4 = time.perf_counter()
            for k, dt in (("load_inventory", t1 - t0), ("load_state", t2 - t1),
                          ("plan", t3 - t2), ("evaluate", t4 - t3), ("total", t4 - t0)):
                phases[k].append(dt)

        row: Dict[str, Any] = {"what": f"{world}-GPU job, {nodes * 8:,}-GPU inventory {busy}% busy, "
                                       "load+plan+price (in-process, cold caches)",
                               "inventory_gpus": nodes * 8, "job_gpus": world}
        rows.append(row)
        try:
            for _ in range(repeats):
                clear_caches()
                gc.collect()
                pipeline()
        except PlacementError as exc:
            row["error"] = exc.render()
            continue
        row["median_s"] = statistics.median(phases["total"])
        row["samples_s"] = phases["total"]
        row["phases_s"] = {k: statistics.median(v) for k, v in phases.items() if k != "total"}
    return rows


def _cli_has(command: str) -> bool:
    try:
        from slurmtopo.cli import COMMANDS
    except Exception:
        return False
    return command in COMMANDS


def cli_end_to_end(directory: str, repeats: int = 5, nodes: int = 128,
                   world: int = 64) -> Optional[Dict[str, Any]]:
    """``slurmtopo plan`` as a subprocess, minus ``python -c pass``. None
    when there is no plan command yet or it refuses our flags."""
    if not _cli_has("plan"):
        return None
    inv_p, st_p = _write_cluster_files(directory, nodes, 60, f"e2e/{nodes}")
    job = speed_job(world)
    cmd = [sys.executable, "-m", "slurmtopo", "plan", "--inventory", inv_p, "--state", st_p,
           "--tp", str(job.tp), "--pp", str(job.pp), "--dp", str(job.dp)]
    out_dir = tempfile.mkdtemp(dir=directory)
    probe = subprocess.run(cmd, capture_output=True, text=True, cwd=out_dir)
    if probe.returncode != 0:
        return {"error": (probe.stderr or probe.stdout).strip().splitlines()[-1:] or ["failed"],
                "command": " ".join(cmd)}

    def run_it(c):
        return lambda: subprocess.run(c, capture_output=True, cwd=out_dir, check=False)

    imports = [sys.executable, "-c", "import slurmtopo.cli, slurmtopo.commands.plan, "
               "slurmtopo.inventory.schema, slurmtopo.inventory.state, slurmtopo.plan.choice, "
               "slurmtopo.cost, slurmtopo.plan.rankmap, slurmtopo.sbatch, slurmtopo.show.preview, "
               "rich.console"]
    bare, imp, full = [], [], []
    for _ in range(repeats):  # interleaved, so load from elsewhere hits all alike
        bare.append(timed(run_it([sys.executable, "-c", "pass"]))[0])
        imp.append(timed(run_it(imports))[0])
        full.append(timed(run_it(cmd))[0])
    bare = {"median_s": statistics.median(bare)}
    imp = {"median_s": statistics.median(imp)}
    full = {"median_s": statistics.median(full), "samples_s": full}
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"what": f"`slurmtopo plan` {world} GPUs on {nodes * 8}-GPU inventory, 60% busy, "
                    "subprocess minus bare interpreter",
            "command": " ".join(os.path.relpath(c, ROOT) if os.path.isabs(c) and c.startswith(ROOT)
                                else c for c in cmd[1:]),
            "median_s": full["median_s"] - bare["median_s"], "process_s": full["median_s"],
            "interpreter_s": bare["median_s"],
            "imports_s": imp["median_s"] - bare["median_s"]}


# --------------------------------------------------------------------------
# agent discovery and topology.conf generation (other engineers' modules)


def _try_import(name: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # not written yet, or broken
        return exc


def agent_discovery(repeats: int = 7, fixture: str = "hgx_h100") -> Dict[str, Any]:
    """Node-agent discovery of an 8-GPU HGX H100 on the fake NVML and a fake
    /sys tree (slurmtopo.testing; the machine from tests/fixtures/nvml),
    then rendering the node report."""
    sys.path.insert(0, ROOT)
    try:
        fake = _try_import("slurmtopo.testing.fake_pynvml")
        fsys = _try_import("slurmtopo.testing.fake_sysfs")
        disc = _try_import("slurmtopo.agent.nvml_discovery")
    finally:
        sys.path.remove(ROOT)
    for mod in (fake, fsys, disc):
        if isinstance(mod, Exception):
            return {"skipped": f"agent discovery or fake NVML not available: {mod}"}
    import yaml

    path = os.path.join(ROOT, "tests", "fixtures", "nvml", f"{fixture}.yaml")
    if not os.path.exists(path):
        return {"skipped": f"no NVML fixture {os.path.relpath(path, ROOT)}"}
    with open(path) as fh:
        machine = yaml.safe_load(fh)
    root = tempfile.mkdtemp(prefix="slurmtopo-bench-sysfs-")
    try:
        fsys.build_sysfs(root, machine)

        def run_discover():
            return disc.discover(nvml=fake.FakeNvml(machine), sysfs_root=root, node_name="bench")

        found = run_discover()  # warm imports
        gpus = len(found.node.gpus)
        t = median_time(run_discover, repeats)
        t_render = median_time(lambda: run_discover().render(), repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"what": f"agent discovery, {gpus} GPUs ({fixture}), fake NVML + fake sysfs",
            "gpus": gpus, "median_s": t["median_s"], "samples_s": t["samples_s"],
            "with_report_s": t_render["median_s"], "problems": found.problems}


def topology_generation(hosts: int = 10000, repeats: int = 3) -> Dict[str, Any]:
    """``slurmtopo topology generate --ibnetdiscover`` without the file
    writing: parse a synthetic ibnetdiscover dump of ``hosts`` hosts (8
    rails, scalable units of 32, pods of 8 units: 3 levels), derive the
    tree, render topology.conf."""
    mods = [_try_import(m) for m in ("bench.ibgen", "slurmtopo.admin.ibnetdiscover",
                                     "slurmtopo.admin.generate", "slurmtopo.slurmfmt.topology_files")]
    for mod in mods:
        if isinstance(mod, Exception):
            return {"skipped": f"topology generation not available: {mod}"}
    ibgen, ibnet, gen, tconf = mods
    spec = ibgen.FatTreeSpec(hosts=hosts, hosts_per_unit=32, rails=8, units_per_pod=8)
    t_gen, text = timed(lambda: ibgen.generate(spec))

    def parse():
        clear_caches()
        return ibnet.parse_ibnetdiscover(text, "<bench>")

    def derive(ib):
        return gen.build_topology("tree", ib=ib)

    def render(built):
        return tconf.render(built.fabric, "tree", gen.header("topology.conf", "tree", built))

    phases: Dict[str, List[float]] = {"parse": [], "derive": [], "render": []}
    for _ in range(max(1, repeats)):
        gc.collect()
        t0 = time.perf_counter()
        ib = parse()
        t1 = time.perf_counter()
        built = derive(ib)
        t2 = time.perf_counter()
        conf = render(built)
        t3 = time.perf_counter()
        phases["parse"].append(t1 - t0)
        phases["derive"].append(t2 - t1)
        phases["render"].append(t3 - t2)
    totals = [a + b + c for a, b, c in zip(*phases.values())]
    t_parse = {"median_s": statistics.median(phases["parse"])}
    t_derive = {"median_s": statistics.median(phases["derive"])}
    t_render = {"median_s": statistics.median(phases["render"])}
    n_hosts = len({h for sw in built.fabric.switches for h in sw.nodes})
    return {"what": f"topology.conf from a synthetic ibnetdiscover fabric of {hosts:,} hosts "
                    f"(8 rails, {len(text) / 2**20:.0f} MiB)",
            "hosts": hosts, "hosts_in_conf": n_hosts, "switches": len(built.fabric.switches),
            "ibnetdiscover_bytes": len(text), "topology_conf_bytes": len(conf),
            "generate_dump_s": t_gen, "parse_s": t_parse["median_s"],
            "derive_s": t_derive["median_s"], "render_s": t_render["median_s"],
            "median_s": statistics.median(totals), "samples_s": totals}


# --------------------------------------------------------------------------


def run(quick: bool = False, memory: bool = True, workdir: Optional[str] = None,
        progress: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    t0 = time.perf_counter()
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="slurmtopo-bench-")
    os.makedirs(workdir, exist_ok=True)
    out: Dict[str, Any] = {}
    try:
        out["planner"] = planner_grid(QUICK_INVENTORIES if quick else INVENTORIES,
                                      QUICK_JOBS if quick else JOBS, quick=quick,
                                      memory=memory, progress=progress)
        out["growth"] = growth(out["planner"])
        out["end_to_end"] = end_to_end(workdir, repeats=3 if quick else 7,
                                       sizes=(32, 128) if quick else (32, 128, 1024))
        cli = cli_end_to_end(workdir, repeats=3 if quick else 5)
        if cli is not None:
            out["cli"] = cli
        out["inventory_load"] = inventory_load(workdir, nodes=1250 if quick else 12500,
                                               repeats=1 if quick else 3, memory=memory)
        out["agent_discovery"] = agent_discovery(repeats=3 if quick else 7)
        out["topology_conf"] = topology_generation(hosts=1000 if quick else 10000,
                                                   repeats=1 if quick else 3)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    out["wall_s"] = time.perf_counter() - t0
    return out
