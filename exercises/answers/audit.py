"""Audit of the classroom set for one class: how well the tables separate mistakes, whether
every wrong program is refused, and what guessing would cost against a check that holds
a fingerprint of the key.

    python -m exercises.answers.audit [--students=200] [--seed=0]

Prints Markdown (the teacher's notes quote it). For each number of exercises 1, 4 and 7,
over the class:

* catalogued: the share of students for whom some mistake of the catalogue
  (mistakes.wrong_numbers) is right by the marking rule: 0 by construction of the draws,
  shown to prove the construction holds;
* held out: the same for mistakes the draws never look at (mistakes.held_out): a
  measurement of how well the draws separate mistakes nobody listed;
* calculator: the share for whom the right method with 4-digit intermediates is refused.

Then each wrong program of wrong_code.py against the properties of exercises/check.py, and
the guessing model (EXERCISES.md, "What the check can tell you").
"""

import hashlib
import math
import os
import random
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m exercises.answers.audit\n")
    sys.exit(2)

if __name__ == "__main__":  # Ctrl-C at any moment, during the imports too: one line
    import signal
    signal.signal(signal.SIGINT, lambda *_: (sys.stderr.write("\ninterrupted\n"), os._exit(130)))


def random_names(n=200, seed=0):
    """n distinct plausible names: letters, spaces, accents, digits (student ids)."""
    rng, out = random.Random(seed), []
    first = ["Ada", "Émilie", "Alan", "Grace", "Kurt", "Sofia", "Li", "Nadia", "Jürgen", "Ana"]
    while len(out) < n:
        name = (f"s{rng.randrange(10 ** 7):07d}" if rng.random() < 0.3 else
                f"{rng.choice(first)} {''.join(rng.choices('abcdefghijklmnopqrstuvwxyz', k=6))}")
        if name not in out:
            out.append(name)
    return out


def separation(names):
    """{(exercise, number): {"catalogued": n, "held out": n, "calculator": n}}: how many
    students have at least one such value accepted (the calculator: refused)."""
    from exercises.answers import mistakes, truth
    out = {}
    for name in names:
        tables = truth.pick_tables(name)
        for ex, key in truth.key(name, tables).items():
            wrong = mistakes.wrong_numbers(name, ex, tables[ex], key)
            held = mistakes.held_out(name, ex, tables[ex], key)
            calc = mistakes.calculator(name, ex, tables[ex])
            for k, v in key.items():
                row = out.setdefault((ex, k), {"catalogued": 0, "held out": 0, "calculator": 0,
                                               "values": []})
                row["catalogued"] += any(truth.right(x, v, k) for _, x in wrong.get(k, []))
                row["held out"] += any(truth.right(x, v, k) for _, x in held.get(k, []))
                row["calculator"] += calc is not None and not truth.right(calc[k], v, k)
                row["values"].append(v)
    return out


def wrong_programs():
    """{exercise: (refused, total, [names that pass])} over wrong_code.WRONG."""
    import batching
    import loss
    from exercises import check
    from exercises.answers import wrong_code
    env = {"sheet": key_sheet(), "roster": None}
    where = {"ex2": (loss, "adv_orthogonal"), "ex3": (loss, "min_replace"),
             "ex5": (batching, "query_balanced")}
    out = {}
    for ex, catalogue in wrong_code.WRONG.items():
        passing = []
        for name, fn in catalogue.items():
            if ex == "ex6":
                results = check.run(ex, dict(env, ex6=fn))
            else:
                module, attr = where[ex]
                keep = getattr(module, attr)
                setattr(module, attr, fn)
                try:
                    results = check.run(ex, env)
                finally:
                    setattr(module, attr, keep)
            if all(why is None for what, why in results if what != check.WRITTEN):
                passing.append(name)
        out[ex] = (len(catalogue) - len(passing), len(catalogue), passing)
    return out


def tries(values, count):
    """Candidates a student must try for one number, knowing only its range over the class:
    every whole number in it for a count; for a real, the three-digit values in it, one in
    three (the rule accepts one unit either way), both signs if the class has both."""
    if count:
        return int(max(values) - min(values) + 1)
    mags = [abs(v) for v in values if v]
    lo, hi = min(mags), max(mags)
    n, e = 0, math.floor(math.log10(lo))
    while 10.0 ** e <= hi:
        first = max(100, math.floor(lo / 10.0 ** (e - 2)))
        last = min(999, math.ceil(hi / 10.0 ** (e - 2)))
        n += max(last - first + 1, 0)
        e += 1
    signs = 2 if min(values) < 0 < max(values) else 1
    return max(1, round(n / 3)) * signs


def fingerprint_cost(iterations=20000, repeat=20):
    """Seconds for one PBKDF2-SHA256 fingerprint of the earlier roster, on this machine."""
    start = time.perf_counter()
    for i in range(repeat):
        hashlib.pbkdf2_hmac("sha256", f"x={i}".encode(), b"name|EX1", iterations)
    return (time.perf_counter() - start) / repeat


def main(argv):
    if argv in (["--help"], ["-h"]):  # the module's docstring is its manual
        print(__doc__.strip())
        return 0
    students, seed = 200, 0
    for i, a in enumerate(argv):
        k, _, v = a.partition("=")
        if any(b.partition("=")[0] == k for b in argv[:i]):
            print(f"error: {k} is given twice; give it once", file=sys.stderr)
            return 2
        if k in ("--students", "--seed") and v.isdigit():
            students, seed = (int(v), seed) if k == "--students" else (students, int(v))
        else:
            print(f"error: unknown or malformed flag {a!r}; usage: python -m "
                  "exercises.answers.audit [--students=N] [--seed=N]", file=sys.stderr)
            return 2
    if students < 1:
        print("error: --students must be at least 1", file=sys.stderr)
        return 2
    from exercises.check import COUNTS
    names = random_names(students, seed)
    start = time.perf_counter()
    rows = separation(names)
    spent = time.perf_counter() - start
    print(f"Class of {students} names (seed {seed}); tables drawn in {spent:.1f} s.\n")
    print("| number | a catalogued mistake passes | a held-out mistake passes | "
          "4-digit hand work refused | tries to guess it |")
    print("|---|---|---|---|---|")
    guess = {}
    for (ex, k), row in rows.items():
        guess[(ex, k)] = tries(row["values"], k in COUNTS)
        print(f"| {ex} {k} | {row['catalogued']}/{students} | {row['held out']}/{students} | "
              f"{row['calculator']}/{students} | {guess[(ex, k)]} |")
    print()
    for ex, (refused, total, passing) in wrong_programs().items():
        print(f"{ex}: {refused} of {total} wrong programs refused"
              + (f"; passing: {', '.join(passing)}" if passing else ""))
    cost = fingerprint_cost()
    fast = 4 * 8  # the fastest laptop modelled: 4 times this machine per core, 8 cores
    smallest = min(guess.values())
    print(f"\nGuessing against a fingerprint check (the earlier roster): one PBKDF2-SHA256 "
          f"fingerprint of 20,000 iterations takes {cost * 1e3:.1f} ms here. The number with "
          f"the fewest candidates needs {smallest} tries: {smallest * cost / fast * 1e3:.1f} ms on "
          f"the fastest laptop modelled (4x per core, 8 cores), {smallest * cost * 1e3:.0f} ms on "
          f"one core of this machine. For 30 minutes on that laptop one fingerprint would have "
          f"to cost "
          f"{1800 * fast / smallest:.0f} s here, and a right sheet costs at least one per "
          "exercise: no check can be both. The student copy therefore holds no fingerprint.")
    return 0


def key_sheet():
    from exercises.answers.key import filled_sheet
    return filled_sheet("Ada Lovelace")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the reader (head, less) stopped early: nothing is wrong
        os._exit(0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
