"""The trace readers: the real excerpts, made-up rows of each shape, and
what is refused (one located error) or skipped (counted by reason)."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurmtopo.simulate.trace import TraceError
from slurmtopo.simulate.trace_read import read_trace, sniff
from slurmtopo.simulate.trace_sacct import slurm_duration

ROOT = Path(__file__).resolve().parents[2]
EXCERPTS = ROOT / "etc" / "examples" / "traces"
FIXTURES = ROOT / "tests" / "fixtures" / "traces"


def _write(tmp_path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_philly_excerpt():
    t = read_trace(str(EXCERPTS / "philly-excerpt.csv"))
    assert (t.format, t.rows, len(t.jobs), t.skipped) == ("csv", 300, 300, ())
    first = t.jobs[0]
    # the first row: submitted 2017-09-04 10:30:41, the trace's earliest
    assert (first.job_id, first.gpus, first.submit, first.run_time) == \
        ("application_1504131676014_2141", 8, 0.0, 2240194.0)
    assert first.where.endswith("philly-excerpt.csv:2")
    # 2017-10-01 17:51:34 is 27 days, 7 h, 20 min 53 s later
    assert t.jobs[-1].submit == 27 * 86400 + 7 * 3600 + 20 * 60 + 53
    assert [j.submit for j in t.jobs] == sorted(j.submit for j in t.jobs)


def test_nasa_swf_excerpt():
    t = read_trace(str(EXCERPTS / "nasa-ipsc-excerpt.swf"))
    assert (t.format, len(t.jobs)) == ("swf", 300)
    # "2941 3227437 -1 102 16 ...": submit 3227437 is the excerpt's first
    j = t.jobs[0]
    assert (j.job_id, j.submit, j.run_time, j.gpus, j.time_limit) == ("2941", 0.0, 102.0, 16, None)


def test_helios_shaped_rows_skipped_and_counted():
    t = read_trace(str(FIXTURES / "helios-shaped.csv"))
    assert len(t.jobs) == 8 and t.rows == 10
    assert [(s.reason, s.count) for s in t.skipped] == [("without GPUs (CPU jobs)", 1),
                                                        ("bad GPU count", 1)]
    assert t.skipped[0].first.endswith("helios-shaped.csv:4")
    j = {x.job_id: x for x in t.jobs}
    assert (j["1004"].gpus, j["1004"].nodes, j["1004"].run_time, j["1004"].submit) == \
        (16, 2, 3600.0, 180.0)
    assert "2 rows skipped: 1 without GPUs" in t.summary()


def test_sacct_output():
    t = read_trace(str(FIXTURES / "sacct-excerpt.txt"))
    assert t.format == "sacct"
    got = {j.job_id: (j.gpus, j.nodes, j.run_time, j.time_limit) for j in t.jobs}
    assert got == {"4101": (8, 1, 7200.0, 4 * 3600.0),
                   "4102": (16, 2, 3600.0, 86400.0),      # gres/gpu=16, not +16 typed
                   "4105_1": (1, 1, 1800.0, 2700.0),       # typed only: summed
                   "4105_2": (1, 1, 600.0, 2700.0),
                   "4107": (4, 2, 1800.0, None)}           # nodes from NodeList; UNLIMITED
    assert {s.reason: s.count for s in t.skipped} == {
        "job steps (not jobs)": 2, "that never started": 1, "without GPUs": 1,
        "still running": 1}


def test_interval_and_start_end_columns(tmp_path):
    path = _write(tmp_path, "t.csv", "job_id,num_gpu,interval,start_time,end_time\n"
                  "a,2,0,2020-01-01T00:00:00,2020-01-01T00:10:00\n"
                  "b,4,30,2020-01-01 00:00:30,2020-01-01 01:00:30\n"
                  "c,1,15,100,160\n")
    t = read_trace(path)
    assert [(j.job_id, j.submit, j.gpus, j.run_time) for j in t.jobs] == [
        ("a", 0.0, 2, 600.0), ("b", 30.0, 4, 3600.0), ("c", 45.0, 1, 60.0)]


def test_jobs_keeps_the_first_by_submission(tmp_path):
    path = _write(tmp_path, "t.csv", "gpu_num,submit_time,duration\n8,30,1\n1,10,1\n2,20,1\n")
    t = read_trace(path, limit=2)
    assert [j.gpus for j in t.jobs] == [1, 2] and t.beyond_limit == 1
    assert "the first 2 of 3" in t.summary()


def test_sniffing():
    assert sniff("x.swf", "") == "swf"
    assert sniff("x", "; Version: 2.2\n1 0 -1 5 4\n") == "swf"
    assert sniff("x", "1 0 -1 5 4 -1\n") == "swf"
    assert sniff("x", "JobID|Submit|Start\n") == "sacct"
    assert sniff("x", "job_id,gpu_num\n") == "csv"


@pytest.mark.parametrize("text, where, what", [
    ("", None, "empty: no CSV header"),
    ("job_id,user\n1,a\n", 1, "lacks the GPUs of each job"),
    ("gpu_num,duration\n1,5\n", 1, "lacks its submission"),
    ("gpu_num,submit_time\n1,5\n", 1, "lacks its run time"),
    ("gpu_num,submit_time,duration\n", 1, "no rows under the CSV header"),
    ("gpu_num,submit_time,duration\n0,1,1\nx,2,2\n", None, "no job to replay"),
    ("gpu_num,submit_time,duration\n" + "1," * 40000 + "\n", 2, "not a trace CSV"),
    ("gpu_num,submit_time,duration\n1,0,1\n1,1e12,1\n", None, "are the times in seconds"),
])
def test_csv_refused(tmp_path, text, where, what):
    path = _write(tmp_path, "t.csv", text)
    with pytest.raises(TraceError) as exc:
        read_trace(path, "csv")
    assert what in exc.value.message
    assert exc.value.path == path and exc.value.line == where
    assert "\n" not in exc.value.render()


@pytest.mark.parametrize("row, reason", [
    ("-1,5,5", "GPU count out of range"),
    ("1.5,5,5", "bad GPU count"),
    ("2,5,nan", "no run time"),
    ("2,5,-3", "run time out of range"),
    ("2,2020-13-01,5", "bad submit time"),
    ("2,5,1e99", "run time out of range"),
    ("2,5,inf", "run time out of range"),
])
def test_csv_bad_rows_counted(tmp_path, row, reason):
    path = _write(tmp_path, "t.csv", f"gpu_num,submit_time,duration\n1,0,1\n{row}\n")
    t = read_trace(path)
    assert len(t.jobs) == 1
    assert [(s.reason, s.count, s.first) for s in t.skipped] == [(reason, 1, f"{path}:3")]


@pytest.mark.parametrize("text, what", [
    ("", "no job lines"),
    ("; only a header\n", "no job lines"),
    ("job_id,gpu_num\n1,2\n", "not an SWF log"),
    ("1 2 x" + " 9" * 200 + "\n", "1 with more than 18 fields"),
    ("1" * 5000 + "\n", "not an SWF log"),
])
def test_swf_refused(tmp_path, text, what):
    with pytest.raises(TraceError) as exc:
        read_trace(_write(tmp_path, "t.swf", text), "swf")
    assert what in exc.value.message


def test_swf_rows_skipped(tmp_path):
    text = ("; UnixStartTime: 0\n"
            "1 0 -1 10 4 -1 -1 4 60 -1 1 1 1 -1 1 -1 -1 -1\n"
            "2 5 -1 -1 4 -1 -1 4 60 -1 5 1 1 -1 1 -1 -1 -1\n"     # never ran
            "3 6 -1 10 -1 -1 -1 -1 60 -1 1 1 1 -1 1 -1 -1 -1\n"    # no processors
            "4 7 -1 10 -1 -1 -1 8 60 -1 1 1 1 -1 1 -1 -1 -1\n"     # requested instead
            "5 8 -1 10\n"                                          # too short
            "6 9 -1 10 x -1 -1 4 60 -1 1 1 1 -1 1 -1 -1 -1\n")
    t = read_trace(_write(tmp_path, "t.swf", text))
    assert [(j.job_id, j.gpus, j.time_limit) for j in t.jobs] == [("1", 4, 60.0), ("4", 8, 60.0)]
    assert {s.reason: s.count for s in t.skipped} == {
        "without a run time (never ran)": 1, "without processors": 1,
        "with fewer than 5 fields": 1, "bad processor count": 1}


def test_sacct_refused(tmp_path):
    with pytest.raises(TraceError) as exc:
        read_trace(_write(tmp_path, "s.txt", "JobID|Submit|Start|End\n1|x|y|z\n"), "sacct")
    assert "lacks alloctres" in exc.value.message and exc.value.line == 1


def test_slurm_durations():
    assert slurm_duration("01:02:03", "t") == 3723
    assert slurm_duration("2-00:00:00", "t") == 172800
    assert slurm_duration("1-02", "t") == 93600
    assert slurm_duration("05:00", "t") == 300
    assert slurm_duration("90", "t") == 5400
    assert slurm_duration("UNLIMITED", "t") is None
    assert slurm_duration("Partition_Limit", "t") is None


def test_unknown_format_and_limit(tmp_path):
    path = _write(tmp_path, "t.csv", "gpu_num,submit_time,duration\n1,0,1\n")
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(path, "parquet")
    with pytest.raises(TraceError, match="at least 1"):
        read_trace(path, limit=0)
    with pytest.raises(TraceError, match="NUL"):
        read_trace(_write(tmp_path, "z.csv", "gpu_num\x00"))
