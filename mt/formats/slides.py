"""Presentations: .pptx (python-pptx), each paragraph (DrawingML's `a:p`) of every slide and
of its speaker notes a block, and its text elements (`a:t`) its pieces, so that shapes, text
boxes, tables, groups, runs' styles and pictures stay as they were; only those texts change.
A field (a slide number, a date) is part of its sentence but kept as it reads; a line break
is a space kept. Masters and layouts are kept as they are: their placeholders' prompts
("Click to edit Master title style") are not shown in a slide show. The zip is checked before
python-pptx opens it and the paragraphs are counted as they are walked (limits.py), as a
.docx's are (office.py); an .odp is read by office.py's OpenDocument walk."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

from lxml import etree

from .limits import TextLimit, unzipped
from .office import Piece, document_of, refuse_entities
from .pieces import Document

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"  # a:, as lxml writes it
# the copy of a shape for readers that lack a feature (its text would be read twice)
FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


def read_pptx(data: bytes, limit: TextLimit) -> Document:
    """A .pptx file's paragraphs, slide by slide, each slide's then its notes': those of its
    shapes, text boxes, groups and table cells; a slide or notes part holding an entity is
    refused (`refuse_entities`)."""
    import pptx

    copy = unzipped(data, limit.where)
    try:
        presentation = pptx.Presentation(copy)
    except ValueError as e:  # another kind of Office file: named by its object, say "it"
        raise ValueError(str(e).replace(f"file '{copy}'", "it")) from None
    parts = []
    for slide in presentation.slides:
        parts.append(slide)
        if slide.has_notes_slide:  # (notes_slide would make one)
            parts.append(slide.notes_slide)
    for part in parts:
        refuse_entities(part.element, part.part.partname[1:], "PowerPoint")
    paragraphs = (p for part in parts for p in _paragraphs(part.element))
    pieces = (list(_pieces(p)) for p in paragraphs)
    return document_of(pieces, presentation.save, limit)


def _paragraphs(root: Any) -> Iterator[Any]:
    """Every paragraph under `root` in document order, however deep its shape sits (groups,
    tables), but those of a fallback copy."""
    walk = etree.iterwalk(root, events=("start",))
    for _, element in walk:
        if element.tag == FALLBACK:
            walk.skip_subtree()
        elif element.tag == f"{A}p":
            yield element


def _pieces(p: Any) -> Iterator[Piece]:
    """The text elements of paragraph `p` in order, each replaced alone so that its run's
    properties stay; a field's text kept as it reads, a line break a space."""
    walk = etree.iterwalk(p, events=("start",))
    for _, element in walk:
        if element.tag == f"{A}t":
            yield element.text or "", partial(setattr, element, "text")
        elif element.tag == f"{A}fld":
            walk.skip_subtree()
            yield "".join(t.text or "" for t in element.iter(f"{A}t")), None
        elif element.tag == f"{A}br":
            yield " ", None
        elif element.tag == FALLBACK:
            walk.skip_subtree()
