"""Parallel groups as each training framework builds them.

One module per framework (``megatron``, ``torchtitan``, ``deepspeed``), each
with ``NAME``, ``KNOBS`` (its settings under its own names) and
``layout(**knobs)`` returning a :class:`~slurmtopo.job.frameworks.common.FrameworkLayout`;
``registry`` finds them by name. Pure: no I/O, no framework imported.
"""
