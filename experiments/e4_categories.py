"""E4: does GRPO put its update mass on different tokens than positive-only training?

Source claim [P2, arXiv 2605.08666]: against positive-only training
(rejection-sampling fine-tuning), critic-free RL moves update mass from
template tokens (format, separators, EOS) to reasoning tokens.

Method: from the SFT warm start of 2-digit addition *with scratchpad* (the
default here, --scratchpad=false for the plain task, whose only template token
is EOS), --batches rollout batches per seed. In ``7+5=12,4+8+1=13;132`` the
operand digits are copy, the other digits compute, and ``+ = , ;`` and EOS
template; note that the carry decision is written as a template token (``+``
of ``+1`` against ``=``). On each batch, one
update with loss grpo and one with loss positive_only (each with its own
advantages and normalisation, loss.py), with train.py's AdamW (--adam_lr) and
with plain SGD (--sgd_lr); Delta = log pi_new - log pi_old per token (float64).
Tokens are labelled template / copy / compute by diagnostics.token_categories
(the task's labels when a sampled completion has the canonical layout, else
digit -> compute, anything else -> template; EOS is template).

Measure: share of the update mass sum |Delta| that falls on each category
(scale-free, so the two losses' different step sizes do not matter), the
mean |Delta| per token of each category and the share per character, pooled
over the batches of a seed; mean and 95 % CI over seeds. Warm starts differ
in where their uncertainty sits, so the comparison is also paired: the
difference grpo - positive_only of each share on the same rollouts, per seed.

Primary contrast (fixed before any result): the compute share of the update
mass under grpo minus under positive_only, on the same rollout batches, paired
by seed, for AdamW and for SGD separately. [P2] says critic-free RL moves mass
from template to reasoning tokens: predicted > 0.

    python experiments/e4_categories.py --quick      # one seed
    python experiments/e4_categories.py              # seeds 0,1,2
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
import toy_tasks  # noqa: E402

EXTRA = dict(common.DIAG_FLAGS, adam_lr=(1e-4, "AdamW lr (train.py's)"), sgd_lr=(1e-3, "plain SGD lr"),
             scratchpad=(True, "scratchpad solutions (without one, EOS is the only template token)"))
LOSSES = ("grpo", "positive_only")
OPTS = ("adam", "sgd")
CHARS = list(toy_tasks.ALPHABET) + ["EOS"]


def plot(plt, data):
    """Share of the update mass per token category, and mean |Δ| per category."""
    summary, runs = data["summary"], [f"{l}_{o}" for o in OPTS for l in LOSSES]
    fig, ax = plt.subplots(1, 2, figsize=(13, 4.4))
    cats = data.get("categories", list(D.CATEGORIES))  # older results have no "style"
    colors = {"template": "0.6", "copy": "tab:blue", "compute": "tab:orange", "style": "tab:purple"}
    bottom = [0.0] * len(runs)
    for c in cats:
        v = [summary[r][c]["share"][0] or 0 for r in runs]
        ax[0].bar(range(len(runs)), v, bottom=bottom, color=colors[c], label=c)
        bottom = [x + y for x, y in zip(bottom, v)]
    tok = [summary["tokens"][c][0] or 0 for c in cats]
    total = sum(tok) or 1
    acc = 0.0
    for c, t in zip(cats, tok):
        ax[0].bar([len(runs) + 0.5], [t / total], bottom=[acc], color=colors[c], hatch="//", edgecolor="w")
        acc += t / total
    pretty = lambda r: r.replace("positive_only", "positive-only").replace("grpo", "GRPO").replace(
        "_adam", "\nAdam").replace("_sgd", "\nSGD")
    ax[0].set_xticks(list(range(len(runs))) + [len(runs) + 0.5], [pretty(r) for r in runs] +
                     ["share of\ntokens"], fontsize=8)
    ax[0].set_ylabel("share of update mass Σ|Δ| (nats / nats)")
    ax[0].set_ylim(0, 1.15)
    ax[0].legend(fontsize=8, ncol=3, loc="upper center")
    ax[0].set_title("Update mass by token category (mean over seeds)", fontsize=10)
    w = 0.8 / len(runs)
    floor = min([summary[r][c]["mean_abs"][0] for r in runs for c in cats
                 if summary[r][c]["mean_abs"][0]] or [1e-12]) / 10
    for i, r in enumerate(runs):
        v = [summary[r][c]["mean_abs"] for c in cats]
        ax[1].bar([k + i * w for k in range(len(cats))], [x[0] or 0 for x in v], w,
                  yerr=common.errbars(v, floor), capsize=2, label=pretty(r).replace("\n", ", "))
    if any(summary[r][c]["mean_abs"][0] for r in runs for c in cats):
        ax[1].set_yscale("log")
    ax[1].set_xticks([k + 0.4 - w / 2 for k in range(len(cats))], cats)
    ax[1].set_ylabel("mean |Δ| per token (nats, log scale)")
    ax[1].set_title("How far one update moves a token, by category", fontsize=10)
    ax[1].legend(fontsize=7)
    n = len(data["per_seed"])
    common.caption(fig, "Δ = log π_new − log π_old of each completion token after one update (GRPO or "
                        "positive-only; AdamW at lr 1e-4 or plain SGD at lr 1e-3) on the same rollouts. Left: "
                        "each category's share of Σ|Δ|, mean over seeds; hatched bar: the categories' share of "
                        "the tokens themselves, for reference. Right: mean |Δ| per token of each category. "
                        + common.ci_note(n) + " On the log axis bars are cut at a tenth of the smallest mean.")
    fig.tight_layout()
    return fig


def main(argv):
    opts = common.parse(argv, EXTRA, __doc__)
    if opts["replot"]:
        return common.replot("e4_categories", opts["out"], plot)
    t0 = time.time()
    per_seed = []
    for seed in opts["seeds"]:
        model, task, draw, gen = common.diag_setup(opts, seed)
        m64 = copy.deepcopy(model).double()
        mass = {(l, o): torch.zeros(len(D.CATEGORIES), dtype=torch.float64) for l in LOSSES for o in OPTS}
        count = torch.zeros(len(D.CATEGORIES), dtype=torch.float64)
        by_id = {(l, o): torch.zeros(toy_tasks.N_OUT, dtype=torch.float64) for l in LOSSES for o in OPTS}
        for _ in range(opts["batches"]):
            b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
            m = b["mask"]
            cats, ids = D.token_categories(task, b["problems"], b["tokens"], m)[m], b["tokens"][m]
            count += torch.bincount(cats, minlength=len(D.CATEGORIES)).double()
            for l in LOSSES:
                adv = L.advantages(b["rewards"], b["group"], l)
                coef = D.token_coefficients(m64, b, adv, l)
                for o in OPTS:
                    d = D.token_deltas(m64, D.one_update(m64, b, adv, o, opts[f"{o}_lr"], coef=coef), b)[m]
                    mass[l, o] += torch.zeros(len(D.CATEGORIES), dtype=torch.float64).index_add_(0, cats, d.abs())
                    by_id[l, o].index_add_(0, ids, d.abs())
        rec = {"seed": seed, "tokens": dict(zip(D.CATEGORIES, count.tolist()))}
        for (l, o), ms in mass.items():
            tot = float(ms.sum())
            rec[f"{l}_{o}"] = {c: {"share": float(ms[k]) / tot if tot > 0 else None,
                                   "mean_abs": float(ms[k] / count[k]) if count[k] > 0 else None}
                               for k, c in enumerate(D.CATEGORIES)}
            rec[f"{l}_{o}"]["share_by_char"] = {CHARS[i]: float(x / ms.sum()) if ms.sum() > 0 else None
                                                for i, x in enumerate(by_id[l, o])}
        per_seed.append(rec)
    runs = [f"{l}_{o}" for o in OPTS for l in LOSSES]
    summary = {r: {c: {k: common.ci([s[r][c][k] for s in per_seed]) for k in ("share", "mean_abs")}
                   for c in D.CATEGORIES} for r in runs}
    summary["tokens"] = {c: common.ci([s["tokens"][c] for s in per_seed]) for c in D.CATEGORIES}
    for o in OPTS:  # paired by seed: same rollouts, same warm start
        for c in D.CATEGORIES:
            gaps = [None if s[f"grpo_{o}"][c]["share"] is None or s[f"positive_only_{o}"][c]["share"] is None
                    else s[f"grpo_{o}"][c]["share"] - s[f"positive_only_{o}"][c]["share"] for s in per_seed]
            summary[f"{c}_share_gap_{o}"] = common.ci(gaps)
    for r in runs:
        summary[r]["share_by_char"] = {ch: common.ci([s[r]["share_by_char"][ch] for s in per_seed]) for ch in CHARS}
    data = {"experiment": "e4_categories", "config": opts, "categories": list(D.CATEGORIES),
            "per_seed": per_seed, "summary": summary, "wall_s": round(time.time() - t0, 1)}
    data["primary"] = {f"{o}: compute share grpo - positive_only": common.contrast(
        [s[f"grpo_{o}"]["compute"]["share"] for s in per_seed],
        [s[f"positive_only_{o}"]["compute"]["share"] for s in per_seed], "> 0",
        [s["seed"] for s in per_seed]) for o in OPTS}
    data = common.clean(data)
    common.save("e4_categories", data, opts["out"], lambda plt: plot(plt, data))
    rows = [[r, *(common.fmt(summary[r][c]["share"]) for c in D.CATEGORIES)] for r in runs]
    rows.append(["(token counts)", *(common.fmt(summary["tokens"][c], 0) for c in D.CATEGORIES)])
    common.table(rows, ["update", *(f"{c} share" for c in D.CATEGORIES)])
    for o in OPTS:
        print(f"{o}: share gap grpo - positive_only (paired by seed): " +
              ", ".join(f"{c} {common.fmt(summary[f'{c}_share_gap_{o}'])}" for c in D.CATEGORIES))
    print("share of the mass by character (the largest three):")
    for r in runs:
        top = sorted(CHARS, key=lambda ch: -(summary[r]["share_by_char"][ch][0] or 0))[:3]
        print(f"  {r}: " + ", ".join(f"{ch!r} {common.fmt(summary[r]['share_by_char'][ch])}" for ch in top))
    print("mean |Delta| per token:")
    common.table([[r, *(common.fmt(summary[r][c]["mean_abs"], 6) for c in D.CATEGORIES)] for r in runs],
                 ["update", *D.CATEGORIES])
    common.print_contrasts(data["primary"])
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e4_categories.json")
    return data


if __name__ == "__main__":
    common.cli(main)
