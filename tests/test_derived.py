"""What slurmtopo derives from a loaded cluster lives with it, not in the
process: a daemon that reloads its inventory must drop the old node types'
tables (no process-wide cache keyed by hardware, no ``id()`` key that a
recycled address could match, nothing written into ``__dict__``)."""
from __future__ import annotations

import gc
import pickle
import weakref
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest
from slurmtopo import api
from slurmtopo.cost import lower_bound
from slurmtopo.inventory.model import Derived
from slurmtopo.inventory.topology import network_view, ring_class
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.placement.capacity import unit_sizes
from slurmtopo.placement.common import nic_choice
from slurmtopo.placement.fabric import fabric_tree
from slurmtopo.placement.intranode import hw_info

EXAMPLES = Path(__file__).resolve().parents[1] / "etc" / "examples"


def _plan_and_price(path: Path):
    inv = api.load_cluster(str(EXAMPLES / path))
    req = JobRequest(Layout(tp=4, dp=4).resolved())
    pl = api.plan_job(inv, None, req)
    api.price(inv, pl, req)
    lower_bound(inv, req)
    return inv


def test_a_dropped_inventory_takes_its_tables_with_it():
    # its nodes are of a built-in preset (hgx-h100-8): the preset's Hardware
    # is this load's own, not one kept for the whole process
    inv = _plan_and_price("h100-4node-2leaf.yaml")
    hardware = [weakref.ref(n.hardware) for n in inv]
    assert len({id(n.hardware) for n in inv}) == 1  # shared by the nodes of one load
    fabric = weakref.ref(inv.fabric)
    assert all(r() is not None for r in hardware)
    del inv
    gc.collect()
    # nothing in the process (a module cache, a functools cache) still holds them
    assert [r() for r in hardware] == [None] * len(hardware)
    assert fabric() is None


def test_tables_are_kept_with_the_object_they_come_from():
    inv = _plan_and_price("dgx1-v100-pair.yaml")
    hw = next(iter(inv)).hardware
    assert hw_info(hw) is hw_info(hw)
    assert nic_choice(hw) is nic_choice(hw)
    assert network_view(inv.fabric) is network_view(inv.fabric)
    assert fabric_tree(inv) is fabric_tree(inv)
    assert unit_sizes(inv, fabric_tree(inv)) is unit_sizes(inv, fabric_tree(inv))
    # a node type changed by a reload gets tables of its own, right ones
    other = replace(hw, links=tuple(tuple("X" if a == b else "SYS" for b in range(hw.gpu_count))
                                    for a in range(hw.gpu_count)))
    assert hw_info(other) is not hw_info(hw)
    assert ring_class(other, (0, 1)).name == "SYS"
    assert ring_class(hw, (0, 1)).name != "SYS"


def test_a_cluster_is_frozen_and_a_changed_one_has_tables_of_its_own():
    inv = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    before = fabric_tree(inv)
    assert unit_sizes(inv, before)("spine") == 32
    with pytest.raises(FrozenInstanceError):
        inv.nodes = {}
    inv = replace(inv, nodes={k: v for k, v in list(inv.nodes.items())[:2]})
    after = fabric_tree(inv)
    assert after is not before
    assert len(after.nodes) == 2 and len(before.nodes) == 4
    # the largest unit of each level follows the cluster it was built for
    assert unit_sizes(inv, after).tree is after
    assert unit_sizes(inv, after)("spine") == 16


def test_tables_take_no_part_in_equality_copies_or_pickles():
    inv = _plan_and_price("h100-4node-2leaf.yaml")
    hw = next(iter(inv)).hardware
    assert repr(hw.derived) != "Derived()"  # planning filled some
    fresh = replace(hw)
    assert repr(fresh.derived) == "Derived()"
    assert fresh == hw and hash(fresh) == hash(hw)
    back = pickle.loads(pickle.dumps(hw))
    assert back == hw and isinstance(back.derived, Derived)
    assert repr(back.derived) == "Derived()"
    assert "derived" not in repr(hw)
