"""Teacher's side: each student's numbers for exercises 1, 4 and 7, and how a number
is marked. Left out of the student copy (exercises/handout.py), so that nothing a
student receives returns the expected numbers.

The numbers are closed forms of the objectives' coefficients (THEORY.md 2.1-2.3;
EXERCISES.md's worked example), and toy_tasks.py's token categories for exercise 7.
tests/test_exercises.py checks the closed forms against loss.py's autograd. A number is
right when it is within one unit of the key's third significant digit; a count must be
exact.
"""

import functools
import math

import toy_tasks
from exercises import problems
from exercises.answers import mistakes
from exercises.check import COUNTS
from exercises.roster import VARIANTS, accepted, within


def centred(rewards):
    mu = sum(rewards) / len(rewards)
    return [x - mu for x in rewards]


def residual(c):
    return abs(sum(c)) / sum(abs(x) for x in c)


def ex1_truth(name, variant=0):
    p = problems.ex1(name, variant)
    a, n, i = centred(p["rewards"]), p["lengths"], p["k"] - 1
    sd = math.sqrt(sum(x * x for x in a) / (len(a) - 1))  # Bessel-corrected, as verl and TRL
    c = [x / sd / (len(a) * m) for x, m in zip(a, n)]
    return {"grpo_residual": residual(c), "grpo_net": sum(c), "grpo_coef_k": c[i],
            "dr_grpo_coef_k": a[i] / (len(a) * p["L_max"])}


def ex4_truth(name, variant=0):
    p = problems.ex4(name, variant)
    a, n, s, j = centred(p["rewards"]), p["lengths"], p["s"], p["k"] - 1
    along = sum(w * x for w, x in zip(s, a)) / sum(x * x for x in a)
    return {"gspo_residual": residual([w * x / m for w, x, m in zip(s, a, n)]),
            "luspo_residual": residual([w * x for w, x in zip(s, a)]),
            "orth_delta_k": -along * a[j]}


@functools.lru_cache(maxsize=4096)
def plain_tokens(lo, hi):
    task = toy_tasks.make_task("add", 2, False)
    return sum(len(task.categories((a, b), task.solution((a, b))))
               for a in range(lo, hi + 1) for b in range(lo, hi + 1))


def ex7_truth(name, variant=0):
    p = problems.ex7(name, variant)
    task = toy_tasks.make_task("add", 2, True)
    cats = task.categories(p["problem"], task.solution(p["problem"]))
    return {"tokens": len(cats), "template": cats.count("template"),
            "plain_tokens": plain_tokens(p["lo"], p["hi"])}


TRUTHS = {"EX1": ex1_truth, "EX4": ex4_truth, "EX7": ex7_truth}


def well_drawn(name, ex, variant):
    """A table a class can be given: every number visibly non-zero, no mistake of the
    catalogue (mistakes.py) right by the marking rule, and the right method with 4-digit
    intermediates right by it."""
    key = TRUTHS[ex](name, variant)
    if any(abs(v) < (0.02 if k.endswith("residual") else 1e-3) for k, v in key.items()):
        return False
    wrong = mistakes.wrong_numbers(name, ex, variant, key)
    if any(right(v, key[k], k) for k, ws in wrong.items() for _, v in ws):
        return False
    calc = mistakes.calculator(name, ex, variant)
    return calc is None or all(right(calc[k], v, k) for k, v in key.items())


def clashes(key, printed):
    """The numbers of ``key`` ({number: value}) that a number the copy prints would mark
    right, sign aside (a student copies 0.125 as -0.125 as easily). ``printed``: the
    three-digit forms (roster.text of roster.sig3) of the copy's numbers' sizes. Counts are
    whole numbers that any text prints, so they are not searched for."""
    return [k for k, v in key.items() if k not in COUNTS and accepted(abs(v)) & printed]


def pick_tables(name, printed=frozenset()):
    """{"EX1": draw, ...}: for each exercise, the first draw (0, 1, 2, ...: the same for a
    name every time) that is well drawn and whose numbers the copy does not print
    (``clashes``; ``printed`` as there, empty: not searched)."""
    out = {}
    for ex in TRUTHS:
        out[ex] = next((v for v in range(VARIANTS) if well_drawn(name, ex, v)
                        and not clashes(TRUTHS[ex](name, v), printed)), None)
        if out[ex] is None:
            raise ValueError(f"no well-drawn table for {name!r}, {ex} in {VARIANTS} draws")
    return out


def key(name, tables=None):
    """{"EX1": {...}, "EX4": {...}, "EX7": {...}}: one student's numbers, full precision,
    on their tables (``pick_tables`` unless given)."""
    tables = tables or pick_tables(name)
    return {ex: truth(name, tables[ex]) for ex, truth in TRUTHS.items()}


def right(got, truth, number=None):
    """The marking rule for one number: a count must be exact; anything else within one
    unit of the key's third significant digit (roster.within)."""
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return False
    if isinstance(got, float) and not math.isfinite(got):
        return False
    if number in COUNTS:
        return got == truth
    return within(got, truth)
