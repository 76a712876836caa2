"""Exercise 4, reference answer."""

CANCELS = {
    "A": {"grpo": False, "dr_grpo": True, "dapo": True, "gspo": False},
    "B": {"grpo": True, "dr_grpo": True, "dapo": True, "gspo": False},
    "C": {"grpo": False, "dr_grpo": False, "dapo": False, "gspo": False},
}

CAUSE = {
    ("A", "grpo"): "length_normalisation",
    ("B", "gspo"): "sequence_ratio",
    ("C", "dapo"): "clipping",
}

CLIPPED_COPIES_IN_C = "positive"

EXPLANATION = """
The shared token's copies have coefficients c_i = A_i / (N L_i) under grpo and
c_i = A_i / (N L_max) under dr_grpo. The advantages sum to zero in the group,
so the copies cancel only if every copy carries the same factor in front of
A_i. dr_grpo's factor 1 / (N L_max) is one number for the whole group: the
residual is 0.0000 in setting A. grpo's factor 1 / L_i differs between
rollouts of lengths 2, 3, 4, 5: the residual is 0.1688 (= 13/77). In setting
B, where all lengths are 4, grpo cancels again (0.0000), which pins the
cause on 1/L_i and not on the advantage scale. In A the correct rollouts
(lengths 2 and 4) are shorter than the wrong ones (3 and 5), so their copies
weigh more and the net coefficient is positive: grpo pushes the shared token
up. That token is identical in good and bad rollouts; no reward asked for it
to move. The push comes from the lengths alone, and with the lengths
reversed it would go down.
"""
