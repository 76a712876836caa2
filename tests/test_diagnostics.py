"""diagnostics.py (what training logs): each measurement against a hand value or an
independent route."""

import dataclasses
import math

import pytest
import torch

from lab import diagnostics
from lab import probes
import toy_tasks
from model import GPT, GPTConfig
from toy_tasks import EOS, PAD, encode
from sampler import Rollouts
from lab import estimators


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
    return Rollouts(prompts=prompts, tokens=tokens, mask=tokens != PAD,
                    group=torch.arange(groups).repeat_interleave(G), rewards=rewards,
                    old_logprobs=torch.zeros(N, T))


def shared_batch():
    rows = [[1, 2, 3, EOS], [1, 2, 4, EOS], [5, EOS, PAD, PAD], [6, 7, EOS, PAD],
            [8, EOS, PAD, PAD], [8, EOS, PAD, PAD]]
    tok = torch.tensor(rows)
    return Rollouts(prompts=[encode("12+34=")] * 2 + [encode("5+6=")] * 2 + [encode("99=")] * 2,
                    tokens=tok, mask=tok != PAD, group=torch.tensor([0, 0, 1, 1, 2, 2]),
                    rewards=torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]),
                    old_logprobs=torch.zeros(6, 4))


def test_shared_histories_hand_made():
    b = shared_batch()
    h = diagnostics.shared_histories(b.tokens, b.mask, b.group)
    assert h.tolist() == [[0, 0], [0, 1], [0, 2], [2, 0], [4, 0], [4, 1]]


def test_policy_at_matches_a_forward_pass_per_history():
    model, b = tiny_model(), shared_batch()
    h = diagnostics.shared_histories(b.tokens, b.mask, b.group)
    lp = diagnostics.policy_at(model, b.prompts, b.tokens, b.mask, h)
    for k, (r, t) in enumerate(h.tolist()):
        seq = torch.tensor([b.prompts[r] + b.tokens[r, :t].tolist()])
        ref = torch.log_softmax(model(seq)[0, -1], -1)
        assert torch.allclose(lp[k], ref, atol=1e-10)


def test_learning_tax_kl_zero_without_change_positive_with():
    model, b = tiny_model(), shared_batch()
    adv = estimators.advantages(b.rewards, b.group)
    h = diagnostics.shared_histories(b.tokens, b.mask, b.group)
    before = diagnostics.policy_at(model, b.prompts, b.tokens, b.mask, h)
    same = probes.one_update(model, b, adv, "sgd", 0.0)
    assert (
        float(
            diagnostics.kl(before, diagnostics.policy_at(same, b.prompts, b.tokens, b.mask, h))
            .abs()
            .max()
        )
        == 0.0
    )
    moved = probes.one_update(model, b, adv, "adam", 1e-2)
    k = diagnostics.kl(before, diagnostics.policy_at(moved, b.prompts, b.tokens, b.mask, h))
    assert bool((k > 0).all())
    p, q = before.exp(), diagnostics.policy_at(moved, b.prompts, b.tokens, b.mask, h).exp()
    assert torch.allclose(k, (q * (q / p).log()).sum(-1))  # KL(new || old), not the reverse


def test_pass_at_k_hand_values():
    assert diagnostics.pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert diagnostics.pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert diagnostics.pass_at_k(5, 0, 3) == 0.0
    assert diagnostics.pass_at_k(5, 4, 2) == 1.0
    assert diagnostics.pass_at_k(8, 3, 4) == pytest.approx(1 - math.comb(5, 4) / math.comb(8, 4))


def test_pass_at_k_eval_and_entropy_bounds():
    model = tiny_model(double=False)
    task = toy_tasks.make_add(2)
    probs = [(12, 34), (56, 78), (90, 11)]
    gen = torch.Generator().manual_seed(0)
    always = dataclasses.replace(task, reward=lambda p, t: 1.0)
    assert diagnostics.pass_at_k_eval(model, always, probs, 4, 2, gen) == 1.0
    assert (
        diagnostics.pass_at_k_eval(
            model, dataclasses.replace(task, reward=lambda p, t: 0.0), probs, 4, 2, gen
        )
        == 0.0
    )
    with torch.no_grad():
        model.lm_head.weight.zero_()  # uniform policy: entropy log |V|
    assert diagnostics.mean_token_entropy(model, task, probs) == pytest.approx(
        math.log(toy_tasks.N_OUT), rel=1e-5
    )


def test_answer_logprobs_and_drift():
    model = tiny_model(double=False)
    task = toy_tasks.make_primes()
    probs = [(10,), (58,)]  # 10 = 3+7 = 5+5 (3 orders), 58 has more
    lp = diagnostics.answer_logprobs(model, task, probs)
    n = [len(task.answers(p)) for p in probs]
    assert lp.shape == (2, max(n))
    assert bool(torch.isinf(lp[0, n[0]:]).all()) and bool(torch.isfinite(lp[0, :n[0]]).all())
    from model import completion_logprobs
    a = encode(task.answers(probs[1])[1]) + [EOS]
    ref = completion_logprobs(
        model, [encode("58=")], torch.tensor([a]), torch.ones(1, len(a), dtype=torch.bool), PAD
    )
    assert float(lp[1, 1]) == pytest.approx(float(ref.detach().sum()), abs=1e-5)
    inf = float("-inf")
    hand = torch.tensor([[math.log(0.6), math.log(0.2), inf], [math.log(0.3), inf, inf],
                         [math.log(0.1), math.log(0.1), math.log(0.2)]])
    d = diagnostics.answer_drift(hand)
    ent = lambda q: -sum(x * math.log(x) for x in q)
    assert d["n"] == 2
    assert d["log_odds"] == pytest.approx((math.log(3) + 0.0) / 2)
    assert d["entropy"] == pytest.approx((ent([0.75, 0.25]) + ent([0.25, 0.25, 0.5])) / 2)
    assert math.isnan(diagnostics.answer_drift(hand[1:2])["log_odds"])
