"""console.py: what a run prints, and nothing else.

What it teaches: the few numbers a student should watch. A progress bar on a
terminal (none in a redirected log, where its redraws would flood the file),
one line per evaluation, a hint when too few groups are mixed for RL to learn
(a group whose rollouts are all right or all wrong has Â_i = 0 for every i),
and a summary that says how far the run was from cancelling:

    exch_residual = mean over (history, token) sets S of |sum_S c_i - wbar sum_S Â_i| / sum_S |c_i|

(loss.exch_residual), averaged over the RL steps: 0 up to float error when every
copy of a shared token got the same weight, > 0 under grpo's 1/L_i.
"""

import sys

from tqdm import tqdm


def progress(steps, desc, master=True, total=None):
    """A progress bar on a terminal; none in a redirected log (its lines would flood it)."""
    return tqdm(steps, desc=desc, total=total, dynamic_ncols=True,
                disable=not master or not sys.stderr.isatty())


MIXED_HINT_BELOW, MIXED_START_STEPS = (
    0.2,
    10,
)  # the hint's threshold; the summary's mean over first steps
EXCH_ZERO = 1e-6  # exch_residual below this is float error (it is ~1e-16 for equal weights)


def weak_start_hint(mixed, cfg):
    """One line when too few groups are mixed for RL to learn (only a group with both
    right and wrong rollouts has a non-zero advantage); '' otherwise."""
    return (
        ""
        if mixed >= MIXED_HINT_BELOW
        else (
            f"hint: only {100 * mixed:.0f} % of groups are mixed at the start of RL, so few carry "
            "a learning signal; "
            f"strengthen the warm start (more --sft_steps, a --sft_flawed near 0.7) "
            f"or sample more per prompt (--group_size=16, --temperature=1.2)"
        )
    )


def summary_line(summary, cfg):
    """The last line of a run, with no NaN in it (no RL step: no mixed fraction)."""
    acc0, acc, mixed = (
        summary["warm_start_acc"],
        summary["final_acc"],
        summary.get("mixed_at_start"),
    )
    mixed_txt = (
        f"mixed groups in the first RL steps {mixed:.2f}"
        if mixed is not None
        else "no RL steps run"
    )
    line = (f"warm start acc {acc0:.3f} -> after RL {acc:.3f} ({100 * (acc - acc0):+.1f} points); "
            f"{mixed_txt}; {summary['seconds']:.0f}s; outputs in {cfg.out_dir}/")
    exch = summary.get("exch_residual_mean")
    if exch is None:
        return line
    verdict = (
        f"copies of a shared token got unequal weights under --loss={cfg.loss}; try --loss=dr_grpo "
        "(equal weights)"
        if exch > EXCH_ZERO
        else "every copy of a shared token got the same weight "
        "(0 up to float error); try --loss=grpo (1/L_i weights)"
    )
    return line + f"\nexch_residual, mean over the RL steps: {exch:.1e}: {verdict}"
