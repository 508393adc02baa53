"""`mt serve`'s options from the environment (issue 53): every option as MT_SERVE_<OPTION>
(LibreTranslate's LT_<OPTION>), the checkpoints as MT_SERVE_CHECKPOINTS, a flag on the
command line winning, and a bad value one line naming the variable, exit 2. The server is not
started: its `run` is replaced by one that keeps what it was given."""

from __future__ import annotations

import inspect

import pytest
import typer.main

from mt.cli import app


def serve_command():
    return typer.main.get_command(app).commands["serve"]


def options() -> list:
    return [p for p in serve_command().params if p.opts[0].startswith("--")]


def variable(option) -> str:
    """The variable an option is read from: its long flag's name, as LibreTranslate names
    LT_CHAR_LIMIT after --char-limit."""
    return "MT_SERVE_" + option.opts[0].removeprefix("--").replace("-", "_").upper()


def parsed(*args: str) -> dict:
    """What `mt serve` parses from `args` and the environment (before its body runs)."""
    command = serve_command()
    with command.make_context("serve", list(args)) as ctx:
        return ctx.params


def a_value(option) -> tuple[str, object]:
    """A value for the option unlike its default, as the variable holds it and as parsed."""
    kind = option.type_descriptor.annotation
    if option.multiple:
        return "a=1 b=2", ["a=1", "b=2"]
    if option.is_flag:
        return ("false", False) if option.default else ("true", True)
    if kind is int:
        return "7", 7
    if kind is float:
        return "0.5", 0.5
    return "some-value", "some-value"


def test_every_option_is_read_from_its_variable_and_a_flag_wins(monkeypatch):
    found = options()
    assert len(found) >= 22  # host, port ... kept-minutes
    for option in found:
        monkeypatch.setenv(variable(option), a_value(option)[0])
    params = parsed()
    for option in found:
        assert params[option.name] == a_value(option)[1], variable(option)
    assert parsed("--port", "9000", "--max-chars", "5")["port"] == 9000  # the flag wins
    assert parsed("--max-chars", "5")["max_chars"] == 5
    assert parsed("--char-limit", "7")["max_chars"] == 7  # LibreTranslate's name, its meaning
    assert parsed("--metrics-auth-token", "t")["metrics_token"] == "t"  # LibreTranslate's


def test_a_flag_is_read_from_its_variable(monkeypatch):
    flags = [option for option in options() if option.is_flag]
    if not flags:
        pytest.skip("mt serve has no on/off flag yet (every option takes a value)")
    for option in flags:
        for text, value in (("true", True), ("1", True), ("false", False), ("0", False)):
            monkeypatch.setenv(variable(option), text)
            assert parsed()[option.name] is value


@pytest.fixture
def served(monkeypatch):
    """What `run` is given by `mt serve`, by the name of each of its parameters."""
    import mt.serve.app

    given: dict = {}
    signature = inspect.signature(mt.serve.app.run)
    monkeypatch.setattr(
        mt.serve.app,
        "run",
        lambda *a, **k: given.update(signature.bind(*a, **k).arguments),
    )
    return given


def test_one_variable_of_each_kind_has_its_effect(cli_main, served, monkeypatch, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("secret 5 100\n", encoding="utf-8")
    environment = {
        "MT_SERVE_CHECKPOINTS": "runs/a runs/b",  # the argument: two models
        "MT_SERVE_PORT": "8123",  # an int
        "MT_SERVE_MAX_TEXTS": "9",  # an int of the server's settings
        "MT_SERVE_BATCH_WAIT_MS": "2.5",  # a float
        "MT_SERVE_API_KEYS": str(keys),  # a path
        "MT_SERVE_HOST": "0.0.0.0",  # a string
        "MT_SERVE_PUBLIC_URL": "https://mt.example.org",
        "MT_SERVE_SET": "decode.beam=2 decode.max_len_b=5",  # a repeated option
        "MT_SERVE_URL_PREFIX": "mt/",  # the deployment's, each checked and made canonical
        "MT_SERVE_CORS_ORIGINS": "https://a.example.org, http://127.0.0.1:8080",
        "MT_SERVE_METRICS_TOKEN": "t0ken",
        "MT_SERVE_SHARED_STORAGE": "redis://redis:6379/2",
        "MT_SERVE_MAX_REQUEST_CHARS": "5000",
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    code, _, err = cli_main("serve")
    assert (code, err) == (0, "")
    settings, access = served["settings"], served["access"]
    assert (served["host"], served["port"]) == ("0.0.0.0", 8123)
    assert (settings.max_texts, settings.batch_wait_ms) == (9, 2.5)
    assert list(access.keys) == ["secret"] and access.keys["secret"].requests == 5
    deployment = served["deployment"]
    assert (deployment.public_url, deployment.url_prefix) == ("https://mt.example.org", "/mt")
    assert deployment.cors_origins == ("https://a.example.org", "http://127.0.0.1:8080")
    assert (deployment.metrics_token, deployment.shared_storage) == (
        "t0ken",
        "redis://redis:6379/2",
    )
    assert settings.max_request_chars == 5000
    models = served["open_models"]
    assert [model.args[0] for model in models] == ["runs/a", "runs/b"]
    assert models[0].args[2] == ["decode.beam=2", "decode.max_len_b=5"]
    code, _, _ = cli_main("serve", "runs/c", "--port", "9000", "--set", "decode.beam=3")
    assert code == 0 and served["port"] == 9000  # the command line wins
    assert [model.args[0] for model in served["open_models"]] == ["runs/c"]
    assert served["open_models"][0].args[2] == ["decode.beam=3"]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MT_SERVE_PORT", "abc", "MT_SERVE_PORT=abc: Input should be a valid integer"),
        ("MT_SERVE_BATCH_WAIT_MS", "soon", "MT_SERVE_BATCH_WAIT_MS=soon: Input should be a"),
        ("MT_SERVE_MAX_TEXTS", "0", "MT_SERVE_MAX_TEXTS=0: must be at least 1 (--max-texts)"),
        ("MT_SERVE_PUBLIC_URL", "mt.org", "MT_SERVE_PUBLIC_URL=mt.org: expected http://..."),
        ("MT_SERVE_API_KEYS", "/none/keys", "MT_SERVE_API_KEYS=/none/keys: cannot read it"),
        ("MT_SERVE_URL_PREFIX", "/a b", "MT_SERVE_URL_PREFIX=/a b: expected a path such as"),
        ("MT_SERVE_CORS_ORIGINS", "a.org", "MT_SERVE_CORS_ORIGINS=a.org: 'a.org' is not an"),
        ("MT_SERVE_SHARED_STORAGE", "http://r", "MT_SERVE_SHARED_STORAGE=http://r: expected re"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_variable(
    cli_main, served, monkeypatch, name, value, message
):
    monkeypatch.setenv(name, value)
    code, out, err = cli_main("serve")
    assert (code, out, err.count("\n")) == (2, "", 1) and not served
    assert err.startswith(f"mt: error: {message}"), err
