"""Contracts: what Slurm gave a running job against what the job asked and
what slurmtopo planned (``slurmtopo audit --contracts`` for every running
multi-node job, ``slurmtopo check`` for one job from inside it;
docs/audit.md, "Contracts").

Each kind is a promise that breaks silently:

* ``segment``: a job that asked ``--segment=S`` must hold a multiple of S
  nodes in every block it touches (Slurm gave ``--segment=12`` as 17+17+2
  after an ``scontrol update`` turned block scheduling off,
  SchedMD/slurm#225);
* ``switches``: a job that asked ``--switches=N`` must span at most N leaf
  switches (after its wait Slurm starts it anyway);
* ``block-whole``: every block the job's nodes belong to holds, in Slurm's
  view (``scontrol show topology``), the nodes the inventory puts there;
* ``node-out-of-block``: a job node that belongs to a block is in that
  block in Slurm's view (powered-down cloud nodes dropped out of their
  blocks until a reconfigure, aws/aws-parallelcluster-cookbook#3123);
* ``rank-order``: ranks number nodes in the planned order, or, for a job
  slurmtopo did not plan, an order that keeps every block or leaf together
  (torchrun numbered node66 before node7, pytorch/pytorch#191190);
* ``task-env``: every task's environment (its rank, host, and a
  ``CUDA_VISIBLE_DEVICES`` that reaches its GPU among the step's GPUs), as
  the tasks really got it.

Pure: the command reads Slurm (through the backend) and the tasks (a probe
step, :mod:`slurmtopo.plan.taskprobe`), this module compares.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from slurmtopo.inventory.hostlist import fold_hostlist
from slurmtopo.inventory.model import Inventory, Placement
from slurmtopo.inventory.topology import block_of, network_view
from slurmtopo.plan.taskprobe import (MAX_TASK_LINES, PROBE_PROCESSES, PROBE_SELF,  # noqa: F401
                                      TASK_KEYS, TaskSeen, int_list, parse_task_lines)

KINDS = ("segment", "switches", "block-whole", "node-out-of-block", "rank-order", "task-env")

@dataclass(frozen=True)
class JobSeen:
    """One running job: what it asked, where Slurm put it, what its tasks
    got, and (from inside the job) what slurmtopo bound it to."""

    job_id: str
    nodes: Tuple[str, ...]
    name: str = ""
    segment: Optional[int] = None
    switches: Optional[int] = None
    #: the tasks a probe saw (None: not probed)
    tasks: Optional[Tuple[TaskSeen, ...]] = None
    #: why the tasks are unknown, when they are
    probe_note: Optional[str] = None
    #: slurmtopo's binding of the job (its run directory's rankmap.json)
    planned: Optional[Placement] = None
    #: the per-task probe ran through the job's launch line (one task per
    #: rank, or per node for torchrun) rather than reading processes
    launch_probe: bool = False


@dataclass(frozen=True)
class SlurmView:
    """Slurm's topology as slurmctld holds it now (``scontrol show
    topology``): blocks and leaf switches, None where it has none."""

    blocks: Optional[Mapping[str, Tuple[str, ...]]] = None
    leaves: Optional[Mapping[str, Tuple[str, ...]]] = None


@dataclass(frozen=True)
class Violation:
    job: str
    kind: str
    message: str

    def as_dict(self) -> Dict[str, str]:
        return {"job": self.job, "kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class ContractReport:
    jobs: Tuple[str, ...]
    violations: Tuple[Violation, ...]
    #: job -> what could not be checked and why
    unchecked: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)

    def shown(self, per: int = 8) -> List[Violation]:
        """The violations to show: the first ``per`` of each job and kind,
        then one line saying how many more (a 32,768-rank job with a wrong
        CUDA_VISIBLE_DEVICES everywhere would fill a log)."""
        out: List[Violation] = []
        count: Dict[Tuple[str, str], int] = {}
        for v in self.violations:
            key = (v.job, v.kind)
            count[key] = count.get(key, 0) + 1
            if count[key] <= per:
                out.append(v)
        for (job, kind), n in count.items():
            if n > per:
                at = max(i for i, v in enumerate(out) if (v.job, v.kind) == (job, kind))
                out.insert(at + 1, Violation(job, kind, f"... and {n - per} more"))
        return out

    def by_kind(self) -> Dict[str, int]:
        counts = {k: 0 for k in KINDS}
        for v in self.violations:
            counts[v.kind] += 1
        return counts


def check_jobs(inv: Inventory, view: SlurmView, jobs: Iterable[JobSeen]) -> ContractReport:
    """Every contract of every job, in job order."""
    checked: List[str] = []
    found: List[Violation] = []
    unchecked: Dict[str, Tuple[str, ...]] = {}
    for job in jobs:
        checked.append(job.job_id)
        out, skipped = check_job(inv, view, job)
        found.extend(out)
        if skipped:
            unchecked[job.job_id] = tuple(skipped)
    return ContractReport(tuple(checked), tuple(found), unchecked)


def check_job(inv: Inventory, view: SlurmView, job: JobSeen
              ) -> Tuple[List[Violation], List[str]]:
    """(violations, what could not be checked and why) for one job."""
    found: List[Violation] = []
    skipped: List[str] = []
    for kind, rule in (("segment", _segment), ("switches", _switches),
                       ("block-whole", _block_whole), ("node-out-of-block", _out_of_block),
                       ("rank-order", _rank_order), ("task-env", _task_env)):
        messages, why = rule(inv, view, job)
        found.extend(Violation(job.job_id, kind, m) for m in messages)
        if why:
            skipped.append(f"{kind}: {why}")
    return found, skipped


# --------------------------------------------------------------------------
# the rules: each returns (messages, why it could not check or None)

Rule = Tuple[List[str], Optional[str]]


def _expected_blocks(inv: Inventory) -> Dict[str, str]:
    return inv.derive("contracts.block_of", lambda: block_of(inv))


def _slurm_block_of(view: SlurmView) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for name, nodes in sorted((view.blocks or {}).items()):
        for h in nodes:
            out.setdefault(h, name)
    return out


def _fold(hosts: Sequence[str]) -> str:
    return fold_hostlist(list(hosts)) if hosts else "none"


def _segment(inv: Inventory, view: SlurmView, job: JobSeen) -> Rule:
    if not job.segment:
        return [], None
    block = _expected_blocks(inv) or _slurm_block_of(view)
    if not block:
        return [], "the job asked --segment but neither the inventory nor Slurm has blocks"
    per: Dict[str, List[str]] = {}
    outside = []
    for h in job.nodes:
        b = block.get(h)
        if b is None:
            outside.append(h)
        else:
            per.setdefault(b, []).append(h)
    s = job.segment
    bad = [b for b, hs in per.items() if len(hs) % s]
    if not bad and not outside:
        return [], None
    got = ", ".join(f"{b}: {_fold(hs)}" for b, hs in per.items())
    counts = "+".join(str(len(hs)) for hs in per.values())
    msg = (f"asked --segment={s} but got {counts} node(s) per block ({got})"
           + (f"; {_fold(outside)} in no block" if outside else ""))
    return [msg], None


def _switches(inv: Inventory, view: SlurmView, job: JobSeen) -> Rule:
    if not job.switches:
        return [], None

    leaf = dict(network_view(inv.fabric).leaf) if inv.fabric.switches else {}
    if not leaf:
        for name, nodes in sorted((view.leaves or {}).items()):
            for h in nodes:
                leaf.setdefault(h, name)
    if not leaf:
        return [], "the job asked --switches but neither the inventory nor Slurm has switches"
    spans: Dict[str, List[str]] = {}
    for h in job.nodes:
        if h in leaf:
            spans.setdefault(leaf[h], []).append(h)
    if len(spans) <= job.switches:
        return [], None
    got = ", ".join(f"{sw}: {_fold(hs)}" for sw, hs in spans.items())
    return [f"asked --switches={job.switches} but spans {len(spans)} leaf switches ({got})"], None


def _blocks_known(inv: Inventory, view: SlurmView) -> Optional[str]:
    if not inv.fabric.blocks:
        return "the inventory has no blocks to compare Slurm's with"
    if view.blocks is None:
        return "Slurm shows no blocks (scontrol show topology)"
    return None


def _block_whole(inv: Inventory, view: SlurmView, job: JobSeen) -> Rule:
    why = _blocks_known(inv, view)
    if why:
        return [], why if job.segment else None
    expected = {b.name: tuple(b.nodes) for b in inv.fabric.blocks}
    mine = []
    for b in inv.fabric.blocks:
        if any(h in set(b.nodes) for h in job.nodes) and b.name not in mine:
            mine.append(b.name)
    out = []
    for name in mine:
        want = set(expected[name])
        have = set((view.blocks or {}).get(name, ()))
        if want == have:
            continue
        missing = sorted(want - have)
        extra = sorted(have - want)
        parts = []
        if missing:
            parts.append(f"lacks {_fold(missing)}")
        if extra:
            parts.append(f"holds {_fold(extra)} of other blocks")
        out.append(f"block {name} is not whole in Slurm: it {' and '.join(parts)} "
                   f"(the inventory: {_fold(expected[name])}; Slurm: "
                   f"{_fold(sorted(have))})")
    return out, None


def _out_of_block(inv: Inventory, view: SlurmView, job: JobSeen) -> Rule:
    why = _blocks_known(inv, view)
    if why:
        return [], None
    want = _expected_blocks(inv)
    have = _slurm_block_of(view)
    out = []
    for h in job.nodes:
        b = want.get(h)
        if b is None or have.get(h) == b:
            continue
        if h not in have:
            out.append(f"{h} belongs to block {b} but is in no block of `scontrol show "
                       "topology`")
        else:
            out.append(f"{h} belongs to block {b} but Slurm has it in block {have[h]}")
    return out, None


def _node_order(job: JobSeen) -> Tuple[Optional[List[str]], Optional[str]]:
    """The job's hosts in node-rank order as its tasks say (NODE_RANK,
    else GROUP_RANK, else their lowest RANK), or why not known."""
    if job.tasks is None:
        return None, job.probe_note or "the tasks were not probed"
    rank_of: Dict[str, int] = {}
    for key in ("NODE_RANK", "GROUP_RANK", "RANK"):
        rank_of = {}
        for t in job.tasks:
            v = t.int_of(key)
            if v is None:
                continue
            rank_of[t.host] = min(rank_of.get(t.host, v), v)
        if rank_of and len(set(rank_of.values())) == len(rank_of):
            break
    if len(rank_of) < 2:
        return None, "fewer than two ranked nodes seen"
    return sorted(rank_of, key=rank_of.__getitem__), None


def _rank_order(inv: Inventory, view: SlurmView, job: JobSeen) -> Rule:
    order, why = _node_order(job)
    if order is None:
        return [], why if len(job.nodes) > 1 else None
    if job.planned is not None:
        planned = [h for h in job.planned.by_host() if job.planned.ranks_on(h)]
        if [h for h in order if h in planned] != [h for h in planned if h in order]:
            return [f"nodes are numbered {_seq(order)}, slurmtopo planned {_seq(planned)}"], None
        return [], None
    if any("SLURMTOPO_GPU" in t.env for t in job.tasks or ()):
        return [], None  # slurmtopo bound it: the order is its plan's (task-env checks it)
    block = _expected_blocks(inv)
    if block:
        dom, what = block, "block"
    else:
        dom, what = dict(network_view(inv.fabric).leaf), "leaf switch"
    seq = [dom.get(h) for h in order]
    if any(d is None for d in seq):
        return [], f"a node of the job is in no {what} of the inventory"
    runs = [d for i, d in enumerate(seq) if i == 0 or seq[i - 1] != d]
    if len(runs) == len(set(runs)):
        return [], None
    split = next(d for d in runs if runs.count(d) > 1)
    return [f"nodes are numbered {_seq(order)}: {what} {split} is split in "
            f"{runs.count(split)} runs, so neighbouring ranks cross the network where one "
            f"{what} could hold them (a natural order keeps each {what} together)"], None


def _seq(hosts: Sequence[str]) -> str:
    return ", ".join(hosts[:8]) + (f", ... ({len(hosts)} nodes)" if len(hosts) > 8 else "")


def _reaches(cvd: List[int], local: int, gpu: int, step: Optional[List[int]]) -> bool:
    """Does device ``local`` of CUDA_VISIBLE_DEVICES ``cvd`` reach NVML
    GPU ``gpu``: the node's own numbers (no device cgroup), or positions
    among the step's GPUs (a cgroup renumbers them from 0)?"""
    if not 0 <= local < len(cvd):
        return False
    plain = cvd[local] == gpu and (step is None or set(cvd) <= set(step))
    renumbered = step is not None and 0 <= cvd[local] < len(step) and \
        step[cvd[local]] == gpu and all(0 <= c < len(step) for c in cvd)
    return plain or renumbered


def _task_env(inv: Inventory, view: SlurmView, job: JobSeen) -> Rule:
    if job.tasks is None:
        return [], job.probe_note or "the tasks were not probed"
    if not job.tasks:
        return [], "no task holding a rank was seen"
    out: List[str] = []
    ranks: Dict[int, List[TaskSeen]] = {}
    for t in job.tasks:
        r = t.int_of("RANK")
        if r is not None:
            ranks.setdefault(r, []).append(t)
    for r, ts in sorted(ranks.items()):
        if len({t.host for t in ts}) > 1:
            out.append(f"rank {r} runs on {', '.join(sorted({t.host for t in ts}))}")
    planned = job.planned
    for t in job.tasks:
        cvd = int_list(t.env.get("CUDA_VISIBLE_DEVICES"))
        step = int_list(t.env.get("SLURM_STEP_GPUS"))
        r = t.int_of("RANK")
        who = f"rank {r} on {t.host}" if r is not None else f"the task on {t.host}"
        shown = (f"CUDA_VISIBLE_DEVICES={t.env.get('CUDA_VISIBLE_DEVICES', '(unset)')}"
                 + (f" (SLURM_STEP_GPUS={t.env['SLURM_STEP_GPUS']})"
                    if "SLURM_STEP_GPUS" in t.env else ""))
        if planned is not None and r is not None and r < planned.world_size:
            slot = planned.slots[r]
            if slot.host != t.host:
                out.append(f"{who}: planned on {slot.host}")
                continue
            if cvd is None or not _reaches(cvd, slot.local_rank, slot.gpu, step):
                out.append(f"{who}: {shown} does not give device {slot.local_rank} (its "
                           f"LOCAL_RANK) its planned GPU {slot.gpu}")
            continue
        if planned is not None and r is None and job.launch_probe:
            # one task per node (torchrun): the node's GPUs in local-rank order
            gpus = planned.gpus_on(t.host)
            if not gpus:
                out.append(f"{who}: no rank was planned there")
            elif cvd is None or not all(_reaches(cvd, i, g, step) for i, g in enumerate(gpus)):
                out.append(f"{who}: {shown} does not list the planned GPUs "
                           f"{','.join(map(str, gpus))} in local-rank order")
            continue
        gpu = t.int_of("SLURMTOPO_GPU")
        local = t.int_of("LOCAL_RANK")
        if gpu is not None and local is not None:
            if cvd is None or not _reaches(cvd, local, gpu, step):
                out.append(f"{who}: {shown} does not give device {local} (its LOCAL_RANK) "
                           f"its GPU {gpu} (SLURMTOPO_GPU)")
        elif cvd is not None and step is not None and not (
                set(cvd) <= set(step) or all(0 <= c < len(step) for c in cvd)):
            out.append(f"{who}: {shown} names GPUs the step was not given")
    if planned is not None and not job.launch_probe:
        missing = [r for r in range(planned.world_size) if r not in ranks]
        if missing:
            out.append(f"{len(missing)} planned rank(s) not seen (first: {missing[0]})")
    if planned is not None and job.launch_probe and ranks:
        missing = [r for r in range(planned.world_size) if r not in ranks]
        if missing:
            out.append(f"{len(missing)} planned rank(s) got no task (first: {missing[0]})")
    return out, None


def metrics_text(report: ContractReport, timestamp: float) -> str:
    """The report as Prometheus text (a node-exporter textfile): violations
    by kind (every kind, 0 included: a series that disappears reads as "no
    data", not "fine"), the jobs checked, when."""
    # lazy: optional dependency (the 'metrics' extra; ~33 ms), only `--metrics-textfile`
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    reg = CollectorRegistry()
    v = Gauge("slurmtopo_contract_violations", "Contract violations of the running multi-node "
              "jobs found by the last check, by kind (docs/audit.md)", ["kind"], registry=reg)
    for kind, n in report.by_kind().items():
        v.labels(kind=kind).set(n)
    Gauge("slurmtopo_contract_jobs", "Running multi-node jobs the last check looked at",
          registry=reg).set(len(report.jobs))
    Gauge("slurmtopo_contract_jobs_violating", "Jobs with at least one violation",
          registry=reg).set(len({x.job for x in report.violations}))
    Gauge("slurmtopo_contract_check_timestamp_seconds", "When the last check ended",
          registry=reg).set(timestamp)
    return generate_latest(reg).decode()


def report_dict(report: ContractReport, source: str) -> Dict[str, object]:
    """The report as JSON data (sorted, so the same input gives the same bytes)."""
    return {"slurmtopo": "contracts", "version": 1, "source": source,
            "jobs": list(report.jobs), "by_kind": report.by_kind(),
            "violations": [v.as_dict() for v in report.violations],
            "unchecked": {j: list(w) for j, w in sorted(report.unchecked.items())}}
