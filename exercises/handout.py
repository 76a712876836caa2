"""Build the student copy of this repository: no answers, no teacher notes, no key.

    python -m exercises.handout OUT_DIR --roster=names.txt   # one name per line
    python -m exercises.handout OUT_DIR                      # numbers not checkable

The copy is the last commit (``git archive HEAD``), never the working tree: a key
printout, a solved exercise or a notes folder left lying in the teacher's checkout
cannot leak into it. Uncommitted changes or untracked files under exercises/ are
refused (they would be silently missing) unless ``--allow_dirty``. OUT_DIR must not
exist or be empty. Left out: the teacher's files, exercises/answers/ (the key, the
rubrics, the fixed loss of exercise 6), this builder and tests/test_exercises.py (the
tests of the catalogue of wrong work), and the lab report's data under results/ (a one-paragraph
results/README.md says where it is). The library functions that exercises ask
students to write keep their signature and docstring; their bodies become
``raise NotImplementedError("exercise N: ...")``. Everything that calls them still
imports.

With ``--roster``, exercises/roster.json holds each listed student's fingerprints
(exercises/roster.py), so that ``python -m exercises.check`` can tell a student
whether their numbers are right without holding them. In the copy,
``python -m pytest -q tests/test_loss.py tests/test_batching.py`` passes, skipping
each test that needs an unsolved exercise (tests/conftest.py), and
``python -m exercises.check`` fails cleanly until the exercises are solved.
"""

import ast
import io
import json
import os
import subprocess
import sys
import tarfile

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.handout\n")
    sys.exit(2)
from exercises import roster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEACHER_ONLY = (
    "exercises/answers/",
    "exercises/handout.py",
    "tests/test_exercises.py",
)  # the key and its tools, the rubrics, the wrong-work catalogue, this builder
LEFT_OUT = TEACHER_ONLY + ("results/",)
STUBS = {"loss.py": {"adv_orthogonal": "ex2", "min_replace": "ex3"},
         "batching.py": {"query_balanced": "ex5"}}
RESULTS_NOTE = """# Results

The lab report and its data are not part of the student copy. They are in the
project's own repository, under `results/`.
"""


class HandoutError(Exception):
    """A handout that cannot be built as asked: one line, exit 2."""


def git(*args):
    """git's stdout (bytes) in ROOT; HandoutError when git fails."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise HandoutError(f"git {args[0]} failed here ({type(e).__name__}); the handout is built "
                           "from a git checkout's last commit") from None


def committed_files():
    """{path: (bytes, mode)} of the last commit, as ``git archive HEAD`` gives them."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(git("archive", "--format=tar", "HEAD"))) as tar:
        for m in tar.getmembers():
            if m.isfile():
                out[m.name] = (tar.extractfile(m).read(), m.mode)
    return out


def stub(source, functions, module):
    """source with each named function's body, after its docstring, replaced by a raise."""
    lines = source.splitlines(keepends=True)
    nodes = [
        n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in functions
    ]
    missing = set(functions) - {n.name for n in nodes}
    if missing:
        raise HandoutError(f"{module} has no function {sorted(missing)[0]} to stub")
    for node in sorted(
        nodes, key=lambda n: -n.lineno
    ):  # bottom up: earlier line numbers stay valid
        doc = node.body[0]
        has_doc = isinstance(doc, ast.Expr) and isinstance(
            getattr(doc, "value", None), ast.Constant
        )
        first = (doc.end_lineno if has_doc else node.body[0].lineno - 1)  # keep lines up to here
        ex = functions[node.name]
        name = f"{module[:-3]}.{node.name}"
        raise_line = (
            f"    raise NotImplementedError(\"exercise {ex[2:]}: write {name} \"\n"
            "                              \"(EXERCISES.md; check: python -m exercises.check "
            f"{ex})\")\n"
        )
        lines[first:node.end_lineno] = [raise_line]
    return "".join(lines)


def check_clean():
    """Refuse uncommitted changes or untracked files under exercises/: the copy is the last
    commit, so they would be missing from it without a word."""
    dirty = git("status", "--porcelain", "--untracked-files=all", "--", "exercises").decode()
    if dirty.strip():
        first = dirty.strip().splitlines()[0][3:]
        raise HandoutError(f"exercises/ has uncommitted changes or untracked files ({first}, ...); "
                           "the copy is the last commit: commit them, or pass --allow_dirty")


def read_roster(path):
    """Names, one per line (blank lines skipped), each once."""
    try:
        with open(path, encoding="utf-8") as f:
            names = [roster.canonical(x) for x in f.read().splitlines() if x.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise HandoutError(f"--roster={path}: not a readable text file ({type(e).__name__})") \
            from None
    if not names:
        raise HandoutError(f"--roster={path} holds no name")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise HandoutError(f"--roster={path} names {twice[0]!r} twice; each student once")
    return names


def roster_json(names):
    """exercises/roster.json for these students (the teacher's key, fingerprinted)."""
    from exercises.answers.truth import key, pick_tables
    students = {}
    for n in names:
        tables = pick_tables(n)
        students[n] = roster.entry(n, key(n, tables), tables)
    return json.dumps({"iterations": roster.ITERATIONS, "students": students},
                      indent=1, ensure_ascii=False) + "\n"


def build(out_dir, files, extra):
    """Write the student copy: the committed files less LEFT_OUT, with the stubs, plus
    ``extra`` ({path: text}). Returns the paths written."""
    written = []
    for rel, (data, mode) in sorted(files.items()):
        if rel.startswith(LEFT_OUT):
            continue
        if rel in STUBS:
            data = stub(data.decode("utf-8"), STUBS[rel], rel).encode("utf-8")
        written.append((rel, data, mode))
    written += [(rel, text.encode("utf-8"), 0o644) for rel, text in extra.items()]
    for rel, data, mode in written:
        dst = os.path.join(out_dir, rel)
        os.makedirs(os.path.dirname(dst) or out_dir, exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
        os.chmod(dst, mode & 0o777)
    return [rel for rel, _, _ in written]


def parse(argv):
    """OUT_DIR, --roster=FILE, --allow_dirty; HandoutError on anything else."""
    usage = "usage: python -m exercises.handout OUT_DIR [--roster=FILE] [--allow_dirty]"
    opts, outs = {"roster": None, "allow_dirty": False}, []
    for a in argv:
        if a.startswith("--roster="):
            opts["roster"] = a.split("=", 1)[1]
        elif a == "--allow_dirty":
            opts["allow_dirty"] = True
        elif a.startswith("-"):
            raise HandoutError(f"unknown flag {a!r}; {usage}")
        else:
            outs.append(a)
    if len(outs) != 1:
        raise HandoutError(usage)
    return outs[0], opts


def main(argv):
    """Every check first (flags, folder, git state, roster, stubs), then the writing."""
    try:
        out_arg, opts = parse(argv)
        out_dir = os.path.abspath(out_arg)
        if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
            raise HandoutError(f"{out_arg} exists and is not an empty folder; name a new one")
        if out_dir == ROOT or out_dir.startswith(ROOT + os.sep):
            raise HandoutError(f"{out_arg} lies inside this repository; name a folder outside it")
        if not opts["allow_dirty"]:
            check_clean()
        files = committed_files()
        for rel, functions in STUBS.items():  # validate before writing anything
            stub(files[rel][0].decode("utf-8"), functions, rel)
        extra = {"results/README.md": RESULTS_NOTE}
        if opts["roster"] is not None:
            extra["exercises/roster.json"] = roster_json(read_roster(opts["roster"]))
    except HandoutError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:  # the folder first: one that cannot be made is one line, before any file is written
        os.makedirs(out_dir, exist_ok=True)
        written = build(out_dir, files, extra)
    except OSError as e:
        print(f"error: cannot write the handout to {out_arg}: "
              f"{e.strerror or type(e).__name__}: {e.filename or ''}".rstrip(": "),
              file=sys.stderr)
        return 2
    stubbed = ", ".join(
        f"{m[:-3]}.{fn} ({ex})" for m, fns in STUBS.items() for fn, ex in fns.items()
    )
    print(f"wrote {len(written)} files of the last commit to {out_arg}; left out "
          f"{', '.join(LEFT_OUT)}; to be written by students: {stubbed}; "
          + (f"roster of {len(json.loads(extra['exercises/roster.json'])['students'])} students"
             if "exercises/roster.json" in extra else "no roster: the numbers cannot be checked "
             "in the copy (--roster=FILE)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
