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

import hashlib
import os
import re
import sys
import tempfile
import unicodedata
import zipfile

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.handin\n")
    sys.exit(2)
from exercises import roster
from exercises.problems import SHEET_BYTES, SheetError, read_sheet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# name in the pack -> where it lies in the copy; the marker reads the names on the left
MEMBERS = {"sheet.py": "exercises/sheet.py", "loss.py": "loss.py",
           "batching.py": "batching.py", "ex6_buggy_loss.py": "exercises/ex6_buggy_loss.py"}
FILE_BYTES = 1 << 20  # a solution file is a few KB; 1 MB is not a solution
LIMITS = {"sheet.py": SHEET_BYTES, "loss.py": FILE_BYTES, "batching.py": FILE_BYTES,
          "ex6_buggy_loss.py": FILE_BYTES}
USAGE = "usage: python -m exercises.handin [--out=DIR] [--off_roster]"


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
    opts = {"out": ROOT, "off_roster": False}
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
        elif a == "--off_roster":
            opts["off_roster"] = True
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


def write_pack(folder, name, data):
    """The zip, written beside its final name and renamed into place: an interrupted run
    leaves the previous pack, never half a new one."""
    final = os.path.join(folder, pack_name(name))
    fd, tmp = tempfile.mkstemp(prefix=".handin-", suffix=".partial", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
                for member, body in data.items():
                    z.writestr(zipfile.ZipInfo(member, (2020, 1, 1, 0, 0, 0)), body,
                               zipfile.ZIP_DEFLATED)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    except BaseException:
        os.unlink(tmp)
        raise
    return final


def main(argv):
    try:
        opts = parse(argv)
        sheet = read_sheet(os.path.join(ROOT, MEMBERS["sheet.py"]))
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
    for note in notes:
        print(note, file=sys.stderr)
    print(f"wrote {path} for {name!r} ({', '.join(MEMBERS.values())}); hand in this file")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("\ninterrupted; the previous pack, if any, is unchanged", file=sys.stderr)
        sys.exit(130)
