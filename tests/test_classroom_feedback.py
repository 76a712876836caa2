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
    assert lines["ex2"] == "| ex2 | 6 | 2.00 | 1 of 3 | divides by ‖Â‖ instead of ‖Â‖² (2) |"
    assert lines["ex3"] == "| ex3 | 3 | 3.00 | 3 of 3 | none |"


def test_feedback_files_have_one_name_per_row(tmp_path):
    rows = [row(0, "Émilie du Châtelet"), row(1, "Émilie du Châtelet"), row(2, "李")]
    gradebook.write(str(tmp_path), rows, {}, "table")
    names = sorted(os.listdir(tmp_path / "feedback"))
    assert names == ["001-Emilie-du-Chatelet.md", "002-Emilie-du-Chatelet.md", "003-student.md"]
    assert (tmp_path / "summary.md").read_text("utf-8").startswith("# The class")
