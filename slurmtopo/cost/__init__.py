"""An alpha-beta cost model of a placement's collectives.

Every transfer step costs ``alpha + bytes / bandwidth`` on the link it
crosses. Per group kind the model prices one collective of a stated size
(:data:`DEFAULT_MESSAGE_BYTES`, overridable per request and in the
inventory) on every group of that kind and reports the slowest group.
The formulas (``n`` ranks, ``M`` bytes, ``a``/``B`` alpha and bandwidth of
the link class):

* **all-reduce** inside one node or one NVLink domain: a ring,
  ``2(n-1) * (a + M/(n B))``. Across ``h`` hosts with ``l`` ranks each:
  hierarchical (intra-node reduce-scatter, inter-node ring all-reduce of
  each rank's ``M/l`` slice over its own NIC, intra-node all-gather)::

      2(l-1) * (a_in + M/(l B_in)) + 2(h-1) * (a_net + M/(l h B_net))

  With ``l = 1`` this is the flat ring over the network. Hosts with uneven
  rank counts use the largest ``l`` for the intra-node part and the smallest
  for the slice size (the bottleneck host).
* **all-gather** (``M`` = the gathered size): ``(n-1) * (a + M/(n B))``;
  across hosts ``(h-1) * (a_net + M/(n B_net)) + (l-1) * (a_in + M/(l B_in))``.
* **all-to-all** (``M`` = what one rank sends in total, ``M/n`` to each
  peer): ``(l-1) * (a_in + M/(n B_in)) + (n-l) * (a_net + M/(n B_net))``
  (pairwise exchange, one peer per step).
* **p2p** (pipeline): ``a + M/B`` over the slowest hop between consecutive
  stages of the group.

Link parameters (:class:`CostParams`, defaults in docs/cost-model.md):
NVLink bandwidth is lanes x lane bandwidth by GPU generation (an NVSwitch
node reports ``NV18`` for every pair, so an H100 gets 18 x 25 = 450 GB/s);
PCIe classes are a fraction of the GPU's PCIe bandwidth; the network is the
GPU's share of its closest NICs' rate (a NIC shared by 4 GPUs gives each a
quarter), divided by an oversubscription factor per switch level. All are
overridable in the inventory's ``cost:`` block and ``Hardware`` fields.

Per kind the time is that of its slowest group; the *step time* sums the
kinds that carry distinct traffic (:func:`counted_kinds`): ``tp``, ``cp``,
``pp``, ``dp-cp`` when ``cp > 1`` else ``dp`` (gradients are reduced over
data x context parallel, the plain ``dp`` groups are a subset of it), and
with experts ``ep``, ``expert-tp``, ``expert-dp``. Combined kinds
(``tp-pp``, ``tp-dp-cp``, ``expert-tp-ep``...) are priced for the preview
with a small latency-bound message and not counted, so no traffic is
counted twice.
"""
from __future__ import annotations

from slurmtopo.cost.bound import lower_bound
from slurmtopo.cost.collectives import COLLECTIVES, collective_time, counted_kinds
from slurmtopo.cost.defaults import (COST_KEYS, DEFAULT_ALPHA_US, DEFAULT_INTER_SOCKET_GBPS,
                                     DEFAULT_MESSAGE_BYTES, DEFAULT_NVLINK_LANE_GBPS,
                                     DEFAULT_PCIE_FACTOR, DEFAULT_PCIE_GBPS, NETWORK_CLASSES,
                                     GiB, KiB, MiB)
from slurmtopo.cost.hardware import HardwareFigures
from slurmtopo.cost.params import CostParams, cost_params, parse_bytes
from slurmtopo.cost.pricing import evaluate
from slurmtopo.cost.report import CostReport, GroupCost

__all__ = ["COLLECTIVES", "COST_KEYS", "DEFAULT_ALPHA_US", "DEFAULT_INTER_SOCKET_GBPS",
           "DEFAULT_MESSAGE_BYTES", "DEFAULT_NVLINK_LANE_GBPS", "DEFAULT_PCIE_FACTOR",
           "DEFAULT_PCIE_GBPS", "NETWORK_CLASSES", "CostParams", "CostReport", "GiB",
           "GroupCost", "HardwareFigures", "KiB", "MiB", "cost_params", "counted_kinds",
           "collective_time", "evaluate", "lower_bound", "parse_bytes"]
