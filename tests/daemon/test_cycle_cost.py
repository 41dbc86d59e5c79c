"""What keeps a daemon cycle cheap on a big queue, and that it changes no
decision: the incremental working state, the free-GPU counts that turn a
job away before planning, plans kept between cycles, the packing pass
skipped when counting shows it cannot help, and the journal written in
batches without losing its crash safety. Counts of calls are asserted,
never times (timings: bench/daemon_load.py)."""
from __future__ import annotations

import json
import os

import pytest

from slurmtopo.daemon import scheduler
from slurmtopo.daemon.loop import Daemon
from slurmtopo.daemon.spool import Journal, read_events
from tests.events import release_count
from slurmtopo.daemon.decisions import RELEASE, WAIT, ClusterView
from slurmtopo.daemon.scheduler import decide
from slurmtopo.daemon.work import Work
from slurmtopo.daemon.submit import submit_for_daemon
from slurmtopo.job.groups import Layout
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.job.request import JobRequest

from tests.daemon.test_scheduler import NOW, TP4, busy, by_id, job


def rebuilt(inv, base: ClusterState, claims, reserved=()) -> ClusterState:
    """The state a claim should leave, computed from scratch."""
    nodes = dict(base.nodes)
    for h, gs in list(claims) + list(reserved):
        st = nodes.get(h, NodeState(h))
        b = set(st.busy_gpus) | set(gs)
        nodes[h] = NodeState(h, "mixed" if b and st.state == "idle" else st.state,
                             frozenset(b), st.flags, st.exclusive)
    return ClusterState(nodes=nodes)


def test_claims_update_the_state_and_the_counts_in_place(inv):
    base = busy(node1={0, 1}, node3="all", node4="drain")
    view = ClusterView(base, partitions={"a": frozenset({"node1", "node2"}),
                                         "b": frozenset({"node3", "node4"})})
    w = Work(inv, view)
    assert w.histogram() == {6: 1, 8: 1, 0: 2}
    w.claim({"node2": (0, 1, 2, 3)})
    w.reserve({"node1": (4, 5)})
    want = rebuilt(inv, base, [("node2", (0, 1, 2, 3))], [("node1", (4, 5))])
    for name in inv.nodes:
        got = w.state().free_gpus(inv.nodes[name])
        assert got == want.free_gpus(inv.nodes[name]), name
    assert w.free_gpus("node1") == (2, 3, 6, 7)
    assert w.free_gpus("node1", with_reserved=False) == (2, 3, 4, 5, 6, 7)
    # the counts follow: node1 4 free (6 without the reservation), node2 4
    assert w.histogram() == {4: 2, 0: 2}
    assert w.histogram(with_reserved=False) == {6: 1, 4: 1, 0: 2}
    # only the claimed nodes were rewritten; the others are Slurm's objects
    assert w.state().nodes["node3"] is base.nodes["node3"]
    # a state asked for again without a claim in between is the same object
    assert w.state() is w.state()


def test_the_counts_turn_away_a_job_that_cannot_fit(inv):
    view = ClusterView(busy(node1={0, 1}, node2={0, 1, 2, 3, 4}, node3="all", node4="all"),
                       partitions={"p": frozenset({"node1", "node2"}),
                                   "q": frozenset({"node3", "node4"})})
    w = Work(inv, view)
    # 6 + 3 free GPUs; two nodes with 4 free? only node1
    assert w.shortfall(8, 4) and "needs 2 nodes with 4 free GPUs" in w.shortfall(8, 4)
    assert w.shortfall(9, None) is None                   # 9 free GPUs in all
    assert "needs 10 GPUs; only 9 are free" in w.shortfall(10, None)
    assert w.shortfall(4, 4) is None
    assert w.shortfall(6, 6) is None and w.shortfall(3, 3, ["q"])  # q is full
    assert "needs 7 GPUs; only 0 are free on nodes with at least 7" in w.shortfall(7, 7)


def count_plans(monkeypatch):
    calls = []
    real = scheduler.plan_job

    def counting(inv, state, req, cand=None, admit=None):
        calls.append(state.source)
        return real(inv, state, req, cand, admit)

    monkeypatch.setattr(scheduler, "plan_job", counting)
    return calls


def test_a_job_that_cannot_fit_by_counts_is_not_planned(inv, monkeypatch):
    st = busy(node1={0, 1, 2, 3}, node2="all", node3="all", node4="all")
    first = job(1, age=100, **TP4)
    big = job(2, age=50, layout=Layout(tp=4, dp=2), require={"tp": "nvlink"},
              gpus_per_node=4)
    cfg = scheduler.Config(reservations=0)
    plans = count_plans(monkeypatch)
    ds = by_id(decide([first, big], inv, ClusterView(st), NOW, cfg))
    assert ds[1].action == RELEASE
    assert ds[2].action == WAIT and "needs 2 nodes with 4 free GPUs" in ds[2].reason
    with_big = [p for p in plans if p != "empty cluster"]
    plans.clear()
    decide([first], inv, ClusterView(st), NOW, cfg)
    assert with_big and with_big == [p for p in plans if p != "empty cluster"]


def test_the_same_decisions_with_and_without_the_counts(inv, monkeypatch):
    """The quick check only ever answers 'no' where planning says no too."""
    st = busy(node1={0, 1, 2, 3}, node2={0, 1}, node3="all", node4={4, 5, 6, 7})
    jobs = [job(1, age=90, **TP4), job(2, age=80, layout=Layout(tp=2, dp=2),
                                       require={"tp": "nvlink"}, gpus_per_node=4),
            job(3, age=70, layout=Layout(tp=4, dp=2), require={"tp": "nvlink"},
                gpus_per_node=4),
            job(4, age=60, layout=Layout(tp=2), require={"tp": "nvlink"}, gpus_per_node=2)]
    fast = decide(jobs, inv, ClusterView(st), NOW)
    monkeypatch.setattr(Work, "shortfall", lambda self, *a, **k: None)
    slow = decide(jobs, inv, ClusterView(st), NOW)
    assert [(d.job_id, d.action, d.hosts, d.gpus, d.reserved) for d in fast] == \
        [(d.job_id, d.action, d.hosts, d.gpus, d.reserved) for d in slow]


def test_plans_on_the_empty_cluster_are_kept_between_cycles(inv, monkeypatch):
    st = busy(node1={0, 1, 2, 3}, node2="all", node3="all", node4="all")
    jobs = [job(1, age=100, **TP4), job(2, age=10, **TP4)]
    plans = count_plans(monkeypatch)
    memo: dict = {}
    a = decide(jobs, inv, ClusterView(st), NOW, memo=memo)
    ideal_first = plans.count("empty cluster")
    assert ideal_first >= 1
    plans.clear()
    b = decide(jobs, inv, ClusterView(st), NOW + 10, memo=memo)
    assert plans.count("empty cluster") == 0
    assert [(d.action, d.hosts) for d in a] == [(d.action, d.hosts) for d in b]
    # a new inventory object starts afresh
    import copy
    decide(jobs, copy.copy(inv), ClusterView(st), NOW, memo=memo)
    assert plans.count("empty cluster") >= 1


def test_the_packing_pass_is_skipped_when_counting_shows_it_cannot_help(inv, monkeypatch):
    passes = []
    real = scheduler.run_pass

    def counting(*a, **k):
        passes.append(k.get("pack"))
        return real(*a, **k)

    monkeypatch.setattr(scheduler, "run_pass", counting)
    # one free quad; two TP4 jobs: packing cannot fit both
    st = busy(node1={0, 1, 2, 3}, node2="all", node3="all", node4="all")
    decide([job(1, age=100, **TP4), job(2, age=10, **TP4)], inv, ClusterView(st), NOW)
    assert passes == [False]
    # two jobs that fragment each other: 8 free GPUs, 4 + 4 needed: it runs
    passes.clear()
    frag = busy(node1={0, 1, 2, 3}, node2={2, 3, 6, 7}, node3="all", node4="all")
    ds = by_id(decide([job(1, layout=Layout(tp=2, dp=2), require={"tp": "nvlink"},
                           gpus_per_node=4, age=100), job(2, age=10, **TP4)],
                      inv, ClusterView(frag), NOW))
    assert passes == [False, True]
    assert ds[1].action == ds[2].action == RELEASE


# --------------------------------------------------------------------------
# the journal, in batches


def submit(slurm, layout, gpn=2, **kw):
    req = JobRequest(layout=layout, gpus_per_node=gpn, **kw)
    nodes = -(-req.world // gpn)
    return submit_for_daemon(slurm, req, (f"#!/bin/bash\n#SBATCH --nodes={nodes}\n"
                                          f"#SBATCH --ntasks-per-node={gpn}\n"
                                          f"#SBATCH --gpus-per-node={gpn}\nsrun true\n"))


def test_a_cycle_fsyncs_a_few_times_however_many_jobs_it_releases(slurm, inv, spool,
                                                                   monkeypatch):
    counts = []
    for n in (2, 8):
        for j in list(slurm.jobs_):
            slurm.cancel(j)
        ids = [submit(slurm, Layout(tp=2), require={"tp": "nvlink"}) for _ in range(n)]
        d = Daemon(slurm, inv, os.path.join(spool, str(n)))
        synced = []
        real = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
        ds = d.cycle()
        monkeypatch.setattr(os, "fsync", real)
        assert sum(x.action == RELEASE for x in ds) == n
        assert all(slurm.releases(j) == 1 for j in ids)
        counts.append(len(synced))
    assert counts[0] == counts[1]          # not one per job


def test_a_cycle_killed_mid_batch_leaves_a_journal_the_restart_can_trust(slurm, inv, spool,
                                                                         killed):
    ids = [submit(slurm, Layout(tp=2), require={"tp": "nvlink"}) for _ in range(4)]
    done = []

    def die(job_id):
        done.append(job_id)
        if len(done) == 2:
            raise killed()          # after the 2nd `scontrol release`, before journalling

    slurm.hooks["after_release"] = die
    with pytest.raises(killed):
        Daemon(slurm, inv, spool).cycle()
    # on disk: every job of the batch has its intent, none more
    doc = json.load(open(os.path.join(spool, "journal.json")))
    assert {r["job_id"]: r["phase"] for r in doc["jobs"]} == {j: "releasing" for j in ids}
    assert [e["job"] for e in read_events(spool) if e["event"] == "intent-release"] == ids
    released = [j for j in ids if not slurm.job(j).held]
    assert released == ids[:2]
    del slurm.hooks["after_release"]
    d = Daemon(slurm, inv, spool)
    d.cycle()
    ev = read_events(spool)
    for j in ids:
        assert slurm.releases(j) == 1, j
        assert release_count(ev, j) == 1, j
        assert d.records[j].phase in ("released", "running")
    assert [e["job"] for e in ev if e["event"] == "release-confirmed"] == ids[:2]
    assert sorted(e["job"] for e in ev if e["event"] == "release-not-done") == ids[2:]


def test_the_journal_is_one_file_written_atomically(slurm, inv, spool):
    a = submit(slurm, **dict(layout=Layout(tp=2), require={"tp": "nvlink"}))
    Daemon(slurm, inv, spool).cycle()
    assert set(os.listdir(spool)) == {"events.log", "journal.json", "status.json", "requests",
                                      "private"}
    doc = json.load(open(os.path.join(spool, "journal.json")))
    assert doc["slurmtopo"] == "daemon-journal" and [r["job_id"] for r in doc["jobs"]] == [a]


def test_a_journal_of_per_job_files_is_read_and_replaced(slurm, inv, spool):
    """Spools written by earlier daemons (journal/<jobid>.json) carry over."""
    a = submit(slurm, **dict(layout=Layout(tp=2), require={"tp": "nvlink"}))
    os.makedirs(os.path.join(spool, "journal"))
    with open(os.path.join(spool, "journal", f"{a}.json"), "w") as f:
        json.dump({"job_id": a, "phase": "releasing", "hosts": ["node1"]}, f)
    d = Daemon(slurm, inv, spool)
    assert d.records[a].phase == "releasing"
    d.cycle()                         # still held: the release never happened
    assert slurm.releases(a) == 1
    assert not os.path.exists(os.path.join(spool, "journal"))
    assert Journal(spool).load()[a].phase in ("released", "running")


# --------------------------------------------------------------------------
# the planner's candidates, kept up to date


def _canonical(cand):
    """Candidates with signatures named by what they are, not their number."""
    def sig(s):
        hw, free = cand.sigs[s]
        return (id(hw), free)
    pods = {p: sorted((sig(s), c) for s, c in d.items()) for p, d in cand.pod_sigs.items()}
    return ([(i, node.name, free) for i, node, free in cand.nodes],
            {i: sig(s) for i, s in cand.sig_of.items()}, pods, dict(cand.pod_free),
            cand.free_gpus, cand.full, cand.partial, cand.small, cand.unusable, cand.unknown,
            cand.excluded)


@pytest.mark.parametrize("seed", range(4))
def test_kept_candidates_match_a_fresh_scan(seed):
    import random

    from bench.scenarios import busy_state, cluster
    from slurmtopo.placement.common import candidates
    from slurmtopo.placement.fabric import fabric_tree

    inv = cluster("fattree3", 48)
    rng = random.Random(seed)
    st = busy_state(inv, 0.4, rng)
    w = Work(inv, ClusterView(st))
    names = list(inv.nodes)
    pod = fabric_tree(inv).node_pod
    reqs = [JobRequest(layout=Layout(tp=8, dp=2), gpus_per_node=8),
            JobRequest(layout=Layout(tp=2, dp=3)),
            JobRequest(layout=Layout(tp=4), gpus_per_node=4, exclusive=True)]
    for r in reqs:
        w.candidates(r)
    for _ in range(12):
        h = rng.choice(names)
        free = w.free_gpus(h)
        if free:
            w.claim({h: free[:rng.randint(1, len(free))]}, exclusive=rng.random() < 0.2)
        if rng.random() < 0.3:
            h2 = rng.choice(names)
            w.reserve({h2: w.free_gpus(h2)[:2]})
        for r in reqs:
            assert _canonical(w.candidates(r)) == \
                _canonical(candidates(inv, w.state(), r, pod)), r
    # the reservation search's "once the jobs on these nodes end"
    freed = names[5:30]
    for r in reqs:
        st2 = w.state(freed=freed)
        assert _canonical(w.candidates_freed(r, freed, st2)) == \
            _canonical(candidates(inv, st2, r, pod)), r
    drop = [h for h in names[:10] if h in inv.nodes]
    r = replace_exclude(reqs[1], drop)
    assert _canonical(w.candidates_for(r))[:5] == _canonical(candidates(inv, w.state(), r, pod))[:5]


def replace_exclude(req, names):
    from dataclasses import replace
    return replace(req, exclude=tuple(sorted(names)))


# --------------------------------------------------------------------------
# a burst: bounded releases per cycle, best fit for the first ones


def test_a_cycle_releases_at_most_max_releases_in_priority_order(inv, monkeypatch):
    st = busy(node3="all", node4="all")     # four free quads on node1 and node2
    jobs = [job(i, age=100 - i, **TP4) for i in range(1, 5)]
    ds = by_id(decide(jobs, inv, ClusterView(st), NOW, scheduler.Config(max_releases=2)))
    assert [ds[i].action for i in range(1, 5)] == [RELEASE, RELEASE, WAIT, WAIT]
    assert "--max-releases 2" in ds[3].reason and not ds[3].reserved
    plans = count_plans(monkeypatch)
    decide(jobs, inv, ClusterView(st), NOW, scheduler.Config(max_releases=2, reservations=0))
    capped = len([p for p in plans if p != "empty cluster"])
    plans.clear()
    decide(jobs[:2], inv, ClusterView(st), NOW, scheduler.Config(max_releases=2,
                                                                  reservations=0))
    assert capped == len([p for p in plans if p != "empty cluster"])  # 3 and 4 unplanned
    ds = by_id(decide(jobs, inv, ClusterView(st), NOW, scheduler.Config(max_releases=0)))
    assert all(ds[i].action == RELEASE for i in range(1, 5))


def test_only_the_first_releases_of_a_burst_compare_alternatives(inv, monkeypatch):
    st = busy(node3="all", node4="all")
    jobs = [job(i, age=100 - i, layout=Layout(tp=2), require={"tp": "nvlink"},
                gpus_per_node=2) for i in range(1, 5)]

    def plans_with(cfg):
        plans = count_plans(monkeypatch)
        ds = decide(jobs, inv, ClusterView(st), NOW, cfg)
        monkeypatch.undo()
        return len([p for p in plans if p != "empty cluster"]), ds

    every, _ = plans_with(scheduler.Config(best_fit_releases=0, reservations=0))
    first, ds = plans_with(scheduler.Config(best_fit_releases=1, reservations=0))
    assert all(d.action == RELEASE for d in ds)
    # jobs 2-4 each skip at least the alternative on the other node
    assert every - first >= 3


def test_a_job_the_planner_refused_is_not_planned_again_on_the_same_state(inv, monkeypatch):
    # node1 has 4 free GPUs (enough by count) but no free NVLink quad
    st = busy(node1={0, 2, 4, 6}, node2="all", node3="all", node4="all")
    jobs = [job(1, age=10, **TP4)]
    cfg = scheduler.Config(reservations=0)
    memo: dict = {}
    plans = count_plans(monkeypatch)
    first = decide(jobs, inv, ClusterView(st), NOW, cfg, memo=memo)[0]
    assert first.action == WAIT and [p for p in plans if p != "empty cluster"]
    plans.clear()
    again = decide(jobs, inv, ClusterView(st), NOW + 10, cfg, memo=memo)[0]
    assert [p for p in plans if p != "empty cluster"] == []
    assert (again.action, again.reason) == (first.action, first.reason)
    # another state: planned again, and it fits
    freed = busy(node1={0, 2, 4, 6}, node2={0, 1, 2, 3}, node3="all", node4="all")
    d = decide(jobs, inv, ClusterView(freed), NOW + 20, cfg, memo=memo)[0]
    assert [p for p in plans if p != "empty cluster"]
    assert d.action == RELEASE and d.gpus == {"node2": (4, 5, 6, 7)}


def test_the_digest_follows_the_free_gpus(inv):
    st = busy(node1={0, 1}, node3="all")
    a, b = Work(inv, ClusterView(st)), Work(inv, ClusterView(st))
    assert a.digest() == b.digest()
    a.claim({"node2": (0, 1)})
    assert a.digest() != b.digest()
    b.claim({"node2": (1,)})
    b.claim({"node2": (0,)})
    assert a.digest() == b.digest()              # same free GPUs, whatever the order
    a.reserve({"node4": (0,)})
    assert a.digest() != b.digest() and a.digest(False) == b.digest(False)
