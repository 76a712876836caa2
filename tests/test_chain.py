"""The `chain` testbed: the properties that make cancellation observable, and the
metrics that read it (exch_residual in test_loss.py; style drift, interior tax)."""
import math
import random
import statistics

import pytest
import torch
import torch.nn as nn

from lab import diagnostics, testbeds
import toy_tasks
from plumbing.config import parse_args
from plumbing.errors import CliError

TASK = toy_tasks.make_task("chain")


def groups(n_problems=400, G=8, flawed=0.5, seed=0):
    """Groups of G completions from the SFT teacher mixture, as the warm start imitates."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_problems):
        p = TASK.sample(rng)
        out.append((p, [TASK.flawed(p, rng) if rng.random() < flawed else TASK.solution(p, rng)
                        for _ in range(G)]))
    return out


def test_long_variable_completions():
    gs = groups()
    lens = [len(c) + 1 for _, cs in gs for c in cs]                    # + EOS
    assert statistics.mean(lens) >= 20
    assert max(lens) <= TASK.max_new_tokens
    n_steps = {len(p) // 2 for p, _ in gs}
    assert n_steps == {3, 4}                                           # steps vary between prompts
    sd = statistics.mean(statistics.stdev(len(c) for c in cs) for _, cs in gs)
    assert sd >= 2                                                     # and within a group


def test_teacher_style_rates():
    rng = random.Random(1)
    n = restate = commas = seps = 0
    for _ in range(4000):
        p = TASK.sample(rng)
        s = TASK.solution(p, rng)
        n += 1
        restate += s.startswith("(")
        commas += s.count(",")
        seps += s.count(",") + s.count(";")
    assert abs(restate / n - 0.4) < 0.025          # 4000 draws: sd of the rate 0.008
    assert abs(commas / seps - 0.6) < 0.02


def test_verifier_ignores_style_and_reads_the_last_result():
    p = (7, "+", 8, "*", 3, "-", 5)
    assert TASK.prompt(p) == "7+8*3-5="
    right = ["7+8=15,15*3=45,45-5=40", "7+8=15;15*3=45;45-5=40", "(7+8*3-5)7+8=15,15*3=45;45-5=40",
             "(9+9)7+8=15,15*3=45,45-5=40"]      # a miscopied restatement is style too
    for text in right:
        assert TASK.reward(p, text) == 1.0, text
    wrong = ["7+8=5,5*3=15,15-5=10", "7+8=15,15*3=45,45-5=41", "", "40", "7+8=15,15*3=45,45-5=",
             "(7+8*3-5", "7+8=15,15*3=45,45-5=40,", "7+8=15,15*3=45,45-5=4 0"[:-2]]
    for text in wrong:
        assert TASK.reward(p, text) == 0.0, text


def test_length_goes_with_correctness_and_several_completions_are_correct():
    """Same problem, same style draws (same seed): the flawed completion is never
    longer, and the wrong ones are more than a token shorter on average. Every running
    value of the flawed teacher is <= the right one, so no number has more digits."""
    rng = random.Random(2)
    diffs = []
    for _ in range(3000):
        p = TASK.sample(rng)
        s = rng.randrange(10 ** 9)
        f, c = TASK.flawed(p, random.Random(s)), TASK.solution(p, random.Random(s))
        assert len(f) <= len(c)
        if TASK.reward(p, f) == 0:
            diffs.append(len(f) - len(c))
    assert len(diffs) > 600                          # the forgotten carry is common
    assert statistics.mean(diffs) < -1
    p = (7, "+", 8, "*", 3, "-", 5)
    sols = {TASK.solution(p, random.Random(s)) for s in range(200)}
    assert len(sols) == 8 and all(TASK.reward(p, s) == 1.0 for s in sols)   # 2 x 2 x 2 styles
    assert TASK.flawed(p, random.Random(0))[-14:] in ("5*3=15,15-5=10", "5*3=15;15-5=10")


def test_categories_and_style_points():
    p = (8, "-", 2, "+", 8, "*", 6)
    text = "(8-2+8*6)8-2=6;6+8=14,14*6=84"
    cats = TASK.categories(p, text)
    assert len(cats) == len(text) + 1 and cats[-1] == "template"
    want = {0: "style", 1: "copy", 2: "copy", 8: "template", 9: "copy", 10: "template", 11: "copy",
            12: "template", 13: "compute", 14: "style", 15: "copy", 19: "compute", 20: "compute",
            21: "style", 22: "copy", 23: "copy", 24: "template", 25: "copy", 27: "compute"}
    assert {i: cats[i] for i in want} == want
    pts = TASK.style_points(p)
    assert pts == [("restate", "", ("8", "(")), ("sep", "8-2=6", (",", ";")),
                   ("sep", "8-2=6,6+8=14", (",", ";"))]


@pytest.mark.parametrize("flags, msg", [
    (["--task=chain", "--scratchpad"], "does not apply"),
    (["--task=chain", "--digits=3"], "does not apply"),
    (["--task=chain", "--digits=2"], "does not apply"),
])
def test_chain_refuses_flags_that_do_not_apply(flags, msg):
    with pytest.raises(CliError, match=msg):
        parse_args(flags)


def test_foreign_characters_still_a_value_error():
    for bad in ["1 2", "a", "7/2", "é"]:
        with pytest.raises(ValueError, match="outside the alphabet"):
            toy_tasks.encode(bad)
    assert toy_tasks.decode(toy_tasks.encode("(7-2*3)")) == "(7-2*3)"


# ----------------------------------------------------------------------------- style drift


class Bigram(nn.Module):
    """A stand-in policy: the logits after a history depend on its last token only,
    logits = W[last token], so the log-odds at every style point can be set by hand."""

    def __init__(self, W):
        super().__init__()
        self.W = nn.Parameter(W.clone())

    def forward(self, ids, valid=None):
        return self.W[ids]


def test_style_drift_on_a_model_whose_style_logits_are_set():
    rng = random.Random(3)
    probs = [TASK.sample(rng) for _ in range(30)]
    ref = Bigram(torch.zeros(toy_tasks.VOCAB_SIZE, toy_tasks.N_OUT))
    W = torch.zeros(toy_tasks.VOCAB_SIZE, toy_tasks.N_OUT)
    eq, five = toy_tasks.encode("=")[0], toy_tasks.encode("5")[0]
    W[eq, toy_tasks.encode("(")[0]] = -1.5  # restate: log-odds (majority - "(") + 1.5 everywhere
    W[five, toy_tasks.encode(",")[0]] = 2.0           # sep after a '5': log-odds + 2
    now = Bigram(W)
    lo0, prob, kinds = diagnostics.style_log_odds(ref, TASK, probs)
    lo1, _, _ = diagnostics.style_log_odds(now, TASK, probs)
    assert torch.all(lo0 == 0)
    out = diagnostics.style_drift(lo1, lo0, prob, kinds)
    assert (
        abs(out["style_drift_restate"] - 1.5) < 1e-6
        and abs(out["style_drift_signed_restate"] - 1.5) < 1e-6
    )
    # by hand: per problem, 2 x (share of its sep points whose prefix ends in '5')
    per_sep, per_all = [], []
    for p in probs:
        pts = TASK.style_points(p)
        sep = [2.0 * prefix.endswith("5") for kind, prefix, _ in pts if kind == "sep"]
        per_sep.append(sum(sep) / len(sep))
        per_all.append((1.5 + sum(sep)) / len(pts))
    assert abs(out["style_drift_sep"] - statistics.mean(per_sep)) < 1e-6
    assert abs(out["style_drift"] - statistics.mean(per_all)) < 1e-6
    # |.| per problem, then the mean: opposite drifts in two problems do not cancel
    lo_flip = lo1.clone()
    lo_flip[prob == 0] *= -1
    flipped = diagnostics.style_drift(lo_flip, lo0, prob, kinds)
    assert abs(flipped["style_drift_restate"] - 1.5) < 1e-6
    assert flipped["style_drift_signed_restate"] < 1.5 - 0.09


def test_answer_drift_takes_the_absolute_value_per_problem():
    ref = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]])
    now = torch.tensor([[0.0, -3.0], [-2.0, -1.0]])   # log-odds 1 -> 3 and 1 -> -1
    out = diagnostics.answer_drift(now, ref)
    assert out["drift"] == pytest.approx(2.0) and out["drift_signed"] == pytest.approx(0.0)


# ----------------------------------------------------------------------------- interior tax


def test_before_divergence_and_interior_histories():
    # group 0 shares 2 tokens then diverges at t = 2; group 1 diverges at t = 0
    tok = torch.tensor([[1, 2, 3, 4], [1, 2, 5, 4], [7, 2, 3, 4], [8, 2, 3, 4]])
    mask = torch.ones(4, 4, dtype=torch.bool)
    g = torch.tensor([0, 0, 1, 1])
    allh = diagnostics.shared_histories(tok, mask, g)
    inner = diagnostics.shared_histories(tok, mask, g, interior=True)
    assert allh.tolist() == [[0, 0], [0, 1], [0, 2], [2, 0]]
    assert inner.tolist() == [[0, 0], [0, 1]]
    assert diagnostics.before_divergence(allh, tok, mask, g).tolist() == [True, True, False, False]


def test_tax_interior_is_zero_for_an_unchanged_model_and_not_for_a_changed_one():
    from model import GPT, GPTConfig
    torch.manual_seed(0)
    m = GPT(
        GPTConfig(
            vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=1, n_head=2, n_embd=16
        )
    )
    rng = random.Random(4)
    probs = [TASK.sample(rng) for _ in range(3)]
    prompts = [toy_tasks.encode(TASK.prompt(p)) for p in probs for _ in range(2)]
    texts = [TASK.solution(p, random.Random(s)) for p in probs for s in (0, 5)]
    seqs = [toy_tasks.encode(t) + [toy_tasks.EOS] for t in texts]
    tok = torch.full((6, max(map(len, seqs))), toy_tasks.PAD)
    for i, s in enumerate(seqs):
        tok[i, :len(s)] = torch.tensor(s)
    mask, g = tok != toy_tasks.PAD, torch.arange(3).repeat_interleave(2)
    h = diagnostics.shared_histories(tok, mask, g, interior=True)
    assert len(h) > 0
    before = diagnostics.policy_at(m, prompts, tok, mask, h)
    assert (
        float(diagnostics.kl(before, diagnostics.policy_at(m, prompts, tok, mask, h)).abs().max())
        == 0.0
    )
    with torch.no_grad():
        m.lm_head.weight.add_(0.5 * torch.randn_like(m.lm_head.weight))
    assert float(diagnostics.kl(before, diagnostics.policy_at(m, prompts, tok, mask, h)).min()) > 0


def test_sample_py_parses_chain_prompts():
    import sample
    assert sample.parse_problem("chain", "7+8*3-5=") == (7, "+", 8, "*", 3, "-", 5)
    p = sample.parse_problem("chain", "7+8*3-5=")
    assert TASK.reward(p, "7+8=15,15*3=45,45-5=40") == 1.0
    for bad in ["7+8*3-5", "7+88=", "7/8=", "+7=", "0+1+2+3="]:
        assert sample.parse_problem("chain", bad) is None, bad


def test_style_entropy_by_hand():
    """Binary entropy of the two forms, per problem first: log-odds 0 gives ln 2;
    log-odds ln 3 gives p = 3/4, H = -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.562335."""
    lo = torch.tensor([0.0, math.log(3.0), math.log(3.0), -math.log(3.0)])
    prob = torch.tensor([0, 0, 1, 1])
    kinds = ["restate", "sep", "restate", "sep"]
    h3 = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert abs(h3 - 0.562335) < 1e-6
    out = diagnostics.style_entropy(lo, prob, kinds)
    assert out["style_entropy_restate"] == pytest.approx((math.log(2) + h3) / 2)
    assert out["style_entropy_sep"] == pytest.approx(h3)  # the sign of the log-odds does not matter
    assert out["style_entropy"] == pytest.approx(((math.log(2) + h3) / 2 + h3) / 2)
    assert (
        diagnostics.style_entropy(torch.tensor([200.0]), torch.tensor([0]), ["restate"])[
            "style_entropy"
        ]
        < 1e-80
    )


def test_the_flawed_teachers_own_restate_rate():
    """p_restate_flawed changes only the flawed teacher's restate rate, with the same draws:
    at None every text is the default task's; at 0 no flawed text restates."""
    import random
    import toy_tasks
    base, other = testbeds.make_chain(), testbeds.make_chain(p_restate_flawed=0.0)
    same = testbeds.make_chain(p_restate_flawed=None)
    probs = [base.sample(random.Random(i)) for i in range(200)]
    for i, p in enumerate(probs):
        assert same.flawed(p, random.Random(i)) == base.flawed(p, random.Random(i))
        assert other.solution(p, random.Random(i)) == base.solution(p, random.Random(i))
        assert not other.flawed(p, random.Random(i)).startswith("(")
    assert any(base.flawed(p, random.Random(i)).startswith("(") for i, p in enumerate(probs))
