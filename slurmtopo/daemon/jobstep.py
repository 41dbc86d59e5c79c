"""The job's training step in a v1 request (the ``work`` field): what the
daemon needs to price the step ``plan`` and the preview price, the job's own
model and framework, instead of the default model.

A held job's request (:mod:`slurmtopo.daemon.protocol`) carries its
:class:`slurmtopo.job.workload.Workload` as a small object::

    "work": {"fw": "megatron", "style": "zero12", "sp": true, "tpo": true,
             "model": {"params": 70553706496, "layers": 80, "hidden": 8192,
                       "seq_len": 8192, "global_batch": 128, ...}}

``fw`` the framework, ``style`` its data-parallel style, ``shard`` HSDP's
shard group, ``sp``/``tpo``/``epo`` sequence parallelism and TP's and EP's
overlap, ``ogr``/``opg`` the gradient reduction's and parameter gather's
overlap (absent: the framework's default), ``nccl`` the NCCL release
``[major, minor, patch]``, ``model`` the model description's keys
(:data:`slurmtopo.cost.model_spec.MODEL_KEYS`) that differ from their
defaults, resolved, so the daemon rebuilds the very description ``plan``
priced. All optional; a request without ``work`` is priced for the default
model, as before.

It is a user's input to a daemon that runs as root: every key is known,
every value's type and range checked (the model's by the same checks
``--model`` has: whole numbers up to 1e16, dimensions bounded), the model
at most :data:`MAX_MODEL_KEYS` keys; anything else is a :class:`ValueError`
with one line saying what (the protocol turns it into its ProtocolError).
Pure; no I/O.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Dict, Optional

from slurmtopo.daemon.wire import show as _show
from slurmtopo.daemon.wire import unknown_fields
from slurmtopo.cost.model_spec import MODEL_KEYS, ModelSpec, model_from_mapping
from slurmtopo.errors import SlurmtopoError
from slurmtopo.job.frameworks import registry
from slurmtopo.job.groups import MAX_WORLD
from slurmtopo.job.workload import STYLES, Workload

__all__ = ["work_to_dict", "work_from_dict", "MAX_MODEL_KEYS"]

#: the most keys a model description may have (ModelSpec has 29 fields)
MAX_MODEL_KEYS = 40
#: the longest text value of a model key (dtype, recompute)
MAX_TEXT = 16
#: wire name -> Workload flag
_FLAGS = {"sp": "sequence_parallel", "tpo": "tp_comm_overlap", "epo": "ep_comm_overlap"}
_OPTIONAL_FLAGS = {"ogr": "overlap_grad_reduce", "opg": "overlap_param_gather"}
_KEYS = ("fw", "style", "shard", "nccl", "model") + tuple(_FLAGS) + tuple(_OPTIONAL_FLAGS)


def work_to_dict(w: Workload) -> Dict[str, Any]:
    """The compact wire form of ``w`` (defaults left out)."""
    out: Dict[str, Any] = {"fw": w.framework, "style": w.style}
    if w.shard:
        out["shard"] = int(w.shard)
    for wire, name in _FLAGS.items():
        if getattr(w, name):
            out[wire] = True
    for wire, name in _OPTIONAL_FLAGS.items():
        if getattr(w, name) is not None:
            out[wire] = bool(getattr(w, name))
    if w.nccl_version is not None:
        out["nccl"] = [int(x) for x in w.nccl_version]
    if w.model is not None:
        out["model"] = _model_to_dict(w.model)
    return out


def _model_to_dict(spec: ModelSpec) -> Dict[str, Any]:
    """The resolved description's keys that differ from ModelSpec's
    defaults (params, layers and hidden always)."""
    s = spec.resolved()
    out: Dict[str, Any] = {}
    for f in fields(s):
        v = getattr(s, f.name)
        if f.name in ("params", "layers", "hidden") or v != f.default:
            out[f.name] = v
    return out


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"work.{what} must be true or false, got {_show(value)}")
    return value


def work_from_dict(value: Any) -> Optional[Workload]:
    """The Workload of a request's ``work`` field (None when absent);
    ValueError, one line, for anything else than :func:`work_to_dict`
    writes."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"work must be an object, got {_show(value)}")
    why = unknown_fields(value, _KEYS, "work")
    if why:
        raise ValueError(why)
    fw = value.get("fw", registry.DEFAULT_FRAMEWORK)
    if not isinstance(fw, str) or fw not in registry.FRAMEWORKS:
        raise ValueError(f"work.fw must be one of {', '.join(registry.names())}, "
                         f"got {_show(fw)}")
    style = value.get("style", "ddp")
    if style not in STYLES:
        raise ValueError(f"work.style must be one of {', '.join(STYLES)}, got {_show(style)}")
    shard = value.get("shard", 0)
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard <= MAX_WORLD:
        raise ValueError(f"work.shard must be a whole number from 0 to {MAX_WORLD:,}, "
                         f"got {_show(shard)}")
    kw: Dict[str, Any] = {"framework": fw, "style": style, "shard": shard}
    for wire, name in _FLAGS.items():
        kw[name] = _bool(value.get(wire, False), wire)
    for wire, name in _OPTIONAL_FLAGS.items():
        if wire in value:
            kw[name] = _bool(value[wire], wire)
    nccl = value.get("nccl")
    if nccl is not None:
        if not isinstance(nccl, list) or len(nccl) != 3 or not all(
                isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 9999 for x in nccl):
            raise ValueError(f"work.nccl must be [major, minor, patch] (whole numbers up to "
                             f"9999), got {_show(nccl)}")
        kw["nccl_version"] = tuple(nccl)
    if "model" in value:
        kw["model"] = _model_from_dict(value["model"])
    try:
        return Workload(**kw)
    except SlurmtopoError as exc:
        raise ValueError(exc.message) from None


def _model_from_dict(value: Any) -> ModelSpec:
    if not isinstance(value, dict) or not 0 < len(value) <= MAX_MODEL_KEYS:
        raise ValueError(f"work.model must be an object of 1 to {MAX_MODEL_KEYS} model keys, "
                         f"got {_show(value)}")
    for key, v in value.items():
        if key not in MODEL_KEYS:
            raise ValueError(f"work.model: unknown key {_show(key)}")
        if isinstance(v, bool) or not isinstance(v, (int, float, str)) \
                or (isinstance(v, str) and len(v) > MAX_TEXT):
            raise ValueError(f"work.model.{key} must be a number or a short name, "
                             f"got {_show(v)}")
    try:
        return model_from_mapping(value, "work.model")
    except SlurmtopoError as exc:
        raise ValueError(exc.message) from None
