"""diagnostics.py: each measurement against a hand value or an independent route."""
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

import diagnostics as D
import loss as L
import toy_tasks
from model import GPT, GPTConfig
from sampler import sample
from toy_tasks import EOS, PAD, encode


def tiny_model(seed=0, double=True):
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=1, n_head=2,
                      n_embd=16, block_size=32))
    return m.double() if double else m


def hand_batch(seed=0, groups=4, G=4, T=4):
    """Prompts and completions drawn from a few ids (so tokens repeat), mixed rewards."""
    g = torch.Generator().manual_seed(seed)
    N = groups * G
    prompts = [encode(f"{10 + k}+{20 + k}=") for k in range(groups) for _ in range(G)]
    tokens = torch.randint(0, 3, (N, T), generator=g)
    lens = torch.randint(1, T + 1, (N,), generator=g)
    col = torch.arange(T)[None, :]
    tokens[col == lens[:, None] - 1] = EOS
    tokens = tokens.masked_fill(col >= lens[:, None], PAD)
    rewards = torch.tensor([float(i % 2 == (i // G) % 2) for i in range(N)])
    return {"prompts": prompts, "tokens": tokens, "mask": tokens != PAD,
            "group": torch.arange(groups).repeat_interleave(G), "rewards": rewards,
            "logprobs": torch.zeros(N, T)}


# ----------------------------------------------------------------------------- coupling

def test_closed_form_matches_unembedding_step_and_needs_the_coupling_term():
    model, b = tiny_model(), hand_batch()
    adv = L.advantages(b["rewards"], b["group"])
    coef = D.token_coefficients(model, b, adv)
    lr = 1e-2
    ct = D.coupling_terms(model, b, coef, lr)
    actual = D.token_deltas(model, D.one_update(model, b, adv, "sgd", lr, params="head"), b)[b["mask"]]
    rel = lambda x: float((x - actual).norm() / actual.norm())
    assert actual.abs().max() > 1e-5  # a real, first-order-sized change
    assert rel(ct["pred"]) < 0.05
    assert rel(ct["self"]) > 0.05  # the self term alone does not explain the step
    assert torch.allclose(ct["pred"], ct["self"] + ct["coupling"])


def test_head_only_update_moves_only_the_head():
    model, b = tiny_model(), hand_batch()
    adv = L.advantages(b["rewards"], b["group"])
    new = D.one_update(model, b, adv, "adam", 1e-3, params="head")
    for (n, p), q in zip(model.named_parameters(), new.parameters()):
        assert torch.equal(p, q) == (n != "lm_head.weight"), n


def test_coupling_summary_shares_and_same_token_alpha():
    model, b = tiny_model(), hand_batch()
    adv = L.advantages(b["rewards"], b["group"])
    ct = D.coupling_terms(model, b, D.token_coefficients(model, b, adv), 1.0)
    s = D.coupling_summary(ct, adv[:, None].expand_as(b["mask"])[b["mask"]])
    assert s["mass_same"] + s["mass_diff"] == pytest.approx(1.0)
    grid = torch.tensor(s["mass_by_conf_same"]) + torch.tensor(s["mass_by_conf_diff"])
    assert float(grid.sum()) == pytest.approx(1.0)
    assert s["alpha_same"] > 0 > s["alpha_diff"]  # near-uniform policy: alpha ~ 1 vs ~ -1/V


def test_masked_closed_form_twin_matches_masked_head_step():
    model, b = tiny_model(), hand_batch()
    adv = L.advantages(b["rewards"], b["group"])
    m = b["mask"]
    lr = 1e-2
    d = D.masked_update_deltas(model, b, adv, lr, params="head")
    y, a = b["tokens"][m], adv[:, None].expand_as(m)[m]
    coef = D.token_coefficients(model, b, adv)
    keep = D.opposite_same_token_keep(y, a)
    assert not keep.all()
    twin = D.coupling_terms(model, b, coef, lr, keep=keep)["pred"]
    full = D.coupling_terms(model, b, coef, lr)["pred"]
    x = d["no_opposite_same_token"][m]
    assert float((twin - x).norm() / x.norm()) < 0.05
    assert float((full - x).norm() / x.norm()) > 0.05
    pos = D.coupling_terms(model, b, coef * (adv >= 0)[:, None], lr)["pred"]
    assert float((pos - d["positive_only"][m]).norm() / d["positive_only"][m].norm()) < 0.05


def test_masked_sweep_equals_separate_sgd_steps():
    """The linear route (one gradient per class, theta + lr (G - G_drop)) against
    separate one_update steps with the removed coefficients zeroed, at two lrs."""
    model, b = tiny_model(), hand_batch()
    adv = L.advantages(b["rewards"], b["group"])
    m, tok = b["mask"], b["tokens"]
    sgn = torch.sign(adv)[:, None].expand_as(tok)
    coef = D.token_coefficients(model, b, adv)
    sweep = D.masked_update_deltas(model, b, adv, [1e-2, 1e-1])
    assert set(sweep) == {1e-2, 1e-1}
    for lr in (1e-2, 1e-1):
        step = lambda c: D.token_deltas(model, D.one_update(model, b, adv, "sgd", lr, coef=c), b)
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
    one = D.masked_update_deltas(model, b, adv, 1e-1)  # a single lr: the variants directly
    assert torch.allclose(one["full"], sweep[1e-1]["full"])


# ----------------------------------------------------------------------------- flips

def test_flip_table_on_a_hand_made_delta():
    delta = torch.tensor([[0.5, -0.5, 0.01, 0.0], [0.2, 0.3, -0.2, 0.9], [-0.3, 0.3, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0, 0.0])
    t = D.flip_table(delta, mask, adv, eps=0.1)
    assert t["pos"] == {"boosted": pytest.approx(1 / 3), "suppressed": pytest.approx(1 / 3),
                        "stable": pytest.approx(1 / 3), "n": 3}
    assert t["neg"] == {"boosted": pytest.approx(3 / 4), "suppressed": pytest.approx(1 / 4),
                        "stable": 0.0, "n": 4}
    assert t["flipped"] == pytest.approx((1 + 3) / 7)
    assert sorted(t["delta_pos"]) == pytest.approx([-0.5, 0.01, 0.5])
    empty = D.flip_table(delta, mask, torch.zeros(3), 0.1)
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
    b["rewards"] = torch.tensor([first_is_1.reward(p, toy_tasks.decode(t))
                                 for p, t in zip(problems, b["tokens"].tolist())])
    V = D.mc_values(model, first_is_1, b, problems, 4, gen)
    lens = b["mask"].sum(1)
    assert torch.equal(V[:, 1], (b["tokens"][:, 0] == one).float())  # decided by the first token
    assert torch.equal(V[torch.arange(6), lens], b["rewards"])
    assert bool(((V[:, 0] >= 0) & (V[:, 0] <= 1)).all())
    past = torch.arange(V.shape[1])[None, :] > lens[:, None]
    assert bool(torch.isnan(V[past]).all()) and not bool(torch.isnan(V[~past]).any())
    always = dataclasses.replace(task, reward=lambda p, t: 1.0)
    b["rewards"] = torch.ones(6)
    V = D.mc_values(model, always, b, problems, 2, gen)
    assert bool((V[~torch.isnan(V)] == 1).all())


def test_value_gap_bins_and_pick_by_hand():
    v = torch.tensor([1.0, 0.5, 0.0, 0.25, 1.0])
    d = torch.tensor([0.2, 0.05, -0.3, -0.2, 0.0])
    g = D.value_gap(v, d, 0.1)  # boosted {1.0}, suppressed {0.0, 0.25}
    assert g["gap"] == pytest.approx(1.0 - 0.125) and (g["n_boosted"], g["n_suppressed"]) == (1, 2)
    assert D.value_gap(v, d, 0.0)["gap"] == pytest.approx((1.0 + 0.5) / 2 - 0.125)
    assert D.value_gap(v, d, 1.0)["gap"] is None
    bins = D.value_bins(torch.tensor([0.9, 0.1, 0.5, 0.3, 0.7, 0.2]), 3)
    assert bins.tolist() == [2, 0, 1, 1, 2, 0]
    tied = D.value_bins(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2, torch.Generator().manual_seed(0))
    assert tied[2] == 0 and sorted(tied.tolist()) == [0, 0, 1, 1]
    cand = torch.tensor([[True, False, True], [False, True, False]])
    pick = D.pick_tokens(cand, 2, torch.Generator().manual_seed(0))
    assert len(pick) == 2 and all(bool(cand[r, t]) for r, t in pick.tolist())
    assert sorted(map(tuple, D.pick_tokens(cand, 5).tolist())) == [(0, 0), (0, 2), (1, 1)]


def test_shuffled_advantages_permute_inside_groups():
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0, 2.0, -2.0, 3.0])
    group = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    out = D.shuffled_advantages(adv, group, torch.Generator().manual_seed(3))
    for k in range(3):
        assert sorted(out[group == k].tolist()) == sorted(adv[group == k].tolist())
    assert out[6] == 3.0
    moved = sum(not torch.equal(D.shuffled_advantages(adv, group, torch.Generator().manual_seed(s)), adv)
                for s in range(20))
    assert moved >= 15  # a permutation of 4 and of 2 is the identity with probability 1/48


def test_token_values_match_mc_values_on_the_subset():
    model = tiny_model(double=False)
    task = toy_tasks.make_add(2)
    probs = [(12, 34), (56, 78)]
    gen = torch.Generator().manual_seed(0)
    b = sample(model, [encode(task.prompt(p)) for p in probs], 2, task.max_new_tokens, 1.0, generator=gen)
    b["problems"] = [probs[i // 2] for i in range(4)]
    first_is_1 = dataclasses.replace(task, reward=lambda p, t: float(t[:1] == "1"))
    b["rewards"] = torch.tensor([first_is_1.reward(p, toy_tasks.decode(t))
                                 for p, t in zip(b["problems"], b["tokens"].tolist())])
    rows_t = torch.tensor([[0, 0], [3, 0], [1, int(b["mask"][1].sum()) - 1]])
    v = D.token_values(model, first_is_1, b, rows_t, 3, gen)
    one = encode("1")[0]
    assert v[0] == float(b["tokens"][0, 0] == one) and v[1] == float(b["tokens"][3, 0] == one)
    assert v[2] == b["rewards"][1]  # the prefix ending in EOS is the whole completion: its reward


def test_token_categories_rule():
    task = toy_tasks.make_add(2, scratchpad=True)
    p = (47, 85)
    sol = task.solution(p)  # "7+5=12,4+8+1=13;132"
    wrong_digits = sol.replace("13;132", "12;122")  # same layout, other digits
    other = "7+5=12;132"  # another layout
    rows = [encode(s) + [EOS] for s in (sol, wrong_digits, other)]
    T = max(map(len, rows))
    tok = torch.tensor([r + [PAD] * (T - len(r)) for r in rows])
    cats = D.token_categories(task, [p] * 3, tok, tok != PAD)
    idx = lambda labels: [D.CATEGORIES.index(x) for x in labels]
    assert cats[0, :len(rows[0])].tolist() == idx(task.categories(p, sol))
    assert cats[1, :len(rows[1])].tolist() == idx(task.categories(p, wrong_digits))
    assert "copy" in task.categories(p, sol)
    assert cats[2, :len(rows[2])].tolist() == idx(["compute" if c.isdigit() else "template" for c in other]
                                                  + ["template"])
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
    cats = D.token_categories(task, [p] * 3, tok, tok != PAD)
    name = lambda i, j: D.CATEGORIES[int(cats[i, j])]
    assert [name(0, j) for j in (0, 1, 9, 13, 14, 28, 29)] == \
        ["style", "copy", "copy", "compute", "style", "compute", "template"]
    assert [name(1, j) for j in (0, 1, 3, 4, 5, 12)] == ["copy", "template", "template", "compute", "style", "style"]
    assert [name(2, j) for j in (5, 10, 11)] == ["style", "compute", "template"]
    assert bool((cats[2, len(rows[2]):] == -1).all())


# ----------------------------------------------------------------------------- learning tax

def shared_batch():
    rows = [[1, 2, 3, EOS], [1, 2, 4, EOS], [5, EOS, PAD, PAD], [6, 7, EOS, PAD],
            [8, EOS, PAD, PAD], [8, EOS, PAD, PAD]]
    tok = torch.tensor(rows)
    return {"prompts": [encode("12+34=")] * 2 + [encode("5+6=")] * 2 + [encode("99=")] * 2,
            "tokens": tok, "mask": tok != PAD, "group": torch.tensor([0, 0, 1, 1, 2, 2]),
            "rewards": torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]), "logprobs": torch.zeros(6, 4)}


def test_shared_histories_hand_made():
    b = shared_batch()
    h = D.shared_histories(b["tokens"], b["mask"], b["group"])
    assert h.tolist() == [[0, 0], [0, 1], [0, 2], [2, 0], [4, 0], [4, 1]]


def test_policy_at_matches_a_forward_pass_per_history():
    model, b = tiny_model(), shared_batch()
    h = D.shared_histories(b["tokens"], b["mask"], b["group"])
    lp = D.policy_at(model, b["prompts"], b["tokens"], b["mask"], h)
    for k, (r, t) in enumerate(h.tolist()):
        seq = torch.tensor([b["prompts"][r] + b["tokens"][r, :t].tolist()])
        ref = F.log_softmax(model(seq)[0, -1], -1)
        assert torch.allclose(lp[k], ref, atol=1e-10)


def test_learning_tax_kl_zero_without_change_positive_with():
    model, b = tiny_model(), shared_batch()
    adv = L.advantages(b["rewards"], b["group"])
    h = D.shared_histories(b["tokens"], b["mask"], b["group"])
    before = D.policy_at(model, b["prompts"], b["tokens"], b["mask"], h)
    same = D.one_update(model, b, adv, "sgd", 0.0)
    assert float(D.kl(before, D.policy_at(same, b["prompts"], b["tokens"], b["mask"], h)).abs().max()) == 0.0
    moved = D.one_update(model, b, adv, "adam", 1e-2)
    k = D.kl(before, D.policy_at(moved, b["prompts"], b["tokens"], b["mask"], h))
    assert bool((k > 0).all())
    p, q = before.exp(), D.policy_at(moved, b["prompts"], b["tokens"], b["mask"], h).exp()
    assert torch.allclose(k, (q * (q / p).log()).sum(-1))  # KL(new || old), not the reverse


def test_cancellation_residual_zero_when_exchangeable():
    model, b = tiny_model(), shared_batch()
    b["tokens"][1] = torch.tensor([1, 2, EOS, PAD])  # unequal lengths in group 0
    b["mask"] = b["tokens"] != PAD
    for loss, small in (("dr_grpo", True), ("grpo", False)):
        adv = L.advantages(b["rewards"], b["group"], loss)
        r = D.cancellation_residual(model, b, D.token_coefficients(model, b, adv, loss))
        assert (r < 1e-8) == small, (loss, r)


def test_pass_at_k_hand_values():
    assert D.pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert D.pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert D.pass_at_k(5, 0, 3) == 0.0
    assert D.pass_at_k(5, 4, 2) == 1.0
    assert D.pass_at_k(8, 3, 4) == pytest.approx(1 - math.comb(5, 4) / math.comb(8, 4))


def test_pass_at_k_eval_and_entropy_bounds():
    model = tiny_model(double=False)
    task = toy_tasks.make_add(2)
    probs = [(12, 34), (56, 78), (90, 11)]
    gen = torch.Generator().manual_seed(0)
    always = dataclasses.replace(task, reward=lambda p, t: 1.0)
    assert D.pass_at_k_eval(model, always, probs, 4, 2, gen) == 1.0
    assert D.pass_at_k_eval(model, dataclasses.replace(task, reward=lambda p, t: 0.0), probs, 4, 2, gen) == 0.0
    with torch.no_grad():
        model.lm_head.weight.zero_()  # uniform policy: entropy log |V|
    assert D.mean_token_entropy(model, task, probs) == pytest.approx(math.log(toy_tasks.N_OUT), rel=1e-5)


def test_answer_logprobs_and_drift():
    model = tiny_model(double=False)
    task = toy_tasks.make_primes()
    probs = [(10,), (58,)]  # 10 = 3+7 = 5+5 (3 orders), 58 has more
    lp = D.answer_logprobs(model, task, probs)
    n = [len(task.answers(p)) for p in probs]
    assert lp.shape == (2, max(n))
    assert bool(torch.isinf(lp[0, n[0]:]).all()) and bool(torch.isfinite(lp[0, :n[0]]).all())
    from model import completion_logprobs
    a = encode(task.answers(probs[1])[1]) + [EOS]
    ref = completion_logprobs(model, [encode("58=")], torch.tensor([a]), torch.ones(1, len(a), dtype=torch.bool), PAD)
    assert float(lp[1, 1]) == pytest.approx(float(ref.detach().sum()), abs=1e-5)
    inf = float("-inf")
    hand = torch.tensor([[math.log(0.6), math.log(0.2), inf], [math.log(0.3), inf, inf],
                         [math.log(0.1), math.log(0.1), math.log(0.2)]])
    d = D.answer_drift(hand)
    ent = lambda q: -sum(x * math.log(x) for x in q)
    assert d["n"] == 2
    assert d["log_odds"] == pytest.approx((math.log(3) + 0.0) / 2)
    assert d["entropy"] == pytest.approx((ent([0.75, 0.25]) + ent([0.25, 0.25, 0.5])) / 2)
    assert math.isnan(D.answer_drift(hand[1:2])["log_odds"])
