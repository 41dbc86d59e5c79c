"""The free GPUs kept job by job agree with counting from scratch."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtopo.api import load_cluster
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.placement.common import candidates
from slurmtopo.simulate.freestate import FreeState

ROOT = Path(__file__).resolve().parents[2]


def _inv(name: str):
    if name.startswith("bench:"):
        sys.path.insert(0, str(ROOT))
        from bench.scenarios import cluster
        return cluster(name[6:], 72 if "nvl72" in name else 32)
    return load_cluster(str(ROOT / "etc" / "examples" / name))


INVS = {n: _inv(n) for n in ("h100-4node-2leaf.yaml", "devcluster.yaml", "bench:nvl72",
                             "a6000-4node-pcie.yaml")}
REQS = [JobRequest(Layout(dp=1)), JobRequest(Layout(dp=4), gpus_per_node=4),
        JobRequest(Layout(tp=2, dp=4), gpus_per_node=2)]


def _check(fs: FreeState) -> None:
    inv = fs.inv
    # the incremental count against the one counted from scratch, piece by piece
    assert fs.stranded == sum(piece[-1] for piece in fs.stranded_pieces())
    hist = [0] * (fs.max_size + 1)
    for i, name in enumerate(fs.names):
        busy = fs.busy[i]
        hist[fs.size[i] - len(busy)] += 1
        st = fs.cluster.nodes.get(name)
        assert (st.busy_gpus if st is not None else frozenset()) == frozenset(busy)
    assert hist == fs.hist
    assert fs.busy_gpus == sum(len(b) for b in fs.busy)
    for req in REQS:
        want = candidates(inv, fs.cluster, req)
        got = fs.candidates(req)
        assert [(i, n.name, f) for i, n, f in got.nodes] == \
               [(i, n.name, f) for i, n, f in want.nodes]
        assert got.free_gpus == want.free_gpus and got.full == want.full


@settings(max_examples=30, deadline=None, derandomize=True)
@given(name=st.sampled_from(sorted(INVS)), seed=st.integers(0, 10_000))
def test_incremental_state_matches_a_recount(name, seed):
    inv = INVS[name]
    fs = FreeState(inv)
    rng = random.Random(seed)
    held = []
    for step in range(40):
        if held and rng.random() < 0.4:
            alloc = held.pop(rng.randrange(len(held)))
            fs.release(alloc)
        else:
            alloc = {}
            for name_ in rng.sample(fs.names, rng.randint(1, 3)):
                free = list(fs.free_gpus(name_))
                if free:
                    alloc[name_] = tuple(rng.sample(free, rng.randint(1, len(free))))
            if not alloc:
                continue
            fs.allocate(alloc)
            held.append(alloc)
        if step % 7 == 0:
            _check(fs)
    # a what-if (untracked) undone leaves everything as it was
    before = (fs.stranded, list(fs.hist))
    for alloc in held:
        fs.release(alloc, track=False)
    for alloc in reversed(held):
        fs.allocate(alloc, track=False)
    assert (fs.stranded, list(fs.hist)) == before
    _check(fs)


def test_stranded_by_hand():
    """devcluster: A6000 cards in NVLink pairs (0-1, 2-3, ...), node1-2
    under leaf1, node3-4 under leaf2."""
    fs = FreeState(INVS["devcluster.yaml"])
    fs.allocate({"node1": (0,)})
    assert fs.stranded == 1            # GPU 1: its pair is not whole, nor is leaf1
    fs.allocate({"node1": (2, 4)})
    assert fs.stranded == 3            # GPUs 1, 3, 5
    fs.allocate({"node3": (0, 1)})
    assert fs.stranded == 3            # a whole pair taken strands nothing
    fs.release({"node1": (0, 2, 4)})
    assert fs.stranded == 0            # leaf1 whole again; node3's other pairs are whole
    with pytest.raises(ValueError, match="busy already"):
        fs.allocate({"node3": (1, 2)})
