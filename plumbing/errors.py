"""errors.py: a user error is one line and exit status 2, never a traceback.

Every check that can refuse input raises CliError; the entry points catch it
and call ``fail``, which prints ``error: ...`` on stderr."""

import sys


class CliError(Exception):
    """A user error: reported as one line, no traceback."""


def fail(msg, code=2):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)
