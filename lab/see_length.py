"""see_length.py: what GRPO's 1/L_i does when wrong rollouts are longer, in a few minutes.

What it teaches (THEORY.md 2.7)
-------------------------------
GRPO weighs every token of rollout i by w_i = 1/L_i. The copies of a token that every
rollout of a group writes after one history then receive

    sum_i Â_i w_i = G Cov_g(Â, w),

zero when the weights are equal (dapo) and, under 1/L, away from zero whenever length goes
with the reward inside the group. Here it does: on ``parity_wrong_long`` a wrong guess
costs two 8-token retries, so wrong rollouts are about 16 tokens longer than right ones.
The choice is the completion's first token: ``(`` opens a 15-token restatement the reward
never checks (p about 0.4 after SFT). The right rollouts are the short ones, so 1/L gives
their tokens more weight than the wrong ones', and the restated (longer) variant of a
right rollout less than the plain one. To first order 1/L moves the choice's logit by

    sum_i Â_i (w_i - mean w)(x_i - f_g)      (x_i = 1 if rollout i restated, f_g its
                                               group's share),

which lab/lengthcov.py logs at every step: here it pushes away from restating. dapo's
equal weights add no such push.

One command trains a warm start (800 SFT steps, E12's model), then runs grpo and dapo from
it on the same rollout stream (20 RL steps at lr 3e-5, E12's W+ condition and settings)
and prints the length gap, how far each arm moved the choice, and the predicted push. It
runs on one thread, as E12 did: seed S prints E12's W+ numbers of seed S. Seed 0's
grpo - dapo is the largest of E12's 16 W+ seeds. A seed whose gap misses E12's check (wrong
rollouts 10 tokens longer in 80 % of the steps) gets a note saying so.

    python -m lab.see_length              # seed 0: 2-5 minutes, on one thread
    python -m lab.see_length --seed=3     # another warm start and rollout stream

train.py's own output goes to <out>/seed<S>/train.log; the runs are scratch (out/).
"""
import contextlib
import math
import os
import sys
import time

import torch

from lab.experiments import common
from lab.experiments.e12_covariance import GAP_MIN, GAP_SHARE, manipulation
from plumbing import checkpoint
from plumbing.errors import CliError, cli

TASK = "parity_wrong_long"
SFT_STEPS, WIDTH = 800, 96            # E12's warm start (results/e12_preregistration.md)
LR, STEPS, EVAL_EVERY = 3e-5, 20, 10  # E12's RL arms and measurement step
ARMS = {"grpo": "w = 1/L", "dapo": "equal w"}
USAGE = "usage: python -m lab.see_length [--seed=N] [--out=FOLDER]"


def parse(argv):
    """--seed (0..2^31-1) and --out (a folder we may write in), each at most once; anything
    else is refused."""
    opts = {"seed": 0, "out": os.path.join("out", "see_length")}
    given = set()
    for arg in argv:
        if arg in ("-h", "--help"):
            print(__doc__.strip() + "\n\n" + USAGE)
            sys.exit(0)
        key, eq, val = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if key not in opts or not eq:
            raise CliError(f"unknown argument {arg!r}; {USAGE}")
        if key in given:  # else the last one would win without a word
            raise CliError(f"--{key} is given twice; give it once")
        given.add(key)
        if key == "seed":
            if not val.isdigit() or int(val) > 2**31 - 1:
                raise CliError(f"--seed takes a whole number 0..{2**31 - 1}, got {val!r}")
            opts["seed"] = int(val)
        else:
            opts["out"] = val
    common.check_out_dir(opts["out"], "--out")
    return opts


def quietly(fn, log):
    """fn() with train.py's console output sent to the log file."""
    with open(log, "a", encoding="utf-8") as f, contextlib.redirect_stdout(f), \
            contextlib.redirect_stderr(f):
        return fn()


def one_arm(warm, seed, arm, folder, log):
    """One RL run from the warm start: its choice log-odds at step 0 and STEPS, and the
    mean gap and summed 1/L push over its steps."""
    flags = [f"--task={TASK}", f"--init_from={warm}", f"--seed={seed}", f"--loss={arm}",
             f"--lr={LR}", f"--rl_steps={STEPS}", f"--eval_every={EVAL_EVERY}"]
    ms = quietly(lambda: common.run(flags, os.path.join(folder, arm)), log)
    ell = {m["step"]: m["choice_log_odds"] for m in ms
           if m["phase"] == "rl" and "choice_log_odds" in m}
    steps = [m for m in ms if m["phase"] == "rl" and m["step"] >= 1 and "reward" in m]
    gaps = [m["lencov_gap"] for m in steps if m.get("lencov_gap") is not None]
    return {"ell0": ell[0], "ell": ell[STEPS], "drift": ell[STEPS] - ell[0],
            "gap": sum(gaps) / len(gaps) if gaps else None,
            "kept": manipulation([m.get("lencov_gap") for m in steps], "W+"),
            "push_1L": sum(m.get("lencov_choice_1L") or 0.0 for m in steps)}


def p_of(ell):
    return 1 / (1 + math.exp(-ell))


def reading(runs):
    """The plain lines the command prints, from its own runs."""
    g, d = runs["grpo"], runs["dapo"]
    gap = (g["gap"] + d["gap"]) / 2
    diff, push = g["drift"] - d["drift"], g["push_1L"]
    lines = [f"right - wrong length gap in a group: {gap:+.1f} tokens (mean of both runs' "
             f"steps; {'wrong' if gap < 0 else 'right'} rollouts longer)",
             f"the choice '(' (restate, 15 tokens longer): p = {p_of(g['ell0']):.2f} "
             f"after SFT"]
    for arm, note in ARMS.items():
        r = runs[arm]
        lines.append(f"  {arm} ({note}): log-odds {r['drift']:+.2f} nats in {STEPS} steps "
                     f"(p {p_of(r['ell0']):.2f} -> {p_of(r['ell']):.2f})")
    lines.append(f"  grpo - dapo: {diff:+.2f} nats")
    kept = {arm: runs[arm]["kept"] for arm in ARMS}
    if min(kept.values()) < GAP_SHARE:  # E12 would have left this seed's W+ runs out
        lines.append(f"note: wrong rollouts were {GAP_MIN:.0f}+ tokens longer in only "
                     + " and ".join(f"{100 * v:.0f} % of {a}'s steps" for a, v in kept.items())
                     + f"; E12's check asks {100 * GAP_SHARE:.0f} %, so 1/L had less to push")
    lines.append(f"1/L's first-order push on the choice, summed over grpo's steps: "
                 f"{push:+.3f} ({'away from' if push < 0 else 'towards'} restating)")
    if diff * push > 0:
        lines.append(f"reading: grpo moved the choice {abs(diff):.2f} nats further "
                     f"{'from' if diff < 0 else 'towards'} restating than dapo, "
                     f"in the direction of the 1/L push")
    else:
        lines.append("reading: grpo and dapo differ the other way from the 1/L push on this "
                     "seed: noise won here")
    return lines


def main(argv):
    o = parse(argv)
    # one thread: the numbers are then the same on any core count, and seed S's are E12's
    # W+ records of seed S (E12 ran on one thread); a thread count changes the rounding
    torch.set_num_threads(1)
    folder = os.path.join(o["out"], f"seed{o['seed']}")
    os.makedirs(folder, exist_ok=True)
    log = os.path.join(folder, "train.log")
    t0 = time.time()
    print(f"warm start: {SFT_STEPS} SFT steps on {TASK} (a wrong guess retries twice, 16 "
          f"tokens; trained once per seed, then reused) ...", flush=True)
    size = dict(sft_steps=SFT_STEPS, sft_flawed=0.5, n_embd=WIDTH)
    path = common.warm_start_path(folder, o["seed"], TASK, **size)
    if os.path.exists(path):  # a damaged one is set aside here, on the terminal, not in the log
        try:
            checkpoint.load_checkpoint(path)
        except CliError as e:
            common.set_aside(path, str(e).replace(f"checkpoint {path!r} is ", "is "))
    warm = quietly(lambda: common.warm_start(folder, o["seed"], TASK, **size), log)
    runs = {}
    for arm in ARMS:
        print(f"{arm}: {STEPS} RL steps from it ...", flush=True)
        runs[arm] = one_arm(warm, o["seed"], arm, folder, log)
    for line in reading(runs):
        print(line)
    print(f"[{time.time() - t0:.0f} s; train.py's output in {log}]")
    return runs


if __name__ == "__main__":
    cli(main, sys.argv[1:])
