"""The column layouts of public GPU-cluster traces as published, read the
way an admin runs them: ``slurmtopo simulate --trace FILE`` (and
:func:`read_trace` for what each row became).

Alibaba PAI v2020 publishes its task table without a header row and counts
GPUs in percent per instance; the 2026 spot trace counts GPUs per worker;
the full Helios and PAI traces are hundreds of MiB. The fixtures are
described, with their sources, in tests/fixtures/traces/SOURCES.md.
"""
from __future__ import annotations

import json
from pathlib import Path

from slurmtopo.simulate.trace_read import read_trace
from tests.clirun import one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
INV = str(ROOT / "etc" / "examples" / "devcluster.yaml")
PAI = str(FIXTURES / "pai-v2020-task-table.csv")
SPOT = str(FIXTURES / "alibaba-v2026-spot-shaped.csv")


def simulate(trace, *more):
    code, out, err = run_cli(["simulate", "--inventory", INV, "--trace", trace, "--policy",
                              "slurm", "--workers", "1", "--json", *more])
    assert code == 0, err
    return json.loads(out)


def test_pai_task_table_without_its_header_row():
    t = read_trace(PAI)
    # 4x100% -> 4 GPUs, 2x800% -> 16, 50% and 25% -> one whole GPU each
    assert [(j.job_id, j.gpus) for j in t.jobs] == [
        ("4f057009a5d481acec67b088", 1), ("a0000000000000000000000b", 4),
        ("a0000000000000000000000c", 16), ("a0000000000000000000000e", 1)]
    # no submission column: the start stands for it, counted from the first
    assert [j.submit for j in t.jobs] == [0.0, 8.0, 138.0, 338.0]
    assert [j.run_time for j in t.jobs] == [38.0, 3600.0, 7200.0, 60.0]
    assert t.rows == 6  # the first line is a row, not a header
    assert {s.reason: (s.count, s.first) for s in t.skipped} == {
        "without GPUs (CPU jobs)": (1, f"{PAI}:3"), "no run time": (1, f"{PAI}:5")}


def test_pai_task_table_through_the_cli():
    doc = simulate(PAI)
    assert doc["trace"]["jobs"] == 4


def test_gpus_per_worker_times_workers():
    t = read_trace(SPOT)
    assert [(j.job_id, j.gpus, j.submit, j.run_time) for j in t.jobs] == [
        ("101", 1, 0.0, 3600.0), ("102", 16, 60.0, 7200.0), ("103", 16, 120.0, 1800.0)]
    assert [(s.reason, s.count) for s in t.skipped] == [("without GPUs (CPU jobs)", 1)]


def test_a_header_less_file_of_another_shape_says_so(tmp_path):
    bad = tmp_path / "pai_job_table.csv"
    # the PAI v2020 job table (6 columns, no GPUs) without its header row
    bad.write_text("4b3f04b66a525d2df903eb16,8cb3bec23d14,58540f191766,Terminated,"
                   "4550879.0,4551416.0\n")
    code, out, err = run_cli(["simulate", "--inventory", INV, "--trace", str(bad)])
    one_line_error(code, err, f"{bad}:1:", "no column name known at all",
                   "without a header row")


def over_64_mib(path, header, line, rows=72_000):
    """``path`` holding ``header`` and ``line(i)`` for each row: over 64 MiB."""
    with open(path, "w") as fh:
        fh.write(header)
        fh.writelines(line(i) for i in range(rows))
    assert path.stat().st_size > 64 << 20
    return path


def test_a_trace_larger_than_64_mib_is_read_a_line_at_a_time(tmp_path):
    # Helios' cluster_log.csv layout, 70 MiB (long user names keep the row
    # count, and the time, small); the first 3 submissions replayed
    big = over_64_mib(
        tmp_path / "cluster_log.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
        "duration,queue\n",
        lambda i: f"{i},{'u' * 960},vc1,{i % 3},6,1,COMPLETED,2020-04-01 00:00:{59 - i % 60:02d},"
                  "2020-04-01 00:01:00,2020-04-01 01:01:00,3600,60\n")
    t = read_trace(str(big), limit=3)
    # the three earliest submissions (second 0 of the minute), file order on ties
    assert [(j.job_id, j.gpus, j.submit) for j in t.jobs] == [
        ("59", 2, 0.0), ("119", 2, 0.0), ("179", 2, 0.0)]
    assert t.beyond_limit == 48_000 - 3
    assert [(s.reason, s.count) for s in t.skipped] == [("without GPUs (CPU jobs)", 24_000)]


PHILLY = str(FIXTURES / "philly-cluster-job-log.json")


def test_philly_job_log_as_published():
    t = read_trace(PHILLY)  # told from the file: a JSON list
    assert t.format == "philly"
    # the README's job: two attempts on one 8-GPU server, 74 s + 2 d 5 h 39 min 42 s
    assert [(j.job_id, j.gpus, j.nodes, j.submit, j.run_time) for j in t.jobs] == [
        ("application_1506638472019_14199", 8, 1, 0.0, 74.0 + 193182.0),
        ("application_1506638472019_20002", 16, 2, 1101.0, 3600.0)]
    assert {s.reason: (s.count, s.first) for s in t.skipped} == {
        "no attempt (never ran)": (1, f"{PHILLY}:49"),
        "an attempt without a start or end time (still running?)": (1, f"{PHILLY}:74"),
        "without GPUs": (1, f"{PHILLY}:88")}
    doc = simulate(PHILLY)
    assert doc["trace"]["jobs"] == 2


def test_philly_log_read_in_small_chunks_gives_the_same_jobs():
    from slurmtopo.simulate.trace_philly import read_philly

    text = open(PHILLY).read()
    whole = read_philly([text], PHILLY)
    pieces = read_philly([text[i:i + 7] for i in range(0, len(text), 7)], PHILLY)
    assert pieces == whole and len(whole.jobs) == 2


def test_a_cut_or_broken_philly_log_is_one_located_error(tmp_path):
    text = open(PHILLY).read()
    cut = tmp_path / "cut.json"
    cut.write_text(text[:text.index('"application_1506638472019_20002"')])
    code, _, err = run_cli(["simulate", "--inventory", INV, "--trace", str(cut)])
    one_line_error(code, err, f"{cut}:60:", "bad JSON")  # where the text stops
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace('},\n{\n    "status": "Killed"', '}\n{\n    "status": "Killed"'))
    code, _, err = run_cli(["simulate", "--inventory", INV, "--trace", str(bad),
                            "--trace-format", "philly"])
    one_line_error(code, err, f"{bad}:49:", "expected ',' or ']'")
    notlist = tmp_path / "obj.json"
    notlist.write_text('{"jobid": 1}\n')
    code, _, err = run_cli(["simulate", "--inventory", INV, "--trace", str(notlist),
                            "--trace-format", "philly"])
    one_line_error(code, err, f"{notlist}:1:", "does not start with a JSON list")


def test_sacct_output_larger_than_64_mib_is_read_too(tmp_path):
    # a year of `sacct -a -P` on a large cluster passes 64 MiB; a long Comment
    # column keeps this one's line count small
    def line(i):
        m = 59 - i % 60
        return (f"{i}|2025-01-06T09:{m:02d}:00|2025-01-06T09:{m:02d}:05|2025-01-06T10:{m:02d}:05"
                f"|cpu=16,gres/gpu=8,node=1|gpu001|1|04:00:00|COMPLETED|{'c' * 960}\n")

    big = over_64_mib(tmp_path / "sacct.txt",
                      "JobID|Submit|Start|End|AllocTRES|NodeList|NNodes|Timelimit|State|Comment\n",
                      line)
    t = read_trace(str(big), limit=2)
    assert t.format == "sacct"
    assert [(j.job_id, j.gpus, j.run_time) for j in t.jobs] == [("59", 8, 3600.0),
                                                                ("119", 8, 3600.0)]
    assert t.beyond_limit == 72_000 - 2
