"""What a class hands in, read without trusting any of it: every fault stays with its own
submission, as one line on that student's row, and never stops the marking of the others.

    subs = collect.gather(SUBMISSIONS, work, roster_names)

SUBMISSIONS holds one entry per student, in any of the forms a class produces:

* a pack, ``handin-<name>-<code>.zip`` (``python -m exercises.handin``), or any zip holding
  sheet.py and the code files, at its top or in folders;
* a folder as the student left it: the whole copy (exercises/sheet.py, loss.py, ...) or the
  four files side by side;
* a folder holding one zip and no sheet (what a learning platform's download gives), or
  holding one folder, the student's copy, uploaded as it was.

Each is copied into the marker's own folder first (``work``), file by file, each a plain
file under its size limit: links (a file, or a folder on the way to one, or a zip member),
pipes, devices, zip members that lie about their size, encrypted or broken zips are refused
there, with the reason; a link is never followed. A zip's .venv, __pycache__ and .git are
skipped. Nothing is ever written into SUBMISSIONS. Then the sheet is read as data.

Whose work it is (``identify``), compared as everywhere by roster.fold (case and spacing
aside): the name the hand-in was made for (its handin.json, else its file name
handin-<name>-<code>.zip, else the sheet's STUDENT, read alone from a sheet that does not
read); else the name a learning platform gave its download; else it is flagged, under the
name it has. The platforms' download names (``platform_name``):

* Moodle, "Download all submissions": a folder per student,
  ``Full Name_12345_assignsubmission_file`` (older versions end it with "_"); or, without
  folders, each file as
  ``Full Name_12345_assignsubmission_file_<the file's name>``. An underscore in a name becomes
  a space; blind marking writes "Participant" for the name, which matches no one.
* Canvas, "Download Submissions": each file as ``lastnamefirstname_12345_67890_<name>``, or
  ``lastnamefirstname_LATE_12345_67890_<name>`` for late work: the name lower case, its
  spaces and punctuation dropped. It is matched to the roster the same way, either order,
  and only where one roster name fits. (Moodle's forms are read from its own source,
  mod/assign; Canvas's are as its users report them: check one download of yours.)

Where a platform's name is on the roster it decides (the platform knows who uploaded the
work): a pack made on a partner's laptop lands on its uploader's row, never on the
partner's. A hand-in whose sheet or pack names someone other than its row is flagged with
both names. A student with several hand-ins, each holding the time
it was made (handin.json), is marked on the latest; the row lists the others.
"""

import json
import os
import re
import stat
import unicodedata
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
SKIPPED = (".venv", "venv", "__pycache__", ".git")  # folders of a copy that hold no answer
MOODLE = re.compile(r"^(.+?)_(\d+)_assignsubmission_file_?(.*)$", re.S)
CANVAS = re.compile(r"^([a-z]+)(?i:_late)?_(\d+)_(\d+)_(.+)$", re.S)


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
    made: str = ""  # when its pack was made (handin.json, UTC), or "" when it does not say
    packed_for: str = ""  # the name its handin.json gives
    inner: str = ""  # the zip's own file name, inside a platform's folder
    sheet_name: str = ""  # STUDENT, from the sheet (or its own line when the sheet is broken)


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


def link_on_the_way(top, rel):
    """The first part of ``rel`` under ``top`` that is a link (a folder or the file), or
    None: a link on the way would lead the marker outside the submission."""
    path = top
    for part in rel.split("/"):
        path = os.path.join(path, part)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return os.path.relpath(path, top)
        except OSError:
            return None
    return None


def links_in(src):
    """Every link in a student's folder (none followed), relative to it."""
    out = []
    for d, dirs, files in os.walk(src, followlinks=False):
        for n in dirs + files:
            if os.path.islink(os.path.join(d, n)):
                out.append(os.path.relpath(os.path.join(d, n), src))
        dirs[:] = [x for x in dirs if x not in SKIPPED and not os.path.islink(os.path.join(d, x))]
    return sorted(out)


def from_folder(src, dst, sub):
    """Copy the four files of a student's folder (either layout) into ``dst``; a link
    anywhere in it is noted and never followed."""
    links = links_in(src)
    if links:
        sub.problems.append(f"holds {len(links)} link{'s' * (len(links) > 1)} ("
                            + ", ".join(links[:3]) + "): not followed")
    for member, places in WHERE.items():
        path = next((os.path.join(src, p) for p in places
                     if os.path.lexists(os.path.join(src, p))), None)
        if path is None:
            continue
        rel = os.path.relpath(path, src)
        link = link_on_the_way(src, rel)
        if link is not None:
            sub.problems.append(f"{rel} is a link: not followed, not marked" if link == rel
                                else f"{rel} lies behind the link {link}: not marked")
            continue
        data = plain_file(path, LIMITS[member])
        if isinstance(data, str):
            sub.problems.append(f"{rel} is {data}: not marked")
            continue
        with open(os.path.join(dst, member), "wb") as f:
            f.write(data)


def skipped(name):
    """A zip member inside a .venv, __pycache__ or .git folder: a copy's, not an answer."""
    return any(part in SKIPPED for part in name.replace("\\", "/").split("/")[:-1])


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
            infos = [i for i in z.infolist() if not skipped(i.filename)]
            if len(infos) > PACK_MEMBERS:
                raise ValueError(f"{len(infos)} files besides .venv, __pycache__ and .git, "
                                 "more than any hand-in")
            links = [i.filename for i in infos if stat.S_ISLNK(i.external_attr >> 16)]
            if links:
                sub.problems.append(f"the pack holds {len(links)} link{'s' * (len(links) > 1)} ("
                                    + ", ".join(links[:3]) + "): not followed")
            read_manifest(z, infos, sub)
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


def read_manifest(z, infos, sub):
    """The pack's handin.json, if it has one at its top: who it was made for, and when."""
    from exercises.handin import MANIFEST
    info = next((i for i in infos if i.filename == MANIFEST and not i.is_dir()), None)
    if info is None or stat.S_ISLNK(info.external_attr >> 16) or info.flag_bits & 0x1:
        return
    try:
        with z.open(info) as f:
            m = json.loads(f.read(4096).decode("utf-8"))
        name, made = m.get("student"), m.get("made")
    except (ValueError, AttributeError, UnicodeDecodeError, zipfile.BadZipFile, zlib.error):
        return
    if isinstance(name, str) and len(name) <= MAX_NAME:
        sub.packed_for = roster.canonical(name)
    if isinstance(made, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", made):
        sub.made = made


def stage(top, entry, dst):
    """A Submission for one entry of SUBMISSIONS, its files copied into ``dst``; None for an
    entry that is no submission (a stray file). An entry that is a link is a row that says
    so: it is never followed."""
    src = os.path.join(top, entry)
    sub = Submission(entry, dst)
    os.makedirs(dst)
    mode = os.lstat(src).st_mode
    if stat.S_ISLNK(mode):
        sub.problems.append("the submission is a link: not followed, nothing marked")
    elif stat.S_ISDIR(mode):
        zips = [f for f in sorted(os.listdir(src)) if f.lower().endswith(".zip")]
        has_sheet = any(os.path.lexists(os.path.join(src, p)) for p in WHERE["sheet.py"])
        inside = [f for f in sorted(os.listdir(src)) if not f.startswith(".")
                  and stat.S_ISDIR(os.lstat(os.path.join(src, f)).st_mode)]
        if not has_sheet and len(zips) == 1:  # a platform's folder around the pack
            sub.inner = zips[0]
            from_zip(os.path.join(src, zips[0]), dst, sub)
        elif not has_sheet and not zips and len(inside) == 1:  # around the student's copy
            from_folder(os.path.join(src, inside[0]), dst, sub)
        else:
            from_folder(src, dst, sub)
    elif stat.S_ISREG(mode) and entry.lower().endswith(".zip"):
        from_zip(src, dst, sub)
    else:
        return None
    return sub


def letters(name):
    """A name as Canvas writes it in a download: lower case ASCII letters only."""
    plain = unicodedata.normalize("NFKD", roster.fold(name)).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z]", "", plain)


def platform_name(label, students):
    """(the platform, the roster name its download name gives) for a Moodle or Canvas
    download name (the module docstring says the forms), or None."""
    m = MOODLE.match(label)
    if m:
        found = roster.find(m.group(1).replace("_", " "), students or {})
        return ("Moodle", found or roster.canonical(m.group(1).replace("_", " ")))
    m = CANVAS.match(label)
    if m and students:
        key, found = m.group(1), []
        for n in students:
            parts = roster.fold(n).split(" ")
            if key in (letters(" ".join(parts[-1:] + parts[:-1])), letters(n)):
                found.append(n)
        if len(found) == 1:  # two roster names with the same letters: Canvas cannot say
            return ("Canvas", found[0])
    return None


def pack_file(label):
    """The file name a hand-in had before a platform prefixed it."""
    m = MOODLE.match(label) or CANVAS.match(label)
    return (m.groups()[-1] if m else label) or label


def read_name(sub, packs, students=None):
    """The sheet read as data, then whose work it is (the module docstring's order)."""
    path = os.path.join(sub.folder, "sheet.py")
    if os.path.isfile(path):
        try:
            sub.sheet = read_sheet(path)
        except SheetError as e:  # the message names the marker's copy: say the student's file
            sub.problems.append(str(e).replace(path, "sheet.py") + ": numbers and written "
                                "answers not marked; its code is")
            from exercises.handin import student_line
            sub.sheet_name = roster.canonical(student_line(path) or "")
    elif not any("sheet.py" in p or "the pack" in p or "submission is a link" in p
                 for p in sub.problems):
        sub.problems.append("no sheet.py: numbers and written answers not marked")
    written = roster.canonical(getattr(sub.sheet, "STUDENT", "") or "") or sub.sheet_name
    if len(written) > MAX_NAME:  # a pasted paragraph: kept short on every row and file
        sub.problems.append(f"STUDENT is {len(written)} characters long: cut to {MAX_NAME}")
        written = written[:MAX_NAME]
    sub.sheet_name = written
    identify(sub, packs, students)


def identify(sub, packs, students):
    """sub.name: the platform's name where it is on the roster, else the hand-in's, else
    what the entry is called; a name that disagrees is flagged."""
    file_name = packs.get(pack_file(sub.inner or sub.label))
    made_for = sub.packed_for or file_name or written_or_none(sub)
    platform = platform_name(sub.label, students) or (
        platform_name(sub.inner, students) if sub.inner else None)
    on = (lambda n: students is None or roster.find(n, students) is not None)
    if platform and on(platform[1]):  # the platform knows who uploaded it
        sub.name = platform[1]
    elif made_for and on(made_for):
        sub.name = made_for
    else:
        sub.name = made_for or (platform[1] if platform else "") or roster.canonical(
            pack_file(sub.label).rsplit(".zip", 1)[0])
        if not written_or_none(sub) and sub.sheet is not None:
            sub.problems.append(f"STUDENT is empty: named after its file, {sub.label!r}")
    others = {f"its sheet names {sub.sheet_name!r}": sub.sheet_name,
              f"its {platform[0]} download names {platform[1]!r}" if platform else "": (
                  platform[1] if platform else ""),
              f"its pack was made for {made_for!r}": made_for}
    differ = [what for what, n in others.items() if n and roster.fold(n) != roster.fold(sub.name)]
    if differ:
        sub.problems.append(f"marked as {sub.name!r}, but " + " and ".join(differ)
                            + ": check whose work it is")


def written_or_none(sub):
    return sub.sheet_name or None


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
        read_name(sub, packs, students)
        on_roster(sub, students)
        subs.append(sub)
    seen = {}
    for sub in subs:
        seen.setdefault(roster.fold(sub.name), []).append(sub)
    for key, same in seen.items():
        if len(same) < 2:
            continue
        times = [s.made for s in same]
        if all(times) and len(set(times)) == len(times):  # each says when: the latest counts
            same.sort(key=lambda s: s.made)
            latest = same[-1]
            latest.problems.append("the latest of " + str(len(same)) + " hand-ins (made "
                                   f"{latest.made}); not marked: " + ", ".join(
                                       f"{s.label} (made {s.made})" for s in same[:-1]))
            for s in same[:-1]:
                subs.remove(s)
            seen[key] = [latest]
            continue
        labels = ", ".join(s.label for s in same)
        for s in same:
            s.problems.append(f"{len(same)} submissions name this student ({labels}), not "
                              "each with the time it was made: each has its own row")
    missing = [n for n in students or () if roster.fold(n) not in seen]
    for sub in subs:
        if sub.problems:
            warnings.append(f"{sub.label}: " + "; ".join(sub.problems))
    warnings += [f"nothing handed in by {n!r}" for n in missing]
    return subs, missing, warnings
