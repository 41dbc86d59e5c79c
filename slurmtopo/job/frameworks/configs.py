"""Each framework's own configuration, read for its parallel settings: what
the readers share (line numbers, bounded numbers, TOML).

``--config FILE`` (with ``--framework``) takes the settings from the file
the job itself runs with, so the layout slurmtopo plans is the one the
framework will build. Each framework's reader is its own (its object's
``config_knobs``, ``config_model`` and ``config_overlaps``, in its module):

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
(``config_model``, the keys ``--model`` takes; docs/cost-model.md,
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
and the overlaps the step model needs (``config_overlaps``:
``--sequence-parallel``, ``--tp-comm-overlap``, ``--overlap-grad-reduce``,
``--overlap-param-gather``, ``--overlap-moe-expert-parallel-comm``).

Pure: the caller reads the file (``fileio.read_text``); every refusal is a
LayoutError naming ``where`` (and the line when there is one).
"""
from __future__ import annotations

import re
from typing import Optional

from slurmtopo.errors import LayoutError

__all__ = ["MAX_DEGREE", "MAX_CONFIG_DEPTH", "line_of", "at", "short", "degree", "toml"]


def line_of(text: str, pattern: str, after: int = 0) -> Optional[int]:
    """The number of the first line of ``text`` after line ``after`` that
    ``pattern`` matches (None: none)."""
    rx = re.compile(pattern)
    for i, line in enumerate(text.splitlines()[after:], start=after + 1):
        if rx.search(line):
            return i
    return None


def at(where: str, line: Optional[int]) -> str:
    """``where:line``, or ``where`` without a line."""
    return f"{where}:{line}" if line else where


#: the largest degree read from a configuration (slurmtopo lays out at most
#: 2^18 ranks: groups.MAX_WORLD)
MAX_DEGREE = 1 << 18
#: nesting of a framework's configuration read at most (DeepSpeed's nest 3)
MAX_CONFIG_DEPTH = 32


def short(value) -> str:
    """``value`` for a message, at most 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def degree(value, what: str, where: str) -> int:
    """``value`` as a parallel degree (a whole number from -1 to
    :data:`MAX_DEGREE`), else LayoutError naming ``what`` at ``where``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LayoutError(f"{where}: {what} must be a whole number, got {short(value)}")
    if not -1 <= value <= MAX_DEGREE:  # (torchtitan: -1, the rest of the world)
        raise LayoutError(f"{where}: {what} must be a whole number from -1 to {MAX_DEGREE:,}, "
                          f"got {short(value)}")
    return value


def toml(text: str, where: str) -> dict:
    """A TOML job file, or LayoutError at ``where`` (bounded: nesting and
    number lengths refused in one line)."""
    # lazy: only a TOML job file needs the parser (4 modules): 1.4 ms measured on `plan`'s path
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LayoutError(f"{where}: not a TOML job file: {exc}") from None
    except RecursionError:
        raise LayoutError(f"{where}: not a TOML job file: nested too deeply") from None
    except ValueError:  # Python's limit on integer digits (4,300)
        raise LayoutError(f"{where}: not a TOML job file: a number too long") from None
