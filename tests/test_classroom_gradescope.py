"""The Gradescope autograder (exercises/answers/gradescope.py), run as Gradescope runs it
but in a temporary folder standing for /autograder: the zip has what the specification
asks at its root; run_autograder marks right, subtly wrong, empty, unparsable and hostile
submissions; results.json has every field used, per test; and every score is the one the
local marker gives the same work. Teacher's copy only; needs the sandbox."""

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises.answers import gradebook, gradescope, rehearse, sandbox  # noqa: E402

try:
    sandbox.mode()
    CAN = True
except sandbox.SandboxError:
    CAN = False

def subtly_wrong(name, src, where):
    """A catalogued wrong number on exercise 1 and Adv-Orthogonal without its 0/0 guard."""
    tables = rehearse.tables_of(name)
    value = rehearse.mistakes.wrong_numbers(name, "EX1", tables["EX1"], rehearse.truth.key(
        name, tables)["EX1"])["grpo_net"][0][1]
    files = dict(rehearse.right_files(name, src, change=("EX1", "grpo_net", value)),
                 **{"loss.py": rehearse.WRONG_LOSS["no 0/0 guard"](src["loss"])})
    rehearse.pack(where, name, files)


# student: how their submission is made (rehearse.py's kinds), None: nothing. A hostile
# submission's containment is the marker's own test (tests/test_classroom_marker.py)
CASES = {
    "Ada Lovelace": rehearse.k_right,
    "Alan Turing": subtly_wrong,
    "Ken Thompson": None,
    "Barbara Liskov": rehearse.k_sheet_syntax_error,
}
FIELDS = {"score", "max_score", "name", "output", "visibility"}


@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    top = tmp_path_factory.mktemp("gradescope")
    (top / "names.txt").write_text("\n".join(CASES) + "\n", encoding="utf-8")
    p = subprocess.run([sys.executable, "-m", "exercises.answers.gradescope",
                        str(top / "autograder.zip"), f"--roster={top / 'names.txt'}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return top


def test_the_zip_has_setup_and_run_autograder_at_its_root(autograder):
    with zipfile.ZipFile(autograder / "autograder.zip") as z:
        names = z.namelist()
        for script in ("setup.sh", "run_autograder"):
            info = z.getinfo(script)
            assert (info.external_attr >> 16) & 0o111, script  # executable
            assert z.read(script).startswith(b"#!/usr/bin/env bash\n")
        assert "repo/exercises/answers/mark.py" in names and "roster.json" in names
        assert not [n for n in names if n.startswith("repo/results/")]
        assert sorted(json.loads(z.read("roster.json"))["students"]) == sorted(CASES)


def test_the_copy_s_roster_json_gives_its_draws_as_they_are(tmp_path, capsys):
    from exercises import handout
    draws = {"Ada Lovelace": {"EX1": 3, "EX4": 0, "EX7": 1}}
    (tmp_path / "roster.json").write_text(handout.roster_json(draws), encoding="utf-8")
    assert gradescope.main([str(tmp_path / "a.zip"), f"--roster={tmp_path / 'roster.json'}"]) == 0
    with zipfile.ZipFile(tmp_path / "a.zip") as z:
        assert json.loads(z.read("roster.json"))["students"] == draws


def layout(top, name, make):
    """A folder standing for /autograder: source/ (the zip, unpacked, its repo made a
    repository as setup.sh makes it), run_autograder, submission/ and the metadata."""
    root = top / name.replace(" ", "_")
    with zipfile.ZipFile(top / "autograder.zip") as z:
        z.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    subprocess.run(["sh", str(root / "source" / "repo_commit.sh"), str(root / "source" / "repo")],
                   check=True, capture_output=True, timeout=120)
    (root / "submission").mkdir()
    if make:
        make(name, rehearse.sources(), str(root / "submission"))
    meta = {"id": 1, "users": [{"email": "s@example.invalid", "id": 7,
                                "name": " ".join(name.upper().split()) + " "}]}
    (root / "submission_metadata.json").write_text(json.dumps(meta), encoding="utf-8")
    return root


def local_marks(subs, names):
    """{student: gradebook.csv row} as mark.py's main makes them, in this process: the same
    gather, the same mark_all, the same CSV. Its self-test is mark.py's own tests' to run
    (tests/test_classroom_marker.py): here it would only cost time."""
    import tempfile
    from exercises.answers import collect, mark
    students = mark.class_roster(str(names))
    with tempfile.TemporaryDirectory() as staged:
        found, missing, _ = collect.gather(str(subs), staged, students)
        opts = {"timeout": 60, "jobs": 2, "memory": 3072, "self_test": False, "staged": staged}
        rows = mark.mark_all(found, missing, opts, str(subs))
    text = gradebook.csv_text(rows, gradebook.flags(rows))
    return {r["student"]: r for r in csv.DictReader(text.splitlines())}


@pytest.mark.skipif(not CAN, reason="this machine cannot make a sandbox")
def test_run_autograder_scores_each_submission_as_the_local_marker_does(autograder):
    """Each case through run_autograder (side by side), and all of them through the local
    marker: results.json has the fields per test, the points of EXERCISES.md as
    max_score, identity from the metadata (upper case there), and the same scores."""
    roots = {n: layout(autograder, n, make) for n, make in CASES.items()}
    subs = autograder / "subs"
    for n, root in roots.items():  # the same work, as a platform's folder per student
        shutil.copytree(root / "submission", subs / n)
    book = local_marks(subs, autograder / "names.txt")
    env = dict(os.environ, AUTOGRADER_PYTHON=sys.executable)
    procs = {n: subprocess.Popen(["bash", str(r / "run_autograder")], env=dict(
        env, AUTOGRADER_ROOT=str(r)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True) for n, r in roots.items()}
    for n, p in procs.items():
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, (n, err[-2000:])
    full = {gradescope.NAMES[ex]: p.get("numbers", 0) + p.get("code", 0)
            for ex, p in gradebook.POINTS.items() if ex in gradescope.NAMES}
    for n, root in roots.items():
        result = json.loads((root / "results" / "results.json").read_text("utf-8"))
        assert result["output"].startswith(f"marked as {n} (7, s@example.invalid)"), n
        tests = result["tests"]
        assert all(FIELDS <= set(t) for t in tests), n
        assert all(t["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
                   for t in tests)
        by_name = {t["name"]: t for t in tests}
        assert {k: by_name[k]["max_score"] for k in full} == full
        written = [t for t in tests if t["name"].startswith("Written answers")]
        assert len(written) == 1 and written[0]["max_score"] == 0
        for ex, name in gradescope.NAMES.items():
            column = next(k for k in book[n] if k.startswith(f"{ex} (of "))
            assert by_name[name]["score"] == float(book[n][column]), (n, ex)
        assert sum(t["score"] for t in tests) == float(
            book[n][f"marked by the tool (of {gradebook.MARKED})"])
    scores = {n: sum(t["score"] for t in json.loads(
        (r / "results" / "results.json").read_text("utf-8"))["tests"]) for n, r in roots.items()}
    assert scores["Ada Lovelace"] == 28 and scores["Ken Thompson"] == 0
    assert scores["Alan Turing"] == 28 - 6 - 1
    assert scores["Barbara Liskov"] < 28
    turing = json.loads((roots["Alan Turing"] / "results" / "results.json").read_text("utf-8"))
    ex2 = next(t for t in turing["tests"] if t["name"] == gradescope.NAMES["ex2"])
    assert rehearse.SAYS["ex2"]["no 0/0 guard"] in ex2["output"]


def test_bad_metadata_or_arguments_are_one_line(tmp_path, capsys):
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission_metadata.json").write_text("{}", encoding="utf-8")
    for args in (["--run", f"--root={tmp_path}"], ["x.txt"], ["--run", "--root=/nonexistent"],
                 [str(tmp_path / "a.zip"), "--roster=a", "--roster=b"]):
        assert gradescope.main(args) == 2, args
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and not out, (args, err)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isfile("/usr/bin/python3"),
                    reason="the container mode's own uid needs root, and a system Python")
def test_the_container_mode_runs_code_as_a_user_who_cannot_read_the_key(tmp_path,
                                                                        monkeypatch):
    """Where Gradescope's container forbids namespaces: the child runs in its copy, as an
    unused uid, and a folder of mode 700 (setup.sh's /autograder/source) is closed to it."""
    key = tmp_path / "source"
    key.mkdir(mode=0o700)
    (key / "key.txt").write_text("the answers", encoding="utf-8")
    os.chmod(tmp_path, 0o755)
    copy = tmp_path / "work" / "copy"  # the marker's folders are private (mkdtemp: 700)
    copy.mkdir(parents=True)
    os.chmod(tmp_path / "work", 0o700)
    (copy / "here.py").write_text("WHERE = 'the copy'\n", encoding="utf-8")
    probe = ("import os, here\n"
             f"try:\n    open({str(key / 'key.txt')!r}).read(); print('read')\n"
             "except OSError as e:\n    print('refused', os.getuid(), here.WHERE)\n")
    # the system's Python, which any user may run (Gradescope's image: /autograder/venv); a
    # teacher's venv may lie in a folder closed to other users
    monkeypatch.setattr(sandbox, "python", lambda: "/usr/bin/python3")
    before = dict(sandbox._MODE)
    try:
        sandbox.use_container()
        o = sandbox.run(str(copy), ["-c", probe], limits=sandbox.Limits(seconds=60))
    finally:
        sandbox._MODE.clear()
        sandbox._MODE.update(before)
    said = o.stdout.decode().split()
    assert o.status == "exited" and said[0] == "refused" and int(said[1]) >= sandbox.UIDS[0], (
        o.stdout, o.stderr[-500:])
    assert said[2:] == ["the", "copy"]  # it imports from its copy, as the marker's child does
