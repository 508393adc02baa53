"""Reading and checking a request: its body within the limits, JSON, form or multipart
fields, the texts and options of /translate, the file of /translate_file; every refusal a
`BadRequest` naming the culprit. A field the route does not know is ignored, as LibreTranslate
ignores those it does not use (its page sends `secret`), and named by `unknown_fields`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from ..config import beam_holds
from ..formats import (
    Document,
    DocumentError,
    DocumentTooLarge,
    MarkupTooCostly,
    read_document,
    read_markup,
)
from .batcher import BadRequest, Settings

MAX_BEAM = 16
DRAIN_BYTES = 32 << 20  # a body over the limit is read (and dropped) up to this, so that the
# client reads our 413 rather than a connection reset
FIELDS = ("q", "source", "target", "format", "alternatives", "api_key", "beam", "prefix")
FIELDS += ("glossary",)
DETECT_FIELDS = ("q", "api_key")
FILE_FIELDS = ("file", "source", "target", "api_key")
BODY_SECONDS = 30  # a body must arrive within this, however slowly it is sent
JSON_TYPE, FORM_TYPE = "application/json", "application/x-www-form-urlencoded"
MULTIPART_TYPE = "multipart/form-data"
TEXT_FORMATS = ("text", "html")  # /translate's `format`
MAX_GLOSSARY = 1000  # entries of a request's glossary
MAX_TERM = 100  # characters of a glossary's source term (a target term too long to fit in
# a translation is refused by the constraints, 400 too)
MAX_PARTS = 16  # of a multipart body: /translate has 10 fields, LibreTranslate's page sends 7
MAX_PART_HEADER = 2048  # bytes: a field's name, a file's name (255 characters) and its type
HEADER_END = re.compile(rb"\A\r?\n|\r?\n\r?\n")  # a part's header ends: none, or a blank line


def parse_request(fields: dict[str, Any], form: bool, pairs: list[tuple[str, str]]):
    """A /translate request's fields -> (texts, one text or a list, beam or None for each
    model's own, alternatives, source or "auto", target or None), or BadRequest naming the
    culprit. `pairs`: the languages the models translate from and to; a form's values are
    strings, JSON's are typed. Limits are checked by `check_limits`."""
    texts, single = parse_texts(fields)
    source, target = check_languages(fields, pairs)
    if fields.get("format", "text") not in TEXT_FORMATS:
        raise BadRequest(400, f"format: {fields['format']!r} is not served (text or html)")
    alternatives = _integer(fields, "alternatives", 0, 0, MAX_BEAM - 1, form)
    if alternatives and fields.get("format") == "html":
        raise BadRequest(400, "alternatives: not served with format 'html' (one translation)")
    steered = sorted({"prefix", "glossary"} & set(fields))
    if steered and fields.get("format") == "html":
        raise BadRequest(400, f"{steered[0]}: not served with format 'html'")
    beam = None
    if "beam" in fields:
        beam = _integer(fields, "beam", 0, 1, MAX_BEAM, form)
        if not beam_holds(alternatives + 1, beam):
            raise BadRequest(400, f"alternatives: {alternatives} needs a beam above it, got {beam}")
    return texts, single, beam, alternatives, source, target


def unknown_fields(fields: dict[str, Any], known: tuple[str, ...]) -> list[str]:
    """The names of a request's fields that its route does not know (`known`), sorted."""
    return sorted(set(fields).difference(known))


def parse_texts(fields: dict[str, Any]) -> tuple[list[str], bool]:
    """The texts of a /translate or /detect request and whether `q` was one text rather
    than a list; BadRequest for no text to read."""
    if "q" not in fields:
        raise BadRequest(400, "q: missing (a text, or a list of texts)")
    q = fields["q"]
    single = isinstance(q, str)
    texts = [q] if single else q
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise BadRequest(400, f"q: expected a string or a list of strings, got {_kind(q)}")
    if not texts:
        raise BadRequest(400, "q: empty list")
    for i, text in enumerate(texts):
        if not text.strip():
            raise BadRequest(400, f"q{'' if single else f'[{i}]'}: empty text")
    return texts, single


def parse_prefixes(fields: dict[str, Any], count: int) -> list[str] | None:
    """The `prefix` field of a request of `count` texts: the target text every translation
    starts with, or a list of one per text; None when absent."""
    if "prefix" not in fields:
        return None
    value = fields["prefix"]
    prefixes = [value] * count if isinstance(value, str) else value
    if not (isinstance(prefixes, list) and all(isinstance(p, str) for p in prefixes)) or (
        len(prefixes) != count
    ):
        raise BadRequest(
            400, f"prefix: expected a string or a list of {count} strings, got {_kind(value)}"
        )
    return prefixes


def parse_glossary(fields: dict[str, Any], texts: list[str]) -> list[list[str]] | None:
    """The `glossary` field, {source term: target term}: the target terms each text's
    translation must contain (those whose source term it has); None when absent."""
    from ..decoding.constraints import glossary_terms

    if "glossary" not in fields:
        return None
    glossary = fields["glossary"]
    if not isinstance(glossary, dict) or not all(isinstance(t, str) for t in glossary.values()):
        raise BadRequest(
            400,
            f"glossary: expected an object of source terms to target terms, got {_kind(glossary)}",
        )
    if len(glossary) > MAX_GLOSSARY:
        raise BadRequest(400, f"glossary: {len(glossary):,} entries, at most {MAX_GLOSSARY:,}")
    folded: dict[str, str] = {}
    for source, target in glossary.items():
        if not source.strip() or not target.strip():
            raise BadRequest(400, f"glossary: {source!r}: {target!r}: an empty term")
        if len(source) > MAX_TERM:  # the matching walks a text as deep as its longest term
            where = f"glossary: {source[:20]!r}..."
            raise BadRequest(400, f"{where}: {len(source):,} characters, at most {MAX_TERM}")
        if folded.setdefault(source.lower(), target) != target:
            raise BadRequest(400, f"glossary: conflicting constraints for {source!r}")
    return glossary_terms(folded, texts)


def check_languages(fields: dict[str, Any], pairs: list[tuple[str, str]]) -> tuple[str, str | None]:
    """The request's `source` ("auto" or a language) and `target` (None: whichever a text's
    language is translated to, with auto), by default the first pair's; a 400 naming the
    pairs served when no model translates them."""
    served = ", ".join("→".join(pair) for pair in pairs)
    source = fields.get("source", pairs[0][0])
    target = fields.get("target", None if source == "auto" else pairs[0][1])
    if source not in {"auto", *(s for s, _ in pairs)}:
        raise BadRequest(400, f"source: {source!r} is not served (pairs served: {served})")
    if target is not None and target not in {t for _, t in pairs}:
        raise BadRequest(400, f"target: {target!r} is not served (pairs served: {served})")
    if source != "auto" and "target" not in fields:  # the source's own target
        target = next(t for s, t in pairs if s == source)
    if source != "auto" and (source, target) not in pairs:
        pair = f"{source}→{target}"
        raise BadRequest(400, f"source, target: {pair} is not served (pairs served: {served})")
    return source, target


def _integer(fields: dict[str, Any], key: str, default: int, low: int, high: int, form: bool):
    value = fields.get(key, default)
    if form and isinstance(value, str) and value.strip().lstrip("-").isdecimal():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(400, f"{key}: expected an integer, got {_kind(value)}")
    if not low <= value <= high:
        raise BadRequest(400, f"{key}: {value} is out of range ({low} to {high})")
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}
    names |= {int: "a number", float: "a number", type(None): "null"}
    return names[type(value)]


def check_limits(texts: list[str], settings: Settings) -> None:
    if len(texts) > settings.max_texts:
        most = settings.max_texts
        why = f"q: {len(texts)} texts, at most {most} a request (--max-texts)"
        raise BadRequest(413, why, limit="max_texts")
    for i, text in enumerate(texts):
        check_length(text, settings, f"q[{i}]")


def read_markups(texts: list[str], single: bool, settings: Settings) -> list[Document]:
    """The HTML texts of a /translate request with `format: html`, each within --max-chars
    counted on its text, not its markup; one of markup only is refused."""
    if len(texts) > settings.max_texts:
        check_limits(texts, settings)
    documents = []
    for i, text in enumerate(texts):
        where = "q" if single else f"q[{i}]"
        try:
            documents.append(read_markup(text, where, settings.max_chars))
        except MarkupTooCostly as e:
            raise BadRequest(413, str(e), limit="markup") from None
        except DocumentTooLarge as e:
            raise BadRequest(413, f"{e} (--max-chars)", limit="max_chars") from None
        except DocumentError as e:
            raise BadRequest(400, str(e)) from None
    return documents


def check_length(text: str, settings: Settings, where: str) -> None:
    """413 for a text (`where` names it) longer than --max-chars."""
    if len(text) > settings.max_chars:
        why = f"{where}: {len(text)} characters, at most {settings.max_chars} (--max-chars)"
        raise BadRequest(413, why, limit="max_chars")


async def read_body(request: Any, limit: int) -> bytes:
    """The request's body, or 413 past `limit` bytes (read on, and dropped, up to DRAIN_BYTES
    so that the client reads the 413 rather than a connection reset); 408 if it has not
    all arrived within BODY_SECONDS."""
    import asyncio

    body, size = [], 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                if size > DRAIN_BYTES:
                    break
                continue
            body.append(chunk)

    try:
        await asyncio.wait_for(read(), BODY_SECONDS)
    except asyncio.TimeoutError:
        why = f"body not received within {BODY_SECONDS} s"
        raise BadRequest(408, why, limit="body_seconds") from None
    if size > limit:
        raise BadRequest(413, f"body of {size:,} bytes or more, at most {limit:,}", limit="body")
    return b"".join(body)


def content_type(request: Any) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


async def read_form(request: Any, settings: Settings, multipart: bool = False) -> tuple[str, bytes]:
    """The content type of a /translate or /detect request, JSON or a form (urlencoded, or
    multipart as LibreTranslate's page sends it), or of a /translate_file request
    (`multipart` only), and its body, read within the limits; 415 for another type. A
    multipart type is given whole: its boundary is in it."""
    kind = content_type(request)
    if multipart and kind != MULTIPART_TYPE:
        raise BadRequest(415, f"Content-Type: expected {MULTIPART_TYPE}")
    if not multipart and kind not in (JSON_TYPE, FORM_TYPE, MULTIPART_TYPE):
        raise BadRequest(
            415,
            f"Content-Type: expected {JSON_TYPE}, {FORM_TYPE} or {MULTIPART_TYPE}, got {kind!r}",
        )
    if kind == MULTIPART_TYPE:
        kind = request.headers["content-type"]
    return kind, await read_body(request, settings.max_body)


def parse_fields(kind: str, body: bytes) -> tuple[dict[str, Any], bool]:
    """The body of a /translate or /detect request as fields, and whether it was a form
    (its values strings: a multipart one's each read as UTF-8)."""
    if kind.lower().startswith(MULTIPART_TYPE):
        values = {}
        for name, (_, value) in parse_multipart(kind, body).items():
            try:
                values[name] = value.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BadRequest(400, f"{name}: not UTF-8 (byte {e.start})") from None
        return values, True
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(400, f"body is not UTF-8 (byte {e.start})") from None
    if kind == FORM_TYPE:
        try:
            pairs = parse_qs(text, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError as e:
            raise BadRequest(400, f"body is not UTF-8 (byte {e.start} of a value)") from None
        return {k: v[0] if len(v) == 1 else v for k, v in pairs.items()}, True
    try:
        fields = json.loads(text)
        json.dumps(fields, ensure_ascii=False).encode("utf-8")  # no unpaired surrogate in it
    except RecursionError:
        raise BadRequest(400, "body is not valid JSON: nested too deeply") from None
    except UnicodeEncodeError:
        raise BadRequest(
            400, "body is not valid JSON: an unpaired surrogate (\\ud800...)"
        ) from None
    except ValueError as e:  # JSONDecodeError, and an integer of too many digits
        raise BadRequest(400, f"body is not valid JSON: {e}") from None
    if not isinstance(fields, dict):
        raise BadRequest(400, f"body: expected a JSON object, got {_kind(fields)}")
    return fields, False


def read_document_file(
    fields: dict[str, tuple[str | None, bytes]], settings: Settings
) -> tuple[str, Document]:
    """The file of a /translate_file request's fields: its safe name and the document read
    from it (FILE_FORMATS), each of its texts within --max-chars; a file it cannot read is
    refused, naming it."""
    if not fields.get("file", (None,))[0]:  # no file, or one without a name
        raise BadRequest(400, "Invalid request: missing file parameter")
    filename, data = fields["file"]
    name = re.sub(r"[^\w.-]", "_", Path(filename).name).lstrip(".") or "file.txt"
    try:
        document = read_document(filename, data, settings.max_file_chars)
    except DocumentTooLarge as e:
        raise BadRequest(413, str(e), limit="document") from None
    except DocumentError as e:
        raise BadRequest(400, str(e)) from None
    for number, block in enumerate(document.blocks, start=1):
        check_length(block.source, settings, f"{filename}: {document.unit} {number}")
    return name, document


def parse_multipart(kind: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """multipart/form-data fields: name -> (the file's name or None, the value's bytes). The
    body is cut at its boundary lines here (a regex search for a literal, linear) and only
    each part's header is read by the email package, at most MAX_PARTS of MAX_PART_HEADER
    bytes: its parser takes 20 µs a parameter (a header of 74,000 parameters: seconds)."""
    from email.parser import BytesHeaderParser
    from email.policy import HTTP

    invalid = BadRequest(400, "body is not valid multipart/form-data")
    if len(kind) > MAX_PART_HEADER:
        raise BadRequest(
            400, f"Content-Type: {len(kind):,} characters, at most {MAX_PART_HEADER:,}"
        )
    head = f"Content-Type: {kind}\r\n\r\n".encode("latin-1", "replace")
    boundary = BytesHeaderParser(policy=HTTP).parsebytes(head).get_boundary()
    if not boundary:
        raise invalid
    # a line of the boundary, the line break before it its own; "--" after it: the last
    delimiter = re.compile(
        rb"\r?\n--" + re.escape(boundary.encode("latin-1", "replace")) + rb"(--)?[ \t]*(?:\r?\n|\Z)"
    )
    text, parts, start, found = b"\r\n" + body, [], None, None
    for found in delimiter.finditer(text):
        if start is not None:
            parts.append(text[start : found.start()])
            if len(parts) > MAX_PARTS:
                raise BadRequest(400, f"body: more than {MAX_PARTS} parts (at most {MAX_PARTS})")
        if found[1]:
            break
        start = found.end()
    if not parts or not found[1]:
        raise invalid  # no part, or no last boundary
    fields = {}
    for part in parts:
        blank = HEADER_END.search(part, 0, MAX_PART_HEADER + 4)
        end = blank.end() if blank else len(part)  # no blank line: all header, as email has it
        if end > MAX_PART_HEADER + 4:
            most = f"{MAX_PART_HEADER:,}"
            raise BadRequest(400, f"body: a part's header over {most} bytes (at most {most})")
        message = BytesHeaderParser(policy=HTTP).parsebytes(part[:end])
        # as the email package reads a payload: decoded by its Content-Transfer-Encoding
        message.set_payload(part[end:].decode("ascii", "surrogateescape"))
        name = message.get_param("name", header="content-disposition")
        if name:
            fields[name] = (message.get_filename(), message.get_payload(decode=True) or b"")
    return fields
