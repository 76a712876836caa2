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

The lab's testbeds (``chain``, ``parity_*``: lab/testbeds.py) join ``TASKS`` when the lab
is imported; their choices the verifier ignores are what its experiments measure.

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


# ----------------------------------------------------------------------------- registry

# name -> constructor(digits, scratchpad) -> Task. A constructor raises
# ValueError (one line) for options that do not apply to its task. To add a
# task, write a constructor that returns a Task and put it here (docs/NOTES.md:
# "Add your own task").
TASKS = {
    "add": make_add,
    "mul": make_mul,
    "primes": lambda digits=2, scratchpad=False: no_scratchpad("primes", scratchpad)
    or make_primes(),
}
LESSON = frozenset(TASKS)  # the lesson's own; the lab adds its testbeds (lab/testbeds.py)


def no_scratchpad(name, scratchpad):
    """A task without a scratchpad refuses --scratchpad=true (one line)."""
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
