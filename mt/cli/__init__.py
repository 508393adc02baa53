"""The `mt` command line: `prepare`, `train`, `average` and `plot` make a model
(mt.cli.training); `translate`, `evaluate`, `score` and `attention` decode with one
(mt.cli.decoding); `export` writes one for another runtime (mt.cli.export) and `serve` puts
one to work (mt.cli.serving).

Every command takes `--config FILE` and `--set section.key=value` overrides. Errors a person
can fix print one line on stderr and exit non-zero, by kind (mt.errors): 2 for usage,
configuration and input-file errors, 1 for what the machine cannot do, 3 for a run stopped
by a health check; MT_DEBUG=1 prints their traceback too.
"""

from __future__ import annotations

import os
import sys
import traceback

import typer

from ..errors import MtError
from ..messages import say
from . import decoding, export, serving, training  # noqa: F401  (their commands join the app)
from .app import app, from_environment


def main() -> None:
    """The one error boundary: an expected failure (MtError, a usage error) is one stderr line
    `mt: error: ...` and its exit status (2 for usage, configuration and input errors); with
    MT_DEBUG=1 its traceback comes first. Anything else is a bug and keeps its traceback."""
    from typer._click.exceptions import BadParameter, NoArgsIsHelpError, UsageError

    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as e:  # plain `mt`: the help, as before
        e.show()
        code = e.exit_code
    except BadParameter as e:  # a bad value: of an option, or of its environment variable
        named = e.ctx and e.param and from_environment(e.ctx, e.param.name, e.message)
        code = _fail(named or e.format_message(), 2)
    except UsageError as e:  # unknown option, missing argument
        code = _fail(e.format_message(), 2)
    except typer.Abort:  # end of input at a prompt
        code = _fail("interrupted", 130)
    except MtError as e:
        code = _fail(str(e), e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int) -> int:
    if os.environ.get("MT_DEBUG") == "1":
        traceback.print_exc()
    say(f"mt: error: {' '.join(message.split())}")
    return code
