"""What a class hands in, read without trusting any of it: every fault stays with its own
submission, as one line on that student's row, and never stops the marking of the others.

    subs = collect.gather(SUBMISSIONS, work, roster_names)

SUBMISSIONS holds one entry per student, in any of the forms a class produces:

* a pack, ``handin-<name>-<code>.zip`` (``python -m exercises.handin``), or any zip holding
  sheet.py and the code files, at its top or in folders;
* a folder as the student left it: the whole copy (exercises/sheet.py, loss.py, ...) or the
  four files side by side;
* a folder holding one zip and no sheet (what a learning platform's download gives).

Each is copied into the marker's own folder first (``work``), file by file, each a plain
file under its size limit: links, pipes, devices, zip members that lie about their size,
encrypted or broken zips are refused there, with the reason. Nothing is ever written into
SUBMISSIONS. Then the sheet is read as data, and the name checked against the roster the
same way everywhere (roster.fold: case and spacing aside).
"""

import os
import stat
import zipfile
import zlib
from dataclasses import dataclass, field

from exercises import roster
from exercises.handin import LIMITS, pack_name
from exercises.problems import SheetError, read_sheet

PACK_BYTES = 16 << 20  # a pack of four text files is a few KB
PACK_MEMBERS = 256  # a zip of a whole copy holds about 150 files
WHERE = {"sheet.py": ("exercises/sheet.py", "sheet.py"), "loss.py": ("loss.py",),
         "batching.py": ("batching.py",),
         "ex6_buggy_loss.py": ("exercises/ex6_buggy_loss.py", "ex6_buggy_loss.py")}
DRAW_0 = {"EX1": 0, "EX4": 0, "EX7": 0}  # the tables a copy shows a name not on its roster
MAX_NAME = 200  # characters, as the handout's roster allows


@dataclass
class Submission:
    """One student's hand-in, as the marker's own copy of it."""
    label: str  # its name in SUBMISSIONS
    folder: str  # the marker's copy: sheet.py, loss.py, batching.py, ex6_buggy_loss.py
    name: str = ""  # the student: the roster's spelling where it is on the roster
    sheet: object = None  # read_sheet's namespace, or None when there is no readable sheet
    problems: list = field(default_factory=list)  # one line each: what it lacks or breaks
    on_roster: object = None  # True, False, or None when no roster was given
    tables: object = None  # the draws its numbers are marked on (None: the key's own)


def plain_file(path, limit):
    """The bytes of ``path`` if it is a plain file of at most ``limit`` bytes, else the
    reason it is not (a link, a pipe, a device, too large). Never follows a link and never
    waits on a pipe."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "a link or a special file, not a plain file"
    if st.st_size > limit:
        return f"larger than {limit >> 10} KB"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    return data if len(data) <= limit else f"larger than {limit >> 10} KB"


def from_folder(src, dst, sub):
    """Copy the four files of a student's folder (either layout) into ``dst``."""
    for member, places in WHERE.items():
        path = next((os.path.join(src, p) for p in places
                     if os.path.lexists(os.path.join(src, p))), None)
        if path is None:
            continue
        data = plain_file(path, LIMITS[member])
        if isinstance(data, str):
            sub.problems.append(f"{os.path.relpath(path, src)} is {data}: not marked")
            continue
        with open(os.path.join(dst, member), "wb") as f:
            f.write(data)


def from_zip(path, dst, sub):
    """Copy the four files of a zip into ``dst``: each found by its name wherever it lies in
    the zip (once), read no further than its limit whatever the zip says its size is."""
    data = plain_file(path, PACK_BYTES)
    if isinstance(data, str):
        sub.problems.append(f"the pack is {data}: nothing marked")
        return
    import io
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
            if len(infos) > PACK_MEMBERS:
                raise ValueError(f"{len(infos)} files, more than any hand-in")
            found = {}
            for info in infos:
                member = info.filename.replace("\\", "/").rstrip("/").split("/")[-1]
                if member not in WHERE or info.is_dir():
                    continue
                if member in found:
                    raise ValueError(f"two files named {member}")
                found[member] = info
            for member, info in found.items():
                if stat.S_ISLNK(info.external_attr >> 16) or info.flag_bits & 0x1:
                    sub.problems.append(f"{member} in the pack is a link or encrypted: not marked")
                    continue
                with z.open(info) as f:
                    body = f.read(LIMITS[member] + 1)
                if len(body) > LIMITS[member]:
                    sub.problems.append(f"{member} is larger than {LIMITS[member] >> 10} KB: "
                                        "not marked")
                    continue
                with open(os.path.join(dst, member), "wb") as f:
                    f.write(body)
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, EOFError,
            ValueError, OSError) as e:
        why = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        sub.problems.append(f"the pack is not a readable zip ({why}): nothing marked")


def stage(top, entry, dst):
    """A Submission for one entry of SUBMISSIONS, its files copied into ``dst``; None for an
    entry that is no submission (a stray file)."""
    src = os.path.join(top, entry)
    sub = Submission(entry, dst)
    os.makedirs(dst)
    mode = os.lstat(src).st_mode
    if stat.S_ISDIR(mode):
        zips = [f for f in sorted(os.listdir(src)) if f.lower().endswith(".zip")]
        has_sheet = any(os.path.lexists(os.path.join(src, p)) for p in WHERE["sheet.py"])
        if not has_sheet and len(zips) == 1:  # a platform's folder around the pack
            from_zip(os.path.join(src, zips[0]), dst, sub)
        else:
            from_folder(src, dst, sub)
    elif stat.S_ISREG(mode) and entry.lower().endswith(".zip"):
        from_zip(src, dst, sub)
    else:
        return None
    return sub


def read_name(sub, packs):
    """The sheet read as data, and the student's name: STUDENT, or else the name the pack's
    file name was made for (``packs``: {pack name: roster name}), or else the entry's."""
    path = os.path.join(sub.folder, "sheet.py")
    if os.path.isfile(path):
        try:
            sub.sheet = read_sheet(path)
        except SheetError as e:  # the message names the marker's copy: say the student's file
            sub.problems.append(str(e).replace(path, "sheet.py") + ": numbers and written "
                                "answers not marked")
    elif not any("sheet.py" in p or "the pack" in p for p in sub.problems):
        sub.problems.append("no sheet.py: numbers and written answers not marked")
    written = roster.canonical(getattr(sub.sheet, "STUDENT", "") or "")
    if len(written) > MAX_NAME:  # a pasted paragraph: kept short on every row and file
        sub.problems.append(f"STUDENT is {len(written)} characters long: cut to {MAX_NAME}")
        written = written[:MAX_NAME]
    if written:
        sub.name = written
        return
    sub.name = packs.get(sub.label, roster.canonical(sub.label.rsplit(".zip", 1)[0]))
    if sub.sheet is not None:
        sub.problems.append(f"STUDENT is empty: named after its file, {sub.label!r}")


def on_roster(sub, students):
    """Check the name against the roster: ``students`` is {name: draws or None}, or None
    when no roster was given (then every name is taken as written)."""
    if students is None:
        return
    found = roster.find(sub.name, students)
    sub.on_roster = found is not None
    if found is not None:
        sub.name, sub.tables = found, students[found]
        return
    near = roster.near(sub.name, students)
    sub.tables = dict(DRAW_0)
    sub.problems.insert(0, f"{sub.name!r} is not on the roster"
                        + (f" (did you mean {near!r}?)" if near else "")
                        + ": numbers marked on the tables the copy showed this name")


def gather(top, work, students):
    """[Submission] for every entry of ``top``, and the warning lines: entries skipped,
    students named twice, roster names with nothing handed in. ``students``: the roster as
    {name: draws or None}, or None."""
    warnings, subs = [], []
    packs = {pack_name(n): n for n in students or ()}
    for i, entry in enumerate(sorted(os.listdir(top))):
        if entry.startswith("."):
            warnings.append(f"{os.path.join(top, entry)} is skipped: a name starting with '.' "
                            "is not a submission (rename it to mark it)")
            continue
        sub = stage(top, entry, os.path.join(work, f"sub-{i:05d}"))
        if sub is None:
            warnings.append(f"{os.path.join(top, entry)} is skipped: not a folder or a .zip")
            continue
        read_name(sub, packs)
        on_roster(sub, students)
        subs.append(sub)
    seen = {}
    for sub in subs:
        seen.setdefault(roster.fold(sub.name), []).append(sub)
    for same in seen.values():
        if len(same) > 1:
            labels = ", ".join(s.label for s in same)
            for s in same:
                s.problems.append(f"{len(same)} submissions name this student ({labels}): "
                                  "each has its own row")
    missing = [n for n in students or () if roster.fold(n) not in seen]
    for sub in subs:
        if sub.problems:
            warnings.append(f"{sub.label}: " + "; ".join(sub.problems))
    warnings += [f"nothing handed in by {n!r}" for n in missing]
    return subs, missing, warnings
