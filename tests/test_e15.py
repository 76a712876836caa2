"""E15 (lab/experiments/e15_dfpo_gspo.py): its per-seed numbers, the slope, the checks and
the registered decisions on made-up records, computed by hand; the isolating arm's
coefficient; the pre-registration against the calibration JSON."""
import json
import os
import re

import pytest
import torch

from lab import objectives
from lab.experiments import e15_dfpo_gspo as e15
from lab.experiments import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def seed(gain=(0.0, 0.0, 0.0, 0.0), base=0.7, ratios=0.002, pc=0.05, raw=0.0):
    """One seed's runs: dfpo_min = gspo + gain[G's index]; dfpo_raw = gspo + raw; the
    control pc below gspo at G = 8."""
    r = {}
    for i, G in enumerate(e15.GROUP_SIZES):
        for a in (*e15.ARMS, e15.REF):
            final = base + {"dfpo_min": gain[i], "dfpo_raw": raw}.get(a, 0.0)
            r[(a, G)] = {"final": final, "auc": final - 0.1, "entropy": 0.04, "clip_frac": 0.0,
                         "ratios": ratios if a in ("gspo", "dfpo_raw") else 0.0}
    r[(e15.CONTROL[0], e15.CONTROL[2])] = {"final": base - pc, "auc": 0.0, "entropy": 0.0,
                                           "ratios": ratios}
    return r


def test_slope_by_hand():
    """D = (0, 0.01, 0.02, 0.03) against log2 G = (1, 2, 3, 4): 0.01 per doubling; noise
    (+, -, -, +) 0.005 is orthogonal to log2 G - 2.5 and keeps it; (0, 0, 0, 0.03): sum of
    (x - 2.5)(y - 0.0075) = 0.045 over sum (x - 2.5)^2 = 5, 0.009."""
    assert e15.slope([0.0, 0.01, 0.02, 0.03]) == pytest.approx(0.01)
    assert e15.slope([0.005, 0.005, 0.015, 0.035]) == pytest.approx(0.01)
    assert e15.slope([0.0, 0.0, 0.0, 0.03]) == pytest.approx(0.009)


def test_per_seed_by_hand():
    """gain (0.01, 0.02, 0.03, 0.06): mean D 0.03, slope (by least squares) 0.016; dfpo_raw
    +0.01 over gspo, so the transform's part is 0.03 - 0.01 = 0.02."""
    row = e15.per_seed(seed(gain=(0.01, 0.02, 0.03, 0.06), raw=0.01))
    assert row["mean D"] == pytest.approx(0.03)
    assert row["slope D"] == pytest.approx(0.016)
    assert row["D G16"] == pytest.approx(0.06)
    assert row["dfpo_min - dfpo_raw final"] == pytest.approx(0.02)
    assert row["dfpo_raw - gspo final"] == pytest.approx(0.01)
    assert row["pc"] == pytest.approx(0.05)
    assert row["valid"]


def test_the_manipulation_check_takes_a_seed_out():
    """A seed whose gspo runs left less than RATIOS_MIN to the ratios is not analysed."""
    runs = {s: seed(gain=(0.01, 0.02, 0.03, 0.04)) for s in range(5)}
    runs[9] = seed(ratios=e15.RATIOS_MIN / 2)
    out = e15.analyse(runs)
    assert out["decisions"]["invalid_seeds"] == [9]
    assert out["primary"][next(iter(e15.PRIMARY))]["n"] == 5


def noisy(gain, k, pc=0.05):
    return seed(gain=tuple(g + 0.002 * ((k * 7 + i) % 5 - 2) for i, g in enumerate(gain)),
                pc=pc + 0.01 * (k % 3))


@pytest.mark.parametrize("gain, mean, slope", [
    ((0.04, 0.05, 0.06, 0.07), "agrees", "agrees"),
    ((-0.05, -0.05, -0.05, -0.05), "contradicts", "equivalent"),
    ((0.0, 0.0, 0.0, 0.0), "equivalent", "equivalent"),
])
def test_the_verdicts_in_every_regime(gain, mean, slope):
    runs = {s: noisy(gain, s) for s in range(6)}
    d = e15.analyse(runs)["decisions"]
    assert (d["mean"]["verdict"], d["slope"]["verdict"]) == (mean, slope), d


def test_a_failed_positive_control_keeps_a_null_from_being_equivalent():
    runs = {s: noisy((0.0,) * 4, s, pc=0.0 - 0.01 * (s % 3)) for s in range(6)}
    d = e15.analyse(runs)["decisions"]
    assert not d["positive_control"]["passes"]
    assert d["mean"]["verdict"] == "inconclusive" and "positive control" in d["mean"]["why"]


def test_too_few_valid_seeds_void_the_primaries():
    runs = {s: noisy((0.05,) * 4, s) for s in range(e15.VOID_BELOW - 1)}
    d = e15.analyse(runs)["decisions"]
    assert d["mean"]["verdict"] == d["slope"]["verdict"] == "void"


def test_holm_within_each_family():
    runs = {s: noisy((0.01, 0.02, 0.03, 0.04), s) for s in range(6)}
    out = e15.analyse(runs)
    for fam in ("primary", "secondary"):
        cs = [c for c in out[fam].values() if c["p"] is not None]
        ps = [c["p"] for c in cs]
        assert [c["p_holm"] for c in cs] == pytest.approx(stats.holm(ps))


def test_the_stability_rule():
    rec = lambda *accs: {"acc": [[25 * i, a] for i, a in enumerate(accs)]}
    assert e15.stable(rec(0.2, 0.6, 0.55, 0.7), 0.2)
    assert not e15.stable(rec(0.2, 0.6, 0.45, 0.7), 0.2)  # 0.15 below its best
    assert not e15.stable(rec(0.2, 0.3, 0.25, 0.15), 0.2)  # ends below the warm start


def test_dfpo_raw_is_dfpo_min_without_the_transform():
    """Coefficient by hand: -d loss / d log pi_{i,t} = clip(s_i) Â_i / (N L_max), with
    Â = r - mu; where the group's s are equal, dfpo_raw and dfpo_min give the same loss."""
    obj = objectives.OBJECTIVES["dfpo_raw"]
    w = torch.tensor([0.9, 1.3, 1.0])
    assert torch.equal(obj.group_transform(w, None, None), w)
    assert obj.adv == objectives.OBJECTIVES["dfpo_min"].adv == "dr_grpo"
    assert obj.agg == objectives.OBJECTIVES["dfpo_min"].agg
    assert obj.cancels == objectives.ON_POLICY


def test_the_preregistration_quotes_the_calibration_json():
    text = open(os.path.join(ROOT, "results", "e15_preregistration.md"), encoding="utf-8").read()
    text = re.sub(r"\s+", " ", text)
    cal = json.load(open(os.path.join(ROOT, "results", "e15_calibration.json"), encoding="utf-8"))
    c = cal["candidates"][-1]
    assert (c["lr"], c["clip"]) == (e15.LR, e15.CLIP) and all(c["stable"].values())
    assert len(cal["candidates"]) == 1 and "rejected" not in c
    gs = [v for k, v in c["final"].items() if k.startswith("gspo")]
    assert f"GSPO ended at {min(gs):.2f}–{max(gs):.2f}" in text
    ratios = [v for k, v in c["ratios"].items() if k.startswith("gspo")]
    assert f"{100 * min(ratios):.2f}–{100 * max(ratios):.2f} %" in text
    assert all(f"{x:+.3f}".replace("-", "−") in text for x in c["D"] if x)
    assert f"sd {c['sd_D']:.3f}" in text and c["seeds_for_p1"] == 3
    mde = (stats.t_quantile(e15.N_SEEDS - 1) + 0.8416) * c["sd_D"] / e15.N_SEEDS ** 0.5
    assert f"about {mde:.3f}" in text
    assert f"{mde / 5 ** 0.5:.4f} per doubling" in text
    assert f"0.0044 since amendment 2" in text and e15.MARGIN["slope"] == 0.0044
    assert f"({min(ratios):.5f})" in text
    assert f"{e15.RATIOS_MIN:g}, is about half" in text
    assert min(ratios) / 2 == pytest.approx(e15.RATIOS_MIN, rel=0.05)
    add3 = json.load(open(os.path.join(ROOT, "results", "e15_add3", "e15_calibration.json")))
    f = {x["lr"]: x["gspo_final"] for x in add3["candidates"]}
    assert f"{f[1e-5]['gspo_G2_s4500']:.2f} and {f[5e-6]['gspo_G2_s4500']:.2f}" in text


def test_each_arm_gets_its_flags():
    """gspo_ref is gspo with GSPO's own clip (the record's eps); the control is gspo at a third
    of the lr; B = 32 / G prompts at every G; the reuse of every arm."""
    o = {"steps": 100, "eval_every": 25, "completions": e15.COMPLETIONS, "small": False}
    ref = e15.flags_of(o, 500, e15.REF, 8, 1e-5, 0.2, "w.pt")
    assert "--loss=gspo" in ref and "--clip=higher" in ref
    assert {"--clip_low=0.0003", "--clip_high=0.0004"} <= set(ref)
    assert objectives.OBJECTIVES["gspo"].eps == (3e-4, 4e-4)
    slow = e15.flags_of(o, 500, e15.CONTROL[0], 8, 1e-5, 0.2, "w.pt")
    assert "--loss=gspo" in slow and "--lr=3.33333e-06" in slow and "--clip_low=0.2" in slow
    for G in e15.GROUP_SIZES:
        f = e15.flags_of(o, 500, "dfpo_min", G, 1e-5, 0.2, "w.pt")
        assert f"--prompts_per_step={32 // G}" in f and f"--group_size={G}" in f
        assert set(e15.REUSE) <= set(f) and "--loss=dfpo_min" in f
    assert len(e15.plan()) == 4 * 5 + 1
