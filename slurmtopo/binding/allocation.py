"""Reading the allocation Slurm really made: nodes, the GPUs of every node
(`scontrol show job -d`, SLURM_JOB_GPUS, an srun probe), and whether a
device cgroup renumbers them."""
from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from slurmtopo.errors import SlurmError, SlurmtopoError
from slurmtopo.inventory.model import Hardware, Inventory, NodeState, parse_cpulist
from slurmtopo.binding.limits import CGROUP_MODES
from slurmtopo.inventory.hostlist import expand_hostlist
from slurmtopo.slurmfmt.gres_strings import gpu_index_lists
from slurmtopo.plan.taskprobe import int_list


@dataclass
class Allocation:
    """What Slurm gave the job: hosts in Slurm's order and, per host, the
    GPU indices (None when nothing said)."""

    job_id: str
    hosts: List[str]
    gpus: Dict[str, Optional[Tuple[int, ...]]]
    batch_host: Optional[str] = None
    sources: Dict[str, str] = field(default_factory=dict)  # host -> where gpus came from


def parse_index_list(text: str) -> Optional[Tuple[int, ...]]:
    """``"0-3,6"`` -> (0, 1, 2, 3, 6); None for N/A, NoDevFiles, garbage."""
    text = (text or "").strip()
    if not text:
        return ()
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def parse_scontrol_job(text: str) -> Dict[str, Tuple[int, ...]]:
    """host -> GPU indices from ``scontrol show job -d`` output.

    Understands ``Nodes=gpu[01-02] CPU_IDs=0-111 Mem=0 GRES=gpu:h100:8(IDX:0-7)``
    (Slurm >= 20.02; several GPU types are summed) and the older
    ``GRES_IDX=gpu(IDX:0-3)``. A node line without GPUs maps to ().
    """
    out: Dict[str, Tuple[int, ...]] = {}
    for line in text.splitlines():
        m = re.search(r"(?:^|\s)Nodes=(\S+)", line)
        if not m or "CPU_IDs=" not in line:
            continue
        try:
            hosts = expand_hostlist(m.group(1))
        except ValueError:
            continue
        g = re.search(r"(?:^|\s)GRES(?:_IDX)?=(\S*)", line)
        gpus: Set[int] = set()
        ok = True
        for idx in gpu_index_lists(g.group(1) if g else ""):
            vals = parse_index_list(idx)
            if vals is None:
                ok = False
                break
            gpus.update(vals)
        if not ok:
            continue
        for h in hosts:
            out[h] = tuple(sorted(gpus))
    return out


def parse_probe(text: str) -> Dict[str, Optional[Tuple[int, ...]]]:
    """Lines ``SLURMTOPO_PROBE host gpus`` printed by the srun probe."""
    out: Dict[str, Optional[Tuple[int, ...]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "SLURMTOPO_PROBE":
            out[parts[1]] = parse_index_list(parts[2]) if parts[2] != "?" else None
    return out


def _minor_to_index(hw: Optional[Hardware]) -> Dict[int, int]:
    return {g.device_minor: g.index for g in hw.gpus} if hw is not None else {}


def read_allocation(env: Mapping[str, str], slurm=None,
                    inv: Optional[Inventory] = None, probe: bool = True) -> Allocation:
    """The allocation of the running job (see module doc for the sources).

    Slurm's ``SLURM_*_GPUS`` carry device-file numbers (``/dev/nvidiaN``);
    they are turned into NVML indices with the inventory's minors. ``IDX``
    in ``scontrol`` is the position in gres.conf, which lists GPUs in index
    order (as ``slurmtopo``'s gres.conf does). ``slurm`` is the Slurm
    backend (default: the command-line one); a question it cannot answer
    falls through to the next source.
    """
    slurm = slurm if slurm is not None else default_backend()

    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise SlurmtopoError("SLURM_JOB_NODELIST is not set: `slurmtopo bind` runs inside the "
                             "batch job (use the script `slurmtopo plan` wrote)")
    try:
        hosts = expand_hostlist(nodelist, "SLURM_JOB_NODELIST")
    except ValueError as exc:
        raise SlurmtopoError(str(exc)) from None
    batch = env.get("SLURMD_NODENAME") or (hosts[0] if hosts else None)
    gpus: Dict[str, Optional[Tuple[int, ...]]] = {h: None for h in hosts}
    sources: Dict[str, str] = {}

    def hw_of(h: str) -> Optional[Hardware]:
        node = inv.nodes.get(h) if inv is not None else None
        return node.hardware if node is not None else None

    def from_minors(h: str, nums: Tuple[int, ...]) -> Tuple[int, ...]:
        m = _minor_to_index(hw_of(h))
        return tuple(sorted(m.get(n, n) for n in nums))

    if job:
        text = _answer(lambda: slurm.job_detail(int(job)) if job.isdigit() else None)
        if text is not None:
            for h, g in parse_scontrol_job(text).items():
                if h in gpus:
                    gpus[h] = g
                    sources[h] = "scontrol show job -d"
    if batch in gpus and gpus[batch] is None and env.get("SLURM_JOB_GPUS") is not None:
        g = parse_index_list(env["SLURM_JOB_GPUS"])
        if g is not None:
            gpus[batch] = from_minors(batch, g)
            sources[batch] = "SLURM_JOB_GPUS"
    missing = [h for h in hosts if gpus[h] is None]
    if missing and probe:
        penv = {k: v for k, v in env.items()
                if k not in ("SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_HOSTFILE",
                             "SLURM_DISTRIBUTION")}
        n = str(len(hosts))
        text = _answer(lambda: slurm.step_output(
            [f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--cpu-bind=none",
             "--kill-on-bad-exit=0"],
            ["/bin/sh", "-c", 'echo "SLURMTOPO_PROBE ${SLURMD_NODENAME:-$(hostname -s)} '
                              '${SLURM_STEP_GPUS:-?}"'], penv))
        for h, g in parse_probe(text or "").items():
            if h in gpus and gpus[h] is None and g is not None:
                gpus[h] = from_minors(h, g)
                sources[h] = "srun probe (SLURM_STEP_GPUS)"
    return Allocation(job_id=job, hosts=hosts, gpus=gpus, batch_host=batch, sources=sources)


def default_backend():
    """The command-line Slurm backend, with the start-time step's patience
    (a probe step on a busy controller may take a while)."""
    # lazy: `hooks task-prolog` (every task) loads this module, not the Slurm backends and
    #   the inventory reader they bring (13 modules: 7.3 ms measured)
    from slurmtopo.slurm.cli_backend import CliBackend

    return CliBackend(timeout=120)


def _answer(ask: Callable[[], Optional[str]]) -> Optional[str]:
    """What Slurm answered, or None when it could not (not installed, an
    error, a time-out): the start-time step then asks the next source."""
    try:
        return ask()
    except SlurmError:
        return None


def detect_constrained(mode: str, env: Mapping[str, str], slurm=None,
                       dev_dir: str = "/dev", allocated: Optional[Iterable[int]] = None
                       ) -> Tuple[bool, str]:
    """Does a device cgroup renumber GPUs (``ConstrainDevices=yes``)?

    ``auto`` asks, in order: (1) this batch step's own numbers: Slurm puts
    device-file numbers in SLURM_JOB_GPUS and, under the cgroup, 0..n-1 in
    CUDA_VISIBLE_DEVICES, so different lists mean renumbering and equal lists
    other than 0..n-1 mean none; (2) ``scontrol show config`` (Slurm prints
    the cgroup.conf settings); (3) opening a /dev/nvidiaN that was not
    allocated: EPERM is the device cgroup saying no. If all are silent the
    numbers agree on this host and "no" is assumed. Returns (answer, why).
    """
    if mode not in CGROUP_MODES:
        raise SlurmtopoError(f"--cgroup-devices must be one of {', '.join(CGROUP_MODES)}")
    if mode != "auto":
        return mode == "yes", f"--cgroup-devices {mode}"
    job = int_list(env.get("SLURM_JOB_GPUS"))
    cvd = int_list(env.get("CUDA_VISIBLE_DEVICES"))
    if job and cvd is not None and len(job) == len(cvd):
        if job != cvd:
            return True, (f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} renumbers "
                          f"SLURM_JOB_GPUS={env['SLURM_JOB_GPUS']}")
        if cvd != list(range(len(cvd))):
            return False, (f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} carries the "
                           "node's own GPU numbers")
    text = _answer((slurm if slurm is not None else default_backend()).config_text)
    if text is not None:
        m = re.search(r"^\s*ConstrainDevices\s*=\s*(\S+)", text, re.M | re.I)
        if m:
            yes = m.group(1).lower() in ("yes", "true", "1")
            return yes, f"scontrol show config: ConstrainDevices={m.group(1)}"
    verdict = _probe_dev(dev_dir, set(allocated if allocated is not None else (job or ())))
    if verdict is not None:
        return verdict
    return False, "could not tell; assuming no device cgroup (GPU numbers agree on this host)"


def _probe_dev(dev_dir: str, allocated: Set[int]) -> Optional[Tuple[bool, str]]:
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return None
    for name in sorted(names):
        m = re.fullmatch(r"nvidia(\d+)", name)
        if not m or int(m.group(1)) in allocated:
            continue
        path = os.path.join(dev_dir, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.close(fd)
            return False, f"{path} (not allocated) opens: no device cgroup"
        except OSError as exc:
            if exc.errno == errno.EPERM:
                return True, f"{path} (not allocated) is refused (EPERM): device cgroup"
            if exc.errno in (errno.ENXIO, errno.ENODEV):
                return False, f"{path} (not allocated) is reachable: no device cgroup"
    return None


def lost_nodes(slurm, alloc: Allocation, hosts: Iterable[str]) -> Dict[str, str]:
    """The ``hosts`` a step can no longer run on, with why: down, drained
    (an admin, or the node agent's health watch on a GPU gone bad),
    failing or not responding in Slurm's node states, or gone from the
    job's allocation (``scontrol show job -d`` no longer lists them, as
    Slurm does with a ``--no-kill`` job's failed node). A question Slurm
    cannot answer finds nothing lost."""
    wanted = list(dict.fromkeys(hosts))
    out: Dict[str, str] = {}
    try:
        nodes = {n.name: n for n in slurm.nodes() if n.name in set(wanted)}
    except SlurmError:
        nodes = {}
    for h in wanted:
        n = nodes.get(h)
        if n is None:
            continue
        if not NodeState(h, n.state, flags=n.flags).usable:
            state = "+".join([n.state] + sorted(n.flags))
            out[h] = state + (f": {n.reason}" if n.reason else "")
    listed = {h for h, src in alloc.sources.items() if src == "scontrol show job -d"}
    if listed:
        for h in wanted:
            if h not in listed and h not in out:
                out[h] = "no longer in the job's allocation"
    return out
