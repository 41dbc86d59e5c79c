"""The command line's number types that refuse what a range cannot.

``click.FloatRange`` compares with ``<``/``>``, and every comparison with
NaN is false: ``--interval nan``, ``--timeout nan`` or ``--comm-fraction
nan`` passed the range check and reached sleeps, socket timeouts and the
cost model. ``inf`` passed any range without an upper bound, turning a
bounded wait into an endless one. :class:`FiniteFloat` is a range that
takes only finite numbers.
"""
from __future__ import annotations

import math

import click


class FiniteFloat(click.FloatRange):
    """``click.FloatRange`` that refuses ``nan`` and ``inf`` in any spelling."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv
