"""Exercise 4 (diagnose): which objectives break cancellation, and why.

Run ``python exercises/ex4_residuals.py`` (read its docstring for the three
settings A, B, C), then fill in the three answers below.

Check: python -m pytest exercises -k ex4
"""

# 1. For each setting and objective: does the shared token cancel
#    (residual below 1e-6)? True or False.
CANCELS = {
    "A": {"grpo": None, "dr_grpo": None, "dapo": None, "gspo": None},
    "B": {"grpo": None, "dr_grpo": None, "dapo": None, "gspo": None},
    "C": {"grpo": None, "dr_grpo": None, "dapo": None, "gspo": None},
}

# 2. What breaks exchangeability in these three cells? Pick one cause each from
#    "length_normalisation"  the 1/L_i factor
#    "sequence_ratio"        a per-sequence importance ratio s_i
#    "clipping"              a clip that binds for some copies and not for others
#    "std_normalisation"     dividing the advantages by the group's sigma
#    "token_ratio"           the per-token ratio rho_{i,t}
CAUSE = {
    ("A", "grpo"): None,
    ("B", "gspo"): None,
    ("C", "dapo"): None,
}

# In setting C, which copies of the shared token lost their gradient to the
# clip: the "positive" ones (A > 0) or the "negative" ones (A < 0)?
CLIPPED_COPIES_IN_C = None

# 3. In at least 40 words: why does grpo break cancellation in setting A while
#    dr_grpo keeps it? Quote a residual from the table as evidence. Then say in
#    which direction grpo moves the shared token there, and why no reward
#    asked for that.
EXPLANATION = """
"""
