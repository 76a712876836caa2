"""Teacher's marking of a class: every number and every implemented function of every
student, a gradebook, and the written answers gathered for reading.

    python -m exercises.answers.mark SUBMISSIONS --roster=names.txt [--out=DIR]
                                     [--timeout=60] [--jobs=2] [--memory=3072]

SUBMISSIONS holds what the class handed in: the packs of ``python -m exercises.handin``,
or a folder per student as they left it (collect.py says every form it takes). --roster
is the class list the handout was built from (names.txt, or the copy's roster.json).
DIR (default: SUBMISSIONS-marks beside it) must be new or empty; it gets gradebook.csv,
written/<question>.md, feedback/<student>.md,
summary.md and marks.md (gradebook.py).

One submission's fault costs that student alone: a sheet that does not read, a missing
file, a name not on the roster, a file too large, a broken zip, code that hangs, crashes
or attacks. Each is one line on that student's row (and a warning before marking), and
everyone else is marked. For each student:

* the numbers of exercises 1, 4 and 7 are marked one by one from the sheet, read as data
  (key.py's rule), with a hint for a wrong number that a catalogued mistake gives; a name
  not on the roster is marked on the tables its copy showed it (draw 0);
* each code exercise (2, 3, 5, 6) runs in its own sandbox (sandbox.py): a throwaway copy
  of the last commit with the student's file, its own namespaces, no network, limits on
  time (--timeout, per exercise), memory (--memory, MB), processes and output. The child
  only runs the student's function on inputs chosen here, among them inputs drawn from a
  seed chosen at marking time, and returns raw outputs. Every verdict is formed in this
  process: the properties of exercises/check.py and, for 2 and 3, agreement with the
  reference answers. Nothing the student's code prints, and no exit status, is a verdict.
  A failing program is compared with the catalogue of wrong programs (wrong_code.py), run
  here, to name its mistake;
* the written answers are gathered one file per question, each flagged when it looks like
  filler or is another student's (they are yours to mark).

Before anyone is marked, a self-test marks a known-good submission of every code exercise
in the sandbox with the teacher's limits: a machine that cannot build the sandbox, or a
time limit under four times what right code takes here, stop the marking in one line (a
fault of the tool is never a student's 0). A fault of the tool on one student alone marks
that row "?" with the reason, to be marked by hand.

Exit status 0 when marking finished, 2 for bad input or a machine that cannot sandbox code
(one line), 130 on Ctrl-C.
"""

import json
import os
import random
import secrets
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as python -m exercises.answers.mark\n")
    sys.exit(2)
if __name__ == "__main__":  # Ctrl-C at any moment, during the imports too: one line
    import signal
    signal.signal(signal.SIGINT, lambda *_: (sys.stderr.write("\ninterrupted\n"), os._exit(130)))
import torch

from exercises import check, handout, roster
from exercises.answers import collect, gradebook, sandbox, wrong_code
from exercises.answers.key import marks

ROOT = handout.ROOT
CODE = {"ex2": ("loss.py", "loss.py"), "ex3": ("loss.py", "loss.py"),
        "ex5": ("batching.py", "batching.py"),
        "ex6": ("ex6_buggy_loss.py", "exercises/ex6_buggy_loss.py")}
CODE_EXERCISES = tuple(CODE)
MARGIN = 4  # the time limit must be this many times what right code takes here
# -E -s: no PYTHON* variables, no user site; -c puts the working directory (/sandbox) first
CHILD = ["-E", "-s", "-c", "from exercises import check; check.serve()"]
UNSEEN = "agrees with the reference on unseen inputs"


LIMITS = {"--timeout": (1, 24 * 3600), "--jobs": (1, 256), "--memory": (1024, 1 << 20)}


class MarkError(Exception):
    """Bad input to the marking tool: one line, exit 2."""


# ----------------------------------------------------------------------------- inputs

def unseen_batch(rng, dtype=torch.float64):
    """A batch nobody has seen: 2 to 6 groups of 1 to 6 rows, arbitrary labels, rows
    shuffled; advantages centred, not centred, all zero or small, by group."""
    sizes = [rng.randint(1, 6) for _ in range(rng.randint(2, 6))]
    labels = rng.sample(range(-50, 1000), len(sizes))
    group, adv = [], []
    for label, size in zip(labels, sizes):
        kind = rng.choice(["centred", "raw", "zero", "small"])
        r = [float(rng.randint(0, 1)) for _ in range(size)]
        a = {"centred": [x - sum(r) / size for x in r], "zero": [0.0] * size,
             "raw": [rng.gauss(0, 1) for _ in range(size)],
             "small": [rng.gauss(0, 0.01) for _ in range(size)]}[kind]
        group += [label] * size
        adv += a
    order = list(range(len(group)))
    rng.shuffle(order)
    w = [rng.uniform(0.5, 1.5) for _ in group]
    pick = lambda xs: [xs[i] for i in order]
    return (torch.tensor(pick(w), dtype=dtype), torch.tensor(pick(adv), dtype=dtype),
            torch.tensor(pick(group)))


def unseen_cases(ex, rng):
    """The marker's own inputs, from a seed drawn at marking time."""
    if ex in ("ex2", "ex3"):
        out = []
        for i in range(20):
            dtype = torch.float32 if i % 5 == 4 else torch.float64
            out.append(check.call(UNSEEN, "once", unseen_batch(rng, dtype),
                                  f"unseen batch {i + 1} of 20 ({str(dtype)[6:]})"))
        return out
    if ex == "ex6":
        return [ex6_unseen(rng, i) for i in range(3)]
    return []


def ex6_unseen(rng, i):
    """Two or three groups of 3 to 5 rollouts, interleaved, off-policy, max_len above the
    longest, with the reference Adv-Orthogonal as a matrix."""
    parts = []
    for g in range(rng.randint(2, 3)):
        size = rng.randint(3, 5)
        r = [1.0, 0.0] + [float(rng.randint(0, 1)) for _ in range(size - 2)]
        lengths = [rng.randint(2, 6) for _ in range(size)]
        log_s = [rng.uniform(-0.15, 0.15) for _ in range(size)]
        parts.append(check.shared_group(lengths, r, log_s=log_s, seed=rng.randrange(1 << 30)))
    width = max(p[0].shape[1] for p in parts)
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.shape[1]))
    new = torch.cat([pad(p[0]) for p in parts])
    old = torch.cat([pad(p[1]) for p in parts])
    mask = torch.cat([pad(p[2].long()) for p in parts]).bool()
    r = torch.cat([p[3] for p in parts])
    labels = rng.sample(range(100), len(parts))
    group = torch.cat([torch.full((len(p[3]),), label) for p, label in zip(parts, labels)])
    order = torch.randperm(len(group), generator=torch.Generator().manual_seed(rng.randrange(99)))
    new, old, mask, r, group = new[order], old[order], mask[order], r[order], group[order]
    for gid in labels:  # each group's token 0 shared, at one ratio per group
        m = group == gid
        new[m, 0] = new[m][0, 0]
        old[m, 0] = new[m, 0] - rng.uniform(-0.2, 0.2)
    adv = check.centred(r, group)
    eye = torch.eye(len(group), dtype=torch.float64)
    P = torch.stack([wrong_code.reference("adv_orthogonal")(eye[:, j], adv, group)
                     for j in range(len(group))], dim=1)
    return check.call("unseen groups", "loss_grad",
                      (new, old, mask, adv, group, width + rng.randint(1, 4)),
                      f"unseen batch {i + 1} of 3 ({len(parts)} groups, off-policy)",
                      projection=P)


def agrees(pairs):
    """Marker only: the same values and dtype as the reference answer, on unseen inputs."""
    for c, r in pairs:
        w, adv, group = c["args"]
        fn = wrong_code.reference({"ex2": "adv_orthogonal", "ex3": "min_replace"}[c["ex"]])
        want = fn(w.clone(), adv.clone(), group.clone())
        check.tensor_like(r["out"], w.shape, w.dtype, c["where"])
        tol = 1e-9 if w.dtype == torch.float64 else 1e-5
        check.close(r["out"], want, c["where"], tol=tol)


MARKER_ONLY = {"ex2": [(UNSEEN, agrees)], "ex3": [(UNSEEN, agrees)], "ex5": [],
               "ex6": [("unseen groups", check.ex6_check)]}


def properties(ex):
    """The names of the properties the marker reports for an exercise, in order."""
    return [w for w, fn in check.PROPS[ex] if not isinstance(fn, tuple)] + [
        w for w, _ in MARKER_ONLY[ex]]


# ----------------------------------------------------------------------------- running

KNOWN_GOOD = {"loss.py": "loss.py", "batching.py": "batching.py",
              "ex6_buggy_loss.py": "exercises/answers/ex6_buggy_loss.py"}


def base_copy(where):
    """The Python files of a student copy of the last commit (no roster, no tests), and
    beside it known-good/: the last commit's own answers, the self-test's submission."""
    committed = handout.committed_files()
    files = handout.contents(committed, {})
    for name, rel in KNOWN_GOOD.items():
        files[f"../known-good/{name}"] = committed[rel]
    for rel, (data, _) in files.items():
        if rel.endswith(".py") and not rel.startswith(("tests/", "docs/")):
            dst = os.path.join(where, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "wb") as f:
                f.write(data)
    return where


def calls_for(ex):
    """The inputs of one exercise: the check's own, and unseen ones drawn now."""
    rng = random.Random(secrets.randbits(64))  # unseen inputs: drawn now, never stored
    calls = (check.ex5_cases(base=rng.randrange(1 << 20) * 1000) if ex == "ex5"
             else check.CASES[ex]()) + unseen_cases(ex, rng)
    for c in calls:
        c["ex"] = ex
    return calls


def sandboxed(base, work, folder, parts, opts, hide):
    """One sandbox running the student's files for the exercises of ``parts`` ({ex:
    calls}); its Outcome. A sandbox that cannot be built is the tool's fault: SandboxError."""
    copy = os.path.join(tempfile.mkdtemp(dir=work), "copy")
    shutil.copytree(base, copy)
    for ex in parts:
        shutil.copyfile(os.path.join(folder, CODE[ex][0]), os.path.join(copy, CODE[ex][1]))
    request = json.dumps({"parts": [{"ex": ex, "calls": check.encode_calls(calls)}
                                    for ex, calls in parts.items()]}).encode()
    limits = sandbox.Limits(seconds=opts["timeout"], memory=opts["memory"] << 20)
    outcome = sandbox.run(copy, CHILD, stdin=request, limits=limits, hide=hide)
    shutil.rmtree(os.path.dirname(copy), ignore_errors=True)
    if outcome.status in ("setup", "error"):  # the tool's fault, never a student's mark
        why = (outcome.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        raise sandbox.SandboxError(f"the sandbox failed on this machine ({check.clean(why)}); "
                                   f"no one was marked")
    return outcome


def judged(ex, calls, results):
    """[(property, None or why)] from one exercise's raw results: every verdict here."""
    out = check.verdicts(ex, calls, results, local=False)
    for what, fn in MARKER_ONLY[ex]:
        pairs = [(c, r) for c, r in zip(calls, results) if c["prop"] == what]
        out.append((what, check.judge(ex, fn, pairs)))
    return out


def run_exercise(base, work, folder, ex, opts, hide):
    """([(property, None or why)], calls, results or None) of one student's code for one
    exercise, in a sandbox of its own. ``folder`` is the marker's copy of the submission."""
    if not os.path.isfile(os.path.join(folder, CODE[ex][0])):  # collect.py's plain files
        return [(w, "not handed in") for w in properties(ex)], [], None
    calls = calls_for(ex)
    results, why = read_results(sandboxed(base, work, folder, {ex: calls}, opts, hide),
                                [len(calls)], opts)
    if why:
        return [(w, why) for w in properties(ex)], calls, None
    return judged(ex, calls, results[0]), calls, results[0]


# The exercises run together in one sandbox (torch starts once per group). Exercise 6's
# file imports loss.py, so it runs beside the copy's loss.py, never the student's: a
# loss.py that does not import costs exercises 2 and 3, not 6.
TOGETHER = (("ex2", "ex3", "ex5"), ("ex6",))


def run_student(base, work, folder, exercises, opts, hide):
    """{ex: ([(property, why)], calls, results)} of one student's code for ``exercises``:
    all in one sandbox, and where that run does not come back whole (a hang, a crash,
    garbage), each again in a sandbox of its own, so that one exercise's fault costs that
    exercise alone."""
    parts = {ex: calls_for(ex) for ex in exercises
             if os.path.isfile(os.path.join(folder, CODE[ex][0]))}
    out = {ex: ([(w, "not handed in") for w in properties(ex)], [], None)
           for ex in exercises if ex not in parts}
    if not parts:
        return out
    results, why = read_results(sandboxed(base, work, folder, parts, opts, hide),
                                [len(c) for c in parts.values()], opts)
    for i, (ex, calls) in enumerate(parts.items()):
        if not why:
            out[ex] = (judged(ex, calls, results[i]), calls, results[i])
        elif len(parts) > 1:  # which exercise failed the run: each alone says
            out[ex] = run_exercise(base, work, folder, ex, opts, hide)
        else:  # it ran alone already
            out[ex] = ([(w, why) for w in properties(ex)], calls, None)
    return out


def read_results(outcome, sizes, opts):
    """([decoded results of each part], None) or (None, why): the child's stdout must be one
    JSON document with, per part, one result per call, in the strict form
    check.decode_result reads. ``sizes``: the number of calls of each part."""
    if outcome.status == "timeout":
        return None, f"stopped after {opts['timeout']} s"
    if outcome.status == "output":
        return None, f"printed more than {sandbox.Limits().output >> 20} MB"
    last = (outcome.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
    try:
        raw = json.loads(outcome.stdout)
        if not (isinstance(raw, dict) and set(raw) == {"results"}
                and isinstance(raw["results"], list) and len(raw["results"]) == len(sizes)
                and all(isinstance(part, list) and len(part) == n
                        for part, n in zip(raw["results"], sizes))):
            raise ValueError("not one result per input")
        results = [[check.decode_result(r) for r in part] for part in raw["results"]]
    except (ValueError, RecursionError, TypeError):
        if outcome.code != 0:
            return None, (f"the process ended (status {outcome.code}) before returning its "
                          f"results: {check.clean(last)}")
        return None, "the process returned no results in the expected form"
    return results, None


def self_test(base, work, opts, hide, pool):
    """Mark a known-good submission (the last commit's answers) inside the sandbox with the
    teacher's limits, both ways the marker runs code (every exercise in one sandbox, and
    one exercise alone), and time it: where the sandbox cannot be built, or the time limit
    is under MARGIN times what right code takes here, every student would pay for the tool.
    Raises SandboxError; returns the slowest time."""
    import time
    folder = os.path.join(os.path.dirname(base), "known-good")

    def timed(run):
        start = time.monotonic()
        return run(), time.monotonic() - start
    jobs = [pool.submit(timed, lambda g=g: run_student(base, work, folder, g, opts, hide))
            for g in TOGETHER]
    jobs.append(pool.submit(timed, lambda: {"ex2": run_exercise(base, work, folder, "ex2",
                                                                opts, hide)}))
    slowest = 0.0
    for job in jobs:
        verdicts, seconds = job.result()
        slowest = max(slowest, seconds)
        for ex, (checks, _, _) in verdicts.items():
            for what, why in checks:
                if why is not None:
                    raise sandbox.SandboxError(
                        f"a known-good submission fails in the sandbox on this machine ({ex} "
                        f"{what}: {why}); no one was marked: fix the machine or the limits "
                        f"(--timeout, --memory)")
    if slowest * MARGIN > opts["timeout"]:
        raise sandbox.SandboxError(
            f"right code takes {slowest:.0f} s here, too close to --timeout={opts['timeout']} "
            f"(at least {MARGIN} times that is needed, so that a busy machine cannot cost a "
            f"student): raise --timeout; no one was marked")
    return slowest


def mark_sheet(sub):
    """(number marks, written answers) of one submission's sheet; none without a sheet."""
    if sub.sheet is None:
        return [], {}
    numbers = marks(sub.name, sub.sheet, sub.tables)
    answers = {w: str(getattr(sub.sheet, w, "") or "") for w in gradebook.WRITTEN_POINTS}
    return numbers, answers


def row_of(index, sub, pool, base, work, opts, hide):
    """One student's row for the gradebook (gradebook.py), its code still being marked:
    "jobs" holds the futures of its code. A fault of the tool on this row alone marks it "?"."""
    row = {"index": index, "student": sub.name, "label": sub.label, "notes": list(sub.problems),
           "on_roster": {True: "yes", False: "no", None: ""}[sub.on_roster], "failed": False,
           "numbers": [], "answers": {}, "checks": {}, "mistakes": {}}
    try:
        row["numbers"], row["answers"] = mark_sheet(sub)
    except Exception as e:  # the tool's fault: this row is marked by hand, nobody else pays
        tool_failed(row, "its sheet", e)
    row["jobs"] = [pool.submit(run_student, base, work, sub.folder, g, opts, hide)
                   for g in TOGETHER]
    return row


def tool_failed(row, what, e):
    row["failed"] = True
    row["notes"].append(f"the marking tool failed on {what} ({type(e).__name__}: "
                        f"{check.clean(str(e), 80)}): mark this student by hand")


def finish(row):
    """Collect a row's code verdicts and name each failing program's mistake."""
    done = {}
    for job in row.pop("jobs"):
        try:
            done.update(job.result())
        except sandbox.SandboxError:
            raise  # the sandbox itself failed: nobody is marked
        except Exception as e:  # the tool's fault on this student alone
            tool_failed(row, "the code", e)
            return row
    for ex, (checks, calls, results) in sorted(done.items()):
        row["checks"][ex] = checks
        failing = [why for _, why in checks if why is not None]
        if not failing:
            continue
        if results is None or any(r.get("stub") for r in results) or all(
                "error" in r for r in results):  # no output to compare: the reason is the why
            row["mistakes"][ex] = failing[0]
            continue
        try:
            said = gradebook.name_mistake(ex, calls, results)
        except Exception:  # naming is a courtesy: the verdicts stand without it
            said = None
        row["mistakes"][ex] = said or "not a catalogued mistake: see the failing property"
    return row


def missing_row(index, name):
    return {"index": index, "student": name, "label": "", "on_roster": "yes", "failed": False,
            "numbers": [], "answers": {}, "checks": {}, "mistakes": {},
            "notes": ["nothing handed in"]}


# ----------------------------------------------------------------------------- the command line

def parse(argv):
    """(SUBMISSIONS, opts): every flag checked before anything is read or written."""
    opts, folders = {"timeout": 60, "jobs": 2, "memory": 3072, "roster": None, "out": None}, []
    seen = set()
    for a in argv:
        key = a.split("=", 1)[0]
        if key in seen and key.startswith("--"):
            raise MarkError(f"{key} is given twice")
        seen.add(key)
        if key in ("--timeout", "--jobs", "--memory") and "=" in a:
            value = a.split("=", 1)[1]
            try:
                opts[key[2:]] = int(value)
            except ValueError:
                raise MarkError(f"{key} takes a whole number, got {value!r}") from None
            low, high = LIMITS[key]
            if not low <= opts[key[2:]] <= high:
                raise MarkError(f"{key} must be in {low}..{high}, got {value}")
        elif key in ("--roster", "--out") and "=" in a:
            opts[key[2:]] = a.split("=", 1)[1]
            if not opts[key[2:]]:
                raise MarkError(f"{key}= is empty; name a file or folder")
        elif a.startswith("-"):
            raise MarkError(f"unknown flag {a!r}")
        else:
            folders.append(a)
    if len(folders) != 1 or not os.path.isdir(folders[0]):
        raise MarkError("usage: python -m exercises.answers.mark SUBMISSIONS --roster=FILE "
                        "[--out=DIR] [--timeout=S] [--jobs=N] [--memory=MB] (SUBMISSIONS: a "
                        "folder of packs or student folders)")
    top = os.path.realpath(folders[0])
    out = os.path.realpath(opts["out"] or top.rstrip(os.sep) + "-marks")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise MarkError(f"{out} exists and is not an empty folder; name a new one with --out=")
    if out == top or out.startswith(top + os.sep):
        raise MarkError(f"{out} lies inside SUBMISSIONS; name a folder outside it")
    if not os.path.isdir(os.path.dirname(out)):
        raise MarkError(f"{out}: its folder does not exist")
    opts["out"] = out
    return folders[0], opts


def class_roster(path):
    """{name: draws or None} from names.txt (one name a line, as the handout reads it) or
    the copy's roster.json; None without --roster (then no name is checked)."""
    if path is None:
        return None
    if path.endswith(".json"):
        try:
            r = roster.load(path)
        except roster.RosterError as e:
            raise MarkError(f"--roster={path}: {e}") from None
        if r is None:
            raise MarkError(f"--roster={path}: no such file")
        return dict(r["students"])
    try:
        names, _ = handout.read_roster(path)
    except handout.HandoutError as e:
        raise MarkError(str(e)) from None
    try:  # the draws a copy of the last commit gives them, as the handout drew them
        return handout.class_draws(names)
    except ValueError as e:
        raise MarkError(f"--roster={path}: {e}") from None


def roster_ids(path):
    """{folded name: {"id": ..., "email": ...}} of a .csv roster (handout.roster_rows); {}
    for any other roster."""
    if not path or not path.lower().endswith(".csv"):
        return {}
    with open(path, encoding="utf-8-sig") as f:
        rows = handout.roster_rows(path, f.read())
    return {roster.fold(r["name"]): {k: r.get(k, "") for k in ("id", "email")} for r in rows}


def publish(out, rows, marks, table):
    """The gradebook folder, written beside ``out`` and renamed into place: whole or absent."""
    parent = os.path.dirname(out)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.partial-", dir=parent)
    try:
        gradebook.write(tmp, rows, marks, table)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        if os.path.isdir(out):
            os.rmdir(out)  # empty, checked before marking
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def mark_all(subs, missing, opts, top):
    """Long because: the sandbox's life (self-test, every student's four exercises, and
    the stop of every sandbox on a failure or Ctrl-C) is one block with one cleanup.
    Returns the rows in the order of ``subs``, then the roster's names with nothing."""
    with tempfile.TemporaryDirectory(prefix="mark-") as work:
        base = base_copy(os.path.join(work, "base"))
        hide = [ROOT, os.path.abspath(top), work, opts["staged"]]
        sandbox.allow()
        pool = ThreadPoolExecutor(max_workers=opts["jobs"])
        try:
            if opts.get("self_test", True):  # Gradescope's image ran it once, when built
                self_test(base, work, opts, hide, pool)
            rows = [row_of(i, s, pool, base, work, opts, hide) for i, s in enumerate(subs)]
            rows = [finish(r) for r in rows]
        except sandbox.SandboxError:  # the tool failed: no marks at all, not zeros
            sandbox.kill_all()
            pool.shutdown(wait=True, cancel_futures=True)
            sandbox.allow()  # every thread has ended: nothing is left to stop
            raise
        except KeyboardInterrupt:  # stop every sandbox now, not after its time limit
            pool.shutdown(wait=False, cancel_futures=True)
            sandbox.kill_all()
            raise
        pool.shutdown()
    rows += [missing_row(len(rows) + i, n) for i, n in enumerate(missing)]
    return rows


def main(argv):
    """Check every input, read every submission, warn, mark, then publish and print."""
    if argv in (["--help"], ["-h"]):  # the module's docstring is its manual
        print(__doc__.strip())
        return 0
    try:
        top, opts = parse(argv)
        students = class_roster(opts["roster"])
        ids = roster_ids(opts["roster"])
    except MarkError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mark-subs-") as staged:
        try:
            subs, missing, warnings = collect.gather(top, staged, students)
            if not subs and not missing:
                raise MarkError(f"{top} holds no submission (a folder or a .zip)")
            sandbox.mode()
        except (MarkError, sandbox.SandboxError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if students is None:
            warnings.insert(0, "no --roster: names are not checked against the class list")
        for w in warnings:  # before marking: a teacher can stop and fix a name
            print(f"warning: {check.clean(w, 300)}", file=sys.stderr)
        opts["staged"] = staged
        try:
            rows = mark_all(subs, missing, opts, top)
        except (sandbox.SandboxError, handout.HandoutError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    for r in rows:  # a .csv roster's id and email, carried to the gradebook and feedback
        r.update(ids.get(roster.fold(r["student"]), {}))
    rows.sort(key=lambda r: (roster.fold(r["student"]), r["label"]))  # as a class list reads
    marks_ = gradebook.flags(rows)
    table = gradebook.screen(rows)
    for r in rows:
        lines = gradebook.details(r, marks_)
        if lines or r["notes"]:
            label = f" ({check.clean(r['label'], 60)})" if r["label"] else ""
            table += f"\n\n{check.clean(r['student'], 60)}{label}:\n" + "\n".join(
                f"  {x}" for x in [*r["notes"], *lines])
    try:
        publish(opts["out"], rows, marks_, table)
    except OSError as e:
        print(table)
        print(f"error: cannot write the gradebook to {opts['out']}: {e.strerror}; the marks "
              "are printed above", file=sys.stderr)
        return 2
    print(table)
    print(f"\nwrote {opts['out']}: gradebook.csv, summary.md, feedback/ (one file per "
          "student), marks.md and written/ (the written answers, "
          f"{sum(gradebook.WRITTEN_POINTS.values())} points, are yours to mark)")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # now the cleanup below runs
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the reader (head, less) stopped early: nothing is wrong
        os._exit(0)
    except KeyboardInterrupt:
        sandbox.kill_all()
        print("error: interrupted; no marks were printed", file=sys.stderr)
        os._exit(130)
