"""Gradescope: the class marked where many teachers already grade. One command builds the
autograder zip; inside Gradescope its run_autograder marks each submission with the local
marker's own code (mark.py, collect.py, key.py) and writes Gradescope's results.json.

    python -m exercises.answers.gradescope autograder.zip --roster=names.txt   # build it
    python -m exercises.answers.gradescope --run --root=DIR    # what run_autograder runs
    python -m exercises.answers.gradescope --self_test         # what setup.sh runs last

Gradescope's autograder specification (gradescope-autograders.readthedocs.io, "Autograder
Specifications" and "Submission Metadata"), as followed here:

* the zip holds setup.sh and run_autograder at its root; Gradescope unpacks it into
  /autograder/source, runs setup.sh once as root to build the image, and for each
  submission runs run_autograder in /autograder, with the student's files in
  /autograder/submission and /autograder/submission_metadata.json beside them;
* run_autograder writes /autograder/results/results.json: here a top-level "output" (whom
  it marked: the name, and the metadata's id and email; then the row's notes) and
  "tests", each test with "score", "max_score", "name", "output", "visibility" and
  "status" ("passed" or "failed"); the spec's other fields are optional and unused;
* the student is whoever the metadata's "users" names (Gradescope owns identity,
  deadlines and late work): the sheet's STUDENT only adds a note where it differs.

The zip: setup.sh, run_autograder, roster.json (each roster student's draws, as the
handout drew them: the copy's tables) and repo/ (the last commit, which setup.sh makes a
git repository of one commit, so that the marker reads it as it reads this one). One test
per exercise carries EXERCISES.md's points, the named mistake and the hint in its output;
a last test holds the written answers for the teacher (0 of 0 here: they are scored by hand
in Gradescope, 16 points, EXERCISES.md says how). Student code runs in the project's
sandbox where the container allows it, else with the container as its isolation
(sandbox.use_container): an unused uid that cannot read /autograder/source.
"""

import io
import json
import os
import sys
import tempfile
import zipfile

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m "
                     "exercises.answers.gradescope\n")
    sys.exit(2)
if __name__ == "__main__":  # Ctrl-C at any moment, during the imports too: one line
    import signal
    signal.signal(signal.SIGINT, lambda *_: (sys.stderr.write("\ninterrupted\n"), os._exit(130)))
from exercises import handout, roster  # noqa: E402
from exercises.answers import collect, gradebook, mark, sandbox  # noqa: E402

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
set -euo pipefail
apt-get update
apt-get install -y python3 python3-venv git util-linux
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install -r /autograder/source/repo/requirements.txt \\
    --extra-index-url https://download.pytorch.org/whl/cpu
sh /autograder/source/repo_commit.sh /autograder/source/repo
chmod -R go-rwx /autograder/source  # student code runs as another user: no key for it
# known-good code marked here, once: an image that cannot mark fails to build, in words
cd /autograder/source/repo && /autograder/venv/bin/python -m exercises.answers.gradescope \
    --self_test
"""
REPO_COMMIT = """# The marker reads the last commit (git archive HEAD): the snapshot becomes one.
set -e
cd "$1"
git init -q
git add -A
git -c user.name=autograder -c user.email=autograder@localhost commit -qm snapshot
"""
RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission. AUTOGRADER_ROOT stands for /autograder in a
# rehearsal on the teacher's machine; AUTOGRADER_PYTHON for the image's Python.
root="${AUTOGRADER_ROOT:-/autograder}"
python="${AUTOGRADER_PYTHON:-/autograder/venv/bin/python}"
cd "$root/source/repo" && exec "$python" -m exercises.answers.gradescope --run --root="$root"
"""
NAMES = {"ex1": "Exercise 1: grpo by hand", "ex2": "Exercise 2: Adv-Orthogonal",
         "ex3": "Exercise 3: Min-Replace", "ex4": "Exercise 4: off-policy by hand",
         "ex5": "Exercise 5: the scheduler", "ex6": "Exercise 6: the bug in a DFPO loss",
         "ex7": "Exercise 7: a scratchpad and the token mix"}
OPTS = {"timeout": 120, "jobs": 2, "memory": 3072, "self_test": False}
USAGE = ("usage: python -m exercises.answers.gradescope OUT.zip [--roster=FILE] | "
         "--run [--root=DIR]")


class GradescopeError(Exception):
    """Bad input: one line, exit 2."""


# ----------------------------------------------------------------------------- building

def build(out, students):
    """Write the autograder zip ``out`` (new) for ``students`` ({name: draws}; {}: no
    roster, then every student is marked on the tables a copy without a roster shows)."""
    files = {rel: data for rel, (data, _) in handout.committed_files().items()
             if not rel.startswith("results/")}
    tmp = out + ".partial"
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for name, text, mode in (("setup.sh", SETUP, 0o755), ("run_autograder", RUN, 0o755),
                                     ("repo_commit.sh", REPO_COMMIT, 0o644)):
                info = zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0))
                info.external_attr = (0o100000 | mode) << 16
                z.writestr(info, text, zipfile.ZIP_DEFLATED)
            z.writestr("roster.json", handout.roster_json(students))
            for rel, data in sorted(files.items()):
                z.writestr(f"repo/{rel}", data)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return len(students), len(files)


def draws_of(path):
    """{name: draws}: the copy's own exercises/roster.json as it is, or a names.txt (or
    .csv) roster drawn as the handout draws it from the last commit."""
    if path.endswith(".json"):
        try:
            r = roster.load(path)
        except roster.RosterError as e:
            raise GradescopeError(f"--roster={path}: {e}") from None
        if r is None:
            raise GradescopeError(f"--roster={path}: no such file")
        return dict(r["students"])
    return handout.class_draws(handout.read_roster(path)[0])


# ----------------------------------------------------------------------------- marking

def identity(root):
    """(name, {"email": ..., "id": ...}) of the submitter, from submission_metadata.json."""
    path = os.path.join(root, "submission_metadata.json")
    try:
        with open(path, encoding="utf-8") as f:
            users = json.load(f)["users"]
        user = users[0]
        name = roster.canonical(user["name"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise GradescopeError(f"{path}: no submitter's name ({type(e).__name__})") from None
    if not name:
        raise GradescopeError(f"{path}: the submitter's name is empty")
    return name, {k: user.get(k) for k in ("email", "id")}


def mark_one(root, work):
    """The local marker's row for /autograder/submission, as the metadata's student."""
    name, meta = identity(root)
    with open(os.path.join(root, "source", "roster.json"), encoding="utf-8") as f:
        students = json.load(f)["students"]
    sub = collect.stage(root, "submission", os.path.join(work, "sub"))
    if sub is None:
        raise GradescopeError(f"{root}/submission is not a folder")
    collect.read_name(sub, {}, None)
    found = roster.find(name, students)
    if sub.sheet_name and roster.fold(sub.sheet_name) != roster.fold(name):
        sub.problems.append(f"the sheet's STUDENT is {sub.sheet_name!r}: marked as "
                            f"Gradescope's {name!r}")
    sub.name, sub.on_roster = found or name, found is not None
    sheet = roster.find(sub.sheet_name, students) if sub.sheet_name else None
    sub.tables = students[found or sheet] if found or sheet else dict(collect.DRAW_0)
    if not found:  # the copy showed the sheet's STUDENT its tables: those are marked
        sub.problems.append(f"Gradescope's {name!r} is not on the autograder's roster: numbers "
                            "marked on the tables " + (f"of the sheet's {sheet!r}" if sheet else
                                                       "a copy shows a name not on its roster"))
    isolate()
    opts = dict(OPTS, staged=work)
    row = mark.mark_all([sub], [], opts, os.path.join(root, "submission"))[0]
    # the platform's id and email of the submitter, so that its row names whom it marked
    row.update({k: str(v) for k, v in meta.items() if v not in (None, "")})
    return row


def isolate():
    """The project's sandbox where this container allows it, else the container itself."""
    try:
        sandbox.mode()
    except sandbox.SandboxError:  # Gradescope's container: it is the isolation
        sandbox.use_container()


def self_test():
    """mark.py's self-test, once, when Gradescope builds the image (setup.sh): known-good
    code marked with the run's limits. Then each submission is spared it."""
    from concurrent.futures import ThreadPoolExecutor
    isolate()
    with tempfile.TemporaryDirectory(prefix="gradescope-") as work:
        base = mark.base_copy(os.path.join(work, "base"))
        with ThreadPoolExecutor(max_workers=OPTS["jobs"]) as pool:
            seconds = mark.self_test(base, work, dict(OPTS, staged=work),
                                     [mark.ROOT, work], pool)
    return seconds


def results(row):
    """Gradescope's results.json for one row (gradebook.points: the local marker's)."""
    points, tests = gradebook.points(row), []
    lines = gradebook.details(row, {})
    for ex, p in gradebook.POINTS.items():
        full = p.get("numbers", 0) + p.get("code", 0)
        if not full:
            continue
        got = 0 if points is None else points[ex]
        said = [x for x in lines if x.startswith((f"{ex} ", f"{ex}:", f"{ex.upper()} "))]
        if ex in row["checks"]:
            said += [f"{'ok  ' if why is None else 'FAIL'} {what}" + (f": {why}" if why else "")
                     for what, why in row["checks"][ex]]
        tests.append({"name": NAMES[ex], "score": float(got), "max_score": float(full),
                      "status": "passed" if got == full else "failed",
                      "output": "\n".join(said) or "all right", "visibility": "visible"})
    answers = "\n\n".join(f"{q} ({n} points):\n{row['answers'].get(q, '') or '(empty)'}"
                          for q, n in gradebook.WRITTEN_POINTS.items())
    tests.append({"name": f"Written answers ({sum(gradebook.WRITTEN_POINTS.values())} points, "
                          "scored by your teacher)", "score": 0.0, "max_score": 0.0,
                  "status": "passed", "output": answers, "visibility": "visible"})
    notes = "; ".join(row["notes"])
    head = f"marked as {gradebook.who(row)}"
    return {"output": head + (f": {notes}" if notes else ""), "tests": tests,
            "visibility": "visible",
            "stdout_visibility": "hidden"}


def run(root):
    """Mark the submission under ``root`` and write root/results/results.json atomically."""
    out = os.path.join(root, "results")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gradescope-") as work:
        row = mark_one(root, work)
    text = json.dumps(results(row), indent=1, ensure_ascii=False)
    fd, tmp = tempfile.mkstemp(dir=out, suffix=".partial")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, os.path.join(out, "results.json"))
    return row


# ----------------------------------------------------------------------------- the command

def main(argv):
    if argv in (["--help"], ["-h"]):
        print(__doc__.strip())
        return 0
    try:
        keys = [a.split("=", 1)[0] for a in argv]
        if len(set(keys)) < len(keys):
            raise GradescopeError("a flag is given twice; give it once")
        if argv == ["--self_test"]:
            print(f"self-test passed: known-good code marked in {self_test():.0f} s "
                  f"({sandbox.mode()} mode)")
            return 0
        if argv and argv[0] == "--run":
            roots = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--root=")]
            if len(argv) - 1 != len(roots) or not os.path.isdir((roots or ["/autograder"])[0]):
                raise GradescopeError(USAGE)
            row = run((roots or ["/autograder"])[0])
            print(gradebook.screen([row]))
            return 0
        outs = [a for a in argv if not a.startswith("--")]
        rost = [a.split("=", 1)[1] for a in argv if a.startswith("--roster=")]
        if len(outs) != 1 or len(outs) + len(rost) != len(argv) or not outs[0].endswith(".zip"):
            raise GradescopeError(USAGE)
        if os.path.exists(outs[0]) or not os.path.isdir(os.path.dirname(os.path.abspath(
                outs[0]))):
            raise GradescopeError(f"{outs[0]} exists, or its folder does not; name a new file")
        n, files = build(outs[0], draws_of(rost[0]) if rost else {})
    except (GradescopeError, handout.HandoutError, mark.MarkError, sandbox.SandboxError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {outs[0]}: setup.sh, run_autograder, the last commit ({files} files) and "
          f"the draws of {n} students; upload it as the assignment's autograder")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sandbox.kill_all()
        print("error: interrupted", file=sys.stderr)
        os._exit(130)
