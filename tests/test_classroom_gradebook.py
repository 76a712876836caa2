"""A hand-in a class can follow and a gradebook a teacher can use (exercises/answers/
collect.py, gradebook.py, mark.py): every bad submission costs its author alone, with one
line on their row; points with EXERCISES.md's weights; each catalogued wrong program named
in a student's words; written answers gathered and flagged; a CSV no student can turn into
a formula. Teacher's copy only."""

import csv
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises import check, handin, handout  # noqa: E402
from exercises.answers import collect, gradebook, mark, rehearse, sandbox, wrong_code  # noqa: E402

try:
    sandbox.mode()
    CAN = True
except sandbox.SandboxError:
    CAN = False
needs_sandbox = pytest.mark.skipif(not CAN, reason="this machine cannot make a sandbox")


def test_the_points_are_the_ones_exercises_md_gives():
    text = open(os.path.join(ROOT, "EXERCISES.md"), encoding="utf-8").read()
    table = text[text.index("### Marks"):]
    rows = re.findall(r"^\| (\d) \| (.*?) \| (.*?) \| (\d+) \|$", table, re.M)
    assert len(rows) == 7
    for n, tool, written, total in rows:
        want = gradebook.POINTS[f"ex{n}"]
        numbers = re.match(r"(\d) numbers, 1 point each", tool)
        assert want.get("numbers") == (int(numbers.group(1)) if numbers else None), n
        assert want.get("code") == (int(tool.split(", ")[1].split()[0])
                                    if tool.startswith("the program") else None), n
        assert want.get("written") == (int(written.split(", ")[1].split()[0])
                                       if "WHY" in written else None), n
        assert sum(want.values()) == int(total), n
        if "numbers" in want:
            assert want["numbers"] == len(check.KEYS[f"EX{n}"])
    assert re.search(rf"^\| all \| {gradebook.MARKED} \| "
                     rf"{sum(gradebook.WRITTEN_POINTS.values())} \| 44 \|$", table, re.M)


@pytest.mark.parametrize("ex, name", [(ex, n) for ex in wrong_code.WRONG
                                      for n in wrong_code.WRONG[ex]
                                      if n != "the global random stream, not the generator"])
def test_every_catalogued_wrong_program_is_named_in_its_own_words(ex, name):
    """As the marker sees it: the program's outputs on fresh inputs, through the sandbox's
    JSON form, are named as that program's mistake (the global random stream, which no
    output can pin, aside)."""
    fn = wrong_code.WRONG[ex][name]
    calls = mark.calls_for(ex)
    raw = [{k: (v if k in ("error", "stub") else check.encode(v))
            for k, v in check.evaluate(c, fn).items()} for c in calls]
    results = [check.decode_result(r) for r in json.loads(json.dumps(raw))]
    assert gradebook.name_mistake(ex, calls, results) == wrong_code.SAYS[ex][name]


def test_right_code_is_named_as_no_mistake():
    calls = mark.calls_for("ex2")
    results = [check.evaluate(c, wrong_code.reference("adv_orthogonal")) for c in calls]
    assert gradebook.name_mistake("ex2", calls, results) is None


@pytest.mark.parametrize("text, flag", [
    ("", "empty"), ("because the lengths differ", "4 words"),
    ("x " * 25, "only 1 different words in 25"),
    ("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 a b c", "mostly numbers"),
    (gradebook.QUESTIONS["EX1_WHY"], "the question's own words"),
    ("grpo weighs each copy by 1/L_i, so the short rollouts 2 and 4, which failed, push the "
     "shared token down harder than the long rewarded ones push it up: net -0.0321.", None),
])
def test_filler_is_flagged_and_an_argument_is_not(text, flag):
    got = gradebook.filler(text, gradebook.QUESTIONS["EX1_WHY"])
    assert (got is None) if flag is None else (flag in got), got


def test_a_name_a_spreadsheet_would_run_stays_text():
    assert gradebook.cell('=HYPERLINK("x")') == '\'=HYPERLINK("x")'
    assert gradebook.cell("+1") == "'+1" and gradebook.cell("@SUM") == "'@SUM"
    assert gradebook.cell("Ada\nLovelace") == "Ada Lovelace" and gradebook.cell(3) == 3


# ----------------------------------------------------------------------------- collect

def make(top, label, files, layout="flat"):
    """A submission: a zip (label ends .zip) or a folder; files {member: bytes or text}."""
    if label.endswith(".zip"):
        with zipfile.ZipFile(top / label, "w") as z:
            for member, data in files.items():
                z.writestr(member, data)
        return
    for member, data in files.items():
        rel = handin.MEMBERS[member] if layout == "copy" else member
        path = top / label / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))


def sheet(name):
    return f"STUDENT = {name!r}\nEX1 = {{'grpo_net': 0.1}}\n"


def said(sub):
    return " | ".join(sub.problems)


def gathered(tmp_path, roster=("Ada Lovelace", "Alan Turing", "Grace Hopper")):
    top, work = tmp_path / "subs", tmp_path / "work"
    work.mkdir()
    subs, missing, warnings = collect.gather(str(top), str(work), dict.fromkeys(roster))
    return {s.label: s for s in subs}, missing, warnings


def test_each_bad_submission_gets_its_own_line_and_the_rest_are_read(tmp_path):
    top = tmp_path / "subs"
    top.mkdir()
    pack = handin.pack_name("Alan Turing")
    make(top, "ada", {"sheet.py": sheet("ada  lovelace"), "loss.py": "x = 1\n"}, "copy")
    make(top, pack, {"sheet.py": "import os\nSTUDENT = 'Alan Turing'\n", "loss.py": "x = 1\n"})
    make(top, "Grace Hopper", {"loss.py": "x = 1\n"})
    make(top, "typo", {"sheet.py": sheet("Grace Hoper"), "batching.py": "#" * (2 << 20)})
    make(top, "syntax", {"sheet.py": "STUDENT = 'x\n"})
    (top / "half.zip").write_bytes(b"PK\x03\x04 not a zip")
    (top / "names.txt").write_text("a stray file")
    (top / ".hidden").mkdir()
    subs, missing, warnings = gathered(tmp_path)
    assert subs["ada"].name == "Ada Lovelace" and subs["ada"].problems == []
    assert os.path.isfile(os.path.join(subs["ada"].folder, "loss.py"))
    assert subs[pack].name == "Alan Turing"  # named from the pack's file name
    assert "line 1: the sheet may only assign values" in subs[pack].problems[0]
    assert subs["Grace Hopper"].problems[0].startswith("no sheet.py")
    assert subs["typo"].on_roster is False and subs["typo"].tables == collect.DRAW_0
    assert "did you mean 'Grace Hopper'" in subs["typo"].problems[0]
    assert "batching.py is larger than 1024 KB" in subs["typo"].problems[1]
    assert "sheet.py, line 1: not Python" in said(subs["syntax"])
    assert "not a readable zip" in said(subs["half.zip"])
    assert subs["Grace Hopper"].problems == ["no sheet.py: numbers and written answers not "
                                             "marked"]
    assert missing == []
    assert any("names.txt is skipped" in w for w in warnings)
    assert any(".hidden is skipped" in w for w in warnings)
    assert sorted(os.listdir(top)) == sorted([".hidden", "ada", pack, "Grace Hopper", "typo",
                                              "syntax", "half.zip", "names.txt"])


def test_links_pipes_bombs_and_doubles_are_refused_inside_their_own_submission(tmp_path):
    top = tmp_path / "subs"
    (top / "link").mkdir(parents=True)
    (top / "link" / "sheet.py").symlink_to("/etc/passwd")
    (top / "pipe").mkdir()
    os.mkfifo(top / "pipe" / "sheet.py")
    with zipfile.ZipFile(top / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("sheet.py", sheet("Ada Lovelace"))
        z.writestr("deep/loss.py", b"\0" * (64 << 20))  # 64 MB of zeros in a few KB
    with zipfile.ZipFile(top / "double.zip", "w") as z:
        z.writestr("a/sheet.py", sheet("Ada Lovelace"))
        z.writestr("b/sheet.py", sheet("Alan Turing"))
    (top / "platform").mkdir()
    with zipfile.ZipFile(top / "platform" / "anything.zip", "w") as z:
        z.writestr("handin/sheet.py", sheet("Alan Turing"))
    subs, missing, _ = gathered(tmp_path)
    assert "sheet.py is a link: not followed" in said(subs["link"])
    assert "sheet.py is a link or a special file" in said(subs["pipe"])
    assert subs["bomb.zip"].problems == ["loss.py is larger than 1024 KB: not marked"]
    assert os.path.getsize(os.path.join(subs["bomb.zip"].folder, "sheet.py")) > 0
    assert "two files named sheet.py" in said(subs["double.zip"])
    assert subs["platform"].name == "Alan Turing" and subs["platform"].problems == []
    assert missing == ["Grace Hopper"]


def test_the_roster_is_read_from_names_txt_or_the_copy_s_roster_json(tmp_path):
    (tmp_path / "names.txt").write_text("Ada Lovelace\nAlan Turing\n", encoding="utf-8")
    # names.txt: the draws a copy of the last commit gives them, as the handout drew them
    assert mark.class_roster(str(tmp_path / "names.txt")) == handout.class_draws(
        ["Ada Lovelace", "Alan Turing"])
    draws = {"EX1": 3, "EX4": 0, "EX7": 1}
    (tmp_path / "roster.json").write_text(json.dumps(
        {"version": 2, "students": {"Ada Lovelace": draws}}), encoding="utf-8")
    assert mark.class_roster(str(tmp_path / "roster.json")) == {"Ada Lovelace": draws}
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(mark.MarkError, match="not readable JSON"):
        mark.class_roster(str(tmp_path / "bad.json"))
    assert mark.class_roster(None) is None


def test_a_pasted_paragraph_for_a_name_is_cut(tmp_path):
    top = tmp_path / "subs"
    make(top, "long", {"sheet.py": sheet("Ada " * 300)})
    subs, _, _ = gathered(tmp_path)
    assert len(subs["long"].name) == collect.MAX_NAME and "cut to 200" in said(subs["long"])


# ----------------------------------------------------------------------------- the marker

BAD = ("broken: loss.py syntax error", "broken: sheet syntax error", "broken: stray import",
       "broken: no sheet", "broken: name off the roster", "broken: file too large",
       "broken: half a zip", "hostile: vandal", "right", "wrong: ex6 unfixed",
       "wrong: copied answers", "hostile: a formula for a name")


@needs_sandbox
def test_a_class_with_every_bad_submission_is_marked_and_each_verdict_is_right(tmp_path):
    """Every kind of bad submission the issue names, beside right and wrong ones, marked
    by the real marker: exit 0, and the gradebook says of each what it must (rehearse.py's
    expectations: points, the mistake named, the note, the roster column, the flags)."""
    kinds = [k for k in rehearse.KINDS if k[0] in BAD]
    kinds = list({k[0]: k for k in kinds}.values())
    assert len(kinds) == len(BAD)
    subs = tmp_path / "subs"
    subs.mkdir()
    expected, roster, _ = rehearse.make_class(len(kinds) + 1, str(subs), kinds)
    (tmp_path / "names.txt").write_text("\n".join(roster) + "\n", encoding="utf-8")
    before = sorted(str(p.relative_to(subs)) for p in subs.rglob("*"))
    proc = subprocess.run([sys.executable, "-m", "exercises.answers.mark", str(subs),
                           f"--roster={tmp_path / 'names.txt'}", f"--out={tmp_path / 'marks'}",
                           "--timeout=30"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "marks" / "gradebook.csv", encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rehearse.verify(rows, expected) == []
    assert sorted(str(p.relative_to(subs)) for p in subs.rglob("*")) == before
    warnings = [x for x in proc.stderr.splitlines() if x.startswith("warning: ")]
    assert any("is not on the roster" in w for w in warnings)
    assert any("nothing handed in by" in w for w in warnings)
    written = (tmp_path / "marks" / "written" / "EX6_WHY.md").read_text(encoding="utf-8")
    assert written.count("\n## ") == len(rows) and "Flag: the same as" in written
    assert "| student | ex1 |" in proc.stdout and "gradebook.csv" in proc.stdout


def test_a_rehearsal_that_finds_a_wrong_verdict_says_so():
    """verify is not vacuous: a row that differs from its expectation is reported."""
    e = rehearse.expect("a.zip", "Ada", points={"ex2": 0}, mistakes={"ex2": "guard"})
    row = {"student": "Ada", "on the roster": "yes", "handed in as": "a.zip", "note": "",
           **{f"{ex} (of {n})": str(n) for ex, n in rehearse.FULL.items()},
           **{f"{ex} mistake": "" for ex in ("ex2", "ex3", "ex5", "ex6")}}
    wrong = rehearse.verify([row], [e])
    assert len(wrong) == 2 and "points" in wrong[0] and "lacks 'guard'" in wrong[1]
    assert rehearse.verify([], [e]) == ["a.zip: no row in the gradebook", "0 rows for 1 expected"]


def test_the_marker_refuses_an_output_folder_in_use_before_reading_anything(tmp_path, capsys):
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs-marks").mkdir()
    (tmp_path / "subs-marks" / "old.csv").write_text("keep")
    assert mark.main([str(tmp_path / "subs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists and is not an empty folder" in err[0]
    assert mark.main([str(tmp_path / "subs"), f"--out={tmp_path / 'subs' / 'm'}"]) == 2
    assert "inside SUBMISSIONS" in capsys.readouterr().err
    assert (tmp_path / "subs-marks" / "old.csv").read_text() == "keep"
