"""E5: do boosted tokens have higher value than suppressed ones, in both signs?

Source claim [P2, arXiv 2605.08666]: within positive rollouts *and* within
negative rollouts, the tokens an update boosts have a higher value (expected
final reward after emitting them) than the tokens it suppresses: the flips of
E1 are not noise, they move credit towards good tokens.

Method: from the SFT warm start (2-digit addition), --batches rollout batches
per seed. Token value by Monte Carlo (diagnostics.mc_values): V(s) = mean
reward of --K continuations sampled at temperature 1 from the prefix s; a
token's value is V(s_{t+1}), the prefix ending in it (at the end of a
completion, its reward), and its credit V(s_{t+1}) - V(s_t). One GRPO update
with train.py's AdamW (--adam_lr) and with plain SGD (--sgd_lr) gives Delta
per token (float64); boosted: Delta > eps, suppressed: Delta < -eps.

Measure: mean value and mean credit of boosted and of suppressed tokens, in
A > 0 and in A < 0 rollouts, with a 95 % CI over tokens (per seed) and over
seeds (summary), and the gap boosted - suppressed.

Primary contrast (fixed before any result): the value gap, mean value of
boosted minus mean value of suppressed tokens, within A > 0 and within A < 0
rollouts, for AdamW and for SGD; paired by seed (both cells come from the same
update on the same rollouts). [P2]: predicted > 0 in both signs. The next
version of this experiment will replace it with GRPO's gap minus the gap of
controls on the same batches (positive-only, shuffled advantages).

    python experiments/e5_value.py --quick      # one seed
    python experiments/e5_value.py              # seeds 0,1,2
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
             K=(16, "Monte Carlo continuations per prefix"),
             eps=(1e-4, "flip threshold on |Delta| (nats)"), adam_lr=(1e-4, "AdamW lr (train.py's)"),
             sgd_lr=(1e-3, "plain SGD lr"))
OPTS = ("adam", "sgd")
CELLS = [(s, c) for s in ("pos", "neg") for c in ("boosted", "suppressed")]


def plot(plt, data):
    """Mean value and credit of boosted and suppressed tokens, per rollout sign."""
    summary = data["summary"]
    fig, ax = plt.subplots(1, 2, figsize=(13, 4.4))
    for i, n in enumerate(("value", "credit")):
        for j, o in enumerate(OPTS):
            v = [summary[o][f"{s}_{c}"][n] for s, c in CELLS]
            x = [k + 0.4 * j for k in range(len(CELLS))]
            ax[i].bar(x, [e[0] or 0 for e in v], 0.4,
                      yerr=common.errbars(v, 0, 1) if n == "value" else common.errbars(v, -1, 1), capsize=3,
                      label="Adam step" if o == "adam" else "SGD step",
                      color=["tab:green", "tab:green", "tab:red", "tab:red"], alpha=1.0 if j == 0 else 0.45,
                      edgecolor="k")
        ax[i].set_xticks([k + 0.2 for k in range(len(CELLS))],
                         [f"tokens of A{'>' if s == 'pos' else '<'}0\nrollouts, {c}" for s, c in CELLS], fontsize=8)
        ax[i].axhline(0, color="k", lw=0.5)
        if n == "value":
            ax[i].set_ylabel("V(s_{t+1}): P(correct) after the token")
            ax[i].set_ylim(0, 1.05)
            ax[i].set_title("Value of boosted vs suppressed tokens", fontsize=10)
        else:
            ax[i].set_ylabel("credit V(s_{t+1}) − V(s_t) (change in P(correct))")
            ax[i].set_title("Credit of boosted vs suppressed tokens", fontsize=10)
        ax[i].legend(fontsize=8)
    n = len(data["per_seed"])
    cfg = data["config"]
    common.caption(fig, f"V(prefix) is the mean reward of K = {cfg.get('K', '?')} continuations sampled from "
                        "the prefix (Monte Carlo estimate of the probability of a correct answer). A token is "
                        "boosted (suppressed) when one update raised (lowered) its log-probability by more "
                        "than ε. Solid: one AdamW step; light: one plain-SGD step. "
                        + (common.ci_note(n, "0 and 1") if n > 1 else
                           "One seed: error bars are 95 % intervals over tokens."))
    fig.tight_layout()
    return fig


def main(argv):
    opts = common.parse(argv, EXTRA, __doc__)
    if opts["replot"]:
        return common.replot("e5_value", opts["out"], plot)
    t0, eps = time.time(), opts["eps"]
    per_seed = []
    for seed in opts["seeds"]:
        model, task, draw, gen = common.diag_setup(opts, seed)
        m64 = copy.deepcopy(model).double()
        pooled = {o: {"d": [], "a": [], "v": [], "c": []} for o in OPTS}
        for _ in range(opts["batches"]):
            b = common.rollout_batch(model, task, draw, opts["prompts"], opts["group_size"], gen)
            adv = L.advantages(b["rewards"], b["group"], "grpo")
            m = b["mask"]
            V = D.mc_values(model, task, b, b["problems"], opts["K"], gen)
            coef = D.token_coefficients(m64, b, adv)
            for o in OPTS:
                d = D.token_deltas(m64, D.one_update(m64, b, adv, o, opts[f"{o}_lr"], coef=coef), b)
                p = pooled[o]
                p["d"].append(d[m])
                p["a"].append(adv[:, None].expand_as(m)[m])
                p["v"].append(V[:, 1:][m].double())
                p["c"].append((V[:, 1:] - V[:, :-1])[m].double())
        rec = {"seed": seed}
        for o in OPTS:
            d, a, v, c = (torch.cat(pooled[o][k]) for k in "davc")
            rec[o] = {}
            for s, cls in CELLS:
                sel = ((a > 0) if s == "pos" else (a < 0)) & ((d > eps) if cls == "boosted" else (d < -eps))
                cell = {"n": int(sel.sum())}
                for name, x in (("value", v), ("credit", c)):
                    cell[name] = common.ci(x[sel].tolist()) if sel.any() else [None, None]
                rec[o][f"{s}_{cls}"] = cell
        per_seed.append(rec)
    summary = {}
    for o in OPTS:
        summary[o] = {}
        for s, cls in CELLS:
            k = f"{s}_{cls}"
            summary[o][k] = {n: common.ci([r[o][k][n][0] for r in per_seed]) if len(per_seed) > 1
                             else per_seed[0][o][k][n] for n in ("value", "credit")}
            summary[o][k]["n"] = sum(r[o][k]["n"] for r in per_seed)
        for s in ("pos", "neg"):
            for n in ("value", "credit"):
                gaps = [None if r[o][f"{s}_boosted"][n][0] is None or r[o][f"{s}_suppressed"][n][0] is None
                        else r[o][f"{s}_boosted"][n][0] - r[o][f"{s}_suppressed"][n][0] for r in per_seed]
                summary[o][f"{s}_{n}_gap"] = common.ci(gaps)
    summary["ci_over"] = "seeds" if len(per_seed) > 1 else "tokens (one seed)"
    data = {"experiment": "e5_value", "config": opts, "per_seed": per_seed, "summary": summary,
            "wall_s": round(time.time() - t0, 1)}
    data["primary"] = {f"{o}: value gap boosted - suppressed, A{'>' if s == 'pos' else '<'}0": common.contrast(
        [r[o][f"{s}_boosted"]["value"][0] for r in per_seed], [r[o][f"{s}_suppressed"]["value"][0] for r in per_seed],
        "> 0", [r["seed"] for r in per_seed]) for o in OPTS for s in ("pos", "neg")}
    data = common.clean(data)
    common.save("e5_value", data, opts["out"], lambda plt: plot(plt, data))
    rows = [[o, f"{s}_{c}", summary[o][f"{s}_{c}"]["n"], common.fmt(summary[o][f"{s}_{c}"]["value"]),
             common.fmt(summary[o][f"{s}_{c}"]["credit"])] for o in OPTS for s, c in CELLS]
    common.table(rows, ["optimizer", "tokens", "n", "value", "credit"])
    print(f"(95 % CI over {summary['ci_over']})")
    for o in OPTS:
        print(f"{o}: value gap boosted-suppressed  A>0 {common.fmt(summary[o]['pos_value_gap'])}  "
              f"A<0 {common.fmt(summary[o]['neg_value_gap'])}")
    common.print_contrasts(data["primary"])
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e5_value.json")
    return data


if __name__ == "__main__":
    common.cli(main)
