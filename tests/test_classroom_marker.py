"""The marking tool runs students' code as untrusted code (exercises/answers/mark.py and
sandbox.py): hostile submissions cannot touch the teacher's tree, outlive their exercise,
stall the marking or spoof a verdict; every verdict is the marker's. Teacher's copy only.

The hostile submissions run against a clone of this repository, so that a sandbox that
failed would damage the clone, not the checkout; both are hashed before and after."""

import csv
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises.answers import collect, key, sandbox  # noqa: E402

try:
    MODE = sandbox.mode()
except sandbox.SandboxError as e:  # no namespaces here: the refusal is tested below
    MODE, WHY = None, str(e)
needs_sandbox = pytest.mark.skipif(MODE is None, reason="this machine cannot make a sandbox")
TOKEN = "cancel-gpt-sandbox-test-orphan"


def digest(top):
    """sha256 of every file under ``top`` (caches aside), by path."""
    out = {}
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if x not in ("__pycache__", ".pytest_cache")]
        for f in files:
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                out[os.path.relpath(p, top)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


AIMED = ("README.md", "results/README.md", "loss.py", "exercises/check.py")


def aimed_at(top):
    """Which of the files the vandal deletes through /proc exist in ``top``: the checkout is
    shared with people at work (its other files may change while the test runs), so it is
    checked for what the attack does, deletion, where the clone is hashed whole."""
    return {rel: os.path.isfile(os.path.join(top, rel)) for rel in AIMED}


def write_sheet(path, name):
    sheet = key.filled_sheet(name)
    names = ["STUDENT", "EX1", "EX4", "EX7", "EX1_WHY", "EX3_WHY", "EX4_WHY", "EX6_WHY", "EX7_WHY"]
    path.write_text("".join(f"{n} = {getattr(sheet, n)!r}\n" for n in names), encoding="utf-8")


VANDAL = '''import os, shutil, subprocess, sys
TARGETS = {targets!r}
for path in TARGETS:  # by absolute path
    for act in (os.remove, shutil.rmtree):
        try:
            act(path)
        except Exception:
            pass
for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:  # through /proc
    for link in ("cwd", "root"):
        base = f"/proc/{{pid}}/{{link}}"
        for rel in ("README.md", "results/README.md", "loss.py", "exercises/check.py"):
            try:
                os.remove(os.path.join(base, rel))
            except Exception:
                pass
try:
    os.remove(f"/proc/{{os.getppid()}}/cwd/README.md")
except Exception:
    pass
if os.fork() == 0:  # a child meant to outlive the marking
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{token}"])
for ex in ("ex2", "ex3", "ex5", "ex6"):
    print(f"{{ex}}  ok    hand examples")
print("all hold")
sys.stdout.write("x" * (2 << 20))
sys.stdout.flush()
os._exit(0)
'''

HOG = '''hoard = []
while True:  # fill memory until the limit says no
    hoard.append(bytearray(256 << 20))
'''

SLEEPER = '''import time
time.sleep(10 ** 6)
'''


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone of this repository's last commit: the teacher's tree the hostile code aims at."""
    top = tmp_path_factory.mktemp("teacher") / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", ROOT, str(top)], check=True,
                   capture_output=True, timeout=120)
    return top


def wait_for(event, seconds):
    """Whether ``event()`` became true within ``seconds`` (polled, never a fixed sleep)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if event():
            return True
        time.sleep(0.05)
    return event()


def no_orphans():
    """Every process the hostile code started has ended (the kernel's kill takes a moment
    to reach all of them)."""
    return wait_for(lambda: orphans() == [], 30)


def orphans():
    found = []
    for pid in os.listdir("/proc"):
        try:
            if TOKEN.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                found.append(pid)
        except OSError:
            pass
    return found


@needs_sandbox
def test_hostile_submissions_are_contained_and_marked_by_the_marker(clone, tmp_path):
    subs = tmp_path / "subs"
    students = {"a_good": "Ada Lovelace", "b_vandal": "s1234567", "c_hog": "Émilie du Châtelet",
                "d_sleeper": "Alan Turing"}
    for folder, name in students.items():
        (subs / folder).mkdir(parents=True)
        write_sheet(subs / folder / "sheet.py", name)
    for f in ("loss.py", "batching.py"):
        shutil.copyfile(clone / f, subs / "a_good" / f)
    shutil.copyfile(clone / "exercises" / "answers" / "ex6_buggy_loss.py",
                    subs / "a_good" / "ex6_buggy_loss.py")
    targets = [str(clone / "README.md"), str(clone / "results"), str(clone / "exercises"),
               str(subs / "a_good" / "loss.py"), str(subs)]
    (subs / "b_vandal" / "loss.py").write_text(VANDAL.format(targets=targets, token=TOKEN))
    (subs / "c_hog" / "batching.py").write_text(HOG)
    (subs / "d_sleeper" / "ex6_buggy_loss.py").write_text(SLEEPER)
    before = (digest(clone), aimed_at(ROOT), digest(subs))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "exercises.answers.mark", str(subs),
                           "--timeout=20", "--memory=1536", "--jobs=2",
                           f"--out={tmp_path / 'marks'}"], cwd=clone,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 150
    assert (digest(clone), aimed_at(ROOT), digest(subs)) == before  # byte-identical
    assert no_orphans()
    with open(tmp_path / "marks" / "gradebook.csv", encoding="utf-8-sig", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    points = lambda name: [int(v) for k, v in rows[name].items() if re.match(r"ex\d \(of", k)]
    assert points("Ada Lovelace") == [4, 6, 3, 3, 6, 3, 3], rows["Ada Lovelace"]
    # the spoofer printed "ok" lines and exited 0: nothing of it counts
    for name in ("s1234567", "Émilie du Châtelet", "Alan Turing"):
        assert points(name) == [4, 0, 0, 3, 0, 0, 3], rows[name]
    assert rows["s1234567"]["ex2 mistake"] == "the process returned no results in the expected form"
    assert rows["Émilie du Châtelet"]["ex5 mistake"].startswith("importing it failed: MemoryError")
    assert rows["Alan Turing"]["ex6 mistake"] == "stopped after 20 s"
    assert rows["s1234567"]["ex5 mistake"] == "not handed in"


@needs_sandbox
def test_the_child_sees_no_teacher_tree_no_network_and_no_privilege(tmp_path):
    """Directly, in both modes this machine has: what the child can see and do."""
    probe = tmp_path / "copy" / "probe.py"
    probe.parent.mkdir()
    probe.write_text(f'''import json, os, socket
out = {{"uid": os.getuid(), "pid": os.getpid(), "cwd": os.getcwd(), "home": os.environ["HOME"]}}
out["caps"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
out["root"] = sorted(os.listdir({ROOT!r})) if os.path.isdir({ROOT!r}) else None
out["proc1"] = os.readlink("/proc/1/cwd")
out["others"] = sorted(p for p in os.listdir("/proc") if p.isdigit())
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1)
    out["net"] = True
except OSError:
    out["net"] = False
for path in ("/usr/x", os.path.join(os.path.dirname(os.__file__), "x")):
    try:
        open(path, "w")
        out["wrote"] = path
    except OSError:
        pass
print(json.dumps(out))
''')
    kinds = ["userns"] + (["root"] if os.geteuid() == 0 else [])
    for kind in kinds:
        if kind == "userns" and subprocess.run(sandbox._unshare("userns") + ["true"],
                                               capture_output=True).returncode:
            continue
        o = sandbox.run(str(probe.parent), ["-I", "probe.py"], kind=kind, hide=[ROOT],
                        limits=sandbox.Limits(seconds=60))
        assert o.status == "exited" and o.code == 0, (kind, o)
        import json
        got = json.loads(o.stdout)
        # nothing of the teacher's tree, but the Python that runs the child where it lies
        # inside it (a venv in the repository, as CI makes), bound read-only
        own = {os.path.relpath(p, ROOT).split(os.sep)[0] for p in sandbox.python_paths()
               if p.startswith(ROOT + os.sep)}
        assert got["root"] is None or set(got["root"]) <= own, (kind, got, own)
        assert got["caps"] == "0000000000000000", (kind, got)
        assert got["cwd"] == "/sandbox" and got["home"] == "/tmp" and got["proc1"] == "/sandbox"
        assert got["pid"] == 1 and got["others"] == ["1"] and got["net"] is False, got
        assert "wrote" not in got, got
        assert got["uid"] == (0 if kind == "userns" else got["uid"]) and (
            kind == "userns" or got["uid"] >= sandbox.UIDS[0]), got


@needs_sandbox
def test_a_child_that_prints_too_much_or_hangs_is_stopped(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "loud.py").write_text("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
    o = sandbox.run(str(copy), ["-I", "loud.py"], limits=sandbox.Limits(seconds=30, output=1 << 20))
    assert o.status == "output" and len(o.stdout) == 1 << 20
    (copy / "quiet.py").write_text("import os, time\nos.close(1)\nos.close(2)\ntime.sleep(999)\n")
    start = time.monotonic()
    o = sandbox.run(str(copy), ["-I", "quiet.py"], limits=sandbox.Limits(seconds=2))
    assert o.status == "timeout" and time.monotonic() - start < 15


def test_a_deeply_nested_sheet_costs_its_student_alone(tmp_path):
    """Read as data, refused in one line on that student's row; the others are read."""
    top = tmp_path / "subs"
    for who, body in (("x", "STUDENT = 'x'\nEX1 = {'grpo_net': " + "-" * 100000 + "1}\n"),
                      ("y", "STUDENT = 'y'\n")):
        (top / who).mkdir(parents=True)
        (top / who / "sheet.py").write_text(body)
    (tmp_path / "work").mkdir()
    subs, _, _ = collect.gather(str(top), str(tmp_path / "work"), None)
    assert [s.name for s in subs] == ["x", "y"] and subs[1].problems == []
    assert subs[0].sheet is None and len(subs[0].problems) == 1
    assert "nests an expression too deeply" in subs[0].problems[0]


@pytest.mark.parametrize("argv, message", [
    (["{tmp}/nowhere"], "usage"),
    (["{tmp}", "--timeout=soon"], "--timeout takes a whole number"),
    (["{tmp}", "--timeout=0"], "must be in 1..86400"),
    (["{tmp}", "--timeout=5", "--timeout=6"], "given twice"),
    (["{tmp}", "--fast"], "unknown flag"),
    (["{tmp}"], "holds no submission"),
])
def test_the_marking_tool_refuses_bad_input_in_one_line(tmp_path, capsys, argv, message):
    from exercises.answers import mark
    assert mark.main([a.format(tmp=tmp_path) for a in argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


@needs_sandbox
def test_ctrl_c_while_marking_is_one_line_and_stops_every_sandbox(tmp_path):
    (tmp_path / "subs" / "a").mkdir(parents=True)
    write_sheet(tmp_path / "subs" / "a" / "sheet.py", "Ada Lovelace")
    (tmp_path / "subs" / "a" / "ex6_buggy_loss.py").write_text(
        f"import time\ntime.sleep(600)  # {TOKEN}\n")
    (tmp_path / "subs" / "a" / "batching.py").write_text(
        f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', "
        f"'import time; time.sleep(600)', '{TOKEN}'])\n")
    p = subprocess.Popen([sys.executable, "-m", "exercises.answers.mark", str(tmp_path / "subs"),
                          "--timeout=300"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    # Ctrl-C once a student's code runs (its process appears), whatever the start-up costs
    assert wait_for(lambda: orphans() != [], 120), "the sandboxed child never started"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    lines = [x for x in err.strip().splitlines() if not x.startswith("warning: ")]
    assert p.returncode == 130 and lines == ["error: interrupted; no marks were printed"], err
    assert no_orphans()


def test_ctrl_c_in_the_check_is_one_line():
    # compiled first: a fresh clone's first start compiles every module it imports, and a
    # Ctrl-C before the check's handler is installed would be Python's, not the check's
    subprocess.run([sys.executable, "-m", "compileall", "-q", "exercises", "lab", "loss.py",
                    "batching.py", "model.py", "sampler.py", "toy_tasks.py", "plumbing"],
                   cwd=ROOT, capture_output=True)
    p = subprocess.Popen([sys.executable, "-m", "exercises.check", "ex5"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # while it imports torch: its handler is installed before that import, and a Ctrl-C after
    # the check is done would meet Python's own shutdown. The event waited for: torch's
    # library mapped into the process (Linux's /proc), never a fixed time
    def loading_torch():
        try:
            with open(f"/proc/{p.pid}/maps", encoding="utf-8") as f:
                return "libtorch" in f.read()
        except OSError:
            return False
    assert wait_for(loading_torch, 120), "the check never began to import torch"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err.strip().splitlines() == ["interrupted"], err
