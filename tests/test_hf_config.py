"""--model PATH/config.json: a Hugging Face checkpoint's config read as the
model description (slurmtopo/cost/hf_config.py), and the names people
write for the presets (model_spec.preset_key)."""
import json
import os
import shlex
import subprocess
import sys
from dataclasses import fields, replace

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmtopo import api
from slurmtopo.cli import cli
from slurmtopo.cost.compute import _attention_flops
from slurmtopo.cost.hf_config import hf_model_keys
from slurmtopo.cost.model_spec import MODEL_PRESETS, parse_model, preset_key
from slurmtopo.errors import InventoryError, LayoutError
from slurmtopo.job.frameworks import registry
from slurmtopo.job.frameworks.stepcalls import step_sizes

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "fixtures", "hf_configs")
EXAMPLE = os.path.join(os.path.dirname(HERE), "etc", "examples", "h100-32node-fattree.yaml")

#: each recorded config.json and the preset of the same model
SAME = {"meta-llama-3-8b": "llama3-8b", "llama-3.1-70b": "llama3-70b",
        "deepseek-v3": "deepseek-v3", "qwen3-30b-a3b": "qwen3-30b-a3b",
        "qwen2-57b-a14b": "qwen2-57b-a14b", "mixtral-8x7b": "mixtral-8x7b",
        "gpt-oss-120b": "gpt-oss-120b", "llama-4-scout": "llama4-scout-17b-16e",
        "llama-4-maverick": "llama4-maverick-17b-128e"}


def _path(name):
    return os.path.join(CONFIGS, name + ".json")


@pytest.mark.parametrize("name,preset", sorted(SAME.items()))
def test_config_json_gives_the_presets_model(name, preset):
    """Every dimension the preset has, read from the checkpoint's own file.
    The Llama and Mixtral presets carry the published parameter count
    (norms included), which the dimensions leave out: within 0.01%."""
    spec, want = api.model_spec(_path(name)), MODEL_PRESETS[preset]
    for f in fields(spec):
        if f.name != "params":
            assert getattr(spec, f.name) == getattr(want, f.name), f.name
    assert abs(spec.params - want.params) / want.params < 1e-4


def test_keys_after_the_path_change_it():
    spec = api.model_spec(_path("qwen3-30b-a3b") + ",seq_len=8192,micro_batch=2,dtype=fp8")
    want = replace(MODEL_PRESETS["qwen3-30b-a3b"], seq_len=8192, micro_batch=2, dtype="fp8")
    assert spec == want
    # a dimension changed after the path: the parameters are counted again
    deeper = api.model_spec(_path("meta-llama-3-8b") + ",layers=40")
    assert deeper.layers == 40 and deeper.params > MODEL_PRESETS["llama3-8b"].params


def test_what_the_reader_maps():
    keys = hf_model_keys(open(_path("gpt-oss-120b")).read(), "gpt-oss")
    assert (keys["window"], keys["window_layers"], keys["experts"], keys["top_k"]) == \
        (128, 18, 128, 4)
    keys = hf_model_keys(open(_path("qwen2-57b-a14b")).read(), "q")
    assert keys["shared_experts"] == 8  # 20480 / 2560
    # Mistral: a window on every layer; Qwen with use_sliding_window: from max_window_layers
    mistral = {"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
               "intermediate_size": 14336, "sliding_window": 4096}
    assert hf_model_keys(json.dumps(mistral), "m")["window_layers"] == 32
    qwen = {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584,
            "intermediate_size": 18944, "sliding_window": 4096, "use_sliding_window": True,
            "max_window_layers": 21}
    assert hf_model_keys(json.dumps(qwen), "q")["window_layers"] == 7
    # gated or not by the model type; an unknown one by a gate's activation
    nemotron = {"model_type": "nemotron", "num_hidden_layers": 32, "hidden_size": 6144,
                "intermediate_size": 24576, "hidden_act": "relu2"}
    assert hf_model_keys(json.dumps(nemotron), "n")["glu"] == 0
    other = {"model_type": "newthing", "num_hidden_layers": 2, "hidden_size": 64,
             "intermediate_size": 128, "hidden_act": "silu"}
    assert hf_model_keys(json.dumps(other), "o")["glu"] == 1
    assert hf_model_keys(json.dumps({**other, "tie_word_embeddings": True}), "o")["tied"] == 1


@pytest.mark.parametrize("doc,words", [
    ({"model_type": "llama", "hidden_size": 64}, "no num_hidden_layers"),
    ({"model_type": "llama", "num_hidden_layers": "32", "hidden_size": 64},
     "num_hidden_layers must be a whole number"),
    ({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 64}, "no intermediate_size"),
    ({"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64,
      "intermediate_size": 128, "num_local_experts": 8}, "no num_experts_per_tok"),
    ({"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 64,
      "intermediate_size": 128, "num_experts": 8,
      "num_experts_per_tok": 2, "mlp_only_layers": [1, 3]}, "not the leading ones"),
    ({"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 64,
      "intermediate_size": 128, "num_experts": 8,
      "num_experts_per_tok": 2, "mlp_only_layers": ["a", 0]}, "not the leading ones"),
    ({"model_type": "falconish", "num_hidden_layers": 2, "hidden_size": 64,
      "intermediate_size": 256, "hidden_act": "gelu"}, "add glu=1"),
    ([1, 2], "is a JSON object"),
])
def test_what_it_refuses_in_one_line(doc, words):
    text = json.dumps(doc, indent=1)
    with pytest.raises(LayoutError) as err:
        hf_model_keys(text, "cfg.json")
    msg = str(err.value)
    assert words in msg and "\n" not in msg and msg.startswith("cfg.json")


#: a Qwen MoE whose dense layers sit among the MoE ones (line 8: the key)
SCATTERED = """{
  "model_type": "qwen3_moe",
  "num_hidden_layers": 4,
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_experts": 8,
  "num_experts_per_tok": 2,
  "mlp_only_layers": [1, 3]
}
"""


def test_the_line_of_the_refused_key(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(SCATTERED)
    with pytest.raises(LayoutError) as err:
        api.model_spec(str(path))
    assert f"{path}:8: mlp_only_layers=[1, 3]: dense layers that are not the leading" \
        in str(err.value)
    # the user settles an unknown model type's MLP after the path
    path.write_text(json.dumps({"model_type": "falconish", "num_hidden_layers": 2,
                                "hidden_size": 64, "intermediate_size": 256,
                                "hidden_act": "gelu"}))
    assert api.model_spec(f"{path},glu=0").glu == 0


def test_unreadable_and_oversized_files(tmp_path):
    with pytest.raises(InventoryError):
        api.model_spec(str(tmp_path / "missing.json"))
    big = tmp_path / "big.json"
    big.write_text(" " * (api.HF_CONFIG_LIMIT + 1))
    with pytest.raises(InventoryError, match="larger than"):
        api.model_spec(str(big))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(InventoryError):  # refused at once, never waited on
        api.model_spec(str(fifo))


def test_plan_and_advise_take_a_config_json(tmp_path):
    """Through the command line: the plan's priced step is the preset's,
    and the advisor's ready plan lines keep the path."""
    runner = CliRunner()
    common = ["plan", "--inventory", EXAMPLE, "--tp", "8", "--pp", "2", "--dp", "2", "--json"]
    by_path = runner.invoke(cli, common + ["--model", _path("llama-3.1-70b")])
    by_name = runner.invoke(cli, common + ["--model", "meta-llama/Llama-3.1-70B"])
    assert by_path.exit_code == 0, by_path.output
    assert by_name.exit_code == 0, by_name.output
    a, b = json.loads(by_path.output)["step"], json.loads(by_name.output)["step"]
    # the preset's published count and the counted one differ by the norms
    assert a["time_s"] == pytest.approx(b["time_s"], rel=1e-3)
    adv = runner.invoke(cli, ["advise", "--inventory", EXAMPLE, "--gpus", "64", "--model",
                               _path("meta-llama-3-8b"), "--top", "2", "--json"])
    assert adv.exit_code == 0, adv.output
    lines = [c["plan"] for c in json.loads(adv.output)["layouts"]]
    assert lines and all(_path("meta-llama-3-8b") + ",micro_batch=" in line for line in lines)
    ran = runner.invoke(cli, shlex.split(lines[0])[1:] + ["--json"])
    assert ran.exit_code == 0, ran.output
    # as users run it: one line, no traceback, a non-zero exit
    scattered = tmp_path / "config.json"
    scattered.write_text(SCATTERED)
    bad = subprocess.run([sys.executable, "-m", "slurmtopo"] + common
                         + ["--model", str(scattered)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and f"{scattered}:8: mlp_only_layers" in bad.stderr


@pytest.mark.parametrize("written,preset", [
    ("meta-llama/Meta-Llama-3-70B", "llama3-70b"), ("Llama-3.1-8B-Instruct", "llama3-8b"),
    ("llama3.3-70b", "llama3-70b"), ("LLAMA3.1_405B", "llama3.1-405b"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"), ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"),
    ("mistralai/Mixtral-8x22B-v0.1", "mixtral-8x22b"), ("openai/gpt-oss-20b", "gpt-oss-20b"),
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"), ("nvidia/Nemotron-4-340B-Base", "nemotron4-340b"),
    ("meta-llama/Llama-2-13b-hf", "llama2-13b"), ("70B", "70b"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4-scout-17b-16e"),
    ("llama4-maverick", "llama4-maverick-17b-128e"),
])
def test_preset_spellings(written, preset):
    assert preset_key(written) == preset
    assert parse_model(written + ",seq_len=2048") == replace(MODEL_PRESETS[preset], seq_len=2048)


def test_an_unknown_name_is_still_refused_with_the_list():
    for name in ("llama-5-scout", "gpt5", "meta-"):
        assert preset_key(name) is None
    with pytest.raises(LayoutError, match="no such preset .*known: llama2-7b"):
        parse_model("Llama-5-Scout")


def test_a_config_json_wins_over_the_framework_files_model():
    """--config describes a model (Megatron's arguments) and --model names a
    config.json: the checkpoint's dimensions are priced, the file's
    parallel settings kept."""
    args = os.path.join(CONFIGS, os.pardir, "frameworks", "megatron.args")
    spec = api.job_spec("megatron", config=args, model=_path("mixtral-8x7b") + ",seq_len=2048")
    want = replace(api.model_spec(_path("mixtral-8x7b")), seq_len=2048)
    assert spec.request.workload.model == want


def test_interleaved_experts_and_chunked_attention():
    """Maverick's experts on every other layer: half the MoE layers, the
    weights the card states (400B), a pipeline stage's experts and EP
    calls counted from its MoE layers; chunked attention of 8192 costs a
    full causal layer at 8192 tokens and half of one at 16384."""
    mav = MODEL_PRESETS["llama4-maverick-17b-128e"]
    scout = MODEL_PRESETS["llama4-scout-17b-16e"]
    assert (mav.moe_layers, scout.moe_layers) == (24, 48)
    assert mav.counted_params() / 1e9 == pytest.approx(400, rel=0.01)
    assert scout.counted_params() / 1e9 == pytest.approx(109, rel=0.03)
    assert mav.moe_layers_in(12) == 6 and scout.moe_layers_in(12) == 12
    assert mav.moe_layers_in(13) == 7 and mav.moe_layers_in(100) == 24
    # a dense spelling of the same layer count: no experts, no MoE layers
    assert replace(mav, experts=0).moe_layers == 0
    flops8 = _attention_flops(replace(scout, seq_len=8192), 8192)
    full8 = _attention_flops(replace(scout, seq_len=8192, window=0, window_layers=0), 8192)
    assert flops8 == pytest.approx(full8)
    chunked = _attention_flops(scout, 16384)
    full = _attention_flops(replace(scout, window=0, window_layers=0), 16384)
    assert chunked == pytest.approx(full * (12 + 36 / 2) / 48)
    # the step's EP calls: a dispatch and a combine a MoE layer of the stage
    req = api.job_request("megatron", tp=1, pp=2, ep=8, world=16, expert_tp=1,
                          model="llama4-maverick,seq_len=8192,global_batch=16")
    sizes = step_sizes(req.layout, req.workload, req.workload.model)
    ep_calls = registry.get("megatron").ep_step_calls(sizes)
    # 24 layers a stage, 12 of them with experts, forward and backward
    assert sizes.stage_layers == 24
    assert [c.calls for c in ep_calls] == [2 * 12 * sizes.micro_batches] * 2


#: the keys the reader looks at, and values of every JSON kind
_KEYS = st.sampled_from([
    "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings", "model_type",
    "hidden_act", "num_local_experts", "n_routed_experts", "num_experts",
    "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
    "shared_expert_intermediate_size", "first_k_dense_replace", "mlp_only_layers",
    "interleave_moe_layer_step", "decoder_sparse_step", "moe_layer_freq", "kv_lora_rank",
    "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "sliding_window",
    "layer_types", "use_sliding_window", "max_window_layers", "attention_chunk_size",
    "no_rope_layers", "intermediate_size_mlp", "text_config"])
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10 ** 18) | st.floats(allow_nan=False)
    | st.sampled_from(["llama", "qwen3_moe", "llama4_text", "gpt_oss", "silu", "gelu",
                       "sliding_attention", "full_attention", "x"]),
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(_KEYS, kids, max_size=5),
    max_leaves=20)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(doc=st.dictionaries(_KEYS, _VALUES, max_size=14))
def test_any_config_is_a_model_or_one_line_refusal(doc):
    """Whatever a config.json holds, the reader and the model description
    give a model or one LayoutError line naming the file: never another
    exception."""
    from slurmtopo.cost.model_spec import model_from_mapping
    text = json.dumps(doc, indent=1)
    try:
        spec = model_from_mapping(hf_model_keys(text, "cfg.json"), "cfg.json")
    except LayoutError as exc:
        assert str(exc).startswith("cfg.json") and "\n" not in str(exc)
    else:
        assert spec.layers >= 1 and spec.hidden >= 1 and spec.params >= 1
