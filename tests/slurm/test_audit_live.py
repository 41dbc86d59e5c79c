"""``slurmtopo audit`` and ``slurmtopo state --jobs`` on the live cluster,
through the CLI backend and the Slurm command stand-ins (tests/fakes)."""
from __future__ import annotations

import json

import pytest

from tests.slurm.test_commands import INV, onpath, run  # noqa: F401 (onpath: a fixture)


@pytest.fixture
def live(onpath):
    onpath.on("sinfo --json", file="sinfo_untyped_busy.json")
    onpath.on("squeue --json", file="squeue_untyped.json")
    return onpath


def test_live_audit(live, capsys):
    # job 2 holds GPUs 0-1 of node2 (leaf1) and node3 (leaf2); without it
    # node1 and node2, both under leaf1, have two free GPUs each
    code, out, err = run(["audit", "--inventory", INV, "--json", "--backend", "cli"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    (j,) = doc["jobs"]
    assert (j["job"], j["nodes"], j["gpus"]) == ("2", "node[2-3]", 4)
    assert (j["spans"]["leaves"], j["fewest"]["leaves"]) == (2, 1)
    assert doc["not_audited"] == {"on one node": 2}
    assert doc["source"] == "slurm (cli backend)"
    assert doc["stranded"]["free"] == 32 - 3 - 2 - 2 - 8


def test_state_jobs_round_trip_through_the_audit(live, capsys, tmp_path):
    code, out, err = run(["state", "--inventory", INV, "--jobs", "--backend", "cli"], capsys)
    assert code == 0, err
    path = tmp_path / "snap.yaml"
    path.write_text(out)
    live = json.loads(run(["audit", "--inventory", INV, "--json", "--backend", "cli"],
                          capsys)[1])
    code, again, err = run(["audit", "--inventory", INV, "--state", str(path), "--json"], capsys)
    assert code == 0, err
    snap = json.loads(again)
    assert snap["jobs"] == live["jobs"]
    assert snap["stranded"] == live["stranded"]


def test_sacct_period_through_the_backend(onpath, capsys):
    from pathlib import Path

    record = Path(__file__).resolve().parents[2] / "etc" / "examples" / "traces" / \
        "devcluster-sacct.txt"
    onpath.on("sacct -a -X -P -S 2025-03-03 -E 2025-03-04 -o JobID,Submit,Start,End,AllocTRES,"
              "NodeList,NNodes,Timelimit,State", stdout=record.read_text())
    code, out, err = run(["audit", "--inventory", INV, "--backend", "cli", "--sacct",
                          "--starttime", "2025-03-03", "--endtime", "2025-03-04", "--json"],
                         capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == "sacct -S 2025-03-03 -E 2025-03-04"
    assert [j["job"] for j in doc["jobs"]] == ["202", "203"]
    code, out, err = run(["audit", "--inventory", INV, "--backend", "cli", "--sacct",
                          "--starttime", "-x"], capsys)
    assert code != 0 and "bad start time" in err and len(err.strip().splitlines()) == 1
    onpath.on("sacct", rc=1, stderr="sacct: error: Slurm accounting storage is disabled\n")
    code, out, err = run(["audit", "--inventory", INV, "--backend", "cli", "--sacct",
                          "--starttime", "2025-03-03"], capsys)
    assert code != 0 and err == "slurmtopo: error: sacct: error: Slurm accounting storage " \
                                "is disabled\n"
