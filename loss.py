"""loss.py: the GRPO family of objectives, DFPO's transforms, and the residuals.

What it teaches
---------------
Every objective here is a weighted policy gradient. Write its gradient as

    grad = - sum_{i,t} c_{i,t} * grad log pi(y_{i,t} | s_{i,t})

with a per-token coefficient ``c_{i,t} = -d loss / d log pi_new(y_{i,t})``.
Take a token ``a`` that every rollout of a group emits after the same history
``h`` (the first completion token, a shared format prefix). Its gradient is
``(sum_i c_i) grad log pi(a|h)``. Write ``c_i = w_i * A_i``. Three statements,
kept apart (THEORY.md section 2.1; tests/test_loss.py checks each):

* sufficient: equal weights (w_i = w for every copy, *gradient exchangeability*
  [P1, arXiv 2604.13088]) cancel for every centred A (sum_i A_i = 0);
* necessary only for all A: if the w_i are not all equal, some centred A
  (e.g. A_i = w_i - mean w) leaves sum_i c_i != 0;
* exact, for one given A: the copies cancel iff sum_i w_i A_i = 0, which
  unequal weights can meet too (Adv-Orthogonal below does so by design).

Where they cancel, only tokens that differ between good and bad rollouts move.
``first_token_residual`` and ``exch_residual`` below measure it on every step.

Objectives (``--loss``). N = sequences and sum L = completion tokens in the
optimizer step, L_i = length of completion i, L_max = the task's longest
completion, rho = pi_new/pi_old per token, s_i = exp(mean_t log rho_{i,t}) per
sequence, w~ = DFPO's transformed weights (below), mu_g and sigma_g = the mean
and sd of the group's rewards. This table is the one home of these facts; the
README shows it verbatim (tests/test_docs.py checks the copy):

<!-- objectives -->
| `--loss` | advantage A_i | coefficient c_{i,t} (on-policy) | keeps exchangeability? |
|---|---|---|---|
| `grpo` | (r_i - mu_g)/(sigma_g + eps) | A_i / (N L_i) | no: 1/L_i |
| `dr_grpo` | r_i - mu_g | A_i / (N L_max) | yes, until a clip binds |
| `dapo` | (r_i - mu_g)/(sigma_g + eps) | A_i / sum L | yes, until a clip binds |
| `rloo` | r_i - mean_{j!=i} r_j | A_i / N (token sum) | yes, until a clip binds |
| `gspo` | (r_i - mu_g)/(sigma_g + eps) | s_i A_i / (N L_i), clipped per sequence | no: s_i and 1/L_i |
| `dfpo_min` | r_i - mu_g | sg(w~_i) A_i / (N L_max), w~_i = min_j w_j | yes, also off-policy and when a clip binds (one weight per group) |
| `dfpo_orth` | r_i - mu_g | sg(w~_i) A_i / (N L_max), sum_i A_i w~_i = 0 | for tokens the whole group shares; a prefix shared by part of a group: no |
| `positive_only` | 1[r_i > 0] | 1 / sum L over positives | nothing to cancel |
| `bnpo` | (r_i - mu_g)/(sigma_g + eps) | A_i / (M sum L_local), M micro-batches | yes, unless a step is split |
| `cispo` | (r_i - mu_g)/(sigma_g + eps) | sg(clip(rho)) A_i / sum L | yes, also when the clip binds |
| `sapo` | (r_i - mu_g)/(sigma_g + eps) | 4 rho sig (1 - sig) A_i / (N L_i), sig = sigmoid(tau (rho - 1)) | no: 1/L_i (off-policy also tau by sign of A) |
| `gmpo` | (r_i - mu_g)/(sigma_g + eps) | g_i A_i / (N L_i), g_i = exp(mean_t of log rho clipped by sign of A) | no: g_i and 1/L_i |
| `clip_cov` | (r_i - mu_g)/(sigma_g + eps) | as dapo, 0 on the covariance-selected tokens | no, where the selection takes some copies of a shared token |
| `kl_cov` | (r_i - mu_g)/(sigma_g + eps) | (rho A_i - k sign(log rho)) / sum L, k = 0.1 on selected tokens | yes on-policy; off-policy no on selected copies |
| `gpg` | alpha (r_i - mu_g), alpha = N / #{r_i != 0} | A_i / sum L, no ratio | yes, in every regime |
| `luspo` | (r_i - mu_g)/(sigma_g + eps) | s_i A_i / N, clipped per sequence | yes on-policy; off-policy no (s_i) |
| `vespo` | (r_i - mu_g)/(sigma_g + eps) | phi(W_i) A_i / sum L, W_i = prod_t rho_{i,t}, phi(1) = 1 | yes on-policy; off-policy no (phi(W_i)) |
| `dppo_tv` | (r_i - mu_g)/(sigma_g + eps) | rho A_i / sum L, 0 where pi - pi_old leaves [-eps_low, eps_high] on A's side | yes, until a threshold binds (by sign of A) |
| `dppo_kl` | (r_i - mu_g)/(sigma_g + eps) | as dppo_tv, the test on the binary KL(pi_old, pi) | yes, until a threshold binds (by sign of A) |
| `dro` | (r_i - mu_g)/(sigma_g + eps) | (A_i - beta_dro log rho) / sum L | yes on-policy; off-policy no (the same -beta_dro log rho on every copy) |
<!-- /objectives -->

"Keeps exchangeability" means: every copy of a token after one identical
history gets the same weight w_i, in the regime named, so such copies cancel
for every centred A (tests/test_loss_engines.py checks each verdict on
synthetic groups; experiments/scoreboard.py measures them). The advantage
column is ``--adv=auto``, each objective's own estimator; ``--adv`` picks any
other (advantage.py, whose table says which estimators are centred: a shared
token cancels only under equal weights *and* centred A). sapo's temperature
tau is 1.0 for A > 0 and 1.05 for A < 0; clip_cov selects tokens with
1 < (A - Abar)(log pi - mean) < 5, kl_cov the top-covariance tokens;
vespo's phi(W) = e^lam W^k e^(-lam W) is detached; dppo's eps are probability
(tv) or KL (kl) thresholds, not ratio bounds.

Switches that add to any row (each off by default):

| switch          | adds to c_{i,t}                                | exchangeability                      |
|-----------------|------------------------------------------------|--------------------------------------|
| dual_clip=C     | 0 where A < 0 and rho > C (verl clip_ratio_c,  | token PPO losses only; a shared (h,a)|
|                 |   TRL delta); for dppo, its IS weight is       | with rho > C loses *every* copy (A>0 |
|                 |   sg(min(rho, C)) instead                      | ones are cut by 1+eps_high already): |
|                 |                                                | 0 = 0, nothing left to break; for    |
|                 |                                                | 1+eps_high < rho < C it stays broken |
| beta            | -beta (1 - pi_ref/pi) * norm_i   (k3, against  | no: every copy of (h,a) gets the same|
|                 |   the frozen warm start pi_ref)                | extra k, so sum_S c = k|S| whatever  |
|                 |                                                | the rewards: a pull towards pi_ref   |
| entropy_coef=e  | nothing on c: -e grad H(pi(.|h)) / sum L at    | the same reward-free push at every   |
|                 |   every history h of the step                  | copy of h; it never cancels, and     |
|                 |                                                | exch_residual (on c) does not see it |
| kl_loss_type=k  | beta's estimator: k1, k2, k3 (default), abs,   | k3's verdict, for every k (k1 adds   |
|                 |   or k1+/k3+/abs+ (value of k, gradient of k2) | -beta norm_i even where pi = pi_ref) |
| agg=mode        | norm_i of verl's loss_agg_mode instead of the  | token-mean, token-sum, seq-mean-     |
|                 |   row's own (not for positive_only, bnpo, gmpo,| token-sum(-norm): equal; seq-mean-   |
|                 |   sapo, whose aggregation defines them)        | token-mean: 1/L_i breaks it          |
| top_entropy_    | 0 on tokens below the (1-q) entropy quantile   | copies share their history, so their |
|   quantile=q    |   of the micro-batch (TRL)                     | entropy: kept together; a split step |
|                 |                                                | can cut them apart (two thresholds)  |
| off_policy_mask_| 0 on whole sequences with A < 0 and            | on-policy nothing is dropped; off-   |
|   threshold=d   |   mean_t log(pi_old/pi) > d (TRL, DS-V3.2)     | policy the copies in dropped A<0     |
|                 |                                                | sequences lose weight: no            |

Token-level objectives (grpo, dr_grpo, dapo, rloo, positive_only) use the PPO
surrogate per token, ``-min(rho A, clip(rho, 1-eps_low, 1+eps_high) A)``,
whose coefficient is ``rho A / norm`` where the clip does not bind and 0 where
it does. All copies of a shared (h, a) have the *same* rho, so token ratios
keep exchangeability; an asymmetric clip does not: when rho > 1+eps_high the
A>0 copies lose their gradient and the A<0 ones keep it (clip-higher, DAPO,
makes this more lopsided). ``gspo`` uses one ratio s_i per sequence, clipped
per sequence; different copies carry different s_i.

DFPO [P1] takes the per-sequence importance weights ``w_i = sg(s_i)`` and,
inside each group, *before* the gradient and with a stop-gradient, replaces
them by

    Min-Replace     w~_i = min_j w_j
    Adv-Orthogonal  w~   = w - (A.w / |A|^2) A,        so that sum_i A_i w~_i = 0

Either way a token shared by the whole group cancels exactly, on- and
off-policy, and no clip is needed (``--clip`` on a dfpo loss truncates w to
[1-eps_low, 1+eps_high] before the transform, which keeps the property). A
prefix that only part of a group shares cancels under Min-Replace (one weight
for the whole group), not under Adv-Orthogonal (its w~_i differ).

On-policy (one mini-batch, one epoch: rho = s = w = 1, no clip binds):
dr_grpo, dfpo_min and dfpo_orth coincide exactly (same advantage, same
coefficient); dapo equals grpo when all lengths are equal; gspo's coefficient
equals grpo's. They differ only once the data are reused off-policy
(``--minibatches`` > 1 or ``--epochs`` > 1 in train.py).

``positive_only`` has A >= 0, so only the upper clip bound can ever bind;
``--clip=higher`` is allowed and simply sets that bound to 1+eps_high.

Groups whose rewards are all equal have A = 0: they add nothing to the
gradient but still count in N and sum L.

The engine objectives (bnpo, cispo, sapo, gmpo, clip_cov, kl_cov, gpg,
luspo, vespo, dppo_tv, dppo_kl, dro) and the switches are implemented in
loss_engines.py, whose docstring says which upstream function each one
follows and what differs; the advantage estimators in advantage.py.
"""

import torch

import advantage as A
import loss_engines

LOSSES = ("grpo", "dr_grpo", "dapo", "rloo", "gspo", "dfpo_min", "dfpo_orth", "positive_only",
          "bnpo", "cispo", "sapo", "gmpo", "clip_cov", "kl_cov", "gpg", "luspo", "vespo",
          "dppo_tv", "dppo_kl", "dro")
CLIPS = ("none", "sym", "higher")
NO_CLIP = ("sapo", "kl_cov", "gpg", "vespo", "dro")  # no ratio clip: they need --clip=none
# Objectives whose step depends on how it is split, as in their engines: bnpo
# normalises by each micro-batch's own tokens; clip_cov and kl_cov pick their
# tokens by a covariance computed inside each micro-batch. Every other objective
# gives the same update however a step is split (tests/test_ddp.py).
SPLIT_DEPENDENT = ("bnpo", "clip_cov", "kl_cov")
DUAL_CLIP = ("grpo", "dr_grpo", "dapo", "bnpo", "rloo", "dppo_tv", "dppo_kl")  # dppo: its IS cap
# --agg: verl's loss_agg_mode names, as the weight norm_i of every token of sequence i
AGGS = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
AGG_FIXED = ("positive_only", "bnpo", "gmpo", "sapo")  # their aggregation is part of their definition
AGG_AS = {"token-mean": "dapo", "seq-mean-token-sum": "rloo", "seq-mean-token-mean": "grpo",
          "seq-mean-token-sum-norm": "dr_grpo"}  # the row whose own norm_i each mode is
DFPO = ("dfpo_min", "dfpo_orth")


# ----------------------------------------------------------------------------- DFPO

def min_replace(w, adv, group):
    """w~_i = min_{j in group(i)} w_j."""
    g = A.compact(group)
    K = int(g.max()) + 1
    mins = torch.full((K,), float("inf"), dtype=w.dtype, device=w.device)
    return mins.scatter_reduce(0, g, w, "amin")[g]


def adv_orthogonal(w, adv, group):
    """w~ = w - (A.w / |A|^2) A inside each group; unchanged where |A| = 0."""
    adv = adv.to(w.dtype)
    g = A.compact(group)
    K = int(g.max()) + 1
    dot = torch.zeros(K, dtype=w.dtype, device=w.device).index_add_(0, g, adv * w)
    nrm = torch.zeros(K, dtype=w.dtype, device=w.device).index_add_(0, g, adv * adv)
    coef = torch.where(nrm > 0, dot / nrm.clamp(min=1e-12), torch.zeros_like(nrm))
    return w - coef[g] * adv


# ----------------------------------------------------------------------------- objective

def step_counts(mask, adv, loss, max_len=None, micro_batches=1):
    """Denominators of one optimizer step: N, sum L, sum L over positives, L_max,
    and M, the micro-batches it is split into (only ``bnpo`` reads M).
    Pass them to ``policy_loss`` when a step is split into micro-batches."""
    lens = mask.sum(1)
    return {"n_seqs": mask.shape[0], "n_tokens": int(lens.sum()),
            "n_pos_tokens": int(lens[adv > 0].sum()),
            "max_len": int(max_len if max_len is not None else lens.max()),
            "micro_batches": int(micro_batches)}


def _token_norm(loss, lens, counts, agg=None):
    """Per-sequence aggregation weight so that loss = sum_{i,t} norm_i * l_{i,t}:
    the objective's own, or verl's ``loss_agg_mode`` ``agg`` (``--agg``)."""
    N, L_max, toks = counts["n_seqs"], counts["max_len"], max(counts["n_tokens"], 1)
    const = lambda v: torch.full_like(lens, v, dtype=torch.float)
    if agg is not None and loss not in AGG_FIXED:  # token-sum, or some row's own aggregation
        if agg == "token-sum":
            return const(1.0)
        loss = AGG_AS[agg]
    if loss in ("grpo", "gspo", "sapo", "gmpo"):
        return 1.0 / (N * lens.clamp(min=1).float())
    if loss in ("dr_grpo", "dfpo_min", "dfpo_orth"):
        return const(1.0 / (N * L_max))
    if loss in ("dapo", "cispo", "clip_cov", "kl_cov", "gpg", "vespo", "dppo_tv", "dppo_kl", "dro"):
        return const(1.0 / toks)
    if loss == "bnpo":  # this micro-batch's own tokens, times M micro-batches
        return const(1.0 / (max(int(lens.sum()), 1) * counts.get("micro_batches", 1)))
    if loss in ("rloo", "luspo"):
        return const(1.0 / N)
    if loss == "positive_only":
        return const(1.0 / max(counts["n_pos_tokens"], 1))
    raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")


def agg_of(flag):
    """--agg's value as policy_loss's ``agg``: None for auto (the objective's own)."""
    return None if flag == "auto" else flag


def sequence_ratio(new_logp, old_logp, mask):
    """s_i = exp(mean_t log rho_{i,t}), detached: GSPO's ratio and DFPO's w_i."""
    lens = mask.sum(1).clamp(min=1)
    return (((new_logp - old_logp) * mask).sum(1) / lens).detach().exp()


def dfpo_weights(seq_ratio, adv, group, loss, bounds):
    """DFPO's w~ (stop-gradient): truncate w to the clip bounds if any, then
    Min-Replace or Adv-Orthogonal inside each group of the rows given. A
    *per-group statistic*: give it every row of the optimizer step, also those
    in other micro-batches or processes (train.py does)."""
    w = seq_ratio if bounds is None else seq_ratio.clamp(*bounds)
    return (min_replace if loss == "dfpo_min" else adv_orthogonal)(w, adv, group).detach()


def clip_bounds(clip, clip_low, clip_high):
    if clip == "none":
        return None
    if clip == "sym":
        return 1.0 - clip_low, 1.0 + clip_low
    if clip == "higher":
        return 1.0 - clip_low, 1.0 + clip_high
    raise ValueError(f"unknown clip {clip!r}; choose one of {', '.join(CLIPS)}")


def ppo_term(ratio, adv, bounds, dual_clip=0.0):
    """-min(rho A, clip(rho) A) and whether the clip binds (gradient zero).
    With ``dual_clip=C`` > 1 and A < 0 the objective is also floored at C A, so
    a negative token with rho > C loses its gradient too (verl's dual clip)."""
    unclipped = ratio * adv
    if bounds is None:
        return -unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    clipped = ratio.clamp(*bounds) * adv
    obj, binds = torch.minimum(unclipped, clipped), clipped < unclipped
    if dual_clip:
        floor = dual_clip * adv
        low = (adv < 0) & (obj < floor)
        obj, binds = torch.where(low, floor, obj), binds | low
    return -obj, binds


def policy_loss(new_logp, old_logp, mask, adv, group, loss="grpo", clip="sym",
                clip_low=0.2, clip_high=0.28, counts=None, dual_clip=0.0, beta=0.0,
                ref_logp=None, entropy_coef=0.0, entropy=None, cov_ratio=None, weights=None,
                kl_loss_type="k3", agg=None, dro_beta=0.0, keep=None):
    """The scalar loss of one (micro-)batch and a dict of stats.

    new_logp, old_logp: [N,T] log-probs of the sampled tokens under the current
    and the sampling policy; mask: [N,T] bool; adv: [N]; group: [N] group ids;
    counts: the optimizer step's denominators (``step_counts``), defaults to
    this batch's own. ``dual_clip``, ``beta`` with ``ref_logp`` [N,T] (the
    frozen reference) and ``kl_loss_type``, ``entropy_coef`` with ``entropy``
    [N,T] (differentiable token entropies of the current policy), ``agg`` and
    ``keep`` [N,T] bool (the tokens whose policy term keeps its gradient:
    loss_engines.entropy_keep, off_policy_keep) are the switches of the second
    table; ``cov_ratio`` overrides verl's 2e-4 for clip_cov and kl_cov; ``dro_beta``
    is dro's coefficient. weights: DFPO's w~ for these rows computed over the
    whole step (``dfpo_weights``), defaults to this batch's own.
    """
    mask_f = mask.float()
    lens = mask.sum(1)
    if counts is None:
        counts = step_counts(mask, adv, loss)
    norm = _token_norm(loss, lens, counts, agg)  # [N]
    bounds = clip_bounds(clip, clip_low, clip_high)
    pol_logp = new_logp if keep is None else torch.where(keep, new_logp, new_logp.detach())
    log_ratio = (pol_logp - old_logp) * mask_f
    seq_log_ratio = log_ratio.sum(1) / lens.clamp(min=1)
    seq_ratio = seq_log_ratio.detach().exp()
    clip_frac = torch.tensor(0.0)
    stats = {}
    opts = {"cov_ratio": cov_ratio or loss_engines.COV["ratio"], "dro_beta": dro_beta, "tis_cap": dual_clip}

    if loss in ("gspo", "luspo"):
        s = seq_log_ratio.exp()  # differentiable: d s_i = s_i * mean_t d log pi
        per_seq, clipped = ppo_term(s, adv, bounds)
        total = (per_seq * norm * lens).sum()
        clip_frac = (clipped & (lens > 0)).float().sum() / max(int((lens > 0).sum()), 1)
    elif loss in DFPO:
        w = dfpo_weights(seq_ratio, adv, group, loss, bounds) if weights is None else weights
        total = -((w * adv * norm)[:, None] * pol_logp * mask_f).sum()
        if bounds is not None:
            clip_frac = ((seq_ratio < bounds[0]) | (seq_ratio > bounds[1])).float().mean()
    elif loss in loss_engines.ENGINE:
        total, clip_frac, stats = loss_engines.ENGINE[loss](pol_logp, log_ratio, mask, adv, norm, bounds, opts)
    else:
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")
        ratio = log_ratio.exp()
        per_tok, clipped = ppo_term(ratio, adv[:, None], bounds, dual_clip)
        if loss == "clip_cov":  # the PPO token loss, less the tokens its covariance picks
            per_tok, clipped, stats = loss_engines.clip_cov_cut(per_tok, clipped, new_logp, mask, adv,
                                                                opts["cov_ratio"])
        total = (per_tok * norm[:, None] * mask_f).sum()
        clip_frac = (clipped & mask).float().sum() / mask_f.sum().clamp(min=1)

    if beta:  # an estimate of KL(pi || pi_ref) per token, aggregated like the objective
        kl = loss_engines.kl_penalty(new_logp * mask_f, ref_logp * mask_f, kl_loss_type) * mask_f
        total = total + beta * (kl * norm[:, None]).sum()
        stats["kl_ref"] = float(kl.detach().sum() / mask_f.sum().clamp(min=1))
    if entropy_coef:  # minus the mean token entropy over the step's tokens
        total = total - entropy_coef * (entropy * mask_f).sum() / max(counts["n_tokens"], 1)
        stats["entropy"] = float((entropy.detach() * mask_f).sum() / mask_f.sum().clamp(min=1))
    if keep is not None:
        stats["kept_frac"] = float((keep & mask).float().sum() / mask_f.sum().clamp(min=1))

    live = lens > 0
    stats.update({"clip_frac": float(clip_frac),
                  "seq_ratio": float(seq_ratio[live].mean()) if bool(live.any()) else 1.0,
                  "abs_log_ratio": float(log_ratio.detach().abs().sum() / mask_f.sum().clamp(min=1))})
    return total, stats


def coefficients(loss_value, new_logp):
    """c_{i,t} = -d loss / d log pi_new(y_{i,t}), by autograd through the loss
    only (the model is not touched), e.g. for ``first_token_residual``."""
    (g,) = torch.autograd.grad(loss_value, new_logp, retain_graph=True)
    return -g


def first_token_residual(coef, group):
    """First-token residual: per group, |sum_i c_i| / sum_i |c_i| over the
    coefficients of the first completion token (whose history, the prompt, the
    whole group shares), averaged over groups with any weight.

    It sums over the first tokens *whatever they are*: when the rollouts of a
    group start with different tokens, their legitimate per-token differences
    (other ratios, other clips) count too, so it can be non-zero although every
    (history, token) set cancels. ``exch_residual`` is the exact measure; this one
    is kept because it is cheap and is what the exercises use."""
    c0 = coef[:, 0]
    g = A.compact(group)
    K = int(g.max()) + 1
    net = torch.zeros(K, dtype=c0.dtype).index_add_(0, g, c0).abs()
    mass = torch.zeros(K, dtype=c0.dtype).index_add_(0, g, c0.abs())
    live = mass > 1e-12
    return float((net[live] / mass[live]).mean()) if bool(live.any()) else 0.0


def history_token_sets(tokens, mask, group):
    """Ids of (group, history, token) sets [N,T] (-1 off the mask).

    Two completion tokens (i,t) and (j,u) get the same id iff they are in the
    same group (so after the same prompt), at the same position t = u, with the
    same completion prefix y_{<t} and the same token y_t: copies of one token
    after one identical history. Built as a trie over each group's completions."""
    g = A.compact(group).tolist()
    tok, m = tokens.tolist(), mask.tolist()
    ids = torch.full(tokens.shape, -1, dtype=torch.long)
    trie = {}
    for i in range(len(tok)):
        node = ("g", g[i])
        for t in range(len(tok[i])):
            if not m[i][t]:
                break
            node = trie.setdefault((node, tok[i][t]), len(trie))
            ids[i, t] = node
    return ids


def exch_residual(coef, adv, tokens, mask, group):
    """The exchangeability residual, per (history, token) set (logged as exch_residual).

    Inside a group, the copies of one token a after one identical history h form
    a set S (``history_token_sets``). If every copy got the same weight w, the
    set's net coefficient would be w * sum_S A_i: the credit the rewards give to
    a after h, zero when S is the whole group. The residual is what the weights
    add on top of that:

        res_S = |sum_S c_i - wbar_S sum_S A_i| / sum_S |c_i|,
        wbar_S = sum_S sign(A_i) c_i / sum_S |A_i|   (the |A|-weighted mean weight).

    With c_i = w_i A_i this is |sum_S A_i (w_i - wbar)| / (wbar sum_S |A_i|): 0 when
    the weights are equal, whatever the advantages. The converse does not hold:
    unequal weights with sum_S A_i (w_i - wbar) = 0 give 0 too (w = (1.15, 0.95,
    0.85, 1.05) with A = (1, -1, 1, -1); Adv-Orthogonal), so 0 says that this
    step's copies cancel, not that the objective is exchangeable. On a set that
    holds the whole group (sum_S A_i = 0) it is the plain |sum_S c_i| / sum_S |c_i|.
    Returns the mean of res_S over sets with at least two copies and non-zero
    mass (0.0 if there are none)."""
    ids = history_token_sets(tokens, mask, group)
    on = ids >= 0
    flat = ids[on]
    if flat.numel() == 0:
        return 0.0
    c = coef.detach().double()[on]
    a = adv.detach().double()[:, None].expand_as(ids)[on]
    K = int(flat.max()) + 1
    add = lambda x: torch.zeros(K, dtype=torch.float64).index_add_(0, flat, x)
    net, mass, n = add(c), add(c.abs()), add(torch.ones_like(c))
    sum_a, abs_a, signed = add(a), add(a.abs()), add(torch.sign(a) * c)
    wbar = torch.where(abs_a > 0, signed / abs_a.clamp(min=1e-300), torch.zeros_like(abs_a))
    live = (n >= 2) & (mass > 1e-12 * float(mass.max().clamp(min=1e-300)))
    res = (net - wbar * sum_a).abs() / mass.clamp(min=1e-300)
    return float(res[live].mean()) if bool(live.any()) else 0.0

