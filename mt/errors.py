"""The errors a person can fix, by what happened. The CLI prints each as one line,
`mt: error: ...`, and exits with its code; anything else is a bug and keeps its traceback."""


class MtError(Exception):
    """An error a person can fix (exit status 1)."""

    exit_code = 1


class ConfigError(MtError):
    """A usage or configuration error: a command's arguments, a config key, a setting that
    contradicts another (exit status 2)."""

    exit_code = 2


class InputError(MtError):
    """A file given to mt that it cannot use: missing, unreadable, damaged, not what it
    should be, or changed while it was read (exit status 2)."""

    exit_code = 2


class MachineError(MtError):
    """What this machine cannot do: memory, disk, a package not installed (exit status 1)."""


class DoesNotFit(MachineError):
    """Work too big for the device's memory, where a setting it names is the fix (exit status
    2, as for that setting's other errors)."""

    exit_code = 2


class Unhealthy(MtError):
    """A run stopped by a health check (mt/training/health.py): it collapsed or diverged, and
    going on would not help (exit status 3)."""

    exit_code = 3


def one_line(error: Exception) -> str:
    """An exception's message on one line, cut to a readable length."""
    return " ".join(str(error).split())[:300]
