"""E6: does cancellation grow with the group size G and with the batch size B?

Source claim [P2, arXiv 2605.08666]: cancellation between positive and
negative rollouts strengthens with the group size and with the batch size.

Measure (the cancellation ratio R). In a group, call a completion token
(i, t) *shared* when its prefix y_{i,<=t} (history and token) also occurs in a
rollout of the opposite advantage sign of the same group, and
*positive-specific* when i has A > 0 and no A < 0 rollout of the group has
that prefix. After one plain-SGD GRPO step (lr --sgd_lr, first order, float64)

    R = mean |Delta| over shared tokens / mean |Delta| over positive-specific tokens.

R << 1: the shared tokens' opposite pushes cancel while the distinguishing
tokens move; R ~ 1: no cancellation. Lower R = stronger cancellation. A
prefix shared by only part of a group gets coefficients that need not sum to
zero, and with a larger G more tokens are shared by part of their group; so
also R_prefix, the same ratio with the numerator restricted to tokens in the
longest common prefix of a mixed group (shared by *every* member, where the
direct gradients cancel exactly when weights are exchangeable). Also
reported: the flipped fraction at eps = 0 (E1) and the gradient residual of
THEORY.md section 4 (diagnostics.cancellation_residual: norm of the gradient
from the tokens of each group's common prefix over the total norm).

Method: from the SFT warm start (2-digit addition), G in --group_sizes at
B = --prompts, then B in --prompt_counts at G = --group_size. Each setting
pools ceil(--rollouts / (B G)) rollout batches per seed (half as many rollouts
with --quick); mean and 95 % CI over seeds.

Primary contrast (fixed before any result): R_prefix at the largest minus at
the smallest G (and, separately, B), paired by seed. [P2] says cancellation
grows with the sampling budget; lower R_prefix is stronger cancellation, so
predicted < 0. R_prefix, not R, because R rises with G by construction (more
tokens shared by part of their group). The next version of this experiment
will replace it with [P2]'s own quantity, the E5 value gap (boosted -
suppressed) at the largest minus the smallest G and B, predicted > 0.

    python experiments/e6_group_size.py --quick      # one seed
    python experiments/e6_group_size.py              # seeds 0,1,2
"""
import copy
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch  # noqa: E402

import diagnostics as D  # noqa: E402
import loss as L  # noqa: E402

EXTRA = dict(common.DIAG_FLAGS, sgd_lr=(1e-3, "plain SGD lr"), group_sizes=("2,4,8,16", "G values"),
             prompt_counts=("4,8,16,32", "B values"), rollouts=(1024, "rollouts pooled per setting and seed"))


def token_classes(tokens, mask, group, adv):
    """[N,T]: 1 shared (prefix also in an opposite-sign rollout of the group),
    2 positive-specific, 3 negative-specific, 0 otherwise (off mask, A = 0)."""
    out = torch.zeros(tokens.shape, dtype=torch.long)
    rows = tokens.tolist()
    for g in group.unique().tolist():
        members = (group == g).nonzero()[:, 0].tolist()
        seen = {1: set(), -1: set()}
        for i in members:
            s = int(torch.sign(adv[i]))
            if s:
                seen[s].update(tuple(rows[i][:t + 1]) for t in range(int(mask[i].sum())))
        for i in members:
            s = int(torch.sign(adv[i]))
            for t in range(int(mask[i].sum()) if s else 0):
                out[i, t] = 1 if tuple(rows[i][:t + 1]) in seen[-s] else (2 if s > 0 else 3)
    return out


def setting(model, m64, task, draw, gen, B, G, opts):
    d_all, cls_all, a_all, res = [], [], [], []
    rollouts = opts["rollouts"] // 2 if opts["quick"] else opts["rollouts"]
    for _ in range(math.ceil(rollouts / (B * G))):
        b = common.rollout_batch(model, task, draw, B, G, gen)
        adv = L.advantages(b["rewards"], b["group"], "grpo")
        m = b["mask"]
        coef = D.token_coefficients(m64, b, adv)
        d = D.token_deltas(m64, D.one_update(m64, b, adv, "sgd", opts["sgd_lr"], coef=coef), b)
        d_all.append(d[m])
        cls = token_classes(b["tokens"], m, b["group"], adv)
        mixed = L.group_mean((adv > 0).double(), b["group"])[0]
        mixed = (mixed > 0) & (mixed < 1) & (adv != 0)  # rows of groups with both signs
        ell = D.common_prefix(b["tokens"], m, b["group"])
        cls[(torch.arange(m.shape[1])[None, :] < ell[:, None]) & mixed[:, None] & m] = 4  # whole-group prefix
        cls_all.append(cls[m])
        a_all.append(adv[:, None].expand_as(m)[m])
        if bool((adv != 0).any()):
            res.append(D.cancellation_residual(m64, b, coef))
    d, c, a = torch.cat(d_all).abs(), torch.cat(cls_all), torch.cat(a_all)
    def mean(ks):
        sel = torch.isin(c, torch.tensor(ks))
        return float(d[sel].mean()) if bool(sel.any()) else None
    sh, pos, pre = mean((1, 4)), mean((2,)), mean((4,))
    flips = D.flip_table(torch.cat(d_all)[:, None], torch.ones(len(d), 1, dtype=torch.bool), a, 0.0)
    ratio = lambda x: x / pos if x is not None and pos else None
    return {"R": ratio(sh), "R_prefix": ratio(pre), "shared_abs": sh, "pos_specific_abs": pos,
            "prefix_abs": pre, "neg_specific_abs": mean((3,)), "n_shared": int(((c == 1) | (c == 4)).sum()),
            "n_prefix": int((c == 4).sum()), "n_pos_specific": int((c == 2).sum()),
            "flipped_eps0": flips["flipped"], "residual": sum(res) / len(res) if res else None}


def plot(plt, data):
    """Four measures of cancellation against G (blue) and B (orange)."""
    summary, cfg = data["summary"], data["config"]
    fig, ax = plt.subplots(1, 4, figsize=(18, 4.4))
    panels = (("R", "Cancellation ratio R", "R (lower = stronger cancellation)"),
              ("R_prefix", "R over whole-group prefix tokens", "R_prefix (lower = stronger)"),
              ("flipped_eps0", "Flipped tokens (ε = 0)", "fraction of Â ≠ 0 tokens"),
              ("residual", "Shared-prefix gradient residual", "‖g_shared‖ / ‖g‖"))
    for i, (k, title, ylabel) in enumerate(panels):
        for name, color in (("G", "tab:blue"), ("B", "tab:orange")):
            pts = [p for p in summary[name] if p[k][0] is not None]
            ax[i].errorbar([p[name] for p in pts], [p[k][0] for p in pts],
                           common.errbars([p[k] for p in pts], 0, 1 if k == "flipped_eps0" else None),
                           marker="o", color=color, capsize=3,
                           label=f"vary G, B = {cfg['prompts']}" if name == "G" else
                           f"vary B, G = {cfg['group_size']}")
        ax[i].set_xscale("log", base=2)
        ax[i].set_xticks([2, 4, 8, 16, 32], ["2", "4", "8", "16", "32"])
        ax[i].minorticks_off()
        ax[i].set_xlabel("G (completions per prompt) or B (prompts)")
        ax[i].set_ylabel(ylabel)
        ax[i].set_title(title, fontsize=10)
        ax[i].set_ylim(bottom=0)
        if k == "residual":
            ax[i].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax[0].legend(fontsize=8, loc="upper left")
    n = len(data["per_seed"])
    common.caption(fig, "R = mean |Δ| over tokens whose prefix also occurs in an opposite-sign rollout of the "
                        "group, divided by mean |Δ| over positive-specific tokens, after one plain-SGD GRPO "
                        f"update on {cfg['rollouts']} rollouts per setting; R_prefix restricts the numerator to "
                        "the longest prefix the whole group shares. Residual: norm of the gradient of the "
                        "shared-prefix tokens over the norm of the whole gradient. " + common.ci_note(n))
    fig.tight_layout()
    return fig


def main(argv):
    opts = common.parse(argv, EXTRA, __doc__)
    if opts["replot"]:
        return common.replot("e6_group_size", opts["out"], plot)
    t0 = time.time()
    Gs, Bs = opts["group_sizes"], opts["prompt_counts"]  # lists of ints (common.parse)
    sweeps = {"G": [(opts["prompts"], G) for G in Gs], "B": [(B, opts["group_size"]) for B in Bs]}
    per_seed = []
    for seed in opts["seeds"]:
        model, task, draw, gen = common.diag_setup(opts, seed)
        m64 = copy.deepcopy(model).double()
        cache, rec = {}, {"seed": seed}
        for name, pts in sweeps.items():
            rec[name] = []
            for B, G in pts:
                if (B, G) not in cache:
                    cache[B, G] = setting(model, m64, task, draw, gen, B, G, opts)
                rec[name].append({"B": B, "G": G, **cache[B, G]})
        per_seed.append(rec)
    keys = ("R", "R_prefix", "flipped_eps0", "residual", "shared_abs", "prefix_abs", "pos_specific_abs")
    summary = {name: [{"B": B, "G": G, **{k: common.ci([r[name][i][k] for r in per_seed]) for k in keys}}
                      for i, (B, G) in enumerate(pts)] for name, pts in sweeps.items()}
    data = {"experiment": "e6_group_size", "config": opts, "per_seed": per_seed, "summary": summary,
            "wall_s": round(time.time() - t0, 1)}
    data["primary"] = {f"R_prefix at {name} = {pts[-1][name == 'G']} - at {pts[0][name == 'G']}": common.contrast(
        [r[name][-1]["R_prefix"] for r in per_seed], [r[name][0]["R_prefix"] for r in per_seed], "< 0",
        [r["seed"] for r in per_seed]) for name, pts in sweeps.items()}
    data = common.clean(data)
    common.save("e6_group_size", data, opts["out"], lambda plt: plot(plt, data))
    rows = [[name, p["B"], p["G"], common.fmt(p["R"]), common.fmt(p["R_prefix"]), common.fmt(p["flipped_eps0"]),
             common.fmt(p["residual"])] for name in sweeps for p in summary[name]]
    common.table(rows, ["sweep", "B", "G", "R", "R_prefix", "flipped eps=0", "residual"])
    common.print_contrasts(data["primary"])
    print(f"[{data['wall_s']:.0f}s] wrote {opts['out']}/e6_group_size.json")
    return data


if __name__ == "__main__":
    common.cli(main)
