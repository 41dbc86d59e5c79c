"""The job-comment protocol (slurmtopo:v1:) and submit_for_daemon."""
from __future__ import annotations

import json
import os
import re
import stat

import pytest

from slurmtopo.daemon import protocol
from slurmtopo.daemon.protocol import (PREFIX, ProtocolError, Shape, make_comment,
                                       parse_comment, rejected_comment)
from slurmtopo.daemon.spool import prepare_spool
from slurmtopo.daemon.submit import prepare_script, script_shape, submit_for_daemon
from slurmtopo.errors import SlurmtopoError
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest


def req(**kw):
    kw.setdefault("layout", Layout(tp=4, dp=2))
    return JobRequest(**kw)


def test_round_trip_keeps_every_field():
    r = req(require={"tp": "nvlink"}, prefer={"dp": "leaf"}, wait={"dp": 600, "tp": 1.5},
            gpus_per_node=4, exclusive=True, nodelist="node[1-3]", exclude="node2",
            message_bytes={"dp": 1 << 30})
    c = make_comment(r, Shape(nodes=2, gpus_per_node=4, tasks_per_node=4))
    assert c.startswith(PREFIX) and " " not in c and len(c) < 300
    spec = parse_comment(c)
    assert spec.request == r
    assert spec.shape == Shape(2, 4, 4)
    assert spec.source == "comment"


def test_the_launcher_travels_and_srun_is_left_out():
    # srun (the default) writes nothing: comments of srun jobs are as before
    assert make_comment(req(layout=Layout(tp=8)), launcher="srun") == PREFIX + '{"layout":{"tp":8}}'
    assert parse_comment(PREFIX + '{"layout":{"tp":8}}').launcher == "srun"
    c = make_comment(req(layout=Layout(tp=8)), launcher="torchrun")
    assert c == PREFIX + '{"layout":{"tp":8},"launcher":"torchrun"}'
    assert parse_comment(c).launcher == "torchrun"


def test_layout_defaults_are_left_out():
    c = make_comment(req(layout=Layout(tp=8)))
    assert c == PREFIX + '{"layout":{"tp":8}}'
    assert parse_comment(c).request.layout == Layout(tp=8).resolved()


def test_torch_order_and_world_survive():
    lay = Layout(tp=2, pp=2, world=16, order="pp-dp-tp", convention="torch")
    spec = parse_comment(make_comment(req(layout=lay)))
    assert spec.request.layout == lay.resolved()


def test_blanks_never_reach_the_comment():
    data = {"layout": {"tp": 2, "order": "tp-cp-ep-dp-pp"}}
    text = protocol.dumps_compact({**data, "x": "a b"})
    assert " " not in text and json.loads(text)["x"] == "a b"


def test_long_request_goes_to_the_spool(tmp_path):
    many = ",".join(f"host{i:04d}x" for i in range(0, 400, 2))  # no hostlist folding
    r = req(exclude=many)
    with pytest.raises(SlurmtopoError, match="spool"):
        make_comment(r)
    with pytest.raises(SlurmtopoError, match="no requests/ directory"):
        make_comment(r, spool=str(tmp_path))          # the daemon makes it, not a user
    prepare_spool(str(tmp_path))
    c = make_comment(r, spool=str(tmp_path))
    assert c.startswith(PREFIX + "@") and len(c) == len(PREFIX) + 33
    files = os.listdir(tmp_path / "requests")
    assert len(files) == 1 and files[0] == c[len(PREFIX) + 1:] + ".json"
    assert stat.S_IMODE(os.stat(tmp_path / "requests" / files[0]).st_mode) == 0o644
    # the same request again: a file of its own (a random part in the name)
    assert make_comment(r, spool=str(tmp_path)) != c
    os.unlink(tmp_path / "requests" / sorted(set(os.listdir(tmp_path / "requests"))
                                             - set(files))[0])
    spec = parse_comment(c, spool=str(tmp_path))
    assert spec.request == r and spec.source.endswith(files[0])
    # a tampered file is refused (its name is its hash)
    path = tmp_path / "requests" / files[0]
    path.write_text(path.read_text().replace("exclude", "nodelist"))
    with pytest.raises(ProtocolError, match="does not match"):
        parse_comment(c, spool=str(tmp_path))
    with pytest.raises(ProtocolError, match="no --spool"):
        parse_comment(c)


@pytest.mark.parametrize("comment, match", [
    (PREFIX + "{not json", "not valid JSON"),
    (PREFIX + "[1]", "not a JSON object"),
    (PREFIX + '{"layout":{"tp":3,"dp":1,"world":8}}', "not divisible"),
    (PREFIX + '{"layout":{"tp":2},"bogus":1}', "unknown field"),
    (PREFIX + '{"layout":{"tpp":2}}', "unknown layout field"),
    (PREFIX + '{"layout":{"tp":2},"require":{"tp":"warp"}}', "unknown level"),
    (PREFIX + '{"layout":{"tp":2},"wait":{"tp":-1}}', "seconds"),
    (PREFIX + '{"layout":{"tp":2},"shape":{"nodes":0}}', "shape.nodes"),
    (PREFIX + "@../../etc/passwd", "bad request file name"),
    (PREFIX + '{"require":{}}', "no layout"),
    (PREFIX + '{"layout":{"tp":2},"launcher":"mpirun"}', "launcher must be one of srun, torchrun"),
    (PREFIX + '{"layout":{"tp":2},"launcher":["torchrun"]}', "launcher must be one of"),
])
def test_bad_tags_raise_one_line_errors(comment, match):
    with pytest.raises(ProtocolError, match=match) as ei:
        parse_comment(comment)
    assert "\n" not in ei.value.render()


def test_other_comments_are_not_ours():
    assert parse_comment("") is None
    assert parse_comment(None) is None
    assert parse_comment("my experiment 7") is None
    assert parse_comment(rejected_comment("x")) is None


def test_rejected_comment_fits_slurm():
    c = rejected_comment("can never run: " + "x" * 5000)
    assert c.startswith(protocol.REJECTED_PREFIX) and len(c.encode()) <= protocol.COMMENT_LIMIT
    assert "\n" not in rejected_comment("a\nb")


SCRIPT = """#!/bin/bash
#SBATCH --job-name=train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=h100:4
#SBATCH --switches=1@5:00
#
# plan ...
set -euo pipefail
echo '#SBATCH --switches=9'
"""


def test_script_shape_and_dropped_switches():
    assert script_shape(SCRIPT) == Shape(nodes=2, gpus_per_node=4, tasks_per_node=4)
    assert script_shape(SCRIPT, ["--nodes=3"]).nodes == 3
    text, notes = prepare_script(SCRIPT)
    assert "#SBATCH --switches=1" not in text
    assert "# slurmtopo daemon: --switches=1@5:00 dropped" in text
    assert "echo '#SBATCH --switches=9'" in text      # after the header: untouched
    assert len(notes) == 1


def test_submit_for_daemon_submits_held_and_tagged(slurm):
    r = req(require={"tp": "nvlink"}, gpus_per_node=4)
    notes = []
    jid = submit_for_daemon(slurm, r, SCRIPT, "/x/inv.yaml", args=["--partition=gpu"],
                            notes=notes)
    kind, args, hold = slurm.calls[0]
    assert kind == "submit" and hold is True
    assert args[0] == "--partition=gpu" and args[-1].startswith("--comment=" + PREFIX)
    j = slurm.job(jid)
    assert j.held and j.state == "PENDING"
    spec = parse_comment(j.comment)
    assert spec.request == r and spec.shape == Shape(2, 4, 4)
    assert any("held for the placement daemon" in n for n in notes)


def test_submit_for_daemon_refuses_a_comment_of_its_own(slurm):
    with pytest.raises(SlurmtopoError, match="--comment"):
        submit_for_daemon(slurm, req(), SCRIPT, args=["--comment=mine"])
    with pytest.raises(SlurmtopoError, match="--comment"):
        submit_for_daemon(slurm, req(), SCRIPT.replace("#SBATCH --nodes=2",
                                                       "#SBATCH --comment=x"))
    assert not slurm.calls


def test_segment_flags_dropped_with_the_segment():
    """A pinned job's segment flags go with its --segment (alone they mean
    nothing to Slurm); the IMEX network option stays (it is the job's)."""
    script = SCRIPT.replace("#SBATCH --switches=1@5:00\n",
                            "#SBATCH --segment=2\n#SBATCH --spread-segments\n"
                            "#SBATCH --consolidate-segments\n"
                            "#SBATCH --network=unique-channel-per-segment\n")
    text, notes = prepare_script(script)
    assert "#SBATCH --spread-segments" not in text and "#SBATCH --segment" not in text
    assert "#SBATCH --consolidate-segments" not in text
    assert "#SBATCH --network=unique-channel-per-segment" in text and len(notes) == 3


@pytest.mark.parametrize("script, args, what", [
    (SCRIPT.replace("#SBATCH --nodes=2\n", "#SBATCH --nodes=2\n#SBATCH --array=0-3\n"), (),
     "--array 0-3"),
    (SCRIPT.replace("#SBATCH --job-name=train\n", "#SBATCH -a 1-2\n"), (), "--array 1-2"),
    (SCRIPT, ("--array=5",), "--array 5"),
    (SCRIPT + "#SBATCH hetjob\n#SBATCH --nodes=1\n", (), "heterogeneous"),
    (SCRIPT, ("--nodes=1", ":", "--nodes=2"), "heterogeneous"),
])
def test_array_and_het_jobs_are_refused_before_they_exist(script, args, what):
    """Releasing an array's id releases all its tasks (two started under
    --max-releases 1) and Slurm will not pin an array's nodes: refused at
    submission, nothing submitted (the daemon rejects one submitted by
    hand: tests/daemon/test_no_hostage.py)."""
    from slurmtopo.testing.slurm_backend import FakeSlurm

    slurm = FakeSlurm()
    with pytest.raises(SlurmtopoError, match=re.escape(what)):
        submit_for_daemon(slurm, req(), script, args=args)
    assert not slurm.jobs_
