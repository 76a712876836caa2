"""Style drift on the chain testbed: does GRPO's 1/L_i move a choice the verifier does not check?

Question [P1, arXiv 2604.13088]: when the weights of an objective are not
exchangeable, tokens that every rollout shares drift in a direction no reward
asked for. On ``--task=chain`` the first completion token is such a choice:
restate the problem in brackets (about ten tokens longer) or not. The verifier
ignores it, and every rollout of a group writes one of the two forms after the
same history (the prompt). THEORY.md section 4.1 derives, to first order and at
that history alone, that with equal weights (``dr_grpo``) the log-odds only
random-walk, while with ``grpo``'s c = A / L and wrong rollouts shorter, the
longer (restating) form's copies are pushed down less: a systematic drift
*towards restating*. Coupling through the shared parameters can add to either.

Method: per seed, the chain warm start (train.py's chain defaults), then 200
on-policy RL steps of ``grpo`` and of ``dr_grpo`` from it with the same seed
(so the first rollout batch is the same), ``--diagnostics``. Measured at every
evaluation on 256 held-out problems: ``style_drift_signed_restate``, the
change since the warm start of log pi(no restatement) - log pi("("), averaged
per problem (> 0: away from restating), its |.| version, the same at the
``sep`` points (``,`` against ``;``: equal lengths, so no 1/L_i effect is
predicted there), and greedy accuracy.

Primary contrast (fixed before any result): signed restate drift at the last
evaluation, grpo minus dr_grpo, paired by seed; the first-order argument
predicts < 0 (grpo drifts towards restating). Secondary: the same for the
``sep`` points (predicted about 0), |restate drift| grpo minus dr_grpo
(predicted > 0), final accuracy grpo minus dr_grpo (no prediction).

    python -m lab.experiments.chain_style --quick     # one seed, 60 RL steps (out/partial/)
    python -m lab.experiments.chain_style             # seeds 0-9 (results/)
    python -m lab.experiments.chain_style --replot    # redraw results/chain_style.png from its JSON
"""
import os
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.chain_style\n")
    sys.exit(2)
from lab.experiments import common

ARMS = ("grpo", "dr_grpo")
METRICS = (
    "style_drift_signed_restate",
    "style_drift_restate",
    "style_drift_signed_sep",
    "style_drift_sep",
    "eval_acc",
)
EXTRA = {"seeds": ("0,1,2,3,4,5,6,7,8,9", "seeds of the full run"),
         "rl_steps": (200, "RL steps per arm (quick: 60)"),
         "sft_steps": (1500, "SFT steps of the chain warm start"),
         "small": (False, "tiny model and batches, for smoke tests")}


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    # --replot: redraw, exit
    o = common.parse(argv, EXTRA, __doc__, redraw=("chain_style", plot), unused=("jobs",))
    rl_steps = min(o["rl_steps"], 60) if o["quick"] else o["rl_steps"]
    size = {"n_layer": 1, "n_embd": 32, "n_head": 2} if o["small"] else {"n_embd": 96}
    batch = ["--prompts_per_step=4", "--group_size=4", "--eval_size=16"] if o["small"] else []
    t0 = time.time()
    runs = {a: [] for a in ARMS}
    for seed in o["seeds"]:
        ws = common.warm_start(
            o["out"], seed, "chain", sft_steps=o["sft_steps"], sft_flawed=0.6, **size
        )
        for arm in ARMS:
            d = os.path.join(o["out"], "runs", "chain_style", f"{arm}_s{seed}")
            ms = common.run(
                [
                    "--task=chain",
                    f"--init_from={ws}",
                    f"--seed={seed}",
                    f"--loss={arm}",
                    f"--rl_steps={rl_steps}",
                    f"--eval_every={max(rl_steps // 4, 1)}",
                    "--diagnostics=true",
                ]
                + batch,
                d,
            )
            evals = [m for m in ms if m["phase"] == "rl" and "eval_acc" in m]
            rec = {"seed": seed, "steps": [m["step"] for m in evals]}
            for k in METRICS:
                rec[k] = [m.get(k) for m in evals]
            rec["tax_interior_sum"] = (
                [m["tax_interior_sum"] for m in ms if "tax_interior_sum" in m] or [None]
            )[-1]
            runs[arm].append(rec)
    last = lambda arm, k: [r[k][-1] for r in runs[arm]]
    seeds = o["seeds"]
    primary = {
        "signed restate drift, grpo - dr_grpo": common.contrast(
            last("grpo", "style_drift_signed_restate"),
            last("dr_grpo", "style_drift_signed_restate"),
            "< 0",
            seeds,
        )
    }
    secondary = {
        "signed sep drift, grpo - dr_grpo": common.contrast(
            last("grpo", "style_drift_signed_sep"),
            last("dr_grpo", "style_drift_signed_sep"),
            "about 0",
            seeds,
        ),
        "|restate drift|, grpo - dr_grpo": common.contrast(
            last("grpo", "style_drift_restate"),
            last("dr_grpo", "style_drift_restate"),
            "> 0",
            seeds,
        ),
        "final accuracy, grpo - dr_grpo": common.contrast(
            last("grpo", "eval_acc"), last("dr_grpo", "eval_acc"), "none", seeds
        ),
    }
    per_arm = {a: {k: common.ci(last(a, k)) for k in METRICS} for a in ARMS}
    data = {"experiment": "chain_style", "seeds": seeds, "rl_steps": rl_steps, "quick": o["quick"],
            "primary": primary, "secondary": secondary, "per_arm": per_arm, "runs": runs,
            "seconds": round(time.time() - t0, 1)}
    for a in ARMS:
        print(f"{a}: " + "  ".join(f"{k} {common.fmt(per_arm[a][k])}" for k in METRICS))
    common.print_contrasts(primary)
    common.print_contrasts(secondary, "secondary")
    print(f"chain_style took {data['seconds']:.0f}s")
    data = common.clean(data)
    common.save("chain_style", data, o["out"], lambda plt: plot(plt, data))
    return data


def plot(plt, data):
    """Signed restate and sep drift over RL steps, per arm: mean and 95 % t band over seeds."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.0))
    fig.suptitle(
        "Drift of the unchecked choices on the chain testbed: grpo against dr_grpo",
        fontsize=11,
    )
    colors = {"grpo": "tab:red", "dr_grpo": "tab:blue"}
    for ax, k, title in (
        (axes[0], "style_drift_signed_restate", "restate point (variants differ by ~10 tokens)"),
        (axes[1], "style_drift_signed_sep", "separator points (variants of equal length)"),
    ):
        for arm, runs in data["runs"].items():
            steps = runs[0]["steps"]  # no drift at the warm start itself: None there
            cols = [[r[k][i] for r in runs if r[k][i] is not None] for i in range(len(steps))]
            common.mean_band(ax, steps, cols, colors[arm], arm, marker="o", ms=3)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlabel("RL step")
        ax.set_ylabel(
            "Δ log-odds since the warm start (nats)\n> 0: towards the teacher's majority form"
        )
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    n = len(data["seeds"])
    common.caption(
        fig,
        "Change of the log-odds between the teacher's majority and minority form at the style "
        "points of 256 held-out chain problems, averaged per problem, then over problems. "
        "Left: no restatement against '('. Right: ',' against ';'. Lines: mean over "
        f"{n} seeds; bands: 95 % Student-t interval over seeds (t with {n - 1} degrees of "
        "freedom; none with one seed). Seeds share their warm start across the two arms.",
    )
    return fig


if __name__ == "__main__":
    common.cli(main)
