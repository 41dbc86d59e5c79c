"""Collecting node reports from a shared directory, stale reports, and the
bounded parallel runner the SSH collector uses."""
from __future__ import annotations

import os
import threading
import time

from slurmtopo.admin.collect import (Fetched, FetchError, _finish, check_report, collect_dir,
                                     run_bounded)
from slurmtopo.inventory.schema import load_inventory

from .conftest import node, run_main, write_reports


def test_collect_dir_copies_good_reports_and_keeps_stale_ones(tmp_path, capsys):
    src, dest = tmp_path / "agents", tmp_path / "reports"
    write_reports(src, [node("gpu001"), node("gpu002"), node("gpu003")])
    results = collect_dir(str(src), str(dest), ["gpu001", "gpu002", "gpu003"])
    assert all(r.ok for r in results)
    assert sorted(os.listdir(dest)) == ["gpu001.yaml", "gpu002.yaml", "gpu003.yaml"]
    # next round: gpu002 is gone, gpu003 wrote garbage, gpu001 is too old
    (src / "gpu002.yaml").unlink()
    (src / "gpu003.yaml").write_text("slurmtopo: node-report\nnodes: [oops\n")
    old = time.time() - 7200
    os.utime(src / "gpu001.yaml", (old, old))
    results = {r.node: r for r in collect_dir(str(src), str(dest),
                                              ["gpu001", "gpu002", "gpu003", "gpu004"],
                                              max_age=3600)}
    assert "older than 1.0 h" in results["gpu001"].error
    assert results["gpu002"].error.startswith("no report in")
    assert "invalid report" in results["gpu003"].error and "gpu003.yaml:3" in results["gpu003"].error
    assert [results[n].stale_kept for n in ("gpu001", "gpu002", "gpu003", "gpu004")] == \
        [True, True, True, False]
    inv = load_inventory(str(dest))  # the kept reports still load, flagged stale
    assert sorted(inv.nodes) == ["gpu001", "gpu002", "gpu003"]
    rep = inv.reports["gpu002"]
    assert rep["stale"] is True and rep["stale_reason"].startswith("no report in")
    assert rep["source"] == "test" and "stale_since" in rep


def test_collect_in_place_keeps_age_and_remembers_staleness(tmp_path):
    shared = tmp_path / "shared"
    write_reports(shared, [node("gpu001"), node("gpu002")])
    old = time.time() - 7200
    os.utime(shared / "gpu001.yaml", (old, old))
    results = collect_dir(str(shared), str(shared), max_age=3600)
    assert [(r.node, r.ok, r.stale_kept) for r in results] == [("gpu001", False, True),
                                                              ("gpu002", True, False)]
    assert abs(os.path.getmtime(shared / "gpu001.yaml") - old) < 1  # marking kept its age
    again = {r.node: r for r in collect_dir(str(shared), str(shared))}
    assert not again["gpu001"].ok and again["gpu001"].error.startswith("still stale: report")
    assert again["gpu002"].ok


def test_collect_cli_from_dir(tmp_path, capsys):
    src, dest = tmp_path / "agents", tmp_path / "reports"
    write_reports(src, [node("gpu001"), node("gpu002")])
    rc, _, err = run_main(["collect", "--from-dir", str(src), "-o", str(dest)], capsys)
    assert rc == 0 and "collected 2/2 report(s)" in err
    rc, _, err = run_main(["collect", "--from-dir", str(src), "-o", str(dest),
                           "--nodes", "gpu[001-003]"], capsys)
    assert rc == 1
    assert "gpu003: no report in" in err and "(no report kept)" in err
    assert err.splitlines()[-1] == ("slurmtopo: error: 1 of 3 node(s) failed (0 with a stale "
                                    "report kept)")
    rc, _, err = run_main(["collect", "-o", str(dest)], capsys)
    assert rc == 2 and "--nodes is required" in err


def test_report_must_be_for_the_node():
    text = (write_reports.__globals__["node_report"])(node("gpu007"), {"source": "x"})
    assert check_report(text, "gpu007", "s") == ("gpu007", {"source": "x"})
    assert check_report(text, "gpu007.cluster", "s")[0] == "gpu007"
    for bad, words in ((text, "not 'gpu008'"), ("", "empty output"),
                       ("slurmtopo: inventory\nnodes: []\n", "not a node report")):
        try:
            check_report(bad, "gpu008", "s")
        except FetchError as exc:
            assert words in str(exc)
        else:
            raise AssertionError("accepted")


def test_degraded_agent_report_is_kept_with_a_note(tmp_path):
    text = (write_reports.__globals__["node_report"])(node("gpu001"), {"source": "x"})
    res = _finish(str(tmp_path), "gpu001", Fetched(text, 1, "GPU 3 lost"), None, 0.1)
    assert res.ok and res.note == "agent exited with status 1: GPU 3 lost"
    res = _finish(str(tmp_path), "gpu002", Fetched("garbage: [", 1, ""), None, 0.1)
    assert not res.ok and res.error.startswith("agent exited with status 1; invalid report")


def test_run_bounded_limits_concurrency_and_gives_up_on_hung_nodes():
    active, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def fetch(n):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            if n == "hung":
                release.wait(5)
                return "late"
            time.sleep(0.05)
            if n == "bad":
                raise FetchError("boom")
            return f"report of {n}"
        finally:
            with lock:
                active[0] -= 1

    got = {}
    nodes = ["hung"] + [f"n{i}" for i in range(12)] + ["bad"]
    run_bounded(nodes, fetch, workers=3, limit=0.6,
                on_result=lambda n, text, err, s: got.setdefault(n, (text, err)))
    release.set()
    assert peak[0] <= 3
    assert got["hung"] == (None, "no answer within 0.6 s")
    assert got["bad"] == (None, "boom")
    assert got["n5"] == ("report of n5", None)
    assert len(got) == len(nodes)


def test_ssh_collection_without_paramiko_names_the_extra(monkeypatch):
    """paramiko is the `collect` extra: without it, the SSH collector says
    which extra to install instead of an ImportError traceback."""
    import sys

    import pytest
    from slurmtopo.admin.collect import SshFetcher
    from slurmtopo.errors import InventoryError

    monkeypatch.setitem(sys.modules, "paramiko", None)  # `import paramiko` fails
    with pytest.raises(InventoryError, match=r"slurmtopo\[collect\]"):
        SshFetcher(command="slurmtopo agent discover")
