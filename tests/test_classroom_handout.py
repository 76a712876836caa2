"""The handout builder (exercises/handout.py) as a hostile roster, an impatient teacher and
a full disk would meet it: names that would split or hide are refused or normalised and
said, a long roster shows progress, Ctrl-C and a full disk leave nothing behind. Also the
rewrites that keep the copy's promises: links, tests that need results/, mixed_rows.
Teacher's copy only."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

from exercises import handout  # noqa: E402
from tests import test_links  # noqa: E402


def roster_file(tmp_path, data):
    path = tmp_path / "names.txt"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return str(path)


def test_a_byte_order_mark_crlf_and_spacing_are_normalised_and_said(tmp_path):
    names, notes = handout.read_roster(roster_file(
        tmp_path, "\ufeffAda Lovelace\r\nAlan  Turing\r\n\r\nE\u0301milie\n"))
    assert names == ["Ada Lovelace", "Alan Turing", "Émilie"]
    assert notes == ["dropped the byte-order mark at the start of the roster",
                     "normalised the spacing or accents of 2 names"]


@pytest.mark.parametrize("data, line, char", [
    ("Ada\nGrace\u2028Hopper\n", 2, "U+2028"), ("Alan\x0bTuring\n", 1, "U+000B"),
    ("Ada\tLovelace\n", 1, "U+0009"), ("Ada\n\ufeffBob\n", 2, "U+FEFF"),
    ("Kurt\x1cG\n", 1, "U+001C"), ("A\u2029B\n", 1, "U+2029")])
def test_a_name_with_a_control_or_separator_character_is_refused_with_its_line(
        tmp_path, data, line, char):
    pattern = f"line {line}: the name holds .*{re.escape(char)}"
    with pytest.raises(handout.HandoutError, match=pattern):
        handout.read_roster(roster_file(tmp_path, data))


def test_a_roster_that_is_not_utf8_is_one_line(tmp_path):
    with pytest.raises(handout.HandoutError, match="not a readable UTF-8 text file"):
        handout.read_roster(roster_file(tmp_path, b"Ada\n\xff\xfeB\n"))


def test_a_long_roster_shows_its_progress(monkeypatch, capsys):
    import io
    monkeypatch.setattr(handout, "PROGRESS_FROM", 5)
    out = io.StringIO()
    handout.draws([f"s{i:07d}" for i in range(10)], frozenset(), progress=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and lines[-1].startswith("drawing tables: 10 of 10 names"), lines


def test_ctrl_c_during_a_long_handout_is_one_line_and_leaves_nothing(tmp_path):
    names = roster_file(tmp_path, "".join(f"s{i:07d}\n" for i in range(3000)))
    # the child starts with Ctrl-C's default action, whatever this process inherited (a
    # job started in the background of a shell ignores SIGINT, and so would its children)
    p = subprocess.Popen([sys.executable, "-m", "exercises.handout", str(tmp_path / "class"),
                          f"--roster={names}", "--allow_dirty"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # Ctrl-C once it is drawing tables (its first progress line), whatever its start-up
    # cost (a fresh clone compiles every module first): a fixed sleep could come too early
    first = p.stderr.readline()
    assert first.startswith("drawing tables:"), first
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    err = first + err
    lines = [x for x in err.strip().splitlines() if not x.startswith("drawing tables:")]
    assert p.returncode == 130 and lines == [
        f"error: interrupted; nothing was written to {tmp_path / 'class'}"], err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["names.txt"]


def namespace():
    """unshare's command to mount a small tmpfs privately, or None where it cannot."""
    cmd = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        cmd[1:1] = ["--user", "--map-root-user"]
    try:
        ok = subprocess.run(cmd + ["true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return cmd if ok else None


@pytest.mark.skipif(namespace() is None, reason="no mount namespace for a small tmpfs here")
def test_a_handout_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f"mount -t tmpfs -o size=1m none {disk} && "
              f"{sys.executable} -m exercises.handout {disk}/class --allow_dirty; "
              f"echo rc=$?; ls -A {disk}")
    proc = subprocess.run(namespace() + ["sh", "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], proc
    assert "nothing was left behind" in lines[0] and "needs about" in lines[0]
    assert proc.stdout.split() == ["rc=2"], proc.stdout  # and the disk is empty


def test_links_that_would_not_resolve_in_the_copy_keep_their_text():
    texts = {"README.md": "", "results/README.md": "# Results\n", "docs/A.md": "## Here\n"}
    text = ("[a](results/README.md#measurements) [b](exercises/answers/README.md) "
            "[c](docs/A.md#here) [d](https://x.org/y) ![e](results/fig.png) [f](docs/A.md#gone)")
    assert handout.fix_links("README.md", text, texts) == (
        "[a](results/README.md) b [c](docs/A.md#here) [d](https://x.org/y)  [f](docs/A.md)")


def test_tests_that_read_results_are_found_through_their_helpers():
    source = '''import os
ROOT = "."
def table():
    return open(os.path.join(ROOT, "results", "README.md")).read()
def test_direct():
    open(os.path.join(ROOT, "results", "x.json"))
def test_helper():
    assert table()
def test_output_folder(tmp_path):
    assert os.path.join(ROOT, "results") and tmp_path / "results"
'''
    assert handout.needs_results(source) == ["test_direct", "test_helper"]
    marked = handout.skip_results_tests(source)
    assert marked.count(handout.RESULTS_SKIP) == 2
    compile(marked, "t.py", "exec")


def test_the_rewritten_mixed_rows_finds_the_same_rows():
    """The copy's mixed_rows (no per-group minimum) against the definition: a row of a group
    whose rewards are not all equal."""
    source = ('def mixed_rows(rewards, group):\n    """doc"""\n    raise AssertionError\n')
    namespace = {"torch": torch}
    exec(handout.replace_bodies(source, handout.REWRITES)[0], namespace)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        n = int(torch.randint(1, 30, (), generator=g))
        group = torch.randint(0, 6, (n,), generator=g) * 7 - 3
        rewards = (torch.rand(n, generator=g) < torch.rand((), generator=g)).float()
        rewards[::3] *= 0.5
        want = torch.tensor([len(set(rewards[group == x].tolist())) > 1 for x in group.tolist()])
        assert torch.equal(namespace["mixed_rows"](rewards, group), want)


@pytest.mark.parametrize("kind", test_links.KINDS)
def test_the_handout_refuses_a_folder_in_the_repository_reached_through_links(
        tmp_path, capsys, monkeypatch, kind):
    repo = tmp_path / "repo"  # stands for the repository: nothing real is at stake
    (repo / "docs").mkdir(parents=True)
    monkeypatch.setattr(handout, "ROOT", str(repo))
    out = test_links.link(tmp_path, kind, str(repo / "docs"), "copy")
    if kind == "file":  # a link to a new name in the repository
        out = str(tmp_path / "links" / "f")
    assert handout.main([out, "--allow_dirty"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lies inside this repository" in err[0], err
    assert os.listdir(repo / "docs") == []
