"""``slurmtopo audit``: spans against the fewest, modelled cost, stranded
GPUs, on states built from fixtures; the sacct path on a sacct -P record."""
from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurmtopo.audit.history import replay, split
from slurmtopo.audit.placements import Auditor, RunningJob, with_jobs, without
from slurmtopo.audit.run import audit_now
from slurmtopo.audit.spans import spans
from slurmtopo.audit.stranded import stranded
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.simulate.layouts import BUILTIN
from slurmtopo.simulate.trace_read import read_trace
from tests.clirun import one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[2]
INV = str(ROOT / "etc" / "examples" / "devcluster.yaml")
STATE = str(ROOT / "etc" / "examples" / "devcluster-jobs-state.yaml")
SACCT = str(ROOT / "etc" / "examples" / "traces" / "devcluster-sacct.txt")


@pytest.fixture(scope="module")
def inv():
    return load_inventory(INV)


@pytest.fixture(scope="module")
def auditor(inv):
    return Auditor(inv, BUILTIN["default"])


def job(job_id, *hosts, gpus=tuple(range(8))):
    return RunningJob(job_id=job_id, alloc={h: tuple(gpus) for h in hosts})


def test_a_job_across_leaves_that_one_leaf_could_hold_is_reported(inv, auditor):
    # node1 (leaf1) and node3 (leaf2); node3 and node4 were free under leaf2
    now = audit_now(inv, ClusterState(), [job("1", "node1", "node3")], auditor)
    (a,) = now.audits
    assert (a.today.leaves, a.fewest.leaves) == (2, 1)
    assert a.slurmtopo.leaves == 1
    assert not a.optimal
    assert a.today.nodes == a.fewest.nodes == 2


def test_the_same_job_is_optimal_when_the_other_leaf_is_busy(inv, auditor):
    # node2 and node4 half busy: no leaf has two free nodes, two leaves is the fewest
    state = ClusterState({n: NodeState(n, "mixed", frozenset({0, 1, 2, 3}))
                          for n in ("node2", "node4")})
    (a,) = audit_now(inv, state, [job("1", "node1", "node3")], auditor).audits
    assert (a.today.leaves, a.fewest.leaves) == (2, 2)
    assert a.optimal


def test_a_job_under_one_leaf_is_optimal(inv, auditor):
    (a,) = audit_now(inv, ClusterState(), [job("1", "node1", "node2")], auditor).audits
    assert a.today == a.fewest
    assert a.today.leaves == 1
    assert a.optimal and a.slowdown == pytest.approx(1.0)


def test_the_job_is_planned_on_the_cluster_without_it(inv, auditor):
    # every other node busy: its own nodes are all it could have had
    busy = {n: NodeState(n, "allocated", frozenset(range(8))) for n in ("node2", "node4")}
    (a,) = audit_now(inv, ClusterState(busy), [job("9", "node1", "node3")], auditor).audits
    assert a.slurmtopo is not None and a.fewest.leaves == 2 and a.optimal


def test_freeing_a_job_keeps_the_other_jobs_gpus_busy():
    state = ClusterState({"n1": NodeState("n1", "allocated", frozenset(range(8)), exclusive=True)})
    out = without(state, {"n1": (0, 1, 2, 3)})
    assert out.nodes["n1"].busy_gpus == frozenset({4, 5, 6, 7})
    assert out.nodes["n1"].state == "mixed" and not out.nodes["n1"].exclusive
    assert without(state, {"n1": tuple(range(8))}).nodes["n1"].state == "idle"
    draining = ClusterState({"n1": NodeState("n1", "mixed", frozenset({0}),
                                             flags=frozenset({"drain"}))})
    assert without(draining, {"n1": (0,)}).nodes["n1"].usable
    back = with_jobs(ClusterState(), [job("1", "n1", gpus=(2,))])
    assert back.nodes["n1"].busy_gpus == frozenset({2})


def test_today_is_priced_against_slurmtopo_on_an_oversubscribed_spine(inv, auditor):
    # the spine carries a quarter of a leaf's bandwidth: across the leaves
    # the data-parallel all-reduce is slower, and the audit says how much
    over = replace(inv, cost={"oversubscription": {"NET_L1": 4}})
    a = Auditor(over, BUILTIN["dp"]).audit(job("1", "node1", "node3"), ClusterState())
    assert a.step_today_s > a.step_slurmtopo_s
    assert a.slowdown > 1.0
    same = Auditor(over, BUILTIN["dp"]).audit(job("2", "node1", "node2"), ClusterState())
    assert same.slowdown == pytest.approx(1.0)


def test_blocks_and_nvlink_domains_over_the_fewest():
    # two NVL racks (blocks rack1 = node[1-2], rack2 = node[3-4]) under one leaf
    nvl = load_inventory(str(ROOT / "tests" / "fixtures" / "slurm" /
                             "devcluster-nvl-inventory.yaml"))
    assert spans(nvl, ["node1", "node2", "node3"]) == spans(nvl, ["node3", "node1", "node2"])
    s = spans(nvl, ["node1", "node2", "node3"])
    assert (s.nodes, s.leaves, s.blocks, s.domains) == (3, 1, 2, 2)
    now = audit_now(nvl, ClusterState(), [job("5", "node2", "node3", gpus=range(4))],
                    Auditor(nvl, BUILTIN["default"]))
    (a,) = now.audits
    assert (a.today.blocks, a.fewest.blocks) == (2, 1)
    assert (a.today.domains, a.fewest.domains) == (2, 1)
    assert a.today.leaves == a.fewest.leaves == 1
    assert not a.optimal
    # the job's racks are half busy, the leaf too: its free GPUs are
    # stranded by domain (node1 and node4: 8 GPUs)
    dom = {g.name: g for g in now.stranded.by_domain}
    assert sorted((g.gpus, g.free, g.stranded) for g in dom.values()) == [(8, 4, 4), (8, 4, 4)]
    assert now.stranded.stranded == 8 and now.stranded.in_islands == 0


def test_stranded_by_leaf(inv):
    # GPU 5 of node2 alone in its NVLink pair (4-5) under a busy leaf
    state = ClusterState({"node2": NodeState("node2", "mixed", frozenset({0, 1, 2, 3, 4}))})
    st = stranded(inv, state)
    assert st.stranded == 1 and st.free == 27
    by = {g.name: g for g in st.by_leaf}
    assert (by["leaf1"].free, by["leaf1"].stranded) == (11, 1)
    assert by["leaf2"].stranded == 0
    # a drained node's GPUs are not free, so not stranded either
    drained = dict(state.nodes, node1=NodeState("node1", "idle", flags=frozenset({"drain"})))
    st = stranded(inv, ClusterState(drained))
    assert st.free == 19 and st.stranded == 1


def test_cli_state_file(inv):
    code, out, err = run_cli(["audit", "--inventory", INV, "--state", STATE, "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["slurmtopo"] == "audit"
    (j,) = doc["jobs"]
    assert (j["job"], j["nodes"], j["gpus"]) == ("101", "node[1,3]", 16)
    assert j["spans"]["leaves"] == 2 and j["fewest"]["leaves"] == 1
    assert j["extra"]["leaves"] == 1 and j["optimal"] is False
    assert doc["not_audited"] == {"on one node": 1}
    assert doc["stranded"]["stranded"] == 1
    assert doc["summary"]["over_fewest"]["leaves"] == 1
    again = run_cli(["audit", "--inventory", INV, "--state", STATE, "--json"])[1]
    assert again == out


def test_cli_table_fits_a_narrow_terminal():
    from rich.console import Console

    from slurmtopo.audit.report import job_table, stranded_table

    doc = json.loads(run_cli(["audit", "--inventory", INV, "--state", STATE, "--json"])[1])
    for width in (40, 132):
        buf = io.StringIO()
        console = Console(file=buf, width=width, soft_wrap=False)
        console.print(job_table(doc))
        console.print(stranded_table(doc))
        text = buf.getvalue()
        assert "…" not in text
        assert all(len(line) <= width for line in text.splitlines())
        today = doc["jobs"][0]["step_s"]["today"]
        assert "2/1 !" in text and f"{today * 1e3:.1f} ms" in text


def test_cli_table(tmp_path):
    code, out, err = run_cli(["audit", "--inventory", INV, "--state", STATE])
    assert code == 0, err
    assert "2/1 !" in out
    assert "0 of 1 job spans no more than they could have; 1 over the fewest leaves" in out


@pytest.mark.parametrize("body, where, what", [
    ("jobs:\n  - {id: '1', nodes: node9, gpus: '0-7'}\n", ":3", "'node9' is not in the inventory"),
    ("jobs:\n  - {id: '1', nodes: node1, gpus: '0-9'}\n", ":3", "has 8 GPUs"),
    ("jobs:\n  - {id: '1', nodes: node1, gpus: '0-3'}\n  - {id: '2', nodes: node1, gpus: '3'}\n",
     ":4", "both hold GPU 3"),
    ("jobs:\n  - {id: '1', nodes: node1, gpus: '0-3'}\n  - {id: '1', nodes: node2, gpus: '0'}\n",
     ":4", "listed twice"),
    ("jobs:\n  - {id: '1', nodes: 'node[1-2]', gpus: {node1: '0'}}\n", ":3", "none for node"),
    ("jobs:\n  - {id: '1', nodes: node1, gpus: '0', colour: red}\n", ":3", "unknown key"),
    ("jobs: 3\n", ":2", "must be a list"),
])
def test_bad_state_jobs_are_one_line_at_file_line(tmp_path, body, where, what):
    path = tmp_path / "state.yaml"
    path.write_text("slurmtopo: state\n" + body)  # the body starts on line 2
    code, out, err = run_cli(["audit", "--inventory", INV, "--state", str(path)])
    one_line_error(code, err, f"state.yaml{where}", what)
    assert out == ""


@pytest.mark.parametrize("argv, what", [
    (["--sacct"], "--sacct needs --starttime"),
    (["--starttime", "2025-01-01"], "--starttime goes with --sacct"),
    (["--sacct-file", SACCT, "--state", STATE], "exclude each other"),
])
def test_bad_options(argv, what):
    code, _out, err = run_cli(["audit", "--inventory", INV] + argv)
    one_line_error(code, err, what)


# --------------------------------------------------------------------------
# a past period, from sacct -P


def test_split_gpus_over_nodes():
    assert split(16, 2) == [8, 8]
    assert split(10, 4) == [3, 3, 2, 2]


def test_sacct_record_replayed(inv, auditor):
    trace = read_trace(SACCT, "sacct", keep_running=True)
    hist = replay(inv, trace, auditor)
    by = {a.job.job_id: a for a in hist.audits}
    # 202 on node2 (leaf1) and node3 (leaf2) while only node1 was busy:
    # node3 and node4 under leaf2 were free
    assert sorted(by) == ["202", "203"]
    assert (by["202"].today.leaves, by["202"].fewest.leaves) == (2, 1)
    assert not by["202"].optimal
    # 203 on node[3-4], one leaf: optimal
    assert by["203"].optimal and by["203"].today.leaves == 1
    assert by["202"].job.start == pytest.approx(1740992700.0)  # 2025-03-03T09:05:00Z
    assert hist.single_node == 3  # 201, 206 and 204 (still running)
    assert hist.running == 1
    reasons = {s.reason: s.count for s in hist.skipped}
    assert reasons["on nodes not in the inventory"] == 1
    assert "still running" not in reasons
    # 206 took GPUs 0-2 of node4 from 09:10 to 09:40 while node3 (leaf2)
    # was busy: GPU 3 alone in its pair for 30 of the record's 150 minutes
    assert hist.stranded_peak == 1
    assert hist.stranded_mean == pytest.approx(30 / 150)


def test_sacct_overlapping_record_is_counted_not_audited(inv, auditor, tmp_path):
    text = Path(SACCT).read_text().replace(
        "202|2025-03-03T09:04:00|2025-03-03T09:05:00|2025-03-03T10:00:00|"
        "billing=32,cpu=32,gres/gpu=16,mem=128G,node=2|node[2-3]",
        "202|2025-03-03T09:04:00|2025-03-03T09:05:00|2025-03-03T10:00:00|"
        "billing=32,cpu=32,gres/gpu=16,mem=128G,node=2|node[1,3]")
    path = tmp_path / "sacct.txt"
    path.write_text(text)
    hist = replay(inv, read_trace(str(path), "sacct", keep_running=True), auditor)
    assert [a.job.job_id for a in hist.audits] == ["203"]
    assert any(s.reason.startswith("whose GPUs other jobs") for s in hist.skipped)


def test_cli_sacct_file():
    code, out, err = run_cli(["audit", "--inventory", INV, "--sacct-file", SACCT, "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert [j["job"] for j in doc["jobs"]] == ["202", "203"]
    assert doc["jobs"][0]["start"] == "2025-03-03T09:05:00+00:00"
    assert doc["period"]["stranded_gpus_peak"] == 1
    assert doc["period"]["running_at_end"] == 1
    assert "stranded" not in doc
    code, text, err = run_cli(["audit", "--inventory", INV, "--sacct-file", SACCT])
    assert code == 0 and "stranded GPUs over 2.5 h: mean 0.2, peak 1" in text
    assert "1 still running at the end of the record" in text


def test_cli_sacct_file_not_sacct(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("a,b,c\n1,2,3\n")
    code, _out, err = run_cli(["audit", "--inventory", INV, "--sacct-file", str(path)])
    one_line_error(code, err, "x.txt")


@pytest.mark.parametrize("entry, what", [
    ("{id: '1;reboot', nodes: node1, gpus: '0'}", "not a Slurm job id"),
    ("{id: '1', nodes: node1, gpus: '0', start: .inf}", "a finite number"),
    ("{id: '1', nodes: node1, gpus: '0', start: 1e300}", "not seconds since the epoch"),
])
def test_bad_job_fields(tmp_path, entry, what):
    path = tmp_path / "state.yaml"
    path.write_text(f"slurmtopo: state\njobs:\n  - {entry}\n")
    code, _out, err = run_cli(["audit", "--inventory", INV, "--state", str(path)])
    one_line_error(code, err, "state.yaml:3", what)


def test_a_job_slurmtopo_cannot_place_is_said_so(inv, auditor):
    # a job on GPUs 0-3 of node1 and node3, other jobs on their GPUs 4-7,
    # node2 and node4 down: without it, its own GPUs are all it could have had
    state = ClusterState({
        "node1": NodeState("node1", "mixed", frozenset(range(8))),
        "node3": NodeState("node3", "mixed", frozenset(range(8))),
        "node2": NodeState("node2", "down"), "node4": NodeState("node4", "down")})
    a = auditor.audit(job("3", "node1", "node3", gpus=(0, 1, 2, 3)),
                      without(state, {"node1": (0, 1, 2, 3), "node3": (0, 1, 2, 3)}))
    assert a.slurmtopo is not None and a.optimal
    # the same with its GPUs still busy (a state that lies): said, not hidden
    b = auditor.audit(job("3", "node1", "node3", gpus=(0, 1, 2, 3)), state)
    assert b.slurmtopo is None and b.step_slurmtopo_s is None and b.slowdown is None
    assert "cannot place it" in b.note and b.fewest == b.today


def test_a_job_still_running_holds_its_gpus_to_the_end_of_the_record(inv, auditor, tmp_path):
    # 204 runs on node2 from 10:41 with no end; 208 starts at 11:40 on
    # node[1-2] asking 16 GPUs: node2's are still 204's
    path = tmp_path / "sacct.txt"
    path.write_text(Path(SACCT).read_text() + "208|2025-03-03T11:39:00|2025-03-03T11:40:00|"
                    "2025-03-03T12:00:00|gres/gpu=16,node=2|node[1-2]|2|01:00:00|COMPLETED\n")
    hist = replay(inv, read_trace(str(path), "sacct", keep_running=True), auditor)
    assert "208" not in {a.job.job_id for a in hist.audits}
    assert any(s.reason.startswith("whose GPUs other jobs") for s in hist.skipped)
    # read as simulate reads it, 204 is skipped, and 208 finds node2 free
    hist = replay(inv, read_trace(str(path), "sacct"), auditor)
    assert "208" in {a.job.job_id for a in hist.audits}


def test_what_a_record_names_reaches_the_terminal_escaped(tmp_path):
    # a saved sacct file is anyone's: a job id with a terminal escape
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|Submit|Start|End|AllocTRES|NodeList\n"
                    "7\x1b[2J|2025-01-01T00:00:00|2025-01-01T00:00:00|2025-01-01T01:00:00|"
                    "gres/gpu=16,node=2|node[1-2]\n"
                    "8|2025-01-01T00:00:00|2025-01-01T00:00:00|2025-01-01T01:00:00|"
                    "gres/gpu=16,node=2|node[8-9]\n")
    code, out, err = run_cli(["audit", "--inventory", INV, "--sacct-file", str(path)])
    assert code == 0, err
    assert "\x1b" not in out and "7\\x1b[2J" in out


def test_cli_sacct_file_hostlists_are_never_expanded(tmp_path):
    """500 rows of `n[k-k+65535]` (48 KB) took 186 s and 303 MB: every
    NodeList was expanded to 65,536 names. They are now compared with the
    inventory's nodes, never expanded: the jobs that ran outside the
    inventory are skipped as before, and a job of the inventory's nodes
    mixed with 65,000 others is one that ran elsewhere too."""
    from tests.clirun import run_cli_subprocess

    head = "JobID|Submit|Start|End|AllocTRES|NodeList|NNodes|Timelimit|State"
    row = ("{k}|2025-03-03T09:00:00|2025-03-03T09:05:00|2025-03-03T10:00:00|"
           "billing=16,cpu=16,gres/gpu=16,node=2|{nodes}|2|01:00:00|COMPLETED")
    rows = [row.format(k=k + 1, nodes=f"n[{k}-{k + 65535}]") for k in range(500)]
    rows.append(row.format(k=900, nodes="node[1-2],x[0-65000]"))
    rows.append(row.format(k=901, nodes="node[1-2]"))
    path = tmp_path / "sacct.txt"
    path.write_text("\n".join([head] + rows) + "\n")
    code, out, err = run_cli_subprocess(["audit", "--inventory", INV, "--sacct-file",
                                         str(path), "--json"], memory_bytes=1 << 30,
                                        timeout=30)
    assert code == 0, err
    doc = json.loads(out)
    assert [j["job"] for j in doc["jobs"]] == ["901"]
    assert '"rows": 501' in json.dumps(doc) and "on nodes not in the inventory" in out
