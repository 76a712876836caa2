"""Scoreboard: every advantage estimator x every objective the engines ship, plus the
switches, scored on gradient exchangeability and on whole-group cancellation.

What it shows
-------------
For every ``--loss`` (loss.py) with every ``--adv`` (advantage.py), and for the
switches, the coefficients c_{i,t} = -d loss / d log pi(y_{i,t}) are read off
by autograd on synthetic rollout groups and scored twice:

    exch_residual   mean over (history, token) sets S of
                    |sum_S c_i - wbar sum_S Â_i| / sum_S |c_i|   (residuals.exch_residual):
                    0 when every copy of a token after one identical history gets
                    the same weight (gradient exchangeability [P1]), whatever A.
    whole-group     |sum_i c_i| / sum_i |c_i| over the group's first token, which
                    every rollout of the group shares (residuals.first_token_residual):
                    0 when the copies cancel, which needs equal weights *and* a
                    centred estimator (sum_i Â_i = 0), or a transform that forces
                    sum_i Â_i w~_i = 0 (Adv-Orthogonal).

Beside each measurement stands the prediction of the tables (loss.py's verdict
per regime, advantage.py's "centred?" column), written down in CANCELS, SWITCHES
and ``predict`` before the board was run. Where a zero follows from the
definitions rather than from the objective, the cell says so:

    bc    by construction: every set with two or more copies is one-signed in A
          (remax on 0/1 rewards, grpo_passk, positive_only), and then
          exch_residual is 0 for *any* weights; or the term is not in c at all
          (entropy_coef); or Adv-Orthogonal's sum_i Â_i w~_i = 0.
    n/a   no gradient reached the measured copies (all A = 0, or every copy cut).

The data: groups of G = 6 completions over a 3-token alphabet, so that prefixes
are shared by chance, the first token shared by the whole group, lengths 2 to 8,
rewards mixed in every group, in float64. Every copy of one (history, token) has the same
log pi and log pi_old (one policy, one history): log pi = log U(0.05, 0.85) per
set (so that pi_old = pi / rho < 1). Regimes:

    on-policy   pi_old = pi (rho = 1)
    off-policy  log rho = U(-0.15, 0.15) per set, so no clip of 0.2 / 0.28 binds
    clip binds  as off-policy, and the group's first token has pi = 0.9 and
                rho = e^0.35 = 1.42 (so dppo's 0.2 thresholds bind too)
    split step  as off-policy, the step's rows cut into two micro-batches (every
                group split, unequal token counts), gradients accumulated

Clips: eps 0.2 / 0.28 (clip-higher) where a loss has a ratio clip; 3e-4 / 4e-4
for gspo and luspo (GSPO's sequence-level ranges); 0.2 / 0.2 for dppo (its
probability and KL thresholds); none for the objectives registered without one
(``clip="none"`` in lab/objectives.py), with dro_beta = 0.5. clip_cov and kl_cov
use cov_ratio = 0.02 instead of verl's 2e-4 so that their selection (a few tokens, not
one) can be seen on ~300 tokens. beta: log pi_ref - log pi = U(-0.3, 0.3) per set. remax: a greedy
reward drawn per group. Token entropies (top_entropy_quantile) are drawn per
set; the first token gets the largest. verl's optimal_token_baseline, one advantage per
token, has two rows of its own (TOKEN_ROWS: with dapo's and grpo's aggregation), its
sum_v pi_old(v)^2 the sampled token's pi_old^2 plus the rest spread over the other two.

    python -m lab.experiments.scoreboard  # 8 groups, seeds 0,1,2: results/scoreboard.{json,png}
    python -m lab.experiments.scoreboard --quick    # 3 groups, seed 0: out/partial/ (CI)
"""

import sys
import time

import torch

if not __package__:  # run as a file: the package imports below need the repository root
    sys.stderr.write("error: run it from the repository root as "
                     "python -m lab.experiments.scoreboard\n")
    sys.exit(2)
from lab.experiments import common
import loss
from lab import engines, estimators, objectives, residuals

REGIMES = objectives.REGIMES
SHORT = "on, off, clip, split"
COV_RATIO = 0.02
ALL = objectives.EVERY_REGIME


def clip_of(objective):
    """(--clip, eps_low, eps_high) a row is scored with: the objective's own range."""
    obj = objectives.OBJECTIVES[objective]
    if obj.clip == "none":
        return "none", 0.2, 0.28
    low, high = obj.eps
    return ("sym" if low == high else "higher"), low, high


# Switch rows: name -> (loss, switches, regimes where copies keep equal weights, what breaks it)
SWITCHES = {
    "dapo + dual_clip=1.3": ("dapo", {"dual_clip": 1.3}, ALL, "rho = 1.42 > C: every copy cut"),
    "dapo + dual_clip=2": (
        "dapo",
        {"dual_clip": 2.0},
        ALL - {"clip binds"},
        "1.28 < rho = 1.42 < C",
    ),
    **{
        f"dapo + beta=0.04, {k}": (
            "dapo",
            {"beta": 0.04, "kl_loss_type": k},
            ALL - {"clip binds"},
            "the same k on every copy",
        )
        for k in ("k1", "k2", "k3", "abs", "k3+")
    },
    "dapo + entropy_coef=0.01": (
        "dapo",
        {"entropy_coef": 0.01},
        ALL - {"clip binds"},
        "clip (H is not in c)",
    ),
    "dapo + top_entropy_quantile=0.5": (
        "dapo",
        {"top_entropy_quantile": 0.5},
        ALL - {"clip binds"},
        "clip; two thresholds in a split step",
    ),
    "dapo + off_policy_mask_threshold=0.02": (
        "dapo",
        {"off_policy_mask_threshold": 0.02},
        ALL - {"clip binds"},
        "clip; dropped A<0 sequences",
    ),
    **{
        f"grpo + agg={m}": (
            "grpo",
            {"agg": m},
            set() if m == "seq-mean-token-mean" else ALL - {"clip binds"},
            "1/L_i" if m == "seq-mean-token-mean" else "clip by sign",
        )
        for m in objectives.AGGS
    },
}


# verl's optimal_token_baseline gives one advantage per *token* (estimators.optimal_token_baseline),
# which no --adv carries: scored with the token-mean objective verl pairs it with by default
# (dapo's, verl's vanilla PPO loss) and with grpo's 1/L_i, through the same PPO term
OTB = "optimal_token_baseline"
TOKEN_ROWS = {f"{objective} · {OTB}": objective for objective in ("dapo", "grpo")}


def make_batch(regime, n_groups, G=6, seed=0):
    """Synthetic groups, log-probs per (history, token) set; see the module docstring."""
    g = torch.Generator().manual_seed(seed)
    N, T = n_groups * G, 8
    lens = torch.randint(2, T + 1, (N,), generator=g)
    mask = torch.arange(T)[None] < lens[:, None]
    tokens = torch.randint(0, 3, (N, T), generator=g) * mask
    tokens[:, 0] = 7  # the first token: shared by the whole group
    group = torch.arange(n_groups).repeat_interleave(G)
    rewards = torch.zeros(N)
    for k in range(n_groups):                             # mixed rewards in every group
        r = (torch.rand(G, generator=g) < 0.5).float()
        r[0], r[1] = 1.0, 0.0
        rewards[k * G:(k + 1) * G] = r[torch.randperm(G, generator=g)]
    ids = residuals.history_token_sets(tokens, mask, group)
    K = int(ids.max()) + 1
    per_set = lambda lo, hi: lo + (hi - lo) * torch.rand(K, generator=g)
    at = lambda v: torch.where(mask, v[ids.clamp(min=0)], torch.zeros(()))
    new = at(per_set(0.05, 0.85).log())  # pi_old = pi / rho stays below 1 (dppo_kl's binary KL)
    ref = new + at(per_set(-0.3, 0.3))
    logr = torch.zeros(N, T) if regime == "on-policy" else at(per_set(-0.15, 0.15))
    ent = at(per_set(0.1, 2.0))
    ent[:, 0] = 3.0  # the shared first token: the highest entropy
    baseline = (torch.rand(n_groups, generator=g) < 0.5).float().repeat_interleave(G)
    if regime == "clip binds":
        logr[:, 0], new[:, 0] = 0.35, torch.tensor(0.9).log()
    parts = [torch.arange(N)]
    if regime == "split step":  # every group split; the halves get unequal token counts
        parts = [torch.arange(0, N, 2), torch.arange(1, N, 2)]
    d = lambda x: x.double()  # float64, so that "zero" means zero up to 1e-6, not float32 rounding
    # OTB's sum_v pi_old(v)^2: the sampled token's pi_old, the rest spread over the other two
    p_old = (new - logr).exp()
    spsq = torch.where(mask, p_old ** 2 + (1 - p_old) ** 2 / 2, torch.zeros(()))
    return {
        "tokens": tokens,
        "mask": mask,
        "group": group,
        "rewards": rewards,
        "new": d(new),
        "old": d(new - logr),
        "ref": d(ref),
        "ent": d(ent),
        "ids": ids,
        "parts": parts,
        "baseline": baseline,
        "spsq": d(spsq),
    }


def row_setup(name):
    """(loss, estimator, switches) of a board row: 'loss · adv' or a SWITCHES name."""
    if name in SWITCHES:
        objective, sw = SWITCHES[name][:2]
        return objective, objectives.own_estimator(objective), sw
    objective, est = name.split(" · ")
    return objective, est, ({"dro_beta": 0.5} if objective == "dro" else {})


def keeps(b, sw, adv, idx):
    """The token selection switches' keep mask on the rows idx (None when off)."""
    if "top_entropy_quantile" in sw:
        return engines.entropy_keep(b["ent"][idx], b["mask"][idx], sw["top_entropy_quantile"])
    if "off_policy_mask_threshold" in sw:
        return engines.off_policy_keep(b["new"][idx], b["old"][idx], b["mask"][idx], adv[idx],
                                 sw["off_policy_mask_threshold"])
    return None


def coefficients(b, name):
    """c_{i,t} of one row on one batch, accumulated over its micro-batches, and its Â."""
    if name in TOKEN_ROWS:
        return token_coefficients(b, TOKEN_ROWS[name])
    objective, est, sw = row_setup(name)
    clip, lo, hi = clip_of(objective)
    adv = estimators.advantages(
        b["rewards"], b["group"], est, lengths=b["mask"].sum(1), baseline=b["baseline"]
    )
    counts = loss.step_counts(
        b["mask"], adv, max_len=b["mask"].shape[1], micro_batches=len(b["parts"])
    )
    new = b["new"].clone().requires_grad_(True)
    ent = b["ent"].clone().requires_grad_(True)  # c does not see the entropy term
    kw = {
        k: v
        for k, v in sw.items()
        if k not in ("top_entropy_quantile", "off_policy_mask_threshold")
    }
    for idx in b["parts"]:
        batch = objectives.LossBatch(new[idx], b["old"][idx], b["mask"][idx], adv[idx],
                                     b["group"][idx],
                            counts=counts, ref_logprobs=b["ref"][idx], entropy=ent[idx],
                            keep=keeps(b, sw, adv, idx))
        total, _ = objectives.policy_loss(
            batch, objectives.LossSettings(objective, clip, lo, hi, cov_ratio=COV_RATIO, **kw)
        )
        total.backward()
    return -new.grad, adv


def token_coefficients(b, objective):
    """c_{i,t} of ``objective``'s aggregation and PPO clip with OTB's per-token A_{i,t}
    (from pi_old: verl computes it before the update), and A [N, T]."""
    adv = estimators.optimal_token_baseline(b["rewards"], b["group"], b["mask"], b["old"],
                                            b["spsq"])
    bounds = loss.clip_bounds(*clip_of(objective))
    lens = b["mask"].sum(1)
    seq = (adv * b["mask"]).sum(1)  # the counts read the signs of the rows' advantages only
    counts = loss.step_counts(b["mask"], seq, max_len=b["mask"].shape[1],
                              micro_batches=len(b["parts"]))
    agg = objectives.agg_weight(objectives.OBJECTIVES[objective].agg, lens, counts)
    new = b["new"].clone().requires_grad_(True)
    for idx in b["parts"]:
        m = b["mask"][idx].double()
        per_tok, _ = objectives.ppo_term(((new[idx] - b["old"][idx]) * m).exp(), adv[idx], bounds)
        (per_tok * agg[idx][:, None] * m).sum().backward()
    return -new.grad, adv


def _sets(b):
    """{set id: flat indices} of every (history, token) set with two or more copies."""
    ids = b["ids"].flatten()
    out = {}
    for s in ids[ids >= 0].unique().tolist():
        where = torch.nonzero(ids == s).flatten()
        if len(where) >= 2:
            out[s] = where
    return out


def one_signed(b, adv):
    """Is every multi-copy set one-signed in A (its non-zero A all of one sign)?"""
    a = residuals.per_token(adv, b["ids"]).flatten()
    return all(not (bool((a[w] > 0).any()) and bool((a[w] < 0).any())) for w in _sets(b).values())


def cut_sets(b, m, at_all=False):
    """Ids of the multi-copy sets of which the [N, T] mask m takes some copies but not
    all (with ``at_all``: any copy)."""
    m = m.flatten()
    return {s for s, w in _sets(b).items() if bool(m[w].any()) and (at_all or not bool(m[w].all()))}


def data_hits(b, name, adv):
    """Ids of the sets a row's selection (covariance, entropy, off-policy mask) treats
    unequally, as exch_residual sees them and as a plain sum sees them: clip_cov
    zeroes some copies, kl_cov adds |log rho| to any, the keep masks keep some."""
    objective, _, sw = row_setup(name)
    full = torch.zeros_like(b["mask"])
    if objective in ("clip_cov", "kl_cov"):
        for idx in b["parts"]:
            m, new, a = b["mask"][idx], b["new"][idx], adv[idx]
            lr = (new - b["old"][idx]) * m
            if objective == "clip_cov":
                _, clipped = objectives.ppo_term(
                    lr.exp(), a[:, None], loss.clip_bounds("higher", 0.2, 0.28)
                )
                full[idx] = engines.cov_select(
                    a,
                    new,
                    m,
                    COV_RATIO,
                    engines.COV["lb"],
                    engines.COV["ub"],
                    exclude=clipped,
                )
            else:
                full[idx] = engines.cov_select(a, new, m, COV_RATIO) & (
                    lr != 0
                )  # |log rho| has no gradient at 0
        if objective == "clip_cov":
            return cut_sets(b, full), cut_sets(b, full)
        # kl_cov adds to the selected copies. exch_residual absorbs an addition to a copy whose A
        # has
        # the set's one sign into wbar; it sees one on a copy with A = 0, or in a set of both signs.
        a = residuals.per_token(adv, b["ids"]).flatten()
        f = full.flatten()
        return {
            s
            for s, w in _sets(b).items()
            if bool(f[w].any())
            and (
                bool((a[w][f[w]] == 0).any()) or (bool((a[w] > 0).any()) and bool((a[w] < 0).any()))
            )
        }, cut_sets(b, full, at_all=True)
    if "top_entropy_quantile" in sw or "off_policy_mask_threshold" in sw:
        for idx in b["parts"]:
            full[idx] = keeps(b, sw, adv, idx)
        return cut_sets(b, full), cut_sets(b, full)
    return set(), set()


def blind_sets(b, adv):
    """Ids of the sets whose copies all have non-zero A of one sign: there
    exch_residual is 0 for *any* coefficients (wbar absorbs them), by construction."""
    a = residuals.per_token(adv, b["ids"]).flatten()
    return {s for s, w in _sets(b).items() if bool((a[w] > 0).all()) or bool((a[w] < 0).all())}


def predict(b, name, regime, adv):
    """(exch prediction, whole-group prediction, note): '0' or '>0' each, from the
    tables' verdicts and the batch's advantages and masks (never from c)."""
    objective, est, sw = row_setup(name)
    cancels = SWITCHES[name][2] if name in SWITCHES else objectives.OBJECTIVES[objective].cancels
    if (
        objective == "dfpo_orth"
    ):  # sum_i Â_i w~_i = 0 inside every group (or part of one), by design
        unequal = (
            not estimators.ESTIMATORS[est].centred or regime != "on-policy"
        )  # w~ = w - (A.w/|A|^2) A
        return ("0", "0", "bc") if one_signed(b, adv) or not unequal else (">0", "0", "bc")
    hits, seen = data_hits(b, name, adv)
    additive = objectives.OBJECTIVES[objective].additive or "beta" in sw
    if not additive and one_signed(b, adv):
        return (
            "0",
            ">0",
            "bc",
        )  # no set has both signs: nothing to cancel, and the group pushes one way
    if "beta" in sw or (objective == "dro" and regime != "on-policy"):
        hits = seen = set(_sets(b))  # the added term reaches every copy of every set
    exch = "0" if regime in cancels and not hits - blind_sets(b, adv) else ">0"
    note = "bc" if "entropy_coef" in sw else ""
    if name == "dapo + dual_clip=1.3" and regime == "clip binds":
        note = "vacuous"
    first = set(b["ids"][:, 0].tolist())
    # OTB is centred at a token the whole group shares (every copy the same W_t: B_t = mean r)
    centred = est == OTB or estimators.ESTIMATORS[est].centred
    whole = "0" if regime in cancels and centred and not seen & first else ">0"
    return exch, whole, note


def score(names, n_groups, seeds=(0,)):
    out = {}
    for name in names:
        out[name] = {}
        for regime in REGIMES:
            ex, wh, preds = [], [], set()
            for seed in seeds:
                b = make_batch(regime, n_groups, seed=seed)
                c, adv = coefficients(b, name)
                ex.append(residuals.exch_residual(c, adv, b["tokens"], b["mask"], b["group"]))
                c0 = c[:, 0]
                wh.append(
                    residuals.first_token_residual(c, b["group"])
                    if float(c0.abs().sum()) > 1e-12
                    else None
                )
                preds.add(predict(b, name, regime, adv))
            pe = "0" if all(p[0] == "0" for p in preds) else ">0"
            pw = "0" if all(p[1] == "0" for p in preds) else ">0"
            note = "/".join(sorted({p[2] for p in preds if p[2]}))
            e, w = max(ex), (
                None if all(v is None for v in wh) else max(v for v in wh if v is not None)
            )
            out[name][regime] = {
                "exch_predicted": pe,
                "exch_residual": e,
                "exch_match": (e < 1e-6) == (pe == "0"),
                "whole_predicted": pw,
                "whole_group": w,
                "note": note,
                "whole_match": w is None or (w < 1e-6) == (pw == "0"),
                "per_seed": {"exch_residual": ex, "whole_group": wh},
            }
    return out


def code(cells, key, match):
    """One character per regime: 0 measured zero, + above zero, . n/a; ! marks a mismatch."""
    s = ""
    for d in cells:
        v = d[key]
        s += "." if v is None else ("0" if v < 1e-6 else "+")
        s += "" if d[match] else "!"
    return s


def main(argv):
    """Long because: it is the experiment read top to bottom (its arms, the runs, the contrasts,
    the report), in the order they happen."""
    # synthetic and in seconds: one process, no figure to redraw without recomputing
    o = common.parse(argv, {"groups": (8, "groups per batch (quick: 3)")}, __doc__,
                     unused=("jobs", "threads", "replot", "device"), name="scoreboard")
    out_dir = o["out"]
    n_groups = min(o["groups"], 3) if o["quick"] else o["groups"]
    seeds = tuple(o["seeds"][:1]) if o["quick"] else tuple(o["seeds"])
    t0 = time.time()
    grid = [f"{name} · {est}" for name in objectives.OBJECTIVES for est in estimators.ESTIMATORS]
    board = score(grid + list(TOKEN_ROWS) + list(SWITCHES), n_groups, seeds)
    for key, match, title in (("exch_residual", "exch_match", "exch_residual"),
                              ("whole_group", "whole_match", "whole-group residual")):
        print(
            f"{title}: rows --loss, columns --adv; per regime ({SHORT}) 0 = zero, + = above zero, "
            f". = n/a, ! = disagrees with the prediction"
        )
        rows = [
            [objective]
            + [
                code([board[f"{objective} · {e}"][r] for r in REGIMES], key, match)
                for e in estimators.ESTIMATORS
            ]
            for objective in objectives.OBJECTIVES
        ]
        common.table(rows, ["loss \\ adv"] + [e[:14] for e in estimators.ESTIMATORS])
    common.table(
        [
            [
                n,
                *(
                    f"{board[n][r]['exch_predicted']} | {board[n][r]['exch_residual']:.3f}"
                    + ("" if board[n][r]["exch_match"] else " (!)")
                    for r in REGIMES
                ),
                SWITCHES[n][3],
            ]
            for n in SWITCHES
        ],
        ["switch row"] + [f"{r}: pred. | exch" for r in REGIMES] + ["what breaks it"],
    )
    common.table([[n, code([board[n][r] for r in REGIMES], "exch_residual", "exch_match"),
                   code([board[n][r] for r in REGIMES], "whole_group", "whole_match")]
                  for n in TOKEN_ROWS], ["per-token Â (verl's OTB)", "exch", "whole group"])
    mism = [
        (n, r, k)
        for n in board
        for r in REGIMES
        for k in ("exch", "whole")
        if not board[n][r][f"{k}_match"]
    ]
    print(
        f"scoreboard: {len(board)} rows x {len(REGIMES)} regimes x 2 measures, {len(mism)} "
        "mismatches"
        + "".join(f"; {n} / {r} / {k}" for n, r, k in mism)
        + f" [{time.time() - t0:.1f}s]"
    )
    data = {
        "experiment": "scoreboard",
        "config": {
            "groups": n_groups,
            "group_size": 6,
            "seeds": list(seeds),
            "cov_ratio": COV_RATIO,
            "quick": o["quick"],
        },
        "regimes": list(REGIMES),
        "losses": list(objectives.OBJECTIVES),
        "estimators": list(estimators.ESTIMATORS),
        "switches": {n: SWITCHES[n][3] for n in SWITCHES},
        "token_rows": list(TOKEN_ROWS),
        "why": {n: o.why for n, o in objectives.OBJECTIVES.items() if o.why},
        "summary": board,
        "mismatches": [list(m) for m in mism],
        "wall_s": round(time.time() - t0, 2),
    }
    common.save("scoreboard", data, out_dir, lambda plt: plot(plt, board))
    return data


def report_tables(data):
    """The lab report's three exchangeability tables, from a saved board (results/README.md
    holds them verbatim; tests/test_catalogue_verl.py checks the copy): per objective (the
    code per regime, the same for every centred estimator), per switch row and per OTB row
    (the measured residual, max over seeds)."""
    board, regimes = data["summary"], data["regimes"]
    centred = [e for e in data["estimators"] if estimators.ESTIMATORS[e].centred]
    lines = ["| objective | exch | what breaks it |", "|---|---|---|"]
    for o in data["losses"]:
        codes = {code([board[f"{o} · {e}"][r] for r in regimes], "exch_residual", "exch_match")
                 for e in centred}
        lines.append(f"| `{o}` | `{'` / `'.join(sorted(codes))}` | {data['why'].get(o, '')} |")

    def cell(d):
        v = d["exch_residual"]
        if v >= 1e-6:
            return f"{v:.3f}"
        return "0" + (f" ({d['note']})" if d["note"] else "")  # why a zero is zero
    head = "| {} | " + " | ".join(r.split()[0] for r in regimes) + " | {} |"
    rule = "|---" * (len(regimes) + 2) + "|"
    switch = [head.format("row", "what breaks it"), rule] + [
        f"| `{n}` | " + " | ".join(cell(board[n][r]) for r in regimes) + f" | {why} |"
        for n, why in data["switches"].items()]
    token = [head.format("row", "whole-group residual"), rule] + [
        f"| `{n}` | " + " | ".join(cell(board[n][r]) for r in regimes) + " | "
        + " / ".join("n/a" if board[n][r]["whole_group"] is None
                     else f"{board[n][r]['whole_group']:.1e}" for r in regimes) + " |"
        for n in data.get("token_rows", [])]
    return "\n".join(lines), "\n".join(switch), "\n".join(token)


def plot(plt, board):
    """Loss x estimator: in how many regimes the whole group's shared token cancels."""
    import numpy as np
    n_l, n_e = len(objectives.OBJECTIVES), len(estimators.ESTIMATORS)
    vals = np.zeros((n_l, n_e))
    # 8 inches wide: 12 columns of 4 monospace characters still fit at 11 points
    fig, ax = plt.subplots(figsize=(8, 11), layout="constrained")
    for i, objective in enumerate(objectives.OBJECTIVES):
        for j, est in enumerate(estimators.ESTIMATORS):
            cells = [board[f"{objective} · {est}"][r] for r in REGIMES]
            vals[i, j] = sum(
                1 for d in cells if d["whole_group"] is not None and d["whole_group"] < 1e-6
            )
            txt = code(cells, "whole_group", "whole_match")
            ax.text(j, i, txt, ha="center", va="center", fontsize=11, family="monospace",
                    color="white" if vals[i, j] >= 3 else "black")
    # an integer scale: five discrete colours, one per count of regimes (0-4)
    im = ax.imshow(vals, cmap=plt.get_cmap("Greens", 5), vmin=-0.5, vmax=4.5, aspect="auto")
    ax.set_xticks(range(n_e))
    ax.set_xticklabels(list(estimators.ESTIMATORS), rotation=40, ha="right", fontsize=11)
    ax.set_yticks(range(n_l))
    ax.set_yticklabels(list(objectives.OBJECTIVES), fontsize=11)
    ax.set_xlabel("advantage estimator (--adv)")
    ax.set_ylabel("objective (--loss)")
    # the key to the characters is in the markdown caption, not the image
    ax.set_title("Does the token every rollout of a group shares cancel?", fontsize=12)
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02, ticks=range(5)).set_label(
        "regimes (of 4) where it cancels", fontsize=11
    )
    return fig


if __name__ == "__main__":
    common.cli(main)
