"""The errors a person can fix. The CLI prints each as one line, `mt: error: ...`, and exits
with its code; anything else is a bug and keeps its traceback."""


class MtError(Exception):
    """An error a person can fix (exit status 1)."""

    exit_code = 1


class ConfigError(MtError):
    """A usage, configuration or input error (exit status 2)."""

    exit_code = 2


class Unhealthy(MtError):
    """A run stopped by a health check (mt/health.py): it collapsed or diverged, and going
    on would not help (exit status 3)."""

    exit_code = 3


def one_line(error: Exception) -> str:
    """An exception's message on one line, cut to a readable length."""
    return " ".join(str(error).split())[:300]
