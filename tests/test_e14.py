"""E14 (lab/experiments/e14_motion.py): its per-seed numbers, Fieller's interval and the
registered decisions on made-up records, computed by hand or by another route."""

import pytest

from lab import choice_motion
from lab.experiments import e14_motion as e14
from lab.experiments import stats


def record(cond, arm, opt, **parts):
    """A made-up run: its summed motion (unnamed parts 0), a passing gap and agreement."""
    motion = {p: 0.0 for p in ("dlo", *choice_motion.PARTS, "gap", "abs", "abs_gap",
                               "memory_first")}
    motion.update(parts)
    motion["dlo"] = sum(motion[p] for p in choice_motion.PARTS)
    motion["memory_rest"] = motion["memory"] - motion["memory_first"]
    motion["abs"], motion["abs_gap"] = 1.0, 0.01
    return {"cond": cond, "arm": arm, "opt": opt, "seed": 0, "motion": motion,
            "drift": motion["dlo"], "manipulation": 1.0, "seconds": 1.0}


def seed(own_wm=0.3, other_wm=0.1, memory_wp=-0.2, first_wp=-0.15, pc_own=1.0):
    """One seed: grpo moves the choice in W-2 by own + other, in W+2 by memory (first_wp of
    it carried from the first tokens); dapo not."""
    r = {}
    for opt in e14.OPTIMIZERS:
        for cond in e14.CONDS:
            for arm in e14.ARMS:
                parts = {}
                if arm == "grpo" and cond == "W-2":
                    parts = {"own": own_wm, "other": other_wm}
                elif arm == "grpo":
                    parts = {"memory": memory_wp, "memory_first": first_wp}
                r[(cond, arm, opt)] = record(cond, arm, opt, **parts)
    r[("PC+", "dapo", "adamw")] = record("PC+", "dapo", "adamw", own=pc_own, same=0.5)
    r[("PC-", "dapo", "adamw")] = record("PC-", "dapo", "adamw", own=-pc_own)
    return r


def test_per_seed_by_hand():
    """I = (0.3 + 0.1) - (-0.2) = 0.6; the decision's part 0.3 - (-0.15) = 0.45 (the rest
    0.1 + 0.05); x = 0.45 - 0.6 / 2 = 0.15; the control's decision part 1 - (-1) = 2, its
    motion 2.5, its x 0.75."""
    row = e14.per_seed(seed())
    assert row["I dlo adamw"] == pytest.approx(0.6)
    assert row["I decision adamw"] == pytest.approx(0.45)
    assert row["I rest adamw"] == pytest.approx(0.15)
    assert row["I now adamw"] == pytest.approx(0.3)
    assert row["I memory adamw"] == pytest.approx(0.2)
    assert row["I memory_first adamw"] == pytest.approx(0.15)
    assert row["I coupling adamw"] == pytest.approx(0.1)
    assert row["x adamw"] == pytest.approx(0.15)
    assert row["pc decision"] == pytest.approx(2.0) and row["pc x"] == pytest.approx(0.75)
    assert row["valid adamw"]


def test_a_run_without_memorys_split_leaves_its_optimizer_out():
    r = seed()
    r[("W-2", "dapo", "adamw")]["motion"]["memory_first"] = None
    row = e14.per_seed(r)
    assert row["x adamw"] is None and not row["valid adamw"] and row["valid sgd"]


def test_a_run_outside_the_agreement_band_voids_its_optimizer():
    r = seed()
    r[("W+2", "dapo", "sgd")]["motion"]["abs_gap"] = 2 * e14.AGREEMENT
    row = e14.per_seed(r)
    assert row["valid adamw"] and not row["valid sgd"]


def test_fiellers_interval_against_a_search_over_shares():
    """The shares s at which the paired t-test of a - s b does not reject, found by a fine
    grid, are the interval's."""
    a = [0.31, 0.52, 0.18, 0.44, 0.39, 0.25]
    b = [0.61, 0.80, 0.52, 0.70, 0.66, 0.58]
    lo, hi = e14.share_interval(a, b)
    q = stats.t_quantile(len(a) - 1)
    inside = []
    for k in range(0, 20001):
        s = k / 20000
        c = stats.paired([x - s * y for x, y in zip(a, b)], [0.0] * len(a))
        if abs(c["diff"]) <= c["half"] * (1 + 1e-12):
            inside.append(s)
    assert lo == pytest.approx(min(inside), abs=1e-4) and hi == pytest.approx(max(inside),
                                                                               abs=1e-4)
    assert lo < sum(a) / sum(b) < hi
    assert e14.share_interval([0.1, -0.1, 0.2], [0.5, -0.6, 0.05]) is None  # b not clearly != 0
    assert q > 2


@pytest.mark.parametrize("own, verdict", [(0.5, "decision"), (0.05, "rest"),
                                          (0.1, "inconclusive")])
def test_the_primarys_verdict_in_every_regime(own, verdict):
    """x = own + 0.15 - (own + 0.4) / 2 = own / 2 - 0.05 per seed, with noise on own: above
    0 for own 0.5, below for 0.05, crossing 0 at 0.1 with large noise."""
    noise = [0.02, -0.01, 0.015, -0.02, 0.005, -0.01, 0.01, 0.0]
    if verdict == "inconclusive":
        noise = [0.4, -0.3, 0.35, -0.4, 0.2, -0.25, 0.3, 0.0]
    runs = {s: seed(own_wm=own + e, other_wm=0.2, memory_wp=-0.2, first_wp=-0.15)
            for s, e in enumerate(noise)}
    out = e14.analyse(runs)
    assert out["decisions"]["primary"]["verdict"] == verdict
    assert out["decisions"]["positive_control"]["passes"]
    assert out["primary"][e14.PRIMARY]["n"] == 8
    if verdict != "inconclusive":
        lo, hi = out["share"]["interval"]
        assert (lo > 0.5) == (verdict == "decision") and (hi < 0.5) == (verdict == "rest")


def test_a_failed_positive_control_keeps_rest_from_being_read():
    runs = {s: seed(own_wm=0.05 + 0.01 * s, first_wp=0.0, pc_own=0.0) for s in range(8)}
    for r in runs.values():  # the control's direct part 0 in every seed
        r[("PC+", "dapo", "adamw")]["motion"]["own"] = 0.0
    d = e14.analyse(runs)["decisions"]
    assert not d["positive_control"]["passes"]
    assert d["primary"]["verdict"] == "inconclusive"


def test_too_few_valid_seeds_void_the_primary():
    runs = {s: seed(own_wm=0.5 + 0.01 * s) for s in range(e14.VOID_BELOW - 1)}
    runs[99] = {"void": "W+2"}
    d = e14.analyse(runs)["decisions"]
    assert d["primary"]["verdict"] == "void" and d["void_seeds"] == [99]


@pytest.mark.parametrize("argv, words", [(["--seeds=x"], "error: --seeds"),
                                         (["--calibrate=maybe"], "error: --calibrate"),
                                         (["--small", "--out=results"], "error: --out=results")])
def test_bad_flags_get_one_line(capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        e14.common.cli(lambda _: e14.main(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(words) and err.count("\n") == 1, err


def test_the_figure_draws_from_made_up_records_after_a_json_round_trip():
    import json
    plt = pytest.importorskip("matplotlib.pyplot")
    runs = {s: seed(own_wm=0.3 + 0.01 * s) for s in range(6)}
    data = json.loads(json.dumps(e14.analyse(runs), default=str))
    fig = e14.plot(plt, data)
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert [lab for lab in labels if lab != "one seed"] == [b[1] for b in e14.BARS]
    assert "nats" in ax.get_ylabel() and ax.get_title()
    plt.close(fig)


def test_the_preregistration_quotes_the_calibration_json():
    import json
    import os
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = open(os.path.join(root, "results", "e14_preregistration.md"), encoding="utf-8").read()
    text = re.sub(r"\s+", " ", text)
    cal = json.load(open(os.path.join(root, "results", "e14_calibration.json"), encoding="utf-8"))
    rows = [cal["rows"][s] for s in ("4000", "4001")]
    xs = [f"{r['x adamw']:+.2f}" for r in rows]
    assert f"x under AdamW was {xs[0]} and {xs[1]} nats (sd {cal['sd_x']:.2f}" in text
    assert f"I_motion {rows[0]['I dlo adamw']:+.2f} and {rows[1]['I dlo adamw']:+.2f}" in text
    assert f"{rows[0]['pc decision']:+.2f} and {rows[1]['pc decision']:+.2f} nats" in text
    worst = max(cal["agreement"].values())
    assert f"at most {worst:.1e}".replace("e-04", "e-4") in text
    assert f"The run takes **{e14.N_SEEDS}**" in text and f"fewer than **{e14.VOID_BELOW}**" in text
    assert f"at most **{e14.AGREEMENT:g}**" in text
    assert stats.seeds_needed(0.54, 0.72) == 7


def test_a_cached_record_that_is_not_what_the_run_wrote_is_refused_in_one_line(tmp_path):
    import json
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    good = json.load(open(os.path.join(root, "results", "e14", "Wp2_grpo_adamw_s4000.json")))
    assert e14.checked("x.json", good) is good
    for field, key, value in (("motion", "memory_first", "nan"), ("steps", "own", [1.0, "x"]),
                              ("drift", None, None)):
        bad = json.loads(json.dumps(good))
        if key is None:
            bad[field] = value
        else:
            bad[field][key] = value
        with pytest.raises(e14.common.CliError, match="not what the experiment wrote"):
            e14.checked(str(tmp_path / "r.json"), bad)
