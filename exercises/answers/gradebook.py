"""The marks of a class as a teacher uses them: points per exercise with EXERCISES.md's
weights, a total, the catalogued mistake a wrong program makes in a student's words, and
the written answers gathered one file per question.

    python -m exercises.answers.mark SUBMISSIONS --roster=names.txt --out=marks/

writes into marks/ (made whole, then renamed into place):

* ``gradebook.csv``: one row per student (the roster's students with nothing handed in
  too), a spreadsheet opens it (UTF-8 with a byte-order mark, for Excel); the written
  answers' points are left blank for you, beside a flag for answers that look like filler;
* ``written/EX1_WHY.md`` ... one file per question, every student's answer under their name,
  with the flags, to read side by side against the rubric (exercises/answers/README.md);
* ``marks.md``: the table printed on the screen, and every student's details;
* ``feedback/<row>-<name>.md``: one file per student to hand back (``feedback``);
* ``summary.md``: the class exercise by exercise: mean, full points, commonest mistake.

Points (``POINTS``, as EXERCISES.md's "Marks" table gives them): a number is 1 point when
right (key.py's rule); a program earns its exercise's points when every property holds,
on the check's inputs and on unseen ones, else none, and the row names its mistake.
"""

import csv
import io
import math
import os
import re

import torch

from exercises import check
from exercises.answers import wrong_code
from exercises.answers.key import shown

POINTS = {  # EXERCISES.md, "Marks"; tests/test_classroom_gradebook.py holds them equal
    "ex1": {"numbers": 4, "written": 3}, "ex2": {"code": 6},
    "ex3": {"code": 3, "written": 3}, "ex4": {"numbers": 3, "written": 3},
    "ex5": {"code": 6}, "ex6": {"code": 3, "written": 4}, "ex7": {"numbers": 3, "written": 3},
}
EXERCISES = tuple(POINTS)
MARKED = sum(p.get("numbers", 0) + p.get("code", 0) for p in POINTS.values())
WRITTEN_POINTS = {f"EX{ex[2:]}_WHY": p["written"] for ex, p in POINTS.items() if "written" in p}
QUESTIONS = {  # as the sheet asks them: the written files' headings, and the copy check
    "EX1_WHY": "Where does grpo's push on the shared token come from, and which way does it "
               "go in your group? Name the rollouts of your table that decide it.",
    "EX3_WHY": "Which transform can raise a rollout's weight above its w_i? Show it on three "
               "weights and advantages of your own, worked by hand. Why does that matter when "
               "w is an importance ratio?",
    "EX4_WHY": "luspo has no 1/L_i: why does its shared token still not cancel in your group "
               "(use your s_i), and what does dfpo_orth do instead (use your orth_delta_k)?",
    "EX6_WHY": "What was wrong, what did it do to the gradient (quote the coefficients the "
               "check printed on-policy, before your fix, for two rollouts), and why did that "
               "stop the shared token from cancelling?",
    "EX7_WHY": "What does a scratchpad do to the spread of completion lengths in a group, and "
               "so to grpo's 1/L_i? Compare your scratchpad count with the plain task's "
               "tokens per problem.",
}
COMPARED = {"ex5": 32}  # calls compared when naming a mistake: ex5's valid-cut inputs


# ----------------------------------------------------------------------------- mistakes

def alike(x, y):
    """Two outputs are the same: tensors of one shape and dtype, equal to their dtype's
    rounding (NaN where NaN); lists item by item; numbers to rounding; else equal."""
    if torch.is_tensor(x) or torch.is_tensor(y):
        if not (torch.is_tensor(x) and torch.is_tensor(y) and x.shape == y.shape
                and x.dtype == y.dtype):
            return False
        if not x.is_floating_point():
            return torch.equal(x, y)
        # float32: two right ways to sum differ in the 4th digit where |Â|^2 is small
        rtol, atol = (1e-6, 1e-9) if x.dtype == torch.float64 else (1e-3, 1e-4)
        return bool(torch.allclose(x.double(), y.double(), rtol=rtol, atol=atol, equal_nan=True))
    if isinstance(x, (list, tuple)) or isinstance(y, (list, tuple)):
        return (isinstance(x, (list, tuple)) and isinstance(y, (list, tuple))
                and len(x) == len(y) and all(alike(a, b) for a, b in zip(x, y)))
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-6,
                                                                  abs_tol=1e-12)
    return kind(x) == kind(y)


def kind(x):
    """What came back as only a type's name (check.Opaque: None, a string, an object), by
    that name, whether it was decoded from the sandbox or made here."""
    return x.name if isinstance(x, check.Opaque) else type(x).__name__


def same(mine, theirs):
    """One call's results agree: both raised, or every output the two hold is alike."""
    if "error" in mine or "error" in theirs:
        return ("error" in mine) == ("error" in theirs)
    keys = (set(mine) | set(theirs)) - {"stub"}
    return all(alike(mine.get(k), theirs.get(k)) for k in keys)


def name_mistake(ex, calls, results):
    """The mistake, in a student's words (wrong_code.SAYS), of the catalogued wrong program
    that gives the student's outputs on every input; None when no program does. Runs the
    teacher's programs, never the student's: in the marker's own process."""
    pairs = list(zip(calls, results))[:COMPARED.get(ex, len(calls))]
    for name, fn in wrong_code.WRONG[ex].items():
        if all(same(check.evaluate(c, fn), r) for c, r in pairs):
            return wrong_code.SAYS[ex][name]
    return None


# ----------------------------------------------------------------------------- written answers

def words(text):
    return re.findall(r"\w+", str(text or "").lower())


def filler(text, question=""):
    """None for an answer that reads like an argument, else why it may not: too short, the
    same few words again and again, no words, or the question copied back. A flag for the
    teacher's reading, never a mark."""
    w = words(text)
    if not w:
        return "empty"
    if len(w) < check.MIN_WORDS:
        return f"{len(w)} words (at least {check.MIN_WORDS} asked)"
    distinct = len(set(w))
    if distinct < 10 or distinct < 0.3 * len(w):
        return f"only {distinct} different words in {len(w)}"
    if sum(any(c.isalpha() for c in x) for x in w) < 0.6 * len(w):
        return "mostly numbers or symbols, not sentences"
    asked = set(words(question))
    if asked and sum(x in asked for x in w) >= 0.9 * len(w):
        return "mostly the question's own words"
    return None


def flags(rows):
    """{(row index, question): flag} over a class: filler (``filler``), and an answer the
    same as an earlier student's (case, spacing and punctuation aside)."""
    out, seen = {}, {}
    for r in rows:
        if not r["answers"]:  # no sheet: the row's note says why, a flag would add nothing
            continue
        for q in WRITTEN_POINTS:
            text = r["answers"].get(q, "")
            why = filler(text, QUESTIONS[q])
            key = " ".join(words(text))
            if why is None and key in seen.get(q, {}):
                why = f"the same as {seen[q][key]}'s"
            if why is not None:
                out[(r["index"], q)] = why
            seen.setdefault(q, {}).setdefault(key, r["student"])
    return out


def fence(text):
    """A Markdown code fence longer than any run of backticks in ``text``."""
    runs = [len(r) for r in re.findall(r"`+", text)]
    return "`" * max(3, max(runs, default=0) + 1)


def printable(text):
    """Student text safe in a file a teacher opens: no control characters but newlines."""
    return "".join(ch if ch == "\n" or ch.isprintable() else " " for ch in str(text or ""))


def who(row):
    """A student as a teacher's platform knows them: the name, then the roster's id and email
    where it has them ("Ada Lovelace (12345, ada@example.edu)")."""
    ids = [printable(row[k]) for k in ("id", "email") if row.get(k)]
    return printable(row["student"]) + (f" ({', '.join(ids)})" if ids else "")


def written_file(question, rows, marks):
    """written/<question>.md: every student's answer, with its flag, under their name."""
    lines = [f"# {question} ({WRITTEN_POINTS[question]} points)", "",
             f"Question: {QUESTIONS[question]}", "",
             "Rubric: exercises/answers/README.md, \"Rubrics for the written answers\".",
             f"{sum(1 for r in rows if (r['index'], question) in marks)} of {len(rows)} "
             "answers are flagged (a flag is a reason to read closely, not a mark).", ""]
    for r in rows:
        text = printable(r["answers"].get(question, "")).strip()
        lines += [f"## {who(r)}", ""]
        if (r["index"], question) in marks:
            lines += [f"Flag: {marks[(r['index'], question)]}.", ""]
        if text:
            f = fence(text)
            lines += [f + "text", text, f, ""]
        else:
            lines += ["(no answer)", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the table

def points(row):
    """{exercise: points the tool gives} of one row; None where the tool failed on it."""
    if row["failed"]:
        return None
    out = {}
    for ex, p in POINTS.items():
        if "numbers" in p:
            out[ex] = sum(ok for e, _, _, ok, _ in row["numbers"] if e == ex.upper())
        if "code" in p:
            checks = row["checks"].get(ex, [])
            out[ex] = p["code"] if checks and all(why is None for _, why in checks) else 0
    return out


SAFE = re.compile(r"^[=+\-@\t\r]")  # what a spreadsheet would read as a formula


def cell(value):
    """A CSV cell: numbers as numbers, text that cannot start a formula (a student named
    "=HYPERLINK(...)" stays text)."""
    if isinstance(value, (int, float)) or value is None:
        return "" if value is None else value
    text = " ".join(printable(value).split())
    return "'" + text if SAFE.match(text) else text


def csv_text(rows, marks):
    """gradebook.csv: the header, then one row per student."""
    ids = any(r.get("id") or r.get("email") for r in rows)  # a .csv roster's columns
    head = ["student", *(["id", "email"] if ids else []), "on the roster", "handed in as"]
    head += [f"{ex} (of {p.get('numbers', 0) + p.get('code', 0)})" for ex, p in POINTS.items()
             if "numbers" in p or "code" in p]
    head += [f"marked by the tool (of {MARKED})"]
    head += [f"{q} (of {n}, yours to mark)" for q, n in WRITTEN_POINTS.items()]
    head += [f"{q} flag" for q in WRITTEN_POINTS]
    head += [f"{ex} mistake" for ex, p in POINTS.items() if "code" in p] + ["note"]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\r\n")
    w.writerow(head)
    for r in rows:
        p = points(r)
        scored = [ex for ex, q in POINTS.items() if "numbers" in q or "code" in q]
        line = [r["student"], *([r.get("id", ""), r.get("email", "")] if ids else []),
                r["on_roster"], r["label"]]
        line += ["?" if p is None else p[ex] for ex in scored]
        line += ["?" if p is None else sum(p.values())] + [None] * len(WRITTEN_POINTS)
        line += [marks.get((r["index"], q), "") for q in WRITTEN_POINTS]
        line += [r["mistakes"].get(ex, "") for ex, q in POINTS.items() if "code" in q]
        line += ["; ".join(r["notes"])]
        w.writerow([cell(v) for v in line])
    return out.getvalue()


def screen(rows):
    """The Markdown table printed on the screen: the tool's points, and why, per student."""
    head = ["student", *EXERCISES, f"marked (of {MARKED})", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        p = points(r)
        cells = [check.clean(r["student"], 40).replace("|", "/")]
        for ex in EXERCISES:
            q = POINTS[ex]
            full = q.get("numbers", 0) + q.get("code", 0)
            cells.append("?" if p is None else f"{p[ex]}/{full}" if full else "-")
        cells.append("?" if p is None else str(sum(p.values())))
        cells.append(check.clean("; ".join(r["notes"]), 70).replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def details(row, marks):
    """Lines of one student's details: wrong numbers with hints, failing programs with the
    mistake named and the first failing property, flagged written answers."""
    bad = [f"{ex} {k} = {shown(got)}" + (f" (hint: {h})" if h else "")
           for ex, k, got, ok, h in row["numbers"] if not ok]
    for ex, checks in row["checks"].items():
        failing = [(what, why) for what, why in checks if why is not None]
        if failing:
            said = row["mistakes"].get(ex)
            bad.append(f"{ex}: {said}" if said else f"{ex}: not a catalogued mistake")
            bad.append(f"  first failing property: {failing[0][0]}: {failing[0][1]}")
    bad += [f"{q}: {marks[(row['index'], q)]}" for q in WRITTEN_POINTS
            if (row["index"], q) in marks]
    return bad


def feedback(row):
    """One student's feedback, to hand back: points per exercise, each wrong number with
    its hint, each failing program's mistake and first failing property, the row's notes.
    No key value and nothing of another student (the written answers' flags stay yours)."""
    p = points(row)
    total = "?" if p is None else sum(p.values())
    lines = [f"# Feedback: {who(row)}", "",
             f"Marked by the tool: {total} of {MARKED} points. Your teacher marks the written "
             f"answers ({sum(WRITTEN_POINTS.values())} points).", "",
             "| exercise | points |", "|---|---|"]
    for ex, q in POINTS.items():
        full = q.get("numbers", 0) + q.get("code", 0)
        lines.append(f"| {ex} | {'?' if p is None else p[ex]} of {full} |")
    said = details(row, {})
    lines += ["", "## What to look at", ""] + ([f"- {printable(x.strip())}" for x in said]
                                               or ["- nothing: every number and program holds"])
    if row["notes"]:
        lines += ["", "## Notes", ""] + [f"- {printable(n)}" for n in row["notes"]]
    return "\n".join(lines) + "\n"


def summary(rows):
    """The class, exercise by exercise: mean points, the share with full points, and the
    commonest mistake (a program's, named; a number's, by its hint)."""
    marked = [(r, points(r)) for r in rows if points(r) is not None]
    lines = [f"# The class, exercise by exercise ({len(marked)} rows marked by the tool)", "",
             "| exercise | of | mean | full points | commonest mistake |", "|---|---|---|---|---|"]
    for ex, q in POINTS.items():
        full = q.get("numbers", 0) + q.get("code", 0)
        if not full or not marked:
            continue
        got = [p[ex] for _, p in marked]
        seen = {}
        for r, _ in marked:
            for said in [r["mistakes"].get(ex)] + [h or f"{k} wrong" for e, k, _, ok, h in
                                                  r["numbers"] if e == ex.upper() and not ok]:
                if said:
                    seen[said] = seen.get(said, 0) + 1
        common = max(seen.items(), key=lambda kv: (kv[1], kv[0]), default=None)
        lines.append(f"| {ex} | {full} | {sum(got) / len(got):.2f} | "
                     f"{sum(g == full for g in got)} of {len(got)} | " + (
                         f"{check.clean(common[0], 80).replace('|', '/')} ({common[1]})"
                         if common else "none") + " |")
    return "\n".join(lines) + "\n"


def feedback_name(row):
    """feedback/<row number>-<the name in plain letters>.md: unique, any file system."""
    import unicodedata
    plain = unicodedata.normalize("NFKD", str(row["student"])).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^A-Za-z0-9]+", "-", plain).strip("-")[:40] or "student"
    return f"{row['index'] + 1:03d}-{slug}.md"


def write(folder, rows, marks, table):
    """Write gradebook.csv, written/<question>.md, feedback/<student>.md, summary.md and
    marks.md into ``folder`` (new)."""
    os.makedirs(os.path.join(folder, "written"))
    os.makedirs(os.path.join(folder, "feedback"))
    files = {"gradebook.csv": ("utf-8-sig", csv_text(rows, marks)),
             "marks.md": ("utf-8", table + "\n"), "summary.md": ("utf-8", summary(rows))}
    for r in rows:
        files[os.path.join("feedback", feedback_name(r))] = ("utf-8", feedback(r))
    for q in WRITTEN_POINTS:
        files[os.path.join("written", f"{q}.md")] = ("utf-8", written_file(q, rows, marks))
    for rel, (encoding, text) in files.items():
        with open(os.path.join(folder, rel), "w", encoding=encoding, newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
