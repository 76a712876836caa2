"""The classroom set (EXERCISES.md, exercises/): the reference answers pass every check,
the catalogues of wrong numbers and wrong programs fail, and the student copy built by
exercises/handout.py holds no answers, fails its checks cleanly, passes its tests and
resolves its links. Teacher's copy only: exercises/handout.py leaves this file out of the
student copy. The marker's sandbox is tested in tests/test_classroom_marker.py."""

import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip(
        "teacher's copy only: exercises/answers/ is not in a student copy", allow_module_level=True
    )

import batching  # noqa: E402
import loss  # noqa: E402
from exercises import check, ex6_buggy_loss, problems, roster  # noqa: E402
from exercises.answers import key, mistakes, truth, wrong_code  # noqa: E402
from exercises.answers.audit import random_names  # noqa: E402

STUDENTS = ("Ada Lovelace", "s1234567", "Émilie du Châtelet")
NAMES = random_names(30)  # the audit measures 200; a class of 30 keeps the suite quick
ROSTER = {"version": roster.VERSION, "students": {n: truth.pick_tables(n) for n in STUDENTS}}
FIXED = wrong_code.fixed


def env(name=STUDENTS[0], **sheet_changes):
    sheet = key.filled_sheet(name)
    for k, v in sheet_changes.items():
        setattr(sheet, k, v)
    return {"sheet": sheet, "ex6": FIXED, "roster": ROSTER}


def failures(ex, e):
    return [(what, why) for what, why in check.run(ex, e) if why is not None]


@pytest.mark.parametrize("name", STUDENTS)
@pytest.mark.parametrize("ex", ["ex1", "ex4", "ex7"])
def test_the_key_passes_the_number_checks(ex, name):
    assert failures(ex, env(name)) == []


@pytest.mark.parametrize("ex", ["ex2", "ex3", "ex5", "ex6"])
def test_the_reference_answers_pass(ex):
    assert failures(ex, env()) == []


def test_students_get_different_tables():
    tables = [truth.key(name) for name in STUDENTS]
    assert all(a != b for i, a in enumerate(tables) for b in tables[i + 1:])


@pytest.mark.parametrize("name", STUDENTS)
def test_the_key_is_what_the_library_computes(name):
    """The key is closed forms; here each residual and coefficient comes from loss.py's
    autograd (check.coefficients), and the counts from toy_tasks' texts."""
    import toy_tasks
    v = truth.pick_tables(name)
    k, p1, p4, p7 = (truth.key(name), problems.ex1(name, v["EX1"]), problems.ex4(name, v["EX4"]),
                     problems.ex7(name, v["EX7"]))
    batch = check.shared_group(p1["lengths"], p1["rewards"])
    c = check.coefficients("grpo", batch, "sym")[:, 0]
    dr = check.coefficients("dr_grpo", batch, "sym", max_len=p1["L_max"])[:, 0]
    i = p1["k"] - 1
    assert k["EX1"]["grpo_residual"] == pytest.approx(float(c.sum().abs() / c.abs().sum()),
                                                      rel=1e-5)
    assert k["EX1"]["grpo_net"] == pytest.approx(float(c.sum()), rel=1e-4)
    assert k["EX1"]["grpo_coef_k"] == pytest.approx(float(c[i]), rel=1e-4)
    assert k["EX1"]["dr_grpo_coef_k"] == pytest.approx(float(dr[i]), rel=1e-5)
    batch = check.shared_group(p4["lengths"], p4["rewards"],
                               log_s=[math.log(s) for s in p4["s"]])
    for name_, number in (("gspo", "gspo_residual"), ("luspo", "luspo_residual")):
        c = check.coefficients(name_, batch, "sym")[:, 0]
        assert k["EX4"][number] == pytest.approx(float(c.sum().abs() / c.abs().sum()), rel=1e-5)
    f64 = lambda xs: torch.tensor(xs, dtype=torch.float64)
    r, s, j = f64(p4["rewards"]), f64(p4["s"]), p4["k"] - 1
    w = loss.adv_orthogonal(s, r - r.mean(), torch.zeros(4, dtype=torch.long))
    assert k["EX4"]["orth_delta_k"] == pytest.approx(float(w[j] - s[j]), rel=1e-9)
    text = toy_tasks.make_task("add", 2, True).solution(p7["problem"])
    assert k["EX7"]["tokens"] == len(text) + 1  # EOS
    assert k["EX7"]["template"] == sum(not ch.isdigit() for ch in text) + 1
    pairs = [(x, y) for x in range(p7["lo"], p7["hi"] + 1) for y in range(p7["lo"], p7["hi"] + 1)]
    assert k["EX7"]["plain_tokens"] == sum(len(str(x + y)) + 1 for x, y in pairs)


# ---------------------------------------------------------------- wrong numbers

def test_every_catalogued_mistake_is_refused_for_a_class():
    """Each mistake of the catalogue gives a number the marking rule refuses, for every
    one of 30 names (the audit runs 200), and key.marks names its hint."""
    accepted, silent = [], []
    for name in NAMES:
        tables = truth.pick_tables(name)
        right = truth.key(name, tables)
        for ex in right:
            for k, wrong in mistakes.wrong_numbers(name, ex, tables[ex], right[ex]).items():
                for hint, v in wrong:
                    if truth.right(v, right[ex][k], k):
                        accepted.append((name, ex, k, hint))
                    elif key.hint(name, ex, tables, right[ex], k, v) is None:
                        silent.append((name, ex, k, hint))
    assert accepted == [] and silent == []


def test_right_answers_are_accepted_for_a_class():
    """The key rounded to 3 significant digits, truncated to 3, at full precision, and
    rounded to 4: all accepted; counts exactly."""
    ways = {
        "rounded": lambda v: float(f"{v:.3g}"),
        "truncated": lambda v: float(f"{v:.6e}"[:4] + f"{v:.6e}"[8:]) if v >= 0
        else float(f"{v:.6e}"[:5] + f"{v:.6e}"[9:]),
        "full": lambda v: v,
        "4 digits": lambda v: float(f"{v:.4g}"),
    }
    refused = []
    for name in NAMES:
        for ex, values in truth.key(name).items():
            for what, f in ways.items():
                given = {k: (v if k in check.COUNTS else f(v)) for k, v in values.items()}
                if not all(truth.right(given[k], v, k) for k, v in values.items()):
                    refused.append((name, ex, what))
    assert refused == []


def test_a_count_must_be_exact():
    assert truth.right(1523, 1523, "plain_tokens") and not truth.right(1520, 1523, "plain_tokens")
    assert truth.right(0.1224, 0.1234, "grpo_net") and not truth.right(0.121, 0.1234, "grpo_net")


def test_the_marking_rule_by_hand():
    """Three-digit mantissas within one unit, read on the key's decade."""
    assert roster.sig3(0.012345) == (1, 123, -2) and roster.sig3(-999.6) == (-1, 100, 3)
    assert roster.within(0.124, 0.12345) and roster.within(0.122, 0.12345)
    assert not roster.within(0.121, 0.12345) and not roster.within(-0.123, 0.12345)
    assert roster.within(0.1001, 0.0999) is False  # 1001 against 999 on the key's decade
    assert roster.within(0.0998, 0.1) and roster.within(23, 23) and not roster.within(22, 23.4)


def test_the_key_gives_a_hint_for_population_sigma_and_none_for_a_random_slip():
    name = STUDENTS[0]
    tables = truth.pick_tables(name)
    right = truth.key(name, tables)["EX1"]
    sheet = key.filled_sheet(name)
    sheet.EX1["grpo_coef_k"] = right["grpo_coef_k"] * (4 / 3) ** 0.5
    sheet.EX1["grpo_net"] = right["grpo_net"] * 1.37
    got = {k: (ok, h) for ex, k, _, ok, h in key.marks(name, sheet, tables) if ex == "EX1"}
    assert got["grpo_coef_k"] == (False, mistakes.SIGMA)
    assert got["grpo_net"] == (False, None) and got["grpo_residual"] == (True, None)


def test_the_check_gives_no_verdict_on_a_value_only_hints_for_fixed_wrong_ideas():
    """A wrong number passes the student's check (it holds no key); a value that a wrong
    idea gives on any table fails with a hint that names the idea, not the right value."""
    e = env()
    e["sheet"].EX1["grpo_net"] *= 1.5
    assert failures("ex1", e) == []
    e["sheet"].EX1["grpo_residual"] = 0
    (what, why), = failures("ex1", e)
    assert what == check.NUMBERS and why == (
        "EX1['grpo_residual'] = 0 is not right on your table; hint: "
        + check.HINTS[("EX1", "grpo_residual", 0.0)])
    e = env()
    e["sheet"].EX7["template"] = 1
    assert "hint" in failures("ex7", e)[0][1]
    e["sheet"].EX7["template"] = 2.5
    assert "a count: a whole number" in failures("ex7", e)[0][1]


def test_the_fixed_wrong_ideas_never_give_a_key():
    """The check's hints are only for values never right on a table a student gets."""
    for name in NAMES:
        for ex, values in truth.key(name).items():
            for (hex_, number, v) in check.HINTS:
                assert hex_ != ex or not truth.right(v, values[number], number), (name, number)


def test_the_check_needs_a_roster_and_your_name_on_it():
    bad = failures("ex1", dict(env(), sheet=key.filled_sheet("Not On It")))
    assert "is not on this class's roster" in bad[0][1]
    bad = failures("ex1", dict(env(), roster=None))
    assert "no class roster" in bad[0][1]


def test_prose_must_be_written_but_is_not_graded():
    for n in (1, 3, 4, 6, 7):
        bad = failures(f"ex{n}", env(**{f"EX{n}_WHY": "blah " * 5}))
        assert [w for w, _ in bad] == [check.WRITTEN], (n, bad)


# ---------------------------------------------------------------- wrong programs

WHERE = {"ex2": (loss, "adv_orthogonal"), "ex3": (loss, "min_replace"),
         "ex5": (batching, "query_balanced")}


@pytest.mark.parametrize("ex, mistake", [(ex, m) for ex in wrong_code.WRONG
                                         for m in wrong_code.WRONG[ex]])
def test_plausible_wrong_code_is_refused(monkeypatch, ex, mistake):
    fn = wrong_code.WRONG[ex][mistake]
    if ex == "ex6":
        bad = failures(ex, dict(env(), ex6=fn))
    else:
        monkeypatch.setattr(*WHERE[ex], fn)
        bad = failures(ex, env())
    assert [w for w, _ in bad if w != check.WRITTEN], mistake


def test_each_new_wrong_program_fails_the_property_that_names_its_mistake(monkeypatch):
    expect = {"skips groups of one row": "orthogonal to A in every group",
              "output detached": "differentiable in w",
              "output rebuilt from numbers": "differentiable in w",
              "guard at |A|^2 < 0.01": "orthogonal to A in every group",
              "float32 output": "hand examples"}
    for mistake, prop in expect.items():
        monkeypatch.setattr(loss, "adv_orthogonal", wrong_code.EX2[mistake])
        assert prop in [w for w, _ in failures("ex2", env())], mistake


def test_ex6_runs_on_the_checks_own_adv_orthogonal_whatever_exercise_2_is(monkeypatch, capsys):
    """Unsolved, or detached (which would hide the bug), exercise 2 changes nothing: the
    fixed loss passes, the buggy one fails, and the printout says why."""
    def unsolved(w, adv, group):
        raise NotImplementedError("exercise 2: write loss.adv_orthogonal")
    for ex2 in (unsolved, wrong_code.EX2["output detached"]):
        monkeypatch.setattr(loss, "adv_orthogonal", ex2)
        assert failures("ex6", env()) == []
        bad = [w for w, _ in failures("ex6", dict(env(), ex6=wrong_code.buggy))]
        assert bad == ["the specified gradient", "several groups, L_max above the longest"]
        check.show_ex6(ex6_buggy_loss.dfpo_orth_loss)
        out = capsys.readouterr().out
        assert check.EX6_SAYS in out and "shared-token residual: 0.2228" in out


# ---------------------------------------------------------------- sheets and rosters

DEEP = "STUDENT = 'x'\nEX1 = {'grpo_net': " + "-" * 100000 + "1}\n"


@pytest.mark.parametrize("body", [
    "class F(float):\n    __sub__ = lambda a, b: 0.0\nSTUDENT = 'x'\nEX1 = {'grpo_net': F(1)}\n",
    "import check\ncheck.CHECKS.clear()\nSTUDENT = 'x'\n",
    "STUDENT = 'x'\nEX1 = {'grpo_net': 2 ** 3}\n",
    "STUDENT = 'x'\nEX1 = {'grpo_net': [1, 2]}\n",
    "STUDENT = open('/etc/hostname').read()\n",
    DEEP,
    "STUDENT = 'x'\nEX1 = " + "[" * 150 + "]" * 150 + "\n",
])
def test_a_sheet_is_read_as_data_never_run(tmp_path, body):
    """A sheet that does anything but assign plain values is refused in one line, without a
    traceback (a 100,000-deep expression included), and none of its code runs."""
    path = tmp_path / "sheet.py"
    path.write_text(body)
    with pytest.raises(check.SheetError):
        check.read_sheet(str(path))


def test_the_key_refuses_a_deeply_nested_sheet_in_one_line(tmp_path):
    (tmp_path / "sheet.py").write_text(DEEP)
    proc = subprocess.run([sys.executable, "-m", "exercises.answers.key", "x",
                           str(tmp_path / "sheet.py")], cwd=ROOT, capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "nests an expression" in lines[0], proc


def test_the_committed_sheet_reads_as_data_and_has_no_written_answer():
    sheet = check.read_sheet(os.path.join(ROOT, "exercises", "sheet.py"))
    assert sheet.STUDENT == "" and set(sheet.EX1) == set(check.KEYS["EX1"])
    assert set(sheet.EX4) == set(check.KEYS["EX4"]) and set(sheet.EX7) == set(check.KEYS["EX7"])
    for n in (1, 3, 4, 6, 7):
        assert not str(getattr(sheet, f"EX{n}_WHY")).strip(), n


@pytest.mark.parametrize("body, why", [
    ("{", "not readable JSON"),
    ("[1, 2]", "not a roster of this version"),
    ('{"iterations": 1000000000, "students": {}}', "not a roster of this version"),
    ('{"version": 2, "students": {"Ada": {"EX1": 1000000000, "EX4": 0, "EX7": 0}}}',
     "not a roster entry"),
    ('{"version": 2, "students": {"Ada\\u2028B": {"EX1": 0, "EX4": 0, "EX7": 0}}}',
     "not a roster entry"),
])
def test_a_roster_that_is_not_this_projects_is_refused_before_use(tmp_path, body, why):
    path = tmp_path / "roster.json"
    path.write_text(body)
    with pytest.raises(roster.RosterError, match=why):
        roster.load(str(path))


def test_a_name_typed_with_a_combining_accent_or_two_spaces_is_the_same_student():
    import unicodedata
    name = STUDENTS[2]  # "Émilie du Châtelet", composed
    for typed in (unicodedata.normalize("NFD", name), "  Émilie  du Châtelet "):
        sheet = key.filled_sheet(name)
        sheet.STUDENT = typed
        assert failures("ex1", dict(env(), sheet=sheet)) == []
        assert problems.ex1(typed, 1) == problems.ex1(name, 1)


def test_the_key_run_as_a_file_says_how_to_run_it():
    out = subprocess.run([sys.executable, "exercises/answers/key.py"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr == (
        "error: run it from the repository root as python -m exercises.answers.key\n")


# ---------------------------------------------------------------- the student copy

@pytest.fixture(scope="module")
def student_copy(tmp_path_factory):
    """The copy of the last commit (--allow_dirty: a developer's uncommitted work does not
    stop the suite; the copy is the commit either way), with a roster of STUDENTS."""
    names = tmp_path_factory.mktemp("roster") / "names.txt"
    names.write_text("\n".join(STUDENTS) + "\n", encoding="utf-8")
    out = tmp_path_factory.mktemp("handout") / "class"
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(out), f"--roster={names}",
                           "--allow_dirty"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def in_copy(copy, *args, timeout=300):
    return subprocess.run([sys.executable, *args], cwd=copy, capture_output=True, text=True,
                          timeout=timeout)


def test_the_student_copy_holds_no_key_no_results_and_no_answer(student_copy):
    umask = os.umask(0)
    os.umask(umask)
    assert student_copy.stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0o700
    assert sorted(p.name for p in (student_copy / "results").iterdir()) == ["README.md"]
    assert not (student_copy / "exercises" / "answers").exists()
    assert not list((student_copy / "tests").glob("test_exercises.py"))
    assert not list((student_copy / "tests").glob("test_classroom_*.py"))
    r = json.loads((student_copy / "exercises" / "roster.json").read_text(encoding="utf-8"))
    from exercises import handout  # draws only (the handout's, off the copy's numbers)
    assert r == {"version": roster.VERSION, "students": handout.class_draws(list(STUDENTS))}
    answers = ['"amin"', "dot / nrm.clamp", "improved = True", "def ex1_truth", "pick_tables",
               "def calculator", "def wrong_numbers", "couple the rollouts again"]
    for path in student_copy.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md"):
            text = path.read_text(encoding="utf-8")
            assert not [a for a in answers if a in text], path
            assert "](exercises/answers" not in text and "<!-- teacher -->" not in text, path


def test_the_student_copy_fails_cleanly_until_solved(student_copy):
    proc = in_copy(student_copy, "-m", "exercises.check")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    for ex in check.CHECKS:
        assert f"{ex}  FAIL" in proc.stdout, (ex, proc.stdout)
    assert check.EX6_SAYS in proc.stdout and "shared-token residual: 0.2228" in proc.stdout


def test_the_student_copy_checks_a_filled_sheet(student_copy):
    """A right sheet passes ex1, ex4 and ex7; one residual of 0 fails with a hint and no
    value but the student's own."""
    path = student_copy / "exercises" / "sheet.py"
    blank = path.read_text(encoding="utf-8")
    sheet = key.filled_sheet(STUDENTS[0])
    try:
        for bad in (False, True):
            ex1 = dict(sheet.EX1, grpo_residual=0) if bad else sheet.EX1
            body = (f"STUDENT = {STUDENTS[0]!r}\nEX1 = {ex1!r}\nEX4 = {sheet.EX4!r}\n"
                    f"EX7 = {sheet.EX7!r}\n" + "".join(f"EX{n}_WHY = {'because ' * 30!r}\n"
                                                       for n in (1, 4, 7)))
            path.write_text(body, encoding="utf-8")
            proc = in_copy(student_copy, "-m", "exercises.check", "ex1", "ex4", "ex7")
            assert proc.returncode == (1 if bad else 0), proc.stdout + proc.stderr
            assert ("hint: " in proc.stdout) == bad, proc.stdout
    finally:
        path.write_text(blank, encoding="utf-8")  # the other tests see the copy as handed out


def test_the_student_copy_passes_its_tests_and_its_link_check(student_copy):
    """A subset of the copy's suite (the whole takes over 6 minutes on 2 cores): the tests of
    the stubbed functions, the tests that read results/ (skipped there, with the reason),
    the Markdown link check, the docs' promises (the README's picture among them), and the
    source rules the rewritten files must still meet. The copy's whole suite, with
    matplotlib and without, is run by hand (results/README.md, the measurements).
    tests/test_classroom_handout.py checks the rewritten mixed_rows."""
    proc = in_copy(student_copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                   "tests/test_loss.py", "tests/test_batching.py", "tests/test_structure.py",
                   "tests/test_stats.py::test_multiplicity_over_the_committed_results",
                   "tests/test_stats.py::test_the_bottom_line_repeats_only_numbers_the_json_holds",
                   "tests/test_handout.py::test_md_links_finder_is_not_vacuous",
                   "tests/test_handout.py::test_every_relative_link_in_every_markdown_file_"
                   "resolves_inside_the_repository", "tests/test_docs.py",
                   "tests/test_unused_arguments.py", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    readme = (student_copy / "README.md").read_text(encoding="utf-8")
    pictures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", readme)
    assert pictures and all((student_copy / p).is_file() for p in pictures), pictures
    assert "needs a solved exercise: exercise 2" in proc.stdout, proc.stdout[-3000:]
    assert "needs results/, the lab report's data" in proc.stdout, proc.stdout[-3000:]


@pytest.mark.parametrize("body", ["{", '{"iterations": 1000000000, "students": {}}'])
def test_a_broken_roster_is_one_line_for_the_student(student_copy, body):
    path = student_copy / "exercises" / "roster.json"
    keep = path.read_text(encoding="utf-8")
    sheet = student_copy / "exercises" / "sheet.py"
    blank = sheet.read_text(encoding="utf-8")
    try:
        path.write_text(body)
        sheet.write_text(blank.replace('STUDENT = ""', 'STUDENT = "Ada Lovelace"'))
        for module in ("exercises.check", "exercises.problems"):
            proc = in_copy(student_copy, "-m", module, timeout=60)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and "roster" in lines[0], (module, proc)
    finally:
        path.write_text(keep, encoding="utf-8")
        sheet.write_text(blank, encoding="utf-8")


def test_a_deeply_nested_sheet_is_one_line_for_the_student(student_copy):
    sheet = student_copy / "exercises" / "sheet.py"
    blank = sheet.read_text(encoding="utf-8")
    try:
        sheet.write_text(DEEP)
        proc = in_copy(student_copy, "-m", "exercises.check", "ex1", timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "nests an expression" in lines[0], proc
    finally:
        sheet.write_text(blank, encoding="utf-8")


# ---------------------------------------------------------------- handout refusals

def test_handout_refuses_uncommitted_exercises(monkeypatch):
    from exercises import handout
    monkeypatch.setattr(handout, "git", lambda *a: b"?? exercises/key_printout.txt\0")
    with pytest.raises(handout.HandoutError, match="uncommitted changes or untracked files"):
        handout.check_clean(False)


def handout_run(*args):
    return subprocess.run([sys.executable, "-m", "exercises.handout", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("body, message", [
    ("Ada\nAda\n", "twice"), ("\n\n", "holds no name"), ("Ada\u2028Lovelace\n", "U+2028"),
    ("Alan\x0bTuring\n", "U+000B"), ("Ada\n  Ada \n", "twice")])
def test_handout_refuses_a_bad_roster_in_one_line(tmp_path, body, message):
    (tmp_path / "names.txt").write_text(body, encoding="utf-8")
    proc = handout_run(tmp_path / "class", f"--roster={tmp_path / 'names.txt'}", "--allow_dirty")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["names.txt"]


def test_handout_refuses_a_used_folder_an_unknown_flag_and_an_impossible_folder(tmp_path):
    (tmp_path / "x").write_text("keep me")
    (tmp_path / "f").write_text("a file")
    for args in ([tmp_path], [tmp_path / "c", "--fast"], [tmp_path / "f" / "class"]):
        proc = handout_run(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "x"]
    assert (tmp_path / "x").read_text() == "keep me"


@pytest.mark.parametrize("args", [["--allow_dirty", "--allow_dirty"],
                                  ["--roster=a.txt", "--roster=b.txt", "--allow_dirty"]])
def test_handout_refuses_a_flag_given_twice(tmp_path, capsys, args):
    """Else one of the two would be dropped without a word (every entry point refuses it)."""
    from exercises import handout
    assert handout.main([str(tmp_path / "class"), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --") and "given twice" in lines[0]
    assert os.listdir(tmp_path) == []
