"""The model description a training step is sized from (:class:`ModelSpec`,
``--model 70b`` or explicit numbers, :func:`parse_model`) and the
frameworks' gradient buckets (:func:`ddp_bucket_bytes`).

The calls of a step and their prices are :mod:`slurmtopo.cost.step`'s;
docs/cost-model.md ("One training step") has the formulas and their
sources.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, Optional

from slurmtopo.errors import LayoutError

__all__ = ["ModelSpec", "MODEL_PRESETS", "DTYPE_BYTES", "parse_model", "ddp_bucket_bytes"]

#: bytes per value of the dtypes a model description may name
DTYPE_BYTES: Dict[str, int] = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2,
                               "float16": 2, "fp8": 1}

#: the gradient bucket of each framework's DDP, in bytes for ``d``-byte
#: values: PyTorch DDP's ``bucket_cap_mb=25`` (torchtitan's replicate),
#: Megatron's ``max(40M, 1M*dp)`` parameters, DeepSpeed's
#: ``reduce_bucket_size`` 5e8 elements
def ddp_bucket_bytes(framework: str, dp: int, d: int) -> int:
    if framework == "megatron":
        return max(40_000_000, 1_000_000 * dp) * d
    if framework == "deepspeed":
        return 500_000_000 * d
    return 25 * 1024 * 1024


@dataclass(frozen=True)
class ModelSpec:
    """What sizes the messages: a dense decoder transformer (MoE: every
    layer's FFN routed to ``top_k`` experts when the job has ep > 1)."""

    params: int
    layers: int
    hidden: int
    seq_len: int = 4096
    micro_batch: int = 1
    dtype: str = "bf16"
    micro_batches: int = 1  # per step (gradient accumulation / pipeline)
    top_k: int = 1

    @property
    def value_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


#: Llama-shaped presets (parameters, layers, hidden size): Llama 2 7B/13B,
#: Llama 3 8B/70B/405B as published in their model cards
MODEL_PRESETS: Dict[str, ModelSpec] = {
    "7b": ModelSpec(params=6_738_415_616, layers=32, hidden=4096),
    "8b": ModelSpec(params=8_030_261_248, layers=32, hidden=4096),
    "13b": ModelSpec(params=13_015_864_320, layers=40, hidden=5120),
    "70b": ModelSpec(params=70_553_706_496, layers=80, hidden=8192),
    "405b": ModelSpec(params=405_853_388_800, layers=126, hidden=16384),
}

_FIELDS = {"params": int, "layers": int, "hidden": int, "seq_len": int, "micro_batch": int,
           "dtype": str, "micro_batches": int, "top_k": int}
_ALIASES = {"seq": "seq_len", "sequence_length": "seq_len", "mbs": "micro_batch",
            "hidden_size": "hidden", "num_layers": "layers", "gas": "micro_batches"}


def _number(text: str) -> int:
    """``70e9``, ``70B``, ``4096``, ``8k`` -> int."""
    t = text.strip().lower().replace("_", "")
    scale = {"k": 10 ** 3, "m": 10 ** 6, "b": 10 ** 9, "t": 10 ** 12}.get(t[-1:], 1)
    if scale != 1:
        t = t[:-1]
    try:
        value = float(t) * scale
    except ValueError:
        raise LayoutError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value != int(value) or value < 1 or value > 10 ** 16:
        raise LayoutError(f"{text!r} is not a whole number between 1 and 1e16")
    return int(value)


def parse_model(text: str) -> ModelSpec:
    """``70b`` (a preset), ``70b,seq=8192`` (a preset, changed) or
    ``params=7e9,layers=32,hidden=4096`` -> :class:`ModelSpec`.
    Raises LayoutError naming the bad part."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise LayoutError("--model is empty; give a preset "
                          f"({', '.join(MODEL_PRESETS)}) or params=...,layers=...,hidden=...")
    base: Optional[ModelSpec] = None
    if "=" not in parts[0]:
        name = parts.pop(0).lower()
        if name not in MODEL_PRESETS:
            raise LayoutError(f"--model {name!r}: no such preset (known: "
                              f"{', '.join(MODEL_PRESETS)})")
        base = MODEL_PRESETS[name]
    given: Dict[str, object] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        key = _ALIASES.get(key.strip().lower(), key.strip().lower())
        if not sep or key not in _FIELDS:
            raise LayoutError(f"--model {part!r}: expected KEY=VALUE with KEY one of "
                              f"{', '.join(_FIELDS)}")
        if key == "dtype":
            if value.strip().lower() not in DTYPE_BYTES:
                raise LayoutError(f"--model dtype={value}: known: {', '.join(DTYPE_BYTES)}")
            given[key] = value.strip().lower()
        else:
            try:
                given[key] = _number(value)
            except LayoutError as exc:
                raise LayoutError(f"--model {key}={value}: {exc}") from None
    if base is None:
        missing = [k for k in ("params", "layers", "hidden") if k not in given]
        if missing:
            raise LayoutError(f"--model needs {', '.join(missing)} (or a preset: "
                              f"{', '.join(MODEL_PRESETS)})")
        return ModelSpec(**given)  # type: ignore[arg-type]
    return replace(base, **given)  # type: ignore[arg-type]
