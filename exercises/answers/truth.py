"""Teacher's side: each student's numbers for exercises 1, 4 and 7, and how a number
is marked. Left out of the student copy (exercises/handout.py), so that nothing a
student receives returns the expected numbers.

The numbers come from the library itself (loss.py's autograd through
``objectives.policy_loss``, toy_tasks.py's token categories) and, for dfpo_orth's w~, from
a least-squares projection written here, not loss.py's. A number is right when it is
within one unit of the third significant digit of the key (the sheet asks for three).
"""

import math

import torch

import loss
import toy_tasks
from exercises import problems
from exercises.answers import mistakes
from exercises.check import coefficients, shared_group
from exercises.roster import within
from lab import objectives, residuals


def ex1_truth(name, variant=0):
    p = problems.ex1(name, variant)
    batch = shared_group(p["lengths"], p["rewards"])
    c, k = coefficients("grpo", batch, "sym"), p["k"] - 1
    dr = coefficients("dr_grpo", batch, "sym", max_len=p["L_max"])
    return {
        "grpo_residual": residuals.first_token_residual(c, batch[4]),
        "grpo_net": float(c[:, 0].sum()),
        "grpo_coef_k": float(c[k, 0]),
        "dr_grpo_coef_k": float(dr[k, 0]),
    }


def ex4_truth(name, variant=0):
    p = problems.ex4(name, variant)
    batch = shared_group(
        p["lengths"], p["rewards"], log_s=[math.log(s) for s in p["s"]]
    )
    a = torch.tensor(p["rewards"], dtype=torch.float64)
    a, w = a - a.mean(), torch.tensor(p["s"], dtype=torch.float64)
    # w~ = w minus its least-squares part along A: another route than loss.adv_orthogonal
    proj = w - a * torch.linalg.lstsq(a[:, None], w[:, None]).solution[0, 0]
    return {
        "gspo_residual": residuals.first_token_residual(coefficients("gspo", batch, "sym"),
                                                        batch[4]),
        "luspo_residual": residuals.first_token_residual(coefficients("luspo", batch, "sym"),
                                                         batch[4]),
        "orth_w_k": float(proj[p["k"] - 1]),
    }


def ex7_truth(name, variant=0):
    p = problems.ex7(name, variant)
    task = toy_tasks.make_task("add", 2, True)
    cats = task.categories(p["problem"], task.solution(p["problem"]))
    plain, total, template = toy_tasks.make_task("add", 2, False), 0, 0
    for a in range(p["lo"], p["hi"] + 1):
        for b in range(p["lo"], p["hi"] + 1):
            c = plain.categories((a, b), plain.solution((a, b)))
            total, template = total + len(c), template + c.count("template")
    return {"tokens": len(cats), "template": cats.count("template"),
            "plain_share": template / total}


TRUTHS = {"EX1": ex1_truth, "EX4": ex4_truth, "EX7": ex7_truth}
VARIANTS = 1000  # draws tried per student and exercise before giving up


def well_drawn(name, ex, variant):
    """A table a class can be given: every number visibly non-zero, no mistake of the
    catalogue (mistakes.py) within the tolerance of the key, and the right method with
    4-digit intermediates within it."""
    right_values = TRUTHS[ex](name, variant)
    if any(abs(v) < (0.02 if k.endswith("residual") else 1e-3) for k, v in right_values.items()):
        return False  # a residual visibly not 0, and no number that rounds to nothing
    wrong = mistakes.wrong_numbers(name, ex, variant, right_values)
    if any(right(w, right_values[k]) for k, ws in wrong.items() for w in ws):
        return False
    calc = mistakes.calculator(name, ex, variant)
    return calc is None or all(right(calc[k], v) for k, v in right_values.items())


def pick_tables(name):
    """{"EX1": variant, ...}: the first well-drawn variant of each exercise for this name."""
    out = {}
    for ex in TRUTHS:
        out[ex] = next((v for v in range(VARIANTS) if well_drawn(name, ex, v)), None)
        if out[ex] is None:
            raise ValueError(f"no well-drawn table for {name!r}, {ex} in {VARIANTS} draws")
    return out


def key(name, tables=None):
    """{"EX1": {...}, "EX4": {...}, "EX7": {...}}: one student's numbers, full precision,
    on their tables (``pick_tables`` unless given)."""
    tables = tables or pick_tables(name)
    return {ex: truth(name, tables[ex]) for ex, truth in TRUTHS.items()}


def right(got, truth):
    """A number is right within one unit of the key's third significant digit, compared on
    three-digit mantissas (roster.within: the student's check uses the same rule)."""
    return isinstance(got, (int, float)) and not isinstance(got, bool) and within(got, truth)
