"""The readings of E12 and E13 that say what their numbers show, and no more: each number
they quote is recomputed here from the committed JSON (and, for the control read at step 10,
from the committed records of results/e13/), with an independent paired t (quantiles from a
printed table, tails by Simpson's rule in tests/test_report_e11.py)."""
import importlib.util
import json
import math
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "report_e11", os.path.join(ROOT, "tests", "test_report_e11.py"))
E11 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(E11)
T975 = {10: 2.2281, 11: 2.2010, 15: 2.1314}  # Student t quantiles, from a printed table


def load(name):
    return json.load(open(os.path.join(ROOT, "results", f"{name}.json")))


def read(path):
    return " ".join(open(os.path.join(ROOT, path), encoding="utf-8").read().split())


def section(name):
    s = read("results/README.md")
    start = s.index(f"## {name}")
    return s[start:s.index(" ## ", start + 1)]


def ci(xs):
    """Mean and the 95 % t half-width of xs."""
    n, m = len(xs), sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    return m, T975[n - 1] * sd / math.sqrt(n)


def num(x, d=2):
    return f"{x:+.{d}f}".replace("-", "−")


def tost(xs, margin):
    """Two one-sided t tests of |mean| >= margin: the larger one-sided p."""
    n, m = len(xs), sum(xs) / len(xs)
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) / math.sqrt(n)
    one = lambda t: E11.t_tail(t, n - 1) if t >= 0 else 1 - E11.t_tail(-t, n - 1)
    return max(one((m + margin) / se), one((margin - m) / se))


def test_first_order_holds_within_its_margin_and_no_more():
    """The SGD ratio excludes 1; the margin came after the calibration's 1.28 and 1.29;
    seed 201 kept gives the equivalence test's p 0.054; the control read at step 10 gives
    1.26."""
    data, doc = load("e13_dose"), section("E13")
    c = data["primary"]["log(observed / predicted I), SGD"]
    lo, hi = math.exp(c["diff"] - c["half"]), math.exp(c["diff"] + c["half"])
    assert lo > 1 and f"the drift was {100 * (lo - 1):.0f}–{100 * (hi - 1):.0f} % larger than " \
        "predicted" in doc
    cal = [math.exp(r["log ratio sgd"]) for r in load("e13_calibration")["rows"].values()]
    assert f"the calibration's two seeds gave {cal[0]:.2f} and {cal[1]:.2f}" in doc
    rows = data["rows"]
    r201 = next(r for r in rows if r["seed"] == 201)
    assert r201["log ratio sgd"] is None and not r201["valid sgd"]
    kept = [r["log ratio sgd"] for r in rows if r["log ratio sgd"] is not None]
    assert kept == c["per_seed"]
    ratio = r201["observed sgd"] / r201["predicted sgd"]
    p = tost(kept + [math.log(ratio)], math.log(1.5))
    assert 0.05 < p and f"Kept, its ratio is {ratio:.2f}, and the equivalence test's p is " \
        f"{p:.3f} (before Holm)" in doc
    assert tost(kept, math.log(1.5)) == pytest.approx(c["p"], rel=1e-3)  # the route agrees
    logs = []
    for r in rows:
        if r["log ratio sgd"] is None:
            continue
        rec = lambda cond: json.load(open(os.path.join(
            ROOT, "results", "e13", f"PC{cond}_dapo_sgd_s{r['seed']}.json")))
        plus, minus = rec("p"), rec("m")
        drift = lambda x: dict(x["ell"])[10] - dict(x["ell"])[0]
        kappa10 = (drift(plus) - drift(minus)) / (sum(plus["push_steps"][:10])
                                                  - sum(minus["push_steps"][:10]))
        kappa20 = (plus["drift"] - minus["drift"]) / (plus["push"] - minus["push"])
        assert kappa20 == pytest.approx(r["kappa sgd"])  # the yardstick the analysis used
        logs.append(math.log(r["observed sgd"] / (r["predicted sgd"] * kappa10 / kappa20)))
    step10 = math.exp(sum(logs) / len(logs))
    assert step10 > 1.2 and f"Read at step 10 instead, the yardstick gives a ratio of " \
        f"{step10:.2f}" in doc


def test_the_dose_curve_s_steps_as_measured():
    data, doc = load("e13_dose"), section("E13")
    rows = data["rows"]
    m32, h32 = ci([r["I 3"] - r["I 2"] for r in rows])
    m21, h21 = ci([r["I 2"] - r["I 1"] for r in rows])
    assert abs(m32) < h32 and f"I3 − I2 = {num(m32)} ± {h32:.2f}" in doc
    assert f"I2 − I1 = {num(m21)} ± {h21:.2f}" in doc
    table = read("results/README.md")
    assert "growing with the gap" not in table and "| effect at each gap tested |" in table


def test_the_optimizers_differ_in_the_yardstick_not_in_the_drift():
    """No cause is read from the unmatched beta1 = 0 arm or from the yardstick's factor."""
    data = load("e13_dose")
    doc = section("E13")
    assert data["decisions"]["kl matched"] == {"sgd": True, "adam_b1_0": False}
    for phrase in ("makes the factor", "carries 1/L_i's small push", "what the optimizer adds"):
        assert phrase not in doc, phrase
    assert "factor between yardsticks, not between drifts" in doc
    assert "so it does not isolate momentum" in doc
    src = open(os.path.join(ROOT, "lab", "experiments", "e13_dose.py"), encoding="utf-8").read()
    assert "what the optimizer adds" not in src


def test_theory_s_readings_of_e12_and_e13():
    theory = read("THEORY.md")
    assert "pushed **if and only if**" not in theory
    assert "own summed coefficient is non-zero **if and only if**" in theory
    assert "That is an assumption, not a result" in theory
    e12 = load("e12_covariance")
    for cond in ("W0", "NC"):
        c = e12["secondary"][f"[grpo - dapo]_{cond}"]
        assert abs(c["diff"]) + c["half"] < 0.75 and c["diff"] != 0  # equivalent, not zero
    assert "W0 and the null equivalent to no drift within ±0.75 nats" in theory
    assert "E13 found the contrary: at matched KL, AdamW and SGD drifted its choice alike" \
        in theory


def test_the_readme_s_see_length_seed_among_e12_s():
    """The block shows seed 0, the most extreme of E12's 16 W+ seeds; README says so."""
    c = load("e12_covariance")["secondary"]["[grpo - dapo]_W+"]
    by_seed = dict(zip(c["seeds"], c["per_seed"]))
    assert len(by_seed) == 16 and min(by_seed, key=by_seed.get) == 0
    readme = read("README.md")
    block = readme[readme.index("<!-- see_length -->"):readme.index("<!-- /see_length -->")]
    assert f"grpo - dapo: {by_seed[0]:+.2f} nats" in block
    xs = sorted(-x for x in by_seed.values())
    assert min(xs) > 0 and (f"Over E12's 16 seeds it ran {xs[0]:.2f}–{xs[-1]:.2f} nats, seed 0's "
                            f"the largest; seeds 100–104:") in readme


def git_time(commit):
    try:
        out = subprocess.run(["git", "show", "-s", "--format=%cI", commit], cwd=ROOT,
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def test_e12_s_timeline_is_git_s():
    """The commits the E12 section names, at the times it gives (skipped without history)."""
    doc = section("E12")
    named = {"f3bc459": "2026-11-28T13:31", "fb4eb5c": "2026-11-28T15:03",
             "c1a2bcb": "2026-11-28T15:09"}
    times = {c: git_time(c) for c in named}
    if None in times.values():
        pytest.skip("the repository's history is not here")
    for c, t in named.items():
        assert c in doc and times[c].startswith(t), (c, times[c])
    assert "(commit f3bc459, 2026-11-28 13:31)" in doc and "The seventh (c1a2bcb, 15:09)" in doc
    assert re.search(r"committed on 2026-11-27 \(13:28 and 14:12 UTC\), 23 to 24 hours", doc)
    added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%cI", "--",
                            *[f"results/e12/*_s{k}.json" for k in range(5)]], cwd=ROOT,
                           capture_output=True, text=True, timeout=20).stdout.split()
    assert sorted({t[:16] for t in added}) == ["2026-11-27T13:28", "2026-11-27T14:12"]
