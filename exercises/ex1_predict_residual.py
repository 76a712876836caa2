"""Exercise 1 (predict, then run): the shared-token residual of grpo and dr_grpo.

The batch: one group of 4 rollouts of the same prompt.

    rollout   reward   completion length L_i
       0        1            2
       1        0            3
       2        1            4
       3        0            5

All four emit the same first completion token (same history: the prompt). Its
residual is |sum_i c_i| / sum_i |c_i| over the four copies of that token
(loss.first_token_residual), where c_i is the token's coefficient in rollout i.
On-policy (pi_new = pi_old), c_i = A_i / (N L_i) for grpo and
c_i = A_i / (N L_max) for dr_grpo (THEORY.md section 3).

Fill in PREDICTION *before* you run ``python exercises/ex1_run.py``.
Then run the check: ``python -m pytest exercises -k ex1``.
"""

PREDICTION = {
    # grpo's residual on the batch above: a number between 0 and 1
    # (the check accepts an error of up to 0.02).
    "grpo": None,
    # dr_grpo's residual on the same batch: a number between 0 and 1.
    "dr_grpo": None,
    # grpo's residual when all four lengths are 3 (rewards unchanged).
    "grpo_equal_lengths": None,
    # On the batch above, does grpo's net coefficient sum_i c_i push the shared
    # token's log-probability "up" or "down", or is it "none" (exactly zero)?
    "grpo_direction": None,
    # The same question with the rewards swapped to 0, 1, 0, 1
    # (now the two longer rollouts are the correct ones).
    "grpo_direction_swapped": None,
}
