"""E2: along a real RL run, does the unembedding-only update predict the full one,
and where does the coupling mass sit?

Source claims [P2, arXiv 2605.08666]:
* Figure 10: "The proportion of tokens where the token displacement
  (Delta log p) shares the same sign under both update paradigms [full
  parameters and the unembedding layer only]. The consistency remains highly
  stable across training steps, plateauing near 0.7, providing empirical
  support for the output-layer proxy adopted in Section 3."
* Abstract: "these token coupling effects occur primarily between identical
  tokens that are both predicted with low confidence".

Method: the states of train.py's GRPO runs on ``--task=chain`` kept by
common.rl_states after ``--steps`` RL steps (model and AdamW moments; the
same states as E1). At each state, ``--batches`` fresh rollout batches of B =
``--prompts`` x G (B = 8 here so that the M x M coupling matrix of the
closed form stays small); on each, in float64:
(a) the next update as training takes it (common.real_step: carried AdamW,
    grad clip), on all parameters and on ``lm_head.weight`` only (AdamW skips
    parameters without a gradient, moments and all);
(b) one plain-SGD step (lr ``--sgd_lr``, first order) on all parameters and
    on ``lm_head.weight`` only, and its closed form with the hidden states h
    fixed, Delta_i = eta sum_j c_j alpha_ij kappa_ij (diagnostics.coupling_terms).

Measures: sign agreement of Delta between full and head-only updates, over
A != 0 tokens ("live") and all tokens, plain and |Delta_full|-weighted (a
token that moves by 1e-8 counts for little); coupling mass of the closed form
sum_{i != j} |eta c_j alpha_ij kappa_ij| by row of the moved token i (its
confidence p(y_i) in [0,.5), [.5,.9), [.9,1], and the chain's style tokens as
their own row) x same / different partner token, against the share of pairs
in the same cell (diagnostics.coupling_by_row); the 3 x 3 confidence grid
of same-token pairs (diagnostics.coupling_summary).

Primary contrast (fixed before any result): sign agreement full vs head-only
over A != 0 tokens, carried AdamW step, at RL step 100, minus [P2]'s 0.7, a
one-sample t interval over seeds; predicted about 0. Verdict rule fixed with
it: *agree* if the interval lies inside +-0.10, *contradict* if wholly outside,
else *inconclusive*. Secondary: the same at the other steps, |Delta|-weighted,
and for plain SGD; the coupling-mass share of same-token pairs whose tokens
both have p < 0.5 minus the share of such pairs, paired by seed, predicted > 0
([P2]: coupling sits "primarily" there).

    python -m lab.experiments.e2_coupling --quick   # one seed, steps 0 and 20 (out/partial/)
    python -m lab.experiments.e2_coupling              # seeds 0-9 (results/)
    python -m lab.experiments.e2_coupling --replot  # redraw results/e2_coupling.png from its JSON
"""
import copy
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e2_coupling\n")
    sys.exit(2)
from lab.experiments import common
import torch

from lab import probes
from lab.experiments.e1_flips import nan
from lab import estimators

EXTRA = dict(
    common.DIAG_FLAGS,
    **common.KEPT_STATE_FLAGS,
    prompts=(8, "B: prompts per batch"),
    sgd_lr=(1e-3, "plain SGD lr (also the closed form's eta)"),
    margin=(0.10, "verdict margin around 0.7"),
)
ROWS = ["p<.5", ".5≤p<.9", "p≥.9", "style"]
BINS = (0.5, 0.9)
AGREE = {"adam": "carried AdamW step", "sgd": "plain SGD step"}


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def one_state(opts, seed, step, path, task, draw):
    """The measurements at one kept state, averaged over its batches."""
    model, opt = common.load_state(opts, seed, path)
    m64 = copy.deepcopy(model).double()
    gen = torch.Generator().manual_seed(10_000 * seed + step + 2)
    recs = []
    for _ in range(opts["batches"]):
        b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
        b.max_len = task.max_new_tokens
        adv = estimators.advantages(b.rewards, b.group, "grpo")
        m = b.mask
        a_tok = adv[:, None].expand_as(m)[m]
        live = a_tok != 0
        coef = probes.token_coefficients(m64, b, adv)
        ct = probes.coupling_terms(m64, b, coef, opts["sgd_lr"])
        delta = lambda new: probes.token_deltas(m64, new, b)[m]
        full = {"adam": delta(common.real_step(m64, opt, b, adv)[0]),
                "sgd": delta(probes.one_update(m64, b, adv, "sgd", opts["sgd_lr"], coef=coef))}
        head = {
            "adam": delta(common.real_step(m64, opt, b, adv, params="head")[0]),
            "sgd": delta(
                probes.one_update(m64, b, adv, "sgd", opts["sgd_lr"], coef=coef, params="head")
            ),
        }
        rec = {
            "mixed": float(live.any()),
            "live_tokens": int(live.sum()),  # the closed form checks the head step
            "head_vs_closed_form": (
                probes.sign_agreement(head["sgd"], ct["pred"], live) if bool(live.any()) else None
            ),
        }
        for k in AGREE:
            for sel_name, sel in (("live", live), ("all", torch.ones_like(live))):
                ok = bool(sel.any())
                rec[f"{k}_{sel_name}"] = (
                    probes.sign_agreement(full[k], head[k], sel) if ok else None
                )
                rec[f"{k}_{sel_name}_w"] = (
                    probes.sign_agreement(full[k], head[k], sel, weighted=True) if ok else None
                )
        cats = probes.token_categories(task, b.problems, b.tokens, m)[m]
        rows = torch.bucketize(ct["conf"], torch.tensor(BINS, dtype=ct["conf"].dtype), right=True)
        rows = torch.where(cats == probes.CATEGORIES.index("style"), len(BINS) + 1, rows)
        rec.update(probes.coupling_by_row(ct["terms"], ct["y"], rows, len(ROWS)))
        summ = probes.coupling_summary(ct, a_tok, BINS)
        rec["mass_same_total"], rec["pairs_same_total"] = summ["mass_same"], summ["pairs_same"]
        low = ct["conf"] < BINS[0]
        both_low = (ct["y"][:, None] == ct["y"][None, :]) & low[:, None] & low[None, :]
        both_low &= ~torch.eye(len(low), dtype=torch.bool)
        mass = ct["terms"].abs() * ~torch.eye(len(low), dtype=torch.bool)
        rec["mass_same_low"] = float((mass * both_low).sum() / mass.sum())
        rec["pairs_same_low"] = float(both_low.sum()) / max(len(low) * (len(low) - 1), 1)
        recs.append(rec)
    out = {}
    for k in recs[0]:
        if isinstance(recs[0][k], list):
            out[k] = [mean([r[k][i] for r in recs]) for i in range(len(recs[0][k]))]
        else:
            out[k] = mean([r[k] for r in recs])
    return out


def one_seed(item):
    """Every state of one seed (a worker process of common.pool)."""
    opts, seed = item
    paths = common.rl_states(opts, seed, opts["steps"])
    _, task, draw, _ = common.diag_setup(opts, seed)
    return {
        "seed": seed,
        "steps": {str(s): one_state(opts, seed, s, paths[s], task, draw) for s in opts["steps"]},
    }


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    opts = common.parse(
        argv, EXTRA, __doc__, redraw=("e2_coupling", plot)
    )  # --replot: redraw, exit
    common.kept_steps(opts, argv)
    per_seed, seeds, t0 = common.over_seeds(one_seed, opts)
    col = lambda s, k: [r["steps"][str(s)][k] for r in per_seed]
    summary = {}
    for s in opts["steps"]:
        first = per_seed[0]["steps"][str(s)]
        summary[str(s)] = {k: (common.ci(col(s, k)) if not isinstance(v, list) else
                               [common.ci([x[i] for x in col(s, k)]) for i in range(len(v))])
                           for k, v in first.items()}
    ps = opts["primary_step"]
    primary = {f"adam step {ps}: sign agreement full vs head (A!=0) - 0.7":
               common.contrast(col(ps, "adam_live"), 0.7, "about 0", seeds)}
    secondary = {}
    for s in opts["steps"]:
        for k in AGREE:
            for suffix in ("live", "live_w", "all_w"):
                name = f"{k} step {s}: sign agreement full vs head ({suffix}) - 0.7"
                if not (k == "adam" and s == ps and suffix == "live"):
                    secondary[name] = common.contrast(
                        col(s, f"{k}_{suffix}"), 0.7, "about 0", seeds
                    )
        secondary[f"step {s}: coupling mass share - pair share, same token, both p<0.5"] = (
            common.contrast(col(s, "mass_same_low"), col(s, "pairs_same_low"), "> 0", seeds)
        )
    seconds = time.time() - t0
    data = {
        "experiment": "e2_coupling",
        "config": opts,
        "rows": ROWS,
        "seeds": seeds,
        "per_seed": per_seed,
        "summary": summary,
        "primary": primary,
        "secondary": secondary,
        "verdict": {k: common.verdict(c, opts["margin"]) for k, c in primary.items()},
        "wall_s": round(seconds, 1),
        "rate": common.rate("e2_coupling", len(seeds), seconds, opts["jobs"], "seeds"),
    }
    data = common.clean(data)
    common.save("e2_coupling", data, opts["out"], lambda plt: plot(plt, data))
    for s in opts["steps"]:
        sm = summary[str(s)]
        print(
            f"RL step {s}: head-only SGD step vs its closed form "
            f"{common.fmt(sm['head_vs_closed_form'])};  "
            + "  ".join(
                f"{k} live {common.fmt(sm[f'{k}_live'])} (|Δ|-weighted "
                f"{common.fmt(sm[f'{k}_live_w'])})"
                for k in AGREE
            )
        )
        print(
            "  coupling mass share (same / different partner) against pair share, by row of the "
            "moved token:"
        )
        for i, r in enumerate(ROWS):
            print(
                f"    {r:9s} same {common.fmt(sm['mass_same'][i])} (pairs "
                f"{common.fmt(sm['pairs_same'][i])})  "
                f"diff {common.fmt(sm['mass_diff'][i])} (pairs {common.fmt(sm['pairs_diff'][i])})"
            )
    common.print_contrasts(primary)
    print("verdict:", *data["verdict"].values())
    common.print_contrasts(secondary, "secondary")
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e2_coupling.json")
    return data


def plot(plt, data):
    """Sign agreement over RL steps; coupling mass against pair share by row.

    Long because: it draws one figure panel by panel; split, one figure's layout would be
    scattered over several functions."""
    steps, sm, n = data["config"]["steps"], data["summary"], len(data["per_seed"])
    margin, ps = data["config"]["margin"], data["config"]["primary_step"]
    fig, ax = plt.subplots(
        1, 2, figsize=(15, 4.6), gridspec_kw={"width_ratios": [1, 1.3]}, layout="constrained"
    )
    fig.suptitle(
        "E2: unembedding-only against full-parameter updates, and where the coupling mass sits "
        "(chain, GRPO runs)",
        fontsize=11,
    )
    w = 0.018 * max(steps + [1])
    for j, (k, c) in enumerate((("adam", "k"), ("sgd", "tab:blue"))):
        for suffix, ls, mk in (("live", "-", "o"), ("live_w", "--", "s")):
            v = [sm[str(s)][f"{k}_{suffix}"] for s in steps]
            ax[0].errorbar(
                [s + (j - 0.5) * w for s in steps],
                [nan(x[0]) for x in v],
                yerr=common.errbars(v, 0, 1),
                color=c,
                ls=ls,
                marker=mk,
                ms=4,
                capsize=3,
                label=f"{AGREE[k]}{', |Δ|-weighted' if suffix == 'live_w' else ''}",
            )
    ax[0].axhspan(
        0.7 - margin,
        0.7 + margin,
        color="tab:green",
        alpha=0.08,
        label=f"[P2]: about 0.7 (±{margin:g})",
    )
    ax[0].axhline(0.7, color="tab:green", lw=0.8)
    ax[0].axhline(0.5, color="0.5", ls=":", lw=0.8, label="0.5: chance")
    ax[0].set_ylim(0, 1.05)
    ax[0].set_xlabel("RL step of the kept state")
    ax[0].set_ylabel("share of Â≠0 tokens: sign of Δ agrees,\nfull vs head-only update")
    ax[0].set_title(f"Sign agreement (primary: carried AdamW at step {ps})", fontsize=10)
    ax[0].legend(fontsize=7, loc="lower left", ncol=2)
    s = str(ps)
    rows = data["rows"]
    x = list(range(len(rows)))
    for off, kind, c in ((-0.2, "same", "tab:red"), (0.2, "diff", "tab:gray")):
        v = sm[s][f"mass_{kind}"]
        ax[1].bar([i + off for i in x], [y[0] or 0 for y in v], width=0.36, color=c,
                  yerr=common.errbars(v, 0, 1), capsize=3,
                  label=f"coupling mass, {'same' if kind == 'same' else 'different'} partner token")
        pairs = [y[0] or 0 for y in sm[s][f"pairs_{kind}"]]
        ax[1].scatter([i + off for i in x], pairs, marker="_", s=500, color="k", zorder=3,
                      label="share of pairs in the cell" if kind == "same" else None)
    ax[1].set_xticks(x, [f"moved token {r}" for r in rows])
    top = max(max((y[0] or 0) + (y[1] or 0) for y in sm[s][f"mass_{k}"]) for k in ("same", "diff"))
    ax[1].set_ylim(0, min(1.0, 1.25 * top + 0.02))
    ax[1].set_ylabel("share of all coupling mass Σ_{i≠j}|η c_j α_ij κ_ij|")
    ax[1].set_title(
        f"Coupling mass by the moved token's confidence p(y_i) (RL step {ps})", fontsize=10
    )
    ax[1].legend(fontsize=8, loc="upper right")
    common.caption(
        fig,
        "Left: share of tokens of Â≠0 rollouts whose Δ = log π_new − log π_old has the same sign "
        "after a full-parameter and an unembedding-only update, at states kept along GRPO runs "
        "(step 0: the warm start, fresh optimizer). Solid: plain share; dashed: weighted by "
        "|Δ_full|. Black: the run's AdamW step with its moments; blue: one plain-SGD step. Right: "
        "coupling mass "
        "of the closed form by the row of the moved token (style: the chain's unchecked "
        "choices), bars for same and different partner tokens, black ticks for the share of "
        "(i, j) pairs in the same cell: a bar above its tick is coupling stronger than the count "
        "of pairs. Mean over seeds. " + common.ci_note(n, "0 and 1"),
    )
    return fig


if __name__ == "__main__":
    common.cli(main)
