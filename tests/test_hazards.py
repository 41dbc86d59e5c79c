"""Pre-launch hazards (slurmtopo/plan/hazards.py, docs/hazards.md): each rule on
placements that have the hazard and on ones that do not, the policy, the
NCCL release, and the paths that run them (plan/sbatch through
api.prepare, the start-time step)."""
from __future__ import annotations

import json
from dataclasses import replace as dc_replace
from pathlib import Path

import pytest

from slurmtopo.binding.replan import fill_placement
from slurmtopo.errors import SlurmtopoError
from slurmtopo.inventory.model import Fabric, Inventory, Node, NvlinkDomain, Switch
from slurmtopo.inventory.presets import preset
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.job.groups import Layout
from slurmtopo.plan.hazards import (CLIQUE_LIMITS, ERROR, KINDS, RULES, WARN, HazardPolicy,
                                    check_hazards, nccl_version, parse_nccl_version)
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml"
DOCS = ROOT / "docs" / "hazards.md"


@pytest.fixture(scope="module")
def h100():
    return load_inventory(H100)


def _p(inv, host_gpus, **layout):
    return fill_placement(inv, host_gpus, Layout(**layout))


def run(argv, capsys=None):
    return run_cli(argv)


def _kinds(report):
    return [(h.kind, h.severity) for h in report.hazards]


def _racks(trays_per_rack: int, racks: int = 2) -> Inventory:
    """GB200 trays (4 GPUs) in ``racks`` NVLink domains (one clique each)."""
    hw = preset("gb200-nvl72-tray")
    nodes = {}
    for r in range(racks):
        dom = NvlinkDomain(f"5b1a2c3d-0000-4000-8000-00000000a00{r}", 1)
        for t in range(trays_per_rack):
            name = f"r{r}t{t:02d}"
            nodes[name] = Node(name, hw, nvlink_domain=dom)
    return Inventory(nodes=nodes, fabric=Fabric())


# --------------------------------------------------------------------------
# the rules


def test_even_placements_have_no_hazard(h100):
    p = _p(h100, [("gpu01", range(8)), ("gpu02", range(8))], tp=8, dp=2)
    assert check_hazards(h100, p).hazards == ()


def test_uneven_ranks_per_node(h100):
    p = _p(h100, [("gpu01", range(8)), ("gpu02", range(4))], tp=4, dp=3)
    report = check_hazards(h100, p)
    assert _kinds(report) == [("uneven-ranks", WARN)]
    line = report.hazards[0].line()
    assert "gpu01: 8, gpu02: 4" in line
    assert "https://github.com/NVIDIA/nccl/issues/2385" in line and "override:" in line
    assert "\n" not in line


def test_trays_of_one_clique_are_one_nccl_node():
    # NCCL fuses the trays of one multi-node NVLink clique into one node:
    # 4+4+2+2 over two trays each of two racks is 8 per rack, even
    inv = _racks(2)
    p = _p(inv, [("r0t00", range(4)), ("r0t01", range(4)), ("r1t00", [0, 1, 2, 3]),
                 ("r1t01", [0, 1, 2, 3])], tp=4, dp=4)
    assert check_hazards(inv, p).hazards == ()
    uneven = _p(inv, [("r0t00", range(4)), ("r0t01", range(4)), ("r1t00", range(4))],
                tp=4, dp=3)
    assert _kinds(check_hazards(inv, uneven)) == [("uneven-ranks", WARN)]
    # without multi-node NVLink (NCCL before 2.20.3) every tray is a node
    assert ("uneven-ranks", WARN) in _kinds(check_hazards(
        inv, _p(inv, [("r0t00", range(4)), ("r0t01", [0, 1])], dp=6), nccl_version="2.19.3"))


def _rail_wired(h100):
    hosts = tuple(h100.nodes)
    rails = tuple(Switch(name=f"rail{r}", nodes=hosts) for r in range(8))
    return dc_replace(h100, fabric=Fabric(switches=rails + (
        Switch(name="spine", switches=tuple(s.name for s in rails)),)))


def test_rail_alignment_on_a_rail_optimised_fabric(h100):
    wired = _rail_wired(h100)
    aligned = _p(wired, [("gpu01", [0, 1]), ("gpu02", [0, 1])], tp=2, dp=2)
    assert check_hazards(wired, aligned).hazards == ()
    # GPUs 0,1 on one host, 2,3 on the other: every DP pair crosses rails
    crossed = _p(wired, [("gpu01", [0, 1]), ("gpu02", [2, 3])], tp=2, dp=2)
    report = check_hazards(wired, crossed)
    assert _kinds(report) == [("rail-alignment", WARN)]
    msg = report.hazards[0].message
    assert "dp group 0 uses rail(s) mlx5_0 on gpu01 but mlx5_2 on gpu02" in msg
    assert "(3 groups in all)" in msg  # dp 0, dp 1 and the tp-dp group of all four
    # the same plan where the inventory cannot tell the rails: nothing said
    assert check_hazards(h100, crossed).hazards == ()


def test_mnnvl_clique_against_the_nccl_release():
    inv = _racks(18, racks=1)
    hosts = [(f"r0t{t:02d}", range(4)) for t in range(18)]          # 72 ranks in one clique
    p = _p(inv, hosts, tp=4, dp=18)
    assert check_hazards(inv, p, nccl_version="2.25.1").hazards == ()
    old = check_hazards(inv, p, nccl_version="2.24.3")
    assert _kinds(old) == [("mnnvl-clique", ERROR)]
    assert "72 of the job's ranks on 18 hosts" in old.hazards[0].message
    assert "NCCL_MAX_LOCAL_RANKS" in old.hazards[0].message
    with pytest.raises(SlurmtopoError, match="refused: hazard mnnvl-clique"):
        old.raise_for_errors()
    # NCCL 2.30: set-up crashes reported from 40 ranks (degraded fabric)
    assert _kinds(check_hazards(inv, p, nccl_version="2.30.4+cuda13.2")) == \
        [("mnnvl-clique", WARN)]
    small = _p(inv, hosts[:9], tp=4, dp=9)                            # 36 ranks
    assert check_hazards(inv, small, nccl_version="2.30.4").hazards == ()
    # before 2.20.3 there is no multi-node NVLink at all
    assert ("mnnvl-clique", WARN) in _kinds(check_hazards(inv, small, nccl_version="2.19.3"))
    # unknown release: a warning naming what could go wrong, and how to say
    unknown = check_hazards(inv, p)
    assert _kinds(unknown) == [("mnnvl-clique", WARN)]
    assert "--nccl-version" in unknown.hazards[0].message


def test_clique_limits_cover_their_releases():
    by = {lim.source.rsplit("/", 1)[-1]: lim for lim in CLIQUE_LIMITS}
    local = next(lim for lim in CLIQUE_LIMITS if lim.severity == ERROR)
    assert local.covers((2, 20, 3)) and local.covers((2, 24, 3)) and local.covers((2, 24))
    assert not local.covers((2, 25, 1)) and not local.covers((2, 20, 2))
    assert "2186" in by


def test_group_over_domains_when_one_would_hold_it(h100):
    # a TP group of 4 over two hosts of 8 GPUs: one host holds it
    spread = _p(h100, [("gpu01", [0, 1]), ("gpu02", [0, 1])], tp=4)
    report = check_hazards(h100, spread)
    assert ("group-domain", WARN) in _kinds(report)
    assert "tp group 0 (4 ranks) spans 2 hosts" in report.hazards[-1].message
    # TP 16 cannot fit one 8-GPU host: nothing to say
    big = _p(h100, [("gpu01", range(8)), ("gpu02", range(8))], tp=16)
    assert check_hazards(h100, big).hazards == ()
    # an EP group of 8 over two racks when a rack has 72 GPUs
    inv = _racks(18)
    ep = _p(inv, [("r0t00", range(4)), ("r1t00", range(4))], ep=8, dp=8)
    found = [h for h in check_hazards(inv, ep).hazards if h.kind == "group-domain"]
    assert found and "ep group 0 (8 ranks) spans 2 NVLink racks" in found[0].message


# --------------------------------------------------------------------------
# policy and versions


def test_policy_sets_severity_per_kind(h100):
    p = _p(h100, [("gpu01", range(8)), ("gpu02", range(4))], tp=4, dp=3)
    assert _kinds(check_hazards(h100, p, policy=HazardPolicy.parse(["uneven-ranks=error"]))) \
        == [("uneven-ranks", ERROR)]
    assert check_hazards(h100, p, policy=HazardPolicy.parse(["uneven-ranks=off"])).hazards == ()
    assert check_hazards(h100, p, policy=HazardPolicy.parse(["all=off"])).hazards == ()
    # later items win
    assert _kinds(check_hazards(h100, p, policy=HazardPolicy.parse(
        ["all=off", "uneven-ranks=warning"]))) == [("uneven-ranks", WARN)]


@pytest.mark.parametrize("item", ["uneven", "uneven-ranks", "uneven-ranks=maybe", "x=off", ""])
def test_bad_policy_is_one_line(item):
    with pytest.raises(SlurmtopoError) as exc:
        HazardPolicy.parse([item])
    assert "KIND=error|warn|off" in exc.value.render() and "\n" not in exc.value.render()


def test_nccl_version_sources():
    assert parse_nccl_version("2.27.5-1") == (2, 27, 5)
    assert parse_nccl_version("v2.21") == (2, 21, 0)
    assert parse_nccl_version("2.30.4+cuda13.2") == (2, 30, 4)
    with pytest.raises(SlurmtopoError, match="not an NCCL version"):
        parse_nccl_version("latest")
    assert nccl_version("2.27.5", {"NCCL_VERSION": "2.21.5"}) == "2.27.5"
    assert nccl_version(None, {"NCCL_VERSION": "2.21.5"}) == "2.21.5"
    assert nccl_version(None, {"NCCL_VERSION": "garbage"}) is None  # not the user's typing
    inv = Inventory(nodes={}, fabric=Fabric(), cost={"nccl_version": "2.28.9"})
    assert nccl_version(None, {}, inv) == "2.28.9"
    with pytest.raises(SlurmtopoError):
        nccl_version("x.y", {})


def test_every_rule_is_documented_with_its_sources_and_override():
    text = DOCS.read_text()
    for kind in KINDS:
        rule = RULES[kind]
        assert f"`{kind}`" in text, kind
        for src in rule.sources:
            assert src in text, (kind, src)
        assert f"--hazard {kind}=" in text
    for lim in CLIQUE_LIMITS:
        assert lim.source in text


# --------------------------------------------------------------------------
# through plan and sbatch


def _state(tmp_path, text):
    path = tmp_path / "state.yaml"
    path.write_text("slurmtopo: state\nversion: 1\nnodes:\n" + text)
    return str(path)


def test_plan_warns_and_a_policy_refuses(tmp_path, capsys):
    # gpu01 has 4 free GPUs and gpu02 8: world 12 lands 8+4
    state = _state(tmp_path, "  - {name: gpu01, busy_gpus: \"0-3\"}\n"
                             "  - {name: 'gpu[03-04]', state: allocated}\n")
    args = ["plan", "--inventory", str(H100), "--state", state, "--world", "12", "--json"]
    code, out, err = run(args + ["--output-dir", str(tmp_path / "a")], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert any(n.startswith("hazard uneven-ranks (warning): ranks per node differ")
               for n in doc["notes"])
    (h,) = doc["hazards"]
    assert (h["kind"], h["severity"], h["source"]) == \
        ("uneven-ranks", "warn", "https://github.com/NVIDIA/nccl/issues/2385")
    assert h["override"].startswith("--gpus-per-node K")
    code, out, err = run(args + ["--output-dir", str(tmp_path / "b"), "--hazard",
                                 "uneven-ranks=error"], capsys)
    assert code == 2 and out == ""
    assert err.startswith("slurmtopo: error: refused: hazard uneven-ranks (error)")
    assert not (tmp_path / "b").exists()   # nothing written


def test_site_policy_from_the_environment(tmp_path, capsys, monkeypatch):
    state = _state(tmp_path, "  - {name: gpu01, busy_gpus: \"0-3\"}\n"
                             "  - {name: 'gpu[03-04]', state: allocated}\n")
    monkeypatch.setenv("SLURMTOPO_HAZARDS", "uneven-ranks=error")
    args = ["sbatch", "--inventory", str(H100), "--state", state, "--world", "12",
            "--dry-run", "--", "true"]
    code, out, err = run(args, capsys)
    assert code == 2 and "refused: hazard uneven-ranks" in err
    # the user's option wins over the site's
    code, out, err = run(args[:-2] + ["--hazard", "uneven-ranks=warn", "--", "true"], capsys)
    assert code == 0, err
    assert "hazard uneven-ranks (warning)" in err
    plan = json.loads(out.split("<<'SLURMTOPO_PLAN_JSON'\n")[1].split("\nSLURMTOPO_PLAN_JSON")[0])
    assert plan["guardrails"] == {"hazards": ["uneven-ranks=warn"]}
    monkeypatch.setenv("SLURMTOPO_HAZARDS", "bogus")
    code, out, err = run(args, capsys)
    assert code == 2 and "SLURMTOPO_HAZARDS 'bogus'" in err


def test_plans_without_guardrails_carry_none(tmp_path, capsys):
    code, out, err = run(["sbatch", "--inventory", str(H100), "--tp", "8", "--state", "none",
                          "--dry-run", "--", "true"], capsys)
    assert code == 0, err
    assert '"guardrails"' not in out
    code, out, err = run(["sbatch", "--inventory", str(H100), "--tp", "8", "--state", "none",
                          "--nccl-version", "2.27.5", "--dry-run", "--", "true"], capsys)
    assert '"guardrails": {"nccl_version": "2.27.5"}' in out
    code, out, err = run(["sbatch", "--inventory", str(H100), "--tp", "8", "--state", "none",
                          "--nccl-version", "two", "--dry-run", "--", "true"], capsys)
    assert code == 2 and "--nccl-version 'two' is not an NCCL version" in err


def test_start_time_step_logs_the_hazards_of_a_replan(h100):
    from slurmtopo.binding.step import start_hazards

    doc = {"guardrails": {"hazards": ["uneven-ranks=error"]}}
    p = _p(h100, [("gpu01", range(8)), ("gpu02", range(4))], tp=4, dp=3)
    lines = start_hazards(doc, {}, h100, p)
    assert len(lines) == 1 and lines[0].startswith("hazard uneven-ranks (error)")
    assert start_hazards({}, {}, h100, _p(h100, [("gpu01", range(8))], tp=8)) == []
    bad = start_hazards({"guardrails": {"hazards": ["nope"]}}, {}, h100, p)
    assert bad[0].startswith("hazards not checked:")
