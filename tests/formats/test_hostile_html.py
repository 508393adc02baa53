"""HTML whose parse costs far more than its size (issue 54): refused before Lexbor parses it,
in little memory, naming the limit; the estimate of the parser's work (html_cost.py) bounds
what Lexbor builds, tags are found where its tokenizer finds them, and pages as people write
them are read as before. (The server's and mt translate's answers to the same files: in
tests/serve/test_serve_documents.py.)"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("selectolax")

from selectolax.lexbor import LexborHTMLParser

from mt.formats import read_document
from mt.formats.html_cost import Tree
from mt.formats.html_tags import VOID, read

ROOT = Path(__file__).resolve().parents[2]


def nested(count: int = 77_000) -> bytes:
    """`count` nested <div>: 385 KB, 17.9 s and 18 CPU-s to parse unchecked."""
    return ("<div>" * count + "Hello.").encode()


def reopened(elements: int = 300, paragraphs: int = 4_000) -> bytes:
    """19 KB whose parser reopens 300 formatting elements in each of 4,000 paragraphs: 1.2
    million elements, +476 MB unchecked."""
    return ("<p>" + "".join(f"<b id={i}>" for i in range(elements)) + "<p>x" * paragraphs).encode()


# a child reads the file on its stdin: its answer, then how much its peak memory grew, in MB
READ_IN_A_CHILD = """
import resource, sys
from mt.formats import DocumentTooLarge, read_document
data = sys.stdin.buffer.read()
import selectolax.lexbor
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    print(f"read {len(read_document(sys.argv[1], data).blocks)} blocks")
except DocumentTooLarge as e:
    print(e)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("n.html", nested(), "n.html: markup nested too deeply for the parser (its tags would "),
        ("r.html", reopened(), "r.html: markup that makes the parser build more than 22,903 "),
    ],
)
def test_html_whose_parse_costs_far_more_than_its_size_is_refused_in_little_memory(
    name, data, message
):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.run(
        [sys.executable, "-c", READ_IN_A_CHILD, name], input=data, capture_output=True, env=env
    )
    said, grown = child.stdout.decode().splitlines()
    assert said.startswith(message), child.stderr.decode()[-2000:]
    assert int(grown) < 50  # MB above what the child held before reading


@pytest.mark.parametrize(
    ("page", "blocks"),
    [
        ("<div>" * 4_000 + "Deep.", 1),  # deeper than browsers attach (512)
        ("<table>" + "<tr><td>a<td>b" * 5_000, 10_000),  # cells and rows never closed
        ("<ul>" + "<li>item" * 20_000, 20_000),
        ("<p><font face=Arial>text" * 5_000, 5_000),  # reopened in every paragraph
        ("<p><b>bold<p>more" * 3_000, 6_000),  # bold reopened in every paragraph
    ],
)
def test_pages_as_people_write_them_are_read(page, blocks):
    assert len(read_document("a.html", page.encode()).blocks) == blocks


HIDDEN = "<div>" * 3_000  # no elements where the tokenizer reads text


@pytest.mark.parametrize(
    "page",
    [
        f"<!-- {HIDDEN} -->x",
        f"<!-- --!> {HIDDEN}",  # a comment's other end
        f"<!--> {HIDDEN}",  # a comment already ended
        f"<textarea>{HIDDEN}</textarea><title>{HIDDEN}</title><style>{HIDDEN}</style>",
        f"<a title=\"{HIDDEN}\" data-x='>'>x</a>",
        f"<script><!--<script></script>{HIDDEN}--></script>",  # a script's double escape
        f"<script><!--</script>{HIDDEN}",  # its escape ended by its end tag
        f"<svg><style>{HIDDEN}</style></svg>",  # not raw text in SVG
        f"<svg><![CDATA[{HIDDEN}]]></svg>{HIDDEN}",
        f"<p>{HIDDEN}</p><plaintext>{HIDDEN}",
        f"</{HIDDEN}><div",  # a bogus comment ("</" and no letter); a tag the text ends in
    ],
)
def test_tags_are_found_where_lexbor_finds_them(page):
    tree = Tree("t")
    tree.most_walk = tree.most_extra = 10**12
    read(page, tree)
    built = LexborHTMLParser(page).root.traverse()
    assert tree.seq == sum(node.is_element_node for node in built) - 3  # html, head, body


class Measured(Tree):
    """The estimate, with the deepest stack and the elements it accounts for."""

    def __init__(self) -> None:
        super().__init__("t")
        self.most_walk = self.most_extra = 10**12
        self.deepest = self.counted = 1

    def push(self, name: str, space: str = "html"):
        self.counted += 1
        element = super().push(name, space)
        self.deepest = max(self.deepest, len(self.stack))
        return element

    def start(self, name: str, attributes: str, closed: bool) -> str:
        before = self.seq
        raw = super().start(name, attributes, closed)
        self.counted += (self.seq == before or name in VOID) and name not in ("html", "body")
        return raw

    def made(self, count: int) -> None:  # what no push stands for: clones, a </br>'s <br>
        pushes = self.seq
        super().made(count)
        self.counted += count if self.seq == pushes else 0


WORDS = ["div", "p", "span", "b", "i", "a", "font", "nobr", "table", "tr", "td", "th", "tbody"]
WORDS += ["caption", "colgroup", "col", "li", "ul", "dd", "dt", "h1", "select", "option"]
WORDS += ["button", "form", "svg", "math", "mi", "g", "foreignObject", "title", "template"]
WORDS += ["object", "ruby", "rt", "pre", "br", "img", "textarea", "style", "script", "body"]
WORDS += ["head", "section", "annotation-xml", "noscript", "center", "xmp"]
OTHER = ["x", " ", "\n", "<!-- c -->", "<!doctype html>", "<![CDATA[x]]>", "</>", "<!-->"]


def soup(rng: random.Random) -> str:
    """Tags opened, closed and misnested at random, with text, comments and attributes."""
    out = []
    for _ in range(rng.randint(5, 120)):
        word, r = rng.choice(WORDS), rng.random()
        if r < 0.5:
            out.append(f"<{word}{rng.choice(['', ' id=1', ' id=2', ' color=red', ' /'])}>")
        else:
            out.append(f"</{word}>" if r < 0.85 else rng.choice(OTHER))
    return "".join(out)


def lexbor_tree(page: str, fragment: bool) -> tuple[int, int]:
    """The elements Lexbor builds and its tree's depth."""
    parsed = LexborHTMLParser(page, is_fragment=fragment)
    todo, elements, deepest = [], 0, 0
    node = parsed.root
    while node is not None:
        todo.append((node, 1))
        node = node.next if fragment else None
    while todo:
        node, depth = todo.pop()
        elements += node.is_element_node
        deepest = max(deepest, depth)
        child = node.child
        while child is not None:
            todo.append((child, depth + 1))
            child = child.next
    return elements, deepest


def test_the_estimate_bounds_what_lexbor_builds():
    """On 400 random tag soups, pages and fragments: the estimated stack is as deep as
    Lexbor's tree (but for the <html>, <head> and <body> it adds and the <form> that </form>
    takes off the stack, its content staying inside), and the elements it accounts for are
    as many as Lexbor builds."""
    rng = random.Random(54)
    for _ in range(400):
        page = soup(rng)
        for fragment in (False, True):
            tree = Measured()
            tree.head = not fragment
            read(page, tree)
            elements, deepest = lexbor_tree(page, fragment)
            forms = page.count("</form>")
            assert deepest <= tree.deepest + 2 + forms, page
            assert elements <= tree.counted + 3, page
