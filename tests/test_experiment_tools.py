"""The tools the experiments share, each against a number worked out by hand:
the verdict rule, |Delta|-weighted sign agreement, coupling mass by row, one
training step from a carried optimizer state, and the worker pool."""
import math

import torch

from lab import probes
from test_diagnostics import hand_batch, tiny_model
from lab.experiments import common
from lab import estimators


def test_verdict_rule_by_hand():
    c = lambda d, h: {"diff": d, "half": h}
    assert common.verdict(c(0.02, 0.05), 0.1).startswith("agree")       # [-0.03, 0.07] inside +-0.1
    assert common.verdict(c(0.08, 0.05), 0.1).startswith("inconclusive")  # [0.03, 0.13] crosses 0.1
    assert common.verdict(c(0.2, 0.05), 0.1).startswith("contradict")    # [0.15, 0.25] outside
    assert common.verdict(c(-0.2, 0.05), 0.1).startswith("contradict")
    assert common.verdict(c(0.0, float("nan")), 0.1).startswith("inconclusive (too few")
    assert common.verdict(c(None, None), 0.1).startswith("inconclusive (too few")


def test_weighted_sign_agreement_by_hand():
    a = torch.tensor([1.0, -2.0, 3.0, -4.0], dtype=torch.float64)
    b = torch.tensor([1.0, 2.0, 3.0, -1.0], dtype=torch.float64)  # agree on 0, 2, 3
    m = torch.ones(4, dtype=torch.bool)
    assert probes.sign_agreement(a, b, m) == 0.75
    assert abs(probes.sign_agreement(a, b, m, weighted=True) - (1 + 3 + 4) / 10) < 1e-12
    m[3] = False
    assert abs(probes.sign_agreement(a, b, m, weighted=True) - 4 / 6) < 1e-12


def test_coupling_by_row_by_hand():
    terms = torch.tensor([[9.0, 1.0, -2.0],
                          [3.0, 9.0, 4.0],
                          [-5.0, 6.0, 9.0]])  # the diagonal (self terms) is not coupling
    y = torch.tensor([7, 7, 8])               # tokens 0 and 1 are the same id
    rows = torch.tensor([0, 1, 1])
    out = probes.coupling_by_row(terms, y, rows, 2)
    total = 1 + 2 + 3 + 4 + 5 + 6
    assert out["mass_same"] == [1 / total, 3 / total]
    assert out["mass_diff"] == [2 / total, (4 + 5 + 6) / total]
    assert out["pairs_same"] == [1 / 6, 1 / 6] and out["pairs_diff"] == [1 / 6, 3 / 6]
    assert abs(sum(out["mass_same"]) + sum(out["mass_diff"]) - 1) < 1e-12


def test_real_step_fresh_adam_is_sign_descent_and_carries_state():
    """From a fresh AdamW, the first step moves every parameter with a gradient by
    lr * g / (|g| + eps) ~ lr (sign descent), whatever the grad clip does to |g|;
    the given model and optimizer are left as they were; the new optimizer has
    one more step; params='head' moves the unembedding alone."""
    torch.manual_seed(0)
    model = tiny_model(double=True)
    b = hand_batch()
    b.old_logprobs, b.max_len = torch.zeros(b.mask.shape, dtype=torch.float64), 4
    adv = estimators.advantages(b.rewards, b.group, "grpo")
    assert bool((adv != 0).any())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    new, new_opt = common.real_step(model, opt, b, adv)
    steps = torch.cat(
        [(p1 - p0).abs().flatten() for p0, p1 in zip(before.values(), new.state_dict().values())]
    )
    moved = steps[steps > 0]
    assert len(moved) > 100 and float(moved.max()) <= 1e-3 * (1 + 1e-6)  # never more than lr
    # where |g| >> eps = 1e-8 (most of them) a step of exactly lr; an SGD step would spread out
    assert float(((moved - 1e-3).abs() < 1e-6).float().mean()) > 0.8
    for k, p0 in before.items():
        assert torch.equal(model.state_dict()[k], p0)  # the given model is untouched
    assert not opt.state  # the given optimizer is untouched (still fresh)
    assert all(int(s["step"]) == 1 for s in new_opt.state.values())
    new2, opt2 = common.real_step(new, new_opt, b, adv)  # a second step carries the moments
    assert all(int(s["step"]) == 2 for s in opt2.state.values())
    head, _ = common.real_step(model, opt, b, adv, params="head")
    for k, v in head.state_dict().items():
        assert torch.equal(v, before[k]) != (k == "lm_head.weight"), k


def test_pool_keeps_order_with_workers():
    assert common.pool(math.factorial, [5, 3, 4], jobs=2, desc="test") == [120, 6, 24]
    assert common.pool(math.factorial, [5, 3], jobs=1, desc="test") == [120, 6]


def test_kept_steps_rules():
    import pytest
    from plumbing.errors import CliError
    o = common.kept_steps({"quick": True, "steps": [0, 100, 200], "primary_step": 100}, [])
    # quick: its own steps, the last is primary
    assert o["steps"] == [0, 20] and o["primary_step"] == 20
    o = common.kept_steps(
        {"quick": True, "steps": [2, 0, 2], "primary_step": 100}, ["--steps=2,0,2"]
    )
    assert o["steps"] == [0, 2] and o["primary_step"] == 2
    o = common.kept_steps({"quick": False, "steps": [200, 0, 100], "primary_step": 100}, [])
    assert o["steps"] == [0, 100, 200] and o["primary_step"] == 100
    with pytest.raises(CliError, match="not one of --steps"):
        common.kept_steps({"quick": False, "steps": [0, 50], "primary_step": 100}, [])


def test_every_saved_result_names_the_commit_torch_and_cpu(tmp_path):
    """A committed number can be traced to the code and the machine that produced it."""
    import json
    from lab.experiments import output
    output.save("probe", {"x": 1}, str(tmp_path))
    prov = json.load(open(tmp_path / "probe.json"))["provenance"]
    commit = prov["commit"].split("+")[0]  # "unknown" outside a git checkout
    assert (len(commit) == 40 or commit == "unknown") and prov["torch"] and prov["cpu"]
    assert prov["threads"] >= 1 and prov["cores"] >= 1
