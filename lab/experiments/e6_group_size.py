"""E6: does the value gap grow with the sampling budget (batch size B, group size G)?

Source claim [P2, arXiv 2605.08666, Figure 6]: "Cancellation strengthens with
the sampling budget. The value gap (10^-3) grows as batch size increases from
16 to 96 (a) and rollout-n from 1 to 8 (b), with the effect most pronounced
for higher-value token subsets. Larger sampling budget strengthens
cancellation. Cancellation relies on the co-occurrence of positive and
negative rollouts within each update."

Measure: [P2]'s own quantity, E5's value gap: mean value of the tokens one
update boosts (Delta log pi > --eps) minus mean value of those it suppresses
(Delta < -eps), over the tokens of A != 0 rollouts (diagnostics.value_gap),
overall and split by value quantile: the valued tokens of a setting are cut
into --quantiles equal-count bins of V (diagnostics.value_bins, ties in random
order) and the gap is taken inside each bin. The gap in A > 0 and in A < 0
rollouts is kept as an extra. (An earlier version measured a ratio of |Delta|
over shared and positive-specific tokens, a quantity of this project's own
whose rise with G was built in; it is retired.)

Method (task chain). Per seed, train.py's GRPO RL runs --rl_step steps from
the SFT warm start with B = --prompts and G = --group_size (common.rl_states,
the same states as E5). From that state, for every setting, G in
--group_sizes at B = --prompts, then B in --prompt_counts at G =
--group_size, ceil(--rollouts / (B G)) rollout batches are drawn (one at the
large settings) and each takes one update as train.py takes it: the run's
AdamW moments, whole batch, grad clip 1.0 (common.real_step, float64). Token
value V(s_{t+1}) = mean reward of --K continuations sampled from the prefix
ending in the token (diagnostics.token_values); to keep the cost fixed, --tokens
tokens per setting are drawn uniformly at random among its boosted and
suppressed tokens of A != 0 rollouts, and only those are valued. A larger B
here means a larger batch in one step from a state trained at B = --prompts,
not a run trained at that B: that is the scale this testbed allows.

Primary contrast (fixed before any result): the value gap at the largest
minus at the smallest G (at B = --prompts), and separately at the largest
minus the smallest B (at G = --group_size), paired by seed; [P2] predicts
> 0 for both. Secondary: the same for the gap inside the top value quantile
("most pronounced for higher-value token subsets"), predicted > 0.

    python -m lab.experiments.e6_group_size --quick      # one seed, out/partial/
    python -m lab.experiments.e6_group_size              # seeds 0-9, results/
    python -m lab.experiments.e6_group_size --replot     # redraw the PNG from the JSON
"""
import copy
import math
import sys
import time

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.e6_group_size\n")
    sys.exit(2)
from lab.experiments import common
import torch

from lab import probes
from lab import estimators

EXTRA = dict(
    common.DIAG_FLAGS,
    group_sizes=("2,4,8,16", "G values (at B = --prompts)"),
    prompt_counts=("16,32,64,96", "B values (at G = --group_size)"),
    rollouts=(256, "rollouts per setting and seed (at least one batch)"),
    K=(8, "Monte Carlo continuations per valued prefix"),
    tokens=(192, "valued tokens per setting and seed"),
    quantiles=(3, "value quantile bins"),
    eps=(1e-4, "flip threshold on |Delta| (nats)"),
    rl_step=(20, "GRPO RL steps (at B = --prompts, G = --group_size) before the measured state"),
)


def setting(model, opt, task, draw, gen, B, G, opts):
    """Value gap of one setting: its batches, one real AdamW step each, values of a
    random subset of its moved tokens."""
    batches, deltas, moved, rewards = [], [], [], []
    for _ in range(math.ceil(opts["rollouts"] / (B * G))):
        b = common.rollout_batch(model, task, draw, B, G, gen)
        adv = estimators.advantages(b.rewards, b.group, "grpo")
        m64 = copy.deepcopy(model).double()
        new = common.real_step(m64, opt, b, adv, "grpo")[0]
        with torch.no_grad():
            d = (probes.logp_of(new, b) - probes.logp_of(m64, b)) * b.mask
        batches.append((b, adv))
        deltas.append(d)
        moved.append(b.mask & (adv != 0)[:, None] & (d.abs() > opts["eps"]))
        rewards.append(float(b.rewards.float().mean()))
    # one draw over the setting's moved tokens, rows offset per batch
    offsets = [0]
    for mv in moved:
        offsets.append(offsets[-1] + mv.shape[0])
    T = max(mv.shape[1] for mv in moved)
    cand = torch.cat([torch.nn.functional.pad(mv, (0, T - mv.shape[1])) for mv in moved])
    pick = probes.pick_tokens(cand, opts["tokens"], gen)
    v, d, sign = [], [], []
    for k, ((b, adv), dk) in enumerate(zip(batches, deltas)):
        rows_t = pick[(pick[:, 0] >= offsets[k]) & (pick[:, 0] < offsets[k + 1])]
        rows_t = rows_t - torch.tensor([offsets[k], 0])
        if len(rows_t):
            v.append(probes.token_values(model, task, b, rows_t, opts["K"], gen).double())
            d.append(dk[rows_t[:, 0], rows_t[:, 1]])
            sign.append(torch.sign(adv[rows_t[:, 0]]))
    v, d, sign = (torch.cat(x) if x else torch.zeros(0) for x in (v, d, sign))
    bins = probes.value_bins(v, opts["quantiles"], gen)
    out = {
        "B": B,
        "G": G,
        "batches": len(batches),
        "reward": sum(rewards) / len(rewards),
        "n_valued": len(v),
        **probes.value_gap(v, d, opts["eps"]),
        "gap_pos": probes.value_gap(v[sign > 0], d[sign > 0], opts["eps"])["gap"],
        "gap_neg": probes.value_gap(v[sign < 0], d[sign < 0], opts["eps"])["gap"],
        "gap_bins": [
            probes.value_gap(v[bins == q], d[bins == q], opts["eps"])["gap"]
            for q in range(opts["quantiles"])
        ],
        "v_bins": [
            float(v[bins == q].mean()) if bool((bins == q).any()) else None
            for q in range(opts["quantiles"])
        ],
    }
    return out


def one_seed(item):
    """Every setting of both sweeps for one seed (the shared setting measured once)."""
    opts, seed = item
    step = opts["rl_step"]
    model, opt, task, draw, gen = common.state_at(opts, seed, step)
    cache, rec = {}, {"seed": seed}
    for name, pts in sweeps(opts).items():
        rec[name] = []
        for B, G in pts:
            if (B, G) not in cache:
                cache[B, G] = setting(model, opt, task, draw, gen, B, G, opts)
            rec[name].append(cache[B, G])
    return rec


def sweeps(opts):
    return {"G": [(opts["prompts"], G) for G in opts["group_sizes"]],
            "B": [(B, opts["group_size"]) for B in opts["prompt_counts"]]}


def nan(x):
    return float("nan") if x is None else x


def plot(plt, data):
    """Value gap against G and against B, overall and per value quantile (missing: not drawn).

    Long because: it draws one figure panel by panel; split, one figure's layout would be
    scattered over several functions."""
    summary, cfg, n = data["summary"], data["config"], len(data["per_seed"])
    fig, ax = plt.subplots(
        1, 3, figsize=(15, 4.6), layout="tight", gridspec_kw={"width_ratios": [2, 2, 1.2]}
    )
    ax[1].sharey(ax[0])
    Q = cfg["quantiles"]
    cmap = plt.get_cmap("viridis")
    for i, (name, fixed) in enumerate(
        (("G", f"B = {cfg['prompts']}"), ("B", f"G = {cfg['group_size']}"))
    ):
        pts = summary[name]
        xs = [p[name] for p in pts]
        for q in range(Q):
            ys = [p["gap_bins"][q] for p in pts]
            ax[i].errorbar(
                [x * (1 + 0.03 * (q - Q / 2)) for x in xs],
                [nan(y[0]) for y in ys],
                common.errbars(ys),
                marker="s",
                ms=4,
                lw=1,
                capsize=2,
                color=cmap(q / max(Q - 1, 1) * 0.85),
                label=f"value quantile {q + 1} of {Q}" + (" (highest)" if q == Q - 1 else ""),
            )
        ax[i].errorbar(
            xs,
            [nan(p["gap"][0]) for p in pts],
            common.errbars([p["gap"] for p in pts]),
            marker="o",
            color="k",
            lw=2,
            capsize=3,
            label="all tokens of A ≠ 0 rollouts",
        )
        ax[i].axhline(0, color="gray", lw=0.8, ls="--")
        ax[i].set_xscale("log", base=2)
        ax[i].set_xticks(xs, [str(x) for x in xs])
        ax[i].minorticks_off()
        ax[i].set_xlabel("G (completions per prompt)" if name == "G" else "B (prompts per batch)")
        ax[i].set_title(f"vary {name}, {fixed}", fontsize=10)
    ax[0].set_ylabel(
        "value gap: mean V(boosted) − mean V(suppressed)\n(difference in P(correct))"
    )
    lo, hi = ax[0].get_ylim()
    ax[0].set_ylim(lo, hi + 0.35 * (hi - lo))  # room for the legend above the data
    ax[0].legend(fontsize=7, loc="upper left", ncol=2)
    common.contrast_panel(ax[2], data["primary"], "difference in value gap (P(correct))")
    fig.suptitle("E6: value gap of one GRPO update against the sampling budget", fontsize=11)
    common.caption(
        fig,
        f"One train.py AdamW step (the run's moments) after {cfg['rl_step']} GRPO steps, on "
        f"ceil({cfg['rollouts']} / (B G)) rollout batches per setting (task {cfg['task']}). V = "
        "mean "
        f"reward of K = {cfg['K']} continuations from the prefix ending in the token, on up to "
        f"{cfg['tokens']} random boosted or suppressed tokens per setting; boosted Δ log π > "
        f"{cfg['eps']:g}, suppressed < -{cfg['eps']:g}. Quantile bins: the valued tokens cut into "
        f"{Q} equal-count bins of V; the gap is taken inside each bin. Points of the bins are "
        "shifted sideways a little. Right: the primary contrasts, the value gap at the largest G "
        "(B) minus at "
        "the smallest, per seed (dots) and their mean with a 95 % Student-t interval. "
        + common.ci_note(n),
    )
    return fig


def main(argv):
    opts = common.parse(
        argv, EXTRA, __doc__, redraw=("e6_group_size", plot)
    )  # --replot: redraw, exit
    per_seed, seeds, t0 = common.over_seeds(one_seed, opts)
    Q = opts["quantiles"]
    col = lambda name, i, k, q=None: [
        r[name][i][k] if q is None else r[name][i][k][q] for r in per_seed
    ]
    summary = {
        name: [
            {
                "B": B,
                "G": G,
                **{k: common.ci(col(name, i, k)) for k in ("gap", "gap_pos", "gap_neg")},
                "gap_bins": [common.ci(col(name, i, "gap_bins", q)) for q in range(Q)],
                "v_bins": [common.ci(col(name, i, "v_bins", q)) for q in range(Q)],
            }
            for i, (B, G) in enumerate(pts)
        ]
        for name, pts in sweeps(opts).items()
    }
    data = {"experiment": "e6_group_size", "config": opts, "per_seed": per_seed, "summary": summary}
    ends = {name: (pts[-1][name == "G"], pts[0][name == "G"]) for name, pts in sweeps(opts).items()}
    data["primary"] = {f"value gap at {name} = {hi} - at {name} = {lo}": common.contrast(
        col(name, -1, "gap"), col(name, 0, "gap"), "> 0", seeds) for name, (hi, lo) in ends.items()}
    data["secondary"] = {
        f"top value quantile: value gap at {name} = {hi} - at {name} = {lo}": common.contrast(
            col(name, -1, "gap_bins", Q - 1), col(name, 0, "gap_bins", Q - 1), "> 0", seeds
        )
        for name, (hi, lo) in ends.items()
    }
    data["wall_s"] = round(time.time() - t0, 1)
    data["rate"] = common.rate(
        "e6_group_size", len(per_seed), data["wall_s"], min(opts["jobs"], len(per_seed)), "seeds"
    )
    data = common.clean(data)
    common.save("e6_group_size", data, opts["out"], lambda plt: plot(plt, data))
    rows = [
        [
            name,
            p["B"],
            p["G"],
            common.fmt(p["gap"]),
            common.fmt(p["gap_pos"]),
            common.fmt(p["gap_neg"]),
            " ".join(common.fmt(x) for x in p["gap_bins"]),
        ]
        for name in summary
        for p in summary[name]
    ]
    common.table(
        rows, ["sweep", "B", "G", "value gap", "A>0", "A<0", f"by value quantile (1..{Q})"]
    )
    common.report("e6_group_size", data, opts["out"])
    return data


if __name__ == "__main__":
    common.cli(main)
