"""Build the student copy of this repository: no answers, no teacher notes.

    python -m exercises.handout OUT_DIR

OUT_DIR must not exist or be empty. It receives the files git tracks (plus
untracked ones it does not ignore), as plain files with no git history, less
the teacher's files: exercises/answers/ (the key, the rubrics, the fixed loss
of exercise 6) and tests/test_exercises.py (the catalogue of wrong work). The
library functions that exercises ask students to write keep their signature
and docstring; their bodies become ``raise NotImplementedError("exercise N:
...")``. Everything that calls them still imports. In the copy,
``python -m pytest -q tests`` passes, skipping each test that needs an
unsolved exercise (tests/conftest.py), and ``python -m exercises.check``
fails cleanly until the exercises are solved.
"""

import ast
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEACHER_ONLY = (
    "exercises/answers/",
    "tests/test_exercises.py",
)  # the key, the rubrics, the wrong-work catalogue
STUBS = {"loss.py": {"adv_orthogonal": "ex2", "min_replace": "ex3"},
         "batching.py": {"query_balanced": "ex5"}}


def tracked_files():
    """Paths relative to ROOT: git's view when there is a checkout, else every file but caches
    and runs."""
    if os.path.isdir(os.path.join(ROOT, ".git")):
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        return sorted(p for p in out.split("\0") if p and os.path.isfile(os.path.join(ROOT, p)))
    paths = []
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith((".", "__pycache__", "out"))]
        paths += [
            os.path.relpath(os.path.join(d, f), ROOT) for f in files if not f.endswith(".pyc")
        ]
    return sorted(paths)


def stub(source, functions, module):
    """source with each named function's body, after its docstring, replaced by a raise."""
    lines = source.splitlines(keepends=True)
    nodes = [
        n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in functions
    ]
    missing = set(functions) - {n.name for n in nodes}
    if missing:
        raise SystemExit(f"error: {module} has no function {sorted(missing)[0]} to stub")
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


def build(out_dir):
    files = [p for p in tracked_files() if not p.replace(os.sep, "/").startswith(TEACHER_ONLY)]
    for rel in files:
        dst = os.path.join(out_dir, rel)
        os.makedirs(os.path.dirname(dst) or out_dir, exist_ok=True)
        if rel in STUBS:
            with open(os.path.join(ROOT, rel)) as f:
                text = stub(f.read(), STUBS[rel], rel)
            with open(dst, "w") as f:
                f.write(text)
        else:
            shutil.copy2(os.path.join(ROOT, rel), dst)
    return files


def main(argv):
    if len(argv) != 1 or argv[0].startswith("-"):
        print("error: usage: python -m exercises.handout OUT_DIR", file=sys.stderr)
        return 2
    out_dir = os.path.abspath(argv[0])
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        print(
            f"error: {argv[0]} exists and is not an empty folder; name a new one", file=sys.stderr
        )
        return 2
    if out_dir == ROOT or out_dir.startswith(ROOT + os.sep):
        print(
            f"error: {argv[0]} lies inside this repository; name a folder outside it",
            file=sys.stderr,
        )
        return 2
    for rel, functions in STUBS.items():  # validate before writing anything
        with open(os.path.join(ROOT, rel)) as f:
            stub(f.read(), functions, rel)
    try:  # the folder first: one that cannot be made is one line, before any file is written
        os.makedirs(out_dir, exist_ok=True)
        files = build(out_dir)
    except OSError as e:
        print(f"error: cannot write the handout to {argv[0]}: "
              f"{e.strerror or type(e).__name__}: {e.filename or ''}".rstrip(": "),
              file=sys.stderr)
        return 2
    stubbed = ", ".join(
        f"{m[:-3]}.{fn} ({ex})" for m, fns in STUBS.items() for fn, ex in fns.items()
    )
    print(f"wrote {len(files)} files to {argv[0]}; left out {', '.join(TEACHER_ONLY)}; "
          f"to be written by students: {stubbed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
