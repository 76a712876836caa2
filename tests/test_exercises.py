"""The classroom exercises (EXERCISES.md, exercises/) are checked both ways.

Each exercise has a check file exercises/check_exN.py. Run against the
reference answers (EXERCISE_IMPL=answers, exercises/answers/) every check
must pass; run against the unedited student files in exercises/ (stubs that
raise NotImplementedError, unfilled predictions, the buggy loss) every
exercise must have at least one failing check. One pytest subprocess runs all
the checks each way, and its JUnit report is read per exercise. Plausible
wrong answers (re-centred advantages, groups assumed equal in size or
contiguous, free text that says nothing) must be caught too.
"""

import os
import re
import subprocess
import sys
import textwrap
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


# Plausible wrong answers, each of which some check must catch.
WRONG = {
    "recentred": {  # re-centres A inside each group before projecting
        "ex2_adv_orthogonal": """
            import torch
            def adv_orthogonal(w, adv, group):
                out = w.clone()
                for g in torch.unique(group):
                    m = group == g
                    a = adv[m] - adv[m].mean()
                    sq = (a * a).sum()
                    if sq > 0:
                        out[m] = w[m] - (a @ w[m]) / sq * a
                return out
            """,
        "ex3_min_replace": """
            import torch
            def min_replace(w, adv, group):  # assumes groups are contiguous runs of equal size
                K = len(torch.unique(group))
                return w.view(K, -1).min(1, keepdim=True).values.expand(K, -1).reshape(-1)
            """,
    },
    "reshaped": {  # assumes contiguous groups of equal size, ids 0..K-1
        "ex2_adv_orthogonal": """
            import torch
            def adv_orthogonal(w, adv, group):
                K = len(torch.unique(group))
                W, A = w.view(K, -1), adv.view(K, -1)
                sq = (A * A).sum(1, keepdim=True)
                coef = torch.where(sq > 0, (A * W).sum(1, keepdim=True) / sq.clamp(min=1e-12), 0 * sq)
                return (W - coef * A).reshape(-1)
            """,
        "ex3_min_replace": """
            import torch
            def min_replace(w, adv, group):  # contiguous runs only
                out, start = w.clone(), 0
                for g, n in zip(*torch.unique_consecutive(group, return_counts=True)):
                    out[start:start + n] = w[start:start + n].min()
                    start += int(n)
                return out
            """,
    },
}
def run_files(folder, files, report):
    env = dict(os.environ, EXERCISE_IMPL=str(folder))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *[f"exercises/{f}" for f in files], f"--junitxml={report}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    failed = {}
    for case in ET.parse(report).iter("testcase"):
        if any(child.tag in ("failure", "error") for child in case):
            m = re.search(r"check_(ex\d+)", case.get("classname", "") + case.get("file", ""))
            failed.setdefault(m.group(1) if m else "?", []).append(case.get("name"))
    return proc, failed


def blah_answers(folder):
    """ex4 and ex6 right where a machine can check, and 'blah' where it cannot."""
    for name, key in (("ex4_diagnosis", "EXPLANATION"), ("ex6_buggy_loss", "DIAGNOSIS")):
        src = open(os.path.join(ROOT, "exercises", "answers", f"{name}.py")).read()
        src = re.sub(key + r' = """.*?"""', key + ' = """' + "blah " * 50 + '"""', src, flags=re.S)
        (folder / f"{name}.py").write_text(src)


@pytest.mark.parametrize("kind", sorted(WRONG))
def test_plausible_wrong_answers_are_caught(tmp_path, kind):
    for name, code in WRONG[kind].items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    files = ["check_ex2.py", "check_ex3.py"]
    if kind == "recentred":  # the same subprocess also checks the free-text answers
        blah_answers(tmp_path)
        files += ["check_ex4.py", "check_ex6.py"]
    proc, failed = run_files(tmp_path, files, tmp_path / "report.xml")
    assert "ex2" in failed and "ex3" in failed, (failed, proc.stdout[-3000:])
    if kind == "recentred":
        assert failed.get("ex4") == ["test_ex4_explanation_is_written_with_evidence"], (failed, proc.stdout[-2000:])
        assert failed.get("ex6") == ["test_ex6_diagnosis_is_written"], (failed, proc.stdout[-2000:])
