"""Bad option values on every command, as an untrusted user types them:
one `slurmtopo: error:` line naming the option, exit code 2, and nothing
written.

A table: each row is a command line that must be refused before the
command does anything (plans, contacts Slurm or SSH, sleeps, writes).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.clirun import one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "etc" / "examples"
INV = str(EX / "h100-4node-2leaf.yaml")
SMI = str(ROOT / "tests" / "fixtures" / "smi" / "a6000_nvlink_pairs.txt")
TRACE = ["--inventory", str(EX / "devcluster.yaml"),
         "--trace", str(EX / "traces" / "nasa-ipsc-excerpt.swf")]

#: (command line with OUT for a directory that must stay empty, words the error names)
CASES = [
    # NaN passed click's FloatRange (every comparison with nan is false); inf
    # made a bounded wait endless
    (["daemon", "run", "--inventory", INV, "--once", "--interval", "nan"], ["--interval", "finite"]),
    (["daemon", "run", "--inventory", INV, "--once", "--interval", "inf"], ["--interval", "finite"]),
    (["daemon", "run", "--inventory", INV, "--once", "--release-grace", "-1"],
     ["--release-grace"]),
    (["daemon", "run", "--inventory", INV, "--once", "--default-wait", "nan"],
     ["--default-wait"]),
    (["daemon", "status", "--backend", "none", "--events", "-1"], ["--events"]),
    (["agent", "run", "--report-dir", "OUT", "--once", "--interval", "NaN"], ["--interval"]),
    (["collect", "--nodes", "gpu1", "-o", "OUT", "--timeout", "nan"], ["--timeout"]),
    (["collect", "--nodes", "gpu1", "-o", "OUT", "--max-age", "inf"], ["--max-age"]),
    (["collect", "--nodes", "gpu1", "-o", "OUT", "--port", "-1"], ["--port"]),
    (["collect", "--nodes", "gpu1", "-o", "OUT", "--port", "65536"], ["--port"]),
    (["simulate", *TRACE, "--comm-fraction", "nan"], ["--comm-fraction"]),
    (["sbatch", "--inventory", INV, "--tp", "8", "--state", "none", "--keep-runs", "inf",
      "--", "true"], ["--keep-runs"]),
    # an empty (mistyped) report directory "collected 0/0" and made OUT/col
    (["collect", "--from-dir", "OUT/a", "-o", "OUT/col"], ["OUT/a", "no node reports"]),
    # undecodable argv bytes (lone surrogates in Python) reached the UTF-8
    # batch script: a UnicodeEncodeError traceback
    (["plan", "--inventory", INV, "--tp", "8", "--output-dir", "OUT", "--", "python", "\udcff"],
     ["argument 10", "not valid UTF-8"]),
    (["plan", "--inventory", INV, "--tp", "8", "--output-dir", "OUT", "--output", "a\udcff",
      "--", "true"], ["not valid UTF-8"]),
    (["sbatch", "--inventory", INV, "--tp", "8", "--state", "none", "--dry-run",
      "--wrap", "echo \udcff"], ["not valid UTF-8"]),
    # HCA selection without the dump it selects from was silently ignored
    (["topology", "generate", "--reports", INV, "--hca", "mlx5_[0-7]", "-o", "OUT/t.conf"],
     ["--hca", "--ibnetdiscover"]),
    (["topology", "generate", "--reports", INV, "--allow-missing", "-o", "OUT/t.conf"],
     ["--allow-missing"]),
    # contradictory output options
    (["sbatch", "--inventory", INV, "--tp", "8", "--state", "none", "--dry-run", "--parsable",
      "--json", "--", "true"], ["--parsable", "--json"]),
    # a --color-by typo left the grid uncoloured under "colour = bogus group"
    (["plan", "--inventory", INV, "--tp", "8", "--color-by", "bogus", "--output-dir", "OUT",
      "--", "true"], ["--color-by", "'bogus'", "tp"]),
    (["sbatch", "--inventory", INV, "--tp", "8", "--state", "none", "--dry-run",
      "--color-by", "bogus", "--", "true"], ["--color-by"]),
    # a node name is the report's file name: '../x' wrote outside the directory
    (["agent", "discover", "--from-smi", SMI, "--node-name", "../x", "--output-dir", "OUT/a"],
     ["'../x'", "not a plain name"]),
    (["agent", "run", "--node-name", "../x", "--report-dir", "OUT/a", "--once"],
     ["'../x'", "not a plain name"]),
]


@pytest.mark.parametrize("argv, words", CASES, ids=[f"{' '.join(c[0][:2])} {c[1][0]}"
                                                     for c in CASES])
def test_bad_option_is_one_line_and_writes_nothing(argv, words, tmp_path):
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    code, _stdout, err = run_cli([w.replace("OUT", str(out)) for w in argv])
    one_line_error(code, err, *(w.replace("OUT", str(out)) for w in words))
    assert code == 2
    assert [p.relative_to(out).as_posix() for p in sorted(out.rglob("*"))] == ["a"]


def test_plain_node_names_still_name_the_report(tmp_path):
    code, _out, err = run_cli(["agent", "discover", "--from-smi", SMI, "--node-name", "gpu-01.a_b",
                               "--output-dir", str(tmp_path)])
    assert code == 0, err
    assert [p.name for p in tmp_path.iterdir()] == ["gpu-01.a_b.yaml"]
