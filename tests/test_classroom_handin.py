"""What a student runs, in a built student copy: the first command tests the install (and
says what is missing in one line), names are found on the roster whatever their case and
spacing, and ``python -m exercises.handin`` packs the work, refusing in one line, before
writing anything, what would cost the student marks. Teacher's copy only (it builds the
copy)."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises import handin, roster  # noqa: E402
from exercises.answers import key  # noqa: E402

STUDENTS = ("Ada Lovelace", "Émilie du Châtelet")


@pytest.fixture(scope="module")
def copy(student_copy):
    return student_copy(STUDENTS)


@pytest.fixture
def student(copy):
    """The copy, with a sheet and a loss.py that each test may change; put back after."""
    sheet, code = copy / "exercises" / "sheet.py", copy / "loss.py"
    blank, stubbed = sheet.read_text(encoding="utf-8"), code.read_text(encoding="utf-8")
    yield copy
    sheet.write_text(blank, encoding="utf-8")
    code.write_text(stubbed, encoding="utf-8")
    for p in copy.glob("handin-*.zip"):
        p.unlink()


def run(copy, module, *args, env=None):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=copy, capture_output=True,
                          text=True, timeout=120, env=env)


def set_student(copy, name, extra=""):
    sheet = copy / "exercises" / "sheet.py"
    text = sheet.read_text(encoding="utf-8").replace('STUDENT = ""', f"STUDENT = {name!r}")
    sheet.write_text(extra + text, encoding="utf-8")


def one_error(proc, *phrases):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc
    for p in phrases:
        assert p in lines[0], (p, lines[0])


def test_handin_packs_the_four_files_under_the_roster_s_spelling(student):
    set_student(student, "ada  LOVELACE")
    proc = run(student, "exercises.handin")
    assert proc.returncode == 0, proc.stderr
    packs = list(student.glob("handin-*.zip"))
    assert [p.name for p in packs] == [handin.pack_name("Ada Lovelace")]
    assert packs[0].name.startswith("handin-ada-lovelace-") and "'Ada Lovelace'" in proc.stdout
    with zipfile.ZipFile(packs[0]) as z:
        assert sorted(z.namelist()) == sorted([*handin.MEMBERS, handin.MANIFEST])
        assert z.read("loss.py") == (student / "loss.py").read_bytes()
        made = json.loads(z.read(handin.MANIFEST))  # who it was made for, and when
        assert made["student"] == "Ada Lovelace" and made["made"].endswith("Z")
    again = run(student, "exercises.handin")  # run again: the new pack replaces the old one
    assert again.returncode == 0 and len(list(student.glob("handin-*"))) == 1
    assert not list(student.glob(".handin-*"))


def test_a_name_off_the_roster_is_refused_with_the_nearest_name(student):
    set_student(student, "Ada Lovelac")
    one_error(run(student, "exercises.handin"), "not on this class's roster",
              "did you mean 'Ada Lovelace'", "--off_roster")
    assert not list(student.glob("handin-*"))
    proc = run(student, "exercises.handin", "--off_roster")
    assert proc.returncode == 0 and list(student.glob(handin.pack_name("Ada Lovelac")))


@pytest.mark.parametrize("change, phrase", [
    ("sheet: import", "line 1: the sheet may only assign values"),
    ("sheet: no name", "write your name or student id in STUDENT"),
    ("loss.py: too large", "loss.py is larger than 1024 KB"),
    ("flag: unknown", "unknown argument '--fast'"),
    ("flag: twice", "--off_roster is given twice"),
])
def test_what_would_cost_marks_is_refused_before_anything_is_written(student, change, phrase):
    args = []
    if change == "sheet: import":
        set_student(student, "Ada Lovelace", extra="import os\n")
    elif change != "sheet: no name":
        set_student(student, "Ada Lovelace")
    if change == "loss.py: too large":
        with open(student / "loss.py", "a") as f:
            f.write("#" * (2 << 20))
    args = {"flag: unknown": ["--fast"], "flag: twice": ["--off_roster"] * 2}.get(change, [])
    one_error(run(student, "exercises.handin", *args), phrase)
    assert not list(student.glob("handin-*")) and not list(student.glob(".handin-*"))


def test_code_that_does_not_compile_is_packed_with_a_note(student):
    set_student(student, "Émilie du Châtelet")
    with open(student / "loss.py", "a") as f:
        f.write("\ndef broken(:\n")
    proc = run(student, "exercises.handin")
    assert proc.returncode == 0, proc.stderr
    assert "note: loss.py does not compile (SyntaxError" in proc.stderr
    assert list(student.glob(handin.pack_name("Émilie du Châtelet")))


def test_the_first_command_tests_the_install_and_says_what_is_missing(student, tmp_path):
    """With torch made unimportable, one line names it and the fallback; --no_torch still
    prints the student's tables with Python alone."""
    set_student(student, "Ada Lovelace")
    fake = tmp_path / "blocked" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "blocked"))
    proc = run(student, "exercises.problems", env=env)
    one_error(proc, "cannot import torch (ImportError: blocked for this test)", "--no_torch",
              "pair with a neighbour")
    proc = run(student, "exercises.problems", "--no_torch", env=env)
    assert proc.returncode == 0 and "Tables for STUDENT = 'Ada Lovelace'" in proc.stdout
    proc = run(student, "exercises.problems")
    assert proc.returncode == 0 and proc.stdout.startswith("setup ok: torch "), proc.stderr


def test_a_name_in_another_case_gets_its_own_tables(student):
    """"ada lovelace" is Ada Lovelace: the roster's tables, no note; the check agrees."""
    set_student(student, "Ada Lovelace")
    right = run(student, "exercises.problems", "--no_torch").stdout
    sheet = student / "exercises" / "sheet.py"
    sheet.write_text(sheet.read_text(encoding="utf-8").replace(
        "STUDENT = 'Ada Lovelace'", "STUDENT = 'ada   lovelace'"), encoding="utf-8")
    got = run(student, "exercises.problems", "--no_torch").stdout
    assert "note:" not in got and "Exercise 1" in got and got == right


def test_one_fold_for_every_name():
    assert roster.fold("  ada\u00a0 LOVELACE ") == roster.fold("Ada Lovelace") == "ada lovelace"
    assert roster.find("ÉMILIE du châtelet", STUDENTS) == "Émilie du Châtelet"
    assert roster.find("Ada Byron", STUDENTS) is None
    assert roster.near("Ada Lovelac", STUDENTS) == "Ada Lovelace"
    assert roster.near("Zz", STUDENTS) is None
    assert handin.pack_name("Émilie du Châtelet") == handin.pack_name("émilie  DU châtelet")
    assert handin.pack_name("Li Wei") != handin.pack_name("Li-Wei")
    sheet = key.filled_sheet("ada lovelace")
    assert sheet.EX1 == key.filled_sheet("Ada Lovelace").EX1
