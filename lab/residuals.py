"""residuals.py: how far one optimizer step's copies of a shared token were from cancelling.

What it teaches
---------------
Inside a group, the copies of one token a after one identical history h get the
coefficients c_i = -d loss / d log pi(a | h) (``coefficients``). With equal weights
(c_i = w Â_i) and centred advantages their sum is the credit the rewards give a after
h, and zero when the whole group shares it. Two residuals measure the rest on every
step (THEORY.md section 2.1): ``first_token_residual`` over the first completion
token, cheap and approximate, and ``exch_residual`` per (history, token) set, exact.
The cancellation ledger (ledger.py) splits what did not cancel by cause.
"""

import torch

import loss


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
    g = loss.compact(group)
    n_groups = int(g.max()) + 1
    net = torch.zeros(n_groups, dtype=c0.dtype, device=c0.device).index_add_(0, g, c0).abs()
    mass = torch.zeros(n_groups, dtype=c0.dtype, device=c0.device).index_add_(0, g, c0.abs())
    live = mass > 1e-12
    return float((net[live] / mass[live]).mean()) if bool(live.any()) else 0.0


def history_token_sets(tokens, mask, group):
    """Ids of (group, history, token) sets [N,T] (-1 off the mask), numbered 0..K-1.

    Two completion tokens (i,t) and (j,u) get the same id exactly when they are
    in the same group (so after the same prompt), at the same position t = u,
    with the same completion prefix y_{<t} and the same token y_t: copies of one
    token after one identical history. Built one position at a time: a row's id at t
    numbers the pair (its id at t - 1, y_t) among the pairs at t (a row's id before
    its first token is its group), so a prefix never needs comparing twice. A row
    stops at its first masked position."""
    tokens, mask = tokens.cpu(), mask.cpu().bool()
    n, T = tokens.shape
    ids = torch.full((n, T), -1, dtype=torch.long, device="cpu")
    if n == 0 or T == 0:
        return ids
    node = loss.compact(group.cpu()).long()  # the history so far, numbered at this position
    alive = torch.ones(n, dtype=torch.bool, device="cpu")
    low = int(tokens[mask].min()) if bool(mask.any()) else 0
    span = (int(tokens[mask].max()) - low + 1) if bool(mask.any()) else 1
    start = 0
    for t in range(T):
        alive &= mask[:, t]
        if not bool(alive.any()):
            break
        # (history, token) as one integer: node < n and span <= the vocabulary, so it fits
        key = node[alive] * span + (tokens[alive, t].long() - low)
        uniq, inv = torch.unique(key, return_inverse=True)
        node = node.clone()
        node[alive] = inv
        ids[alive, t] = start + inv
        start += len(uniq)
    return ids


def per_token(adv, like):
    """Â as an [N, T] tensor shaped like ``like``: a sequence's Â_i [N] on each of its tokens,
    or an advantage that is already per token (verl's optimal_token_baseline) as it is."""
    return (adv if adv.dim() == 2 else adv[:, None]).expand_as(like)


def exch_residual(coef, adv, tokens, mask, group):
    """The exchangeability residual, per (history, token) set (logged as exch_residual).

    Inside a group, the copies of one token a after one identical history h form
    a set S (``history_token_sets``). If every copy got the same weight w, the
    set's net coefficient would be w * sum_S Â_i: the credit the rewards give to
    a after h, zero when S is the whole group. The residual is what the weights
    add on top of that:

        res_S = |sum_S c_i - wbar_S sum_S Â_i| / sum_S |c_i|,
        wbar_S = sum_S sign(Â_i) c_i / sum_S |Â_i|   (the |Â|-weighted mean weight).

    With c_i = w_i Â_i this is |sum_S Â_i (w_i - wbar)| / (wbar sum_S |Â_i|): 0 when
    the weights are equal, whatever the advantages. The converse does not hold:
    unequal weights with sum_S Â_i (w_i - wbar) = 0 give 0 too (w = (1.15, 0.95,
    0.85, 1.05) with Â = (1, -1, 1, -1); Adv-Orthogonal), so 0 says that this
    step's copies cancel, not that the objective is exchangeable. On a set that
    holds the whole group (sum_S Â_i = 0) it is the plain |sum_S c_i| / sum_S |c_i|.
    ``adv``: Â_i [N], or one advantage per token [N, T] (verl's optimal_token_baseline),
    whose copies' A_{i,t} then stand for the Â_i. Returns the mean of res_S over sets with
    at least two copies and non-zero mass (0.0 if there are none)."""
    ids = history_token_sets(tokens, mask, group)
    on = ids >= 0
    flat = ids[on]
    if flat.numel() == 0:
        return 0.0
    c = coef.detach().double().cpu()[on]  # bookkeeping on the CPU, where ids live
    a = per_token(adv.detach().double().cpu(), ids)[on]
    n_sets = int(flat.max()) + 1

    def per_set(v):
        return torch.zeros(n_sets, dtype=torch.float64, device="cpu").index_add_(0, flat, v)

    net, mass, n = per_set(c), per_set(c.abs()), per_set(torch.ones_like(c))
    sum_a, abs_a, signed = per_set(a), per_set(a.abs()), per_set(torch.sign(a) * c)
    wbar = torch.where(abs_a > 0, signed / abs_a.clamp(min=1e-300), torch.zeros_like(abs_a))
    live = (n >= 2) & (mass > 1e-12 * float(mass.max().clamp(min=1e-300)))
    res = (net - wbar * sum_a).abs() / mass.clamp(min=1e-300)
    return float(res[live].mean()) if bool(live.any()) else 0.0
