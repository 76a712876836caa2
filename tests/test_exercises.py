"""The classroom set (EXERCISES.md, exercises/): the reference answers pass
every check, a catalogue of plausible wrong work fails, and the student copy
built by exercises/handout.py holds no answers, imports, fails its checks
cleanly and passes its tests. Teacher's copy only: exercises/handout.py
leaves this file out of the student copy."""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(ROOT, "exercises", "answers")):
    pytest.skip("teacher's copy only: exercises/answers/ is not in a student copy", allow_module_level=True)

import batching  # noqa: E402
from exercises import check
from exercises import ex6_buggy_loss
from exercises.answers import key
import advantage  # noqa: E402
import loss  # noqa: E402

STUDENTS = ("Ada Lovelace", "s1234567", "Émilie du Châtelet")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIXED = load(os.path.join(ROOT, "exercises", "answers", "ex6_buggy_loss.py"), "fixed_ex6").dfpo_orth_loss


def env(name=STUDENTS[0], **sheet_changes):
    sheet = key.filled_sheet(name)
    for k, v in sheet_changes.items():
        setattr(sheet, k, v)
    return {"sheet": sheet, "ex6": FIXED}


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
    tables = [key.key(name) for name in STUDENTS]
    assert all(a != b for i, a in enumerate(tables) for b in tables[i + 1:])


@pytest.mark.parametrize("name", STUDENTS)
def test_the_key_matches_closed_forms_computed_another_way(name):
    """The key comes from loss.py's autograd; here each number from its closed form."""
    from exercises import problems
    import toy_tasks
    k, p1, p4, p7 = key.key(name), problems.ex1(name), problems.ex4(name), problems.ex7(name)
    r, n = p1["rewards"], p1["lengths"]
    a = [x - sum(r) / 4 for x in r]
    sd = (sum(x * x for x in a) / 3) ** 0.5  # Bessel-corrected, as TRL and verl
    i = p1["k"] - 1
    assert k["EX1"]["grpo_residual"] == pytest.approx(abs(sum(x / m for x, m in zip(a, n)))
                                                      / sum(abs(x) / m for x, m in zip(a, n)), rel=1e-5)
    assert k["EX1"]["grpo_net"] == pytest.approx(sum(x / sd / (4 * m) for x, m in zip(a, n)), rel=1e-4)
    assert k["EX1"]["grpo_coef_k"] == pytest.approx(a[i] / sd / (4 * n[i]), rel=1e-4)
    assert k["EX1"]["dr_grpo_coef_k"] == pytest.approx(a[i] / (4 * p1["L_max"]), rel=1e-5)
    r, n, s = p4["rewards"], p4["lengths"], p4["s"]
    a = [x - sum(r) / 4 for x in r]
    assert k["EX4"]["gspo_residual"] == pytest.approx(abs(sum(w * x / m for w, x, m in zip(s, a, n)))
                                                      / sum(w * abs(x) / m for w, x, m in zip(s, a, n)), rel=1e-5)
    assert k["EX4"]["luspo_residual"] == pytest.approx(abs(sum(w * x for w, x in zip(s, a)))
                                                       / sum(w * abs(x) for w, x in zip(s, a)), rel=1e-5)
    j = p4["k"] - 1
    proj = sum(w * x for w, x in zip(s, a)) / sum(x * x for x in a)
    assert k["EX4"]["orth_w_k"] == pytest.approx(s[j] - proj * a[j], rel=1e-6)
    text = toy_tasks.make_task("add", 2, True).solution(p7["problem"])
    assert k["EX7"]["tokens"] == len(text) + 1  # EOS
    assert k["EX7"]["template"] == sum(not c.isdigit() for c in text) + 1  # operators, separators and EOS
    pairs = [(x, y) for x in range(p7["lo"], p7["hi"] + 1) for y in range(p7["lo"], p7["hi"] + 1)]
    assert k["EX7"]["plain_share"] == pytest.approx(len(pairs) / sum(len(str(x + y)) + 1 for x, y in pairs))


# ---------------------------------------------------------------- wrong work
# Numbers a student would plausibly get by a real mistake. Each is computed
# from the right numbers or the table, and must be refused.

def wrong_numbers(name):
    from exercises import problems
    k = key.key(name)
    p1, p4 = problems.ex1(name), problems.ex4(name)
    r = torch.tensor(p1["rewards"], dtype=torch.float64)
    a = r - r.mean()
    pop_sd, bessel_sd = a.pow(2).mean().sqrt(), a.pow(2).sum().div(3).sqrt()
    i = p1["k"] - 1
    r4 = torch.tensor(p4["rewards"], dtype=torch.float64)
    a4, s = r4 - r4.mean(), torch.tensor(p4["s"], dtype=torch.float64)
    return {
        ("EX1", "grpo_residual"): [0.0,  # "the advantages are centred, so it cancels"
                                    float(abs((a * torch.tensor(p1["lengths"])).sum())
                                          / (a.abs() * torch.tensor(p1["lengths"])).sum())],  # times L_i
        ("EX1", "grpo_net"): [-k["EX1"]["grpo_net"]],  # c = -A/(N L) (sign of the loss, not of c)
        ("EX1", "grpo_coef_k"): [k["EX1"]["grpo_coef_k"] * float(bessel_sd / pop_sd),  # population sd
                                 float(a[i] / bessel_sd / sum(p1["lengths"]))],  # divided by sum L (dapo)
        ("EX1", "dr_grpo_coef_k"): [float(a[i] / (4 * p1["lengths"][i]))],  # own length, not L_max
        ("EX4", "gspo_residual"): [float(abs((a4 / torch.tensor(p4["lengths"])).sum())
                                         / (a4.abs() / torch.tensor(p4["lengths"])).sum())],  # s_i left out
        ("EX4", "luspo_residual"): [0.0],  # "no 1/L_i, so it cancels"
        ("EX4", "orth_w_k"): [float(s.min()),  # Min-Replace instead
                              float(a4[p4["k"] - 1] * (a4 @ s) / (a4 @ a4))],  # the part along A
        ("EX7", "tokens"): [k["EX7"]["tokens"] - 1],  # EOS forgotten
        ("EX7", "template"): [k["EX7"]["template"] - 1, 1],  # EOS forgotten; "only EOS"
        ("EX7", "plain_share"): [1 / 3, 1 / 4, 0.0],  # all sums of two digits, all of three; EOS not template
    }


@pytest.mark.parametrize("name", STUDENTS)
def test_wrong_numbers_are_refused_and_the_right_value_is_not_shown(name):
    right = key.key(name)
    for (ex, k), values in wrong_numbers(name).items():
        for v in values:
            assert not check.close(v, right[ex][k]), (ex, k, v)  # the mistake really gives another number
            sheet = key.filled_sheet(name)
            getattr(sheet, ex)[k] = v
            bad = failures(ex.lower(), {"sheet": sheet, "ex6": FIXED})
            assert len(bad) == 1 and k in bad[0][1], (ex, k, v, bad)
            # the whole message: the student's own value and fixed words, never the right one
            assert bad[0][1] == f"{ex}[{k!r}] = {v} is not {check.WHAT[k]} of your table (3 significant digits)"


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
    return (W - torch.where(sq > 0, (A * W).sum(1, keepdim=True) / sq.clamp(min=1e-12), 0 * sq) * A).reshape(-1)


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


WRONG = {
    "ex2": {"re-centred A": recentred, "equal contiguous groups": reshaped, "no 0/0 guard": no_guard,
            "modifies its input": in_place, "one projection for the batch": whole_batch},
    "ex3": {"contiguous runs": runs, "global min": lambda w, a, g: torch.full_like(w, float(w.min())),
            "group mean": lambda w, a, g: advantage.group_mean(w, g)[0],
            "equal contiguous groups": lambda w, a, g: w.reshape(len(torch.unique(g)), -1).min(1, keepdim=True)
            .values.expand(len(torch.unique(g)), -1).reshape(-1)},
    "ex5": {"shuffle (splits groups)": batching.shuffle, "query (no balancing)": batching.query,
            "balanced (splits groups)": batching.balanced,
            "contiguous cut of the rows": lambda g, a, l, M, gen: list(torch.arange(len(g)).tensor_split(M)),
            "greedy without room": lambda g, a, l, M, gen: greedy_no_room(g, a, M)},
}


def greedy_no_room(group_ids, adv, M):
    """Each group to the mini-batch with the fewest signed rollouts so far: even signs, uneven group counts."""
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


def untransformed(new_logp, old_logp, mask, adv, group, max_len):  # w, detached, without Adv-Orthogonal
    w = ((new_logp - old_logp) * mask).sum(1).div(mask.sum(1).clamp(min=1)).exp().detach()
    return -((w * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


@pytest.mark.parametrize("fn", [ex6_buggy_loss.dfpo_orth_loss, unfixed_but_detached_in_the_wrong_place,
                                own_length, untransformed])
def test_ex6_wrong_fixes_are_refused(fn):
    bad = failures("ex6", dict(env(), ex6=fn))
    assert [w for w, _ in bad] == ["the specified gradient"], bad


def test_ex6_shows_the_measurements(capsys):
    check.show_ex6(ex6_buggy_loss.dfpo_orth_loss)
    out = capsys.readouterr().out
    assert "off-policy" in out and "shared-token residual" in out


# ---------------------------------------------------------------- the student copy

@pytest.fixture(scope="module")
def student_copy(tmp_path_factory):
    out = tmp_path_factory.mktemp("handout") / "class"
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_student_copy_holds_no_answers(student_copy):
    assert not (student_copy / "exercises" / "answers").exists()
    assert not (student_copy / "tests" / "test_exercises.py").exists()
    answers = ['"amin")[g]', "dot / nrm.clamp", "improved = True", "w_tilde = L.adv_orthogonal(w, adv, group).detach()"]
    for path in student_copy.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md"):
            text = path.read_text()
            assert not any(a in text for a in answers), path
            assert "exercises/answers" not in text or path.name in ("README.md", "handout.py"), path


def test_the_student_copy_fails_cleanly_until_solved(student_copy):
    for ex in check.CHECKS:
        proc = subprocess.run([sys.executable, "-m", "exercises.check", ex], cwd=student_copy,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, (ex, proc.stdout, proc.stderr)
        assert "FAIL" in proc.stdout, proc.stdout


def test_the_student_copy_passes_its_tests(student_copy):
    # The tests that reach the stubbed functions; the rest of the suite does not touch them.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_loss.py",
                           "tests/test_batching.py", "-rs"],
                          cwd=student_copy, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "needs a solved exercise: exercise 2" in proc.stdout, proc.stdout[-3000:]


def test_handout_refuses_a_used_folder(tmp_path):
    (tmp_path / "x").write_text("keep me")
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and (tmp_path / "x").read_text() == "keep me"


def test_handout_into_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    """Under a file, the folder cannot exist: one error line, exit 2, nothing written."""
    (tmp_path / "f").write_text("a file")
    proc = subprocess.run([sys.executable, "-m", "exercises.handout", str(tmp_path / "f" / "class")],
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
