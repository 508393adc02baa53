"""`GET /spec`: the API described as LibreTranslate serves its own there, a Swagger 2.0
(OpenAPI 2) document, its `basePath` the URL prefix: each route, its fields (those
mt.serve.requests reads: a field added there without a word here fails the tests), its
answers and errors."""

from __future__ import annotations

from typing import Any

from .requests import DETECT_FIELDS, FIELDS, FILE_FIELDS, FORM_TYPE, JSON_TYPE, MULTIPART_TYPE

FIELD_TEXTS = {  # name: (type, required, what)
    "q": ("string", True, "A text to translate, or (as JSON) a list of them"),
    "source": ("string", False, "The source language's code, or auto (default: the first pair's)"),
    "target": ("string", False, "The target language's code (default: the source's own)"),
    "format": ("string", False, "text (default) or html: the markup kept"),
    "alternatives": ("integer", False, "How many other translations to give (0 to 15)"),
    "api_key": ("string", False, "An API key, where the server needs one"),
    "beam": ("integer", False, "mt's: the beam of the search (1 to 16)"),
    "prefix": ("string", False, "mt's: a text every translation starts with (JSON: one a text)"),
    "glossary": ("string", False, "mt's, JSON only: an object of source terms to target terms"),
    "file": ("file", True, "The file to translate (.txt, .html, .docx, .odt, .pptx, .odp, ...)"),
}
ERRORS = {
    "400": "Bad input",
    "403": "No valid API key",
    "413": "Past a limit",
    "429": "Past a client's limit: Retry-After says when to try again",
    "503": "Loading or busy: Retry-After says when to try again",
}


def _fields(names: tuple[str, ...]) -> list[dict[str, Any]]:
    return [
        {"in": "formData", "name": name, "type": kind, "required": needed, "description": what}
        for name in names
        for kind, needed, what in [FIELD_TEXTS[name]]
    ]


def _route(summary: str, tag: str, answer: str | None, fields: tuple = (), **more: Any) -> dict:
    """A route's operation: its 200 answer of the schema `answer` (None: no schema)."""
    ok: dict[str, Any] = {"description": "Done"}
    if answer:
        ok["schema"] = {"$ref": f"#/definitions/{answer}"}
    errors = {
        code: {"description": why, "schema": {"$ref": "#/definitions/error"}}
        for code, why in ERRORS.items()
    }
    return {
        "summary": summary,
        "tags": [tag],
        "parameters": _fields(fields),
        "responses": {"200": ok, **errors},
    } | more


def _object(**properties: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
    }


def document(url_prefix: str, version: str) -> dict[str, Any]:
    """The Swagger document of a server under `url_prefix` ("": the root)."""
    forms = [JSON_TYPE, FORM_TYPE, MULTIPART_TYPE]
    get = {"produces": ["application/json"]}
    return {
        "swagger": "2.0",
        "info": {
            "title": "mt serve",
            "version": version,
            "description": "English-Spanish machine translation behind LibreTranslate's API.",
            "license": {"name": "MIT"},
        },
        "basePath": url_prefix or "/",
        "consumes": forms,
        "produces": ["application/json"],
        "paths": {
            "/translate": {"post": _route("Translate texts", "translate", "translate", FIELDS)},
            "/detect": {
                "post": _route(
                    "Detect the language of texts", "translate", "detections", DETECT_FIELDS
                )
            },
            "/languages": {"get": _route("The languages served", "translate", "languages", **get)},
            "/translate_file": {
                "post": _route(
                    "Translate a file, its layout kept",
                    "translate",
                    "translatedFile",
                    FILE_FIELDS,
                    consumes=[MULTIPART_TYPE],
                )
            },
            "/download_file/{filename}": {
                "get": {
                    "summary": "Download a translated file",
                    "tags": ["translate"],
                    "produces": ["application/octet-stream"],
                    "parameters": [
                        {"in": "path", "name": "filename", "type": "string", "required": True}
                    ],
                    "responses": {
                        "200": {"description": "The file"},
                        "404": {"description": "No such file, or no longer kept"},
                    },
                }
            },
            "/suggest": {"post": _route("Suggest a translation (off: 403)", "feedback", None)},
            "/frontend/settings": {
                "get": _route("The web page's settings", "frontend", "frontendSettings", **get)
            },
            "/health": {"get": _route("Whether the models are loaded", "server", "health", **get)},
            "/info": {"get": _route("The models and the limits", "server", None, **get)},
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (--metrics-token: Authorization: Bearer TOKEN)",
                    "tags": ["server"],
                    "produces": ["text/plain"],
                    "responses": {
                        "200": {"description": "The metrics"},
                        "401": {"description": "No valid token"},
                    },
                }
            },
            "/spec": {"get": _route("This document", "server", None, **get)},
        },
        "definitions": {
            "error": _object(error="string"),
            "translate": _object(
                translatedText="string",
                alternatives="array",
                detectedLanguage="object",
                ignored="array",
                scores="array",
                short="boolean",
                placed="integer",
                beam="integer",
                model="string",
                step="integer",
                seconds="number",
            ),
            "detections": {
                "type": "array",
                "items": _object(language="string", confidence="number"),
            },
            "languages": {
                "type": "array",
                "items": _object(code="string", name="string", targets="array"),
            },
            "translatedFile": _object(translatedFileUrl="string", ignored="array"),
            "frontendSettings": _object(
                charLimit="integer",
                frontendTimeout="integer",
                apiKeys="boolean",
                keyRequired="boolean",
                suggestions="boolean",
                filesTranslation="boolean",
                supportedFilesFormat="array",
                language="object",
            ),
            "health": _object(
                status="string", pending="integer", batches="integer", texts="integer"
            ),
        },
    }
