"""Teacher's marking of a folder of submissions: every number and every implemented
function of every student, right or wrong, in one table.

    python -m exercises.answers.mark SUBMISSIONS [--timeout=120] [--jobs=2] [--memory=3072]

SUBMISSIONS holds one folder per student with their ``sheet.py`` and whichever of
``loss.py``, ``batching.py`` and ``ex6_buggy_loss.py`` they edited. For each student:

* the numbers of exercises 1, 4 and 7 are marked one by one from the sheet, read as data
  (key.py's rule), with a hint for a wrong number that a catalogued mistake gives;
* each code exercise (2, 3, 5, 6) runs in its own sandbox (sandbox.py): a throwaway copy
  of the last commit with the student's file, its own namespaces, no network, limits on
  time (--timeout, per exercise), memory (--memory, MB), processes and output. The child
  only runs the student's function on inputs chosen here, among them inputs drawn from a
  seed chosen at marking time, and returns raw outputs. Every verdict is formed in this
  process: the properties of exercises/check.py and, for 2 and 3, agreement with the
  reference answers. Nothing the student's code prints, and no exit status, is a verdict;
* the written answers are listed as present or missing (they are yours to read).

Before anyone is marked, a self-test marks a known-good submission in the sandbox with
the teacher's limits: a machine that cannot build the sandbox, or limits too tight for
right code, stop the marking in one line (a fault of the tool is never a student's 0).

Prints a Markdown table (one row per student: numbers right, properties that hold), then
every failing property with its one-line reason. Exit status 0 when marking finished, 2
for bad input or a machine that cannot sandbox code (one line), 130 on Ctrl-C.
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

from exercises import check, handout
from exercises.answers import sandbox, wrong_code
from exercises.answers.key import marks
from exercises.problems import SheetError, read_sheet
from exercises.roster import canonical

ROOT = handout.ROOT
CODE = {"ex2": ("loss.py", "loss.py"), "ex3": ("loss.py", "loss.py"),
        "ex5": ("batching.py", "batching.py"),
        "ex6": ("ex6_buggy_loss.py", "exercises/ex6_buggy_loss.py")}
CODE_EXERCISES = tuple(CODE)
WRITTEN = ("EX1_WHY", "EX3_WHY", "EX4_WHY", "EX6_WHY", "EX7_WHY")
FILE_LIMIT = 1 << 20  # a submitted file larger than 1 MB is not a solution
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

def base_copy(where):
    """The Python files of a student copy of the last commit (no roster, no tests), and
    beside it known-good/loss.py: the last commit's own, the self-test's submission."""
    committed = handout.committed_files()
    files = handout.contents(committed, {})
    files["../known-good/loss.py"] = committed["loss.py"]
    for rel, (data, _) in files.items():
        if rel.endswith(".py") and not rel.startswith(("tests/", "docs/")):
            dst = os.path.join(where, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "wb") as f:
                f.write(data)
    return where


def run_exercise(base, work, folder, ex, opts, hide):
    """[(property, None or why)] of one student's code for one exercise."""
    names = properties(ex)
    src_name, dst_rel = CODE[ex]
    src = os.path.join(folder, src_name)
    if not os.path.lexists(src):
        return [(w, "not handed in") for w in names]
    if os.path.islink(src) or not os.path.isfile(src) or os.path.getsize(src) > FILE_LIMIT:
        return [(w, f"{src_name} is not a regular file of at most 1 MB") for w in names]
    rng = random.Random(secrets.randbits(64))  # unseen inputs: drawn now, never stored
    calls = (check.ex5_cases(base=rng.randrange(1 << 20) * 1000) if ex == "ex5"
             else check.CASES[ex]()) + unseen_cases(ex, rng)
    for c in calls:
        c["ex"] = ex
    copy = os.path.join(tempfile.mkdtemp(dir=work), "copy")
    shutil.copytree(base, copy)
    shutil.copyfile(src, os.path.join(copy, dst_rel))
    request = json.dumps({"ex": ex, "calls": check.encode_calls(calls)}).encode()
    limits = sandbox.Limits(seconds=opts["timeout"], memory=opts["memory"] << 20)
    outcome = sandbox.run(copy, CHILD, stdin=request, limits=limits, hide=hide)
    shutil.rmtree(os.path.dirname(copy), ignore_errors=True)
    if outcome.status in ("setup", "error"):  # the tool's fault, never a student's mark
        why = (outcome.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        raise sandbox.SandboxError(f"the sandbox failed on this machine ({check.clean(why)}); "
                                   f"no one was marked")
    results, why = read_results(outcome, len(calls), opts)
    if why:
        return [(w, why) for w in names]
    out = check.verdicts(ex, calls, results, local=False)
    for what, fn in MARKER_ONLY[ex]:
        pairs = [(c, r) for c, r in zip(calls, results) if c["prop"] == what]
        out.append((what, check.judge(ex, fn, pairs)))
    return out


def read_results(outcome, n, opts):
    """(decoded results, None) or (None, why): the child's stdout must be one JSON document
    with one result per call, in the strict form check.decode_result reads."""
    if outcome.status == "timeout":
        return None, f"stopped after {opts['timeout']} s"
    if outcome.status == "output":
        return None, f"printed more than {sandbox.Limits().output >> 20} MB"
    if outcome.status == "error":
        return None, f"could not run: {check.clean(outcome.stderr.decode(errors='replace'))}"
    last = (outcome.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
    try:
        raw = json.loads(outcome.stdout)
        if not (isinstance(raw, dict) and set(raw) == {"results"}
                and isinstance(raw["results"], list) and len(raw["results"]) == n):
            raise ValueError("not one result per input")
        results = [check.decode_result(r) for r in raw["results"]]
    except (ValueError, RecursionError, TypeError):
        if outcome.code != 0:
            return None, (f"the process ended (status {outcome.code}) before returning its "
                          f"results: {check.clean(last)}")
        return None, "the process returned no results in the expected form"
    return results, None


def self_test(base, work, opts, hide):
    """Mark a known-good submission (the last commit's loss.py) inside the sandbox, with
    the teacher's limits: where the sandbox cannot be built, or the limits are too tight
    for right code, every student would get the zero. Raises SandboxError."""
    folder = os.path.join(os.path.dirname(base), "known-good")
    for what, why in run_exercise(base, work, folder, "ex2", opts, hide):
        if why is not None:
            raise sandbox.SandboxError(
                f"a known-good submission fails in the sandbox on this machine (ex2 {what}: "
                f"{why}); no one was marked: fix the machine or the limits (--timeout, "
                f"--memory)")


def mark_one(base, work, folder, opts, hide, pool):
    """(name, number marks, {exercise: [(property, why)]}, written answers present)."""
    sheet = read_sheet(os.path.join(folder, "sheet.py"))
    name = student_name(folder, sheet)
    numbers = marks(name, sheet)
    jobs = {ex: pool.submit(run_exercise, base, work, folder, ex, opts, hide)
            for ex in CODE_EXERCISES}
    written = {w: len(str(getattr(sheet, w, "") or "").split()) >= check.MIN_WORDS
               for w in WRITTEN}
    return name, numbers, jobs, written


def table(rows):
    head = ["student", "EX1", "EX4", "EX7", *CODE_EXERCISES, "written"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, numbers, checks, written in rows:
        cells = [check.clean(name, 40).replace("|", "/")]
        for ex in ("EX1", "EX4", "EX7"):
            got = [ok for e, _, _, ok, _ in numbers if e == ex]
            cells.append(f"{sum(got)}/{len(got)}")
        for ex in CODE_EXERCISES:
            got = [why is None for _, why in checks[ex]]
            cells.append(f"{sum(got)}/{len(got)}")
        cells.append(f"{sum(written.values())}/{len(written)}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse(argv):
    opts, folders = {"timeout": 120, "jobs": 2, "memory": 3072}, []
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
        elif a.startswith("-"):
            raise MarkError(f"unknown flag {a!r}")
        else:
            folders.append(a)
    if len(folders) != 1 or not os.path.isdir(folders[0]):
        raise MarkError("usage: python -m exercises.answers.mark SUBMISSIONS [--timeout=S] "
                        "[--jobs=N] [--memory=MB] (a folder with one folder per student)")
    return folders[0], opts


def student_name(folder, sheet):
    return canonical(getattr(sheet, "STUDENT", "") or "") or os.path.basename(folder)


def submissions(top):
    """The student folders of ``top``, every sheet read as data before anything runs.
    A folder whose name starts with '.' is skipped and two folders of the same student
    are both marked, each with a warning line."""
    names = sorted(d for d in os.listdir(top) if os.path.isdir(os.path.join(top, d)))
    for d in names:
        if d.startswith("."):
            print(f"warning: {os.path.join(top, d)} is skipped: a folder whose name starts "
                  f"with '.' is not a submission (rename it to mark it)", file=sys.stderr)
    subs = [os.path.join(top, d) for d in names if not d.startswith(".")]
    if not subs:
        raise MarkError(f"{top} holds no student folder")
    seen = {}
    for s in subs:
        sheet = os.path.join(s, "sheet.py")
        if not os.path.isfile(sheet) or os.path.islink(sheet):
            raise MarkError(f"{s}: no sheet.py (a regular file)")
        name = student_name(s, read_sheet(sheet))  # "ada lovelace" is Ada Lovelace too
        seen.setdefault(name.casefold(), (name, []))[1].append(os.path.basename(s))
    for name, folders in seen.values():
        if len(folders) > 1:
            print(f"warning: {len(folders)} folders name the same student "
                  f"{check.clean(name, 60)!r} ({', '.join(folders)}): each gets its own row",
                  file=sys.stderr)
    return subs


def main(argv):
    try:
        top, opts = parse(argv)
        subs = submissions(top)
        sandbox.mode()
    except (MarkError, SheetError, sandbox.SandboxError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mark-") as work:
        try:
            base = base_copy(os.path.join(work, "base"))
        except handout.HandoutError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        hide = [ROOT, os.path.abspath(top), work]
        sandbox.allow()
        pool = ThreadPoolExecutor(max_workers=opts["jobs"])
        try:
            self_test(base, work, opts, hide)
            pending = [mark_one(base, work, s, opts, hide, pool) for s in subs]
            rows = [(name, numbers, {ex: job.result() for ex, job in jobs.items()}, written)
                    for name, numbers, jobs, written in pending]
        except sandbox.SandboxError as e:  # the tool failed: no marks at all, not zeros
            sandbox.kill_all()
            pool.shutdown(wait=True, cancel_futures=True)
            sandbox.allow()  # every thread has ended: nothing is left to stop
            print(f"error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # stop every sandbox now, not after its time limit
            pool.shutdown(wait=False, cancel_futures=True)
            sandbox.kill_all()
            raise
        pool.shutdown()
    print(table(rows))
    for name, numbers, checks, written in rows:
        bad = [f"{ex} {k} = {got}" + (f" (hint: {h})" if h else "")
               for ex, k, got, ok, h in numbers if not ok]
        bad += [f"{ex} {what}: {why}" for ex in CODE_EXERCISES for what, why in checks[ex]
                if why is not None]
        bad += [f"{w} missing" for w, ok in written.items() if not ok]
        if bad:
            print(f"\n{check.clean(name, 60)}:\n" + "\n".join(f"  {b}" for b in bad))
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
