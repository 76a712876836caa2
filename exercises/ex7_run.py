"""Exercise 7: token categories of the canonical solutions, scratchpad off and on.

Run from the repository root, after you have filled in
exercises/ex7_predict_template.py:

    python exercises/ex7_run.py

For every problem of 2-digit add and mul (all 90 x 90 of them) it labels each
completion token of the canonical solution, EOS included, with
toy_tasks' categories (template, copy, compute) and prints the shares.
"""

import os
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import toy_tasks  # noqa: E402

CATEGORIES = ("template", "copy", "compute")


def shares(task_name, scratchpad, digits=2):
    """{category: share of all completion tokens} and the mean completion length."""
    task = toy_tasks.make_task(task_name, digits, scratchpad)
    lo, hi = 10 ** (digits - 1), 10 ** digits
    counts = Counter()
    n = 0
    for a in range(lo, hi):
        for b in range(lo, hi):
            p = (a, b)
            counts.update(task.categories(p, task.solution(p)))
            n += 1
    total = sum(counts.values())
    return {c: counts[c] / total for c in CATEGORIES}, total / n


def measure():
    return {(task, sp): shares(task, sp) for task in ("add", "mul") for sp in (False, True)}


def main():
    print(f"{'task':<6}{'scratchpad':>11}{'template':>10}{'copy':>8}{'compute':>9}{'tokens':>8}")
    for (task, sp), (share, length) in measure().items():
        print(f"{task:<6}{str(sp):>11}" + "".join(f"{share[c]:>{w}.3f}" for c, w in
                                                  zip(CATEGORIES, (10, 8, 9))) + f"{length:>8.2f}")
    print("tokens = mean completion length, EOS included")


if __name__ == "__main__":
    main()
