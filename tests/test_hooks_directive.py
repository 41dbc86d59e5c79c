"""The #SLURMTOPO directive: found where it may be, read with slurmtopo
sbatch's own options, refused with its reason otherwise (issue 39;
slurmtopo/hooks/directive.py, slurmtopo/commands/directive.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from slurmtopo.commands.directive import MAX_NUMBER, option_kinds, parse_directive
from slurmtopo.hooks.directive import (ENV_VAR, MAX_BYTES, MAX_LINES, MAX_WORDS,
                                       DirectiveError, find_directive, header_problem)

SCRIPT = ("#!/bin/bash\n#SBATCH --nodes=2\nset -e\n#SLURMTOPO --tp 8 --pp 2\n"
          "#SLURMTOPO --framework megatron  # a comment\n#SLURMTOPOX --tp 4\nsrun x\n")


def test_lines_after_the_first_command_env_and_comment_in_order():
    d = find_directive(SCRIPT, {ENV_VAR: "--dp 2"}, "#SLURMTOPO --daemon", "job.sh")
    assert d.words == ("--tp", "8", "--pp", "2", "--framework", "megatron", "--dp", "2",
                       "--daemon")
    assert d.sources == ("job.sh:4", "job.sh:5", f"${ENV_VAR}", "--comment")
    assert d.where("--dp") == f"${ENV_VAR}"


def test_no_directive_anywhere_is_none():
    assert find_directive("#!/bin/sh\n#SBATCH -N1\nsrun x\n", {}, "a comment") is None
    assert find_directive(None, {ENV_VAR: "  "}, None) is None
    # another word that starts the same, and a comment that only mentions it
    assert find_directive("#SLURMTOPOX --tp 2\n", {}, "see #SLURMTOPO") is None


def test_later_value_wins_as_on_sbatch_command_line():
    d = find_directive("x\n#SLURMTOPO --tp 8\n", {ENV_VAR: "#SLURMTOPO --tp 4"}, None)
    assert parse_directive(d).values["tp"] == 4


def test_header_line_is_what_sbatch_refuses():
    text = "#!/bin/bash\n#SBATCH -N 1\n#SLURMTOPO --tp 8\nhostname\n"
    why = header_problem(text, "job.sh")
    assert why.startswith("job.sh:3: sbatch reads #SLURMTOPO lines before the script's first "
                          "command")
    assert header_problem(SCRIPT, "job.sh") is None


@pytest.mark.parametrize("env,why", [
    ("--config " + "x" * MAX_BYTES, f"at most {MAX_BYTES:,}"),
    ("-x " * (MAX_WORDS + 1), f"at most {MAX_WORDS}"),
    ("--tp\x018", "control character"),
    ("--tp '8", "unmatched '"),
], ids=["bytes", "words", "control", "quote"])
def test_bounds_before_parsing(env, why):
    with pytest.raises(DirectiveError, match=why):
        find_directive(None, {ENV_VAR: env})


def test_too_many_lines():
    text = "x\n" + "#SLURMTOPO --tp 2\n" * (MAX_LINES + 1)
    with pytest.raises(DirectiveError, match=f"more than {MAX_LINES}"):
        find_directive(text, {}, None, "job.sh")


def test_values_are_slurmtopo_sbatch_options():
    d = find_directive(None, {ENV_VAR: "--framework torchtitan --dp-shard -1 --tp 4 "
                                       "--require tp=nvlink --launcher torchrun --daemon"})
    p = parse_directive(d)
    assert p.values["framework"] == "torchtitan" and p.values["dp_shard"] == -1
    assert p.values["require"] == ("tp=nvlink",) and p.values["daemon"] is True
    assert p.given == {"framework", "dp_shard", "tp", "require", "launcher", "daemon"}
    # defaults are filled in as slurmtopo sbatch's
    assert p.values["pp"] == 1 and p.values["topology_request"] == "auto"


@pytest.mark.parametrize("words,why", [
    ("--nodes 64", "--nodes is sbatch's own option"),
    ("-N2", "-N is sbatch's own option"),
    ("--partition gpu", "--partition/-p is sbatch's own option"),
    ("--exclusive", "--exclusive is sbatch's own option"),
    ("--inventory /tmp/x.yaml", "--inventory is set by the site's hooks configuration"),
    ("--python /tmp/py", "--python is set by the site's hooks configuration"),
    ("--state none", "--state is set by the site's hooks configuration"),
    ("--run-dir /tmp/r", "export SLURMTOPO_RUN_DIR"),
    ("--container-image x", "srun line"),
    ("--dry-run", "a directive has no output"),
    ("--bogus", "no such option --bogus"),
    ("--tp 8 train.py", "extra argument"),
    ("--tp 8;rm", "holds ';'"),
    ("--tp $(id)", r"holds '\$'"),
    ("--order `id`", "holds '`'"),
    ("--socket-ifname 'eth0|x'", r"holds '\|'"),
    ("--config ../../etc/x.toml", "a path with '..'"),
    ("--tp 99999999999", f"out of range \\(1 to {MAX_NUMBER:,}\\)"),
    ("--tp 0", "out of range"),
    ("--tp x", "not a valid integer"),
])
def test_refused_with_the_reason(words, why):
    with pytest.raises(DirectiveError, match=why) as exc:
        parse_directive(find_directive(None, {ENV_VAR: words}))
    assert exc.value.render().startswith(f"${ENV_VAR}: ")


def test_error_names_the_script_line():
    with pytest.raises(DirectiveError, match=r"^job.sh:5: --inventory"):
        parse_directive(find_directive("x\n\n\n#SLURMTOPO --tp 2\n#SLURMTOPO --inventory /x\n",
                                       {}, None, "job.sh"))


def test_option_kinds_for_the_controller():
    kinds = option_kinds()
    assert kinds["--tp"] == "int" and kinds["--daemon"] == "flag"
    assert kinds["--dp-shard"] == "int0" and kinds["--master-port"] == "port"
    assert kinds["--launcher"] == "choice:srun|torchrun"
    assert not {"--inventory", "--partition", "--nodelist", "--state", "--python"} & set(kinds)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_read_or_refused_in_one_line(text):
    """Whatever a user writes: a directive, or one DirectiveError line."""
    try:
        d = find_directive(f"x\n#SLURMTOPO {text}\n", {}, None, "job.sh")
        if d is not None:
            parse_directive(d)
    except DirectiveError as exc:
        assert "\n" not in exc.render()
