"""loss_engines.py: the objectives the big RL engines ship, beyond the GRPO family.

What it teaches
---------------
Each function here is one row of the objective table in loss.py's docstring
(advantage, coefficient, keeps exchangeability?), written as a per-token loss
from the log-ratios ``log rho = log pi_new - log pi_old``, the advantages A and
the per-sequence aggregation weight ``norm`` that loss.policy_loss passes in.
What matters for cancellation is the coefficient each copy of a shared
(history, token) ends up with: a weight that depends on the copy's own
sequence (a sequence ratio, a length, a covariance selection) breaks
exchangeability; a detached per-token weight of rho does not, because every
copy of one (history, token) has the same rho. The scoreboard
(experiments/scoreboard.py) measures it for every row.

Engine objectives: which upstream code each row follows (TRL
``GRPOTrainer._compute_loss``, verl ``core_algos.py``), and what differs here
-----------------------------------------------------------------------------
bnpo      TRL ``loss_type="bnpo"``: token mean over the *local* batch, divided by
          the gradient-accumulation steps (here M = ``step_counts(micro_batches=M)``).
cispo     verl ``compute_policy_loss_cispo``: sg(clamp(rho, 1-eps_low, 1+eps_high))
          * A * log pi, token-mean. TRL clamps only above, at ``epsilon_high`` read
          as an absolute cap (about 5); ``--clip=none`` here is that with no cap.
sapo      TRL ``loss_type="sapo"`` and verl ``compute_policy_loss_sapo``: loss
          -(4/tau) sigmoid(tau (rho - 1)) A per token, sequence-mean of token
          means; tau_pos = 1.0, tau_neg = 1.05 (TRL's defaults; verl's are 1.0, 1.0).
gmpo      verl ``compute_policy_loss_geo_mean`` (GMPO): per token log rho is
          clipped to [-eps_low, eps_high] on the side where A would push it
          further (min for A > 0, max for A < 0), g_i = exp(mean_t of that), loss
          -A_i g_i averaged over sequences. The clip range is in log space.
clip_cov  verl ``compute_policy_loss_clip_cov``: PPO-clipped token loss, but a
          fraction (``cov_ratio``, verl 2e-4, at least one token) of the unclipped
          tokens with 1 < (A - mean A)(log pi - mean log pi) < 5 get no gradient.
          verl picks them at random among the candidates; here the largest
          covariances are taken, so a step is reproducible.
kl_cov    verl ``compute_policy_loss_kl_cov``: unclipped -rho A per token, plus
          1.0 * |log rho| on the top ``cov_ratio`` tokens by that covariance.
gpg       verl ``compute_policy_loss_gpg`` (-A log pi, token-mean) with verl's
          ``compute_gpg_outcome_advantage`` (f_norm = 1): no ratio, so off-policy
          it is the current policy's plain gradient.
luspo     TRL ``loss_type="luspo"``: GSPO's clipped sequence ratio s_i, each
          sequence's loss times its length L_i, mean over sequences.
vespo     TRL ``loss_type="vespo"`` (``get_gamma_weights``): detached gamma weight
          phi of the sequence's *product* ratio W_i, k = 2, lam = 3 for A >= 0 and
          k = 3, lam = 2 for A < 0, token-mean; no clip. TRL clamps log W to
          [log 1e-8, 20]; here it is clamped the same way.
beta      TRL ``beta`` / verl ``use_kl_loss`` with ``kl_loss_type=low_var_kl``:
          k3 = pi_ref/pi - log(pi_ref/pi) - 1 per token, weighted by the
          objective's own aggregation (verl clamps k3 to [-10, 10]; not here).
entropy   TRL ``entropy_coef`` (verl ``entropy_coeff``): minus the mean token
          entropy of the step's completion tokens (TRL's definition: not
          rescaled by the objective's aggregation).
dual_clip verl ``clip_ratio_c`` (its default 3 is always on in verl; off here).
"""

import math

import torch

SAPO_TAU = (1.0, 1.05)                        # tau for A > 0, A <= 0 (TRL's defaults)
VESPO = {"pos": (2.0, 3.0), "neg": (3.0, 2.0)}  # (k, lam) for A >= 0, A < 0 (TRL's defaults)
COV = {"ratio": 2e-4, "lb": 1.0, "ub": 5.0, "kl_coef": 1.0}  # verl's clip_cov / kl_cov defaults


# Each returns (loss, clip fraction, extra stats) from the per-token log-ratio
# (masked), the advantages and the per-sequence aggregation weight ``norm``.

def _frac(x, mask):
    return (x & mask).float().sum() / mask.float().sum().clamp(min=1)


def cov_scores(adv, logp, mask):
    """(A_i - mean A)(log pi - mean log pi) per token, means over the batch's tokens."""
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


def _cispo(new_logp, log_ratio, mask, adv, norm, bounds, cov_ratio):
    rho = log_ratio.detach().exp()
    w = rho if bounds is None else rho.clamp(*bounds)
    total = -((w * adv[:, None] * norm[:, None]) * new_logp * mask.float()).sum()
    return total, _frac(w != rho, mask), {}


def _sapo(new_logp, log_ratio, mask, adv, norm, bounds, cov_ratio):
    tau = torch.where(adv > 0, SAPO_TAU[0], SAPO_TAU[1])[:, None]
    gate = torch.sigmoid(tau * (log_ratio.exp() - 1)) * 4 / tau
    return -(gate * (adv * norm)[:, None] * mask.float()).sum(), torch.tensor(0.0), {}


def _gmpo(new_logp, log_ratio, mask, adv, norm, bounds, cov_ratio):
    lr, clipped = log_ratio, torch.zeros_like(mask)
    if bounds is not None:  # clip log rho on the side A pushes it: min for A > 0, max for A < 0
        sgn = torch.sign(adv)[:, None]
        c = log_ratio.clamp(bounds[0] - 1, bounds[1] - 1)
        lr = sgn * torch.minimum(sgn * log_ratio, sgn * c)
        clipped = sgn * c < sgn * log_ratio  # where the clipped side is taken: no gradient
    lens = mask.sum(1)
    g = ((lr * mask.float()).sum(1) / lens.clamp(min=1)).exp()
    return -(adv * g * norm * lens).sum(), _frac(clipped, mask), {}


def clip_cov_cut(per_tok, clipped, new_logp, mask, adv, cov_ratio):
    """clip_cov on top of the PPO token loss (loss.ppo_term): the selected tokens
    lose their gradient. Returns (per_tok, no-gradient mask, extra stats)."""
    sel = cov_select(adv, new_logp, mask, cov_ratio, COV["lb"], COV["ub"], exclude=clipped)
    return per_tok * (~sel).float(), clipped | sel, {"cov_frac": float(_frac(sel, mask))}


def _kl_cov(new_logp, log_ratio, mask, adv, norm, bounds, cov_ratio):
    sel = cov_select(adv, new_logp, mask, cov_ratio)
    per_tok = -log_ratio.exp() * adv[:, None] + COV["kl_coef"] * log_ratio.abs() * sel.float()
    return (per_tok * norm[:, None] * mask.float()).sum(), torch.tensor(0.0), \
        {"cov_frac": float(_frac(sel, mask))}


def _gpg(new_logp, log_ratio, mask, adv, norm, bounds, cov_ratio):
    return -((adv * norm)[:, None] * new_logp * mask.float()).sum(), torch.tensor(0.0), {}


def vespo_weight(log_ratio, mask, adv):
    """phi(W) = exp(lam + k log W - lam W), W = prod_t rho_t per sequence, detached."""
    log_w = (log_ratio.detach().clamp(-20, 20) * mask.float()).sum(1).clamp(math.log(1e-8), 20)
    pos = adv >= 0
    k = torch.where(pos, VESPO["pos"][0], VESPO["neg"][0])
    lam = torch.where(pos, VESPO["pos"][1], VESPO["neg"][1])
    return (lam + k * log_w - lam * log_w.exp()).exp()


def _vespo(new_logp, log_ratio, mask, adv, norm, bounds, cov_ratio):
    phi = vespo_weight(log_ratio, mask, adv)
    return -((phi * adv * norm)[:, None] * new_logp * mask.float()).sum(), torch.tensor(0.0), {}


ENGINE = {"cispo": _cispo, "sapo": _sapo, "gmpo": _gmpo, "kl_cov": _kl_cov,
          "gpg": _gpg, "vespo": _vespo}
