"""The classroom set (EXERCISES.md, exercises/): the reference answers pass
every check, a catalogue of plausible wrong work fails, and the student copy
built by exercises/handout.py holds no answers, imports, fails its checks
cleanly and passes its tests. Teacher's copy only: exercises/handout.py
leaves this file out of the student copy."""

import importlib.util
import shutil
import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip(
        "teacher's copy only: exercises/answers/ is not in a student copy", allow_module_level=True
    )

import batching  # noqa: E402
from exercises import check, ex6_buggy_loss, roster
from exercises.answers import key, truth
import loss  # noqa: E402

STUDENTS = ("Ada Lovelace", "s1234567", "Émilie du Châtelet")
FAST = 1  # fingerprint iterations in tests: the rule is under test here, not the cost


def class_roster(names, iterations=FAST):
    return {"iterations": iterations,
            "students": {n: roster.entry(n, truth.key(n), truth.pick_tables(n), iterations)
                         for n in names}}


def random_names(n=200, seed=0):
    """n distinct plausible names: letters, spaces, accents, digits (student ids)."""
    import random
    rng, out = random.Random(seed), []
    first = ["Ada", "Émilie", "Alan", "Grace", "Kurt", "Sofia", "Li", "Nadia", "Jürgen", "Ana"]
    while len(out) < n:
        name = (f"s{rng.randrange(10 ** 7):07d}" if rng.random() < 0.3 else
                f"{rng.choice(first)} {''.join(rng.choices('abcdefghijklmnopqrstuvwxyz', k=6))}")
        if name not in out:
            out.append(name)
    return out


ROSTER = class_roster(STUDENTS)
NAMES = random_names()


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIXED = load(
    os.path.join(ROOT, "exercises", "answers", "ex6_buggy_loss.py"), "fixed_ex6"
).dfpo_orth_loss


def env(name=STUDENTS[0], **sheet_changes):
    sheet = key.filled_sheet(name)
    for k, v in sheet_changes.items():
        setattr(sheet, k, v)
    return {"sheet": sheet, "ex6": FIXED, "roster": ROSTER}


def failures(ex, e):
    return [(what, why) for what, why in check.run(ex, e) if why is not None]


@pytest.mark.parametrize("name", STUDENTS)
@pytest.mark.parametrize("ex", ["ex1", "ex4", "ex7"])
def test_the_key_passes_the_number_checks(ex, name):
    assert failures(ex, env(name)) == []


@pytest.mark.parametrize("ex", ["ex2", "ex3", "ex5", "ex6"])
def test_the_reference_answers_pass(ex):
    assert failures(ex, env()) == []


def test_students_get_different_tables():
    tables = [truth.key(name) for name in STUDENTS]
    assert all(a != b for i, a in enumerate(tables) for b in tables[i + 1:])


@pytest.mark.parametrize("name", STUDENTS)
def test_the_key_matches_closed_forms_computed_another_way(name):
    """The key comes from loss.py's autograd; here each number from its closed form."""
    from exercises import problems
    import toy_tasks
    v = truth.pick_tables(name)
    k, p1, p4, p7 = (truth.key(name), problems.ex1(name, v["EX1"]), problems.ex4(name, v["EX4"]),
                     problems.ex7(name, v["EX7"]))
    r, n = p1["rewards"], p1["lengths"]
    a = [x - sum(r) / 4 for x in r]
    sd = (sum(x * x for x in a) / 3) ** 0.5  # Bessel-corrected, as TRL and verl
    i = p1["k"] - 1
    assert k["EX1"]["grpo_residual"] == pytest.approx(
        abs(sum(x / m for x, m in zip(a, n))) / sum(abs(x) / m for x, m in zip(a, n)), rel=1e-5
    )
    assert k["EX1"]["grpo_net"] == pytest.approx(
        sum(x / sd / (4 * m) for x, m in zip(a, n)), rel=1e-4
    )
    assert k["EX1"]["grpo_coef_k"] == pytest.approx(a[i] / sd / (4 * n[i]), rel=1e-4)
    assert k["EX1"]["dr_grpo_coef_k"] == pytest.approx(a[i] / (4 * p1["L_max"]), rel=1e-5)
    r, n, s = p4["rewards"], p4["lengths"], p4["s"]
    a = [x - sum(r) / 4 for x in r]
    assert k["EX4"]["gspo_residual"] == pytest.approx(
        abs(sum(w * x / m for w, x, m in zip(s, a, n)))
        / sum(w * abs(x) / m for w, x, m in zip(s, a, n)),
        rel=1e-5,
    )
    assert k["EX4"]["luspo_residual"] == pytest.approx(
        abs(sum(w * x for w, x in zip(s, a))) / sum(w * abs(x) for w, x in zip(s, a)), rel=1e-5
    )
    j = p4["k"] - 1
    proj = sum(w * x for w, x in zip(s, a)) / sum(x * x for x in a)
    assert k["EX4"]["orth_w_k"] == pytest.approx(s[j] - proj * a[j], rel=1e-6)
    text = toy_tasks.make_task("add", 2, True).solution(p7["problem"])
    assert k["EX7"]["tokens"] == len(text) + 1  # EOS
    # operators, separators and EOS
    assert k["EX7"]["template"] == sum(not c.isdigit() for c in text) + 1
    pairs = [(x, y) for x in range(p7["lo"], p7["hi"] + 1) for y in range(p7["lo"], p7["hi"] + 1)]
    assert k["EX7"]["plain_share"] == pytest.approx(
        len(pairs) / sum(len(str(x + y)) + 1 for x, y in pairs)
    )


# ---------------------------------------------------------------- wrong work
# Numbers a student would plausibly get by a real mistake. Each is computed
# from the right numbers or the table, and must be refused.

def wrong_numbers(name):
    """{(exercise, number): [values]}: the catalogue (exercises/answers/mistakes.py) on this
    student's own tables."""
    from exercises.answers import mistakes
    tables, right = truth.pick_tables(name), truth.key(name)
    return {(ex, k): vs for ex in right
            for k, vs in mistakes.wrong_numbers(name, ex, tables[ex], right[ex]).items()}


@pytest.mark.parametrize("name", STUDENTS)
def test_a_wrong_number_is_refused_without_saying_which_or_what(name):
    for (ex, k), values in wrong_numbers(name).items():
        sheet = key.filled_sheet(name)
        getattr(sheet, ex)[k] = values[0]
        bad = failures(ex.lower(), {"sheet": sheet, "ex6": FIXED, "roster": ROSTER})
        # fixed words: neither the student's value, nor the right one, nor which number
        assert [why for _, why in bad] == [
            f"{ex}: not all {len(check.KEYS[ex])} numbers are right for your table (3 significant "
            "digits, one unit of the third either way); the check does not say which"], bad


def wrong_answers_accepted(names):
    """(name, exercise, number, value) of every wrong answer of the catalogue that the
    teacher's rule or the student's check would accept."""
    out = []
    r = class_roster(names)
    for name in names:
        right = truth.key(name)
        for (ex, k), values in wrong_numbers(name).items():
            for v in values:
                given = {kk: float(f"{x:.3g}") for kk, x in right[ex].items()}
                given[k] = v
                if truth.right(v, right[ex][k]) or roster.all_right(
                        name, ex, given, r["students"][name][ex], FAST):
                    out.append((name, ex, k, v))
    return out


def test_every_wrong_answer_is_refused_for_200_names():
    """Each mistake of the catalogue gives a number outside the tolerance (one unit of
    the third significant digit) for every one of 200 names, and the check refuses it."""
    assert wrong_answers_accepted(NAMES) == []


def test_right_answers_are_accepted_for_200_names():
    """The key rounded to 3 significant digits, truncated to 3, at full precision, and
    rounded to 4: all accepted by the teacher's rule and by the student's check."""
    r = class_roster(NAMES)
    variants = {
        "rounded": lambda v: float(f"{v:.3g}"),
        "truncated": lambda v: float(f"{v:.6e}"[:4] + f"{v:.6e}"[8:]) if v >= 0
        else float(f"{v:.6e}"[:5] + f"{v:.6e}"[9:]),
        "full": lambda v: v,
        "4 digits": lambda v: float(f"{v:.4g}"),
    }
    refused = []
    for name in NAMES:
        for ex, values in truth.key(name).items():
            for what, f in variants.items():
                given = {k: f(v) for k, v in values.items()}
                ok = all(truth.right(given[k], v) for k, v in values.items()) and roster.all_right(
                    name, ex, given, r["students"][name][ex], FAST)
                if not ok:
                    refused.append((name, ex, what, given))
    assert refused == []


def test_the_check_needs_a_roster_and_your_name_on_it():
    sheet = key.filled_sheet("Not On It")
    bad = failures("ex1", {"sheet": sheet, "ex6": FIXED, "roster": ROSTER})
    assert "is not on this class's roster" in bad[0][1]
    bad = failures("ex1", {"sheet": key.filled_sheet(STUDENTS[0]), "ex6": FIXED, "roster": None})
    assert "cannot be checked in this copy" in bad[0][1]


def test_the_fingerprint_rule_by_hand():
    """Three-digit mantissas within one unit, read on the key's decade."""
    assert roster.sig3(0.012345) == (1, 123, -2) and roster.sig3(-999.6) == (-1, 100, 3)
    assert roster.within(0.124, 0.12345) and roster.within(0.122, 0.12345)
    assert not roster.within(0.121, 0.12345) and not roster.within(-0.123, 0.12345)
    assert roster.within(0.1001, 0.0999) is False  # 1001 against 999 on the key's decade
    assert roster.within(0.0998, 0.1) and roster.within(23, 23) and not roster.within(22, 23.4)


def test_prose_must_be_written_but_is_not_graded():
    for n in (1, 3, 4, 6, 7):
        bad = failures(f"ex{n}", env(**{f"EX{n}_WHY": "blah " * 5}))
        assert [w for w, _ in bad] == [check.WRITTEN], (n, bad)


def recentred(w, adv, group):  # re-centres A inside each group before projecting
    out = w.clone()
    for g in torch.unique(group):
        m = group == g
        a = adv[m] - adv[m].mean()
        out[m] = w[m] - (a @ w[m]) / (a @ a) * a if float(a @ a) > 0 else w[m]
    return out


def reshaped(w, adv, group):  # assumes contiguous groups of equal size
    K = len(torch.unique(group))
    W, A = w.reshape(K, -1), adv.reshape(K, -1).to(w.dtype)
    sq = (A * A).sum(1, keepdim=True)
    return (
        W - torch.where(sq > 0, (A * W).sum(1, keepdim=True) / sq.clamp(min=1e-12), 0 * sq) * A
    ).reshape(-1)


def no_guard(w, adv, group):  # 0/0 in a group whose advantages are all zero
    out = w.clone()
    for g in torch.unique(group):
        m = group == g
        out[m] = w[m] - (adv[m] @ w[m]) / (adv[m] @ adv[m]) * adv[m]
    return out


REFERENCE = loss.adv_orthogonal


def in_place(w, adv, group):  # right values, but overwrites the caller's w
    return w.copy_(REFERENCE(w.clone(), adv, group))


def whole_batch(w, adv, group):  # one projection over the batch, not per group
    adv = adv.to(w.dtype)
    return w - (adv @ w) / (adv @ adv) * adv


def runs(w, adv, group):  # min over contiguous runs of equal labels only
    out, start = w.clone(), 0
    for n in torch.unique_consecutive(group, return_counts=True)[1].tolist():
        out[start:start + n] = w[start:start + n].min()
        start += n
    return out


def per_group(fn):
    """Apply fn(w, adv) to each group's rows (a helper for the wrong answers below)."""
    def out(w, adv, group):
        res = w.clone()
        for g in torch.unique(group):
            m = group == g
            res[m] = fn(w[m], adv[m].to(w.dtype))
        return res
    return out


def safe_proj(w, a):  # the part of w along a (0 when a is all 0)
    return (a @ w) / (a @ a) * a if float(a @ a) > 0 else 0 * w


def round_robin(group_ids, adv, lengths, M, gen):  # whole groups dealt in label order
    groups = torch.unique(group_ids).tolist()
    return [torch.cat([(group_ids == g).nonzero().flatten() for g in groups[c::M]])
            for c in range(M)]


WRONG = {
    "ex2": {
        "re-centred A": recentred,
        "equal contiguous groups": reshaped,
        "no 0/0 guard": no_guard,
        "modifies its input": in_place,
        "one projection for the batch": whole_batch,
        "projected on sign(A)": per_group(lambda w, a: w - safe_proj(w, torch.sign(a))),
        "the part along A kept, not removed": per_group(safe_proj),
        "w centred instead of projected": per_group(lambda w, a: w - w.mean() + 1),
    },
    "ex3": {
        "contiguous runs": runs,
        "global min": lambda w, a, g: torch.full_like(w, float(w.min())),
        "group mean": lambda w, a, g: loss.group_mean(w, g)[0],
        "equal contiguous groups": lambda w, a, g: w.reshape(len(torch.unique(g)), -1)
        .min(1, keepdim=True)
        .values.expand(len(torch.unique(g)), -1)
        .reshape(-1),
        "group max": per_group(lambda w, a: torch.full_like(w, float(w.max()))),
        "min over the A > 0 rows": per_group(
            lambda w, a: torch.full_like(
                w, float(w[a > 0].min()) if bool((a > 0).any()) else float(w.min())
            )
        ),
        "clamped at 1": lambda w, a, g: w.clamp(max=1.0),
        "group median": per_group(lambda w, a: torch.full_like(w, float(w.median()))),
    },
    "ex5": {
        "shuffle (splits groups)": batching.shuffle,
        "query (no balancing)": batching.query,
        "balanced (splits groups)": batching.balanced,
        "contiguous cut of the rows": lambda g, a, l, M, gen: list(
            torch.arange(len(g)).tensor_split(M)
        ),
        "greedy without room": lambda g, a, l, M, gen: greedy_no_room(g, a, M),
        "length (splits groups)": batching.length,
        "sign (splits groups)": batching.sign,
        "whole groups dealt in label order": round_robin,
    },
}


def greedy_no_room(group_ids, adv, M):
    """Each group to the mini-batch with the fewest signed rollouts so far: even signs,
    uneven group counts."""
    chunks, load = [[] for _ in range(M)], [0] * M
    for gid in torch.unique(group_ids).tolist():
        rows = (group_ids == gid).nonzero().flatten()
        c = min(range(M), key=lambda c: load[c])
        chunks[c].append(rows)
        load[c] += int((adv[rows] != 0).sum()) + 100 * (len(chunks[c]) > 2)
    return [torch.cat(ch) if ch else torch.zeros(0, dtype=torch.long) for ch in chunks]


@pytest.mark.parametrize("ex, mistake", [(ex, m) for ex in WRONG for m in WRONG[ex]])
def test_plausible_wrong_code_is_refused(monkeypatch, ex, mistake):
    fn = WRONG[ex][mistake]
    if ex == "ex5":
        monkeypatch.setattr(batching, "query_balanced", fn)
    else:
        name = {"ex2": "adv_orthogonal", "ex3": "min_replace"}[ex]
        monkeypatch.setattr(loss, name, fn)
    assert failures(ex, env()), mistake


def unfixed_but_detached_in_the_wrong_place(new_logp, old_logp, mask, adv, group, max_len):
    return ex6_buggy_loss.dfpo_orth_loss(new_logp, old_logp, mask, adv, group, max_len).detach()


def own_length(new_logp, old_logp, mask, adv, group, max_len):  # 1/L_i instead of 1/L_max
    lens = mask.sum(1).clamp(min=1)
    w = ((new_logp - old_logp) * mask).sum(1).div(lens).exp()
    per_seq = loss.adv_orthogonal(w, adv, group).detach() * adv / (mask.shape[0] * lens)
    return -(per_seq[:, None] * new_logp * mask).sum()


def untransformed(
    new_logp, old_logp, mask, adv, group, max_len
):  # w, detached, without Adv-Orthogonal
    w = ((new_logp - old_logp) * mask).sum(1).div(mask.sum(1).clamp(min=1)).exp().detach()
    return -((w * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


def whole_batch_weights(new_logp, old_logp, mask, adv, group, max_len):  # ignores the groups
    lens = mask.sum(1).clamp(min=1)
    w = ((new_logp - old_logp) * mask).sum(1).div(lens).exp()
    w_tilde = loss.adv_orthogonal(w, adv, torch.zeros_like(group)).detach()
    return -((w_tilde * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


def batch_max_len(new_logp, old_logp, mask, adv, group, max_len):  # L_max from the batch
    return FIXED(new_logp, old_logp, mask, adv, group, int(mask.sum(1).max()))


def no_gradient(new_logp, old_logp, mask, adv, group, max_len):  # the whole input detached
    return FIXED(new_logp.detach(), old_logp, mask, adv, group, max_len) + 0 * new_logp.sum()


def ratio_upside_down(new_logp, old_logp, mask, adv, group, max_len):  # w from log(old / new)
    return FIXED(new_logp, 2 * new_logp.detach() - old_logp, mask, adv, group, max_len)


def summed_log_ratio(new_logp, old_logp, mask, adv, group, max_len):  # s_i without 1/L_i
    w = ((new_logp - old_logp) * mask).sum(1).exp()
    w_tilde = loss.adv_orthogonal(w, adv, group).detach()
    return -((w_tilde * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


@pytest.mark.parametrize(
    "fn",
    [
        ex6_buggy_loss.dfpo_orth_loss,
        unfixed_but_detached_in_the_wrong_place,
        own_length,
        untransformed,
        whole_batch_weights,
        batch_max_len,
        no_gradient,
        ratio_upside_down,
        summed_log_ratio,
    ],
)
def test_ex6_wrong_fixes_are_refused(fn):
    bad = failures("ex6", dict(env(), ex6=fn))
    assert "several groups, L_max above the longest" in [w for w, _ in bad], bad


def test_ex6_shows_the_measurements(capsys):
    check.show_ex6(ex6_buggy_loss.dfpo_orth_loss)
    out = capsys.readouterr().out
    assert "off-policy" in out and "shared-token residual" in out


# ---------------------------------------------------------------- the student copy

@pytest.fixture(scope="module")
def student_copy(tmp_path_factory):
    """The copy of the last commit (--allow_dirty: a developer's uncommitted work does not
    stop the suite; the copy is the commit either way), with a roster of STUDENTS."""
    names = tmp_path_factory.mktemp("roster") / "names.txt"
    names.write_text("\n".join(STUDENTS) + "\n", encoding="utf-8")
    out = tmp_path_factory.mktemp("handout") / "class"
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(out), f"--roster={names}",
                           "--allow_dirty"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_student_copy_holds_no_key_and_no_results(student_copy):
    assert sorted(p.name for p in (student_copy / "results").iterdir()) == ["README.md"]
    text = "".join(p.read_text(encoding="utf-8") for p in student_copy.rglob("*.py"))
    for leak in ("def ex1_truth", "def ex4_truth", "def ex7_truth", "pick_tables", "def calculator",
                 "def wrong_numbers"):
        assert leak not in text, leak


def test_the_student_copy_checks_numbers_without_holding_them(student_copy):
    """A right sheet passes ex1's number check in the copy, a sheet with one number off
    fails it with the fixed line, and the roster holds fingerprints and draws only."""
    r = json.loads((student_copy / "exercises" / "roster.json").read_text(encoding="utf-8"))
    assert set(r["students"]) == set(STUDENTS) and r["iterations"] == roster.ITERATIONS
    sheet, path = key.filled_sheet(STUDENTS[0]), student_copy / "exercises" / "sheet.py"
    blank = path.read_text(encoding="utf-8")
    for off in (False, True):
        ex1 = dict(sheet.EX1, grpo_net=sheet.EX1["grpo_net"] * (1.5 if off else 1))
        body = f"STUDENT = {STUDENTS[0]!r}\nEX1 = {ex1!r}\nEX1_WHY = {'because ' * 30!r}\n"
        (student_copy / "exercises" / "sheet.py").write_text(body, encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "exercises.check", "ex1"], cwd=student_copy,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == (1 if off else 0), proc.stdout + proc.stderr
        assert ("not all 4 numbers are right" in proc.stdout) == off, proc.stdout
    path.write_text(blank, encoding="utf-8")  # the other tests see the copy as handed out


def test_handout_refuses_uncommitted_exercises(monkeypatch):
    from exercises import handout
    monkeypatch.setattr(handout, "git", lambda *a: b"?? exercises/key_printout.txt\n")
    with pytest.raises(handout.HandoutError, match="uncommitted changes or untracked files"):
        handout.check_clean()


@pytest.mark.parametrize("body, message", [("Ada\nAda\n", "twice"), ("\n\n", "holds no name")])
def test_handout_refuses_a_bad_roster_in_one_line(tmp_path, body, message):
    (tmp_path / "names.txt").write_text(body)
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(tmp_path / "class"),
                           f"--roster={tmp_path / 'names.txt'}", "--allow_dirty"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "class").exists()


def test_the_student_copy_holds_no_answers(student_copy):
    assert not (student_copy / "exercises" / "answers").exists()
    assert not (student_copy / "tests" / "test_exercises.py").exists()
    answers = [
        '"amin")[g]',
        "dot / nrm.clamp",
        "improved = True",
        "w_tilde = L.adv_orthogonal(w, adv, group).detach()",
    ]
    for path in student_copy.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md"):
            text = path.read_text()
            assert not any(a in text for a in answers), path
            assert "exercises/answers" not in text or path.name in ("README.md", "handout.py"), path


def test_the_student_copy_fails_cleanly_until_solved(student_copy):
    for ex in check.CHECKS:
        proc = subprocess.run([sys.executable, "-m", "exercises.check", ex], cwd=student_copy,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, (
            ex,
            proc.stdout,
            proc.stderr,
        )
        assert "FAIL" in proc.stdout, proc.stdout


def test_the_student_copy_passes_its_tests(student_copy):
    # The tests that reach the stubbed functions; the rest of the suite does not touch them.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_loss.py",
            "tests/test_batching.py",
            "-rs",
        ],
        cwd=student_copy,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "needs a solved exercise: exercise 2" in proc.stdout, proc.stdout[-3000:]


def test_handout_refuses_a_used_folder(tmp_path):
    (tmp_path / "x").write_text("keep me")
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True)
    assert (
        proc.returncode == 2
        and proc.stderr.startswith("error: ")
        and (tmp_path / "x").read_text() == "keep me"
    )


def test_handout_into_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    """Under a file, the folder cannot exist: one error line, exit 2, nothing written."""
    (tmp_path / "f").write_text("a file")
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(tmp_path / "f" / "class"),
                           "--allow_dirty"],
                          cwd=ROOT, capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize("body", [
    "class F(float):\n    __sub__ = lambda a, b: 0.0\nSTUDENT = 'x'\nEX1 = {'grpo_net': F(1)}\n",
    "import check\ncheck.CHECKS.clear()\nSTUDENT = 'x'\n",
    "STUDENT = 'x'\nEX1 = {'grpo_net': 2 ** 3}\n",
    "STUDENT = 'x'\nEX1 = {'grpo_net': [1, 2]}\n",
    "STUDENT = open('/etc/hostname').read()\n",
])
def test_a_sheet_is_read_as_data_never_run(tmp_path, body):
    """A sheet that does anything but assign plain values is refused in one line by both the
    student's check and the teacher's key, and none of its code runs."""
    from exercises import check
    path = tmp_path / "sheet.py"
    path.write_text(body)
    with pytest.raises(check.SheetError):
        check.read_sheet(str(path))
    proc = subprocess.run([sys.executable, "-m", "exercises.answers.key", "x", str(path)], cwd=ROOT,
                          capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc


def test_the_committed_sheet_reads_as_data():
    from exercises import check
    sheet = check.read_sheet(os.path.join(ROOT, "exercises", "sheet.py"))
    assert sheet.STUDENT == "" and set(sheet.EX1) >= {"grpo_net", "grpo_residual"}


def test_the_key_run_as_a_file_says_how_to_run_it():
    out = subprocess.run([sys.executable, "exercises/answers/key.py"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr == (
        "error: run it from the repository root as python -m exercises.answers.key\n")


def write_sheet(path, sheet):
    names = ["STUDENT", "EX1", "EX4", "EX7", "EX1_WHY", "EX3_WHY", "EX4_WHY", "EX6_WHY", "EX7_WHY"]
    path.write_text("".join(f"{n} = {getattr(sheet, n)!r}\n" for n in names if hasattr(sheet, n)),
                    encoding="utf-8")


def test_the_marking_tool_marks_numbers_and_code_in_a_subprocess(tmp_path):
    """Three submissions: the reference answers; a student with one wrong number who
    wrote no code; a student whose loss.py never returns (stopped by --timeout)."""
    subs = tmp_path / "subs"
    good, lazy, stuck = (subs / n for n in ("a_good", "b_lazy", "c_stuck"))
    for d in (good, lazy, stuck):
        d.mkdir(parents=True)
    write_sheet(good / "sheet.py", key.filled_sheet(STUDENTS[0]))
    for f in ("loss.py", "batching.py"):
        shutil.copyfile(os.path.join(ROOT, f), good / f)
    shutil.copyfile(os.path.join(ROOT, "exercises", "answers", "ex6_buggy_loss.py"),
                    good / "ex6_buggy_loss.py")
    sheet = key.filled_sheet(STUDENTS[1])
    sheet.EX4["orth_w_k"] *= 1.5
    write_sheet(lazy / "sheet.py", sheet)
    write_sheet(stuck / "sheet.py", key.filled_sheet(STUDENTS[2]))
    (stuck / "loss.py").write_text("while True:\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "exercises.answers.mark", str(subs), "--timeout=20"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split(" | ")[0][2:]: line for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| student")}
    assert rows[STUDENTS[0]].endswith("| 4/4 | 3/3 | 3/3 | 4/4 | 3/3 | 2/2 | 2/2 | 5/5 |"), rows
    assert "| 4/4 | 2/3 | 3/3 | 0/4 |" in rows[STUDENTS[1]], rows
    assert "EX4 orth_w_k" in proc.stdout and "stopped after 20 s" in proc.stdout


def test_the_marking_tool_refuses_a_sheet_that_is_code_before_running_anything(tmp_path):
    (tmp_path / "subs" / "x").mkdir(parents=True)
    (tmp_path / "subs" / "x" / "sheet.py").write_text("import os\n")
    proc = subprocess.run([sys.executable, "-m", "exercises.answers.mark", str(tmp_path / "subs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr


@pytest.mark.parametrize("argv, message", [
    (["{tmp}/nowhere"], "usage"),
    (["{tmp}", "--timeout=soon"], "--timeout takes seconds"),
    (["{tmp}", "--timeout=0"], "at least 1"),
    (["{tmp}", "--fast"], "unknown flag"),
    (["{tmp}"], "holds no student folder"),
])
def test_the_marking_tool_refuses_bad_input_in_one_line(tmp_path, argv, message):
    proc = subprocess.run([sys.executable, "-m", "exercises.answers.mark"]
                          + [a.format(tmp=tmp_path) for a in argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


@pytest.mark.parametrize("body", ["{", "[1, 2]", '{"iterations": 0, "students": {}}'])
def test_a_broken_roster_is_one_line_for_the_student(student_copy, body):
    path = student_copy / "exercises" / "roster.json"
    keep = path.read_text(encoding="utf-8")
    try:
        path.write_text(body)
        for module in ("exercises.check", "exercises.problems"):
            sheet = student_copy / "exercises" / "sheet.py"
            blank = sheet.read_text(encoding="utf-8")
            sheet.write_text(blank.replace('STUDENT = ""', 'STUDENT = "Ada Lovelace"'))
            proc = subprocess.run([sys.executable, "-m", module], cwd=student_copy,
                                  capture_output=True, text=True, timeout=120)
            sheet.write_text(blank)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and "roster" in lines[0], (module, proc)
    finally:
        path.write_text(keep, encoding="utf-8")


def test_handout_refuses_an_unknown_flag(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "exercises.handout", str(tmp_path / "c"), "--fast"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown flag") and \
        not (tmp_path / "c").exists()


def test_a_name_typed_with_a_combining_accent_is_the_same_student():
    import unicodedata
    name = STUDENTS[2]  # "Émilie du Châtelet", composed
    typed = unicodedata.normalize("NFD", name)
    assert typed != name
    sheet = key.filled_sheet(name)
    sheet.STUDENT = typed
    assert failures("ex1", {"sheet": sheet, "ex6": FIXED, "roster": ROSTER}) == []
    from exercises import problems
    assert problems.ex1(typed, 1) == problems.ex1(name, 1)


def test_the_blank_sheet_has_no_written_answer():
    """The questions are comments, not text inside the answers: a blank sheet writes nothing."""
    from exercises import problems
    sheet = problems.read_sheet(os.path.join(ROOT, "exercises", "sheet.py"))
    for n in (1, 3, 4, 6, 7):
        assert not str(getattr(sheet, f"EX{n}_WHY")).strip(), n
