"""E5: do boosted tokens have higher value than suppressed ones, and is it GRPO's doing?

Source claim [P2, arXiv 2605.08666, abstract, evidence (2)]: "Tokens boosted
by critic-free RL consistently demonstrate higher value than suppressed
tokens, regardless of whether they originate from positive or negative
rollouts." (Figure 5 (a): "Boosted tokens have higher ...").

A value gap alone does not show that the reward put it there: a token that
co-occurs with correct rollouts is boosted by coupling even when no negative
rollout is in the update. So the quantity of interest is GRPO's value gap
minus the gap of a control update on the same rollouts:

* ``grpo``: GRPO's advantages Â_i = (r_i - mu_g) / (sigma_g + eps);
* ``positive_only``: the same coefficients with every A < 0 set to 0
  (A+ = max(A, 0), same 1/(N L_i) aggregation, nothing renormalised):
  negative rollouts move only through coupling;
* ``shuffled``: the advantages permuted uniformly at random among the rollouts
  of each group (diagnostics.shuffled_advantages; the permutation is drawn
  from the seed's generator): they still sum to zero per group, with the same
  magnitudes, but no longer follow the reward.

Method (task chain, completions ~28 tokens). Per seed, train.py's GRPO RL
runs --rl_step steps from the SFT warm start (common.rl_states, B = --prompts,
G = --group_size); at that state --batches rollout batches are drawn (the
problems the run would draw next). On each batch every arm takes one update
from the same state, in float64: ``adam``, train.py's real step with the run's
AdamW moments (common.real_step: lr --lr of train.py, grad clip 1.0), and
``sgd``, one plain-SGD step (lr --sgd_lr, no momentum: first order). Delta =
log pi_new - log pi_old per token; boosted Delta > --eps, suppressed Delta <
-eps. Token value V(s_{t+1}) = mean reward of --K continuations sampled from
the prefix ending in the token (diagnostics.token_values; exact, the reward,
at EOS). Valuing every prefix is too expensive, so per batch and per rollout
sign (A > 0, A < 0) --tokens tokens are drawn uniformly at random among those
that at least one arm of either optimizer boosts or suppresses (the same
tokens and values for every arm, so the arms stay paired; an arm's boosted
tokens inside the subset are a uniform sample of all its boosted tokens).

Measure: per seed, optimizer, arm and rollout sign, the value gap = mean V of
boosted minus mean V of suppressed tokens (diagnostics.value_gap), over the
valued tokens of all its batches.

Primary contrast (fixed before any result): the value gap in A < 0 rollouts
after the AdamW step, grpo minus shuffled, paired by seed; [P2] predicts > 0
("regardless of whether they originate from ... negative rollouts", and the
gap must come from the reward, which the shuffled control removes).
Secondary: grpo - positive_only in A < 0; both controls in A > 0; the same
four after the SGD step; and GRPO's own gaps (against 0), all predicted > 0.

    python -m lab.experiments.e5_value --quick      # one seed, out/partial/
    python -m lab.experiments.e5_value              # seeds 0-9, results/
    python -m lab.experiments.e5_value --replot     # redraw the PNG from the JSON
"""
import copy
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e5_value\n")
    sys.exit(2)
from lab.experiments import common
import torch

from lab import probes
from lab import estimators

EXTRA = dict(common.DIAG_FLAGS, batches=(4, "rollout batches per seed"),
             K=(8, "Monte Carlo continuations per valued prefix"),
             tokens=(96, "valued tokens per rollout sign (A>0, A<0) and batch"),
             eps=(1e-4, "flip threshold on |Delta| (nats)"), sgd_lr=(1e-2, "plain SGD lr"),
             rl_step=(20, "GRPO RL steps before the measured state (model and AdamW moments)"))
OPTS = ("adam", "sgd")
ARMS = ("grpo", "positive_only", "shuffled")
SIGNS = ("pos", "neg")


def arm_advantages(adv, group, gen):
    """The three arms' advantages on one batch."""
    return {
        "grpo": adv,
        "positive_only": adv.clamp(min=0),
        "shuffled": probes.shuffled_advantages(adv, group, gen),
    }


def one_seed(item):
    """Every arm's update on the same batches and values of one seed: per optimizer,
    arm and sign, the value gap and its counts."""
    opts, seed = item
    step = opts["rl_step"]
    model, opt, task, draw, gen = common.state_at(opts, seed, step)
    pooled = {"v": [], "sign": [], **{(o, a): [] for o in OPTS for a in ARMS}}
    rewards = []
    for _ in range(opts["batches"]):
        b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
        adv = estimators.advantages(b.rewards, b.group, "grpo")
        rewards.append(float(b.rewards.float().mean()))
        m64 = copy.deepcopy(model).double()
        with torch.no_grad():
            lp0 = probes.logp_of(m64, b)
        deltas = {}
        for a, av in arm_advantages(adv, b.group, gen).items():
            for o in OPTS:
                new = (common.real_step(m64, opt, b, av, "grpo")[0] if o == "adam"
                       else probes.one_update(m64, b, av, "sgd", opts["sgd_lr"]))
                with torch.no_grad():
                    deltas[o, a] = (probes.logp_of(new, b) - lp0) * b.mask
        moved = torch.stack([d.abs() > opts["eps"] for d in deltas.values()]).any(0) & b.mask
        rows_t = torch.cat([probes.pick_tokens(moved & (adv > 0)[:, None], opts["tokens"], gen),
                            probes.pick_tokens(moved & (adv < 0)[:, None], opts["tokens"], gen)])
        if not len(rows_t):
            continue
        pooled["v"].append(probes.token_values(model, task, b, rows_t, opts["K"], gen).double())
        pooled["sign"].append(torch.sign(adv[rows_t[:, 0]]))
        for k, d in deltas.items():
            pooled[k].append(d[rows_t[:, 0], rows_t[:, 1]])
    rec = {"seed": seed, "reward": sum(rewards) / len(rewards)}
    cat = lambda xs: torch.cat(xs) if xs else torch.zeros(0, dtype=torch.float64)
    v, sign = cat(pooled["v"]), cat(pooled["sign"])
    for o in OPTS:
        rec[o] = {
            a: {
                s: probes.value_gap(
                    v[sign == (1 if s == "pos" else -1)],
                    cat(pooled[o, a])[sign == (1 if s == "pos" else -1)],
                    opts["eps"],
                )
                for s in SIGNS
            }
            for a in ARMS
        }
    rec["n_valued"] = {s: int((sign == (1 if s == "pos" else -1)).sum()) for s in SIGNS}
    return rec


def gaps(per_seed, o, a, s):
    return [r[o][a][s]["gap"] for r in per_seed]


def plot(plt, data):
    """Value gap (boosted - suppressed) per arm, in A>0 and A<0 rollouts, per optimizer."""
    summary, n = data["summary"], len(data["per_seed"])
    fig, ax = plt.subplots(
        1, 3, figsize=(15, 4.6), layout="tight", gridspec_kw={"width_ratios": [2, 2, 1.1]}
    )
    ax[1].sharey(ax[0])
    colors = {"grpo": "tab:blue", "positive_only": "tab:green", "shuffled": "tab:gray"}
    for i, o in enumerate(OPTS):
        for j, a in enumerate(ARMS):
            v = [summary[o][a][s] for s in SIGNS]
            x = [k + 0.27 * (j - 1) for k in range(len(SIGNS))]
            ax[i].bar(
                x,
                [e[0] or 0 for e in v],
                0.27,
                yerr=common.errbars(v),
                capsize=3,
                color=colors[a],
                edgecolor="k",
                label=a.replace("_", "-"),
            )
        ax[i].axhline(0, color="k", lw=0.8)
        ax[i].set_xticks(
            range(len(SIGNS)), ["tokens of A > 0 rollouts", "tokens of A < 0 rollouts"]
        )
        ax[i].set_title(
            "one AdamW step from the RL run's state" if o == "adam" else "one plain-SGD step",
            fontsize=10,
        )
    lo, hi = ax[0].get_ylim()  # shared by both panels: set once, after all bars
    ax[0].set_ylim(lo, hi + 0.3 * (hi - lo))  # room for the legends above the bars
    for a in ax[:2]:
        a.legend(fontsize=8, title="update", title_fontsize=8, loc="upper left", ncol=3)
    common.contrast_panel(ax[2], data["primary"], "difference in value gap (P(correct))")
    ax[0].set_ylabel(
        "value gap: mean V(boosted) − mean V(suppressed)\n(difference in P(correct))"
    )
    fig.suptitle(
        "E5: value of boosted minus suppressed tokens, GRPO against two controls on the same "
        "batches",
        fontsize=11,
    )
    cfg = data["config"]
    common.caption(
        fig,
        f"V of a token = mean reward of K = {cfg['K']} continuations sampled from the prefix "
        "ending "
        f"in it (Monte Carlo estimate of P(correct)), on a random subset of up to {cfg['tokens']} "
        f"tokens per rollout sign and batch ({cfg['batches']} batches of B = {cfg['prompts']} x "
        f"G = {cfg['group_size']} per seed, task {cfg['task']}, after {cfg['rl_step']} GRPO "
        "steps). "
        f"Boosted: Δ log π > {cfg['eps']:g}; suppressed: Δ < -{cfg['eps']:g}. positive-only: "
        "GRPO's coefficients with A < 0 set to 0; shuffled: advantages permuted inside each "
        "group. Right: the primary contrast, the A < 0 value gap of the AdamW step under GRPO "
        "minus under shuffled, per "
        "seed (dots) and its mean with a 95 % Student-t interval over the paired seeds. "
        + (common.ci_note(n) if n > 1 else "One seed: no error bars."),
    )
    return fig


def main(argv):
    opts = common.parse(argv, EXTRA, __doc__, redraw=("e5_value", plot))  # --replot: redraw, exit
    per_seed, seeds, t0 = common.over_seeds(one_seed, opts)
    summary = {
        o: {a: {s: common.ci(gaps(per_seed, o, a, s)) for s in SIGNS} for a in ARMS} for o in OPTS
    }
    summary["ci_over"] = "seeds" if len(per_seed) > 1 else "none (one seed)"
    sgn = {"pos": ">", "neg": "<"}
    data = {"experiment": "e5_value", "config": opts, "per_seed": per_seed, "summary": summary}
    data["primary"] = {
        "adam: value gap A<0, grpo - shuffled": common.contrast(
            gaps(per_seed, "adam", "grpo", "neg"),
            gaps(per_seed, "adam", "shuffled", "neg"),
            "> 0",
            seeds,
        )
    }
    sec = {f"{o}: value gap A{sgn[s]}0, grpo - {a}": common.contrast(
        gaps(per_seed, o, "grpo", s), gaps(per_seed, o, a, s), "> 0", seeds)
        for o in OPTS for s in SIGNS for a in ("shuffled", "positive_only")}
    sec.pop("adam: value gap A<0, grpo - shuffled")
    sec.update(
        {
            f"{o}: value gap A{sgn[s]}0, grpo - 0": common.contrast(
                gaps(per_seed, o, "grpo", s), 0.0, "> 0", seeds
            )
            for o in OPTS
            for s in SIGNS
        }
    )
    data["secondary"] = sec
    data["wall_s"] = round(time.time() - t0, 1)
    data["rate"] = common.rate(
        "e5_value", len(per_seed), data["wall_s"], min(opts["jobs"], len(per_seed)), "seeds"
    )
    data = common.clean(data)
    common.save("e5_value", data, opts["out"], lambda plt: plot(plt, data))
    rows = [
        [
            o,
            a,
            s,
            common.fmt(summary[o][a][s]),
            sum(r[o][a][s]["n_boosted"] for r in per_seed),
            sum(r[o][a][s]["n_suppressed"] for r in per_seed),
        ]
        for o in OPTS
        for a in ARMS
        for s in SIGNS
    ]
    common.table(rows, ["optimizer", "arm", "rollouts", "value gap", "n boosted", "n suppressed"])
    print(f"(95 % CI over {summary['ci_over']})")
    common.report("e5_value", data, opts["out"])
    return data


if __name__ == "__main__":
    common.cli(main)
