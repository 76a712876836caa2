"""Build the student copy of this repository: no answers, no teacher notes, no key.

    python -m exercises.handout OUT_DIR --roster=names.txt   # one name per line
    python -m exercises.handout OUT_DIR                      # no roster: tables not assigned

The copy is the last commit (``git archive HEAD``), never the working tree: a key
printout, a solved exercise or a notes folder left lying in the teacher's checkout
cannot leak into it. Uncommitted changes or untracked files under exercises/ are
refused (they would be silently missing) unless ``--allow_dirty``. OUT_DIR must not
exist or be empty.

What changes in the copy, and why:

* left out: exercises/answers/ (the key, the rubrics, the marking tool, the fixed loss of
  exercise 6), this builder, the tests of the teacher's tools, and results/ (the lab
  report's data; a one-paragraph results/README.md says where it is);
* the library functions that exercises ask students to write keep their signature and
  docstring; their bodies become ``raise NotImplementedError("exercise N: ...")``;
* library code one step from an answer is rewritten to an equivalent that is not
  (``REWRITES``: diagnostics' ``mixed_rows`` computed the per-group minimum of exercise 3);
* tests that read results/ are marked skipped, with that reason;
* Markdown: the teacher's sections of EXERCISES.md are cut, and a link that would not
  resolve in the copy keeps its text and loses its target (or its anchor).

The copy is written into a temporary folder beside OUT_DIR and renamed into place at the
end: a full disk, an error or Ctrl-C leaves no partial copy. In the copy, ``python -m
pytest -q tests`` passes (tests that need an unsolved exercise are skipped), every
Markdown link resolves, and ``python -m exercises.check`` fails cleanly until the
exercises are solved.
"""

import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.handout\n")
    sys.exit(2)
from exercises import roster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEACHER_ONLY = (
    "exercises/answers/",
    "exercises/handout.py",
    "tests/test_exercises.py",
    "tests/test_classroom_",
)  # the key and its tools, the rubrics, the wrong-work catalogue, this builder, their tests
LEFT_OUT = TEACHER_ONLY + ("results/",)
STUBS = {"loss.py": {"adv_orthogonal": "ex2", "min_replace": "ex3"},
         "batching.py": {"query_balanced": "ex5"}}
# Function bodies replaced wherever a top-level function of that name is defined (the body
# after the docstring). mixed_rows: the same rows, found by comparing each reward with its
# group's others instead of by the per-group minimum and maximum that exercise 3 asks for.
REWRITES = {"mixed_rows": (
    "    r = rewards.float()\n"
    "    same_group = group[:, None] == group[None, :]\n"
    "    return (same_group & (r[:, None] != r[None, :])).any(1)\n")}
RESULTS_NOTE = """# Results

The lab report and its data are not part of the student copy. They are in the
project's own repository, under `results/`.
"""
TEACHER_SECTION = re.compile(r"<!-- teacher -->.*?<!-- /teacher -->\n?", re.S)
RESULTS_SKIP = ("needs results/, the lab report's data, which the student copy leaves out")
MAX_NAME = 200  # characters; a name longer than this is a pasted paragraph
PROGRESS_FROM = 500  # names: a roster this long takes seconds to draw, so say how far it is


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


# ----------------------------------------------------------------------------- Python

def replace_bodies(source, bodies):
    """source with each named top-level function's body, after its docstring, replaced by
    ``bodies[name]`` (text). Functions not defined here are left to other files."""
    lines = source.splitlines(keepends=True)
    nodes = [n for n in ast.parse(source).body
             if isinstance(n, ast.FunctionDef) and n.name in bodies]
    for node in sorted(nodes, key=lambda n: -n.lineno):  # bottom up: earlier lines stay valid
        doc = node.body[0]
        has_doc = isinstance(doc, ast.Expr) and isinstance(getattr(doc, "value", None),
                                                           ast.Constant)
        first = doc.end_lineno if has_doc else node.body[0].lineno - 1  # keep lines up to here
        lines[first:node.end_lineno] = [bodies[node.name]]
    return "".join(lines), {n.name for n in nodes}


def stub(source, functions, module):
    """source with each named function's body, after its docstring, replaced by a raise."""
    bodies = {}
    for name, ex in functions.items():
        bodies[name] = (
            f"    raise NotImplementedError(\"exercise {ex[2:]}: write {module[:-3]}.{name} \"\n"
            "                              \"(EXERCISES.md; check: python -m exercises.check "
            f"{ex})\")\n")
    out, found = replace_bodies(source, bodies)
    missing = set(functions) - found
    if missing:
        raise HandoutError(f"{module} has no function {sorted(missing)[0]} to stub")
    return out


def needs_results(source):
    """Names of the test functions of a test module that read a committed file under
    results/: ``os.path.join(ROOT, "results", ...)`` or ``os.path.join(common.RESULTS,
    ...)`` in their own body, in a module-level name they read (``README = ...``), or in a
    module-level helper or fixture they name."""
    tree = ast.parse(source)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}

    def folder(x):  # ROOT, "results" or RESULTS (a name or an attribute)
        return (isinstance(x.args[0], (ast.Name, ast.Attribute)) and len(x.args) >= 3
                and isinstance(x.args[1], ast.Constant) and x.args[1].value == "results") or (
            len(x.args) >= 2 and getattr(x.args[0], "attr", getattr(x.args[0], "id", None))
            == "RESULTS")

    def reads(node):
        return any(isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute)
                   and x.func.attr == "join" and x.args and folder(x) for x in ast.walk(node))

    def names(node):
        return {x.id for x in ast.walk(node) if isinstance(x, ast.Name)} | {
            a.arg for a in node.args.args}

    paths = {t.id for n in tree.body if isinstance(n, ast.Assign) and reads(n.value)
             for t in n.targets if isinstance(t, ast.Name)}  # README = join(ROOT, "results"...)
    tainted = {n for n, f in funcs.items() if any(reads(b) for b in f.body) or names(f) & paths}
    while True:  # helpers of helpers
        more = {n for n, f in funcs.items() if n not in tainted and names(f) & tainted}
        if not more:
            break
        tainted |= more
    return sorted(n for n in tainted if n.startswith("test_"))


def skip_results_tests(source):
    """Mark each test that reads results/ skipped, with the reason, above its decorators."""
    names = needs_results(source)
    if not names:
        return source
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    for node in sorted(nodes, key=lambda n: -n.lineno):
        top = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        lines.insert(top, f"@__import__(\"pytest\").mark.skip(\n    reason={RESULTS_SKIP!r})\n")
    return "".join(lines)


# ----------------------------------------------------------------------------- Markdown

def anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def fix_links(rel, text, texts, files=()):
    """``text`` (the Markdown file ``rel``) with every relative link that would not resolve
    in the copy (``texts``: {path: text} of its Markdown files, ``files``: every path it
    holds, pictures too) reduced to its text, or to its file when only the anchor is
    missing."""
    files = set(texts) | set(files)
    def one(m):
        bang, label, target = m.groups()
        if re.match(r"[a-z]+:", target) or target.startswith("#") and not target[1:]:
            return m.group(0)
        path, _, frag = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(rel), path)) if path else rel
        if full not in files and not any(f.startswith(full + "/") for f in files):
            return label if not bang else f"({label})"
        if frag and full.endswith(".md"):
            heads = {anchor(h) for h in re.findall(r"^#+ (.*)$", texts[full], re.M)}
            if frag not in heads:
                return f"{bang}[{label}]({path})" if path else label
        return m.group(0)
    return LINK.sub(one, text)


# ----------------------------------------------------------------------------- the roster

def read_roster(path):
    """(names, notes): one name per line (blank lines skipped), each once. A byte-order
    mark at the start is dropped; spacing and Unicode form are normalised; a name holding a
    control or separator character is refused (it would split or hide a name)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HandoutError(f"--roster={path}: not a readable UTF-8 text file "
                           f"({type(e).__name__})") from None
    notes = []
    if text.startswith("\ufeff"):
        text = text[1:]
        notes.append("dropped the byte-order mark at the start of the roster")
    names, changed = [], 0
    for number, line in enumerate(text.split("\n"), 1):
        line = line[:-1] if line.endswith("\r") else line
        if not line.strip():
            continue
        why = roster.name_problem(line)
        if why:
            raise HandoutError(f"--roster={path}, line {number}: the name {why}; write one "
                               "name per line, in plain text")
        name = roster.canonical(line)
        if len(name) > MAX_NAME:
            raise HandoutError(f"--roster={path}, line {number}: a name of {len(name)} "
                               f"characters; at most {MAX_NAME}")
        changed += name != line.strip()
        names.append(name)
    if changed:
        notes.append(f"normalised the spacing or accents of {changed} names")
    if not names:
        raise HandoutError(f"--roster={path} holds no name")
    seen = set()
    for n in names:
        if n in seen:
            raise HandoutError(f"--roster={path} names {n!r} twice; each student once")
        seen.add(n)
    return names, notes


def roster_json(names, progress=sys.stderr):
    """exercises/roster.json for these students: each one's draws, no numbers. A long
    roster shows its progress on stderr (about ten lines)."""
    from exercises.answers.truth import pick_tables
    students, start, step = {}, time.monotonic(), max(len(names) // 10, 1)
    for i, n in enumerate(names, 1):
        students[n] = pick_tables(n)
        if len(names) >= PROGRESS_FROM and (i % step == 0 or i == len(names)):
            print(f"drawing tables: {i} of {len(names)} names ({time.monotonic() - start:.0f} s)",
                  file=progress, flush=True)
    return json.dumps({"version": roster.VERSION, "students": students},
                      indent=1, ensure_ascii=False) + "\n"


# ----------------------------------------------------------------------------- the copy

def check_clean():
    """Refuse uncommitted changes or untracked files under exercises/: the copy is the last
    commit, so they would be missing from it without a word."""
    dirty = git("status", "--porcelain", "--untracked-files=all", "--", "exercises").decode()
    if dirty.strip():
        first = dirty.strip().splitlines()[0][3:]
        raise HandoutError(f"exercises/ has uncommitted changes or untracked files ({first}, ...); "
                           "the copy is the last commit: commit them, or pass --allow_dirty")


def contents(files, extra):
    """{path: (bytes, mode)} of the student copy: the committed files less LEFT_OUT, with
    every change the module docstring lists, plus ``extra`` ({path: text})."""
    out = {}
    for rel, (data, mode) in sorted(files.items()):
        if rel.startswith(LEFT_OUT):
            continue
        if rel.endswith(".py"):
            text = data.decode("utf-8")
            if rel in STUBS:
                text = stub(text, STUBS[rel], rel)
            if any(f"def {name}(" in text for name in REWRITES):
                text = replace_bodies(text, REWRITES)[0]
            if rel.startswith("tests/test_"):
                text = skip_results_tests(text)
            data = text.encode("utf-8")
        out[rel] = (data, mode)
    out.update({rel: (text.encode("utf-8"), 0o644) for rel, text in extra.items()})
    texts = {rel: data.decode("utf-8", "replace") for rel, (data, _) in out.items()
             if rel.endswith(".md")}
    for rel in texts:
        text = TEACHER_SECTION.sub("", texts[rel])
        texts[rel] = text
    for rel, text in texts.items():
        out[rel] = (fix_links(rel, text, texts, out).encode("utf-8"), out[rel][1])
    return out


def write_all(tmp, copy):
    for rel, (data, mode) in copy.items():
        dst = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(dst, mode & 0o777)


def parse(argv):
    """OUT_DIR, --roster=FILE, --allow_dirty; HandoutError on anything else."""
    usage = "usage: python -m exercises.handout OUT_DIR [--roster=FILE] [--allow_dirty]"
    opts, outs, given = {"roster": None, "allow_dirty": False}, [], set()
    for a in argv:
        key = a.split("=", 1)[0]
        if key in given and key in ("--roster", "--allow_dirty"):  # else one would be lost
            raise HandoutError(f"{key} is given twice; give it once")
        given.add(key)
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
    """Every check first (flags, folder, git state, roster, stubs), then the writing, into a
    temporary folder beside OUT_DIR that is renamed into place at the end."""
    out_arg, tmp = "", None
    try:
        out_arg, opts = parse(argv)
        if not out_arg:
            raise HandoutError("OUT_DIR is empty; name a new folder")
        # real paths: a link (or a chain of them) to the repository leads inside it
        out_dir, root = os.path.realpath(out_arg), os.path.realpath(ROOT)
        if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
            raise HandoutError(f"{out_arg} exists and is not an empty folder; name a new one")
        if out_dir == root or out_dir.startswith(root + os.sep):
            raise HandoutError(f"{out_arg} lies inside this repository; name a folder outside it")
        parent = os.path.dirname(out_dir)
        if not os.path.isdir(parent):
            raise HandoutError(f"{out_arg}: its folder {parent} does not exist")
        names, notes = read_roster(opts["roster"]) if opts["roster"] is not None else (None, [])
        if not opts["allow_dirty"]:
            check_clean()
        extra = {"results/README.md": RESULTS_NOTE}
        if names is not None:
            extra["exercises/roster.json"] = roster_json(names)
        copy = contents(committed_files(), extra)
        size = sum(len(d) for d, _ in copy.values())
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.partial-", dir=parent)
        write_all(tmp, copy)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's folder is private; the copy is not
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty, checked above
        os.rename(tmp, out_dir)
        tmp = None
    except HandoutError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        need = f" (the copy needs about {size / 1e6:.1f} MB)" if "size" in locals() else ""
        print(f"error: cannot write the handout to {out_arg}: {e.strerror or type(e).__name__}"
              f"{need}; nothing was left behind", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"error: interrupted; nothing was written to {out_arg or 'the output folder'}",
              file=sys.stderr)
        return 130
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    stubbed = ", ".join(
        f"{m[:-3]}.{fn} ({ex})" for m, fns in STUBS.items() for fn, ex in fns.items())
    who = (f"roster of {len(names)} students" + "".join(f"; {n}" for n in notes)
           if names is not None else "no roster: the tables are not assigned (--roster=FILE)")
    print(f"wrote {len(copy)} files of the last commit to {out_arg}; left out "
          f"{', '.join(LEFT_OUT)}; to be written by students: {stubbed}; {who}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
