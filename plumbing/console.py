"""console.py: what a run prints, and nothing else.

What it teaches: the few numbers a student should watch. A progress bar on a
terminal (none in a redirected log, where its redraws would flood the file),
one line per evaluation, a hint when too few groups are mixed for RL to learn
(a group whose rollouts are all right or all wrong has Â_i = 0 for every i),
and a summary that closes with the run's cancellation ledger (ledger.py,
THEORY.md section 2.5): of the coefficients the shared tokens received, how
much cancelled inside the optimizer steps, what did not and why, the flag that
removes the largest cause, and how the shared tokens' log-probabilities moved.
"""

import sys

from tqdm import tqdm


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
