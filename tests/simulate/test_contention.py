"""Shared links: the fabric's links and capacities, flows' paths, the load
a job sees and how it stretches runs (slurmtopo/simulate/contention.py,
traffic.py), worked out by hand on small inventories.

etc/examples/h100-4node-2leaf.yaml: gpu01-02 under leaf1, gpu03-04 under
leaf2, one spine; every node has 8 NICs of 400 Gb/s, one per GPU (50 GB/s
each), and the leaves' ports are 400 Gb/s (``link_gbps``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurmtopo.api import load_cluster
from slurmtopo.cost import cost_params
from slurmtopo.simulate.contention import (DOWN, HOST_IN, HOST_OUT, NVL, UP, Contention,
                                           FabricLinks, JobLoad, job_load, mix)
from slurmtopo.simulate.engine import JobSpec, comm_scale, effective_slowdown, replay
from slurmtopo.simulate.layouts import BUILTIN
from slurmtopo.simulate.policies import make_policy, parse_policy
from slurmtopo.simulate.runner import prepare
from slurmtopo.simulate.trace import Trace, TraceJob
from slurmtopo.simulate.traffic import edge_bytes, job_traffic

ROOT = Path(__file__).resolve().parents[2]
INV = str(ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml")
NVL_INV = str(ROOT / "tests" / "fixtures" / "slurm" / "devcluster-nvl-inventory.yaml")


@pytest.fixture(scope="module")
def inv():
    return load_cluster(INV)


def _oversubscribed(inv, x):
    """The inventory with its spine X:1 oversubscribed (the cost block)."""
    out = replace(inv, cost={"oversubscription": {"NET_L1": x}})
    return out, cost_params(out)


def test_mix_is_deterministic_and_spreads():
    assert mix(1, 2, 3) == mix(1, 2, 3)
    assert mix(1, 2, 3) != mix(1, 2, 4) != mix(2, 2, 3)
    ports = {mix(7, 0, 1, 2, f) % 16 for f in range(64)}
    assert len(ports) > 8  # 64 flows land on most of 16 ports


def test_links_and_capacities(inv):
    links = FabricLinks(inv, cost_params(inv))
    a, b = links.index["gpu01"], links.index["gpu03"]
    # a host's NICs: 8 x 50 GB/s out and in
    assert links.cap[links.host_out[a]] == pytest.approx(400.0)
    assert links.kind[links.host_out[a]] == HOST_OUT and links.kind[links.host_in[a]] == HOST_IN
    # leaf1 carries 2 hosts' 800 GB/s up, non-blocking, in 400 Gb/s ports: 16 of 50 GB/s
    bundle = links.bundles[links.tiers[a][0]]
    assert (bundle.ports, bundle.cap) == (16, pytest.approx(50.0))
    assert links.kind[bundle.up] == UP and links.kind[bundle.down] == DOWN
    # under one leaf: NICs only; across the spine: one port up, the same port down
    c = links.index["gpu02"]
    assert links.path(a, c, 5) == [links.host_out[a], links.host_in[c]]
    path = links.path(a, b, 5)
    up, down = path[1], path[2]
    other = links.bundles[links.tiers[b][0]]
    assert path[0] == links.host_out[a] and path[-1] == links.host_in[b]
    assert up - bundle.up == down - other.down  # the same plane both ways


def test_oversubscription_takes_ports_away(inv):
    over, params = _oversubscribed(inv, 4)
    links = FabricLinks(over, params)
    bundle = links.bundles[links.tiers[links.index["gpu01"]][0]]
    assert bundle.ports == 4 and bundle.ports * bundle.cap == pytest.approx(200.0)
    ideal = FabricLinks(over, params, "ideal")
    one = ideal.bundles[ideal.tiers[ideal.index["gpu01"]][0]]
    assert (one.ports, one.cap) == (1, pytest.approx(200.0))


def test_an_nvlink_domain_is_one_link():
    nvl = load_cluster(NVL_INV)
    links = FabricLinks(nvl, cost_params(nvl))
    hosts = [h for h, n in nvl.nodes.items() if n.nvlink_domain is not None]
    same = [h for h in hosts if nvl.nodes[h].nvlink_domain == nvl.nodes[hosts[0]].nvlink_domain]
    a, b = links.index[same[0]], links.index[same[1]]
    path = links.path(a, b, 1)
    assert len(path) == 1 and links.kind[path[0]] == NVL


def _load(rates, duty):
    return JobLoad(rates=[dict(r) for r in rates], duty=list(duty))


def test_load_seen_and_multiplier_by_hand(inv):
    """Two jobs on one 50 GB/s port: each sends 50 GB/s while its call
    runs, 30% of its time. Alone: 50/50, no slowdown. Together each sees
    its own 50 + the other's average 15: rho 1.3, its run 1 + 0.3 x 0.3 =
    1.09 times longer. When one ends the other is back to 1."""
    links = FabricLinks(inv, cost_params(inv))
    port = links.bundles[links.tiers[0][0]].up
    net = Contention(links)
    assert net.add(1, _load([{port: 50.0}], [0.3])) == {1: 1.0}
    changed = net.add(2, _load([{port: 50.0}], [0.3]))
    assert changed[1] == pytest.approx(1.09) and changed[2] == pytest.approx(1.09)
    assert net.alone(2) == 1.0
    assert net.remove(2) == {1: pytest.approx(1.0)}
    assert net.multiplier(1) == pytest.approx(1.0)


def test_own_flows_on_one_port_slow_a_job_alone(inv):
    """Two of a job's flows hashed onto one port: 100 GB/s on 50, rho 2;
    its call is half its run: 1 + 0.5 x (2 - 1) = 1.5, other jobs or not."""
    links = FabricLinks(inv, cost_params(inv))
    port = links.bundles[links.tiers[0][0]].up
    net = Contention(links)
    assert net.add(1, _load([{port: 100.0}], [0.5])) == {1: pytest.approx(1.5)}
    assert net.alone(1) == pytest.approx(1.5)


def test_a_host_never_slows_its_own_job(inv):
    """The step model already shares a host's NICs among the job's ranks:
    asking more than their capacity alone is not contention."""
    links = FabricLinks(inv, cost_params(inv))
    nic = links.host_out[0]
    net = Contention(links)
    assert net.add(1, _load([{nic: 800.0}], [0.3])) == {1: 1.0}


def test_traffic_of_a_two_leaf_job(inv):
    """32 GPUs, TP 8 inside each node, DP 4 across the nodes: 8 DP rings
    over the 4 hosts, each edge one flow per ring; an all-reduce edge
    carries 2 (n-1)/n of the message."""
    params = cost_params(inv)
    setup = prepare(inv, Trace(jobs=(TraceJob("a", 0.0, 100.0, 32),), source="t", format="csv",
                               rows=1), BUILTIN["default"], 0.3, contention="off")
    job = setup.jobs[0]
    from slurmtopo.plan.choice import plan

    pl = plan(inv, None, job.request)
    tr = job_traffic(inv, pl, job.request, params)
    dp = next(c for c in tr.calls if c.what == "dp")
    # a ring over the 4 hosts: every host sends once and receives once
    assert len(dp.edges) == 4
    assert sorted(a for a, _, _, _ in dp.edges) == sorted(b for _, b, _, _ in dp.edges) == \
        ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert all(flows == 8 for _, _, _, flows in dp.edges)
    assert len({round(nbytes) for _, _, nbytes, _ in dp.edges}) == 1
    assert edge_bytes("all-reduce", 4, 100.0) == pytest.approx(150.0)
    assert edge_bytes("all-gather", 4, 100.0) == pytest.approx(75.0)
    assert edge_bytes("reduce-scatter", 4, 100.0) == pytest.approx(75.0)
    # no flow over the network is faster than its NIC
    links = FabricLinks(inv, params)
    load = job_load(links, tr, 0.3 / tr.comm_s, 0, 0)
    for rates in load.rates:
        for link, rate in rates.items():
            if links.kind[link] in (UP, DOWN):
                assert rate <= 50.0 * 8 + 1e-9


def _replay(inv, mode, seed=0):
    trace = Trace(jobs=(TraceJob("a", 0.0, 1000.0, 32),), source="t", format="csv", rows=1)
    setup = prepare(inv, trace, BUILTIN["default"], 0.3, seed, mode)
    rep = replay(inv, list(setup.jobs), make_policy(parse_policy("slurm"), inv), 0.3, None,
                 setup.links, seed)
    return setup, rep.outcomes[0]


def test_a_job_across_the_spine_is_stretched_by_hash_collisions(inv):
    """The 32-GPU job spans both leaves: 8 DP rings cross from leaf1 to
    leaf2, one 50 GB/s flow each, onto leaf1's 16 ports (non-blocking).
    Without shared links it runs its 1000 s. Spread ideally over the ports
    (one 800 GB/s link), its 400 GB/s fit; hashed onto them one flow at a
    time, as ECMP does, two land on one port and it runs longer."""
    _, off = _replay(inv, "off")
    _, ideal = _replay(inv, "ideal")
    _, ecmp = _replay(inv, "ecmp")
    assert off.end - off.start == pytest.approx(off.run_base)
    assert ideal.stretch == pytest.approx(1.0)
    assert ecmp.stretch > 1.0 and ecmp.end > ideal.end
    assert ecmp.alone == pytest.approx(ecmp.stretch)  # its own flows: no other job runs
    again = _replay(inv, "ecmp")[1]
    assert (again.end, again.stretch) == (ecmp.end, ecmp.stretch)


def test_effective_slowdown_reverses_the_stretch():
    job = JobSpec(0, TraceJob("x", 0.0, 1000.0, 16), None, None, 0.5)
    s = effective_slowdown(job, 0.6, 0.3, 1.3)
    # run * (1 + f (s_eff - 1)) == run * (1 + f (1.2 - 1)) * 1.3
    assert 1000 * (1 + 0.3 * (s - 1)) == pytest.approx(1000 * (1 + 0.3 * 0.2) * 1.3)
    assert effective_slowdown(job, 0.6, 0.3, 1.0) == pytest.approx(1.2)
    # phi: the share of the stretched run spent communicating
    assert comm_scale(job, 0.5, 0.3, 2.0) == pytest.approx(0.3 / 2.0)
