"""Exercise 1, reference answer.

grpo: A_i = +a for rollouts 0 and 2, -a for 1 and 3 (same |A|, since the group
has two 1s and two 0s), and c_i = A_i / (N L_i). So

    residual = |1/2 - 1/3 + 1/4 - 1/5| / (1/2 + 1/3 + 1/4 + 1/5)
             = (13/60) / (77/60) = 13/77 = 0.169

and the net coefficient is positive: the correct rollouts are the shorter
ones, so their copies of the shared token weigh more (1/L_i is larger) and
the token is pushed up. Swap the rewards and the longer rollouts are the
correct ones: same residual, net negative, the token is pushed down. Nothing
about that token differs between good and bad rollouts; the push comes only
from the lengths. With equal lengths 1/L_i is the same for every copy, so
grpo cancels too.

dr_grpo divides every rollout by the same N L_max: c_i = w A_i with one w, and
sum_i A_i = 0, so the residual is 0 whatever the lengths.
"""

PREDICTION = {
    "grpo": 13 / 77,
    "dr_grpo": 0.0,
    "grpo_equal_lengths": 0.0,
    "grpo_direction": "up",
    "grpo_direction_swapped": "down",
}
