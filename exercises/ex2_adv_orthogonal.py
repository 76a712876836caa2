"""Exercise 2 (implement): DFPO's Adv-Orthogonal transform.

Read: THEORY.md section 2.3 (the transforms), loss.py's docstring (the DFPO part).

Off-policy, each rollout i of a group carries a per-sequence importance weight
w_i (in loss.py: w_i = sg(s_i), s_i = exp(mean_t log rho_{i,t})). The token
coefficients are c_i = w_i A_i / const, so a token shared by the whole group
gets sum_i w_i A_i / const, which is not 0 when the w_i differ. Adv-Orthogonal
replaces w, inside each group g, by its projection orthogonal to A:

    w~_g = w_g - (A_g . w_g / |A_g|^2) A_g        so that   sum_{i in g} A_i w~_i = 0

where w_g and A_g are the vectors of the group's members. A group whose
advantages are all zero (|A_g| = 0) keeps its w unchanged.

Take the formula literally, for any batch:
- groups may differ in size (a batch can hold a group of 3 and a group of 5);
- the members of a group need not be next to each other (rows 0, 2 and 7
  can form one group), and group ids are arbitrary labels;
- use A exactly as given: the caller decides how advantages are computed,
  and they need not sum to zero inside a group.

Write it with torch operations. Do not call loss.adv_orthogonal (the check
replaces it with a trap). Do not modify the input tensors.

Check: python -m pytest exercises -k ex2
"""

import torch


def adv_orthogonal(w, adv, group):
    """w~ as defined above.

    w:     FloatTensor [N], per-rollout weights.
    adv:   FloatTensor [N], per-rollout advantages.
    group: LongTensor [N], the group id of each rollout. Ids are arbitrary
           labels (e.g. 7, 3, 7, 5, 5): they need not be 0..K-1, a group's
           rows need not be contiguous, and groups may differ in size.
    Returns a new FloatTensor [N].
    """
    raise NotImplementedError("exercise 2: implement adv_orthogonal")
