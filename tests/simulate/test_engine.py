"""The event loop on small traces whose waits can be worked out by hand.

The cluster is etc/examples/h100-4node-2leaf.yaml: gpu01-gpu04, 8 H100 a
node (NVSwitch), gpu01-02 under leaf1, gpu03-04 under leaf2. A job's
slowdown there is 1 for every placement of whole nodes, so run times are
the trace's unless a test says otherwise.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from slurmtopo.api import load_cluster
from slurmtopo.simulate.engine import JobSpec, replay, slowdown, stretched
from slurmtopo.simulate.layouts import BUILTIN
from slurmtopo.simulate.policies import make_policy, parse_policy
from slurmtopo.simulate.runner import prepare
from slurmtopo.simulate.trace import Trace, TraceJob

ROOT = Path(__file__).resolve().parents[2]
INV = str(ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml")


@pytest.fixture(scope="module")
def inv():
    return load_cluster(INV)


def _trace(*rows) -> Trace:
    """rows: (submit s, GPUs, run s[, time limit s])."""
    jobs = tuple(TraceJob(job_id=f"j{i}", submit=float(r[0]), gpus=r[1], run_time=float(r[2]),
                          time_limit=float(r[3]) if len(r) > 3 else None, where=f"t:{i + 1}")
                 for i, r in enumerate(rows))
    return Trace(jobs=jobs, source="t", format="csv", rows=len(jobs))


def _run(inv, policy: str, *rows, fraction: float = 0.3):
    setup = prepare(inv, _trace(*rows), BUILTIN["default"], fraction)
    rep = replay(inv, list(setup.jobs), make_policy(parse_policy(policy), inv), fraction)
    waits = [None if o.start is None else o.start - j.submit for j, o in zip(setup.jobs, rep.outcomes)]
    return setup, rep, waits


@pytest.mark.parametrize("policy", ["slurm", "slurm:topology=flat", "slurmtopo",
                                    "daemon:wait=0,interval=10"])
def test_fifo_until_the_big_job_ends(inv, policy):
    """A takes all 32 GPUs at 0 for 100 s; B (8 GPUs) and C (4) queue
    behind it and start when it ends: waits 0, 100 - 10, 100 - 20."""
    _, rep, waits = _run(inv, policy, (0, 32, 100), (10, 8, 50), (20, 4, 30))
    assert waits == [0, 90, 80]
    assert [o.end for o in rep.outcomes] == [100, 150, 130]
    assert rep.end == 150


def test_switches_wait_even_where_one_leaf_can_never_hold_the_job(inv):
    """As Slurm does with --switches=1@600: A (32 GPUs, both leaves) is held
    its full 600 s although no leaf will ever hold it; B and C, behind it,
    start at once (a job held for its switches gets no reservation)."""
    _, rep, waits = _run(inv, "slurm-switches:wait=600", (0, 32, 100), (10, 8, 50),
                         (20, 4, 30))
    assert waits == [600, 0, 0]


def test_backfill_around_one_reservation(inv):
    """A (16 GPUs) runs 0-100. B (32 GPUs, all) cannot start: it gets the
    reservation at 100 (when A ends) on every GPU. C (8 GPUs, 50 s) ends at
    52 < 100: backfilled at once. D (8 GPUs, 200 s) would end at 203 >
    100: it may not touch the reserved GPUs and waits for B (100-110):
    waits 0, 99, 0, 107."""
    _, rep, waits = _run(inv, "slurm", (0, 16, 100), (1, 32, 10), (2, 8, 50), (3, 8, 200))
    assert waits == [0, 99, 0, 107]


def test_time_limits_are_what_backfill_plans_on(inv):
    """The same, but C asks for a 200 s limit though it runs 50 s: the
    scheduler cannot know it ends before the reservation, so C waits for
    B too (starts at 110, wait 108), and D starts beside it."""
    _, rep, waits = _run(inv, "slurm", (0, 16, 100), (1, 32, 10), (2, 8, 50, 200),
                         (3, 8, 200))
    assert waits == [0, 99, 108, 107]


def _split(inv, policy):
    """A-D take a node each (A gpu01, B gpu02, C gpu03, D gpu04: Slurm's tree
    choice, and the daemon's best fit, fill leaf1 first); A and D end at
    100, leaving gpu01 and gpu04 free, one in each leaf. E (16 GPUs) comes
    at 110: two nodes are free, but not under one leaf; B ends at 300
    (leaf1 whole again), C at 400."""
    return _run(inv, policy, (0, 8, 100), (0, 8, 300), (0, 8, 400), (0, 8, 100), (110, 16, 50))


def test_slurm_spans_leaves_at_once(inv):
    _, rep, waits = _split(inv, "slurm")
    assert waits[4] == 0 and rep.outcomes[4].leaves == 2


@pytest.mark.parametrize("wait, expect", [(100, 100), (600, 190)])
def test_switches_wait_for_one_leaf_until_their_limit(inv, wait, expect):
    """--switches=1@T: E waits for one leaf until T after its submission
    (wait 100: starts at 210 over both leaves), or until B's end frees
    leaf1 (wait 600: starts at 300 on gpu01-02)."""
    _, rep, waits = _split(inv, f"slurm-switches:wait={wait}")
    assert waits[4] == expect
    assert rep.outcomes[4].leaves == (2 if wait == 100 else 1)


@pytest.mark.parametrize("wait, expect", [(0, 0), (100, 100), (600, 190)])
def test_daemon_waits_like_its_knob(inv, wait, expect):
    """The daemon holds E for its preferred leaf as long as its wait
    (cycles every 10 s, E's submission at 110 is on one): wait 0 releases
    it at once over two leaves, 100 at 210, 600 when leaf1 is whole at 300."""
    _, rep, waits = _split(inv, f"daemon:wait={wait}")
    assert waits[:4] == [0, 0, 0, 0]
    assert waits[4] == expect
    assert rep.outcomes[4].leaves == (1 if wait == 600 else 2)


def test_daemon_decides_on_its_cycle(inv):
    """A job submitted between two cycles (interval 30 s) waits for the
    next: submitted at 5, released at 30; one at 60 goes at 60."""
    _, rep, waits = _run(inv, "daemon:wait=0,interval=30", (5, 8, 10), (60, 8, 10))
    assert waits == [25, 0]
    assert rep.cycles == 2


def test_release_limit_spreads_a_burst_over_cycles(inv):
    """max_releases=2: four jobs at once go two a cycle (10 s apart)."""
    _, rep, waits = _run(inv, "daemon:wait=0,max_releases=2", *[(0, 1, 100)] * 4)
    assert sorted(waits) == [0, 0, 10, 10]


def test_slowdown_stretches_run_time(inv):
    job = JobSpec(0, TraceJob("x", 0.0, 1000.0, 16), None, None, 0.5)
    assert slowdown(1.0, 0.5) == 2.0
    assert stretched(job, 1.0, 0.3) == pytest.approx(1000 * (1 + 0.3 * 1.0))
    assert stretched(job, 0.5, 0.3) == 1000.0
    assert stretched(job, 1.0, 0.0) == 1000.0
    one = JobSpec(0, TraceJob("y", 0.0, 10.0, 1), None, None, 0.0)
    assert slowdown(0.0, 0.0) == 1.0 and stretched(one, 0.0, 0.9) == 10.0


def test_stranded_gpus_are_integrated_over_time(inv):
    """One 4-GPU job on gpu01 for 100 s: gpu01's other 4 GPUs are free but
    neither their NVLink domain (the node) nor leaf1 is whole: 4 stranded
    GPUs for 100 s, none after; the replay ends at 100."""
    _, rep, _ = _run(inv, "slurm", (0, 4, 100))
    assert rep.stranded_gpu_s == pytest.approx(400.0)
    assert rep.end == 100


def test_jobs_that_never_fit_are_left_out(inv):
    setup = prepare(inv, _trace((0, 8, 10), (1, 40, 10)), BUILTIN["default"], 0.3)
    assert [j.trace.job_id for j in setup.jobs] == ["j0"]
    assert [(t.job_id, "needs 5 nodes" in why) for t, why in setup.never] == [("j1", True)]


@pytest.mark.parametrize("workers", [1, 2])
def test_runner_reports_progress_and_keeps_the_order(inv, workers):
    from slurmtopo.simulate.runner import run_policies

    setup = prepare(inv, _trace(*[(i, 8, 50) for i in range(70)]), BUILTIN["default"], 0.3)
    specs = [parse_policy("daemon:wait=0"), parse_policy("slurm")]
    seen = {}
    out = run_policies(setup, specs, workers, lambda k, done: seen.__setitem__(k, done))
    assert [r.label for r, _ in out] == ["daemon:wait=0", "slurm"]
    assert seen == {0: 70, 1: 70}
    assert all(seconds >= 0 for _, seconds in out)


def test_daemon_lets_go_of_a_job_every_placement_of_which_has_an_error_hazard(tmp_path):
    """NVL72 with NCCL 2.24.3 (the inventory's cost: nccl_version): 72
    ranks in the rack's clique are more than its 64 local ranks, an error
    on every placement (docs/hazards.md). The daemon never releases the
    job; a replay counts it rejected and the one behind it runs."""
    text = (ROOT / "etc" / "examples" / "gb200-nvl72-rack.yaml").read_text()
    (tmp_path / "rack.yaml").write_text(text + "cost:\n  nccl_version: 2.24.3\n")
    rack = load_cluster(str(tmp_path / "rack.yaml"))
    _, rep, waits = _run(rack, "daemon:wait=0", (0, 72, 100), (10, 8, 50))
    assert waits == [None, 0] and rep.rejected == 1
    assert "hazard mnnvl-clique (error)" in rep.notes[0]
