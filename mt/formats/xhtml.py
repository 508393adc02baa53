"""XHTML (an EPUB's chapters and table of contents): cut into blocks by the HTML path's rules
(html.py: which elements a sentence runs through, which are code kept in their sentence,
whose content is left as it is, which attributes are text a reader sees), but parsed and
written as XML by lxml, not by selectolax, which writes HTML (`<br>`, no XML declaration),
that an EPUB's readers refuse. The text of an element and the text after it (lxml's text and
tail) are the pieces; comments and processing instructions stay where they are.

The parser resolves no external entity and reads no DTD nor network; libxml2 refuses XML
nested deeper than 256 elements and entities that expand more than its amplification limit
(billion laughs) at once. The named characters of HTML (`&nbsp;`, `&eacute;`: an EPUB 2
chapter declares them in XHTML 1.1's DTD, which is not read) are read as the characters
they name, as a browser reads them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from html.entities import html5
from typing import Any

from lxml import etree

from .html import BUTTONS, INLINE, KEPT_INLINE, TEXT_ATTRIBUTES, UNTOUCHED
from .office import Piece

PARSER = etree.XMLParser(
    resolve_entities="internal", no_network=True, load_dtd=False, strip_cdata=False
)
XML_ENTITIES = {"amp", "lt", "gt", "quot", "apos"}
NAMED = re.compile(rb"&([A-Za-z][A-Za-z0-9]{1,31});")


def parse_xml(data: bytes) -> Any:
    """The root of the XML `data`, HTML's named characters read as themselves."""
    return etree.fromstring(NAMED.sub(_named, data), PARSER)


def _named(match: re.Match) -> bytes:
    name = match[1].decode()
    if name in XML_ENTITIES or f"{name};" not in html5:
        return match[0]
    return html5[f"{name};"].encode("utf-8")


def xml_bytes(root: Any) -> bytes:
    """The document of `root` as UTF-8 XML, its declaration and doctype kept."""
    return etree.tostring(root.getroottree(), encoding="UTF-8", xml_declaration=True)


def xhtml_blocks(root: Any) -> Iterator[list[Piece]]:
    """The blocks of the XHTML document `root` in order, each as its pieces: the runs of text
    between block boundaries, then the attributes a reader sees, one block each. A loop, not
    recursion, over every node (lxml's iterwalk skips comments, whose tails are text)."""
    run: list[Piece] = []
    attributes: list[tuple[Any, str]] = []
    todo = [(root, False)]
    while todo:
        element, closing = todo.pop()
        name = etree.QName(element).localname if isinstance(element.tag, str) else None
        block = name is not None and name not in INLINE and name not in KEPT_INLINE
        if block and run:  # a block's start or end: the run before it ends
            yield run
            run = []
        if closing or name is None:  # a comment, an instruction: its tail only
            if element is not root:
                run.append((element.tail or "", partial(setattr, element, "tail")))
            continue
        attributes += _attributes(element, name)
        todo.append((element, True))
        if name in KEPT_INLINE:  # code in its sentence, kept as it is
            run.append(("".join(element.itertext()), None))
        elif name not in UNTOUCHED:
            run.append((element.text or "", partial(setattr, element, "text")))
            todo += [(child, False) for child in reversed(element)]
    if run:
        yield run
    for element, name in attributes:
        yield [(element.get(name), partial(element.set, name))]


def _attributes(element: Any, name: str) -> list[tuple[Any, str]]:
    """The (element, name) of each of its attributes that a reader sees as text."""
    names = list(TEXT_ATTRIBUTES)
    if name == "input" and (element.get("type") or "").lower() in BUTTONS:
        names.append("value")
    return [(element, n) for n in names if (element.get(n) or "").strip()]
