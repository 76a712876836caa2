"""errors.py: a user error is one line and exit status 2, never a traceback.

Every check that can refuse input raises CliError; the entry points catch it
and call ``fail``, which prints ``error: ...`` on stderr. ``cli(main, ...)`` is
that catch, shared by the entry points: bad input, a diverged run, a failed
write (a full disk, a folder that vanished) and Ctrl-C each end in one line.
Ctrl-C outside that catch (while a command is still importing, say) ends in the
same line: importing this module makes it so (``interrupt_is_one_line``)."""

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


def interrupt_is_one_line():
    """Ctrl-C that no ``cli`` catches (during a command's imports, or after its main) ends
    in 'error: interrupted' and exit status 2, not Python's traceback; any other uncaught
    exception goes to the hook there was before."""
    before = sys.excepthook
    if getattr(before, "one_line", False):
        return

    def hook(kind, value, tb):
        if not issubclass(kind, KeyboardInterrupt):
            return before(kind, value, tb)
        for stream in (sys.stdout, sys.stderr):  # what was printed before stays printed
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os.write(2, b"error: interrupted\n")
        os._exit(2)  # the interpreter would exit by SIGINT, or with status 1 after a hook
    hook.one_line = True
    sys.excepthook = hook


interrupt_is_one_line()
