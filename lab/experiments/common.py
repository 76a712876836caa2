"""experiments/common.py: what every experiment script shares.

* ``parse(argv)``: ``--quick``, ``--seeds``, ``--out``, ``--threads``, ``--jobs``,
  ``--replot`` and the experiment's own ``--key=value`` flags, all checked before
  any work; ``cli(main)`` turns bad input into one ``error:`` line, exit status 2.
  Only the full run (no flag that changes the design) writes ``results/``
  (committed), and says so; any other run writes ``out/partial/``.
* ``warm_start(...)`` and ``run(...)``: train.py's own code, in-process; a run that
  stops half-way leaves no folder behind.
* ``load_record``, ``save_record``: cached records, written atomically; a damaged one
  (cut, not JSON) is set aside (NAME.bad) and computed again. ``check_record``: a record
  that parses but holds what its experiment never writes (a NaN, a string for a number)
  is refused in one line naming it, never dropped from an analysis.
* ``save``, ``replot``, ``errbars``, ``caption``, ``ci_note``, ``contrast_panel``: the JSON and an
  honest figure (bars cut at 0 are said to be cut); statistics: stats.py.
* ``pool(fn, items, jobs)``: independent seeds or runs in ``--jobs`` one-thread
  workers (two such workers do about twice the work of one two-thread process).
* ``rl_states(opts, seed, steps)``: GRPO RL from a warm start, keeping the model
  *and the AdamW state* at the given steps, so that E1-E6 can take the next
  step as real training would (``real_step``).
"""

import contextlib
import copy
import dataclasses
import json
import math
import multiprocessing
import os
import signal
import sys
import threading
import time

import torch
from tqdm import tqdm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import estimators, files, objectives, testbeds
from lab.hooks import LabHooks
from plumbing import checkpoint
from plumbing import config
from plumbing import dist_utils
from plumbing import rundir
from plumbing.console import progress
import toy_tasks
import train
from model import completion_logprobs
from toy_tasks import PAD
from lab.experiments.stats import (
    ci,
    contrast,
    fmt,
    mean_ci,
    paired,
    print_contrasts,
    seeds_needed,  # noqa: E402,F401
    t_quantile,
    verdict,
)
from plumbing.config import Config, check_out_dir, parse_args
from plumbing import errors
from plumbing.errors import CliError, fail
from lab.experiments.output import (
    caption,
    ci_note,
    clean,
    contrast_panel,
    draw,
    errbars,
    mean_band,
    provenance,
    replot,
    report,
    save,
    table,
)  # noqa: E402,F401

# The flags that say how a run goes, not what it measures: a run given only these (or
# none) is the experiment's full, registered run, and writes results/.
HOW = ("out", "threads", "jobs", "device", "replot")


def parse(argv, extra=None, doc="", redraw=None, unused=(), name=None, modes=(), check=None):
    """Experiment flags. ``extra`` maps name -> (default, help). Every value is checked
    before any work (CliError, one line): counts are >= 1 (--threads >= 0: 0 keeps
    torch's default), numbers finite (learning rates > 0, others >= 0), defaults such
    as "2,4,8" are lists of counts, task names exist, and --out is a writable folder.
    With ``redraw=(name, plot)``, --replot redraws the figure from the JSON and
    exits, as --help prints and exits. The shared flags in ``unused`` do nothing in
    this script: giving one is refused, not silently ignored; so is a flag given twice.

    Where it writes: a run whose flags all keep their defaults, but for those in HOW
    and the script's ``modes`` (such as --calibrate), is the full run: its --out is
    results/, and it says so in one line. Any other run (--quick, --small, --seeds, a
    step count...) is partial: its --out is out/partial/, and results/ is refused.
    ``name``: the experiment's, for that line (default: redraw's). ``check(opts)``: the
    script's own checks of its flags (CliError), run before any folder is created."""
    name = name or (redraw[0] if redraw else "this experiment")
    opts, given = values(argv, extra, doc, unused)
    defaults, _ = values([], extra, doc, unused)
    changed = [k for k in sorted(given) if k not in HOW + tuple(modes)
               and opts[k] != defaults[k]]
    if opts["quick"]:
        opts["seeds"] = opts["seeds"][:1]
    global DEVICE  # (a value train.py does not take was refused by config.validate above)
    DEVICE = dist_utils.resolve_device(opts["device"])  # refuses cuda where there is none
    if "out" in given and not opts["out"]:
        raise CliError("--out is empty; leave it out for the default folder")
    if not opts["out"]:
        opts["out"] = default_out(bool(changed))
    check_out_dir(opts["out"], "--out")
    committed = in_results(opts["out"])
    if changed and committed:
        raise CliError(f"--out={opts['out']} is in results/, which only the full run writes; "
                       f"{', '.join('--' + k for k in changed)} "
                       f"make{'s' if len(changed) == 1 else ''} this run partial: leave "
                       f"--out out (out/partial/) or name another folder")
    if check is not None:
        check(opts)
    if opts["threads"]:
        torch.set_num_threads(opts["threads"])
    if opts["replot"] and redraw:
        replot(redraw[0], opts["out"], redraw[1])
        sys.exit(0)
    if committed:
        announce(name)
    os.makedirs(opts["out"], exist_ok=True)
    provenance(DEVICE)  # the commit and machine this run starts from, recorded in its JSON
    return opts


def announce(name):
    """The one line a run that changes committed files prints, before it starts."""
    print(f"full run of {name}: it updates the committed results/ (a run with a flag that "
          f"changes its design writes out/partial/)")


MOST = {"jobs": 256, "threads": 1024}  # processes and threads: more is a typo, not a machine


def values(argv, extra, doc, unused):
    """(the flags' values, the names given) of parse, checked, before anything is done
    with them.

    Long because: every flag an experiment shares is parsed and checked in one place, before
    anything runs."""
    import toy_tasks
    opts = {"quick": False, "seeds": "0,1,2", "out": "", "threads": 0, "jobs": 2, "replot": False,
            "device": "cpu"}
    opts.update({k: v[0] for k, v in (extra or {}).items()})
    given = set()
    for a in argv:
        if a in ("-h", "--help"):
            print(help_text(doc, extra, unused))
            sys.exit(0)
        key, eq, raw = a[2:].partition("=")
        if not a.startswith("--") or key not in opts:
            raise CliError(f"unknown flag {a!r} (see --help)")
        if key in unused:
            raise CliError(f"--{key} does nothing in this script (see --help)")
        if key in given:  # else the last one would win without a word
            raise CliError(f"--{key} is given twice; give it once")
        given.add(key)
        default = opts[key]
        if isinstance(default, bool):
            if eq and raw.lower() not in ("1", "true", "yes", "0", "false", "no"):
                raise CliError(f"--{key} takes true or false, got {raw!r}")
            opts[key] = raw.lower() in ("1", "true", "yes") if eq else True
            continue
        if not eq:
            raise CliError(f"--{key} needs a value: --{key}=VALUE")
        try:
            opts[key] = type(default)(raw)
        except ValueError:
            raise CliError(
                f"--{key} takes {'an integer' if isinstance(default, int) else 'a number'}, "
                f"got {raw!r}"
            ) from None
    for key, v in opts.items():
        default = (extra or {}).get(key, (None,))[0]
        if isinstance(v, bool):
            continue
        if isinstance(v, int) and v < (0 if key == "threads" else 1):
            raise CliError(f"--{key} must be at least {0 if key == 'threads' else 1}, got {v}")
        if key in MOST and v > MOST[key]:
            raise CliError(f"--{key} must be at most {MOST[key]}, got {v}")
        if isinstance(v, float) and not (
            math.isfinite(v) and (v > 0 if key.endswith("lr") else v >= 0)
        ):
            raise CliError(
                f"--{key} must be a finite number {'> 0' if key.endswith('lr') else '>= 0'}, got "
                f"{v}"
            )
        if key in ("task", "hard_task") and v not in toy_tasks.TASKS:
            raise CliError(
                f"--{key}: unknown task {v!r}; choose one of {', '.join(toy_tasks.TASKS)}"
            )
        if key.endswith("lrs"):  # a learning-rate sweep: "1e-3,1e-2,1e-1"
            opts[key] = float_list(key, v)
        elif key == "seeds" or (isinstance(default, str) and "," in default):
            opts[key] = int_list(key, v, 0 if key in ("seeds", "steps") else 1)
            twice = sorted({s for s in opts[key] if opts[key].count(s) > 1})
            if key == "seeds" and twice:  # a seed counted twice would be two "independent" seeds
                raise CliError(f"--seeds={v}: seed {twice[0]} is given twice; each seed once")
    if "digits" in opts and not 1 <= opts["digits"] <= 20:
        raise CliError(f"--digits must be in 1..20, got {opts['digits']}")
    # model and warm-start flags not given take the task's defaults (plumbing/config.py)
    if "task" in opts:
        for key in TASK_SIZED:
            if key in opts and key not in given:
                opts[key] = config.default_of(key, opts["task"])
        for key in config.TASK_FLAGS_UNUSED.get(opts["task"], ()):
            if key in given:
                raise CliError(f"--{key} does not apply to --task={opts['task']}")
            if key in opts:
                opts[key] = getattr(Config, key)
    for key, v in opts.items():  # numbers in a range torch holds
        big = max(v) if isinstance(v, list) and v and isinstance(v[0], int) else v
        if (
            isinstance(big, int)
            and not isinstance(big, bool)
            and big >= (2**63 if key == "seeds" else config.INT_MAX)
        ):
            raise CliError(f"--{key}={big} is out of range")
        if isinstance(v, float) and v > config.FLOAT_MAX:
            raise CliError(f"--{key}={v:g} is out of range: at most {config.FLOAT_MAX:g}")
    train_flags = {
        k: v
        for k, v in opts.items()
        if k in Config.__dataclass_fields__
        and k != "out_dir"
        and not isinstance(v, list)
        and type(v) is type(getattr(Config, k))
    }
    config.validate(
        Config(**train_flags)
    )  # the flags the runs pass to train.py, checked by its rules
    return opts, given


RESULTS = os.path.join(ROOT, "results")


def in_results(path):
    """Whether ``path`` is the committed results/ folder or inside it (links followed)."""
    real, results = os.path.realpath(path), os.path.realpath(RESULTS)
    return real == results or real.startswith(results + os.sep)


def default_out(partial):
    """results/ for the full run (its files are committed); the scratch folder
    out/partial/ (ignored by git) for any other, so that a partial run never
    overwrites a committed result. Partial runs of every experiment share it: their
    warm starts and caches are named by every flag that defines them."""
    return os.path.join(ROOT, "out", "partial") if partial else RESULTS


def help_text(doc, extra=None, unused=()):
    """An experiment's --help: its docstring, then one flag per line (not the shared
    flags the script does not use)."""
    rows = [("--quick", "one seed, fewer steps: a partial run (out/partial/)"),
            ("--seeds=0,1,2", "comma-separated seeds of the full run"),
            ("--out=DIR", "default results/; out/partial/ when a flag changes the run"),
            ("--threads=N", "torch threads per worker (0: torch's default)"),
            ("--jobs=2", "worker processes: seeds (or runs) in parallel, one per core"),
            ("--device=cpu", "cpu | cuda | auto: where train.py's runs go (probes: CPU)"),
            ("--replot", "redraw the PNG from the JSON already in --out; recompute nothing")]
    rows = [r for r in rows if r[0].split("=")[0][2:] not in set(extra or {}) | set(unused)]
    rows += [(f"--{k}={v[0]}", v[1]) for k, v in (extra or {}).items()]
    width = max(len(r[0]) for r in rows) + 2
    return doc.strip() + "\n\nflags:\n" + "\n".join(f"  {f:<{width}}{h}" for f, h in rows)


def int_list(key, raw, low):
    """'2,4,8' -> [2, 4, 8]; each at least ``low``; at least one."""
    try:
        xs = [int(s) for s in str(raw).split(",") if s.strip() != ""]
    except ValueError:
        raise CliError(f"--{key} takes a comma-separated list of integers, got {raw!r}") from None
    if not xs:
        raise CliError(f"--{key} needs at least one value")
    if min(xs) < low:
        raise CliError(f"--{key} values must be at least {low}, got {min(xs)}")
    return xs


def float_list(key, raw):
    """'1e-3,1e-1' -> [0.001, 0.1]; each finite and > 0; at least one."""
    try:
        xs = [float(s) for s in str(raw).split(",") if s.strip() != ""]
    except ValueError:
        raise CliError(f"--{key} takes a comma-separated list of numbers, got {raw!r}") from None
    if not xs or not all(math.isfinite(x) and 0 < x <= config.FLOAT_MAX for x in xs):
        raise CliError(f"--{key} needs finite numbers > 0 and at most {config.FLOAT_MAX:g}, "
                       f"got {raw!r}")
    return xs


def cli(main):
    """Run an experiment's main(argv) from the command line: bad input (the project's
    CliError), a diverged run, a failed write (a full disk) and Ctrl-C get one
    'error: ...' line and exit status 2."""
    return errors.cli(main, sys.argv[1:])


def load_record(path, keys=()):
    """The JSON record a finished run cached at ``path`` (an object holding ``keys``), or
    None if there is none. One that does not parse (cut, or not this experiment's) is set
    aside and None returned: the caller computes it again."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
    except (ValueError, RecursionError):  # cut off, not UTF-8, not JSON
        return set_aside(path, "is not readable JSON")
    missing = [k for k in keys if k not in rec] if isinstance(rec, dict) else ["an object"]
    if missing:
        return set_aside(path, f"is not a record of this experiment (no {missing[0]!r})")
    return rec


# A record's fields and what each holds (check_record): what the runs of E12 and E13 write
NUM, NUM_OR_NONE = "a finite number", "a finite number or null"
NUMS, NUMS_OR_NONE = "a list of finite numbers", "a list of finite numbers or nulls"
INT, STR, STRS, STEPS = "an integer", "a string", "a list of strings", "a list of [step, number]"
RUN_FIELDS = {"seed": INT, "cond": STR, "arm": STR, "flags": STRS, "seconds": NUM,
              "ell": STEPS, "drift": NUM, "p_end": NUM, "gap": NUMS_OR_NONE,
              "manipulation": NUM_OR_NONE, "push_1L": NUM, "push": NUM,
              "push_steps": NUMS_OR_NONE, "push_1L_steps": NUMS_OR_NONE, "reward": NUMS,
              "length_correct": NUMS_OR_NONE, "length_incorrect": NUMS_OR_NONE}
GATE_FIELDS = {"seed": INT, "task": STR, "gap": NUM_OR_NONE}
LATER_FIELDS = ("push_steps", "push_1L_steps", "length_correct", "length_incorrect")  # not in
# the first records (the calibrations'): checked where present


def holds(value, kind):
    """Whether ``value`` is what ``kind`` (one of the names above) says."""
    number = lambda x: (isinstance(x, (int, float)) and not isinstance(x, bool)
                        and math.isfinite(x))
    if kind in (NUM, NUM_OR_NONE):
        return number(value) or (kind == NUM_OR_NONE and value is None)
    if kind in (NUMS, NUMS_OR_NONE):
        return isinstance(value, list) and all(
            number(x) or (kind == NUMS_OR_NONE and x is None) for x in value)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == STR:
        return isinstance(value, str)
    if kind == STRS:
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    if kind == STEPS:
        return isinstance(value, list) and all(
            isinstance(x, list) and len(x) == 2 and holds(x[0], INT) and number(x[1])
            for x in value)
    raise ValueError(kind)


def check_record(path, rec, fields, optional=LATER_FIELDS):
    """``rec`` (read from ``path``) as its experiment wrote it: each of ``fields`` present (but
    those in ``optional``) and holding what it names. Else one line (CliError) naming the
    record and the field: such a record is refused, never dropped from an analysis or
    rewritten in silence."""
    for key, kind in fields.items():
        if key not in rec and key in optional:
            continue
        if key not in rec:
            why = f"has no field {key!r}"
        elif not holds(rec[key], kind):
            why = f"holds {json.dumps(rec[key])[:40]} in {key!r}, not {kind}"
        else:
            continue
        raise CliError(f"record {path} {why}: it is not what the experiment wrote; restore "
                       f"it (git checkout) or delete it to run it again")
    return rec


def save_record(path, rec):
    """Write a record atomically (a record on disk is a finished run, never half of one)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    checkpoint.atomic_write_text(json.dumps(clean(rec)), path)


def set_aside(path, why):
    """Rename a damaged cache file to NAME.bad (NAME.bad.1, ... if taken: kept to look at,
    never read again) and say so in one line; returns None."""
    bad = files.set_aside(path)
    print(f"warning: {path} {why}: set aside as {os.path.basename(bad)}; computing it "
          f"again", file=sys.stderr)
    return None


@contextlib.contextmanager
def chain_teacher(**kwargs):
    """Inside the block, toy_tasks' ``chain`` is ``make_chain(**kwargs)``: the teacher of a
    warm start trained there (train.py's SFT reads the task registry). The RL reward is the
    same whatever the teacher restates."""
    make = toy_tasks.TASKS["chain"]
    toy_tasks.TASKS["chain"] = lambda digits=2, scratchpad=False: testbeds.make_chain(
        digits, scratchpad, **kwargs)
    try:
        yield
    finally:
        toy_tasks.TASKS["chain"] = make


DEVICE = "cpu"  # --device: where train.py's runs go; set by parse, and in every worker


def warm_start_path(out, seed=0, task="add", digits=2, scratchpad=False, sft_steps=1000,
                    **flags):
    """Where ``warm_start`` keeps the warm start of these settings (trained or not)."""
    tag = f"{task}{digits}{'s' if scratchpad else ''}_sft{sft_steps}_seed{seed}"
    tag += "".join(f"_{k}{v}" for k, v in sorted(flags.items()))
    tag += "" if DEVICE == "cpu" else f"_{DEVICE}"
    return os.path.join(out, "ckpt", tag, "warm_start.pt")


def warm_start(out, seed=0, task="add", digits=2, scratchpad=False, sft_steps=1000, **flags):
    """Path of an SFT warm start for this task and seed, trained once and reused (a GPU's
    warm starts are kept apart: its rounding differs). One that does not load (cut by
    something outside the run) is set aside and trained again."""
    path = warm_start_path(out, seed, task, digits, scratchpad, sft_steps, **flags)
    d = os.path.dirname(path)
    if os.path.exists(path):
        try:
            checkpoint.load_checkpoint(path)
            return path
        except CliError as e:
            set_aside(path, str(e).replace(f"checkpoint {path!r} is ", "is "))
    unused = config.TASK_FLAGS_UNUSED.get(task, ())
    args = [
        f"--task={task}",
        f"--sft_steps={sft_steps}",
        "--rl_steps=0",
        f"--seed={seed}",
        f"--out_dir={d}",
        f"--device={DEVICE}",
        "--overwrite",
    ] + [f"--{k}={v}" for k, v in flags.items()]
    args += [
        f"--{k}={v}"
        for k, v in (("digits", digits), ("scratchpad", scratchpad))
        if k not in unused
    ]
    whole(lambda: train.main(parse_args(args)), d)
    return path


def run(flags, out_dir):
    """One train.py run in-process (it replaces an earlier run in out_dir); returns its
    metrics lines."""
    cfg = parse_args(list(flags) + [f"--out_dir={out_dir}", f"--device={DEVICE}", "--overwrite"])
    whole(lambda: train.main(cfg), out_dir)
    return [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]


def metrics_lines(path):
    """The records of a run's metrics.jsonl, or None if a line does not parse."""
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (ValueError, RecursionError):
        return None


def whole(train_run, out_dir):
    """train_run(), which writes a run into out_dir. A run that stops before its end (a full
    disk, Ctrl-C, a divergence) takes its files and the folders it created with it: a
    folder holds a finished run or none. A refusal (CliError) touches nothing: nothing was
    written yet, and the folder may be another writer's."""
    new = []  # out_dir and the parents this run creates, deepest first
    d = os.path.abspath(out_dir)
    while not os.path.exists(d):
        new.append(d)
        d = os.path.dirname(d)
    try:
        train_run()
    except CliError:
        raise
    except BaseException:
        for f in rundir.RUN_FILES:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(out_dir, f))
        checkpoint.clear_stale_temps(out_dir)
        for d in new:
            with contextlib.suppress(OSError):
                os.rmdir(d)
        raise


# ----------------------------------------------------------------------------- parallel work

def _init_worker(threads, device="cpu"):
    global DEVICE
    DEVICE = device
    # Ctrl-C reaches every process of the terminal: the parent says "interrupted" once
    # and ends the pool; a worker's own KeyboardInterrupt would print a traceback each
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # tqdm's default lock is a multiprocessing semaphore, which a worker the pool ends never
    # releases: the resource tracker would warn of it at exit; a worker's bars need no more
    tqdm.set_lock(threading.RLock())
    if threads:
        torch.set_num_threads(threads)


def pool(fn, items, jobs=1, threads=1, desc="seeds"):
    """[fn(x) for x in items], in order, with a progress bar (on a terminal only). With jobs > 1 the
    items run in that many worker processes ("spawn": a fresh interpreter each,
    so no thread pool is inherited half-initialised) of ``threads`` torch threads;
    ``fn`` must be a module-level function and its result picklable. With
    jobs = 1 everything runs here, in this process."""
    items = list(items)
    jobs = max(1, min(jobs, len(items)))
    if jobs == 1:
        return [fn(x) for x in progress(items, desc)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(jobs, initializer=_init_worker, initargs=(threads, DEVICE)) as p:
        return list(progress(p.imap(fn, items), desc, total=len(items)))


def over_seeds(one_seed, opts):
    """one_seed((opts, seed)) for each of --seeds, in --jobs workers -> (results, seeds, start
    time)."""
    t0 = time.time()
    return (
        pool(one_seed, [(opts, s) for s in opts["seeds"]], opts["jobs"], opts["threads"]),
        opts["seeds"],
        t0,
    )


def rate(name, runs, seconds, jobs, unit="runs"):
    """One line: how many units of work an hour this machine did, and with how many workers."""
    per_hour = runs * 3600.0 / max(seconds, 1e-9)
    line = (
        f"{name}: {runs} {unit} in {seconds:.0f} s with {jobs} worker "
        f"process{'es' if jobs > 1 else ''}: "
        f"{per_hour:.0f} {unit}/hour"
    )
    print(line)
    return {"units": runs, "unit": unit, "seconds": round(seconds, 1), "jobs": jobs,
            "per_hour": round(per_hour, 1)}


# ------------------------------------------------------------ diagnostics experiments (e1-e6)

TASK_SIZED = (
    "n_layer",
    "n_head",
    "n_embd",
    "sft_steps",
    "sft_batch",
    "sft_flawed",
)  # per-task defaults
DIAG_FLAGS = {
    "task": (
        "chain",
        "task of the warm start (chain: long completions with style choices the verifier ignores)",
    ),
    "digits": (2, "operand digits (add, mul)"),
    "scratchpad": (False, "scratchpad solutions (add, mul)"),
    "sft_steps": (1000, "SFT steps of the warm start (default: the task's, config.TASK_DEFAULTS)"),
    "sft_flawed": (0.7, "flawed-teacher share of the SFT data (default: the task's)"),
    "n_layer": (4, "model size (warm start; default: the task's)"),
    "n_head": (4, "model size"),
    "n_embd": (128, "model size (default: the task's)"),
    "sft_batch": (64, "SFT batch (warm start)"),
    "prompts": (16, "B: prompts per rollout batch"),
    "group_size": (8, "G: completions per prompt"),
    "batches": (4, "rollout batches per seed"),
    "seeds": ("0,1,2,3,4,5,6,7,8,9", "seeds of the full run (each its own warm start)"),
    "threads": (1, "torch threads per worker: these models gain little from more"),
}

# the flags of the experiments that keep the model's state at a few RL steps and probe it (E1, E2)
KEPT_STATE_FLAGS = {
    "batches": (2, "rollout batches per kept state"),
    "steps": ("0,100,200", "RL steps after which the state is kept and measured (quick: 0,20)"),
    "primary_step": (100, "the step of the primary contrast (quick: the last of --steps)"),
}


def diag_setup(opts, seed):
    """The warm start of these options (trained once, reused), its task, a
    training-problem sampler and a generator: (model, task, draw, gen)."""
    import toy_tasks
    model, _ = checkpoint.load_checkpoint(warm_path(opts, seed))
    task = toy_tasks.make_task(opts["task"], opts["digits"], opts["scratchpad"])
    held_out = toy_tasks.eval_problems(task, Config.eval_size, seed)
    draw = toy_tasks.train_sampler(task, held_out, 1000 + seed)
    torch.manual_seed(seed)
    return model, task, draw, torch.Generator().manual_seed(seed)


def rl_states(opts, seed, steps, lr=None):
    """Run train.py's GRPO RL (its rollouts, its rl_update, its AdamW: lr 1e-4,
    betas (0.9, 0.99), grad clip 1.0; train.py's B = 16 prompts x G = 8, whatever
    batch the measurement itself uses) from the
    warm start of ``opts`` and ``seed``, and return {step: path} of the states
    after ``step`` RL steps, each {"model": weights, "optimizer": AdamW state}.
    Step 0 is the warm start with a fresh optimizer. Cached in
    <out>/ckpt/<warm start>/grpo_rl/ (written atomically) and reused."""
    from plumbing import checkpoint
    model, task, draw, gen = diag_setup(opts, seed)
    cfg = Config(task=opts["task"], seed=seed, **({"lr": lr} if lr else {}))
    folder = os.path.join(os.path.dirname(warm_path(opts, seed)),
                          f"grpo_rl_B{cfg.prompts_per_step}_G{cfg.group_size}_lr{cfg.lr:g}")
    paths = {s: os.path.join(folder, f"step{s}.pt") for s in steps}
    for p in paths.values():  # a file cut by something outside the run is set aside
        if os.path.exists(p) and not loads(p):
            set_aside(p, "does not load")
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    os.makedirs(folder, exist_ok=True)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    for step in range(max(steps) + 1):
        if step in paths:
            checkpoint.atomic_save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                                    "step": step}, paths[step])
        if step == max(steps):
            break
        model.train()
        batch = estimators.rollouts(model, task, draw, cfg, gen, "cpu")
        batch.max_len = task.max_new_tokens
        train.rl_update(model, opt, batch, cfg, gen, LabHooks(cfg))
    return paths


def loads(path):
    """Whether an rl_states file loads: a dict with the model and the optimizer."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # cut, empty, or not torch's
        return False
    return isinstance(state, dict) and {"model", "optimizer"} <= set(state)


def load_state(opts, seed, path, dtype=torch.float32, lr=None):
    """(model, AdamW) of an rl_states file, in ``dtype``: the optimizer carries
    the run's moments and step counts. Sample with the float32 model; measure
    with ``real_step(copy.deepcopy(model).double(), opt, ...)``, which carries
    the moments over to float64 (so that the Delta of confident tokens is not
    rounding noise)."""
    model, _ = checkpoint.load_checkpoint(warm_path(opts, seed))
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    model = model.to(dtype)
    opt = torch.optim.AdamW(
        model.parameters(), lr=lr or Config.lr, betas=(0.9, 0.99), weight_decay=0.0
    )
    opt.load_state_dict(state["optimizer"])  # casts the moments to the parameters' dtype
    if lr:
        for g in opt.param_groups:
            g["lr"] = lr
    return model, opt


def kept_steps(opts, argv, quick=(0, 20)):
    """--steps (sorted, once each) and --primary_step of an experiment that measures
    at kept RL states: --quick takes ``quick`` unless --steps is given, and its
    primary step falls back to the last kept one; a full run refuses a primary step
    that is not kept (CliError)."""
    if opts["quick"] and not any(a.startswith("--steps=") for a in argv):
        opts["steps"] = list(quick)
    opts["steps"] = sorted(set(opts["steps"]))
    if opts["primary_step"] not in opts["steps"]:
        if not opts["quick"]:
            raise CliError(f"--primary_step={opts['primary_step']} is not one of --steps")
        opts["primary_step"] = opts["steps"][-1]
    return opts


def state_at(opts, seed, step):
    """(model, AdamW, task, draw, gen) at RL step ``step`` of the seed's GRPO run
    (rl_states, load_state), with the problem stream advanced past the problems the
    run already drew, so that measurements use the problems it would draw next."""
    path = rl_states(opts, seed, [step])[step]
    _, task, draw, gen = diag_setup(opts, seed)
    model, opt = load_state(opts, seed, path)
    for _ in range(step * Config.prompts_per_step):
        draw()
    return model, opt, task, draw, gen


def warm_path(opts, seed):
    """Where diag_setup's warm start of ``opts`` and ``seed`` lies (trained if missing)."""
    size = {k: opts[k] for k in ("n_layer", "n_head", "n_embd", "sft_batch", "sft_flawed")
            if opts[k] != getattr(Config, k)}
    return warm_start(opts["out"], seed, opts["task"], opts["digits"], opts["scratchpad"],
                      opts["sft_steps"], **size)


def real_step(model, opt, batch, adv, loss="grpo", grad_clip=1.0, params="all"):
    """One optimizer step exactly as train.optimizer_step takes it (whole batch,
    ratio 1, gradient clip) on ``model`` with ``opt``'s state (cast to the
    model's dtype); returns (new model, its optimizer) as copies, so that the
    state it started from is kept. params="head": only the unembedding
    ``lm_head.weight`` gets a gradient, so AdamW moves only it (a parameter
    without a gradient is skipped, moments and all)."""
    new = copy.deepcopy(model)
    for name, p in new.named_parameters():
        p.requires_grad_(params == "all" or name == "lm_head.weight")
    g = opt.param_groups[0]
    new_opt = torch.optim.AdamW(new.parameters(), lr=g["lr"], betas=g["betas"], eps=g["eps"],
                                weight_decay=g["weight_decay"])
    new_opt.load_state_dict(
        copy.deepcopy(opt.state_dict())
    )  # a same-dtype load would share the moments
    cfg = Config(loss=loss, clip="none", grad_clip=grad_clip)
    with torch.no_grad():  # "old" log-probs in the model's own dtype: the ratio is exactly 1
        old = completion_logprobs(model, batch.prompts, batch.tokens, batch.mask, PAD)
    rows = torch.arange(len(adv))
    train.optimizer_step(new, new_opt, dataclasses.replace(batch, old_logprobs=old), adv, rows, cfg,
                         hooks=LabHooks(cfg))
    for p in new.parameters():
        p.requires_grad_(True)
    return new, new_opt


def sample_checkpoint(path, task_name, seed, stream, prompts, group_size=8):
    """A checkpoint's rollouts at temperature 1 on training problems (seed's held-out set
    left out), drawn and sampled from their own stream ``stream``: (task, batch)."""
    model, _ = checkpoint.load_checkpoint(path)
    task = toy_tasks.make_task(task_name)
    draw = toy_tasks.train_sampler(task, toy_tasks.eval_problems(task, Config.eval_size, seed),
                                   stream)
    with torch.no_grad():
        batch = rollout_batch(model, task, draw, prompts, group_size,
                              torch.Generator(device="cpu").manual_seed(stream))
    return task, batch


def rollout_batch(model, task, draw, prompts, group_size, gen, temperature=1.0):
    """The lab's rollouts (estimators.rollouts: each row's problem in ``problems``), with
    ``max_len``."""
    cfg = Config(prompts_per_step=prompts, group_size=group_size, temperature=temperature)
    batch = estimators.rollouts(model, task, draw, cfg, gen, "cpu")
    batch.max_len = task.max_new_tokens
    return batch
