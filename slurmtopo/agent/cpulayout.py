"""The CPU layout of a node from its GPUs' affinity lists alone.

``nvidia-smi topo -m`` gives, per GPU, the CPUs near it and its NUMA node,
and nothing else about the processor. Slurm's ``Cores=`` are *abstract core*
ids (cores numbered socket by socket), so the thread -> core mapping must be
guessed from those lists when sysfs is not at hand. What the lists can
tell, and what they cannot:

* **SMT, Linux x86 numbering**: the siblings of core *c* are CPUs *c*,
  *c + cores*, ...; a list made of the same CPUs in the lower and in the
  upper half of all CPUs (``0-51,104-155``) is two threads per core. This
  is inferred; when every GPU lists all CPUs (``0-47``) the test says
  nothing, and two threads per core is a flagged guess.
* **SMT, consecutive numbering** (IBM POWER, some ARM): the threads of core
  *c* are CPUs *c·t* .. *c·t + t - 1*. The lists are contiguous blocks
  (``0-63`` and ``64-127``), exactly as on a machine without SMT, so the
  width cannot be read from them. NUMA nodes 0 and 8 (the chip ids of a
  POWER9 AC922) are taken as that machine: SMT4, consecutive. Otherwise one
  thread per core is assumed and flagged; ``threads_per_core`` from the
  caller (``--threads-per-core``) says what the data cannot.
* **Sockets**: two NUMA nodes whose lists do not overlap are two sockets;
  one is one socket; more (AMD NPS2/NPS4, Intel SNC) cannot say how many
  sockets they are on, and the guess (two for an even count) is flagged.
  With one of the usual numberings the abstract core ids do not depend on
  the socket count.
* The CPU count: twice the thread offset of the x86 lists (GPUs near one
  socket of two show ``0-7,16-23``: 16 cores, CPUs 8-15 and 24-31 unseen,
  and said so), else the highest CPU listed plus one.

Pure: lists in, :class:`CpuTopology` and the guesses made out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from slurmtopo.inventory.model import MAX_CPUS, CpuTopology, format_cpulist

#: NUMA node ids of the two chips of an IBM POWER9 (AC922, IC922) node
POWER9_CHIP_NODES = frozenset({0, 8})


@dataclass
class CpuGuess:
    """The inferred layout and every assumption it rests on."""

    cpu: Optional[CpuTopology]
    guesses: List[str] = field(default_factory=list)
    #: how thread ids map to cores: "split" (Linux x86) or "consecutive"
    numbering: str = "split"


def _split_period(sets: Sequence[set]) -> Optional[int]:
    """The offset *p* between a core's two threads when every list is some
    CPUs below *p* plus the same CPUs shifted by *p* (``0-51,104-155``:
    104); None when no single offset fits every list. *p* is then the
    number of cores, even where the lists leave CPUs out (GPUs near one
    socket only)."""
    common: Optional[set] = None
    for s in sets:
        starts = {c - min(s) for c in s if c - 1 not in s and c > min(s)}
        fits = {p for p in starts
                if {c - p for c in s if c >= p} == {c for c in s if c < p} and max(s) < 2 * p}
        common = fits if common is None else common & fits
        if not common:
            return None
    return min(common) if common else None


def _contiguous(sets: Sequence[set]) -> bool:
    return all(max(s) - min(s) + 1 == len(s) for s in sets)


def _sockets(groups: List[set], cores: int, guesses: List[str]) -> int:
    """Socket count from the distinct CPU lists (one per NUMA node)."""
    disjoint = all(not (a & b) for i, a in enumerate(groups) for b in groups[i + 1:])
    if not disjoint or len(groups) <= 1:
        if len(groups) > 1:
            guesses.append("the GPUs' CPU lists overlap: one socket assumed")
        return 1
    if len(groups) == 2:
        return 2 if cores % 2 == 0 else 1
    sockets = 2 if len(groups) % 2 == 0 and cores % 2 == 0 else 1
    guesses.append(f"{len(groups)} NUMA nodes with GPUs (NPS/SNC mode?): {sockets} socket(s) "
                   "assumed; the socket count does not change the Cores= ids")
    return sockets


def infer_cpu_layout(affinities: Sequence[Tuple[int, ...]],
                     numa_nodes: Sequence[Optional[int]] = (),
                     threads_per_core: Optional[int] = None) -> CpuGuess:
    """The CPU layout behind the GPUs' affinity lists (see the module doc)."""
    sets = [set(a) for a in affinities if a]
    if not sets:
        return CpuGuess(None)
    guesses: List[str] = []
    if max(max(s) for s in sets) >= MAX_CPUS:
        return CpuGuess(None, [f"CPU ids of {MAX_CPUS} and above: no CPU layout inferred"])
    period = _split_period(sets)
    ncpu = max(max(max(s) for s in sets) + 1, 2 * period if period else 0)
    split = period is not None
    numas = {n for n in numa_nodes if n is not None}
    if threads_per_core is None:
        if split:
            tpc, numbering = 2, "split"
        elif ncpu % 2 == 0 and all(len(s) == ncpu for s in sets):
            tpc, numbering = 2, "split"
            guesses.append(f"every GPU lists all {ncpu} CPUs, which says nothing about SMT: "
                           "2 threads per core assumed (x86 with SMT on; "
                           "--threads-per-core 1 if it is off)")
        elif numas == POWER9_CHIP_NODES and ncpu % 4 == 0 and _contiguous(sets):
            tpc, numbering = 4, "consecutive"
            guesses.append("NUMA nodes 0 and 8 (IBM POWER9): 4 threads per core, numbered "
                           "consecutively, assumed (--threads-per-core to override)")
        else:
            tpc, numbering = 1, "split"
            guesses.append("threads per core unknown from the affinity lists: 1 assumed "
                           "(--threads-per-core N if the node has SMT)")
    else:
        tpc = threads_per_core
        numbering = "split" if split or tpc == 1 or not _contiguous(sets) else "consecutive"
    if ncpu % tpc:
        guesses.append(f"{ncpu} CPUs do not split into {tpc} threads per core: 1 assumed")
        tpc, numbering = 1, "split"
    cores = ncpu // tpc
    groups = []
    for s in sets:
        if s not in groups:
            groups.append(s)
    sockets = _sockets(groups, cores, guesses)
    if cores % sockets:
        sockets = 1
    covered = set().union(*sets)
    if len(covered) < ncpu and tpc > 1 and numbering == "split":
        guesses.append(f"CPUs {format_cpulist(sorted(set(range(ncpu)) - covered))} are near no "
                       "GPU: the CPU count is taken from the thread pairs of the lists")
    core_cpus = None
    if numbering == "consecutive":
        core_cpus = tuple(tuple(range(c * tpc, c * tpc + tpc)) for c in range(cores))
    return CpuGuess(CpuTopology(sockets=sockets, cores_per_socket=cores // sockets,
                                threads_per_core=tpc, core_cpus=core_cpus),
                    guesses, numbering)
