"""E13's numbers in the lab report (results/README.md) and the README are the committed
results/e13_dose.json's: the primaries between their markers, every row of the contrasts'
table, the plain-words list and the checks. The descriptive numbers are recomputed here
from the JSON's per-seed rows with an independent 95 % t interval."""
import math
import os
import re

import pytest

from report_text import ROOT, ci
import report_text


def load():
    return report_text.load("e13_dose")


def section():
    return report_text.section("E13: the law of the push", flat=False)


def flat(s):
    return " ".join(s.split())


def valid(data):
    """The rows of the seeds whose SGD runs kept the gap (the ratios' seeds)."""
    return [r for r in data["rows"] if r["log ratio sgd"] is not None]


def test_the_primaries_between_their_markers_are_the_json_s():
    data, doc = load(), section()
    slope, sgd = data["primary"].values()
    got = re.search(r"<!-- e13-slope -->(.*?)<!-- /e13-slope -->", doc).group(1)
    assert got == (f"{slope['diff']:+.3f} ± {slope['half']:.3f} nats per token (n = "
                   f"{slope['n']}, 95 % t; smallest detectable {slope['mde']:.3f})")
    d, h = sgd["diff"], sgd["half"]
    got = re.search(r"<!-- e13-sgd -->(.*?)<!-- /e13-sgd -->", doc).group(1)
    assert got == (f"{math.exp(d):.2f} times the prediction (95 % t: {math.exp(d - h):.2f}–"
                   f"{math.exp(d + h):.2f}; n = {sgd['n']})")
    assert f'"effect" (Holm p {slope["p_holm"]:.3f})' in flat(doc)
    assert f"Holm p {sgd['p_holm']:.3f})" in flat(doc)
    dec = data["decisions"]
    assert (dec["primary 1"], dec["primary 2"]) == ("effect", "first order holds")
    assert abs(d) + h < math.log(1.5)  # the margin verdict, read from the interval too


def row(name, c, log=False, places=2):
    m, h = c["diff"], c["half"]
    cell = f"{m:+.{places}f} ± {h:.{places}f}"
    if log:
        cell += f" (×{math.exp(m):.2f}, {math.exp(m - h):.2f}–{math.exp(m + h):.2f})"
    return f"| {name} | {c['n']} |", f"| {cell} | {c['mde']:.2g} | {c['p_holm']:.1g} |"


def test_every_row_of_the_table_is_the_json_s():
    data, doc = load(), section()
    p, s = data["primary"], data["secondary"]
    rows = [
        row("slope of I against the gap, nats per token (primary 1)",
            p["slope of I against the measured gap (nats per token)"], places=3),
        row("log(observed ÷ predicted), SGD (primary 2)", p["log(observed / predicted I), SGD"],
            log=True),
        row("I at 1 retry, nats", s["I at 1 retry (8 tokens nominal)"]),
        row("I at 2 retries, nats", s["I at 2 retries (16 tokens nominal)"]),
        row("I at 3 retries, nats", s["I at 3 retries (24 tokens nominal)"]),
        row("log(observed ÷ predicted), AdamW", s["log(observed / predicted I), AdamW"],
            log=True),
        row("log ratio, AdamW − SGD", s["log ratio, AdamW - SGD"], log=True),
        row("log ratio, AdamW − Adam β1 = 0 (momentum)", s["log ratio, AdamW - Adam beta1 = 0"],
            log=True),
        row("log ratio, Adam β1 = 0 − SGD (normalisation)", s["log ratio, Adam beta1 = 0 - SGD"],
            log=True),
    ]
    lines = [x for x in doc.splitlines() if x.startswith("| ") and "(95 % t)" not in x]
    assert len(lines) == len(rows)
    for line, (head, tail) in zip(lines, rows):
        assert line.startswith(head) and tail in line, (line, tail)
        verdict = line.rstrip(" |").rsplit("| ", 1)[1]
        assert ("null" in verdict) == (float(tail.split("|")[3]) >= 0.05), line
    for c in s.values():  # the verdicts: every secondary but momentum's clears 0 after Holm
        assert (c["p_holm"] < 0.05) == (c is not s["log ratio, AdamW - Adam beta1 = 0"])


def test_the_plain_words_are_the_json_s():
    data, doc = load(), flat(section())
    curve = data["curve"]
    one = curve[0]
    assert (f"At 1 retry ({one['gap'][0]:.1f} tokens, {100 * one['share'][0]:.0f} % of the "
            f"mean length, the smallest gap tested) I was {one['I'][0]:.2f} ± "
            f"{one['I'][1]:.2f} nats") in doc
    assert data["decisions"]["fewest retries detected"] == 1
    assert (f"I was no larger at 3 retries than at 2 ({curve[2]['I'][0]:.2f} against "
            f"{curve[1]['I'][0]:.2f} nats; paired,") in doc
    assert (f"({curve[1]['first_order'][0]:.2f} and {curve[2]['first_order'][0]:.2f} nats "
            f"under AdamW's yardstick)") in doc
    ratios = [c["I"][0] / c["first_order"][0] for c in curve]
    assert f"Observed over predicted was {ratios[0]:.1f}, {ratios[1]:.1f} and {ratios[2]:.1f}" \
        in doc
    s = data["secondary"]
    adamw = s["log(observed / predicted I), AdamW"]["diff"]
    mom = s["log ratio, AdamW - Adam beta1 = 0"]
    norm = s["log ratio, Adam beta1 = 0 - SGD"]
    assert (f"Under AdamW, I was {math.exp(adamw):.1f} times the prediction; under Adam with "
            f"β1 = 0, {math.exp(adamw - mom['diff']):.1f} times") in doc
    assert (f"lies in {math.exp(mom['diff'] - mom['half']):.2f}–"
            f"{math.exp(mom['diff'] + mom['half']):.2f} (smallest detectable factor "
            f"{math.exp(mom['mde']):.3f})") in doc
    assert (f"ratio was {math.exp(norm['diff']):.1f} times SGD's "
            f"({math.exp(norm['diff'] - norm['half']):.1f}–"
            f"{math.exp(norm['diff'] + norm['half']):.1f})") in doc
    rows = valid(data)
    obs = {o: ci([r[f"observed {o}"] for r in rows]) for o in ("adamw", "sgd", "adam_b1_0")}
    assert (f"was {obs['adamw'][0]:.2f} ± {obs['adamw'][1]:.2f} (AdamW), {obs['sgd'][0]:.2f} ± "
            f"{obs['sgd'][1]:.2f} (SGD) and {obs['adam_b1_0'][0]:.2f} ± "
            f"{obs['adam_b1_0'][1]:.2f} nats (β1 = 0) over the {len(rows)} seeds") in doc
    kappa = {o: sum(r[f"kappa {o}"] for r in rows) / len(rows) for o in obs}
    assert (f"moved {kappa['sgd']:.1f} nats per unit of push under SGD, {kappa['adamw']:.1f}–"
            f"{kappa['adam_b1_0']:.1f} under Adam") in doc
    m, h = ci([r["observed adamw"] - r["observed sgd"] for r in rows])
    assert f"AdamW − SGD in I was {m:+.2f} ({m - h:+.2f} to {m + h:+.2f}".replace(
        "-0", "−0") in doc
    # the 1/L push's size in the W runs against the positive control's, in units of push
    small = sum(r["predicted adamw"] / r["kappa adamw"] for r in rows) / len(rows)
    large = sum(r["pc adamw"] / r["kappa adamw"] for r in rows) / len(rows)
    assert 5 < large / small < 7 and "about a sixth of the control's" in doc
    assert f"demo's gap (1.8 % of the mean length) lies {100 * one['share'][0] / 1.8:.0f} " \
        "times below it" in doc


def test_the_checks_are_the_json_s():
    data, doc = load(), flat(section())
    c = data["checks"]
    d0 = c["[grpo - dapo]_D0"]
    assert f"was {d0['diff']:.3f} ± {d0['half']:.3f} nats, inside ±0.75".replace("-", "−") in doc
    pcs = [c[f"positive control, {o}"] for o in ("adamw", "sgd", "adam_b1_0")]
    assert (f"{pcs[0]['diff']:.2f} ± {pcs[0]['half']:.2f} nats (AdamW), {pcs[1]['diff']:.2f} ± "
            f"{pcs[1]['half']:.2f} (SGD), {pcs[2]['diff']:.2f} ± {pcs[2]['half']:.2f} (β1 = 0)") \
        in doc
    assert all(p["diff"] - p["half"] > 0.5 for p in pcs)
    sgd, b1 = c["log KL ratio, sgd / adamw"], c["log KL ratio, adam_b1_0 / adamw"]
    assert f"SGD's log KL ratio to AdamW's was {sgd['diff']:+.2f} ± {sgd['half']:.2f}" in doc
    assert f"Adam β1 = 0's was {b1['diff']:+.2f} ± {b1['half']:.2f}" in doc
    assert data["decisions"]["kl matched"] == {"sgd": True, "adam_b1_0": False}
    assert b1["diff"] + b1["half"] > math.log(2) > abs(sgd["diff"]) + sgd["half"]
    rows = {r["seed"]: r for r in data["rows"]}
    far = sorted(s for s, r in rows.items() if r["kl adam_b1_0"] / r["kl adamw"] > 2)
    assert far == [203, 204, 209] and "Three seeds (203, 204, 209) moved 4 to 10 times" in doc
    near = [r["kl adam_b1_0"] / r["kl adamw"] for s, r in rows.items() if s not in far]
    assert f"the other nine {min(near):.1f}–{max(near):.1f} times" in doc
    assert max(abs(rows[s]["log ratio adam_b1_0"] - rows[s]["log ratio adamw"]) for s in far) \
        < 0.04
    assert [s for s, r in rows.items() if r["kl sgd"] / r["kl adamw"] > 2] == [209]
    assert f"one seed (209) moved {rows[209]['kl sgd'] / rows[209]['kl adamw']:.0f} times" in doc
    assert [s for s, r in rows.items() if r["log ratio sgd"] is None] == [201]
    assert f"its own measured gap ({rows[201]['gap 2']:.1f} tokens)" in doc
    assert f"had learned a gap of {data['gates']['parity_right_long2 s201']:.1f} tokens" in doc
    assert f"seed 210's measured gap at 1 retry was {rows[210]['gap 1']:.1f} tokens" in doc
    assert all(abs(rows[s]["gap 3"] - 12) < 0.5 for s in (200, 206))
    records = [f for f in os.listdir(os.path.join(ROOT, "results", "e13"))
               if re.search(r"_s2(0\d|1[01])\.json$", f)]
    assert f"reads the {len(records)} committed records" in doc


@pytest.mark.parametrize("where", ["README.md", "results/README.md"])
def test_the_shares_the_rule_of_thumb_quotes_are_the_json_s(where):
    """lab/lengthcov.py's E13 constants are the curve's measured shares and the share of
    the fewest retries detected."""
    from lab import lengthcov
    data = load()
    shares = [100 * c["share"][0] for c in data["curve"]]
    assert lengthcov.E13_SHARES == (round(min(shares), 1), round(max(shares), 1))
    k = data["decisions"]["fewest retries detected"]
    assert lengthcov.E13_DETECTED == round(shares[[c["retries"] for c in data["curve"]]
                                                  .index(k)], 1)
    text = open(os.path.join(ROOT, where), encoding="utf-8").read()
    assert f"{min(shares):.0f} %" in text


def test_the_readme_s_sentence_is_the_json_s():
    data = load()
    one, sgd = data["curve"][0], data["primary"]["log(observed / predicted I), SGD"]
    adamw = data["secondary"]["log(observed / predicted I), AdamW"]
    readme = flat(open(os.path.join(ROOT, "README.md"), encoding="utf-8").read())
    assert (f"E13: I was detected at every gap tested, down to {one['gap'][0]:.0f} tokens, "
            f"{100 * one['share'][0]:.0f} % of the mean length.") in readme
    rows = valid(data)
    obs = {o: sum(r[f"observed {o}"] for r in rows) / len(rows) for o in ("adamw", "sgd")}
    assert data["decisions"]["kl matched"]["sgd"] and abs(obs["sgd"] - obs["adamw"]) < 0.05
    assert (f"At AdamW's KL, SGD gave as large an I ({obs['sgd']:.2f} against "
            f"{obs['adamw']:.2f} nats), {math.exp(sgd['diff']):.2f} times the first-order "
            f"prediction (THEORY.md §2.7).") in readme
    assert "under Adam, 5 times" not in readme and adamw["diff"] > 0
    assert "detected from" not in readme
