"""Degradation detection and the health watch (`agent run`): report on change, drain/resume
through a fake ``scontrol`` on PATH."""
from __future__ import annotations

import os

import pytest

from slurmtopo.agent import health
from slurmtopo.agent.watch import Agent
from slurmtopo.agent.smi import smi_discovery
from slurmtopo.inventory.schema import load_inventory

from .conftest import FIXTURES


def kinds(found):
    return [(d.kind, d.detail) for d in found]


# -- health ------------------------------------------------------------------------


def test_healthy_node_has_no_degradation(machine):
    m = machine("dgx_a100")
    a, b = m.discover(), m.discover()
    assert health.degradations(a.node, b.node, b.report) == []


def test_gpu_vanished_from_the_bus(machine):
    """NVML no longer enumerates it: indices shift, the UUID tells which."""
    m = machine("hgx_h100")
    good = m.discover()
    del m.spec["gpus"][2]
    for g in m.spec["gpus"]:
        g["nvlinks"] = {"switch": 18, "switches": 4}
    now = m.discover()
    found = health.degradations(good.node, now.node, now.report)
    assert kinds(found) == [("gpu_missing",
                             "GPU 2 (GPU-b1000000-0000-4000-8000-000000000002) missing")]


def test_lost_gpu_counts_as_missing(machine):
    m = machine("dgx_a100")
    good = m.discover()
    m.spec["gpus"][6]["lost"] = True
    now = m.discover()
    assert kinds(health.degradations(good.node, now.node, now.report)) == [
        ("gpu_missing", "GPU 6 (GPU-a1000000-0000-4000-8000-000000000006) missing")]


def test_nvlink_port_down(machine):
    m = machine("dgx1_v100")
    good = m.discover()
    m.spec["gpus"][0]["nvlinks"][2] = "down"
    now = m.discover()
    found = health.degradations(good.node, now.node, now.report)
    assert ("nvlink_down",
            "GPU 0 (GPU-c1000000-0000-4000-8000-000000000000) NVLink 2 down") in kinds(found)
    assert all(d.kind == "nvlink_down" for d in found)


def test_nvlink_lanes_drop_in_a_matrix_only_source():
    text = (FIXTURES / "smi" / "dgx1_v100.txt").read_text()
    (good,) = smi_discovery(text, "a", node_name="x")
    (now,) = smi_discovery(text.replace("GPU0\t X \tNV1\tNV1\tNV2", "GPU0\t X \tNV1\tNV1\tNV1")
                           .replace("GPU3\tNV2", "GPU3\tNV1")
                           if "\t" in text else _drop(text), "b", node_name="x")
    found = health.degradations(good.node, now.node, now.report)
    assert kinds(found) == [("nvlink_down", "GPU 0-GPU 3 NVLink NV2 -> NV1")]


def _drop(text):
    lines = text.split("\n")
    for k, line in enumerate(lines):
        toks = line.split()
        if toks[:1] == ["GPU0"]:
            lines[k] = line.replace("NV2", "NV1", 1)
        if toks[:1] == ["GPU3"]:
            lines[k] = line.replace("NV2", "NV1", 1)
    return "\n".join(lines)


def test_nic_down_and_missing(machine):
    m = machine("hgx_h100")
    good = m.discover()
    m.spec["nics"][3]["state"] = "1: DOWN"
    del m.spec["nics"][5]
    m.rebuild()
    now = m.discover()
    assert kinds(health.degradations(good.node, now.node, now.report)) == [
        ("nic_down", "NIC mlx5_3 down"), ("nic_down", "NIC mlx5_5 missing")]


def test_a_nic_that_was_down_already_is_no_news(machine):
    m = machine("dgx_a100")  # mlx5_5 is down in the fixture
    a, b = m.discover(), m.discover()
    assert health.degradations(a.node, b.node, b.report) == []


def test_summary_is_short():
    found = [health.Degradation("nic_down", f"NIC mlx5_{i} down") for i in range(40)]
    s = health.summary(found)
    assert len(s) == health.MAX_SUMMARY and s.endswith("...")


# -- daemon ------------------------------------------------------------------------


@pytest.fixture
def agent_for(machine, tmp_path):
    def make(name="l40s_pcie", drain=True, **kw):
        m = machine(name, node_name="gpu07")
        reports = tmp_path / "reports"
        reports.mkdir(exist_ok=True)
        return m, Agent(m.discover, report_dir=str(reports), drain=drain, **kw), reports
    return make


def test_report_written_once_then_only_on_change(agent_for):
    m, agent, reports = agent_for()
    r1 = agent.cycle()
    path = reports / "gpu07.yaml"
    assert r1.changed and path.exists() and (reports / ".gpu07.good.yaml").exists()
    ino, text = os.stat(path).st_ino, path.read_text()
    r2 = agent.cycle()
    assert not r2.changed and os.stat(path).st_ino == ino and path.read_text() == text
    m.spec["nics"][1]["rate"] = "100 Gb/sec (4X EDR)"  # a real change, not a degradation
    m.rebuild()
    r3 = agent.cycle()
    assert r3.changed and not r3.degraded and "rate_gbps: 100.0" in path.read_text()
    inv = load_inventory(str(reports))  # dot files (baseline) are not inventory
    assert list(inv.nodes) == ["gpu07"]


def test_degradation_drains_with_reason_and_resumes_when_healthy(agent_for, scontrol):
    m, agent, reports = agent_for()
    agent.cycle()
    assert scontrol.calls == []  # healthy, never drained: nothing to do
    m.spec["gpus"][5]["lost"] = True
    res = agent.cycle()
    assert res.drained and res.changed
    reason = "slurmtopo: GPU 5 (GPU-e1000000-0000-4000-8000-000000000005) missing"
    assert scontrol.calls == [["update", "NodeName=gpu07", "State=DRAIN", f"Reason={reason}"]]
    text = (reports / "gpu07.yaml").read_text()
    assert "degraded:" in text and "lost_gpus: [5]" in text
    assert (reports / ".gpu07.drained").read_text() == reason + "\n"
    assert not agent.cycle().drained  # same degradation: no second drain
    assert len(scontrol.calls) == 1
    del m.spec["gpus"][5]["lost"]
    res = agent.cycle()
    assert res.resumed and not (reports / ".gpu07.drained").exists()
    assert scontrol.calls[1:] == [["show", "node", "gpu07"],
                                  ["update", "NodeName=gpu07", "State=RESUME"]]
    assert "degraded" not in (reports / "gpu07.yaml").read_text()


def test_each_degradation_kind_drains(agent_for, scontrol):
    for name, change, words in (
            ("dgx1_v100", lambda s: s["gpus"][0].update(nvlinks=["down"] * 6), "NVLink 0,1,2"),
            ("l40s_pcie", lambda s: s["nics"][0].update(state="1: DOWN"), "NIC mlx5_0 down")):
        m, agent, reports = agent_for(name)
        for f in reports.glob(".*"):
            f.unlink()
        agent.cycle()
        change(m.spec)
        m.rebuild()
        assert agent.cycle().drained
        assert words in scontrol.calls[-1][-1]


def test_no_resume_of_a_node_we_did_not_drain(agent_for, scontrol):
    m, agent, reports = agent_for()
    scontrol.set_reason("admin: bad DIMM")
    agent.cycle()
    agent.cycle()
    assert scontrol.calls == []


def test_no_resume_when_an_admin_changed_the_reason(agent_for, scontrol):
    m, agent, reports = agent_for()
    agent.cycle()
    m.spec["nics"][1]["state"] = "1: DOWN"
    m.rebuild()
    assert agent.cycle().drained
    scontrol.set_reason("admin: replacing the HCA")
    m.spec["nics"][1]["state"] = "4: ACTIVE"
    m.rebuild()
    assert not agent.cycle().resumed
    assert scontrol.calls[-1] == ["show", "node", "gpu07"]
    assert not (reports / ".gpu07.drained").exists()


def test_scontrol_failure_is_retried(agent_for, scontrol):
    m, agent, reports = agent_for()
    agent.cycle()
    m.spec["gpus"][0]["lost"] = True
    scontrol.fail()
    assert not agent.cycle().drained and not (reports / ".gpu07.drained").exists()
    scontrol.fail(False)
    assert agent.cycle().drained


def test_without_drain_scontrol_is_never_called(agent_for, scontrol):
    m, agent, reports = agent_for(drain=False)
    agent.cycle()
    m.spec["gpus"][0]["lost"] = True
    res = agent.cycle()
    assert res.degraded and not res.drained and scontrol.calls == []


def test_driver_gone_after_a_good_report_is_every_gpu_missing(agent_for, scontrol):
    m, agent, reports = agent_for("gb200_tray")
    agent.cycle()
    m.spec["init_error"] = "DRIVER_NOT_LOADED"
    res = agent.cycle()
    assert not res.usable and len(res.degraded) == 4 and res.drained
    assert load_inventory(str(reports)).node("gpu07").hardware.gpu_count == 0
    # the baseline is still the good one
    assert load_inventory(str(reports / ".gpu07.good.yaml")).node("gpu07").hardware.gpu_count == 4


def test_gres_conf_kept_up_to_date(agent_for, tmp_path):
    gres = tmp_path / "gres.conf"
    m, agent, reports = agent_for("a100_mig", drain=False, gres_conf=str(gres))
    agent.cycle()
    text = gres.read_text()
    assert "Type=nvidia_a100_3g.20gb" in text and "nvidia-cap13 Cores=0-15\n" in text
    old = tmp_path / "gres-2302.conf"
    m, agent, _ = agent_for("a100_mig", drain=False, gres_conf=str(old),
                            slurm_version=(23, 2, 6))
    agent.cycle()
    assert "nvidia-cap13 Cores=0-15 Links=-1,0,0" in old.read_text()


def test_run_loop_stops(agent_for):
    import threading

    m, agent, reports = agent_for(drain=False)
    stop = threading.Event()
    calls = []
    orig = agent.cycle

    def cycle():
        calls.append(1)
        if len(calls) == 3:
            stop.set()
        return orig()

    agent.cycle = cycle
    agent.run(0.01, stop=stop)
    assert len(calls) == 3
    agent.run(0.01, iterations=2)
    assert len(calls) == 5


def test_new_baseline_accepts_a_replaced_gpu(agent_for, scontrol):
    m, agent, reports = agent_for()
    agent.cycle()
    m.spec["gpus"][2]["uuid"] = "GPU-e1000000-0000-4000-8000-0000000000ff"  # swapped board
    assert agent.cycle().drained
    agent.forget_baseline("gpu07")
    res = agent.cycle()
    assert not res.degraded and res.resumed
    assert "0000000000ff" in (reports / ".gpu07.good.yaml").read_text()


def test_systemd_unit_uses_real_options(capsys):
    from pathlib import Path

    from slurmtopo.cli import main

    unit = (Path(__file__).resolve().parents[2] / "etc" / "slurmtopo-agent.service").read_text()
    assert "ExecStart=/usr/bin/env slurmtopo agent run" in unit
    try:
        main(["agent", "run", "--help"])
    except SystemExit:
        pass
    helptext = capsys.readouterr().out
    import re
    for opt in set(re.findall(r"(--[a-z-]+)", unit.split("ExecStart=")[1].split("Restart=")[0])):
        assert opt in helptext, opt
    assert "--drain" in unit and "WantedBy=multi-user.target" in unit
