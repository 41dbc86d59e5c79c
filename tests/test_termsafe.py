"""Strings someone else chose never act on the reader's terminal (issue 21):
`daemon status` printed a job named $'x\\e]0;PWNED\\a' raw. One helper
(slurmtopo.show.termsafe) escapes them for plain output, logs, rich markup and
error lines; here every path that prints one is checked."""
from __future__ import annotations

import io
import json
import logging
import os

from click.testing import CliRunner

from slurmtopo.show.termsafe import PrintableFormatter, markup, printable

HOSTILE = "x\x1b]0;PWNED\x07\u202eevil\x9b2J\ty"


def assert_inert(text: str) -> None:
    """No control or direction character left in ``text`` (newlines
    between lines aside)."""
    for line in text.split("\n"):
        bad = [c for c in line if ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f
               or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"]
        assert not bad, repr(line)


def test_printable_escapes_controls_and_keeps_text():
    out = printable(HOSTILE)
    assert out == "x\\x1b]0;PWNED\\x07\\u202eevil\\x9b2J\\x09y"
    assert printable("λ-训练 node[01-04]") == "λ-训练 node[01-04]"
    assert printable("a" * 50, 10) == "a" * 10 + "..."
    assert printable(None) == "None"


def test_printable_escapes_invisible_format_characters():
    """The soft hyphen, the Mongolian vowel separator, the interlinear
    annotation marks and the tag characters print as nothing: a job name
    could carry hidden text (tags spell ASCII invisibly) past a reader."""
    hidden = "ok\u00ad\u180e\ufff9a\ufffa\ufffb\U000e0001\U000e0041\U000e007f"
    assert printable(hidden) == ("ok\\xad\\u180e\\ufff9a\\ufffa\\ufffb\\U000e0001"
                                 "\\U000e0041\\U000e007f")
    assert printable("\u00ac\ufffc\U000e0080") == "\u00ac\ufffc\U000e0080"


def test_markup_escapes_rich_markup_too():
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=200).print(f"name: {markup('[red]x[/red] ' + HOSTILE)}")
    assert "[red]x[/red]" in buf.getvalue()
    assert_inert(buf.getvalue())


def test_log_messages_and_tracebacks_are_escaped():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(PrintableFormatter("%(message)s"))
    log = logging.getLogger("termsafe-test")
    log.addHandler(handler)
    try:
        log.warning("job %s: named %s", 5, HOSTILE)
        try:
            raise ValueError(HOSTILE)
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    out = stream.getvalue()
    assert_inert(out)
    assert "named x\\x1b]0;PWNED" in out
    assert "Traceback (most recent call last):\n" in out      # lines kept


def test_daemon_status_escapes_job_names_reasons_users(tmp_path):
    from slurmtopo.cli import cli
    from slurmtopo.daemon.loop import Daemon
    from slurmtopo.daemon.protocol import PREFIX
    from tests.daemon.conftest import FakeSlurm, quad8_inventory
    from tests.daemon.test_untrusted_input import alice_job, bob_job

    slurm = FakeSlurm()
    spool = str(tmp_path / "spool")
    a = alice_job(slurm)
    slurm.jobs_[a].name = HOSTILE
    slurm.jobs_[a].user = HOSTILE
    slurm.occupy("node1", range(8), exclusive=True)
    slurm.occupy("node2", range(8), exclusive=True)
    slurm.occupy("node3", range(8), exclusive=True)
    slurm.occupy("node4", range(8), exclusive=True)
    bob_job(slurm, PREFIX + json.dumps({"layout": {"tp": 2}, "require": {HOSTILE: "nvlink"}}))
    Daemon(slurm, quad8_inventory(tmp_path), spool).cycle()
    r = CliRunner().invoke(cli, ["daemon", "status", "--spool", spool, "--events", "20",
                                 "--backend", "none"], catch_exceptions=False)
    assert r.exit_code == 3, r.output  # shown; no daemon holds the spool
    assert "x\\x1b]0;PWNED\\x07" in r.output          # shown, escaped
    assert_inert(r.output)


def test_cli_error_lines_are_escaped(tmp_path):
    from tests.clirun import run_cli

    bad = tmp_path / f"inv{HOSTILE}.yaml"
    code, out, err = run_cli(["plan", "--inventory", str(bad), "--tp", "2", "--", "x"])
    assert code != 0 and "\\x1b]0;PWNED" in err
    assert_inert(err)


def test_show_escapes_what_slurm_and_the_run_directory_say(tmp_path, capsys, monkeypatch):
    """A rank map in the run directory names a host with escape sequences
    and rich markup; Slurm's reason for the job holds one."""
    from slurmtopo.commands import show
    from slurmtopo.slurm.backend import SlurmJob

    def gather(job_id, run_dir, backend, submit_dir):
        return {"job": SlurmJob(job_id=9, state="PENDING", reason=HOSTILE),
                "run_dir": str(tmp_path / HOSTILE), "script_from": "x", "planned": None,
                "actual": None, "notes": [HOSTILE]}

    monkeypatch.setattr(show, "gather", gather)
    r = CliRunner().invoke(show.command, ["9", "--backend", "none"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert r.output.count("x\\x1b]0;PWNED\\x07") == 3
    assert_inert(r.output)


def test_the_preview_grid_escapes_host_names():
    from rich.console import Console

    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.job.groups import Layout
    from slurmtopo.job.request import JobRequest
    from slurmtopo.plan.choice import plan
    from slurmtopo.show.preview import grid
    from dataclasses import replace

    inv = load_inventory(os.path.join(os.path.dirname(__file__), "..", "etc", "examples",
                                      "h100-4node-2leaf.yaml"))
    p = plan(inv, None, JobRequest(layout=Layout(tp=8)))
    name = p.hosts[0]
    evil = HOSTILE + "[blink]"
    slots = tuple(s._replace(host=evil) if s.host == name else s for s in p.slots)
    bad = replace(p, slots=slots, hosts=tuple(evil if h == name else h for h in p.hosts))
    buf = io.StringIO()
    Console(file=buf, width=200).print(grid(bad))
    assert "[blink]" in buf.getvalue() and "\\x1b]0;PWNED" in buf.getvalue()
    assert_inert(buf.getvalue())
