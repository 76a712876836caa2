"""E14's numbers in the lab report (results/README.md) and the README are the committed
results/e14_motion.json's: the primary and the share between their markers, every row of
the contrasts' table, the plain-words list and the checks; the descriptive parts are
recomputed here from the JSON's per-seed rows with an independent 95 % t interval."""
import os
import re

from report_text import ROOT, ci
import report_text


def load():
    return report_text.load("e14_motion")


def section():
    return report_text.section("E14: what carried 1/L_i's drift")


def column(data, key, opt):
    return [r[f"I {key} {opt}"] for r in data["rows"].values() if r[f"valid {opt}"]]


def pm(m, h, places=2):
    return f"{m:+.{places}f} ± {h:.{places}f}".replace("-", "−")


def test_the_primary_and_the_share_between_their_markers():
    data, doc = load(), section()
    (c,) = data["primary"].values()
    got = re.search(r"<!-- e14-primary -->(.*?)<!-- /e14-primary -->", doc).group(1)
    assert got == (f"x = {c['diff']:+.2f} ± {c['half']:.2f} nats (n = {c['n']}, 95 % t; "
                   f"smallest detectable {c['mde']:.2f})")
    m, h = ci([r["x adamw"] for r in data["rows"].values() if r["valid adamw"]])
    assert m == pytest_approx(c["diff"]) and abs(h - c["half"]) < 1e-3 * h  # (a printed t)
    d = data["decisions"]["primary"]
    assert d["verdict"] == "decision" and m - h > 0
    lo, hi = d["share_interval"]
    got = re.search(r"<!-- e14-share -->(.*?)<!-- /e14-share -->", doc).group(1)
    assert got == (f"{100 * d['share']:.0f} % of I (Fieller's 95 % interval {100 * lo:.0f}–"
                   f"{100 * hi:.0f} %)")
    assert lo > 0.5  # the share's interval lies above one half, as x's lies above 0
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    got = re.search(r"<!-- e14-readme -->(.*?)<!-- /e14-readme -->", readme).group(1)
    assert got == f"{100 * d['share']:.0f} % of I (95 %: {100 * lo:.0f}–{100 * hi:.0f} %)"
    first = data["per_part"]["memory_first adamw"][0] / data["per_part"]["dlo adamw"][0]
    assert f"Under AdamW, {100 * first:.0f} % came through momentum" in readme


def pytest_approx(x):
    import pytest
    return pytest.approx(x, rel=1e-9)


def test_every_row_of_the_table():
    data, doc = load(), section()
    (c,) = data["primary"].values()
    rows = [("x = I_decision − I / 2, AdamW (primary)", c, 2, f"{c['p']:.0e} (a family of one)",
             "decision")]
    words = {"> 0": "as predicted", "none": "below 0"}
    for name, key in (("I_own, AdamW", "I_own"), ("I_peers, AdamW", "I_peers"),
                      ("I_memory_first, AdamW", "I_memory_first"),
                      ("I_coupling (same + other), AdamW", "I_coupling"),
                      ("I_memory_rest, AdamW", "I_memory_rest"), ("x, SGD", "x under SGD"),
                      ("x, Adam β1 = 0", "x under Adam")):
        s = next(v for k, v in data["secondary"].items() if k.startswith(key))
        places = 3 if abs(s["diff"]) < 0.05 else 2
        verdict = "contradicted" if s["diff"] + s["half"] < 0 and s["predicted"] == "> 0" \
            else words[s["predicted"]]
        assert s["p_holm"] < 0.05
        rows.append((name, s, places, f"{s['p_holm']:.0e}".replace("e-0", "e-0"), verdict))
    for name, s, places, p, verdict in rows:
        mde = f"{s['mde']:.{places}f}" if places == 3 else f"{s['mde']:.2f}"
        pval = p if "family" in p else fmt_p(s["p_holm"])
        line = (f"| {name} | {s['n']} | {s['predicted']} | {pm(s['diff'], s['half'], places)} | "
                f"{mde} | {pval} | {verdict} |")
        assert line in doc, line


def fmt_p(p):
    """The table's p: one significant digit, as 0.004 or 4e-05."""
    return f"{p:.1g}" if p >= 1e-3 else f"{p:.0e}"


def test_the_plain_words_and_the_checks():
    data, doc = load(), section()
    part = data["per_part"]
    for opt in ("adamw", "sgd", "adam_b1_0"):  # each part's I, recomputed from the seeds
        for key in ("dlo", "own", "history", "peers", "memory_first", "coupling",
                    "memory_rest"):
            col = column(data, key, opt)
            if col and any(col):
                m, h = ci(col)
                assert abs(m - part[f"{key} {opt}"][0]) < 1e-12, (key, opt)
                assert abs(h - part[f"{key} {opt}"][1]) < 1e-3 * max(h, 1e-6), (key, opt)
    tab = part["tabular adamw"][0]
    assert f"own + history moved the choice {tab:.2f} nats of I's {part['dlo adamw'][0]:.2f}" \
        f" ({100 * tab / part['dlo adamw'][0]:.0f} %)" in doc
    own = part["own adamw"]
    assert f"(own {pm(own[0], own[1], 3)})" in doc
    for opt, words in (("sgd", "Under SGD, peers carried"), ("adam_b1_0",
                                                             "under Adam with β1 = 0,")):
        p, i = part[f"peers {opt}"], part[f"dlo {opt}"]
        of = "of I's " if opt == "sgd" else "of "
        assert (f"{words} {p[0]:.2f} ± {p[1]:.2f} {of}{i[0]:.2f} ± {i[1]:.2f}") in doc
    i, mf, pe = part["dlo adamw"], part["memory_first adamw"], part["peers adamw"]
    assert (f"Of I's {i[0]:.2f} ± {i[1]:.2f} nats, {mf[0]:.2f} ± {mf[1]:.2f} "
            f"({100 * mf[0] / i[0]:.0f} %) were earlier steps' first-token pushes") in doc
    assert f"peers in the step {pe[0]:.2f} ± {pe[1]:.2f}" in doc
    co, mr = part["coupling adamw"], part["memory_rest adamw"]
    assert (f"{pm(co[0], co[1])} nats in the step and {pm(mr[0], mr[1])} carried"
            .replace("+", "")) in doc.replace("+", "")
    dapo = data["dapo"]["adamw"]
    assert f"{dapo['abs_motion']:.2f} nats per run in size" in doc
    assert (f"decision's part was {dapo['abs_decision']:.2f} in size and the rest's "
            f"{dapo['abs_rest']:.2f}") in doc
    dec = data["decisions"]
    assert f"within {dec['agreement']['worst']:.1e} of its size".replace("e-04", "e-4") in doc
    assert dec["agreement"]["outside"] == 0 and dec["agreement"]["band"] == 0.01
    held, summed = (data["checks"][k] for k in ("held-out I (E12's outcome), AdamW",
                                                "I of the summed motion, AdamW"))
    assert (f"gave I = {summed['diff']:.2f} ± {summed['half']:.2f} nats; E12's own outcome, "
            f"the drift at the 256 held-out prompts, gave {held['diff']:.2f} ± "
            f"{held['half']:.2f}") in doc
    pc = dec["positive_control"]
    assert pc["passes"] and f"moved the choice {pc['diff']:.2f} ± {pc['half']:.2f} nats" in doc
    assert dec["valid_seeds"] == 6 and not dec["void_seeds"]
    b1 = [s for s, r in data["rows"].items() if not r["valid adam_b1_0"]]
    assert b1 == ["403"] and "seed 403, W−2 `grpo`, 50 % of the steps" in doc
