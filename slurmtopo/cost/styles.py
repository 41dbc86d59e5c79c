"""The model description's old home: :class:`ModelSpec`,
:func:`parse_model`, :data:`MODEL_PRESETS` and :data:`DTYPE_BYTES` live in
:mod:`slurmtopo.cost.model_spec` and are re-exported here so old imports
keep working.

The calls of a step are each framework's
(:meth:`slurmtopo.job.frameworks.base.Framework.step_calls`, its DDP
buckets among them: ``Framework.ddp_bucket_bytes``) and their prices
:mod:`slurmtopo.cost.step`'s; docs/cost-model.md ("One training step") has
the formulas and their sources.
"""
from __future__ import annotations

from slurmtopo.cost.model_spec import (DTYPE_BYTES, MODEL_PRESETS, ModelSpec,  # noqa: F401
                                       model_dict, parse_model)

__all__ = ["ModelSpec", "MODEL_PRESETS", "DTYPE_BYTES", "parse_model"]
