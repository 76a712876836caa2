"""Teacher's side: what a student gets by a real mistake, and by a calculator.

``wrong_numbers`` is the catalogue of wrong work for the number exercises: each entry is
the number a named misconception gives on the student's own table. ``calculator`` is
the right method done by hand, every intermediate result rounded to ``digits``
significant digits. truth.pick_tables draws each student's tables so that no mistake
lands within the tolerance of the key and the calculator (4 digits) always does; so
for the tables students get, "refused" and "accepted" hold by construction, and the
tests check that such a draw exists for every name and that the check agrees.
"""

import math

from exercises import problems


def centred(rewards):
    mu = sum(rewards) / len(rewards)
    return [x - mu for x in rewards]


def wrong_numbers(name, ex, variant, right):
    """{number: [values a mistake gives]} for one exercise of one student's table."""
    if ex == "EX1":
        p = problems.ex1(name, variant)
        a, n, i = centred(p["rewards"]), p["lengths"], p["k"] - 1
        pop, bessel = math.sqrt(sum(x * x for x in a) / 4), math.sqrt(sum(x * x for x in a) / 3)
        return {
            "grpo_residual": [0.0,  # "the advantages are centred, so it cancels"
                              abs(sum(x * m for x, m in zip(a, n)))  # times L_i, not over it
                              / sum(abs(x) * m for x, m in zip(a, n)),
                              1.0],  # "nothing cancels: each rollout has its own L_i"
            "grpo_net": [-right["grpo_net"],  # the sign of the loss, not of c
                         right["grpo_net"] * 4,  # no 1/G
                         sum(x / bessel / m for x, m in zip(a, n))],  # no 1/G, written out
            "grpo_coef_k": [right["grpo_coef_k"] * bessel / pop,  # population sd
                            a[i] / bessel / sum(n),  # over the sum of lengths (dapo)
                            a[i] / (4 * n[i]),  # no division by the sd
                            -right["grpo_coef_k"]],  # sign
            "dr_grpo_coef_k": [a[i] / (4 * n[i]),  # own length, not L_max
                               a[i] / bessel / (4 * p["L_max"]),  # divided by the sd
                               a[i] / p["L_max"]],  # no 1/G
        }
    if ex == "EX4":
        p = problems.ex4(name, variant)
        a, n, s, j = centred(p["rewards"]), p["lengths"], p["s"], p["k"] - 1
        sa = sum(w * x for w, x in zip(s, a))
        return {
            "gspo_residual": [abs(sum(x / m for x, m in zip(a, n)))  # s_i left out
                              / sum(abs(x) / m for x, m in zip(a, n)),
                              abs(sa) / sum(w * abs(x) for w, x in zip(s, a))],  # luspo's
            "luspo_residual": [0.0,  # "no 1/L_i, so it cancels"
                               abs(sum(w * x / m for w, x, m in zip(s, a, n)))  # gspo's
                               / sum(w * abs(x) / m for w, x, m in zip(s, a, n))],
            "orth_w_k": [min(s),  # Min-Replace instead
                         a[j] * sa / sum(x * x for x in a),  # the part along A, not the rest
                         s[j] + a[j] * sa / sum(x * x for x in a),  # the part added, not taken
                         s[j]],  # "on-policy, so nothing changes"
        }
    return {  # EX7
        "tokens": [right["tokens"] - 1, right["tokens"] + 1],  # EOS forgotten; "=" counted
        "template": [right["template"] - 1, 1, right["tokens"] - right["template"]],
        "plain_share": [1 / 3, 1 / 4, 0.0],  # all sums of two digits, all of three; EOS not
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
        proj = r(r(sum(u)) / r(sum(x * x for x in a)))
        return {"gspo_residual": r(r(abs(sum(g))) / r(sum(abs(x) for x in g))),
                "luspo_residual": r(r(abs(sum(u))) / r(sum(abs(x) for x in u))),
                "orth_w_k": r(s[j] - r(proj * a[j]))}
    return None  # EX7: counts, nothing to round
