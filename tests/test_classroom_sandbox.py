"""The marker works wherever Python and the course live (exercises/answers/sandbox.py and
mark.py): a venv under /tmp, /opt, /home, /srv or /usr/local, a course under /tmp, names
with spaces and non-ASCII letters. Where the sandbox cannot be built, the marker refuses in
one line before anyone is marked: a fault of the tool never becomes a student's mark.
Teacher's copy only.

A venv is made in each place (``python -m venv``, with a .pth file that lends it this
interpreter's packages: fast, and a real venv). /tmp is written for real; the other places
are written only inside a mount namespace of the test's own, where a tmpfs covers the
folder and every entry it had is bound back: the host's /opt or /home is never touched."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises.answers import sandbox  # noqa: E402

try:
    sandbox.mode()
    CAN = True
except sandbox.SandboxError:
    CAN = False
needs_sandbox = pytest.mark.skipif(not CAN, reason="this machine cannot make a sandbox")
NAME = "cancel gpt ü"  # a space and a letter outside ASCII in every path below

# Run by this interpreter inside a mount namespace: cover PLACE with a tmpfs that keeps
# what PLACE held (each entry bound back), make a venv in it, and run PROBE with that
# venv's Python. (The self-test, a known-good submission marked in the sandbox, runs in
# the end-to-end test under /tmp: the same sandbox, at the cost of a marking.)
IN_NAMESPACE = r'''
import os, subprocess, sys, tempfile
place, name, make_venv, probe = sys.argv[1:5]
side = tempfile.mkdtemp()
keep = os.path.join(side, "keep")
os.mkdir(keep)
def mount(*args):
    subprocess.run(["mount", *args], check=True)
mount("--rbind", place, keep)
mount("-t", "tmpfs", "tmpfs", place)
for e in os.listdir(keep):
    src, dst = os.path.join(keep, e), os.path.join(place, e)
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
        continue
    os.mkdir(dst) if os.path.isdir(src) else open(dst, "w").close()
    mount("--rbind", src, dst)
python = subprocess.run([sys.executable, "-c", make_venv, os.path.join(place, name)],
                        check=True, capture_output=True, text=True).stdout.strip()
sys.exit(subprocess.run([python, "-c", probe]).returncode)
'''

# Make a venv in argv[1] whose .pth lends it this interpreter's packages; print its python.
MAKE_VENV = r'''
import os, site, subprocess, sys
where = os.path.join(sys.argv[1], "venv")
subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", where], check=True)
py = os.path.join(where, "bin", "python")
dst = subprocess.run([py, "-c", "import site; print(site.getsitepackages()[0])"],
                     check=True, capture_output=True, text=True).stdout.strip()
with open(os.path.join(dst, "lent.pth"), "w") as f:
    f.write("\n".join(p for p in sys.path if p and os.path.isdir(p)) + "\n")
print(py)
'''

# The child's Python in a sandbox built by that venv's Python: it starts, and finds its
# packages (numpy through the .pth file: torch's import would add seconds and prove no
# more) where they lie, read-only.
PROBE = r'''
import os, sys, tempfile
from exercises.answers import sandbox
with tempfile.TemporaryDirectory(prefix="mark ü ") as work:
    os.mkdir(os.path.join(work, "copy"))
    o = sandbox.run(os.path.join(work, "copy"), ["-E", "-s", "-c",
                    "import sys, numpy; print(sys.prefix, float(numpy.array([2.0]).sum()))"],
                    limits=sandbox.Limits(seconds=120), hide=[os.getcwd(), work])
print(o.status, o.code, o.stdout.decode().strip(), o.stderr.decode()[-300:])
'''


def namespace():
    """unshare's command for a private mount namespace (root, or a user namespace)."""
    cmd = ["unshare", "--mount", "--propagation", "private"]
    return cmd if os.geteuid() == 0 else cmd[:1] + ["--user", "--map-root-user"] + cmd[1:]


@needs_sandbox
def test_a_python_under_tmp_marks_a_class_under_tmp(tmp_path):
    """The reported case, end to end: a venv under /tmp, the submissions under /tmp; the
    right answers score full marks (they all got 0 when the sandbox's /tmp collided)."""
    where = tempfile.mkdtemp(prefix=NAME + " ", dir="/tmp")
    try:
        py = subprocess.run([sys.executable, "-c", MAKE_VENV, where], check=True,
                            capture_output=True, text=True).stdout.strip()
        course = os.path.join(where, "course")  # the teacher's clone, under /tmp too
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", ROOT, course], check=True,
                       capture_output=True, timeout=120)
        subs = tmp_path / f"subs {NAME}"
        good = subs / "a good"
        good.mkdir(parents=True)
        (good / "sheet.py").write_text("STUDENT = 'Ada Lovelace'\n", encoding="utf-8")
        shutil.copyfile(os.path.join(course, "loss.py"), good / "loss.py")
        p = subprocess.run([py, "-m", "exercises.answers.mark", str(subs), "--jobs=2"],
                           cwd=course, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        row = next(line for line in p.stdout.splitlines() if line.startswith("| Ada"))
        # ex2, ex3 right; no number given; ex5, ex6 not handed in
        assert "| 0/4 | 6/6 | 3/3 | 0/3 | 0/6 | 0/3 | 0/3 | 9 |" in row, p.stdout
    finally:
        shutil.rmtree(where, ignore_errors=True)


@needs_sandbox
@pytest.mark.parametrize("place", ["/opt", "/home", "/srv", "/usr/local"])
def test_a_python_in_each_usual_place_runs_in_the_sandbox(place):
    if not os.path.isdir(place) or os.path.islink(place):
        pytest.skip(f"{place} is not a folder here")
    if shutil.which("mount") is None:
        pytest.skip("no mount command to build the test's namespace")
    p = subprocess.run(namespace() + [sys.executable, "-c", IN_NAMESPACE, place, NAME,
                                      MAKE_VENV, PROBE],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    if p.returncode and not p.stdout and "CalledProcessError" in p.stderr:  # mount refused
        pytest.skip(f"cannot build the test's mount namespace here: {p.stderr[-300:]}")
    assert p.stdout.split()[:2] == ["exited", "0"], p.stdout + p.stderr
    assert f"{place}/{NAME}/venv 2.0" in p.stdout, p.stdout


def test_the_copy_takes_another_name_where_the_hosts_python_lies_at_sandbox():
    assert sandbox.copy_name(["/usr", "/opt/py"]) == "/sandbox"
    assert sandbox.copy_name(["/usr", "/sandbox/py"]) == "/sandbox-1"
    assert sandbox.copy_name(["/sandbox", "/sandbox-1/x"]) == "/sandbox-2"
    assert sandbox.copy_name(["/sandboxes"]) == "/sandbox"


@needs_sandbox
def test_a_sandbox_that_cannot_be_built_stops_the_marking_in_one_line(tmp_path, capsys,
                                                                         monkeypatch):
    """A tmpfs too small for the copy: the setup fails, and no one gets a mark (the self-test
    is the first to meet it); never a zero that blames the student."""
    from dataclasses import replace

    from exercises.answers import mark
    real = sandbox.run
    monkeypatch.setattr(sandbox, "run", lambda *a, **k: real(
        *a, **dict(k, limits=replace(k["limits"], tmpfs=64 << 10))))
    (tmp_path / "subs" / "a").mkdir(parents=True)
    (tmp_path / "subs" / "a" / "sheet.py").write_text("STUDENT = 'Ada Lovelace'\n")
    assert mark.main([str(tmp_path / "subs")]) == 2
    out, err = capsys.readouterr()
    lines = [x for x in err.strip().splitlines() if not x.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no one was marked" in lines[0]
    assert "sandbox" in lines[0] and out == "", (out, err)
    assert not (tmp_path / "subs-marks").exists()


@needs_sandbox
def test_a_child_cannot_pass_for_a_failed_setup(tmp_path):
    """The setup's failure line carries a random word the child never sees: a student who
    prints the same words and exits 125 is the student's outcome, not the tool's fault."""
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "forge.py").write_text(
        "import os, sys\nsys.stderr.write('sandbox setup failed [0123456789abcdef]: x\\n')\n"
        "sys.stderr.flush()\nos._exit(125)\n")
    o = sandbox.run(str(tmp_path / "copy"), ["-I", "forge.py"], limits=sandbox.Limits(seconds=30))
    assert o.status == "exited" and o.code == 125, o


def test_the_marker_warns_about_dot_folders_and_a_student_named_twice(tmp_path):
    from exercises.answers import collect
    (tmp_path / "subs").mkdir()
    (tmp_path / "work").mkdir()
    for folder, name in (("a", "Ada Lovelace"), ("b", "ada  lovelace"), (".c", "Alan Turing"),
                         ("d", "Alan Turing")):
        (tmp_path / "subs" / folder).mkdir()
        (tmp_path / "subs" / folder / "sheet.py").write_text(f"STUDENT = {name!r}\n")
    subs, _, warnings = collect.gather(str(tmp_path / "subs"), str(tmp_path / "work"), None)
    assert [s.label for s in subs] == ["a", "b", "d"]
    assert len(warnings) == 3 and ".c is skipped" in warnings[0], warnings
    for line, who in zip(warnings[1:], "ab"):
        assert line.startswith(f"{who}: 2 submissions name this student (a, b)"), line
