"""E3: do masked updates remove the flips? The full network and the unembedding closed form,
separately.

Source claim [P2, arXiv 2605.08666, abstract]: "these token coupling effects
occur primarily between identical tokens that are both predicted with low
confidence", and "as a result of coupling, opposing signals cancel out for
tokens shared by positive and negative rollouts". Its Figure 3 ("Empirical
verification via masked updates") removes contributions from an update and
measures the flips again; Appendix D.2: "we deliberately use SGD with a
learning rate of 1e-1 and no momentum rather than Adam" (Adam's first step is
a sign step). If same-token coupling causes the flips, removing each token's
opposite-sign copies removes most of them.

Method: from the SFT warm start of --task=chain (long completions whose
template, style and copy tokens every rollout shares), --batches rollout
batches of B = --prompts x G = --group_size per seed, grpo coefficients,
float64, one plain-SGD step (no momentum) at every lr of --sgd_lrs (P2's 1e-1
included). Variants (diagnostics.masked_update_deltas):
  full                    the whole update;
  no_opposite_same_token  each token (id v, rollout sign s) measured after a
                          step whose gradient omits every token of id v in a
                          rollout of sign -s (anywhere in the batch);
  positive_only           the A < 0 coefficients zeroed.
Two routes, reported separately:
  full network   the actual SGD step on every parameter (Delta = log pi_new -
                 log pi_old, exact, at each lr);
  closed form    the unembedding-only first-order Delta_i = lr sum_j c_j
                 alpha_ij kappa_ij (diagnostics.coupling_terms) with the same
                 removals (a pair mask, or zeroed coefficients). It is linear in
                 lr: the sign of each Delta, hence the flipped fraction at eps = 0
                 and every boosted/suppressed share at eps = 0, does not depend on
                 lr and is reported once. Only the thresholded fraction (|Delta| >
                 eps, i.e. |Delta/lr| > eps/lr) is reported per lr.

Measure: flipped fraction = (A > 0 tokens suppressed + A < 0 tokens boosted) /
(all A != 0 tokens), at eps = --eps (P2's thresholded convention) and at eps =
0, pooled over the batches of a seed; mean and 95 % t interval over seeds.

Primary contrasts (fixed before any chain result): at lr = --primary_lr (P2's
1e-1) and eps = --eps, the flipped fraction of ``full`` minus that of
``no_opposite_same_token``, on the same rollouts, paired by seed; predicted > 0
([P2]: the mask removes flips). Reported twice, once per route: "full
network" and "closed form". Secondary: the same at eps = 0 and at the other
lrs; ``full`` minus ``positive_only`` (predicted > 0: without negatives no
A > 0 token is pushed down by them).

    python -m lab.experiments.e3_masked --quick      # one seed, out/partial/
    python -m lab.experiments.e3_masked              # seeds 0-9, results/
    python -m lab.experiments.e3_masked --replot     # redraw the figure from the JSON
"""

import copy
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e3_masked\n")
    sys.exit(2)
from lab.experiments import common
import torch

from lab import probes
from lab import estimators

EXTRA = dict(
    common.DIAG_FLAGS,
    batches=(2, "rollout batches per seed"),
    eps=(1e-4, "flip threshold on |Delta| (nats)"),
    sgd_lrs=(
        "1e-3,1e-2,1e-1",
        "plain-SGD learning rates of the sweep (also the closed form's eta)",
    ),
    primary_lr=(0.1, "the lr of the primary contrasts (P2's 1e-1); must be one of --sgd_lrs"),
)
VARIANTS = ("full", "no_opposite_same_token", "positive_only")
PRETTY = {
    "full": "full",
    "no_opposite_same_token": "no opposite same-token",
    "positive_only": "positive-only",
}
COLORS = {"full": "tab:blue", "no_opposite_same_token": "tab:orange", "positive_only": "tab:green"}
KEYS = ("boosted", "suppressed", "stable")


def nan(x):
    """None (undefined: no A != 0 token) -> NaN, which matplotlib leaves out."""
    return float("nan") if x is None else x


def key(lr):
    return f"{lr:g}"


def fractions(delta, adv_tok, eps):
    """flip_table of pooled token Deltas [M] with their rollouts' advantages [M]."""
    t = probes.flip_table(delta[:, None], torch.ones(len(delta), 1, dtype=torch.bool), adv_tok, eps)
    return {"flipped": t["flipped"], **{f"{s}_{k}": t[s][k] for s in ("pos", "neg") for k in KEYS}}


def one_seed(item):
    """All measurements of one seed: {"seed", "tokens", "net": {lr: {variant: ...}},
    "cf": {variant: {eps = 0 fractions, "flipped_by_lr": {lr: flipped at eps}}}}."""
    opts, seed = item
    lrs = opts["sgd_lrs"]
    model, task, draw, gen = common.diag_setup(opts, seed)
    m64 = copy.deepcopy(model).double()
    net = {key(lr): {v: [] for v in VARIANTS} for lr in lrs}
    cf, advs = {v: [] for v in VARIANTS}, []
    for _ in range(opts["batches"]):
        b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
        adv = estimators.advantages(b.rewards, b.group, "grpo")
        m = b.mask
        a_tok, y = adv[:, None].expand_as(m)[m], b.tokens[m]
        advs.append(a_tok)
        for lr, ds in probes.masked_update_deltas(m64, b, adv, lrs).items():
            for v, d in ds.items():
                net[key(lr)][v].append(d[m])
        coef = probes.token_coefficients(
            m64, b, adv
        )  # closed form at lr = 1: Delta(lr) = lr * Delta(1)
        cf["full"].append(probes.coupling_terms(m64, b, coef, 1.0)["pred"])
        keep = probes.opposite_same_token_keep(y, a_tok)
        cf["no_opposite_same_token"].append(
            probes.coupling_terms(m64, b, coef, 1.0, keep=keep)["pred"]
        )
        cf["positive_only"].append(
            probes.coupling_terms(m64, b, coef * (adv >= 0)[:, None], 1.0)["pred"]
        )
    a = torch.cat(advs)
    rec = {"seed": seed, "tokens": int((a != 0).sum()), "net": {}, "cf": {}}
    for lr in lrs:
        rec["net"][key(lr)] = {}
        for v in VARIANTS:
            d = torch.cat(net[key(lr)][v])
            rec["net"][key(lr)][v] = {**fractions(d, a, opts["eps"]),
                                      "flipped_eps0": fractions(d, a, 0.0)["flipped"]}
    for v in VARIANTS:
        d = torch.cat(cf[v])
        z = fractions(d, a, 0.0)
        rec["cf"][v] = {
            "flipped_eps0": z.pop("flipped"),
            **{f"{k}_eps0": x for k, x in z.items()},
            "flipped_by_lr": {key(lr): fractions(lr * d, a, opts["eps"])["flipped"] for lr in lrs},
        }
    return rec


def plot(plt, data):
    """Flipped fraction against lr: full network (solid, with error bars) and
    closed form (dashed), per variant; at eps and at eps = 0."""
    s, eps, lrs = data["summary"], data["config"]["eps"], data["config"]["sgd_lrs"]
    n = len(data["per_seed"])
    fig, ax = plt.subplots(1, 2, figsize=(13, 4.4), layout="tight")
    fig.suptitle("E3: masked plain-SGD updates on the chain testbed: do flips need opposite-sign "
                 "copies of the same token?", fontsize=11)
    for i, (title, m) in enumerate(((f"ε = {eps:g} nats", "flipped"), ("ε = 0", "flipped_eps0"))):
        for k, v in enumerate(VARIANTS):
            shift = [lr * 1.07 ** (k - 1) for lr in lrs]  # side by side, so bars do not overlap
            pts = [s["net"][key(lr)][v][m] for lr in lrs]
            ax[i].errorbar(
                shift,
                [nan(p[0]) for p in pts],
                yerr=common.errbars(pts, 0, 1),
                color=COLORS[v],
                marker="o",
                capsize=3,
                label=f"full network: {PRETTY[v]}",
            )
            if m == "flipped":
                cfv = [nan(s["cf"][v]["flipped_by_lr"][key(lr)][0]) for lr in lrs]
                ax[i].plot(
                    lrs,
                    cfv,
                    color=COLORS[v],
                    ls="--",
                    marker="x",
                    label=f"closed form: {PRETTY[v]}",
                )
            elif s["cf"][v]["flipped_eps0"][0] is not None:
                ax[i].axhline(s["cf"][v]["flipped_eps0"][0], color=COLORS[v], ls="--",
                              label=f"closed form: {PRETTY[v]} (lr-free)")
        ax[i].axvline(data["config"]["primary_lr"], color="0.5", ls=":", lw=1)
        ax[i].set_xscale("log")
        ax[i].set_xlabel("plain-SGD learning rate (log scale; dotted: P2's 1e-1)")
        ax[i].set_title(f"Flipped tokens after one masked SGD step, {title}", fontsize=10)
        ax[i].set_ylim(0, None)
        ax[i].set_ylabel("flipped fraction of Â ≠ 0 tokens")
    ax[1].legend(loc="lower left", ncol=2)
    common.caption(
        fig,
        "Flipped = Â>0 tokens suppressed plus Â<0 tokens boosted, over all Â≠0 tokens, after one "
        "plain-SGD step on the same rollouts of the chain warm start, with contributions removed: "
        "none ('full'), every same-token copy of the opposite sign, or all negative rollouts. "
        "Solid: the actual step of the whole network; dashed: the unembedding-only first-order "
        "closed form (linear in lr, so at ε = 0 it is one number). A mask that removed the cause "
        "of the flips would bring its curve well below 'full'. "
        + common.ci_note(n, "0 and 1")
        + " The closed form is drawn at its mean only.",
    )
    return fig


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    opts = common.parse(argv, EXTRA, __doc__, redraw=("e3_masked", plot))  # --replot: redraw, exit
    if opts["primary_lr"] not in opts["sgd_lrs"]:
        raise common.CliError(f"--primary_lr={opts['primary_lr']:g} is not one of --sgd_lrs")
    per_seed, seeds, t0 = common.over_seeds(one_seed, opts)
    wall = time.time() - t0
    lrs, seeds = opts["sgd_lrs"], [r["seed"] for r in per_seed]
    summary = {
        "net": {
            key(lr): {
                v: {
                    k: common.ci([r["net"][key(lr)][v][k] for r in per_seed])
                    for k in per_seed[0]["net"][key(lr)][v]
                }
                for v in VARIANTS
            }
            for lr in lrs
        },
        "cf": {
            v: {
                **{
                    k: common.ci([r["cf"][v][k] for r in per_seed])
                    for k in per_seed[0]["cf"][v]
                    if k != "flipped_by_lr"
                },
                "flipped_by_lr": {
                    key(lr): common.ci([r["cf"][v]["flipped_by_lr"][key(lr)] for r in per_seed])
                    for lr in lrs
                },
            }
            for v in VARIANTS
        },
    }
    net = lambda lr, v, m: [r["net"][key(lr)][v][m] for r in per_seed]
    cf = lambda lr, v, m: [
        r["cf"][v][m] if lr is None else r["cf"][v]["flipped_by_lr"][key(lr)] for r in per_seed
    ]
    p = opts["primary_lr"]
    primary = {
        f"full network, lr {p:g}: flipped full - no_opposite_same_token": common.contrast(
            net(p, "full", "flipped"), net(p, "no_opposite_same_token", "flipped"), "> 0", seeds
        ),
        f"closed form, lr {p:g}: flipped full - no_opposite_same_token": common.contrast(
            cf(p, "full", 0), cf(p, "no_opposite_same_token", 0), "> 0", seeds
        ),
    }
    secondary = {
        "full network, eps 0, lr %g: flipped full - no_opposite_same_token"
        % lr: common.contrast(
            net(lr, "full", "flipped_eps0"),
            net(lr, "no_opposite_same_token", "flipped_eps0"),
            "> 0",
            seeds,
        )
        for lr in lrs
    }
    secondary.update(
        {
            "full network, lr %g: flipped full - no_opposite_same_token"
            % lr: common.contrast(
                net(lr, "full", "flipped"),
                net(lr, "no_opposite_same_token", "flipped"),
                "> 0",
                seeds,
            )
            for lr in lrs
            if lr != p
        }
    )
    secondary["closed form, eps 0: flipped full - no_opposite_same_token"] = common.contrast(
        cf(None, "full", "flipped_eps0"),
        cf(None, "no_opposite_same_token", "flipped_eps0"),
        "> 0",
        seeds,
    )
    secondary[f"full network, lr {p:g}: flipped full - positive_only"] = common.contrast(
        net(p, "full", "flipped"), net(p, "positive_only", "flipped"), "> 0", seeds)
    secondary[f"closed form, lr {p:g}: flipped full - positive_only"] = common.contrast(
        cf(p, "full", 0), cf(p, "positive_only", 0), "> 0", seeds)
    data = {
        "experiment": "e3_masked",
        "config": opts,
        "variants": list(VARIANTS),
        "per_seed": per_seed,
        "summary": summary,
        "primary": primary,
        "secondary": secondary,
        "wall_s": round(wall, 1),
        "rate": common.rate("e3_masked", len(per_seed), wall, opts["jobs"], "seeds"),
    }
    data = common.clean(data)
    common.save("e3_masked", data, opts["out"], lambda plt: plot(plt, data))
    rows = [
        [
            f"network lr {key(lr)}",
            v,
            common.fmt(summary["net"][key(lr)][v]["flipped"]),
            common.fmt(summary["net"][key(lr)][v]["flipped_eps0"]),
        ]
        for lr in lrs
        for v in VARIANTS
    ]
    rows += [
        [
            f"closed form lr {key(lr)}",
            v,
            common.fmt(summary["cf"][v]["flipped_by_lr"][key(lr)]),
            common.fmt(summary["cf"][v]["flipped_eps0"]) if lr == lrs[0] else "(same)",
        ]
        for lr in lrs
        for v in VARIANTS
    ]
    common.table(rows, ["route", "update", f"flipped eps={opts['eps']:g}", "flipped eps=0"])
    common.print_contrasts(primary)
    common.print_contrasts(secondary, "secondary")
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e3_masked.json")
    return data


if __name__ == "__main__":
    common.cli(main)
