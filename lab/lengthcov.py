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

    Every group sum is a product with the same-group matrix, and the numbers are read
    back once: the lab adds one read per RL step (tests/test_syncs.py)."""
    n_rows = adv.numel()
    a, lens = adv.double(), lens.double()
    same = (group[:, None] == group[None, :]).double()  # [N, N]: rows of one group
    size = same.sum(1)  # G, per row
    right = (rewards > 0).double()
    k = same @ right  # right rollouts in the row's group
    mixed = ((k > 0) & (k < size)).double()
    per = mixed / size  # a sum of per-row group values with these weights counts each group once
    mean = lambda x: (same @ x) / size  # the row's group mean of x
    w = agg.double() * n_rows
    cov = mean((a - mean(a)) * (w - mean(w)))
    gap = (same @ (lens * right)) / k.clamp(min=1) - (same @ (lens * (1 - right))) / (
        size - k).clamp(min=1)
    c = a * agg.double()
    out = [per.sum(), (per * cov).sum(), (per * gap).sum(), (mixed * c).sum()]
    if chosen is not None:
        x = chosen.double()
        x = x - mean(x)  # x_i - f_g
        diff_w = 1.0 / (n_rows * lens.clamp(min=1)) - 1.0 / lens.sum().clamp(min=1)
        out += [(mixed * c * x).sum(), (mixed * a * diff_w * x).sum()]
    vals = torch.stack(out).tolist()  # the one read
    n = vals[0]
    keys = ["lencov_cov", "lencov_gap", "lencov_push", "lencov_choice", "lencov_choice_1L"]
    res = {"lencov_mixed": round(n)}
    res.update({key: (v / n if key in ("lencov_cov", "lencov_gap") else v) if n > 0.5 else None
                for key, v in zip(keys, vals[1:])})
    return res


def run_agg(cfg, mask, adv, group=None):
    """agg_i [N] of the run's objective and --agg over the whole rollout batch (one optimizer
    step on it: the on-policy weights), built from tensors so that nothing is read back.
    dr_grpo's L_max is the batch's longest, and a micro-batch's token count the batch's:
    both leave the weights equal, which is all this module needs of them. ``group``: the
    rows' groups, which Balanced Aggregation's sign classes need."""
    mode = objectives.LossSettings.from_config(cfg).aggregation()
    lens = mask.sum(1).double()
    n = lens.numel()
    one = torch.ones_like(lens)
    if mode == "seq-mean-token-mean":
        return 1.0 / (n * lens.clamp(min=1))
    if mode in ("token-mean", "micro-token-mean"):
        return one / lens.sum().clamp(min=1)
    if mode == "seq-mean-token-sum-norm":
        return one / (n * lens.max().clamp(min=1))
    if mode == "seq-mean-token-sum":
        return one / n
    if mode == "positive-token-mean":
        return one / (lens * (adv > 0)).sum().clamp(min=1)
    if mode == "balanced-token-mean":  # 1 / T_s of its sign class: lengths enter, not L_i's
        return objectives.balanced_weight(lens, adv, group).double()
    return one  # token-sum


def choice_log_odds(logp, choice_id):
    """Mean over prompts of ell = log pi(X|h) - log(1 - pi(X|h)): the choice against every
    other token, from the next-token log-probs [P, V] at the prompts."""
    lp = logp[:, choice_id].double()
    return float((lp - torch.log1p(-lp.exp().clamp(max=1 - 1e-12))).mean())


# E13 (results/README.md): the in-group gaps, as shares of the mean length, at which it measured
# 1/L_i's drift of a choice the reward ignores (its 1-3 retries), and the smallest at which that
# drift was detected (None: at none). tests/test_e13.py checks them against e13_dose.json.
E13_SHARES = (35.8, 76.0)  # (smallest, largest) share of the mean length, in %
E13_DETECTED = 35.8        # the smallest measured share (%) whose drift was detected, or None


def where_on_curve(share):
    """Where a run's in-group gap (``share``: % of the mean length) falls on E13's measured
    gaps, in one line that claims no more than they show ([] before E13 ran). The smallest
    gap tested is no threshold: below it E13 says nothing."""
    if E13_SHARES is None:
        return []
    lo, hi = E13_SHARES
    found = ("no drift found" if E13_DETECTED is None else
             f"drift found at {E13_DETECTED:.0f} %" + (", the smallest" if E13_DETECTED == lo
                                                      else ""))
    head = f"E13 tested gaps of {lo:.0f}-{hi:.0f} % ({found})"
    if share < lo:
        return [f"{head}; this one is below them, untested."]
    if share > hi:
        return [f"{head}; this one is above them."]
    if E13_DETECTED is None or share < E13_DETECTED:
        return [f"{head}; this one is inside, where none was found."]
    return [f"{head}; this one is inside, where drift was found."]
