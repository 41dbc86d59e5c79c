"""The use-case layer (slurmtopo.api): docs/api.md's example runs as printed,
and every command validates the inventory the same way."""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from slurmtopo import api
from slurmtopo.errors import InventoryError, SlurmtopoError
from slurmtopo.job.groups import Layout
from slurmtopo.job.request import JobRequest
from slurmtopo.testing.slurm_backend import FakeSlurm
from tests.test_plan_cli import EXAMPLES, ROOT, _one_line_error, run

DOC = ROOT / "docs" / "api.md"


def _blocks(kind):
    """The fenced blocks of docs/api.md whose info string is ``kind``."""
    return [body for info, body in re.findall(r"^```(\w*)\n(.*?)^```$", DOC.read_text(),
                                              re.S | re.M) if info == kind]


def test_docs_example_runs_as_printed(monkeypatch):
    monkeypatch.chdir(ROOT)
    code, printed = _blocks("python")[0], _blocks("")[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    assert out.getvalue() == printed


def _job(command=("python", "train.py")):
    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    return api.prepare(cluster, None, JobRequest(layout=Layout(tp=8, dp=2)), command)


def test_submit_sends_the_prepared_script():
    job = _job()
    backend = FakeSlurm(auto_schedule=False)
    done = api.submit(job, backend)
    assert not done.held and backend.jobs_[done.job_id].script == job.script_text
    assert backend.calls == [("submit", (), False)]


def test_submit_held_tags_the_job_for_the_daemon():
    backend = FakeSlurm(auto_schedule=False)
    done = api.submit(_job(), backend, held=True)
    assert done.held and backend.calls[0][2] is True and backend.jobs_[done.job_id].held
    assert any(a.startswith("--comment=slurmtopo:v1:") for a in backend.calls[0][1])
    assert any("submitted held" in n for n in done.notes)


def test_prepare_without_command_has_no_script():
    job = _job(command=())
    assert job.script is None and job.script_text is None
    with pytest.raises(SlurmtopoError, match="without a command"):
        api.submit(job, FakeSlurm())


def _typo_inventory(tmp_path):
    text = (EXAMPLES / "h100-4node-2leaf.yaml").read_text()
    bad = tmp_path / "typo.yaml"
    bad.write_text(text.rstrip("\n") + "\ncost:\n  alpha_uss: {NVLINK: 1.0}\n")
    return bad


def test_cost_typo_fails_at_load(tmp_path):
    bad = _typo_inventory(tmp_path)
    with pytest.raises(InventoryError, match="alpha_uss") as exc:
        api.load_cluster(str(bad))
    assert exc.value.path == str(bad)


@pytest.mark.parametrize("argv", [
    ["plan", "--tp", "8"],
    ["sbatch", "--tp", "8", "--state", "none", "--dry-run", "--", "true"],
])
def test_cost_typo_fails_every_command(argv, tmp_path, capsys):
    bad = _typo_inventory(tmp_path)
    code, _, err = run([*argv[:1], "--inventory", str(bad), *argv[1:]], capsys)
    _one_line_error(code, err, "alpha_uss", str(bad))


def test_cost_typo_stops_the_daemon(tmp_path):
    from slurmtopo.daemon.loop import inventory_loader

    with pytest.raises(InventoryError, match="alpha_uss"):
        inventory_loader(str(_typo_inventory(tmp_path)))()


def test_cost_typo_stops_the_start_time_step(tmp_path):
    from slurmtopo.binding.step import load_inventory_for_bind

    bad = str(_typo_inventory(tmp_path))
    with pytest.raises(InventoryError, match="alpha_uss"):
        load_inventory_for_bind({}, bad, [])
    # the recorded path unusable: said in the log, then the embedded copy (none here)
    log: list = []
    with pytest.raises(SlurmtopoError, match="embeds no inventory"):
        load_inventory_for_bind({"inventory_path": bad}, None, log)
    assert any("alpha_uss" in line for line in log)


def test_cost_parameters_are_built_once_per_load():
    from slurmtopo.cost import cost_params

    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    assert cost_params(cluster) is cost_params(cluster)
    again = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    assert cost_params(again) is not cost_params(cluster)
    assert cost_params(again) == cost_params(cluster)


def test_submit_keeps_the_run_dir_when_given_the_submit_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURMTOPO_RUN_DIR", raising=False)
    job = _job()
    backend = FakeSlurm(auto_schedule=False)
    done = api.submit(job, backend, submit_dir=str(tmp_path))
    where = tmp_path / ".slurmtopo" / "runs" / str(done.job_id)
    assert done.run_dir == str(where) and done.script_path == str(where / "job.sbatch")
    assert (where / "job.sbatch").read_text() == job.script_text
    # without submit_dir nothing is kept (a library caller's own choice)
    assert api.submit(job, backend).run_dir is None


def test_submit_checks_the_run_dir_before_submitting(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURMTOPO_RUN_DIR", raising=False)
    (tmp_path / ".slurmtopo").symlink_to(tmp_path)
    backend = FakeSlurm(auto_schedule=False)
    with pytest.raises(SlurmtopoError):
        api.submit(_job(), backend, submit_dir=str(tmp_path))
    assert backend.calls == []  # refused before the job exists


def test_live_state_reads_slurm():
    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    backend = FakeSlurm(nodes=4, prefix="gpu0", partition="gpu")
    live = api.live_state(cluster, backend, partition="gpu")
    assert live.partition_members == ("gpu01", "gpu02", "gpu03", "gpu04")
    assert "live Slurm state" in live.source and set(live.features) == set(live.partition_members)
    assert api.live_state(cluster, backend, partition="nosuch").partition_members is None


def test_from_plan_takes_the_script_options():
    """One declaration of the script options: ScriptOptions, what prepare
    passes on; keyword changes are a shorthand for replace()."""
    from slurmtopo.sbatch import SbatchRequest

    job = _job()
    opts = api.ScriptOptions(job_name="llm", partition="gpu", options=(("qos", "high"),))
    a = SbatchRequest.from_plan(job.cluster, job.placement, job.request.layout,
                                ["python", "train.py"], job.request, opts)
    b = SbatchRequest.from_plan(job.cluster, job.placement, job.request.layout,
                                ["python", "train.py"], job.request, job_name="llm",
                                partition="gpu", options=(("qos", "high"),))
    assert a.render() == b.render()
    assert "#SBATCH --qos=high\n" in a.render() and "#SBATCH --job-name=llm\n" in a.render()
    with pytest.raises(TypeError):
        SbatchRequest.from_plan(job.cluster, job.placement, job.request.layout, ["true"],
                                job.request, no_such_option=1)


# ---------------------------------------------------------------------------
# what `slurmtopo sbatch` asks the api: Slurm's release, the submission notes

class _Release(FakeSlurm):
    """The in-memory Slurm, saying which release it is (sinfo --version)."""

    def version(self):
        return "24.05.4"


def _one_block_cluster(tmp_path) -> str:
    """etc/examples' NVL72 rack (one topology/block block), its trays named
    as the in-memory Slurm names its nodes."""
    text = (EXAMPLES / "gb200-nvl72-rack.yaml").read_text()
    for old, new in (("nvl72r1-t[01-18]", "node[1-18]"), ("nvl72r1-t[01-09]", "node[1-9]"),
                     ("nvl72r1-t[10-18]", "node[10-18]")):
        text = text.replace(old, new)
    path = tmp_path / "rack.yaml"
    path.write_text(text)
    return str(path)


def test_segment_release_asks_slurm_only_for_a_cluster_with_blocks(tmp_path):
    def no_slurm():
        raise AssertionError("Slurm asked for a cluster without blocks")

    flat = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    assert api.segment_release(flat, no_slurm) is None
    rack = api.load_cluster(_one_block_cluster(tmp_path))
    assert api.segment_release(rack, lambda: _Release(nodes=18, gpus=4)) == "24.05.4"
    assert api.segment_release(rack, lambda: FakeSlurm(nodes=18, gpus=4)) is None  # cannot say


def test_sbatch_on_live_state_of_a_block_cluster_asks_the_release(tmp_path, monkeypatch):
    """`slurmtopo sbatch` against live state on a topology/block cluster
    without --slurm-version asks the job's backend for the release (it used
    to stop with a NameError there)."""
    from tests.clirun import run_cli

    fake = _Release(nodes=18, gpus=4)
    monkeypatch.setattr("slurmtopo.slurm.get_backend", lambda name="auto", **kw: fake)
    code, out, err = run_cli(["sbatch", "--inventory", _one_block_cluster(tmp_path),
                              "--tp", "4", "--dp", "4", "--dry-run", "--json", "--",
                              "python", "t.py"])
    assert code == 0, err
    import json

    doc = json.loads(out)
    assert doc["dry_run"] is True and len(doc["hosts"]) == 4
    assert any("live Slurm state" in n for n in doc["notes"])


def test_submission_notes_say_what_only_the_daemon_reads(tmp_path):
    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    req = JobRequest(layout=Layout(tp=8), wait={"dp": 600})
    job = api.prepare(cluster, None, req, ["python", "t.py"])
    assert api.submission_notes(job, held=False) == [
        "--wait only matters with --daemon (the placement daemon waits; sbatch does not)"]
    held = api.submission_notes(job, held=True, spool=str(tmp_path / "spool"))
    assert len(held) == 1 and held[0].startswith(
        f"warning: no placement daemon is running with spool {tmp_path / 'spool'}")
