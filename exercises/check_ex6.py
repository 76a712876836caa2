"""Check for exercise 6: the fixed dfpo_orth_loss against hand numbers and loss.py."""

import math
import re

import torch

import _helpers as H
import _impl
import loss as L

EX = _impl.load("ex6_buggy_loss")

# One group of three completions of lengths 2, 3, 4 (T = L_max = 4); rewards 1, 0, 0.
MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
GROUP = torch.zeros(3, dtype=torch.long)
A = torch.tensor([2 / 3, -1 / 3, -1 / 3])  # r - mean(r)
NEW = torch.log(torch.rand(3, 4, generator=torch.Generator().manual_seed(0)) * 0.9 + 0.05) * MASK
# off-policy log-ratios log(pi_new / pi_old) per token
LOGR = torch.tensor([[0.10, -0.30, 0, 0], [0.05, 0.02, 0.20, 0], [-0.10, 0.00, 0.10, 0.40]])


def coef_of(new, old, mask=MASK, adv=A, group=GROUP, max_len=4):
    new = new.clone().requires_grad_(True)
    total = EX.dfpo_orth_loss(new, old, mask, adv, group, max_len)
    (g,) = torch.autograd.grad(total, new)
    return total.detach(), -g


def test_ex6_loss_value():
    s = torch.tensor([(0.10 - 0.30) / 2, (0.05 + 0.02 + 0.20) / 3, (-0.1 + 0 + 0.1 + 0.4) / 4]).exp()
    w = s - (A @ s) / (A @ A) * A
    total, _ = coef_of(NEW, NEW - LOGR * MASK)
    expected = -float(((w * A / 12)[:, None] * NEW * MASK).sum())
    assert math.isclose(float(total), expected, rel_tol=1e-5)


def test_ex6_on_policy_coefficients_by_hand():
    # pi_old = pi_new: s = 1, and w~ = 1 because A is centred. c_i = A_i / (N L_max) = A_i / 12.
    _, c = coef_of(NEW, NEW.detach())
    expected = torch.tensor([1 / 18, -1 / 36, -1 / 36])[:, None] * MASK
    torch.testing.assert_close(c, expected)


def test_ex6_off_policy_coefficients_by_hand():
    s = torch.tensor([(0.10 - 0.30) / 2, (0.05 + 0.02 + 0.20) / 3, (-0.1 + 0 + 0.1 + 0.4) / 4]).exp()
    w = s - (A @ s) / (A @ A) * A  # Adv-Orthogonal
    _, c = coef_of(NEW, NEW - LOGR * MASK)
    torch.testing.assert_close(c, (w * A / 12)[:, None] * MASK)


def test_ex6_shared_token_cancels_off_policy():
    new, old, mask, r, grp = H.shared_group((2, 3, 4, 5), (1.0, 0.0, 1.0, 0.0), off_policy=True,
                                            shared_logratio=0.2)
    adv = L.advantages(r, grp, "dfpo_orth")
    _, c = coef_of(new, old, mask, adv, grp, max_len=5)
    net, mass = H.net_and_mass(c)
    assert mass > 1e-3 and abs(net) < 1e-6, f"shared token: net {net:.2e}, mass {mass:.2e}"


def test_ex6_agrees_with_loss_py():
    g = torch.Generator().manual_seed(1)
    N, T = 8, 6
    lens = torch.randint(1, T + 1, (N,), generator=g)
    mask = torch.arange(T)[None] < lens[:, None]
    new = torch.log(torch.rand(N, T, generator=g) * 0.9 + 0.05) * mask
    old = new - (torch.rand(N, T, generator=g) - 0.5) * 0.4 * mask
    r = torch.tensor([1.0, 0, 0, 1, 1, 1, 0, 1])
    grp = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    adv = L.advantages(r, grp, "dfpo_orth")
    _, mine = coef_of(new, old, mask, adv, grp, max_len=T)
    ref, _ = H.coefficients("dfpo_orth", new, old, mask, adv, grp, "none",
                            counts=L.step_counts(mask, adv, "dfpo_orth", max_len=T))
    torch.testing.assert_close(mine, ref)


def test_ex6_cause():
    assert EX.CAUSE in ("a", "b", "c", "d"), "set CAUSE to 'a', 'b', 'c' or 'd'"
    assert EX.CAUSE == "b", ("compare the numbers of ex6_diagnose.py with the options: which of them would "
                            "still leave the loss value right?")


def test_ex6_diagnosis_is_written():
    """Key terms only: whether the explanation holds is for whoever reads it."""
    text = EX.DIAGNOSIS
    words = text.split()
    assert len(words) >= 10, "write one or two sentences in DIAGNOSIS (at least 10 words)"
    assert re.search(r"detach|stop[- ]?grad|sg\(|no_grad", text, re.I), \
        "name what was missing on the weights"
    assert re.search(r"gradient|autograd|differentiat|backprop", text, re.I), \
        "say what it did to the gradient"
    assert re.search(r"cancel|sum|residual|shared|copies|copy", text, re.I), \
        "say why that breaks the cancellation of the shared token"
