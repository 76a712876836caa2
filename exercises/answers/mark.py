"""Teacher's marking of a folder of submissions: every number and every implemented
function of every student, right or wrong, in one table.

    python -m exercises.answers.mark SUBMISSIONS [--timeout=120]

SUBMISSIONS holds one folder per student with their ``sheet.py`` and whichever of
``loss.py``, ``batching.py`` and ``ex6_buggy_loss.py`` they edited. For each
student:

* the numbers of exercises 1, 4 and 7 are marked one by one from the sheet, read as
  data (exercises/answers/key.py's rule: one unit of the third significant digit);
* their code is copied over a fresh student copy of the last commit, and
  ``python -m exercises.check ex2 ex3 ex5 ex6`` runs there in a subprocess with a
  time limit, never in this process: a student's code cannot touch the teacher's
  files or stall the marking;
* the written answers are listed as present or missing (they are yours to read).

Prints a Markdown table (one row per student: numbers right, properties that hold),
then every failing property with its one-line reason.
"""

import os
import shutil
import subprocess
import sys
import tempfile

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.answers.mark\n")
    sys.exit(2)
from exercises.answers.key import marks
from exercises.problems import SheetError, read_sheet

CODE = {"loss.py": "loss.py", "batching.py": "batching.py",
        "ex6_buggy_loss.py": "exercises/ex6_buggy_loss.py"}
CODE_EXERCISES = ("ex2", "ex3", "ex5", "ex6")
WRITTEN = ("EX1_WHY", "EX3_WHY", "EX4_WHY", "EX6_WHY", "EX7_WHY")


class MarkError(Exception):
    """Bad input to the marking tool: one line, exit 2."""


def base_copy(where):
    """A student copy of the last commit (no roster: numbers are marked here)."""
    out = os.path.join(where, "base")
    p = subprocess.run([sys.executable, "-m", "exercises.handout", out, "--allow_dirty"],
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                           os.path.abspath(__file__)))), capture_output=True, text=True)
    if p.returncode:
        raise MarkError(f"could not build the student copy: {p.stderr.strip()}")
    return out


def run_checks(base, folder, timeout):
    """[(exercise, property, None or why)] of the student's code, run in a fresh copy."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "copy")
        shutil.copytree(base, copy)
        for name, dst in CODE.items():
            if os.path.isfile(os.path.join(folder, name)):
                shutil.copyfile(os.path.join(folder, name), os.path.join(copy, dst))
        shutil.copyfile(os.path.join(folder, "sheet.py"),
                        os.path.join(copy, "exercises", "sheet.py"))
        try:
            p = subprocess.run([sys.executable, "-m", "exercises.check", *CODE_EXERCISES],
                               cwd=copy, capture_output=True, text=True, timeout=timeout,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
        except subprocess.TimeoutExpired:
            return [(ex, "the checks", f"stopped after {timeout} s") for ex in CODE_EXERCISES]
    out = []
    for line in p.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] in CODE_EXERCISES and parts[1] in ("ok", "FAIL"):
            what, _, why = parts[2].partition(": ")
            out.append((parts[0], what, None if parts[1] == "ok" else why or "fails"))
    if not out:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        out = [(ex, "the checks", f"did not run: {tail}") for ex in CODE_EXERCISES]
    return out


def mark_one(base, folder, timeout):
    """(name, number marks, check results, written answers present) of one submission."""
    sheet = read_sheet(os.path.join(folder, "sheet.py"))
    name = str(getattr(sheet, "STUDENT", "")).strip() or os.path.basename(folder)
    numbers = marks(name, sheet)
    checks = [(ex, what, why) for ex, what, why in run_checks(base, folder, timeout)
              if what != "written answer (read by your teacher)"]
    written = {w: len(str(getattr(sheet, w, "") or "").split()) >= 20 for w in WRITTEN}
    return name, numbers, checks, written


def table(rows):
    head = ["student", "EX1", "EX4", "EX7", *CODE_EXERCISES, "written"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, numbers, checks, written in rows:
        cells = [name]
        for ex in ("EX1", "EX4", "EX7"):
            got = [ok for e, _, _, ok in numbers if e == ex]
            cells.append(f"{sum(got)}/{len(got)}")
        for ex in CODE_EXERCISES:
            got = [why is None for e, _, why in checks if e == ex]
            cells.append(f"{sum(got)}/{len(got)}")
        cells.append(f"{sum(written.values())}/{len(written)}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv):
    timeout, folders = 120, []
    try:
        for a in argv:
            if a.startswith("--timeout="):
                try:
                    timeout = int(a.split("=", 1)[1])
                except ValueError:
                    raise MarkError(f"--timeout takes seconds, got {a.split('=', 1)[1]!r}") \
                        from None
                if timeout < 1:
                    raise MarkError(f"--timeout must be at least 1, got {timeout}")
            elif a.startswith("-"):
                raise MarkError(f"unknown flag {a!r}")
            else:
                folders.append(a)
        if len(folders) != 1 or not os.path.isdir(folders[0]):
            raise MarkError("usage: python -m exercises.answers.mark SUBMISSIONS [--timeout=S] "
                            "(a folder with one folder per student)")
        subs = sorted(os.path.join(folders[0], d) for d in os.listdir(folders[0])
                      if os.path.isdir(os.path.join(folders[0], d)))
        missing = [s for s in subs if not os.path.isfile(os.path.join(s, "sheet.py"))]
        if not subs or missing:
            raise MarkError(f"{missing[0] if missing else folders[0]}: no sheet.py" if missing
                            else f"{folders[0]} holds no student folder")
        for s in subs:  # every sheet must read as data before anything runs
            read_sheet(os.path.join(s, "sheet.py"))
    except (MarkError, SheetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        try:
            base = base_copy(tmp)
        except MarkError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        rows = [mark_one(base, s, timeout) for s in subs]
    print(table(rows))
    for name, numbers, checks, written in rows:
        bad = [f"{ex} {k} = {got}" for ex, k, got, ok in numbers if not ok]
        bad += [f"{ex} {what}: {why}" for ex, what, why in checks if why is not None]
        bad += [f"{w} missing" for w, ok in written.items() if not ok]
        if bad:
            print(f"\n{name}:\n" + "\n".join(f"  {b}" for b in bad))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
