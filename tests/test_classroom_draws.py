"""Every roster the handout accepts gets a copy (exercises/handout.py): each student's
tables are drawn from the name, again and again, until no number the copy prints would
mark one of their answers right; the guard that searches the built copy then finds
nothing. A clash that is left is listed whole, with what the teacher can do. Teacher's
copy only."""

import bisect
import json
import os
import random
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises import handout  # noqa: E402
from exercises.answers import truth  # noqa: E402
from exercises.check import COUNTS  # noqa: E402

FIRST = ("Ada Alan Grace Edsger Barbara Ken Mary Wei Priya Omar Fatima Lars Kofi Amara Diego "
         "Yuki Chen Aisha Ravi Elena").split()
LAST = ("Lovelace Turing Hopper Knuth Ritchie Hoare Lamport Zhang Patel Hassan Berg Mensah "
        "Garcia Rossi Tanaka Liu Khan Novak").split()
EXTRA = ("Émilie", "Zoë", "José", "Nguyễn", "O'Brien", "van der Berg", "s1234567", "李")


def roster(rng, n=40):
    """n different names as a class list has them: first and last names, now and then a
    middle name, an accent or a student id."""
    out = set()
    while len(out) < n:
        parts = [rng.choice(FIRST), rng.choice(LAST)]
        if rng.random() < 0.3:
            parts.insert(1, rng.choice(FIRST + list(EXTRA)))
        if rng.random() < 0.1:
            parts = [f"s{rng.randrange(10 ** 6, 10 ** 7)}"]
        out.add(" ".join(parts))
    return sorted(out)


@pytest.fixture(scope="module")
def copy():
    """The copy's files without a roster (a roster adds only roster.json)."""
    return handout.contents(handout.committed_files(), {"results/README.md": handout.RESULTS_NOTE})


def printed_sizes(files):
    """Sorted sizes of every decimal the copy's text files print (read here on their own,
    not through handout.printed)."""
    sizes = set()
    for rel, (data, _) in files.items():
        if rel.endswith((".py", ".md", ".txt", ".json")):
            for n in handout.NUMBER.findall(data.decode("utf-8", "replace")):
                if float(n):
                    sizes.add(float(n))
    return sorted(sizes)


def given_away(name, tables, sizes):
    """The student's numbers that a number the copy prints gets right by the marking rule,
    sign aside: each key value against every printed size within 2 % of it."""
    out = []
    for ex, values in truth.key(name, tables).items():
        for k, v in values.items():
            if k in COUNTS:
                continue
            lo, hi = bisect.bisect_left(sizes, abs(v) * 0.98), bisect.bisect_right(
                sizes, abs(v) * 1.02)
            out += [(name, ex, k, p) for p in sizes[lo:hi] if truth.right(p, abs(v), k)]
    return out


def test_1000_random_names_in_25_rosters_are_all_drawn_and_none_is_given_away(copy):
    """25 rosters of 40: every name gets tables, the guard finds nothing, and no answer of
    anyone is a number the copy prints. Among the first 200, names whose first draws the
    copy prints are drawn again: counted, so that the redrawing is known to be exercised."""
    rng, forms, sizes = random.Random(20261201), handout.printed(copy)[0], printed_sizes(copy)
    redrawn = clashing = 0
    for i in range(25):
        names = roster(rng)
        students, none = handout.draws(names, forms)
        assert none == [] and sorted(students) == names
        full = dict(copy, **{"exercises/roster.json": (
            handout.roster_json(students).encode("utf-8"), 0o644)})
        assert handout.leaks(full, students) == []
        for n in names:
            assert given_away(n, students[n], sizes) == [], n
            if i < 5:  # 200 names show the redrawing at work
                first = truth.pick_tables(n)
                redrawn += first != students[n]
                clashing += bool(given_away(n, first, sizes))
    assert clashing > 0 and redrawn >= clashing  # names whose first draw the copy prints


def test_a_40_name_copy_is_built_and_holds_no_answer_of_anyone(tmp_path):
    """The real command on a random class of 40: it writes the copy, says no error, and no
    number of any student, read from the copy's own roster.json, is one the copy prints."""
    names = roster(random.Random(7))
    (tmp_path / "names.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
    out = tmp_path / "class"
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(out),
                           f"--roster={tmp_path / 'names.txt'}", "--allow_dirty"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "error" not in proc.stdout + proc.stderr, proc.stderr
    students = json.loads((out / "exercises" / "roster.json").read_text("utf-8"))["students"]
    assert sorted(students) == names
    files = {}
    for d, _, fs in os.walk(out):
        for f in fs:
            p = os.path.join(d, f)
            files[os.path.relpath(p, out)] = (open(p, "rb").read(), 0)
    sizes = printed_sizes(files)
    assert [x for n in names for x in given_away(n, students[n], sizes)] == []
    assert handout.class_draws(names) == students  # what the marker uses with names.txt


def test_every_clash_left_is_listed_with_what_to_do(copy, monkeypatch, tmp_path, capsys):
    """A copy that prints two students' numbers and an answer's text: one line naming all
    three, and what a teacher can do without editing code; --allow_leaks builds it and
    names each."""
    names = ["Ada Lovelace", "Alan Turing"]
    students, _ = handout.draws(names, handout.printed(copy)[0])
    planted = [f"{truth.key(n, students[n])['EX1']['grpo_residual']:.4g}" for n in names]
    files = dict(handout.committed_files(), **{"lab/notes.md": (
        f"Seen: {planted[0]} and {planted[1]}; w~ is detached.\n".encode(), 0o644)})
    monkeypatch.setattr(handout, "committed_files", lambda: files)
    monkeypatch.setattr(handout, "uncommitted", lambda: [])
    # the planted numbers are now in the copy, so the draws move off them: pin the draws
    monkeypatch.setattr(handout, "draws", lambda n, printed, progress=None: (students, []))
    (tmp_path / "names.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
    args = [str(tmp_path / "a"), f"--roster={tmp_path / 'names.txt'}"]
    assert handout.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "3 answers" in err[0], err
    for what in ("Ada Lovelace's grpo_residual", "Alan Turing's grpo_residual",
                 "w~ is detached", "--allow_leaks", "another way on the roster"):
        assert what in err[0], what
    assert not (tmp_path / "a").exists()
    assert handout.main(args[:1] + ["--allow_leaks"] + args[1:]) == 0
    notes = capsys.readouterr().err.strip().splitlines()
    assert len(notes) == 3 and all(n.startswith("note: the copy holds") for n in notes), notes


def test_a_name_with_no_free_draw_is_named_not_a_traceback(copy, monkeypatch):
    """If no draw of a name were free of the copy's numbers, the roster is refused naming
    it (here every draw is made to clash)."""
    monkeypatch.setattr(truth, "clashes", lambda key, printed: ["x"])
    students, none = handout.draws(["Ada Lovelace"], frozenset())
    assert students == {} and none == ["Ada Lovelace"]
    assert "'Ada Lovelace''s numbers" in handout.leak_message([], none)


def test_handout_help():
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("usage:") and not proc.stderr
    for flag in ("--roster", "--allow_dirty", "--allow_leaks"):
        assert flag in proc.stdout
