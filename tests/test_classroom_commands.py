"""The classroom's commands at their edges: each answers --help; the check without torch
says so in one line; a number of any size or precision is marked or refused on its row,
never a traceback; the marker's sandbox runs from any path to this Python (one through
"..", as ../venv/bin/python gives); the copy leaves out the test whose numbers answer
exercise 3's written question. Teacher's copy only."""

import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises import check, handout, problems  # noqa: E402
from exercises.answers import key, sandbox, truth  # noqa: E402

COMMANDS = ("exercises.problems", "exercises.check", "exercises.handin", "exercises.handout",
            "exercises.answers.key", "exercises.answers.mark", "exercises.answers.rehearse",
            "exercises.answers.audit", "exercises.answers.grades",
            "exercises.answers.gradescope")
BIG = "9" * 401  # an integer of 401 digits, as a sheet may spell one


def test_every_classroom_command_answers_help(capsys):
    """Each command's main: --help exits 0 with its text on stdout and nothing on stderr
    (in this process: the imports are paid once); the handout's also as a command."""
    import importlib
    for m in COMMANDS:
        assert importlib.import_module(m).main(["--help"]) == 0, m
        out, err = capsys.readouterr()
        assert out.strip() and err == "", (m, err)
    p = subprocess.run([sys.executable, "-m", "exercises.answers.key", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("usage:") and p.stderr == ""


def test_the_check_without_torch_says_what_is_missing_in_one_line():
    """-S: this Python without its site-packages, so torch is not there to import."""
    p = subprocess.run([sys.executable, "-S", "-m", "exercises.check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("error: cannot import torch") and "requirements.txt" in lines[0]


def sheet(path, ex1, ex7):
    path.write_text(f'STUDENT = "Ada Lovelace"\nEX1 = {ex1}\nEX7 = {ex7}\n'
                    'EX4 = {"gspo_residual": 1e-322, "luspo_residual": 0, "orth_delta_k": 1}\n',
                    encoding="utf-8")
    return path


def test_a_number_of_any_size_is_marked_wrong_on_its_row(tmp_path):
    """The key marks each number of a sheet holding 1e-322, 5e-324, 1.8e308 and integers of
    401 digits: one row each, WRONG, no traceback; the integer is not spelt out."""
    path = sheet(tmp_path / "sheet.py",
                 f'{{"grpo_residual": 1e-322, "grpo_net": {BIG}, "grpo_coef_k": -{BIG}, '
                 '"dr_grpo_coef_k": 5e-324}', f'{{"tokens": {BIG}, "template": 1.7e308, '
                 '"plain_tokens": 3}')
    p = subprocess.run([sys.executable, "-m", "exercises.answers.key", "Ada Lovelace",
                        str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    rows = p.stdout.strip().splitlines()
    assert p.returncode == 1 and "Traceback" not in p.stderr and len(rows) == 10, p.stderr
    assert all(" WRONG " in r for r in rows) and BIG not in p.stdout
    assert "an integer of 401 digits" in p.stdout
    for v in (1e-322, 5e-324, 1.7e308, int(BIG), -int(BIG)):
        assert truth.right(v, 0.125) is False and truth.right(v, 18, "tokens") is False
    assert key.shown(int(BIG)) == "an integer of 401 digits"


def test_the_check_meets_any_number_with_a_line(tmp_path):
    """The check's number properties on the same sheet: each a FAIL line or a pass, never an
    exception other than the property's own."""
    s = problems.read_sheet(sheet(tmp_path / "sheet.py", f'{{"grpo_residual": {BIG}}}',
                                  f'{{"tokens": {BIG}, "template": 1e-322}}'))
    for ex, phrase in (("EX1", "a residual lies between 0 and 1"),
                       ("EX4", "not right on your table"), ("EX7", "is a count")):
        with pytest.raises(AssertionError, match=phrase):
            check.numbers(ex)({"sheet": s, "roster": None})


def test_ctrl_c_while_handin_starts_is_one_line(tmp_path):
    """Ctrl-C while it imports: one line, status 130, nothing written. Its handler comes
    before its imports; the event waited for is hashlib's library mapped into the process
    (Linux's /proc), its first import after the handler, never a fixed time."""
    p = subprocess.Popen([sys.executable, "-m", "exercises.handin", f"--out={tmp_path}"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while p.poll() is None and not mapped(p.pid, "_hashlib"):
        try:
            p.wait(0.005)  # a poll of the child, not a wait for an event's time
        except subprocess.TimeoutExpired:
            pass
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err.strip().splitlines() == [
        "interrupted; the previous pack, if any, is unchanged"], err
    assert os.listdir(tmp_path) == []


def mapped(pid, library):
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8") as f:
            return library in f.read()
    except OSError:
        return False


try:
    sandbox.mode()
    CAN = True
except sandbox.SandboxError:
    CAN = False


@pytest.mark.skipif(not CAN, reason="this machine cannot make a sandbox")
def test_the_sandbox_runs_from_a_path_to_python_through_dot_dot(tmp_path):
    """This Python named by a path through a folder the sandbox hides (as ../venv/bin/python
    run from the repository does): the sandboxed child still starts."""
    via = tmp_path / "hidden"
    via.mkdir()
    python = os.path.join(str(via), os.path.relpath(sys.executable, str(via)))
    assert ".." in python
    probe = ("import os, sys, tempfile\n"
             "from exercises.answers import sandbox\n"
             "with tempfile.TemporaryDirectory() as work:\n"
             "    os.mkdir(os.path.join(work, 'copy'))\n"
             "    o = sandbox.run(os.path.join(work, 'copy'), ['-c', 'print(6 * 7)'],\n"
             f"                    limits=sandbox.Limits(seconds=60), hide=[{str(via)!r}, work])\n"
             "print(o.status, o.code, o.stdout.decode().strip())\n")
    p = subprocess.run([python, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.stdout.split() == ["exited", "0", "42"], p.stdout + p.stderr


def test_the_copy_leaves_out_the_test_that_shows_a_transform_raising_a_weight():
    """tests/test_loss.py's hand example of the transforms (Adv-Orthogonal takes 0.5 to
    1.25) answers EX3_WHY's "which": the copy has the file without that test, and the
    guard knows the numbers."""
    files = handout.committed_files()
    source = files["tests/test_loss.py"][0].decode("utf-8")
    assert "def test_dfpo_transforms_alone" in source and "1.0, 1.25, 1.25" in source
    copy = handout.contents(files, {})
    cut = copy["tests/test_loss.py"][0].decode("utf-8")
    assert "def test_dfpo_transforms_alone" not in cut and "1.25" not in cut
    assert "def test_" in cut and "1.0, 1.25, 1.25" in handout.ANSWERS["ex3"]
