"""Build the student copy of this repository: no answers, no teacher notes, no key.

    python -m exercises.handout OUT_DIR --roster=names.txt   # one name per line
    python -m exercises.handout OUT_DIR                      # no roster: tables not assigned
    python -m exercises.handout --help

The copy is the last commit (``git archive HEAD``), never the working tree: a key
printout, a solved exercise or a notes folder left lying in the teacher's checkout
cannot leak into it. So an uncommitted change or an untracked file anywhere in the copy's
part of the tree is refused in one line (it would be missing without a word); with
``--allow_dirty`` the copy is built without them and each is named. OUT_DIR must not
exist or be empty.

What changes in the copy, and why:

* left out: exercises/answers/ (the key, the rubrics, the marking tool, the fixed loss of
  exercise 6), this builder, the tests of the teacher's tools, and results/ (the lab
  report's data; a one-paragraph results/README.md says where it is);
* the library functions that exercises ask students to write keep their signature and
  docstring; their bodies become ``raise NotImplementedError("exercise N: ...")``;
* library code one step from an answer is rewritten to an equivalent that is not
  (``REWRITES``: diagnostics' ``mixed_rows`` computed the per-group minimum of exercise 3);
* text that answers an exercise is cut or reworded (``HIDE``): the stop-gradient on DFPO's
  weights and why it is there (exercise 6), and which transform can raise a weight
  (exercise 3). loss.dfpo_weights loses its ``.detach()``: every caller passes the
  detached s_i (loss.sequence_ratio), so its values and gradients are the same;
* each roster student's tables are the first draws (0, 1, 2, ...) whose numbers no
  decimal the copy prints would mark right (``draws``, truth.clashes): every roster gets a
  copy. The copy is then searched for every exercise's answer (``ANSWERS``) and every
  student's numbers; what is found is listed whole, in one line, and the copy refused
  unless ``--allow_leaks`` (then each is named);
* tests whose assertions answer an exercise are left out whole (``CUT_TESTS``);
* tests that read results/ are marked skipped, with that reason;
* Markdown: the teacher's sections of EXERCISES.md are cut, and a link that would not
  resolve in the copy keeps its text and loses its target (or its anchor); so does a link
  into results/, where the copy has only a note. A picture that is not in the copy is
  dropped.

The copy is written into a temporary folder beside OUT_DIR and renamed into place at the
end: a full disk, an error or Ctrl-C leaves no partial copy. In the copy, ``python -m
pytest -q tests`` passes (tests that need an unsolved exercise are skipped), every
Markdown link resolves, and ``python -m exercises.check`` fails cleanly until the
exercises are solved.
"""

import ast
import io
import json
import math
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
# Tests left out of the copy, whole: what they assert answers an exercise. The hand example of
# the two transforms shows Adv-Orthogonal raising a weight (0.5 to 1.25): EX3_WHY's "which".
CUT_TESTS = {"tests/test_loss.py": ("test_dfpo_transforms_alone",)}
RESULTS_NOTE = """# Results

The lab report and its data are not part of the student copy. They are in the
project's own repository, under `results/`.
"""
# (file, or "*" for every .py and .md file; pattern; replacement), applied in this order.
# A rule that finds nothing is harmless (tests/test_classroom_copy.py flags it): what
# guards the copy is the search for ANSWERS below.
HIDE = (
    ("loss.py", r"sg\(w~_i\) / \(N L_max\)    ", "w~_i / (N L_max)        "),
    ("loss.py", r"DFPO's two detached group transforms", "DFPO's two group transforms"),
    ("loss.py", r"\), detached: the sequence's importance weight",
     "): the sequence's importance weight"),
    ("loss.py", r", then the group transform,\n    under a stop-gradient \(without it the "
     r"transform would couple the copies' gradients\n    again\)\. A per-group",
     ", then the group transform.\n    A per-group"),
    ("loss.py", r"return transform\(w, adv, group\)\.detach\(\)",
     "return transform(w, adv, group)"),
    ("loss.py", r"DFPO \[P1\]: a detached group transform", "DFPO [P1]: a group transform"),
    ("*", r"sg\(w~(_i)?\)", r"w~\1"),
    ("*", r"# \[N\] s_i, detached", "# [N] s_i"),
    ("*", r"# w~ is detached: [^\n]*", "# the step's weights, then its gradient"),
    ("THEORY.md", r"\n  It never raises a weight \(`w̃_i ≤ w_i`\), so it is conservative\.", ""),
    ("THEORY.md", r"Euclidean sense, and it can raise a weight\.", "Euclidean sense."),
    # the first row of each token set by a scatter's "amin": exercise 3's per-group minimum in
    # one call. The same rows by a stable sort (tests/test_classroom_copy.py compares them)
    ("lab/motion.py", r"first = torch\.full\(\(len\(uniq\),\), len\(rows\)\)\.scatter_reduce\("
     r"0, inv, torch\.arange\(len\(rows\)\),\n\s+\"amin\"\)",
     "first = torch.argsort(inv, stable=True)[torch.cumsum(count, 0) - count]"),
)
# What answers each exercise, as text no copy may hold (case-insensitive). The numbers of
# exercises 1 and 4 are searched for too, per roster student (``leaks``).
ANSWERS = {
    "ex2": ("dot / nrm", "coef[g] * adv", "index_add_(0, g, adv * w)"),
    "ex3": ('"amin"', "1.0, 1.25, 1.25", "scatter_reduce(0, g, w",
            "never raises a weight", "it can raise a weight",
            "so it is conservative", "the conservative one"),
    "ex5": ("improved = true", "2. greedy", "p[g] * p[c] + n[g] * n[c]"),
    "ex6": ("couple the copies' gradients", "sg(w~", "w~ is detached", "under a stop-gradient",
            "detached group transform", "s_i, detached", "group).detach()",
            "adv_orthogonal(w, adv, group).detach", "where gradients stop",
            "policy_loss uses the transformed weights"),
}
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


def cut_tests(source, names, rel):
    """source without the named top-level test functions (their decorators too)."""
    lines = source.splitlines(keepends=True)
    nodes = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)
             and n.name in names]
    if len(nodes) != len(names):
        raise HandoutError(f"{rel} has no test {sorted(set(names) - {n.name for n in nodes})[0]}"
                           " to leave out (CUT_TESTS in exercises/handout.py)")
    for node in sorted(nodes, key=lambda n: -n.lineno):
        top = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        del lines[top:node.end_lineno]
    return "".join(lines)


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
    holds, pictures too) reduced to its text (a picture: dropped), or to its file when only
    the anchor is missing."""
    files = set(texts) | set(files)
    def one(m):
        bang, label, target = m.groups()
        if re.match(r"[a-z]+:", target) or target.startswith("#") and not target[1:]:
            return m.group(0)
        path, _, frag = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(rel), path)) if path else rel
        if full not in files and not any(f.startswith(full + "/") for f in files):
            return label if not bang else ""  # a caption with no picture is noise
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
    lines = csv_names(path, text) if path.lower().endswith(".csv") else text.split("\n")
    for number, line in enumerate(lines, 1):
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
    seen = {}
    for n in names:  # compared as everything compares names: case and spacing aside
        if roster.fold(n) in seen:
            twice = n if seen[roster.fold(n)] == n else f"{seen[roster.fold(n)]!r} and {n!r}"
            raise HandoutError(f"--roster={path} names {twice!r} twice; each student once"
                               if twice == n else f"--roster={path} names one student twice "
                               f"({twice}: names differ only in case); each student once")
        seen[roster.fold(n)] = n
    return names, notes


def draws(names, printed, progress=sys.stderr):
    """({name: {"EX1": draw, ...}}, [names with no draw]): each student's first draws that
    are well drawn and print-free (truth.pick_tables against ``printed``). A long roster
    shows its progress on stderr (about ten lines)."""
    from exercises.answers.truth import pick_tables
    students, none, start, step = {}, [], time.monotonic(), max(len(names) // 10, 1)
    for i, n in enumerate(names, 1):
        try:
            students[n] = pick_tables(n, printed)
        except ValueError:  # no draw of VARIANTS is free of the copy's numbers
            none.append(n)
        if len(names) >= PROGRESS_FROM and (i % step == 0 or i == len(names)):
            print(f"drawing tables: {i} of {len(names)} names ({time.monotonic() - start:.0f} s)",
                  file=progress, flush=True)
    return students, none


ROSTER_COLUMNS = ("name", "id", "email")  # a .csv roster's header: name, and optionally these


def roster_rows(path, text):
    """[{"name": ..., "id": ..., "email": ...}] of a .csv roster (a header row naming its
    columns, ``name`` among them); HandoutError for any other header."""
    import csv
    rows = list(csv.reader(io.StringIO(text)))
    head = [h.strip().lower() for h in (rows[0] if rows else [])]
    if "name" not in head or len(set(head)) < len(head) or set(head) - set(ROSTER_COLUMNS):
        raise HandoutError(f"--roster={path}: a .csv roster needs a header row of "
                           f"{', '.join(ROSTER_COLUMNS)} (name required, each once)")
    return [dict(zip(head, r + [""] * (len(head) - len(r)))) for r in rows[1:]]


def csv_names(path, text):
    """The name column of a .csv roster, one entry per row (row 1 is the header, kept as
    an empty line so that a refusal names the row a spreadsheet shows)."""
    return [""] + [r["name"] for r in roster_rows(path, text)]


def roster_json(students):
    """exercises/roster.json for these students ({name: draws}): the draws, no numbers."""
    return json.dumps({"version": roster.VERSION, "students": students},
                      indent=1, ensure_ascii=False) + "\n"


def class_draws(names):
    """{name: draws} as a copy of the last commit gives these students: what the marker
    and the key use when the teacher gives names.txt instead of the copy's roster.json."""
    students, _ = draws(names, printed(contents(committed_files(), {"results/README.md":
                                                                    RESULTS_NOTE}))[0])
    return students


# ----------------------------------------------------------------------------- the copy

def uncommitted():
    """The paths the copy would take from the tree but holds from the last commit instead:
    every uncommitted change and untracked file outside LEFT_OUT (renames: both names)."""
    raw = git("status", "--porcelain=v1", "-z", "--untracked-files=all").decode("utf-8", "replace")
    fields, out = raw.split("\0"), []
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        paths = [entry[3:]]
        if "R" in entry[:2] or "C" in entry[:2]:  # the old name follows as its own field
            paths.append(fields[i])
            i += 1
        out += [p for p in paths if not p.startswith(LEFT_OUT)]
    return sorted(set(out))


def check_clean(allow_dirty):
    """[] when the tree is the last commit (outside LEFT_OUT); else HandoutError, or with
    ``allow_dirty`` the paths the copy will not have."""
    dirty = uncommitted()
    if dirty and not allow_dirty:
        shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
        raise HandoutError(f"{len(dirty)} uncommitted changes or untracked files would be missing "
                           f"from the copy, which is the last commit ({shown}); commit them, or "
                           "pass --allow_dirty to build without them")
    return dirty


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
                text = skip_results_tests(cut_tests(text, CUT_TESTS.get(rel, ()), rel))
            data = text.encode("utf-8")
        out[rel] = (data, mode)
    out.update({rel: (text.encode("utf-8"), 0o644) for rel, text in extra.items()})
    for rel, (data, mode) in out.items():
        if rel.endswith((".py", ".md")):
            out[rel] = (hide(rel, data.decode("utf-8")).encode("utf-8"), mode)
    texts = {rel: TEACHER_SECTION.sub("", data.decode("utf-8", "replace"))
             for rel, (data, _) in out.items() if rel.endswith(".md")}
    # results/ holds only a note in the copy: a link into it would lead to that note
    linkable = {rel: t for rel, t in texts.items() if not rel.startswith("results/")}
    files = [rel for rel in out if not rel.startswith("results/")]
    for rel, text in texts.items():
        out[rel] = (fix_links(rel, text, linkable, files).encode("utf-8"), out[rel][1])
    return out


def hide(rel, text):
    """``text`` of the file ``rel`` with every HIDE rule that names it (or "*") applied."""
    for where, pattern, replacement in HIDE:
        if where in ("*", rel):
            text = re.sub(pattern, replacement, text)
    return text


NUMBER = re.compile(r"\d*\.\d+(?:[eE][-+]?\d+)?")  # a decimal, sign aside
TEXT = (".py", ".md", ".txt", ".json")


def printed(copy):
    """(the three-digit forms of the sizes of every decimal the copy's text files print,
    {form: (file, the number as printed)}): what truth.clashes searches a key for."""
    where = {}
    for rel, (data, _) in sorted(copy.items()):
        if rel.endswith(TEXT):
            for n in NUMBER.findall(data.decode("utf-8", "replace")):
                if float(n) != 0 and math.isfinite(float(n)):
                    where.setdefault(roster.text(*roster.sig3(float(n))), (rel, n))
    return frozenset(where), where


def leaks(copy, students=None):
    """[(exercise, path, what)] for every answer of ANSWERS that the copy's text files hold,
    and every number of a roster student (``students``: {name: draws}) that a number the
    copy prints would mark right (truth.clashes)."""
    found = []
    for rel, (data, _) in sorted(copy.items()):
        if rel.endswith(TEXT):
            low = data.decode("utf-8", "replace").lower()
            found += [(ex, rel, a) for ex, marks in ANSWERS.items() for a in marks if a in low]
    if students:
        from exercises.answers.truth import TRUTHS, accepted, clashes
        forms, where = printed(copy)
        for name, tables in students.items():
            for ex in ("EX1", "EX4", "EX7"):
                key = TRUTHS[ex](name, tables[ex])
                for k in clashes(key, forms):
                    rel, n = where[sorted(accepted(abs(key[k])) & forms)[0]]
                    found.append((ex.lower(), rel, f"{name}'s {k}, {n}"))
    return found


def build(names, allow_leaks=False):
    """(the copy's files, with the roster of ``names`` (None: no roster), [notes]): refused
    when it would hold an answer (``leaks``) unless ``allow_leaks``, then each is a note."""
    copy = contents(committed_files(), {"results/README.md": RESULTS_NOTE})
    students, none = {}, []
    if names is not None:
        students, none = draws(names, printed(copy)[0])
        copy["exercises/roster.json"] = (roster_json(students).encode("utf-8"), 0o644)
    found = leaks(copy, students)
    if (found or none) and not allow_leaks:
        raise HandoutError(leak_message(found, none))
    notes = [f"the copy holds {ex}'s answer ({rel}: {what!r}): built so (--allow_leaks)"
             for ex, rel, what in found]
    notes += [f"{n!r} is not on the copy's roster: no draw of theirs is free of the copy's "
              "numbers (--allow_leaks); their copy shows draw 0, and the marker marks them "
              "on it" for n in none]
    return copy, notes


def leak_message(found, none):
    """One line: every answer the copy would hold, and what the teacher can do about it."""
    parts = [f"{ex}'s answer ({rel}: {what!r})" for ex, rel, what in found]
    parts += [f"{n!r}'s numbers (none of {roster.VARIANTS} draws is free of the copy's "
              "numbers)" for n in none]
    named = any("'s " in w for _, _, w in found) or none
    fix = ("spell each named student another way on the roster (add a middle name or "
           "the student id), or " if named else "")
    return (f"the copy would hold {len(parts)} answer{'s' * (len(parts) > 1)}: "
            f"{'; '.join(parts)}; {fix}pass "
            "--allow_leaks to build it anyway and know which answers it gives away")


def write_all(tmp, copy):
    for rel, (data, mode) in copy.items():
        dst = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(dst, mode & 0o777)


USAGE = "usage: python -m exercises.handout OUT_DIR [--roster=FILE] [--allow_dirty] [--allow_leaks]"
HELP = f"""{USAGE}

Build the student copy of the last commit in OUT_DIR (a new or empty folder).

  --roster=FILE   the class list, one name per line; each student gets their own tables
  --allow_dirty   build although the tree has uncommitted changes (each is named)
  --allow_leaks   build although the copy would hold an answer (each is named)
  --help          this text
"""


def parse(argv):
    """OUT_DIR, --roster=FILE, --allow_dirty, --allow_leaks; HandoutError on anything else."""
    usage = USAGE
    opts, outs, given = {"roster": None, "allow_dirty": False, "allow_leaks": False}, [], set()
    for a in argv:
        key = a.split("=", 1)[0]
        if key in given and key.startswith("--"):  # else one would be lost
            raise HandoutError(f"{key} is given twice; give it once")
        given.add(key)
        if a.startswith("--roster="):
            opts["roster"] = a.split("=", 1)[1]
        elif a in ("--allow_dirty", "--allow_leaks"):
            opts[a[2:]] = True
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
    if argv in (["--help"], ["-h"]):
        print(HELP, end="")
        return 0
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
        dirty = check_clean(opts["allow_dirty"])
        copy, leaked = build(names, opts["allow_leaks"])
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
    for line in leaked:  # --allow_leaks: what the copy gives away, so the teacher knows
        print(f"note: {line}", file=sys.stderr)
    for rel in dirty:  # --allow_dirty: the copy holds the last commit's version, or nothing
        print(f"note: not in the copy (uncommitted, --allow_dirty): {rel}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
