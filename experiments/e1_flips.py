"""E1: do positive and negative rollouts flip similar fractions of tokens?

Source claim [P2, arXiv 2605.08666]: after one critic-free update, tokens of
positive rollouts (A > 0) are not all boosted and tokens of negative rollouts
(A < 0) are not all suppressed; the boosted / suppressed proportions are
similar in both ("token flipping").

Method: from the SFT warm start of the default run (2-digit addition), sample
--batches rollout batches of --prompts x --group_size; on each, take one GRPO
update on a copy of the policy, with train.py's AdamW (lr --adam_lr) and with
plain SGD (lr --sgd_lr, small enough to be first-order), and measure
Delta = log pi_new(y) - log pi_old(y) on every completion token (float64).

Measure: fractions boosted (Delta > eps), suppressed (Delta < -eps) and
stable, for A > 0 and A < 0 tokens, pooled over the batches of a seed; the
"flipped" fraction (suppressed A > 0 plus boosted A < 0 tokens, over all
A != 0 tokens); the same at eps = 0 (threshold-free); mean and 95 % CI over
seeds. Also the Delta distributions (first seed) for the figure.

Primary contrast (fixed before any result): the boosted share (Delta > eps) of
A > 0 tokens minus the boosted share of A < 0 tokens, for AdamW and for SGD
separately, paired by seed (both shares come from the same rollouts). [P2]
finds the proportions "remarkably similar": predicted about 0. This script
measures one update of a fresh optimizer at the warm start; the next version
of this experiment will measure the same contrast inside real RL runs,
optimizer state carried over, at several steps.

    python experiments/e1_flips.py --quick      # one seed
    python experiments/e1_flips.py              # seeds 0,1,2
"""
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (puts the repository root on sys.path)
import torch  # noqa: E402

import diagnostics as D  # noqa: E402
import loss as L  # noqa: E402

EXTRA = dict(common.DIAG_FLAGS, batches=(8, "rollout batches per seed"),
             eps=(1e-4, "flip threshold on |Delta| (nats)"),
             adam_lr=(1e-4, "AdamW lr (train.py's)"), sgd_lr=(1e-3, "plain SGD lr"))
OPTS = ("adam", "sgd")
KEYS = ("boosted", "suppressed", "stable")


def per_token(adv, mask):
    return adv[:, None].expand_as(mask)[mask]


def plot(plt, data):
    """Stacked flip fractions, and the distribution of Delta for each optimizer."""
    summary, deltas, eps = data["summary"], data["deltas_first_seed"], data["config"]["eps"]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    labels = [f"{o.upper() if o == 'sgd' else 'Adam'}\nA{'>' if s == 'pos' else '<'}0" for o in OPTS
              for s in ("pos", "neg")]
    bottom = [0.0] * 4
    for k, c in zip(KEYS, ("tab:green", "tab:red", "0.7")):
        v = [summary[o][s][k][0] or 0 for o in OPTS for s in ("pos", "neg")]
        ax[0].bar(labels, v, bottom=bottom, color=c, label=k)
        bottom = [x + y for x, y in zip(bottom, v)]
    ax[0].set_ylabel(f"fraction of tokens (|Δ| > ε = {eps:g} nats)")
    ax[0].set_ylim(0, 1.18)
    ax[0].legend(fontsize=8, ncol=3, loc="upper center")
    n = len(data["per_seed"])
    ax[0].set_title(f"Token flips after one update (mean over {n} seed{'s' if n > 1 else ''})", fontsize=10)
    mag = torch.logspace(-8, 1, 28).tolist()
    edges = [-x for x in reversed(mag)] + [0.0] + mag  # log-spaced on both sides of 0
    for i, o in enumerate(OPTS):
        a = ax[i + 1]
        for s, c in (("pos", "tab:green"), ("neg", "tab:red")):
            x = deltas.get(o, {}).get(s) or []
            if x:
                a.hist(x, bins=edges, alpha=0.5, color=c, label=f"tokens of A{'>' if s == 'pos' else '<'}0 rollouts")
        a.set_xscale("symlog", linthresh=1e-8)
        ticks = [-1, -1e-3, -1e-6, 0, 1e-6, 1e-3, 1]
        a.set_xticks(ticks, ["−1", "−1e-3", "−1e-6", "0", "1e-6", "1e-3", "1"], fontsize=8)
        a.minorticks_off()
        for e in (-eps, eps):
            a.axvline(e, color="k", lw=0.8, ls=":")
        a.axvline(0, color="k", lw=0.5)
        a.set_xlabel("Δ = log π_new(y) − log π_old(y)  (nats, symmetric log scale)")
        a.set_ylabel("tokens (count)")
        a.set_title(f"Distribution of Δ, {'Adam' if o == 'adam' else 'SGD'} step (first seed)", fontsize=10)
        if x or deltas.get(o, {}).get("pos"):
            a.legend(fontsize=8, loc="upper center")
    common.caption(fig, f"Left: share of Â>0 and Â<0 tokens that one update boosted (Δ > ε), suppressed "
                        f"(Δ < −ε) or left stable, mean over {n} seed{'s' if n > 1 else ''} (the README table "
                        f"gives the 95 % intervals). Middle and right: histograms of Δ for every completion "
                        f"token of the first seed; dotted lines at ±ε = {eps:g} nats, the threshold of the "
                        f"left panel. Green bars left of 0 and red bars right of 0 are flipped tokens.")
    fig.tight_layout()
    return fig


def main(argv):
    opts = common.parse(argv, EXTRA, __doc__)
    if opts["replot"]:
        return common.replot("e1_flips", opts["out"], plot)
    t0 = time.time()
    per_seed, deltas = [], {}
    for seed in opts["seeds"]:
        model, task, draw, gen = common.diag_setup(opts, seed)
        m64 = copy.deepcopy(model).double()
        pooled = {o: ([], []) for o in OPTS}
        for _ in range(opts["batches"]):
            b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
            adv = L.advantages(b["rewards"], b["group"], "grpo")
            coef = D.token_coefficients(m64, b, adv)
            for o in OPTS:
                new = D.one_update(m64, b, adv, o, opts[f"{o}_lr"], coef=coef)
                pooled[o][0].append(D.token_deltas(m64, new, b)[b["mask"]])
                pooled[o][1].append(per_token(adv, b["mask"]))
        rec = {"seed": seed}
        for o in OPTS:
            d, a = torch.cat(pooled[o][0]), torch.cat(pooled[o][1])
            ones = torch.ones(len(d), 1, dtype=torch.bool)
            t, tz = D.flip_table(d[:, None], ones, a, opts["eps"]), D.flip_table(d[:, None], ones, a, 0.0)
            if seed == opts["seeds"][0]:
                deltas[o] = {"pos": t["delta_pos"][:3000], "neg": t["delta_neg"][:3000]}
            rec[o] = {"pos": t["pos"], "neg": t["neg"], "flipped": t["flipped"],
                      "flipped_eps0": tz["flipped"], "pos_boosted_eps0": tz["pos"]["boosted"],
                      "neg_suppressed_eps0": tz["neg"]["suppressed"],
                      "median_abs_delta": float(d.abs().median()) if len(d) else None}
        per_seed.append(rec)
    summary = {o: {s: {k: common.ci([r[o][s][k] for r in per_seed]) for k in KEYS} for s in ("pos", "neg")}
               for o in OPTS}
    for o in OPTS:
        for k in ("flipped", "flipped_eps0", "pos_boosted_eps0", "neg_suppressed_eps0", "median_abs_delta"):
            summary[o][k] = common.ci([r[o][k] for r in per_seed])
    data = {"experiment": "e1_flips", "config": opts, "per_seed": per_seed, "summary": summary,
            "deltas_first_seed": deltas, "wall_s": round(time.time() - t0, 1)}
    seeds = [r["seed"] for r in per_seed]
    data["primary"] = {f"{o}: boosted share A>0 - A<0": common.contrast(
        [r[o]["pos"]["boosted"] for r in per_seed], [r[o]["neg"]["boosted"] for r in per_seed],
        "about 0", seeds) for o in OPTS}
    data = common.clean(data)
    common.save("e1_flips", data, opts["out"], lambda plt: plot(plt, data))
    rows = [[o, s, *(common.fmt(summary[o][s][k]) for k in KEYS)] for o in OPTS for s in ("pos", "neg")]
    common.table(rows, ["optimizer", "rollouts", *KEYS])
    for o in OPTS:
        print(f"{o}: flipped {common.fmt(summary[o]['flipped'])} (eps={opts['eps']:g}), "
              f"{common.fmt(summary[o]['flipped_eps0'])} (eps=0)")
    common.print_contrasts(data["primary"])
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e1_flips.json")
    return data


if __name__ == "__main__":
    common.cli(main)
