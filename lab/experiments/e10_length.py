"""E10: does GRPO's 1/L_i lengthen wrong completions?

Question. Liu et al. ("Dr. GRPO", arXiv 2503.20783) report that GRPO's 1/|o_i|
"artificially increases response length (especially for incorrect outputs)
during training", and that removing it stops the growth. 1/L_i is also the weight
that [P1] (arXiv 2604.13088) says breaks gradient exchangeability. This experiment
asks whether the length consequence appears on a task where a completion's length
can change without its correctness changing.

Testbed: ``--task=chain_check`` (toy_tasks.py): ``chain`` with 3 operations per
problem, whose teacher may also write its last step again as a check (``,15-5=10``),
each time with p = 0.5, at most twice. A check adds up to 8 tokens and never changes
the reward; the restatement at the start (about eight tokens) is a second such lever.

Predictions from the objective's algebra (THEORY.md section 2; c_{i,t} is the
coefficient of log pi(y_{i,t})):
* grpo: c = Â_i / (G L_i). At the end of a wrong completion (Â_i < 0) the choice
  between stopping and checking again is pushed down by |Â_i| / L_i: less in a longer
  completion. So stopping is pushed down more than checking, and wrong completions
  grow; in right ones (Â_i > 0) stopping is pushed up more, and they shrink. This is
  Dr. GRPO's reading: grpo - dr_grpo > 0 on the wrong completions' length change, < 0
  on the right ones'.
* dr_grpo (c = Â_i / (G L_max)) and dapo (c = Â_i / sum of the step's lengths) weigh
  every token of a step alike: no length preference from the weights; predicted
  dapo - dr_grpo about 0 on both.
* [P1]'s exchangeability reading is about copies of a token that rollouts of *both*
  signs share after the same history: with unequal weights they do not cancel. The
  check decisions come after the answer is written, where the rollouts of a group
  that share a history almost always share its reward: [P1] predicts nothing there.
  At the restatement (the prompt is shared by every rollout) both readings predict
  that grpo favours the longer, restating form, as chain_style.py did (a null there).
  So the two readings coincide in sign on the restatement and only Dr. GRPO's
  predicts the length primaries below.

Method. Per seed, the chain_check warm start (1500 SFT steps, flawed teacher 0.6,
the chain sizes), then 200 on-policy RL steps of each arm (grpo, dr_grpo, dapo) from
it with the same seed, so the first rollout batch is the same; ``--diagnostics``.
Every RL step logs the mean length (tokens, EOS included) of its right and of its
wrong rollouts (``length_correct``, ``length_incorrect``: 128 rollouts sampled at
temperature 1).

Outcome (fixed before any run): a run's *length change* of the wrong completions is
the mean of ``length_incorrect`` over its last W RL steps minus the mean over its
first W, W = rl_steps // 10 (20 of 200), over the steps that have wrong rollouts;
the same for the right ones.

Primary contrasts (one Holm family of two, paired Student t over seeds 0-9):
1. length change of wrong completions, grpo - dr_grpo: predicted > 0;
2. length change of right completions, grpo - dr_grpo: predicted < 0.
Secondary (exploratory, Holm within them shown by multiplicity.py):
* the same two for dapo - dr_grpo, predicted about 0: equivalence margin +-1 token
  (a seventh of one check), judged on the 95 % interval;
* the same two for grpo - dapo, predicted > 0 and < 0;
* final greedy accuracy, grpo - dr_grpo (no prediction);
* signed restate drift at the last evaluation, grpo - dr_grpo (predicted < 0:
  towards restating, as in chain_style);
* mean token entropy of the greedy completions at the last evaluation (``entropy``),
  grpo - dr_grpo (no prediction).

First amendment, before any run on seeds 0-9: the quick run on seed 100 read the entropy
from a key train.py does not log (``mean_token_entropy``); it reads ``entropy`` now.
Nothing else was changed after that run.

Second amendment, during the full run (post hoc, descriptive, outside every Holm family): each
run's cancellation ledger (ledger.py; the run's shares of the shared tokens' coefficient
mass, weighted by each step's mass), which issue 43 listed among the secondaries. It was
added when seeds 0-3 had finished and before any of their outcomes had been looked at. No
contrast is tested on it: under dr_grpo and dapo the ``weights`` part is 0 by
construction, so grpo's share says how large the exchangeability break was on this task,
not what it did.

Third amendment, after the full run had been seen (post hoc, its own family in
multiplicity.py): every arm shortened both its wrong and its right completions, and a
check can change the reward of a *sampled* completion (a miscopied check is the last step
the verifier reads), which the teacher's exact checks never do. So each seed's warm start
and each run's final model are sampled once more (256 training problems x 8, temperature
1, their own sampling stream) and their checks counted: the share of completions that
check, the accuracy of those that check against those that do not, and how often the
checks change the reward (the completion cut after its last operation, scored again).
Post-hoc contrasts: the warm start's accuracy gap (checked - unchecked) against 0; each
arm's share of checking completions, end - warm start; and that share at the end,
grpo - dr_grpo. Two facts of the text above, corrected here rather than edited: the
restatement is 9 tokens (not about eight), and a check 6-8 (so +-1 token is an eighth of
an 8-token check, not a seventh).

Seeds: the evaluation seeds are 0-9. ``--quick`` runs seed 100 only (smoke tests
and any look before the full run use seeds >= 100). Each run's record is cached in
<out>/runs/e10/ with its flags: an interrupted run continues where it stopped.

    python -m lab.experiments.e10_length --quick     # seed 100, 40 RL steps (out/partial/)
    python -m lab.experiments.e10_length             # seeds 0-9 (results/)
    python -m lab.experiments.e10_length --replot    # redraw results/e10_length.png
"""
import os
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e10_length\n")
    sys.exit(2)
from lab.experiments import common
import toy_tasks

ARMS = ("grpo", "dr_grpo", "dapo")
MARGIN = 1.0  # tokens: the equivalence margin of the dapo - dr_grpo secondaries (docstring)
QUICK_SEED, QUICK_STEPS = 100, 40
EXTRA = {"seeds": ("0,1,2,3,4,5,6,7,8,9", "seeds of the full run (quick: 100)"),
         "rl_steps": (200, f"RL steps per arm (quick: {QUICK_STEPS})"),
         "sft_steps": (1500, "SFT steps of the chain_check warm start"),
         "small": (False, "tiny model and batches, for smoke tests")}
FINAL = ("eval_acc", "style_drift_signed_restate", "entropy")  # entropy: of greedy completions
LEDGER = ("weights", "credit", "cancelled")  # the run's ledger shares kept (post hoc, docstring)


def ledger_shares(steps):
    """The run's ledger: each part's share of the shared tokens' coefficient mass over all
    its RL steps, i.e. the per-step shares weighted by each step's mass (ledger.py)."""
    mass = sum(m["ledger_mass"] for m in steps)
    if not mass:
        return {k: None for k in LEDGER}
    return {k: sum(m[f"ledger_{k}"] * m["ledger_mass"] for m in steps) / mass for k in LEDGER}


def rl_steps_of(ms):
    """The RL steps of a run's metrics lines (step 0 is the warm start's evaluation)."""
    return [m for m in ms if m["phase"] == "rl" and m["step"] >= 1]


def from_log(ms):
    """What a record keeps of a run's metrics lines beyond the outcome: the run's ledger
    (post hoc, docstring) and the warm start's greedy accuracy (its RL step 0)."""
    start = [m for m in ms if m["phase"] == "rl" and m["step"] == 0 and "eval_acc" in m]
    return {"ledger": ledger_shares(rl_steps_of(ms)),
            "warm_acc": start[0]["eval_acc"] if start else None}


def length_change(values, window):
    """Mean of the last ``window`` values minus the mean of the first ``window``, over the
    steps that have such rollouts (None elsewhere); None if either end has none."""
    first = [v for v in values[:window] if v is not None]
    last = [v for v in values[-window:] if v is not None]
    if not first or not last:
        return None
    return sum(last) / len(last) - sum(first) / len(first)


def cut_checks(text, n_ops):
    """The completion up to the end of its ``n_ops``-th step: its checks cut off (a
    completion with fewer steps is returned whole)."""
    start = text.find(")") + 1 if text.startswith("(") else 0  # after the restatement
    seps = [i for i in range(start, len(text)) if text[i] in ",;"]
    return text if len(seps) < n_ops else text[:seps[n_ops - 1]]


def check_stats(o, seed, ckpt, tag, prompts=256, group_size=8):
    """Post hoc (docstring): a model's checks. 256 training problems x 8 rollouts at
    temperature 1 from its own sampling stream: how many check, the accuracy with and
    without a check, and how often the checks change the reward. Cached beside the runs."""
    cache = os.path.join(o["out"], "runs", "e10", f"checks_{tag}_s{seed}.json")
    rec = common.load_record(cache, ("share_checked", "gap"))
    if rec is not None:
        return rec
    task, b = common.sample_checkpoint(ckpt, "chain_check", seed, 7000 + seed,
                                       8 if o["small"] else prompts, group_size)
    rows = []
    for i, p in enumerate(b.problems):
        text = toy_tasks.decode(b.tokens[i])
        n_ops = (len(p) - 1) // 2
        cut = cut_checks(text, n_ops)
        rows.append((cut != text, float(b.rewards[i]), task.reward(p, cut)))
    checked = [r for c, r, _ in rows if c]
    plain = [r for c, r, _ in rows if not c]
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    out = {"rollouts": len(rows), "checked": len(checked),
           "share_checked": len(checked) / len(rows),
           "acc_checked": mean(checked), "acc_not": mean(plain),
           "changed_to_wrong": sum(c and r < u for c, r, u in rows),
           "changed_to_right": sum(c and r > u for c, r, u in rows)}
    out["gap"] = (None if None in (out["acc_checked"], out["acc_not"])
                  else out["acc_checked"] - out["acc_not"])
    common.save_record(cache, out)
    return out


def one_run(o, seed, arm, rl_steps, warm):
    """One arm of one seed: its per-step lengths and final evaluation, cached on disk."""
    size = {"n_layer": 1, "n_embd": 32, "n_head": 2} if o["small"] else {}
    flags = ["--task=chain_check", f"--init_from={warm}", f"--seed={seed}", f"--loss={arm}",
             f"--rl_steps={rl_steps}", f"--eval_every={max(rl_steps // 4, 1)}",
             "--diagnostics=true"]
    if o["small"]:
        flags += ["--prompts_per_step=4", "--group_size=4", "--eval_size=16"]
    flags += [f"--{k}={v}" for k, v in size.items()]
    cache = os.path.join(o["out"], "runs", "e10", f"{arm}_s{seed}.json")
    run_dir = os.path.join(o["out"], "runs", "e10", f"{arm}_s{seed}")
    rec = common.load_record(cache, ("flags",) + FINAL)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if rec is not None and rec["flags"] == flags:
        if "warm_acc" in rec or not os.path.exists(metrics):
            return rec
        # a record from before the amendment: its ledger and warm start are read from the
        # run's own log, unless that no longer parses (then the run is done again)
        ms = common.metrics_lines(metrics)
        if ms is not None:
            return dict(rec, **from_log(ms))
        common.set_aside(cache, f"needs {metrics}, which does not parse")
    ms = common.run(flags, run_dir)
    steps = rl_steps_of(ms)
    evals = [m for m in steps if "eval_acc" in m]
    rec = {"seed": seed, "arm": arm, "flags": flags,
           "length_correct": [m["length_correct"] for m in steps],
           "length_incorrect": [m["length_incorrect"] for m in steps],
           "reward": [m["reward"] for m in steps], **from_log(ms),
           **{k: evals[-1].get(k) if evals else None for k in FINAL}}
    common.save_record(cache, rec)  # a record on disk is a finished run
    return rec


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    o = common.parse(argv, EXTRA, __doc__, redraw=("e10_length", plot), unused=("jobs",))
    if o["quick"]:  # the evaluation seeds are not looked at before the full run
        o["seeds"] = [QUICK_SEED] if not any(a.startswith("--seeds=") for a in argv) else o["seeds"]
    rl_steps = min(o["rl_steps"], QUICK_STEPS) if o["quick"] else o["rl_steps"]
    window = max(rl_steps // 10, 1)
    size = {"n_layer": 1, "n_embd": 32, "n_head": 2} if o["small"] else {"n_embd": 96}
    t0 = time.time()
    runs = {a: [] for a in ARMS}
    checks = {a: [] for a in ("warm start",) + ARMS}  # post hoc (docstring)
    for seed in o["seeds"]:
        warm = common.warm_start(o["out"], seed, "chain_check", sft_steps=o["sft_steps"],
                                 sft_flawed=0.6, **size)
        for arm in ARMS:
            rec = one_run(o, seed, arm, rl_steps, warm)
            rec["change_incorrect"] = length_change(rec["length_incorrect"], window)
            rec["change_correct"] = length_change(rec["length_correct"], window)
            runs[arm].append(rec)
        checks["warm start"].append(check_stats(o, seed, warm, "warm"))
        for arm in ARMS:  # the run's final model (post hoc, docstring)
            final = os.path.join(o["out"], "runs", "e10", f"{arm}_s{seed}", "ckpt.pt")
            checks[arm].append(check_stats(o, seed, final, arm)
                               if os.path.exists(final) else None)
    seeds = o["seeds"]
    of = lambda arm, k: [r[k] for r in runs[arm]]
    pair = lambda a, b, k, pred: common.contrast(of(a, k), of(b, k), pred, seeds)
    primary = {
        "length change wrong, grpo - dr_grpo": pair("grpo", "dr_grpo", "change_incorrect", "> 0"),
        "length change right, grpo - dr_grpo": pair("grpo", "dr_grpo", "change_correct", "< 0"),
    }
    secondary = {
        "length change wrong, dapo - dr_grpo": pair("dapo", "dr_grpo", "change_incorrect",
                                                    "about 0"),
        "length change right, dapo - dr_grpo": pair("dapo", "dr_grpo", "change_correct",
                                                    "about 0"),
        "length change wrong, grpo - dapo": pair("grpo", "dapo", "change_incorrect", "> 0"),
        "length change right, grpo - dapo": pair("grpo", "dapo", "change_correct", "< 0"),
        "final accuracy, grpo - dr_grpo": pair("grpo", "dr_grpo", "eval_acc", "none"),
        "signed restate drift, grpo - dr_grpo": pair("grpo", "dr_grpo",
                                                     "style_drift_signed_restate", "< 0"),
        "mean token entropy, grpo - dr_grpo": pair("grpo", "dr_grpo", "entropy",
                                                   "none"),
    }
    for k in ("length change wrong, dapo - dr_grpo", "length change right, dapo - dr_grpo"):
        secondary[k]["equivalence"] = common.verdict(secondary[k], MARGIN)
    per_arm = {a: {k: common.ci(of(a, k)) for k in ("warm_acc", "change_incorrect",
                                                     "change_correct") + FINAL}
               for a in ARMS}
    for a in ARMS:  # post hoc, descriptive (docstring): the run's ledger shares
        for k in LEDGER:
            per_arm[a][f"ledger_{k}"] = common.ci([(r.get("ledger") or {}).get(k)
                                                   for r in runs[a]])
    share = lambda a: [c and c["share_checked"] for c in checks[a]]
    post = {  # post hoc (docstring): their own family in multiplicity.py
        "warm_check_gap": {"warm start": common.contrast(
            [c["gap"] for c in checks["warm start"]], 0.0, "none", seeds)},
        "check_share_change": {a: common.contrast(share(a), share("warm start"), "none", seeds)
                               for a in ARMS},
        "check_share_end": {"grpo - dr_grpo": common.contrast(share("grpo"), share("dr_grpo"),
                                                              "none", seeds)},
    }
    data = {"experiment": "e10_length", "seeds": seeds, "rl_steps": rl_steps,
            "window": window, "quick": o["quick"], "arms": ARMS, "margin": MARGIN,
            "primary": primary, "secondary": secondary, "per_arm": per_arm, "runs": runs,
            "checks": checks, **post,
            "seconds": round(time.time() - t0, 1)}
    for a in ARMS:
        print(f"{a}: " + "  ".join(f"{k} {common.fmt(v)}" for k, v in per_arm[a].items()))
    common.print_contrasts(primary)
    common.print_contrasts(secondary, "secondary")
    for key, fam in post.items():
        common.print_contrasts({f"{key} {k}": c for k, c in fam.items()}, "post hoc")
    print(f"e10_length took {data['seconds']:.0f}s")
    data = common.clean(data)
    common.save("e10_length", data, o["out"], lambda plt: plot(plt, data))
    return data


def plot(plt, data):
    """Mean length of the wrong and of the right rollouts over RL steps, per arm: the mean
    over seeds with a 95 % t band; grey: the first and last windows the outcome compares."""
    fig, axes = plt.subplots(2, 1, figsize=(8, 6.8), sharex=True, layout="constrained")
    colors = {"grpo": "tab:red", "dr_grpo": "tab:blue", "dapo": "tab:green"}
    for ax, k, title in ((axes[0], "length_incorrect", "wrong rollouts"),
                         (axes[1], "length_correct", "right rollouts")):
        n, w = len(data["runs"]["grpo"][0][k]), data["window"]
        for lo, hi in ((0.5, w + 0.5), (n - w + 0.5, n + 0.5)):  # the windows compared
            ax.axvspan(lo, hi, color="0.9", zorder=0)
        for arm, runs in data["runs"].items():
            cols = [[r[k][i] for r in runs if r[k][i] is not None] for i in range(n)]
            common.mean_band(ax, range(1, n + 1), cols, colors[arm], arm, lw=1.2)
        ax.set_ylabel("mean completion length (tokens)")
        ax.set_title(title, fontsize=12)
        ax.legend(fontsize=11)
    axes[1].set_xlabel("RL step")
    return fig


if __name__ == "__main__":
    common.cli(main)
