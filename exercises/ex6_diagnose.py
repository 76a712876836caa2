"""Exercise 6: measure what dfpo_orth_loss does to a shared token.

Run from the repository root:

    python exercises/ex6_diagnose.py

One group of 4 rollouts (rewards 1, 0, 1, 0; lengths 2, 3, 4, 5) whose first
completion token is shared. For the dfpo_orth_loss of ex6_buggy_loss.py it
prints, per rollout, the shared token's coefficient c_i = -d loss / d log pi
as autograd computes it, next to the coefficient its specification asks for,
w~_i A_i / (N L_max); then the shared token's residual |sum c| / sum |c| and
the loss value of both. Once on-policy (pi_old = pi_new), once off-policy.
"""

import torch

import _helpers as H
import _impl
import loss as L

EX = _impl.load("ex6_buggy_loss")
LENGTHS, REWARDS = (2, 3, 4, 5), (1.0, 0.0, 1.0, 0.0)


def measure(off_policy):
    """(actual coefficients [N, T], specified coefficients [N, T], actual loss, specified loss)."""
    new, old, mask, r, grp = H.shared_group(LENGTHS, REWARDS, off_policy=off_policy, shared_logratio=0.2)
    adv = L.advantages(r, grp, "dfpo_orth")
    T = mask.shape[1]
    leaf = new.clone().requires_grad_(True)
    total = EX.dfpo_orth_loss(leaf, old, mask, adv, grp, T)
    (g,) = torch.autograd.grad(total, leaf)
    s = (((new - old) * mask).sum(1) / mask.sum(1)).exp()
    w = L.adv_orthogonal(s, adv, grp)
    spec = (w * adv / (len(adv) * T))[:, None] * mask
    spec_loss = -(spec * new).sum()
    return -g, spec, float(total.detach()), float(spec_loss)


def residual(c):
    return float(c[:, 0].sum().abs() / c[:, 0].abs().sum().clamp(min=1e-30))


def main():
    print(f"one group: rewards {REWARDS}, lengths {LENGTHS}; token 0 is shared by all four rollouts")
    for name, off in (("on-policy", False), ("off-policy", True)):
        c, spec, loss_val, spec_val = measure(off)
        print(f"\n{name}:  loss value {loss_val:+.6f}  (specification {spec_val:+.6f})")
        print("  rollout   c of the shared token   specified   |  c summed over the rollout's tokens   specified")
        for i in range(c.shape[0]):
            print(f"  {i:>7}   {float(c[i, 0]):>+21.6f}   {float(spec[i, 0]):>+9.6f}   |"
                  f"  {float(c[i].sum()):>+35.6f}   {float(spec[i].sum()):>+9.6f}")
        print(f"  shared-token residual: {residual(c):.4f}   (specification: {residual(spec):.4f})")


if __name__ == "__main__":
    main()
