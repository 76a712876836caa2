"""The class roster: for each student, a slow and salted fingerprint of their numbers
for exercises 1, 4 and 7, never the numbers themselves.

Why a fingerprint. The check must tell a student whether their numbers are right
without holding anything that computes or prints them. The teacher's handout
(``python -m exercises.handout OUT --roster=names.txt``) writes, per student and
exercise, PBKDF2-SHA256 (salted with the name and the exercise) of the exercise's
numbers rounded to three significant digits. The check fingerprints what the sheet
holds and compares. What it can reveal: whether *all* the numbers of one exercise are
right (one yes or no per exercise, never which number). Guessing one missing number
means trying thousands of candidates at about 20 ms each; two at once, millions.

How close counts as right: the same rule as the teacher's key:
within one unit of the third significant digit, compared on three-digit mantissas
(0.1234 and 0.124 agree: 123 against 124).
"""

import hashlib
import itertools
import json
import math
import os
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "roster.json")
ITERATIONS = 20000  # about 20 ms per fingerprint on a laptop core


def canonical(name):
    """A name as the roster, the tables and the fingerprints read it: stripped, and in
    Unicode's composed form (a keyboard may type "é" as e and an accent: NFC makes them one)."""
    return unicodedata.normalize("NFC", str(name).strip())


class RosterError(Exception):
    """A roster that is not this project's: one line, exit 2."""


def sig3(x):
    """x as (sign, M, e) with x ~ sign * M * 10**(e - 2) and M in 100..999; (1, 0, 0) for 0."""
    if x == 0:
        return (1, 0, 0)
    e = math.floor(math.log10(abs(x)))
    m = round(abs(x) / 10.0 ** (e - 2))
    if m == 1000:  # 0.9996 rounds up into the next decade
        m, e = 100, e + 1
    return (1 if x > 0 else -1, m, e)


def text(s, m, e):
    return "0" if m == 0 else f"{'-' if s < 0 else ''}{m}e{e}"


def accepted(v):
    """The three-digit values a key may have for the student's number v to count as right:
    the key's mantissa within one unit of v's, read on the key's own decade."""
    if v == 0:
        return {"0"}
    s, _, e = sig3(v)
    out = set()
    for ek in (e - 1, e, e + 1):  # a key just across a decade boundary
        m = round(abs(v) / 10.0 ** (ek - 2))
        out |= {text(s, mk, ek) for mk in (m - 1, m, m + 1) if 100 <= mk <= 999}
    return out or {text(*sig3(v))}


def within(v, key):
    """The key's rule for one number: True when v counts as the key's value."""
    return text(*sig3(key)) in accepted(v)


def fingerprint(student, ex, texts, iterations):
    """PBKDF2-SHA256 of one exercise's three-digit numbers (sorted by name), salted."""
    message = ";".join(f"{k}={t}" for k, t in sorted(texts.items()))
    salt = f"{canonical(student)}|{ex}".encode()
    return hashlib.pbkdf2_hmac("sha256", message.encode(), salt, iterations).hex()[:32]


def entry(student, key, tables, iterations=ITERATIONS):
    """A student's roster entry: which draw of each table they get (``tables``) and the
    fingerprint of each exercise's numbers on it (``key``: {"EX1": {name: value}, ...})."""
    out = {ex: fingerprint(student, ex, {k: text(*sig3(v)) for k, v in vals.items()},
                           iterations) for ex, vals in key.items()}
    return dict(out, tables=dict(tables))


def all_right(student, ex, values, want, iterations):
    """Whether the sheet's numbers of one exercise are all right: some choice of accepted
    three-digit values (one per number) has the roster's fingerprint. The exact readings
    are tried first, so a right sheet costs one fingerprint."""
    names = sorted(values)
    choices = [[text(*sig3(values[k]))] + sorted(accepted(values[k]) - {text(*sig3(values[k]))})
               for k in names]
    for combo in itertools.product(*choices):
        if fingerprint(student, ex, dict(zip(names, combo)), iterations) == want:
            return True
    return False


def load(path=PATH):
    """The roster as {"iterations": int, "students": {name: {EX: fingerprint}}}, or None
    when this copy has none."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
    except (OSError, ValueError):
        raise RosterError(f"{path} is not readable JSON") from None
    ok = (isinstance(r, dict) and isinstance(r.get("iterations"), int) and r["iterations"] > 0
          and isinstance(r.get("students"), dict)
          and all(isinstance(v, dict) for v in r["students"].values()))
    if not ok:
        raise RosterError(f"{path} is not a roster of this project")
    return r
