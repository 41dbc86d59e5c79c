"""The cli_filter hook's planning call (`slurmtopo hooks plan`) and the
translation between sbatch's options and the plan (slurmtopo/hooks/submit.py):
the options it sets are those of `slurmtopo sbatch`'s script for the same
job, the plan in the job's environment is `slurmtopo plan`'s, and every
failure is one protocol line and an exit status, never a traceback."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurmtopo.cli import main
from slurmtopo.commands.hooks import PROTOCOL
from slurmtopo.hooks.submit import (HookRefusal, SubmitOptions, export_safe, job_shape,
                                    plan_inputs, script_launcher)
from slurmtopo.plan.plandoc import plan_from_env_value, planned_placement
from slurmtopo.plan.planenv import MAX_ENV_BYTES, PLAN_ENV, plan_env_value
from slurmtopo.errors import SlurmtopoError

ROOT = Path(__file__).resolve().parents[1]
INV = str(ROOT / "etc" / "examples" / "h100-4node-2leaf.yaml")


def run_plan(capsys, options, *extra, env=None, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.delenv("SLURMTOPO_DIRECTIVE", raising=False)
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as exc:
        main(["hooks", "plan", "--inventory", INV, "--state", "none", *extra,
              "--options", json.dumps(options)])
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == PROTOCOL
    return exc.value.code, lines[1:]


def sets(lines):
    return [tuple(l.split("\t")[1:]) for l in lines if l.startswith("set\t")]


def test_plain_job_gets_slurmtopo_sbatch_options(capsys, monkeypatch, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 2\nset -e\n#SLURMTOPO --tp 8 --dp 2\n"
                      "srun python train.py\n")
    rc, lines = run_plan(capsys, {"nodes": "2", "argv": [str(script)]},
                         monkeypatch=monkeypatch)
    assert rc == 0 and lines[-1] == "done"
    got = dict(sets(lines))
    assert got["nodes"] == "2" and got["ntasks-per-node"] == "8" and got["ntasks"] == "16"
    assert got["gpus-per-node"] == "8" and got["switches"] == "1@5:00"
    assert got["export"].startswith(f"ALL,{PLAN_ENV}=z1:")
    assert lines[-2].startswith("note\tplanned 16 rank(s) on 2 node(s)")
    # the same directives slurmtopo sbatch writes for this job
    with pytest.raises(SystemExit):
        main(["sbatch", "--inventory", INV, "--tp", "8", "--dp", "2", "--state", "none",
              "--dry-run", "--json", "--", "python", "train.py"])
    dry = json.loads(capsys.readouterr().out)
    for d in dry["directives"]:
        name, _, value = d[2:].partition("=")
        if name in ("nodes", "ntasks-per-node", "gpus-per-node", "switches"):
            assert got[name] == value, name
    # and the plan in the environment is slurmtopo plan's
    value = got["export"].split(f"{PLAN_ENV}=", 1)[1]
    planned = planned_placement(plan_from_env_value(value))
    assert list(planned.hosts) == dry["hosts"]
    with pytest.raises(SystemExit):
        main(["plan", "--inventory", INV, "--tp", "8", "--dp", "2", "--json"])
    ref = json.loads(capsys.readouterr().out)["rankmap"]["ranks"]
    assert [(s.host, s.gpu) for s in planned.slots] == [(r["host"], r["gpu"]) for r in ref]


def test_job_without_directive_gets_nothing(capsys, monkeypatch, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 2\nsrun true\n")
    rc, lines = run_plan(capsys, {"argv": [str(script)]}, monkeypatch=monkeypatch)
    assert rc == 0 and lines == ["done"]


def test_wrap_shape_and_env_directive(capsys, monkeypatch):
    """submitit: the shape in sbatch's options, the directive in the env."""
    rc, lines = run_plan(capsys, {"nodes": "2", "ntasks-per-node": "4", "gpus-per-node": "4",
                                  "wrap": "srun python -u -m submitit.core._submit /x"},
                         env={"SLURMTOPO_DIRECTIVE": "--tp 2"}, monkeypatch=monkeypatch)
    got = dict(sets(lines))
    assert rc == 0 and got["ntasks"] == "8" and got["ntasks-per-node"] == "4"
    assert got["gpus-per-node"] == "4"


def test_torchrun_in_the_script_one_task_per_node(capsys, monkeypatch, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nset -e\n#SLURMTOPO --tp 8 --dp 2\n"
                      "srun torchrun --nproc-per-node=8 train.py\n")
    rc, lines = run_plan(capsys, {"argv": [str(script)], "ntasks-per-node": "8"},
                         monkeypatch=monkeypatch)
    got = dict(sets(lines))
    assert rc == 0 and got["ntasks-per-node"] == "1" and got["ntasks"] == "2"
    assert got["gpus-per-node"] == "8"
    assert "(torchrun: one task per node)" in lines[-2]


def test_daemon_directive_holds_and_tags(capsys, monkeypatch):
    from slurmtopo.daemon.protocol import parse_comment

    monkeypatch.delenv("NCCL_VERSION", raising=False)
    monkeypatch.delenv("SLURMTOPO_HAZARDS", raising=False)
    rc, lines = run_plan(capsys, {"wrap": "true"},
                         env={"SLURMTOPO_DIRECTIVE": "--tp 4 --dp 2 --daemon"},
                         monkeypatch=monkeypatch)
    got = dict(sets(lines))
    assert rc == 0 and got["hold"] == "hold" and "switches" not in got
    spec = parse_comment(got["comment"])
    assert spec.request.layout.tp == 4 and spec.shape.nodes == 1
    assert spec.hazards.policy == () and spec.hazards.nccl is None


def test_daemon_directive_carries_the_hazard_policy(capsys, monkeypatch):
    """The daemon checks the nodes it picks with the job's own policy and
    NCCL release (docs/hazards.md): the directive path tags them too."""
    from slurmtopo.daemon.protocol import parse_comment

    rc, lines = run_plan(capsys, {"wrap": "true"},
                         env={"SLURMTOPO_DIRECTIVE": "--tp 4 --dp 2 --daemon --hazard "
                                                     "uneven-ranks=error --nccl-version 2.27.7"},
                         monkeypatch=monkeypatch)
    spec = parse_comment(dict(sets(lines))["comment"])
    assert rc == 0 and spec.hazards.policy == ("uneven-ranks=error",)
    assert spec.hazards.nccl == "2.27.7"


def test_tag_for_job_submit(capsys, monkeypatch):
    rc, lines = run_plan(capsys, {"wrap": "true"}, "--tag-for-daemon",
                         env={"SLURMTOPO_DIRECTIVE": "--tp 4"}, monkeypatch=monkeypatch)
    export = dict(sets(lines))["export"]
    tag = export.split(",SLURMTOPO_DAEMON_TAG=", 1)[1]
    assert "," not in tag and '"' not in tag and tag.startswith("slurmtopo:v1:%7B")


@pytest.mark.parametrize("env,code,head", [
    ({"SLURMTOPO_DIRECTIVE": "--tp 8;id"}, 2, "error\t$SLURMTOPO_DIRECTIVE: '8;id' holds ';'"),
    ({"SLURMTOPO_DIRECTIVE": "--tp 64"}, 3, "warning\t"),
    ({"SLURMTOPO_DIRECTIVE": "--tp 8 --gpus-per-node 99"}, 3, "warning\t"),
], ids=["bad-directive", "does-not-fit", "impossible"])
def test_failures_are_one_protocol_line(capsys, monkeypatch, env, code, head):
    rc, lines = run_plan(capsys, {"wrap": "true"}, env=env, monkeypatch=monkeypatch)
    assert rc == code and len(lines) == 1 and lines[0].startswith(head), lines


def test_missing_inventory_is_a_warning(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SLURMTOPO_DIRECTIVE", "--tp 2")
    with pytest.raises(SystemExit) as exc:
        main(["hooks", "plan", "--inventory", str(tmp_path / "gone.yaml"), "--state", "none",
              "--options", '{"wrap":"true"}'])
    out = capsys.readouterr().out.splitlines()
    assert exc.value.code == 3 and out[1].startswith("warning\t") and "gone.yaml" in out[1]


def test_a_bug_is_a_warning_never_a_traceback(capsys, monkeypatch):
    import slurmtopo.commands.hook_plan as hook_plan

    def boom(*a, **k):
        raise ZeroDivisionError("oops")
    monkeypatch.setattr(hook_plan, "plan_hook", boom)
    with pytest.raises(SystemExit) as exc:
        main(["hooks", "plan", "--inventory", INV, "--options", "{}"])
    out = capsys.readouterr()
    assert exc.value.code == 3 and out.err == ""
    assert out.out.splitlines()[1] == "warning\tinternal error (ZeroDivisionError: oops)"


def test_deadline_bounds_the_call(capsys, monkeypatch):
    import time

    import slurmtopo.commands.hook_plan as hook_plan

    monkeypatch.setattr(hook_plan, "plan_hook", lambda *a, **k: time.sleep(30))
    with pytest.raises(SystemExit) as exc:
        main(["hooks", "plan", "--inventory", INV, "--deadline", "0.2", "--options", "{}"])
    assert exc.value.code == 3
    assert capsys.readouterr().out.splitlines()[1] == "warning\tplanning took longer than 0.2 s"


def test_header_directive_is_explained(capsys, monkeypatch, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SLURMTOPO --tp 8\nhostname\n")
    rc, lines = run_plan(capsys, {"argv": [str(script)]}, monkeypatch=monkeypatch)
    assert rc == 2 and lines[0].startswith("error\tjob.sh:2: sbatch reads #SLURMTOPO lines")


def test_config_of_another_user_refused(capsys, monkeypatch, tmp_path):
    cfg = tmp_path / "train.toml"
    cfg.write_text("[parallelism]\ntensor_parallel_degree = 8\n")
    os.chmod(cfg, 0o666)   # others may write it: never read
    rc, lines = run_plan(capsys, {"wrap": "true"},
                         env={"SLURMTOPO_DIRECTIVE": f"--framework torchtitan --config {cfg}"},
                         monkeypatch=monkeypatch)
    assert rc == 2 and "a directive reads only your own files" in lines[0]
    os.chmod(cfg, 0o644)
    rc, lines = run_plan(capsys, {"wrap": "true", "nodes": "1", "gpus-per-node": "8"},
                         env={"SLURMTOPO_DIRECTIVE": f"--framework torchtitan --config {cfg}"},
                         monkeypatch=monkeypatch)
    assert rc == 0, lines


# --------------------------------------------------------------------------
# the pure translation


def test_options_document_bounded_and_checked():
    with pytest.raises(SlurmtopoError, match="at most"):
        SubmitOptions.from_json("{" + " " * (2 << 20) + "}")
    with pytest.raises(SlurmtopoError, match="not JSON"):
        SubmitOptions.from_json("{")
    with pytest.raises(SlurmtopoError, match="argv"):
        SubmitOptions.from_json('{"argv": "x"}')
    o = SubmitOptions.from_json('{"nodes":"2","spank:x":"1","switches":"unset","argv":["a"]}')
    assert o.get("nodes") == "2" and o.get("spank:x") is None and o.get("switches") is None
    assert o.argv == ("a",)


@pytest.mark.parametrize("values,shape", [
    ({"nodes": "2", "ntasks-per-node": "8"}, (16, 8)),
    ({"nodes": "2", "gpus-per-node": "h100:8"}, (16, 8)),
    ({"ntasks": "12"}, (12, None)),
    ({"nodes": "2-4", "ntasks-per-node": "8"}, (None, 8)),
    ({}, (None, None)),
])
def test_job_shape(values, shape):
    assert job_shape(SubmitOptions(values)) == shape


def test_plan_inputs_from_sbatch_options():
    got = plan_inputs(SubmitOptions({"partition": "gpu", "nodelist": "n[1-2]",
                                     "exclusive": "exclusive", "constraint": "a100"}))
    assert got == {"partition": "gpu", "nodelist": "n[1-2]", "sb_constraint": "a100",
                   "exclusive": True}
    assert plan_inputs(SubmitOptions({"exclusive": "user"}))["exclusive"] is False


@pytest.mark.parametrize("text,want", [
    ("srun torchrun --nproc-per-node=8 x.py", "torchrun"),
    ("srun python -m torch.distributed.run x.py", "torchrun"),
    ("srun /opt/bin/torchrun x.py", "torchrun"),
    ("# srun torchrun x.py\nsrun python x.py", None),
    ("srun python train.py --name torchrunner", None),
])
def test_script_launcher(text, want):
    assert script_launcher([text]) == want


def test_export_safe_survives_sbatch_export_parsing():
    text = 'slurmtopo:v1:{"layout":{"tp":4},"x":"a,b"}'
    safe = export_safe(text)
    assert not set(safe) & set(',"\'=') and safe.startswith("slurmtopo:v1:%7B")
    from urllib.parse import unquote
    assert unquote(safe) == text


def _prepared(**options):
    from slurmtopo import api

    inv = api.load_cluster(INV)
    req = api.job_request(tp=8, dp=2)
    return api.prepare(inv, None, req, ("true",), with_costs=False).script


def test_option_changes_agree_with_the_users_gpu_options():
    from slurmtopo.hooks.submit import option_changes

    script = _prepared()
    got = dict(option_changes(script, SubmitOptions({"gpus": "a100:4", "gres": "gpu:2,tmp:10",
                                                     "gpus-per-task": "2"}), "srun", "z1:x"))
    assert got["gpus"] == "a100:16" and got["gres"] == "gpu:8,tmp:10"
    assert got["gpus-per-task"] == "1"
    assert got["export"] == "ALL,SLURMTOPO_PLAN=z1:x"
    got = dict(option_changes(script, SubmitOptions({"export": "NONE,A=b"}), "srun", "z1:x"))
    assert got["export"] == "NONE,A=b,SLURMTOPO_PLAN=z1:x"


@pytest.mark.parametrize("values,why", [
    ({"ntasks-per-gpu": "1"}, "tasks per GPU"),
    ({"array": "1-3"}, "job array"),
    ({"export": "ALL,SLURMTOPO_PLAN=x"}, "already names"),
    ({"comment": "mine"}, "has one"),
])
def test_option_changes_refused(values, why):
    from slurmtopo.hooks.submit import option_changes

    with pytest.raises(HookRefusal, match=why):
        option_changes(_prepared(), SubmitOptions(values), "srun", "z1:x",
                       daemon_comment="slurmtopo:v1:{}" if "comment" in values else None)


def test_plan_env_value_round_trip_and_bounds():
    doc = json.loads(_prepared().plan_json)
    value = plan_env_value(doc)
    assert set(value[3:]) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                 "0123456789-_")
    assert plan_from_env_value(value) == json.loads(json.dumps(doc))
    assert plan_env_value(doc) == value   # deterministic
    with pytest.raises(SlurmtopoError, match="not a slurmtopo plan"):
        plan_from_env_value("x" + value)
    with pytest.raises(SlurmtopoError, match="damaged"):
        plan_from_env_value(value[:-20])
    with pytest.raises(SlurmtopoError, match="more than"):
        plan_from_env_value("z1:" + "A" * MAX_ENV_BYTES)
    # a bomb: small value, huge JSON, refused after a bounded read
    import base64
    import zlib
    bomb = "z1:" + base64.urlsafe_b64encode(zlib.compress(b" " * (64 << 20), 9)).decode()
    with pytest.raises(SlurmtopoError, match="damaged"):
        plan_from_env_value(bomb)


def test_check_a_script(capsys, monkeypatch):
    monkeypatch.delenv("SLURMTOPO_DIRECTIVE", raising=False)
    script = str(ROOT / "tests" / "fixtures" / "hooks" / "train.sbatch")
    with pytest.raises(SystemExit) as exc:
        main(["hooks", "check", script, "--inventory", INV, "--state", "none", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0 and doc["directive"] is True
    got = dict(doc["set"])
    assert got["nodes"] == "2" and got["ntasks-per-node"] == "8"
    assert got["export"].startswith("ALL,SLURMTOPO_PLAN=<the plan, ")
    with pytest.raises(SystemExit):
        main(["hooks", "check", "--inventory", INV, "--state", "none"])
    assert capsys.readouterr().out == ("no #SLURMTOPO directive: the hooks leave this job as "
                                       "it is\n")


def test_srun_torchrun_making_its_own_job(capsys, monkeypatch):
    rc, lines = run_plan(capsys, {"nodes": "2", "argv": ["torchrun", "--nproc-per-node=8",
                                                        "train.py"]}, "--kind", "srun",
                         env={"SLURMTOPO_DIRECTIVE": "--tp 8 --dp 2"}, monkeypatch=monkeypatch)
    got = dict(sets(lines))
    assert rc == 0 and got["ntasks-per-node"] == "1" and got["ntasks"] == "2"
