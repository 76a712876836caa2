"""Exercise 3, reference answer: Min-Replace.

scatter_reduce with "amin" takes the minimum of the members of each group slot
(starting from +inf), and indexing with the same slots broadcasts it back.
"""

import torch


def min_replace(w, adv, group):
    slot = torch.unique(group, return_inverse=True)[1]
    K = int(slot.max()) + 1
    mins = torch.full((K,), float("inf"), dtype=w.dtype)
    return mins.scatter_reduce(0, slot, w, "amin")[slot]
