"""Teacher's key: the numbers of exercises 1, 4 and 7 for one student.

    python -m exercises.answers.key "Ada Lovelace"      # print the key
    python -m exercises.answers.key "Ada Lovelace" path/to/their/sheet.py   # mark a sheet

The numbers come from exercises/answers/truth.py. Marking says, number by number, which
are right (one unit of the third significant digit either way; counts exactly) and, for a
wrong number that a catalogued mistake gives (mistakes.py), a hint that names the idea
without a value: a line you can pass on to the student. The written answers are yours to
grade: exercises/answers/README.md has a rubric for each.
"""

import os
import sys
import types

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.answers.key\n")
    sys.exit(2)
if __name__ == "__main__":  # Ctrl-C at any moment, during the imports too: one line
    import signal
    signal.signal(signal.SIGINT, lambda *_: (sys.stderr.write("\ninterrupted\n"), os._exit(130)))
from exercises import handout
from exercises.answers import mistakes
from exercises.answers.truth import key, pick_tables, right
from exercises.problems import SheetError, read_sheet
from exercises.roster import canonical


def filled_sheet(name, prose="an answer " * 10, tables=None):
    """A sheet with the right numbers (rounded to 3 significant digits) on ``tables`` (the
    first well-drawn ones unless given) and placeholder prose."""
    sheet = types.SimpleNamespace(STUDENT=name)
    for ex, values in key(name, tables).items():
        setattr(sheet, ex, {k: (v if isinstance(v, int) else float(f"{v:.3g}"))
                            for k, v in values.items()})
    for n in (1, 3, 4, 6, 7):
        setattr(sheet, f"EX{n}_WHY", prose)
    return sheet


def hint(name, ex, tables, truth, number, got):
    """The hint of the first catalogued mistake whose value the student's number matches."""
    wrong = mistakes.wrong_numbers(name, ex, tables[ex], truth).get(number, [])
    return next((h for h, v in wrong if right(got, v, number)), None)


def marks(name, sheet, tables=None):
    """[(exercise, number, the sheet's value, right or not, hint or None)] for one sheet."""
    tables = tables or pick_tables(name)
    out = []
    for ex, values in key(name, tables).items():
        given = getattr(sheet, ex, None)
        given = given if isinstance(given, dict) else {}
        for k, v in values.items():
            got = given.get(k)
            ok = right(got, v, k)
            out.append((ex, k, got, ok, None if ok or got is None
                        else hint(name, ex, tables, values, k, got)))
    return out


HELP = """usage: python -m exercises.answers.key STUDENT [SHEET.py]

Print one student's numbers for exercises 1, 4 and 7, on the tables a copy of the
last commit gives them; with SHEET.py, mark that sheet number by number.
"""


def main(argv):
    if argv in (["--help"], ["-h"]):
        print(HELP, end="")
        return 0
    if not argv or len(argv) > 2 or any(a.startswith("-") for a in argv):
        print("error: usage: python -m exercises.answers.key STUDENT [SHEET.py]", file=sys.stderr)
        return 2
    name = canonical(argv[0])
    if not name:
        print("error: STUDENT is empty", file=sys.stderr)
        return 2
    if len(argv) == 2 and not os.path.isfile(argv[1]):
        print(f"error: no sheet at {argv[1]}", file=sys.stderr)
        return 2
    try:  # read as data: a student's sheet never runs on the teacher's machine
        sheet = read_sheet(argv[1]) if len(argv) == 2 else None
        tables = handout.class_draws([name])[name]  # as the handout drew them for the copy
    except (SheetError, handout.HandoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    truth = key(name, tables)
    if sheet is None:
        for ex, values in truth.items():
            print(ex, "  ".join(f"{k} = {v:.4g}" for k, v in values.items()))
        return 0
    if canonical(getattr(sheet, "STUDENT", "") or "") != name:
        print(f"note: the sheet says STUDENT = {getattr(sheet, 'STUDENT', '')!r}", file=sys.stderr)
    wrong = 0
    for ex, k, got, ok, h in marks(name, sheet, tables):
        print(f"{ex}  {'ok   ' if ok else 'WRONG'}  {k} = {shown(got)}  (key {truth[ex][k]:.4g})"
              + (f"  hint: {h}" if h else ""))
        wrong += not ok
    return 1 if wrong else 0  # 0 only when every number is right


def shown(got):
    """A sheet's value as a row prints it: an integer of 400 digits is cut, not spelt out."""
    text = repr(got) if not isinstance(got, int) or abs(got) < 10 ** 30 else (
        f"an integer of {len(str(abs(got)))} digits")
    return text if len(text) <= 60 else text[:57] + "..."


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the reader (head, less) stopped early: nothing is wrong
        os._exit(0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
