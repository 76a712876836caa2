"""lengthcov.py: what a per-rollout weight can push, read off one rollout batch.

What it teaches (THEORY.md 2.7)
-------------------------------
The copies of a token that every rollout of a group writes after one history h sum to
(sum_i Â_i w_i) grad log pi(a | h). The advantages are centred in their group
(sum_i Â_i = 0), so

    sum_i Â_i w_i = sum_i (Â_i - mean Â)(w_i - mean w) = G Cov_g(Â, w)

with Cov_g the covariance over the group's G rollouts. GRPO's w_i = 1/L_i pushes a shared
token only where length co-varies with the advantage; lengths that vary at random add
noise, not drift. With rewards 0/1, k right of G and sd sigma:

    sum_i Â_i w_i = k (G - k) / (G sigma) * (mean w over right - mean w over wrong),

so the sign follows the right - wrong length gap (for 1/L: the opposite sign).

A choice X at that history (``task.choice``, e.g. a restatement's ``(``), read as one
logit ell = log pi(X|h) - log(1 - pi(X|h)), moves to first order by

    d ell ~ sum_i c_i (x_i - pi_X),      x_i = 1 if rollout i chose X,

here with pi_X estimated by the group's own share f_g: the covariance of the coefficient
with the choice inside the group. Its expectation under a reward-irrelevant choice is the
*difference* of Cov(Â, w) between the rollouts that chose X and those that did not: 0 for
equal weights, and for 1/L nonzero only when the choice changes the length (THEORY.md).

``batch_metrics`` logs, over the batch's mixed groups (only they carry a signal), the
within-group covariance, the right - wrong length gap, and both pushes, in coefficient
units (c_i = Â_i agg_i, the weight the loss gives each token of rollout i).
"""

import torch

from lab import objectives
import loss as lesson_loss


def groups_of(group):
    """[(rows)] of each group id, in id order."""
    return [torch.nonzero(group == g).flatten() for g in torch.unique(group)]


def batch_metrics(adv, agg, group, lens, rewards, chosen=None):
    """One rollout batch: ``adv`` Â_i [N], ``agg`` the run's per-token weight agg_i [N]
    (loss = sum agg_i l_{i,t}), ``lens`` L_i [N], ``rewards`` [N], ``chosen`` [N] bool
    (rollout i opened with the choice) or None. Returns plain floats, None where no
    group is mixed:

      lencov_mixed      mixed groups
      lencov_cov        mean over mixed groups of Cov_g(Â, N agg) (N agg: 1/L_i for grpo)
      lencov_gap        mean over mixed groups of mean L(right) - mean L(wrong), tokens
      lencov_push       sum over mixed groups of sum_i Â_i agg_i = G Cov_g(Â, agg): the
                        coefficient a token every rollout shares receives
      lencov_choice     sum over mixed groups of sum_i Â_i agg_i (x_i - f_g): the first-
                        order push on the choice's logit (> 0: towards it)
      lencov_choice_1L  the same with agg_i replaced by 1/(N L_i) - 1/sum_j L_j, grpo's
                        weights minus dapo's: the part of the push that 1/L_i alone makes
    """
    n = adv.numel()
    adv, agg, lens = adv.double(), agg.double(), lens.double()
    diff_w = 1.0 / (n * lens.clamp(min=1)) - 1.0 / lens.sum().clamp(min=1)
    covs, gaps, push, ch, ch1 = [], [], 0.0, 0.0, 0.0
    for rows in groups_of(group):
        right = rewards[rows] > 0
        if bool(right.all()) or not bool(right.any()):
            continue  # all equal: Â = 0, nothing to push
        a, w = adv[rows], agg[rows] * n
        covs.append(float(((a - a.mean()) * (w - w.mean())).mean()))
        gaps.append(float(lens[rows][right].mean() - lens[rows][~right].mean()))
        push += float((a * agg[rows]).sum())
        if chosen is not None:
            x = chosen[rows].double()
            x = x - x.mean()  # x_i - f_g
            ch += float((a * agg[rows] * x).sum())
            ch1 += float((a * diff_w[rows] * x).sum())
    if not covs:
        out = dict.fromkeys(("lencov_cov", "lencov_gap", "lencov_push"))
        if chosen is not None:
            out.update(lencov_choice=None, lencov_choice_1L=None)
        return {"lencov_mixed": 0, **out}
    out = {"lencov_mixed": len(covs), "lencov_cov": sum(covs) / len(covs),
           "lencov_gap": sum(gaps) / len(gaps), "lencov_push": push}
    if chosen is not None:
        out.update(lencov_choice=ch, lencov_choice_1L=ch1)
    return out


def run_agg(cfg, mask, adv):
    """agg_i [N] of the run's objective and --agg over the whole rollout batch (one optimizer
    step on it: the on-policy weights; dr_grpo's L_max is taken as the batch's longest,
    which leaves its weights equal, all this module needs of them)."""
    settings = objectives.LossSettings.from_config(cfg)
    counts = lesson_loss.step_counts(mask, adv, int(mask.sum(1).max()))
    return objectives.agg_weight(settings.aggregation(), mask.sum(1), counts)


def choice_log_odds(logp, choice_id):
    """Mean over prompts of ell = log pi(X|h) - log(1 - pi(X|h)): the choice against every
    other token, from the next-token log-probs [P, V] at the prompts."""
    lp = logp[:, choice_id].double()
    return float((lp - torch.log1p(-lp.exp().clamp(max=1 - 1e-12))).mean())
