"""Model documents as the XML parser reads them: their encoding and their depth.

A BPMN or DMN file is bytes whose encoding its byte-order mark or XML declaration
names (``<?xml version="1.0" encoding="ISO-8859-1"?>``); reading those bytes as UTF-8
turns a valid file into a crash. ``model_text`` decodes by what the parser itself reads
from the document, so the text dormant stores (and reads again, as ``str``, which the
parser takes as already decoded) is the document its author saved.

A document nested thousands of elements deep is a hostile one: every reader here walks
the tree, and a recursive walk would end in ``RecursionError``. ``check_depth`` refuses
it right after parsing, iteratively, with one line naming the limit.
"""

from __future__ import annotations

import codecs
import re
from xml.etree.ElementTree import Element
from xml.parsers import expat

from dormant.engine_core.errors import InvalidModel

__all__ = ["MAX_XML_DEPTH", "check_depth", "model_text"]

# Element nesting any BPMN or DMN document needs stays far below this (a sub-process
# adds one level; the deepest extension elements a few); see docs/limits.md.
MAX_XML_DEPTH = 200

_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


class _Declared(Exception):
    pass


def _declared_encoding(data: bytes) -> str | None:
    """The encoding the document's XML declaration names, as the parser reads it
    (whatever the bytes' own encoding); the parse stops at the first element."""
    parser = expat.ParserCreate()
    found: list[str | None] = []

    def declaration(version: str, encoding: str | None, standalone: int) -> None:
        found.append(encoding)
        raise _Declared

    def first_element(name: str, attributes: object) -> None:
        raise _Declared

    parser.XmlDeclHandler = declaration
    parser.StartElementHandler = first_element
    try:
        parser.Parse(data, True)
    except (_Declared, expat.ExpatError, ValueError, LookupError):
        pass  # malformed documents are reported by the reader's own parse
    if found:
        return found[0]
    # An encoding the parser itself refuses to read (a multi-byte one such as UTF-7):
    # the declaration is still ASCII, and Python may decode what expat cannot.
    match = _DECLARATION.match(data)
    return match.group(1).decode("ascii") if match else None


_DECLARATION = re.compile(rb"\s*<\?xml[^>]*?\sencoding\s*=\s*[\"']([A-Za-z0-9._:-]+)[\"']")


def model_text(source: str | bytes) -> str:
    """The document as text: bytes decoded as their byte-order mark, else their XML
    declaration, says (UTF-8 when neither names one); a ``str`` as it is."""
    if isinstance(source, str):
        return source
    codec = next((name for bom, name in _BOMS if source.startswith(bom)), None)
    declared = _declared_encoding(source)
    codec = codec or declared or "utf-8"
    try:
        text = source.decode(codec)
    except LookupError as exc:
        raise InvalidModel(
            f"the document declares encoding {declared!r}, which dormant cannot decode; "
            "save it as UTF-8"
        ) from exc
    except UnicodeDecodeError as exc:
        raise InvalidModel(
            f"the document is not valid {declared or codec.upper()}: byte {exc.start} "
            f"({exc.reason}); save it in the encoding its XML declaration names"
        ) from exc
    return text.removeprefix("\ufeff")


def check_depth(root: Element, limit: int = MAX_XML_DEPTH) -> None:
    """Refuse a document nested more than ``limit`` elements deep (iteratively)."""
    stack = [(root, 1)]
    while stack:
        element, depth = stack.pop()
        if depth > limit:
            tag = element.tag.rpartition("}")[2] if isinstance(element.tag, str) else "?"
            raise InvalidModel(
                f"the document nests elements more than {limit} levels deep "
                f"(at <{tag}>); no BPMN or DMN model needs that"
            )
        stack.extend((child, depth + 1) for child in element)
