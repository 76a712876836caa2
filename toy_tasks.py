"""toy_tasks.py: verifiable arithmetic tasks, their tokenizer and token categories.

What it teaches
---------------
RL with verifiable rewards needs three things per task: problems to sample,
a verifier ``reward(problem, completion) -> r`` with ``r = 1`` for a correct
final answer and ``0`` otherwise (malformed output included), and, for SFT, a
canonical solution text. The cancellation diagnostics (THEORY.md section 4)
also need to know *what kind* of token each completion character is:

* ``template``: format, separators and EOS (the same in every rollout);
* ``copy``:     an operand digit restated;
* ``compute``:  a digit that results from computation.

Tasks
-----
* ``add``:    ``347+285=`` -> ``632``. With ``scratchpad=True`` the columns are
  worked right to left first: ``7+5=12,4+8+1=13,3+2+1=6;632``.
* ``mul``:    ``47*85=`` -> ``3995``. Scratchpad: ``47*5=235,47*80=3760;3995``.
* ``primes``: ``58=`` -> ``11+47`` (or ``5+53``, ``17+41``, ``29+29`` ...): write an
  even N as a sum of two primes. Several completions are correct, which the
  solution-probability-drift measurement of THEORY.md needs. Its SFT text is
  a random correct pair, so the warm start spreads mass over several answers.

The tokenizer is a ``tiktoken.Encoding`` built here, character level over the
alphabet below plus two specials, EOS and PAD. Nothing is downloaded.
Characters outside the alphabet raise ``ValueError`` (tiktoken itself would
panic on them).
"""

import random
from dataclasses import dataclass
from typing import Callable

import tiktoken

ALPHABET = "0123456789+*=,;-()"  # new characters go at the end: old ids stay
EOS_TEXT, PAD_TEXT = "<|eos|>", "<|pad|>"
EOS = len(ALPHABET)
PAD = EOS + 1
VOCAB_SIZE = PAD + 1  # ids the model reads
N_OUT = PAD           # ids the model may emit: the alphabet and EOS (PAD is last, input-only)

ENC = tiktoken.Encoding(
    name="toy-arith-char",
    pat_str=r"[\s\S]",  # one piece per character, so no merges happen
    mergeable_ranks={c.encode(): i for i, c in enumerate(ALPHABET)},
    special_tokens={EOS_TEXT: EOS, PAD_TEXT: PAD},
)


def check_text(text, alphabet=ALPHABET):
    """Raise a one-line ValueError naming the first foreign character."""
    for i, ch in enumerate(text):
        if ch not in alphabet:
            raise ValueError(f"character {ch!r} at position {i} of {text!r} is outside "
                             f"the alphabet {alphabet!r}")


def encode(text):
    """Text (alphabet characters only) -> token ids. Specials are not parsed."""
    check_text(text)
    return ENC.encode_ordinary(text)


def decode(ids):
    """Token ids -> text, cut at the first EOS; PAD ids are dropped."""
    out = []
    for t in ids:
        t = int(t)
        if t == EOS:
            break
        if t != PAD:
            out.append(t)
    return ENC.decode(out)


# ----------------------------------------------------------------------------- tasks

@dataclass
class Task:
    name: str
    sample: Callable          # rng -> problem (a tuple of ints)
    prompt: Callable          # problem -> str
    solution: Callable        # (problem, rng=None) -> canonical completion text
    reward: Callable          # (problem, completion_text) -> float
    categories: Callable      # (problem, solution_text) -> list[str], one per char + EOS
    answers: Callable         # problem -> list of all correct final answers (texts)
    flawed: Callable          # (problem, rng=None) -> a flawed teacher's solution text
    max_new_tokens: int       # longest completion + EOS
    n_problems: int           # size of the problem space
    style_points: Callable = (
        None  # problem -> [(kind, prefix, (variant_a, variant_b))], choices the verifier ignores
    )
    choice: str = None  # a token the first completion position may choose, its drift logged

    def encode(self, text):
        """Text -> token ids (every task writes in one alphabet, ALPHABET)."""
        return encode(text)

    def decode(self, ids):
        """Token ids -> text, up to the first EOS."""
        return decode(ids)


def _final(text, scratchpad):
    """The final-answer part of a completion, or None if malformed."""
    if scratchpad:
        if text.count(";") != 1:
            return None
        text = text.split(";")[1]
    return text if text.isdigit() else None


def _label(text, copy_pos=()):
    """Digits are 'compute' unless their position is in copy_pos; others 'template'."""
    cats = ["compute" if ch.isdigit() else "template" for ch in text]
    for i in copy_pos:
        cats[i] = "copy"
    return cats + ["template"]  # EOS


def make_add(digits=2, scratchpad=False):
    lo, hi = 10 ** (digits - 1), 10 ** digits - 1

    def solution(p, rng=None, carries=True):
        a, b = p
        da, db = str(a)[::-1], str(b)[::-1]
        steps, out, carry = [], "", 0
        for i in range(digits):
            s = int(da[i]) + int(db[i]) + carry
            steps.append(f"{da[i]}+{db[i]}" + (f"+{carry}" if carry else "") + f"={s}")
            out = (str(s) if i == digits - 1 else str(s % 10)) + out
            carry = s // 10 if carries else 0
        return out if not scratchpad else ",".join(steps) + ";" + out

    def categories(p, text):
        if not scratchpad:
            return _label(text)
        copy_pos, i = [], 0
        for step in text.split(";")[0].split(","):
            copy_pos += [i, i + 2]  # the two operand digits restated
            i += len(step) + 1
        return _label(text, copy_pos)

    def reward(p, text):
        ans = _final(text, scratchpad)
        return float(ans is not None and ans == str(p[0] + p[1]))

    sol_len = len(solution((hi, hi)))
    return Task(f"add{digits}" + ("_scratch" if scratchpad else ""),
                sample=lambda rng: (rng.randint(lo, hi), rng.randint(lo, hi)),
                prompt=lambda p: f"{p[0]}+{p[1]}=",
                solution=solution, reward=reward, categories=categories,
                answers=lambda p: [str(p[0] + p[1])],
                flawed=lambda p, rng=None: solution(p, carries=False),
                max_new_tokens=sol_len + 1, n_problems=(hi - lo + 1) ** 2)


def make_mul(digits=2, scratchpad=False):
    lo, hi = 10 ** (digits - 1), 10 ** digits - 1

    def solution(p, rng=None):
        a, b = p
        if not scratchpad:
            return str(a * b)
        db = str(b)[::-1]
        steps = [f"{a}*{d}{'0' * i}={a * int(d) * 10 ** i}" for i, d in enumerate(db)]
        return ",".join(steps) + ";" + str(a * b)

    def categories(p, text):
        if not scratchpad:
            return _label(text)
        copy_pos, i = [], 0
        for step in text.split(";")[0].split(","):
            lhs = step.split("=")[0]
            copy_pos += [i + j for j, ch in enumerate(lhs) if ch.isdigit()]
            i += len(step) + 1
        return _label(text, copy_pos)

    def reward(p, text):
        ans = _final(text, scratchpad)
        return float(ans is not None and ans == str(p[0] * p[1]))

    def flawed(p, rng=None):
        """Adds the partial products column by column but forgets the carries."""
        a, b = p
        parts = [str(a * int(d) * 10 ** i) for i, d in enumerate(str(b)[::-1])]
        width = max(len(x) for x in parts)
        cols = [sum(int(x.zfill(width)[j]) for x in parts) for j in range(width)]
        wrong = str(cols[0]) + "".join(str(c % 10) for c in cols[1:])
        text = solution(p)
        return text[: len(text) - len(str(a * b))] + wrong

    sol_len = max(len(solution((hi, hi))), len(solution((hi, lo))))
    return Task(f"mul{digits}" + ("_scratch" if scratchpad else ""),
                sample=lambda rng: (rng.randint(lo, hi), rng.randint(lo, hi)),
                prompt=lambda p: f"{p[0]}*{p[1]}=",
                solution=solution, reward=reward, categories=categories,
                answers=lambda p: [str(p[0] * p[1])],
                flawed=flawed,
                max_new_tokens=sol_len + 1, n_problems=(hi - lo + 1) ** 2)


def _is_prime(n):
    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def make_primes(max_n=198):
    evens = list(range(10, max_n + 1, 2))

    def pairs(p):
        n = p[0]
        return [(q, n - q) for q in range(2, n // 2 + 1) if _is_prime(q) and _is_prime(n - q)]

    def solution(p, rng=None):
        q, r = (rng or random).choice(pairs(p))
        return f"{q}+{r}"

    def reward(p, text):
        parts = text.split("+")
        if len(parts) != 2 or not all(s.isdigit() and s[0] != "0" for s in parts):
            return 0.0
        q, r = int(parts[0]), int(parts[1])
        return float(q + r == p[0] and _is_prime(q) and _is_prime(r))

    def flawed(p, rng=None):
        """Picks a prime q but does not check that N - q is prime."""
        n = p[0]
        bad = [q for q in range(2, n // 2 + 1) if _is_prime(q) and not _is_prime(n - q)]
        if not bad:
            return solution(p, rng)
        q = (rng or random).choice(bad)
        return f"{q}+{n - q}"

    return Task(
        "primes",
        sample=lambda rng: (rng.choice(evens),),
        prompt=lambda p: f"{p[0]}=",
        solution=solution,
        reward=reward,
        categories=lambda p, text: _label(text),
        answers=lambda p: [f"{q}+{r}" for q, r in pairs(p)]
        + [f"{r}+{q}" for q, r in pairs(p) if q != r],
        flawed=flawed,
        max_new_tokens=len(f"{max_n}+{max_n}") + 1,
        n_problems=len(evens),
    )


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

# name -> constructor(digits, scratchpad) -> Task. A constructor raises
# ValueError (one line) for options that do not apply to its task. To add a
# task, write a constructor that returns a Task and put it here (docs/NOTES.md:
# "Add your own task").
TASKS = {
    "add": make_add,
    "mul": make_mul,
    "primes": lambda digits=2, scratchpad=False: _no_scratchpad("primes", scratchpad)
    or make_primes(),
    "chain": lambda digits=2, scratchpad=False: make_chain(digits, scratchpad),
    "chain_check": lambda digits=2, scratchpad=False: make_chain(
        digits, scratchpad, min_ops=3, max_ops=3, max_checks=2, name="chain_check"),
    **{f"parity_{c}": (lambda c: lambda digits=2, scratchpad=False:
                       _no_scratchpad("parity", scratchpad) or make_parity(c))(c)
       for c in PARITY_CONDITIONS},
    # E13's doses: the retries (8 tokens each) of wrong_long and right_long, 0 to 3
    **{f"parity_{c}{k}": (lambda c, k: lambda digits=2, scratchpad=False: _no_scratchpad(
        "parity", scratchpad) or make_parity(c, units=k, name=f"parity_{c}{k}"))(c, k)
       for c in ("wrong_long", "right_long") for k in PARITY_DOSES},
}


def _no_scratchpad(name, scratchpad):
    if scratchpad:
        raise ValueError(f"--task={name} has no scratchpad")


def make_task(name, digits=2, scratchpad=False):
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name](digits=digits, scratchpad=scratchpad)


# ----------------------------------------------------------------------------- data

def eval_problems(task, n, seed):
    """A held-out problem set fixed by seed: n distinct problems (fewer if the
    problem space is small: at most a fifth of it is held out)."""
    rng = random.Random(10_000 + seed)
    n = min(n, max(1, task.n_problems // 5))
    seen, out = set(), []
    while len(out) < n:
        p = task.sample(rng)
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def train_sampler(task, held_out, seed):
    """A function () -> problem drawing training problems, never a held-out one.
    ``draw.rng`` is its random.Random, so that a resumed run continues the stream."""
    rng, banned = random.Random(seed), set(held_out)

    def draw():
        while True:
            p = task.sample(rng)
            if p not in banned:
                return p
    draw.rng = rng  # the stream's state, saved in a resumable checkpoint (plumbing/checkpoint.py)
    return draw


def longest_prompt(task, n=200):
    """Longest prompt (tokens) among n problems drawn with a fixed seed: with
    ``task.max_new_tokens`` it sizes the block a model of this task needs."""
    rng = random.Random(0)
    return max(len(task.prompt(task.sample(rng))) for _ in range(n))
