"""Exercise 6, reference answer: the weights must be detached.

The loss *value* was right all along; its gradient was not. w_i = s_i depends
on log pi_new, and so does w~ (every w~_i mixes the w_j of its group). Without
the stop-gradient, autograd also differentiates through w~: the gradient of
rollout j's tokens picks up terms (d w~_i / d log pi_new(y_{j,t})) A_i
sum_t' log pi_new(y_{i,t'}) / (N L_max) from every rollout i of the group.
Those terms differ from copy to copy of a shared token, so the copies no
longer sum to zero, even on-policy, where w = w~ = 1 and the weights look
harmless. THEORY.md section 2.3: differentiating through w~ couples the
rollouts again.

How ex6_diagnose.py shows it: the loss values agree, but even on-policy the
shared token's coefficients are not +-A_i / (N L_max) and do not sum to zero
(residual 0.0165); the summed coefficients of a rollout differ from the
specification by amounts that depend on the other rollouts. Option a is ruled
out because the specification uses the same advantages and cancels; c would
change the loss value; d would too (w = 1/s changes w~ off-policy).

The fix is one ``.detach()`` (loss.py does the same in policy_loss).
"""

import torch

import loss as L

CAUSE = "b"

DIAGNOSIS = """
The DFPO weights w~ were not detached. The loss value is unchanged, but
autograd differentiated through w~ = Adv-Orthogonal(s), adding terms that
couple every token to the other rollouts of its group with per-copy
different sizes, so a shared token's coefficients no longer sum to zero
(even on-policy). Fixed with w_tilde = L.adv_orthogonal(w, adv, group).detach().
"""


def dfpo_orth_loss(new_logp, old_logp, mask, adv, group, max_len):
    mask_f = mask.float()
    lens = mask.sum(1).clamp(min=1)
    n_seqs = mask.shape[0]
    log_ratio = (new_logp - old_logp) * mask_f
    w = (log_ratio.sum(1) / lens).exp()
    w_tilde = L.adv_orthogonal(w, adv, group).detach()
    per_seq = w_tilde * adv / (n_seqs * max_len)
    return -(per_seq[:, None] * new_logp * mask_f).sum()
