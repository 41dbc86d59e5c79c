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
import math
import re
from functools import lru_cache
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from slurmtopo.errors import InventoryError
from slurmtopo.files.fileio import read_text


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


def _yaml():
    """PyYAML, imported on first use: ~9 ms to import, and a command reading
    only JSON (a warm plan on a compiled inventory, a plan document) never
    loads it (every use in this module goes through here)."""
    import yaml  # lazy: the one import of PyYAML (~9 ms; never on a warm compiled-inventory plan)

    return yaml


@lru_cache(maxsize=None)
def _loader():
    """The YAML loader class, built on first use: PyYAML costs ~10 ms to
    import, and a command reading only JSON (a compiled inventory, a plan)
    need not pay it.

    libyaml's parser when PyYAML was built with it (about 10x faster on the
    12,500 node reports of a big cluster); our constructors still run in
    Python and the nodes still carry line marks."""
    yaml = _yaml()

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


#: how many nodes aliases may add to a document (a reused ``&gpu`` mapping
#: for 12,500 nodes adds about 250,000); a "billion laughs" alias bomb
#: would add billions
MAX_ALIAS_NODES = 1_000_000


def _check_aliases(root, path: str) -> None:
    """Refuse a document whose aliases expand it past MAX_ALIAS_NODES.

    Counted on the composed node graph before anything is constructed: each
    node's expanded size once (memoised by identity), so the check costs one
    pass over the document as written, however large its expansion.
    """
    yaml = _yaml()

    own: Dict[int, int] = {}
    size: Dict[int, int] = {}

    def expanded(node) -> int:
        key = id(node)
        if key in size:
            return size[key]
        if key in own:
            raise InventoryError("invalid YAML: an alias refers to the node that contains it",
                                 path, node.start_mark.line + 1)
        own[key] = 1
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += expanded(child)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += expanded(k) + expanded(v)
        if total > limit:
            raise InventoryError(f"aliases expand this document past {MAX_ALIAS_NODES:,} "
                                 "extra nodes: refused (an alias bomb?)", path,
                                 node.start_mark.line + 1)
        size[key] = total
        return total

    distinct = _count_distinct(root)
    limit = distinct + MAX_ALIAS_NODES
    expanded(root)


def _count_distinct(root) -> int:
    yaml = _yaml()

    seen = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.extend((k, v))
    return len(seen)


#: deepest nesting read (real documents nest under 10 levels; libyaml's
#: composer overflows the C stack somewhere past 20,000)
MAX_DEPTH = 100


def _check_depth(text: str, path: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH, from the parser's events
    (iterative, so a ``[[[[...`` bomb cannot crash it)."""
    yaml = _yaml()

    opening = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
    closing = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    events = _loader()(text)
    try:
        depth = 0
        while events.check_event():
            event = events.get_event()
            if isinstance(event, opening):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InventoryError(f"invalid YAML: nested deeper than {MAX_DEPTH} levels",
                                         path, event.start_mark.line + 1)
            elif isinstance(event, closing):
                depth -= 1
    finally:
        events.dispose()


def parse_text(text: str, path: str = "<string>") -> Any:
    """Parse YAML (or JSON) text; syntax errors become one-line errors.

    Before anything is built, nesting depth and alias expansion are checked,
    so a small hostile document costs a message, not the process.
    """
    yaml = _yaml()

    loader = None
    try:
        _check_depth(text, path)
        loader = _loader()(text)
        root = loader.get_single_node()
        if root is None:
            return None
        if "*" in text:  # aliases are possible only where an asterisk is
            _check_aliases(root, path)
        return loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = exc.problem or exc.context or "invalid YAML"
        raise InventoryError(f"invalid YAML: {what}", path, line) from None
    except yaml.YAMLError as exc:
        raise InventoryError(f"invalid YAML: {exc}", path) from None
    except RecursionError:
        raise InventoryError("invalid YAML: nested too deeply", path) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_document(path) -> Any:
    """Read (at most MAX_TEXT_BYTES) and parse one YAML/JSON file."""
    path = str(path)
    return parse_text(read_text(path), path)


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

    def strings(self, value, what: str, line: Optional[int] = None) -> List[str]:
        """A list of plain values (not lists or mappings) as strings."""
        seq = self.sequence(value, what, line)
        out = []
        for i, item in enumerate(seq):
            if isinstance(item, (dict, list)) or item is None:
                raise self.error(f"{what}: item {i + 1} must be a string, got {_kind(item)}",
                                 self.line(seq, i) or line)
            out.append(str(item))
        return out

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


#: document kind -> (what it is called, the option that reads it)
DOCUMENT_KINDS = {
    "inventory": ("an inventory", "--inventory"),
    "node-report": ("a node report", "--inventory"),
    "fabric": ("a fabric description", "--inventory"),
    "state": ("a state snapshot", "--state"),
    "rankmap": ("a rank map", None),
    "plan": ("a plan document", "slurmtopo bind --plan"),
    "layout-rules": ("a layout-rules file", "slurmtopo simulate --layout-rule"),
}
#: top-level keys only one kind of document has (to name a document that
#: lacks its ``slurmtopo:`` line)
_KIND_KEYS = {"inventory": ("node_types", "fabric", "cost", "name", "report"),
              "state": ("taken_at", "source")}


def document_kind(r: Reader, d: LineDict, accepted: Sequence[str], default: str) -> str:
    """The ``slurmtopo:`` kind of document ``d``, which must be one of
    ``accepted``. A document of another kind (an inventory given as
    ``--state``) is named as what it is, with the option that reads it."""
    kind = r.get(d, "slurmtopo", "document", as_str, None)
    line = Reader.line(d, "slurmtopo")
    if kind is None:
        for other, keys in _KIND_KEYS.items():
            key = next((k for k in keys if k in d), None)
            if other not in accepted and key is not None:
                kind, line = other, Reader.line(d, key)
                break
        else:
            return default
    if kind in accepted:
        return kind
    want = " or ".join(DOCUMENT_KINDS.get(k, (repr(k), None))[0] for k in accepted)
    what, option = DOCUMENT_KINDS.get(kind, (f"a {kind!r} document", None))
    hint = f" (give it to {option})" if option else ""
    if "slurmtopo" in d:
        raise r.error(f"this is {what} (slurmtopo: {kind}), not {want}{hint}", line)
    raise r.error(f"this looks like {what}, not {want}{hint}", line)


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
    """A finite number >= 0 (``.inf`` and ``.nan`` are YAML floats too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"expected a finite number >= 0, got {value!r}")
    return v


def as_rate(value) -> float:
    """A link rate: a finite number > 0 (the cost model divides by it)."""
    v = as_float(value)
    if v <= 0:
        raise ValueError(f"expected a rate > 0, got {value!r}")
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
    yaml = _yaml()

    class _Dumper(yaml.SafeDumper):
        pass

    _Dumper.add_representer(
        BlockList,
        lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=False))
    return _Dumper


def dump_yaml(data: Any) -> str:
    """YAML text for plain dicts/lists, keys in insertion order."""
    yaml = _yaml()

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
