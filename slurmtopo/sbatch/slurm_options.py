"""sbatch's command-line options as data, read from Slurm's own source.

sbatch reads ``#SBATCH`` lines with the same getopt_long table as its
command line, so an ``--sbatch`` extra is only understood the way sbatch
understands it when that table is known: the long names (any unique prefix
is accepted), whether each takes an argument, and the short letters. The
rows come from ``common_options[]`` in src/common/slurm_opt.c (entries with
a name and a ``set_func`` or ``set_func_sbatch``), written out by
``scripts/sbatch_option_table.py``; regenerate them for a new Slurm release
and review the diff. How a directive line becomes words (quotes, escapes,
``#`` comments) is :mod:`slurmtopo.sbatch.directives`.

Differences between the releases, kept as data below: 25.11 added
``--segment``, ``--tres-per-task``, ``--extra``, ``--container-id``,
``--resources`` and more, dropped ``--power``, and made ``--requeue`` take an
optional argument (``--get-user-env`` lost its); 26.05 added
``--container-type`` and ``--mem-update``. A SPANK plugin (pyxis's
``--container-image``) adds options a site configures, which no table
lists.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

#: the releases the table was read from (git tags of SchedMD/slurm)
SOURCE = ("Slurm 22.05.8 (slurm-22-05-8-1), 25.11.7 (slurm-25-11-7-1) and 26.05.3 "
          "(slurm-26-05-3-1): src/common/slurm_opt.c common_options[]; "
          "src/sbatch/opt.c get_argument() and _opt_batch_script()")
VERSIONS = ("22.05", "25.11", "26.05")

NO, REQUIRED, OPTIONAL = "no", "required", "optional"


@dataclass(frozen=True)
class Option:
    """One getopt_long entry: its long name, whether it takes an argument
    and its ``val`` (the short letter, or Slurm's ``LONG_OPT_*`` name for a
    long-only option). getopt_long treats two names with the same argument
    and val as one option (``--tasks-per-node`` is ``--ntasks-per-node``)."""

    name: str
    argument: str
    val: str

    @property
    def short(self) -> str:
        """The short letter, or "" for a long-only option."""
        return self.val if len(self.val) == 1 else ""


#: (long name, argument, val, releases that have it); written by
#: scripts/sbatch_option_table.py
OPTIONS = (
    ("account", REQUIRED, "A", ("22.05", "25.11", "26.05")),
    ("acctg-freq", REQUIRED, "LONG_OPT_ACCTG_FREQ", ("22.05", "25.11", "26.05")),
    ("array", REQUIRED, "a", ("22.05", "25.11", "26.05")),
    ("autocomplete", REQUIRED, "LONG_OPT_COMPLETE_FLAG", ("25.11", "26.05")),
    ("batch", REQUIRED, "LONG_OPT_BATCH", ("22.05", "25.11", "26.05")),
    ("bb", REQUIRED, "LONG_OPT_BURST_BUFFER_SPEC", ("22.05", "25.11", "26.05")),
    ("bbf", REQUIRED, "LONG_OPT_BURST_BUFFER_FILE", ("22.05", "25.11", "26.05")),
    ("begin", REQUIRED, "b", ("22.05", "25.11", "26.05")),
    ("chdir", REQUIRED, "D", ("22.05", "25.11", "26.05")),
    ("cluster", REQUIRED, "LONG_OPT_CLUSTER", ("22.05", "25.11", "26.05")),
    ("cluster-constraint", REQUIRED, "LONG_OPT_CLUSTER_CONSTRAINT", ("22.05", "25.11", "26.05")),
    ("clusters", REQUIRED, "M", ("22.05", "25.11", "26.05")),
    ("comment", REQUIRED, "LONG_OPT_COMMENT", ("22.05", "25.11", "26.05")),
    ("consolidate-segments", NO, "LONG_OPT_CONSOLIDATE_SEGMENTS", ("25.11", "26.05")),
    ("constraint", REQUIRED, "C", ("22.05", "25.11", "26.05")),
    ("container", REQUIRED, "LONG_OPT_CONTAINER", ("22.05", "25.11", "26.05")),
    ("container-id", REQUIRED, "LONG_OPT_CONTAINER_ID", ("25.11", "26.05")),
    ("container-type", REQUIRED, "LONG_OPT_CONTAINER_TYPE", ("26.05",)),
    ("context", REQUIRED, "LONG_OPT_CONTEXT", ("22.05", "25.11", "26.05")),
    ("contiguous", NO, "LONG_OPT_CONTIGUOUS", ("22.05", "25.11", "26.05")),
    ("core-spec", REQUIRED, "S", ("22.05", "25.11", "26.05")),
    ("cores-per-socket", REQUIRED, "LONG_OPT_CORESPERSOCKET", ("22.05", "25.11", "26.05")),
    ("cpu-freq", REQUIRED, "LONG_OPT_CPU_FREQ", ("22.05", "25.11", "26.05")),
    ("cpus-per-gpu", REQUIRED, "LONG_OPT_CPUS_PER_GPU", ("22.05", "25.11", "26.05")),
    ("cpus-per-task", REQUIRED, "c", ("22.05", "25.11", "26.05")),
    ("deadline", REQUIRED, "LONG_OPT_DEADLINE", ("22.05", "25.11", "26.05")),
    ("delay-boot", REQUIRED, "LONG_OPT_DELAY_BOOT", ("22.05", "25.11", "26.05")),
    ("dependency", REQUIRED, "d", ("22.05", "25.11", "26.05")),
    ("distribution", REQUIRED, "m", ("22.05", "25.11", "26.05")),
    ("error", REQUIRED, "e", ("22.05", "25.11", "26.05")),
    ("exclude", REQUIRED, "x", ("22.05", "25.11", "26.05")),
    ("exclusive", OPTIONAL, "LONG_OPT_EXCLUSIVE", ("22.05", "25.11", "26.05")),
    ("export", REQUIRED, "LONG_OPT_EXPORT", ("22.05", "25.11", "26.05")),
    ("export-file", REQUIRED, "LONG_OPT_EXPORT_FILE", ("22.05", "25.11", "26.05")),
    ("external", NO, "LONG_OPT_EXTERNAL", ("25.11", "26.05")),
    ("extra", REQUIRED, "LONG_OPT_EXTRA", ("25.11", "26.05")),
    ("extra-node-info", REQUIRED, "B", ("22.05", "25.11", "26.05")),
    ("get-user-env", NO, "LONG_OPT_GET_USER_ENV", ("25.11", "26.05")),
    ("get-user-env", OPTIONAL, "LONG_OPT_GET_USER_ENV", ("22.05",)),
    ("gid", REQUIRED, "LONG_OPT_GID", ("22.05", "25.11", "26.05")),
    ("gpu-bind", REQUIRED, "LONG_OPT_GPU_BIND", ("22.05", "25.11", "26.05")),
    ("gpu-freq", REQUIRED, "LONG_OPT_GPU_FREQ", ("22.05", "25.11", "26.05")),
    ("gpus", REQUIRED, "G", ("22.05", "25.11", "26.05")),
    ("gpus-per-node", REQUIRED, "LONG_OPT_GPUS_PER_NODE", ("22.05", "25.11", "26.05")),
    ("gpus-per-socket", REQUIRED, "LONG_OPT_GPUS_PER_SOCKET", ("22.05", "25.11", "26.05")),
    ("gpus-per-task", REQUIRED, "LONG_OPT_GPUS_PER_TASK", ("22.05", "25.11", "26.05")),
    ("gres", REQUIRED, "LONG_OPT_GRES", ("22.05", "25.11", "26.05")),
    ("gres-flags", REQUIRED, "LONG_OPT_GRES_FLAGS", ("22.05", "25.11", "26.05")),
    ("help", NO, "h", ("22.05", "25.11", "26.05")),
    ("hint", REQUIRED, "LONG_OPT_HINT", ("22.05", "25.11", "26.05")),
    ("hold", NO, "H", ("22.05", "25.11", "26.05")),
    ("ignore-pbs", NO, "LONG_OPT_IGNORE_PBS", ("22.05", "25.11", "26.05")),
    ("input", REQUIRED, "i", ("22.05", "25.11", "26.05")),
    ("job-name", REQUIRED, "J", ("22.05", "25.11", "26.05")),
    ("kill-on-invalid-dep", REQUIRED, "LONG_OPT_KILL_INV_DEP", ("22.05", "25.11", "26.05")),
    ("licenses", REQUIRED, "L", ("22.05", "25.11", "26.05")),
    ("mail-type", REQUIRED, "LONG_OPT_MAIL_TYPE", ("22.05", "25.11", "26.05")),
    ("mail-user", REQUIRED, "LONG_OPT_MAIL_USER", ("22.05", "25.11", "26.05")),
    ("mcs-label", REQUIRED, "LONG_OPT_MCS_LABEL", ("22.05", "25.11", "26.05")),
    ("mem", REQUIRED, "LONG_OPT_MEM", ("22.05", "25.11", "26.05")),
    ("mem-bind", REQUIRED, "LONG_OPT_MEM_BIND", ("22.05", "25.11", "26.05")),
    ("mem-per-cpu", REQUIRED, "LONG_OPT_MEM_PER_CPU", ("22.05", "25.11", "26.05")),
    ("mem-per-gpu", REQUIRED, "LONG_OPT_MEM_PER_GPU", ("22.05", "25.11", "26.05")),
    ("mem-update", REQUIRED, "LONG_OPT_MEM_UPDATE", ("26.05",)),
    ("mincpus", REQUIRED, "LONG_OPT_MINCPUS", ("22.05", "25.11", "26.05")),
    ("network", REQUIRED, "LONG_OPT_NETWORK", ("22.05", "25.11", "26.05")),
    ("nice", OPTIONAL, "LONG_OPT_NICE", ("22.05", "25.11", "26.05")),
    ("no-kill", OPTIONAL, "k", ("22.05", "25.11", "26.05")),
    ("no-requeue", NO, "LONG_OPT_NO_REQUEUE", ("22.05", "25.11", "26.05")),
    ("nodefile", REQUIRED, "F", ("22.05", "25.11", "26.05")),
    ("nodelist", REQUIRED, "w", ("22.05", "25.11", "26.05")),
    ("nodes", REQUIRED, "N", ("22.05", "25.11", "26.05")),
    ("ntasks", REQUIRED, "n", ("22.05", "25.11", "26.05")),
    ("ntasks-per-core", REQUIRED, "LONG_OPT_NTASKSPERCORE", ("22.05", "25.11", "26.05")),
    ("ntasks-per-gpu", REQUIRED, "LONG_OPT_NTASKSPERGPU", ("22.05", "25.11", "26.05")),
    ("ntasks-per-node", REQUIRED, "LONG_OPT_NTASKSPERNODE", ("22.05", "25.11", "26.05")),
    ("ntasks-per-socket", REQUIRED, "LONG_OPT_NTASKSPERSOCKET", ("22.05", "25.11", "26.05")),
    ("ntasks-per-tres", REQUIRED, "LONG_OPT_NTASKSPERTRES", ("22.05", "25.11", "26.05")),
    ("oom-kill-step", OPTIONAL, "LONG_OPT_OOMKILLSTEP", ("25.11", "26.05")),
    ("open-mode", REQUIRED, "LONG_OPT_OPEN_MODE", ("22.05", "25.11", "26.05")),
    ("output", REQUIRED, "o", ("22.05", "25.11", "26.05")),
    ("overcommit", NO, "O", ("22.05", "25.11", "26.05")),
    ("oversubscribe", NO, "s", ("22.05", "25.11", "26.05")),
    ("parsable", NO, "LONG_OPT_PARSABLE", ("22.05", "25.11", "26.05")),
    ("partition", REQUIRED, "p", ("22.05", "25.11", "26.05")),
    ("power", REQUIRED, "LONG_OPT_POWER", ("22.05",)),
    ("prefer", REQUIRED, "LONG_OPT_PREFER", ("22.05", "25.11", "26.05")),
    ("priority", REQUIRED, "LONG_OPT_PRIORITY", ("22.05", "25.11", "26.05")),
    ("profile", REQUIRED, "LONG_OPT_PROFILE", ("22.05", "25.11", "26.05")),
    ("propagate", OPTIONAL, "LONG_OPT_PROPAGATE", ("22.05", "25.11", "26.05")),
    ("qos", REQUIRED, "q", ("22.05", "25.11", "26.05")),
    ("quiet", NO, "Q", ("22.05", "25.11", "26.05")),
    ("reboot", NO, "LONG_OPT_REBOOT", ("22.05", "25.11", "26.05")),
    ("requeue", NO, "LONG_OPT_REQUEUE", ("22.05",)),
    ("requeue", OPTIONAL, "LONG_OPT_REQUEUE", ("25.11", "26.05")),
    ("reservation", REQUIRED, "LONG_OPT_RESERVATION", ("22.05", "25.11", "26.05")),
    ("resources", REQUIRED, "LONG_OPT_RESOURCES", ("25.11", "26.05")),
    ("resv-ports", OPTIONAL, "LONG_OPT_RESV_PORTS", ("25.11", "26.05")),
    ("segment", REQUIRED, "LONG_OPT_SEGMENT_SIZE", ("25.11", "26.05")),
    ("signal", REQUIRED, "LONG_OPT_SIGNAL", ("22.05", "25.11", "26.05")),
    ("sockets-per-node", REQUIRED, "LONG_OPT_SOCKETSPERNODE", ("22.05", "25.11", "26.05")),
    ("spread-job", NO, "LONG_OPT_SPREAD_JOB", ("22.05", "25.11", "26.05")),
    ("spread-segments", NO, "LONG_OPT_SPREAD_SEGMENTS", ("25.11", "26.05")),
    ("stepmgr", NO, "LONG_OPT_STEPMGR", ("25.11", "26.05")),
    ("switches", REQUIRED, "LONG_OPT_SWITCHES", ("22.05", "25.11", "26.05")),
    ("tasks-per-node", REQUIRED, "LONG_OPT_NTASKSPERNODE", ("22.05", "25.11", "26.05")),
    ("test-only", NO, "LONG_OPT_TEST_ONLY", ("22.05", "25.11", "26.05")),
    ("thread-spec", REQUIRED, "LONG_OPT_THREAD_SPEC", ("22.05", "25.11", "26.05")),
    ("threads-per-core", REQUIRED, "LONG_OPT_THREADSPERCORE", ("22.05", "25.11", "26.05")),
    ("time", REQUIRED, "t", ("22.05", "25.11", "26.05")),
    ("time-min", REQUIRED, "LONG_OPT_TIME_MIN", ("22.05", "25.11", "26.05")),
    ("tmp", REQUIRED, "LONG_OPT_TMP", ("22.05", "25.11", "26.05")),
    ("tres-bind", REQUIRED, "LONG_OPT_TRES_BIND", ("25.11", "26.05")),
    ("tres-per-task", REQUIRED, "LONG_OPT_TRES_PER_TASK", ("25.11", "26.05")),
    ("uid", REQUIRED, "LONG_OPT_UID", ("22.05", "25.11", "26.05")),
    ("usage", NO, "LONG_OPT_USAGE", ("22.05", "25.11", "26.05")),
    ("use-min-nodes", NO, "LONG_OPT_USE_MIN_NODES", ("22.05", "25.11", "26.05")),
    ("verbose", NO, "v", ("22.05", "25.11", "26.05")),
    ("version", NO, "V", ("22.05", "25.11", "26.05")),
    ("wait", NO, "W", ("22.05", "25.11", "26.05")),
    ("wait-all-nodes", REQUIRED, "LONG_OPT_WAIT_ALL_NODES", ("22.05", "25.11", "26.05")),
    ("wckey", REQUIRED, "LONG_OPT_WCKEY", ("22.05", "25.11", "26.05")),
    ("wrap", REQUIRED, "LONG_OPT_WRAP", ("22.05", "25.11", "26.05")),
)


def table(version: str) -> Tuple[Option, ...]:
    """sbatch's options in one release, in name order."""
    if version not in VERSIONS:
        raise ValueError(f"no sbatch option table for Slurm {version}")
    return _TABLES[version]


def known_anywhere() -> Dict[str, Option]:
    """long name -> option, over every release (the newest row wins)."""
    return {o.name: o for v in VERSIONS for o in _TABLES[v]}


_TABLES: Dict[str, Tuple[Option, ...]] = {
    v: tuple(Option(name, arg, val) for name, arg, val, releases in OPTIONS if v in releases)
    for v in VERSIONS}
