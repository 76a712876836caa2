"""E4: does GRPO put its update mass on other tokens than positive-only training?

Source claim [P2, arXiv 2605.08666, abstract]: "Compared with training on only
positive rollouts, critic-free RL shifts updates from template and formatting
tokens toward reasoning tokens" (its Figure 4 groups tokens into Math,
Template, ...). On --task=chain "template and formatting" are the task's
``template`` tokens (operators, ``=``, ``)``, EOS) and its ``style`` tokens (the
``(`` that opens a restatement and the ``,``/``;`` separators: formatting
choices the verifier ignores); "reasoning" are ``compute`` (results) and, as a
separate row, ``copy`` (restated operands and values).

Method: per seed, train.py's GRPO RL from the SFT warm start of chain
(common.rl_states: its rollouts, rl_update and AdamW at --adam_lr, B = --prompts,
G = --group_size), kept at step 0 and at step --rl_step with its AdamW moments.
At each of the two states, --batches fresh rollout batches; on each batch one
update with loss grpo and one with loss positive_only (each its own advantages
and normalisation, loss.py), from the same state, with
  adam  train.py's AdamW carrying the run's moments (common.real_step: whole
        batch, grad clip 1.0, float64). At step 0 the optimizer is fresh and its
        first step is close to sign descent; the primary contrast uses step
        --rl_step, a real run's state;
  sgd   plain SGD at --sgd_lr, no momentum (diagnostics.one_update, float64).
Delta = log pi_new - log pi_old per completion token; tokens labelled by
diagnostics.token_categories (chain's own labels: template, copy, compute, style).

Measure: each category's share of the update mass sum |Delta| (scale-free, so
the two losses' step sizes do not matter) and mean |Delta| per token, pooled
over the batches of a seed; paired by seed (same state, same rollouts).

Primary contrast (fixed before any chain result): at step --rl_step, the share
of the update mass on template + style tokens under grpo minus under
positive_only, same rollout batches, paired by seed, for adam and for sgd
separately; predicted < 0 ([P2]: mass moves away from template and formatting
tokens). Secondary: each category's share on its own (template and style
predicted < 0, compute > 0, copy "about 0": P2 names no direction for it), and
the primary at step 0.

    python -m lab.experiments.e4_categories --quick      # one seed, out/partial/
    python -m lab.experiments.e4_categories              # seeds 0-9, results/
    python -m lab.experiments.e4_categories --replot     # redraw the figure from the JSON
"""
import copy
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e4_categories\n")
    sys.exit(2)
from lab.experiments import common
import torch

from lab import probes
from lab import estimators, objectives

EXTRA = dict(
    common.DIAG_FLAGS,
    batches=(2, "rollout batches per seed and state"),
    adam_lr=(1e-4, "AdamW lr of the RL run and of its measured step (train.py's)"),
    sgd_lr=(1e-3, "plain SGD lr"),
    rl_step=(100, "GRPO RL steps before the second measured state"),
)
LOSSES = ("grpo", "positive_only")
OPTS = ("adam", "sgd")
CATS = list(probes.CATEGORIES)
GROUPS = {"template+style": ("template", "style"), **{c: (c,) for c in CATS}}
COLORS = {"template": "0.6", "style": "tab:purple", "copy": "tab:blue", "compute": "tab:orange"}


def one_seed(item):
    """{"seed", "at": {step: {"tokens": {cat: n}, "<loss>_<opt>": {cat: {share, mean_abs}}}}}."""
    opts, seed = item
    paths = common.rl_states(opts, seed, [0, opts["rl_step"]], lr=opts["adam_lr"])
    _, task, draw, gen = common.diag_setup(opts, seed)
    rec = {"seed": seed, "at": {}}
    for step, path in paths.items():
        model, opt = common.load_state(opts, seed, path, lr=opts["adam_lr"])
        m64 = copy.deepcopy(model).double()
        mass = {(l, o): torch.zeros(len(CATS), dtype=torch.float64) for l in LOSSES for o in OPTS}
        count = torch.zeros(len(CATS), dtype=torch.float64)
        for _ in range(opts["batches"]):
            b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
            m = b.mask
            cats = probes.token_categories(task, b.problems, b.tokens, m)[m]
            count += torch.bincount(cats, minlength=len(CATS)).double()
            for l in LOSSES:
                adv = estimators.advantages(b.rewards, b.group, objectives.own_estimator(l))
                new = {"adam": common.real_step(m64, opt, b, adv.double(), l)[0],
                       "sgd": probes.one_update(m64, b, adv, "sgd", opts["sgd_lr"], objective=l)}
                for o in OPTS:
                    d = probes.token_deltas(m64, new[o], b)[m]
                    mass[l, o].index_add_(0, cats, d.abs())
        at = {"tokens": dict(zip(CATS, count.tolist()))}
        for (l, o), ms in mass.items():
            tot = float(ms.sum())
            at[f"{l}_{o}"] = {c: {"share": float(ms[k]) / tot if tot > 0 else None,
                                  "mean_abs": float(ms[k] / count[k]) if count[k] > 0 else None}
                              for k, c in enumerate(CATS)}
        rec["at"][str(step)] = at
    return rec


def share(rec, step, run, group):
    """Share of the update mass on a group of categories (None if undefined)."""
    xs = [rec["at"][str(step)][run][c]["share"] for c in GROUPS[group]]
    return None if any(x is None for x in xs) else sum(xs)


def plot(plt, data):
    """Left: stacked shares of the update mass at step --rl_step. Right: the paired
    differences grpo - positive_only of each share, per optimizer and state."""
    cfg, s, n = data["config"], data["summary"], len(data["per_seed"])
    S = str(cfg["rl_step"])
    runs = [f"{l}_{o}" for o in OPTS for l in LOSSES]
    pretty = lambda r: r.replace("positive_only", "positive-only").replace("grpo", "GRPO").replace(
        "_adam", "\nAdamW").replace("_sgd", "\nSGD")
    fig, ax = plt.subplots(1, 2, figsize=(13, 4.6), layout="tight")
    fig.suptitle(
        "E4: where GRPO and positive-only training put their update, by token category (chain)",
        fontsize=11,
    )
    bottom = [0.0] * (len(runs) + 1)
    tok = [s["at"][S]["tokens"][c][0] or 0 for c in CATS]
    for c, t in zip(CATS, tok):
        v = [s["at"][S][r][c]["share"][0] or 0 for r in runs] + [t / (sum(tok) or 1)]
        ax[0].bar(range(len(runs) + 1), v, bottom=bottom, color=COLORS[c], label=c,
                  hatch=[""] * len(runs) + ["//"], edgecolor="w")
        bottom = [x + y for x, y in zip(bottom, v)]
    ax[0].set_xticks(
        range(len(runs) + 1), [pretty(r) for r in runs] + ["share of\ntokens"], fontsize=8
    )
    ax[0].set_ylabel("share of update mass Σ|Δ| (nats / nats)")
    ax[0].set_ylim(0, 1.18)
    ax[0].legend(fontsize=8, ncol=4, loc="upper center")
    ax[0].set_title(
        f"Update mass by token category after {S} GRPO steps (mean over seeds)", fontsize=10
    )
    arms = [
        ("adam", S, "AdamW, step " + S),
        ("sgd", S, "SGD, step " + S),
        ("adam", "0", "AdamW, step 0 (fresh)"),
        ("sgd", "0", "SGD, step 0"),
    ]
    w = 0.8 / len(arms)
    for i, (o, st, label) in enumerate(arms):
        v = [s["gap"][st][o][g] for g in GROUPS]
        ax[1].bar([k + (i - 1.5) * w for k in range(len(GROUPS))], [x[0] or 0 for x in v], w,
                  yerr=common.errbars(v), capsize=2 if n > 1 else 0, label=label)
    ax[1].axhline(0, color="k", lw=0.8)
    ax[1].set_xticks(range(len(GROUPS)), [g.replace("+", "\n+") for g in GROUPS], fontsize=8)
    ax[1].set_ylabel("share under GRPO − share under positive-only")
    ax[1].set_title("Paired difference of the shares (same state, same rollouts)", fontsize=10)
    ax[1].legend(fontsize=7, loc="upper left", ncol=2)
    common.caption(
        fig,
        f"Δ = log π_new − log π_old of each completion token of the chain task after one update "
        f"(GRPO or positive-only) on the same rollouts, from the state of a GRPO RL run at step 0 "
        f"or {S}: AdamW (lr {cfg['adam_lr']:g}) carrying the run's moments (at step 0 a fresh "
        f"optimizer, whose first step is near sign descent), or plain SGD (lr {cfg['sgd_lr']:g}). "
        "Left: each category's share of Σ|Δ|; hatched: the categories' share of the tokens. Right: "
        "GRPO minus positive-only, per seed, then averaged; P2 predicts < 0 for template+style. "
        + common.ci_note(n),
    )
    return fig


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    opts = common.parse(
        argv, EXTRA, __doc__, redraw=("e4_categories", plot)
    )  # --replot: redraw, exit
    per_seed, seeds, t0 = common.over_seeds(one_seed, opts)
    wall = time.time() - t0
    seeds, steps = [r["seed"] for r in per_seed], ["0", str(opts["rl_step"])]
    runs = [f"{l}_{o}" for o in OPTS for l in LOSSES]
    summary = {
        "at": {
            st: {
                **{
                    r: {
                        c: {
                            k: common.ci([p["at"][st][r][c][k] for p in per_seed])
                            for k in ("share", "mean_abs")
                        }
                        for c in CATS
                    }
                    for r in runs
                },
                "tokens": {
                    c: common.ci([p["at"][st]["tokens"][c] for p in per_seed]) for c in CATS
                },
            }
            for st in steps
        },
        "gap": {
            st: {
                o: {
                    g: common.ci(
                        [
                            (
                                None
                                if share(p, st, f"grpo_{o}", g) is None
                                or share(p, st, f"positive_only_{o}", g) is None
                                else share(p, st, f"grpo_{o}", g)
                                - share(p, st, f"positive_only_{o}", g)
                            )
                            for p in per_seed
                        ]
                    )
                    for g in GROUPS
                }
                for o in OPTS
            }
            for st in steps
        },
    }
    arm = lambda st, l, o, g: [share(p, st, f"{l}_{o}", g) for p in per_seed]
    pair = lambda st, o, g, pred: common.contrast(
        arm(st, "grpo", o, g), arm(st, "positive_only", o, g), pred, seeds
    )
    S = steps[1]
    primary = {
        f"{o}, step {S}: template+style share grpo - positive_only": pair(
            S, o, "template+style", "< 0"
        )
        for o in OPTS
    }
    predicted = {"template": "< 0", "style": "< 0", "copy": "about 0", "compute": "> 0"}
    secondary = {f"{o}, step {S}: {c} share grpo - positive_only": pair(S, o, c, predicted[c])
                 for o in OPTS for c in CATS}
    secondary.update(
        {
            f"{o}, step 0: template+style share grpo - positive_only": pair(
                "0", o, "template+style", "< 0"
            )
            for o in OPTS
        }
    )
    data = {
        "experiment": "e4_categories",
        "config": opts,
        "categories": CATS,
        "groups": list(GROUPS),
        "per_seed": per_seed,
        "summary": summary,
        "primary": primary,
        "secondary": secondary,
        "wall_s": round(wall, 1),
        "rate": common.rate("e4_categories", len(per_seed), wall, opts["jobs"], "seeds"),
    }
    data = common.clean(data)
    common.save("e4_categories", data, opts["out"], lambda plt: plot(plt, data))
    for st in steps:
        print(
            f"state after {st} GRPO steps"
            + (
                " (AdamW fresh: its first step is near sign descent)"
                if st == "0"
                else " (AdamW carrying the run's moments)"
            )
            + ":"
        )
        rows = [[r, *(common.fmt(summary["at"][st][r][c]["share"]) for c in CATS)] for r in runs]
        rows.append(
            ["(token counts)", *(common.fmt(summary["at"][st]["tokens"][c], 0) for c in CATS)]
        )
        common.table(rows, ["update", *(f"{c} share" for c in CATS)])
    common.print_contrasts(primary)
    common.print_contrasts(secondary, "secondary")
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e4_categories.json")
    return data


if __name__ == "__main__":
    common.cli(main)
