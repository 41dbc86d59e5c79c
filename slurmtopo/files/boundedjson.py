"""JSON someone else wrote, parsed in bounded time and memory.

The placement daemon runs as root or SlurmUser and reads JSON that users
wrote (job comments, request files) and files of its own that must be
treated like user input all the same (the journal: see docs/security.md);
`slurmtopo show` reads another user's rank map, `simulate` a Philly trace,
``--config`` a DeepSpeed file.
Python's ``json`` module recurses once per nesting level (5,000 ``[`` end in
``RecursionError``), turns a 5,000-digit integer into a ``ValueError``
(Python's integer string limit), ``1e999`` into ``inf`` and accepts
``NaN``/``Infinity``. :func:`loads` checks the text first, without
recursion or building anything:

* nesting deeper than ``max_depth`` (brackets outside strings) is refused;
* a number token longer than :data:`MAX_NUMBER_CHARS` is refused;

then parses it with hooks that refuse non-finite numbers, ``NaN`` and
``Infinity`` and repeated keys in an object. Every refusal is one
:class:`JsonRefused` (a ``ValueError``) saying what was wrong; callers turn
it into their own one-line error.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, List, Tuple

#: the longest number token accepted (a 64-bit integer has 20 characters;
#: a float written by Python at most 24)
MAX_NUMBER_CHARS = 32

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_LONG_NUMBER = re.compile(r"[-+0-9.eE]{%d,}" % (MAX_NUMBER_CHARS + 1))


class JsonRefused(ValueError):
    """The text is not JSON the caller accepts (one line, no text quoted
    at length)."""


def _refuse_constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a number JSON allows here")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"number {text[:MAX_NUMBER_CHARS]} is out of range")
    return value


def _integer(text: str) -> int:
    return int(text)  # at most MAX_NUMBER_CHARS digits: checked before parsing


def _object(pairs: List[Tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise JsonRefused(f"key {key[:40]!r} appears twice in one object")
        out[key] = value
    return out


def check_shape(text: str, max_depth: int) -> None:
    """Refuse ``text`` when its brackets nest deeper than ``max_depth`` or
    a number in it is longer than :data:`MAX_NUMBER_CHARS` characters (no
    recursion, linear time)."""
    bare = _STRING.sub('""', text)
    depth = 0
    for m in _BRACKET.finditer(bare):
        if m.group() in "[{":
            depth += 1
            if depth > max_depth:
                raise JsonRefused(f"nested deeper than {max_depth} levels")
        else:
            depth -= 1
    if _LONG_NUMBER.search(bare):
        raise JsonRefused(f"a number longer than {MAX_NUMBER_CHARS} characters")


def loads(text: str, max_depth: int) -> Any:
    """The JSON value of ``text``, or :class:`JsonRefused` (see the module
    doc)."""
    check_shape(text, max_depth)
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite,
                          parse_int=_integer, object_pairs_hook=_object)
    except JsonRefused:
        raise
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
                          ) from None
    except (ValueError, RecursionError) as exc:  # cannot happen after check_shape; one line
        raise JsonRefused(f"not valid JSON ({type(exc).__name__})") from None
