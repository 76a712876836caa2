"""E8: do exchangeable objectives drift less between equally correct forms? [P1]

Claim [P1: Ding, Zhang, Wang, Zeng, "Design Conditions for Intra-Group Learning
of Sequence-Level Rewards: Token Gradient Cancellation", arXiv 2604.13088,
abstract]: "long-term training often leads to issues like ineffective update
accumulation (learning tax), solution probability drift, and entropy collapse"
and "to prevent reward-irrelevant drift, intra-group objectives must maintain
gradient exchangeability across token updates, enabling gradient cancellation
on weak-credit/high-frequency tokens".

What a DFPO residual of 0 means: nothing, as evidence. ``dfpo_min`` gives every
copy of a token the same weight by its definition (one w~ per group), and
``dfpo_orth`` makes the copies the whole group shares cancel by its definition
(sum_i Â_i w~_i = 0; loss.py), so their ``exch_residual`` is 0 or small whatever
happens; this experiment does not report it as a result. The evidence is whether
reward-irrelevant drift, entropy collapse and the learning tax *differ*
between objectives that keep and that break exchangeability.

Testbed: ``--task=chain`` (lab/testbeds.py's make_chain). Every correct completion of
a problem has the same answer, but the teacher writes it in several equally
correct forms: the ``restate`` point (the first token: restate the problem in
brackets, ~10 tokens longer, or not) and the ``sep`` points (``,`` or ``;``).
The verifier ignores both, so any change of the log-odds between the two forms
since the warm start is drift the verifier does not ask for (E9, run later,
found that the policy's accuracy does depend on the restate form). The restate point's history
is the prompt, shared by every rollout of a group: exactly [P1]'s setting.

Method: per seed the cached chain warm start (train.py's chain defaults), then
each arm for ``--rl_steps`` RL steps from it with the same seed (so the first
rollout batch is the same), with off-policy reuse: ``--minibatches=2
--epochs=2 --batching=query`` (4 optimizer steps per rollout batch, groups kept
whole inside a mini-batch so that only the objective decides whether a shared
token cancels; E7 is about the cut), B = 4 prompts x G = 8, the ratio clip
``--clip=sym`` (1 +- 0.2, train.py's default) and one AdamW lr 3e-5 for all
arms (Adam's step is invariant to the constant factors by which the
objectives' losses differ), ``--diagnostics``.

Clip and lr were fixed on stability alone, on probe seeds 10 and 11, before
the full run on seeds 0-9. One earlier quick run, on seed 0 (no clip, lr 1e-4),
prompted the rule: it collapsed: greedy accuracy 0.72 ->
0.43 under grpo and -> 0.05 under dfpo_min (mean of the last 3 evaluations),
so it would have compared the drift of broken policies. The rule, written
down before probing: on probe seeds 10 and 11 (not evaluation seeds), 600 RL
steps, every arm keeps every evaluation within 0.10 of its best earlier one
and ends at or above its warm start; candidates in this order, the first that
passes is taken: (A) clip sym, lr 1e-4; (B) clip sym, lr 3e-5; (C) B with one
epoch. A failed: dfpo_min on seed 10 went 0.16 -> 0.32 (step 100) -> 0.06 ->
0.004 (grpo and dr_grpo ended at 0.71 and 0.72). B passed for grpo, dr_grpo,
dfpo_min and dfpo_orth on both seeds (final accuracies 0.87-0.95, largest
fall below an earlier best 0.05). A likely reason, not tested here: DFPO's
update, -sg(w~) A log pi with no per-token ratio, has no trust region: the clip only truncates w
before the transform, so a rollout batch reused 4 times keeps pushing its
negative tokens down at full weight. With the clip, grpo's and dr_grpo's
tokens lose their gradient where it binds, which breaks exchangeability for
dr_grpo too (loss.py): the comparison is the practical one [P1] draws, clipped
PPO-style objectives against DFPO; ``clip_frac`` is logged.

Arms and the factor each pair isolates (loss.py's table; c = coefficient):

| pair                    | same                              | differs in                     |
|-------------------------|-----------------------------------|--------------------------------|
| dapo - grpo             | sigma-normalised A, token ratio   | 1/L_i vs 1/sum L (aggregation) |
| dr_grpo - dapo          | constant aggregation, token ratio | 1/sigma_g (a per-group scale)  |
| dfpo_min - dr_grpo      | A = r - mu, 1/(N L_max)           | token ratio rho vs min_j w_j   |
| dfpo_orth - dr_grpo     | A = r - mu, 1/(N L_max)           | token ratio rho vs w - proj_A  |
| grpo clip-higher - grpo | everything but the clip           | clip 1-0.2 / 1+0.28 vs 1+-0.2  |

grpo against dr_grpo changes two factors at once (sigma and 1/L_i); dapo sits
between them. On-policy dr_grpo, dfpo_min and dfpo_orth coincide; here, with
reuse, they differ only in the off-policy weight. ``--arm_set`` picks the arms:
``primary`` (default: grpo, dr_grpo, dfpo_min, dfpo_orth: the
non-exchangeable reference, the usual fix, and DFPO's two transforms, whose
difference from dr_grpo is the off-policy weight alone), ``budget`` (without
dfpo_orth), ``all`` (+ dapo and grpo with clip-higher, which complete the
factor pairs). ``gspo`` (sequence ratio and sequence clip) and clip-higher on
the other objectives are not run: the budget below has no room for them, and
the earlier 3-seed ``primes`` version of E8 had them and saw every interval
overlap.

Measured at every evaluation (every ``--eval_every`` steps, 256 held-out
problems): ``style_drift_restate`` (mean over problems of |change of the
log-odds between the two forms since the warm start|, in nats),
``style_drift_signed_restate``, ``style_drift_sep``, ``style_entropy_restate``
and ``_sep`` (entropy of the policy renormalised over the two equally correct
forms: the chain task's answer entropy among equally correct completions),
``entropy`` (mean token entropy of greedy completions) and greedy accuracy;
per step ``tax_interior`` (KL at histories strictly before the group diverges)
and its sum over the run, ``clip_frac``. The chain task has one answer per
problem, so train.py's ``answer_drift`` does not apply: the style points are
its equally correct completions.

Primary contrast (fixed before any result): ``style_drift_restate`` at the last
evaluation, dfpo_min - grpo, dfpo_orth - grpo and dr_grpo - grpo, paired by seed
(the arms of a seed share its warm start and first batch); [P1] predicts < 0.
Unsigned, because [P1] predicts less drift, not a direction (the signed
restate drift was the on-policy chain_style experiment's contrast, where grpo
and dr_grpo did not differ over 200 steps: -0.01 +- 0.50 nats, 10 seeds).
Secondary: the same metric for each factor pair above; ``style_entropy_restate``
(predicted > 0 for the exchangeable arm), ``entropy`` (> 0),
``tax_interior_sum`` (< 0), ``style_drift_sep`` (< 0) and accuracy averaged over
the last 3 evaluations (no prediction) against grpo.

Budget: the stability probe B above measured 162-176 s of one core per
600-step run with 7 evaluations (8 runs in 680 s with --jobs=2: 42 runs per
hour). 10 seeds x 4 arms (``primary``) is 40 runs, about 57 min with
--jobs=2 on 2 cores; ``budget`` 30 runs, about 43 min; ``all`` 60 runs, about
86 min, over the 60 min target and said so. (Earlier estimate from short runs
at lr 1e-4: 0.32 s per RL step at B = 4 and 0.59 s at B = 8, one evaluation
with diagnostics 3.8 s; B = 8 would give each arm a less noisy step but
halve the arms that fit.)

    python -m lab.experiments.e8_objectives --quick
        # seed 0, primary arms, 100 RL steps (out/partial/)
    python -m lab.experiments.e8_objectives  # seeds 0-9, primary arms, 600 RL steps (results/)
    python -m lab.experiments.e8_objectives --arm_set=all   # seeds 0-9, six arms (about 86 min)
    python -m lab.experiments.e8_objectives --replot
        # redraw results/e8_objectives.png from its JSON
"""

import os
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e8_objectives\n")
    sys.exit(2)
from lab.experiments import common

ARMS = {
    "grpo": ("grpo", None),
    "dapo": ("dapo", None),
    "dr_grpo": ("dr_grpo", None),  # None: the run's --clip
    "dfpo_min": ("dfpo_min", None),
    "dfpo_orth": ("dfpo_orth", None),
    "grpo clip-higher": ("grpo", "higher"),
}
ARM_SETS = {
    "budget": ("grpo", "dr_grpo", "dfpo_min"),
    "primary": ("grpo", "dr_grpo", "dfpo_min", "dfpo_orth"),  # fits 60 min on 2 cores (docstring)
    "all": tuple(ARMS),
}
PRIMARY = "style_drift_restate"
FACTORS = {
    ("dapo", "grpo"): "1/L_i vs 1/sum L",
    ("dr_grpo", "dapo"): "sigma_g",
    ("dfpo_min", "dr_grpo"): "token ratio vs min-replace",
    ("dfpo_orth", "dr_grpo"): "token ratio vs orth",
    ("grpo clip-higher", "grpo"): "clip-higher",
}
SECONDARY = {"style_entropy_restate": "> 0", "entropy": "> 0", "tax_interior_sum": "< 0",
             "style_drift_sep": "< 0", "acc_last3": "none"}
CURVES = (
    "style_drift_restate",
    "style_drift_signed_restate",
    "style_drift_sep",
    "style_entropy_restate",
    "style_entropy_sep",
    "entropy",
    "eval_acc",
)
EXTRA = {
    "seeds": ("0,1,2,3,4,5,6,7,8,9", "seeds of the full run (each its own cached warm start)"),
    "rl_steps": (600, "RL steps per run (quick: 100)"),
    "eval_every": (100, "RL steps between evaluations"),
    "prompts_per_step": (4, "B: prompts per rollout batch"),
    "group_size": (8, "G: completions per prompt"),
    "minibatches": (2, "M: optimizer steps per rollout batch and epoch"),
    "epochs": (2, "passes over each rollout batch"),
    "clip": ("sym", "ratio clip of every arm but 'grpo clip-higher': none | sym (1 +- 0.2)"),
    "lr": (3e-5, "RL learning rate (AdamW), the same for every arm"),
    "sft_steps": (1500, "SFT steps of the chain warm start"),
    "arm_set": (
        "primary",
        "primary (grpo, dr_grpo, dfpo_min, dfpo_orth) | budget (no dfpo_orth) | all "
        "(+ dapo, grpo clip-higher)",
    ),
    "small": (False, "tiny model and batches, for smoke tests"),
}


def run_flags(o, seed, arm, warm):
    """train.py's flags for one (seed, arm) run."""
    loss, clip = ARMS[arm]
    clip = clip or o["clip"]
    flags = [
        "--task=chain",
        f"--init_from={warm}",
        f"--seed={seed}",
        f"--loss={loss}",
        f"--clip={clip}",
        f"--lr={o['lr']}",
        f"--rl_steps={o['rl_steps']}",
        f"--eval_every={o['eval_every']}",
        "--batching=query",
        f"--minibatches={o['minibatches']}",
        f"--epochs={o['epochs']}",
        "--diagnostics=true",
        f"--prompts_per_step={o['prompts_per_step']}",
        f"--group_size={o['group_size']}",
    ]
    if clip == "higher":
        flags += ["--clip_low=0.2", "--clip_high=0.28"]
    return flags + (["--eval_size=16"] if o["small"] else [])


def one_run(item):
    """One (seed, arm) run in a worker: its curves at the evaluations and its per-run numbers."""
    o, seed, arm, warm = item
    d = os.path.join(o["out"], "runs", "e8", f"{arm.replace(' ', '_')}_s{seed}")
    ms = common.run(run_flags(o, seed, arm, warm), d)
    rl = [m for m in ms if m["phase"] == "rl"]
    evals = [m for m in rl if "eval_acc" in m]
    steps = [m for m in rl if "clip_frac" in m]
    rec = {"seed": seed, "arm": arm, "steps": [m["step"] for m in evals]}
    for k in CURVES:
        rec[k] = [m.get(k) for m in evals]
    rec["tax_interior_sum"] = steps[-1].get("tax_interior_sum") if steps else None
    rec["clip_frac"] = sum(m["clip_frac"] for m in steps) / max(len(steps), 1)
    return rec


def final(rec, k):
    """A run's value of metric k: the last evaluation's, accuracy averaged over the last 3."""
    if k == "acc_last3":
        xs = [x for x in rec.get("eval_acc", [])[-3:] if x is not None]
        return sum(xs) / len(xs) if xs else None
    return rec.get(k) if k == "tax_interior_sum" else (rec.get(k) or [None])[-1]


def per_seed(runs, arm, k):
    return {r["seed"]: final(r, k) for r in runs[arm]}


def paired(runs, a, b, k, predicted):
    """contrast of arm a - arm b on metric k, over the seeds of b (in its order) that a has."""
    x, y = per_seed(runs, a, k), per_seed(runs, b, k)
    seeds = [s for s in y if s in x]
    return common.contrast([x[s] for s in seeds], [y[s] for s in seeds], predicted, seeds)


def primary(runs):
    """The docstring's primary contrasts: |restate drift| of each exchangeable arm - grpo."""
    return {f"{PRIMARY} {a} - grpo": paired(runs, a, "grpo", PRIMARY, "< 0")
            for a in ("dfpo_min", "dfpo_orth", "dr_grpo") if a in runs and "grpo" in runs}


def secondary(runs):
    """The factor pairs on the primary metric, and every arm - grpo on the secondary metrics."""
    out = {}
    for (a, b), factor in FACTORS.items():
        if a in runs and b in runs:
            out[f"{PRIMARY} {a} - {b} ({factor})"] = paired(
                runs,
                a,
                b,
                PRIMARY,
                "< 0" if b != "grpo clip-higher" and a != "grpo clip-higher" else "> 0",
            )
    for k, sign in SECONDARY.items():
        for a in runs:
            if a != "grpo" and "grpo" in runs:
                pred = (
                    sign
                    if a != "grpo clip-higher"
                    else {"> 0": "< 0", "< 0": "> 0"}.get(sign, sign)
                )
                out[f"{k} {a} - grpo"] = paired(runs, a, "grpo", k, pred)
    return out


def band(runs, k):
    """Per evaluation step: (step, mean, t half-width) over the seeds that have a value."""
    steps = runs[0]["steps"]
    cols = [
        [r[k][i] for r in runs if i < len(r[k]) and r[k][i] is not None] for i in range(len(steps))
    ]
    return [(s, *common.ci(c)) for s, c in zip(steps, cols) if c]


def plot(plt, data):
    """Curves per arm (mean, 95 % t band over seeds) and the paired contrasts against grpo.

    Long because: it draws one figure panel by panel; split, one figure's layout would be
    scattered over several functions."""
    runs, n = data["runs"], len(data["seeds"])
    fig, axes = plt.subplots(2, 4, figsize=(22, 9.5))
    fig.suptitle(
        f"E8 on the chain task: objectives under off-policy reuse (M={data['minibatches']}, "
        f"E={data['epochs']}), {data['rl_steps']} RL steps, {n} seed{'s' if n > 1 else ''}",
        fontsize=12,
    )
    colors = {a: f"C{i}" for i, a in enumerate(ARMS)}
    curves = [
        ("style_drift_restate", "|restate drift| since the warm start",
         "mean |Δ log-odds| (nats)"),
        (
            "style_entropy_restate",
            "entropy over the two restate forms",
            "entropy (nats; ln 2 = 0.69 max)",
        ),
        ("entropy", "token entropy of greedy completions", "mean entropy per token (nats)"),
        ("eval_acc", "greedy accuracy (256 held-out problems)", "accuracy (fraction correct)"),
    ]
    for ax, (k, title, ylabel) in zip(axes[0], curves):
        for arm, rs in runs.items():
            pts = band(rs, k)
            if not pts:
                continue
            s, m, h = [p[0] for p in pts], [p[1] for p in pts], [p[2] or 0 for p in pts]
            ax.plot(s, m, marker="o", ms=3, color=colors[arm], label=arm)
            ax.fill_between(s, [a - b for a, b in zip(m, h)], [a + b for a, b in zip(m, h)],
                            color=colors[arm], alpha=0.12)
        if k == "style_entropy_restate":
            ax.axhline(0.6931, color="k", ls=":", lw=0.8)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="upper left")
    panels = [
        ("style_drift_restate", "|restate drift|, arm - grpo (nats)"),
        ("style_entropy_restate", "restate-form entropy, arm - grpo (nats)"),
        ("tax_interior_sum", "learning tax before divergence, arm - grpo (Σ KL, nats)"),
        ("acc_last3", "accuracy (fraction correct), mean of the last 3 evaluations, arm - grpo"),
    ]
    contrasts = {**data["primary"], **data["secondary"]}
    others = [a for a in runs if a != "grpo"]
    for ax, (k, xlabel) in zip(axes[1], panels):
        rows = [(a, contrasts.get(f"{k} {a} - grpo")) for a in others]
        rows = [(a, c) for a, c in rows if c and c["diff"] is not None]
        for i, (a, c) in enumerate(rows):
            ax.errorbar([c["diff"]], [i], xerr=[[c["half"] or 0], [c["half"] or 0]], fmt="o",
                        color=colors[a], capsize=3)
        ax.set_yticks(range(len(rows)), [a for a, _ in rows], fontsize=9)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_title(
            {
                "tax_interior_sum": "paired by seed, whole run",
                "acc_last3": "paired by seed, last 3 " "evaluations",
            }.get(k, "paired by seed, last evaluation"),
            fontsize=10,
        )
        ax.grid(axis="x", alpha=0.3)
    bands = (
        f"band: 95 % Student-t interval over {n} seeds (t with {n - 1} degrees of freedom)"
        if n > 1
        else "one seed: no bands or intervals"
    )
    common.caption(
        fig,
        f"Top: mean over seeds at each evaluation (256 held-out problems), {bands}. "
        "Restate drift = mean over problems of |change since the warm start of log π(no "
        "restatement) - log π('(')|; dotted: ln 2, both forms equally likely. Bottom: per-seed "
        "differences against grpo (same warm start and seed), mean and 95 % paired t interval; "
        "line at zero. A DFPO residual of 0 holds by construction and is not shown as evidence.",
    )
    return fig


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    o = common.parse(argv, EXTRA, __doc__, redraw=("e8_objectives", plot))  # --replot: redraw, exit
    if o["quick"]:
        o["rl_steps"], o["eval_every"] = min(o["rl_steps"], 100), min(o["eval_every"], 25)
    if o["arm_set"] not in ARM_SETS:
        raise common.CliError(
            f"--arm_set: unknown set {o['arm_set']!r}; choose one of {', '.join(ARM_SETS)}"
        )
    if o["clip"] not in ("none", "sym"):
        raise common.CliError(f"--clip: {o['clip']!r} is not none or sym")
    arms = ARM_SETS[o["arm_set"]]
    size = (
        {"n_layer": 1, "n_embd": 32, "n_head": 2}
        if o["small"]
        else {"n_embd": 96, "sft_flawed": 0.6}
    )
    if o["small"]:
        o.update(prompts_per_step=4, group_size=4)
    t0 = time.time()
    warm = {
        s: common.warm_start(o["out"], s, "chain", sft_steps=o["sft_steps"], **size)
        for s in o["seeds"]
    }
    keep = {
        k: o[k]
        for k in (
            "out",
            "rl_steps",
            "eval_every",
            "prompts_per_step",
            "group_size",
            "minibatches",
            "epochs",
            "clip",
            "lr",
            "small",
        )
    }
    items = [(keep, s, a, warm[s]) for s in o["seeds"] for a in arms]
    t1 = time.time()
    recs = common.pool(one_run, items, o["jobs"], o["threads"], desc="runs")
    rate = common.rate("E8", len(items), time.time() - t1, o["jobs"])
    runs = {a: [r for r in recs if r["arm"] == a] for a in arms}
    data = {"experiment": "E8 objectives", "task": "chain", "seeds": o["seeds"], "arms": list(arms),
            "quick": o["quick"], **{k: o[k] for k in keep if k not in ("out", "small")},
            "runs": runs, "rate": rate}
    data["primary"], data["secondary"] = primary(runs), secondary(runs)
    data["per_arm"] = {
        a: {k: common.ci([final(r, k) for r in runs[a]]) for k in (PRIMARY, *SECONDARY)}
        for a in arms
    }
    data["seconds"] = round(time.time() - t0, 1)
    rows = [[a] + [common.fmt(data["per_arm"][a][k]) for k in (PRIMARY, *SECONDARY)] for a in arms]
    common.table(
        rows,
        [
            "arm",
            "|restate drift|",
            "restate entropy",
            "token entropy",
            "tax interior sum",
            "|sep drift|",
            "acc (last 3)",
        ],
    )
    common.print_contrasts(data["primary"])
    common.print_contrasts(data["secondary"], "secondary")
    print(f"E8 took {data['seconds']:.0f}s")
    data = common.clean(data)
    common.save("e8_objectives", data, o["out"], lambda plt: plot(plt, data))
    return data


if __name__ == "__main__":
    common.cli(main)
