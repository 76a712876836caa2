"""The lab report's readings of E11 (results/README.md), recomputed from the committed JSON.

Every number the E11 section quotes in its corrected readings is rebuilt here from the runs'
per-step records alone (a run's drift is the sum of its measured changes, its KL the mean of
its per-step KL), with its own interpolation, paired Student t (quantiles from a printed
table), Fieller's interval for a ratio and a t tail by Simpson's rule: nothing is read from
lab/experiments/stats.py or e11_optimizer.py. Each reading is a phrase that must appear in the
report, whitespace aside. ``PYTHONPATH=. python tests/test_report_e11.py`` prints them."""
import json
import math
import os
import statistics

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON = os.path.join(ROOT, "results", "e11_optimizer.json")
T975 = {9: 2.2622, 13: 2.1604, 19: 2.0930}  # t_{0.975, df}, from a printed table
Z80 = 0.8416  # z_{0.80}: the smallest detectable effect is (t + z) sd / sqrt(n)
CALIBRATED = ("adam_b1_0", "sgd_momentum", "sgd", "permuted")


def t_tail(t, df, steps=4000):
    """P(T_df >= t) for t >= 0, by Simpson's rule on the density after u = atan(x / sqrt(df))
    (a finite interval, so the integral is exact to about 1e-12)."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    f = lambda u: c * math.sqrt(df) * math.cos(u) ** (df - 1)  # density dx, x = sqrt(df) tan u
    lo, hi = math.atan(t / math.sqrt(df)), math.pi / 2
    h = (hi - lo) / steps
    s = f(lo) + f(hi) + sum((4 if i % 2 else 2) * f(lo + i * h) for i in range(1, steps))
    return s * h / 3


def t_stats(xs):
    """mean, 95 % half-width, sd, smallest detectable effect, two-sided p (paired t)."""
    n, m = len(xs), sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    se = sd / math.sqrt(n)
    return {"m": m, "h": T975[n - 1] * se, "sd": sd, "se": se, "n": n,
            "mde": (T975[n - 1] + Z80) * se, "p": 2 * t_tail(abs(m) / se, n - 1)}


def num(x, d=2):
    return f"{x:+.{d}f}".replace("-", "−")


def pm(s, d=2, k=1.0):
    return f"{num(k * s['m'], d)} ± {k * s['h']:.{d}f}"


def mean(xs):
    return sum(xs) / len(xs)


def by_seed(data):
    return {r["seed"]: r["runs"] for r in data["runs"]}


def drift(run):
    return sum(run["measured"])


def acc(run):
    return run["acc"]


def coupling(run):
    """The cumulative first-token path under a denominator of first-token gradients alone,
    minus under the optimizer's own (E11's docstring); None without a second moment."""
    if None in run["direct_own_v"]:
        return None
    own = sum(a + b for a, b in zip(run["direct_own_v"], run["carried_direct_own_v"]))
    return own - sum(a + b for a, b in zip(run["direct"], run["carried_direct"]))


def read(runs, seed_runs, arm, value=drift, rule="amended", keep_collapsed=None):
    """One seed's reading of an arm. "amended": at adamw's mean KL, linear in log mean KL
    between the arm's two runs (collapsed runs kept for permuted, or if told); a lone run
    is read alone. "high" / "low": the 2 lr* / lr*/2 run (the registered rules for final
    accuracy and for adam_b1_0's coupling). An uncalibrated arm has one run."""
    if arm not in CALIBRATED:
        return value(runs[0])
    lo, hi = sorted(runs, key=lambda r: r["lr"])
    if rule != "amended":
        return value(hi if rule == "high" else lo)
    keep = arm == "permuted" if keep_collapsed is None else keep_collapsed
    ok = [r for r in (lo, hi) if keep or not r["collapsed"]]
    if len(ok) == 1:
        return value(ok[0])
    x = math.log(mean(seed_runs["adamw"][0]["kl"]))
    (x0, v0), (x1, v1) = sorted((math.log(mean(r["kl"])), value(r)) for r in ok)
    return v0 + (x - x0) * (v1 - v0) / (x1 - x0)


def column(data, arm, value=drift, rule="amended", seeds=None, keep_collapsed=None):
    runs = by_seed(data)
    return [read(runs[s][arm], runs[s], arm, value, rule, keep_collapsed)
            for s in (seeds or data["seeds"])]


def diff(a, b):
    return [x - y for x, y in zip(a, b)]


def fieller(a, b):
    """95 % interval of mean(a) / mean(b) over paired seeds (Fieller's theorem)."""
    n, t = len(a), T975[len(a) - 1]
    ma, mb = mean(a), mean(b)
    va = sum((x - ma) ** 2 for x in a) / (n - 1) / n
    vb = sum((y - mb) ** 2 for y in b) / (n - 1) / n
    cab = sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (n - 1) / n
    qa, qb, qc = mb * mb - t * t * vb, -2 * (ma * mb - t * t * cab), ma * ma - t * t * va
    root = math.sqrt(qb * qb - 4 * qa * qc)
    return (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)


def kl_ratios(data):
    """{(arm, "low" | "high"): [(seed, whole, first half, second half, collapsed)]}: a run's
    mean per-step KL over adamw's on its seed, over the run and over each 100 steps."""
    runs, out = by_seed(data), {}
    for arm in CALIBRATED:
        seeds = data["permuted_seeds"] if arm == "permuted" else data["seeds"]
        for s in seeds:
            ref = runs[s]["adamw"][0]["kl"]
            for which, r in zip(("low", "high"), sorted(runs[s][arm], key=lambda r: r["lr"])):
                k, h = r["kl"], len(r["kl"]) // 2
                out.setdefault((arm, which), []).append(
                    (s, mean(k) / mean(ref), mean(k[:h]) / mean(ref[:h]),
                     mean(k[h:]) / mean(ref[h:]), r["collapsed"]))
    return out


def halves_rows(data):
    """The report's table of KL ratios by half (the registered secondary)."""
    rows, kl = [], kl_ratios(data)
    label = {"low": "lr*/2", "high": "2 lr*"}
    cell = lambda xs: f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"
    for arm in CALIBRATED:
        for which in ("low", "high"):
            xs = kl[(arm, which)]
            seeds = [x[0] for x in xs]
            rows.append(f"| `{arm}`, {label[which]} | {seeds[0]}–{seeds[-1]} | "
                        + " | ".join(cell([x[j] for x in xs]) for j in (1, 2, 3)) + " |")
    return rows


def amendment_rows(data):
    """Amendment 2's secondaries under the registered rule and as amended."""
    ref = column(data, "adamw", acc)
    rows = []
    for arm in ("adam_b1_0", "sgd_momentum", "sgd", "permuted"):
        registered = t_stats(diff(column(data, arm, acc, "high"), ref))
        amended = t_stats(diff(column(data, arm, acc, keep_collapsed=True), ref))
        rows.append(f"| final accuracy, `{arm}` − `adamw` (points) | {pm(registered, 1, 100)} "
                    f"(2 lr* run) | {pm(amended, 1, 100)} |")
    registered = t_stats(column(data, "adam_b1_0", coupling, "low"))
    amended = t_stats(column(data, "adam_b1_0", coupling))
    rows.append(f"| second-moment coupling, `adam_b1_0` (nats) | {pm(registered)} (lr*/2 run) | "
                f"{pm(amended)} |")
    return rows


ARMS = ("adamw", "adam_b1_0", "sgd_momentum", "sgd", "reversed")


def readings(data):
    """Every phrase of the E11 section's corrected readings that carries a number."""
    return (match_readings(data) + factorial_readings(data) + credit_readings(data)
            + null_readings(data) + secondary_readings(data))


def match_readings(data):
    """The match: the KL ratio's spread at one learning rate, and between a seed's runs."""
    out = []
    kl = kl_ratios(data)
    spread = {k: max(x[1] for x in v) / min(x[1] for x in v) for k, v in kl.items()
              if k[0] != "permuted"}
    worst = max(spread, key=spread.get)
    assert worst == ("sgd_momentum", "high")
    lo_, hi_ = kl[("sgd_momentum", "low")], kl[worst]
    out.append(f"by up to {spread[worst]:.1f}× (`sgd_momentum` at 2 lr*: "
               f"{min(x[1] for x in hi_):.2f}–{max(x[1] for x in hi_):.2f}× AdamW's; at lr*/2 "
               f"{spread[('sgd_momentum', 'low')]:.1f}×, {min(x[1] for x in lo_):.2f}–"
               f"{max(x[1] for x in lo_):.2f}×)")
    apart = {}
    for arm in ("adam_b1_0", "sgd", "sgd_momentum"):
        r = [h[1] / l[1] for l, h in zip(kl[(arm, "low")], kl[(arm, "high")])]
        apart[arm] = (min(r), max(r))
    f1 = lambda x: f"{x:.1f}" if x < 10 else f"{x:.0f}"
    out.append(f"The two runs lie {f1(apart['adam_b1_0'][0])}–{f1(apart['adam_b1_0'][1])}× "
               f"(`adam_b1_0`), {f1(apart['sgd'][0])}–{f1(apart['sgd'][1])}× (`sgd`) and "
               f"{f1(apart['sgd_momentum'][0])}–{f1(apart['sgd_momentum'][1])}× "
               f"(`sgd_momentum`) apart in KL")
    out.append(f"up to {f1(max(apart['sgd_momentum']))}× apart")
    q = [x[3] / x[2] for v in kl.values() for x in v]
    out.append(f"A run's KL ratio in the second 100 steps is {min(q):.2f} to {max(q):.1f} times "
               f"its ratio in the first 100")
    return out


def factorial_readings(data):
    """The 2 x 2 design: both corners, the interaction, the ratio and its interval."""
    d = {a: column(data, a) for a in ARMS}
    out = []
    mom, norm, both = (diff(d["sgd_momentum"], d["sgd"]), diff(d["adam_b1_0"], d["sgd"]),
                       diff(d["adamw"], d["sgd"]))
    mom2, norm2 = diff(d["adamw"], d["adam_b1_0"]), diff(d["adamw"], d["sgd_momentum"])
    s = {k: t_stats(v) for k, v in dict(mom=mom, norm=norm, both=both, mom2=mom2,
                                        norm2=norm2).items()}
    assert s["norm"]["m"] - s["norm"]["h"] > 0  # the normalisation's own effect: clear of 0
    assert s["norm2"]["m"] - s["norm2"]["h"] < 0 < s["norm2"]["m"] + s["norm2"]["h"]
    out += [f"momentum alone, `sgd_momentum` − `sgd`: {pm(s['mom'])} nats",
            f"normalisation alone, `adam_b1_0` − `sgd`: {pm(s['norm'])}, clear of zero",
            f"both, `adamw` − `sgd`: {pm(s['both'])} (predicted > 0)",
            f"momentum, `adamw` − `adam_b1_0`: {pm(s['mom2'])} nats",
            f"normalisation, `adamw` − `sgd_momentum`: {pm(s['norm2'])} (null, smallest "
            f"detectable {s['norm2']['mde']:.2f})"]
    inter = t_stats([a - b for a, b in zip(mom2, mom)])
    assert inter["m"] - inter["h"] < 0
    top = inter["m"] + inter["h"]
    assert round(top / s["norm"]["m"]) == 3  # "three times the normalisation's effect"
    out.append(f"is {pm(inter)} nats (null, smallest detectable {inter['mde']:.2f}). An "
               f"interaction up to {top:.2f} nats is not excluded, three times")
    lo, hi = fieller(mom, both)
    assert lo > 0.5  # "most" holds at the interval's lower end
    out.append(f"Momentum alone gives {s['mom']['m'] / s['both']['m']:.2f} of AdamW's excess "
               f"over SGD ({s['mom']['m']:.2f} / {s['both']['m']:.2f}; 95 % interval "
               f"{lo:.2f}–{hi:.2f}, by Fieller's method")
    out.append(f"it gives {s['mom2']['m'] / s['both']['m']:.2f} ({s['mom2']['m']:.2f} / "
               f"{s['both']['m']:.2f})")
    out.append(f"The ratio's 95 % interval is {lo:.2f}–{hi:.2f}")
    out.append(f"Alone it adds {pm(s['mom'])} nats to SGD's drift; AdamW adds {pm(s['both'])}")
    out.append(f"adds a smaller part, {pm(s['norm'])} nats, clear of zero")
    return out


def credit_readings(data):
    """Primary 4 and the secondary reversed - adamw."""
    S, d, runs = data["seeds"], {a: column(data, a) for a in ARMS}, by_seed(data)
    out = []
    c = data["secondary"]["warm restate credit, reversed - adamw"]["per_seed"]
    gate = t_stats(data["warm_credit_reversed"]["per_seed"])
    e9_teacher = mean([r - x for r, x in zip(data["warm_credit_reversed"]["per_seed"], c)])
    rev, rev_adamw = t_stats(d["reversed"]), t_stats(diff(d["reversed"], d["adamw"]))
    out += [f"restate credit on seeds 10–19 is {pm(gate, 1, 100)} points",
            f"it is {num(100 * e9_teacher, 1)} points (reversed − adamw "
            f"{pm(t_stats(c), 1, 100)})",
            f"`reversed` drifted {pm(rev)} nats, towards restating in "
            f"{sum(x < 0 for x in d['reversed'])} of {len(S)} seeds",
            f"Its interval, [{num(rev['m'] - rev['h'])}, {num(rev['m'] + rev['h'])}], contains 0: "
            f"null (p = {rev['p']:.2g}, smallest detectable {rev['mde']:.1f})",
            f"no drift away from restating beyond about {rev['m'] + rev['h']:.2f} nats",
            f"as `adamw` does ({pm(t_stats(d['adamw']))})",
            f"The secondary `reversed` − `adamw`, {pm(rev_adamw)} nats"]
    assert rev["m"] - rev["h"] < 0 < rev["m"] + rev["h"]
    assert all(runs[s]["reversed"][0]["p_f"] != runs[s]["adamw"][0]["p_f"] for s in S)
    return out


def null_readings(data):
    """Primary 5 and what the permuted runs themselves show."""
    P, runs, kl = data["permuted_seeds"], by_seed(data), kl_ratios(data)
    out = []
    perm = t_stats(column(data, "permuted", seeds=P))
    tost = max(t_tail((perm["m"] + data["margin"]) / perm["se"], perm["n"] - 1),
               t_tail((data["margin"] - perm["m"]) / perm["se"], perm["n"] - 1))
    holm = data["holm"]["drift permuted vs 0 (equivalence)"]
    assert tost == pytest.approx(holm["p"], rel=1e-4)
    low, high = kl[("permuted", "low")], kl[("permuted", "high")]
    high_runs = [sorted(runs[s]["permuted"], key=lambda r: r["lr"])[1] for s in P]
    assert all(r["collapsed"] for r in high_runs)
    out += [f"is {pm(perm)} nats over {perm['n']} seeds",
            f"(two one-sided tests, p = {tost:.2g}, Holm {holm['p_holm']:.2g})",
            f"at lr*/2, {min(x[1] for x in low):.2f}–{max(x[1] for x in low):.2f}× AdamW's KL "
            f"({sum(x[4] for x in low)} of {len(low)} runs collapsed)",
            f"at 2 lr*, {min(x[1] for x in high):.1f}–{max(x[1] for x in high):.1f}× AdamW's "
            f"KL. All {len(high)} runs collapsed, to 0–"
            f"{100 * max(r['acc'] for r in high_runs):.1f} % final accuracy",
            f"Its 95 % interval, ({num(perm['m'] - perm['h'])}, {num(perm['m'] + perm['h'])}), "
            f"also excludes 0 (two-sided p = {perm['p']:.2g}",
            f"moved the policy {min(x[1] for x in high):.1f}× as far as AdamW"]
    assert min(r["acc"] for r in high_runs) == 0
    registered = [read(runs[s]["permuted"], runs[s], "permuted", keep_collapsed=False)
                  for s in P if any(not r["collapsed"] for r in runs[s]["permuted"])]
    reg = t_stats(registered)
    ok_low = [x[1] for x in low if not x[4]]
    out.append(f"the drift is {pm(reg)} nats over the {reg['n']} seeds with a run left. That is "
               f"the lr*/2 run alone, at {min(ok_low):.2f}–{max(ok_low):.2f}× AdamW's KL")
    out.append(f"({pm(reg)} nats at lr*/2)")
    out.append(f"at 2 lr* drifted {pm(t_stats([drift(r) for r in high_runs]))} nats")
    return out


def secondary_readings(data):
    """The second-moment coupling and the accuracy secondaries, under both rules."""
    out = []
    cw = t_stats(column(data, "adamw", coupling))
    cb, cb_reg = (t_stats(column(data, "adam_b1_0", coupling)),
                  t_stats(column(data, "adam_b1_0", coupling, "low")))
    out += [f"first-token path would be {pm(cw, 1)} nats larger",
            f"(`adam_b1_0`: {pm(cb, 1)} at AdamW's KL; {pm(cb_reg)} under the registered rule"]
    ref = column(data, "adamw", acc)
    amended = {a: t_stats(diff(column(data, a, acc, keep_collapsed=True), ref))
               for a in ("adam_b1_0", "sgd_momentum", "sgd", "permuted", "reversed")}
    registered = {a: t_stats(diff(column(data, a, acc, "high"), ref))
                  for a in ("adam_b1_0", "sgd_momentum", "sgd")}
    out.append(f"`adam_b1_0` {pm(amended['adam_b1_0'], 1, 100)}, `sgd_momentum` "
               f"{pm(amended['sgd_momentum'], 1, 100)}, `sgd` {pm(amended['sgd'], 1, 100)} points")
    out.append(f"`reversed` ended {pm(amended['reversed'], 1, 100)} (null), and `permuted` "
               f"{pm(amended['permuted'], 0, 100)}")
    clear = lambda x: abs(x["m"]) > x["h"]
    assert [clear(registered[a]) for a in ("adam_b1_0", "sgd_momentum", "sgd")] == [
        False, True, True] and all(clear(amended[a]) for a in registered)
    third = registered["sgd"]["m"] / amended["sgd"]["m"]
    assert 0.3 < third < 0.4  # "about a third as large"
    return out


def report():
    return " ".join(open(os.path.join(ROOT, "results", "README.md"), encoding="utf-8")
                    .read().split())


needs_json = pytest.mark.skipif(not os.path.exists(JSON), reason="E11 is not committed")


@needs_json
def test_e11_readings_are_the_json_s():
    data, text = json.load(open(JSON)), report()
    for phrase in readings(data):
        assert phrase in text, phrase


@needs_json
def test_e11_kl_halves_and_amendment_tables_are_the_json_s():
    data, text = json.load(open(JSON)), report()
    for row in halves_rows(data) + amendment_rows(data):
        assert row in text, row


@needs_json
def test_the_recomputed_primaries_and_ratios_match_the_json():
    """The readings' own route gives the JSON's primaries, KL ratios and secondaries, so a
    phrase above cannot pass on a computation the experiment did not make."""
    data = json.load(open(JSON))
    d = {a: column(data, a) for a in ("adamw", "adam_b1_0", "sgd_momentum", "sgd")}
    for a, b in (("adam_b1_0", "sgd"), ("sgd_momentum", "sgd"), ("adamw", "sgd")):
        s, c = t_stats(diff(d[a], d[b])), data["primary"][f"drift {a} - {b}"]
        assert s["m"] == pytest.approx(c["diff"], abs=1e-9)
        assert s["h"] == pytest.approx(c["half"], rel=1e-3)
        assert s["p"] == pytest.approx(data["holm"][f"drift {a} - {b}"]["p"], rel=1e-3)
    kl = kl_ratios(data)
    for arm, xs in data["kl_ratio"].items():
        mine = sorted(x for w in ("low", "high") for x in kl[(arm, w)])
        theirs = sorted((x["seed"], x["ratio"], x["first_half"], x["second_half"],
                         x["collapsed"]) for x in xs)
        assert len(mine) == len(theirs)
        for m, t in zip(mine, theirs):
            assert m[0] == t[0] and m[4] == t[4] and m[1:4] == pytest.approx(t[1:4], rel=1e-9)
    ref = column(data, "adamw", acc)
    for a in ("adam_b1_0", "sgd"):
        s = t_stats(diff(column(data, a, acc, keep_collapsed=True), ref))
        assert s["m"] == pytest.approx(data["secondary"][f"final accuracy, {a} - adamw"]["diff"])
    s = t_stats(column(data, "adam_b1_0", coupling))
    assert s["m"] == pytest.approx(data["secondary"]["second-moment coupling, adam_b1_0"]["diff"])


def test_t_tail_and_fieller_by_hand():
    """df = 1 is Cauchy: P(T >= 1) = 1/4. Fieller's interval of a ratio with no spread in the
    denominator is the numerator's interval divided by it."""
    assert t_tail(1.0, 1) == pytest.approx(0.25, abs=1e-9)
    assert t_tail(2.2622, 9) == pytest.approx(0.025, abs=2e-5)
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0, 1.0, 2.0, 3.0, 4.0, 5.0], [2.0] * 10
    s = t_stats(a)
    lo, hi = fieller(a, b)
    assert (lo, hi) == pytest.approx(((s["m"] - s["h"]) / 2, (s["m"] + s["h"]) / 2))


if __name__ == "__main__":
    data = json.load(open(JSON))
    print("\n".join(halves_rows(data) + [""] + amendment_rows(data) + [""] + readings(data)))
