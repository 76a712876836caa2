"""Exercise 7 (predict, then run): how a scratchpad changes the token mix.

Read: toy_tasks.py (the docstring, _label, the add and mul solutions and
their categories), THEORY.md section 4 "Token categories".

Every completion token is labelled template (format, separators, EOS),
copy (an operand digit restated) or compute (a digit that results from
computation). Take the canonical solutions of all 90 x 90 problems of
2-digit addition, EOS included:

    plain:       47+85=  ->  132<eos>
    scratchpad:  47+85=  ->  7+5=12,4+8+1=13;132<eos>

Fill in PREDICTION *before* you run ``python exercises/ex7_run.py``.
Then run the check: ``python -m pytest exercises -k ex7``.
"""

PREDICTION = {
    # Share of template tokens among all completion tokens of 2-digit add,
    # no scratchpad: a number between 0 and 1 (accepted within 0.05).
    "add_plain": None,
    # The same with the scratchpad (accepted within 0.08).
    "add_scratch": None,
    # For 2-digit mul, does the scratchpad make the template share go
    # "up" or "down", or stay the "same"?
    "mul_direction": None,
    # With the scratchpad on, do copy tokens appear in add's solutions? True or False.
    "copy_with_scratchpad": None,
}
