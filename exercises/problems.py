"""Your own small tables for the by-hand exercises (1, 4 and 7 of EXERCISES.md).

Every student gets different numbers, drawn from the name or id written in
STUDENT in exercises/sheet.py, so answers cannot be copied from a neighbour. Which of
your name's draws you get (``variant``) is the class roster's (exercises/roster.json):
your teacher's copy picks, per student, a draw where every number is well conditioned
and no common mistake happens to give the right number. A name is found on the roster
whatever its case and spacing (roster.fold).

    python -m exercises.problems            # test the install, then print your tables
    python -m exercises.problems --no_torch # your tables only, with Python alone

It is the first command of the class, so it tests the install first: it imports torch,
numpy and tiktoken and runs a tiny model forward and backward. Whatever is missing is
said in one line. Nothing here computes an answer: it prints the inputs only.
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
    from exercises.roster import fold
    tag = f"{fold(student)}/{ex}" + (f"/{variant}" if variant else "")
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
    """(the roster's spelling of the name, {"EX1": draw, "EX4": ..., "EX7": ...}), or None
    when the student is not on the class roster (or the copy has none)."""
    from exercises import roster
    names = (roster.load() or {"students": {}})["students"]
    found = roster.find(student, names)
    return (found, dict(names[found])) if found else None


def show(student):
    found = tables(student)
    if found is None:
        from exercises import roster
        near = roster.near(student, (roster.load() or {"students": {}})["students"])
        print(f"note: {student!r} is not on this class's roster (exercises/roster.json): these "
              "are not the tables your teacher marks; write your name as your teacher has it"
              + (f" (did you mean {near!r}?)" if near else "") + "\n")
        v = {"EX1": 0, "EX4": 0, "EX7": 0}
    else:
        student, v = found
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
    except SyntaxError as e:  # the line to fix, and Python's own words for what is wrong
        raise SheetError(f"{path}, line {e.lineno}: not Python ({e.msg})") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
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


class SetupError(Exception):
    """The install cannot run the exercises: one line saying what is missing, exit 2."""


SETUP_FIX = ("follow Setup in EXERCISES.md (pip install -r requirements.txt), or pair with a "
             "neighbour; python -m exercises.problems --no_torch prints your tables meanwhile")


def test_setup():
    """What the exercises need, tried as they use it: torch, numpy and tiktoken import, and
    a one-layer model of model.py runs forward and backward with finite, non-zero gradients.
    Returns a line that says so; raises SetupError naming what failed."""
    import importlib
    import time
    start = time.monotonic()
    missing = []
    for module in ("torch", "numpy", "tiktoken"):
        try:
            importlib.import_module(module)
        except Exception as e:  # ImportError, or a broken build (OSError, RuntimeError)
            missing.append(f"{module} ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
                           if str(e) else f"{module} ({type(e).__name__})")
    if missing:
        raise SetupError(f"cannot import {'; '.join(missing)} in {sys.executable}: {SETUP_FIX}")
    try:
        import torch
        import model
        torch.manual_seed(0)
        net = model.GPT(model.GPTConfig(n_layer=1, n_head=1, n_embd=8, block_size=8))
        idx = torch.randint(0, 31, (2, 6), device="cpu")
        model.token_logprobs(net(idx)[:, :-1], idx[:, 1:]).sum().backward()
        grads = [p.grad for p in net.parameters() if p.grad is not None]
        ok = grads and all(bool(torch.isfinite(g).all()) for g in grads) and any(
            bool(g.abs().sum() > 0) for g in grads)
    except Exception as e:  # the install imports but does not run
        raise SetupError(f"torch {getattr(torch, '__version__', '?')} imports but a tiny model "
                         f"fails to run ({type(e).__name__}: {str(e)[:80]}): {SETUP_FIX}") from None
    if not ok:
        raise SetupError(f"torch {torch.__version__} runs a tiny model but its gradients are "
                         f"zero or not finite: {SETUP_FIX}")
    return (f"setup ok: torch {torch.__version__} ran a tiny model forward and backward "
            f"({time.monotonic() - start:.1f} s)")


def main(argv):
    """Test the install (unless --no_torch), then print the tables of the sheet's STUDENT."""
    if argv in (["--help"], ["-h"]):  # the module's docstring is its manual
        print(__doc__.strip())
        return 0
    if argv not in ([], ["--no_torch"]):
        print("error: usage: python -m exercises.problems [--no_torch]", file=sys.stderr)
        return 2
    try:
        if not argv:
            print(test_setup() + "\n")
        sheet = read_sheet(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sheet.py"))
    except (SetupError, SheetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not str(getattr(sheet, "STUDENT", "") or "").strip():
        print("error: write your name or student id in STUDENT in exercises/sheet.py first",
              file=sys.stderr)
        return 2
    from exercises.roster import RosterError
    try:
        show(str(sheet.STUDENT))
    except RosterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the reader (head, less) stopped early: nothing is wrong
        os._exit(0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
