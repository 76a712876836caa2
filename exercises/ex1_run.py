"""Exercise 1: print the shared-token residual of grpo and dr_grpo.

Run from the repository root, after you have filled in
exercises/ex1_predict_residual.py:

    python exercises/ex1_run.py
"""

import _helpers as H

LENGTHS = (2, 3, 4, 5)
EQUAL = (3, 3, 3, 3)
REWARDS = (1.0, 0.0, 1.0, 0.0)
SWAPPED = (0.0, 1.0, 0.0, 1.0)


def direction(net, tol=1e-9):
    return "up" if net > tol else "down" if net < -tol else "none"


def measure():
    """The five quantities that ex1_predict_residual.py asks for."""
    batch = H.shared_group(LENGTHS, REWARDS)
    out = {"grpo": H.residual("grpo", batch),
           "dr_grpo": H.residual("dr_grpo", batch),
           "grpo_equal_lengths": H.residual("grpo", H.shared_group(EQUAL, REWARDS))}
    for key, rewards in (("grpo_direction", REWARDS), ("grpo_direction_swapped", SWAPPED)):
        new, old, mask, r, grp = H.shared_group(LENGTHS, rewards)
        adv = H.L.advantages(r, grp, "grpo")
        c, _ = H.coefficients("grpo", new, old, mask, adv, grp)
        out[key] = direction(H.net_and_mass(c)[0])
    return out


def main():
    print(f"one group, lengths {LENGTHS}, rewards {REWARDS}, on-policy")
    for key, value in measure().items():
        shown = f"{value:.4f}" if isinstance(value, float) else value
        print(f"  {key:<24} {shown}")


if __name__ == "__main__":
    main()
