"""files.py: the lab's own files: its figures, the --out checks of its pictures, and the
records it sets aside.

What it teaches: a picture or a record that took minutes to make must survive a full
disk and a damaged neighbour. A figure is drawn into memory and then written atomically
(checkpoint.atomic_write_bytes), so a failed write leaves the earlier figure whole; an
--out file is checked before any work; a damaged record is renamed aside, never read
again and never overwritten. The lesson writes none of these (plumbing/ holds its own).
"""

import io
import os

from plumbing import checkpoint, config
from plumbing.errors import CliError

FIGURE_TYPES = ("png", "pdf", "svg", "jpg", "jpeg")


def check_out_file(path, flag, exts):
    """A file we may write: a name with one of ``exts`` in an existing, writable folder,
    not itself a folder or a special file. Creates nothing."""
    if not path:
        raise CliError(f"{flag} is empty")
    if os.path.isdir(path):
        raise CliError(f"{flag}={path} is a folder")
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in exts:
        raise CliError(f"{flag}={path}: unknown file type {ext or '(none)'!r}; use one of "
                       f"{', '.join(exts)}")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise CliError(f"{flag}={path}: its folder {d} does not exist"
                       + (" (it is a file)" if os.path.exists(d) else ""))
    if os.path.exists(path) and not os.path.isfile(path):  # a device, a pipe, a socket
        raise CliError(f"{flag}={path} is not a regular file")
    config.check_writable(flag, path, d)


def atomic_savefig(fig, path, **savefig):
    """fig.savefig(path), drawn into memory, then written atomically: a failed write (a
    full disk) leaves the earlier figure whole."""
    buf = io.BytesIO()
    fig.savefig(buf, format=os.path.splitext(path)[1].lstrip(".").lower() or "png", **savefig)
    checkpoint.atomic_write_bytes(buf.getvalue(), path)


def set_aside(path):
    """Rename a damaged file to the first of NAME.bad, NAME.bad.1, ... that nothing holds (a
    file, a folder or a link), to look at and never read again; returns the new name.
    os.link takes a name only if it is free, so no other process's file is replaced."""
    n, bad = 0, path + ".bad"
    while True:
        try:
            os.link(path, bad, follow_symlinks=False)
            os.remove(path)
            return bad
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: the name was free a moment ago
            if not os.path.lexists(bad):
                os.rename(path, bad)
                return bad
        n += 1
        bad = f"{path}.bad.{n}"
