"""slurmtopo reads ``--sbatch`` extras as sbatch reads ``#SBATCH`` lines
(slurmtopo/sbatch/directives.py, option table in sbatch/slurm_options.py,
taken from Slurm's source): checked here against the real sbatch of the
Slurm under test.

* The table: every option it lists for this release is one sbatch knows,
  taking an argument exactly when the table says so; on releases with
  ``--autocomplete`` the sets of names are equal.
* The reading: for each case, a script with the directives as written and
  one with slurmtopo's reading spelt out in full (``--nodes=3`` for
  ``-vN3``) give the same job (every field scontrol shows) or the same
  error; a case slurmtopo calls ambiguous or invalid is refused by sbatch.
"""
from __future__ import annotations

import re

import pytest

from tests.integration.helpers import _parse_scontrol, it_version

from slurmtopo.sbatch.directives import DirectiveError, read_extras
from slurmtopo.sbatch.slurm_options import NO, OPTIONAL, REQUIRED, VERSIONS, table


def _version() -> str:
    major, minor, _ = it_version()
    version = f"{major:02d}.{minor:02d}"
    assert version in VERSIONS, (f"Slurm {version} is not in sbatch/slurm_options.py: regenerate "
                                 "it with scripts/sbatch_option_table.py")
    return version


def test_option_table_is_this_sbatchs(devcluster):
    """``sbatch --NAME=x --version``: getopt refuses an argument to an
    option without one, else --version answers; ``sbatch --NAME
    --version``: an option that requires an argument takes ``--version``
    as it, so no version is printed."""
    version = _version()
    wrong = []
    for opt in table(version):
        attached = devcluster.run(["sbatch", f"--{opt.name}=x", "--version"], check=False,
                                  input="")
        separate = devcluster.run(["sbatch", f"--{opt.name}", "--version"], check=False,
                                  input="", timeout=20)
        takes = "doesn't allow an argument" not in attached.stderr
        if "unrecognized option" in attached.stderr:
            wrong.append(f"--{opt.name}: unknown to sbatch")
            continue
        consumed = not re.match(r"slurm(-wlm)? \d", separate.stdout)
        got = NO if not takes else (REQUIRED if consumed else OPTIONAL)
        if got != opt.argument:
            wrong.append(f"--{opt.name}: sbatch {got}, table {opt.argument}")
    assert wrong == []
    if version >= "25.11":   # sbatch lists its long options itself
        p = devcluster.run(["sbatch", "--autocomplete=--"], input="")
        names = {w[2:].rstrip("=") for w in p.stdout.split() if w.startswith("--")}
        assert names == {o.name for o in table(version)}


#: (directives as written) ... each case one script
CASES = [
    ["-vN3"],
    ["--ntasks-per-no=2"],
    ["--nodel=node4"],
    ["--partit=nosuch"],
    ["--exc=node1"],                      # ambiguous: --exclude, --exclusive
    ["--no=1"],
    ["-J --nodes=3"],                     # a job name
    ["-J", "--nodes=3"],                  # ... over two lines
    ["--comment=x # -N3"],
    ['--comment="a b" -N2'],
    ["--comment '' -N2"],                 # an empty word ends the line
    ["-wnode2 -N1"],
    ["--gpus-per-n=2"],
    ["--tasks-per-node=2"],
    ["--mem-per-g=1M"],
    ["-k", "-N2"],
    ["--exclusive", "--tim=5"],
    ["--exclusive node1"],                # a stray word
    ["-J"],                               # no argument left
    ["-y"],
]

#: fields that differ between any two submissions
_VOLATILE = {"JobId", "SubmitTime", "EligibleTime", "AccrueTime", "StartTime", "EndTime",
             "LastSchedEval", "SubmitLine", "StdOut", "StdErr", "StdIn", "Command", "_raw",
             "Priority", "Reason", "Deadline", "PreemptEligibleTime", "ResizeTime",
             "SuspendTime", "SecsPreSuspend"}


def _submit(devcluster, lines):
    script = "#!/bin/bash\n#SBATCH --hold\n" + "".join(f"#SBATCH {l}\n" for l in lines) + \
        "hostname\n"
    p = devcluster.run(["sbatch", "--parsable", "-o", "/dev/null"], input=script, check=False)
    if p.returncode != 0:
        return None, re.sub(r"\s+", " ", p.stderr).strip()
    job = int(p.stdout.strip().split(";")[0])
    line = devcluster.run(["scontrol", "-o", "show", "job", str(job)]).stdout.strip()
    devcluster.run(["scancel", str(job)])
    return {k: v for k, v in _parse_scontrol(line).items() if k not in _VOLATILE}, None


def _spelt_out(found):
    out = []
    for d in found:
        assert d.option is not None
        value = d.value
        if value is not None and (not value or any(c in value for c in " \t'\"#\\")):
            assert "'" not in value
            value = f"'{value}'"
        out.append(f"--{d.option.name}" + (f"={value}" if value is not None else ""))
    return out


@pytest.mark.parametrize("lines", CASES, ids=[" | ".join(c) for c in CASES])
def test_sbatch_reads_directives_as_slurmtopo_does(devcluster, lines):
    version = _version()
    try:
        found = read_extras(lines, [version])[version]
    except DirectiveError as exc:
        job, err = _submit(devcluster, lines)
        assert job is None, f"slurmtopo refuses ({exc.message}) but sbatch took {lines}"
        if "ambiguous" in exc.message:
            assert "ambiguous" in err, err
        return
    as_written = _submit(devcluster, lines)
    spelt = _submit(devcluster, _spelt_out(found))
    assert as_written == spelt, (lines, _spelt_out(found))
