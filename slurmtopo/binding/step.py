"""The batch-host step (`python3 -m slurmtopo bind`): allocation, keep or
re-plan, then the run directory (hostfile, rankmap.json, ranktable,
env.sh)."""
from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Inventory, Placement, format_cpulist
from slurmtopo.binding.allocation import (Allocation, default_backend, detect_constrained,
                                          lost_nodes, read_allocation)
from slurmtopo.binding import limits
from slurmtopo.binding.imex import host_nccl_env
from slurmtopo.binding.master import master_address, resolves
from slurmtopo.binding.launcher import rank_table
from slurmtopo.binding.replan import differences, fill_placement, moved_ranks, replan
from slurmtopo.binding.taskenv import TaskEnv, cpu_summary, task_env, visible_by_host
from slurmtopo.cost import cost_params
from slurmtopo.files import safedir
from slurmtopo.files.fileio import read_text
from slurmtopo.files.rundirs import HINT, open_run_dir, read_run_file
from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.inventory.schema import load_inventory, parse_inventory
from slurmtopo.plan.launchers import SRUN, Launcher
from slurmtopo.plan.plandoc import (guardrails_of, launcher_of, layout_from_doc, planned_placement,
                                    unpack)
from slurmtopo.plan.rankmap import (check_placement, job_env, nccl_env, nccl_topo_plan,
                                    placement_from_dict, rankmap_csv, rankmap_json)


@dataclass
class BindResult:
    placement: Placement
    allocation: Allocation
    constrained: bool
    replanned: bool
    job_env: Dict[str, str]
    table: str
    log: List[str]
    inventory: Inventory
    layout: Any
    #: how the tasks start (slurmtopo.plan.launchers): one task per rank (srun)
    #: or per node (torchrun)
    launcher: Launcher = SRUN
    visible: Optional[Dict[str, str]] = None  # host -> CUDA_VISIBLE_DEVICES
    #: files the run directory gets besides the usual ones (path -> text):
    #: the NCCL topology file of a virtualised node type
    extra_files: Dict[str, str] = field(default_factory=dict)
    #: host -> variables only that host's tasks get (NCCL_MNNVL_CLIQUE_ID
    #: where an NVLink clique lies in several IMEX-channel segments)
    host_env: Dict[str, Dict[str, str]] = field(default_factory=dict)
    #: the job may bind again in the same shell (``--spares``): env.sh names
    #: the NCCL variables it set (SLURMTOPO_OWN_NCCL), so a restart tells
    #: them from the user's own
    restartable: bool = False


def master_port(doc: Mapping[str, Any], job_id: str) -> int:
    """The plan's port, else one derived from the job id, so two jobs
    sharing a node do not collide (range 20000-29999)."""
    if doc.get("master_port"):
        return int(doc["master_port"])
    return 20000 + int(job_id) % 10000 if job_id.isdigit() else 29500


def load_inventory_for_bind(doc: Mapping[str, Any], override: Optional[str],
                            log: List[str]) -> Inventory:
    """The inventory file recorded at plan time (or ``--inventory``), else
    the hardware embedded in the script, validated whole at load (its
    ``cost:`` block too, as every command does)."""
    path = override or doc.get("inventory_path")
    if path:
        try:
            inv = load_inventory(path, check=cost_params)
            cost_params(inv)
            log.append(f"inventory: {path}")
            return inv
        except SlurmtopoError as exc:
            if override:
                raise
            log.append(f"inventory {path} unusable here ({exc.render()}); using the copy "
                       "embedded in the script")
        except OSError as exc:
            log.append(f"inventory {path} unreadable here ({exc.strerror}); using the copy "
                       "embedded in the script")
    if not doc.get("inventory"):
        raise SlurmtopoError("the plan embeds no inventory and none could be read; pass "
                             "--inventory")

    where = "<inventory embedded in the batch script>"
    inv = parse_inventory(unpack(doc["inventory"], where, "inventory"), where)
    cost_params(inv)
    return inv


def bind(doc: Mapping[str, Any], env: Mapping[str, str], slurm=None,
         cgroup_mode: str = "auto", inventory_path: Optional[str] = None,
         planner: Optional[Callable] = None, dev_dir: str = "/dev",
         probe: bool = True, allowed: Optional[Iterable[int]] = None,
         run_dir: Optional[str] = None,
         resolve: Optional[Callable[[str], bool]] = None) -> BindResult:
    """Everything the start-time step decides, without writing anything.
    ``allowed``: the CPUs this node allows (default: os.sched_getaffinity);
    ``run_dir``: where the files will go, for paths the environment names;
    ``resolve``: whether a name resolves here (default: the resolver's
    answer; binding.master)."""
    resolve = resolve or resolves
    log: List[str] = []
    inv = load_inventory_for_bind(doc, inventory_path, log)
    planned = planned_placement(doc)
    if slurm is None:
        slurm = default_backend()
    alloc = read_allocation(env, slurm, inv, probe=probe)
    # Slurm's own folded list when it gave one (folding 4,096 names again
    # would cost 0.1 s)
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        nodelist = fold_hostlist(alloc.hosts)
    log.append(f"job {alloc.job_id or '?'}: {len(alloc.hosts)} node(s) {nodelist}")
    log.extend(per_host_lines(
        alloc.hosts,
        lambda h: ("GPUs " + (format_cpulist(alloc.gpus[h]) if alloc.gpus[h] is not None
                              else "unknown")
                   + (f" (from {alloc.sources[h]})" if h in alloc.sources else "")),
        "GPUs of every node: the allocation in rankmap.json"))
    batch_gpus = alloc.gpus.get(alloc.batch_host) if alloc.batch_host else None
    constrained, why = detect_constrained(cgroup_mode, env, slurm, dev_dir, batch_gpus)
    log.append(f"device cgroup renumbers GPUs: {'yes' if constrained else 'no'} ({why})")
    requeued = _restart_count(env)
    diff = differences(planned, alloc)
    if not diff:
        placement, replanned = planned, False
        log.append("allocation matches the plan")
        used = set(planned.hosts)
        extra = [h for h in alloc.hosts if h not in used]
        if extra:
            spares = guardrails_of(doc).get("spares", 0)
            log.append(f"node(s) {', '.join(extra)} allocated but not used by the plan"
                       + (f" (spares: the step restarts on them when a node is lost, at most "
                          f"{spares} time{'s' if spares != 1 else ''})" if spares else ""))
    else:
        log.append("allocation differs from the plan: " + "; ".join(diff[:6])
                   + (f"; ... {len(diff) - 6} more" if len(diff) > 6 else ""))
        log.append("re-planning on the allocated nodes and GPUs")
        placement = replan(doc, inv, alloc, log, planner)
        replanned = True
        log.extend("  " + line for line in moved_ranks(planned, placement))
    if requeued:
        log.append(f"the job was requeued (SLURM_RESTART_COUNT={requeued}): planned again at "
                   "start on this allocation, as at every start"
                   + (" (the plan's nodes and GPUs were given again)" if not replanned else ""))
    return _finish(doc, env, slurm, inv, alloc, placement, replanned, constrained, log,
                   allowed, run_dir, resolve)


def rebind(doc: Mapping[str, Any], env: Mapping[str, str], previous: Placement, restart: int,
           step_exit: Optional[int] = None, slurm=None, cgroup_mode: str = "auto",
           inventory_path: Optional[str] = None, dev_dir: str = "/dev",
           allowed: Optional[Iterable[int]] = None, run_dir: Optional[str] = None,
           resolve: Optional[Callable[[str], bool]] = None, wait: float = 30.0,
           sleep: Callable[[float], None] = time.sleep) -> BindResult:
    """The binding of restart ``restart`` of a job with spares, after its
    step (``previous``, as the run directory's rankmap.json has it) ended
    with ``step_exit``: the lost nodes (down, drained, failed, or gone from
    the job; Slurm may take up to ``wait`` seconds to say so) are replaced
    by spares of their domain (:func:`slurmtopo.binding.spares.replan_after_loss`).
    A failure that lost no node is not restarted: SlurmtopoError."""
    # lazy: only `bind --restart` uses spares; each binding would pay 6 modules (~5 ms)
    from slurmtopo.binding.spares import replan_after_loss

    resolve = resolve or resolves
    log: List[str] = []
    inv = load_inventory_for_bind(doc, inventory_path, log)
    if slurm is None:
        slurm = default_backend()
    spares = guardrails_of(doc).get("spares", 0)
    if not spares:
        raise SlurmtopoError("--restart: the plan asks for no spares (slurmtopo sbatch --spares)")
    if not 1 <= restart <= spares:
        raise SlurmtopoError(f"--restart {restart}: the plan has {spares} spare(s), so restarts "
                             f"1-{spares}")
    code = "?" if step_exit is None else str(step_exit)
    waited = 0.0
    while True:
        alloc = read_allocation(env, slurm, inv, probe=False)
        lost = lost_nodes(slurm, alloc, previous.hosts)
        if lost or waited >= wait:
            break
        sleep(min(5.0, wait - waited))
        waited += min(5.0, wait - waited)
    if not lost:
        raise SlurmtopoError(f"the step failed (exit {code}) but none of its nodes "
                             f"({', '.join(previous.hosts[:8])}) is down, drained or gone from "
                             f"the job after {wait:g} s: not a lost node, not restarting")
    batch = alloc.batch_host
    if batch in lost:
        # this very script runs there: on a node that died it is gone with
        # it; on one marked down or drained Slurm may take the node out of
        # the job and its slurmd may end the script at any moment. No spare
        # runs the script, so no spare can stand in for this node
        others = [h for h in lost if h != batch]
        raise SlurmtopoError(
            f"restart {restart} of {spares}: the step failed (exit {code}) and the job's batch "
            f"host {batch} was lost ({lost[batch]})"
            + (f", with {', '.join(others)}" if others else "")
            + ": the batch host runs this job's script, so a spare cannot replace it; the job "
            f"ends with the step's exit code, its spare node(s) unused (submit it again to "
            "resume from its checkpoint)")
    usable = [h for h in alloc.hosts if h not in lost]
    out = replan_after_loss(inv, previous, usable, lost, alloc.gpus)
    # what the job still holds: rankmap.json's allocation, the GPU numbers
    alloc = Allocation(job_id=alloc.job_id, hosts=usable,
                       gpus={h: alloc.gpus.get(h) for h in usable},
                       batch_host=alloc.batch_host,
                       sources={h: w for h, w in alloc.sources.items() if h in usable})
    log.append(f"restart {restart} of {spares}: the step failed (exit {code}); lost: "
               + "; ".join(f"{h} ({why})" for h, why in lost.items()))
    log.extend("  " + m for m in out.moves)
    if out.in_domain:
        log.append("every group is still inside its domain")
    else:
        log.append(f"{len(out.left)} group(s) left their domain ("
                   + ", ".join(f"{k} {i}" for k, i in out.left[:6]) + "): no spare was left there")
    log.append(f"{spares - restart} restart(s) left")
    batch_gpus = alloc.gpus.get(alloc.batch_host) if alloc.batch_host else None
    constrained, why = detect_constrained(cgroup_mode, env, slurm, dev_dir, batch_gpus)
    log.append(f"device cgroup renumbers GPUs: {'yes' if constrained else 'no'} ({why})")
    return _finish(doc, env, slurm, inv, alloc, out.placement, True, constrained, log, allowed,
                   run_dir, resolve)


def read_bound(run_dir: str) -> Optional[Tuple[Placement, Dict[str, Any]]]:
    """(placement, rankmap.json's data) that ``slurmtopo bind`` wrote in the
    run directory, read back as written (the user's own file in the user's
    own directory: :func:`slurmtopo.files.rundirs.read_run_file`); None when there
    is none. A damaged file is a one-line SlurmtopoError."""
    text = read_run_file(run_dir, "rankmap.json")
    if text is None:
        return None
    where = os.path.join(run_dir, "rankmap.json")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmtopoError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SlurmtopoError(f"{where}: not a rank map")
    return placement_from_dict(data, where), data


def _restart_count(env: Mapping[str, str]) -> int:
    """How many times Slurm requeued the job (SLURM_RESTART_COUNT)."""
    text = env.get("SLURM_RESTART_COUNT", "")
    return int(text) if text.isdigit() else 0


def _finish(doc: Mapping[str, Any], env: Mapping[str, str], slurm, inv: Inventory,
            alloc: Allocation, placement: Placement, replanned: bool, constrained: bool,
            log: List[str], allowed: Optional[Iterable[int]], run_dir: Optional[str],
            resolve: Callable[[str], bool]) -> BindResult:
    """Everything after the placement is decided: the launcher's order,
    GPU numbers, CPU binding, the NCCL block, the master address, the
    hazards the placement brings (logged: the job runs already)."""
    check_placement(placement)
    launcher = launcher_of(doc)
    need = launcher.requirement(placement)
    if need:
        log.append(f"{launcher.name} needs a node-contiguous rank map: {need}; "
                   "filling the nodes in order instead")
        placement = contiguous_fill(inv, placement, alloc, layout_from_doc(doc))
        replanned = True
    if replanned:
        log.extend(start_hazards(doc, env, inv, placement))
    visible = visible_by_host(placement, alloc.gpus, constrained)
    log.extend(per_host_lines(
        list(visible),
        lambda h: (f"ranks {format_cpulist([s.rank for s in placement.ranks_on(h)])} on GPUs "
                   f"{','.join(map(str, placement.gpus_on(h)))} -> "
                   f"CUDA_VISIBLE_DEVICES={visible[h]}"),
        "every rank: rankmap.csv in the run directory"))
    log.append(cpu_summary(placement, launcher, env.get("SLURMTOPO_CPU_BIND", "1") != "0",
                           allowed if allowed is not None else os.sched_getaffinity(0),
                           alloc.batch_host))
    port = master_port(doc, alloc.job_id)
    jenv = job_env(placement, port, nccl_env(inv, placement, doc.get("socket_ifname"), run_dir))
    jenv["MASTER_ADDR"], note = master_address(jenv["MASTER_ADDR"], slurm, resolve)
    if note:
        log.append(note)
    extra = _topo_file(inv, placement, run_dir, log, jenv)
    host_env = host_nccl_env(env, slurm, alloc.job_id, inv, placement, log)
    log.append(f"MASTER_ADDR={jenv['MASTER_ADDR']} MASTER_PORT={port} "
               f"WORLD_SIZE={placement.world_size}")
    table = rank_table(placement, alloc.gpus, constrained, host_env=host_env)
    return BindResult(placement=placement, allocation=alloc, constrained=constrained,
                      replanned=replanned, job_env=jenv, table=table, log=log, inventory=inv,
                      layout=layout_from_doc(doc), launcher=launcher, visible=visible,
                      extra_files=extra, host_env=host_env,
                      restartable=bool(guardrails_of(doc).get("spares")))


def start_hazards(doc: Mapping[str, Any], env: Mapping[str, str], inv: Inventory,
                  placement: Placement) -> List[str]:
    """The pre-launch hazards of a placement decided at start (a re-plan,
    a restart on spares), under the plan's policy and NCCL release (else
    the job's NCCL_VERSION), as log lines: the job runs already, and a
    plan that was checked at submission is not checked again."""
    # lazy: only a start-time placement is checked (~2 ms; hoisted: first task +5 ms CPU)
    from slurmtopo.plan.hazards import HazardPolicy, check_hazards, nccl_version

    guard = guardrails_of(doc)
    try:
        version = nccl_version(guard.get("nccl_version"), env, inv)
        report = check_hazards(inv, placement, nccl_version=version,
                               policy=HazardPolicy.parse(guard.get("hazards", ()),
                                                         "the plan's hazard policy"))
    except SlurmtopoError as exc:
        return [f"hazards not checked: {exc.render()}"]
    return [h.line() for h in report.hazards]


def per_host_lines(hosts: List[str], line: Callable[[str], str], rest: str) -> List[str]:
    """``line(host)`` for the first ``limits.LOG_HOSTS`` hosts (the others'
    are never made); a big job's log then says how many more and where to
    look (``rest``) instead of thousands of lines in the job's output."""
    lines = [f"  {h}: {line(h)}" for h in hosts[:limits.LOG_HOSTS]]
    if len(hosts) > limits.LOG_HOSTS:
        lines.append(f"  ... and {len(hosts) - limits.LOG_HOSTS:,} more node(s) ({rest})")
    return lines


def contiguous_fill(inv: Inventory, placement: Placement, alloc: Allocation, layout
                    ) -> Placement:
    """For torchrun after a re-plan that interleaves nodes: the same hosts,
    each running the same number of ranks, ranks in node order (GPUs as
    planned on each host, topped up from its allocation)."""
    hosts = list(placement.hosts)
    per = -(-placement.world_size // len(hosts))
    hg = []
    for h in hosts:
        gpus = list(placement.gpus_on(h))
        got = alloc.gpus.get(h)
        pool = sorted(got) if got is not None else [g.index for g in inv.nodes[h].gpus]
        gpus += [g for g in pool if g not in gpus]
        hg.append((h, gpus[:per]))
    return fill_placement(inv, hg, layout, notes=("ranks in node order for torchrun",))


def _topo_file(inv: Inventory, placement: Placement, run_dir: Optional[str],
               log: List[str], jenv: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The NCCL topology file a virtualised node type needs in the run
    directory, rendered now (nothing is written here). A file the admin
    named for a node type in a multi-node NVLink domain must describe one
    node (NCCL's env.rst); when it does not, ``NCCL_TOPO_FILE`` leaves
    ``jenv`` and the log says why."""
    plan = nccl_topo_plan(inv, placement, run_dir)
    if plan.note:
        log.append(plan.note)
    named = plan.env.get("NCCL_TOPO_FILE")
    if plan.write is None and named and jenv is not None \
            and jenv.get("NCCL_TOPO_FILE") == named:
        why = _multi_node_topo_file(inv, placement, named)
        if why is not None:
            del jenv["NCCL_TOPO_FILE"]
            log.append(f"NCCL_TOPO_FILE not set: {named}: {why}; on multi-node NVLink "
                       "systems NCCL wants a file of a single node")
    if plan.write is None or run_dir is None:
        return {}
    path, hw = plan.write
    try:
        return {path: _nccl_topo().render(hw, "written by slurmtopo bind for this job").text}
    except SlurmtopoError as exc:
        # the variable must not name a file that is never written
        if jenv is not None and jenv.get("NCCL_TOPO_FILE") == path:
            del jenv["NCCL_TOPO_FILE"]
        log.append(f"no NCCL topology file: {exc.message}")
        return {}


def _multi_node_topo_file(inv: Inventory, placement: Placement, path: str) -> Optional[str]:
    """Why the admin's topology file ``path`` is not one node's, when the
    job's nodes share a multi-node NVLink domain (None otherwise, or when
    it cannot be read here: NCCL then says so itself)."""
    nodes = [inv.nodes[h] for h in placement.hosts if h in inv.nodes]
    if not any(n.nvlink_domain is not None for n in nodes):
        return None
    try:
        text = read_text(path, limit=16 << 20, errors="replace")
    except (OSError, SlurmtopoError):
        return None
    return _nccl_topo().single_node_problem(text, nodes[0].hardware)


def _nccl_topo():
    """:mod:`slurmtopo.plan.nccl_topo`, for a node type that needs an NCCL topology file."""
    # lazy: only virtualised node types need it; each binding would pay 31 modules (~15 ms)
    from slurmtopo.plan import nccl_topo

    return nccl_topo


def env_script(result: BindResult, run_dir: str, environ: Mapping[str, str],
               log: List[str], task: Optional[TaskEnv] = None,
               token: Optional[str] = None) -> Tuple[str, bool]:
    """env.sh text (every value shell-quoted) and whether the tasks read
    their environment from files (``run_dir/task-env/``; above
    ``limits.ENV_TABLE_LIMIT`` the whole text would not fit in the
    environment, and every task parsing all ranks would cost more the
    bigger the job). NCCL variables the user already exported are kept.
    ``token``: the secret the task-env blocks start with (see
    :func:`slurmtopo.binding.taskenv.block_mark`; made here when None)."""
    q = shlex.quote
    p = result.placement
    nnodes = len(set(s.host for s in p.slots))
    lines = ["# written by `slurmtopo bind`; sourced by the batch script before srun",
             f"export SLURM_HOSTFILE={q(os.path.join(run_dir, 'hostfile'))}",
             f"export SLURMTOPO_NTASKS={result.launcher.tasks(p)}",
             f"export SLURMTOPO_NNODES={nnodes}",
             f"export SLURMTOPO_NPROC_PER_NODE={p.world_size // max(nnodes, 1)}",
             f"export SLURMTOPO_RUN_DIR={q(run_dir)}"]
    # a restart binds again in the shell the first binding's exports live
    # in: those are slurmtopo's, not the user's
    ours = {k for k in environ.get("SLURMTOPO_OWN_NCCL", "").split()
            if re.fullmatch(r"NCCL_[A-Z0-9_]+", k)}  # names only: the line is eval-ed
    own = []
    for k, v in result.job_env.items():
        if k.startswith("NCCL_") and k in environ and k not in ours:
            log.append(f"keeping {k}={environ[k]} from the environment (slurmtopo "
                       f"would set {v})")
            continue
        lines.append(f"export {k}={q(v)}")
        if k.startswith("NCCL_"):
            own.append(k)
    gone = sorted(ours - set(own))
    if gone:
        lines.append("unset " + " ".join(gone))
    if result.restartable:
        lines.append(f"export SLURMTOPO_OWN_NCCL={q(' '.join(own))}")
    task = task or task_env_parts(result, environ)
    whole = task.whole
    by_file = len(whole.encode()) > limits.ENV_TABLE_LIMIT
    # the Python launcher (`python3 -m slurmtopo.binding rank`) reads this table
    lines.append(f"export SLURMTOPO_RANK_TABLE_FILE={q(os.path.join(run_dir, 'ranktable'))}")
    lines.append("unset SLURMTOPO_RANK_TABLE")
    if by_file:
        where = os.path.join(run_dir, limits.TASK_DIR)
        loader = task.loader(where, limits.TASK_BLOCK, token or new_token())
        lines.append(f"export SLURMTOPO_TASK_ENV={q(loader)}")
        log.append(f"task environment is {len(whole)} bytes: each task reads its block of "
                   f"{limits.TASK_BLOCK} ranks from {where}; {run_dir} must be readable on "
                   "every node (and inside the container)")
    else:
        lines.append(f"export SLURMTOPO_TASK_ENV={q(whole)}")
    lines.append("unset SLURMTOPO_TASK_ENV_FILE")
    # a task must only see GPU variables its own step set; srun reads
    # SLURM_NTASKS_PER_NODE as an option, which a re-plan may contradict
    lines.append("unset SLURM_STEP_GPUS SLURM_NTASKS_PER_NODE")
    return "\n".join(lines) + "\n", by_file


def task_env_parts(result: BindResult, environ: Mapping[str, str]) -> TaskEnv:
    """Every task's environment as POSIX sh (see binding.taskenv)."""
    return task_env(result.placement, result.visible or {}, result.launcher,
                    cpu_bind=environ.get("SLURMTOPO_CPU_BIND", "1") != "0",
                    host_env=result.host_env)


def new_token() -> str:
    """A fresh secret for one binding's task-env blocks."""
    return secrets.token_hex(16)


@dataclass
class RunDirFiles:
    """What :func:`write_run_dir` wrote: the files, env.sh's text (which
    ``slurmtopo bind --print-env`` hands to the batch script on stdout) and
    a note when other users may write in the directory above the run
    directory (they can make the job fail there, not change what it runs)."""

    paths: List[str]
    env: str
    note: Optional[str] = None


def write_run_dir(result: BindResult, run_dir: str, environ: Mapping[str, str],
                  token: Optional[str] = None) -> RunDirFiles:
    """Write hostfile, ranktable, rankmap.json, rankmap.csv, task-env.sh (and
    for a big job task-env/<block>.sh), the extra files and env.sh, all or
    none (they describe one binding).

    The run directory is opened through :mod:`slurmtopo.files.rundirs` (every
    component the user's own, no link followed, 0700) and every file is
    written through its descriptor, mode 0600, whatever the umask: another
    user who can rename entries of the submit directory cannot make this
    step write elsewhere or follow a planted link."""
    token = token or new_token()
    p = result.placement
    lines = result.launcher.hostfile_hosts(p)
    rankmap = rankmap_json(p, result.layout, extra={
        "allocation": {h: (format_cpulist(g) if g is not None else None)
                       for h, g in result.allocation.gpus.items()},
        "replanned": result.replanned, "cgroup_devices": result.constrained,
        **({"host_env": result.host_env} if result.host_env else {})})
    task = task_env_parts(result, environ)
    text, by_file = env_script(result, run_dir, environ, result.log, task, token)
    with open_run_dir(run_dir) as where:
        files = [(where, "hostfile", "".join(f"{h}\n" for h in lines)),
                 (where, "ranktable", result.table),
                 (where, "rankmap.json", rankmap),
                 # the batch script lists big jobs in part: every rank is here
                 (where, "rankmap.csv", rankmap_csv(p)),
                 # every task's environment in one file, for a human (or a task
                 # started by hand); the tasks of a big job read task-env/
                 (where, "task-env.sh", task.whole)]
        for path, content in sorted(result.extra_files.items()):
            if os.path.dirname(os.path.abspath(path)) != os.path.abspath(run_dir):
                raise SlurmtopoError("is not in the run directory", path)
            files.append((where, os.path.basename(path), content))
        # env.sh for a human and for batch scripts of earlier releases, which
        # source it; this release's script evaluates what --print-env prints
        files.append((where, "env.sh", text))
        blocks = where.subdir(limits.TASK_DIR, hint=HINT) if by_file else None
        try:
            if blocks is not None:
                files += [(blocks, f"{k}.sh", block)
                          for k, block in enumerate(task.blocks(limits.TASK_BLOCK, token))]
            # read at once by this job's tasks, useless after a crash: no fsyncs
            safedir.write_files(files)
        finally:
            if blocks is not None:
                blocks.close()
        return RunDirFiles([d.child(name) for d, name, _ in files], text, where.shared_anchor)
