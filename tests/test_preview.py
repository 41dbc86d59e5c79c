"""The rich preview renders the grid, the cost table and the warnings."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from slurmtopo import api
from slurmtopo.binding.replan import fill_placement
from slurmtopo.cost import CostReport, GroupCost
from slurmtopo.inventory.links import LinkClass
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.job.groups import Layout
from slurmtopo.show.preview import (cost_sheet, default_color_kind, format_bytes, format_seconds,
                                    grid, render_plan, report_dict)
from slurmtopo.show.tablefit import FittedSheet

EXAMPLES = Path(__file__).resolve().parents[1] / "etc" / "examples"


def _cost_table(plan_cost, naive_cost=None) -> FittedSheet:
    """The cost sheet as rich draws it (what the preview prints)."""
    return FittedSheet(cost_sheet(plan_cost, naive_cost))


def _text(renderable, width=120) -> str:
    c = Console(record=True, width=width, color_system=None)
    c.print(renderable)
    return c.export_text()


@pytest.fixture(scope="module")
def h100():
    return api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))


@pytest.fixture()
def placement(h100):
    return fill_placement(h100, [("gpu01", range(8)), ("gpu03", range(4, 8))],
                          Layout(tp=4, dp=3).resolved())


def _reports():
    plan = CostReport({"tp": GroupCost("tp", 3, 4, "all-reduce", 64 << 20, LinkClass.NVLINK, 2e-4, 0),
                    "dp": GroupCost("dp", 4, 3, "all-reduce", 1 << 30, LinkClass.NET_L1, 0.012, 0)},
                   0.0122, ["TP group 3 crosses PCIe between NUMA nodes"])
    naive = CostReport({"tp": GroupCost("tp", 3, 4, "all-reduce", 64 << 20, LinkClass.SYS, 9e-4, 0),
                     "dp": GroupCost("dp", 4, 3, "all-reduce", 1 << 30, LinkClass.NET_L1, 0.02, 0)},
                    0.0209)
    return plan, naive


def test_grid_shows_ranks_by_node_and_gpu(h100, placement):
    state = ClusterState({"gpu03": NodeState("gpu03", busy_gpus=frozenset({0, 1}))})
    text = _text(grid(placement, h100, state=state))
    assert "GPU0" in text and "GPU7" in text
    lines = {l.split("│")[1].strip(): l for l in text.splitlines() if l.startswith("│")}
    row1 = [c.strip() for c in lines["gpu01"].split("│")[1:-1]]
    assert row1 == ["gpu01", "leaf1"] + [str(r) for r in range(8)]
    row3 = [c.strip() for c in lines["gpu03"].split("│")[1:-1]]
    assert row3 == ["gpu03", "leaf2", "busy", "busy", "·", "·", "8", "9", "10", "11"]
    assert "colour = tp group" in text


def test_grid_colours_by_group(h100, placement):
    c = Console(record=True, width=120, color_system="truecolor", force_terminal=True)
    c.print(grid(placement, h100, color_by="tp"))
    html = c.export_html(inline_styles=True)
    # three tp groups -> three different colours
    assert len({s for s in ("#00ffff", "#ff00ff", "#00ff00") if s in html.lower()}) >= 2


def test_grid_truncates_big_jobs(h100, placement):
    text = _text(grid(placement, h100, max_hosts=1))
    assert "… 1 more" in text


def test_cost_table_plan_vs_naive():
    plan, naive = _reports()
    text = _text(_cost_table(plan, naive))
    assert "NVLink" in text and "PCIe SYS" in text and "net spine" in text
    assert "200 µs" in text and "900 µs" in text and "4.50×" in text
    assert "step" in text and "12.2 ms" in text and "20.9 ms" in text
    assert "naive" in text
    text = _text(_cost_table(plan))
    assert "naive" not in text


def test_render_plan_has_all_parts(h100, placement):
    plan, naive = _reports()
    text = _text(render_plan(placement, h100, Layout(tp=4, dp=3), plan, naive,
                             notes=["something to know"],
                             files={"rank map": "/tmp/x/rankmap.json"}))
    assert "Plan: world 12 = tp4 × dp3" in text
    assert "Rank placement (12 ranks on 2 nodes)" in text
    assert "Modelled communication" in text
    assert "warning: TP group 3 crosses PCIe between NUMA nodes" in text
    assert "note: something to know" in text
    assert "Wrote in /tmp/x: rankmap.json (rank map)" in text


def test_render_plan_with_real_cost_model(h100, placement):
    from slurmtopo.job.request import JobRequest

    req = JobRequest(layout=Layout(tp=4, dp=3))
    rep = api.price(h100, placement, req)
    text = _text(render_plan(placement, h100, req.layout, rep, rep))
    assert "Modelled communication" in text and "tp" in text
    json.dumps(report_dict(rep))


def test_report_dict_is_json():
    plan, _ = _reports()
    d = report_dict(plan)
    assert d["kinds"]["dp"]["slowest"] == "NET_L1"
    assert d["warnings"] == ["TP group 3 crosses PCIe between NUMA nodes"]
    json.dumps(d)
    assert report_dict(None) is None


def test_formatting():
    assert format_seconds(None) == "-" and format_seconds(0) == "0"
    assert format_seconds(1.5) == "1.5 s" and format_seconds(2.5e-3) == "2.5 ms"
    assert format_seconds(3e-6) == "3 µs" and format_seconds(4e-9) == "4 ns"
    assert format_bytes(64 << 20) == "64 MiB" and format_bytes(12) == "12 B"


def test_default_colour_kind(h100):
    p = fill_placement(h100, [("gpu01", range(4))], Layout(tp=1, pp=2, dp=2).resolved())
    assert default_color_kind(p) == "pp"
    p = fill_placement(h100, [("gpu01", range(1))], Layout().resolved())
    assert default_color_kind(p) is None
    assert "cell = global rank" in _text(grid(p, h100))


def test_preview_lists_every_split_and_warns_far_from_the_bound():
    from slurmtopo.cost import lower_bound
    from slurmtopo.plan.choice import plan
    from slurmtopo.job.request import JobRequest
    from slurmtopo.show.preview import render_plan, splits

    inv = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    # two nodes with 4 free GPUs each and one idle: one TP group of 8 fits
    # a node, the other is split 4+4
    busy = frozenset(range(4))
    state = ClusterState(nodes={"gpu01": NodeState("gpu01", busy_gpus=busy),
                                "gpu02": NodeState("gpu02", busy_gpus=busy),
                                "gpu04": NodeState("gpu04", state="allocated",
                                                   exclusive=True)})
    req = JobRequest(Layout(tp=8, dp=2))
    pl = api.plan_job(inv, state, req)
    lines = splits(pl, inv)
    split_tp = [g for g in pl.groups["tp"] if len({pl.slots[r].host for r in g}) > 1]
    assert len(lines) == len(split_tp) == 1
    assert lines[0].startswith(f"tp group {pl.groups['tp'].index(split_tp[0])} split 4+4 over ")
    assert "gpu01" in lines[0] and "gpu02" in lines[0]
    cost = api.price(inv, pl, req)
    bound = lower_bound(inv, req, state=state)
    con = Console(record=True, width=200)
    con.print(render_plan(pl, inv, req.layout, cost, None, state, bound=bound))
    text = con.export_text()
    assert "Groups split over hosts (1)" in text and lines[0] in text
    # far from the bound: warned with the ratio; near it: not
    ratio = cost.step_time_s / bound.step_time_s
    from slurmtopo.show.preview import FAR_FROM_BOUND, bound_warning
    warned = bound_warning(cost, bound)
    assert (warned is not None) == (ratio >= FAR_FROM_BOUND)
    assert bound_warning(cost, lower_bound(inv, req, state=state)) == warned
    idle = lower_bound(inv, req)
    far = type(idle)(kinds={}, step_time_s=cost.step_time_s / 3, counted=())
    assert "3.0x the lower bound on the free GPUs" in bound_warning(cost, far)


def _numbers(text):
    """Every number with its unit in ``text`` ("12.8 ms", "64 MiB", "1.87×", "8×2")."""
    import re
    return re.findall(r"\d+(?:\.\d+)?(?: ?(?:ms|µs|s|MiB|GiB|KiB|B)\b|×\d*)?", text)


@pytest.mark.parametrize("width", [60, 40])
def test_cost_table_keeps_every_number_whole_on_a_narrow_terminal(width):
    """Rich cut the table's cells at 60 columns ("1.2 …"): below the
    table's width every number is printed whole, one block per kind."""
    plan, naive = _reports()
    wide = _text(_cost_table(plan, naive), width=200)
    assert "…" not in wide
    numbers = _numbers(wide)
    assert {"64 MiB", "12 ms", "12.2 ms", "1.67×", "3×4"} <= set(numbers), numbers
    narrow = _text(_cost_table(plan, naive), width=width)
    assert "…" not in narrow
    assert all(len(line.rstrip()) <= width for line in narrow.splitlines()), narrow
    assert sorted(_numbers(" ".join(narrow.split()))) == sorted(numbers), narrow
    # the plan's and the naive time are told apart
    assert "plan time" in narrow and "naive time" in narrow


def test_cost_table_stays_a_table_where_it_fits():
    plan, naive = _reports()
    text = _text(_cost_table(plan, naive), width=80)
    assert "plan time" not in text and "─" in text
    assert " tp 3×4 " in text and "12.2 ms" in text


def test_preview_of_a_real_plan_at_60_columns_cuts_no_number(tmp_path):
    """The whole `slurmtopo plan` preview as a 60-column terminal shows it."""
    from slurmtopo.api import prepare
    from slurmtopo.job.request import JobRequest
    from slurmtopo.show.preview import render_plan

    inv = api.load_cluster(str(EXAMPLES / "a6000-4node-pcie.yaml"))
    req = JobRequest(Layout(tp=2, pp=2, dp=4))
    job = prepare(inv, None, req)
    full = _text(_cost_table(job.costs.plan, job.costs.naive), width=200)
    narrow = _text(render_plan(job.placement, inv, req.layout, job.costs.plan,
                               job.costs.naive), width=60)
    assert "…" not in narrow.split("Groups split")[0], narrow
    for number in _numbers(full):
        assert number in " ".join(narrow.split()), number
    # the grid: a line a node, every rank whole
    rows = [ln.split() for ln in narrow.splitlines() if ln.startswith("ws")]
    assert [r[0] for r in rows] == ["ws1", "ws2", "ws3", "ws4"], narrow
    assert sorted(int(x) for r in rows for x in r[2:] if x.isdigit()) == list(range(16))


@pytest.mark.parametrize("width", [60, 40, 30])
def test_grid_columns_line_up_on_a_narrow_terminal(h100, placement, width):
    """Too narrow for the table: the header and each node's ranks in
    aligned columns (each rank ends where its GPU's header ends), in chunks
    of GPUs that fit, every rank there once."""
    state = ClusterState({"gpu03": NodeState("gpu03", busy_gpus=frozenset({0, 1}))})
    text = _text(grid(placement, h100, state=state), width=width)
    assert "┃" not in text, text
    lines = text.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("node"))
    lines = lines[first:next(i for i, ln in enumerate(lines) if ln.startswith("cell"))]
    seen = []
    ends = None
    for ln in lines:
        assert len(ln) <= width, text
        if ln.startswith("node"):
            ends = {m.end() for m in re.finditer(r"GPU\d+", ln)}
            continue
        cells = list(re.finditer(r"\S+", ln))[2:]  # node, leaf
        assert cells and {m.end() for m in cells} <= ends, text
        seen += [m.group() for m in cells if m.group().isdigit()]
    assert sorted(int(x) for x in seen) == list(range(12))
