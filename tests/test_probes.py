"""probes.py (the E1-E6 measurements): each against a hand value or an independent route."""
import dataclasses

import pytest
import torch
from lab import probes
import toy_tasks
from sampler import sample
from test_diagnostics import hand_batch, tiny_model
from toy_tasks import EOS, PAD, encode
from lab import estimators


def test_closed_form_matches_unembedding_step_and_needs_the_coupling_term():
    model, b = tiny_model(), hand_batch()
    adv = estimators.advantages(b.rewards, b.group)
    coef = probes.token_coefficients(model, b, adv)
    lr = 1e-2
    ct = probes.coupling_terms(model, b, coef, lr)
    actual = probes.token_deltas(
        model, probes.one_update(model, b, adv, "sgd", lr, params="head"), b
    )[b.mask]
    rel = lambda x: float((x - actual).norm() / actual.norm())
    assert actual.abs().max() > 1e-5  # a real, first-order-sized change
    assert rel(ct["pred"]) < 0.05
    assert rel(ct["self"]) > 0.05  # the self term alone does not explain the step
    assert torch.allclose(ct["pred"], ct["self"] + ct["coupling"])


def test_head_only_update_moves_only_the_head():
    model, b = tiny_model(), hand_batch()
    adv = estimators.advantages(b.rewards, b.group)
    new = probes.one_update(model, b, adv, "adam", 1e-3, params="head")
    for (n, p), q in zip(model.named_parameters(), new.parameters()):
        assert torch.equal(p, q) == (n != "lm_head.weight"), n


def test_coupling_summary_shares_and_same_token_alpha():
    model, b = tiny_model(), hand_batch()
    adv = estimators.advantages(b.rewards, b.group)
    ct = probes.coupling_terms(model, b, probes.token_coefficients(model, b, adv), 1.0)
    s = probes.coupling_summary(ct, adv[:, None].expand_as(b.mask)[b.mask])
    assert s["mass_same"] + s["mass_diff"] == pytest.approx(1.0)
    grid = torch.tensor(s["mass_by_conf_same"]) + torch.tensor(s["mass_by_conf_diff"])
    assert float(grid.sum()) == pytest.approx(1.0)
    assert s["alpha_same"] > 0 > s["alpha_diff"]  # near-uniform policy: alpha ~ 1 vs ~ -1/V


def test_masked_closed_form_twin_matches_masked_head_step():
    model, b = tiny_model(), hand_batch()
    adv = estimators.advantages(b.rewards, b.group)
    m = b.mask
    lr = 1e-2
    d = probes.masked_update_deltas(model, b, adv, lr, params="head")
    y, a = b.tokens[m], adv[:, None].expand_as(m)[m]
    coef = probes.token_coefficients(model, b, adv)
    keep = probes.opposite_same_token_keep(y, a)
    assert not keep.all()
    twin = probes.coupling_terms(model, b, coef, lr, keep=keep)["pred"]
    full = probes.coupling_terms(model, b, coef, lr)["pred"]
    x = d["no_opposite_same_token"][m]
    assert float((twin - x).norm() / x.norm()) < 0.05
    assert float((full - x).norm() / x.norm()) > 0.05
    pos = probes.coupling_terms(model, b, coef * (adv >= 0)[:, None], lr)["pred"]
    assert float((pos - d["positive_only"][m]).norm() / d["positive_only"][m].norm()) < 0.05


def test_masked_sweep_equals_separate_sgd_steps():
    """The linear route (one gradient per class, theta + lr (G - G_drop)) against
    separate one_update steps with the removed coefficients zeroed, at two lrs."""
    model, b = tiny_model(), hand_batch()
    adv = estimators.advantages(b.rewards, b.group)
    m, tok = b.mask, b.tokens
    sgn = torch.sign(adv)[:, None].expand_as(tok)
    coef = probes.token_coefficients(model, b, adv)
    sweep = probes.masked_update_deltas(model, b, adv, [1e-2, 1e-1])
    assert set(sweep) == {1e-2, 1e-1}
    for lr in (1e-2, 1e-1):
        step = lambda c: probes.token_deltas(
            model, probes.one_update(model, b, adv, "sgd", lr, coef=c), b
        )
        d = sweep[lr]
        assert torch.allclose(d["full"], step(coef), rtol=1e-9, atol=1e-12)
        assert torch.allclose(d["positive_only"], step(coef * (sgn >= 0)), rtol=1e-9, atol=1e-12)
        want = d["full"].clone()
        for v in tok[m].unique().tolist():
            for s in (1, -1):
                cls, drop = m & (tok == v) & (sgn == s), m & (tok == v) & (sgn == -s)
                if cls.any() and drop.any():
                    want[cls] = step(coef * ~drop)[cls]
        assert not torch.allclose(want, d["full"])  # some class really lost its partners
        assert torch.allclose(d["no_opposite_same_token"], want, rtol=1e-9, atol=1e-12)
    one = probes.masked_update_deltas(model, b, adv, 1e-1)  # a single lr: the variants directly
    assert torch.allclose(one["full"], sweep[1e-1]["full"])


# ----------------------------------------------------------------------------- flips

def test_flip_table_on_a_hand_made_delta():
    delta = torch.tensor([[0.5, -0.5, 0.01, 0.0], [0.2, 0.3, -0.2, 0.9], [-0.3, 0.3, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0, 0.0])
    t = probes.flip_table(delta, mask, adv, eps=0.1)
    assert t["pos"] == {"boosted": pytest.approx(1 / 3), "suppressed": pytest.approx(1 / 3),
                        "stable": pytest.approx(1 / 3), "n": 3}
    assert t["neg"] == {"boosted": pytest.approx(3 / 4), "suppressed": pytest.approx(1 / 4),
                        "stable": 0.0, "n": 4}
    assert t["flipped"] == pytest.approx((1 + 3) / 7)
    assert sorted(t["delta_pos"]) == pytest.approx([-0.5, 0.01, 0.5])
    empty = probes.flip_table(delta, mask, torch.zeros(3), 0.1)
    assert empty["pos"]["boosted"] is None and empty["flipped"] is None


# ----------------------------------------------------------------------------- value, categories

def test_mc_value_known_values():
    model = tiny_model(double=False)
    task = toy_tasks.make_add(2)
    probs = [(12, 34), (56, 78)]
    prompts = [encode(task.prompt(p)) for p in probs]
    gen = torch.Generator().manual_seed(0)
    b = sample(model, prompts, 3, task.max_new_tokens, 1.0, generator=gen)
    problems = [probs[i // 3] for i in range(6)]
    one = encode("1")[0]
    first_is_1 = dataclasses.replace(task, reward=lambda p, t: float(t[:1] == "1"))
    b.rewards = torch.tensor([first_is_1.reward(p, toy_tasks.decode(t))
                                 for p, t in zip(problems, b.tokens.tolist())])
    V = probes.mc_values(model, first_is_1, b, problems, 4, gen)
    lens = b.mask.sum(1)
    assert torch.equal(V[:, 1], (b.tokens[:, 0] == one).float())  # decided by the first token
    assert torch.equal(V[torch.arange(6), lens], b.rewards)
    assert bool(((V[:, 0] >= 0) & (V[:, 0] <= 1)).all())
    past = torch.arange(V.shape[1])[None, :] > lens[:, None]
    assert bool(torch.isnan(V[past]).all()) and not bool(torch.isnan(V[~past]).any())
    always = dataclasses.replace(task, reward=lambda p, t: 1.0)
    b.rewards = torch.ones(6)
    V = probes.mc_values(model, always, b, problems, 2, gen)
    assert bool((V[~torch.isnan(V)] == 1).all())


def test_value_gap_bins_and_pick_by_hand():
    v = torch.tensor([1.0, 0.5, 0.0, 0.25, 1.0])
    d = torch.tensor([0.2, 0.05, -0.3, -0.2, 0.0])
    g = probes.value_gap(v, d, 0.1)  # boosted {1.0}, suppressed {0.0, 0.25}
    assert g["gap"] == pytest.approx(1.0 - 0.125) and (g["n_boosted"], g["n_suppressed"]) == (1, 2)
    assert probes.value_gap(v, d, 0.0)["gap"] == pytest.approx((1.0 + 0.5) / 2 - 0.125)
    assert probes.value_gap(v, d, 1.0)["gap"] is None
    bins = probes.value_bins(torch.tensor([0.9, 0.1, 0.5, 0.3, 0.7, 0.2]), 3)
    assert bins.tolist() == [2, 0, 1, 1, 2, 0]
    tied = probes.value_bins(
        torch.tensor([1.0, 1.0, 0.0, 1.0]), 2, torch.Generator().manual_seed(0)
    )
    assert tied[2] == 0 and sorted(tied.tolist()) == [0, 0, 1, 1]
    cand = torch.tensor([[True, False, True], [False, True, False]])
    pick = probes.pick_tokens(cand, 2, torch.Generator().manual_seed(0))
    assert len(pick) == 2 and all(bool(cand[r, t]) for r, t in pick.tolist())
    assert sorted(map(tuple, probes.pick_tokens(cand, 5).tolist())) == [(0, 0), (0, 2), (1, 1)]


def test_shuffled_advantages_permute_inside_groups():
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0, 2.0, -2.0, 3.0])
    group = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    out = probes.shuffled_advantages(adv, group, torch.Generator().manual_seed(3))
    for k in range(3):
        assert sorted(out[group == k].tolist()) == sorted(adv[group == k].tolist())
    assert out[6] == 3.0
    moved = sum(
        not torch.equal(
            probes.shuffled_advantages(adv, group, torch.Generator().manual_seed(s)), adv
        )
        for s in range(20)
    )
    assert moved >= 15  # a permutation of 4 and of 2 is the identity with probability 1/48


def test_token_values_match_mc_values_on_the_subset():
    model = tiny_model(double=False)
    task = toy_tasks.make_add(2)
    probs = [(12, 34), (56, 78)]
    gen = torch.Generator().manual_seed(0)
    b = sample(
        model, [encode(task.prompt(p)) for p in probs], 2, task.max_new_tokens, 1.0, generator=gen
    )
    b.problems = [probs[i // 2] for i in range(4)]
    first_is_1 = dataclasses.replace(task, reward=lambda p, t: float(t[:1] == "1"))
    b.rewards = torch.tensor([first_is_1.reward(p, toy_tasks.decode(t))
                                 for p, t in zip(b.problems, b.tokens.tolist())])
    rows_t = torch.tensor([[0, 0], [3, 0], [1, int(b.mask[1].sum()) - 1]])
    v = probes.token_values(model, first_is_1, b, rows_t, 3, gen)
    one = encode("1")[0]
    assert v[0] == float(b.tokens[0, 0] == one) and v[1] == float(b.tokens[3, 0] == one)
    assert v[2] == b.rewards[1]  # the prefix ending in EOS is the whole completion: its reward


def test_token_categories_rule():
    task = toy_tasks.make_add(2, scratchpad=True)
    p = (47, 85)
    sol = task.solution(p)  # "7+5=12,4+8+1=13;132"
    wrong_digits = sol.replace("13;132", "12;122")  # same layout, other digits
    other = "7+5=12;132"  # another layout
    rows = [encode(s) + [EOS] for s in (sol, wrong_digits, other)]
    T = max(map(len, rows))
    tok = torch.tensor([r + [PAD] * (T - len(r)) for r in rows])
    cats = probes.token_categories(task, [p] * 3, tok, tok != PAD)
    idx = lambda labels: [probes.CATEGORIES.index(x) for x in labels]
    assert cats[0, :len(rows[0])].tolist() == idx(task.categories(p, sol))
    assert cats[1, :len(rows[1])].tolist() == idx(task.categories(p, wrong_digits))
    assert "copy" in task.categories(p, sol)
    assert cats[2, : len(rows[2])].tolist() == idx(
        ["compute" if c.isdigit() else "template" for c in other] + ["template"]
    )
    assert bool((cats[2, len(rows[2]):] == -1).all())


def test_token_categories_chain_labels_every_style():
    """chain: a completion whose style choices differ from the canonical solution's
    keeps its style, copy and compute labels (the layout rule would call ( and ;
    template and every digit compute)."""
    task = toy_tasks.make_task("chain")
    p = (8, "-", 2, "+", 8, "*", 6)
    texts = ["(8-2+8*6)8-2=6;6+8=14,14*6=84", "8-2=6,6+8=14;14*6=84", "8-2=6;6+8=4"]
    rows = [encode(s) + [EOS] for s in texts]
    T = max(map(len, rows))
    tok = torch.tensor([r + [PAD] * (T - len(r)) for r in rows])
    cats = probes.token_categories(task, [p] * 3, tok, tok != PAD)
    name = lambda i, j: probes.CATEGORIES[int(cats[i, j])]
    assert [name(0, j) for j in (0, 1, 9, 13, 14, 28, 29)] == \
        ["style", "copy", "copy", "compute", "style", "compute", "template"]
    assert [name(1, j) for j in (0, 1, 3, 4, 5, 12)] == [
        "copy",
        "template",
        "template",
        "compute",
        "style",
        "style",
    ]
    assert [name(2, j) for j in (5, 10, 11)] == ["style", "compute", "template"]
    assert bool((cats[2, len(rows[2]):] == -1).all())


# ----------------------------------------------------------------------------- learning tax
