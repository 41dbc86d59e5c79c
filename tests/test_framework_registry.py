"""A fourth framework, registered in this file alone, followed through
groups, plan, cost and configuration (issue 36: frameworks are registered
objects; nothing in slurmtopo/ compares a framework's name).

``Toy`` lays its ranks out as a 2-D row-major mesh ``(data, tensor)``, names
its groups its own way, reads a ``key = value`` configuration file and runs
DDP with a bucket, an attention kernel, a logit width and a TP overlap of its
own. ``Gathering``, the toy with a collective of its own in its step, shows
the step's calls are the framework's: the cost model prices what it
returns. Registered after the command line was imported, both are
``slurmtopo plan --framework`` values. If any caller in the package still
decided by a framework's name, or kept a table keyed by it, this framework
would be refused or priced as another one, and the assertions below would
fail.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, Mapping

import pytest
from click.testing import CliRunner

from slurmtopo import api
from slurmtopo.cli import cli
# imported before the toy is registered (the fixture): --framework must
# still take it, its choices read from the registry as the command runs
from slurmtopo.commands import advise as advise_command
from slurmtopo.commands import plan as plan_command
from slurmtopo.cost import cost_params
from slurmtopo.cost.compute import Dims
from slurmtopo.cost.memory import memory_per_gpu
from slurmtopo.cost.model_spec import MODEL_PRESETS
from slurmtopo.cost.step import step_calls
from slurmtopo.errors import LayoutError
from slurmtopo.job.frameworks import registry
from slurmtopo.job.frameworks.base import ConfigReader, Framework, RequestTerms
from slurmtopo.job.frameworks.common import (FrameworkLayout, Knob, check_world, integer,
                                             normalised, refuse)
from slurmtopo.job.frameworks.stepcalls import StepCall
from slurmtopo.job.frameworks.torchtitan import Torchtitan
from slurmtopo.job.groups import Layout, build_groups, mesh_groups
from slurmtopo.job.workload import Workload
from tests.test_cost_reference import ref_group

EXAMPLES = Path(__file__).resolve().parents[1] / "etc" / "examples"
MIB = 1024 * 1024

#: the toy's configuration keys -> its knobs, and -> the ``--model`` keys
_CONFIG_KNOBS = {"tensor": "tp", "data": "dp"}
_CONFIG_MODEL = {"n_layers": "layers", "d_model": "hidden", "d_ff": "ffn",
                 "batch": "micro_batch"}


def _pairs(text: str, where: str):
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.fullmatch(r"\s*(\w+)\s*=\s*(\w+)\s*", line)
        if m is None:
            raise LayoutError(f"{where}:{n}: not a toy setting: {line.strip()!r}")
        yield m.group(1), m.group(2)


def _read(text: str, where: str, keys: Mapping[str, str]) -> Dict[str, object]:
    """The toy file's integer settings under ``keys``' names."""
    return {keys[k]: int(v) for k, v in _pairs(text, where) if k in keys}


def _read_overlaps(text: str, where: str) -> Dict[str, bool]:
    return {"tp_comm_overlap": v == "true" for k, v in _pairs(text, where) if k == "async_tp"}


class Toy(Framework):
    """A 2-D mesh (data, tensor), row-major: tensor varies fastest."""

    name = "toy"
    knobs = (Knob("tp", 1, "Tensor degree."), Knob("dp", None, "Data degree."),
             Knob("world", None, "World size (default tp*dp)."))
    mesh = ("dp", "tp")
    mesh_words = "mesh data, tensor"
    config = ConfigReader("toy key = value file", lambda t, w: _read(t, w, _CONFIG_KNOBS),
                          lambda t, w: _read(t, w, _CONFIG_MODEL), _read_overlaps)
    attention_kernel = "fused"
    logit_bytes = 4
    tp_overlap_backward = False
    bucket_mib = 64

    def build(self, tp: int = 1, dp=None, world=None) -> FrameworkLayout:
        if integer("tp", tp) < 1 or (dp is not None and integer("dp", dp) < 1):
            raise refuse(self.name, "a degree is at least 1")
        world = check_world(world if world is not None else tp * (dp or 1))
        if world % tp:
            raise refuse(self.name, f"world {world} is not a multiple of tensor {tp}")
        dp = world // tp
        grid = mesh_groups((dp, tp), ("data", "tensor"))
        return FrameworkLayout(self.name, world, (("tp", tp), ("dp", dp), ("world", world)),
                               normalised({"tensor": grid["tensor"], "data": grid["data"]}))

    def terms(self, fl: FrameworkLayout) -> RequestTerms:
        k = dict(fl.knobs)
        lay = Layout(tp=k["tp"], dp=k["dp"], world=fl.world).resolved()
        return RequestTerms(lay, {"tensor": "tp", "data": "dp"}, {}, ())

    def sizes_world(self, knobs: Mapping[str, Any]) -> bool:
        return knobs.get("dp") is not None

    def style(self, knobs: Mapping[str, Any]) -> str:
        return "ddp"

    def ddp_bucket_bytes(self, dp: int, d: int) -> int:
        return self.bucket_mib * MIB


class SmallBuckets(Toy):
    """The toy with a quarter of its bucket, a wider loss and FlashAttention-2."""

    name = "toy-small-buckets"
    bucket_mib = 16
    logit_bytes = 12
    attention_kernel = "flash2"


#: the gathering toy's own call: its EMA weights gathered over the data
#: groups three times a step, 8 MiB each, around the optimizer, exposed
EMA_GATHER = StepCall("toy-ema", "dp", "all-gather", 8 * MIB, 3, "optimizer", "none",
                      note="the EMA weights gathered")


class Gathering(Toy):
    """The toy, whose step gathers its EMA weights too."""

    name = "toy-gathering"

    def step_calls(self, layout, workload, model):
        return super().step_calls(layout, workload, model) + [EMA_GATHER]


@pytest.fixture
def toy():
    fws = [registry.register(Toy()), registry.register(SmallBuckets()),
           registry.register(Gathering())]
    try:
        yield fws[0]
    finally:
        for fw in fws:
            registry.unregister(fw.name)
    assert "toy" not in registry.names()


CONFIG = """# a toy run
tensor = 4
data = 4
n_layers = 32
d_model = 4096
d_ff = 14336
batch = 1
async_tp = true
"""


def test_it_is_known_by_name_once_registered(toy):
    assert registry.names()[:3] == ("megatron", "torchtitan", "deepspeed")
    assert registry.get("toy") is toy
    assert "toy" in registry.names()
    with pytest.raises(ValueError):
        registry.register(Toy())  # one name, one framework
    registry.unregister("toy")
    with pytest.raises(LayoutError, match="unknown framework 'toy'"):
        registry.get("toy")
    with pytest.raises(LayoutError, match="workload framework 'toy'"):
        Workload(framework="toy")
    registry.register(toy)


def test_groups_are_its_own_by_its_names(toy):
    spec = api.job_spec("toy", tp=4, dp=2)
    assert spec.framework is toy and spec.layout.world == 8
    assert spec.layout.groups == {"tensor": [[0, 1, 2, 3], [4, 5, 6, 7]],
                                  "data": [[0, 4], [1, 5], [2, 6], [3, 7]]}
    assert toy.title(spec.layout) == "toy: tp=4 dp=2 world=8"
    assert toy.describe(spec.layout) == "toy world 8 = dp 2 × tp 4 (mesh data, tensor)"
    # the planner's layout numbers the ranks as the toy does: same groups
    planned = build_groups(spec.request.layout)
    assert planned["tp"] == spec.layout.groups["tensor"]
    assert planned["dp"] == spec.layout.groups["data"]
    with pytest.raises(LayoutError, match="toy has no 'zero-stage' setting"):
        api.job_spec("toy", tp=4, dp=2, zero_stage=1)
    with pytest.raises(LayoutError, match="world 6 is not a multiple of tensor 4"):
        api.job_spec("toy", tp=4, world=6)


def test_constraints_name_its_kinds(toy):
    spec = api.job_spec("toy", tp=4, dp=2, require={"tensor": "nvlink"},
                        prefer={"data": "leaf"})
    assert spec.request.require == {"tp": "nvlink"}
    assert spec.request.prefer == {"dp": "leaf"}
    with pytest.raises(LayoutError, match="no 'pipe' groups"):
        api.job_spec("toy", tp=4, dp=2, require={"pipe": "nvlink"})


def test_plan_writes_its_groups_into_the_rank_map(toy):
    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    spec = api.job_spec("toy", tp=8, dp=4, require={"tensor": "nvlink"})
    job = api.prepare(cluster, None, spec, ["python", "train.py"],
                      api.ScriptOptions(job_name="toy"))
    assert job.spec is spec and job.placement.world_size == 32
    docs = job.documents
    assert docs.rankmap["framework"] == "toy"
    assert docs.rankmap["framework_groups"] == spec.layout.groups
    # every tensor group inside one node, as required in the toy's words
    for group in spec.layout.groups["tensor"]:
        assert len({job.placement.slots[r].host for r in group}) == 1
    header = docs.rankmap_csv.splitlines()[0].split(",")
    assert header[-2:] == ["tensor_group", "data_group"]
    assert '"framework": "toy"' in docs.rankmap_json


def test_its_step_follows_its_conventions(toy):
    model = MODEL_PRESETS["8b"]
    spec = api.job_spec("toy", tp=4, dp=4, model=model, overlaps={"tp_comm_overlap": True})
    small = api.job_spec("toy-small-buckets", tp=4, dp=4, model=model,
                         overlaps={"tp_comm_overlap": True})
    calls = step_calls(spec.request.layout, spec.workload)
    tp = [c for c in calls if c.what == "tp"]
    # its TP overlap hides the forward's collectives, not the backward's
    assert {c.overlaps_with for c in tp if c.phase == "forward"} == {"forward"}
    assert {c.overlaps_with for c in tp if c.phase == "backward"} == {"none"}
    # DDP in its own buckets: a quarter of the bucket, about four times the calls
    dp = [c for c in calls if c.what == "dp"]
    dp_small = [c for c in step_calls(small.request.layout, small.workload) if c.what == "dp"]
    assert len(dp) == len(dp_small) == 1
    assert dp[0].collective == "all-reduce" and dp[0].message_bytes <= 64 * MIB
    assert dp_small[0].message_bytes <= 16 * MIB
    assert 3 * dp[0].calls <= dp_small[0].calls <= 4 * dp[0].calls + 1

    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    job = api.prepare(cluster, None, spec, ["python", "train.py"],
                      api.ScriptOptions(job_name="toy"))
    price = api.price_step(cluster, job.placement, spec.request)
    assert price.workload.framework == "toy" and price.whole is not None
    other = api.price_step(cluster, job.placement, small.request)
    # fused attention (the toy's kernel) computes faster than FlashAttention-2
    assert price.compute_s < other.compute_s
    # the loss's width is the framework's: 4 bytes against 12 a logit
    dims = Dims(tp=1, dp=8)
    narrow = memory_per_gpu(model, dims, "ddp", "toy").total_bytes
    wide = memory_per_gpu(model, dims, "ddp", "toy-small-buckets").total_bytes
    assert narrow < wide


def test_its_config_file_gives_knobs_model_and_overlaps(toy, tmp_path):
    path = tmp_path / "run.toy"
    path.write_text(CONFIG)
    spec = api.job_spec("toy", config=str(path))
    assert spec.knobs == {"tp": 4, "dp": 4, "world": 16}
    assert spec.workload.model.layers == 32 and spec.workload.model.hidden == 4096
    assert spec.workload.model.ffn == 14336
    assert spec.workload.tp_comm_overlap is True
    # an option given wins over the file
    assert api.job_spec("toy", config=str(path), dp=2).knobs["dp"] == 2
    # read once: the same FrameworkConfig object answers every part
    config = api.framework_config("toy", str(path))
    assert config.knobs == {"tp": 4, "dp": 4} and config.overlaps == {"tp_comm_overlap": True}
    bad = tmp_path / "bad.toy"
    bad.write_text("tensor = 4\ndata: 4\n")
    with pytest.raises(LayoutError, match=re.escape(f"{bad}:2: not a toy setting")):
        api.job_spec("toy", config=str(bad))


def test_a_call_of_its_own_is_priced_in_the_step(toy):
    spec = api.job_spec("toy", tp=8, dp=4)
    own = api.job_spec("toy-gathering", tp=8, dp=4)
    assert own.request.layout == spec.request.layout
    plain_calls = step_calls(spec.request.layout, spec.workload)
    assert step_calls(own.request.layout, own.workload) == plain_calls + [EMA_GATHER]

    cluster = api.load_cluster(str(EXAMPLES / "h100-4node-2leaf.yaml"))
    job = api.prepare(cluster, None, spec, ["python", "train.py"],
                      api.ScriptOptions(job_name="toy"))
    plain = api.price_step(cluster, job.placement, spec.request)
    grown = api.price_step(cluster, job.placement, own.request)
    # every other call priced as before, the toy's own last
    assert grown.calls[:-1] == plain.calls
    extra = grown.calls[-1]
    assert extra.call == EMA_GATHER and (extra.count, extra.size) == (8, 4)
    # its price: three all-gathers of 8 MiB on the slowest data group, by
    # the plain per-rank reference of the cost model (tests/test_cost_reference.py)
    p = cost_params(cluster)
    dp_groups = job.placement.groups["dp"]
    one = max(ref_group(cluster, p, job.placement, g, "all-gather", 8 * MIB)[1]
              for g in dp_groups)
    assert one > 0 and extra.per_call_s == pytest.approx(one, rel=1e-12)
    assert extra.seconds == pytest.approx(3 * one, rel=1e-12)
    # and the step grows by exactly that
    assert grown.time_s == pytest.approx(plain.time_s + extra.seconds, rel=1e-12)
    assert grown.by_kind()["dp"] == pytest.approx(plain.by_kind()["dp"] + extra.seconds,
                                                  rel=1e-12)


def _plan(*args: str):
    return CliRunner().invoke(cli, ["plan", "--inventory",
                                    str(EXAMPLES / "h100-4node-2leaf.yaml"), *args])


def test_plan_takes_a_framework_registered_after_it_was_imported(toy, tmp_path):
    # the command's module was loaded before the toy existed
    assert plan_command.command is not None
    result = _plan("--framework", "toy-gathering", "--tp", "8", "--dp", "4",
                   "--output-dir", str(tmp_path / "plan"), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["rankmap"]["framework"] == "toy-gathering"
    assert set(out["rankmap"]["framework_groups"]) == {"tensor", "data"}
    step = out["step"]
    assert step["framework"] == "toy-gathering"
    own = [c for c in step["calls"] if c["what"] == "toy-ema"]
    assert len(own) == 1 and own[0]["calls"] == 3 and own[0]["collective"] == "all-gather"
    assert own[0]["message_bytes"] == 8 * MIB and own[0]["kind"] == "dp"
    assert step["time_s"] == pytest.approx(sum(c["exposed_s"] for c in step["calls"]))
    # help and completion list it after the built-in three
    shown = _plan("--help").output
    assert "--framework [megatron|torchtitan|deepspeed|toy|toy-small-buckets|toy-gathering]" in \
        " ".join(shown.split())
    done = CliRunner().invoke(cli, [], prog_name="slurmtopo", env={
        "_SLURMTOPO_COMPLETE": "bash_complete", "COMP_WORDS": "slurmtopo plan --framework toy-g",
        "COMP_CWORD": "3"})
    assert done.output.split() == ["plain,toy-gathering"]


def test_an_unregistered_framework_is_refused_as_before(toy, tmp_path):
    registry.unregister("toy-gathering")
    try:
        result = _plan("--framework", "toy-gathering", "--tp", "8",
                       "--output-dir", str(tmp_path / "plan"))
        assert result.exit_code == 2 and not (tmp_path / "plan").exists()
        assert ("Invalid value for '--framework': 'toy-gathering' is not one of 'megatron', "
                "'torchtitan', 'deepspeed', 'toy', 'toy-small-buckets'.") in result.output
    finally:
        registry.register(Gathering())


class SiteTitan(Torchtitan):
    """A site's torchtitan under its own name: advised, as torchtitan is."""

    name = "titan-site"


def test_advise_takes_an_advised_framework_registered_after_it_was_imported():
    inv = str(EXAMPLES / "h100-32node-fattree.yaml")
    args = ["advise", "--inventory", inv, "--model", "llama3-8b,seq_len=8192,global_batch=256",
            "--gpus", "32", "--framework", "titan-site", "--top", "3", "--json"]
    assert advise_command.command is not None  # loaded before the framework existed
    registry.register(SiteTitan())
    try:
        assert "titan-site" in registry.advised()
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        layouts = json.loads(result.stdout)["layouts"]
        assert layouts and {x["framework"] for x in layouts} == {"titan-site"}
        assert all("--framework titan-site" in x["plan"] for x in layouts)
    finally:
        registry.unregister("titan-site")
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 2
    assert ("Invalid value for '--framework': 'titan-site' is not one of 'megatron', "
            "'torchtitan', 'deepspeed'.") in refused.output
