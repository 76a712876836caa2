"""console.py: what a run prints (and the lines of metrics.jsonl it writes as it prints).

What it teaches: the few numbers a student should watch. A progress bar on a terminal
(none in a redirected log, where its redraws would flood the file), SFT's loss, one line
per evaluation with a legend at RL step 0, a hint when too few groups are mixed for RL to
learn (a group whose rollouts are all right or all wrong has Â_i = 0 for every i), and a
summary. Where the lab is on, its hooks add to the lines: what cancelled, and the run's
cancellation ledger at the end (lab/ledger.py, THEORY.md section 2.5).
"""

import math
import sys
import time

import torch
from tqdm import tqdm

from sampler import evaluate


def progress(steps, desc, master=True, total=None):
    """A progress bar on a terminal; none in a redirected log (its lines would flood it)."""
    return tqdm(steps, desc=desc, total=total, dynamic_ncols=True,
                disable=not master or not sys.stderr.isatty())


MIXED_HINT_BELOW = 0.2  # the hint's threshold
MIXED_START_STEPS = 10  # the summary's mixed fraction: its mean over RL steps 1-10

MIXED_HINT_FLAGS = ("  strengthen the warm start (more --sft_steps, a --sft_flawed near 0.7)\n"
                    "  or sample more per prompt (--group_size=16, --temperature=1.2)")


def weak_start_hint(mixed):
    """A hint when too few groups are mixed for RL to learn (only a group with both right
    and wrong rollouts has a non-zero advantage); '' otherwise."""
    if mixed >= MIXED_HINT_BELOW:
        return ""
    return (f"hint: only {100 * mixed:.0f} % of groups are mixed at the start of RL, so few "
            f"carry a signal:\n{MIXED_HINT_FLAGS}")


def summary_line(summary, cfg):
    """The run's result in two lines, with no NaN in them (no RL step: no mixed fraction)."""
    acc0, acc, mixed = summary["warm_start_acc"], summary["final_acc"], \
        summary.get("mixed_at_start")
    first = min(MIXED_START_STEPS, cfg.rl_steps)
    mixed_txt = (f"mixed groups in RL steps 1-{first}: {mixed:.2f} on average"
                 if mixed is not None else "no RL steps run")
    return (f"warm start acc {acc0:.3f} -> after RL {acc:.3f} ({100 * (acc - acc0):+.1f} points) "
            f"in {summary['seconds']:.0f} s\n{mixed_txt}")


# ----------------------------------------------------------------------------- a run's lines

def sft_log(run, bar, step, losses, printed):
    """The losses of the SFT steps up to ``step``, read back at once: their lines of
    metrics.jsonl, and the printed line. A non-finite one stops the run before its line
    (and before any checkpoint of a diverged model)."""
    values = torch.stack(losses).tolist()
    first = step - len(values) + 1
    for k, value in enumerate(values):
        if not math.isfinite(value):
            raise FloatingPointError(f"SFT step {first + k}: loss is not finite; the run "
                                     f"diverged (try a smaller --sft_lr)")
        run.out.log({"phase": "sft", "step": first + k, "loss": value})
    bar.set_postfix(loss=f"{values[-1]:.3f}")
    if bar.disable and run.master and printed:
        print(f"sft step {step}: loss {values[-1]:.3f}", flush=True)


LEGEND = ("  eval_acc: greedy accuracy on the held-out problems; reward: the mean reward of "
          "the step's\n  samples; mixed: the share of groups with right and wrong rollouts "
          "(only they carry\n  a signal)")


def warm_start(run):
    """RL step 0 (rank 0): the warm start's held-out accuracy and the lab's diagnostics as
    a metrics line, its printed line, and what the numbers of the lines to come mean (the
    lab's hooks add their legend)."""
    try:
        acc0 = evaluate(run.unwrapped, run.task, run.held_out, run.cfg, run.device, run.decoder)
        diag0 = run.hooks.after(run.unwrapped, {"eval_acc": acc0})
    except FloatingPointError as e:
        raise FloatingPointError(f"RL step 0 (evaluation of the warm start): {e}") from None
    run.out.log({"phase": "rl", "step": 0, "eval_acc": acc0, **diag0})
    run.state.sums.update(acc0=acc0, acc=acc0)
    print(f"rl step 0: eval_acc {acc0:.3f} (warm start)  [{time.time() - run.t0:.0f}s]")
    print(LEGEND + run.hooks.legend)


def mixed_at_start(run, step, mixed):
    """The summary's mixed fraction (its mean over RL steps 1-10), and after RL step 1 a
    hint if too few groups are mixed."""
    sums = run.state.sums
    if step <= MIXED_START_STEPS:  # one batch of 16 groups is noisy: average a few
        sums["mixed_start_sum"] += mixed
        sums["mixed_at_start"] = sums["mixed_start_sum"] / step
    if step == 1 and run.master and (hint := weak_start_hint(mixed)):
        tqdm.write(hint)  # too few mixed groups: say how to strengthen the warm start


def eval_line(run, rec):
    """An evaluation's line: accuracy, reward, mixed groups (and the lab's hooks' word:
    what the ledger says cancelled)."""
    tqdm.write(f"rl step {rec['step']}: eval_acc {rec['eval_acc']:.3f}  reward "
               f"{rec['reward']:.3f}  mixed {rec['mixed']:.2f}{run.hooks.line(rec)}  "
               f"[{time.time() - run.t0:.0f}s]")


def summarise(run):
    """The summary line of metrics.jsonl and the last printed lines (rank 0)."""
    cfg, s = run.cfg, run.state.sums
    mixed = s["mixed_at_start"]  # no mixed fraction without an RL step
    summary = {
        "warm_start_acc": s["acc0"],
        **({} if mixed is None else {"mixed_at_start": mixed}),
        "final_acc": s["acc"],
        "gain": s["acc"] - s["acc0"],
        "seconds": round(time.time() - run.t0, 1),
    }
    lines = run.hooks.finish(summary)  # the lab's: the cancellation ledger
    run.out.log({"phase": "summary", "step": cfg.rl_steps, **summary})
    run.out.close()
    print(summary_line(summary, cfg))
    for line in lines:
        print(line)
    print(f"outputs in {cfg.out_dir}/; plot the curves: python -m lab.plot {cfg.out_dir}")
    return summary
