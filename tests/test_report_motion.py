"""The lab report's motion-ledger check (results/README.md): every number it quotes is the
committed results/motion_check.json's."""
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = json.load(open(os.path.join(ROOT, "results", "motion_check.json")))
TEXT = open(os.path.join(ROOT, "results", "README.md"), encoding="utf-8").read()
NAMES = {"adamw_1e-4": "AdamW 1e-4 (the demo), float64", "adamw_1e-4_fp32": "AdamW 1e-4, float32",
         "sgd_1e-3": "SGD 1e-3, float64", "sgd_1e-2": "SGD 1e-2, float64"}


def block(name):
    return re.search(f"<!-- {name} -->(.*?)<!-- /{name} -->", TEXT, re.S).group(1).strip()


def test_the_table_is_the_json():
    rows = []
    for arm, words in NAMES.items():
        a = DATA["arms"][arm]
        p, f = a["parts"], a["first_order"]
        rows.append(f"| {words} | {p['slope']:.5f}, {p['worst']:.1e} | "
                    f"{f['slope']:.3f}, {f['worst']:.2f} |")
    assert block("motion-table") == "\n".join(rows)


def test_the_token_counts_and_shares_are_the_json():
    a = DATA["arms"]["adamw_1e-4"]
    assert block("motion-tokens") == (f"{a['tokens']} tokens, {a['shared']['tokens']} of them "
                                      "group-shared")
    pct = lambda x: f"{100 * x:.1f} %".replace("-", "−")  # noqa: E731
    adam, sgd = a["shared"]["shares"], DATA["arms"]["sgd_1e-2"]["shared"]["shares"]
    assert block("motion-shares") == (
        f"AdamW: momentum {pct(adam['memory'])}, other groups {pct(adam['other'])}, rest of "
        f"the group {pct(adam['same'])}, own push {100 * adam['own']:.2f} %; SGD 1e-2: other "
        f"groups {pct(sgd['other'])}, rest of the group {pct(sgd['same'])}, own push "
        f"{100 * sgd['own']:.2f} %").replace("-0.02", "−0.02")
    assert "worst token missed by 0.009 % of the largest change" in TEXT
    assert round(100 * a["parts"]["worst"], 3) == 0.009
    ratio = a["partial"]["moved"] / a["shared"]["moved"]
    assert f"They moved {ratio:.0f} times as far as the group-shared ones" in TEXT
    assert f"overstated the change by half\n  (slope {a['first_order']['slope']:.2f})" in TEXT
