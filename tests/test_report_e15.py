"""E15's numbers in the lab report (results/README.md) and the README are the committed
results/e15_dfpo_gspo.json's: the primaries between their markers, every row of the contrasts'
table and of the per-arm table, the checks; the primaries are recomputed here from the JSON's
per-seed rows with an independent 95 % t interval, and the per-seed rows from the records."""
import json
import os
import re

from report_text import ROOT, ci
import report_text

SLOPE_X = [1, 2, 3, 4]  # log2 G


def load():
    return report_text.load("e15_dfpo_gspo")


def section():
    return report_text.section("E15: does Min-Replace beat GSPO off-policy")


def pm(c):
    """A contrast in points of accuracy: +1.2 ± 0.8."""
    return f"{100 * c['diff']:+.1f} ± {100 * c['half']:.1f}".replace("-", "−")


def fmt_p(p):
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.0e}"


def test_the_per_seed_rows_are_the_records():
    """Each seed's D_G, recomputed from the committed records (final accuracy = the mean of
    the last two evaluations), and its slope by least squares against log2 G."""
    data = load()
    for seed, row in data["rows"].items():
        ds = []
        for G in (2, 4, 8, 16):
            rec = {a: json.load(open(os.path.join(ROOT, "results", "e15",
                                                  f"{a}_G{G}_s{seed}_lr1e-05.json")))
                   for a in ("dfpo_min", "gspo")}
            final = {a: (r["acc"][-1][1] + r["acc"][-2][1]) / 2 for a, r in rec.items()}
            ds.append(final["dfpo_min"] - final["gspo"])
            assert abs(row[f"D G{G}"] - ds[-1]) < 1e-12
        mx, my = sum(SLOPE_X) / 4, sum(ds) / 4
        slope = sum((x - mx) * (y - my) for x, y in zip(SLOPE_X, ds)) / 5
        assert abs(row["slope D"] - slope) < 1e-12 and abs(row["mean D"] - my) < 1e-12


def test_the_primaries_between_their_markers():
    data, doc = load(), section()
    valid = [r for r in data["rows"].values() if r["valid"]]
    for key, field, marker in (("mean over G of D_G", "mean D", "e15-mean"),
                               ("slope of D_G", "slope D", "e15-slope")):
        c = next(v for k, v in data["primary"].items() if k.startswith(key))
        m, h = ci([r[field] for r in valid])
        assert abs(m - c["diff"]) < 1e-12 and abs(h - c["half"]) < 1e-3 * h
        got = re.search(rf"<!-- {marker} -->(.*?)<!-- /{marker} -->", doc).group(1)
        unit = "points" if field == "mean D" else "points per doubling of G"
        assert got == (f"{pm(c)} {unit} (n = {c['n']}, 95 % t; smallest detectable "
                       f"{100 * c['mde']:.1f}; Holm p = {fmt_p(c['p_holm'])})"), got


def verdict(c):
    if c["p_holm"] is None or c["p_holm"] >= 0.05:
        return "null"
    if c["predicted"] == "none":
        return "above 0" if c["diff"] > 0 else "below 0"
    return "as predicted" if (c["diff"] > 0) == (c["predicted"] == "> 0") else "contradicted"


def test_every_row_of_the_tables():
    data, doc = load(), section()
    dec = data["decisions"]
    for name, c in data["primary"].items():
        v = dec["mean" if name.startswith("mean") else "slope"]["verdict"]
        line = (f"| {name} (primary) | {c['n']} | {c['predicted']} | {pm(c)} | "
                f"{100 * c['mde']:.1f} | {fmt_p(c['p_holm'])} | {v} |")
        assert line in doc, line
    for name, c in data["secondary"].items():
        line = (f"| {name} | {c['n']} | {c['predicted']} | {pm(c)} | {100 * c['mde']:.1f} | "
                f"{fmt_p(c['p_holm'])} | {verdict(c)} |")
        if "entropy" in name:  # in nats, not points of accuracy
            line = (f"| {name} (nats, not points) | {c['n']} | {c['predicted']} | "
                    f"{c['diff']:+.4f} ± {c['half']:.4f} | {c['mde']:.4f} | "
                    f"{fmt_p(c['p_holm'])} | {verdict(c)} |")
        assert line in doc, line
    for a in ("gspo", "gspo_ref", "dfpo_min", "dfpo_orth", "dfpo_raw"):
        cells = " | ".join(f"{100 * data['per_arm'][f'{a} G{G}'][0]:.1f} ± "
                           f"{100 * data['per_arm'][f'{a} G{G}'][1]:.1f}" for G in (2, 4, 8, 16))
        assert f"| `{a}` | {cells} |" in doc, a


def test_the_checks():
    data, doc = load(), section()
    dec = data["decisions"]
    pc = dec["positive_control"]
    assert f"{100 * pc['diff']:.1f} ± {100 * pc['half']:.1f} points" in doc
    assert ("passes" if pc["passes"] else "fails") in doc
    ratios = data["checks"]["manipulation: gspo's ratios share (mean over G)"]
    assert f"{100 * ratios[0]:.2f} % of the shared-token mass" in doc
    assert f"{dec['valid_seeds']} of {len(data['rows'])} seeds" in doc
    ref = [data["described"][f"gspo_ref G{G}"]["clip_frac"][0] for G in (2, 4, 8, 16)]
    assert f"{100 * min(ref):.0f}–{100 * max(ref):.0f} % of its sequences" in doc


def test_the_readme_and_the_claims_row_say_what_the_decisions_say():
    data = load()
    dec = data["decisions"]
    assert dec["mean"]["verdict"] == "equivalent" and dec["mean"]["margin"] == 0.03
    assert dec["slope"]["verdict"] == "inconclusive"
    readme = " ".join(open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split())
    assert "E15: off-policy, DFPO's Min-Replace matched GSPO's accuracy within ±3 points." in readme
    report = " ".join(open(os.path.join(ROOT, "results", "README.md"),
                           encoding="utf-8").read().split())
    assert ("| [P1] Min-Replace beats GSPO, more at larger G | equal within ±3 points; growth "
            "inconclusive |") in report
