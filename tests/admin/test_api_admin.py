"""The admin's use cases as the api exports them (slurmtopo.api_admin,
docs/api.md): what a site's own tooling calls is what the commands call.

The commands' output through them is held byte for byte by the other tests
of this directory, tests/test_nccl_topo.py and tests/test_cli*.py; these
check the api's own contract: typed results, messages to ``echo`` as they
happen, a check's unreadable file told apart, the admin side loaded only
when asked for."""
from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import tempfile

import pytest

from slurmtopo import api
from slurmtopo.errors import SlurmtopoError

from .conftest import REPO, node, write_reports

DOC = REPO / "docs" / "api.md"


def test_docs_example_runs_as_printed(monkeypatch, tmp_path):
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", DOC.read_text(), re.S | re.M)
    at = next(i for i, (info, body) in enumerate(blocks)
              if info == "python" and "api.generate_topology" in body)
    code, (info, printed) = blocks[at][1], blocks[at + 1]
    assert info == ""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its files land here
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    assert out.getvalue() == printed
    assert sorted(p.name for d in tmp_path.iterdir() for p in d.iterdir()) == \
        ["gres.conf", "topology.conf"]


def test_importing_the_api_leaves_the_admin_side_unloaded():
    probe = ("import sys\nfrom slurmtopo import api\n"
             "print('slurmtopo.api_admin' in sys.modules,\n"
             "      'slurmtopo.admin.generate' in sys.modules)\n"
             "api.generate_gres\n"
             "print('slurmtopo.api_admin' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == ["False", "False", "True"], done.stderr
    with pytest.raises(AttributeError, match="generate_everything"):
        api.generate_everything  # noqa: B018


def test_messages_reach_echo_before_a_later_error(tmp_path):
    reports = write_reports(tmp_path / "reports", [node("gpu001"), node("gpu002")])
    said = []
    with pytest.raises(SlurmtopoError, match="absent does not exist"):  # no such directory
        api.compile_inventory(reports, str(tmp_path / "absent" / "cluster.json"),
                              echo=said.append)
    # what the command prints before it fails: the compiled form, the summary
    assert [line.split(" ")[0] for line in said] == ["compiled", "2"]
    assert said[-1].startswith("2 node(s) -> 1 node type(s)")


def test_a_check_tells_an_unreadable_file_from_a_bad_one(tmp_path):
    with pytest.raises(api.UnreadableFile) as exc:
        api.check_gres(str(tmp_path / "absent.conf"))
    assert exc.value.stage == "cannot be read" and exc.value.exit_code == 1
    garbage = tmp_path / "gres.conf"
    garbage.write_text("NodeName=gpu001 Nmae=gpu\n")
    with pytest.raises(api.UnreadableFile) as exc:
        api.check_gres(str(garbage))
    assert exc.value.stage == "cannot be parsed" and exc.value.line == 1
    good = tmp_path / "topology.conf"
    good.write_text("SwitchName=leaf1 Nodes=gpu[001-002]\n")
    verdict = api.check_topology(str(good), None)
    assert verdict.ok and verdict.summary == "1 switches, 1 level(s), 2 nodes"


def test_generate_shows_nothing_written(tmp_path):
    reports = write_reports(tmp_path / "reports", [node("gpu001"), node("gpu002")])
    made = api.generate_gres(reports, nodes="gpu[001-003]")
    assert made.what == "gres.conf" and "NodeName=gpu[001-002]" in made.text
    assert [p.message for p in made.problems] == ["no report for 1 node(s) of --nodes: gpu003"]
    shown = []
    assert api.publish_file(made, None, force=True, out=shown.append)
    assert shown == [made.text.rstrip("\n")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]


def test_collect_from_a_directory_is_typed(tmp_path):
    src = write_reports(tmp_path / "agents", [node("gpu001"), node("gpu002")])
    ticks = []
    done = api.collect_reports(str(tmp_path / "reports"), nodes="gpu[001-003]", from_dir=src,
                               progress=lambda total, res: ticks.append(total))
    assert (done.collected, done.failed, done.stale_kept) == (2, 1, 0)
    assert [(r.node, r.ok) for r in done.results] == [("gpu001", True), ("gpu002", True),
                                                      ("gpu003", False)]
    assert ticks == []  # progress follows SSH collections only


def test_nccl_topology_files_leave_unchanged_files_alone(tmp_path):
    inventory = str(REPO / "etc" / "examples" / "azure-ndv4-4node.yaml")
    first = api.nccl_topology_files(inventory, str(tmp_path / "nccl"))
    again = api.nccl_topology_files(inventory, str(tmp_path / "nccl"))
    assert [(f.node_type, f.nodes, f.changed) for f in first] == \
        [("azure-nd96asr-v4", ("nd01", "nd02", "nd03", "nd04"), True)]
    assert [(f.path, f.changed, f.backup) for f in again] == [(first[0].path, False, None)]
