"""YAML/JSON reading that remembers line numbers, and a checked reader.

Every document slurmtopo reads (inventories, node reports, state snapshots,
fabric descriptions, config) goes through :func:`load_document`, so every
complaint about user input can name ``file:line``. JSON documents are read
by the same YAML loader (JSON is YAML), so they get line numbers too.

The loader is PyYAML's safe loader with two changes: mappings and sequences
remember the line of each key/item, and YAML 1.1's base-60 numbers are off
(``00000000:18:00.0``, a PCI bus id, must stay a string).
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Callable, Dict, Iterable, List, Optional

from slurmtopo.errors import InventoryError


class LineDict(dict):
    """A mapping that knows its own line and the line of each key."""

    line: int = 0
    lines: Dict[Any, int]

    def line_of(self, key) -> int:
        return self.lines.get(key, self.line)


class LineList(list):
    """A sequence that knows its own line and the line of each item."""

    line: int = 0
    lines: List[int]

    def line_of(self, index: int) -> int:
        return self.lines[index] if index < len(self.lines) else self.line


@lru_cache(maxsize=None)
def _loader():
    """The YAML loader class, built on first use: PyYAML costs ~10 ms to
    import, and a command reading only JSON (a compiled inventory, a plan)
    need not pay it.

    libyaml's parser when PyYAML was built with it (about 10x faster on the
    12,500 node reports of a big cluster); our constructors still run in
    Python and the nodes still carry line marks."""
    import yaml

    class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        pass

    # YAML 1.1 resolvers without the base-60 (sexagesimal) int/float forms
    _Loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers
             if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    _Loader.add_implicit_resolver(
        "tag:yaml.org,2002:int",
        re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)"
                   r"|[-+]?0x[0-9a-fA-F_]+)$"),
        list("-+0123456789"))
    _Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
                   r"|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
                   r"|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."))

    def construct_mapping(loader, node) -> LineDict:
        loader.flatten_mapping(node)
        out = LineDict()
        out.line = node.start_mark.line + 1
        out.lines = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark)
            if key in out:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            out[key] = loader.construct_object(value_node, deep=True)
            out.lines[key] = key_node.start_mark.line + 1
        return out

    def construct_sequence(loader, node) -> LineList:
        out = LineList(loader.construct_object(child, deep=True) for child in node.value)
        out.line = node.start_mark.line + 1
        out.lines = [child.start_mark.line + 1 for child in node.value]
        return out

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, construct_sequence)
    return _Loader


def parse_text(text: str, path: str = "<string>") -> Any:
    """Parse YAML (or JSON) text; syntax errors become one-line errors."""
    import yaml

    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 - safe loader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = exc.problem or exc.context or "invalid YAML"
        raise InventoryError(f"invalid YAML: {what}", path, line) from None
    except yaml.YAMLError as exc:
        raise InventoryError(f"invalid YAML: {exc}", path) from None


def load_document(path) -> Any:
    """Read and parse one YAML/JSON file."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror}", path) from None
    except UnicodeDecodeError:
        raise InventoryError("not a text file (invalid UTF-8)", path) from None
    return parse_text(text, path)


class Reader:
    """Checked access to a parsed document, raising located errors.

    ``Reader(path).mapping(value, "node", allowed={...})`` checks the type
    and the keys; ``get``/``need`` fetch and convert one field, naming the
    line of the key on failure.
    """

    def __init__(self, path: str):
        self.path = path

    def error(self, message: str, line: Optional[int] = None) -> InventoryError:
        return InventoryError(message, self.path, line)

    @staticmethod
    def line(obj, key=None) -> Optional[int]:
        if key is not None and isinstance(obj, (LineDict, LineList)):
            try:
                return obj.line_of(key)
            except (IndexError, TypeError):
                pass
        return getattr(obj, "line", None) or None

    def mapping(self, value, what: str, allowed: Optional[Iterable[str]] = None,
                line: Optional[int] = None) -> LineDict:
        if not isinstance(value, dict):
            raise self.error(f"{what} must be a mapping, got {_kind(value)}",
                             self.line(value) or line)
        if allowed is not None:
            allowed = set(allowed)
            for key in value:
                if key not in allowed:
                    raise self.error(
                        f"unknown key {key!r} in {what} (allowed: {', '.join(sorted(allowed))})",
                        self.line(value, key))
        return value

    def sequence(self, value, what: str, line: Optional[int] = None) -> LineList:
        if not isinstance(value, list):
            raise self.error(f"{what} must be a list, got {_kind(value)}",
                             self.line(value) or line)
        return value

    def need(self, d: LineDict, key: str, what: str, conv: Callable = str):
        if key not in d or d[key] is None:
            raise self.error(f"{what} needs {key!r}", self.line(d))
        return self.get(d, key, what, conv)

    def get(self, d: LineDict, key: str, what: str, conv: Callable = str, default=None):
        if key not in d or d[key] is None:
            return default
        value = d[key]
        try:
            return conv(value)
        except InventoryError:
            raise
        except (TypeError, ValueError) as exc:
            raise self.error(f"{what}: bad {key!r} ({_short(exc)})", self.line(d, key)) from None


def _kind(value) -> str:
    if value is None:
        return "nothing"
    for kind, name in ((bool, "true/false"), (dict, "a mapping"), (list, "a list"),
                       (str, "a string"), ((int, float), "a number")):
        if isinstance(value, kind):  # LineDict/LineList are a mapping/a list
            return name
    return type(value).__name__


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


def as_int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)


def as_nonneg_int(value) -> int:
    v = as_int(value)
    if v < 0:
        raise ValueError(f"expected an integer >= 0, got {v}")
    return v


def as_pos_int(value) -> int:
    v = as_int(value)
    if v < 1:
        raise ValueError(f"expected an integer >= 1, got {v}")
    return v


def as_float(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {value!r}")
    v = float(value)
    if v != v or v < 0:
        raise ValueError(f"expected a number >= 0, got {value!r}")
    return v


def as_bool(value) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {value!r}")


def as_str(value) -> str:
    if isinstance(value, (dict, list)) or value is None:
        raise ValueError(f"expected a string, got {_kind(value)}")
    return str(value)


class BlockList(list):
    """A list always written in block style (one item a line), e.g. the rows
    of a link matrix, which read like ``nvidia-smi topo -m``."""


@lru_cache(maxsize=None)
def _dumper():
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    _Dumper.add_representer(
        BlockList,
        lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=False))
    return _Dumper


def dump_yaml(data: Any) -> str:
    """YAML text for plain dicts/lists, keys in insertion order."""
    import yaml

    return yaml.dump(_plain(data), Dumper=_dumper(), sort_keys=False, default_flow_style=None,
                     width=100)


def dump_json(data: Any) -> str:
    return json.dumps(_plain(data), indent=2) + "\n"


def _plain(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    if isinstance(data, BlockList):
        return BlockList(_plain(v) for v in data)
    if isinstance(data, (list, tuple)):
        return [_plain(v) for v in data]
    return data
