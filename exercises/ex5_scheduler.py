"""Exercise 5 (design and implement): a mini-batch scheduler that beats shuffle.

Read: THEORY.md section 5, batching.py's docstring (the signature, the rules,
minibatch_stats), README "Mini-batch schedulers".

A rollout batch of B groups x G rollouts is cut into M mini-batches, one
optimizer step each. Cancellation of a group's shared tokens needs the whole
group in one step; positives and negatives meeting in every step needs the
signs spread evenly. ``shuffle`` (TRL's behaviour) gives neither.

Design ``scheduler`` so that, on the check's 200 seeded batches
(8 groups x 4 rollouts, M = 2 and M = 4):

1. it returns a valid cut: M non-empty LongTensors that together hold every
   index 0..N-1 exactly once;
2. no group is ever split (minibatch_stats(...)["groups_split"] == 0), and
   the numbers of groups per mini-batch differ by at most 1;
3. its mean *sign spread* is lower than shuffle's and lower than query's on
   the same batches, where for one cut

       sign spread = (max_c P_c - min_c P_c) + (max_c N_c - min_c N_c)

   with P_c, N_c the numbers of positive and negative rollouts in
   mini-batch c (mb_pos and mb_neg of minibatch_stats).

Use ``generator`` for any randomness (same seed, same cut). Do not call
batching.query_balanced (the check replaces it with a trap); the other helpers
of batching.py are fine.

Check: python -m pytest exercises -k ex5
"""

import torch


def scheduler(group_ids, advantages, lengths, M, generator):
    """group_ids LongTensor [N], advantages FloatTensor [N] (only the sign
    matters), lengths LongTensor [N], M mini-batches (1 <= M <= number of
    groups), generator a seeded torch.Generator. Returns a list of M
    LongTensors of rollout indices."""
    raise NotImplementedError("exercise 5: design and implement scheduler")
