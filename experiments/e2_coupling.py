"""E2: where does the coupling through the unembedding sit, and how well does it
explain the full update?

Source claims [P2, arXiv 2605.08666]: holding the final hidden states h fixed,
one SGD step on the output matrix W changes log pi(y_i) by
eta * sum_j c_j alpha_ij kappa_ij (diagnostics.py); the coupling mass
(j != i) concentrates on same-token, low-confidence pairs; and the
full-parameter update agrees in the sign of Delta with the unembedding-only
update for roughly 70 % of tokens.

Method: from the SFT warm start (2-digit addition), --batches rollout batches
per seed; GRPO coefficients; plain SGD at --sgd_lr (first-order regime) on
(a) all parameters, (b) lm_head.weight only, and (c) the closed form. All in
float64.

Measures: share of the coupling mass sum_{i!=j} |term_ij| on same-token pairs
(against the share of pairs that are same-token), its split by the confidence
p(y) of both tokens in [0,.5), [.5,.9), [.9,1], the share that opposes the
token's own advantage, the fraction of A != 0 tokens whose coupling outweighs
and opposes their self term (closed-form flips); sign agreement of Delta
between (a)-(b), (a)-(c), (b)-(c), over all tokens and over A != 0 tokens.
Per seed: mean over batches; then mean and 95 % CI over seeds.

Primary contrast (fixed before any result): the sign agreement of Delta
between the full-parameter and the unembedding-only SGD update, over tokens
with A != 0 (full_vs_head_live), against [P2]'s about 0.7: a one-sample t
interval over seeds of (agreement - 0.7), predicted about 0. Secondary: the
share of the coupling mass on same-token pairs minus the share of pairs that
are same-token (mass_same - pairs_same), paired by seed, predicted > 0. The
next version of this experiment will restrict the secondary to low-confidence
same-token pairs (their mass share against their pair share) and take both at
several training steps.

    python experiments/e2_coupling.py --quick      # one seed
    python experiments/e2_coupling.py              # seeds 0,1,2
"""
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch  # noqa: E402

import diagnostics as D  # noqa: E402
import loss as L  # noqa: E402

EXTRA = dict(common.DIAG_FLAGS, batches=(8, "rollout batches per seed"),
             sgd_lr=(1e-3, "plain SGD lr (also the closed form's eta)"))
SCALARS = ("mass_same", "pairs_same", "opposing_same", "opposing_diff", "alpha_same", "alpha_diff",
           "coupling_over_self", "coupling_to_self_ratio")
AGREE = ("full_vs_head", "full_vs_pred", "head_vs_pred")


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def plot(plt, data):
    """Where the coupling mass sits, and how often the three Δ's agree in sign."""
    summary, bins = data["summary"], data["conf_bins"]
    fig, ax = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [1, 1, 1.4]},
                           layout="constrained")
    grids = {k: [[x or 0.0 for x in row] for row in summary[k]] for k in ("mass_by_conf_same", "mass_by_conf_diff")}
    top = max(max(max(r) for r in g) for g in grids.values()) or 1.0
    for i, (k, title) in enumerate((("mass_by_conf_same", "same-token pairs"),
                                    ("mass_by_conf_diff", "different-token pairs"))):
        g = grids[k]
        im = ax[i].imshow(g, cmap="viridis", vmin=0, vmax=top)
        for u in range(3):
            for v in range(3):
                ax[i].text(v, u, f"{g[u][v]:.2f}", ha="center", va="center",
                           color="w" if g[u][v] < 0.6 * top else "k", fontsize=9)
        ax[i].set_xticks(range(3), bins)
        ax[i].set_yticks(range(3), bins)
        ax[i].set_xlabel("confidence p(y_j) of the partner token j")
        if i == 0:
            ax[i].set_ylabel("confidence p(y_i) of the moved token i")
        ax[i].set_title(f"Share of all coupling mass: {title}", fontsize=10)
    fig.colorbar(im, ax=ax[1], fraction=0.05, pad=0.03, label="share of all coupling mass")
    pretty = {"full_vs_head": "full vs\nhead step", "full_vs_pred": "full vs\nclosed form",
              "head_vs_pred": "head step vs\nclosed form"}
    names = [f"{pretty.get(k, k)}\n({'all' if s == 'all' else 'Â≠0'})" for s in ("all", "live") for k in AGREE]
    v = [summary[f"{k}_{s}"] for s in ("all", "live") for k in AGREE]
    ax[2].bar(range(len(v)), [x[0] or 0 for x in v], yerr=common.errbars(v, 0, 1), capsize=3,
              color=["tab:blue"] * len(AGREE) + ["tab:cyan"] * len(AGREE))
    ax[2].axhline(0.7, color="k", ls=":", lw=1, label="[P2]: about 0.7, full vs head")
    ax[2].axhline(0.5, color="0.5", ls="--", lw=0.8, label="0.5: chance")
    ax[2].set_xticks(range(len(v)), names, fontsize=7)
    ax[2].set_ylim(0, 1.1)
    ax[2].set_ylabel("fraction of tokens whose Δ has the same sign")
    ax[2].set_title("Sign agreement of Δ between update kinds", fontsize=10)
    ax[2].legend(fontsize=8, loc="upper right", ncol=2)
    n = len(data["per_seed"])
    common.caption(fig, "Left and middle: share of the coupling mass Σ_{i≠j} |η c_j α_ij κ_ij| of one "
                        "unembedding-only SGD step that falls on pairs of tokens (i, j) in each confidence "
                        f"cell, mean over {n} seed{'s' if n > 1 else ''}; the 18 cells of both panels sum to 1. "
                        "Right: how often two ways of computing Δ = log π_new − log π_old agree in sign "
                        "(full-parameter step, unembedding-only 'head' step, its first-order closed form), "
                        "over all tokens (dark) and over tokens with Â ≠ 0 (light). " + common.ci_note(n, "0 and 1"))
    return fig


def main(argv):
    opts = common.parse(argv, EXTRA, __doc__)
    if opts["replot"]:
        return common.replot("e2_coupling", opts["out"], plot)
    t0, lr = time.time(), opts["sgd_lr"]
    per_seed = []
    for seed in opts["seeds"]:
        model, task, draw, gen = common.diag_setup(opts, seed)
        m64 = copy.deepcopy(model).double()
        recs = []
        for _ in range(opts["batches"]):
            b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
            adv = L.advantages(b["rewards"], b["group"], "grpo")
            m = b["mask"]
            a_tok = adv[:, None].expand_as(m)[m]
            coef = D.token_coefficients(m64, b, adv)
            ct = D.coupling_terms(m64, b, coef, lr)
            rec = D.coupling_summary(ct, a_tok)
            full = D.token_deltas(m64, D.one_update(m64, b, adv, "sgd", lr, coef=coef), b)[m]
            head = D.token_deltas(m64, D.one_update(m64, b, adv, "sgd", lr, coef=coef, params="head"), b)[m]
            pred = ct["pred"]
            everything, live = torch.ones(len(full), dtype=torch.bool), a_tok != 0
            for name, sel in (("all", everything), ("live", live)):
                for k, (x, y) in zip(AGREE, ((full, head), (full, pred), (head, pred))):
                    rec[f"{k}_{name}"] = D.sign_agreement(x, y, sel) if sel.any() else None
            rec["head_pred_relerr"] = float((pred - head).norm() / head.norm().clamp(min=1e-300))
            recs.append(rec)
        out = {"seed": seed, **{k: mean([r[k] for r in recs]) for k in recs[0]
                                if k not in ("bins", "mass_by_conf_same", "mass_by_conf_diff")}}
        for k in ("mass_by_conf_same", "mass_by_conf_diff"):
            out[k] = torch.tensor([r[k] for r in recs]).nanmean(0).tolist()
        per_seed.append(out)
    keys = [k for k in per_seed[0] if k not in ("seed", "mass_by_conf_same", "mass_by_conf_diff")]
    summary = {k: common.ci([r[k] for r in per_seed]) for k in keys}
    for k in ("mass_by_conf_same", "mass_by_conf_diff"):
        summary[k] = torch.tensor([r[k] for r in per_seed]).mean(0).tolist()
    bins = ["[0,.5)", "[.5,.9)", "[.9,1]"]
    data = {"experiment": "e2_coupling", "config": opts, "conf_bins": bins, "per_seed": per_seed,
            "summary": summary, "wall_s": round(time.time() - t0, 1)}
    seeds = [r["seed"] for r in per_seed]
    data["primary"] = {"sign agreement full vs head (A!=0) - 0.7": common.contrast(
        [r["full_vs_head_live"] for r in per_seed], 0.7, "about 0", seeds)}
    data["secondary"] = {"same-token share of coupling mass - of pairs": common.contrast(
        [r["mass_same"] for r in per_seed], [r["pairs_same"] for r in per_seed], "> 0", seeds)}
    data = common.clean(data)
    common.save("e2_coupling", data, opts["out"], lambda plt: plot(plt, data))
    rows = [[k, common.fmt(summary[k])] for k in SCALARS] + \
           [[f"{k}_{s}", common.fmt(summary[f"{k}_{s}"])] for s in ("all", "live") for k in AGREE] + \
           [["head_pred_relerr", common.fmt(summary["head_pred_relerr"], 5)]]
    common.table(rows, ["measure", "mean ± 95% CI"])
    print("coupling mass by confidence (rows: token i, cols: partner j), same-token pairs:")
    for lab, r in zip(bins, summary["mass_by_conf_same"]):
        print(f"  {lab:8s} " + "  ".join(f"{x:.3f}" for x in r))
    common.print_contrasts(data["primary"])
    common.print_contrasts(data["secondary"], "secondary")
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e2_coupling.json")
    return data


if __name__ == "__main__":
    common.cli(main)
