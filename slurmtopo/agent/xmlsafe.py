"""Read an untrusted XML file safely, keeping the line of every element.

Topology files come from providers' images, from support tickets, from
other people's clusters. They are parsed with :mod:`defusedxml` (no entity
expansion, so no "billion laughs"; no external entities or DTDs fetched)
after a size check, and every problem becomes one
:class:`~slurmtopo.errors.InventoryError` naming ``file:line``. The
readers (:mod:`slurmtopo.agent.nccl_xml`, :mod:`slurmtopo.agent.hwloc_xml`)
ask :class:`XmlDoc` for the line of an element when its content is wrong.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Dict, Optional, Sequence

import defusedxml
from defusedxml.ElementTree import DefusedXMLParser

from slurmtopo.errors import InventoryError
from slurmtopo.files.fileio import read_text

#: the largest topology file read (a big hwloc export is a few MB)
MAX_BYTES = 32 * 1024 * 1024


class _LineBuilder(ET.TreeBuilder):
    """A tree builder that notes the line each element starts on."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: Dict[ET.Element, int] = {}
        self.parser: Optional[DefusedXMLParser] = None

    def start(self, tag, attrs):  # noqa: D401 - TreeBuilder's interface
        elem = super().start(tag, attrs)
        if self.parser is not None:
            self.lines[elem] = self.parser.parser.CurrentLineNumber
        return elem


class XmlDoc:
    """A parsed document: its root element, path and element lines."""

    def __init__(self, root: ET.Element, path: str, lines: Dict[ET.Element, int]):
        self.root = root
        self.path = path
        self._lines = lines

    def line(self, elem: ET.Element) -> Optional[int]:
        return self._lines.get(elem)

    def error(self, message: str, elem: Optional[ET.Element] = None,
              line: Optional[int] = None) -> InventoryError:
        """An error at ``elem``'s line (or ``line``), to raise."""
        if elem is not None:
            line = self.line(elem)
        return InventoryError(message, self.path, line)


def parse_xml(text: str, path: str, roots: Sequence[str], what: str) -> XmlDoc:
    """Parse ``text``; the root element must be one of ``roots``."""
    builder = _LineBuilder()
    parser = DefusedXMLParser(target=builder, forbid_dtd=False, forbid_entities=True,
                              forbid_external=True)
    builder.parser = parser
    try:
        parser.feed(text)
        root = parser.close()
    except ET.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        msg = str(exc).split(": line")[0]
        raise InventoryError(f"not well-formed XML ({msg})", path, line) from None
    except defusedxml.DefusedXmlException as exc:
        line = parser.parser.CurrentLineNumber if parser.parser is not None else None
        raise InventoryError(f"refused: the XML declares entities ({type(exc).__name__}); "
                             f"{what} never needs them", path, line) from None
    if root.tag not in roots:
        raise InventoryError(f"root element is <{root.tag}>, not {what} (expected "
                             + " or ".join(f"<{r}>" for r in roots) + ")", path,
                             builder.lines.get(root))
    return XmlDoc(root, path, builder.lines)


def read_xml(path: str, roots: Sequence[str], what: str) -> XmlDoc:
    """Read (bounded: devices refused, at most ``MAX_BYTES``) and parse the
    file at ``path``."""
    text = read_text(path, limit=MAX_BYTES, errors="replace")
    if not text.strip():
        raise InventoryError(f"file is empty (expected {what})", path)
    return parse_xml(text, path, roots, what)
