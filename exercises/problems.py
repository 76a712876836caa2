"""Your own small tables for the by-hand exercises (1, 4 and 7 of EXERCISES.md).

Every student gets different numbers, drawn from the name or id written in
STUDENT in exercises/sheet.py, so answers cannot be copied from a neighbour. Which of
your name's draws you get (``variant``) is the class roster's (exercises/roster.json):
your teacher's copy picks, per student, a draw where every number is well conditioned
and no common mistake happens to give the right number.

    python -m exercises.problems          # print your tables

Nothing here computes an answer: it prints the inputs only.
"""

import hashlib
import os
import random
import sys

if __name__ == "__main__":  # Ctrl-C at any moment, during the imports too: one line
    import signal
    signal.signal(signal.SIGINT, lambda *_: (sys.stderr.write("\ninterrupted\n"), os._exit(130)))


def rng(student, ex, variant=0):
    """A random stream fixed by (student, exercise, variant)."""
    from exercises.roster import canonical
    tag = f"{canonical(student).lower()}/{ex}" + (f"/{variant}" if variant else "")
    return random.Random(int(hashlib.sha256(tag.encode()).hexdigest()[:16], 16))


def group(r, G=4):
    """G rewards in {0, 1}, not all equal, and G different lengths from 2 to 9."""
    while True:
        rewards = [r.randint(0, 1) for _ in range(G)]
        if 0 < sum(rewards) < G:
            return rewards, r.sample(range(2, 10), G)


def ex1(student, variant=0):
    """One group, on-policy. Token 0 of every completion is the same token."""
    r = rng(student, "ex1", variant)
    rewards, lengths = group(r)
    return {"rewards": rewards, "lengths": lengths, "k": r.randint(1, 4), "L_max": 10}


def ex4(student, variant=0):
    """One group, off-policy: s_i is rollout i's sequence ratio exp(mean_t log rho)."""
    r = rng(student, "ex4", variant)
    rewards, lengths = group(r)
    s = [round(r.uniform(0.85, 1.15), 2) for _ in range(4)]
    return {"rewards": rewards, "lengths": lengths, "s": s, "k": r.randint(1, 4)}


def ex7(student, variant=0):
    """A 2-digit addition, and a range of operands for the plain (no scratchpad) task."""
    r = rng(student, "ex7", variant)
    lo = r.randint(25, 45)  # some sums have two digits, some three
    return {
        "problem": (r.randint(10, 99), r.randint(10, 99)),
        "lo": lo,
        "hi": r.randint(max(lo + 15, 55), 75),
    }


def tables(student):
    """{"EX1": draw, "EX4": ..., "EX7": ...} from the class roster, or None when the
    student is not on it (or the copy has none)."""
    from exercises import roster
    r = roster.load()
    entry = (r or {"students": {}})["students"].get(roster.canonical(student))
    return dict(entry) if entry else None


def show(student):
    v = tables(student)
    if v is None:
        print(f"note: {student!r} is not on this class's roster (exercises/roster.json): these "
              "are not the tables your teacher marks; write your name as your teacher has it\n")
        v = {"EX1": 0, "EX4": 0, "EX7": 0}
    p = ex1(student, v["EX1"])
    print(f"Tables for STUDENT = {student!r}\n")
    print("Exercise 1: one group of G = 4 rollouts, on-policy; token 0 is shared.")
    print("  rollout  reward  length L_i")
    for i, (x, n) in enumerate(zip(p["rewards"], p["lengths"]), 1):
        print(f"  {i:>7}  {x:>6}  {n:>10}")
    print(
        f"  the optimizer step is this one group (N = 4); k = {p['k']}; dr_grpo's L_max = "
        f"{p['L_max']}\n"
    )
    p = ex4(student, v["EX4"])
    print("Exercise 4: one group of G = 4 rollouts, off-policy; token 0 is shared.")
    print("  rollout  reward  length L_i  sequence ratio s_i")
    for i, (x, n, s) in enumerate(zip(p["rewards"], p["lengths"], p["s"]), 1):
        print(f"  {i:>7}  {x:>6}  {n:>10}  {s:>18.2f}")
    print(f"  N = 4; clip = sym with eps = 0.2 (no s_i reaches a bound); k = {p['k']}\n")
    p = ex7(student, v["EX7"])
    a, b = p["problem"]
    print(f"Exercise 7: the problem {a}+{b}= of --task=add --scratchpad=true, and the plain task")
    print(f"  (no scratchpad) over every problem a+b= with {p['lo']} <= a <= {p['hi']} and "
          f"{p['lo']} <= b <= {p['hi']}")
    print("  (a+b= and b+a= are two problems).")



def read_sheet(path):
    """The answer sheet as data, never run as code: every top-level statement must assign
    a literal (a number, a string, None, or a dict of those) to a NAME, and nothing else is
    read. A sheet that does anything else is refused with the line that does it."""
    import ast
    from types import SimpleNamespace
    try:
        if os.path.getsize(path) > SHEET_BYTES:
            raise SheetError(f"{path} is larger than a sheet can be ({SHEET_BYTES >> 10} KB)")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as e:
        raise SheetError(f"{path} is not a readable sheet ({type(e).__name__})") from None
    except (RecursionError, MemoryError):  # the parser's own stack, not the machine's memory
        raise SheetError(f"{path} nests an expression too deeply to be read as data") from None
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            raise SheetError(f"{path}, line {node.lineno}: the sheet may only assign values "
                             "(NAME = number, text, None or a dict of those)")
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise SheetError(f"{path}, line {node.lineno}: {node.targets[0].id} is not a "
                             "plain value") from None
        leaves = value.values() if isinstance(value, dict) else [value]
        if not all(v is None or type(v) in (int, float, str) for v in leaves):
            raise SheetError(f"{path}, line {node.lineno}: {node.targets[0].id} holds "
                             "something other than numbers, text or None")
        values[node.targets[0].id] = value
    return SimpleNamespace(**values)


class SheetError(Exception):
    """A sheet that is not plain data (read_sheet): one line, exit 2."""


SHEET_BYTES = 256 << 10  # a full sheet with long answers is under 20 KB


def main():
    try:
        sheet = read_sheet(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sheet.py"))
    except SheetError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if not str(getattr(sheet, "STUDENT", "") or "").strip():
        print(
            "error: write your name or student id in STUDENT in exercises/sheet.py first",
            file=sys.stderr,
        )
        sys.exit(2)
    from exercises.roster import RosterError
    try:
        show(str(sheet.STUDENT))
    except RosterError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
