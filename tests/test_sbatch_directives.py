"""``--sbatch`` extras are read the way sbatch reads ``#SBATCH`` lines
(slurmtopo/sbatch/directives.py): abbreviations, short letters and bundles
of the options the plan sets are refused like their full names, and what
only looks like one (a job name ``--nodes=3``, a comment) passes.

tests/integration/test_slurm_directives.py checks the same reading
against the real sbatch of every Slurm release the dev cluster runs."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from slurmtopo.errors import SlurmtopoError
from slurmtopo.sbatch import SbatchRequest, directives
from slurmtopo.sbatch.directives import (DirectiveError, parse_words, read_extras,
                                         split_directive)
from slurmtopo.sbatch.script import PLANNED, extras_problem
from slurmtopo.sbatch.slurm_options import NO, OPTIONAL, REQUIRED, VERSIONS, known_anywhere, table


def _req(*extra):
    return SbatchRequest(command=("true",), nodes=1, ntasks=1, ntasks_per_node=1, extra=extra)


# ---- the findings: sbatch's abbreviations of planned options passed -----

@pytest.mark.parametrize("extra, option", [
    ("-vN3", "--nodes"),                       # -v -N 3: 3 nodes for a 1-node plan
    ("--ntasks-per-no=1", "--ntasks-per-node"),
    ("--nodel=node4", "--nodelist"),
    ("--partit=gpu", "--partition"),
    ("-wnode4", "--nodelist"),
    ("--tasks-per-node=2", "--ntasks-per-node"),   # another name of the same option
    ("--qos=high --nodes=2", "--nodes"),           # a second option on the line
    ('--comment="a b" -N2', "--nodes"),
    ("--gres gpu:1", "--gres"),
    ("-G 1", "--gpus"),
    ("--nodefile=hosts", "--nodelist"),
    ("--segm=2", "--topology-request"),
])
def test_planned_options_are_refused_however_written(extra, option):
    with pytest.raises(SlurmtopoError) as exc:
        _req(extra).directives()
    assert f"--sbatch={extra}: " in exc.value.message
    assert option in exc.value.message


@pytest.mark.parametrize("extras", [
    ("--comment=x",), ("-J", "--nodes=3"), ("-J --nodes=3",),   # a job name "--nodes=3"
    ("--comment", "-N3"), ("--comment=x # -N2",),               # after # is a comment
    ("--mem=4G", "--qos=high"), ("-kx",), ("--container-image=nvcr.io#x",),  # SPANK plugin
    ("--",), ("--sig=B:USR1@60",),
])
def test_other_options_pass_as_written(extras):
    assert extras_problem(extras) is None
    assert _req(*extras).directives()[-len(extras):] == list(extras)


@pytest.mark.parametrize("extra, words", [
    ("--exc=node1", "--exc is ambiguous to sbatch (Slurm 22.05: --exclude, --exclusive)"),
    ("--no=1", "--no is ambiguous"),
    ("--gpu=1", "--gpu is ambiguous"),
    ("--contai=x", "(Slurm 25.11: --container, --container-id"),   # unique in 22.05 only
    ("-J", "-J (--job-name) needs an argument"),
    ("-y", "sbatch has no option -y"),
    ("--exclusive node1", "'node1' is not an option"),
    ("-- -N3", "'-N3' is not an option"),
    ("--container-image x", "'x' is not an option"),                # plugin values need =
    ("--requeue=1", "takes no argument in Slurm 22.05"),
    ("--comment='x", "unmatched '"),
    (r"--comment=a\ b", "read differently by Slurm releases"),
    ("-J x hetjob", "heterogeneous job"),
    ("--help", "submit nothing"),
    ("-V", "-V (sbatch reads it as --version)"),
    ("x", "must start with '-'"),
])
def test_what_sbatch_would_refuse_is_one_error(extra, words):
    why = extras_problem([extra])
    assert why is not None and words in why, why
    assert "\n" not in why


# ---- get_argument() -------------------------------------------------------

@pytest.mark.parametrize("line, words", [
    ("  -N 3\t-v ", ["-N", "3", "-v"]),
    ("--comment='a b' -v", ["--comment=a b", "-v"]),
    ('--comment="it\'s"', ["--comment=it's"]),
    (r'--comment=\"x\" -v', ['--comment="x"', "-v"]),
    (r"--comment=a\#b", ["--comment=a#b"]),
    ("--comment=x#y -N3", ["--comment=x"]),      # '#' ends the line, inside a word too
    ("--comment '' -N3", ["--comment"]),         # an empty word ends the line
    ("", []),
])
def test_words_of_a_directive_line(line, words):
    assert split_directive(line) == words


def test_one_argument_vector_over_all_lines():
    # -J takes the next line's first word, as sbatch's getopt over all lines does
    found = read_extras(["-J", "-N3", "-v"])
    for version in VERSIONS:
        assert [(d.option.name, d.value, d.extra) for d in found[version]] == \
            [("job-name", "-N3", 0), ("verbose", None, 2)]


def test_optional_arguments_only_attached():
    words = [("--exclusive", 0), ("-k", 0), ("-kx", 0), ("--nice=5", 0)]
    got = parse_words(words, "25.11")
    assert [(d.option.name, d.value) for d in got] == \
        [("exclusive", None), ("no-kill", None), ("no-kill", "x"), ("nice", "5")]


def test_exact_name_wins_over_longer_ones():
    assert [d.option.name for d in parse_words([("--gpus=2", 0)], "26.05")] == ["gpus"]
    assert [d.option.name for d in parse_words([("--mem=1G", 0)], "26.05")] == ["mem"]


def test_release_that_lacks_an_option_stops_there():
    # 22.05 has no --segment: its sbatch refuses the script, nothing after is applied
    found = read_extras(["--segment=2", "-N3"], ("22.05", "25.11"))
    assert found["22.05"] == []
    assert [d.option.name for d in found["25.11"]] == ["segment", "nodes"]


# ---- the table ------------------------------------------------------------

def test_table_is_getopt_data():
    for version in VERSIONS:
        options = table(version)
        names = [o.name for o in options]
        assert len(names) == len(set(names)) and names == sorted(names)
        assert all(o.argument in (NO, REQUIRED, OPTIONAL) for o in options)
        shorts = [o.short for o in options if o.short]
        assert len(shorts) == len(set(shorts))
        for name in PLANNED:
            assert name in names or name in ("segment", "tres-per-task"), (version, name)
    assert {"nodes", "nodelist", "partition"} <= set(known_anywhere())
    assert table("22.05") != table("25.11")   # releases differ, kept apart


# ---- every way of writing a planned option is refused ---------------------

_PLANNED_VALS = {known_anywhere()[n].val for n in PLANNED}


def _unique_prefixes(name):
    names = known_anywhere()
    out = []
    for k in range(1, len(name) + 1):
        p = name[:k]
        same = {(o.argument, o.val) for o in names.values() if o.name.startswith(p)}
        if len(same) == 1 or p == name:   # an exact name wins over longer ones
            out.append(p)
    return out


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(PLANNED)), data=st.data())
def test_any_unique_prefix_of_a_planned_option_is_refused(name, data):
    prefix = data.draw(st.sampled_from(_unique_prefixes(name)))
    value = data.draw(st.sampled_from(["=1", " 1", "=gpu:1", ""]))
    extra = "--" + prefix + value
    opt = known_anywhere()[name]
    if value == "" and opt.argument == REQUIRED:
        extra += " x"
    assert extras_problem([extra]) is not None, extra


@settings(max_examples=200, deadline=None)
@given(flags=st.text(alphabet="vQHOsW", max_size=4),
       letter=st.sampled_from(sorted({o.short for o in table("26.05")
                                      if o.short and o.val in _PLANNED_VALS})),
       glue=st.sampled_from(["", " "]))
def test_bundles_ending_in_a_planned_letter_are_refused(flags, letter, glue):
    extra = "-" + flags + letter + glue + "3"
    why = extras_problem([extra])
    assert why is not None and f"-{letter} (sbatch reads it as --" in why, (extra, why)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("-=NnvJw3 '\"#\\x:")), max_size=14))
def test_garbage_is_one_line_or_passes(text):
    try:
        why = extras_problem(["-" + text])
    except DirectiveError as exc:  # pragma: no cover - must never escape
        raise AssertionError(exc)
    assert why is None or "\n" not in why


# -- a batch script's own directives: one reader, sbatch's precedence ------

TWICE = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH -N 4 --time=10
#SBATCH --ntasks-per-node=8
  #SBATCH --nodes=9
#SBATCH --time 20
# a comment
srun true
#SBATCH --nodes=16
"""


def test_script_options_take_the_last_value_as_sbatch_does():
    # opt.c: the script's words go through getopt_long in order, each option
    # overriding the one before; an indented #SBATCH is a comment; the
    # header ends at the first command; the command line comes after
    values = directives.option_values(directives.script_options(TWICE))
    assert values["nodes"] == "4" and values["time"] == "20"
    assert directives.option_values(directives.script_options(TWICE, ["--nodes=3"]))["nodes"] \
        == "3"


def test_daemon_and_pyslurm_read_directives_alike():
    # daemon/submit read the last value, the pyslurm backend the first: both
    # now read through sbatch/directives and agree with sbatch
    from slurmtopo.daemon.submit import script_shape
    from slurmtopo.slurm.pyslurm_backend import sbatch_directives

    assert script_shape(TWICE).nodes == 4
    assert sbatch_directives(TWICE)["nodes"] == "4"
    assert sbatch_directives(TWICE)["time"] == "20"
    assert script_shape(TWICE, ["-N", "3"]).nodes == 3
