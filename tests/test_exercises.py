"""The classroom exercises (EXERCISES.md, exercises/) are checked both ways.

Each exercise has a check file exercises/check_exN.py. Run against the
reference answers (EXERCISE_IMPL=answers, exercises/answers/) every check
must pass; run against the unedited student files in exercises/ (stubs that
raise NotImplementedError, unfilled predictions, the buggy loss) every
exercise must have at least one failing check. One pytest subprocess runs all
the checks each way, and its JUnit report is read per exercise.
"""

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXERCISES = sorted(re.match(r"check_(ex\d+)\.py$", f).group(1)
                   for f in os.listdir(os.path.join(ROOT, "exercises"))
                   if re.match(r"check_(ex\d+)\.py$", f))


def run_checks(impl, report):
    env = dict(os.environ, EXERCISE_IMPL=impl)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "exercises", f"--junitxml={report}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    outcomes = {ex: {"passed": 0, "failed": 0} for ex in EXERCISES}
    for case in ET.parse(report).iter("testcase"):
        m = re.search(r"check_(ex\d+)", case.get("classname", "") + case.get("file", ""))
        if not m or m.group(1) not in outcomes:
            continue
        failed = any(child.tag in ("failure", "error") for child in case)
        skipped = any(child.tag == "skipped" for child in case)
        if not skipped:
            outcomes[m.group(1)]["failed" if failed else "passed"] += 1
    return proc, outcomes


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    return run_checks("answers", tmp_path_factory.mktemp("answers") / "report.xml")


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    return run_checks("student", tmp_path_factory.mktemp("stubs") / "report.xml")


def test_there_are_exercises():
    assert len(EXERCISES) >= 6, EXERCISES


def test_reference_answers_pass_every_check(answers):
    proc, _ = answers
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("ex", EXERCISES)
def test_each_exercise_passes_with_its_answer(answers, ex):
    proc, outcomes = answers
    assert outcomes[ex]["passed"] > 0 and outcomes[ex]["failed"] == 0, (outcomes[ex], proc.stdout[-3000:])


def test_unedited_exercises_fail(stubs):
    proc, _ = stubs
    assert proc.returncode != 0, proc.stdout[-3000:]


@pytest.mark.parametrize("ex", EXERCISES)
def test_each_unedited_exercise_fails(stubs, ex):
    proc, outcomes = stubs
    assert outcomes[ex]["failed"] > 0, (outcomes[ex], proc.stdout[-3000:])


def test_a_bare_pytest_run_does_not_collect_the_exercise_checks():
    # Only a command line that names exercises/ collects check_*.py (exercises/conftest.py).
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                           "no:cacheprovider", "--ignore=tests", "--ignore=experiments"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "check_ex" not in proc.stdout, proc.stdout[-2000:]
