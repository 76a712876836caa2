"""Exercise 3 (implement): DFPO's Min-Replace transform.

Read: THEORY.md section 2.3 (the transforms), loss.py's docstring (the DFPO part).

Min-Replace gives every rollout of a group the smallest weight in its group:

    w~_i = min_{j in group(i)} w_j

Then every copy of a token shared by the group has the same weight, so
sum_i w~_i A_i = w~ sum_i A_i = 0 when the advantages are centred. It is also
conservative: w~_i <= w_i, so no rollout is up-weighted. ``adv`` is not needed
for the rule; it is in the signature so that both DFPO transforms can be
swapped for each other.

Write it with torch operations. Do not call loss.min_replace (the check
replaces it with a trap). Do not modify the input tensors.

Check: python -m pytest exercises -k ex3
"""

import torch


def min_replace(w, adv, group):
    """w~ as defined above.

    w:     FloatTensor [N], per-rollout weights.
    adv:   FloatTensor [N], per-rollout advantages (unused by the rule).
    group: LongTensor [N], the group id of each rollout; arbitrary labels.
           A group's rows need not be contiguous, and groups may differ
           in size (e.g. 5, 2, 5, 2, 2).
    Returns a new FloatTensor [N].
    """
    raise NotImplementedError("exercise 3: implement min_replace")
