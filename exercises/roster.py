"""The class roster: for each student, which draw of each table they get.

The teacher's handout (``python -m exercises.handout OUT --roster=names.txt``) writes
exercises/roster.json: {"version": 2, "students": {name: {"EX1": d, "EX4": d, "EX7": d}}},
where d is the draw of that exercise's table (exercises/problems.py). The teacher picks
each student's draws so that common mistakes give numbers visibly off the key. The
roster holds no number and no fingerprint of one: the student copy cannot tell a right
number from a wrong one (EXERCISES.md says why), so guessing against it gains nothing.

How close counts as right, on the teacher's side: within one unit of the third
significant digit, compared on three-digit mantissas (0.1234 and 0.124 agree: 123
against 124). Counts are whole numbers and must be exact.
"""

import decimal
import json
import math
import os
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "roster.json")
VERSION = 2
VARIANTS = 1000  # draws a table may have; more in a roster means it is not this project's
MAX_BYTES = 64 << 20  # a roster of 10,000 names is about 0.6 MB


def canonical(name):
    """A name as the roster, the tables and the sheet read it: Unicode's composed form
    (a keyboard may type "é" as e and an accent), runs of spaces as one space, stripped."""
    return " ".join(unicodedata.normalize("NFC", str(name)).split())


def fold(name):
    """The one key by which two spellings of a name are the same student, everywhere: the
    roster, the tables, the check, the hand-in and the marker. ``canonical``, then lower
    case: "ada  LOVELACE" is "Ada Lovelace". The tables are drawn from it too
    (problems.rng), so two spellings that match also get the same numbers."""
    return canonical(name).lower()


def find(name, names):
    """The spelling ``names`` (a roster's names) has for ``name``, compared by ``fold``; None
    when the name is not there."""
    key = fold(name)
    return next((n for n in names if fold(n) == key), None)


def near(name, names):
    """The roster name closest to ``name`` (a typing slip, say), or None: what a line that
    refuses a name suggests instead."""
    import difflib
    folded = {fold(n): n for n in names}
    best = difflib.get_close_matches(fold(name), list(folded), n=1, cutoff=0.75)
    return folded[best[0]] if best else None


def name_problem(name):
    """None for a name a roster may hold, else why not: control characters, line or
    paragraph separators and byte-order marks split or hide a name."""
    for ch in name:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch == "\ufeff":
            return f"holds the control or separator character U+{ord(ch):04X}"
    return None


class RosterError(Exception):
    """A roster that is not this project's: one line, exit 2."""


def sig3(x):
    """x as (sign, M, e) with x ~ sign * M * 10**(e - 2) and M in 100..999; (1, 0, 0) for 0."""
    if x == 0:
        return (1, 0, 0)
    e = math.floor(math.log10(abs(x)))
    m = mantissa(x, e)
    if m == 1000:  # 0.9996 rounds up into the next decade
        m, e = 100, e + 1
    return (1 if x > 0 else -1, m, e)


def mantissa(x, e):
    """round(|x| / 10**(e - 2)): in floats where they hold it, else exactly (a subnormal
    such as 1e-322, or an integer of 400 digits, which floats cannot scale)."""
    if 1e-290 < abs(x) < 1e290:
        return round(abs(x) / 10.0 ** (e - 2))
    return int(abs(decimal.Decimal(x)).scaleb(2 - e).to_integral_value(decimal.ROUND_HALF_EVEN))


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
        m = mantissa(v, ek)
        out |= {text(s, mk, ek) for mk in (m - 1, m, m + 1) if 100 <= mk <= 999}
    return out or {text(*sig3(v))}


def within(v, key):
    """The rule for one number: True when v counts as the key's value."""
    return text(*sig3(key)) in accepted(v)


def load(path=PATH):
    """The roster as {"version": 2, "students": {name: {EX: draw}}}, or None when this copy
    has none. Anything else is refused (RosterError), before it is used."""
    if not os.path.exists(path):
        return None
    try:
        if os.path.getsize(path) > MAX_BYTES:
            raise RosterError(f"{path} is larger than any class roster ({MAX_BYTES >> 20} MB)")
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
    except (OSError, ValueError, RecursionError):
        raise RosterError(f"{path} is not readable JSON") from None
    if not (isinstance(r, dict) and set(r) == {"version", "students"} and r["version"] == VERSION
            and isinstance(r["students"], dict)):
        raise RosterError(f"{path} is not a roster of this version of the project (version "
                          f"{VERSION}); ask your teacher for a new copy")
    for name, entry in r["students"].items():
        ok = (isinstance(entry, dict) and set(entry) == {"EX1", "EX4", "EX7"}
              and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < VARIANTS
                      for v in entry.values()))
        if not ok or name != canonical(name) or name_problem(name):
            raise RosterError(f"{path}: the entry for {name[:40]!r} is not a roster entry")
    folded = [fold(n) for n in r["students"]]
    if len(set(folded)) != len(folded):  # two entries one student would match
        raise RosterError(f"{path} names one student twice (names differ only in case)")
    return r
