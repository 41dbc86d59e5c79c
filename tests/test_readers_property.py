"""Every reader of a user's file, fed generated garbage through the CLI.

For each file slurmtopo reads (inventory, directory of node reports, state
snapshot, node report, fabric YAML, ibnetdiscover dump, ``nvidia-smi topo
-m`` text, topology.conf, gres.conf, slurm.conf, plan document, the
daemon's status file) hypothesis generates input that cannot be valid:

* bytes and text of any kind (binary, invalid UTF-8, control characters);
* random YAML/JSON trees (mappings, lists and scalars nested at random);
* a valid document with one value replaced by something of the wrong
  shape (a mapping with an unknown key, a nested list, a shell-hostile
  name, a number out of range) or one key renamed to an unknown one;
* for text formats, a valid file with one line replaced by garbage (for a
  job trace, whose bad rows are skipped and counted by design, its header,
  or its only job).

and checks the same contract each time: a non-zero exit, exactly one line
on stderr, starting ``slurmtopo: error:``, no traceback, and nothing written
(the output path does not appear, the input is unchanged, no temporary file
is left). ``check`` commands, and ``topology generate`` when it refuses
what it would write, list each problem on its own ``error:`` / ``warning:``
/ ``refused:`` line before their one ``slurmtopo: error:`` line; for them
the last line is the error line and every line before it a problem line.

Each reader's valid seed is first run to exit 0 (test_seed_is_valid), so a
failure here is the garbage's doing, not a broken command line.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.clirun import SUBPROCESS_TIMEOUT_S, run_cli, run_cli_subprocess

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "etc" / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
INV = str(EXAMPLES / "h100-4node-2leaf.yaml")
INV32 = str(EXAMPLES / "h100-32node-fattree.yaml")

FABRIC = """slurmtopo: fabric
version: 1
fabric:
  switches:
    - {name: leaf1, nodes: "gpu[01-02]", link_gbps: 400}
    - {name: leaf2, nodes: "gpu[03-04]"}
    - {name: spine1, switches: "leaf[1-2]"}
"""
SLURM_CONF = "NodeName=gpu[01-04] Gres=gpu:h100:8 CPUs=224\nPartitionName=gpu Nodes=ALL\n"
#: a torchtitan job file ([parallelism] as the TOML job files had it) and
#: Megatron-LM's arguments, one option a line
TORCHTITAN_TOML = (FIXTURES / "frameworks" / "train.toml").read_text()
MEGATRON_ARGS = (FIXTURES / "frameworks" / "megatron.args").read_text()


@dataclass(frozen=True)
class ReaderCase:
    """One reader: how the CLI is pointed at the file (``{in}`` is the
    input file, ``{dir}`` a directory holding it as ``x.yaml``, ``{out}``
    the output path that must not appear), and a valid seed."""

    name: str
    argv: List[str]
    seed: str
    structured: bool  # YAML/JSON (tree mutations) or line-oriented text
    check: bool = False  # a ``check`` command: problem lines before the error line
    file_name: str = "input.txt"
    #: text formats: the lines the reader must understand (others, such as a
    #: slurm.conf key slurmtopo has no use for, are passed over by design)
    lines: str = r"."
    env: Optional[Dict[str, str]] = None
    #: an empty (or comment-only) file is valid here: a flat topology
    empty_ok: bool = False
    #: the exit code of a valid input (daemon status: 3, no daemon runs here)
    ok_code: int = 0


def _seed_report() -> str:
    """A node report as the agent writes it (from an nvidia-smi fixture)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "gpu01.yaml")
        code, _o, err = run_cli(["agent", "discover", "--from-smi",
                                 str(FIXTURES / "smi" / "hgx_h100.txt"), "--node-name", "gpu01",
                                 "-o", out])
        assert code == 0, err
        return Path(out).read_text()


def _seed_plan() -> str:
    """The plan document a batch script carries (from `slurmtopo plan`)."""
    with tempfile.TemporaryDirectory() as d:
        code, _o, err = run_cli(["plan", "--inventory", INV, "--tp", "8", "--output-dir", d, "--", "true"])
        assert code == 0, err
        script = Path(d, "job.sbatch").read_text()
    return script.split("<<'SLURMTOPO_PLAN_JSON'\n", 1)[1].split("\nSLURMTOPO_PLAN_JSON\n")[0]


def _seed_gres() -> str:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "gres.conf")
        code, _o, err = run_cli(["gres", "generate", "--reports", INV, "-o", out])
        assert code == 0, err
        return Path(out).read_text()


def _seed_topology(fmt: str = "tree") -> str:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "topology.yaml" if fmt == "yaml" else "topology.conf")
        code, _o, err = run_cli(["topology", "generate", "--reports", INV, "--format", fmt,
                                 "-o", out])
        assert code == 0, err
        return Path(out).read_text()


CASES = [
    ReaderCase("inventory", ["plan", "--inventory", "{in}", "--tp", "8", "--output-dir", "{out}", "--",
                             "true"], Path(INV).read_text(), True, file_name="inv.yaml"),
    ReaderCase("inventory-json", ["plan", "--inventory", "{in}", "--tp", "8", "--output-dir", "{out}"],
               json.dumps(yaml.safe_load(Path(EXAMPLES / "a6000-4node-pcie.yaml").read_text())),
               True, file_name="inv.json"),
    ReaderCase("reports-dir", ["plan", "--inventory", "{dir}", "--tp", "8", "--output-dir", "{out}"],
               _seed_report(), True, file_name="x.yaml"),
    ReaderCase("state", ["plan", "--inventory", INV32, "--state", "{in}", "--tp", "8",
                         "--output-dir", "{out}"],
               Path(EXAMPLES / "h100-32node-state.yaml").read_text(), True,
               file_name="state.yaml"),
    ReaderCase("node-report", ["agent", "gres", "--report", "{in}", "-o", "{out}"],
               _seed_report(), True, file_name="gpu01.yaml"),
    ReaderCase("fabric-yaml", ["topology", "generate", "--reports", INV, "--fabric", "{in}",
                               "-o", "{out}"], FABRIC, True, check=True,
               file_name="fabric.yaml"),
    ReaderCase("ibnetdiscover", ["topology", "generate", "--ibnetdiscover", "{in}",
                                 "-o", "{out}"],
               (FIXTURES / "ibnetdiscover" / "fat_tree_4x2_dual.topo").read_text(), False,
               check=True, file_name="fabric.topo", lines=r"^(\[\d+\]|Switch|Ca)\s"),
    ReaderCase("nvidia-smi", ["agent", "discover", "--from-smi", "{in}", "--node-name", "gpu01",
                              "-o", "{out}"],
               (FIXTURES / "smi" / "dgx_a100.txt").read_text(), False, file_name="topo.txt",
               lines=r"^\s*GPU\d+\s"),
    ReaderCase("topology.conf", ["topology", "check", "{in}"], _seed_topology(), False,
               check=True, file_name="topology.conf", lines=r"^SwitchName="),
    ReaderCase("topology.yaml", ["topology", "check", "{in}"], _seed_topology("yaml"), True,
               check=True, file_name="topology.yaml"),
    ReaderCase("inventory-torus", ["topology", "generate", "--reports", "{in}", "-o", "{out}"],
               (EXAMPLES / "torus-32node.yaml").read_text(), True, check=True,
               file_name="inv.yaml"),
    ReaderCase("topology.conf-ring", ["topology", "check", "{in}"],
               "RingName=ring0 Nodes=gpu[01-04]\nRingName=ring1 Nodes=gpu08,gpu07,gpu06,gpu05\n",
               False, check=True, file_name="topology.conf", lines=r"^RingName="),
    ReaderCase("slurm-topology", ["plan", "--inventory", INV, "--slurm-topology", "{in}",
                                  "--tp", "8", "--output-dir", "{out}"], _seed_topology(), False,
               file_name="topology.conf", lines=r"^SwitchName=", empty_ok=True),
    ReaderCase("nccl-xml", ["agent", "discover", "--from-nccl-xml", "{in}", "--node-name",
                            "gpu01", "--nvml", "no", "-o", "{out}"],
               (FIXTURES / "nccl_xml" / "aws_p5_like_full.xml").read_text(), False,
               file_name="topo.xml", lines=r"^\s*<(gpu|nic|net|pci|cpu)\b"),
    ReaderCase("hwloc-xml", ["agent", "discover", "--from-hwloc", "{in}", "--node-name",
                             "gpu01", "--nvml", "no", "-o", "{out}"],
               (FIXTURES / "hwloc" / "two_socket_gpu_node.xml").read_text(), False,
               file_name="topo.xml", lines=r"^\s*<object\b"),
    ReaderCase("gres.conf", ["gres", "check", "{in}"], _seed_gres(), False, check=True,
               file_name="gres.conf", lines=r"^\w+="),
    ReaderCase("slurm.conf", ["topology", "generate", "--reports", INV, "--slurm-conf", "{in}",
                              "-o", "{out}"], SLURM_CONF, False, check=True,
               file_name="slurm.conf",
               lines=r"^NodeName="),
    ReaderCase("plan-document", ["bind", "--plan", "{in}", "--run-dir", "{out}", "--no-probe",
                                 "--cgroup-devices", "no"],
               _seed_plan(), True, file_name="plan.json",
               env={"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "gpu01",
                    "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", "SLURMD_NODENAME": "gpu01"}),
    ReaderCase("torchtitan-toml", ["groups", "--framework", "torchtitan", "--config", "{in}",
                                   "--world", "16"], TORCHTITAN_TOML, False,
               file_name="train.toml", lines=r"^\w+_degree\s*="),
    ReaderCase("megatron-args", ["groups", "--framework", "megatron", "--config", "{in}",
                                 "--world", "16"], MEGATRON_ARGS, False,
               file_name="megatron.args", lines=r"^\s*--(tensor|pipeline|context|expert)-"),
    ReaderCase("trace-csv", ["simulate", "--inventory", INV, "--trace", "{in}", "--policy",
                             "slurm"],
               "job_id,gpu_num,submit_time,duration\n1,8,2020-09-01 00:00:00,600\n"
               "2,16,2020-09-01 00:01:00,300\n", False, file_name="trace.csv",
               lines=r"^job_id,"),
    ReaderCase("trace-swf", ["simulate", "--inventory", INV, "--trace", "{in}", "--policy",
                             "slurm"],
               "; Version: 2.2\n; UnixStartTime: 0\n1 0 -1 60 8 -1 -1 8 120 -1 1 1 1 -1 1 -1 -1 -1\n",
               False, file_name="trace.swf", lines=r"^\s*\d"),
    ReaderCase("trace-sacct", ["simulate", "--inventory", INV, "--trace", "{in}", "--policy",
                               "slurm", "--trace-format", "sacct"],
               "JobID|Submit|Start|End|AllocTRES\n7|2025-01-06T09:00:00|2025-01-06T09:00:02|"
               "2025-01-06T11:00:02|cpu=16,gres/gpu=8,node=1\n", False, file_name="sacct.txt",
               lines=r"^JobID\|"),
    ReaderCase("audit-state", ["audit", "--inventory", str(EXAMPLES / "devcluster.yaml"),
                               "--state", "{in}", "--json"],
               (EXAMPLES / "devcluster-jobs-state.yaml").read_text(), True,
               file_name="state.yaml"),
    ReaderCase("audit-sacct", ["audit", "--inventory", str(EXAMPLES / "devcluster.yaml"),
                               "--sacct-file", "{in}", "--json"],
               "JobID|Submit|Start|End|NodeList|AllocTRES\n7|2025-01-06T09:00:00|"
               "2025-01-06T09:00:02|2025-01-06T11:00:02|node[1-2]|gres/gpu=16,node=2\n", False,
               file_name="sacct.txt", lines=r"^JobID\|"),
    ReaderCase("layout-rules", ["simulate", "--inventory", INV, "--trace",
                                str(EXAMPLES / "traces" / "philly-excerpt.csv"), "--jobs", "3",
                                "--policy", "slurm", "--layout-rule", "{in}"],
               "slurmtopo: layout-rules\nversion: 1\nrules:\n  - {up_to: 8, tp: 1}\n"
               "  - {tp: 8, pp: 2}\n", True, file_name="rules.yaml"),
    ReaderCase("daemon-status", ["daemon", "status", "--backend", "none", "--spool", "{dir}"],
               json.dumps({"slurmtopo": "daemon-status", "version": 1,
                           "daemon": {"pid": 4242, "host": "ctl", "started": 1.0e9,
                                      "at": 1.0e9, "cycles": 1, "cycle_s": 0.1,
                                      "inventory": "inv.yaml", "dry_run": False,
                                      "on_reject": "cancel"},
                           "jobs": [{"job_id": 7, "user": "ann", "name": "llama",
                                     "slurm_state": "PENDING", "action": "wait",
                                     "reason": "no room", "since": 1.0e9,
                                     "submit_time": 1.0e9, "hosts": [], "gpus": {},
                                     "taken": None, "cost_s": None, "preferred_cost_s": None,
                                     "waiting_for": ["dp"], "wait_left_s": 30.0,
                                     "reserved": {}, "releases": 0, "drift": None,
                                     "phase": "waiting"}],
                           "rejected": [{"job_id": 6, "at": 1.0e9, "reason": "too big",
                                         "policy": "cancel"}]}), True,
               file_name="status.json", ok_code=3),
]
BY_NAME = {c.name: c for c in CASES}


def _argv(case: ReaderCase, where: Path) -> List[str]:
    return [a.replace("{in}", str(where / "in" / case.file_name))
            .replace("{dir}", str(where / "in")).replace("{out}", str(where / "out"))
            for a in case.argv]


def _run(case: ReaderCase, data: bytes):
    """Run the case on ``data``; (code, stdout, stderr, files left behind)."""
    where = Path(tempfile.mkdtemp(prefix="slurmtopo-garbage-"))
    try:
        (where / "in").mkdir()
        (where / "in" / case.file_name).write_bytes(data)
        with _environment(case.env or {}):
            code, out, err = run_cli(_argv(case, where))
        left = sorted(str(p.relative_to(where)) for p in where.rglob("*"))
        unchanged = (where / "in" / case.file_name).read_bytes() == data
    finally:
        shutil.rmtree(where)
    return code, out, err, left, unchanged


@contextlib.contextmanager
def _environment(extra: Dict[str, str]):
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _assert_refused(case: ReaderCase, data: bytes) -> None:
    code, _out, err, left, unchanged = _run(case, data)
    assert "Traceback" not in err, err
    assert code not in (0, case.ok_code), f"{case.name}: garbage accepted: {data[:300]!r}"
    lines = err.strip().splitlines()
    assert lines, f"{case.name}: no message"
    if case.check:
        assert all(ln.startswith(("error: ", "warning: ", "refused: ", "note: "))
                   for ln in lines[:-1]), err
    else:
        assert len(lines) == 1, err
    assert lines[-1].startswith("slurmtopo: error: "), err
    assert left == ["in", f"in/{case.file_name}"], f"{case.name} wrote {left}"
    assert unchanged


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_seed_is_valid(case):
    code, _out, err, left, _ = _run(case, case.seed.encode())
    assert code == case.ok_code, err


# -- garbage generators -------------------------------------------------------------

SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30))
TREES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=10) | st.integers(), kids, max_size=4),
                     max_leaves=25)
#: values no field accepts where the seed has something else
WRONG = st.sampled_from([
    {"zz_unknown": [[1]]},
    [["zz", ["zz"]]],
    "gpu01;reboot\nrm -rf /",
    -1, 10**30, float("inf"), float("nan"),
    [{"zz_unknown": None}],
])


def _dump(doc, as_json: bool) -> str:
    if as_json:
        return json.dumps(doc, allow_nan=True)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _paths(doc, prefix=()):
    """Every (path, is_key) in a plain YAML tree: values, and dict keys."""
    yield prefix, False
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,), True
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def _mutate(doc, path, is_key: bool, value):
    doc = copy.deepcopy(doc)
    if not path:
        return value
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if is_key:
        parent["zz_unknown_key"] = parent.pop(last)
    else:
        parent[last] = value
    return doc


# paths whose value is free-form by design: any value is as good as another
FREE_FORM = {
    "node-report": (("report",),),            # the agent's own notes, kept as written
    "reports-dir": (("report",),),
    "plan-document": (),
    "daemon-status": (),
}


@st.composite
def mutated_documents(draw, case: ReaderCase) -> bytes:
    doc = yaml.safe_load(case.seed)
    choices = [(p, k) for p, k in _paths(doc)
               if not any(p[:len(f)] == f and len(p) > len(f) - (0 if k else 1)
                          for f in FREE_FORM.get(case.name, ()))]
    path, is_key = draw(st.sampled_from(choices))
    value = draw(WRONG)
    return _dump(_mutate(doc, path, is_key, value), case.file_name.endswith(".json")).encode()


@st.composite
def mutated_lines(draw, case: ReaderCase) -> bytes:
    """The seed with one line the reader must understand garbled after its
    first word (``GPU3 <junk>``, ``[7] <junk>``, ``NodeName=<junk>``, an XML
    tag ``<nic<junk>``)."""
    lines = case.seed.splitlines(keepends=True)
    pattern = re.compile(case.lines)
    meaningful = [i for i, ln in enumerate(lines) if pattern.search(ln)]
    i = draw(st.sampled_from(meaningful))
    head = re.match(r"^\s*(<\w+|[^\s=]*=?)", lines[i]).group(0)  # `<nic` of `<nic>`
    junk = draw(st.sampled_from(["\x00", "=?[", "\"", "[-]", "\x1b[1m", "]]"]))
    junk += draw(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
    lines[i] = head + junk.replace("\n", " ").replace("\r", " ") + "\n"
    return "".join(lines).encode("utf-8")


def garbage(case: ReaderCase):
    raw = st.binary(max_size=300) | st.text(max_size=300).map(lambda t: t.encode("utf-8"))
    if case.empty_ok:
        raw = raw.filter(lambda b: any(ln.strip() and not ln.strip().startswith(b"#")
                                       for ln in b.splitlines()))
    # random trees are garbage unless they carry the document's own marker:
    # Hypothesis draws its text from the constants of the code under test
    # ("slurmtopo", "state", "jobs" ...) and can assemble a valid document,
    # which mutated_documents covers on purpose
    seed = yaml.safe_load(case.seed) if case.structured else None
    marker = seed.get("slurmtopo") if isinstance(seed, dict) else None
    trees = TREES.filter(lambda d: d != {} and not (
        marker is not None and isinstance(d, dict) and d.get("slurmtopo") == marker)).map(
        lambda d: _dump(d, case.file_name.endswith(".json")).encode())
    if case.structured:
        return st.one_of(raw, trees, mutated_documents(case))
    return st.one_of(raw, mutated_lines(case))


@pytest.fixture(autouse=True, scope="module")
def _garbage_from_the_strategies_alone():
    """Hypothesis also draws strings and numbers from the constants of the
    code under test, every local module loaded so far: the derandomized
    garbage would then change with any string added anywhere in slurmtopo
    and with which tests ran first (a run of the whole suite drew other
    examples than this file alone). Here the garbage comes from the
    strategies above only, the same in every run; where Hypothesis has no
    such hook the tests run as they are."""
    try:
        from hypothesis.internal.conjecture import providers
        get, cache = providers._get_local_constants, providers.CONSTANTS_CACHE
        empty = type(get())()
    except (ImportError, AttributeError, TypeError):
        yield
        return
    providers._get_local_constants = lambda: empty
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = get
        cache.cache.clear()


SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.filter_too_much])


def _property(case_name: str) -> Callable:
    case = BY_NAME[case_name]

    @SETTINGS
    @given(data=garbage(case))
    def test(data):
        _assert_refused(case, data)

    test.__name__ = f"test_garbage_{case_name.replace('-', '_').replace('.', '_')}"
    return test


for _case in CASES:
    _t = _property(_case.name)
    globals()[_t.__name__] = _t


# -- a FIFO where a file belongs ----------------------------------------------------
#
# Every reader opens without blocking and refuses what is not a regular file,
# so a FIFO with no writer (``mkfifo f; slurmtopo plan --inventory f``) is one
# error line, not a command that never returns. Each run is a subprocess with
# a timeout: a reader that blocks fails its test instead of hanging the suite.

def _cli(argv: List[str], env: Optional[Dict[str, str]] = None):
    """(exit code, stderr) of the CLI in a subprocess (killed, and the test
    failed, when it blocks)."""
    code, _out, err = run_cli_subprocess(argv, env=env)
    return code, err


def _fifo_in(where: Path, name: str) -> Path:
    (where / "in").mkdir(exist_ok=True)
    fifo = where / "in" / name
    os.mkfifo(fifo)
    return fifo


def _assert_fifo_refused(code: int, err: str, fifo: Path, check: bool = False) -> None:
    assert code != 0, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    if check:  # problem lines may come first; the error line is last
        lines = lines[-1:]
    assert len(lines) == 1, err
    assert lines[0].startswith("slurmtopo: error: "), err
    assert f"{fifo}: is a FIFO" in lines[0], err


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_reader_refuses_a_fifo(case, tmp_path):
    fifo = _fifo_in(tmp_path, case.file_name)
    code, err = _cli(_argv(case, tmp_path), env=case.env)
    _assert_fifo_refused(code, err, fifo, case.check)
    assert not (tmp_path / "out").exists()


#: the other commands that read a file a user names ({fifo}: the FIFO;
#: {good_*}: valid files beside it)
OTHER_READERS = {
    "gres-generate-reports": ["gres", "generate", "--reports", "{fifo}"],
    "gres-generate-slurm-conf": ["gres", "generate", "--reports", INV, "--slurm-conf", "{fifo}"],
    "gres-check-slurm-conf": ["gres", "check", "{good_gres}", "--slurm-conf", "{fifo}"],
    "topology-generate-reports": ["topology", "generate", "--reports", "{fifo}"],
    "topology-check-slurm-conf": ["topology", "check", "{good_topology}", "--slurm-conf",
                                  "{fifo}"],
    "nccl-topo-inventory": ["nccl-topo", "--inventory", "{fifo}", "-o", "{out}"],
    "state-inventory": ["state", "--inventory", "{fifo}"],
    "sbatch-inventory": ["sbatch", "--inventory", "{fifo}", "--tp", "8", "--state", "none",
                         "--", "true"],
    "sbatch-state": ["sbatch", "--inventory", INV, "--tp", "8", "--state", "{fifo}", "--",
                     "true"],
    "daemon-inventory": ["daemon", "run", "--inventory", "{fifo}", "--spool", "{out}",
                         "--once"],
    "bind-inventory": ["bind", "--plan", "{good_plan}", "--inventory", "{fifo}", "--run-dir",
                       "{out}", "--no-probe", "--cgroup-devices", "no"],
    "collect-ssh-config": ["collect", "--ssh-config", "{fifo}", "--nodes", "gpu01", "-o",
                           "{out}"],
    "inventory-compile": ["inventory", "compile", "{dir}", "-o", "{out}"],
}


@pytest.mark.parametrize("name", sorted(OTHER_READERS))
def test_other_readers_refuse_a_fifo(name, tmp_path):
    fifo = _fifo_in(tmp_path, "x.yaml")
    good = {"good_gres": tmp_path / "gres.conf", "good_topology": tmp_path / "topology.conf",
            "good_plan": tmp_path / "plan.json"}
    good["good_gres"].write_text(BY_NAME["gres.conf"].seed)
    good["good_topology"].write_text(BY_NAME["topology.conf"].seed)
    good["good_plan"].write_text(BY_NAME["plan-document"].seed)
    subst = {"fifo": str(fifo), "dir": str(fifo.parent), "out": str(tmp_path / "out"),
             **{k: str(v) for k, v in good.items()}}
    argv = [a.format(**subst) if a.startswith("{") else a for a in OTHER_READERS[name]]
    env = BY_NAME["plan-document"].env if name.startswith("bind") else None
    code, err = _cli(argv, env=env)
    _assert_fifo_refused(code, err, fifo)


def test_collect_from_dir_reports_a_fifo_as_a_failed_node(tmp_path):
    fifo = _fifo_in(tmp_path, "gpu01.yaml")
    code, err = _cli(["collect", "--from-dir", str(fifo.parent), "-o", str(tmp_path / "out")])
    assert code != 0 and "Traceback" not in err, err
    assert f"{fifo}: is a FIFO" in err, err
    assert err.strip().splitlines()[-1].startswith("slurmtopo: error: "), err


def test_a_fifo_as_the_compiled_cache_is_passed_over(tmp_path):
    """A report directory whose compiled form (the cache) is a FIFO still
    reads: the cache is rebuilt, never waited on."""
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "gpu01.yaml").write_text(BY_NAME["reports-dir"].seed)
    from slurmtopo.inventory.compiled import COMPILED_NAME
    os.mkfifo(reports / COMPILED_NAME)
    code, err = _cli(["plan", "--inventory", str(reports), "--tp", "8"],
                     env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert code == 0, err


@pytest.mark.parametrize("snippet", [
    "from slurmtopo.agent.sysfs import Sysfs; assert Sysfs({root!r}).read('f') is None",
    "from slurmtopo.agent.watch import Agent; assert Agent._read({fifo!r}) is None",
    "from slurmtopo.inventory.compiled import read_compiled; "
    "from slurmtopo.files.usercache import slot_in; "
    "assert read_compiled(slot_in({root!r}, 'f', 'inventories')) is None",
], ids=["sysfs", "agent-watch", "compiled-cache"])
def test_library_readers_pass_over_a_fifo(snippet, tmp_path):
    """Readers that treat an unreadable file as absent (sysfs attributes,
    the agent's baseline files, the compiled cache) do so for a FIFO too."""
    import subprocess
    import sys

    os.mkfifo(tmp_path / "f")
    code = snippet.format(root=str(tmp_path), fifo=str(tmp_path / "f"))
    try:
        p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                           capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"blocked on a FIFO: {code}")
    assert p.returncode == 0, p.stderr
