"""Which IMEX channel (so which job segment) each host landed in, at start.

A job that asks ``--network=unique-channel-per-segment`` (the plan asks it
when its segments are several, on switch/nvidia_imex: placement/segments.py)
gets one IMEX channel per segment, and hosts on different channels cannot
map each other's memory. NCCL does not know that: it uses multi-node NVLink
between every two ranks of one (cluster UUID, clique id), so where Slurm put
hosts of one NVLink clique in two segments, each segment's hosts need a
clique id of their own (``NCCL_MNNVL_CLIQUE_ID``,
:func:`slurmtopo.plan.rankmap.mnnvl_clique_ids`). Which hosts share a segment is
known only once the job runs: Slurm places the segments then. This module
reads it from Slurm, at start, from the real allocation:

* the job asked for per-segment channels: ``SLURM_NETWORK`` (slurmctld
  puts the job's ``--network`` in the batch environment);
* the channel of every node: ``scontrol show resources <job>`` (25.11+,
  ``Node=... Channel=N``; src/scontrol/info_job.c).

When Slurm cannot say (no answer, a node without ``Channel=``), each host
is taken as its own part: multi-node NVLink is then off between the hosts
of a clique, which is slower than it need be but never asks NVLink to map
memory across two channels.
"""
from __future__ import annotations

import re
from typing import Dict, List, Mapping, Optional, Sequence

from slurmtopo.errors import SlurmError
from slurmtopo.plan.rankmap import mnnvl_clique_ids

#: the --network value that gives each segment its own IMEX channel
UNIQUE_CHANNELS = "unique-channel-per-segment"

_NODE = re.compile(r"(?:^|\s)Node=(\S+)")
_CHANNEL = re.compile(r"(?:^|\s)Channel=(\d+)(?:\s|$)")


def wants_channels(env: Mapping[str, str]) -> bool:
    """The job runs with one IMEX channel per segment (``SLURM_NETWORK``
    names ``unique-channel-per-segment`` among its comma-separated values)."""
    return UNIQUE_CHANNELS in [v.strip() for v in env.get("SLURM_NETWORK", "").split(",")]


def parse_channels(text: str) -> Dict[str, int]:
    """host -> IMEX channel from ``scontrol show resources`` (nodes
    without ``Channel=`` are left out)."""
    out: Dict[str, int] = {}
    for line in text.splitlines():
        node, channel = _NODE.search(line), _CHANNEL.search(line)
        if node and channel:
            out[node.group(1)] = int(channel.group(1))
    return out


def segment_parts(env: Mapping[str, str], slurm, job_id: str, hosts: Sequence[str],
                  log: List[str]) -> Optional[List[List[str]]]:
    """The job's hosts in parts that share an IMEX channel (in host order),
    or None when the job has one channel for all (nothing to split)."""
    if not wants_channels(env):
        return None
    channels: Dict[str, int] = {}
    if job_id.isdigit():
        try:
            channels = parse_channels(slurm.job_resources(int(job_id)))
        except SlurmError:
            channels = {}
    missing = [h for h in hosts if h not in channels]
    if missing:
        log.append(f"IMEX channel per segment: scontrol show resources names no channel for "
                   f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}; each host "
                   "taken as its own segment (no multi-node NVLink between hosts of a clique)")
        return [[h] for h in hosts]
    parts: Dict[int, List[str]] = {}
    for h in hosts:
        parts.setdefault(channels[h], []).append(h)
    log.append("IMEX channel per segment (scontrol show resources): "
               + "; ".join(f"channel {c}: {len(hs)} host(s) from {hs[0]}"
                           for c, hs in parts.items()))
    return list(parts.values())


def host_nccl_env(env: Mapping[str, str], slurm, job_id: str, inv, placement,
                  log: List[str]) -> Dict[str, Dict[str, str]]:
    """host -> the NCCL variables that differ by host: ``NCCL_MNNVL_CLIQUE_ID``
    where a clique lies in several segments (none when the job has one
    channel, or the user exported the variable: theirs is kept)."""
    parts = segment_parts(env, slurm, job_id, list(placement.by_host()), log)
    if parts is None:
        return {}
    ids = mnnvl_clique_ids(inv, placement, parts)
    if not ids:
        log.append("NCCL_MNNVL_CLIQUE_ID not set: no NVLink clique lies in two segments")
        return {}
    if "NCCL_MNNVL_CLIQUE_ID" in env:
        log.append(f"keeping NCCL_MNNVL_CLIQUE_ID={env['NCCL_MNNVL_CLIQUE_ID']} from the "
                   f"environment (slurmtopo would set it on {len(ids)} host(s))")
        return {}
    by_id: Dict[str, List[str]] = {}
    for h, v in ids.items():
        by_id.setdefault(v, []).append(h)
    log.append("NCCL_MNNVL_CLIQUE_ID per segment (an NVLink clique split over IMEX channels): "
               + "; ".join(f"{v} on {len(hs)} host(s) from {hs[0]}" for v, hs in by_id.items()))
    return {h: {"NCCL_MNNVL_CLIQUE_ID": v} for h, v in ids.items()}
