"""Finish a class's gradebook: the written marks the teacher entered, the totals, and the
files a school's system imports; and one student re-marked into it.

    python -m exercises.answers.grades MARKS [--roster=roster.csv] [--title=NAME]
    python -m exercises.answers.grades MARKS --replace=REMARKED

MARKS is the folder the marker wrote (mark.py). Enter each written answer's points in
its column of MARKS/gradebook.csv ("EX1_WHY (of 3, yours to mark)" ...), then run this.
Every mark is checked first (a number from 0 to the question's points, or blank); a bad
one is refused in one line, naming its student and column, and nothing is written.

It writes into MARKS, each file whole or not at all:

* ``totals.csv``: student, id, email, the tool's points (of 28), the written points (of
  16) and the total (of 44), blank until every written answer of that row has a mark;
* ``canvas.csv``: a Canvas gradebook import. Header: Student, ID, SIS User ID, SIS Login
  ID, Section, then one column named ``--title`` (default "Token gradient cancellation")
  holding the total. Canvas finds each student by one of Student, ID or SIS User ID: here
  SIS User ID is the roster's id and SIS Login ID its email; ID and Section stay blank;
* ``moodle.csv``: a Moodle "Import grades from CSV" file. Header: ID number, Email
  address, Student, then the ``--title`` column. At import, map "ID number" (or "Email
  address") to the user field of the same name, and the title column to the grade item.

The id and email come from ``--roster=roster.csv``, the handout's roster as a table (a
header row: name, and optionally id and email), or else from gradebook.csv's own id and
email columns (the marker writes them when its roster was such a table).

``--replace=REMARKED``: REMARKED is the marker's folder for a few students marked again
(say, one submission fixed after a fault of its own). Each of its rows replaces that
student's row in MARKS/gradebook.csv, keeping the written marks already entered there; a
student new to MARKS is added. Then the files above are written again.
"""

import csv
import io
import os
import sys
import tempfile

if __name__ == "__main__":  # Ctrl-C at any moment, during the imports too: one line
    import signal
    signal.signal(signal.SIGINT, lambda *_: (sys.stderr.write("\ninterrupted\n"), os._exit(130)))
from exercises import handout, roster  # noqa: E402
from exercises.answers.gradebook import MARKED, WRITTEN_POINTS  # noqa: E402

TOOL = f"marked by the tool (of {MARKED})"
WRITTEN = {q: f"{q} (of {n}, yours to mark)" for q, n in WRITTEN_POINTS.items()}
ALL = MARKED + sum(WRITTEN_POINTS.values())


class GradesError(Exception):
    """A gradebook or a mark that cannot be used: one line, exit 2."""


def read_book(folder):
    """(header, rows) of folder/gradebook.csv, as the marker wrote it and a teacher edited."""
    path = os.path.join(folder, "gradebook.csv")
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.DictReader(f))
            head = list(rows[0].keys()) if rows else []
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise GradesError(f"{path}: not a readable gradebook ({type(e).__name__})") from None
    missing = [c for c in ["student", TOOL, *WRITTEN.values()] if c not in head]
    if not rows or missing:
        raise GradesError(f"{path}: not the marker's gradebook (no column {missing[0]!r})"
                          if missing else f"{path} has no rows")
    return head, rows


def written_points(row):
    """{question: points or None} of one row; GradesError for a mark that is not one."""
    out = {}
    for q, col in WRITTEN.items():
        text = (row.get(col) or "").strip()
        if not text:
            out[q] = None
            continue
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not 0 <= value <= WRITTEN_POINTS[q]:
            raise GradesError(f"{row['student']!r}, column {col!r}: {text[:20]!r} is not a mark "
                              f"from 0 to {WRITTEN_POINTS[q]}; correct it in gradebook.csv")
        out[q] = value
    return out


def totals(rows, ids):
    """[(student, id, email, tool, written, total)]: the total only when the tool marked
    the row and every written answer has a mark."""
    out = []
    for r in rows:
        w = written_points(r)
        tool = r[TOOL].strip()
        tool = float(tool) if tool.replace(".", "", 1).isdigit() else None
        written = sum(w.values()) if None not in w.values() else None
        who = ids.get(roster.fold(r["student"])) or r  # else the gradebook's own columns
        total = tool + written if tool is not None and written is not None else None
        out.append((r["student"], who.get("id", ""), who.get("email", ""), tool, written, total))
    return out


def number(x):
    return "" if x is None else (int(x) if float(x).is_integer() else x)


def files(rows, ids, title):
    """{file name: text} of totals.csv, canvas.csv and moodle.csv."""
    t = totals(rows, ids)
    out = {}
    for name, head, line in (
            ("totals.csv", ["student", "id", "email", TOOL,
                            f"written (of {sum(WRITTEN_POINTS.values())})", f"total (of {ALL})"],
             lambda s, i, e, a, b, c: [s, i, e, number(a), number(b), number(c)]),
            ("canvas.csv", ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", title],
             lambda s, i, e, a, b, c: [s, "", i, e, "", number(c)]),
            ("moodle.csv", ["ID number", "Email address", "Student", title],
             lambda s, i, e, a, b, c: [i, e, s, number(c)])):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\r\n")
        w.writerow(head)
        for row in t:
            w.writerow(line(*row))
        out[name] = buf.getvalue()
    return out


def replace(head, rows, new_rows):
    """rows with each of ``new_rows`` in its student's place (written marks kept), and the
    names replaced and added."""
    at = {roster.fold(r["student"]): i for i, r in enumerate(rows)}
    replaced, added = [], []
    for n in new_rows:
        key = roster.fold(n["student"])
        merged = {c: n.get(c, "") for c in head}
        if key in at:
            old = rows[at[key]]
            for col in WRITTEN.values():
                merged[col] = (n.get(col) or "").strip() or old.get(col, "")
            rows[at[key]] = merged
            replaced.append(n["student"])
        else:
            rows.append(merged)
            added.append(n["student"])
    return rows, replaced, added


def book_text(head, rows):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=head, lineterminator="\r\n", extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_all(folder, texts):
    """Each file beside its name, then renamed into place."""
    for name, (encoding, text) in texts.items():
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".partial")
        with os.fdopen(fd, "w", encoding=encoding, newline="") as f:
            f.write(text)
        os.replace(tmp, os.path.join(folder, name))


def parse(argv):
    opts, folders = {"roster": None, "title": "Token gradient cancellation", "replace": None}, []
    for a in argv:
        key, _, value = a.partition("=")
        if key in ("--roster", "--title", "--replace") and value:
            if opts[key[2:]] not in (None, "Token gradient cancellation"):
                raise GradesError(f"{key} is given twice; give it once")
            opts[key[2:]] = value
        elif a.startswith("-"):
            raise GradesError(f"unknown flag {a!r}; usage: python -m exercises.answers.grades "
                              "MARKS [--roster=roster.csv] [--title=NAME] [--replace=REMARKED]")
        else:
            folders.append(a)
    if len(folders) != 1 or not os.path.isdir(folders[0]):
        raise GradesError("usage: python -m exercises.answers.grades MARKS (the marker's folder)")
    return folders[0], opts


def main(argv):
    if argv in (["--help"], ["-h"]):
        print(__doc__.strip())
        return 0
    try:
        folder, opts = parse(argv)
        head, rows = read_book(folder)
        texts, said = {}, []
        if opts["replace"]:
            new_head, new_rows = read_book(opts["replace"])
            rows, replaced, added = replace(head, rows, new_rows)
            texts["gradebook.csv"] = ("utf-8-sig", book_text(head, rows))
            said.append(f"replaced {len(replaced)} rows" + (f" ({', '.join(replaced)})"
                                                             if replaced else "")
                        + (f", added {len(added)} ({', '.join(added)})" if added else ""))
        ids = {}
        if opts["roster"]:
            with open(opts["roster"], encoding="utf-8-sig") as f:
                ids = {roster.fold(r["name"]): r for r in handout.roster_rows(opts["roster"],
                                                                             f.read())}
        texts.update({n: ("utf-8", t) for n, t in files(rows, ids, opts["title"]).items()})
    except (GradesError, handout.HandoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot read the roster: {e.strerror}", file=sys.stderr)
        return 2
    write_all(folder, texts)
    done = sum(1 for *_, total in totals(rows, ids) if total is not None)
    print(f"wrote {', '.join(texts)} in {folder}: {done} of {len(rows)} students have a total "
          f"(of {ALL})" + "".join(f"; {s}" for s in said))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
