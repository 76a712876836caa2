"""E13's pieces: the dose's tasks, the relabelled warm start, the manipulation check, the
per-seed numbers (I, its slope, kappa, the log ratio) and the registered contrasts and
decisions from hand-made records."""
import math
import random

import pytest
import torch

from lab.experiments import common, e13_dose as e13
import toy_tasks


def test_the_dose_adds_eight_tokens_per_retry_to_the_conditions_side():
    rng = random.Random(0)
    for k in range(4):
        wrong, right = (toy_tasks.make_task(f"parity_{c}_long{k}") for c in ("wrong", "right"))
        p = wrong.sample(rng)
        base = len(toy_tasks.make_task("parity_wrong_long0").solution(p, random.Random(1)))
        assert len(wrong.flawed(p, random.Random(1))) == base + e13.TOKENS * k
        assert len(wrong.solution(p, random.Random(1))) == base
        assert len(right.solution(p, random.Random(1))) == base + e13.TOKENS * k
        assert len(right.flawed(p, random.Random(1))) == base
    # k = 2 is E12's task, to the character
    p = (3, 1, 4, 1, 5, 9, 2)
    for c in ("wrong", "right"):
        a, b = (toy_tasks.make_task(n) for n in (f"parity_{c}_long2", f"parity_{c}_long"))
        assert a.flawed(p, random.Random(5)) == b.flawed(p, random.Random(5))
        assert a.solution(p, random.Random(5)) == b.solution(p, random.Random(5))


def test_no_retries_writes_the_positive_controls_text():
    """D0's SFT data are the positive control's: its warm start serves both (relabelled)."""
    d0 = toy_tasks.make_task("parity_wrong_long0")
    for name in ("parity_credit_restate", "parity_credit_plain"):
        pc = toy_tasks.make_task(name)
        assert pc.max_new_tokens == d0.max_new_tokens
        for seed in range(20):
            p = d0.sample(random.Random(seed))
            for f in ("solution", "flawed"):
                assert getattr(pc, f)(p, random.Random(seed)) == getattr(d0, f)(
                    p, random.Random(seed))


def test_a_relabelled_warm_start_is_the_one_training_would_give(tmp_path):
    size = {"n_layer": 1, "n_embd": 32, "n_head": 2}
    a = common.warm_start(str(tmp_path), 3, "parity_wrong_long0", sft_steps=4, **size)
    b = common.warm_start(str(tmp_path), 3, "parity_credit_plain", sft_steps=4, **size)
    dst = str(tmp_path / "relabelled" / "warm_start.pt")
    e13.relabel(a, dst, "parity_credit_plain")
    mine = torch.load(dst, weights_only=False)
    theirs = torch.load(b, weights_only=False)
    assert mine["task"] == theirs["task"] and mine["config"]["task"] == "parity_credit_plain"
    for k, v in theirs["model"].items():
        assert torch.equal(mine["model"][k], v), k


def test_manipulation_by_hand():
    assert e13.manipulation([-9, -4, -5, None], "W+1") == pytest.approx(2 / 4)
    assert e13.manipulation([15, 14, 16], "W-3") == pytest.approx(2 / 3)
    assert e13.manipulation([-16, -12], "W-2") == 0.0
    assert e13.manipulation([3.0], "D0") is None


def test_slope_by_hand():
    assert e13.slope([8, 16, 24], [1.0, 2.0, 3.0]) == pytest.approx(1 / 8)
    assert e13.slope([8, 16, 24], [0.0, 3.0, 0.0]) == pytest.approx(0.0)


def rec(drift, push_1L=0.0, push=0.0, manip=1.0, kl=0.01, gap=0.0):
    return {"drift": drift, "push_1L": push_1L, "push": push, "manipulation": manip, "kl": kl,
            "gap": [gap, None, gap], "length_correct": [20.0], "length_incorrect": [28.0]}


def made_up(seed, k_scale=1.0, sgd_obs=0.4):
    """grpo - dapo = -0.05 g in W+ and +0.05 g in W- at gap g = 8k: I = 0.1 g, slope 0.1;
    under sgd I = sgd_obs with kappa 2 and push difference 0.1: predicted 0.2."""
    r = {}
    for k in e13.DOSES:
        for d, sign in (("+", -1), ("-", 1)):
            r[(f"W{d}{k}", "grpo", "adamw")] = rec(sign * 0.05 * 8 * k * k_scale,
                                                   push_1L=sign * 0.01 * k, gap=sign * 8 * k)
            r[(f"W{d}{k}", "dapo", "adamw")] = rec(0.0, gap=sign * 8 * k)
    r[("D0", "grpo", "adamw")], r[("D0", "dapo", "adamw")] = rec(0.1), rec(0.0)
    for opt in ("sgd", "adam_b1_0"):
        for d, sign in (("+", -1), ("-", 1)):
            r[(f"W{d}2", "grpo", opt)] = rec(sign * sgd_obs / 2, push_1L=sign * 0.05, kl=0.015)
            r[(f"W{d}2", "dapo", opt)] = rec(0.0, kl=0.015)
    for opt in e13.OPTIMIZERS:
        r[("PC+", "dapo", opt)] = rec(1.5, push=1.0)
        r[("PC-", "dapo", opt)] = rec(-1.5, push=-0.5)
    return r


def test_per_seed_by_hand():
    row = e13.per_seed(made_up(0))
    assert [row[f"I {k}"] for k in e13.DOSES] == pytest.approx([0.8, 1.6, 2.4])
    assert [row[f"gap {k}"] for k in e13.DOSES] == pytest.approx([8.0, 16.0, 24.0])
    assert row["slope"] == pytest.approx(0.1) and row["valid sgd"]
    assert row["kappa sgd"] == pytest.approx(3.0 / 1.5)
    assert row["predicted sgd"] == pytest.approx(2.0 * 0.1)
    assert row["log ratio sgd"] == pytest.approx(math.log(0.4 / 0.2))
    assert row["predicted adamw"] == pytest.approx(2.0 * 0.04)
    assert row["kl sgd"] == pytest.approx(0.015) and row["diff D0"] == pytest.approx(0.1)


def test_a_ratio_of_opposite_signs_has_no_log():
    row = e13.per_seed(made_up(0, sgd_obs=-0.4))
    assert row["log ratio sgd"] is None


def rows_of(seeds, **kw):
    rows = []
    for i, s in enumerate(seeds):
        rows.append(dict(e13.per_seed(made_up(s, k_scale=1 + 0.1 * i,
                                              sgd_obs=0.2 * (1 + 0.05 * (-1) ** i), **kw)),
                         seed=s))
    return rows


def test_the_contrasts_and_decisions_on_made_up_records():
    rows = rows_of(range(8))
    primary, secondary, checks = e13.analyse(rows)
    p1, p2 = primary.values()
    assert p1["n"] == 8 and p1["diff"] == pytest.approx(0.1 * (1 + 0.35))
    assert p2["tost_margin"] == pytest.approx(math.log(e13.RATIO_MARGIN))
    assert abs(p2["diff"]) < 0.05
    d = e13.decisions(primary, secondary, checks, rows)
    assert d["primary 1"] == "effect" and d["primary 2"] == "first order holds"
    assert d["fewest retries detected"] == 1
    assert d["positive control passes"] == {o: True for o in e13.OPTIMIZERS}
    assert d["kl matched"] == {"sgd": True, "adam_b1_0": True}
    assert d["D0"].startswith("agree")
    assert all(c["p_holm"] >= c["p"] for c in secondary.values())


def test_sgd_runs_that_lose_the_gap_leave_primary_2_and_too_few_void_it():
    rows = []
    for i in range(8):
        r = made_up(i, k_scale=1 + 0.1 * i, sgd_obs=0.2 * (1 + 0.05 * (-1) ** i))
        if i < 3:  # the gap did not last in an SGD run: that seed's ratio is not read
            r[("W+2", "dapo", "sgd")]["manipulation"] = 0.5
        rows.append(dict(e13.per_seed(r), seed=i))
    primary, secondary, checks = e13.analyse(rows)
    p1, p2 = primary.values()
    assert p1["n"] == 8 and p2["n"] == 5
    d = e13.decisions(primary, secondary, checks, rows)
    assert d["primary 2"] == "void" and d["primary 1"] == "effect"
    assert d["kept the gap at 2 retries"] == {"adamw": 8, "sgd": 5, "adam_b1_0": 8}


def test_a_ratio_far_from_one_fails_the_first_order():
    rows = []
    for i in range(8):
        rows.append(dict(e13.per_seed(made_up(i, sgd_obs=2.0 + 0.1 * i)), seed=i))
    primary, secondary, checks = e13.analyse(rows)
    assert e13.decisions(primary, secondary, checks, rows)["primary 2"] == "first order fails"


def test_the_figure_draws_from_made_up_records():
    plt = pytest.importorskip("matplotlib.pyplot")
    rows = rows_of(range(4))
    runs = {r["seed"]: made_up(r["seed"]) for r in rows}
    data = {"rows": rows, "curve": e13.curve(runs, rows)}
    assert [c["I"][0] for c in data["curve"]] == pytest.approx([0.8 * m for m in (1.15,)] * 1
                                                             + [1.6 * 1.15, 2.4 * 1.15])
    assert data["curve"][0]["gap"][0] == pytest.approx(8.0)  # |gap| of W+ and W- alike
    assert data["curve"][0]["share"][0] == pytest.approx(8.0 / 24.0)
    plt.close(e13.plot(plt, data))


def test_the_preregistration_quotes_the_calibration_json():
    """Each calibration number the pre-registration states is the JSON's, as printed."""
    import json
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "results", "e13_calibration.json"), encoding="utf-8") as f:
        cal = json.load(f)
    with open(os.path.join(root, "results", "e13_preregistration.md"), encoding="utf-8") as f:
        doc = " ".join(f.read().split())
    rows = [cal["rows"][str(s)] for s in e13.CALIB_SEEDS]
    pair = lambda key, fmt, f=lambda x: x: " and ".join(format(f(r[key]), fmt) for r in rows)
    want = [f"lr {cal['lr']['sgd']:g}", f"lr {cal['lr']['adam_b1_0']:.1e}".replace("e-05", "e-5"),
            "slopes were " + pair("slope", ".3f"),
            "SGD " + pair("log ratio sgd", ".2f", math.exp),
            "AdamW " + pair("log ratio adamw", ".1f", math.exp),
            "β1 = 0 " + pair("log ratio adam_b1_0", ".1f", math.exp),
            "log ratios under SGD were " + pair("log ratio sgd", ".3f"),
            "gap_1 = " + pair("gap 1", ".1f"), "gap_3 = " + pair("gap 3", ".1f"),
            "KL of log " + f"{cal['kl_target']:.1e}".replace("e-03", "e-3"),
            f"sd {stats_sd([r['slope'] for r in rows]):.3f}"]
    for w in want:
        assert w in doc, w


def stats_sd(xs):
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def test_quick_writes_every_record_and_resumes(tmp_path):
    import json
    import os
    out = str(tmp_path / "q")
    row = e13.main(["--quick", f"--out={out}"])
    names = sorted(n for n in os.listdir(os.path.join(out, "e13")) if not n.startswith("warm_"))
    assert names == sorted(e13.tag(c, a, opt, e13.QUICK_SEED) + ".json"
                           for c, a, opt in e13.plan())
    # D0's warm start is trained once and serves the positive control, relabelled
    assert sorted(n for n in os.listdir(os.path.join(out, "e13")) if n.startswith("warm_")) \
        == sorted(f"warm_{e13.task_of(c)}_s{e13.QUICK_SEED}.json"
                  for c in ["D0"] + [f"W{d}{k}" for k in e13.DOSES for d in "+-"])
    path = os.path.join(out, "e13", e13.tag("W+2", "grpo", "sgd", e13.QUICK_SEED) + ".json")
    rec = json.load(open(path))
    assert "--optimizer=sgd" in rec["flags"] and len(rec["gap"]) == 4 and rec["kl"] >= 0
    stamp = os.path.getmtime(path)
    assert e13.main(["--quick", f"--out={out}"]) == row  # every record read back, none redone
    assert os.path.getmtime(path) == stamp


def test_bad_flags_get_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        e13.common.cli(lambda argv: e13.main(["--stream=sideways", "--quick"]))
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("error: --stream takes even, odd, both")


@pytest.mark.parametrize("share, detected, words", [
    (1.8, 20.0, "below them, untested"),
    (1.8, 12.0, "below them, untested"),
    (25.0, 20.0, "inside, where drift was found"),
    (15.0, 20.0, "inside, where none was found"),
    (25.0, None, "inside, where none was found"),
    (200.0, 20.0, "above them"),
])
def test_where_a_gap_falls_on_the_curve_in_every_regime(monkeypatch, share, detected, words):
    from lab import lengthcov
    monkeypatch.setattr(lengthcov, "E13_SHARES", (12.0, 130.0))
    monkeypatch.setattr(lengthcov, "E13_DETECTED", detected)
    line, = lengthcov.where_on_curve(share)
    assert line.startswith("E13 tested gaps of 12-130 % (")
    found = {None: "(no drift found);", 20.0: "(drift found at 20 %);",
             12.0: "(drift found at 12 %, the smallest);"}[detected]
    assert found in line and "from" not in line  # the smallest gap tested is no threshold
    assert len(line) <= 98
    assert line.endswith(words + ".")
