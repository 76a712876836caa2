"""Check for exercise 2: Adv-Orthogonal, alone and inside the objective."""

import pytest
import torch

import _helpers as H
import _impl
import loss as L

adv_orthogonal = _impl.load("ex2_adv_orthogonal").adv_orthogonal


@pytest.fixture(autouse=True)
def trap(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("exercise 2 asks you to write adv_orthogonal yourself, "
                             "not to call loss.adv_orthogonal")
    monkeypatch.setattr(L, "adv_orthogonal", refuse)


def centred(r, group):
    return L.advantages(torch.as_tensor(r, dtype=torch.float), torch.as_tensor(group), "dr_grpo")


def test_ex2_hand_numbers():
    w = torch.tensor([1.2, 0.9, 1.0, 2.0, 0.5])
    a = torch.tensor([1.0, -1.0, 0.0, 0.5, -0.5])
    g = torch.tensor([0, 0, 0, 1, 1])
    # group 0: A.w = 0.3, |A|^2 = 2, so w - 0.15 A; group 1: A.w = 0.75, |A|^2 = 0.5, so w - 1.5 A
    torch.testing.assert_close(adv_orthogonal(w, a, g), torch.tensor([1.05, 1.05, 1.0, 1.25, 1.25]))


def test_ex2_groups_of_unequal_size_not_contiguous():
    # group 5 = rows 0, 2 (two members); group 2 = rows 1, 3, 4 (three members)
    w = torch.tensor([1.2, 0.9, 0.6, 1.5, 1.0])
    a = torch.tensor([0.5, 1.0, -0.5, -0.5, -0.5])
    g = torch.tensor([5, 2, 5, 2, 2])
    # group 5: A.w = 0.3, |A|^2 = 0.5, w - 0.6 A; group 2: A.w = -0.35, |A|^2 = 1.5, w + (0.35/1.5) A
    k = 0.35 / 1.5
    expected = torch.tensor([0.9, 0.9 + k, 0.9, 1.5 - 0.5 * k, 1.0 - 0.5 * k])
    torch.testing.assert_close(adv_orthogonal(w, a, g), expected)


def test_ex2_uses_the_advantages_as_given_not_recentred():
    # Advantages need not be centred (e.g. positive_only's 1[r > 0]). Project on A itself:
    # A.w = 1 + 1 + 0 = 2, |A|^2 = 1.25, so w~ = w - 1.6 A. Re-centring A first gives [0.75, 2, 0.75].
    w = torch.tensor([1.0, 2.0, 0.5])
    a = torch.tensor([1.0, 0.5, 0.0])
    out = adv_orthogonal(w, a, torch.tensor([4, 4, 4]))
    torch.testing.assert_close(out, torch.tensor([-0.6, 1.2, 0.5]))
    assert abs(float((a * out).sum())) < 1e-6, "sum_i A_i w~_i must be 0 for the A you were given"


def test_ex2_orthogonal_to_the_advantages_in_every_group():
    gen = torch.Generator().manual_seed(0)
    group = torch.tensor([7, 3, 7, 5, 3, 5, 7, 3, 5, 7, 3, 5])  # interleaved, arbitrary labels
    adv = centred([1, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 0], group)
    w = torch.rand(12, generator=gen) + 0.5
    out = adv_orthogonal(w, adv, group)
    assert out.shape == w.shape
    for gid in (3, 5, 7):
        m = group == gid
        assert abs(float((adv[m] * out[m]).sum())) < 1e-6, f"group {gid}: sum_i A_i w~_i != 0"
        # the projection moves w only along A: w~ - w is a multiple of A
        d = out[m] - w[m]
        k = float((d * adv[m]).sum() / (adv[m] ** 2).sum())
        torch.testing.assert_close(d, k * adv[m])


def test_ex2_is_a_projection():
    gen = torch.Generator().manual_seed(1)
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    adv = centred([1, 0, 0, 1, 0, 1], group)
    once = adv_orthogonal(torch.rand(6, generator=gen) + 0.5, adv, group)
    torch.testing.assert_close(adv_orthogonal(once, adv, group), once)


def test_ex2_no_op_when_w_is_constant_in_each_group():
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = centred([1, 0, 1, 0, 1, 1, 1, 0], group)
    for w in (torch.ones(8), torch.tensor([1.3] * 4 + [0.7] * 4)):
        torch.testing.assert_close(adv_orthogonal(w, adv, group), w)


def test_ex2_zero_advantage_group_keeps_its_weights():
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    adv = centred([1, 1, 1, 1, 0, 0], group)  # group 0: all equal rewards, A = 0
    w = torch.tensor([1.2, 0.8, 1.1, 1.0, 0.9, 1.3])
    out = adv_orthogonal(w, adv, group)
    assert torch.isfinite(out).all(), "a group with |A| = 0 gives 0/0: keep its w unchanged"
    torch.testing.assert_close(out[:3], w[:3])


def test_ex2_leaves_its_inputs_alone():
    w = torch.tensor([1.2, 0.9, 1.0, 2.0, 0.5])
    a = torch.tensor([1.0, -1.0, 0.0, 0.5, -0.5])
    g = torch.tensor([0, 0, 0, 1, 1])
    w0, a0, g0 = w.clone(), a.clone(), g.clone()
    adv_orthogonal(w, a, g)
    assert torch.equal(w, w0) and torch.equal(a, a0) and torch.equal(g, g0)


def two_groups(shared_logratio):
    """Two groups (ids 4 and 9) from _helpers.shared_group, off-policy."""
    a = H.shared_group((2, 3, 4, 5), (1.0, 0.0, 1.0, 0.0), seed=0, off_policy=True,
                       shared_logratio=shared_logratio)
    b = H.shared_group((5, 4, 3, 2), (1.0, 1.0, 0.0, 0.0), seed=1, off_policy=True,
                       shared_logratio=-shared_logratio)
    new, old, mask, r, _ = (torch.cat(pair) for pair in zip(a, b))
    return new, old, mask, r, torch.tensor([4] * 4 + [9] * 4)


@pytest.mark.parametrize("clip", ["none", "sym"])
def test_ex2_inside_the_objective_the_shared_token_cancels_off_policy(monkeypatch, clip):
    new, old, mask, r, grp = two_groups(0.15)
    adv = L.advantages(r, grp, "dfpo_orth")
    # Without a transform (w~ = w) the shared token does not cancel on this batch ...
    monkeypatch.setattr(L, "adv_orthogonal", lambda w, a, g: w)
    c, _ = H.coefficients("dfpo_orth", new, old, mask, adv, grp, clip)
    assert L.first_token_residual(c, grp) > 0.01
    # ... with yours it must.
    monkeypatch.setattr(L, "adv_orthogonal", adv_orthogonal)
    c, _ = H.coefficients("dfpo_orth", new, old, mask, adv, grp, clip)
    assert float(c[:, 0].abs().sum()) > 1e-3, "the shared token has no weight at all"
    assert L.first_token_residual(c, grp) < 1e-6, "the shared token's coefficients do not sum to 0"
