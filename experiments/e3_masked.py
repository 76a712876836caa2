"""E3: do masked updates remove the flips?

Source claim [P2, arXiv 2605.08666]: if coupling between copies of the same
token causes token flipping, removing the opposite-sign same-token partners
from the update removes most flips; positive-only updates are the other
ablation (no negatives at all).

Method: from the SFT warm start (2-digit addition), --batches rollout batches
per seed, GRPO coefficients, plain SGD without momentum at --sgd_lr (so that
contributions add linearly), float64. Variants (diagnostics.masked_update_deltas):
  full                    the whole update;
  no_opposite_same_token  each token (id v, rollout sign s) measured after a
                          step whose gradient omits every token of id v in a
                          rollout of sign -s (anywhere in the batch);
  positive_only           the A < 0 coefficients zeroed.
Each also in the unembedding closed form (h fixed; the same removal as a pair
mask, or the same zeroed coefficients): the "cf_" rows.

Measure: flipped fraction (A > 0 tokens suppressed plus A < 0 tokens boosted,
over all A != 0 tokens) at eps = --eps and at eps = 0, and the boosted /
suppressed / stable fractions per rollout sign; pooled over the batches of a
seed, then mean and 95 % CI over seeds.

Primary contrast (fixed before any result): the flipped fraction (at eps =
--eps) of the full-network update ``full`` minus that of
``no_opposite_same_token``, paired by seed (both on the same rollouts). [P2]
says the mask removes most flips: predicted > 0.

    python experiments/e3_masked.py --quick      # one seed
    python experiments/e3_masked.py              # seeds 0,1,2
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

EXTRA = dict(common.DIAG_FLAGS, eps=(1e-4, "flip threshold on |Delta| (nats)"),
             sgd_lr=(1e-3, "plain SGD lr (also the closed form's eta)"))
VARIANTS = ("full", "no_opposite_same_token", "positive_only")
ROWS = VARIANTS + tuple(f"cf_{v}" for v in VARIANTS)
LABELS = {"full": "full", "no_opposite_same_token": "no opposite\nsame-token", "positive_only": "positive\nonly"}


def plot(plt, data):
    """Flipped fraction under each masked update, with the unmasked one as reference."""
    summary, eps = data["summary"], data["config"]["eps"]
    fig, ax = plt.subplots(1, 2, figsize=(13, 4.4), sharey=False)
    ticks = [("closed form:\n" if r.startswith("cf_") else "SGD step:\n") +
             LABELS[r.replace("cf_", "")].replace(" ", "\n", 1) for r in ROWS]
    n = len(data["per_seed"])
    for i, key in enumerate(("flipped", "flipped_eps0")):
        v = [summary[r][key] for r in ROWS]
        ax[i].bar(range(len(ROWS)), [x[0] or 0 for x in v], yerr=common.errbars(v, 0, 1), capsize=3,
                  color=["tab:blue"] * 3 + ["tab:orange"] * 3)
        for r0, c in (("full", "tab:blue"), ("cf_full", "tab:orange")):
            if summary[r0][key][0] is not None:
                ax[i].axhline(summary[r0][key][0], color=c, ls=":", lw=1)
        ax[i].set_xticks(range(len(ROWS)), ticks, fontsize=7)
        ax[i].set_ylabel("flipped fraction of Â ≠ 0 tokens")
        ax[i].set_title(f"Flips after a masked SGD update, {'ε = %g nats' % eps if i == 0 else 'ε = 0'}",
                        fontsize=10)
    common.caption(fig, "Flipped = Â>0 tokens suppressed plus Â<0 tokens boosted, over all Â≠0 tokens, after "
                        "one plain-SGD update (blue: the actual step; orange: its unembedding-only closed "
                        "form) with chosen contributions removed: none ('full'), every same-token copy of the "
                        "opposite sign, or all negative rollouts. Dotted lines: the unmasked level of each kind; "
                        "a mask that removed the cause would bring its bar well below them. "
                        + common.ci_note(n, "0 and 1"))
    fig.tight_layout()
    return fig


def main(argv):
    opts = common.parse(argv, EXTRA, __doc__)
    if opts["replot"]:
        return common.replot("e3_masked", opts["out"], plot)
    t0, lr = time.time(), opts["sgd_lr"]
    per_seed = []
    for seed in opts["seeds"]:
        model, task, draw, gen = common.diag_setup(opts, seed)
        m64 = copy.deepcopy(model).double()
        pooled = {v: [] for v in ROWS}
        advs = []
        for _ in range(opts["batches"]):
            b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
            adv = L.advantages(b["rewards"], b["group"], "grpo")
            m = b["mask"]
            a_tok, y = adv[:, None].expand_as(m)[m], b["tokens"][m]
            advs.append(a_tok)
            for v, d in D.masked_update_deltas(m64, b, adv, lr).items():
                pooled[v].append(d[m])
            coef = D.token_coefficients(m64, b, adv)
            pooled["cf_full"].append(D.coupling_terms(m64, b, coef, lr)["pred"])
            keep = D.opposite_same_token_keep(y, a_tok)
            pooled["cf_no_opposite_same_token"].append(D.coupling_terms(m64, b, coef, lr, keep=keep)["pred"])
            pooled["cf_positive_only"].append(
                D.coupling_terms(m64, b, coef * (adv >= 0)[:, None], lr)["pred"])
        a = torch.cat(advs)
        ones = torch.ones(len(a), 1, dtype=torch.bool)
        rec = {"seed": seed}
        for v in ROWS:
            d = torch.cat(pooled[v])[:, None]
            t, tz = D.flip_table(d, ones, a, opts["eps"]), D.flip_table(d, ones, a, 0.0)
            rec[v] = {"flipped": t["flipped"], "flipped_eps0": tz["flipped"],
                      **{f"{s}_{k}": t[s][k] for s in ("pos", "neg") for k in ("boosted", "suppressed", "stable")}}
        per_seed.append(rec)
    summary = {v: {k: common.ci([r[v][k] for r in per_seed]) for k in per_seed[0][v]} for v in ROWS}
    data = {"experiment": "e3_masked", "config": opts, "variants": list(ROWS), "per_seed": per_seed,
            "summary": summary, "wall_s": round(time.time() - t0, 1)}
    data["primary"] = {"flipped full - no_opposite_same_token": common.contrast(
        [r["full"]["flipped"] for r in per_seed], [r["no_opposite_same_token"]["flipped"] for r in per_seed],
        "> 0", [r["seed"] for r in per_seed])}
    data = common.clean(data)
    common.save("e3_masked", data, opts["out"], lambda plt: plot(plt, data))
    rows = [[v, common.fmt(summary[v]["flipped"]), common.fmt(summary[v]["flipped_eps0"]),
             common.fmt(summary[v]["pos_suppressed"]), common.fmt(summary[v]["neg_boosted"])] for v in ROWS]
    common.table(rows, ["update", f"flipped eps={opts['eps']:g}", "flipped eps=0", "A>0 suppressed",
                        "A<0 boosted"])
    common.print_contrasts(data["primary"])
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e3_masked.json")
    return data


if __name__ == "__main__":
    common.cli(main)
