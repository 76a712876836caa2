"""What the gradebook folder gives back (exercises/answers/gradebook.py): one feedback file
per student, with the points, each wrong number's hint and each program's mistake, and no
key value; a class summary, exercise by exercise, whose numbers are counted here by hand.
Teacher's copy only; rows are made here, no marking."""

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises.answers import gradebook  # noqa: E402

HOLDS = {"ex2": [("hand examples", None)], "ex3": [("the group minimum", None)],
         "ex5": [("a valid whole-group cut", None)], "ex6": [("the specified gradient", None)]}


def row(index, name, wrong=(), failing=None, notes=()):
    numbers = [(ex, k, 0.5, (ex, k) not in wrong, "is the weight 1/L_i?" if (ex, k) in wrong
                else None)
               for ex, ks in (("EX1", "abcd"), ("EX4", "efg"), ("EX7", "hij")) for k in ks]
    checks = {ex: list(v) for ex, v in HOLDS.items()}
    mistakes = {}
    if failing:
        checks[failing] = [("hand examples", "on group (0, 0, 1): does not hold")]
        mistakes[failing] = "divides by ‖Â‖ instead of ‖Â‖²"
    return {"index": index, "student": name, "label": f"{name}.zip", "notes": list(notes),
            "on_roster": "yes", "failed": False, "numbers": numbers, "answers": {},
            "checks": checks, "mistakes": mistakes}


def test_feedback_names_each_mistake_and_its_hint_and_no_key():
    text = gradebook.feedback(row(0, "Ada Lovelace", wrong={("EX1", "b")}, failing="ex2",
                                  notes=["2 submissions name this student"]))
    assert "Marked by the tool: 21 of 28 points" in text
    assert "| ex1 | 3 of 4 |" in text and "| ex2 | 0 of 6 |" in text
    assert "EX1 b = 0.5 (hint: is the weight 1/L_i?)" in text
    assert "ex2: divides by ‖Â‖ instead of ‖Â‖²" in text and "hand examples" in text
    assert "2 submissions name this student" in text and "key" not in text.lower()
    right = gradebook.feedback(row(1, "Alan Turing"))
    assert "28 of 28" in right and "nothing: every number and program holds" in right


def test_the_summary_counts_as_a_hand_count_does():
    rows = [row(0, "a", wrong={("EX1", "b")}, failing="ex2"), row(1, "b", failing="ex2"),
            row(2, "c", wrong={("EX1", "b"), ("EX1", "c")})]
    lines = {x.split(" | ")[0].strip("| "): x for x in gradebook.summary(rows).splitlines()}
    # ex1: 3 + 4 + 2 points of 4: mean 3.00, one full; the hint on 3 wrong numbers
    assert lines["ex1"] == "| ex1 | 4 | 3.00 | 1 of 3 | is the weight 1/L_i? (3) |"
    assert lines["ex2"] == ("| ex2 | 6 | 2.00 | 1 of 3 | divides by ‖Â‖ instead of ‖Â‖² (2) "
                            "|")
    assert lines["ex3"] == "| ex3 | 3 | 3.00 | 3 of 3 | none |"


def test_feedback_files_have_one_name_per_row(tmp_path):
    rows = [row(0, "Émilie du Châtelet"), row(1, "Émilie du Châtelet"), row(2, "李")]
    gradebook.write(str(tmp_path), rows, {}, "table")
    names = sorted(os.listdir(tmp_path / "feedback"))
    assert names == ["001-Emilie-du-Chatelet.md", "002-Emilie-du-Chatelet.md", "003-student.md"]
    assert (tmp_path / "summary.md").read_text("utf-8").startswith("# The class")


def test_the_written_answers_and_feedback_name_the_roster_id_and_email():
    """A .csv roster's id and email follow the name wherever a teacher files work by it;
    a row without them shows the name alone."""
    ada = dict(row(0, "Ada Lovelace"), id="12345", email="ada@example.edu",
               answers={"EX1_WHY": "because"})
    alan = row(1, "Alan Turing")
    text = gradebook.written_file("EX1_WHY", [ada, alan], {})
    assert "## Ada Lovelace (12345, ada@example.edu)\n" in text
    assert "## Alan Turing\n" in text
    assert gradebook.feedback(ada).startswith("# Feedback: Ada Lovelace (12345, ada@example.edu)")
    assert gradebook.who(dict(alan, id="", email="a@b.c")) == "Alan Turing (a@b.c)"


def test_gradescopes_results_say_whom_they_marked():
    from exercises.answers import gradescope
    out = gradescope.results(dict(row(0, "Ada Lovelace"), id="7", email="s@example.invalid",
                                  notes=["the sheet's STUDENT is 'Ada L'"]))
    assert out["output"] == ("marked as Ada Lovelace (7, s@example.invalid): the sheet's "
                             "STUDENT is 'Ada L'")
    assert gradescope.results(row(1, "Alan Turing"))["output"] == "marked as Alan Turing"


def marked(tmp_path, rows, name="marks"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "gradebook.csv").write_text(gradebook.csv_text(rows, {}), encoding="utf-8-sig")
    return folder


def enter(folder, marks):
    """The teacher types written marks into gradebook.csv: {student: {question: text}}."""
    import csv
    with open(folder / "gradebook.csv", encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for q, text in marks.get(r["student"], {}).items():
            r[f"{q} (of {gradebook.WRITTEN_POINTS[q]}, yours to mark)"] = text
    with open(folder / "gradebook.csv", "w", encoding="utf-8-sig", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\r\n")
        w.writeheader()
        w.writerows(rows)


def read(path):
    import csv
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


FULL_WRITTEN = {"EX1_WHY": "3", "EX3_WHY": "2.5", "EX4_WHY": "3", "EX6_WHY": "4", "EX7_WHY": "1"}


def test_written_marks_make_totals_and_canvas_and_moodle_files(tmp_path, capsys):
    from exercises.answers import grades
    folder = marked(tmp_path, [row(0, "Ada Lovelace", failing="ex2"), row(1, "Alan Turing")])
    enter(folder, {"Ada Lovelace": FULL_WRITTEN, "Alan Turing": {"EX1_WHY": "3"}})
    (tmp_path / "roster.csv").write_text("name,id,email\nAda Lovelace,s001,ada@example.invalid\n"
                                         "Alan Turing,s002,\n", encoding="utf-8")
    assert grades.main([str(folder), f"--roster={tmp_path / 'roster.csv'}"]) == 0
    assert "1 of 2 students have a total" in capsys.readouterr().out
    t = read(folder / "totals.csv")
    # Ada: 28 - 6 (ex2) = 22 by the tool, 3 + 2.5 + 3 + 4 + 1 = 13.5 written, 35.5 in all
    assert t[1] == ["Ada Lovelace", "s001", "ada@example.invalid", "22", "13.5", "35.5"]
    assert t[2] == ["Alan Turing", "s002", "", "28", "", ""]  # written marks not all in
    c = read(folder / "canvas.csv")
    assert c[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                    "Token gradient cancellation"]
    assert c[1] == ["Ada Lovelace", "", "s001", "ada@example.invalid", "", "35.5"]
    m = read(folder / "moodle.csv")
    assert m[0] == ["ID number", "Email address", "Student", "Token gradient cancellation"]
    assert m[1] == ["s001", "ada@example.invalid", "Ada Lovelace", "35.5"]


def test_a_bad_written_mark_is_one_line_and_nothing_is_written(tmp_path, capsys):
    from exercises.answers import grades
    folder = marked(tmp_path, [row(0, "Ada Lovelace")])
    enter(folder, {"Ada Lovelace": dict(FULL_WRITTEN, EX6_WHY="5")})
    assert grades.main([str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'Ada Lovelace', column 'EX6_WHY (of 4" in err[0]
    assert sorted(os.listdir(folder)) == ["gradebook.csv"]


def test_one_student_re_marked_replaces_their_row_and_keeps_the_written_marks(tmp_path):
    from exercises.answers import grades
    folder = marked(tmp_path, [row(0, "Ada Lovelace", failing="ex2"), row(1, "Alan Turing")])
    enter(folder, {"Ada Lovelace": FULL_WRITTEN})
    again = marked(tmp_path, [row(0, "ada  LOVELACE"), row(1, "Grace Hopper")], "again")
    assert grades.main([str(folder), f"--replace={again}"]) == 0
    t = read(folder / "totals.csv")
    assert t[1][:1] == ["ada LOVELACE"] and t[1][3:] == ["28", "13.5", "41.5"]
    assert [r[0] for r in t[1:]] == ["ada LOVELACE", "Alan Turing", "Grace Hopper"]


def test_a_csv_roster_s_id_and_email_reach_the_gradebook_feedback_and_totals(tmp_path):
    from exercises.answers import grades, mark
    (tmp_path / "roster.csv").write_text("name,email,id\nAda Lovelace,ada@example.invalid,s1\n",
                                         encoding="utf-8")
    ids = mark.roster_ids(str(tmp_path / "roster.csv"))
    r = dict(row(0, "Ada Lovelace"), **ids["ada lovelace"])
    text = gradebook.csv_text([r, row(1, "Alan Turing")], {})
    assert text.splitlines()[0].startswith("student,id,email,on the roster")
    assert text.splitlines()[1].startswith("Ada Lovelace,s1,ada@example.invalid,yes")
    assert gradebook.feedback(r).startswith("# Feedback: Ada Lovelace (s1, ada@example.invalid)")
    folder = tmp_path / "marks"
    folder.mkdir()
    (folder / "gradebook.csv").write_text(text, encoding="utf-8-sig")
    enter(folder, {"Ada Lovelace": FULL_WRITTEN})
    assert grades.main([str(folder)]) == 0  # no --roster: the gradebook's own columns
    assert read(folder / "moodle.csv")[1] == ["s1", "ada@example.invalid", "Ada Lovelace",
                                              "41.5"]


def test_the_marker_reads_a_csv_roster_as_it_reads_names_txt(tmp_path):
    from exercises import handout
    from exercises.answers import mark
    (tmp_path / "roster.csv").write_text("\ufeffname,id\n\"Turing, Alan\",s2\nAda Lovelace,s1\n",
                                         encoding="utf-8")
    assert mark.class_roster(str(tmp_path / "roster.csv")) == handout.class_draws(
        ["Turing, Alan", "Ada Lovelace"])
    (tmp_path / "bad.csv").write_text("student,id\nAda Lovelace,s1\n", encoding="utf-8")
    with pytest.raises(mark.MarkError, match="header row of name, id, email"):
        mark.class_roster(str(tmp_path / "bad.csv"))
