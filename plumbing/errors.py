"""errors.py: a user error is one line and exit status 2, never a traceback.

Every check that can refuse input raises CliError; the entry points catch it
and call ``fail``, which prints ``error: ...`` on stderr. ``cli(main, ...)`` is
that catch, shared by the entry points: bad input, a diverged run, a failed
write (a full disk, a folder that vanished) and Ctrl-C each end in one line."""

import os
import sys
import time


class CliError(Exception):
    """A user error: reported as one line, no traceback."""


def fail(msg, code=2):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def os_line(e):
    """One line for an OSError: what went wrong, then the path it happened on."""
    return f"{e.strerror or type(e).__name__}: {e.filename or ''}".rstrip(": ")


def cli(main, *args):
    """main(*args), with every failure a user can cause or meet turned into one
    'error: ...' line and exit status 2."""
    try:
        return main(*args)
    except CliError as e:  # under torchrun only local rank 0 prints it (one line per node):
        if os.environ.get("LOCAL_RANK", "0") != "0":  # the others give it time, then exit
            time.sleep(5)
            sys.exit(2)
        fail(str(e))
    except FloatingPointError as e:
        fail(str(e))
    except OSError as e:
        fail(os_line(e))
    except KeyboardInterrupt:
        fail("interrupted")
