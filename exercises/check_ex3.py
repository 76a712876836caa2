"""Check for exercise 3: Min-Replace, alone and inside the objective."""

import pytest
import torch

import _helpers as H
import _impl
import loss as L

min_replace = _impl.load("ex3_min_replace").min_replace


@pytest.fixture(autouse=True)
def trap(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("exercise 3 asks you to write min_replace yourself, "
                             "not to call loss.min_replace")
    monkeypatch.setattr(L, "min_replace", refuse)


def centred(r, group):
    return L.advantages(torch.as_tensor(r, dtype=torch.float), torch.as_tensor(group), "dr_grpo")


def test_ex3_hand_numbers():
    w = torch.tensor([1.2, 0.9, 1.0, 2.0, 0.5])
    a = torch.tensor([1.0, -1.0, 0.0, 0.5, -0.5])
    g = torch.tensor([0, 0, 0, 1, 1])
    torch.testing.assert_close(min_replace(w, a, g), torch.tensor([0.9, 0.9, 0.9, 0.5, 0.5]))


def test_ex3_groups_of_unequal_size_not_contiguous():
    # group 5 = rows 0, 2; group 2 = rows 1, 3, 4
    w = torch.tensor([1.2, 0.9, 0.6, 1.5, 1.0])
    out = min_replace(w, torch.tensor([0.5, 1.0, -0.5, -0.5, -0.5]), torch.tensor([5, 2, 5, 2, 2]))
    torch.testing.assert_close(out, torch.tensor([0.6, 0.9, 0.6, 0.9, 0.9]))


def test_ex3_group_minimum_with_arbitrary_labels():
    gen = torch.Generator().manual_seed(0)
    group = torch.tensor([7, 3, 7, 5, 3, 5, 7, 3, 5, 7, 3, 5])  # interleaved, arbitrary labels
    w = torch.rand(12, generator=gen) + 0.5
    out = min_replace(w, torch.zeros(12), group)
    assert out.shape == w.shape
    for gid in (3, 5, 7):
        m = group == gid
        assert torch.all(out[m] == w[m].min()), f"group {gid} does not get its own minimum"
    assert torch.all(out <= w), "Min-Replace never raises a weight"


def test_ex3_cancels_with_centred_advantages():
    gen = torch.Generator().manual_seed(1)
    group = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    adv = centred([1, 0, 0, 1, 1, 1, 0, 0], group)
    out = min_replace(torch.rand(8, generator=gen) + 0.5, adv, group)
    for gid in (0, 1):
        m = group == gid
        assert abs(float((adv[m] * out[m]).sum())) < 1e-6


def test_ex3_no_op_when_w_is_constant_in_each_group():
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    w = torch.tensor([1.3] * 3 + [0.7] * 3)
    torch.testing.assert_close(min_replace(w, torch.zeros(6), group), w)


def test_ex3_leaves_its_inputs_alone():
    w = torch.tensor([1.2, 0.9, 1.0, 2.0, 0.5])
    a = torch.tensor([1.0, -1.0, 0.0, 0.5, -0.5])
    g = torch.tensor([0, 0, 0, 1, 1])
    w0, a0, g0 = w.clone(), a.clone(), g.clone()
    min_replace(w, a, g)
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
def test_ex3_inside_the_objective_the_shared_token_cancels_off_policy(monkeypatch, clip):
    new, old, mask, r, grp = two_groups(0.15)
    adv = L.advantages(r, grp, "dfpo_min")
    # Without a transform (w~ = w) the shared token does not cancel on this batch ...
    monkeypatch.setattr(L, "min_replace", lambda w, a, g: w)
    c, _ = H.coefficients("dfpo_min", new, old, mask, adv, grp, clip)
    assert L.first_token_residual(c, grp) > 0.01
    # ... with yours it must.
    monkeypatch.setattr(L, "min_replace", min_replace)
    c, _ = H.coefficients("dfpo_min", new, old, mask, adv, grp, clip)
    assert float(c[:, 0].abs().sum()) > 1e-3, "the shared token has no weight at all"
    assert L.first_token_residual(c, grp) < 1e-6, "the shared token's coefficients do not sum to 0"
