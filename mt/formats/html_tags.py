"""HTML's tags as the standard's tokenizer reads them, for html_cost.py: where each start
tag, end tag and run of text is (comments, doctypes, raw text and a script's escapes
skipped as the tokenizer skips them), and what the tree construction does with each tag
name, in sets.

The tokenizer's states are followed where they decide what is a tag: a comment ends at the
first "-->" or "--!>" ("<!-->" and "<!--->" too), a doctype or a bogus comment at the first
">", an attribute value in quotes at its closing quote (a ">" inside it does not end the
tag), raw text (`<style>`, `<textarea>` ...) at its end tag, and a script's data at its end
tag unless that is inside `<!-- <script> ... -->`. A tag the text ends inside is dropped.
"""

from __future__ import annotations

import re
from typing import Protocol

SPACE = "\t\n\f\r "
# markup: a tag (its name, then attributes, a name and = and a quoted or bare value, and
# slashes, up to > or the end, where the tag is dropped), or the start of a comment, a
# doctype or a bogus comment; each step is decided by one character: no backtracking
MARKUP = re.compile(
    rf"<(?:(/?)([a-zA-Z][^{SPACE}/>]*)((?:[{SPACE}]+|/(?!>)|[^{SPACE}/>][^{SPACE}/>=]*"
    rf"(?:[{SPACE}]*=[{SPACE}]*(?:\"[^\"]*\"?|'[^']*'?|[^{SPACE}>]*))?)*)(/?>)?|[!?/])"
)
COMMENT_END = re.compile(r"--!?>")
SCRIPT_DATA = re.compile(rf"<!--|</script[{SPACE}/>]", re.I)
SCRIPT_ESCAPED = re.compile(rf"-->|</script[{SPACE}/>]|<script[{SPACE}/>]", re.I)
SCRIPT_DOUBLE = re.compile(rf"-->|</script[{SPACE}/>]", re.I)

HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
RUBY = {"rb", "rp", "rt", "rtc"}
VOID = {
    *("area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "image"),
    *("img", "input", "keygen", "link", "meta", "param", "source", "track", "wbr"),
}
RAW = {"style", "xmp", "iframe", "noembed", "noframes", "textarea", "title", "script"}
RAW_END = {name: re.compile(rf"</{name}[{SPACE}/>]", re.I) for name in RAW}
FORMATTING = {
    *("a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong"),
    *("tt", "u"),
}
CLOSE_P = {  # start tags that close an open paragraph first
    *("address", "article", "aside", "blockquote", "center", "details", "dialog", "dir"),
    *("div", "dl", "fieldset", "figcaption", "figure", "footer", "header", "hgroup", "main"),
    *("menu", "nav", "ol", "p", "search", "section", "summary", "ul", "pre", "listing", "hr"),
    *("xmp", "plaintext", *HEADINGS),
}
BLOCK_END = {  # end tags that close their element if it is in scope
    *("address", "article", "aside", "blockquote", "button", "center", "details", "dialog"),
    *("dir", "div", "dl", "fieldset", "figcaption", "figure", "footer", "header", "hgroup"),
    *("listing", "main", "menu", "nav", "ol", "pre", "search", "section", "summary", "ul"),
    *("applet", "marquee", "object", "select", "dd", "dt", "li"),
}
RECONSTRUCTS = {  # special start tags that reopen formatting elements first
    *("applet", "marquee", "object", "area", "br", "embed", "img", "image", "keygen", "wbr"),
    *("input", "xmp", "select", "optgroup", "option", "button", "noscript"),
}
IMPLIED = {"dd", "dt", "li", "optgroup", "option", "p", *RUBY}  # closed by what follows
MARKED = {"applet", "marquee", "object", "td", "th", "caption", "template"}
SECTIONS = {"tbody", "thead", "tfoot"}
TABLE_PARTS = {"caption", "colgroup", "col", "tr", "td", "th", *SECTIONS}
SPECIAL = {
    *("address", "applet", "area", "article", "aside", "base", "basefont", "bgsound"),
    *("blockquote", "body", "br", "button", "caption", "center", "col", "colgroup", "dd"),
    *("details", "dir", "div", "dl", "dt", "embed", "fieldset", "figcaption", "figure"),
    *("footer", "form", "frame", "frameset", "head", "header", "hgroup", "hr", "html"),
    *("iframe", "img", "input", "keygen", "li", "link", "listing", "main", "marquee", "menu"),
    *("meta", "nav", "noembed", "noframes", "noscript", "object", "ol", "p", "param"),
    *("plaintext", "pre", "script", "search", "section", "select", "source", "style"),
    *("summary", "table", "tbody", "td", "template", "textarea", "tfoot", "th", "thead"),
    *("title", "tr", "track", "ul", "wbr", "xmp", *HEADINGS),
}
OWN_RULES = SPECIAL | CLOSE_P | RUBY | {"option", "optgroup"}  # start tags with rules
SCOPE = {  # what bounds a scope (a select too, in Lexbor 3's customizable <select>)
    *("applet", "caption", "html", "table", "td", "th", "marquee", "object", "template"),
    "select",
}
HEAD = {  # what a page's head holds (and <noscript>: scripting is off), or leaves open
    *("base", "basefont", "bgsound", "link", "meta", "noframes", "script", "style"),
    *("template", "title", "noscript", "head", "html"),
}
MATH_TEXT = {"mi", "mo", "mn", "ms", "mtext"}  # MathML text integration points
HTML_POINTS = {"foreignobject", "desc", "title"}  # SVG's HTML integration points
BREAKOUT = {  # HTML start tags that end foreign content
    *("b", "big", "blockquote", "body", "br", "center", "code", "dd", "div", "dl", "dt"),
    *("em", "embed", "head", "hr", "i", "img", "li", "listing", "menu", "meta", "nobr"),
    *("ol", "p", "pre", "ruby", "s", "small", "span", "strong", "strike", "sub", "sup"),
    *("table", "tt", "u", "ul", "var", *HEADINGS),
}
HTML_ENCODING = re.compile(  # an annotation-xml whose content is HTML
    rf"encoding[{SPACE}]*=[{SPACE}]*[\"']?(?:text/html|application/xhtml\+xml)[\"'{SPACE}/>]|"
    rf"encoding[{SPACE}]*=[{SPACE}]*(?:text/html|application/xhtml\+xml)$",
    re.I,
)
FONT_BREAKOUT = re.compile(rf"(?:^|[{SPACE}/])(?:color|face|size)(?:[{SPACE}/=]|$)", re.I)


class Tree(Protocol):
    """What `read` tells of the tokens, in order."""

    def doctype(self) -> None: ...

    def text(self, text: str, start: int, end: int) -> None:
        """The run of text `text[start:end]`."""

    def start(self, name: str, attributes: str, closed: bool) -> str:
        """A start tag; the raw-text kind its content is read as ("" for markup)."""

    def end(self, name: str) -> None: ...

    def foreign_content(self) -> bool:
        """Whether the current node is SVG or MathML (where <![CDATA[ starts a section)."""


def read(text: str, tree: Tree) -> None:
    """Tell `tree` the tokens of `text`: start and end tags (their names in lower case), and
    runs of text."""
    at, end = 0, len(text)
    while at < end:
        found = MARKUP.search(text, at)
        if found is None:
            tree.text(text, at, end)
            return
        if found.start() > at:
            tree.text(text, at, found.start())
        closing, name, attributes, close = found.groups()
        if name is None:  # "<!", "<?", or "</" and no letter ("</>" is dropped)
            at = _past_comment(text, found.start(), tree)
            continue
        at = found.end()
        if close is None:  # the text ended inside the tag: it is dropped
            return
        if closing:
            tree.end(name.lower())
            continue
        raw = tree.start(name.lower(), attributes, close == "/>")
        if raw == "plaintext":  # the rest is text
            tree.text(text, at, end)
            return
        if raw:
            at = _raw_end(text, at, raw)
            if at > found.end():
                tree.text(text, found.end(), at)


def _past_comment(text: str, at: int, tree: Tree) -> int:
    """Past the comment, doctype, CDATA section or bogus comment that starts at `at`."""
    if text.startswith("</>", at):
        return at + 3
    if text.startswith("<!--", at):
        if text.startswith((">", "->"), at + 4):
            return text.index(">", at + 4) + 1
        found = COMMENT_END.search(text, at + 4)
        return len(text) if found is None else found.end()
    if text.startswith("<![CDATA[", at) and tree.foreign_content():
        close = text.find("]]>", at)
        close = len(text) if close < 0 else close + 3
        tree.text(text, at, close)
        return close
    if text[at + 2 : at + 9].lower() == "doctype":
        tree.doctype()
    close = text.find(">", at)
    return len(text) if close < 0 else close + 1


def _raw_end(text: str, at: int, name: str) -> int:
    """Where the raw text of element `name` that starts at `at` ends: at its end tag (a
    script's escapes followed), or the end of the text."""
    if name == "script":
        return _script_end(text, at)
    found = RAW_END[name].search(text, at)
    return len(text) if found is None else found.start()


def _script_end(text: str, at: int) -> int:
    """The end of a script's data: its end tag, not one inside `<!-- <script> ... -->`."""
    state = SCRIPT_DATA
    while True:
        found = state.search(text, at)
        if found is None:
            return len(text)
        token = found.group().lower()
        if state is SCRIPT_DATA:
            if token.startswith("</"):
                return found.start()
            state, at = SCRIPT_ESCAPED, found.end() - 2  # its dashes may end it: <!-->
        elif token == "-->":
            state, at = SCRIPT_DATA, found.end()
        elif state is SCRIPT_ESCAPED:
            if token.startswith("</"):
                return found.start()
            state, at = SCRIPT_DOUBLE, found.end()
        else:  # the end tag inside a double escape only ends the double escape
            state, at = SCRIPT_ESCAPED, found.end()
