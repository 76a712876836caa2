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
from dataclasses import replace

from tqdm import tqdm

import ledger
from plumbing.config import validate
from plumbing.errors import CliError


def progress(steps, desc, master=True, total=None):
    """A progress bar on a terminal; none in a redirected log (its lines would flood it)."""
    return tqdm(steps, desc=desc, total=total, dynamic_ncols=True,
                disable=not master or not sys.stderr.isatty())


MIXED_HINT_BELOW, MIXED_START_STEPS = (
    0.2,
    10,
)  # the hint's threshold; the summary's mean over first steps


MIXED_HINT_FLAGS = ("strengthen the warm start (more --sft_steps, a --sft_flawed near 0.7) "
                    "or sample more per prompt (--group_size=16, --temperature=1.2)")


def weak_start_hint(mixed, cfg):
    """One line when too few groups are mixed for RL to learn (only a group with both
    right and wrong rollouts has a non-zero advantage); '' otherwise."""
    return (
        ""
        if mixed >= MIXED_HINT_BELOW
        else (
            f"hint: only {100 * mixed:.0f} % of groups are mixed at the start of RL, so few carry "
            "a learning signal; "
            + MIXED_HINT_FLAGS
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
    if "ledger_steps" not in summary:
        return line
    return line + "\n" + "\n".join(ledger_lines(summary, cfg))


# experiments/demo_ledger.py over seeds 0-9 (results/demo_ledger.json; a test checks these):
# shared_dlogp_mean, grpo - dr_grpo: mean, 95 % t half-width, smallest detectable, margin
DEMO_SHARED_DLOGP = (6.7e-6, 3.0e-5, 4.1e-5, 1e-4)


def demo_finding():
    """What the demo's ten seeds found about shared_dlogp, in one sentence."""
    d, h, mde, margin = DEMO_SHARED_DLOGP
    return (f"over seeds 0-9 of the demo, grpo and dr_grpo moved them alike: difference "
            f"{d:+.1e} +- {h:.1e}, equivalent to none within +-{margin:.0e} (smallest detectable "
            f"{mde:.1e}; results/README.md)")


def percent(share):
    """A ledger share for print: 0 up to float error (ledger.LEDGER_ZERO), else 3 digits."""
    return "0 %" if share <= ledger.LEDGER_ZERO else f"{100 * share:.3g} %"


def remedy(part, cfg):
    """The first of ledger.ledger_remedies that this run's flag checks accept, as words
    with its flags; '' when none is accepted."""
    for flags, words in ledger.ledger_remedies(part, cfg):
        try:
            validate(replace(cfg, **flags))
        except CliError:
            continue
        changed = {k: v for k, v in flags.items() if getattr(cfg, k) != v}  # what to type
        return f"try {words} (" + " ".join(f"--{k}={v}" for k, v in changed.items()) + ")"
    return ""


def ledger_lines(summary, cfg):
    """The run's cancellation ledger in a few true sentences (ledger.py, THEORY.md 2.5)."""
    n, shares = summary["ledger_steps"], {k: summary[f"ledger_{k}"]
                                          for k in ("cancelled", *ledger.LEDGER_PARTS)}
    over = "the RL steps" if n == cfg.rl_steps else f"the last {n} RL steps (since the resume)"
    if not summary["ledger_mixed_steps"]:
        return [f"cancellation ledger over {over}: no group was mixed, so no rollout carried an "
                "advantage against another's: nothing to cancel. " + MIXED_HINT_FLAGS]
    if summary["ledger_mass"] == 0:
        return [f"cancellation ledger over {over}: the tokens that rollouts of a group share "
                "after the same history received no coefficient at all: nothing to cancel"]
    parts = ", ".join(f"{ledger.LEDGER_PARTS[p].split(' (')[0]} {percent(shares[p])}"
                      for p in ledger.LEDGER_PARTS)
    part, verdict = ledger.ledger_verdict(shares)
    fix = remedy(part, cfg) if part else ""
    caveat = ledger.ledger_caveats(cfg)
    return [f"cancellation ledger over {over}: of the coefficients on tokens that several "
            f"rollouts of a group share after the same history, {percent(shares['cancelled'])} "
            f"cancelled inside the optimizer steps; the rest by cause (parts can offset each "
            f"other): {parts}",
            verdict + (f"; {fix}" if fix else "") + (f" (note: {caveat})" if caveat else ""),
            f"shared tokens before a mixed group diverges: log-prob change "
            f"{summary['shared_dlogp_mean']:+.1e} nats per RL step on average (steps with no "
            f"such token count as 0)" + (f"; {demo_finding()}" if cfg.task == "add" else "")]
