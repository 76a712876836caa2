"""Teacher's side: what a student gets by a real mistake, and by a calculator.

``wrong_numbers`` is the catalogue of wrong work for the number exercises: for each number,
(hint, value) pairs, where the value is what a named misconception gives on the student's
own table and the hint names the idea to re-check without giving a value. truth.py draws
each student's tables so that no value of the catalogue is right by the marking rule.

``held_out`` lists more mistakes of the same kind that the draws do not look at. The audit
(``python -m exercises.answers.audit``) reports how often they pass: it measures whether
tables drawn against the catalogue also separate mistakes nobody listed.

``calculator`` is the right method done by hand, every intermediate result rounded to
``digits`` significant digits: the draws require it to be right.
"""

import functools
import math

from exercises import problems
from exercises.check import HINTS

SIGMA = "check σ: sample (divide by n − 1) or population (divide by n)?"
SIGN = "c is minus the loss's derivative: check the sign"
ONE_OVER_N = "grpo averages over the N rollouts of the step: is 1/N there?"
LENGTH = "does the coefficient divide by L_i, or multiply by it?"
OWN_LENGTH = "grpo divides by each rollout's own L_i; dr_grpo by the constant L_max"
NO_SIGMA = "grpo divides the centred rewards by the group's σ"
CENTRE = "Â_i = (r_i − mean)/σ: was the group's mean subtracted?"
SUM_L = "divided by the step's total tokens is dapo's normalisation, not grpo's"
SAME = "numerator and denominator of the residual: over the same coefficients c_i?"
AT_MOST_ONE = "the residual is |sum| over the sum of sizes, so at most 1"
L_MAX = "L_max is the longest completion allowed (your table gives it), not the group's"
VARIANCE = "divide by σ, not by the variance σ²"
WITH_S = "gspo weighs each rollout by s_i / L_i: was s_i used?"
GSPO_L = "gspo keeps grpo's 1/L_i; luspo is the one without it"
LUSPO_L = "luspo drops the 1/L_i: its weight is s_i alone"
RATIO = "s_i = exp(mean_t log(π_new/π_old)): check which way the ratio goes"
NORM2 = "the projection divides by |Â|², the squared norm"
REMOVE = "Adv-Orthogonal removes w's part along Â; it does not add it"
MIN_REPLACE = "that is Min-Replace's change; Adv-Orthogonal projects"
DELTA = "the sheet asks for the change w~_k − w_k, not w~_k"
PROJECT = "projecting w is not centring it"
SIGNS = "Âᵀw keeps the signs of Â"
EOS = "EOS counts: it is a completion token, and a template one"
EQUALS = "the '=' belongs to the prompt, not to the completion"
TEMPLATE = "template tokens are the format ones: operators, separators and EOS"
RANGE = "the range includes both bounds"
ORDERED = "a+b= and b+a= are two problems"
DIGITS = "some sums have two digits, some three"


def centred(rewards):
    mu = sum(rewards) / len(rewards)
    return [x - mu for x in rewards]


def residual(c):
    total = sum(abs(x) for x in c)
    return abs(sum(c)) / total if total else 0.0


def _ex1(name, variant):
    p = problems.ex1(name, variant)
    a, n, i = centred(p["rewards"]), p["lengths"], p["k"] - 1
    ss = sum(x * x for x in a)
    return p, a, n, i, math.sqrt(ss / 3), math.sqrt(ss / 4)


def _ex4(name, variant):
    p = problems.ex4(name, variant)
    a, n, s, j = centred(p["rewards"]), p["lengths"], p["s"], p["k"] - 1
    return p, a, n, s, j, sum(w * x for w, x in zip(s, a)), sum(x * x for x in a)


@functools.lru_cache(maxsize=4096)
def plain_range(lo, hi):
    return plain(lo, hi, [(a, b) for a in range(lo, hi + 1) for b in range(lo, hi + 1)])


def plain(lo, hi, pairs=None):
    if pairs is None:
        return plain_range(lo, hi)
    return sum(len(str(a + b)) + 1 for a, b in pairs)


def constant(ex, number, value):
    return (HINTS[(ex, number, float(value))], float(value))


def wrong_numbers(name, ex, variant, right):
    """{number: [(hint, value a mistake gives)]} for one exercise of one student's table."""
    return {"EX1": _wrong_ex1, "EX4": _wrong_ex4, "EX7": _wrong_ex7}[ex](name, variant, right)


def _wrong_ex1(name, variant, right):
    ex = "EX1"
    p, a, n, i, sd, pop = _ex1(name, variant)
    c = [x / sd / (4 * m) for x, m in zip(a, n)]
    L = p["L_max"]
    return {
        "grpo_residual": [
            constant(ex, "grpo_residual", 0), constant(ex, "grpo_residual", 1),
            (LENGTH, residual([x * m for x, m in zip(a, n)])),
            (AT_MOST_ONE, 1 / right["grpo_residual"]),
            (SAME, abs(sum(c)) / sum(abs(x) for x in a)),
            (CENTRE, residual([x / m for x, m in zip(p["rewards"], n)]))],
        "grpo_net": [
            (SIGN, -right["grpo_net"]), (ONE_OVER_N, 4 * right["grpo_net"]),
            (SIGMA, right["grpo_net"] * sd / pop), (NO_SIGMA, right["grpo_net"] * sd),
            (ONE_OVER_N, 4 * right["grpo_net"] * sd / pop),
            (CENTRE, sum(r / sd / (4 * m) for r, m in zip(p["rewards"], n))),
            (LENGTH, sum(x / sd * m / 4 for x, m in zip(a, n))),
            (VARIANCE, right["grpo_net"] / sd)],
        "grpo_coef_k": [
            (SIGMA, right["grpo_coef_k"] * sd / pop), (SUM_L, a[i] / sd / sum(n)),
            (NO_SIGMA, a[i] / (4 * n[i])), (SIGN, -right["grpo_coef_k"]),
            (OWN_LENGTH, a[i] / sd / (4 * L)), (ONE_OVER_N, a[i] / sd / n[i]),
            (CENTRE, p["rewards"][i] / sd / (4 * n[i])),
            (VARIANCE, a[i] / sd ** 2 / (4 * n[i])),
            (LENGTH, a[i] / sd * n[i] / 4)],
        "dr_grpo_coef_k": [
            (OWN_LENGTH, a[i] / (4 * n[i])), (NO_SIGMA, a[i] / sd / (4 * L)),
            (ONE_OVER_N, a[i] / L), (L_MAX, a[i] / (4 * max(n))),
            (SIGN, -right["dr_grpo_coef_k"]), (OWN_LENGTH, a[i] / sd / (4 * n[i])),
            (SIGMA, a[i] / pop / (4 * L))],
    }


def _wrong_ex4(name, variant, right):
    ex = "EX4"
    p, a, n, s, j, sa, aa = _ex4(name, variant)
    return {
        "gspo_residual": [
            constant(ex, "gspo_residual", 0), constant(ex, "gspo_residual", 1),
            (WITH_S, residual([x / m for x, m in zip(a, n)])),
            (GSPO_L, residual([w * x for w, x in zip(s, a)])),
            (RATIO, residual([x / w / m for w, x, m in zip(s, a, n)])),
            (LENGTH, residual([w * x * m for w, x, m in zip(s, a, n)]))],
        "luspo_residual": [
            constant(ex, "luspo_residual", 0), constant(ex, "luspo_residual", 1),
            (LUSPO_L, residual([w * x / m for w, x, m in zip(s, a, n)])),
            (RATIO, residual([x / w for w, x in zip(s, a)]))],
        "orth_delta_k": [
            constant(ex, "orth_delta_k", 0),
            (NORM2, -sa / math.sqrt(aa) * a[j]), (NORM2, -sa * a[j]),
            (REMOVE, sa / aa * a[j]), (MIN_REPLACE, min(s) - s[j]),
            (DELTA, s[j] - sa / aa * a[j]), (PROJECT, -sum(s) / 4),
            (SIGNS, -sum(w * abs(x) for w, x in zip(s, a)) / aa * a[j]),
            (SIGNS, -sa / aa * abs(a[j])), (DELTA, -sa / aa * a[j] / s[j])],
    }


def _wrong_ex7(name, variant, right):
    ex = "EX7"
    p = problems.ex7(name, variant)
    lo, hi, nn = p["lo"], p["hi"], (p["hi"] - p["lo"] + 1) ** 2
    unordered = [(x, y) for x in range(lo, hi + 1) for y in range(x, hi + 1)]
    return {  # EX7
        "tokens": [(EOS, right["tokens"] - 1), (EQUALS, right["tokens"] + 1)],
        "template": [(EOS, right["template"] - 1), constant(ex, "template", 1),
                     (TEMPLATE, right["tokens"] - right["template"])],
        "plain_tokens": [
            (EOS, right["plain_tokens"] - nn), (RANGE, plain(lo + 1, hi)),
            (RANGE, plain(lo, hi - 1)), (RANGE, plain(lo + 1, hi - 1)),
            (ORDERED, plain(lo, hi, unordered)),
            (ORDERED, plain(lo, hi, [(x, y) for x, y in unordered if x != y])),
            (DIGITS, 3 * nn), (DIGITS, 4 * nn)],
    }


def held_out(name, ex, variant, right):
    """More plausible mistakes, in the same form, that the draws never look at."""
    if ex == "EX1":
        p, a, n, i, sd, pop = _ex1(name, variant)
        tokens = sum(n)
        return {
            "grpo_residual": [("", residual([x / sd / m ** 2 for x, m in zip(a, n)])),
                              ("", residual([abs(x) / m for x, m in zip(a, n)]))],
            "grpo_net": [("", sum(x / sd / (tokens * m) for x, m in zip(a, n))),
                         ("", right["grpo_net"] * pop / sd),
                         ("", sum(x / sd / (3 * m) for x, m in zip(a, n)))],
            "grpo_coef_k": [("", a[i] / pop / (4 * n[i]) * sd / pop),
                            ("", a[i] / sd / (3 * n[i])),
                            ("", a[i] / (sd + 1) / (4 * n[i]))],
            "dr_grpo_coef_k": [("", a[i] / (3 * p["L_max"])),
                               ("", a[i] / (4 * sum(n) / 4))],
        }
    if ex == "EX4":
        p, a, n, s, j, sa, aa = _ex4(name, variant)
        return {
            "gspo_residual": [("", residual([w * x / m ** 2 for w, x, m in zip(s, a, n)])),
                              ("", residual([math.log(w) * x / m for w, x, m in zip(s, a, n)]))],
            "luspo_residual": [("", residual([w * w * x for w, x in zip(s, a)])),
                               ("", residual([(w - 1) * x for w, x in zip(s, a)]))],
            "orth_delta_k": [("", -sa / 4 / aa * a[j]),
                             ("", -sa / sum(abs(x) for x in a) * a[j]),
                             ("", -sum(w * x for w, x in zip(s, p["rewards"]))
                              / sum(x * x for x in p["rewards"]) * p["rewards"][j])],
        }
    p = problems.ex7(name, variant)
    lo, hi = p["lo"], p["hi"]
    return {
        "tokens": [("", right["tokens"] - right["template"])],
        "template": [("", right["template"] + 1)],
        "plain_tokens": [("", plain(lo - 1, hi)), ("", plain(lo, hi + 1))],
    }


def calculator(name, ex, variant, digits=4):
    """The right numbers computed by hand: every intermediate rounded to ``digits``."""
    r = lambda x: float(f"{x:.{digits}g}")
    if ex == "EX1":
        p = problems.ex1(name, variant)
        a, n, i = centred(p["rewards"]), p["lengths"], p["k"] - 1
        sd = r(math.sqrt(r(sum(x * x for x in a) / 3)))
        c = [r(r(x / sd) / (4 * m)) for x, m in zip(a, n)]
        return {"grpo_residual": r(r(abs(sum(c))) / r(sum(abs(x) for x in c))),
                "grpo_net": r(sum(c)), "grpo_coef_k": c[i],
                "dr_grpo_coef_k": r(a[i] / (4 * p["L_max"]))}
    if ex == "EX4":
        p = problems.ex4(name, variant)
        a, n, s, j = centred(p["rewards"]), p["lengths"], p["s"], p["k"] - 1
        g = [r(w * x / m) for w, x, m in zip(s, a, n)]
        u = [r(w * x) for w, x in zip(s, a)]
        along = r(r(sum(u)) / r(sum(x * x for x in a)))
        return {"gspo_residual": r(r(abs(sum(g))) / r(sum(abs(x) for x in g))),
                "luspo_residual": r(r(abs(sum(u))) / r(sum(abs(x) for x in u))),
                "orth_delta_k": r(-along * a[j])}
    return None  # EX7: counts, nothing to round
