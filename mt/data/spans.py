"""Spans a translation must carry over verbatim: URLs, e-mail addresses, template placeholders
({{name}}, {0}, ${x}, %s, %1$d), inline code (`x`), dates, times and numbers; and the
numbered placeholder tokens ⦅1⦆, ⦅2⦆, ... that stand for them.

A model whose vocabulary reserves placeholders (tokenizer.placeholders) learns to copy them:
training replaces spans found verbatim on both sides of a pair by placeholders
(mt.data.examples); decoding replaces the spans of a source by placeholders in their order
and puts each back where the translation has it (mt.decoding.placeholders).

Every pattern is linear in its text: no quantifier inside another, each run of characters
tried from its start only (a lookbehind), and the long ones bounded.
"""

from __future__ import annotations

import re

PLACEHOLDER = "⦅{}⦆"  # ⦅1⦆ ... ⦅N⦆: one token each in a vocabulary that reserves them
MARKER = re.compile(r"⦅(\d{1,3})⦆")

_END = r"(?<![.,;:!?)\]}'\"])"  # a URL or address does not end in the sentence's punctuation
SPAN = re.compile(
    "|".join(
        (
            r"⦅\d{1,3}⦆",  # a placeholder written in the text: carried over as it is
            rf"\b(?:https?|ftp)://[^\s<>\"]{{1,2000}}{_END}",
            rf"(?<![\w/.])www\.[^\s<>\"]{{1,2000}}{_END}",
            r"(?<![\w.+-])[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){1,8}\b",
            r"\{\{[^{}\n]{1,100}\}\}|\$\{[^{}\n]{1,100}\}|\{[\w.:!,-]{0,50}\}",
            r"%(?:\d{1,2}\$)?[-+#0]{0,3}\d{0,3}(?:\.\d{1,3})?[sdifuxXeEgGc@]\b",
            r"%\(\w{1,50}\)[sdifr]",
            r"`[^`\n]{1,200}`",
            r"(?<![\w.,])\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?(?![\w])",
            r"(?<![\w.,/])\d{1,2}/\d{1,2}/\d{2,4}(?![\w/])",
            r"(?<![\w.,:])\d{1,2}:\d{2}(?::\d{2})?(?![\w:])",
            r"(?<![\w.,])\d{1,30}(?:[.,]\d{1,30}){0,10}(?![\w])",
        )
    )
)


def spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) of every span of `text` to carry over, in order."""
    return [found.span() for found in SPAN.finditer(text)]


def placeholder(k: int) -> str:
    """The token of placeholder `k` (from 1)."""
    return PLACEHOLDER.format(k)


def placeholder_tokens(count: int) -> list[str]:
    """The tokens a vocabulary of `count` placeholders reserves."""
    return [placeholder(k) for k in range(1, count + 1)]


def masked(text: str, found: list[tuple[int, int]], numbers: list[int]) -> str:
    """`text` with the spans `found` (in any order, none overlapping) replaced by the
    placeholders `numbers` (one each)."""
    out, at = [], 0
    for (start, end), k in sorted(zip(found, numbers)):
        out += [text[at:start], placeholder(k)]
        at = end
    return "".join([*out, text[at:]])
