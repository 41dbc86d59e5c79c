"""Split blocks on nodes that hold pieces of several blocks
(bench scenario ``h100nvl-tp4:16:85:51002``, where a random placement
modelled 1.26x faster than slurmtopo).

H100 NVL nodes: NVLink pairs (0-1, 2-3, ...), a ring over four GPUs is PCIe
(NODE on one socket, SYS across). TP 4 x DP 4 on one idle node and three
nodes with 4, 2 and 2 free GPUs (the GPUs of their second socket): the 16
free GPUs are 8 NVLink pairs, four on the idle node, so every TP group can
be two pairs on two hosts, each pair with its own NIC. The planner put one
TP group on four GPUs of the idle node (its ring across the sockets, 4x
slower than two pairs over the network) and paired the other pieces around
it: the packing that denies the idle node whole blocks counted its room
as one block (4 of its 8 GPUs) and gave every piece the least room that
suffices, so the idle node, the partner every other pair needs, was
used last, when its partners were gone.
"""
from __future__ import annotations

from collections import Counter

import pytest

from slurmtopo.inventory.links import LinkClass
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.plan.choice import plan
from tests.placement.test_exact_optimum import cluster

FREE = {"a": list(range(8)), "b": [4, 5, 6, 7], "c": [6, 7], "d": [6, 7]}
#: the scenario's three nodes with one free GPU besides
SINGLES = {"e": [6], "f": [6], "g": [7]}


def instance(free=FREE):
    inv, state = cluster("pcie-h100-nvl-8", free, [list(free)])
    return inv, state, JobRequest(Layout(tp=4, dp=4))


@pytest.mark.parametrize("safety_net", [False, True])
@pytest.mark.parametrize("singles", [False, True])
def test_every_tp_group_is_two_nvlink_pairs(safety_net, singles):
    inv, state, req = instance({**FREE, **SINGLES} if singles else FREE)
    pl = plan(inv, state, req, safety_net=safety_net)
    hw = inv.nodes["a"].hardware
    for g in pl.groups["tp"]:
        on = Counter(pl.slots[r].host for r in g)
        assert sorted(on.values()) == [2, 2], f"TP group {g} on {dict(on)}"
        for host in on:
            a, b = sorted(pl.slots[r].gpu for r in g if pl.slots[r].host == host)
            assert hw.link(a, b) is LinkClass.NVLINK, f"TP group {g}: {host} GPUs {a},{b}"
