"""Exercise 6 (diagnose and fix): a DFPO objective that does not cancel.

Read: THEORY.md section 2 (the fixes), loss.py's docstring and policy_loss.

``dfpo_orth_loss`` below is meant to be the ``dfpo_orth`` row of loss.py
written out on its own, with no clip:

    loss = - sum_{i,t} sg(w~_i) * A_i / (N * L_max) * log pi_new(y_{i,t})

    w_i = exp(mean_t log rho_{i,t})                 (s_i, per sequence)
    w~  = Adv-Orthogonal(w) inside each group       (loss.adv_orthogonal)
    sg  = stop-gradient

so that every token's coefficient is c_{i,t} = -d loss / d log pi_new(y_{i,t})
= w~_i A_i / (N L_max), and a token shared by a whole group cancels.

It contains one bug. Run the check, read which tests fail and what they
print, find the line, and fix it here (keep the function's signature).
Then write one or two sentences in DIAGNOSIS: what was wrong, and why it
breaks cancellation.

Check: python -m pytest exercises -k ex6
"""

import torch

import loss as L

DIAGNOSIS = """
"""


def dfpo_orth_loss(new_logp, old_logp, mask, adv, group, max_len):
    """new_logp, old_logp: [N, T] log-probs of the sampled tokens; mask: [N, T]
    bool; adv: [N] group-centred advantages; group: [N] group ids; max_len:
    L_max, the longest possible completion. Returns the scalar loss."""
    mask_f = mask.float()
    lens = mask.sum(1).clamp(min=1)
    n_seqs = mask.shape[0]
    log_ratio = (new_logp - old_logp) * mask_f
    w = (log_ratio.sum(1) / lens).exp()
    w_tilde = L.adv_orthogonal(w, adv, group)
    per_seq = w_tilde * adv / (n_seqs * max_len)
    return -(per_seq[:, None] * new_logp * mask_f).sum()
