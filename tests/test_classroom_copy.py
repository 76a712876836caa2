"""The student copy holds no answer, and is never built from a tree it would misrepresent
(exercises/handout.py): each exercise's answer is searched for in a built copy, Exercise
6's stop-gradient above all; the copy's DFPO computes what the library computes, to the
bit; an uncommitted change anywhere the copy reaches is refused in one line, or named when
allowed. Teacher's copy only."""

import json
import os
import re
import subprocess

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only", allow_module_level=True)

import loss  # noqa: E402
from exercises import handout  # noqa: E402
from exercises.answers import truth  # noqa: E402

STUDENTS = ("Ada Lovelace", "s1234567", "Émilie du Châtelet")


@pytest.fixture(scope="module")
def copy(student_copy):
    return student_copy(STUDENTS)


def texts(top):
    """{path: text} of every text file of a built copy, read from the disk."""
    out = {}
    for d, _, files in os.walk(top):
        for f in files:
            if f.endswith((".py", ".md", ".txt", ".json")):
                p = os.path.join(d, f)
                out[os.path.relpath(p, top)] = open(p, encoding="utf-8").read()
    return out


def test_no_exercise_s_answer_is_in_the_copy(copy):
    """Every answer the handout knows of, read back from the files on disk, and each
    student's numbers of exercises 1 and 4 to four significant digits."""
    found = [(ex, rel, a) for rel, text in texts(copy).items()
             for ex, marks in handout.ANSWERS.items() for a in marks if a in text.lower()]
    assert found == []
    draws = json.loads(texts(copy)["exercises/roster.json"])["students"]
    numbers = {f"{v:.4g}" for n in STUDENTS for ex in ("EX1", "EX4")
               for v in truth.key(n, draws[n])[ex].values() if abs(v) >= 1e-3}
    numbers = {n for n in numbers if len(re.sub(r"\D", "", n).lstrip("0")) >= 3}
    held = {n for text in texts(copy).values() for n in re.findall(r"-?\d+\.\d+", text)}
    assert numbers and not numbers & held


def test_exercise_6_s_answer_is_not_in_the_copy(copy):
    """The stop-gradient on DFPO's weights, and why it is there, are the answer of exercise 6:
    neither is in the copy's loss.py, THEORY.md, lab/ or the exercise's own file, and the
    exercise's file does not point at a model to diff against."""
    t = texts(copy)
    source = t["loss.py"]
    dfpo_weights = source[source.index("def dfpo_weights"):source.index("def dfpo(")]
    assert ".detach()" not in dfpo_weights and "stop-gradient" not in dfpo_weights
    for rel, text in t.items():
        for answer in ("sg(w~", "couple the copies' gradients", "w~ is detached",
                       "where gradients stop", "transform(w, adv, group).detach()"):
            assert answer not in text, (rel, answer)
    assert "written out on its own" in t["exercises/ex6_buggy_loss.py"]
    assert "row of loss.py" not in t["exercises/ex6_buggy_loss.py"]
    assert "raise a weight" not in t["THEORY.md"] and "conservative" not in t["THEORY.md"]


def test_the_copy_s_dfpo_is_the_library_s_to_the_bit(copy):
    """The copy's loss.py lost a .detach() and some words: with the reference transforms in
    its stubs' place it gives the same loss and the same gradient, bit for bit."""
    namespace = {"__name__": "copy_loss"}
    exec(compile(texts(copy)["loss.py"], "copy/loss.py", "exec"), namespace)
    namespace["adv_orthogonal"], namespace["min_replace"] = loss.adv_orthogonal, loss.min_replace
    g = torch.Generator().manual_seed(0)
    for name, transform in (("dfpo_orth", loss.adv_orthogonal), ("dfpo_min", loss.min_replace)):
        for clip in (None, (0.8, 1.2)):
            new = torch.randn(12, 7, generator=g, dtype=torch.float64)
            old = new + 0.1 * torch.randn(12, 7, generator=g, dtype=torch.float64)
            mask = torch.arange(7)[None] < torch.randint(2, 8, (12, 1), generator=g)
            adv = torch.randn(12, generator=g, dtype=torch.float64)
            group = torch.arange(3).repeat_interleave(4)
            counts = {"n_seqs": 12, "max_len": 9}
            got = []
            for dfpo in (getattr(loss, name),
                         lambda *a, t=transform: namespace["dfpo"](*a, transform=t)):
                leaf = new.clone().requires_grad_(True)
                value, frac = dfpo(leaf, old, mask, adv, group, counts, clip)
                (grad,) = torch.autograd.grad(value, leaf)
                got.append((value.detach(), frac, grad))
            for a, b in zip(*got):
                assert torch.equal(a, b), (name, clip)


def test_every_hide_rule_still_finds_its_text():
    """A rule that no longer matches has nothing left to hide, or the text moved: either
    way it is a rule to look at (the search for answers is what guards the copy)."""
    committed = handout.committed_files()
    for where, pattern, _ in handout.HIDE:
        files = [r for r in committed if r.endswith((".py", ".md"))] if where == "*" else [where]
        assert any(re.search(pattern, committed[r][0].decode("utf-8")) for r in files
                   if r in committed), (where, pattern)


def test_a_planted_answer_stops_the_handout(monkeypatch, tmp_path, capsys):
    real = handout.committed_files()
    planted = dict(real, **{"lab/notes.md": (b"w~ is detached on purpose\n", 0o644)})
    monkeypatch.setattr(handout, "committed_files", lambda: planted)
    monkeypatch.setattr(handout, "uncommitted", lambda: [])
    assert handout.main([str(tmp_path / "class")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ex6's answer (lab/notes.md: 'w~ is detached'" in err[0], err
    assert os.listdir(tmp_path) == []


def test_git_status_is_read_for_every_path_the_copy_takes(monkeypatch):
    status = (" M EXERCISES.md\0?? notes/key.txt\0R  new.md\0old.md\0 M results/x.json\0"
              "?? exercises/answers/draft.py\0")
    monkeypatch.setattr(handout, "git", lambda *a: status.encode())
    assert handout.uncommitted() == ["EXERCISES.md", "new.md", "notes/key.txt", "old.md"]
    with pytest.raises(handout.HandoutError, match="4 uncommitted changes .*EXERCISES.md"):
        handout.check_clean(False)
    assert handout.check_clean(True) == handout.uncommitted()


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """A clone of the last commit, as the handout's repository."""
    top = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(top)],
                   check=True, capture_output=True, timeout=120)
    monkeypatch.setattr(handout, "ROOT", str(top))
    return top


def test_an_uncommitted_edit_outside_exercises_is_refused_or_named(clone, tmp_path, capsys):
    (clone / "EXERCISES.md").write_text("an edit the copy would miss\n", encoding="utf-8")
    (clone / "notes.txt").write_text("untracked\n", encoding="utf-8")
    assert handout.main([str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 uncommitted changes" in err[0] and "EXERCISES.md" in err[0]
    assert not (tmp_path / "a").exists()
    assert handout.main([str(tmp_path / "b"), "--allow_dirty"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["note: not in the copy (uncommitted, --allow_dirty): EXERCISES.md",
                   "note: not in the copy (uncommitted, --allow_dirty): notes.txt"], err
    assert "an edit the copy would miss" not in (tmp_path / "b" / "EXERCISES.md").read_text()


def test_two_roster_lines_for_one_student_are_refused(tmp_path):
    (tmp_path / "names.txt").write_text("Ada Lovelace\nada  LOVELACE\n", encoding="utf-8")
    with pytest.raises(handout.HandoutError, match="names differ only in case"):
        handout.read_roster(str(tmp_path / "names.txt"))


def test_links_into_results_keep_their_text_only(copy):
    readme = texts(copy)["README.md"]
    assert "](results/" not in readme and "](results)" not in readme


def test_the_copy_s_motion_ledger_picks_the_same_tokens():
    """lab/motion.py's first row of each token set, rewritten in the copy without the
    scatter's "amin" (HIDE): on random batches, the copy's tracked_tokens is the library's."""
    motion_src = handout.committed_files()["lab/motion.py"][0].decode("utf-8")
    rewritten = handout.hide("lab/motion.py", motion_src)
    assert '"amin"' in motion_src and '"amin"' not in rewritten
    from lab import motion
    space = dict(vars(motion))
    exec(compile(rewritten, "lab/motion.py (copy)", "exec"), space)  # the copy's module
    for seed in range(30):
        g = torch.Generator().manual_seed(seed)
        rows, length = 12, 6
        tokens = torch.randint(0, 3, (rows, length), generator=g)
        mask = torch.ones(rows, length, dtype=torch.bool)
        group = torch.arange(rows) // 4
        rewards = torch.randint(0, 2, (rows,), generator=g).float()
        assert space["tracked_tokens"](tokens, mask, group, rewards) == motion.tracked_tokens(
            tokens, mask, group, rewards), seed
