"""Scoreboard: every objective the big engines ship, scored on gradient exchangeability.

What it shows
-------------
For every ``--loss`` of loss.py, and the switches ``dual_clip``, ``beta`` and
``entropy_coef``, the coefficients c_{i,t} = -d loss / d log pi(y_{i,t}) are read
off by autograd on synthetic rollout groups, and scored with

    exch_residual = mean over (history, token) sets S of |sum_S c_i - wbar sum_S A_i| / sum_S |c_i|

(loss.exch_residual): 0 when every copy of a token after one identical history gets
the same weight (gradient exchangeability [P1]), and also when unequal weights
happen to cancel for these advantages (so 0 alone does not prove it). Beside
it stands the verdict that loss.py's table predicts, and the old first-token
residual (loss.first_token_residual).

The data: groups of G completions over a 3-token alphabet, so that prefixes are
shared by chance, the first token shared by the whole group, lengths 2 to 8.
Every copy of one (history, token) has the same log pi and the same log pi_old
(one policy, one history): log pi = log U(0.05, 0.95) per set. Regimes:

    on-policy   pi_old = pi (rho = 1)
    off-policy  log rho = U(-0.15, 0.15) per set, so no clip of 0.2 / 0.28 binds
    clip binds  as off-policy, and the group's first token has rho = e^0.35 = 1.42
    split step  as off-policy, the step's rows cut into two micro-batches (every
                group split, unequal token counts), gradients accumulated

Clips: eps 0.2 / 0.28 (clip-higher) where a loss has a ratio clip; 3e-4 / 4e-4
for gspo and luspo (GSPO's sequence-level ranges); none for sapo, kl_cov, gpg,
vespo. clip_cov and kl_cov use cov_ratio = 0.02 instead of verl's 2e-4 so that
their selection (a few tokens, not one) can be seen on ~300 tokens. beta: k3
against a reference with log pi_ref - log pi = U(-0.3, 0.3) per set.

    python experiments/scoreboard.py            # 8 groups, writes results/scoreboard.{json,png}
    python experiments/scoreboard.py --quick    # 3 groups, writes out/quick/ (CI)
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import loss as L  # noqa: E402
import loss_engines as E  # noqa: E402

REGIMES = ("on-policy", "off-policy", "clip binds", "split step")
COV_RATIO = 0.02
CLIP = {"gspo": ("higher", 3e-4, 4e-4), "luspo": ("higher", 3e-4, 4e-4)}
CLIP.update({n: ("none", 0.2, 0.28) for n in L.NO_CLIP})
# row name -> (loss, switches)
ROWS = {n: (n, {}) for n in L.LOSSES}
ROWS.update({"dapo + dual_clip=3": ("dapo", {"dual_clip": 3.0}),
             "dapo + beta=0.04": ("dapo", {"beta": 0.04}),
             "dapo + entropy_coef=0.01": ("dapo", {"entropy_coef": 0.01})})

# The table's verdicts: the regimes where each row keeps exchangeability.
ALL = set(REGIMES)
CANCELS = {"grpo": set(), "gspo": set(), "sapo": set(), "gmpo": set(),      # 1/L_i, unequal lengths
           "dr_grpo": ALL - {"clip binds"}, "dapo": ALL - {"clip binds"},
           "rloo": ALL - {"clip binds"}, "bnpo": {"on-policy", "off-policy"},
           "dfpo_min": ALL - {"split step"},  # groups must stay whole
           "dfpo_orth": {"on-policy"},  # off-policy its w~_i differ: only whole-group copies cancel
           "positive_only": ALL, "cispo": ALL, "gpg": ALL,
           "luspo": {"on-policy"}, "vespo": {"on-policy"},
           "clip_cov": ALL - {"clip binds"}, "kl_cov": ALL,  # unless the selection hits a shared copy
           "dapo + dual_clip=3": ALL - {"clip binds"}, "dapo + beta=0.04": set(),
           "dapo + entropy_coef=0.01": ALL - {"clip binds"}}
WHY = {"grpo": "1/L_i", "gspo": "s_i, 1/L_i", "sapo": "1/L_i, tau by sign", "gmpo": "g_i, 1/L_i",
       "dr_grpo": "clip by sign", "dapo": "clip by sign", "rloo": "clip by sign",
       "bnpo": "local token count; clip", "dfpo_min": "transform sees part of a group",
       "dfpo_orth": "w~_i differ: partial prefixes", "luspo": "s_i", "vespo": "phi(W_i)",
       "clip_cov": "clip; cov selection", "kl_cov": "cov selection", "dapo + dual_clip=3": "rho < C",
       "dapo + beta=0.04": "same k on every copy", "dapo + entropy_coef=0.01": "clip (H is off c)"}


def make_batch(regime, n_groups, G=6, seed=0):
    """Synthetic groups, log-probs per (history, token) set; see the module docstring."""
    g = torch.Generator().manual_seed(seed)
    N, T = n_groups * G, 8
    lens = torch.randint(2, T + 1, (N,), generator=g)
    mask = torch.arange(T)[None] < lens[:, None]
    tokens = torch.randint(0, 3, (N, T), generator=g) * mask
    tokens[:, 0] = 7                                      # the first token: shared by the whole group
    group = torch.arange(n_groups).repeat_interleave(G)
    rewards = torch.zeros(N)
    for k in range(n_groups):                             # mixed rewards in every group
        r = (torch.rand(G, generator=g) < 0.5).float()
        r[0], r[1] = 1.0, 0.0
        rewards[k * G:(k + 1) * G] = r[torch.randperm(G, generator=g)]
    ids = L.history_token_sets(tokens, mask, group)
    K = int(ids.max()) + 1
    per_set = lambda lo, hi: lo + (hi - lo) * torch.rand(K, generator=g)
    at = lambda v: torch.where(mask, v[ids.clamp(min=0)], torch.zeros(()))
    new = at(per_set(0.05, 0.95).log())
    ref = new + at(per_set(-0.3, 0.3))
    logr = torch.zeros(N, T) if regime == "on-policy" else at(per_set(-0.15, 0.15))
    if regime == "clip binds":
        logr[:, 0] = 0.35
    parts = [torch.arange(N)]
    if regime == "split step":  # every group split; the halves get unequal token counts
        parts = [torch.arange(0, N, 2), torch.arange(1, N, 2)]
    return {"tokens": tokens, "mask": mask, "group": group, "rewards": rewards, "new": new,
            "old": new - logr, "ref": ref, "ids": ids, "parts": parts}


def coefficients(b, name):
    """c_{i,t} of one row on one batch, accumulated over its micro-batches."""
    loss, sw = ROWS[name]
    clip, lo, hi = CLIP.get(loss, ("higher", 0.2, 0.28))
    adv = L.advantages(b["rewards"], b["group"], loss)
    counts = L.step_counts(b["mask"], adv, loss, max_len=b["mask"].shape[1], micro_batches=len(b["parts"]))
    new = b["new"].clone().requires_grad_(True)
    ent = torch.full_like(new, 0.7, requires_grad=True)  # a stand-in H per token: c does not see it
    for idx in b["parts"]:
        total, _ = L.policy_loss(new[idx], b["old"][idx], b["mask"][idx], adv[idx], b["group"][idx], loss,
                                 clip, lo, hi, counts, ref_logp=b["ref"][idx], entropy=ent[idx],
                                 cov_ratio=COV_RATIO, **sw)
        total.backward()
    return -new.grad, adv


def selection_hits_shared(b, name, adv):
    """clip_cov / kl_cov: does the covariance selection take some, not all, copies of a set?"""
    loss, _ = ROWS[name]
    if loss not in ("clip_cov", "kl_cov"):
        return False
    hit = False
    for idx in b["parts"]:
        m, new, a = b["mask"][idx], b["new"][idx], adv[idx]
        lr = (new - b["old"][idx]) * m
        if loss == "clip_cov":
            _, clipped = L.ppo_term(lr.exp(), a[:, None], L.clip_bounds("higher", 0.2, 0.28))
            sel = E.cov_select(a, new, m, COV_RATIO, E.COV["lb"], E.COV["ub"], exclude=clipped)
        else:
            sel = E.cov_select(a, new, m, COV_RATIO) & (lr != 0)  # |log rho| has no gradient at 0
        ids = b["ids"][idx]
        for s in ids[sel].unique().tolist():
            if int((b["ids"] == s).sum()) >= 2 and int((ids[sel] == s).sum()) < int((b["ids"] == s).sum()):
                hit = True
    return hit


def score(n_groups, seeds=(0,)):
    out = {}
    for name in ROWS:
        out[name] = {}
        for regime in REGIMES:
            ha, first, pred = [], [], True
            for seed in seeds:
                b = make_batch(regime, n_groups, seed=seed)
                c, adv = coefficients(b, name)
                ha.append(L.exch_residual(c, adv, b["tokens"], b["mask"], b["group"]))
                first.append(L.first_token_residual(c, b["group"]))
                pred = pred and regime in CANCELS[name] and not selection_hits_shared(b, name, adv)
            res = max(ha)  # the worst seed: 0 only if every seed cancels
            out[name][regime] = {"predicted": "0" if pred else ">0", "exch_residual": res,
                                 "first_token": max(first), "match": (res < 1e-6) == pred}
    return out


def main(argv):
    o = common.parse(argv, {"groups": (8, "groups per batch (quick: 3)")}, __doc__)
    explicit = any(a.startswith("--out=") for a in argv)
    out_dir = o["out"] if explicit or not o["quick"] else os.path.join(common.ROOT, "out", "quick")
    os.makedirs(out_dir, exist_ok=True)
    n_groups = min(o["groups"], 3) if o["quick"] else o["groups"]
    t0 = time.time()
    board = score(n_groups, seeds=tuple(o["seeds"]))
    rows = [[name] + [f"{'0' if d['predicted'] == '0' else '>0'} | {d['exch_residual']:.3f}"
                      f"{'' if d['match'] else ' (!)'}" for d in (board[name][r] for r in REGIMES)]
            + [WHY.get(name, "")] for name in board]
    common.table(rows, ["objective"] + [f"{r}: predicted | exch_residual" for r in REGIMES] + ["what breaks it"])
    mism = [(n, r) for n in board for r in REGIMES if not board[n][r]["match"]]
    print(f"scoreboard: {len(board)} rows x {len(REGIMES)} regimes, {len(mism)} mismatches"
          + "".join(f"; {n} / {r}" for n, r in mism) + f" [{time.time() - t0:.1f}s]")
    data = {"experiment": "scoreboard", "config": {"groups": n_groups, "group_size": 6, "seeds": o["seeds"],
                                                  "cov_ratio": COV_RATIO, "quick": o["quick"]},
            "regimes": list(REGIMES), "summary": board, "mismatches": [list(m) for m in mism],
            "wall_s": round(time.time() - t0, 2)}

    def plot(plt):
        names = list(board)
        vals = [[board[n][r]["exch_residual"] for r in REGIMES] for n in names]
        fig, ax = plt.subplots(figsize=(9, 0.42 * len(names) + 1.6))
        top = max(max(v) for v in vals) or 1.0
        im = ax.imshow(vals, cmap="Reds", vmin=0, vmax=top, aspect="auto")
        for i, n in enumerate(names):
            for j, r in enumerate(REGIMES):
                d = board[n][r]
                ax.text(j, i, f"{d['exch_residual']:.3f}  (pred. {d['predicted']})" + ("" if d["match"] else " !"),
                        ha="center", va="center", fontsize=8, color="white" if vals[i][j] > 0.55 * top else "black")
        ax.set_xticks(range(len(REGIMES)))
        ax.set_xticklabels(REGIMES, fontsize=9)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=9)
        ax.set_title("exch_residual, max over 3 seeds (unitless, 0 to 1): 0 = shared copies cancel;\n"
                     "(pred.) = loss.py's verdict, ! = it disagrees", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02).set_label("exch_residual", fontsize=9)
        fig.tight_layout()
        return fig
    common.save("scoreboard", data, out_dir, plot)
    return data


if __name__ == "__main__":
    common.cli(main)
