"""loss.py: GRPO's objective and its relatives, each one function beside its equation.

What it teaches
---------------
A critic-free objective turns one reward r_i per completion into a loss on every
token of it, in four steps: the first is ``advantages``, once per rollout batch; each
objective below does the other three (``token_loss`` for the PPO-clipped ones):

  1. the advantage Â_i, one number per completion, from its group's rewards
     (``advantages``: computed once per rollout batch, before any mini-batch);
  2. the per-token ratio rho_{i,t} = pi(y_{i,t} | s_{i,t}) / pi_old(y_{i,t} | s_{i,t}),
     1 on-policy, up to rounding (pi_old: the policy that sampled the completion);
  3. the clip: PPO's min(rho Â, clip(rho, 1-eps, 1+eps) Â) drops a token's gradient
     once rho has left the interval on the side Â pushes it to;
  4. the aggregation: the weight agg_i of every token of completion i.

The gradient is -sum_{i,t} c_{i,t} grad log pi(y_{i,t}) with the *coefficient*
c_{i,t} = -d loss / d log pi(y_{i,t}) = rho_{i,t} Â_i agg_i (0 where the clip binds).

Why the aggregation matters: cancellation [P1, arXiv 2604.13088]
------------------------------------------------------------------
Take a token a that several rollouts of one group write after the same history h
(the first completion token, a shared format prefix). Its copies' gradients are one
vector, (sum_i c_i) grad log pi(a | h). Write c_i = w_i Â_i. The advantages are
centred in their group (sum_i Â_i = 0), so with *equal* weights w_i = w the copies of
a token the whole group shares cancel exactly, for every Â: what the rewards do not
tell apart is not moved. [P1] calls equal weights *gradient exchangeability*:

    grpo       agg_i = 1 / (N L_i)     unequal when the lengths L_i differ
    dr_grpo    agg_i = 1 / (N L_max)   equal
    dapo       agg_i = 1 / sum_j L_j   equal
    dfpo_min   sg(w~_i) / (N L_max)    equal inside a group, also off-policy (w~ = the min)
    dfpo_orth  sg(w~_i) / (N L_max)    unequal, but sum_i Â_i w~_i = 0 in every group: the
                                       tokens the *whole* group shares still cancel

Off-policy (a rollout batch reused for several optimizer steps), every copy of
(h, a) has the same token ratio rho, so token ratios keep the weights equal. PPO's clip
does not, even a symmetric one (--clip=sym): it drops a copy's gradient once rho has
left the interval on the side its Â pushes to, so the copies of one sign lose theirs
and the others keep them. A sequence-level ratio (one weight per completion) is unequal
too; DFPO's two detached group transforms repair it: dfpo_min gives a group one
weight, dfpo_orth keeps unequal weights with sum_i Â_i w~_i = 0 in each group.

Notation: N = completions in the optimizer step, L_i = length of completion i (its
EOS included), L_max = the task's longest completion, sum_j L_j = completion tokens
in the step, mu_g and sigma_g = mean and sample sd of group g's rewards, sg = stop-
gradient. Every objective returns (loss, clip fraction). lab/objectives.py holds the
engines' catalogue (twenty objectives, twelve estimators, the switches) built on
these pieces; THEORY.md sections 1-3 derive them.
"""

import functools

import torch

EPS = 1e-6  # added to sigma_g (TRL uses 1e-4)


# ----------------------------------------------------------------------------- 1. advantages

def groups(group):
    """Group ids -> (each row's group numbered 0..K-1, K). Any labels work, also a subset
    of a batch's groups. Finding them reads the ids once (torch.unique)."""
    ids, g = torch.unique(group, return_inverse=True)
    return g, len(ids)


def compact(group):
    """Group ids -> 0..K-1 (``groups`` without K)."""
    return groups(group)[0]


def row_group_sum(x, g, k):
    """The sum of x over each row's group (numbered 0..k-1 by ``groups``), per row."""
    return torch.zeros(k, dtype=x.dtype, device=x.device).index_add_(0, g, x)[g]


def group_sum(x, group):
    """The sum of x over each row's group, broadcast back to the rows."""
    return row_group_sum(x, *groups(group))


def group_mean(x, group):
    """The mean of x over each row's group, and the group's size, per row."""
    n = group_sum(torch.ones_like(x), group)
    return group_sum(x, group) / n, n


def group_std(x, group):
    """The sample (Bessel-corrected) sd of x inside each row's group, as TRL and verl."""
    mu, n = group_mean(x, group)
    var, _ = group_mean((x - mu) ** 2, group)
    return (var * n / (n - 1)).sqrt()


def advantages(rewards, group, scale=True, eps=EPS):
    """Â_i = (r_i - mu_g) / (sigma_g + eps) (GRPO), or r_i - mu_g with ``scale=False``
    (Dr. GRPO: no division by sigma, which weighs groups by their spread). Centred in
    every group either way. Pass the whole rollout batch: the statistics are per group."""
    r = rewards.float()
    g, k = groups(group)
    n = row_group_sum(torch.ones_like(r), g, k)  # G, the group's size
    mu = row_group_sum(r, g, k) / n
    if not scale:
        return r - mu
    var = row_group_sum((r - mu) ** 2, g, k) / n
    sigma = (var * n / (n - 1)).sqrt()  # the sample sd (Bessel), as TRL and verl
    return (r - mu) / (sigma + eps)


def mixed_fraction(rewards, group):
    """The share of groups whose rewards are not all equal. Only such a *mixed* group has
    a non-zero Â, so only it carries a learning signal."""
    g, k = groups(group)
    r = rewards.float()
    # a row is in a mixed group when another row of its group has another reward
    differs = ((g[:, None] == g[None, :]) & (r[:, None] != r[None, :])).any(1)
    mixed = row_group_sum(differs.float(), g, k) > 0  # per row: is its group mixed?
    same = torch.zeros(k, dtype=torch.bool, device=g.device).index_put_((g,), ~mixed)
    return 1.0 - int(same.sum()) / k


# ----------------------------------------------------------------------------- the pieces

def step_counts(mask, adv, max_len=None, micro_batches=1):
    """The denominators of one optimizer step: N (``n_seqs``), sum L (``n_tokens``), sum L
    over positive rollouts, L_max and the micro-batches M it is split into. A step split
    into parts (micro-batches, processes) passes every part the whole step's counts."""
    lens = mask.sum(1)
    # one read of the three counts (each read makes a GPU wait)
    tokens, pos_tokens, longest = torch.stack([lens.sum(), (lens * (adv > 0)).sum(),
                                               lens.max()]).tolist()
    return {"n_seqs": mask.shape[0], "n_tokens": int(tokens), "n_pos_tokens": int(pos_tokens),
            "max_len": int(max_len if max_len is not None else longest),
            "micro_batches": int(micro_batches)}


# --clip: what the ratio clip bounds rho to (eps_low, eps_high = --clip_low, --clip_high)
CLIPS = {"none": "no clip", "sym": "1±clip_low", "higher": "1-clip_low, 1+clip_high"}


def clip_bounds(clip, clip_low, clip_high):
    """(1 - eps_low, 1 + eps_high) of ``--clip``, or None for no clip."""
    if clip == "none":
        return None
    if clip == "sym":
        return 1.0 - clip_low, 1.0 + clip_low
    if clip == "higher":
        return 1.0 - clip_low, 1.0 + clip_high
    raise ValueError(f"unknown clip {clip!r}; choose one of {', '.join(CLIPS)}")


def ppo_clip(ratio, adv, bounds):
    """-min(rho Â, clip(rho) Â) per token, and where the clip binds (no gradient there).
    The clipped branch is taken only when it is the smaller: rho above 1 + eps_high
    with Â > 0, or below 1 - eps_low with Â < 0."""
    unclipped = ratio * adv
    if bounds is None:
        return -unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    clipped = ratio.clamp(*bounds) * adv
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def clip_fraction(binds, mask):
    """The share of completion tokens whose clip binds."""
    return (binds & mask).float().sum() / mask.float().sum().clamp(min=1)


def token_loss(logp, old_logp, mask, adv, bounds, agg):
    """Steps 2-4 of every token-level objective: the PPO-clipped surrogate per token, each
    token of completion i weighted agg_i. Returns (loss, clip fraction)."""
    log_ratio = (logp - old_logp) * mask.float()  # 2. log rho; 0 on padding
    per_token, binds = ppo_clip(log_ratio.exp(), adv[:, None], bounds)  # 3.
    return (per_token * agg[:, None] * mask.float()).sum(), clip_fraction(binds, mask)  # 4.


# ----------------------------------------------------------------------------- the objectives

def grpo(logp, old_logp, mask, adv, group, counts, clip):
    """GRPO (DeepSeekMath), TRL's loss_type="grpo", verl's seq-mean-token-mean:

        loss = -1/N sum_i 1/L_i sum_t min(rho_{i,t} Â_i, clip(rho_{i,t}) Â_i)
        Â_i  = (r_i - mu_g) / (sigma_g + eps)                   advantages(scale=True)

    c_{i,t} = rho Â_i / (N L_i): the mean over a completion's tokens, then over the N
    completions. A shorter completion weighs each of its tokens more, so the copies of a
    token the whole group writes do not cancel when the lengths differ with the reward
    (THEORY.md 2.7). (``group`` is read by DFPO only: the advantages already hold each
    group's statistics.)"""
    lens = mask.sum(1)
    agg = 1.0 / (counts["n_seqs"] * lens.clamp(min=1).float())  # 4. 1 / (N L_i)
    return token_loss(logp, old_logp, mask, adv, clip, agg)  # 2-3: ratio, clip


def dr_grpo(logp, old_logp, mask, adv, group, counts, clip):
    """Dr. GRPO (arXiv 2503.20783), TRL's loss_type="dr_grpo", verl's seq-mean-token-sum-norm:

        loss = -1/(N L_max) sum_i sum_t min(rho_{i,t} Â_i, clip(rho_{i,t}) Â_i)
        Â_i  = r_i - mu_g                                       advantages(scale=False)

    c_{i,t} = rho Â_i / (N L_max): the weight 1/(N L_max) is one constant for every token,
    so the copies of a token the whole group writes cancel until a clip binds on some."""
    lens = mask.sum(1)
    agg = torch.full_like(lens, 1.0 / (counts["n_seqs"] * counts["max_len"]), dtype=torch.float)
    return token_loss(logp, old_logp, mask, adv, clip, agg)


def dapo(logp, old_logp, mask, adv, group, counts, clip):
    """DAPO (arXiv 2503.14476), TRL's loss_type="dapo", verl's token-mean:

        loss = -1/sum_j L_j sum_i sum_t min(rho_{i,t} Â_i, clip(rho_{i,t}) Â_i)
        Â_i  = (r_i - mu_g) / (sigma_g + eps)                   advantages(scale=True)

    c_{i,t} = rho Â_i / sum_j L_j: every token of the step counts once, whatever its
    completion's length. DAPO's own clip is clip-higher, wider above than below
    (--clip=higher: 1-0.2, 1+0.28)."""
    lens = mask.sum(1)
    agg = torch.full_like(lens, 1.0 / max(counts["n_tokens"], 1), dtype=torch.float)
    return token_loss(logp, old_logp, mask, adv, clip, agg)


# ----------------------------------------------------------------------------- DFPO [P1]

def sequence_ratio(logp, old_logp, mask):
    """s_i = exp(mean_t log rho_{i,t}), detached: the sequence's importance weight w_i."""
    lens = mask.sum(1).clamp(min=1)
    return (((logp - old_logp) * mask).sum(1) / lens).detach().exp()


def min_replace(w, adv, group):
    """Min-Replace: w~_i = min_{j in group(i)} w_j, one weight for the whole group."""
    g = compact(group)
    n_groups = int(g.max()) + 1
    mins = torch.full((n_groups,), float("inf"), dtype=w.dtype, device=w.device)
    return mins.scatter_reduce(0, g, w, "amin")[g]


def adv_orthogonal(w, adv, group):
    """Adv-Orthogonal: w~ = w - (Â.w / |Â|^2) Â inside each group, so that sum_i Â_i w~_i
    = 0; unchanged where |Â| = 0 (a group whose rewards are all equal)."""
    adv = adv.to(w.dtype)
    g = compact(group)
    n_groups = int(g.max()) + 1
    dot = torch.zeros(n_groups, dtype=w.dtype, device=w.device).index_add_(0, g, adv * w)
    nrm = torch.zeros(n_groups, dtype=w.dtype, device=w.device).index_add_(0, g, adv * adv)
    coef = torch.where(nrm > 0, dot / nrm.clamp(min=1e-12), torch.zeros_like(nrm))
    return w - coef[g] * adv


def dfpo_weights(seq_ratio, adv, group, transform, bounds):
    """DFPO's w~: truncate w_i = s_i to the clip bounds (if any), then the group transform,
    under a stop-gradient (without it the transform would couple the copies' gradients
    again). A per-group statistic: give it every row of the optimizer step."""
    w = seq_ratio if bounds is None else seq_ratio.clamp(*bounds)
    return transform(w, adv, group).detach()


def dfpo(logp, old_logp, mask, adv, group, counts, clip, transform):
    """DFPO [P1]: a detached group transform of the sequence ratios, no clip on the gradient:

        loss = -1/(N L_max) sum_i sg(w~_i) Â_i sum_t log pi(y_{i,t})
        w~   = transform(clip(s)) inside each group,  s_i = exp(mean_t log rho_{i,t})
        Â_i  = r_i - mu_g                                       advantages(scale=False)

    c_{i,t} = w~_i Â_i / (N L_max). On-policy s = 1 and both transforms return 1: this is
    dr_grpo. w~ is a per-group statistic: a step split into parts passes each part the
    whole step's, as ``counts["weights"]``."""
    lens = mask.sum(1)
    weights = counts.get("weights")
    if weights is None:  # 2-3. the sequence ratio, truncated, then transformed
        weights = dfpo_weights(sequence_ratio(logp, old_logp, mask), adv, group, transform, clip)
    agg = torch.full_like(lens, 1.0 / (counts["n_seqs"] * counts["max_len"]), dtype=torch.float)
    loss = -((weights * adv * agg)[:, None] * logp * mask.float()).sum()  # 4.
    if clip is None:
        return loss, adv.new_zeros(())
    s = sequence_ratio(logp, old_logp, mask)  # the share of sequences the truncation reached
    return loss, ((s < clip[0]) | (s > clip[1])).float().mean()


dfpo_min = functools.partial(dfpo, transform=min_replace)
dfpo_orth = functools.partial(dfpo, transform=adv_orthogonal)


# ----------------------------------------------------------------------------- the registries

# --loss -> its function of (logp, old_logp, mask, adv, group, counts, clip): train.py calls
# LOSSES[--loss]. The engines' catalogue (lab/objectives.py) adds its sixteen objectives.
LOSSES = {"grpo": grpo, "dr_grpo": dr_grpo, "dapo": dapo,
          "dfpo_min": dfpo_min, "dfpo_orth": dfpo_orth}

# DFPO's group transforms, by --loss: a step split into parts computes w~ over all its rows
GROUP_TRANSFORMS = {"dfpo_min": min_replace, "dfpo_orth": adv_orthogonal}

# --adv -> Â of a whole rollout batch, from (rewards, group, lengths, greedy baseline): the
# lesson's two read the rewards and groups only; lab/estimators.py adds the engines' others.
ADVANTAGES = {
    "grpo": lambda rewards, group, lengths, baseline: advantages(rewards, group, scale=True),
    "dr_grpo": lambda rewards, group, lengths, baseline: advantages(rewards, group, scale=False),
}

# --adv=auto -> the --loss's own estimator: GRPO's scaled Â for grpo and dapo, Dr. GRPO's
# unscaled one for the rest (plumbing/config.py resolves it; the catalogue adds its own)
OWN_ADV = {"grpo": "grpo", "dr_grpo": "dr_grpo", "dapo": "grpo",
           "dfpo_min": "dr_grpo", "dfpo_orth": "dr_grpo"}

# the lesson's own names: a --loss or --adv beyond them turns the lab on (train.hooks_for)
LESSON = frozenset(LOSSES) | frozenset(ADVANTAGES)
