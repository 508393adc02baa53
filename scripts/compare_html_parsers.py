"""HTML parsers compared for mt.formats (a one-off: not in make bench): do they build the tree
a browser builds on malformed markup (html5lib, the WHATWG algorithm's reference
implementation, is the yardstick), and how fast do they parse and serialise real pages
(alternating runs, medians)? Needs what the project does not: pip install html5lib
beautifulsoup4 justhtml lxml selectolax.

    python scripts/compare_html_parsers.py 'PAGES/**/*.html'
"""

import glob
import statistics
import sys
import time
from pathlib import Path

import bs4
import html5lib
import justhtml
import lxml.html
from selectolax.lexbor import LexborHTMLParser

MALFORMED = [
    "<p>unclosed <b>bold <i>both</p> after",
    "<table><td>cell<p>in a cell</table>text",
    "<b>1<p>2</b>3</p>",
    "<a href=x>one<a href=y>two</a>",
    "<ul><li>a<li>b</ul><p>x<div>y</div>",
    "<table><tr><td>a</td>stray text<td>b</table>",
]


def html5lib_tree(s):
    doc = html5lib.parseFragment(s, treebuilder="etree", namespaceHTMLElements=False)
    return html5lib.serialize(
        doc, tree="etree", omit_optional_tags=False, quote_attr_values="always"
    )


def norm(s):
    return s.replace('"', "'")


ref = [norm(html5lib_tree(m)) for m in MALFORMED]
cands = {
    "selectolax lexbor": lambda m: LexborHTMLParser(m, is_fragment=True).html,
    "lxml.html": lambda m: "".join(
        lxml.html.tostring(e, encoding="unicode") if not isinstance(e, str) else e
        for e in lxml.html.fragments_fromstring(m)
    ),
    "bs4 html.parser": lambda m: str(bs4.BeautifulSoup(m, "html.parser")),
    "bs4 lxml": lambda m: "".join(str(c) for c in bs4.BeautifulSoup(m, "lxml").body.contents),
    "justhtml": lambda m: justhtml.JustHTML(m, fragment=True).to_html(pretty=False),
}
for name, f in cands.items():
    ok = 0
    for m, r in zip(MALFORMED, ref):
        try:
            ok += norm(f(m)) == r
        except Exception as e:
            print(name, "error", type(e).__name__, e)
    print(f"{name}: {ok}/{len(MALFORMED)} as html5lib (the WHATWG reference) builds them")

pages = [Path(f).read_text(encoding="utf-8") for f in glob.glob(sys.argv[1], recursive=True)]
speed = {
    "selectolax lexbor": lambda p: LexborHTMLParser(p).html,
    "html5lib": lambda p: html5lib.serialize(html5lib.parse(p, treebuilder="etree")),
    "lxml.html": lambda p: lxml.html.tostring(lxml.html.document_fromstring(p)),
    "bs4 html5lib": lambda p: str(bs4.BeautifulSoup(p, "html5lib")),
    "justhtml": lambda p: justhtml.JustHTML(p).to_html(pretty=False),
}
times = {k: [] for k in speed}
for _ in range(5):
    for k, f in speed.items():
        t = time.perf_counter()
        for p in pages:
            f(p)
        times[k].append(time.perf_counter() - t)
base = statistics.median(times["selectolax lexbor"])
for k, v in times.items():
    print(
        f"{k}: {statistics.median(v) / base:.1f}x selectolax's time "
        f"({len(pages)} pages, {sum(map(len, pages)) / 1e6:.2f} MB)"
    )
