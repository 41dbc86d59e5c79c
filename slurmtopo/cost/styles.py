"""The frameworks' gradient buckets (:func:`ddp_bucket_bytes`), and the
model description's old home: :class:`ModelSpec`, :func:`parse_model`,
:data:`MODEL_PRESETS` and :data:`DTYPE_BYTES` live in
:mod:`slurmtopo.cost.model_spec` and are re-exported here so old imports
keep working.

The calls of a step and their prices are :mod:`slurmtopo.cost.step`'s;
docs/cost-model.md ("One training step") has the formulas and their
sources.
"""
from __future__ import annotations

from slurmtopo.cost.model_spec import (DTYPE_BYTES, MODEL_PRESETS, ModelSpec,  # noqa: F401
                                       model_dict, parse_model)
from slurmtopo.job.frameworks import registry

__all__ = ["ModelSpec", "MODEL_PRESETS", "DTYPE_BYTES", "parse_model", "ddp_bucket_bytes"]


#: the gradient bucket of each framework's DDP, in bytes for ``d``-byte
#: values: PyTorch DDP's ``bucket_cap_mb=25`` (torchtitan's replicate),
#: Megatron's ``max(40M, 1M*dp)`` parameters, DeepSpeed's
#: ``reduce_bucket_size`` 5e8 elements (each framework's own,
#: ``Framework.ddp_bucket_bytes``)
def ddp_bucket_bytes(framework: str, dp: int, d: int) -> int:
    return registry.get(framework).ddp_bucket_bytes(dp, d)
