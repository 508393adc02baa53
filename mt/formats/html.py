"""HTML: the text of a page or a fragment translated, its tags, attributes, comments and the
content of `<script>`, `<style>`, `<pre>` (and the like) left as they are; the attributes a
reader sees as text (`title`, `alt`, `placeholder`, `aria-label`, a button's `value`) are
translated, each a block of its own.

Parsed by selectolax's Lexbor engine, which follows the HTML standard's parsing algorithm as
browsers do (malformed markup is repaired the way a browser shows it, never refused). A run of
text and inline elements (`<b>`, `<a>`, `<span>` ...) between two block boundaries is one
block, translated whole; its text nodes get their share of the translation (pieces.py), so
every element and attribute stays where it was. Inline code (`<code>`, `<kbd>` ...) is part
of its sentence but kept as it is. The document is written back as a browser serialises it
(`innerHTML`): characters named by entities are written as themselves, except `&amp;`, `&lt;`,
`&gt;` and `&nbsp;`.
"""

from __future__ import annotations

import re
from typing import Any

from .html_cost import check_cost
from .limits import TextLimit
from .pieces import Block, Document

# Phrasing elements a sentence runs through; void ones (img, wbr) sit inside it too.
INLINE = {
    *("a", "abbr", "b", "bdi", "bdo", "big", "cite", "data", "del", "dfn", "em", "font", "i"),
    *("img", "ins", "label", "mark", "q", "rp", "rt", "ruby", "s", "small", "span", "strike"),
    *("strong", "sub", "sup", "time", "u", "wbr"),
}
KEPT_INLINE = {"code", "kbd", "samp", "tt", "var"}  # part of a sentence, never translated
UNTOUCHED = {  # their content is code, or not text a reader sees
    *("script", "style", "pre", "textarea", "template", "svg", "math", "noscript", "iframe"),
    *("object", "canvas"),
}
# attributes a reader sees as text (a tooltip, a picture's description, a field's hint, what
# a screen reader says), and the value of an <input> drawn as a button
TEXT_ATTRIBUTES = ("title", "alt", "placeholder", "aria-label")
BUTTONS = {"button", "submit", "reset"}
SPACES = re.compile(r"\s*")
DOCUMENT_TAG = re.compile(r"<(?:!doctype|html|head|body)[\s>/]", re.I)


def read_html(text: str, limit: TextLimit) -> Document:
    """An HTML document or fragment (what it starts with says which) as blocks, each counted
    by `limit`."""
    from selectolax.lexbor import LexborHTMLParser

    whole = _whole(text)
    check_cost(text, limit.where, whole)
    tree = LexborHTMLParser(text, is_fragment=not whole)
    top = [tree.root] if whole else _siblings(tree.root)
    runs, attributes = _runs(top)
    runs = [run for run in runs if run]
    blocks = [limit.count(Block([_text(n, kept) for n, kept in run]), "block") for run in runs]
    for block, run in zip(blocks, runs):
        block.kept |= {i for i, (_, kept) in enumerate(run) if kept}
    blocks += [limit.count(Block([node.attrs[name]]), "block") for node, name in attributes]

    def write(pieces: list[list[str]]) -> bytes:
        for run, texts in zip(runs, pieces):
            for (node, kept), text in zip(run, texts):
                if not kept and text != node.text_content:
                    node.replace_with(text)
        for (node, name), (text,) in zip(attributes, pieces[len(runs) :]):
            node.attrs[name] = text
        return (tree.html or "").encode("utf-8")

    return Document(blocks, write)


def _whole(text: str) -> bool:
    """Whether `text` is a page, not a fragment: after spaces and comments, a doctype or an
    <html>, <head> or <body> tag. A scan rather than one regex: a regex's comments, each
    free to end at any later "-->", backtrack exponentially when no tag follows a run of
    them (<!----> 26 times and an x: 13 s)."""
    at = SPACES.match(text).end()
    while text.startswith("<!--", at):
        end = text.find("-->", at + 4)
        if end < 0:
            return False
        at = SPACES.match(text, end + 3).end()
    return DOCUMENT_TAG.match(text, at) is not None


def _siblings(node: Any) -> list[Any]:
    found = []
    while node is not None:
        found.append(node)
        node = node.next
    return found


def _attributes(node: Any, tag: str) -> list[tuple[Any, str]]:
    """The (node, name) of each attribute of an element that a reader sees as text."""
    names = list(TEXT_ATTRIBUTES)
    if tag == "input" and (node.attributes.get("type") or "").lower() in BUTTONS:
        names.append("value")
    return [(node, name) for name in names if (node.attributes.get(name) or "").strip()]


def _runs(top: list[Any]) -> tuple[list[list[tuple[Any, bool]]], list[tuple[Any, str]]]:
    """The runs of text nodes (and kept inline elements) between block boundaries, in
    document order: (node, kept) each; and the attributes a reader sees (`_attributes`). A
    loop, not recursion: a page may nest deeply."""
    runs: list[list[tuple[Any, bool]]] = [[]]
    attributes: list[tuple[Any, str]] = []
    todo = [(node, False) for node in reversed(top)]
    while todo:
        node, closing = todo.pop()
        if closing:  # a block's end
            runs.append([])
            continue
        if node.is_text_node:
            runs[-1].append((node, False))
            continue
        if not node.is_element_node and not node.is_document_node:
            continue  # a comment or a doctype: it neither holds text nor breaks a sentence
        tag = (node.tag or "").lower()
        if node.is_element_node:
            attributes += _attributes(node, tag)
        if tag in KEPT_INLINE:
            runs[-1].append((node, True))
            continue
        if tag not in INLINE:  # a block: a run ends before it and after it
            runs.append([])
            todo.append((node, True))
        if tag not in UNTOUCHED:  # (iter() of a fragment's node would yield its siblings)
            todo += [(child, False) for child in reversed(_siblings(node.child))]
    return runs, attributes


def _text(node: Any, kept: bool) -> str:
    return node.text(deep=True) if kept else node.text_content or ""
