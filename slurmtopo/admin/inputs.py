"""The admin use cases' inputs, as an admin writes them, read into one-line
errors.

``slurmtopo topology``, ``gres`` and ``collect`` take hostlists
(``gpu[001-128]``), rail and HCA selections, block sizes and names as text,
and the files they work from (node reports, slurm.conf, a fabric
description) as paths; so do the use cases behind them
(:func:`slurmtopo.api.generate_topology` and its siblings), which a site's
own tooling calls with the same values. Each reader here turns bad input
into a :class:`~slurmtopo.errors.SlurmtopoError` naming the option or the
``file:line``, and ``None`` (not given) into ``None``.
"""
from __future__ import annotations

import os
from typing import List, Optional, Set

from slurmtopo.admin.block_domains import BlockNaming
from slurmtopo.errors import InventoryError, SlurmtopoError
from slurmtopo.files.yamlio import load_document
from slurmtopo.inventory.hostlist import expand_hostlist, expand_indices
from slurmtopo.inventory.model import Fabric, Inventory
from slurmtopo.inventory.schema import load_inventory, parse_inventory
from slurmtopo.slurmfmt.checks import valid_block_sizes
from slurmtopo.slurmfmt.slurm_conf import SlurmConf, read_slurm_conf
from slurmtopo.slurmfmt.topology_files import read_topology_conf


def parse_nodes(text: Optional[str]) -> Optional[List[str]]:
    """``--nodes``: the hosts of a hostlist, in its order (one at least)."""
    if text is None:
        return None
    try:
        names = expand_hostlist(text, "--nodes hostlist")
    except ValueError as exc:
        raise SlurmtopoError(str(exc)) from None
    if not names:
        raise SlurmtopoError(f"--nodes {text!r} names no host")
    return names


def parse_rangeset(text: Optional[str], what: str) -> Optional[Set[int]]:
    """``--rails 0-7``: a set of numbers."""
    if text is None:
        return None
    try:
        return expand_indices(text, what)
    except ValueError as exc:
        raise SlurmtopoError(str(exc)) from None


def parse_nameset(text: Optional[str], what: str) -> Optional[Set[str]]:
    """``--hca 'mlx5_[0-7]'``: a set of names, written as a hostlist."""
    if text is None:
        return None
    try:
        return set(expand_hostlist(text, what))
    except ValueError as exc:
        raise SlurmtopoError(str(exc)) from None


def parse_sizes(text: Optional[str]) -> Optional[List[int]]:
    """``--block-sizes 18,36``: BlockSizes Slurm accepts."""
    if text is None:
        return None
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SlurmtopoError(f"--block-sizes must be numbers, e.g. 18,36, got {text!r}") from None
    why = valid_block_sizes(sizes)
    if why:
        raise SlurmtopoError(f"--block-sizes: {why}")
    return sizes


def block_naming(value: Optional[str]) -> Optional[BlockNaming]:
    """``--block-name REGEXP=FORMAT`` (split at the last '=': a format has none)."""
    if value is None:
        return None
    regexp, eq, fmt = value.rpartition("=")
    if not eq or not regexp or not fmt:
        raise SlurmtopoError(f"--block-name wants REGEXP=FORMAT, got {value!r}")
    naming = BlockNaming(regexp, fmt)
    naming.compiled()
    return naming


def load_reports(path: Optional[str]) -> Optional[Inventory]:
    """Node reports: a directory of agent reports, or an inventory file."""
    if path is None:
        return None
    return load_inventory(path)


def load_slurm_conf(path: Optional[str]) -> Optional[SlurmConf]:
    if path is None:
        return None
    return read_slurm_conf(path)


def load_fabric(path: Optional[str]) -> Optional[Fabric]:
    """A fabric description: a slurmtopo fabric/inventory document, or a
    Slurm topology.conf/topology.yaml (to convert or re-check it)."""
    if path is None:
        return None
    if path.endswith(".conf"):
        return read_topology_conf(path)
    data = load_document(path)
    if isinstance(data, list):  # a Slurm topology.yaml is a list of topologies
        return read_topology_conf(path)
    if not isinstance(data, dict) or "slurmtopo" not in data:
        raise InventoryError("not a slurmtopo fabric document (no 'slurmtopo: fabric' key) "
                             "nor a Slurm topology.yaml", path)
    return parse_inventory(data, path).fabric


def yaml_beside(slurm: Optional[SlurmConf]) -> bool:
    """Is there a topology.yaml next to slurm.conf (where Slurm 25.05+ reads
    it, ignoring TopologyPlugin and topology.conf)?"""
    if slurm is None or not slurm.path:
        return False
    return os.path.exists(os.path.join(os.path.dirname(os.path.abspath(slurm.path)),
                                       "topology.yaml"))
