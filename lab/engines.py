"""engines.py: the objectives the big RL engines ship, beyond the GRPO family.

What it teaches
---------------
Each function here is the term of one record in objectives.OBJECTIVES (a row of the
table in objectives.py), written as a per-token loss
from the log-ratios ``log rho = log pi_new - log pi_old``, the advantages A and
the per-sequence aggregation weight ``agg`` (agg_i) that objectives.policy_loss passes in.
What matters for cancellation is the coefficient each copy of a shared
(history, token) ends up with: a weight that depends on the copy's own
sequence (a sequence ratio, a length, a covariance selection) breaks
exchangeability; a detached per-token weight of rho does not, because every
copy of one (history, token) has the same rho. An *added* term that is the same
for every copy (a KL penalty, DRO's quadratic) does not cancel either: the
copies' coefficients sum to |S| times it, whatever the rewards. The scoreboard
(experiments/scoreboard.py) measures every row.

Engine objectives: which upstream code each row follows (TRL
``GRPOTrainer._compute_loss``, verl ``core_algos.py``; the commits are in
docs/REFERENCE.md), and what differs here
-----------------------------------------------------------------------------
bnpo      TRL ``loss_type="bnpo"``: token mean over the *local* batch, divided by
          the gradient-accumulation steps (here M = ``step_counts(micro_batches=M)``).
cispo     verl ``compute_policy_loss_cispo``: sg(clamp(rho, 1-eps_low, 1+eps_high))
          * A * log pi, token-mean. TRL clamps only above, at ``epsilon_high`` read
          as an absolute cap (its default is ``epsilon`` = 0.2; ScaleRL's 5.0 is
          a recommendation); ``--clip=none`` here is that with no cap.
sapo      TRL ``loss_type="sapo"`` and verl ``compute_policy_loss_sapo``: loss
          -(4/tau) sigmoid(tau (rho - 1)) A per token, sequence-mean of token
          means; tau_pos = 1.0, tau_neg = 1.05 (the defaults of both).
gmpo      verl ``compute_policy_loss_geo_mean`` and TRL's experimental GMPO
          trainer: per token log rho is clipped to [-eps_low, eps_high] on the
          side where A would push it further (min for A > 0, max for A < 0),
          g_i = exp(mean_t of that), loss -Â_i g_i averaged over sequences.
clip_cov  verl ``compute_policy_loss_clip_cov``: PPO-clipped token loss, but a
          fraction (``cov_ratio``, verl 2e-4, at least one token) of the unclipped
          tokens with 1 < (A - mean A)(log pi - mean log pi) < 5 get no gradient.
          verl picks them at random among the candidates; here the largest
          covariances are taken, so a step is reproducible.
kl_cov    verl ``compute_policy_loss_kl_cov``: unclipped -rho A per token, plus
          ``ppo_kl_coef`` (0.1, verl's PolicyLossConfig default) * |log rho| on the
          top ``cov_ratio`` tokens by that covariance.
gpg       verl ``compute_policy_loss_gpg`` (-A log pi, token-mean) with verl's
          ``compute_gpg_outcome_advantage`` (f_norm = 1): no ratio, so off-policy
          it is the current policy's plain gradient.
luspo     TRL ``loss_type="luspo"``: GSPO's clipped sequence ratio s_i, each
          sequence's loss times its length L_i, mean over sequences.
vespo     TRL ``loss_type="vespo"`` (``get_gamma_weights``): detached gamma weight
          phi of the sequence's *product* ratio W_i, k = 2, lam = 3 for A >= 0 and
          k = 3, lam = 2 for A < 0, token-mean; no clip. TRL clamps log W to
          [log 1e-8, 20]; here it is clamped the same way.
dppo_tv   verl ``compute_policy_loss_dppo_tv`` (DPPO-Binary-TV): -A sg(min(rho, C))
          log pi on the tokens where pi - pi_old <= eps_high (A > 0) or
          pi - pi_old >= -eps_low (A <= 0), token-mean. The clip flags are
          probability thresholds here. C = ``--dual_clip`` (verl's
          ``clip_ratio_c``, 3 by its ActorConfig; off here unless given).
dppo_kl   verl ``compute_policy_loss_dppo_kl`` (DPPO-Binary-KL): as dppo_tv, the
          test being the binary KL between Bernoulli(pi_old) and Bernoulli(pi):
          kept if KL <= eps_high or pi <= pi_old (A > 0), KL <= eps_low or
          pi >= pi_old (A <= 0).
dro       verl ``compute_policy_loss_dro``: -(A log pi - beta_dro/2 (log rho)^2)
          per token, token-mean; ``--dro_beta`` (verl ``policy_loss.dro_beta``,
          required, no default). c = (A - beta_dro log rho) agg_i: on-policy the
          plain policy gradient, off-policy every copy gets the same pull
          -beta_dro log rho towards pi_old.
beta      TRL ``beta`` / verl ``use_kl_loss`` with ``kl_loss_type``
          (``--kl_loss_type``, ``kl_penalty`` below; TRL has k3 only) per token,
          weighted by the objective's own aggregation, as verl's
          ``agg_loss(loss_agg_mode)`` does; verl clamps k3 to [-10, 10], not here.
entropy   TRL ``entropy_coef`` (verl ``entropy_coeff``): minus the mean token
          entropy of the step's completion tokens (TRL's definition: not
          rescaled by the objective's aggregation; verl's uses its
          ``loss_agg_mode`` and matches only under token-mean).
dual_clip verl ``clip_ratio_c`` (its default 3 is always on in verl; off here),
          and TRL ``delta`` (two-sided GRPO, INTELLECT-2), the same bound.
top_entropy_quantile  TRL ``top_entropy_quantile`` (Beyond the 80/20 rule): only
          tokens whose entropy is at least the (1 - q) quantile of the
          micro-batch's token entropies keep their policy gradient (TRL pools
          every process's micro-batch; here each process's own).
off_policy_mask_threshold  TRL ``off_policy_mask_threshold`` (DeepSeek-V3.2's
          sequence mask): a sequence with A < 0 whose mean_t (log pi_old -
          log pi) exceeds delta loses its policy gradient.
Token selection is applied as a stop-gradient on the dropped tokens' log pi in
the policy term (the loss value still counts them; the gradient is TRL's).
"""

import math

import torch

SAPO_TAU = (1.0, 1.05)                        # tau for A > 0, A <= 0 (TRL's defaults)
VESPO = {"pos": (2.0, 3.0), "neg": (3.0, 2.0)}  # (k, lam) for A >= 0, A < 0 (TRL's defaults)
COV = {"ratio": 2e-4, "lb": 1.0, "ub": 5.0, "kl_coef": 0.1}  # verl's clip_cov / kl_cov defaults


# Each returns (loss, clip fraction, extra stats) from the per-token log-ratio
# (masked), the advantages, the per-sequence aggregation weight ``agg``, the
# ratio bounds (or None) and ``opts`` (cov_ratio, dro_beta, tis_cap).

def _frac(x, mask):
    return (x & mask).float().sum() / mask.float().sum().clamp(min=1)


def cov_scores(adv, logp, mask):
    """(Â_i - mean A)(log pi - mean log pi) per token, means over the batch's tokens."""
    m = mask.float()
    a = adv[:, None].expand_as(logp) * m
    lp = logp.detach() * m
    n = m.sum().clamp(min=1)
    return (a - a.sum() / n) * (lp - lp.sum() / n) * m


def cov_select(adv, logp, mask, ratio, lb=None, ub=None, exclude=None):
    """The k = max(1, int(ratio * tokens)) tokens of largest covariance among the
    candidates (inside (lb, ub) and not ``exclude``d, when given), as a mask."""
    cov = cov_scores(adv, logp, mask)
    cand = mask.clone()
    if lb is not None:
        cand &= (cov > lb) & (cov < ub)
    if exclude is not None:
        cand &= ~exclude
    k = min(max(int(ratio * int(mask.sum())), 1), int(cand.sum()))
    sel = torch.zeros_like(mask)
    if k > 0:
        idx = torch.where(cand, cov, torch.full_like(cov, -float("inf"))).flatten().topk(k).indices
        sel.view(-1)[idx] = True
    return sel


def cispo(new_logp, log_ratio, mask, adv, agg, bounds, opts):
    rho = log_ratio.detach().exp()
    w = rho if bounds is None else rho.clamp(*bounds)
    total = -((w * adv[:, None] * agg[:, None]) * new_logp * mask.float()).sum()
    return total, _frac(w != rho, mask), {}


def sapo(new_logp, log_ratio, mask, adv, agg, bounds, opts):
    tau = torch.where(adv > 0, SAPO_TAU[0], SAPO_TAU[1])[:, None]
    gate = torch.sigmoid(tau * (log_ratio.exp() - 1)) * 4 / tau
    return -(gate * (adv * agg)[:, None] * mask.float()).sum(), adv.new_zeros(()), {}


def gmpo(new_logp, log_ratio, mask, adv, agg, bounds, opts):
    lr, clipped = log_ratio, torch.zeros_like(mask)
    if bounds is not None:  # clip log rho on the side A pushes it: min for A > 0, max for A < 0
        sgn = torch.sign(adv)[:, None]
        c = log_ratio.clamp(bounds[0] - 1, bounds[1] - 1)
        lr = sgn * torch.minimum(sgn * log_ratio, sgn * c)
        clipped = sgn * c < sgn * log_ratio  # where the clipped side is taken: no gradient
    lens = mask.sum(1)
    g = ((lr * mask.float()).sum(1) / lens.clamp(min=1)).exp()
    return -(adv * g * agg * lens).sum(), _frac(clipped, mask), {}


def clip_cov_cut(per_tok, clipped, new_logp, mask, adv, cov_ratio):
    """clip_cov on top of the PPO token loss (objectives.ppo_term): the selected tokens
    lose their gradient. Returns (per_tok, no-gradient mask, extra stats)."""
    sel = cov_select(adv, new_logp, mask, cov_ratio, COV["lb"], COV["ub"], exclude=clipped)
    return per_tok * (~sel).float(), clipped | sel, {"cov_frac": float(_frac(sel, mask))}


def kl_cov(new_logp, log_ratio, mask, adv, agg, bounds, opts):
    sel = cov_select(adv, new_logp, mask, opts["cov_ratio"])
    per_tok = -log_ratio.exp() * adv[:, None] + COV["kl_coef"] * log_ratio.abs() * sel.float()
    return (per_tok * agg[:, None] * mask.float()).sum(), adv.new_zeros(()), \
        {"cov_frac": float(_frac(sel, mask))}


def gpg(new_logp, log_ratio, mask, adv, agg, bounds, opts):
    return -((adv * agg)[:, None] * new_logp * mask.float()).sum(), adv.new_zeros(()), {}


def vespo_weight(log_ratio, mask, adv):
    """phi(W) = exp(lam + k log W - lam W), W = prod_t rho_t per sequence, detached."""
    log_w = (log_ratio.detach().clamp(-20, 20) * mask.float()).sum(1).clamp(math.log(1e-8), 20)
    pos = adv >= 0
    k = torch.where(pos, VESPO["pos"][0], VESPO["neg"][0])
    lam = torch.where(pos, VESPO["pos"][1], VESPO["neg"][1])
    return (lam + k * log_w - lam * log_w.exp()).exp()


def vespo(new_logp, log_ratio, mask, adv, agg, bounds, opts):
    phi = vespo_weight(log_ratio, mask, adv)
    return -((phi * adv * agg)[:, None] * new_logp * mask.float()).sum(), adv.new_zeros(()), {}


def _dppo(new_logp, log_ratio, mask, adv, agg, bounds, opts, test):
    rho = log_ratio.detach().clamp(-20, 20).exp()
    w = rho if not opts.get("tis_cap") else rho.clamp(max=opts["tis_cap"])
    keep = torch.ones_like(mask)
    if bounds is not None:
        p, p_old = new_logp.detach().exp(), (new_logp - log_ratio).detach().exp()
        keep = test(p, p_old, 1.0 - bounds[0], bounds[1] - 1.0, adv[:, None] > 0)
    total = -((w * keep.float() * (adv * agg)[:, None]) * new_logp * mask.float()).sum()
    return total, _frac(~keep, mask), {}


def dppo_tv(new_logp, log_ratio, mask, adv, agg, bounds, opts):
    return _dppo(new_logp, log_ratio, mask, adv, agg, bounds, opts, dppo_tv_keep)


def dppo_kl(new_logp, log_ratio, mask, adv, agg, bounds, opts):
    return _dppo(new_logp, log_ratio, mask, adv, agg, bounds, opts, dppo_kl_keep)


def dppo_tv_keep(p, p_old, d_low, d_high, pos):
    """DPPO-Binary-TV's trust region: pi - pi_old <= d_high (A > 0), >= -d_low (A <= 0)."""
    return torch.where(pos, p - p_old <= d_high, p - p_old >= -d_low)


def binary_kl(p_old, p):
    """KL(Bernoulli(p_old) || Bernoulli(p)), verl's 1e-8 guard on the second term."""
    return (
        p_old * (p_old.log() - p.log()) + (1 - p_old) * ((1 - p_old + 1e-8) / (1 - p + 1e-8)).log()
    )


def dppo_kl_keep(p, p_old, d_low, d_high, pos):
    """DPPO-Binary-KL's trust region: KL <= d_high or pi <= pi_old (A > 0),
    KL <= d_low or pi >= pi_old (A <= 0)."""
    kl = binary_kl(p_old, p)
    return torch.where(pos, (kl <= d_high) | (p <= p_old), (kl <= d_low) | (p >= p_old))


def dro(new_logp, log_ratio, mask, adv, agg, bounds, opts):
    per_tok = -(new_logp * adv[:, None] - 0.5 * opts["dro_beta"] * log_ratio ** 2)
    return (per_tok * agg[:, None] * mask.float()).sum(), adv.new_zeros(()), {}


# ----------------------------------------------------------------------------- switches

KL_TYPES = ("k1", "k2", "k3", "abs", "k1+", "k3+", "abs+")


def kl_penalty(logp, ref_logprobs, kind="k3"):
    """verl ``kl_penalty``: per-token estimate of KL(pi || pi_ref) from d = log pi - log pi_ref:
    k1 = d, k2 = d^2/2, k3 = e^-d + d - 1 (low_var_kl), abs = |d|. A ``+`` keeps the
    value and takes k2's gradient d (straight-through)."""
    d = logp - ref_logprobs
    base = kind.rstrip("+")
    val = {"k1": d, "k2": 0.5 * d ** 2, "k3": (-d).exp() + d - 1, "abs": d.abs()}[base]
    if kind.endswith("+") and base != "k2":
        k2 = 0.5 * d ** 2
        val = k2 - k2.detach() + val.detach()
    return val


def entropy_keep(entropy, mask, quantile):
    """TRL ``get_high_entropy_mask``: tokens whose entropy is at least the
    (1 - quantile) quantile of the given tokens' entropies (quantile 1: all)."""
    if quantile >= 1.0 or not bool(mask.any()):
        return mask.clone()
    thr = torch.quantile(entropy.detach()[mask].float(), 1.0 - quantile)
    return (entropy.detach() >= thr) & mask


def needs_entropy(cfg):
    """Does a step need the token entropies (--entropy_coef, --top_entropy_quantile)?"""
    return bool(cfg.entropy_coef) or cfg.top_entropy_quantile < 1


def token_keep(new_logp, old_logp, mask, adv, entropy, cfg):
    """The tokens whose policy term keeps its gradient under --top_entropy_quantile
    and --off_policy_mask_threshold (train.py's micro-batch, this process's rows);
    None when neither is on."""
    if cfg.top_entropy_quantile >= 1 and not cfg.off_policy_mask_threshold > 0:
        return None
    keep = (
        entropy_keep(entropy, mask, cfg.top_entropy_quantile)
        if entropy is not None
        else mask.clone()
    )
    if cfg.off_policy_mask_threshold > 0:
        keep &= off_policy_keep(new_logp, old_logp, mask, adv, cfg.off_policy_mask_threshold)
    return keep


def off_policy_keep(new_logp, old_logp, mask, adv, delta):
    """TRL ``get_off_policy_mask``: keep a sequence if A >= 0 or its mean_t
    (log pi_old - log pi) <= delta, as a [N, T] token mask."""
    m = mask.float()
    kl = ((old_logp - new_logp.detach()) * m).sum(1) / m.sum(1).clamp(min=1)
    return ((adv >= 0) | (kl <= delta))[:, None] & mask
