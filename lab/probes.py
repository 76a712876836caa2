"""probes.py: the measurements of experiments E1-E6, which make coupling visible.

What it teaches
---------------
A critic-free update gives every token of completion i the same sign, that of
its advantage Â_i. Whether a token's probability actually goes up or down is
another matter: tokens are coupled through the shared parameters. With
per-token coefficients c_{i,t} = -d loss / d log pi(y_{i,t}) (residuals.coefficients)
one SGD step of size eta changes log pi(y_i) to first order by

    Delta_i = eta * sum_j c_j * grad log pi(y_i) . grad log pi(y_j).

Holding the hidden state h fixed and moving only the untied unembedding W
(z = W h) the dot product has a closed form [P2]:

    Delta_i = eta * sum_j c_j * alpha_ij * kappa_ij,
    alpha_ij = (e_{y_i} - p_i) . (e_{y_j} - p_j),   kappa_ij = h_i . h_j.

The j = i term always has the sign of Â_i (the *self* term); the j != i terms
are the *coupling*. For two copies of the same token, alpha >= 0, large when
both are unsure, so a wrong-signed copy pulls a token against its own advantage.

Functions (batches are dicts as train.rollouts returns: prompts, tokens, mask,
logprobs, group, rewards; plus ``problems`` where a verifier is needed):
* flipping:  ``one_update`` (one optimizer step on a copy), ``token_deltas``
  (Delta = log pi_new - log pi_old per token), ``flip_table`` (boosted
  Delta > eps, suppressed Delta < -eps, stable, split by the sign of A);
* coupling:  ``coupling_terms`` (the closed form, pair by pair, with an
  optional pair mask), ``coupling_summary`` (coupling mass by same/different
  token and by confidence bins), ``coupling_by_row``, ``sign_agreement``;
* masking:   ``masked_update_deltas``: plain-SGD Deltas with (a) every same-id
  token of the opposite advantage sign removed from the gradient that moves a
  token, (b) all A < 0 tokens removed (positive-only);
* categories: ``token_categories`` (template / copy / compute / style per token; a
  sampled completion off the canonical layout is labelled by character class);
* value:     ``mc_values``, V(s_t) = mean reward of K sampled continuations;
  ``token_values`` on a subset of tokens (``pick_tokens``), ``value_gap``
  (boosted minus suppressed), ``value_bins`` (value quantiles),
  ``shuffled_advantages`` (the no-reward control).
Everything runs at temperature 1, in the model's own dtype: run the model in
float64 (``model.double()``) and Deltas of confident tokens (~1e-8) are not
float32 rounding noise. What training itself logs is in diagnostics.py.
"""

import copy
import random

import torch

import loss
import toy_tasks
from model import completion_logprobs
from sampler import sample
from toy_tasks import PAD
from lab import objectives, residuals

CATEGORIES = (
    "template",
    "copy",
    "compute",
    "style",
)  # style: choices the verifier does not check (task chain)


# ----------------------------------------------------------------------------- one update

def logp_of(model, batch, hidden=False):
    """log pi(y_t | s_t) of a batch's completion tokens [N,T] (model.completion_logprobs)."""
    return completion_logprobs(model, batch.prompts, batch.tokens, batch.mask, PAD,
                               return_hidden=hidden)


def token_coefficients(model, batch, adv, objective="grpo"):
    """c_{i,t} of one on-policy step of ``objective`` (ratio 1, no clip binds) [N,T]."""
    with torch.no_grad():
        logp = logp_of(model, batch)
    new = logp.clone().requires_grad_(True)
    counts = loss.step_counts(batch.mask, adv, max_len=batch.max_len)
    value, _ = objectives.policy_loss(
        objectives.LossBatch(new, logp, batch.mask, adv, batch.group, counts=counts),
        objectives.LossSettings(objective, clip="none"),
    )
    return residuals.coefficients(value, new).detach() * batch.mask


def one_update(
    model, batch, adv, optimizer="sgd", lr=1.0, objective="grpo", coef=None, params="all"
):
    """One optimizer step on a deep copy of ``model``; returns the copy.

    The step minimises -sum c_{i,t} log pi(y_{i,t}), whose gradient is that of
    ``objective`` on-policy. ``coef`` overrides the coefficients (masked updates).
    optimizer: "sgd" (plain, no momentum: contributions add linearly) or "adam"
    (train.py's AdamW, betas (0.9, 0.99), no weight decay; its first step is
    close to sign descent). params: "all", or "head" (only lm_head.weight moves)."""
    if coef is None:
        coef = token_coefficients(model, batch, adv, objective)
    new = copy.deepcopy(model)
    ps = [new.lm_head.weight] if params == "head" else list(new.parameters())
    for p in new.parameters():
        p.requires_grad_(any(p is q for q in ps))
    opt = (torch.optim.SGD(ps, lr=lr) if optimizer == "sgd" else
           torch.optim.AdamW(ps, lr=lr, betas=(0.9, 0.99), weight_decay=0.0))
    opt.zero_grad(set_to_none=True)
    (-(coef.detach() * logp_of(new, batch)).sum()).backward()
    opt.step()
    for p in new.parameters():
        p.requires_grad_(True)
        p.grad = None
    return new


@torch.no_grad()
def token_deltas(model_old, model_new, batch):
    """Delta = log pi_new(y) - log pi_old(y) per completion token [N,T], 0 off the mask."""
    return (logp_of(model_new, batch) - logp_of(model_old, batch)) * batch.mask


def flip_table(delta, mask, adv, eps):
    """Fractions boosted (Delta > eps), suppressed (Delta < -eps) and stable, for
    tokens of A > 0 ("pos") and A < 0 ("neg") rollouts, with the raw Deltas.
    Without coupling, pos would be all boosted and neg all suppressed; tokens
    on the wrong side of their own advantage are *flipped*."""
    out = {}
    for name, rows in (("pos", adv > 0), ("neg", adv < 0)):
        d = delta[mask & rows[:, None]]
        n = d.numel()
        frac = (lambda x: float(x.float().mean())) if n else (lambda x: None)
        out[name] = {"boosted": frac(d > eps), "suppressed": frac(d < -eps),
                     "stable": frac(d.abs() <= eps), "n": n}
        out[f"delta_{name}"] = d.tolist()
    n = out["pos"]["n"] + out["neg"]["n"]
    wrong = sum(
        (out[s][k] or 0) * out[s]["n"] for s, k in (("pos", "suppressed"), ("neg", "boosted"))
    )
    out["flipped"] = wrong / n if n else None
    return out


# ----------------------------------------------------------------------------- coupling

@torch.no_grad()
def coupling_terms(model, batch, coef, lr, keep=None):
    """Closed-form first-order Delta of an unembedding-only SGD step of size lr.

    Returns a dict over the M masked tokens (flattened row-major): ``terms``
    [M,M], terms[i,j] = lr c_j alpha_ij kappa_ij (the head has no bias);
    ``self``, ``coupling`` and ``pred`` = self + coupling per token [M]; ``y``
    token ids, ``conf`` = p_i(y_i), ``alpha``, ``kappa``. ``keep`` [M,M] bool
    drops pairs (j's contribution to i) from ``pred`` and ``coupling``."""
    mask = batch.mask
    _, h = logp_of(model, batch, hidden=True)
    H, y, c = h[mask].double(), batch.tokens[mask], coef[mask].double()
    p = torch.softmax(model.lm_head(h[mask]).double(), -1)  # the head has no bias
    E = torch.nn.functional.one_hot(y, p.shape[1]).double() - p
    alpha, kappa = E @ E.T, H @ H.T
    terms = lr * alpha * kappa * c[None, :]
    kept = terms if keep is None else terms * keep
    self_t = terms.diagonal()
    return {"terms": terms, "self": self_t, "coupling": kept.sum(1) - kept.diagonal(),
            "pred": kept.sum(1) - kept.diagonal() + self_t, "y": y, "alpha": alpha,
            "kappa": kappa, "conf": p.gather(1, y[:, None])[:, 0]}


def coupling_summary(ct, adv_tok, bins=(0.5, 0.9)):
    """Where the coupling mass sum_{i!=j} |terms_ij| sits. adv_tok: [M] advantage of
    each token's rollout. Returns shares of the mass (and of the pairs) that are
    same-token / different-token; a 3x3 share of the mass by confidence bins of
    (i, j), [0,.5), [.5,.9), [.9,1], for same- and for different-token pairs; the
    share of the mass that *opposes* token i's own advantage; mean alpha per type;
    and the fraction of A != 0 tokens whose coupling outweighs and opposes its self term."""
    T, y = ct["terms"], ct["y"]
    M = len(y)
    off = ~torch.eye(M, dtype=torch.bool, device=T.device)
    same = (y[:, None] == y[None, :]) & off
    diff = (y[:, None] != y[None, :])
    mass = T.abs() * off
    total = float(mass.sum()) or float("nan")
    edges = torch.tensor(bins, dtype=ct["conf"].dtype, device=ct["conf"].device)
    b = torch.bucketize(ct["conf"], edges, right=True)
    oppose = (torch.sign(T) * torch.sign(adv_tok)[:, None]) < 0
    grid = lambda sel: [[float((mass * sel * (b[:, None] == u) * (b[None, :] == v)).sum()) / total
                         for v in range(len(bins) + 1)] for u in range(len(bins) + 1)]
    live = adv_tok != 0
    s, cp = ct["self"], ct["coupling"]
    flip = live & (torch.sign(cp) != torch.sign(s)) & (cp.abs() > s.abs())
    return {"mass_same": float((mass * same).sum()) / total,
            "mass_diff": float((mass * diff).sum()) / total,
            "pairs_same": float(same.sum()) / max(int(off.sum()), 1),
            "opposing_same": float((mass * same * oppose).sum()) / total,
            "opposing_diff": float((mass * diff * oppose).sum()) / total,
            "alpha_same": float(ct["alpha"][same].mean()) if same.any() else None,
            "alpha_diff": float(ct["alpha"][diff].mean()) if diff.any() else None,
            "bins": list(bins), "mass_by_conf_same": grid(same), "mass_by_conf_diff": grid(diff),
            "coupling_over_self": float(flip[live].float().mean()) if live.any() else None,
            "coupling_to_self_ratio": float(cp.abs().sum() / s.abs().sum().clamp(min=1e-30))}


def coupling_by_row(terms, y, rows, n_rows):
    """Where the coupling mass lands, by the moved token i's row and by partner.

    terms [M,M] as in coupling_terms (off-diagonal = coupling), y [M] token ids,
    rows [M] a row index per moved token i (e.g. its confidence bin, with the
    style tokens as their own row). Returns {"mass_same", "mass_diff",
    "pairs_same", "pairs_diff"}, each a list over rows: the share of all coupling
    mass sum_{i != j} |terms_ij| on pairs whose i is in the row and whose j has
    the same (different) token id, and the share of all i != j pairs that are
    such pairs. mass > pairs: the row's coupling is stronger than its count."""
    M = len(y)
    off = ~torch.eye(M, dtype=torch.bool, device=terms.device)
    same, diff = (y[:, None] == y[None, :]) & off, (y[:, None] != y[None, :])
    mass = terms.abs() * off
    total, pairs = float(mass.sum()) or float("nan"), max(int(off.sum()), 1)
    out = {k: [] for k in ("mass_same", "mass_diff", "pairs_same", "pairs_diff")}
    for r in range(n_rows):
        i = (rows == r)[:, None]
        for kind, sel in (("same", same), ("diff", diff)):
            out[f"mass_{kind}"].append(float((mass * (i & sel)).sum()) / total)
            out[f"pairs_{kind}"].append(float((i & sel).sum()) / pairs)
    return out


def sign_agreement(a, b, mask, weighted=False):
    """Fraction of masked tokens where Delta a and Delta b have the same sign;
    weighted=True weighs each token by |a|, so that tokens that hardly move
    (a confident token's Delta of 1e-8) count for little:
    sum |a| [sign a = sign b] / sum |a|."""
    agree = (torch.sign(a[mask]) == torch.sign(b[mask])).to(a.dtype)
    if weighted:
        w = a[mask].abs()
        return float((w * agree).sum() / w.sum()) if float(w.sum()) > 0 else None
    return float(agree.mean())


# ----------------------------------------------------------------------------- masked updates

def masked_update_deltas(model, batch, adv, lr, objective="grpo", params="all"):
    """Delta per token [N,T] of plain-SGD updates with contributions removed:

    * ``full``: the whole update;
    * ``no_opposite_same_token``: token (i,t) with id v in a rollout of advantage
      sign s is measured after an SGD step whose gradient omits (coefficient
      zeroed) every token (j,u) of the batch with the same id v in a rollout of the
      opposite sign -s, at any position and in any group. Its own contribution and
      all others stay. Such a removal set depends only on (v, s), so there is one
      step per (v, s) class, each from the same starting point;
    * ``positive_only``: the coefficients of all A < 0 tokens are zeroed (the A > 0
      coefficients are grpo's, unchanged, so nothing is renormalised).
    Tokens of A = 0 rollouts keep the full update's Delta in the second case.
    ``params="head"`` moves only the unembedding (then the closed form with the
    pair mask ``opposite_same_token_keep`` predicts the second case).

    One plain-SGD step is linear in the coefficients: theta' = theta + lr * sum_j
    c_j grad log pi(y_j). So the gradient G_{v,s} of each (v, s) class is taken
    once, the masked step of class (v, s) is theta + lr (G - G_{v,-s}), and a list
    ``lr`` (a sweep) costs one forward pass per step and lr, not a backward pass:
    then the result is {lr: {variant: Delta}}."""
    lrs = list(lr) if isinstance(lr, (list, tuple)) else [lr]
    mask, tok = batch.mask, batch.tokens
    coef = token_coefficients(model, batch, adv, objective)
    sgn = torch.sign(adv)[:, None].expand_as(tok)
    work = copy.deepcopy(model)
    names = ["lm_head.weight"] if params == "head" else [n for n, _ in work.named_parameters()]
    ps = [dict(work.named_parameters())[n] for n in names]
    start = [p.detach().clone() for p in ps]
    logp = logp_of(work, batch)
    grad = lambda w: torch.autograd.grad((coef * w * logp).sum(), ps, retain_graph=True)
    G = grad(torch.ones_like(coef))
    classes = {}  # (v, s) -> gradient of that class's own tokens, for ids seen with both signs
    for v in tok[mask & (sgn != 0)].unique().tolist():
        if (mask & (tok == v) & (sgn > 0)).any() and (mask & (tok == v) & (sgn < 0)).any():
            for s in (1, -1):
                classes[v, s] = grad((mask & (tok == v) & (sgn == s)).to(coef.dtype))
    G_pos = grad((sgn >= 0).to(coef.dtype))
    del logp
    with torch.no_grad():
        old = logp_of(model, batch)

        def delta(lr_, g):
            for p, p0, gi in zip(ps, start, g):
                p.copy_(p0 + lr_ * gi)
            return (logp_of(work, batch) - old) * mask

        out = {}
        for lr_ in lrs:
            full = delta(lr_, G)
            nost = full.clone()
            for (v, s) in classes:
                cls = mask & (tok == v) & (sgn == s)
                nost[cls] = delta(lr_, [a - b for a, b in zip(G, classes[v, -s])])[cls]
            out[lr_] = {
                "full": full,
                "positive_only": delta(lr_, G_pos),
                "no_opposite_same_token": nost,
            }
    return out if isinstance(lr, (list, tuple)) else out[lrs[0]]


def opposite_same_token_keep(y, adv_tok):
    """[M,M] pair mask for ``coupling_terms``: False where j has i's token id and the
    opposite advantage sign (the closed-form twin of ``no_opposite_same_token``)."""
    s = torch.sign(adv_tok)
    return ~((y[:, None] == y[None, :]) & (s[:, None] * s[None, :] < 0))


# ----------------------------------------------------------------------------- categories

def token_categories(task, problems, tokens, mask):
    """Category index per token [N,T] (CATEGORIES: 0 template, 1 copy, 2 compute,
    3 style; -1 off mask).

    A task with style points (chain) varies its layout by design and its
    ``categories`` parses any completion: its labels are used for every sample.
    Otherwise a sampled completion is labelled by the task's own ``categories``
    when its text has the canonical solution's layout: same length and the same
    non-digit characters at the same places (then the scratchpad's operand
    positions are where the task expects them), else by character class: digit ->
    compute, anything else (separators, EOS) -> template. Without a scratchpad
    both rules give the same labels."""
    out = torch.full(tokens.shape, -1, dtype=torch.long, device=tokens.device)
    for i, (p, row) in enumerate(zip(problems, tokens.tolist())):
        text, n = toy_tasks.decode(row), int(mask[i].sum())
        sol = task.solution(p, random.Random(0))  # own rng: no side effect on global state
        same = len(sol) == len(text) and all(a == b for a, b in zip(sol, text) if not a.isdigit())
        same = task.style_points is not None or (same and all(b.isdigit() for a, b in zip(sol, text)
                                                                if a.isdigit()))
        labels = task.categories(p, text) if same else \
            ["compute" if ch.isdigit() else "template" for ch in text] + ["template"]
        out[i, :n] = torch.tensor([CATEGORIES.index(x) for x in labels[:n]],
                                    device=out.device)
    return out


# ----------------------------------------------------------------------------- token value

@torch.no_grad()
def mc_values(model, task, batch, problems, K, generator=None, temperature=1.0, at=None):
    """V [N, T+1]: V[i,t] = V(s_t), the mean reward of K continuations sampled from
    the prompt plus the first t completion tokens of rollout i (NaN past its end).
    At the end of a completion V is its own reward, exactly. A token's value is
    V(s_{t+1}) and its credit V(s_{t+1}) - V(s_t). Identical prefixes are sampled once.
    ``at`` (bool [N, T+1]) values only those prefixes (NaN elsewhere, except the
    exact ends): a subsample of tokens costs K continuations per chosen prefix."""
    tok, mask, r = batch.tokens, batch.mask, batch.rewards
    N, T = tok.shape
    lens = mask.sum(1).tolist()
    V = torch.full((N, T + 1), float("nan"), device=r.device)
    V[torch.arange(N, device=r.device), mask.sum(1)] = r.float()
    for t in range(T):
        keys = {}
        for i in range(N):
            if t < lens[i] and (at is None or bool(at[i, t])):
                keys.setdefault(
                    (tuple(batch.prompts[i]), tuple(tok[i, :t].tolist())), []
                ).append(i)
        if not keys:
            continue
        prefixes = [list(a) + list(b) for a, b in keys]
        out = sample(model, prefixes, K, task.max_new_tokens - t, temperature, generator=generator)
        cont = out.tokens.tolist()
        for k, ((_, pre), rows) in enumerate(keys.items()):
            p = problems[rows[0]]
            V[rows, t] = (
                sum(task.reward(p, toy_tasks.decode(list(pre) + cont[k * K + j])) for j in range(K))
                / K
            )
    return V


def _randperm(n, generator, device):
    """A random permutation of 0..n-1 from ``generator`` (None: torch's global one), drawn
    on the generator's own device and moved to ``device``."""
    where = generator.device if generator is not None else "cpu"
    return torch.randperm(n, generator=generator, device=where).to(device)


def pick_tokens(cand, n, generator=None):
    """(row, t) pairs [<=n, 2]: a uniform random subset (without replacement) of the
    True entries of ``cand`` [N,T]; all of them when there are at most n."""
    idx = cand.nonzero()
    return idx[_randperm(len(idx), generator, idx.device)[:n]] if len(idx) > n else idx


def token_values(model, task, batch, rows_t, K, generator=None):
    """V(s_{t+1}) of the tokens (row, t) of ``rows_t`` [M,2], the value of the prefix
    ending in each (mc_values on those prefixes only) [M]."""
    at = torch.zeros(batch.tokens.shape[0], batch.tokens.shape[1] + 1, dtype=torch.bool,
                     device=batch.tokens.device)
    at[rows_t[:, 0], rows_t[:, 1] + 1] = True
    V = mc_values(model, task, batch, batch.problems, K, generator, at=at)
    return V[rows_t[:, 0], rows_t[:, 1] + 1]


def value_gap(v, delta, eps):
    """[P2]'s value gap: mean value of boosted tokens (Delta > eps) minus mean value
    of suppressed ones (Delta < -eps), with both counts; gap None if a side is empty."""
    up, down = delta > eps, delta < -eps
    vb = float(v[up].double().mean()) if bool(up.any()) else None
    vs = float(v[down].double().mean()) if bool(down.any()) else None
    return {"gap": None if vb is None or vs is None else vb - vs, "boosted": vb, "suppressed": vs,
            "n_boosted": int(up.sum()), "n_suppressed": int(down.sum())}


def value_bins(v, q, generator=None):
    """Quantile bin (0 = lowest value) of each of M values [M]: rank the values (ties in
    random order) and cut the ranks into q near-equal parts, bin = floor(q * rank / M)."""
    order = _randperm(len(v), generator, v.device)
    ranks = torch.empty(len(v), dtype=torch.long, device=v.device)
    ranks[order[torch.sort(v[order], stable=True).indices]] = torch.arange(len(v), device=v.device)
    return (q * ranks) // max(len(v), 1)


def shuffled_advantages(adv, group, generator=None):
    """A control: the advantages permuted uniformly at random among the rollouts of
    each group. They still sum to zero per group, but no longer follow the reward."""
    out = adv.clone()
    for g in group.unique().tolist():
        rows = (group == g).nonzero()[:, 0]
        out[rows] = adv[rows[_randperm(len(rows), generator, rows.device)]]
    return out
