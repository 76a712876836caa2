import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(1)

# The suite builds configurations in code (parse_args) with the lab's objectives and flags,
# as train.cli does once the command line turns the lab on: its catalogue joins first. A
# copy of the lesson without lab/ runs its tests without it.
try:
    import lab  # noqa: F401,E402
except ModuleNotFoundError:
    pass


@pytest.fixture(scope="session")
def student_copy(tmp_path_factory):
    """build(students): a student copy of this tree (exercises/handout.py, --allow_dirty) for
    a roster of those names; returns its folder. Teacher's copy only."""
    import subprocess

    def build(students):
        names = tmp_path_factory.mktemp("roster") / "names.txt"
        names.write_text("\n".join(students) + "\n", encoding="utf-8")
        out = tmp_path_factory.mktemp("handout") / "class"
        proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(out),
                               f"--roster={names}", "--allow_dirty"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return out
    return build


# In a student copy (exercises/handout.py) some library functions are exercises
# that raise NotImplementedError("exercise N: ..."). A test that reaches one,
# in this process or in a subprocess whose output the failure shows, is
# skipped with that reason instead of failing.
STUB = "NotImplementedError: exercise "


def pytest_runtest_makereport(item, call):
    import pytest
    if call.excinfo is None or call.when == "teardown":
        return None
    text = str(call.excinfo.getrepr(style="short"))
    if STUB in text or (call.excinfo.errisinstance(NotImplementedError)
                        and str(call.excinfo.value).startswith("exercise ")):
        why = (
            text[text.find(STUB) + len("NotImplementedError: ") :].split("(")[0].strip()
            if STUB in text
            else str(call.excinfo.value).split("(")[0].strip()
        )
        report = pytest.TestReport.from_item_and_call(item, call)
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"needs a solved exercise: {why}")
        return report
    return None


# No test may change the committed results: every script a test runs (an experiment's
# quick mode, plot.py, multiplicity.py, a refused command) must leave the files git
# tracks under results/ byte-identical. Checked once for the whole session.
def _results_digest():
    import hashlib
    import subprocess
    try:
        out = subprocess.run(["git", "ls-files", "-z", "results"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None  # not a git checkout (a student copy): nothing committed to guard
    digest = {}
    for rel in sorted(p for p in out.split("\0") if p):
        path = os.path.join(ROOT, rel)
        digest[rel] = (hashlib.sha256(open(path, "rb").read()).hexdigest()
                       if os.path.exists(path) else None)
    return digest


def pytest_sessionstart(session):
    session.config._results_before = _results_digest()


def pytest_sessionfinish(session, exitstatus):
    before = getattr(session.config, "_results_before", None)
    if before is None:
        return
    changed = [k for k, v in (_results_digest() or {}).items() if before.get(k) != v]
    if changed:
        session.config.get_terminal_writer().line(
            f"FAILED: the tests changed committed files under results/: {', '.join(changed[:5])}",
            red=True)
        session.exitstatus = 1


# The hostile-input tests check, around each case, that every committed file (and every
# file under results/, ignored ones included) is byte-identical: sha256, hashed again
# only for a file whose inode, size or modification time changed (a rewrite changes one).
_SHA = {}
_TRACKED = []


def committed_digest():
    import hashlib
    import subprocess
    if not _TRACKED:
        try:
            out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                                 check=True).stdout.decode()
            _TRACKED.extend(p for p in out.split("\0") if p)
        except (OSError, subprocess.CalledProcessError):
            _TRACKED.append("README.md")  # not a git checkout: results/ alone, walked below
    files = set(_TRACKED)
    for folder, _, names in os.walk(os.path.join(ROOT, "results")):
        files.update(os.path.relpath(os.path.join(folder, n), ROOT) for n in names)
    digest = {}
    for rel in sorted(files):
        path = os.path.join(ROOT, rel)
        try:
            st = os.stat(path)
        except OSError:
            digest[rel] = None
            continue
        key = (rel, st.st_ino, st.st_size, st.st_mtime_ns)
        if key not in _SHA:
            _SHA[key] = hashlib.sha256(open(path, "rb").read()).hexdigest()
        digest[rel] = _SHA[key]
    return digest


@pytest.fixture
def unchanged():
    """Every committed file byte-identical after the test (committed_digest)."""
    before = committed_digest()
    yield
    after = committed_digest()
    assert after == before, sorted(k for k in set(before) | set(after)
                                   if before.get(k) != after.get(k))[:5]


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory):
    """A 2 MiB tmpfs (root only), unmounted afterwards; the test is skipped where no
    file system can be mounted."""
    import subprocess
    d = tmp_path_factory.mktemp("full")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    yield d
    subprocess.run(["umount", "-l", str(d)], capture_output=True)

