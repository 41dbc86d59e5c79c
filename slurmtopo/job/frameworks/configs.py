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

Pure: the caller reads the file (``fileio.read_text``); every refusal is a
LayoutError naming ``where`` (and the line when there is one).
"""
from __future__ import annotations

import re
import shlex
from typing import Dict, Optional

from slurmtopo.errors import LayoutError

__all__ = ["knobs_from_config", "CONFIG_FORMATS"]

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


def _torchtitan(text: str, where: str) -> Dict[str, object]:
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LayoutError(f"{where}: not a TOML job file: {exc}") from None
    except RecursionError:
        raise LayoutError(f"{where}: not a TOML job file: nested too deeply") from None
    except ValueError:  # Python's limit on integer digits (4,300)
        raise LayoutError(f"{where}: not a TOML job file: a number too long") from None
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
