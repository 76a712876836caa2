"""THEORY.md §2.6, the cancellation ledger by hand, computed with the code.

One group of four rollouts (two right of length 3, two wrong of length 2), grpo's
coefficients read off loss.grpo by autograd, one on-policy step. Each number THEORY.md
prints is rebuilt twice: from the formulas of §2.5 in plain fractions of k = a/24, and with
lab.ledger.ledger_sums and ledger_shares. ``PYTHONPATH=. python
tests/test_report_ledger_example.py`` prints the section's generated lines."""
import os
from fractions import Fraction

import pytest
import torch

import loss
from lab import ledger

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
X, Y, Z, W, U = 1, 2, 3, 4, 5  # the letters of THEORY.md's completions; 0 pads
COMPLETIONS = [(X, Y, Z), (X, Y, W), (X, Y), (X, U)]
REWARDS = [1.0, 1.0, 0.0, 0.0]
NAMES = {X: "x", Y: "y", Z: "z", W: "w", U: "u"}


def group(completions=COMPLETIONS):
    """tokens, mask, group ids, rewards of the example (one group)."""
    width = max(len(c) for c in completions)
    tokens = torch.tensor([list(c) + [0] * (width - len(c)) for c in completions])
    mask = torch.tensor([[t < len(c) for t in range(width)] for c in completions])
    return tokens, mask, torch.zeros(len(completions), dtype=torch.long), torch.tensor(REWARDS)


def coefficients(objective, rows, tokens, mask, adv, grp):
    """c = -d loss / d log pi of one on-policy optimizer step over ``rows`` (every ratio
    1), read off the objective by autograd, as loss.coefficients does."""
    logp = torch.zeros(len(rows), tokens.shape[1], dtype=torch.float64, requires_grad=True)
    m, a = mask[rows], adv[rows].double()
    step = loss.step_counts(m, a)
    value, _ = objective(logp, logp.detach(), m, a, grp[rows], step,
                         loss.clip_bounds("sym", 0.2, 0.2))
    (grad,) = torch.autograd.grad(value, logp)
    return -grad


def run_ledger(objective=loss.grpo, cut=((0, 1, 2, 3),), completions=COMPLETIONS):
    """The ledger's sums and shares of the example, one optimizer step per part of ``cut``,
    with the on-policy coefficients (ratios taken as 1), and the advantages."""
    tokens, mask, grp, r = group(completions)
    adv = loss.advantages(r, grp, scale=objective is not loss.dr_grpo).double()
    steps = []
    for rows in cut:
        rows = torch.tensor(rows)
        c = coefficients(objective, rows, tokens, mask, adv, grp)
        steps.append((rows, c, c))
    sums = ledger.ledger_sums(steps, adv, tokens, mask, grp)
    return sums, ledger.ledger_shares(sums), adv, steps


def frac(x):
    """A multiple of k (or of a) as THEORY.md writes it: 0, -2, +7/3 (sign shown if asked)."""
    f = Fraction(x).limit_denominator(12)
    assert abs(float(f) - x) < 1e-9, x
    return str(f).replace("-", "−")


def signed(x):
    return ("+" if x > 0 else "") + frac(x)


def by_hand():
    """§2.5's parts for each set, from c_i = Â_i / (N L_i) in units of k = a/24 and Â in
    units of a: plain fractions, no tensor."""
    n, lengths = 4, [len(c) for c in COMPLETIONS]
    adv = [1, 1, -1, -1]  # units of a
    c = [Fraction(24 * s, n * length) for s, length in zip(adv, lengths)]  # units of k
    sets = {"S1": [0, 1, 2, 3], "S2": [0, 1, 2]}
    out = {}
    for name, rows in sets.items():
        C = sum(c[i] for i in rows)
        sum_a = sum(adv[i] for i in rows)
        wbar = sum((1 if adv[i] > 0 else -1) * c[i] for i in rows) / sum(abs(adv[i]) for i in rows)
        a_g = Fraction(sum(adv), len(adv))
        weights = C - wbar * sum_a  # on-policy: C° = C, w̄° = w̄
        out[name] = {"mass": sum(abs(c[i]) for i in rows), "net": C,
                     "cancelled": sum(abs(c[i]) for i in rows) - abs(C), "sum_a": sum_a,
                     "wbar": wbar, "credit": wbar * sum(adv[i] - a_g for i in rows),
                     "uncentred": wbar * len(rows) * a_g, "weights": weights,
                     "ratios": (C - wbar * sum_a) - weights, "split": abs(C) - abs(C)}
    return c, out


def pct(x):
    return "0 %" if abs(x) < 1e-9 else f"{100 * float(x):.1f} %"


def lines():
    """THEORY.md §2.6's generated lines, keyed by the placeholder each replaces."""
    c, sets = by_hand()
    s1, s2 = sets["S1"], sets["S2"]
    rollouts = []
    for i, (comp, r) in enumerate(zip(COMPLETIONS, REWARDS)):
        sign = "+" if r > 0 else "−"
        rollouts.append(f"| {i + 1} | `{' '.join(NAMES[t] for t in comp)}` | {r:.0f} | "
                        f"{len(comp)} | {sign}a | {sign}a/{4 * len(comp)} = {signed(c[i])}k |")
    both = lambda key: frac(abs(s1[key]) + abs(s2[key]))
    rows = [("mass Σ_S \\|c_i\\|", "mass", frac, both("mass")),
            ("net n = C = Σ_S c_i (one step)", "net", signed, both("net")),
            ("cancelled = mass − \\|n\\|", "cancelled", frac, both("cancelled")),
            ("Σ_S Â_i (units of a)", "sum_a", signed, "—"),
            ("w̄ = Σ_S sign(Â_i) c_i / Σ_S \\|Â_i\\| (units of k/a)", "wbar", frac, "—"),
            ("credit = w̄ Σ_S (Â_i − Â_g)", "credit", signed, both("credit")),
            ("uncentred = w̄ \\|S\\| Â_g", "uncentred", signed, both("uncentred")),
            ("weights = C° − w̄° Σ_S Â_i", "weights", signed, both("weights")),
            ("ratios = (C − w̄ Σ_S Â_i) − weights", "ratios", signed, both("ratios")),
            ("split = Σ_k \\|n_k\\| − \\|C\\|", "split", signed, both("split"))]
    table = [f"| {label} | {f(s1[key])} | {f(s2[key])} | {total} |"
             for label, key, f, total in rows]
    mass = s1["mass"] + s2["mass"]
    share = lambda key: (abs(s1[key]) + abs(s2[key])) / mass
    parts = ("cancelled", "credit", "weights")
    shares = [f"- cancelled: {both('cancelled')}/{frac(mass)} = {pct(share('cancelled'))};",
              f"- credit: ({both('credit')})/{frac(mass)} = {Fraction(share('credit'))} = "
              f"{pct(share('credit'))};",
              f"- weights: ({both('weights')})/{frac(mass)} = {Fraction(share('weights'))} = "
              f"{pct(share('weights'))};",
              "- ratios, split and uncentred: 0 %.",
              "",
              f"Together {' + '.join(pct(share(k))[:-2] for k in parts)}"
              f" = {pct(sum(share(k) for k in parts))}."]
    left = pct((abs(s1["net"]) + abs(s2["net"])) / mass)
    _, dr, _, _ = run_ledger(loss.dr_grpo)
    _, split, _, _ = run_ledger(cut=((0, 1), (2, 3)))
    return {
        "EXAMPLE_ROLLOUTS": "\n".join(rollouts),
        "EXAMPLE_SETS": "\n".join(table),
        "EXAMPLE_SHARES": "\n".join(shares),
        "EXAMPLE_LEFT": left,
        "EXAMPLE_DR": (f"Cancelled {pct(dr['cancelled'])}, credit {pct(dr['credit'])}, "
                       f"weights {pct(dr['weights'])}: the shares now add to 100 %."),
        "EXAMPLE_SPLIT": (f"Nothing cancels inside a step: cancelled {pct(split['cancelled'])}, "
                          f"split {pct(split['split'])}.\nCredit ({pct(split['credit'])}) and "
                          f"weights ({pct(split['weights'])}) stay as in one step."),
    }


def theory():
    return open(os.path.join(ROOT, "THEORY.md"), encoding="utf-8").read()


def test_autograd_gives_grpo_s_coefficients_by_hand():
    """loss.grpo's coefficient on every token of rollout i is Â_i / (N L_i): 2k and -3k."""
    sums, _, adv, steps = run_ledger()
    a = float(adv[0])
    assert a == pytest.approx(0.5 / (1 / 3) ** 0.5, rel=1e-5) and list(adv) == pytest.approx(
        [a, a, -a, -a])
    k = a / 24
    c, _ = by_hand()
    _, coef, _ = steps[0]
    tokens, mask, _, _ = group()
    for i in range(4):
        for t in range(mask.shape[1]):
            want = float(c[i]) * k if mask[i, t] else 0.0
            assert float(coef[i, t]) == pytest.approx(want, rel=1e-6, abs=1e-12), (i, t)


def test_the_ledger_gives_the_hand_computed_parts():
    """ledger_sums' totals are the hand computation's sums of magnitudes (in k); with S2
    broken (no two rollouts share a second token; the same lengths) it gives S1 alone."""
    sums, shares, adv, _ = run_ledger()
    k = float(adv[0]) / 24
    _, sets = by_hand()
    for key in ("mass", "cancelled", "credit", "uncentred", "weights", "ratios", "split"):
        want = float(abs(sets["S1"][key]) + abs(sets["S2"][key]))
        assert sums[key] / k == pytest.approx(want, abs=1e-6), key
    alone, _, _, _ = run_ledger(completions=[(X, Y, Z), (X, W, Y), (X, Z), (X, U)])
    for key in ("mass", "cancelled", "credit", "weights"):
        assert alone[key] / k == pytest.approx(float(abs(sets["S1"][key])), abs=1e-6), key
    assert shares["cancelled"] == pytest.approx(14 / 17, rel=1e-6)
    assert shares["credit"] == pytest.approx(7 / 51, rel=1e-6)
    assert shares["weights"] == pytest.approx(10 / 51, rel=1e-6)
    assert shares["ratios"] == shares["split"] == shares["uncentred"] == 0.0


def test_the_variations_by_hand():
    """dr_grpo: units of 1/48, S1 mass 8 cancels, S2 mass 6 nets +2 (all credit). The split
    group: steps of N = 2 give 4k and -6k; nothing cancels inside a step."""
    _, dr, _, _ = run_ledger(loss.dr_grpo)
    assert dr["cancelled"] == pytest.approx(12 / 14) and dr["credit"] == pytest.approx(2 / 14)
    assert dr["weights"] == pytest.approx(0.0, abs=1e-9)
    _, split, _, _ = run_ledger(cut=((0, 1), (2, 3)))
    assert split["cancelled"] == pytest.approx(0.0, abs=1e-9)
    assert split["split"] == pytest.approx(28 / 34)
    assert split["credit"] == pytest.approx((14 / 3) / 34)
    assert split["weights"] == pytest.approx((20 / 3) / 34)


def test_theory_prints_what_the_code_computes():
    text = theory()
    section = text[text.index("### 2.6 The ledger by hand"):text.index("## 3. The objective")]
    flat = " ".join(section.split())
    for key, value in lines().items():
        for line in value.splitlines():
            assert " ".join(line.split()) in flat, (key, line)
    assert "k = a/24" in flat and "a = (1/2)/√(1/3) ≈ 0.866" in flat


def test_theory_points_to_the_notes_for_why_rl_learns():
    text = theory()
    assert "README, \"Why RL learns here\"" not in text
    notes = open(os.path.join(ROOT, "docs", "NOTES.md"), encoding="utf-8").read()
    assert "## Why RL learns here (and where it did not)" in notes
    assert "(docs/NOTES.md#why-rl-learns-here-and-where-it-did-not)" in text


if __name__ == "__main__":
    for key, value in lines().items():
        print(f"{key}:\n{value}\n")
