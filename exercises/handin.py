"""Hand in your work: one command packs your sheet and the files the exercises edit into one
zip, named with your name as the class roster spells it.

    python -m exercises.handin              # writes handin-<your-name>-<code>.zip here
    python -m exercises.handin --out=DIR    # the zip goes into DIR instead
    python -m exercises.handin --off_roster # your name is not on the roster (ask first)

The pack holds four files: exercises/sheet.py, loss.py, batching.py and
exercises/ex6_buggy_loss.py, as they are now. Hand in the zip as your teacher asks (a
learning platform, a shared folder, a USB stick). Run it again after any change: the new
zip replaces the old one. Your teacher's marking tool reads the pack; it runs nothing
from it on your machine or anyone else's without a sandbox.

Before it writes anything it checks what would cost you marks: the sheet must read as data,
STUDENT must be on the roster (case and spacing aside), and no file may be too large. A file
whose Python does not compile is packed with a note: that exercise scores 0 until it does.
The code in ``<code>`` (6 letters of a hash of your name) keeps two similar names apart.
"""

import os
import sys

if __name__ == "__main__":  # Ctrl-C at any moment, during the imports too: one line
    import signal
    signal.signal(signal.SIGINT, lambda *_: (sys.stderr.write(
        "\ninterrupted; the previous pack, if any, is unchanged\n"), os._exit(130)))
if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.handin\n")
    sys.exit(2)
import hashlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unicodedata  # noqa: E402
import zipfile  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from exercises import roster  # noqa: E402
from exercises.problems import SHEET_BYTES, SheetError, read_sheet  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# name in the pack -> where it lies in the copy; the marker reads the names on the left
MEMBERS = {"sheet.py": "exercises/sheet.py", "loss.py": "loss.py",
           "batching.py": "batching.py", "ex6_buggy_loss.py": "exercises/ex6_buggy_loss.py"}
FILE_BYTES = 1 << 20  # a solution file is a few KB; 1 MB is not a solution
LIMITS = {"sheet.py": SHEET_BYTES, "loss.py": FILE_BYTES, "batching.py": FILE_BYTES,
          "ex6_buggy_loss.py": FILE_BYTES}
USAGE = "usage: python -m exercises.handin [--out=DIR] [--off_roster] [--as_is]"
HELP = f"""{USAGE}

Pack exercises/sheet.py, loss.py, batching.py and exercises/ex6_buggy_loss.py into
handin-<your-name>-<code>.zip, for your teacher.

  --out=DIR      write the zip into DIR (default: the repository root)
  --off_roster   your name is not on the class roster (ask your teacher first)
  --as_is        pack a sheet that does not read: your code is still marked, the
                 sheet's numbers and written answers are not
  --help         this text
"""
MANIFEST = "handin.json"  # in the pack: who it was made for, and when (UTC)


class HandinError(Exception):
    """A pack that cannot be made as asked: one line, exit 2."""


def pack_name(name):
    """handin-<name in plain letters>-<6 hex of its fold>.zip: a file name every platform
    takes (no accents, no spaces), and one per student (roster.fold: case and spacing
    aside). The marker maps it back to the roster's name."""
    plain = unicodedata.normalize("NFKD", roster.fold(name)).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", plain).strip("-")[:40] or "student"
    code = hashlib.sha256(roster.fold(name).encode("utf-8")).hexdigest()[:6]
    return f"handin-{slug}-{code}.zip"


def parse(argv):
    opts = {"out": ROOT, "off_roster": False, "as_is": False}
    seen = set()
    for a in argv:
        key = a.split("=", 1)[0]
        if key in seen:
            raise HandinError(f"{key} is given twice; give it once")
        seen.add(key)
        if key == "--out" and "=" in a:
            opts["out"] = a.split("=", 1)[1]
            if not opts["out"]:
                raise HandinError("--out= is empty; name a folder")
        elif a in ("--off_roster", "--as_is"):
            opts[a[2:]] = True
        else:
            raise HandinError(f"unknown argument {a!r}; {USAGE}")
    if not os.path.isdir(opts["out"]):
        raise HandinError(f"--out={opts['out']}: no such folder")
    return opts


def student(sheet, off_roster):
    """The name the pack is made for: STUDENT, spelled as on the roster."""
    name = roster.canonical(getattr(sheet, "STUDENT", "") or "")
    if not name:
        raise HandinError("write your name or student id in STUDENT in exercises/sheet.py first")
    names = (roster.load() or {"students": None})["students"]
    if names is None or off_roster:
        return name
    found = roster.find(name, names)
    if found is None:
        near = roster.near(name, names)
        raise HandinError(f"STUDENT = {name!r} is not on this class's roster"
                          + (f" (did you mean {near!r}?)" if near else "")
                          + "; write your name as your teacher spelled it, or pass --off_roster "
                          "if your teacher says so")
    return found


def read_own_sheet(as_is):
    """(the sheet, a note or None). A sheet that does not read is refused, naming its line
    and what to do; with ``as_is`` it is packed anyway, and only STUDENT is read from it."""
    path = os.path.join(ROOT, MEMBERS["sheet.py"])
    try:
        return read_sheet(path), None
    except SheetError as e:
        if not as_is:
            raise HandinError(f"{e}; fix that line (python -m exercises.check shows it too) and "
                              "run this again, or pass --as_is to hand it in as it is: your code "
                              "is still marked, the sheet's numbers and written answers are "
                              "not") from None
        name = student_line(path)
        if name is None:
            raise HandinError(f"{e}; --as_is needs a line STUDENT = \"your name\" that reads"
                              ) from None
        return SimpleNamespace(STUDENT=name), (f"note: {e}: packed as it is (--as_is); its "
                                               "numbers and written answers score 0")


def student_line(path):
    """STUDENT from a sheet that does not read as a whole: its own line, read as data."""
    import ast
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("STUDENT"):
                try:
                    node = ast.parse(line.strip()).body[0]
                    value = ast.literal_eval(node.value)
                except (SyntaxError, ValueError, IndexError, AttributeError):
                    return None
                return value if isinstance(value, str) and value.strip() else None
    return None


def read_members():
    """{name in the pack: bytes}, every file checked first: there, a plain file, not too
    large. Also the notes for files whose Python does not compile."""
    data, notes = {}, []
    for member, rel in MEMBERS.items():
        path = os.path.join(ROOT, rel)
        if not os.path.isfile(path):
            raise HandinError(f"{rel} is missing; the copy your teacher gave you has it")
        if os.path.getsize(path) > LIMITS[member]:
            raise HandinError(f"{rel} is larger than {LIMITS[member] >> 10} KB; no answer "
                              "needs that much: remove what you added for testing")
        with open(path, "rb") as f:
            data[member] = f.read(LIMITS[member] + 1)
        if member != "sheet.py":
            try:
                compile(data[member], rel, "exec")
            except (SyntaxError, ValueError) as e:
                line = f", line {e.lineno}" if getattr(e, "lineno", None) else ""
                notes.append(f"note: {rel} does not compile ({type(e).__name__}{line}): packed "
                             "anyway; its exercises score 0 until it does")
    return data, notes


def manifest(name, when=None):
    """The pack's handin.json: the name it was made for and the time, in UTC to the second
    (a zip's own dates have no time zone and a 2-second step). The marker takes each
    student's latest pack by it."""
    when = when or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return json.dumps({"student": name, "made": when}, ensure_ascii=False).encode("utf-8")


def write_pack(folder, name, data):
    """The zip, written beside its final name and renamed into place: an interrupted run
    leaves the previous pack, never half a new one."""
    final = os.path.join(folder, pack_name(name))
    fd, tmp = tempfile.mkstemp(prefix=".handin-", suffix=".partial", dir=folder)
    stamp = time.gmtime()[:6]
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
                for member, body in {**data, MANIFEST: manifest(name)}.items():
                    z.writestr(zipfile.ZipInfo(member, stamp), body, zipfile.ZIP_DEFLATED)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    except BaseException:
        os.unlink(tmp)
        raise
    return final


def main(argv):
    if argv in (["--help"], ["-h"]):
        print(HELP, end="")
        return 0
    try:
        opts = parse(argv)
        sheet, broken = read_own_sheet(opts["as_is"])
        name = student(sheet, opts["off_roster"])
        data, notes = read_members()
        path = write_pack(opts["out"], name, data)
    except (HandinError, SheetError, roster.RosterError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot write the pack to {opts['out']}: "
              f"{e.strerror or type(e).__name__}; nothing was written", file=sys.stderr)
        return 2
    for note in ([broken] if broken else []) + notes:
        print(note, file=sys.stderr)
    print(f"wrote {path} for {name!r} ({', '.join(MEMBERS.values())}); hand in this file")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("\ninterrupted; the previous pack, if any, is unchanged", file=sys.stderr)
        sys.exit(130)
