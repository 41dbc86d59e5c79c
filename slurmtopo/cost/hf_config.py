"""A Hugging Face ``config.json`` read as a model description.

ML engineers have the checkpoint's ``config.json`` at hand before anything
else: ``--model path/to/config.json`` (with ``,seq_len=8192,...`` after it
like a preset's changes) describes the model from it, in ``--model``'s
keys (:data:`slurmtopo.cost.model_spec.MODEL_KEYS`). What a step needs
and the file does not say (the sequence length, the batch, the precision,
recomputation) stays the job's: ``max_position_embeddings`` and
``torch_dtype`` are the checkpoint's, not the training run's.

Read (Transformers' names; docs/cost-model.md, "The model"):

=============================================  ==============================
num_hidden_layers, hidden_size                 layers, hidden
num_attention_heads, num_key_value_heads       heads, kv_heads
head_dim (qk_nope_head_dim with MLA)           head_dim
intermediate_size                              ffn
vocab_size, tie_word_embeddings                vocab, tied
num_local_experts, n_routed_experts,           experts
num_experts
num_experts_per_tok (experts_per_token)        top_k
moe_intermediate_size                          expert_ffn (else ffn)
n_shared_experts, or                           shared_experts
shared_expert_intermediate_size / expert_ffn
first_k_dense_replace                          dense_layers
q_lora_rank, kv_lora_rank, qk_rope_head_dim,   the multi-head latent attention
v_head_dim                                     keys of the same names
sliding_window with layer_types (or            window, window_layers
use_sliding_window, max_window_layers)
attention_chunk_size (no_rope_layers)          window C/2 on the chunked layers
interleave_moe_layer_step, decoder_sparse_step moe_every
moe_layer_freq
model_type / hidden_act                        glu (gated MLP or not)
=============================================  ==============================

A multimodal checkpoint's language model (``text_config``) is read in its
place; Llama 4's (``llama4_text``) experts are ``intermediate_size`` wide
with one shared expert, its dense layers ``intermediate_size_mlp``. What the
step model does not describe is refused in one line naming the key: dense
layers among MoE ones other than leading or every n-th
(``mlp_only_layers``), and a ``model_type`` whose MLP is not known to be
gated or not (give ``glu=0`` or ``glu=1`` after the path).

Pure: the caller reads the file (bounded) and hands its text.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional

from slurmtopo.errors import LayoutError
from slurmtopo.files.boundedjson import JsonRefused, loads
from slurmtopo.job.frameworks.configs import MAX_CONFIG_DEPTH, at, line_of, short

__all__ = ["hf_model_keys", "GATED", "NOT_GATED"]

#: Transformers model types whose MLP is gated (SwiGLU, GeGLU: three
#: matrices) ...
GATED = frozenset((
    "llama", "llama4_text", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss", "gemma", "gemma2", "gemma3_text",
    "phi3", "phimoe", "olmo", "olmo2", "olmoe", "granite", "granitemoe", "cohere", "cohere2",
    "glm", "glm4", "glm4_moe", "dbrx", "jamba", "minimax", "ernie4_5", "ernie4_5_moe",
    "hunyuan_v1_dense", "hunyuan_v1_moe", "internlm2", "internlm3", "baichuan", "yi",
    "exaone", "exaone4", "smollm3", "seed_oss", "arcee", "apertus"))
#: ... and whose is not (two matrices)
NOT_GATED = frozenset(("nemotron", "gpt2", "gpt_neox", "gptj", "gpt_bigcode", "falcon",
                       "bloom", "opt", "starcoder2", "mpt", "phi", "stablelm"))
#: activations that only appear as a gate in Transformers' decoder MLPs
_GATE_ACTIVATIONS = frozenset(("silu", "swish", "swiglu"))


def _doc(text: str, where: str) -> dict:
    try:
        doc = loads(text, MAX_CONFIG_DEPTH)
    except JsonRefused as exc:
        raise LayoutError(f"{where}: not a Hugging Face config.json: {exc}") from None
    if not isinstance(doc, dict):
        raise LayoutError(f"{where}: a config.json is a JSON object, got {type(doc).__name__}")
    return doc


def hf_model_keys(text: str, where: str, given: Mapping[str, object] = ()) -> Dict[str, object]:
    """``--model`` keys from the text of a Hugging Face ``config.json`` at
    ``where``. ``given``: the keys the user wrote after the path (a ``glu``
    there settles a model type this module does not know). Raises
    LayoutError naming ``where:line`` and the key."""
    doc = _doc(text, where)
    if "num_hidden_layers" not in doc and isinstance(doc.get("text_config"), dict):
        doc = doc["text_config"]  # a multimodal checkpoint: its language model

    def here(key: str) -> str:
        return at(where, line_of(text, f'"{key}"\\s*:'))

    def number(key: str, default: Optional[int] = None) -> Optional[int]:
        value = doc.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise LayoutError(f"{here(key)}: {key} must be a whole number, got {short(value)}")
        return value

    def refuse(key: str, what: str) -> None:
        raise LayoutError(f"{here(key)}: {key}={short(doc.get(key))}: {what} is not something "
                          "the step model describes; give the model as KEY=VALUE "
                          "(docs/cost-model.md, 'The model')")

    keys: Dict[str, object] = {}
    for src, dst in (("num_hidden_layers", "layers"), ("hidden_size", "hidden")):
        v = number(src)
        if not v:
            raise LayoutError(f"{where}: no {src}: not a decoder's config.json")
        keys[dst] = v
    if not number("intermediate_size"):
        raise LayoutError(f"{where}: no intermediate_size: the MLP's width is not given")
    for src, dst in (("num_attention_heads", "heads"), ("num_key_value_heads", "kv_heads"),
                     ("intermediate_size", "ffn"), ("vocab_size", "vocab")):
        v = number(src)
        if v:
            keys[dst] = v
    if doc.get("tie_word_embeddings") is True:
        keys["tied"] = 1

    # attention: multi-head latent attention (DeepSeek-V2/V3, Kimi K2), else
    # the heads' own width
    if number("kv_lora_rank"):
        keys["kv_lora_rank"] = number("kv_lora_rank")
        keys["q_lora_rank"] = number("q_lora_rank", 0)
        keys["rope_head_dim"] = number("qk_rope_head_dim", 0)
        keys["head_dim"] = number("qk_nope_head_dim", 0)
        keys["v_head_dim"] = number("v_head_dim", 0)
    elif number("head_dim"):
        keys["head_dim"] = number("head_dim")
    llama4 = str(doc.get("model_type", "")).lower() == "llama4_text"

    # experts
    experts = next((number(k) for k in ("num_local_experts", "n_routed_experts", "num_experts")
                    if number(k)), 0)
    if experts > 1:
        keys["experts"] = experts
        top_k = number("num_experts_per_tok") or number("experts_per_token")
        if not top_k:
            raise LayoutError(f"{where}: {experts} experts and no num_experts_per_tok")
        keys["top_k"] = top_k
        expert_ffn = number("moe_intermediate_size")
        if llama4:
            # Llama 4: intermediate_size is an expert's (and the shared
            # expert's, one in every MoE layer), intermediate_size_mlp the
            # dense layers'
            expert_ffn = number("intermediate_size")
            keys["ffn"] = number("intermediate_size_mlp") or expert_ffn
            keys["shared_experts"] = 1
        if expert_ffn:
            keys["expert_ffn"] = expert_ffn
        shared = number("n_shared_experts")
        shared_width = number("shared_expert_intermediate_size")
        if shared:
            keys["shared_experts"] = shared
        elif shared_width:
            width = expert_ffn or number("intermediate_size") or 0
            if not width or shared_width % width:
                refuse("shared_expert_intermediate_size",
                       "a shared expert that is not a whole number of routed experts' width")
            keys["shared_experts"] = shared_width // width
        every = [number(k, 1) for k in ("interleave_moe_layer_step", "decoder_sparse_step",
                                        "moe_layer_freq")]
        if max(every) > 1:
            keys["moe_every"] = max(every)
        dense = number("first_k_dense_replace", 0)
        only = doc.get("mlp_only_layers") or []
        if only:
            if not isinstance(only, list) or not all(
                    isinstance(i, int) and not isinstance(i, bool) for i in only) \
                    or sorted(only) != list(range(len(only))):
                refuse("mlp_only_layers", "dense layers that are not the leading ones")
            dense = max(dense, len(only))
        if dense:
            keys["dense_layers"] = dense

    # chunked attention (Llama 4: on the layers with RoPE, three in four):
    # a query attends to C/2 keys on average, as to a window of C/2
    chunk = number("attention_chunk_size", 0)
    rope = doc.get("no_rope_layers")
    layers_n = int(keys["layers"])
    window = number("sliding_window", 0)
    types = doc.get("layer_types")
    if chunk:
        if isinstance(rope, list) and rope:
            chunked = sum(1 for v in rope if v)
        else:
            interval = number("no_rope_layer_interval", 4) or 4
            chunked = layers_n - layers_n // interval
        keys["window"], keys["window_layers"] = max(1, chunk // 2), min(chunked, layers_n)
    elif window and isinstance(types, list) and types:
        sliding = sum(1 for t in types if t == "sliding_attention")
        if sliding:
            keys["window"], keys["window_layers"] = window, sliding
    elif window and doc.get("use_sliding_window", True) is not False:
        first = number("max_window_layers", 0) if "use_sliding_window" in doc else 0
        if first < layers_n:
            keys["window"], keys["window_layers"] = window, layers_n - min(first, layers_n)

    # the MLP: gated or not
    if "glu" not in {str(k).strip().lower() for k in given}:
        kind = str(doc.get("model_type", "")).lower()
        act = str(doc.get("hidden_act", doc.get("hidden_activation", ""))).lower()
        if kind in GATED:
            keys["glu"] = 1
        elif kind in NOT_GATED:
            keys["glu"] = 0
        elif act in _GATE_ACTIVATIONS:
            keys["glu"] = 1
        else:
            raise LayoutError(f"{here('model_type')}: model_type {short(kind)}: not known "
                              "whether its MLP is gated; add glu=1 (SwiGLU, GeGLU) or glu=0 "
                              "after the path")
    return keys
