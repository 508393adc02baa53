"""What parsing an HTML text will cost, read from its tags before the parser sees it, so that
markup whose parse costs far more than its size is refused at once, naming the limit.

The HTML standard's tree construction (which Lexbor follows, as browsers do) is linear in
what it reads but for two things, and `check_cost` bounds both:

- **walks of the stack of open elements.** Most tags ask whether an element is "in scope",
  or look for the element an end tag closes, by walking the stack from its top: 77,000
  nested `<div>` (385 KB) cost 77,000²/2 steps, 18 s. The walks are counted as the stack's
  depth at each tag and run of text, at most `WALK_PER_TAG` for a tag and the text after it
  on average, plus `WALK_SLACK`.
- **elements the parser makes that no tag wrote.** A formatting element (`<b>`, `<font>`
  ...) left open when its block closes is reopened before the next text: 300 of them and
  4,000 `<p>x` (19 KB) make 1.2 million elements, 476 MB. Those reopened, cloned by the
  "adoption agency" or implied (a table's `<tbody>`) are counted, at most `EXTRA_PER_TAG`
  for each tag, plus `EXTRA_SLACK`.

The tags are read as the standard's tokenizer reads them (html_tags.py), and the stack and
the list of active formatting elements are kept as the standard keeps them where that
changes their size: scopes, implied end tags, the closing of paragraphs, list items, table
cells and rows, foreign content (SVG, MathML) and its integration points, reconstruction
with its markers and its limit of three identical entries, and the adoption agency (as the
elements it may clone). Each token costs O(1) here (every scope is a comparison of the
positions of the topmost elements of two sets), a few microseconds, and the check stops as
soon as a bound is passed.
"""

from __future__ import annotations

import bisect

from .html_stack import Stack, seq_of
from .html_tags import (
    BLOCK_END,
    BREAKOUT,
    CLOSE_P,
    FONT_BREAKOUT,
    FORMATTING,
    HEAD,
    HEADINGS,
    HTML_ENCODING,
    HTML_POINTS,
    MARKED,
    MATH_TEXT,
    OWN_RULES,
    RAW,
    RECONSTRUCTS,
    RUBY,
    SECTIONS,
    TABLE_PARTS,
    VOID,
    read,
)
from .limits import MarkupTooCostly

WALK_PER_TAG = 512  # stack entries for a tag and the text after it (pages: 20 to 40)
WALK_SLACK = 10_000_000  # 4,000 nested elements, and their text, at any size (40 ms)
EXTRA_PER_TAG = 3  # elements no tag wrote, for each tag (sloppy pages: up to 2)
EXTRA_SLACK = 10_000
TABLE_MODES = {"table", "colgroup", "tr", *SECTIONS}  # where the table's own rules apply


def check_cost(text: str, where: str, page: bool) -> None:
    """MarkupTooCostly (a DocumentTooLarge) naming `where` if parsing the HTML `text` (a
    `page`, or a fragment) would walk its stack of open elements, or build elements, out of
    proportion to its tags."""
    tree = Tree(where)
    tree.head = page
    tags = text.count("<")  # at least as many as the tags
    tree.most_walk = WALK_PER_TAG * (tags + 1) + WALK_SLACK
    tree.most_extra = EXTRA_PER_TAG * tags + EXTRA_SLACK
    read(text, tree)


class Tree(Stack):
    """The parser of `where`'s stack and list, fed tokens, with the cost counted: `walk`,
    the stack's depth summed over the tokens, and `extra`, the elements made beyond those
    written."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where, self.most_walk, self.most_extra = where, 0, 0
        self.walk = 0
        self.quirks, self.head = True, False  # head: a page's head not ended yet
        self.started = False  # a doctype counts only before the first tag or text
        self.points: set[int] = set()  # the annotation-xml that are HTML integration points
        self.columns: set[int] = set()  # the templates that took a <col>: columns only

    def made(self, count: int) -> None:
        super().made(count)
        if self.extra > self.most_extra:
            raise MarkupTooCostly(
                f"{self.where}: markup that makes the parser build more than "
                f"{self.most_extra:,} elements no tag wrote (formatting elements reopened "
                f"or cloned: at most {EXTRA_PER_TAG} for each tag, and {EXTRA_SLACK:,})"
            )

    def adopt(self, name: str) -> None:
        """The adoption agency for the end of the formatting element `name`: what it does
        to the stack and the list, and the elements it clones (4 a round, 8 rounds)."""
        current = self.stack[-1]
        if current.name == name and current.space == "html" and current.entry is None:
            self.pop()
            return
        entry = self.listed(name)
        if entry is None:
            self.other_end(name)
            return
        element = entry.element
        if not element.open:
            self.unlist(entry)
            return
        if element.seq < self.top("scope"):
            return
        specials = self.groups["special"]
        above = 0
        if specials[-1].seq > element.seq:
            above = len(specials) - bisect.bisect(specials, element.seq, key=seq_of)
        if not above:
            self.pop_to(element.seq)
            self.unlist(entry)
            return
        self.made(4 * min(above, 8))
        if above <= 8:  # the clones past the last special element are closed, and it too
            while self.stack[-1].seq > specials[-1].seq:
                self.pop()
            self.remove(element)
            self.unlist(entry)
        # (else a clone of it stays open and listed in its place)

    # the tokens

    def too_deep(self) -> None:
        raise MarkupTooCostly(
            f"{self.where}: markup nested too deeply for the parser (its tags would walk "
            f"more than {self.most_walk:,} open elements: at most {WALK_PER_TAG} a tag, "
            f"and {WALK_SLACK:,})"
        )

    def doctype(self) -> None:
        if not self.started:
            self.quirks = False

    def text(self, text: str, start: int, end: int) -> None:
        self.walk += len(self.stack)
        if self.walk > self.most_walk:
            self.too_deep()
        current = self.stack[-1]
        watched = not self.started or self.head or current.name == "colgroup"
        if watched and not text[start:end].isspace():  # (spaces: the page's, or the table's)
            self.started = True
            if self.head:
                self.end_head()
            elif self.column_group():
                self.pop()
        last = self.active[-1] if self.active else None
        if last is not None and not last.element.open and not self.foreign(None):
            self.reconstruct()

    def column_group(self) -> bool:
        current = self.stack[-1]
        return current.name == "colgroup" and current.space == "html"

    def end_head(self) -> None:
        """The first text or tag of a body: what the head held is closed."""
        self.head = False
        while len(self.stack) > 1:
            self.pop()

    def foreign_content(self) -> bool:
        return self.stack[-1].space != "html"

    def foreign(self, start: str | None) -> bool:
        """Whether a start tag `start` (or text, for None) goes by the rules of foreign
        content: the current node is SVG or MathML and not an integration point."""
        current = self.stack[-1]
        if current.space == "html":
            return False
        if current.space == "svg":
            return current.name not in HTML_POINTS
        if current.name == "annotation-xml":  # an HTML point where its encoding says so
            return current.seq not in self.points
        return current.name not in MATH_TEXT or start in ("mglyph", "malignmark")

    def start(self, name: str, attributes: str, closed: bool) -> str:
        """A start tag; the raw-text kind its content is read as ("" for markup)."""
        self.started = True
        self.walk += len(self.stack)
        if self.walk > self.most_walk:
            self.too_deep()
        if self.head and name not in HEAD:
            self.end_head()
        if self.stack[-1].space != "html" and self.foreign(name):
            font = name == "font" and FONT_BREAKOUT.search(attributes)
            if name not in BREAKOUT and not font:
                if not closed:
                    element = self.push(name, self.stack[-1].space)
                    if name == "annotation-xml" and HTML_ENCODING.search(attributes):
                        self.points.add(element.seq)
                return ""
            while self.foreign(name) and self.stack[-1].seq > 0:
                self.pop()
        return self.html_start(name, attributes, closed)

    def html_start(self, name: str, attributes: str, closed: bool) -> str:
        if self.column_group() and name != "col":
            self.pop()  # a column group holds columns only
        if self.stack[-1].seq in self.columns and name != "template":
            return ""  # (a template's columns: anything else is dropped, raw text too)
        structure = self.groups.get("structure")
        mode = structure[-1].name if structure else ""
        if mode in TABLE_MODES and name == "form":  # a form in a table holds nothing
            if self.form is None:
                self.form = self.push(name)
                self.pop()
            return ""
        if name in TABLE_PARTS or name == "table":
            if mode in TABLE_MODES:
                return self.table_start(name, mode)
            if mode in ("td", "th", "caption") and name != "table":
                self.close(mode)  # the cell or caption ends first
                return self.html_start(name, attributes, closed)
            if mode == "template" and name != "table":
                if name == "col":  # the template takes columns only, from now on
                    self.columns.add(structure[-1].seq)
                else:
                    self.push(name)
                return ""
            if name != "table":
                return ""  # a table's part outside a table
        if name in FORMATTING:
            if name == "a" and (old := self.listed("a")) is not None:
                self.adopt("a")
                if old.element.entry is old:
                    self.unlist(old)
                if old.element.open:
                    self.remove(old.element)
            elif name == "nobr" and self.in_scope("nobr"):
                self.adopt("nobr")
            self.reconstruct()
            self.add_formatting(self.push(name), f"{name} {attributes.strip()}")
            return ""
        if name in OWN_RULES:
            if self.special_start(name):
                return ""
        elif self.active:
            self.reconstruct()
        if name in VOID:
            return ""
        if name == "svg" or name == "math":
            if not closed:
                self.push(name, name)
            return ""
        self.push(name)
        return name if name in RAW or name == "plaintext" else ""

    def special_start(self, name: str) -> bool:
        """What a start tag with rules of its own does before its element is pushed;
        True where no element is pushed."""
        if name in ("html", "body", "head", "frameset", "frame"):
            return True
        if name == "form":
            if self.form is None:
                self.close_p()
                self.form = self.push(name)
            return True
        if name in CLOSE_P or (name == "table" and not self.quirks):
            self.close_p()
        if name in HEADINGS and self.stack[-1].name in HEADINGS:
            self.pop()
        elif name in ("li", "dd", "dt"):
            same = ("li",) if name == "li" else ("dd", "dt")
            found = max(self.top(n) for n in same)
            if found > self.top("li stop" if name == "li" else "dd stop"):
                self.implied_ends(next(n for n in same if self.top(n) == found))
                self.pop_to(found)
            self.close_p()
        elif name == "button" and self.in_scope("button"):
            self.implied_ends()
            self.pop_to_name("button")
        elif name == "select" and self.in_scope("select"):
            self.pop_to_name("select")
            return True
        elif name in ("input", "keygen") and self.in_scope("select"):
            self.pop_to_name("select")
        elif name in ("option", "optgroup"):
            if self.in_scope("select"):
                self.implied_ends("optgroup" if name == "option" else "")
            elif self.stack[-1].name == "option":
                self.pop()
        elif name in RUBY and self.in_scope("ruby"):
            self.implied_ends("rtc" if name in ("rp", "rt") else "")
        if name in RECONSTRUCTS:
            self.reconstruct()
        return False

    def table_start(self, name: str, mode: str) -> str:
        """A table's part (or a table) where the insertion mode is the table's own: the
        rows, sections and column groups it implies, and the cells and rows it closes."""
        if name == "table":  # a table in a table ends it
            if self.top("table") < self.top("table scope"):
                return ""  # (in a template)
            self.pop_to_name("table")
            return self.html_start(name, "", False)
        if name in ("caption", "colgroup") or name in SECTIONS:
            self.clear_to("table")
            self.push(name)
            return ""
        if name == "col":  # void, in a column group
            if mode != "colgroup":
                self.clear_to("table")
                self.push("colgroup")
                self.made(1)
            return ""
        if mode == "table":
            self.clear_to("table")
            self.push("tbody")
            self.made(1)
            mode = "tbody"
        if mode in SECTIONS:
            self.clear_to(*SECTIONS)
            self.push("tr")
            if name == "tr":
                return ""
            self.made(1)
        self.clear_to("tr")
        if name == "tr":  # a row ends the one open
            self.pop()
        self.push(name)
        return ""

    def end(self, name: str) -> None:
        self.started = True
        self.walk += len(self.stack)
        if self.walk > self.most_walk:
            self.too_deep()
        if self.head and name in ("html", "head", "body", "br"):
            self.end_head()
        if self.column_group() and name != "colgroup":
            self.pop()
        if self.stack[-1].space != "html":
            if name == "br" or name == "p":  # they end foreign content
                while self.foreign(name) and self.stack[-1].seq > 0:
                    self.pop()
            found = self.groups.get(f"foreign {name}")  # foreign names are lower case here
            if found and self.stack[-1].html == found[-1].html:  # no HTML element above it
                self.pop_to(found[-1].seq)
                return
        if name in FORMATTING:
            self.adopt(name)
        elif name == "table":
            if self.top("table") >= self.top("table scope") > 0:
                self.close_cell()
                self.pop_to_name("table")
        elif name in TABLE_PARTS:
            if self.top(name) > self.top("table scope"):
                self.close_cell(but=name)
                self.implied_ends()
                self.pop_to_name(name)
                if name in ("td", "th", "caption"):
                    self.clear_to_marker()
        elif name in BLOCK_END:
            if self.in_scope(name, "list scope" if name == "li" else ""):
                self.implied_ends(name)
                self.pop_to_name(name)
                if name in MARKED:
                    self.clear_to_marker()
        elif name in HEADINGS:
            if self.top("heading") > self.top("scope"):
                self.implied_ends()
                self.pop_to(self.top("heading"))
        elif name == "p":
            if not self.in_scope("p", "button scope"):
                self.push("p")
                self.made(1)
            self.implied_ends("p")
            self.pop_to_name("p")
        elif name == "form":
            form, self.form = self.form, None
            if form is not None and form.open and form.seq > self.top("scope"):
                self.implied_ends()
                self.remove(form)
        elif name == "br":
            self.reconstruct()
            self.made(1)
        elif name == "template":
            if self.top("template") > 0:
                self.implied_ends()
                self.close("template")
        elif name not in ("body", "html", "head"):
            self.other_end(name)

    def other_end(self, name: str) -> None:
        """Any other end tag: it closes the topmost `name` unless a special element is
        above it."""
        found = self.top(name)
        if found > 0 and found >= self.top("special"):
            self.implied_ends(name)
            self.pop_to(found)
