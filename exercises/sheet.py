"""Your answer sheet for the exercises that ask for numbers or words.

Write your name or student id in STUDENT (as on your class's roster), then run
``python -m exercises.problems`` to see your own tables. Numbers are computed by
hand (a calculator is fine) from those tables and THEORY.md: keep at least 4
significant digits in intermediate results, give 3. Counts are whole numbers.
``python -m exercises.check exN`` says whether your numbers are filled in and in
range; your teacher marks their values and reads the written answers. When you are done,
``python -m exercises.handin`` packs this sheet and your code into one zip to hand in.
This file is read as data, never run.
"""

STUDENT = ""

# Exercise 1 (your table "Exercise 1"). Numbers to 3 significant digits.
EX1 = {
    "grpo_residual": None,  # the first-token residual |sum_i c_i| / sum_i |c_i| under grpo
    "grpo_net": None,       # sum_i c_{i,0} under grpo (signed)
    "grpo_coef_k": None,    # c_{k,0} under grpo, for the k of your table
    "dr_grpo_coef_k": None,  # c_{k,0} under dr_grpo
}
# Where does grpo's push on the shared token come from, and which way does it go in your
# group? Name the rollouts of your table that decide it.
EX1_WHY = """
"""

# Exercise 3: which transform can raise a rollout's weight above its w_i? Show it on three
# weights and advantages of your own, worked by hand. Why does that matter when w is an
# importance ratio?
EX3_WHY = """
"""

# Exercise 4 (your table "Exercise 4"). Numbers to 3 significant digits.
EX4 = {
    "gspo_residual": None,   # first-token residual under gspo
    "luspo_residual": None,  # first-token residual under luspo
    "orth_delta_k": None,    # w~_k - w_k under dfpo_orth, with w_i = s_i, for your k (signed)
}
# luspo has no 1/L_i: why does its shared token still not cancel in your group (use your
# s_i), and what does dfpo_orth do instead (use your orth_delta_k)?
EX4_WHY = """
"""

# Exercise 6: what was wrong in ex6_buggy_loss.py, what did it do to the gradient (quote
# the coefficients the check printed on-policy, before your fix, for two rollouts), and
# why did that stop the shared token from cancelling?
EX6_WHY = """
"""

# Exercise 7 (your table "Exercise 7"). Counts: whole numbers.
EX7 = {
    "tokens": None,  # completion tokens of the canonical scratchpad solution, EOS included
    "template": None,  # how many of them are template tokens
    # all completion tokens (EOS included) of the plain task over every problem of your range
    "plain_tokens": None,
}
# What does a scratchpad do to the spread of completion lengths in a group, and so to
# grpo's 1/L_i? Compare your scratchpad count with the plain task's tokens per problem.
EX7_WHY = """
"""
