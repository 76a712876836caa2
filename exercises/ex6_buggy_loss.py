"""Exercise 6 (diagnose and fix): a DFPO objective whose shared tokens do not cancel.

Read: THEORY.md sections 2.1 and 2.3. Then measure; do not look for the answer in the
library: the check's numbers are what your written answer must explain.
It does not need exercise 2: while the check measures this loss, it puts its own
Adv-Orthogonal (for its inputs only) in place of loss.adv_orthogonal, so keep
calling loss.adv_orthogonal(w, adv, group) as below.

``dfpo_orth_loss`` below is DFPO with Adv-Orthogonal, written out on its own, with no
clip. Its specification is the gradient it must produce: every completion token of
rollout i gets the coefficient

    c_{i,t} = -d loss / d log pi_new(y_{i,t}) = w~_i * Â_i / (N * L_max)

    w_i = exp(mean_t log rho_{i,t})                 (s_i, per sequence)
    w~  = Adv-Orthogonal(w) inside each group       (loss.adv_orthogonal)

so that a token shared by a whole group gets sum_i w~_i Â_i / (N L_max) = 0.
The function returns the right loss *value*, but one line is wrong. Find it
by measuring, not by reading:

    python -m exercises.check ex6

prints, for one group whose first token is shared, the coefficients autograd
gives next to the specified ones, on-policy and off-policy, and the shared
token's residual. Fix the function here (keep its signature), run the check
again, then write EX6_WHY in exercises/sheet.py.
"""

import loss


def dfpo_orth_loss(new_logp, old_logp, mask, adv, group, max_len):
    """new_logp, old_logp: [N, T] log-probs of the sampled tokens; mask: [N, T]
    bool; adv: [N] group-centred advantages; group: [N] group ids; max_len:
    L_max, the longest possible completion. Returns the scalar loss."""
    mask_f = mask.float()
    lens = mask.sum(1).clamp(min=1)
    n_seqs = mask.shape[0]
    log_ratio = (new_logp - old_logp) * mask_f
    w = (log_ratio.sum(1) / lens).exp()
    w_tilde = loss.adv_orthogonal(w, adv, group)
    per_seq = w_tilde * adv / (n_seqs * max_len)
    return -(per_seq[:, None] * new_logp * mask_f).sum()
