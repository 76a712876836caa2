"""A dress rehearsal of marking: a class of made-up submissions, right, wrong, broken and
hostile, marked by the real marker, every verdict compared with what it must be.

    python -m exercises.answers.rehearse [--students=40] [--timeout=30] [--jobs=2] [--keep=DIR]

Run it on the machine that will mark, before the class hands in: it says how long a class
takes there, and that no kind of submission costs anyone but its author. Each kind below
is made the way a student would make it (a pack, a folder as left, a platform's folder),
with what the gradebook must then say: the points of each exercise, the mistake named, the
note on the row. The kinds repeat, in order, until there are --students submissions.
Exit status 0 when every verdict is as it must be, 1 when one is not (each is listed), 2
for bad input. --keep=DIR keeps the submissions and the gradebook (DIR must be new).
"""

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m exercises.answers.rehearse\n")
    sys.exit(2)
from exercises import handin, handout
from exercises.answers import gradebook, key, mistakes, truth
from exercises.answers.audit import random_names

FULL = {ex: p.get("numbers", 0) + p.get("code", 0) for ex, p in gradebook.POINTS.items()}
SAYS = __import__("exercises.answers.wrong_code", fromlist=["SAYS"]).SAYS


# ----------------------------------------------------------------------------- the files

def sources():
    """{name: text}: the copy's files and the teacher's answers, from the last commit."""
    committed = handout.committed_files()
    copy = handout.contents(committed, {})
    text = lambda files, rel: files[rel][0].decode("utf-8")
    return {"loss": text(committed, "loss.py"), "batching": text(committed, "batching.py"),
            "ex6": text(committed, "exercises/answers/ex6_buggy_loss.py"),
            "copy loss": text(copy, "loss.py"), "copy batching": text(copy, "batching.py"),
            "copy ex6": text(copy, "exercises/ex6_buggy_loss.py")}


def swap(text, old, new):
    """``text`` with ``old`` replaced; an error if it is not there (the rehearsal would
    then test nothing)."""
    if old not in text:
        raise ValueError(f"the rehearsal's edit no longer applies: {old!r}")
    return text.replace(old, new)


GUARD = "torch.where(nrm > 0, dot / nrm.clamp(min=1e-12), torch.zeros_like(nrm))"
WRONG_LOSS = {  # a catalogued mistake of wrong_code.py, made in the teacher's own loss.py
    "no 0/0 guard": lambda s: swap(s, GUARD, "dot / nrm"),
    "output detached": lambda s: swap(s, "    return w - coef[g] * adv\n",
                                      "    return (w - coef[g] * adv).detach()\n"),
    "divided by |A|, not |A|^2": lambda s: swap(s, GUARD, GUARD.replace(
        "nrm.clamp(min=1e-12)", "nrm.clamp(min=1e-12).sqrt()")),
}
GROUP_MAX = lambda s: swap(swap(s, 'float("inf"), dtype=w.dtype', 'float("-inf"), dtype=w.dtype'),
                           '"amin"', '"amax"')
VANDAL = '''import os, shutil, sys
for path in ("/sandbox", "/tmp", os.path.expanduser("~")):  # whatever it can reach
    shutil.rmtree(path, ignore_errors=True)
if os.fork() == 0:
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"])
print("ex2  ok    hand examples")
sys.stdout.write('{"results": []}')
os._exit(0)
'''
FORKS = "import os\nwhile True:\n    os.fork()\n"
HOG = "hoard = []\nwhile True:\n    hoard.append(bytearray(256 << 20))\n"
SLEEPER = "import time\ntime.sleep(10 ** 6)\n"


def prose(name):
    """Written answers that read like arguments, each student's own."""
    return {q: (f"In {name}'s table the shared token's copies carry coefficients "
                f"w_i A_i over N L; for {q} their sum decides whether it moves, and here it "
                "does not vanish because the weights differ between rollouts.")
            for q in gradebook.WRITTEN_POINTS}


def sheet_text(name, student=None, tables=None, answers=None, change=None):
    """A sheet: the right numbers of ``name`` (on ``tables``), STUDENT = ``student``."""
    sheet = key.filled_sheet(name)
    tables = tables or tables_of(name)
    if tables is not None:
        for ex, values in truth.key(name, tables).items():
            setattr(sheet, ex, {k: (v if isinstance(v, int) else float(f"{v:.3g}"))
                                for k, v in values.items()})
    for q, text in (answers or prose(name)).items():
        setattr(sheet, q, text)
    for ex, k, v in [change] if change else []:
        getattr(sheet, ex)[k] = v
    names = ["EX1", "EX4", "EX7", *gradebook.WRITTEN_POINTS]
    return f"STUDENT = {student if student is not None else name!r}\n" + "".join(
        f"{n} = {getattr(sheet, n)!r}\n" for n in names)


def right_files(name, src, **sheet):
    return {"sheet.py": sheet_text(name, **sheet), "loss.py": src["loss"],
            "batching.py": src["batching"], "ex6_buggy_loss.py": src["ex6"]}


def pack(where, name, files, label=None, made=None):
    """A zip as python -m exercises.handin makes it (with ``made``, its handin.json: made
    for ``name`` at that time); returns its name in SUBMISSIONS."""
    label = label or handin.pack_name(name)
    with zipfile.ZipFile(os.path.join(where, label), "w", zipfile.ZIP_DEFLATED) as z:
        for member, text in files.items():
            if text is not None:
                z.writestr(member, text)
        if made:
            z.writestr(handin.MANIFEST, handin.manifest(name, made))
    return label


def folder(where, label, files, layout="copy"):
    """A student's folder as they left it: the copy's layout, or the files side by side."""
    for member, text in files.items():
        rel = handin.MEMBERS[member] if layout == "copy" else member
        if text is not None:
            os.makedirs(os.path.dirname(os.path.join(where, label, rel)), exist_ok=True)
            with open(os.path.join(where, label, rel), "w", encoding="utf-8") as f:
                f.write(text)
    return label


def expect(label, name, points=None, note=None, mistakes=None, roster="yes", flag=None):
    """What the gradebook must say of one submission: points per exercise (full where not
    given), a phrase of its note, of each named mistake and of its written answers' flags,
    and its roster column."""
    return {"label": label, "student": name, "points": {**FULL, **(points or {})},
            "note": note, "mistakes": mistakes or {}, "roster": roster, "flag": flag}


ZERO = dict.fromkeys(FULL, 0)
DRAW_0 = {"EX1": 0, "EX4": 0, "EX7": 0}  # the tables a copy shows a name not on its roster
TABLES = {}  # {name: draws}: each made-up student's tables, as the marker draws them


def k_right(name, src, where):
    return [expect(pack(where, name, right_files(name, src)), name)]


def k_right_copy_folder(name, src, where):
    return [expect(folder(where, name, right_files(name, src)), name)]


def k_right_platform_folder(name, src, where):
    os.makedirs(os.path.join(where, f"{name} (platform)"))
    pack(os.path.join(where, f"{name} (platform)"), name, right_files(name, src))
    return [expect(f"{name} (platform)", name)]


def tables_of(name):
    """A made-up student's draws, as the marker draws them from names.txt."""
    if name not in TABLES:  # a name made up outside make_class (a partner's "Jr")
        TABLES.update(handout.class_draws([name]))
    return TABLES[name]


def k_wrong_number(name, src, where):
    tables = tables_of(name)
    hint, value = mistakes.wrong_numbers(name, "EX1", tables["EX1"],
                                         truth.key(name, tables)["EX1"])["grpo_net"][0]
    files = right_files(name, src, change=("EX1", "grpo_net", value))
    return [expect(pack(where, name, files), name, points={"ex1": 3})]


def k_wrong_loss(mistake):
    def make(name, src, where):
        files = dict(right_files(name, src), **{"loss.py": WRONG_LOSS[mistake](src["loss"])})
        return [expect(pack(where, name, files), name, points={"ex2": 0},
                       mistakes={"ex2": SAYS["ex2"][mistake]})]
    return make


def k_group_max(name, src, where):
    files = dict(right_files(name, src), **{"loss.py": GROUP_MAX(src["loss"])})
    return [expect(pack(where, name, files), name, points={"ex3": 0},
                   mistakes={"ex3": SAYS["ex3"]["group max"]})]


def k_query(name, src, where):
    body = {"query_balanced": "    return query(group, advantages, lengths, M, generator)\n"}
    files = dict(right_files(name, src),
                 **{"batching.py": handout.replace_bodies(src["batching"], body)[0]})
    return [expect(pack(where, name, files), name, points={"ex5": 0},
                   mistakes={"ex5": SAYS["ex5"]["query (no balancing)"]})]


def k_ex6_unfixed(name, src, where):
    files = dict(right_files(name, src), **{"ex6_buggy_loss.py": src["copy ex6"]})
    return [expect(pack(where, name, files), name, points={"ex6": 0},
                   mistakes={"ex6": SAYS["ex6"]["the bug left in"]})]


def k_ex6_own_length(name, src, where):
    fixed = swap(src["ex6"], "(n_seqs * max_len)", "(n_seqs * lens)")
    files = dict(right_files(name, src), **{"ex6_buggy_loss.py": fixed})
    return [expect(pack(where, name, files), name, points={"ex6": 0},
                   mistakes={"ex6": SAYS["ex6"]["1/L_i for 1/L_max"]})]


def k_untouched(name, src, where):
    files = {"sheet.py": sheet_text(name), "loss.py": src["copy loss"],
             "batching.py": src["copy batching"], "ex6_buggy_loss.py": src["copy ex6"]}
    return [expect(pack(where, name, files), name,
                   points={"ex2": 0, "ex3": 0, "ex5": 0, "ex6": 0},
                   mistakes={"ex2": "not written yet", "ex5": "not written yet"})]


def k_copied_answers(name, src, where):
    """Two students hand in the same written answers: the one whose row comes second (the
    gradebook goes by name) is flagged."""
    other = f"{name} Jr"
    same = prose(f"the pair of {name}")
    a = pack(where, name, right_files(name, src, answers=same))
    b = pack(where, other, right_files(other, src, answers=same))
    return [expect(a, name), expect(b, other, flag="the same as")]  # rows go by name


def k_filler(name, src, where):
    files = right_files(name, src, answers=dict.fromkeys(gradebook.WRITTEN_POINTS, "x " * 25))
    return [expect(pack(where, name, files), name, flag="only 1 different words")]


def k_loss_syntax_error(name, src, where):
    files = dict(right_files(name, src), **{"loss.py": src["loss"] + "\ndef broken(:\n"})
    return [expect(pack(where, name, files), name, points={"ex2": 0, "ex3": 0},
                   mistakes={"ex2": "SyntaxError", "ex3": "SyntaxError"})]


def k_sheet_syntax_error(name, src, where):
    files = dict(right_files(name, src), **{"sheet.py": "STUDENT = 'x\nEX1 = {\n"})
    return [expect(pack(where, name, files), name, points={"ex1": 0, "ex4": 0, "ex7": 0},
                   note="line 1: not Python")]


def k_sheet_stray_import(name, src, where):
    files = right_files(name, src)
    files["sheet.py"] = "import os\n" + files["sheet.py"]
    return [expect(pack(where, name, files), name, points={"ex1": 0, "ex4": 0, "ex7": 0},
                   note="line 1: the sheet may only assign values")]


def k_no_sheet(name, src, where):
    files = dict(right_files(name, src), **{"sheet.py": None})
    return [expect(folder(where, name, files, layout="flat"), name,
                   points={"ex1": 0, "ex4": 0, "ex7": 0}, note="no sheet.py")]


def k_name_off_roster(name, src, where):
    """STUDENT misspelt: marked, on the tables its copy showed it; the roster's name has
    nothing handed in (verify expects that row too)."""
    typo = name[:-1] if len(name) > 3 else name + "x"
    files = right_files(typo, src, tables=DRAW_0)
    return [expect(pack(where, typo, files), typo, roster="no", note="is not on the roster"),
            expect("", name, points=ZERO, note="nothing handed in")]


def k_file_too_large(name, src, where):
    files = dict(right_files(name, src), **{"loss.py": src["loss"] + "#" * (2 << 20)})
    return [expect(pack(where, name, files), name, points={"ex2": 0, "ex3": 0},
                   note="loss.py is larger than 1024 KB")]


def k_broken_zip(name, src, where):
    label = pack(where, name, right_files(name, src))
    path = os.path.join(where, label)
    with open(path, "r+b") as f:  # cut in half: an upload that did not finish
        f.truncate(os.path.getsize(path) // 2)
    return [expect(label, name, points=ZERO, note="not a readable zip")]


def k_vandal(name, src, where):
    files = dict(right_files(name, src), **{"loss.py": VANDAL})
    return [expect(pack(where, name, files), name, points={"ex2": 0, "ex3": 0})]


def k_fork_bomb(name, src, where):
    files = dict(right_files(name, src), **{"batching.py": FORKS})
    return [expect(pack(where, name, files), name, points={"ex5": 0})]


def k_memory_hog(name, src, where):
    files = dict(right_files(name, src), **{"batching.py": HOG})
    return [expect(pack(where, name, files), name, points={"ex5": 0})]


def k_sleeper(name, src, where):
    files = dict(right_files(name, src), **{"ex6_buggy_loss.py": SLEEPER})
    return [expect(pack(where, name, files), name, points={"ex6": 0},
                   mistakes={"ex6": "stopped after"})]


def k_formula_name(name, src, where):
    """A STUDENT a spreadsheet would run as a formula: text in the CSV, off the roster."""
    evil = '=HYPERLINK("http://example.invalid","x")'
    files = dict(right_files(name, src), **{"sheet.py": sheet_text(evil, tables=DRAW_0)})
    return [expect(pack(where, evil, files), evil, roster="no", note="is not on the roster"),
            expect("", name, points=ZERO, note="nothing handed in")]


def k_broken_sheet_moodle_folder(name, src, where):
    """A sheet that does not read, the copy uploaded as a folder, downloaded from Moodle:
    the code is marked on the student's own row, the numbers cost."""
    label = f"{name}_{zlib.crc32(name.encode()) % 10 ** 5}_assignsubmission_file_"
    files = dict(right_files(name, src), **{"sheet.py": f"STUDENT = {name!r}\nEX1 = {{\n"})
    folder(os.path.join(where, label), "my-copy", files)
    return [expect(label, name, points={"ex1": 0, "ex4": 0, "ex7": 0}, note="not Python")]


def k_canvas_file(name, src, where):
    """A pack as Canvas's download names it: lastnamefirstname_ids_file."""
    first, *rest = name.split(" ")
    key = "".join(c for c in (rest[-1] if rest else "") + first if c.isalpha()).lower()
    label = pack(where, name, right_files(name, src),
                 label=f"{key}_4{len(name)}_9001_{handin.pack_name(name)}")
    return [expect(label, name)]


def k_two_hand_ins(name, src, where):
    """A wrong number handed in first, the fix ten minutes later: the latest counts alone."""
    value = mistakes.wrong_numbers(name, "EX1", tables_of(name)["EX1"], truth.key(
        name, tables_of(name))["EX1"])["grpo_net"][0][1]
    os.makedirs(os.path.join(where, f"{name} (first)"))
    pack(os.path.join(where, f"{name} (first)"), name,
         right_files(name, src, change=("EX1", "grpo_net", value)), made="2026-12-01T10:00:00Z")
    os.makedirs(os.path.join(where, f"{name} (again)"))
    pack(os.path.join(where, f"{name} (again)"), name, right_files(name, src),
         made="2026-12-01T10:10:00Z")
    return [expect(f"{name} (again)", name, note="the latest of 2 hand-ins")]


def k_partner_laptop(name, src, where):
    """Two partners on one laptop: the first hands in; the second uploads, on Moodle, a
    pack the laptop made before the name was changed. It lands on the uploader's row,
    flagged with both names, marked on the uploader's tables; the first keeps theirs."""
    partner = f"{name} Partner"
    own = pack(where, name, right_files(name, src), made="2026-12-01T10:00:00Z")
    label = f"{partner}_{zlib.crc32(partner.encode()) % 10 ** 5}_assignsubmission_file_"
    os.makedirs(os.path.join(where, label))
    pack(os.path.join(where, label), name, right_files(name, src), made="2026-12-01T10:05:00Z")
    theirs = key.marks(partner, key.filled_sheet(name, tables=tables_of(name)),
                       tables_of(partner))
    numbers = {ex: sum(ok for e, _, _, ok, _ in theirs if e == ex.upper())
               for ex in ("ex1", "ex4", "ex7")}
    return [expect(own, name),  # one sheet, so one set of answers: the second row is flagged
            expect(label, partner, points=numbers, note="check whose work it is",
                   flag="the same as")]


def k_copy_zip_with_venv(name, src, where):
    """The whole copy zipped, .venv, .git and __pycache__ in it: those are skipped."""
    label = f"{name} copy.zip"
    with zipfile.ZipFile(os.path.join(where, label), "w") as z:
        for member, text in right_files(name, src).items():
            z.writestr(f"copy/{handin.MEMBERS[member]}", text)
        for i in range(300):
            z.writestr(f"copy/.venv/lib/site-packages/p{i}/loss.py", "")
        z.writestr("copy/.git/HEAD", "ref: refs/heads/main\n")
        z.writestr("copy/__pycache__/loss.cpython-311.pyc", "")
    return [expect(label, name)]


KINDS = [  # (kind, what a class has) in the order they repeat
    ("right", k_right), ("wrong: ex2 no 0/0 guard", k_wrong_loss("no 0/0 guard")),
    ("broken: loss.py syntax error", k_loss_syntax_error), ("hostile: vandal", k_vandal),
    ("right, the copy as left", k_right_copy_folder), ("wrong: ex6 unfixed", k_ex6_unfixed),
    ("broken: sheet syntax error", k_sheet_syntax_error), ("right, platform folder",
                                                           k_right_platform_folder),
    ("wrong: a number", k_wrong_number), ("broken: stray import", k_sheet_stray_import),
    ("hostile: fork bomb", k_fork_bomb), ("right", k_right),
    ("wrong: ex3 group max", k_group_max), ("broken: no sheet", k_no_sheet),
    ("wrong: ex5 query", k_query), ("broken: name off the roster", k_name_off_roster),
    ("hostile: memory hog", k_memory_hog), ("wrong: ex2 output detached",
                                            k_wrong_loss("output detached")),
    ("broken: file too large", k_file_too_large), ("wrong: nothing solved", k_untouched),
    ("broken: half a zip", k_broken_zip), ("hostile: sleeper", k_sleeper),
    ("wrong: ex6 1/L_i", k_ex6_own_length), ("wrong: copied answers", k_copied_answers),
    ("wrong: filler answers", k_filler), ("hostile: a formula for a name", k_formula_name),
    ("wrong: ex2 divided by |A|", k_wrong_loss("divided by |A|, not |A|^2")),
    ("broken: sheet, Moodle folder", k_broken_sheet_moodle_folder),
    ("right, Canvas file name", k_canvas_file), ("right, handed in twice", k_two_hand_ins),
    ("right, a partner's laptop", k_partner_laptop),
    ("right, a zipped copy with .venv", k_copy_zip_with_venv),
]


# ----------------------------------------------------------------------------- the rehearsal

def make_class(n, where, kinds=KINDS):
    """n submissions in ``where``, the ``kinds`` in order, again and again; returns
    (expectations, the roster's names, {kind: count})."""
    src = sources()
    names = random_names(4 * n + 8, seed=7)
    TABLES.update(handout.class_draws(names))  # the marker draws them so from names.txt
    names = iter(names)
    expected, counts, made, step = [], {}, 0, 0
    while made < n:
        kind, make = kinds[step % len(kinds)]
        step += 1
        out = make(next(names), src, where)
        n_made = sum(1 for e in out if e["label"])  # submissions: a copied pair is two
        counts[kind] = counts.get(kind, 0) + n_made
        expected += out
        made += n_made
    roster = list(dict.fromkeys(e["student"] for e in expected if e["roster"] == "yes"))
    return expected, roster, counts


def columns(row, ex):
    return next(v for k, v in row.items() if k.startswith(f"{ex} (of "))


def verify(rows, expected):
    """Every way the gradebook's rows differ from the expectations, in words ([] when none)."""
    wrong = []
    by_label = {r["handed in as"]: r for r in rows if r["handed in as"]}
    missing = {r["student"]: r for r in rows if not r["handed in as"]}
    for e in expected:
        r = by_label.get(e["label"]) if e["label"] else missing.get(gradebook.cell(e["student"]))
        what = e["label"] or f"the row of {e['student']!r}"
        if r is None:
            wrong.append(f"{what}: no row in the gradebook")
            continue
        got = {ex: columns(r, ex) for ex in FULL}
        if got != {ex: str(v) for ex, v in e["points"].items()}:
            wrong.append(f"{what}: points {got}, expected {e['points']}")
        if r["student"] != gradebook.cell(e["student"]) or r["on the roster"] != e["roster"]:
            wrong.append(f"{what}: student {r['student']!r} ({r['on the roster']}), expected "
                         f"{e['student']!r} ({e['roster']})")
        if e["note"] and e["note"] not in r["note"]:
            wrong.append(f"{what}: note {r['note']!r} lacks {e['note']!r}")
        for ex, phrase in e["mistakes"].items():
            if phrase not in r[f"{ex} mistake"]:
                wrong.append(f"{what}: {ex} mistake {r[f'{ex} mistake']!r} lacks {phrase!r}")
        flags = " | ".join(v for k, v in r.items() if k.endswith(" flag") and v)
        if (e["flag"] or "") not in flags or (flags and not e["flag"]):
            wrong.append(f"{what}: written flags {flags!r}, expected {e['flag']!r}")
    if len(rows) != len(expected):
        wrong.append(f"{len(rows)} rows for {len(expected)} expected")
    return wrong


def parse(argv):
    opts = {"students": 40, "timeout": 30, "jobs": 2, "keep": None}
    for i, a in enumerate(argv):
        k, _, v = a.partition("=")
        if any(b.partition("=")[0] == k for b in argv[:i]):
            raise ValueError(f"{k} is given twice; give it once")
        if k in ("--students", "--timeout", "--jobs") and v.isdigit() and 1 <= int(v) <= 10000:
            opts[k[2:]] = int(v)
        elif k == "--keep" and v and not os.path.exists(v):
            opts["keep"] = v
        else:
            raise ValueError(f"bad argument {a!r}; usage: python -m exercises.answers.rehearse "
                             "[--students=N] [--timeout=S] [--jobs=N] [--keep=NEW_DIR]")
    return opts


def main(argv):
    if argv in (["--help"], ["-h"]):  # the module's docstring is its manual
        print(__doc__.strip())
        return 0
    try:
        opts = parse(argv)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    top = tempfile.mkdtemp(prefix="rehearsal-")
    try:
        subs, out = os.path.join(top, "submissions"), os.path.join(top, "marks")
        os.makedirs(subs)
        expected, roster, counts = make_class(opts["students"], subs)
        with open(os.path.join(top, "names.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(roster) + "\n")
        load, start = os.getloadavg()[0], time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "exercises.answers.mark", subs,
                               f"--roster={os.path.join(top, 'names.txt')}", f"--out={out}",
                               f"--timeout={opts['timeout']}", f"--jobs={opts['jobs']}"],
                              cwd=handout.ROOT, capture_output=True, text=True)
        seconds, load_after = time.monotonic() - start, os.getloadavg()[0]
        if proc.returncode != 0:
            print(f"error: the marker failed: {proc.stderr.strip()[-500:]}", file=sys.stderr)
            return 1
        with open(os.path.join(out, "gradebook.csv"), encoding="utf-8-sig", newline="") as f:
            rows = list(csv.DictReader(f))
        wrong = verify(rows, expected)
        print(report(opts, counts, seconds, (load, load_after), wrong))
        if opts["keep"]:
            shutil.copytree(top, opts["keep"])
        return 1 if wrong else 0
    finally:
        shutil.rmtree(top, ignore_errors=True)


def report(opts, counts, seconds, load, wrong):
    """The rehearsal's result in a few lines."""
    kinds = io.StringIO()
    for group in ("right", "wrong", "broken", "hostile"):
        n = sum(c for k, c in counts.items() if k.startswith(group))
        kinds.write(f"{n} {group}, ")
    head = (f"{opts['students']} submissions ({kinds.getvalue()[:-2]}) marked in {seconds:.0f} s "
            f"with --jobs={opts['jobs']} --timeout={opts['timeout']} on {os.cpu_count()} CPUs "
            f"(1-minute load average {load[0]:.1f} before, {load[1]:.1f} after)")
    if not wrong:
        return head + "\nevery verdict as expected"
    return head + f"\n{len(wrong)} verdicts not as expected:\n" + "\n".join(f"  {w}" for w in wrong)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
