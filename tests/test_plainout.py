"""The preview without rich (slurmtopo.show.plainout) is byte for byte what rich
prints into a file or a pipe: every bundled example, several layouts, wide
and narrow widths, warnings, notes, long and unsafe host names."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from slurmtopo import api
from slurmtopo.binding.replan import fill_placement
from slurmtopo.inventory.model import ClusterState, NodeState
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.show import plainout
from slurmtopo.show.preview import plan_parts
from slurmtopo.show.sheet import Column, Sheet, line
from slurmtopo.show.tablefit import print_parts
from slurmtopo.show.termsafe import printable

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "etc" / "examples"
INVENTORIES = sorted(p for p in EXAMPLES.glob("*.yaml")
                     if "state" not in p.name and "jobs" not in p.name)
WIDTHS = (200, 132, 80, 61, 40, 23, 12)
#: a note that wraps, holds rich markup, a control sequence and a long word
NOTE = ("a note with a [bold]tag[/bold], :smile: and \x1b]0;title\x07 in it, then "
        + "x" * 150 + " and more words after the long one")


def _rich(parts, width: int) -> str:
    buf = io.StringIO()
    print_parts(Console(file=buf, width=width, soft_wrap=False, color_system=None), parts)
    return buf.getvalue()


def _layouts(inv):
    gpus = sum(n.hardware.gpu_count for n in inv)
    per = max(n.hardware.gpu_count for n in inv)
    tp = min(per, 8)
    return [Layout(tp=tp, dp=max(1, min(gpus, 64) // tp)),
            Layout(tp=2, pp=2, dp=max(1, min(gpus, 32) // 4))]


def _cases():
    for path in INVENTORIES:
        inv = api.load_cluster(str(path))
        for lay in _layouts(inv):
            job = api.prepare(inv, None, JobRequest(lay))
            yield path.name, plan_parts(
                job.placement, inv, lay, job.costs.plan, job.costs.naive, None, None, [NOTE],
                job.script, {"rank map": "/tmp/run/rankmap.json", "CSV": "/tmp/run/rankmap.csv"},
                bound=job.costs.bound, idle_bound=job.costs.idle_bound)


CASES = list(_cases())


@pytest.mark.parametrize("width", WIDTHS)
def test_every_example_prints_the_bytes_rich_prints(width):
    assert len(CASES) == 2 * len(INVENTORIES)
    for name, parts in CASES:
        assert plainout.all_narrow(parts), name
        assert plainout.render(parts, width) == _rich(parts, width), (name, width)


def test_the_cost_table_fits_and_falls_back_as_rich_does():
    """Each example's preview at 80 columns holds the cost table as a
    table, and at 40 as blocks: both layouts are compared above."""
    name, parts = CASES[0]
    assert " ── " in plainout.render(parts, 80) or "──" in plainout.render(parts, 80)
    assert "  plan time" in plainout.render(parts, 40)


def test_long_and_unsafe_host_names_and_busy_gpus():
    inv = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    placement = fill_placement(inv, [("gpu01", range(8)), ("gpu03", range(4, 8))],
                               Layout(tp=4, dp=3).resolved())
    state = ClusterState({"gpu03": NodeState("gpu03", busy_gpus=frozenset({0, 1}))})
    parts = plan_parts(placement, inv, Layout(tp=4, dp=3), state=state,
                       notes=["host\x1b[31mred\u202eevil " + "n" * 90])
    parts.insert(1, line(printable("node-with-a-very-long-name-" + "y" * 70 + "\x07")))
    assert plainout.all_narrow(parts)
    for width in WIDTHS + (1, 2, 7):
        assert plainout.render(parts, width) == _rich(parts, width), width


def test_a_sheet_wider_than_its_title_and_a_title_wider_than_its_sheet():
    sheet = Sheet(title="a title much longer than the table is wide, so that it wraps",
                  columns=[Column("a"), Column("bb", justify="right")], caption="cap " * 9)
    sheet.add_row(line("x"), line("12  "))
    sheet.add_row(line(""), line(""))
    for width in (80, 30, 9, 5):
        assert plainout.render([sheet], width) == _rich([sheet], width), width


def test_text_rich_measures_differently_is_left_to_rich():
    """Wide or combining characters are rich's to measure: not narrow."""
    assert plainout.narrow("gpu01 · 12 × 3 … 5 µs")
    assert not plainout.narrow("节点01") and not plainout.narrow("e\u0301")
    inv = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    placement = fill_placement(inv, [("gpu01", range(8))], Layout(tp=8).resolved())
    assert not plainout.all_narrow(plan_parts(placement, inv, notes=["节点"]))


class _Stream(io.StringIO):
    def __init__(self, tty: bool, encoding: str = "utf-8"):
        super().__init__()
        self._tty, self._encoding = tty, encoding

    def isatty(self):
        return self._tty

    @property
    def encoding(self):
        return self._encoding


@pytest.mark.parametrize("env,tty,encoding", [
    ({}, False, "utf-8"), ({"COLUMNS": "61"}, False, "utf-8"), ({"COLUMNS": "wide"}, False, "utf-8"),
    ({"COLUMNS": "61"}, True, "utf-8"), ({"FORCE_COLOR": "1"}, False, "utf-8"),
    ({"FORCE_COLOR": ""}, False, "utf-8"), ({"TTY_COMPATIBLE": "1"}, False, "utf-8"),
    ({"TTY_COMPATIBLE": "0"}, True, "utf-8"), ({"COLUMNS": "100"}, False, "ascii"),
    ({"NO_COLOR": "1", "COLUMNS": "70"}, False, "UTF-8"),
])
def test_plain_width_is_rich_s_choice(env, tty, encoding):
    """Plain output exactly where rich would print no colour with Unicode
    boxes, at rich's width."""
    stream = _Stream(tty, encoding)
    con = Console(file=stream, _environ=env)
    rich_plain = con.color_system is None and con.encoding.startswith("utf")
    got = plainout.plain_width(stream, env)
    if "FORCE_COLOR" in env or "TTY_COMPATIBLE" in env:
        assert got is None  # rich's versions disagree on these: rich decides
    else:
        assert (got is not None) == rich_plain, (env, tty, encoding)
    if got is not None:
        assert rich_plain and got == con.width


def test_plan_into_a_pipe_does_not_import_rich(tmp_path):
    code = ("import sys\nfrom slurmtopo.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('RICH=%s' % any(m == 'rich' or m.startswith('rich.') "
            "for m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code, "plan", "--inventory",
                        str(EXAMPLES / "h100-32node-fattree.yaml"), "--tp", "8", "--dp", "4",
                        "--output-dir", str(tmp_path / "out"), "--", "python", "train.py"],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin",
                                                            "PYTHONPATH": str(ROOT),
                                                            "COLUMNS": "61"})
    assert "RICH=False" in p.stderr, p.stderr
    assert "Rank placement (32 ranks on 4 nodes)" in p.stdout
    assert all(len(ln) <= 61 for ln in p.stdout.splitlines()), p.stdout
