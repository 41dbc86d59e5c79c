"""The sacct reader's NodeLists, expanded once per distinct text
(:class:`~slurmtopo.simulate.trace_sacct.NodeLists`): the jobs read are the
ones each row gives when its NodeList is expanded on its own, and a
NodeList too big to expand is still skipped, not built."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slurmtopo.inventory.hostlist import HostlistError, count_hostlist, expand_hostlist
from slurmtopo.simulate.trace_sacct import _job, read_sacct

HEADER = "JobID|Submit|Start|End|AllocTRES|NodeList|NNodes|Timelimit"
#: ranges, several prefixes, zero padding, commas, duplicates, a name
#: without digits, several brackets, and what is no host or refused
NODELISTS = (
    "gpu[0001-0060,0100-0159]",
    "gpu[0001-0060,0100-0159]",            # repeated: shared, not re-expanded
    "gpu[1-3],cpu[07-09],login",
    "rack[1-2]-gpu[01-02]",
    "gpu[010-012],gpu9,gpu[1-2],gpu1",     # padding mixed, a duplicate
    "node7",
    "None assigned",
    "",
    "gpu[1-3],cpu[07-09],login",
    "node[0-99999999]",                    # refused before anything is built
    "gpu[3-1",                             # malformed
    "gpu[1-2]!gpu2",                       # ClusterShell's syntax, not Slurm's
    "node[0-99999999]",
)


def _text(nodelists, with_nodes: bool) -> str:
    rows = [HEADER]
    for i, nl in enumerate(nodelists, 1):
        tres = "gres/gpu=8,node=2" if with_nodes else "gres/gpu=8"
        rows.append(f"{i}|2025-01-01T00:00:{i:02d}|2025-01-01T00:01:00|2025-01-01T02:00:00|"
                    f"{tres}|{nl}||01:00:00")
    return "\n".join(rows) + "\n"


def _one_by_one(text: str):
    """Each row read on its own (its NodeList expanded afresh): the reader
    before NodeLists were shared."""
    lines = text.splitlines()
    names = [c.lower() for c in lines[0].split("|")]
    out = {}
    for n, line in enumerate(lines[1:], 2):
        row = dict(zip(names, (c.strip() for c in line.split("|"))))
        try:
            out[row["jobid"]] = _job(row, "t.txt", n)
        except ValueError as exc:
            out[row["jobid"]] = str(exc)
    return out


def test_same_jobs_as_each_row_alone():
    for with_nodes in (True, False):
        text = _text(NODELISTS, with_nodes)
        trace = read_sacct(text, "t.txt")
        alone = _one_by_one(text)
        kept = {j.job_id: j for j in trace.jobs}
        for job_id, want in alone.items():
            if isinstance(want, str):
                assert job_id not in kept, want
            else:
                # submit counts from the trace's first job once read whole
                assert replace(kept[job_id], submit=0.0) == replace(want, submit=0.0)
                assert kept[job_id].submit == want.submit - alone["1"].submit
        assert len(kept) == sum(not isinstance(w, str) for w in alone.values())
        skipped = {s.reason: s.count for s in trace.skipped}
        assert skipped == {"bad NodeList": 4}


def test_hosts_are_the_hostlist_expansion():
    trace = read_sacct(_text(NODELISTS, False), "t.txt")
    by_id = {j.job_id: j for j in trace.jobs}
    for i, nl in enumerate(NODELISTS, 1):
        job = by_id.get(str(i))
        if nl in ("None assigned", ""):
            assert job.hosts == () and job.nodes is None
        elif job is not None:
            assert list(job.hosts) == expand_hostlist(nl, "NodeList")
            assert job.nodes == len(job.hosts)
    assert len(by_id["1"].hosts) == 120 and by_id["1"].hosts[0] == "gpu0001"
    assert by_id["5"].hosts == ("gpu1", "gpu2", "gpu9", "gpu010", "gpu011", "gpu012")


def test_repeated_nodelists_share_their_hosts():
    by_id = {j.job_id: j for j in read_sacct(_text(NODELISTS, True), "t.txt").jobs}
    assert by_id["1"].hosts is by_id["2"].hosts
    assert by_id["3"].hosts is by_id["9"].hosts
    # one string per host name across different NodeLists too
    gpu1 = [h for h in by_id["5"].hosts if h == "gpu1"][0]
    assert [h for h in by_id["3"].hosts if h == "gpu1"][0] is gpu1


def test_counted_only_gives_the_same_jobs_without_hosts():
    """``slurmtopo simulate`` reads NodeLists without their names: the same
    rows kept and skipped, the same node counts, no hosts."""
    for with_nodes in (True, False):
        text = _text(NODELISTS, with_nodes)
        full = read_sacct(text, "t.txt")
        counted = read_sacct(text, "t.txt", hosts=False)
        assert [replace(j, hosts=()) for j in full.jobs] == list(counted.jobs)
        assert full.skipped == counted.skipped
        assert any(j.hosts for j in full.jobs)


def test_count_hostlist_is_the_expansions_length():
    for nl in NODELISTS[:6] + ("a,b,a", "n[1-2]x[3-4],n1x3"):
        assert count_hostlist(nl) == len(expand_hostlist(nl)), nl
    for bad in ("node[0-99999999]", "gpu[3-1", "gpu[1-2]!gpu2", "", " , "):
        with pytest.raises(HostlistError) as exc:
            count_hostlist(bad, "NodeList")
        with pytest.raises(HostlistError) as same:
            expand_hostlist(bad, "NodeList")
        assert str(exc.value) == str(same.value)
    with pytest.raises(HostlistError, match="names 100,000,000 hosts, more than"):
        count_hostlist("node[0-99999999]", "NodeList")


def test_what_one_read_remembers_is_bounded(monkeypatch):
    """A trace is read a line at a time, up to gigabytes: past
    MAX_REMEMBERED distinct NodeLists nothing more is kept, and the jobs
    read are the same."""
    from slurmtopo.simulate import trace_sacct

    text = _text(NODELISTS, False)
    want = read_sacct(text, "t.txt")
    made = []
    real = trace_sacct.NodeLists.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(trace_sacct.NodeLists, "__init__", spy)
    monkeypatch.setattr(trace_sacct, "MAX_REMEMBERED", 2)
    got = read_sacct(text, "t.txt")
    assert got.jobs == want.jobs and got.skipped == want.skipped
    (lists,) = made
    assert len(lists._seen) == 2 and len(lists._names) <= 2 + 120
