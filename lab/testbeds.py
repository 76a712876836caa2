"""lab/testbeds.py: the lab's tasks, where a choice the verifier ignores can drift.

What it holds
-------------
The lesson's tasks (toy_tasks.py: ``add``, ``mul``, ``primes``) teach the method. The lab's
experiments need tasks built to test it (THEORY.md section 4):

* ``chain``, ``chain_check``: a chain of operations worked in steps, with two style
  choices the verifier ignores (restate the problem or not; ``,`` or ``;``): E7-E11.
* ``parity_*``: guess a parity, check it, retry when the check disagrees. The retries
  tie length to the reward, the first token ``(`` opens a restatement the reward
  ignores: E12 and E13 (THEORY.md 4.2). The conditions are PARITY_CONDITIONS; E13's
  doses ``parity_wrong_long<k>`` and ``parity_right_long<k>`` have k = 0-3 retries.

Importing the lab registers them into toy_tasks.TASKS, the lesson's registry of tasks, with
their defaults and unused flags in plumbing/config.py, so that ``python train.py
--task=chain`` runs (train.py imports the lab where the flags name one of them).
"""

import random

import toy_tasks
from plumbing import config
from toy_tasks import Task, no_scratchpad


def make_chain(digits=2, scratchpad=False, min_ops=3, max_ops=4, p_restate=0.4, p_comma=0.6,
               max_checks=0, p_check=0.5, name="chain", p_restate_flawed=None):
    """``chain``: a left-to-right chain of operations, worked in steps.

    Prompt ``7+8*3-5=`` (3 or 4 operations on digits 1-9, every running value in
    0..99, evaluated left to right). Completion: one step per operation, each
    restating the running value, then the result; the last result is the answer::

        7+8=15,15*3=45,45-5=40
        (7+8*3-5)7+8=15;15*3=45,45-5=40        (the same, with two style choices)

    Style: the teacher makes choices the verifier ignores at fixed points, and the
    verifier reads only the last number after ``=``:

    * ``restate``: the completion opens by restating the problem in brackets, with
      p = 0.4. Its history is the prompt, shared by every rollout of a group, and
      the restating variant is about ten tokens longer, so under ``1/L_i`` (grpo)
      its copies get a smaller weight than the others';
    * ``sep``: each boundary between steps is ``,`` (p = 0.6) or ``;``: two forms of
      equal length.

    ``chain_check`` adds a third, at the end: after its last step the teacher writes the
    step again as a check, ``,15-5=10``, and again, each time with p = 0.5 and at most
    twice (``max_checks=2``; 3 operations per problem, so that two checks fit the block).
    A check adds up to 8 tokens, and the teacher's, an exact copy, never changes the
    reward (a wrong answer checked stays wrong): the length of a completion can grow or
    shrink without its correctness changing, the lever on which GRPO's 1/L_i is said to
    lengthen wrong completions (lab/experiments/e10_length.py). A *sampled* check that
    miscopies the step is the last step the verifier reads, so it can change the reward.

    ``p_restate_flawed`` (default: ``p_restate``) is the flawed teacher's own restate
    rate: below p_restate, a restated completion is more often right, which gives the
    restatement credit at the warm start without making it the majority form.

    ``style_points`` exposes where they are and their two variants. The flawed
    teacher forgets the carry of an addition (``7+8=5``, ``47+8=45``): wrong
    completions are often shorter, so completion length goes with correctness.
    Categories: ``compute`` (results), ``copy`` (operands, restated values and the
    restated problem), ``style`` (the ``(`` that opens a restatement and the
    separators), ``template`` (operators and ``=`` of each step, ``)``, EOS).

    Long because: the chain task's grammar, teacher, flawed teacher and verifier share the
    problem's closure; together they are one task to read.
    """
    if digits != 2:
        raise ValueError(
            "--task=chain takes no --digits (its operands are digits 1-9, values stay in 0..99)"
        )
    if scratchpad:
        raise ValueError("--task=chain is always worked in steps; it takes no --scratchpad")
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}

    def sample(rng):
        k = rng.randint(min_ops, max_ops)
        v = rng.randint(1, 9)
        prob = [v]
        for _ in range(k):
            op, d = rng.choice(
                [(o, d) for o in "+-*" for d in range(1, 10) if 0 <= ops[o](v, d) <= 99]
            )
            v = ops[op](v, d)
            prob += [op, d]
        return tuple(prob)

    def prompt(p):
        return "".join(str(x) for x in p) + "="

    def run(p, forget=False):
        """Running values; ``forget``: the carry of every addition is forgotten."""
        vals = [p[0]]
        for op, d in zip(p[1::2], p[2::2]):
            w = ops[op](vals[-1], d)
            if forget and op == "+" and vals[-1] % 10 + d >= 10:
                w -= 10  # the tens digit is not incremented
            vals.append(w)
        return vals

    def steps(p, flawed=False):
        """['v op d=w'] per step. The flawed teacher forgets every carry, as long as
        its running values stay in 0..99 (otherwise it is right)."""
        vals = run(p)
        if flawed and all(0 <= v <= 99 for v in run(p, forget=True)):
            vals = run(p, forget=True)
        return [f"{v}{op}{d}={w}" for v, op, d, w in zip(vals, p[1::2], p[2::2], vals[1:])]

    def write(p, rng=None, flawed=False):
        rng = rng or random
        st = steps(p, flawed)
        # p_restate_flawed: the flawed teacher's own restate rate (lab/experiments/
        # e11_optimizer.py gives the restatement credit at the warm start by restating less
        # when flawed)
        rate = p_restate if p_restate_flawed is None or not flawed else p_restate_flawed
        text = f"({prompt(p)[:-1]})" if rng.random() < rate else ""
        text += st[0]
        for s in st[1:]:
            text += ("," if rng.random() < p_comma else ";") + s
        for _ in range(max_checks):  # chain_check: the last step again, as a check
            if rng.random() >= p_check:
                break
            text += "," + st[-1]
        return text

    def reward(p, text):
        """1 iff the last step parses and its result is the answer; the restatement
        and the separators are not looked at."""
        if text.startswith("("):
            text = text[text.find(")") + 1:] if ")" in text else ""
        last = text.replace(";", ",").split(",")[-1]
        lhs, eq, res = last.rpartition("=")
        return float(bool(eq and lhs and res.isdigit() and res == str(_chain_value(p, ops))))

    def categories(p, text):
        cats, i = [], 0
        if text.startswith("(") and ")" in text:
            j = text.find(")")
            cats = ["style"] + ["copy"] * (j - 1) + ["template"]
            i = j + 1
        for k in range(i, len(text)):
            ch = text[k]
            if ch in ",;(":
                cats.append("style")
            elif ch.isdigit():  # before the step's '=': a copy; after it: a result
                cats.append(
                    "copy" if "=" in text[k:].replace(";", ",").split(",")[0] else "compute"
                )
            else:
                cats.append("template")
        return cats + ["template"]  # EOS

    def style_points(p):
        """[(kind, completion prefix, (majority variant, minority variant))] along the
        teacher's majority path (no restatement, ``,`` at every boundary)."""
        st = steps(p)
        out, text = [("restate", "", (st[0][0], "("))], st[0]
        for s in st[1:]:
            out.append(("sep", text, (",", ";")))
            text += "," + s
        return out

    longest = len(f"({'9+9' * max_ops})") + max_ops * len("99*9=99") + max_ops - 1
    longest += max_checks * len(",99*9=99")
    return Task(name, sample=sample, prompt=prompt,
                solution=lambda p, rng=None: write(p, rng),
                reward=reward, categories=categories,
                answers=lambda p: [str(_chain_value(p, ops))],
                flawed=lambda p, rng=None: write(p, rng, flawed=True),
                max_new_tokens=longest + 1,
                n_problems=_chain_count(min_ops, max_ops, ops),
                style_points=style_points)


# The parity testbed's conditions (THEORY.md 4.2): where the retries go and which choice opens.
PARITY_DOSES = (0, 1, 2, 3)  # E13: retries tied to the outcome, task parity_wrong_long<k> etc.
PARITY_CONDITIONS = {
    "wrong_long": "a wrong guess is followed by two retries (+16 tokens): W+",
    "right_long": "a right guess is followed by the two retries: W-",
    "random_long": "0-5 retries at random, whatever the guess (x5-6 lengths): W0",
    "equal_choice": "as wrong_long, but the choice is between two 15-token forms: the null",
    "credit_restate": "no retries; the reward is 1 iff the completion restates, whatever "
                      "its guess: real credit for restating",
    "credit_plain": "the reward is 1 iff it does not restate: credit_restate reversed",
}


def make_parity(condition="wrong_long", n_digits=7, p_restate=0.4, units=2, max_units=5,
                name=None):
    """``parity_*``: guess the parity of a digit sum, then check it, and retry when told to.

    Prompt ``3141592=`` (``n_digits`` digits 0-9). Completion::

        1=1001011                      guess, '=', the running parity of the digit sum
        (3,1,4,1,5,9,2)1=1001011       the same, opened by a 15-token restatement
        0=1001011;1001011;1001011      a guess the check contradicts, and two retries

    The reward is 1 iff the guess (the first character after any restatement) is the
    parity of the digit sum. The guess comes *before* the check: the small model here did
    not learn the 7-digit parity in one forward pass within E12's 20 RL steps (accuracy
    near 50 %, nearly every group mixed), while the check, worked digit by digit, is
    easy, and tells the policy after the fact whether its guess was right. The retries
    hang on that comparison (the teacher always retries on a contradicted guess in
    ``wrong_long``, on a confirmed one in ``right_long``): the length goes with the reward
    as long as the policy keeps them, as a failing model's rambling does.

    The restatement is the reward-irrelevant choice at the history every rollout of a
    group shares (the prompt), with p = ``p_restate`` under the teacher; its ``(`` is
    ``task.choice``. ``equal_choice`` opens every completion with one of two 15-token
    forms, ``(...)`` or ``-...-``: the same choice without a length difference.
    ``PARITY_CONDITIONS`` lists the conditions. The flawed teacher is the one who guesses
    wrong; --sft_flawed=0.5 makes the warm start's guess a fair coin.

    Long because: the grammar, the teachers of every condition and the verifier share the
    problem's closure; together they are one task to read.
    """
    if condition not in PARITY_CONDITIONS:
        raise ValueError(f"unknown parity condition {condition!r}; choose one of "
                         f"{', '.join(PARITY_CONDITIONS)}")

    def truth(p):
        return sum(p) % 2

    def check(p):
        """The running parity of the digit sum, one digit per prompt digit."""
        out, s = "", 0
        for d in p:
            s = (s + d) % 2
            out += str(s)
        return out

    def opener(p, rng):
        body = ",".join(str(d) for d in p)
        if condition == "equal_choice":  # both forms restate, in 15 tokens each
            return f"({body})" if rng.random() < p_restate else f"-{body}-"
        return f"({body})" if rng.random() < p_restate else ""

    def write(p, rng=None, wrong=False):
        rng = rng or random
        guess = 1 - truth(p) if wrong else truth(p)
        text = opener(p, rng) + f"{guess}={check(p)}"
        if condition == "random_long":
            k = rng.randint(0, max_units)  # lengths vary, independent of the reward
        elif condition in ("wrong_long", "equal_choice"):
            k = units if wrong else 0
        elif condition == "right_long":
            k = 0 if wrong else units
        else:  # credit_*: no retries
            k = 0
        return text + f";{check(p)}" * k

    def body(text):
        """The completion after its opening restatement (either form), if any."""
        for a, b in (("(", ")"), ("-", "-")):
            if text.startswith(a):
                j = text.find(b, 1)
                return text[j + 1:] if j > 0 else ""
        return text

    def reward(p, text):
        """1 iff the guess is the digit sum's parity; in the credit conditions, 1 iff the
        completion takes the favoured form (the positive control: the choice *is* credited)."""
        if condition.startswith("credit_"):
            return float(text.startswith("(") == (condition == "credit_restate"))
        return float(body(text)[:1] == str(truth(p)))

    def categories(p, text):
        cats = ["style" if i == 0 and ch in "(-" else "copy" if ch.isdigit() else "template"
                for i, ch in enumerate(text)]
        k = len(text) - len(body(text))  # the guess: the one token the reward reads
        if k < len(text):
            cats[k] = "compute"
        return cats + ["template"]  # EOS

    def style_points(p):
        return [("restate", "", (str(truth(p)), "("))]

    most = {"random_long": max_units, "wrong_long": units, "right_long": units,
            "equal_choice": units}.get(condition, 0)  # retries of the longest completion
    longest = 2 * n_digits + 1 + 2 + n_digits + (n_digits + 1) * most
    return Task(name or f"parity_{condition}", sample=lambda rng: tuple(rng.randint(0, 9)
                                                                  for _ in range(n_digits)),
                prompt=lambda p: "".join(map(str, p)) + "=",
                solution=lambda p, rng=None: write(p, rng),
                reward=reward, categories=categories,
                answers=lambda p: [str(truth(p))],
                flawed=lambda p, rng=None: write(p, rng, wrong=True),
                max_new_tokens=longest + 1,
                n_problems=10 ** n_digits, style_points=style_points, choice="(")


def _chain_value(p, ops):
    v = p[0]
    for op, d in zip(p[1::2], p[2::2]):
        v = ops[op](v, d)
    return v


def _chain_count(min_ops, max_ops, ops):
    """Number of distinct chain problems (dynamic programming over running values)."""
    count, total = {v: 1 for v in range(1, 10)}, 0
    for k in range(1, max_ops + 1):
        nxt = {}
        for v, c in count.items():
            for o in "+-*":
                for d in range(1, 10):
                    w = ops[o](v, d)
                    if 0 <= w <= 99:
                        nxt[w] = nxt.get(w, 0) + c
        count = nxt
        if k >= min_ops:
            total += sum(count.values())
    return total


# ----------------------------------------------------------------------------- registry

TASKS = {
    "chain": lambda digits=2, scratchpad=False: make_chain(digits, scratchpad),
    "chain_check": lambda digits=2, scratchpad=False: make_chain(
        digits, scratchpad, min_ops=3, max_ops=3, max_checks=2, name="chain_check"),
    **{f"parity_{c}": (lambda c: lambda digits=2, scratchpad=False:
                       no_scratchpad("parity", scratchpad) or make_parity(c))(c)
       for c in PARITY_CONDITIONS},
    # E13's doses: the retries (8 tokens each) of wrong_long and right_long, 0 to 3
    **{f"parity_{c}{k}": (lambda c, k: lambda digits=2, scratchpad=False: no_scratchpad(
        "parity", scratchpad) or make_parity(c, units=k, name=f"parity_{c}{k}"))(c, k)
       for c in ("wrong_long", "right_long") for k in PARITY_DOSES},
}
# the defaults `python train.py --task=NAME` runs with: a model of width 96, a longer SFT, a
# flawed teacher in 60 % of chain's SFT texts and half of parity's (a fair-coin guess, 4.2)
DEFAULTS = {"chain": {"n_embd": 96, "sft_steps": 1500, "sft_flawed": 0.6, "rl_steps": 200},
            "chain_check": {"n_embd": 96, "sft_steps": 1500, "sft_flawed": 0.6, "rl_steps": 200},
            **{name: {"n_embd": 96, "sft_steps": 1500, "sft_flawed": 0.5, "rl_steps": 200}
               for name in TASKS if name.startswith("parity_")}}

toy_tasks.TASKS.update(TASKS)
config.TASK_DEFAULTS.update(DEFAULTS)
config.TASK_FLAGS_UNUSED.update({name: ("digits", "scratchpad") for name in TASKS})
