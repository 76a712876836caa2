"""Exercise 6, reference answer: the weights are detached.

w~ is built from s_i = exp(mean_t log rho_{i,t}), which depends on log pi_new.
Without a stop-gradient, autograd also differentiates through w~, which adds
to c_{i,t} a term -d(w~_i Â_i)/d log pi_new(y_{i,t}) * (sum_t log pi_new) / (N L_max)
that differs from rollout to rollout. The shared token's copies then no
longer carry coefficients proportional to w~_i Â_i, and sum_i c_i != 0,
on-policy too. The loss value is the same with or without the stop-gradient.
"""

import loss


def dfpo_orth_loss(new_logp, old_logp, mask, adv, group, max_len):
    mask_f = mask.float()
    lens = mask.sum(1).clamp(min=1)
    n_seqs = mask.shape[0]
    log_ratio = (new_logp - old_logp) * mask_f
    w = (log_ratio.sum(1) / lens).exp()
    w_tilde = loss.adv_orthogonal(w, adv, group).detach()  # the fix: a stop-gradient on the weights
    per_seq = w_tilde * adv / (n_seqs * max_len)
    return -(per_seq[:, None] * new_logp * mask_f).sum()
