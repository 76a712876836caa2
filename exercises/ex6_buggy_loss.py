"""Exercise 6 (diagnose and fix): a DFPO objective that does not cancel.

Read: THEORY.md sections 2.1 and 2.3, loss.py's docstring and policy_loss.

``dfpo_orth_loss`` below is meant to be the ``dfpo_orth`` row of loss.py
written out on its own, with no clip. Its specification is the gradient it
must produce: every completion token of rollout i gets the coefficient

    c_{i,t} = -d loss / d log pi_new(y_{i,t}) = w~_i * A_i / (N * L_max)

    w_i = exp(mean_t log rho_{i,t})                 (s_i, per sequence)
    w~  = Adv-Orthogonal(w) inside each group       (loss.adv_orthogonal)

so that a token shared by a whole group gets sum_i w~_i A_i / (N L_max) = 0.

The function returns the right loss *value*, but it contains one bug. Find
it by measuring, not by reading:

    python exercises/ex6_diagnose.py

prints, for one group whose first token is shared, the coefficients that
autograd gives this function next to the ones the specification asks for,
on-policy and off-policy, and the shared token's residual. Work out from
those numbers what autograd differentiates that it should not, fix that
line here (keep the signature), and answer CAUSE and DIAGNOSIS below.

Check: python -m pytest exercises -k ex6
"""

import torch

import loss as L

# Which one explains what ex6_diagnose.py shows? "a", "b", "c" or "d".
#   a  the advantages are not centred, so sum_i A_i != 0
#   b  the loss is also differentiated through the weights w~, which depend on log pi_new
#   c  the normalisation uses each rollout's own length L_i instead of L_max
#   d  the log-ratio has the wrong sign, so w is 1/s instead of s
CAUSE = None

# One or two sentences: what was wrong, and why it breaks cancellation.
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
