"""The hooks' Lua files, run by the real Lua interpreters Slurm embeds
(5.1 for Debian's 22.05, 5.4 for the 25.11/26.05 builds; install-deps.sh
installs both) with a stand-in for the tables Slurm hands them: what
cli_filter.lua does with a job with and without a directive, with each
answer of the planning call, and with `srun torchrun` inside a planned job;
that its shell quoting delivers any option text intact to a real process;
and that job_submit.lua accepts and refuses exactly the directives the
Python parser accepts and refuses."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmtopo.hooks import install

LUAS = ["lua5.1", "lua5.4"]


def _lua(name):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (bash scripts/install-deps.sh installs lua5.1 and "
                    "lua5.4)", pytrace=False)
    return path


#: what Slurm gives a cli_filter script: the slurm table, and an options
#: table whose reads and writes go through a metatable (cli_filter_lua.c)
PRELUDE = r"""
local out = {}
function emit(...)
  local t = {}
  for i = 1, select("#", ...) do t[#t + 1] = tostring(select(i, ...)) end
  out[#out + 1] = table.concat(t, "\t")
end
slurm = {SUCCESS = 0, ERROR = -1}
SETS = {}
function make_options(values, argv, kind)
  local o = {}
  setmetatable(o, {
    __index = function(t, k)
      if k == "argv" then return argv end
      if k == "type" then return kind end
      return values[k]
    end,
    __newindex = function(t, k, v) SETS[#SETS + 1] = k .. "=" .. v; values[k] = v end})
  return o
end
slurm.json_cli_options = function(o) return JSON_OPTIONS end
POPEN = {}
ANSWER = nil
if ANSWER_FROM ~= "real" then
  io.popen = function(cmd, mode)
    POPEN[#POPEN + 1] = cmd
    return {read = function() return ANSWER end, close = function() return true end}
  end
end
function finish() for _, l in ipairs(out) do io.write(l, "\n") end end
"""


def run_lua(lua, script: Path, body: str, env=None, answer_from="mock", cwd=None):
    prog = ("ANSWER_FROM = " + json.dumps(answer_from) + "\n" + PRELUDE
            + f"dofile({json.dumps(str(script))})\n" + body + "\nfinish()\n")
    p = subprocess.run([_lua(lua), "-"], input=prog, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=60, cwd=cwd)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines(), p.stderr


@pytest.fixture
def cli_filter(tmp_path):
    settings = install.HookSettings(command="/opt/slurmtopo/bin/slurmtopo",
                                    inventory="/etc/slurmtopo/cluster.json")
    path = tmp_path / "cli_filter.lua"
    path.write_text(install.render_cli_filter(settings, install.template(install.CLI_FILTER)))
    return path


def _answer(*lines):
    return "slurmtopo-hook 1\n" + "".join(l + "\n" for l in lines)


@pytest.mark.parametrize("lua", LUAS)
def test_no_directive_no_planning_call(lua, cli_filter, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/bash\n#SBATCH -N 2\nsrun hostname\n# SLURMTOPO is mentioned here\n")
    out, err = run_lua(lua, cli_filter, f"""
local o = make_options({{nodes = "2"}}, {{"{job}"}}, "sbatch")
emit("rc", slurm_cli_setup_defaults(o, false), slurm_cli_pre_submit(o, 0))
emit("popen", #POPEN, "sets", #SETS)""")
    assert out == ["rc\t0\t0", "popen\t0\tsets\t0"] and err == ""


@pytest.mark.parametrize("lua", LUAS)
def test_directive_planned_and_applied(lua, cli_filter, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/bash\nset -e\n#SLURMTOPO --tp 8\nsrun x\n")
    answer = _answer("set\tnodes\t2", "set\tswitches\t1@5:00", "note\tplanned 16 rank(s)", "done")
    out, err = run_lua(lua, cli_filter, f"""
ANSWER = {json.dumps(answer)}
JSON_OPTIONS = '{{"argv":["{job}"]}}'
local o = make_options({{}}, {{"{job}"}}, "sbatch")
emit("rc", slurm_cli_pre_submit(o, 0))
for _, s in ipairs(SETS) do emit("set", s) end
emit("cmd", POPEN[1])""")
    assert out[:3] == ["rc\t0", "set\tnodes=2", "set\tswitches=1@5:00"]
    cmd = out[3]
    assert "SLURMTOPO_HOOK_ACTIVE=1 exec timeout -k 1 5 '/opt/slurmtopo/bin/slurmtopo' hooks " \
           "plan --inventory '/etc/slurmtopo/cluster.json'" in cmd
    assert cmd.endswith("2>/dev/null </dev/null")
    assert err == "slurmtopo: planned 16 rank(s)\n"


@pytest.mark.parametrize("lua", LUAS)
@pytest.mark.parametrize("answer,rc,sets,line", [
    (_answer("error\t$SLURMTOPO_DIRECTIVE: bad"), -1, 0,
     "slurmtopo: error: $SLURMTOPO_DIRECTIVE: bad"),
    (_answer("warning\tno inventory"), 0, 0,
     "slurmtopo: warning: the job goes in unplanned: no inventory"),
    (_answer("set\tnodes\t2"), 0, 0,
     "slurmtopo: warning: the job goes in unplanned: an answer cut short (timed out?)"),
    (_answer("set\tnodes\t2", "set\tpartition\tmine", "done"), 0, 0,
     "slurmtopo: warning: the job goes in unplanned: an option it may not set (partition)"),
    ("", 0, 0, "slurmtopo: warning: the job goes in unplanned: no answer (timed out or not "
               "installed?)"),
    ("Traceback (most recent call last):\n", 0, 0,
     "slurmtopo: warning: the job goes in unplanned: an answer it does not understand"),
], ids=["bad-directive", "warning", "cut-short", "not-settable", "nothing", "garbage"])
def test_every_other_answer(lua, cli_filter, answer, rc, sets, line):
    out, err = run_lua(lua, cli_filter, f"""
ANSWER = {json.dumps(answer)}
JSON_OPTIONS = '{{}}'
local o = make_options({{}}, {{}}, "sbatch")
emit("rc", slurm_cli_pre_submit(o, 0), #SETS)""", env={"SLURMTOPO_DIRECTIVE": "--tp 8"})
    assert out == [f"rc\t{rc}\t{sets}"]
    assert err.splitlines() == [line]


@pytest.mark.parametrize("lua", LUAS)
def test_header_directive_explained_before_sbatch_fails(lua, cli_filter, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/bash\n#SBATCH -N 2\n#SLURMTOPO --tp 8\nsrun x\n")
    out, err = run_lua(lua, cli_filter, f"""
local o = make_options({{}}, {{"{job}"}}, "sbatch")
emit("rc", slurm_cli_setup_defaults(o, true), slurm_cli_setup_defaults(o, false))""")
    assert out == ["rc\t0\t-1"]
    assert err.startswith(f"slurmtopo: error: {job}:3: sbatch reads #SLURMTOPO lines")


@pytest.mark.parametrize("lua", LUAS)
@pytest.mark.parametrize("argv,env,rc", [
    (["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=h:1", "x.py"], {}, -1),
    (["/usr/bin/torchrun", "--rdzv_backend", "etcd", "x.py"], {}, -1),
    (["python3", "-m", "torch.distributed.run", "--rdzv-backend=c10d", "x.py"], {}, -1),
    (["torchrun", "--node-rank=0", "x.py"], {}, -1),
    (["torchrun", "--standalone", "x.py"], {"SLURMTOPO_NNODES": "2"}, -1),
    (["torchrun", "x.py"], {"PET_RDZV_BACKEND": "c10d"}, -1),
    (["torchrun", "--nproc-per-node=8", "x.py", "--rdzv-backend=c10d"], {}, 0),
    (["torchrun", "--rdzv-backend=static", "x.py"], {}, 0),
    (["python3", "train.py", "--rdzv-backend=c10d"], {}, 0),
], ids=["c10d", "etcd", "python-m", "node-rank", "standalone", "env", "after-script",
        "static", "not-torchrun"])
def test_srun_torchrun_in_a_planned_job(lua, cli_filter, argv, env, rc):
    args = ", ".join(json.dumps(a) for a in argv)
    out, err = run_lua(lua, cli_filter, f"""
local o = make_options({{}}, {{{args}}}, "srun")
emit("rc", slurm_cli_pre_submit(o, 0), #POPEN)""",
                       env={"SLURM_JOB_ID": "5", "SLURMTOPO_JOB_PLAN": "5:z1:x", **env})
    assert out == [f"rc\t{rc}\t0"]
    assert (err.startswith("slurmtopo: error: srun torchrun: ") if rc else err == "")
    # the same srun in a job the hooks did not plan: not theirs to refuse
    out, _ = run_lua(lua, cli_filter, f"""
local o = make_options({{}}, {{{args}}}, "srun")
emit("rc", slurm_cli_pre_submit(o, 0))""", env={"SLURM_JOB_ID": "5", **env})
    assert out == ["rc\t0"]


@pytest.mark.parametrize("lua", LUAS)
def test_a_lua_error_never_blocks(lua, cli_filter):
    out, err = run_lua(lua, cli_filter, """
slurm.json_cli_options = function(o) error("boom") end
local o = make_options({}, {}, "sbatch")
emit("rc", slurm_cli_pre_submit(o, 0))""", env={"SLURMTOPO_DIRECTIVE": "--tp 8"})
    assert out == ["rc\t0"]
    assert err.startswith("slurmtopo: warning: cli_filter.lua: ") and "boom" in err
    assert err.rstrip().endswith("(the job is left as it was)")


@pytest.mark.parametrize("lua", LUAS)
def test_quoting_delivers_any_text_to_the_planning_call(lua, tmp_path):
    """The options document goes through /bin/sh as one word: quotes, $(),
    backticks, newlines and ; arrive as written and run nothing."""
    seen = tmp_path / "argv.json"
    fake = tmp_path / "slurmtopo"
    fake.write_text(f"#!/usr/bin/python3\nimport json, sys\njson.dump(sys.argv[1:], "
                    f"open({str(seen)!r}, 'w'))\nprint('slurmtopo-hook 1')\nprint('done')\n")
    fake.chmod(0o755)
    settings = install.HookSettings(command=str(fake), inventory="/x/it's inv.yaml")
    script = tmp_path / "cli_filter.lua"
    script.write_text(install.render_cli_filter(settings, install.template(install.CLI_FILTER)))
    nasty = json.dumps({"wrap": "echo 'x' \"$(touch /tmp/st-pwned)\" `id`; rm -f ~\nnext"})
    out, err = run_lua(lua, script, f"""
JSON_OPTIONS = {json.dumps(nasty)}
local o = make_options({{}}, {{}}, "sbatch")
emit("rc", slurm_cli_pre_submit(o, 0))""", env={"SLURMTOPO_DIRECTIVE": "--tp 8"},
                       answer_from="real")
    assert out == ["rc\t0"], err
    argv = json.loads(seen.read_text())
    assert argv[argv.index("--options") + 1] == nasty
    assert argv[argv.index("--inventory") + 1] == "/x/it's inv.yaml"
    assert not Path("/tmp/st-pwned").exists()


# --------------------------------------------------------------------------
# job_submit.lua


@pytest.fixture
def job_submit(tmp_path):
    from slurmtopo.commands.directive import option_kinds

    def make(hold=False):
        settings = install.HookSettings(command="/x/slurmtopo", inventory="/x/inv.yaml",
                                        hold_for_daemon=hold)
        path = tmp_path / f"job_submit-{hold}.lua"
        path.write_text(install.render_job_submit(settings, option_kinds(),
                                                  install.template(install.JOB_SUBMIT)))
        return path
    return make


JS_PRELUDE = """
slurm.log_user = function(fmt, ...) emit("user", string.format(fmt, ...)) end
slurm.log_error = function(fmt, ...) emit("log", string.format(fmt, ...)) end
"""

#: directives both parsers must agree on (accepted: None; refused: the reason)
CORPUS = [
    "--tp 8 --pp 2", "--framework torchtitan --dp-shard -1 --tp 2", "--tp=8 --daemon",
    "--require tp=nvlink --prefer dp=leaf", "--launcher torchrun", "--master-port 29500",
    "--torchrun 'python3 -m torch.distributed.run'", "--config conf/train.toml",
    "--tp 8;rm", "--tp $(id)", "--tp 99999999999", "--tp 0", "--inventory /x",
    "--nodes 2", "--partition gpu", "--bogus", "--launcher mpirun", "--master-port 70000",
    "--config ../../etc/shadow", "--daemon=yes", "--tp", "--order `id`",
]


@pytest.mark.parametrize("lua", LUAS)
def test_job_submit_agrees_with_the_python_parser(lua, job_submit):
    from slurmtopo.commands.directive import parse_directive
    from slurmtopo.hooks.directive import DirectiveError, find_directive

    body = []
    for i, text in enumerate(CORPUS):
        body.append(f"""
emit("case", {i}, slurm_job_submit({{script = "#!/bin/sh\\ntrue\\n",
      environment = {{SLURMTOPO_DIRECTIVE = {json.dumps(text)}}}}}, {{}}, 1000))""")
    out, _ = run_lua(lua, job_submit(), JS_PRELUDE + "\n".join(body))
    lua_rc = {int(l.split("\t")[1]): int(l.split("\t")[2]) for l in out if l.startswith("case")}
    for i, text in enumerate(CORPUS):
        try:
            parse_directive(find_directive(None, {"SLURMTOPO_DIRECTIVE": text}))
            python_ok = True
        except DirectiveError:
            python_ok = False
        assert (lua_rc[i] == 0) == python_ok, (text, lua_rc[i], python_ok)


@pytest.mark.parametrize("lua", LUAS)
def test_job_submit_no_directive_untouched(lua, job_submit):
    out, _ = run_lua(lua, job_submit(True), JS_PRELUDE + """
local job = {script = "#!/bin/sh\\n#SBATCH -N 2\\nsrun x\\n", comment = "mine",
             environment = {HOME = "/home/a"}}
emit("rc", slurm_job_submit(job, {}, 1000), job.comment, tostring(job.priority))""")
    assert out == ["rc\t0\tmine\tnil"]


@pytest.mark.parametrize("lua", LUAS)
def test_job_submit_reason_names_the_line(lua, job_submit):
    out, _ = run_lua(lua, job_submit(), JS_PRELUDE + """
local job = {script = "#!/bin/sh\\ntrue\\n#SLURMTOPO --tp 8 --inventory /x\\n", environment = {}}
emit("rc", slurm_job_submit(job, {}, 1000))""")
    assert out[0].startswith("user\tslurmtopo: script:3: --inventory is not an option a "
                             "directive takes")
    assert out[1] == "rc\t-1"


@pytest.mark.parametrize("lua", LUAS)
def test_job_submit_holds_a_planned_job_for_the_daemon(lua, job_submit):
    from slurmtopo.hooks.submit import export_safe

    tag = 'slurmtopo:v1:{"layout":{"tp":2},"shape":{"nodes":2}}'
    out, _ = run_lua(lua, job_submit(True), JS_PRELUDE + f"""
local job = {{script = "#!/bin/sh\\ntrue\\n", environment = {{SLURMTOPO_DIRECTIVE = "--tp 2",
  SLURMTOPO_PLAN = "z1:abc-_", SLURMTOPO_DAEMON_TAG = {json.dumps(export_safe(tag))}}}}}
emit("rc", slurm_job_submit(job, {{}}, 1000), job.comment, job.priority)
local bad = {{script = "#!/bin/sh\\n", environment = {{SLURMTOPO_DIRECTIVE = "--tp 2",
  SLURMTOPO_PLAN = "z1:a,b"}}}}
emit("bad", slurm_job_submit(bad, {{}}, 1000))
local pcall_job = setmetatable({{}}, {{__index = function() error("boom") end}})
emit("guard", slurm_job_submit(pcall_job, {{}}, 1000))""")
    assert f"rc\t0\t{tag}\t0" in out
    assert "bad\t-1" in out and "guard\t0" in out
    assert any(l.startswith("log\tslurmtopo job_submit.lua: ") and "boom" in l for l in out)


@pytest.mark.parametrize("lua", LUAS)
def test_a_script_on_a_pipe_is_not_read_again(lua, cli_filter):
    """sbatch <(...) names /dev/fd/N, which sbatch has read to its end (a
    named pipe would wait for a writer): never reopened; the environment's
    directive still plans the job."""
    out, _ = run_lua(lua, cli_filter, """
ANSWER = "slurmtopo-hook 1\\ndone\\n"
JSON_OPTIONS = '{}'
local o = make_options({}, {"/dev/stdin"}, "sbatch")
emit("rc", slurm_cli_setup_defaults(o, false), slurm_cli_pre_submit(o, 0), #POPEN)""",
                     env={"SLURMTOPO_DIRECTIVE": "--tp 8"})
    assert out == ["rc\t0\t0\t1"]
