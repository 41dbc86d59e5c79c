"""gres.conf lines for a node, exactly as Slurm's NVML autodetection forms them.

The goal is that ``gres_lines(node)`` equals what ``slurmd -G`` prints with
``AutoDetect=nvml`` on the same machine (in gres.conf syntax), so a site can
switch autodetection off, or check it, without any surprise. Each rule
below is Slurm's own (``src/plugins/gpu/nvml/gpu_nvml.c``,
``src/plugins/gpu/common/gpu_common.c``, ``src/slurmd/common/xcpuinfo.c``,
``src/interfaces/gres.c``):

* one line per GPU, NVML index order, fields in slurmd's order:
  ``Name=gpu Type=<type> File=/dev/nvidia<minor> Cores=<cores> Links=<links>``;
* ``Type`` is the NVML device name, lower case, spaces turned into
  underscores (``NVIDIA H100 80GB HBM3`` -> ``nvidia_h100_80gb_hbm3``,
  ``NVIDIA A100-SXM4-80GB`` -> ``nvidia_a100-sxm4-80gb``);
* ``Cores`` are Slurm *abstract core* ids, not CPU ids: the affinity mask is
  mapped thread -> core, cores numbered socket by socket, and printed as a
  range list (``Cores=0-51`` for ``CPU Affinity 0-51,104-155``);
* ``Links`` is indexed by NVML index: ``-1`` for the GPU itself, otherwise
  the number of *active* NVLink ports whose far end's PCI bus id is that
  GPU. A port whose far end is an NVSwitch counts for nobody, so Slurm sees
  ``0`` everywhere on NVSwitch machines (HGX/DGX A100/H100, GB200); we print
  the same and say so in a comment (:func:`gres_notes`);
* a GPU in MIG mode gives one line per MIG instance: ``Type`` is the GPU
  type cut at its first ``-`` plus ``_<slices>g.<GiB>gb``
  (``nvidia_a100_1g.5gb``), the files are the parent ``/dev/nvidiaN`` plus
  the GI and CI capability devices, written as ``MultipleFiles=`` (one GPU
  with several device files; ``File=`` with three files would be three
  GPUs), ``Links`` is ``-1`` at the MIG's own index among its parent's MIG
  instances. slurmd also records each MIG's UniqueId (the MIG UUID); gres.conf
  has no such key, so it is given in a comment (:func:`gres_notes`).

Where slurmd's output differs between Slurm releases, the release is a
parameter (``slurm_version``, ``--slurm-version``; default: current
releases). So far one rule: since 23.02.7 and 23.11.0 slurmd gives MIG
devices no ``Links=`` (a MIG instance has no NVLink of its own), so MIG
lines carry ``Links=`` only for older releases.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

from slurmtopo.inventory.links import parse_token
from slurmtopo.inventory.model import CpuTopology, Gpu, Hardware, MigDevice, Node, format_cpulist


#: the first release whose slurmd gives MIG devices no Links= (23.11.0 too)
MIG_LINKS_DROPPED = (23, 2, 7)

SlurmVersion = Optional[Tuple[int, ...]]


#: one number of a Slurm release (YY, MM, micro)
_VERSION_PART = re.compile(r"[0-9]{1,4}\Z")


def parse_slurm_version(text: Union[str, Tuple[int, ...], None]) -> SlurmVersion:
    """``"23.02.7"`` -> (23, 2, 7); ``"24.05"`` -> (24, 5, 0); None stays None.
    Raises ValueError on anything else: each part ASCII digits, at most
    four (Slurm numbers releases YY.MM.micro), so a 20-digit "release" is
    not taken as newer than every Slurm."""
    if text is None or isinstance(text, tuple):
        return text
    parts = str(text).strip().split(".")
    if not 2 <= len(parts) <= 3 or not all(_VERSION_PART.match(p) for p in parts):
        shown = text if len(str(text)) <= 40 else f"{str(text)[:40]}..."
        raise ValueError(f"not a Slurm version (like 23.11 or 23.02.7): {shown!r}")
    nums = tuple(int(p) for p in parts)
    return nums + (0,) * (3 - len(nums))


def mig_has_links(slurm_version: SlurmVersion) -> bool:
    """Does slurmd of this release give MIG devices Links=?"""
    return slurm_version is not None and tuple(slurm_version) < MIG_LINKS_DROPPED


def slurm_type_name(model: str) -> str:
    """gpu_common_underscorify_tolower(): lower case, ' ' -> '_'."""
    return "".join("_" if ch == " " else ch.lower() for ch in str(model))


def mig_type_name(gpu_type: str, profile: str) -> str:
    """``nvidia_a100-sxm4-40gb`` + ``1g.5gb`` -> ``nvidia_a100_1g.5gb``."""
    return f"{gpu_type.split('-', 1)[0]}_{profile}"


def abstract_cores(cpus: Sequence[int], cpu: Optional[CpuTopology]) -> Tuple[int, ...]:
    """CPU (thread) ids -> Slurm abstract core ids (xcpuinfo_mac_to_abs):
    a core is in when any of its threads is. Without a CPU layout, one
    thread per core is assumed."""
    if cpu is None:
        return tuple(sorted(set(cpus)))
    core_of = cpu.core_of_cpu()
    return tuple(sorted({core_of[c] for c in cpus if c in core_of}))


def slurm_links(hw: Hardware, index: int) -> List[int]:
    """The Links vector of GPU ``index`` as slurmd computes it."""
    n = hw.gpu_count
    out = [0] * n
    out[index] = -1
    gpu = hw.gpus[index]
    if gpu.nvlinks:
        by_pci = {g.pci_bus_id: g.index for g in hw.gpus if g.pci_bus_id}
        for port in gpu.nvlinks:
            k = by_pci.get(port.remote_pci_bus_id)
            if port.active and k is not None and k != index:
                out[k] += 1
    elif not hw.nvswitch:
        for k in range(n):
            if k != index:
                out[k] = parse_token(hw.links[index][k])[1]
    return out


def _type_of(gpu: Gpu, hw: Hardware, type_name: Optional[str]) -> Optional[str]:
    name = type_name or hw.gres_type
    if name:
        return name
    return slurm_type_name(gpu.model) if gpu.model and gpu.model != "unknown" else None


def _line(fields: Sequence[Tuple[str, Optional[str]]]) -> str:
    return " ".join(f"{k}={v}" for k, v in fields if v)


def _mig_lines(gpu: Gpu, gtype: Optional[str], cores: str, links: bool) -> List[str]:
    out = []
    for j, mig in enumerate(gpu.mig):
        if mig.gi_cap_minor is None or mig.ci_cap_minor is None:
            continue  # slurmd skips a MIG whose cap minors it cannot find
        files = (f"{gpu.device_file},/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor},"
                 f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}")
        vector = ",".join("-1" if k == j else "0" for k in range(len(gpu.mig)))
        out.append(_line([("Name", "gpu"),
                          ("Type", mig_type_name(gtype, mig.profile) if gtype else mig.profile),
                          ("MultipleFiles", files), ("Cores", cores),
                          ("Links", vector if links else None)]))
    return out


def mig_unique_id(gpu: Gpu, mig: MigDevice) -> str:
    """The MIG UUID (drivers >= 470.42.01 give ``MIG-<uuid>``); before,
    slurmd built ``MIG-<GPU-UUID>/<GI>/<CI>``."""
    if mig.uuid and mig.uuid.startswith("MIG-"):
        return mig.uuid
    return f"MIG-{gpu.uuid}/{mig.gi_id}/{mig.ci_id}"


def gres_lines(node: Node, type_name: Optional[str] = None, lost: Sequence[int] = (),
               slurm_version: SlurmVersion = None,
               cpu: Optional[CpuTopology] = None) -> List[str]:
    """gres.conf lines of ``node``, one GPU (or MIG instance) a line.

    Only ``Key=value`` configuration lines, no comments (callers may prefix
    ``NodeName=...``). ``type_name`` overrides the Type (as
    does the hardware's ``gres_type``). GPUs in ``lost`` (NVML could not
    use them) are left out, as slurmd drops a GPU it cannot get a handle
    for; the Links vectors keep their place. ``slurm_version`` picks the
    format of that release (None: current). ``cpu`` is the CPU layout to
    number cores by when the hardware records none (the node's layout in
    slurm.conf). See :func:`gres_notes` for the comments worth putting
    above the lines.
    """
    hw = node.hardware
    layout = hw.cpu or cpu
    out: List[str] = []
    for gpu in hw.gpus:
        if gpu.index in lost:
            continue
        gtype = _type_of(gpu, hw, type_name)
        cores = format_cpulist(abstract_cores(gpu.cpus, layout))
        if gpu.mig_mode and gpu.mig:
            out.extend(_mig_lines(gpu, gtype, cores, mig_has_links(slurm_version)))
            continue
        out.append(_line([("Name", "gpu"), ("Type", gtype), ("File", gpu.device_file),
                          ("Cores", cores),
                          ("Links", ",".join(str(x) for x in slurm_links(hw, gpu.index)))]))
    return out


def gres_notes(node: Node, report: Optional[Dict[str, object]] = None) -> List[str]:
    """Comment lines (``# ...``) explaining where these lines differ from
    what Slurm can know, or what was assumed."""
    hw = node.hardware
    notes = [f"# {node.name}: {hw.gpu_count} GPU(s)"
             + (f", from {report.get('source')}" if report and report.get("source") else ""),
             "# Cores= are Slurm abstract core ids (what slurmd -G prints, e.g. Cores=0-51),"
             " not CPU ids"]
    if hw.nvswitch and hw.gpu_count > 1:
        lanes = {parse_token(t)[1] for a, row in enumerate(hw.links) for b, t in enumerate(row)
                 if a != b}
        nv = "/".join(f"NV{x}" for x in sorted(lanes) if x) or "NVLink"
        notes.append(f"# NVSwitch: every GPU pair is connected through NVSwitch ({nv}). Slurm's"
                     " Links only count direct GPU-GPU NVLink ports, so Links shows 0 here,"
                     " exactly as slurmd -G does; topology-aware placement cannot come from"
                     " Links on this node.")
    for g in hw.gpus:
        for j, m in enumerate(g.mig):
            notes.append(f"# GPU {g.index} MIG {j} (GI {m.gi_id}, CI {m.ci_id}, {m.profile}):"
                         f" UniqueId={mig_unique_id(g, m)}")
    if any(g.mig_mode and not g.mig for g in hw.gpus):
        notes.append("# MIG mode is on without MIG instances on some GPU: slurmd with"
                     " AutoDetect=nvml refuses to start until instances exist")
    if any(m.gi_cap_minor is None or m.ci_cap_minor is None for g in hw.gpus for m in g.mig):
        notes.append("# some MIG instances are left out: their /dev/nvidia-caps minors are"
                     " unknown (as slurmd would leave them out)")
    if hw.cpu is None and any(g.cpus for g in hw.gpus):
        notes.append("# CPU layout unknown: Cores= assume one thread per core")
    if any(_type_of(g, hw, None) is None for g in hw.gpus):
        notes.append("# GPU model unknown: no Type= (give --type or --model)")
    if report and report.get("lost_gpus"):
        notes.append("# left out, NVML cannot use them (lost): GPU "
                     + ", ".join(str(i) for i in report["lost_gpus"]))
    if report and report.get("job_capture"):
        notes.append("# no Cores=: the source was captured inside a cgroup-restricted job, its"
                     " CPU lists are the job's, not the GPUs'")
    if report and report.get("source") == "nvidia-smi topo -m":
        notes.append("# from nvidia-smi topo -m: File=/dev/nvidiaN assumes minor = index;"
                     " Cores= assume the CPU layout inferred from the affinity lists")
        notes += [f"# {p}" for p in report.get("problems") or () if str(p).startswith("guess:")]
    return notes


def gres_text(node: Node, report: Optional[Dict[str, object]] = None,
              type_name: Optional[str] = None, slurm_version: SlurmVersion = None) -> str:
    """The node's gres.conf section: notes, then the lines."""
    lost = tuple((report or {}).get("lost_gpus") or ())
    return "\n".join(gres_notes(node, report)
                     + gres_lines(node, type_name, lost, slurm_version)) + "\n"
