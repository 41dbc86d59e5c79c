"""Each framework's own configuration, read for its parallel settings.

``--config FILE`` (with ``--framework``) takes the settings from the file
the job itself runs with, so the layout slurmtopo plans is the one the
framework will build:

torchtitan
    the TOML job file (``--job.config_file``): its ``[parallelism]`` table,
    ``data_parallel_replicate_degree``, ``data_parallel_shard_degree``,
    ``context_parallel_degree``, ``tensor_parallel_degree``,
    ``pipeline_parallel_degree``, ``expert_parallel_degree`` and
    ``spmd_backend``. Other keys of ``[parallelism]`` must be
    ``ParallelismConfig`` fields (torchtitan refuses unknown ones too);
    other tables are not read.
deepspeed
    the JSON config (``--deepspeed_config``): ``zero_optimization.stage``,
    ``tensor_parallel.autotp_size`` and ``use_data_before_expert_parallelism``;
    pipeline stages and expert-parallel size live in the model code, so
    they stay options.
megatron
    a file holding Megatron-LM's argument list (as passed to
    ``pretrain_gpt.py``, any lines, shell quoting): the ``--*-parallel-size``
    options, ``--use-distributed-optimizer`` and ``--use-megatron-fsdp``.
    Other options are passed over (Megatron has hundreds), except one that
    starts like a parallel-size option but is not one (a typo).

The same files describe the model and how a step feeds it
(:func:`model_keys_from_config`, the keys ``--model`` takes; docs/cost-model.md,
"The model"): torchtitan's ``[model]`` name and flavor (a preset),
``[training]`` ``seq_len``, ``local_batch_size``, ``global_batch_size``,
``[activation_checkpoint]`` ``mode`` and Float8/MX converters; DeepSpeed's
``train_micro_batch_size_per_gpu``, ``train_batch_size``, ``bf16``/``fp16``
and ``activation_checkpointing``; Megatron-LM's ``--num-layers``,
``--hidden-size``, ``--ffn-hidden-size``, ``--num-attention-heads``,
``--num-query-groups``, ``--kv-channels``, ``--seq-length``,
``--micro-batch-size``, ``--global-batch-size``, ``--num-experts``,
``--moe-router-topk``, ``--moe-ffn-hidden-size``,
``--moe-shared-expert-intermediate-size``, ``--vocab-size``, the precision
flags, ``--recompute-granularity``, the virtual pipeline options,
``--swiglu``, ``--untie-embeddings-and-output-weights`` and the MLA ranks;
and the overlaps the step model needs (:func:`overlaps_from_config`:
``--sequence-parallel``, ``--tp-comm-overlap``, ``--overlap-grad-reduce``,
``--overlap-param-gather``, ``--overlap-moe-expert-parallel-comm``).

Pure: the caller reads the file (``fileio.read_text``); every refusal is a
LayoutError naming ``where`` (and the line when there is one).
"""
from __future__ import annotations

import re
import shlex
from typing import Dict, Optional

from slurmtopo.errors import LayoutError

__all__ = ["knobs_from_config", "model_keys_from_config", "overlaps_from_config",
           "CONFIG_FORMATS"]

#: what --config reads, per framework (for help texts)
CONFIG_FORMATS = {"torchtitan": "TOML job file ([parallelism])",
                  "deepspeed": "DeepSpeed JSON config",
                  "megatron": "file with Megatron-LM's argument list"}

#: torchtitan [parallelism] key -> setting
_TITAN = {"data_parallel_replicate_degree": "dp_replicate",
          "data_parallel_shard_degree": "dp_shard", "context_parallel_degree": "cp",
          "tensor_parallel_degree": "tp", "pipeline_parallel_degree": "pp",
          "expert_parallel_degree": "ep", "spmd_backend": "spmd_backend"}
#: the other ParallelismConfig fields of torchtitan 0.3.0 and of the last
#: release with TOML job files (commit 9810191b^): accepted, not used
_TITAN_OTHER = frozenset((
    "fsdp_reshard_after_forward", "enable_fsdp_symm_mem", "enable_sequence_parallel",
    "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
    "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage",
    "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
    "pipeline_parallel_microbatch_size", "context_parallel_load_balancer",
    "context_parallel_ptrr_mask_key", "disable_loss_parallel", "enable_async_tensor_parallel",
    "pipeline_parallel_expert_parallel_overlap", "context_parallel_rotate_method",
    "expert_tensor_parallel_degree", "expert_parallel_comm_backend"))

#: Megatron-LM option -> (setting, takes a value)
_MEGATRON = {"--tensor-model-parallel-size": ("tp", True),
             "--pipeline-model-parallel-size": ("pp", True),
             "--context-parallel-size": ("cp", True),
             "--expert-model-parallel-size": ("ep", True),
             "--expert-tensor-parallel-size": ("expert_tp", True),
             "--use-distributed-optimizer": ("use_distributed_optimizer", False),
             "--use-megatron-fsdp": ("use_megatron_fsdp", False)}
_OPTION = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _line_of(text: str, pattern: str, after: int = 0) -> Optional[int]:
    rx = re.compile(pattern)
    for i, line in enumerate(text.splitlines()[after:], start=after + 1):
        if rx.search(line):
            return i
    return None


def _at(where: str, line: Optional[int]) -> str:
    return f"{where}:{line}" if line else where


#: the largest degree read from a configuration (slurmtopo lays out at most
#: 2^18 ranks: groups.MAX_WORLD)
MAX_DEGREE = 1 << 18
#: nesting of a framework's configuration read at most (DeepSpeed's nest 3)
MAX_CONFIG_DEPTH = 32


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int(value, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LayoutError(f"{where}: {what} must be a whole number, got {_short(value)}")
    if not -1 <= value <= MAX_DEGREE:  # (torchtitan: -1, the rest of the world)
        raise LayoutError(f"{where}: {what} must be a whole number from -1 to {MAX_DEGREE:,}, "
                          f"got {_short(value)}")
    return value


def _toml(text: str, where: str) -> dict:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LayoutError(f"{where}: not a TOML job file: {exc}") from None
    except RecursionError:
        raise LayoutError(f"{where}: not a TOML job file: nested too deeply") from None
    except ValueError:  # Python's limit on integer digits (4,300)
        raise LayoutError(f"{where}: not a TOML job file: a number too long") from None


def _torchtitan(text: str, where: str) -> Dict[str, object]:
    doc = _toml(text, where)
    table = doc.get("parallelism")
    head = _line_of(text, r"^\s*\[\s*parallelism\s*\]")
    if not isinstance(table, dict):
        raise LayoutError(f"{_at(where, head)}: a torchtitan job file needs a [parallelism] "
                          "table (data_parallel_shard_degree = ..., tensor_parallel_degree = ...)")
    out: Dict[str, object] = {}
    for key, value in table.items():
        line = _line_of(text, rf"^\s*{re.escape(key)}\s*=", head or 0)
        here = _at(where, line)
        if key in _TITAN:
            if key == "spmd_backend":
                if not isinstance(value, str):
                    raise LayoutError(f"{here}: spmd_backend must be a string, got {_short(value)}")
                out["spmd_backend"] = value
            else:
                out[_TITAN[key]] = _int(value, key, here)
        elif key == "expert_tensor_parallel_degree":
            if _int(value, key, here) != 1:
                raise LayoutError(f"{here}: expert_tensor_parallel_degree = {value}: torchtitan "
                                  "0.3.0 (which slurmtopo follows) has no expert tensor "
                                  "parallelism; use 1")
        elif key not in _TITAN_OTHER:
            raise LayoutError(f"{here}: [parallelism] has no {_short(key)} in torchtitan "
                              f"(its degrees: {', '.join(_TITAN)})")
    return out


def _deepspeed(text: str, where: str) -> Dict[str, object]:
    from slurmtopo.files.boundedjson import JsonRefused, loads

    try:
        doc = loads(text, MAX_CONFIG_DEPTH)
    except JsonRefused as exc:
        raise LayoutError(f"{where}: not a DeepSpeed JSON config: {exc}") from None
    if not isinstance(doc, dict):
        raise LayoutError(f"{where}: a DeepSpeed config is a JSON object, got "
                          f"{type(doc).__name__}")
    out: Dict[str, object] = {}

    def section(name: str) -> dict:
        value = doc.get(name, {})
        if not isinstance(value, dict):
            line = _line_of(text, rf'"{re.escape(name)}"')
            raise LayoutError(f"{_at(where, line)}: {name} must be an object, got "
                              f"{_short(value)}")
        return value

    zero = section("zero_optimization")
    if "stage" in zero:
        line = _line_of(text, r'"stage"')
        out["zero_stage"] = _int(zero["stage"], "zero_optimization.stage", _at(where, line))
    tensor = section("tensor_parallel")
    if "autotp_size" in tensor:
        line = _line_of(text, r'"autotp_size"')
        out["tp"] = _int(tensor["autotp_size"], "tensor_parallel.autotp_size",
                         _at(where, line))
    if "use_data_before_expert_parallelism" in doc:
        value = doc["use_data_before_expert_parallelism"]
        if not isinstance(value, bool):
            line = _line_of(text, r'"use_data_before_expert_parallelism"')
            raise LayoutError(f"{_at(where, line)}: use_data_before_expert_parallelism must be "
                              f"true or false, got {_short(value)}")
        out["use_data_before_expert_parallelism"] = value
    if not out and not any(k in doc for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                              "zero_optimization", "tensor_parallel")):
        raise LayoutError(f"{where}: not a DeepSpeed config: it sets none of "
                          "train_batch_size, train_micro_batch_size_per_gpu, "
                          "zero_optimization, tensor_parallel")
    return out


def _megatron(text: str, where: str) -> Dict[str, object]:
    try:
        words = shlex.split(text.replace("\\\n", "  "), comments=True)
    except ValueError as exc:
        raise LayoutError(f"{where}: cannot split the arguments: {exc}") from None

    def at(word: str) -> str:
        return _at(where, _line_of(text, re.escape(word)))

    out: Dict[str, object] = {}
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if not name.startswith("--"):
            i += 1  # the command, or a value of an option not read here
            continue
        if not _OPTION.match(name):
            raise LayoutError(f"{at(name[:20])}: {_short(name)} is not an option name")
        known = _MEGATRON.get(name)
        if known is None:
            near = next((k for k in _MEGATRON if name.startswith(k)
                         or (k.startswith(name) and len(name) > 12)), None)
            if near is not None:
                raise LayoutError(f"{at(name)}: {name} is not a Megatron-LM option (did you "
                                  f"mean {near}?)")
            i += 1
            continue
        setting, takes_value = known
        if not takes_value:
            if eq:
                raise LayoutError(f"{at(name)}: {name} takes no value")
            out[setting] = True
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        else:
            if i + 1 >= len(words):
                raise LayoutError(f"{at(name)}: {name} needs a value")
            value = words[i + 1]
            i += 2
        if not re.fullmatch(r"[0-9]{1,9}", value):
            raise LayoutError(f"{at(name)}: {name} {_short(value)}: expected a whole number")
        out[setting] = int(value)
    if not out:
        raise LayoutError(f"{where}: names none of Megatron-LM's parallel settings "
                          f"({', '.join(_MEGATRON)})")
    return out


_READERS = {"torchtitan": _torchtitan, "deepspeed": _deepspeed, "megatron": _megatron}


def knobs_from_config(framework: str, text: str, where: str) -> Dict[str, object]:
    """The framework settings ``text`` (the contents of ``where``) sets."""
    try:
        reader = _READERS[framework]
    except KeyError:
        raise LayoutError(f"--config: no configuration format for {framework!r}") from None
    return reader(text, where)


# ---------------------------------------------------------------------------
# the model and the step's feeding, as the same files give them

#: torchtitan [model] name -> flavor -> the --model preset
_TITAN_MODELS = {"llama3": {"8b": "llama3-8b", "70b": "llama3-70b", "405b": "llama3.1-405b"},
                 "deepseek_v3": {"671b": "deepseek-v3"},
                 "qwen3": {"30b-a3b": "qwen3-30b-a3b", "235b-a22b": "qwen3-235b-a22b"}}
#: torchtitan mixed_precision_param -> dtype
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}

#: Megatron-LM option -> model key (the value a whole number)
_MEGATRON_MODEL = {"--num-layers": "layers", "--hidden-size": "hidden",
                   "--ffn-hidden-size": "ffn", "--num-attention-heads": "heads",
                   "--num-query-groups": "kv_heads", "--kv-channels": "head_dim",
                   "--seq-length": "seq_len", "--micro-batch-size": "micro_batch",
                   "--global-batch-size": "global_batch", "--num-experts": "experts",
                   "--moe-router-topk": "top_k", "--moe-ffn-hidden-size": "expert_ffn",
                   "--vocab-size": "vocab", "--q-lora-rank": "q_lora_rank",
                   "--kv-lora-rank": "kv_lora_rank", "--qk-head-dim": "head_dim",
                   "--qk-pos-emb-head-dim": "rope_head_dim", "--v-head-dim": "v_head_dim",
                   "--num-virtual-stages-per-pipeline-rank": "virtual_stages",
                   "--num-layers-per-virtual-pipeline-stage": "_layers_per_virtual_stage",
                   "--moe-shared-expert-intermediate-size": "_shared_expert_size",
                   "--recompute-granularity": "recompute", "--fp8-format": "_fp8",
                   "--fp8-recipe": "_fp8_recipe", "--fp4-format": "_fp4"}
#: Megatron-LM flags -> (key, value)
_MEGATRON_FLAGS = {"--bf16": ("dtype", "bf16"), "--fp16": ("dtype", "fp16"),
                   "--swiglu": ("glu", 1), "--untie-embeddings-and-output-weights": ("tied", 0)}
#: Megatron-LM flags -> the step's overlaps
_MEGATRON_OVERLAPS = {"--sequence-parallel": "sequence_parallel",
                      "--tp-comm-overlap": "tp_comm_overlap",
                      "--overlap-grad-reduce": "overlap_grad_reduce",
                      "--overlap-param-gather": "overlap_param_gather",
                      "--overlap-moe-expert-parallel-comm": "ep_comm_overlap"}


def _megatron_words(text: str, where: str):
    try:
        return shlex.split(text.replace("\\\n", "  "), comments=True)
    except ValueError as exc:
        raise LayoutError(f"{where}: cannot split the arguments: {exc}") from None


def _megatron_model(text: str, where: str) -> Dict[str, object]:
    words = _megatron_words(text, where)
    raw: Dict[str, object] = {}
    flags = set()
    i = 0
    while i < len(words):
        name, eq, inline = words[i].partition("=")
        if name in _MEGATRON_FLAGS:
            flags.add(name)
        key = _MEGATRON_MODEL.get(name)
        if key is None:
            i += 1
            continue
        here = _at(where, _line_of(text, re.escape(name)))
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            value, i = words[i + 1], i + 2
        else:
            raise LayoutError(f"{here}: {name} needs a value")
        if key in ("recompute", "_fp8", "_fp8_recipe", "_fp4"):
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", value):
                raise LayoutError(f"{here}: {name} {value[:40]!r}: not a Megatron-LM value")
            raw[key] = value.lower()
        else:
            if not re.fullmatch(r"[0-9]{1,12}", value):
                raise LayoutError(f"{here}: {name} {value[:40]!r}: expected a whole number")
            raw[key] = int(value)
    out: Dict[str, object] = {k: v for k, v in raw.items() if not k.startswith("_")}
    for flag in flags:
        key, value = _MEGATRON_FLAGS[flag]
        out.setdefault(key, value)
    if "--fp16" in flags and "--bf16" in flags:
        raise LayoutError(f"{where}: both --bf16 and --fp16")
    if any(k in out for k in ("layers", "hidden")):
        # Megatron-LM's own defaults: a GELU MLP, tied embeddings
        out.setdefault("glu", 0)
        out.setdefault("tied", 1)
    if "_fp4" in raw:
        out["dtype"] = "nvfp4"
    elif "_fp8" in raw or "_fp8_recipe" in raw:
        out["dtype"] = "mxfp8" if raw.get("_fp8_recipe") == "mxfp8" else "fp8"
    if "_shared_expert_size" in raw:
        size = int(raw["_shared_expert_size"])  # type: ignore[arg-type]
        per = int(out.get("expert_ffn") or out.get("ffn") or 0)
        out["shared_experts"] = max(1, round(size / per)) if per else 1
    if "_layers_per_virtual_stage" in raw and "layers" in out:
        knobs = _megatron(text, where) if any(w.startswith("--pipeline-model-parallel-size")
                                              for w in words) else {}
        pp = int(knobs.get("pp", 1))  # type: ignore[arg-type]
        per = max(1, int(raw["_layers_per_virtual_stage"]))  # type: ignore[arg-type]
        out["virtual_stages"] = max(1, int(out["layers"]) // (pp * per))  # type: ignore
    return out


def _torchtitan_model(text: str, where: str) -> Dict[str, object]:
    doc = _toml(text, where)
    out: Dict[str, object] = {}
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    name = str(model.get("name", "")).lower()
    flavor = str(model.get("flavor", "")).lower()
    preset = _TITAN_MODELS.get(name, {}).get(flavor)
    if preset:
        out["preset"] = preset
    converters = model.get("converters", [])
    training = doc.get("training") if isinstance(doc.get("training"), dict) else {}
    for key, target in (("seq_len", "seq_len"), ("local_batch_size", "micro_batch"),
                        ("batch_size", "micro_batch"), ("global_batch_size", "global_batch")):
        if key in training:
            value = training[key]
            here = _at(where, _line_of(text, rf"^\s*{key}\s*="))
            if isinstance(value, bool) or not isinstance(value, int):
                raise LayoutError(f"{here}: {key} must be a whole number, got {value!r}")
            if value > 0:
                out[target] = value
    par = doc.get("parallelism") if isinstance(doc.get("parallelism"), dict) else {}
    mbs = par.get("pipeline_parallel_microbatch_size")
    if isinstance(mbs, int) and not isinstance(mbs, bool) and mbs > 0 \
            and int(par.get("pipeline_parallel_degree", 1) or 1) > 1:
        if "micro_batch" in out:  # the local batch is split into pipeline micro-batches
            out.setdefault("micro_batches", max(1, int(out["micro_batch"]) // mbs))
        out["micro_batch"] = mbs
    prec = training.get("mixed_precision_param")
    if isinstance(prec, str) and prec in _TORCH_DTYPES:
        out["dtype"] = _TORCH_DTYPES[prec]
    conv = [str(c).lower() for c in converters] if isinstance(converters, list) else []
    if any("float8" in c for c in conv) or isinstance(doc.get("float8"), dict):
        out["dtype"] = "fp8"
    if any(c.startswith("mx") or ".mx" in c for c in conv):
        out["dtype"] = "mxfp8"
    ac = doc.get("activation_checkpoint")
    if isinstance(ac, dict) and isinstance(ac.get("mode"), str):
        mode = ac["mode"].lower()
        if mode not in ("none", "selective", "full"):
            here = _at(where, _line_of(text, r"^\s*mode\s*="))
            raise LayoutError(f"{here}: [activation_checkpoint] mode = {ac['mode']!r}: "
                              "none, selective or full")
        out["recompute"] = mode
    return out


def _json(text: str, where: str):
    """A DeepSpeed JSON config, read within bounds (nesting, numbers)."""
    from slurmtopo.files.boundedjson import JsonRefused, loads

    try:
        return loads(text, MAX_CONFIG_DEPTH)
    except JsonRefused as exc:
        raise LayoutError(f"{where}: not a DeepSpeed JSON config: {exc}") from None


def _deepspeed_model(text: str, where: str) -> Dict[str, object]:
    doc = _json(text, where)
    if not isinstance(doc, dict):
        raise LayoutError(f"{where}: a DeepSpeed config is a JSON object")
    out: Dict[str, object] = {}
    for key, target in (("train_micro_batch_size_per_gpu", "micro_batch"),
                        ("train_batch_size", "global_batch")):
        if key in doc and doc[key] != "auto":
            out[target] = _int(doc[key], key, _at(where, _line_of(text, rf'"{key}"')))
    for key, dtype in (("bf16", "bf16"), ("fp16", "fp16")):
        sec = doc.get(key)
        if isinstance(sec, dict) and sec.get("enabled") is True:
            out["dtype"] = dtype
    ac = doc.get("activation_checkpointing")
    if isinstance(ac, dict) and ac:
        out["recompute"] = "full"
    return out


def model_keys_from_config(framework: str, text: str, where: str) -> Dict[str, object]:
    """The ``--model`` keys ``text`` (the contents of ``where``) gives,
    with ``preset`` naming a model preset when the file names a known
    model (torchtitan's [model] name and flavor). Empty when it describes
    none."""
    readers = {"torchtitan": _torchtitan_model, "deepspeed": _deepspeed_model,
               "megatron": _megatron_model}
    if framework not in readers:
        raise LayoutError(f"--config: no configuration format for {framework!r}")
    return readers[framework](text, where)


def overlaps_from_config(framework: str, text: str, where: str) -> Dict[str, bool]:
    """The overlaps the file turns on (Megatron-LM's flags; DeepSpeed's
    ``overlap_comm``; torchtitan's async TP)."""
    out: Dict[str, bool] = {}
    if framework == "megatron":
        for word in _megatron_words(text, where):
            name = word.partition("=")[0]
            if name in _MEGATRON_OVERLAPS:
                out[_MEGATRON_OVERLAPS[name]] = True
    elif framework == "deepspeed":
        try:
            doc = _json(text, where)
        except LayoutError:
            return out
        zero = doc.get("zero_optimization") if isinstance(doc, dict) else None
        if isinstance(zero, dict) and zero.get("overlap_comm") is True:
            out["overlap_grad_reduce"] = True
    elif framework == "torchtitan":
        try:
            doc = _toml(text, where)
        except LayoutError:
            return out
        par = doc.get("parallelism") if isinstance(doc.get("parallelism"), dict) else {}
        if par.get("enable_async_tensor_parallel") is True:
            out["tp_comm_overlap"] = True
        out["sequence_parallel"] = True
    return out
