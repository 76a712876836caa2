"""E1: inside a real RL run, do positive and negative rollouts flip similar shares of tokens?

Source claim [P2, arXiv 2605.08666, abstract and Figure 9]: "positive and
negative rollouts exhibit remarkably similar proportions of tokens whose
probabilities are boosted or suppressed during RL training" ("token
flipping"). Figure 9 reports the proportions of boosted (Delta log p > eps),
suppressed (< -eps) and stable tokens in A > 0 and A < 0 rollouts during
training. Appendix D warns that Adam's *first* update is close to sign
descent, so a fresh optimizer's first step is not what training does.

Method: per seed, train.py's GRPO RL on ``--task=chain`` from the seed's SFT
warm start (B = 16 prompts x G = 8, AdamW lr 1e-4, betas (0.9, 0.99), grad
clip 1; common.rl_states), keeping the model *and the AdamW moments* after
``--steps`` RL steps (default 0, 100, 200; 200 is the length of the default
chain run, and step 0 is the fresh optimizer of the warm start). At each
kept state, ``--batches`` fresh rollout batches; on each, the next update as
training would take it (common.real_step: the carried AdamW state, whole
batch, grad clip; float64), and, as a first-order reference, one plain-SGD
step (lr ``--sgd_lr``, no momentum) from the same weights.
Delta = log pi_new(y) - log pi_old(y) per completion token.

Measures (pooled over a state's batches, per seed): the shares of A > 0 and
of A < 0 tokens that are boosted (Delta > eps), suppressed (Delta < -eps)
and stable; the same at eps = 0 (threshold-free); the flipped share
(suppressed A > 0 plus boosted A < 0 tokens, over all A != 0 tokens); the
median |Delta|; and the Delta distributions (first seed) for the figure.

Primary contrast (fixed before any result): the boosted share (eps = 1e-4)
of A > 0 tokens minus that of A < 0 tokens, under the carried AdamW step at
RL step 100, paired by seed (both shares come from the same update).
[P2] finds the proportions "remarkably similar": predicted about 0. Verdict
rule, fixed with it: *agree* if the 95 % t interval lies inside +-0.10 (ten
points of share), *contradict* if it lies wholly outside +-0.10, else
*inconclusive*. Secondary: the same at steps 0 and 200, at eps = 0, and for
the plain-SGD step.

    python -m lab.experiments.e1_flips --quick      # one seed, steps 0 and 20 (out/partial/)
    python -m lab.experiments.e1_flips              # seeds 0-9 (results/)
    python -m lab.experiments.e1_flips --replot     # redraw results/e1_flips.png from its JSON
"""
import copy
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e1_flips\n")
    sys.exit(2)
from lab.experiments import common
import torch

from lab import probes
from lab import estimators

EXTRA = dict(
    common.DIAG_FLAGS,
    **common.KEPT_STATE_FLAGS,
    eps=(1e-4, "flip threshold on |Delta| (nats)"),
    sgd_lr=(1e-3, "plain SGD lr (first-order reference)"),
    margin=(0.10, "verdict margin: 'similar' means the interval lies inside +-margin"),
)
OPTS = ("adam", "sgd")
KEYS = ("boosted", "suppressed", "stable")


def per_token(adv, mask):
    return adv[:, None].expand_as(mask)[mask]


def one_seed(item):
    """Every measurement of one seed (a worker process of common.pool)."""
    opts, seed = item
    paths = common.rl_states(opts, seed, opts["steps"])
    _, task, draw, _ = common.diag_setup(opts, seed)
    rec = {"seed": seed, "steps": {}}
    deltas = {}
    for step in opts["steps"]:
        model, opt = common.load_state(opts, seed, paths[step])
        m64 = copy.deepcopy(model).double()
        gen = torch.Generator().manual_seed(10_000 * seed + step + 1)  # not the run's own stream
        pooled = {o: ([], []) for o in OPTS}
        rewards = []
        for _ in range(opts["batches"]):
            b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
            b.max_len = task.max_new_tokens
            adv = estimators.advantages(b.rewards, b.group, "grpo")
            rewards.append(float(b.rewards.mean()))
            new = {"adam": common.real_step(m64, opt, b, adv)[0],
                   "sgd": probes.one_update(m64, b, adv, "sgd", opts["sgd_lr"])}
            for o in OPTS:
                pooled[o][0].append(probes.token_deltas(m64, new[o], b)[b.mask])
                pooled[o][1].append(per_token(adv, b.mask))
        out = {"reward": sum(rewards) / len(rewards)}
        for o in OPTS:
            d, a = torch.cat(pooled[o][0]), torch.cat(pooled[o][1])
            ones = torch.ones(len(d), 1, dtype=torch.bool)
            t, tz = probes.flip_table(d[:, None], ones, a, opts["eps"]), probes.flip_table(
                d[:, None], ones, a, 0.0
            )
            deltas[f"{o}_{step}"] = {"pos": t["delta_pos"][:2000], "neg": t["delta_neg"][:2000]}
            out[o] = {"pos": t["pos"], "neg": t["neg"], "flipped": t["flipped"],
                      "flipped_eps0": tz["flipped"], "pos_boosted_eps0": tz["pos"]["boosted"],
                      "neg_boosted_eps0": tz["neg"]["boosted"],
                      "median_abs_delta": float(d.abs().median()) if len(d) else None}
        rec["steps"][str(step)] = out
    return rec, deltas


def main(argv):
    opts = common.parse(argv, EXTRA, __doc__, redraw=("e1_flips", plot))  # --replot: redraw, exit
    common.kept_steps(opts, argv)
    got, seeds, t0 = common.over_seeds(one_seed, opts)
    per_seed, deltas = [g[0] for g in got], got[0][1]
    at = lambda s, o, f: [f(r["steps"][str(s)][o]) for r in per_seed]
    summary = {}
    for s in opts["steps"]:
        summary[str(s)] = {o: {sign: {k: common.ci(at(s, o, lambda x: x[sign][k])) for k in KEYS}
                               for sign in ("pos", "neg")} for o in OPTS}
        for o in OPTS:
            for k in (
                "flipped",
                "flipped_eps0",
                "pos_boosted_eps0",
                "neg_boosted_eps0",
                "median_abs_delta",
            ):
                summary[str(s)][o][k] = common.ci(at(s, o, lambda x: x[k]))
        summary[str(s)]["reward"] = common.ci([r["steps"][str(s)]["reward"] for r in per_seed])
    boosted_gap = lambda s, o, eps0=False: common.contrast(
        at(s, o, lambda x: x["pos_boosted_eps0"] if eps0 else x["pos"]["boosted"]),
        at(s, o, lambda x: x["neg_boosted_eps0"] if eps0 else x["neg"]["boosted"]),
        "about 0",
        seeds,
    )
    ps = opts["primary_step"]
    primary = {f"adam (carried) step {ps}: boosted share A>0 - A<0": boosted_gap(ps, "adam")}
    secondary = {}
    for s in opts["steps"]:
        for o in OPTS:
            for eps0 in (False, True):
                name = f"{o} step {s}: boosted share A>0 - A<0{' (eps=0)' if eps0 else ''}"
                if not (s == ps and o == "adam" and not eps0):
                    secondary[name] = boosted_gap(s, o, eps0)
    seconds = time.time() - t0
    data = {
        "experiment": "e1_flips",
        "config": opts,
        "seeds": seeds,
        "per_seed": per_seed,
        "summary": summary,
        "primary": primary,
        "secondary": secondary,
        "verdict": {k: common.verdict(c, opts["margin"]) for k, c in primary.items()},
        "deltas_first_seed": deltas,
        "wall_s": round(seconds, 1),
        "rate": common.rate("e1_flips", len(seeds), seconds, opts["jobs"], "seeds"),
    }
    data = common.clean(data)
    common.save("e1_flips", data, opts["out"], lambda plt: plot(plt, data))
    rows = [[s, o, sign, *(common.fmt(summary[str(s)][o][sign][k]) for k in KEYS)]
            for s in opts["steps"] for o in OPTS for sign in ("pos", "neg")]
    common.table(rows, ["RL step", "update", "rollouts", *KEYS])
    common.print_contrasts(primary)
    print("verdict:", *data["verdict"].values())
    common.print_contrasts(secondary, "secondary")
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e1_flips.json")
    return data


def nan(x):
    """None (an undefined value in the JSON) -> NaN, which matplotlib leaves out."""
    return float("nan") if x is None else x


def plot(plt, data):
    """Boosted shares over RL steps, their paired gap, and the Delta distributions.

    Long because: it draws one figure panel by panel; split, one figure's layout would be
    scattered over several functions."""
    steps, summary, n = data["config"]["steps"], data["summary"], len(data["per_seed"])
    eps, margin, ps = (
        data["config"]["eps"],
        data["config"]["margin"],
        data["config"]["primary_step"],
    )
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.4), layout="constrained")
    fig.suptitle(
        "E1: token flipping inside GRPO runs on the chain testbed (AdamW state carried over)",
        fontsize=11,
    )
    for sign, c in (("pos", "tab:green"), ("neg", "tab:red")):
        for o, ls in (("adam", "-"), ("sgd", ":")):
            v = [summary[str(s)][o][sign]["boosted"] for s in steps]
            ax[0].errorbar(
                steps,
                [nan(x[0]) for x in v],
                yerr=common.errbars(v, 0, 1),
                color=c,
                ls=ls,
                marker="o",
                ms=4,
                capsize=3,
                label=f"{'AdamW' if o == 'adam' else 'SGD'}, Â{'>' if sign == 'pos' else '<'}0",
            )
    ax[0].set_xlabel("RL step of the kept state")
    ax[0].set_ylabel(f"share of tokens boosted (Δ > {eps:g} nats)")
    ax[0].set_ylim(0, 1)
    ax[0].set_title("Boosted share of Â>0 and Â<0 rollouts' tokens", fontsize=10)
    ax[0].legend(fontsize=8, ncol=2, loc="upper right")
    for o, c, off in (("adam", "k", -0.012), ("sgd", "0.5", 0.012)):
        name = lambda s: (
            f"{o} (carried) step {s}: boosted share A>0 - A<0"
            if (o == "adam" and s == ps)
            else f"{o} step {s}: boosted share A>0 - A<0"
        )
        cs = [data["primary"].get(name(s)) or data["secondary"].get(name(s)) for s in steps]
        x = [s + off * max(steps + [1]) for s in steps]
        ax[1].errorbar(
            x,
            [nan(cc["diff"]) for cc in cs],
            yerr=[cc["half"] or 0 for cc in cs],
            color=c,
            marker="o",
            capsize=3,
            ls="none",
            label="AdamW, carried state" if o == "adam" else "plain SGD",
        )
    ax[1].axhline(0, color="k", lw=0.6)
    ax[1].axhspan(-margin, margin, color="tab:blue", alpha=0.08, label=f"±{margin:g}: 'similar'")
    ax[1].set_xlabel("RL step of the kept state")
    ax[1].set_ylabel("boosted share, Â>0 minus Â<0 (paired)")
    ax[1].set_title(f"Paired gap; primary contrast: AdamW at step {ps}", fontsize=10)
    ax[1].legend(fontsize=8, loc="lower right")
    mag = torch.logspace(-8, 0, 25).tolist()
    edges = [-x for x in reversed(mag)] + [0.0] + mag
    key = f"adam_{ps}"
    for sign, c in (("pos", "tab:green"), ("neg", "tab:red")):
        x = data["deltas_first_seed"].get(key, {}).get(sign) or []
        if x:
            ax[2].hist(
                x,
                bins=edges,
                alpha=0.5,
                color=c,
                label=f"tokens of Â{'>' if sign == 'pos' else '<'}0 rollouts",
            )
    ax[2].set_xscale("symlog", linthresh=1e-8)
    ax[2].set_xticks(
        [-1, -1e-3, -1e-6, 0, 1e-6, 1e-3, 1],
        ["−1", "−1e-3", "−1e-6", "0", "1e-6", "1e-3", "1"],
        fontsize=8,
    )
    ax[2].minorticks_off()
    for e in (-eps, eps):
        ax[2].axvline(e, color="k", lw=0.8, ls=":")
    ax[2].set_xlabel("Δ = log π_new(y) − log π_old(y)  (nats, symmetric log scale)")
    ax[2].set_ylabel("tokens (count)")
    ax[2].set_title(f"Δ of one AdamW step at RL step {ps} (first seed)", fontsize=10)
    ax[2].legend(fontsize=8, loc="upper left")
    common.caption(
        fig,
        f"Left: share of completion tokens that the next update boosts by more than ε = {eps:g} "
        "nats, for rollouts with positive (green) and negative (red) advantage, at states kept "
        "along GRPO runs; solid: the run's own AdamW step (moments carried over; at step 0 the "
        "optimizer is fresh), dotted: one plain-SGD step. Middle: the paired difference "
        "(Â>0 minus Â<0) per seed, mean with 95 % Student-t interval over seeds; shaded: the "
        "pre-registered 'similar' band. Right: histogram of Δ for every token of the first seed's "
        f"batches; dotted lines at ±ε. " + common.ci_note(n, "0 and 1"),
    )
    return fig


if __name__ == "__main__":
    common.cli(main)
