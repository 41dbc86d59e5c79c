"""Where a node's report comes from: the one choice between the agent's
sources, for ``agent discover`` and ``agent gres`` alike.

NVML on this node (:mod:`~slurmtopo.agent.nvml_discovery`), the saved text
of ``nvidia-smi topo -m`` (:mod:`~slurmtopo.agent.smi`; several hosts when
it is pdsh output), or a topology file (NCCL's XML, hwloc's XML) merged
with what NVML sees here when it can (:mod:`~slurmtopo.agent.overlay`).
The command line only parses the options and prints.
"""
from __future__ import annotations

from typing import List, Optional

from slurmtopo.agent.hwloc_xml import read_hwloc_xml
from slurmtopo.agent.nccl_xml import read_nccl_xml
from slurmtopo.agent.nvml_discovery import NvmlMissing, discover
from slurmtopo.agent.overlay import overlay_tree
from slurmtopo.agent.report import short_hostname
from slurmtopo.agent.smi import smi_discovery
from slurmtopo.errors import SlurmtopoError
from slurmtopo.files.fileio import read_text


def discoveries(from_smi: Optional[str] = None, node_name: Optional[str] = None,
                sysfs_root: str = "/", model: Optional[str] = None,
                threads_per_core: Optional[int] = None, from_nccl_xml: Optional[str] = None,
                from_hwloc: Optional[str] = None, nvml: str = "auto") -> List:
    """Discovery objects for this node (NVML) or for the hosts of a file."""
    given = [o for o, v in (("--from-smi", from_smi), ("--from-nccl-xml", from_nccl_xml),
                            ("--from-hwloc", from_hwloc)) if v]
    if len(given) > 1:
        raise SlurmtopoError(f"give one of {', '.join(given)}, not several")
    if from_nccl_xml or from_hwloc:
        return [tree_discovery(from_nccl_xml, from_hwloc, node_name, sysfs_root, model,
                               threads_per_core, nvml)]
    if from_smi:
        text = read_text(from_smi, errors="replace")
        return smi_discovery(text, from_smi, node_name=node_name, model=model,
                             threads_per_core=threads_per_core)
    host = short_hostname()
    return [discover(sysfs_root=sysfs_root, node_name=node_name or host, hostname=host)]


def tree_discovery(from_nccl_xml, from_hwloc, node_name, sysfs_root, model,
                   threads_per_core, nvml):
    """A topology file, merged with NVML on this node when it can be read
    (``nvml``: auto, yes or no)."""
    if from_nccl_xml:
        reader, path, source = read_nccl_xml, from_nccl_xml, "nccl-topology-xml"
    else:
        reader, path, source = read_hwloc_xml, from_hwloc, "hwloc-xml"
    host = short_hostname()
    tree = reader(path, node_name=node_name or host, model=model,
                  threads_per_core=threads_per_core)
    if nvml == "no":
        return tree
    why = None
    try:
        seen = discover(sysfs_root=sysfs_root, node_name=node_name or host, hostname=host)
    except NvmlMissing:  # --nvml auto: "when NVML is there"; it is not
        seen, why = None, "nvidia-ml-py is not installed"
    if seen is None or not seen.node.gpus:
        why = why or (seen.problems[0] if seen is not None and seen.problems else None)
        if nvml == "yes":
            raise SlurmtopoError("--nvml yes: NVML cannot read this node's GPUs"
                                 + (f" ({why})" if why else ""))
        tree.report["problems"].append("NVML not usable here" + (f" ({why})" if why else "")
                                       + ": the report is the file alone")
        return tree
    return overlay_tree(seen, tree, source)
