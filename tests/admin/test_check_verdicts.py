"""`topology check` and `gres check` through the CLI: the exit code and the
`--json` object docs/admin.md promises for every verdict (file unreadable,
unparsable, with problems, clean), so a monitoring script can rely on them."""
from __future__ import annotations

import json

import pytest

from tests.clirun import run_cli

CLEAN = {"topology": "SwitchName=s1 Nodes=n[1-2]\n",
         "gres": "NodeName=n1 Name=gpu File=/dev/nvidia0\n"}
#: a line Slurm refuses to read at all: file:line in the one error line
UNPARSABLE = {"topology": ("SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Switches=s9\n", ":2"),
              "gres": ("NodeName=n1 Name=gpu File=/dev/nvidia0\nNodeName=n2 Bogus=1\n", ":2")}
#: read and parsed, but the checks find what would make Slurm fail: slurm.conf
#: gives n1 two GPUs (gres.conf: one) and has n3, on no switch
SLURM_CONF = ("GresTypes=gpu\nTopologyPlugin=topology/tree\n"
              "NodeName=n[1-3] CPUs=8 Gres=gpu:2\nPartitionName=p Nodes=ALL\n")


def _check(what, path, as_json, *extra):
    return run_cli([what, "check", str(path), *extra] + (["--json"] if as_json else []))


@pytest.mark.parametrize("what", ["topology", "gres"])
def test_clean(tmp_path, what):
    conf = tmp_path / f"{what}.conf"
    conf.write_text(CLEAN[what])
    code, out, err = _check(what, conf, False)
    assert (code, err) == (0, "") and out.endswith(": OK\n"), (out, err)
    code, out, err = _check(what, conf, True)
    doc = json.loads(out)
    assert (code, err, doc["ok"], doc["problems"], doc["path"]) == (0, "", True, [], str(conf))


@pytest.mark.parametrize("what", ["topology", "gres"])
def test_problems_found(tmp_path, what):
    conf = tmp_path / f"{what}.conf"
    conf.write_text(CLEAN[what])
    slurm_conf = tmp_path / "slurm.conf"
    slurm_conf.write_text(SLURM_CONF)
    code, out, err = _check(what, conf, False, "--slurm-conf", slurm_conf)
    assert code == 1 and out == "" and err.splitlines()[-1].startswith("slurmtopo: error: ")
    assert "problem(s)" in err.splitlines()[-1]
    code, out, err = _check(what, conf, True, "--slurm-conf", slurm_conf)
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["problems"]
    assert any(p["severity"] in ("error", "refuse") for p in doc["problems"])


def _fatal(code, out, err, where, summary, as_json):
    """One `slurmtopo: error:` line naming ``where``, exit 1 (not the usage
    error's 2), and with --json the verdict object as well."""
    assert code == 1, (code, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmtopo: error: ") and where in lines[0], err
    if not as_json:
        assert out == ""
        return
    doc = json.loads(out)
    assert doc["ok"] is False and doc["summary"] == summary, doc
    assert len(doc["problems"]) == 1 and doc["problems"][0]["severity"] == "error"
    assert doc["problems"][0]["origin"] == where
    assert doc["problems"][0]["message"] in lines[0]


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("what", ["topology", "gres"])
def test_unparsable(tmp_path, what, as_json):
    conf = tmp_path / f"{what}.conf"
    text, line = UNPARSABLE[what]
    conf.write_text(text)
    code, out, err = _check(what, conf, as_json)
    _fatal(code, out, err, f"{conf}{line}", "cannot be parsed", as_json)


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("what", ["topology", "gres"])
@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_unreadable(tmp_path, what, as_json, kind):
    conf = tmp_path / f"{what}.conf"
    where = str(conf)
    if kind == "directory":
        conf.mkdir()
    elif kind == "binary":
        conf.write_bytes(b"SwitchName=s1\n\xff\xfe\n")
        where += ":2"
    code, out, err = _check(what, conf, as_json)
    _fatal(code, out, err, where, "cannot be read", as_json)


def test_a_bad_slurm_conf_is_bad_input_not_a_verdict(tmp_path):
    """--slurm-conf is an input, not the file checked: a usage-type error
    (exit 2) and no verdict object."""
    conf = tmp_path / "topology.conf"
    conf.write_text(CLEAN["topology"])
    code, out, err = run_cli(["topology", "check", str(conf), "--slurm-conf",
                              str(tmp_path / "nothere"), "--json"])
    assert code == 2 and out == "" and len(err.splitlines()) == 1
