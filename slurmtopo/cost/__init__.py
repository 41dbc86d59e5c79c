"""A cost model of a placement's collectives: alpha-beta, refined with
NCCL's protocol and algorithm choice and calibrated against published
measurements (docs/cost-model.md; bench/calibration.py).

Per group kind the model prices one collective of a stated size
(:data:`DEFAULT_MESSAGE_BYTES`, overridable per request and in the
inventory) on every group of that kind and reports the slowest group.
:func:`collective_time` holds the formulas (``n`` ranks, ``M`` bytes): the
launch plus the option NCCL runs, each ``latency + bytes / bandwidth``,
NCCL's choice made as its tuner makes it from its own published tables
(:mod:`slurmtopo.cost.tuner`, per release, and AWS's plugin on EFA):

* a **ring** with the LL, LL128 or Simple protocol: ``2(n-1)`` steps for
  an all-reduce (``n-1`` for an all-gather) at the protocol's share of the
  class's per-step latency (``alpha``), each rank sending ``2(n-1)/n M``
  at the protocol's share of the ring's bandwidth; across hosts the ring
  runs through all ranks and its bandwidth is the smaller of the ring
  inside a host and the bottleneck host's NIC shares (the host's NIC
  aggregate, not one GPU's);
* a **tree** for an all-reduce across hosts (half a ring's network bytes
  on two hosts);
* **NVLS** (NVLink SHARP) for an all-reduce inside one NVSwitch fabric of
  Hopper or Blackwell GPUs, from 5 ranks: ``M`` per GPU each way;
  **NVLSTree**, **CollNet** (SHARP switches) and **PAT** across hosts;
* all-to-all and p2p with the Simple protocol; on a rail-optimised
  fabric a group whose hosts use different rails crosses them.

Link parameters (:class:`CostParams`): NVLink bandwidth is lanes x lane
bandwidth by GPU generation (an NVSwitch node reports ``NV18`` for every
pair, so an H100 gets 18 x 25 = 450 GB/s); PCIe classes are a fraction of
the GPU's PCIe bandwidth; the network is the GPU's share of its closest
NICs' rate, divided by an oversubscription factor per switch level; a
ring reaches ``efficiency`` of each. All are overridable in the
inventory's ``cost:`` block and ``Hardware`` fields.

Per kind the time is that of its slowest group. The *step* is
:func:`slurmtopo.cost.step.price_step`: every collective of one training
step per the job's framework and data-parallel style (its
:class:`~slurmtopo.job.workload.Workload`; DDP on the 70b shape when it names
none), each on its kind's slowest group times its count; its ``time_s``
is the number every decision and report uses (``CostReport.step_time_s``).
Combined kinds (``tp-pp``, ``tp-dp-cp``, ``expert-tp-ep``...) are priced
for the preview with a small latency-bound message and are not in the step.
"""
from __future__ import annotations

from slurmtopo.cost.bound import lower_bound
from slurmtopo.cost.collectives import COLLECTIVES, collective_time
from slurmtopo.cost.defaults import (ALGORITHMS, COST_KEYS, DEFAULT_ALPHA_US, DEFAULT_EFFICIENCY,
                                     DEFAULT_INTER_SOCKET_GBPS, DEFAULT_MESSAGE_BYTES,
                                     DEFAULT_NVLINK_LANE_GBPS, DEFAULT_PCIE_FACTOR,
                                     DEFAULT_PCIE_GBPS, DEFAULT_PROTOCOLS, NETWORK_CLASSES, GiB,
                                     KiB, MiB, Protocol)
from slurmtopo.cost.hardware import HardwareFigures
from slurmtopo.cost.params import CostParams, cost_params, parse_bytes
from slurmtopo.cost.pricing import evaluate
from slurmtopo.cost.report import CostReport, GroupCost

__all__ = ["ALGORITHMS", "COLLECTIVES", "COST_KEYS", "DEFAULT_ALPHA_US", "DEFAULT_EFFICIENCY",
           "DEFAULT_INTER_SOCKET_GBPS", "DEFAULT_MESSAGE_BYTES", "DEFAULT_NVLINK_LANE_GBPS",
           "DEFAULT_PCIE_FACTOR", "DEFAULT_PCIE_GBPS", "DEFAULT_PROTOCOLS", "NETWORK_CLASSES",
           "CostParams", "CostReport", "GiB", "GroupCost", "HardwareFigures", "KiB", "MiB",
           "Protocol", "cost_params",
           "collective_time", "evaluate", "lower_bound", "parse_bytes"]
