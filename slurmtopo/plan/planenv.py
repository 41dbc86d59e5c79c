"""The plan in the job's environment (the Slurm hooks, docs/admin.md).

A job planned by the cli_filter hook has no script of slurmtopo's to carry
its plan: the hook adds it to the job's environment instead (sbatch
--export=...,SLURMTOPO_PLAN=VALUE), where the TaskProlog of each task finds
it. VALUE must survive sbatch's --export parser, which splits at commas and
pairs quotes: compact JSON, zlib, then URL-safe base64 without padding
(letters, digits, '-' and '_' only).

The encoding on its own, apart from the plan document's reader and writer
(:mod:`slurmtopo.plan.plandoc`, :mod:`slurmtopo.plan.planwrite`): every task
of a planned job names :data:`PLAN_ENV`, and only the job's first task reads
the document (:func:`slurmtopo.plan.plandoc.plan_from_env_value`), so this
module imports nothing of slurmtopo's but its errors.
"""
from __future__ import annotations

import base64
import binascii
import json
import zlib
from typing import Any, Mapping

from slurmtopo.errors import SlurmtopoError

#: the environment variable the hooks' plan travels in
PLAN_ENV = "SLURMTOPO_PLAN"
#: VALUE's prefix: the encoding's version
ENV_ENCODING = "z1:"
#: the longest VALUE a hook writes or reads (the job's environment, and so
#: every process of the job, carries it; Linux caps one variable at 128 KiB)
MAX_ENV_BYTES = 96 * 1024
#: the most JSON a VALUE may inflate to (a bound on what a damaged or
#: hostile value costs the reader)
MAX_ENV_JSON_BYTES = 16 * 1024 * 1024
#: what a damaged VALUE raises while it is decoded, and while its plan is
#: read (:func:`slurmtopo.plan.plandoc.plan_from_env_value`)
DAMAGED = (ValueError, binascii.Error, zlib.error, UnicodeDecodeError)


def plan_env_value(doc: Mapping[str, Any]) -> str:
    """``doc`` as the value of :data:`PLAN_ENV` (deterministic: zlib at
    level 9). SlurmtopoError when it would exceed :data:`MAX_ENV_BYTES`."""
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    value = ENV_ENCODING + base64.urlsafe_b64encode(
        zlib.compress(text.encode(), 9)).decode("ascii").rstrip("=")
    if len(value) > MAX_ENV_BYTES:
        raise SlurmtopoError(f"the plan is {len(value):,} bytes in the job's environment, more "
                             f"than {MAX_ENV_BYTES:,}")
    return value


def plan_env_text(value: str, where: str = f"${PLAN_ENV}") -> str:
    """The JSON text :func:`plan_env_value` encoded; SlurmtopoError (one
    line) for anything else, after inflating at most
    :data:`MAX_ENV_JSON_BYTES`."""
    if len(value) > MAX_ENV_BYTES:
        raise SlurmtopoError(f"{where}: {len(value):,} bytes, more than {MAX_ENV_BYTES:,}")
    if not value.startswith(ENV_ENCODING):
        raise SlurmtopoError(f"{where}: not a slurmtopo plan (expected {ENV_ENCODING}...)")
    body = value[len(ENV_ENCODING):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        inflate = zlib.decompressobj()
        text = inflate.decompress(raw, MAX_ENV_JSON_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:
            raise ValueError(f"more than {MAX_ENV_JSON_BYTES:,} bytes of JSON, or cut short")
        return text.decode("utf-8")
    except DAMAGED as exc:
        raise SlurmtopoError(f"{where}: damaged plan ({exc})") from None
