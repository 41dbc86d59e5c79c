"""Each framework's groups against what the framework's own code computed.

tests/fixtures/frameworks/*.json were recorded by
scripts/framework_fixtures.py running torchtitan, DeepSpeed and Megatron-LM
(megatron-core) themselves on torch's fake process group, rank by rank; the
file names the versions. The frameworks are not needed to run these tests.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks import deepspeed, torchtitan
from slurmtopo.job.frameworks.registry import FRAMEWORKS, framework_layout
from slurmtopo.job.groups import mesh_groups
from tests.clirun import run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"


def _fixture(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _cases(name):
    doc = _fixture(name)
    return [pytest.param(c, id=f"{name}-{i}") for i, c in enumerate(doc["cases"])]


#: framework -> (fixture case -> slurmtopo knobs)
def _knobs(name, case):
    case = dict(case)
    if name == "torchtitan":
        case["world"] = case.pop("world_size")
    if name == "megatron":
        case["world"] = case["tp"] * case["cp"] * case["pp"] * case["dp"]
    return case


#: kinds torchtitan builds with the fake backend when ep == 1 (no rank talks
#: over them), which slurmtopo leaves out
_FAKE_WITHOUT_EP = {"ep", "efsdp"}


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_fixture_names_the_framework_version(name):
    doc = _fixture(name)
    assert doc["framework"] == name
    assert doc["version"] and doc["torch"]
    assert doc["generated_by"] == "scripts/framework_fixtures.py"
    refused = [c for c in doc["cases"] if "refused" in c]
    built = [c for c in doc["cases"] if "groups" in c]
    assert len(built) >= 8
    if name != "megatron":
        assert refused  # the refusals are part of the proof


@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_every_kind_is_covered_by_the_fixtures(name):
    """Every kind slurmtopo can emit appears in some recorded case."""
    recorded = set()
    for case in _fixture(name)["cases"]:
        recorded |= set(case.get("groups", {}))
    emitted = set()
    for case in _fixture(name)["cases"]:
        if "groups" in case:
            emitted |= set(framework_layout(name, **_knobs(name, case["case"])).groups)
    assert emitted <= recorded
    assert len(emitted) >= 6


@pytest.mark.parametrize(
    "name,case", [(n, p.values[0]) for n in FRAMEWORKS for p in _cases(n)])
def test_groups_equal_the_frameworks(name, case):
    knobs = _knobs(name, case["case"])
    if "refused" in case:
        with pytest.raises(LayoutError) as exc:
            framework_layout(name, **knobs)
        message = str(exc.value)
        assert message.startswith(f"{name} refuses this layout: ")
        theirs = case["refused"]
        # torchtitan 0.3.0 leaves two refusals to a bare assert or torch's
        # unflatten; everywhere else slurmtopo gives the framework's words
        if theirs and not theirs.startswith("The product of mesh_sizes"):
            assert theirs in message
        return
    got = framework_layout(name, **knobs)
    expected = case["groups"]
    if name == "torchtitan" and knobs["ep"] == 1:
        expected = {k: v for k, v in expected.items() if k not in _FAKE_WITHOUT_EP}
    assert set(got.groups) == set(expected)
    for kind, groups in expected.items():
        assert got.groups[kind] == groups, kind
    if "resolved_dp_shard" in case:
        assert got.knob("dp_shard") == case["resolved_dp_shard"]


def test_megatron_is_todays_groups():
    """--framework megatron prints byte for byte what groups printed before."""
    from slurmtopo.commands.groups import command

    for args in (["--world", "16", "--tp", "2", "--pp", "4"],
                 ["--world", "16", "--tp", "2", "--ep", "4", "--pp", "2", "--expert-tp", "1"],
                 ["--world", "8", "--tp", "2", "--order", "dp-pp-tp", "--convention", "torch",
                  "--pp", "2"]):
        plain = CliRunner().invoke(command, args + ["--json"])
        named = CliRunner().invoke(command, args + ["--framework", "megatron", "--json"])
        assert plain.exit_code == named.exit_code == 0, plain.output
        assert plain.output == named.output
        table = CliRunner().invoke(command, args).output
        assert table == CliRunner().invoke(command, args + ["--framework", "megatron"]).output


def test_cli_json_uses_the_frameworks_names():
    case = _fixture("torchtitan")["cases"][2]  # dp_replicate=2 dp_shard=4 tp=2
    assert case["case"]["dp_replicate"] == 2 and case["case"]["dp_shard"] == 4
    code, out, err = run_cli(["groups", "--framework", "torchtitan", "--world", "16",
                              "--dp-replicate", "2", "--dp-shard", "4", "--tp", "2", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert {k: data[k] for k in ("dp_replicate", "dp_shard", "tp", "batch", "loss")} == \
        {k: case["groups"][k] for k in ("dp_replicate", "dp_shard", "tp", "batch", "loss")}
    code, out, err = run_cli(["groups", "--framework", "deepspeed", "--world", "16", "--pp", "2",
                              "--tp", "2", "--ep", "2", "--zero-stage", "1", "--json"])
    assert code == 0, err
    assert list(json.loads(out)) == ["pipe_parallel", "data_parallel", "slice_parallel",
                                     "model_parallel", "expert_parallel", "expert_data_parallel"]
    code, out, err = run_cli(["groups", "--framework", "deepspeed", "--world", "8",
                              "--zero-stage", "3", "--tp", "2"])
    assert code == 0, err
    assert "deepspeed: pp=1 tp=2 dp=4 world=8 zero_stage=3 ep=1" in out


@pytest.mark.parametrize("args,fragment", [
    (["--framework", "deepspeed", "--world", "8", "--cp", "2"],
     "--cp is not a deepspeed setting"),
    (["--dp-shard", "2", "--world", "8"], "--dp-shard is not a megatron setting"),
    (["--framework", "torchtitan", "--world", "8", "--dp", "2"],
     "--dp is not a torchtitan setting"),
    (["--framework", "torchtitan", "--world", "8", "--order", "tp-dp"],
     "--order is not a torchtitan setting"),
    (["--framework", "torchtitan", "--dp-shard", "-1"], "give the world size"),
    (["--framework", "torchtitan", "--world", "8", "--dp-replicate", "3"],
     "Invalid parallel dims: dp_replicate(3) * dp_shard(2)"),
    (["--framework", "deepspeed", "--world", "8", "--pp", "2", "--zero-stage", "3"],
     "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"),
    (["--framework", "deepspeed", "--world", "8", "--zero-stage", "4"], "not a ZeRO stage"),
    (["--framework", "deepspeed", "--world", "12", "--ep", "8"], "12 is not divisible by 8"),
    (["--framework", "megatron", "--world", "8", "--enable-expert-tensor-parallelism"],
     "--enable-expert-tensor-parallelism is not a megatron setting"),
])
def test_cli_refusals_are_one_line(args, fragment):
    code, out, err = run_cli(["groups", *args])
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("slurmtopo: error: ")
    assert fragment in err


def test_registry_refuses_unknown_names():
    with pytest.raises(LayoutError, match="unknown framework 'jax'"):
        framework_layout("jax", tp=1)
    with pytest.raises(LayoutError, match="torchtitan has no 'order' setting"):
        framework_layout("torchtitan", order="tp-dp", world=8)
    with pytest.raises(LayoutError, match="whole number"):
        framework_layout("torchtitan", tp="2", world=8)
    with pytest.raises(LayoutError, match="true or false"):
        framework_layout("deepspeed", world=8, enable_expert_tensor_parallelism=1)


# ---------------------------------------------------------------------------
# properties over many more configurations than the fixtures hold


@st.composite
def titan_dims(draw):
    sizes = {k: draw(st.sampled_from([1, 1, 2, 3, 4])) for k in
             ("dp_replicate", "dp_shard", "cp", "tp", "pp")}
    region = sizes["dp_shard"] * sizes["cp"] * sizes["tp"]
    ep = draw(st.sampled_from([d for d in range(1, region + 1) if region % d == 0]))
    backend = draw(st.sampled_from(torchtitan.SPMD_BACKENDS))
    return dict(sizes, ep=ep, spmd_backend=backend)


@settings(max_examples=150, deadline=None)
@given(titan_dims())
def test_property_torchtitan_meshes(dims):
    world = (dims["dp_replicate"] * dims["dp_shard"] * dims["cp"] * dims["tp"] * dims["pp"])
    got = torchtitan.layout(world=world, **dims)
    size = {"pp": dims["pp"], "batch": dims["dp_replicate"] * dims["dp_shard"],
            "dp_replicate": dims["dp_replicate"], "cp": dims["cp"], "tp": dims["tp"],
            "dp_shard": dims["dp_shard"], "fsdp": dims["dp_shard"] * dims["cp"],
            "loss": dims["dp_replicate"] * dims["dp_shard"] * dims["cp"],
            "dp": dims["dp_replicate"] * dims["dp_shard"], "ep": dims["ep"],
            "efsdp": dims["dp_shard"] * dims["cp"] * dims["tp"] // dims["ep"]}
    for kind, groups in got.groups.items():
        assert all(len(g) == size[kind] for g in groups), kind
        assert sorted(r for g in groups for r in g) == list(range(world)), kind
    # ep is the innermost part of dp_shard*cp*tp: an ep group lies inside one
    # (dp_shard, cp, tp) block and is a run of consecutive ranks
    block = mesh_groups((dims["pp"], dims["dp_replicate"],
                         dims["dp_shard"] * dims["cp"] * dims["tp"]),
                        ("pp", "dp_replicate", "region"))["region"]
    if dims["ep"] > 1:
        for g in got.groups["ep"]:
            assert g == list(range(g[0], g[0] + len(g)))
            assert any(set(g) <= set(b) for b in block)
    else:
        assert "ep" not in got.groups
    # the shard group is orthogonal to tp and replicate: they meet in one rank
    shard = got.groups.get("dp_shard") or got.groups["fsdp"]
    for a in shard[:3]:
        for b in got.groups["tp"][:3] + got.groups["dp_replicate"][:3]:
            assert len(set(a) & set(b)) <= 1


@st.composite
def speed_dims(draw):
    pp, tp = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 2, 4]))
    ep = draw(st.sampled_from([1, 2, 3, 4]))
    dp = ep * draw(st.sampled_from([1, 2, 3]))
    return dict(pp=pp, tp=tp, dp=dp, ep=ep,
                use_data_before_expert_parallelism=draw(st.booleans()),
                enable_expert_tensor_parallelism=draw(st.booleans()))


@settings(max_examples=150, deadline=None)
@given(speed_dims())
def test_property_deepspeed_groups(dims):
    got = deepspeed.layout(**dims)
    world = dims["pp"] * dims["tp"] * dims["dp"]
    assert got.world == world
    for kind, groups in got.groups.items():
        assert sorted(r for g in groups for r in g) == list(range(world)), kind
    if dims["ep"] == 1:
        assert "expert_parallel" not in got.groups
        return
    stage = world // dims["pp"]
    for ep_group in got.groups["expert_parallel"]:
        assert len(ep_group) == dims["ep"]
        assert len({r // stage for r in ep_group}) == 1  # inside one pipeline stage
    for edp in got.groups["expert_data_parallel"]:
        assert len(edp) == stage // dims["ep"] // (
            dims["tp"] if dims["enable_expert_tensor_parallelism"] else 1)
    if dims["enable_expert_tensor_parallelism"]:  # experts split over tp like dense layers
        data = {tuple(g) for g in got.groups["data_parallel"]}
        for ep_group in got.groups["expert_parallel"]:
            assert any(set(ep_group) <= set(g) for g in data)


# ---------------------------------------------------------------------------
# the planner's terms: the same ranks, under the planner's kinds


@pytest.mark.parametrize(
    "name,case", [(n, p.values[0]) for n in FRAMEWORKS for p in _cases(n)
                  if "groups" in p.values[0]])
def test_request_terms_number_ranks_as_the_framework(name, case):
    """Every kind mapped to a planner kind has exactly the framework's groups
    in the planner's layout (recorded from the framework itself)."""
    from slurmtopo.job.frameworks import registry
    from slurmtopo.job.groups import build_groups

    fl = framework_layout(name, **_knobs(name, case["case"]))
    terms = registry.get(name).terms(fl)
    planned = build_groups(terms.layout)
    assert terms.layout.world == fl.world
    for theirs, ours in terms.kinds.items():
        assert planned[ours] == case["groups"][theirs], (theirs, ours)
    if name == "torchtitan" and fl.knob("dp_replicate") == 1:
        assert "dp_shard" in terms.kinds or "fsdp" in terms.kinds
    assert {"tp", "pp"} <= set(terms.kinds.values())


# ---------------------------------------------------------------------------
# placement: plan and the API take the framework and its settings

EXAMPLES = Path(__file__).resolve().parents[1] / "etc" / "examples"


def _host_of(placement):
    return {s.rank: s.host for s in placement.slots}


def _plan(framework, **kw):
    from slurmtopo import api

    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    req = api.job_request(framework, **kw)
    return req, api.plan_job(cluster, None, req)


def test_hsdp_shard_groups_stay_in_a_node_and_replicas_go_across():
    req, placement = _plan("torchtitan", world=32, dp_replicate=4, dp_shard=8)
    host = _host_of(placement)
    titan = torchtitan.layout(world=32, dp_replicate=4, dp_shard=8)
    for group in titan.groups["dp_shard"]:
        assert len({host[r] for r in group}) == 1, group
    for group in titan.groups["dp_replicate"]:
        assert len({host[r] for r in group}) == 4, group


def test_fsdp_with_tp_keeps_shard_and_tp_on_nvlink():
    req, placement = _plan("torchtitan", world=16, dp_shard=4, tp=2, pp=2)
    assert dict(req.prefer) == {"dp": "nvlink"}
    host = _host_of(placement)
    titan = torchtitan.layout(world=16, dp_shard=4, tp=2, pp=2)
    for kind in ("dp_shard", "tp"):
        for group in titan.groups[kind]:
            assert len({host[r] for r in group}) == 1, (kind, group)


def test_zero3_prefers_the_data_parallel_group_on_nvlink():
    req, _ = _plan("deepspeed", world=16, tp=2, zero_stage=3)
    assert dict(req.prefer) == {"dp": "nvlink"}
    assert req.layout.tp == 2 and req.layout.dp == 8
    req, _ = _plan("deepspeed", world=16, tp=2, zero_stage=1)
    assert dict(req.prefer) == {}
    # the job's own word wins over the style's preference
    req, _ = _plan("deepspeed", world=16, tp=2, zero_stage=3, prefer={"data_parallel": "leaf"})
    assert dict(req.prefer) == {"dp": "leaf"}


def test_framework_kind_names_in_preferences():
    from slurmtopo import api

    req = api.job_request("torchtitan", world=16, dp_shard=8, tp=2,
                          require={"tp": "nvlink"}, prefer={"dp_shard": "node"})
    assert dict(req.require) == {"tp": "nvlink"} and dict(req.prefer) == {"dp": "node"}
    with pytest.raises(LayoutError, match="no 'dp_shard' groups the planner can place"):
        api.job_request("torchtitan", world=16, dp_replicate=2, dp_shard=4, tp=2,
                        prefer={"dp_shard": "nvlink"})
    with pytest.raises(LayoutError, match="no 'tp' groups"):
        api.job_request("deepspeed", world=16, tp=2, prefer={"tp": "nvlink"})
    with pytest.raises(LayoutError, match="Invalid parallel dims"):
        api.job_request("torchtitan", world=16, dp_replicate=3)


def test_plan_cli_with_a_framework(tmp_path):
    out = tmp_path / "plan"
    code, stdout, err = run_cli([
        "plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
        "--framework", "torchtitan", "--world", "32", "--dp-replicate", "4", "--dp-shard", "-1",
        "--prefer", "dp_replicate=spine", "--output-dir", str(out), "--json"])
    assert code == 2 and "no 'dp_replicate' groups" in err  # HSDP: no planner kind for it
    code, stdout, err = run_cli([
        "plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"),
        "--framework", "torchtitan", "--world", "32", "--dp-replicate", "4", "--dp-shard", "-1",
        "--output-dir", str(out), "--json"])
    assert code == 0, err
    ranks = json.loads(stdout)["rankmap"]["ranks"]
    host = {r["rank"]: r["host"] for r in ranks}
    for group in torchtitan.layout(world=32, dp_replicate=4).groups["dp_shard"]:
        assert len({host[r] for r in group}) == 1
    code, stdout, err = run_cli([
        "plan", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"), "--framework",
        "deepspeed", "--world", "16", "--pp", "2", "--zero-stage", "3", "--output-dir", str(out)])
    assert code == 2 and "ZeRO-2 and ZeRO-3 are incompatible" in err


def test_api_docs_framework_example_runs(monkeypatch):
    import re

    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "api.md").read_text()
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)
              if "job_request" in b]
    assert len(blocks) == 1
    monkeypatch.chdir(root)
    scope = {}
    exec(compile(blocks[0], "docs/api.md", "exec"), scope)
    job = scope["job"]
    assert job.request.layout.world == 32 and job.script_text
    host = _host_of(job.placement)
    for group in torchtitan.layout(world=32, dp_replicate=4).groups["dp_shard"]:
        assert len({host[r] for r in group}) == 1


# ---------------------------------------------------------------------------
# --config: the framework's own configuration file

TORCHTITAN_TOML = (FIXTURES / "train.toml").read_text()
MEGATRON_ARGS = (FIXTURES / "megatron.args").read_text()


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_torchtitan_toml_gives_the_layout(tmp_path):
    from slurmtopo.commands.layout_options import framework_layout_from

    path = _write(tmp_path, "train.toml", TORCHTITAN_TOML)
    fl = framework_layout_from("torchtitan", config=path, world=16)
    assert (fl.knob("dp_replicate"), fl.knob("dp_shard"), fl.knob("tp")) == (2, 4, 2)
    # an option given on the command line wins over the file
    fl = framework_layout_from("torchtitan", config=path, world=16, tp=4)
    assert (fl.knob("tp"), fl.knob("dp_shard")) == (4, 2)


def test_deepspeed_json_and_megatron_args(tmp_path):
    from slurmtopo.commands.layout_options import framework_layout_from

    ds = _write(tmp_path, "ds.json", json.dumps({
        "train_batch_size": 64, "zero_optimization": {"stage": 2, "overlap_comm": True},
        "tensor_parallel": {"autotp_size": 2}, "use_data_before_expert_parallelism": True}))
    fl = framework_layout_from("deepspeed", config=ds, world=16, ep=2)
    assert (fl.knob("zero_stage"), fl.knob("tp"), fl.knob("dp")) == (2, 2, 8)
    assert fl.knob("use_data_before_expert_parallelism") is True
    mg = _write(tmp_path, "megatron.args", MEGATRON_ARGS)
    fl = framework_layout_from("megatron", config=mg, world=16)
    assert (fl.knob("tp"), fl.knob("pp"), fl.knob("dp")) == (2, 2, 4)
    assert fl.knob("use_distributed_optimizer") is True


@pytest.mark.parametrize("framework,name,text,fragment", [
    ("torchtitan", "t.toml", "[parallelism]\ntensor_parallel_degree = 2\nfoo_degree = 1\n",
     "t.toml:3: [parallelism] has no 'foo_degree'"),
    ("torchtitan", "t.toml", "[parallelism]\n\ntensor_parallel_degree = \"2\"\n",
     "t.toml:3: tensor_parallel_degree must be a whole number"),
    ("torchtitan", "t.toml", "[training]\nsteps = 10\n", "needs a [parallelism] table"),
    ("torchtitan", "t.toml", "[parallelism\n", "not a TOML job file"),
    ("deepspeed", "d.json", '{\n "zero_optimization": {\n  "stage": "3"\n }\n}\n',
     "d.json:3: zero_optimization.stage must be a whole number"),
    ("deepspeed", "d.json", "[1, 2]", "a DeepSpeed config is a JSON object"),
    ("deepspeed", "d.json", '{"zero_optimization": {"stage": 5}}', "not a ZeRO stage"),
    ("megatron", "m.args", "--num-layers 2\n--tensor-model-parallel-size x\n",
     "m.args:2: --tensor-model-parallel-size 'x': expected a whole number"),
    ("megatron", "m.args", "--tensor-model-parallel-sizes 2\n", "did you mean"),
    ("megatron", "m.args", "--lr 3e-4\n", "names none of Megatron-LM's parallel settings"),
])
def test_config_errors_are_located_one_liners(tmp_path, framework, name, text, fragment):
    path = _write(tmp_path, name, text)
    code, out, err = run_cli(["groups", "--framework", framework, "--config", path,
                              "--world", "16"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("slurmtopo: error: ")
    assert fragment in err
    assert os.path.basename(path) in err or "refuses" in err


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
                    lambda kids: st.lists(kids, max_size=3)
                    | st.dictionaries(st.sampled_from(["zero_optimization", "stage",
                                                       "tensor_parallel", "autotp_size",
                                                       "use_data_before_expert_parallelism",
                                                       "train_batch_size", "x"]), kids,
                                      max_size=4), max_leaves=12))
def test_property_deepspeed_config_garbage(doc):
    """Any JSON: a one-line LayoutError, or settings of the right types (a
    DeepSpeed config may hold any key slurmtopo does not read, as DeepSpeed
    allows)."""
    from slurmtopo.job.frameworks import registry

    try:
        knobs = registry.get("deepspeed").config_knobs(json.dumps(doc), "ds.json")
    except LayoutError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("ds.json")
        return
    assert set(knobs) <= {"zero_stage", "tp", "use_data_before_expert_parallelism"}
    for key, value in knobs.items():
        assert isinstance(value, bool) == (key == "use_data_before_expert_parallelism")


def test_sbatch_needs_nothing_but_the_job_file(tmp_path):
    """`sbatch --framework torchtitan --config train.toml -- torchrun ...`:
    the world size comes from torchrun's --nnodes x --nproc-per-node."""
    path = _write(tmp_path, "train.toml", TORCHTITAN_TOML)
    code, out, err = run_cli([
        "sbatch", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"), "--state", "none",
        "--dry-run", "--framework", "torchtitan", "--config", path, "--",
        "torchrun", "--nnodes=2", "--nproc-per-node", "8", "train.py",
        "--job.config_file", path])
    assert code == 0, err
    assert "#SBATCH --nodes=2" in out
    assert "layout: world 16 = tp 2 x cp 1 x pp 1 x dp 8" in out
    code, out, err = run_cli([
        "sbatch", "--inventory", str(EXAMPLES / "h100-4node-2leaf.yaml"), "--state", "none",
        "--dry-run", "--framework", "torchtitan", "--config", path, "--", "python", "train.py"])
    assert code == 2 and "give the world size" in err


def test_world_from_torchrun_lines():
    from slurmtopo.commands.layout_options import world_from_command

    assert world_from_command(["torchrun", "--nnodes", "4", "--nproc_per_node=8", "t.py"]) == 32
    assert world_from_command(["/usr/bin/torchrun", "--nnodes=2", "--nproc-per-node=4"]) == 8
    assert world_from_command(["torchrun", "--nnodes", "1:4", "--nproc-per-node", "8"]) is None
    assert world_from_command(["torchrun", "t.py", "--nnodes", "4", "--nproc-per-node", "8"]) \
        is None  # the script's own arguments
    assert world_from_command(["python", "--nnodes", "4", "--nproc-per-node", "8"]) is None


def test_frameworks_doc_examples_run(tmp_path, monkeypatch):
    """Every `slurmtopo` line of docs/frameworks.md and the framework pages
    (docs/frameworks/*.md) runs as printed."""
    import re
    import shlex

    root = Path(__file__).resolve().parents[1]
    pages = [root / "docs" / "frameworks.md"] + sorted((root / "docs" / "frameworks").glob("*.md"))
    assert len(pages) == 4
    text = "\n".join(p.read_text() for p in pages)
    lines = [ln[2:] for block in re.findall(r"^```console\n(.*?)^```$", text, re.S | re.M)
             for ln in block.splitlines() if ln.startswith("$ slurmtopo ")]
    assert len(lines) >= 7
    monkeypatch.chdir(root)
    for i, line in enumerate(lines):
        argv = [w.replace("/tmp/plan", str(tmp_path / f"plan{i}"))
                for w in shlex.split(line)[1:]]
        code, out, err = run_cli(argv)
        assert code == 0, (line, err)
        assert out


@pytest.mark.parametrize("name, framework, text, why", [
    ("deep.toml", "torchtitan", "a = " + "[" * 100_000 + "]" * 100_000 + "\n",
     "nested too deeply"),
    ("big.toml", "torchtitan", "[parallelism]\ntensor_parallel_degree = " + "9" * 5000 + "\n",
     "a number too long"),
    ("huge.toml", "torchtitan", "[parallelism]\ntensor_parallel_degree = " + "9" * 4000 + "\n",
     "from -1 to 262,144"),
    ("deep.json", "deepspeed", "[" * 100_000 + "]" * 100_000, "nested deeper than"),
    ("big.json", "deepspeed", '{"tensor_parallel":{"autotp_size":' + "9" * 5000 + "}}",
     "a number longer than"),
])
def test_a_hostile_config_is_one_line(tmp_path, name, framework, text, why):
    """--config with a deep TOML, a 5,000-digit integer or a deep DeepSpeed
    JSON gave RecursionError/ValueError tracebacks (issue 33)."""
    path = tmp_path / name
    path.write_text(text)
    code, out, err = run_cli(["plan", "--inventory", "etc/examples/devcluster.yaml",
                              "--state", "none", "--framework", framework, "--config",
                              str(path), "--dp", "2"])
    assert code == 2 and why in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and len(err) < 400


def test_megatron_overlaps_as_options_price_as_its_config_flags(tmp_path):
    """Megatron-LM's overlap flags given to ``plan`` under their own names
    set the step's overlaps as the same flags in its ``--config`` file do,
    change no group, and cost what the file's flags cost."""
    from slurmtopo import api

    flags = ["--sequence-parallel", "--tp-comm-overlap", "--overlap-grad-reduce",
             "--overlap-param-gather", "--overlap-moe-expert-parallel-comm"]
    args = _write(tmp_path, "m.args", "--tensor-model-parallel-size 4 --expert-model-parallel-size 2"
                  " --use-distributed-optimizer " + " ".join(flags) + "\n")
    model = "mixtral-8x7b,seq_len=4096,global_batch=64"
    by_file = api.job_spec("megatron", config=args, world=16, model=model).workload
    knobs = dict(tp=4, ep=2, world=16, use_distributed_optimizer=True, sequence_parallel=True,
                 tp_comm_overlap=True, overlap_grad_reduce=True, overlap_param_gather=True,
                 overlap_moe_expert_parallel_comm=True)
    by_options = api.job_spec("megatron", model=model, **knobs).workload
    for w in (by_file, by_options):
        assert (w.sequence_parallel, w.tp_comm_overlap, w.overlap_grad_reduce,
                w.overlap_param_gather, w.ep_comm_overlap) == (True,) * 5
    plain = api.job_spec("megatron", model=model, tp=4, ep=2, world=16,
                         use_distributed_optimizer=True)
    assert not (plain.workload.tp_comm_overlap or plain.workload.ep_comm_overlap)
    assert plain.layout.groups == api.job_spec("megatron", model=model, **knobs).layout.groups
    # through the command line: the options' price is the file's, and below no overlap's
    inv = str(Path(__file__).resolve().parents[1] / "etc" / "examples" / "h100-32node-fattree.yaml")
    base = ["plan", "--inventory", inv, "--framework", "megatron", "--world", "16",
            "--model", model, "--json", "--output-dir", str(tmp_path / "out")]
    rates = []
    for extra in (["--config", args], ["--tp", "4", "--ep", "2", "--use-distributed-optimizer"]
                  + flags, ["--tp", "4", "--ep", "2", "--use-distributed-optimizer"]):
        code, out, err = run_cli(base + extra)
        assert code == 0, err
        rates.append(json.loads(out)["step"]["tokens_per_s_per_gpu"])
    assert rates[0] == rates[1] > rates[2]
    with pytest.raises(LayoutError, match="tp_comm_overlap must be true or false"):
        framework_layout("megatron", world=8, tp=8, tp_comm_overlap="yes")


def test_megatron_memory_flags_read_as_the_model_keys(tmp_path):
    """Megatron-LM's recompute modules (a list), block recomputation,
    CPU offloading and bf16 gradient reduction in a --config file give the
    model keys --model takes, and the same memory; a module Megatron-Core
    does not know is refused with the file and line."""
    from slurmtopo import api
    from slurmtopo.cost.compute import Dims
    from slurmtopo.cost.memory import memory_per_gpu

    model = "deepseek-v3,seq_len=4096,global_batch=1024"
    args = _write(tmp_path, "m.args", "--pipeline-model-parallel-size 8 \\\n"
                  "  --expert-model-parallel-size 8 --recompute-granularity selective \\\n"
                  "  --recompute-modules mla_up_proj moe_act --grad-reduce-in-bf16\n")
    spec = api.job_spec("megatron", config=args, world=64, model=model).workload.model
    assert (spec.recompute, spec.recompute_modules, spec.grad_dtype) == \
        ("selective", "moe_act+mla_up_proj", "bf16")
    keys = api.model_spec(model + ",recompute_modules=mla_up_proj+moe_act,grad_dtype=bf16")
    d = Dims(pp=8, ep=8, dp=8)
    assert memory_per_gpu(spec, d, "zero12").parts == memory_per_gpu(keys, d, "zero12").parts
    block = _write(tmp_path, "b.args", "--recompute-granularity full --recompute-method block "
                   "--recompute-num-layers 3 --pipeline-model-parallel-size 8\n")
    assert api.job_spec("megatron", config=block, world=64,
                        model=model).workload.model.recompute_layers == 3
    uniform = _write(tmp_path, "u.args", "--recompute-granularity full --recompute-method uniform "
                     "--recompute-num-layers 1 --pipeline-model-parallel-size 8\n")
    assert api.job_spec("megatron", config=uniform, world=64,
                        model=model).workload.model.recompute_layers == 0
    off = _write(tmp_path, "o.args", "--cpu-offloading --cpu-offloading-num-layers 20 "
                 "--use-megatron-fsdp\n")
    assert api.job_spec("megatron", config=off, world=64,
                        model="llama3-70b").workload.model.offload_layers == 20
    bad = _write(tmp_path, "x.args", "--tensor-model-parallel-size 2\n"
                 "--recompute-modules attention\n")
    with pytest.raises(LayoutError, match=r"x\.args:2: --recompute-modules"):
        api.job_spec("megatron", config=bad, world=8, model=model)
