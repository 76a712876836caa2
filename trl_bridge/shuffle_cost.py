"""shuffle_cost.py: what TRL's row shuffle costs the ledger, over seeds, with an interval.

What it teaches: one seed's mean over a few generation batches is an anecdote. This runs
train_lm.py on the tiny model for each arm (an objective, groups kept whole or shuffled
by TRL, TRL's num_iterations) and each seed. A run's share is its mean over the
generation batches that had shared tokens. Each arm prints the mean of those over the
seeds, with a 95 % Student-t interval over the seeds (the runs are independent; the
batches inside a run are not).

    python -m trl_bridge.shuffle_cost --seeds=5 --steps=32          # minutes, one thread
    python -m trl_bridge.shuffle_cost --seeds=5 --num_iterations=2 --objectives=dapo

Flags (--name=value, each at most once): seeds (5), steps (32), num_iterations (1),
objectives (dapo,dfpo_min).
"""
import contextlib
import io
import os
import sys
import tempfile

from trl_bridge.lesson import load, refuse_without_extra

if __name__ == "__main__":  # a command: a missing extra is one line
    refuse_without_extra()

config_mod, errors, stats = load("plumbing.config", "plumbing.errors", "lab.experiments.stats")
FLAGS = {"seeds": "5", "steps": "32", "num_iterations": "1", "objectives": "dapo,dfpo_min"}
RUN = ["--model=tiny", "--sft_steps=300", "--batch=16", "--accumulation=1",
       "--steps_per_generation=4", "--save_every=0", "--ledger_every=1"]  # 4 steps a batch


def parse(argv):
    o = dict(FLAGS)
    for arg in config_mod.once(argv):
        if arg in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        key, eq, val = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if key not in FLAGS or not eq:
            raise errors.CliError(f"unknown argument {arg!r}; flags: "
                                  + ", ".join(f"--{k}" for k in FLAGS))
        o[key] = val
    for k in ("seeds", "steps", "num_iterations"):
        if not o[k].isdigit() or not 1 <= int(o[k]) <= 1000:
            raise errors.CliError(f"--{k} takes a whole number from 1 to 1000, got {o[k]!r}")
    names = o["objectives"].split(",")
    from trl_bridge.trainer import OBJECTIVES
    if not all(n in OBJECTIVES for n in names):
        raise errors.CliError(f"--objectives takes names from {', '.join(OBJECTIVES)}")
    return int(o["seeds"]), int(o["steps"]), int(o["num_iterations"]), names


def one_run(argv):
    """train_lm's ledger summary of one run, its printing silenced."""
    from trl_bridge import train_lm
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        return train_lm.main([f"--out={os.path.join(d, 'run')}", *argv])


def line(name, values):
    """An arm's share: the mean over the seeds ± its 95 % t half-width (the seeds' values)."""
    m, h = stats.ci(values)
    if m is None:
        return f"{name}: no run had shared tokens"
    half = "n/a" if h is None else f"{100 * h:.1f}"
    return f"{name}: {100 * m:.1f} % ± {half} (n={len(values)} seeds)"


def main(argv):
    seeds, steps, iters, names = parse(argv)
    for name in names:
        for keep in ("true", "false"):
            runs = [one_run(RUN + [f"--steps={steps}", f"--num_iterations={iters}",
                                   f"--loss={name}", f"--keep_groups={keep}", f"--seed={s}"])
                    for s in range(seeds)]
            arm = f"{name} keep_groups={keep} num_iterations={iters}"
            for part in ("cancelled", "split"):
                vals = [r[f"ledger/{part}"] for r in runs if f"ledger/{part}" in r]
                print(line(f"{arm} {part}", vals), flush=True)


if __name__ == "__main__":
    errors.cli(main, sys.argv[1:])
