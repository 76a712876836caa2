"""The statistics of lab/experiments/common.py against values from t tables."""
import math
import os

import pytest
from lab.experiments import common
from lab.experiments import stats


@pytest.mark.parametrize("df, t", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622),
                                   (29, 2.0452), (120, 1.9799)])
def test_t_quantile_matches_tables(df, t):
    assert abs(common.t_quantile(df) - t) < 1e-4


def test_mean_ci_is_student_t():
    m, h = common.mean_ci([1, 2, 3])
    assert m == 2 and abs(h - 2.484) < 1e-3          # 4.3027 * 1 / sqrt(3)
    m, h = common.mean_ci([5.0])
    assert m == 5 and math.isnan(h)


def test_paired_by_hand():
    # differences 1, 1.5, 1: mean 7/6, sd = sqrt(1/12), half = 4.3027 sd / sqrt(3)
    p = common.paired([1, 2, 3], [0, 0.5, 2])
    assert abs(p["diff"] - 7 / 6) < 1e-12 and p["n"] == 3
    assert abs(p["half"] - 4.3027 * math.sqrt(1 / 12) / math.sqrt(3)) < 1e-4
    assert abs(p["mde"] - (4.3027 + 0.8416) * math.sqrt(1 / 12) / math.sqrt(3)) < 1e-4
    # dicts pair by seed, whatever the order; unshared seeds drop out
    q = common.paired({0: 1, 1: 2, 2: 3, 7: 9}, {2: 2, 1: 0.5, 0: 0})
    assert q["per_seed"] == [1.0, 1.5, 1.0]
    # paired beats unpaired when arms share a seed effect
    a, b = [10, 20, 30, 40], [9, 19.5, 29, 39.2]
    assert common.paired(a, b)["half"] < common.mean_ci(a)[1] / 5
    with pytest.raises(ValueError):
        common.paired([1, 2], [1])


def test_seeds_needed_by_hand():
    """The smallest n with (t_{0.975,n-1} + 0.8416) sd / sqrt(n) <= effect, from t tables:
    sd 0.7, effect 0.3: n = 44 gives (2.0167 + 0.8416) 0.7 / sqrt(44) = 0.3016 > 0.3,
    n = 45 gives (2.0154 + 0.8416) 0.7 / sqrt(45) = 0.2981; sd = effect: n = 9 gives
    (2.3060 + 0.8416) / 3 = 1.049 > 1, n = 10 gives (2.2622 + 0.8416) / sqrt(10) = 0.9815."""
    assert common.seeds_needed(0.7, 0.3) == 45
    assert common.seeds_needed(0.3, 0.3) == 10
    assert common.seeds_needed(None, 0.3) is None and common.seeds_needed(1.0, 0.0) is None
    assert common.seeds_needed(1.0, 1e-3, most=50) is None


def test_contrast_drops_missing_seeds_and_one_sample():
    # seed 1 has no value in arm a, seed 3 none in arm b: pairs of seeds 0, 2, 4 remain
    c = common.contrast(
        [1.0, None, 3.0, 2.0, 5.0], [0.0, 1.0, 2.5, float("nan"), 4.0], "> 0", seeds=[0, 1, 2, 3, 4]
    )
    assert c["seeds"] == [0, 2, 4] and c["per_seed"] == [1.0, 0.5, 1.0] and c["predicted"] == "> 0"
    sd = math.sqrt(((1 - 5 / 6) ** 2 * 2 + (0.5 - 5 / 6) ** 2) / 2)
    assert abs(c["diff"] - 5 / 6) < 1e-12 and abs(c["half"] - 4.3027 * sd / math.sqrt(3)) < 1e-4
    # a number for b: a one-sample t interval of a - b
    o = common.contrast([0.6, 0.8, 0.7, 0.9], 0.7, "about 0")
    m, h = common.mean_ci([0.6, 0.8, 0.7, 0.9])
    assert (
        abs(o["diff"] - (m - 0.7)) < 1e-12
        and abs(o["half"] - h) < 1e-12
        and o["seeds"] == [0, 1, 2, 3]
    )
    assert common.contrast([None], [1.0], "< 0")["n"] == 0
    with pytest.raises(ValueError):
        common.contrast([1.0, 2.0], [1.0], "< 0")


def test_e8_primary_contrast_by_hand(capsys):
    """E8's primary contrasts (|restate drift| at the last evaluation, arm - grpo)
    from synthetic per-seed runs in shuffled seed order, against a hand
    computation; a factor pair and accuracy over the last 3 evaluations; one seed
    prints n/a, and the JSON stays strict."""
    import json
    from lab.experiments import e8_objectives
    drift = {"grpo": [2.0, 3.0, 4.0], "dr_grpo": [1.5, 3.0, 3.0], "dfpo_min": [1.0, 1.0, 1.0],
             "dfpo_orth": [2.0, 3.0, 4.0], "dapo": [2.0, 2.0, 2.0]}
    order = {
        "grpo": [0, 1, 2],
        "dr_grpo": [2, 0, 1],
        "dfpo_min": [1, 2, 0],
        "dfpo_orth": [0, 2, 1],
        "dapo": [1, 0, 2],
    }
    run = lambda loss, s: {
        "seed": s,
        "steps": [0, 50, 100, 150],
        "style_drift_restate": [None, 9.0, 9.0, drift[loss][s]],
        "eval_acc": [0.1, 0.5 + s / 10, 0.6, 0.7 if loss == "grpo" else 0.4],
        "tax_interior_sum": 1.0,
    }
    runs = {loss: [run(loss, s) for s in order[loss]] for loss in drift}
    p = e8_objectives.primary(runs)
    c = p["style_drift_restate dr_grpo - grpo"]      # differences -0.5, 0, -1 over seeds 0, 1, 2
    sd = math.sqrt(((-0.5 + 0.5) ** 2 + 0.5 ** 2 + 0.5 ** 2) / 2)
    assert (
        c["n"] == 3
        and abs(c["diff"] + 0.5) < 1e-12
        and c["predicted"] == "< 0"
        and c["seeds"] == [0, 1, 2]
    )
    assert abs(c["half"] - 4.3027 * sd / math.sqrt(3)) < 1e-4
    assert p["style_drift_restate dfpo_min - grpo"]["per_seed"] == [-1.0, -2.0, -3.0]
    # same per-seed values: exact zero
    assert p["style_drift_restate dfpo_orth - grpo"]["sd"] == 0.0
    sec = e8_objectives.secondary(runs)
    # in the order of the reference arm dapo (seeds 1, 0, 2): 3 - 2, 1.5 - 2, 3 - 2
    assert sec["style_drift_restate dr_grpo - dapo (sigma_g)"]["per_seed"] == [1.0, -0.5, 1.0]
    assert sec["style_drift_restate dapo - grpo (1/L_i vs 1/sum L)"]["per_seed"] == [
        0.0,
        -1.0,
        -2.0,
    ]
    # accuracy: mean of the last 3 evaluations,
    # (0.5 + s/10 + 0.6 + 0.4) / 3 - (0.5 + s/10 + 0.6 + 0.7) / 3 = -0.1
    assert sec["acc_last3 dfpo_min - grpo"]["diff"] == pytest.approx(-0.1)
    one = e8_objectives.primary({k: [r for r in v if r["seed"] == 0] for k, v in runs.items()})
    common.print_contrasts({"x": one["style_drift_restate dfpo_min - grpo"]})
    assert (
        "primary: x: -1 ± n/a (n=1, 95% t; smallest detectable n/a; predicted < 0)"
        in capsys.readouterr().out
    )
    json.dumps(common.clean(one), allow_nan=False)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_number(x, digits=2):
    """A number as the README prints it: the minus sign is U+2212, + is shown."""
    s = f"{x:+.{digits}f}"
    return s.replace("-", "\u2212")


def test_committed_interval_recomputes_from_per_seed_json_and_matches_readme():
    """chain_style's primary contrast, recomputed from the committed per-seed
    values alone (the last evaluation of each run), with an independent
    Student-t computation, equals the JSON's and is what the README prints."""
    import json
    data = json.load(open(os.path.join(ROOT, "results", "chain_style.json")))
    key = "style_drift_signed_restate"
    by_seed = {
        arm: {r["seed"]: r[key][-1] for r in data["runs"][arm]} for arm in ("grpo", "dr_grpo")
    }
    d = [by_seed["grpo"][s] - by_seed["dr_grpo"][s] for s in data["seeds"]]
    n = len(d)
    m = sum(d) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1))
    half = {9: 2.2622}[n - 1] * sd / math.sqrt(n)  # t_{0.975, 9} from the table
    c = data["primary"]["signed restate drift, grpo - dr_grpo"]
    assert n == c["n"] == 10 and abs(c["diff"] - m) < 1e-9 and abs(c["half"] - half) < 1e-3
    readme = open(os.path.join(ROOT, "results", "README.md"), encoding="utf-8").read()
    printed = f"{readme_number(m)} ± {half:.2f}".replace("+", "")
    assert f"**{printed}**" in readme, printed


T975 = {1: 12.7062, 2: 4.3027, 4: 2.7764, 9: 2.2622, 19: 2.0930}  # t_{0.975, df}, from tables
# README prints their primaries
RERUN = [
    "e1_flips",
    "e2_coupling",
    "e3_masked",
    "e4_categories",
    "e5_value",
    "e6_group_size",
    "e7_schedulers",
    "e8_objectives",
]


@pytest.mark.parametrize("name", RERUN)
def test_primary_intervals_recompute_from_per_seed_json_and_match_readme(name):
    """Each primary contrast of a committed full run: mean and Student-t half-width
    recomputed from its per-seed differences alone equal the JSON's, over >= 10
    seeds, and the README prints them as '+0.027 ± 0.012' (3 decimals)."""
    import json
    data = json.load(open(os.path.join(ROOT, "results", f"{name}.json")))
    readme = open(os.path.join(ROOT, "results", "README.md"), encoding="utf-8").read()
    assert data["primary"]
    for key, c in data["primary"].items():
        d = c["per_seed"]
        n = len(d)
        m = sum(d) / n
        half = T975[n - 1] * math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1)) / math.sqrt(n)
        assert n >= 10 and n == c["n"] and len(c["seeds"]) == n, key
        assert abs(c["diff"] - m) < 1e-9 and abs(c["half"] - half) < 1e-3 * half, key
        printed = f"{readme_number(m, 3)} ± {half:.3f}"
        assert printed in readme, (key, printed)


# ----------------------------------------------------------------------------- p-values and Holm

def test_t_cdf_by_hand():
    # df = 1 is Cauchy: F(1) = 3/4; df = 2 has F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-9)
    assert stats.t_cdf(1.0, 2) == pytest.approx(0.5 + 1 / (2 * math.sqrt(3)), abs=1e-9)
    assert stats.t_cdf(-1.0, 2) == pytest.approx(0.5 - 1 / (2 * math.sqrt(3)), abs=1e-9)


def test_p_value_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, t = 2 sqrt(3), df 2: p = 1 - t / sqrt(2 + t^2)
    t = 2 * math.sqrt(3)
    assert stats.p_value(stats.paired([1, 2, 3], [0, 0, 0])) == pytest.approx(
        1 - t / math.sqrt(2 + t * t), abs=1e-9
    )
    assert stats.p_value(stats.paired([1], [0])) is None


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 -> 3 x 0.01, max(0.03, 2 x 0.03), max(0.06, 1 x 0.04)
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.01, None, 0.2]) == [0.02, None, 0.2]
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_multiplicity_over_the_committed_results(tmp_path, capsys):
    """The results report's table of counts is the script's, row by row, and one p
    is recomputed by hand from its per-seed values. A primary registered as an equivalence
    test (tost_margin) is counted with the margin verdicts, never as clear of zero; the
    margin verdicts are those the experiments' JSON record (E1, E2, the demo ledger) and
    E11's equivalence test."""
    import json
    from lab.experiments import multiplicity
    data = multiplicity.main([f"--out={tmp_path}"])
    text = open(os.path.join(ROOT, "results", "README.md")).read()
    table = text[text.index("## Multiple comparisons"):text.index("## The testbed")]
    lead = lambda cell: 0 if cell.strip() == "—" else int(cell.split(":")[0].split()[0])
    rows = {c[0].strip("` ").lower(): (int(c[1]), int(c[2]), int(c[3]), int(c[4].split()[0]),
                                       lead(c[5]))
            for c in (line.strip("|").split("|") for line in table.splitlines())
            if len(c) == 6 and c[1].strip().isdigit()}

    def margins(exp, fam):
        committed = json.load(open(os.path.join(ROOT, "results", f"{exp}.json")))
        agree = [v for v in (committed.get("verdict") or {}).values() if v.startswith("agree")]
        agree += [c["equivalence"] for c in committed["primary"].values()
                  if str(c.get("equivalence", "")).startswith("agree")]
        agree += [k for k, v in (committed.get("decisions") or {}).items()  # E15's TOST verdict
                  if isinstance(v, dict) and v.get("verdict") == "equivalent"]
        tost = [n for n, c in committed["primary"].items() if c.get("tost_margin") is not None
                and fam["primary"][n]["p_holm"] < 0.05]
        return len(agree) + len(tost), {n for n, c in committed["primary"].items()
                                         if c.get("tost_margin") is not None}

    counts = {}
    for e, f in data["families"].items():
        name = e.split("_")[0] if e.startswith("e") and e[1].isdigit() else e
        passed, equivalence = margins(e, f)
        clear = sum(r["survives_holm"] for n, r in f["primary"].items() if n not in equivalence)
        counts[name] = (len(f["primary"]), len(f["secondary"]), len(f["post_hoc"]), clear, passed)
        assert rows.pop(name) == counts[name], name
    total = tuple(sum(v) for v in zip(*counts.values()))
    assert rows.pop("all") == total and not rows
    assert counts["e11"][3:] == (3, 1) and counts["demo_ledger"][3:] == (0, 1)
    # the lab report repeats the two totals: they are the script's too
    readme = open(os.path.join(ROOT, "results", "README.md")).read()
    assert f"There are {total[0]} primary contrasts in all." in readme
    assert f"\n{total[1]} secondaries and {total[2]} post-hoc contrasts are exploratory" in readme
    gap = data["families"]["e9_drift_mechanism"]["post_hoc"]["warm_credit_gap adamw"]
    assert (f"`adamw` {100 * gap['diff']:.1f} ± {100 * gap['half']:.1f} points, raw p = "
            f"{gap['p']:.3f},\nHolm {gap['p_holm']:.3f} within the two").replace("-", "−") in text
    row = data["families"]["e8_objectives"]["secondary"]["tax_interior_sum dr_grpo - grpo"]
    d = row["per_seed"]
    m = sum(d) / len(d)
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1))
    assert row["p"] == pytest.approx(
        2 * (1 - stats.t_cdf(abs(m) / (sd / math.sqrt(len(d))), len(d) - 1))
    )
    assert 0.01 < row["p"] < 0.02 and not row["survives_holm"]
    assert (tmp_path / "multiplicity.json").exists() and "multiplicity:" in capsys.readouterr().out


def test_pearson_by_hand():
    # x = 1, 2, 3; y = 2, 4, 5: deviations -1, 0, 1 and -5/3, 1/3, 4/3;
    # cov sum = 5/3 + 4/3 = 3; sum dx^2 = 2, sum dy^2 = 25/9 + 1/9 + 16/9 = 42/9
    assert stats.pearson([1, 2, 3], [2, 4, 5]) == pytest.approx(3 / math.sqrt(2 * 42 / 9))
    assert stats.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert stats.pearson([1, 1, 1], [1, 2, 3]) is None


def test_the_bottom_line_repeats_only_numbers_the_json_holds():
    """Every 'a ± b' of results/README.md's opening (before its second section), if any, is a
    contrast of a committed JSON (primary or secondary), printed to the digits shown, in
    units of 10^-k where it says so."""
    import glob
    import json
    import re
    pairs = set()
    for path in glob.glob(os.path.join(ROOT, "results", "*.json")):
        data = json.load(open(path))
        for family in ("primary", "secondary"):
            for c in (data.get(family) or {}).values():
                if isinstance(c, dict) and c.get("diff") is not None and c.get("half") is not None:
                    pairs.add((c["diff"], c["half"]))
    text = open(os.path.join(ROOT, "results", "README.md"), encoding="utf-8").read()
    heads = [m.start() for m in re.finditer(r"^## ", text, re.M)]
    opening = text[:heads[1]]
    power = {"⁻" + "⁰¹²³⁴⁵⁶⁷⁸⁹"[k]: k for k in range(10)}
    number = r"([+\u2212]?\d+\.(\d+)) ± (\d+\.\d+)(?: · 10(⁻[⁰¹²³⁴⁵⁶⁷⁸⁹]))?"
    found = re.findall(number, opening)
    assert ("+1.58", "58", "0.14", "") in re.findall(number, text)  # the pattern reads one
    for a, decimals, b, exp in found:
        k, scale = len(decimals), 10.0 ** power[exp] if exp else 1.0
        shown = lambda x: f"{x * scale:.{k}f}".replace("-", "\u2212")
        assert any(shown(d).lstrip("+") == a.lstrip("+") and f"{h * scale:.{k}f}" == b
                   for d, h in pairs), (a, b)


def _t_tail_by_integration(t, df, steps=200000):
    """P(T >= t) for Student's t, by Simpson's rule on its density (another route than
    stats.t_cdf's continued fraction)."""
    import math
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    f = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)
    hi = 200.0
    h = (hi - t) / steps
    s = f(t) + f(hi) + sum((4 if i % 2 else 2) * f(t + i * h) for i in range(1, steps))
    return s * h / 3


def test_tost_by_hand():
    """n = 10, mean difference 0.1, sd 0.3, margin 0.5: se = 0.3 / sqrt(10); the upper test
    t = (0.1 - 0.5) / se = -4.216 binds, p = P(T_9 >= 4.216) = 0.00112."""
    import math
    from lab.experiments import stats
    c = {"n": 10, "diff": 0.1, "sd": 0.3}
    se = 0.3 / math.sqrt(10)
    want = max(
        _t_tail_by_integration((0.1 + 0.5) / se, 9), _t_tail_by_integration((0.5 - 0.1) / se, 9)
    )
    assert stats.tost_p(c, 0.5) == pytest.approx(want, rel=1e-6)
    assert want == pytest.approx(0.00112, abs=2e-5)
    assert stats.tost_p(c, 0.05) > 0.5  # a margin below the mean: not equivalent
    assert stats.p_value(dict(c, tost_margin=0.5)) == stats.tost_p(c, 0.5)
