"""Teacher's key: the numbers of exercises 1, 4 and 7 for one student.

    python -m exercises.answers.key "Ada Lovelace"      # print the key
    python -m exercises.answers.key "Ada Lovelace" path/to/their/sheet.py   # mark a sheet

The numbers come from exercises/answers/truth.py (loss.py, toy_tasks.py, and a
least-squares projection for dfpo_orth's w~). Marking says, number by number, which
are right (one unit of the third significant digit either way); the student's own
check says only whether all of an exercise's numbers are. The written answers are
yours to grade: exercises/answers/README.md has a rubric for each.
"""

import os
import sys
import types

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.answers.key\n")
    sys.exit(2)
from exercises.answers.truth import key, right
from exercises.problems import SheetError, read_sheet


def filled_sheet(name, prose="an answer " * 10):
    """A sheet with the right numbers (rounded to 3 significant digits) and placeholder prose."""
    sheet = types.SimpleNamespace(STUDENT=name)
    for ex, values in key(name).items():
        setattr(sheet, ex, {k: float(f"{v:.3g}") for k, v in values.items()})
    for n in (1, 3, 4, 6, 7):
        setattr(sheet, f"EX{n}_WHY", prose)
    return sheet


def marks(name, sheet):
    """[(exercise, number, the sheet's value, right or not)] for one student's sheet."""
    out = []
    for ex, values in key(name).items():
        given = getattr(sheet, ex, None)
        given = given if isinstance(given, dict) else {}
        out += [(ex, k, given.get(k), right(given.get(k), v)) for k, v in values.items()]
    return out


def main(argv):
    if not argv or len(argv) > 2:
        print("error: usage: python -m exercises.answers.key STUDENT [SHEET.py]", file=sys.stderr)
        return 2
    if len(argv) == 1:
        for ex, values in key(argv[0]).items():
            print(ex, "  ".join(f"{k} = {v:.4g}" for k, v in values.items()))
        return 0
    if not os.path.isfile(argv[1]):
        print(f"error: no sheet at {argv[1]}", file=sys.stderr)
        return 2
    try:  # read as data: a student's sheet never runs on the teacher's machine
        sheet = read_sheet(argv[1])
    except SheetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if str(getattr(sheet, "STUDENT", "")).strip() != argv[0].strip():
        print(f"note: the sheet says STUDENT = {getattr(sheet, 'STUDENT', '')!r}", file=sys.stderr)
    truth, wrong = key(argv[0]), 0
    for ex, k, got, ok in marks(argv[0], sheet):
        print(f"{ex}  {'ok   ' if ok else 'WRONG'}  {k} = {got}  (key {truth[ex][k]:.4g})")
        wrong += not ok
    return 1 if wrong else 0  # as the student's check: 0 only when every number is right


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
