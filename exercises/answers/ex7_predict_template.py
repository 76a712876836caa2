"""Exercise 7, reference answer.

Plain add: the only template token is EOS. Sums of two 2-digit numbers have 2
digits (below 100) or 3 digits, so a completion is 3 or 4 tokens with one
template token: about 1/3.6 = 0.28.

Scratchpad add: per column "d+d=s" or "d+d+1=ss" (two or three template
symbols: '+', '=', and '+' for the carry), a ',' between the columns, ';'
before the answer, and EOS. About 7.5 of 17.5 tokens, 0.43. The restated
operand digits are labelled copy (0.23), so the compute share falls from 0.72
to 0.35. mul goes the same way: 0.21 -> 0.29.

Why it matters: template tokens are the ones a group's rollouts most often
share (same format after the same history), so they are where cancellation
does its work, and where grpo's 1/L_i drift and a split group hurt. A
scratchpad also makes completions longer and their lengths more varied,
which is what 1/L_i needs to show.
"""

PREDICTION = {
    "add_plain": 0.28,
    "add_scratch": 0.43,
    "mul_direction": "up",
    "copy_with_scratchpad": True,
}
