"""Numbers for every formula in loss.py, and the central exchangeability test.

Coefficients are c_{i,t} = -d loss / d log pi_new(y_{i,t}), read off by autograd
and compared with values written out by hand from THEORY.md section 3.
"""
import math

import pytest
import torch

import loss
from lab import batch_stats, estimators, objectives, residuals

# One group of three completions of lengths 2, 3, 4 (T = 4); rewards 1, 0, 0.
MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
R = torch.tensor([1.0, 0.0, 0.0])
GROUP = torch.zeros(3, dtype=torch.long)
LENS = torch.tensor([2.0, 3.0, 4.0])
SIGMA = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # sample std of (1, 0, 0)
A_STD = torch.tensor([2 / 3, -1 / 3, -1 / 3]) / (SIGMA + 1e-6)
A_CEN = torch.tensor([2 / 3, -1 / 3, -1 / 3])


def loss_of(new, old, mask, adv, group, objective="grpo", clip="none", counts=None, weights=None,
            ref_logprobs=None, entropy=None, keep=None, **settings):
    """objectives.policy_loss with the step's data and the settings given as keywords."""
    batch = objectives.LossBatch(new, old, mask, adv, group, counts=counts, weights=weights,
                        ref_logprobs=ref_logprobs, entropy=entropy, keep=keep)
    return objectives.policy_loss(batch, objectives.LossSettings(objective, clip, **settings))


def coef(objective, new, old, adv, mask=MASK, group=GROUP, clip="none", **kw):
    """The catalogue's coefficients (objectives.policy_loss), its stats and the ratio stats."""
    new = new.clone().requires_grad_(True)
    total, stats = loss_of(new, old, mask, adv, group, objective, clip, **kw)
    c = residuals.coefficients(total, new)
    return c.detach(), dict(stats, **batch_stats.ratio_stats(new, old, mask))


def lesson_coef(objective, new, old, adv, mask=MASK, group=GROUP, clip=None, step=None):
    """The lesson's coefficients (loss.grpo and its kin) and clip fraction."""
    new = new.clone().requires_grad_(True)
    step = step or loss.step_counts(mask, adv)
    lesson = objectives.OBJECTIVES[objective].lesson
    total, clip_frac = lesson(new, old, mask, adv, group, step, clip)
    return residuals.coefficients(total, new).detach(), float(clip_frac)


def expand(per_seq, mask=MASK):
    return per_seq[:, None] * mask.float()


def test_advantages_by_hand():
    torch.testing.assert_close(estimators.advantages(R, GROUP, "grpo"), A_STD)
    dapo_own = objectives.own_estimator("dapo")
    torch.testing.assert_close(estimators.advantages(R, GROUP, dapo_own), A_STD)
    torch.testing.assert_close(estimators.advantages(R, GROUP, "dr_grpo"), A_CEN)
    torch.testing.assert_close(
        estimators.advantages(R, GROUP, objectives.own_estimator("dfpo_orth")), A_CEN
    )
    torch.testing.assert_close(
        estimators.advantages(R, GROUP, "rloo"), torch.tensor([1.0, -0.5, -0.5])
    )
    torch.testing.assert_close(
        estimators.advantages(R, GROUP, "positive_only"), torch.tensor([1.0, 0, 0])
    )
    # two interleaved groups are handled separately
    r = torch.tensor([1.0, 3.0, 0.0, 2.0])
    g = torch.tensor([0, 1, 0, 1])
    torch.testing.assert_close(
        estimators.advantages(r, g, "dr_grpo"), torch.tensor([0.5, 0.5, -0.5, -0.5])
    )


ON = torch.log(torch.rand(3, 4, generator=torch.Generator().manual_seed(0)) * 0.9 + 0.05) * MASK


@pytest.mark.parametrize("name, adv, expected", [
    ("grpo", A_STD, A_STD / (3 * LENS)),
    ("dr_grpo", A_CEN, A_CEN / (3 * 4)),
    ("dapo", A_STD, A_STD / 9),
    ("rloo", torch.tensor([1.0, -0.5, -0.5]), torch.tensor([1.0, -0.5, -0.5]) / 3),
    ("gspo", A_STD, A_STD / (3 * LENS)),
    ("dfpo_min", A_CEN, A_CEN / (3 * 4)),
    ("dfpo_orth", A_CEN, A_CEN / (3 * 4)),
    ("positive_only", torch.tensor([1.0, 0, 0]), torch.tensor([1 / 2, 0, 0])),
])
def test_on_policy_coefficients_by_hand(name, adv, expected):
    c, stats = coef(name, ON, ON.detach(), adv, clip="sym")
    torch.testing.assert_close(c, expand(expected))
    assert stats["clip_frac"] == 0 and abs(stats["seq_ratio"] - 1) < 1e-6
    if objectives.OBJECTIVES[name].lesson:  # the lesson's own function: the same hand numbers
        c, clip_frac = lesson_coef(name, ON, ON.detach(), adv, clip=(0.8, 1.2))
        torch.testing.assert_close(c, expand(expected))
        assert clip_frac == 0


@pytest.mark.parametrize("name", [n for n, o in objectives.OBJECTIVES.items() if o.lesson])
@pytest.mark.parametrize("clip", ["none", "sym", "higher"])
def test_the_lesson_and_the_catalogue_compute_the_same_numbers(name, clip):
    """Bit for bit, off-policy and with clips binding: a run may take either route."""
    gen = torch.Generator().manual_seed(1)
    mask = torch.rand(12, 6, generator=gen) < 0.8
    mask[:, 0] = True
    group = torch.arange(12) // 4
    new = torch.randn(12, 6, generator=gen) * mask
    old = (new - 0.3 * torch.randn(12, 6, generator=gen)) * mask
    adv = loss.advantages(torch.randint(0, 2, (12,), generator=gen).float(), group,
                          scale=objectives.own_estimator(name) == "grpo")
    step = loss.step_counts(mask, adv, max_len=7)
    bounds = loss.clip_bounds(clip, 0.2, 0.28)
    c, clip_frac = lesson_coef(name, new, old, adv, mask, group, bounds, step)
    c2, stats = coef(name, new, old, adv, mask, group, clip, counts=step)
    assert torch.equal(c, c2) and clip_frac == float(stats["clip_frac"])
    if clip != "none":
        assert c.abs().sum() > 0


# Off-policy: log-ratios per token, rows 0..2.
LOGR = torch.tensor([[0.10, -0.30, 0, 0], [0.05, 0.02, 0.20, 0], [-0.10, 0.00, 0.10, 0.40]])
OLD = ON - LOGR * MASK


def test_off_policy_token_ppo_coefficients_by_hand():
    rho = LOGR.exp() * MASK
    c, _ = coef("dapo", ON, OLD, A_STD, clip="none")
    torch.testing.assert_close(c, rho * A_STD[:, None] / 9)
    # clip=higher, eps_low=0.2, eps_high=0.28: A>0 row loses tokens with rho > 1.28,
    # A<0 rows lose tokens with rho < 0.8; here only row 2, t=3 (rho=e^0.4=1.49 > 1.28,
    # but A<0 so it keeps it) ... and row 0 keeps all (rho <= 1.11).
    c, st = coef("dapo", ON, OLD, A_STD, clip="higher", clip_low=0.2, clip_high=0.28)
    torch.testing.assert_close(c, rho * A_STD[:, None] / 9)
    assert st["clip_frac"] == 0
    # a tighter symmetric clip binds: eps = 0.15 -> row 0 t=1 (rho .74 < .85) keeps
    # (A>0 takes min, unclipped is smaller), row 2 t=3 (1.49 > 1.15, A<0) keeps,
    # row 1 t=2 (rho 1.22 > 1.15, A<0) keeps; row 2 t=0 (rho .905, A<0) keeps.
    # Clipping zeroes: A>0 & rho>1.15 -> none; A<0 & rho<.85 -> none. So add one:
    logr = LOGR.clone()
    logr[0, 0] = 0.3    # A>0, rho=1.35 > 1.15: clipped
    logr[1, 1] = -0.3   # A<0, rho=0.74 < 0.85: clipped
    old = ON - logr * MASK
    c, st = coef("grpo", ON, old, A_STD, clip="sym", clip_low=0.15)
    keep = torch.ones(3, 4)
    keep[0, 0] = keep[1, 1] = 0
    torch.testing.assert_close(c, keep * logr.exp() * MASK * (A_STD / (3 * LENS))[:, None])
    assert abs(st["clip_frac"] - 2 / 9) < 1e-6


def test_gspo_coefficients_by_hand():
    s = torch.tensor(
        [(0.10 - 0.30) / 2, (0.05 + 0.02 + 0.20) / 3, (-0.1 + 0 + 0.1 + 0.4) / 4]
    ).exp()
    c, st = coef("gspo", ON, OLD, A_STD, clip="none")
    torch.testing.assert_close(c, expand(s * A_STD / (3 * LENS)))
    assert abs(st["seq_ratio"] - float(s.mean())) < 1e-6
    # per-sequence clip eps=0.05: s = (.905, 1.094, 1.105); row 0 (A>0, s<1.05) keeps,
    # rows 1, 2 (A<0, s>0.95) keep; eps=0.05 on the low side does not bind either.
    c, st = coef("gspo", ON, OLD, A_STD, clip="sym", clip_low=0.05)
    torch.testing.assert_close(c, expand(s * A_STD / (3 * LENS)))
    # flip the advantages: now row 0 (A<0, s=.905 < .95) and rows 1, 2 (A>0, s > 1.05) clip
    c, st = coef("gspo", ON, OLD, -A_STD, clip="sym", clip_low=0.05)
    assert torch.all(c == 0) and st["clip_frac"] == 1.0


def test_dfpo_coefficients_by_hand():
    s = torch.tensor(
        [(0.10 - 0.30) / 2, (0.05 + 0.02 + 0.20) / 3, (-0.1 + 0 + 0.1 + 0.4) / 4]
    ).exp()
    c, _ = coef("dfpo_min", ON, OLD, A_CEN)
    torch.testing.assert_close(c, expand(s.min() * A_CEN / 12))
    w = s - (A_CEN @ s) / (A_CEN @ A_CEN) * A_CEN
    c, _ = coef("dfpo_orth", ON, OLD, A_CEN)
    torch.testing.assert_close(c, expand(w * A_CEN / 12))
    assert abs(float(A_CEN @ w)) < 1e-6


def test_dfpo_transforms_alone():
    w = torch.tensor([1.2, 0.9, 1.0, 2.0, 0.5])
    a = torch.tensor([1.0, -1.0, 0.0, 0.5, -0.5])
    g = torch.tensor([0, 0, 0, 1, 1])
    torch.testing.assert_close(loss.min_replace(w, a, g), torch.tensor([0.9, 0.9, 0.9, 0.5, 0.5]))
    # group 0: A.w = 0.3, |A|^2 = 2 -> w - 0.15 A; group 1: A.w = .75, |A|^2 = .5 -> w - 1.5 A
    torch.testing.assert_close(loss.adv_orthogonal(w, a, g),
                               torch.tensor([1.05, 1.05, 1.0, 1.25, 1.25]))
    zero = torch.zeros(3)
    torch.testing.assert_close(loss.adv_orthogonal(w[:3], zero, g[:3]), w[:3])


# ----------------------------------------------------------------------------- exchangeability

def shared_group(G=4, seed=0, off_policy=False, shared_logratio=0.0):
    """A group whose rollouts all emit the same first token after the prompt (so
    log pi_new and log pi_old of that token are identical across the group),
    then continue with different tokens and lengths. Rewards 1,0,1,0,..."""
    g = torch.Generator().manual_seed(seed)
    T = G + 2
    lens = torch.arange(2, G + 2)
    mask = torch.arange(T)[None] < lens[:, None]
    new = torch.log(torch.rand(G, T, generator=g) * 0.9 + 0.05) * mask
    new[:, 0] = new[0, 0]
    logr = torch.zeros(G, T)
    if off_policy:
        logr = (torch.rand(G, T, generator=g) - 0.5) * 0.6
        logr[:, 0] = shared_logratio
    old = new - logr * mask
    rewards = torch.tensor([1.0, 0.0] * (G // 2))
    return new, old, mask, rewards, torch.zeros(G, dtype=torch.long)


def shared_token_net(name, off_policy, clip="none", shared_logratio=0.0, **kw):
    new, old, mask, r, grp = shared_group(off_policy=off_policy, shared_logratio=shared_logratio)
    adv = estimators.advantages(r, grp, objectives.own_estimator(name))
    c, _ = coef(name, new, old, adv, mask, grp, clip=clip, **kw)
    return float(c[:, 0].sum()), float(c[:, 0].abs().sum())


@pytest.mark.parametrize("name", ["dr_grpo", "dapo", "rloo"])
def test_shared_token_cancels_on_policy(name):
    net, mass = shared_token_net(name, off_policy=False, clip="sym")
    assert mass > 1e-3 and abs(net) < 1e-6


@pytest.mark.parametrize("name", ["dfpo_min", "dfpo_orth"])
@pytest.mark.parametrize("clip", ["none", "sym"])
def test_shared_token_cancels_for_dfpo_also_off_policy(name, clip):
    net, mass = shared_token_net(name, off_policy=True, clip=clip, shared_logratio=0.25)
    assert mass > 1e-3 and abs(net) < 1e-6


def test_grpo_with_unequal_lengths_does_not_cancel():
    net, mass = shared_token_net("grpo", off_policy=False)
    assert abs(net) > 0.05 * mass


def test_gspo_with_unequal_sequence_ratios_does_not_cancel():
    on_net, _ = shared_token_net("gspo", off_policy=False)
    net, mass = shared_token_net("gspo", off_policy=True, shared_logratio=0.1)
    assert abs(net) > 0.05 * mass and abs(net) != pytest.approx(abs(on_net), rel=1e-3)


def test_dapo_clip_higher_breaks_cancellation_when_shared_ratio_crosses_a_bound():
    # inside the bounds it still cancels ...
    net, mass = shared_token_net("dapo", True, "higher", 0.1, clip_low=0.2, clip_high=0.28)
    assert abs(net) < 1e-6
    # ... past 1 + eps_high the A>0 copies lose their gradient, the A<0 ones keep it
    net, mass = shared_token_net("dapo", True, "higher", 0.3, clip_low=0.2, clip_high=0.28)
    assert net < -0.1 * mass


def test_first_token_residual_stat():
    c = torch.tensor([[1.0, 5], [-1.0, 5], [2.0, 0], [2.0, 0]])
    g = torch.tensor([0, 0, 1, 1])
    assert residuals.first_token_residual(c, g) == pytest.approx((0 / 2 + 4 / 4) / 2)
    new, old, mask, r, grp = shared_group()
    for name, expect_zero in [("dr_grpo", True), ("grpo", False)]:
        c, _ = coef(
            name, new, old, estimators.advantages(r, grp, objectives.own_estimator(name)), mask, grp
        )
        assert (residuals.first_token_residual(c, grp) < 1e-6) == expect_zero


# ----------------------------------------------------------------------------- zero variance

def test_zero_variance_groups_contribute_nothing_and_are_counted():
    r = torch.tensor([1.0, 1, 1, 0, 1, 0, 0, 0, 0])
    g = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    assert loss.mixed_fraction(r, g) == pytest.approx(1 / 3)  # one group of three is mixed
    mask = torch.ones(9, 3, dtype=torch.bool)
    new = torch.full((9, 3), -0.5)
    for name in objectives.OBJECTIVES:
        adv = estimators.advantages(r, g, objectives.own_estimator(name))
        c, _ = coef(name, new, new - 0.1, adv, mask, g)
        # positive_only: its advantage is 1[r>0], not group-relative; kl_cov: its
        # |log rho| penalty acts on the selected tokens whatever their advantage
        if name not in ("positive_only", "kl_cov"):
            assert torch.all(c[[0, 1, 2, 6, 7, 8]] == 0), name
            assert torch.any(c[[3, 4, 5]] != 0), name


# ----------------------------------------------------------------------------- micro-batches

def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    N, T = 8, 6
    lens = torch.randint(1, T + 1, (N,), generator=g)
    mask = torch.arange(T)[None] < lens[:, None]
    new = torch.log(torch.rand(N, T, generator=g) * 0.9 + 0.05) * mask
    old = new - (torch.rand(N, T, generator=g) - 0.5) * 0.4 * mask
    r = torch.tensor([1.0, 0, 0, 1, 1, 1, 0, 1])
    grp = torch.arange(4).repeat_interleave(2)
    return new, old, mask, r, grp


def grad_of(name, parts, clip="sym"):
    new, old, mask, r, grp = batch()
    adv = estimators.advantages(r, grp, objectives.own_estimator(name))
    counts = loss.step_counts(mask, adv, max_len=6)
    new = new.clone().requires_grad_(True)
    for idx in parts:
        idx = torch.tensor(idx)
        total, _ = loss_of(new[idx], old[idx], mask[idx], adv[idx], grp[idx], name, clip,
                           clip_low=0.1, counts=counts)
        total.backward()
    return new.grad


WHOLE = [list(range(8))]
SPLIT_ROWS = [[0, 2, 4, 6], [1, 3, 5, 7]]     # splits every group
SPLIT_GROUPS = [[0, 1, 2, 3], [4, 5, 6, 7]]   # whole groups


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "dapo", "rloo", "gspo", "positive_only"])
def test_micro_batch_accumulation_equals_whole_batch(name):
    torch.testing.assert_close(grad_of(name, SPLIT_ROWS), grad_of(name, WHOLE))


@pytest.mark.parametrize("name", ["dfpo_min", "dfpo_orth"])
def test_dfpo_is_micro_batch_invariant_only_with_whole_groups(name):
    torch.testing.assert_close(grad_of(name, SPLIT_GROUPS), grad_of(name, WHOLE))
    assert not torch.allclose(grad_of(name, SPLIT_ROWS), grad_of(name, WHOLE))


def test_bad_names():
    with pytest.raises(ValueError, match="unknown clip"):
        loss.clip_bounds("wide", 0.2, 0.2)
    with pytest.raises(ValueError, match="unknown loss"):
        coef("ppo", ON, ON, A_STD)


# ----------------------------------------------------------------------------- exch_residual

# One group of four; rewards 1, 1, 0, 0. Rollouts 0-2 start with token 5, rollout 3 with 1;
# rollouts 0 and 2 share the whole completion.
HA_TOK = torch.tensor([[5, 2, 9], [5, 3, 9], [5, 2, 9], [1, 2, 9]])
HA_MASK = torch.ones(4, 3, dtype=torch.bool)
HA_G = torch.zeros(4, dtype=torch.long)
HA_A = torch.tensor([0.5, 0.5, -0.5, -0.5])


def test_history_token_sets_by_hand():
    ids = residuals.history_token_sets(HA_TOK, HA_MASK, HA_G)
    assert ids[0, 0] == ids[1, 0] == ids[2, 0] != ids[3, 0]   # token 5 after the prompt
    assert ids[0, 1] == ids[2, 1] != ids[1, 1]                 # 2 after 5, not 3 after 5
    assert ids[3, 1] != ids[0, 1]                              # 2 after 1 is another history
    assert ids[0, 2] == ids[2, 2] and len({int(ids[1, 2]), int(ids[0, 2]), int(ids[3, 2])}) == 3
    # another group never shares a set, even with identical tokens
    two = residuals.history_token_sets(HA_TOK[:2].repeat(2, 1), HA_MASK[:4],
                                       torch.tensor([0, 0, 1, 1]))
    assert two[0, 0] == two[1, 0] != two[2, 0] == two[3, 0]


def test_exch_residual_by_hand():
    c = HA_A[:, None].expand(4, 3).clone()
    # equal weights: 0, although the first tokens differ and no set but one sums A to 0
    assert residuals.exch_residual(c, HA_A, HA_TOK, HA_MASK, HA_G) == 0.0
    # per-sequence weights 1/3, 1/3, 1/4, 1/2 (a 1/L_i): three sets with >= 2 copies.
    # {0,1,2} after the prompt: c = 1/6, 1/6, -1/8; wbar = (11/24)/1.5; res = (1/18)/(11/24) = 4/33
    # {0,2} twice: c = 1/6, -1/8, sum A = 0: res = (1/24)/(7/24) = 1/7
    w = torch.tensor([1 / 3, 1 / 3, 1 / 4, 1 / 2])[:, None]
    expected = (4 / 33 + 2 / 7) / 3
    # float32 coefficients
    assert abs(residuals.exch_residual(c * w, HA_A, HA_TOK, HA_MASK, HA_G) - expected) < 1e-6


def test_exch_residual_zero_for_dr_grpo_where_first_token_residual_is_not():
    """Off-policy dr_grpo on a whole group whose first tokens differ: the copies of
    each (h, a) share one ratio, so every set cancels up to the credit sum_S A. The
    first-token residual mixes the ratios of token 5 and token 1 and is not 0."""
    new = torch.log(
        torch.tensor([[0.5, 0.4, 0.9], [0.5, 0.3, 0.9], [0.5, 0.4, 0.9], [0.2, 0.6, 0.8]])
    )
    old = new - torch.tensor(
        [[0.2, 0.1, -0.1], [0.2, 0.3, 0.0], [0.2, 0.1, -0.1], [-0.3, 0.05, 0.1]]
    )
    c, _ = coef("dr_grpo", new, old, HA_A, mask=HA_MASK, group=HA_G, clip="none")
    assert residuals.exch_residual(c, HA_A, HA_TOK, HA_MASK, HA_G) < 1e-6
    assert residuals.first_token_residual(c, HA_G) > 0.05
    # on-policy both are 0
    c0, _ = coef("dr_grpo", new, new.detach(), HA_A, mask=HA_MASK, group=HA_G, clip="none")
    assert (
        residuals.exch_residual(c0, HA_A, HA_TOK, HA_MASK, HA_G) < 1e-6
        and residuals.first_token_residual(c0, HA_G) < 1e-6
    )
    # grpo's 1/L_i with unequal lengths breaks it on-policy
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1]], dtype=torch.bool)
    cg, _ = coef("grpo", new, new.detach(), HA_A, mask=mask, group=HA_G, clip="none")
    assert residuals.exch_residual(cg, HA_A, HA_TOK, mask, HA_G) > 0.05


# ----------------------------------------------------------------------------- the three statements

def test_equal_weights_cancel_for_every_centred_advantage():
    """Sufficient: c_i = w Â_i with one w, any centred A -> sum_i c_i = 0."""
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        n = int(torch.randint(2, 9, (1,), generator=g))
        r = torch.rand(n, generator=g, dtype=torch.float64)
        A = r - r.mean()
        w = float(torch.rand(1, generator=g)) * 3 + 0.1
        assert abs(float((w * A).sum())) < 1e-12


def test_unequal_weights_can_cancel_and_the_residual_is_then_zero():
    """Exact for one A: sum_i w_i Â_i = 0 also with unequal weights; exch_residual
    is then 0, so a residual of 0 does not mean the weights are equal."""
    w = torch.tensor([1.15, 0.95, 0.85, 1.05], dtype=torch.float64)
    A = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    assert abs(float((w * A).sum())) < 1e-12
    tokens = torch.full((4, 1), 7)  # one shared first token, the whole group
    mask, group = torch.ones(4, 1, dtype=torch.bool), torch.zeros(4, dtype=torch.long)
    assert residuals.exch_residual((w * A)[:, None], A, tokens, mask, group) < 1e-12
    # unequal weights that do not cancel: |sum c| / sum |c| = 0.15 / 4.15 by hand
    w2 = torch.tensor([1.3, 0.95, 0.85, 1.05], dtype=torch.float64)
    res = residuals.exch_residual((w2 * A)[:, None], A, tokens, mask, group)
    assert abs(res - 0.15 / 4.15) < 1e-12


def test_unequal_weights_fail_to_cancel_for_some_centred_advantage():
    """Necessary only for all A: for any unequal w, Â_i = w_i - mean(w) is centred
    and sum_i w_i Â_i = sum_i (w_i - mean w)^2 > 0."""
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        n = int(torch.randint(2, 9, (1,), generator=g))
        w = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
        A = w - w.mean()
        assert abs(float(A.sum())) < 1e-12
        assert float((w * A).sum()) > 0.5 * float(((w - w.mean()) ** 2).sum()) > 0


def test_history_token_sets_partition_equals_a_trie_on_random_batches():
    """The position-by-position numbering gives the same sets as a trie over each group's
    completions (the definition, written the slow way), masks with holes included."""
    def trie(tokens, mask, group):
        g, tok, m = loss.compact(group).tolist(), tokens.tolist(), mask.tolist()
        out, nodes = {}, {}
        for i in range(len(tok)):
            node = ("g", g[i])
            for t in range(len(tok[i])):
                if not m[i][t]:
                    break
                node = nodes.setdefault((node, tok[i][t]), len(nodes))
                out[i, t] = node
        return out

    gen = torch.Generator().manual_seed(0)
    for trial in range(150):
        n, T, V = (int(torch.randint(1, hi, (1,), generator=gen)) for hi in (16, 10, 4))
        tok = torch.randint(0, V, (n, T), generator=gen)
        mask = torch.arange(T)[None, :] < torch.randint(0, T + 1, (n, 1), generator=gen)
        if trial % 3 == 0:
            mask[:, T // 2] &= torch.rand(n, generator=gen) > 0.5
        grp = torch.randint(0, 3, (n,), generator=gen) * 7
        ids, ref = residuals.history_token_sets(tok, mask, grp), trie(tok, mask, grp)
        assert sorted((int(i), int(t)) for i, t in torch.nonzero(ids >= 0)) == sorted(ref)
        pairs = {(int(ids[i, t]), r) for (i, t), r in ref.items()}
        assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs})
        on = ids[ids >= 0]
        assert on.numel() == 0 or int(on.max()) + 1 == len(set(on.tolist()))  # 0..K-1
