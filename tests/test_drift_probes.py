"""lab/experiments/drift_probes.py: the credit of the restate choice by hand, and the
direct / coupled / carried split of a step checked against the step itself."""
import copy

import pytest
import torch
import train  # noqa: E402
from lab.experiments import common
from lab.experiments import drift_probes as DP
import toy_tasks  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from sampler import Rollouts
from lab import estimators
from lab.hooks import LabHooks


def test_credit_by_hand():
    # group 0: restated rows 0, 1 (rewards 1, 0), not: rows 2, 3 (1, 1); group 1: none restated
    tok = torch.full((8, 3), toy_tasks.encode("1")[0])
    tok[0, 0] = tok[1, 0] = DP.RESTATE
    batch = Rollouts(
        prompts=[[]] * 8,
        tokens=tok,
        mask=torch.ones(tok.shape, dtype=torch.bool),
        old_logprobs=torch.zeros(tok.shape),
        group=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        rewards=torch.tensor([1.0, 0, 1, 1, 0, 1, 0, 1]),
    )
    adv = torch.tensor([0.25, -0.75, 0.25, 0.25, -0.5, 0.5, -0.5, 0.5])
    out = DP.credit(batch, adv)
    assert out["credit_gap"] == pytest.approx(0.5 - 4 / 6)  # 1/2 with, 4/6 without
    # group 0: x = (1,1,0,0), mean 0.5; A mean 0:
    # cov = (0.5*0.25 - 0.5*0.75 - 0.5*0.25 - 0.5*0.25)/4
    assert out["credit_cov"] == pytest.approx(((0.125 - 0.375 - 0.125 - 0.125) / 4 + 0.0) / 2)
    assert out["restated"] == pytest.approx(2 / 8)

    acc = DP.restate_accuracy(batch)  # the same rows: 1 of 2 restated right, 4 of 6 not
    assert acc == {"rollouts": 8, "restated": 2, "acc_restated": 0.5,
                   "acc_not": pytest.approx(4 / 6),
                   "gap": pytest.approx(0.5 - 4 / 6)}
    batch.tokens[:, 0] = DP.RESTATE  # no rollout without the restatement: no gap
    assert DP.restate_accuracy(batch)["acc_not"] is None
    assert DP.restate_accuracy(batch)["gap"] is None


def _setup(opt_name, lr):
    torch.manual_seed(0)
    task = toy_tasks.make_task("chain")
    model = GPT(
        GPTConfig(
            vocab_size=toy_tasks.VOCAB_SIZE,
            n_out=toy_tasks.N_OUT,
            n_layer=1,
            n_head=2,
            n_embd=16,
            block_size=64,
        )
    ).double()
    opt = train.rl_optimizer(model.parameters(), opt_name, lr)
    draw = toy_tasks.train_sampler(task, [], 0)
    gen = torch.Generator().manual_seed(0)
    problems = [draw() for _ in range(6)]
    return task, model, opt, draw, gen, problems


@pytest.mark.parametrize(
    "opt_name,lr,clip",
    [
        ("sgd", 1e-3, 1e9),
        ("sgd", 1e-1, 1e-3),
        ("adamw", 1e-5, 1e9),
        ("adamw", 1e-5, 1e-3),
        ("sgd_momentum", 1e-3, 1e-3),
        ("adam_b1_0", 1e-5, 1e9),
    ],
)
def test_split_adds_up_to_the_step_and_tracks_the_measured_change(opt_name, lr, clip):
    task, model, opt, draw, gen, problems = _setup(opt_name, lr)
    memo = {}
    for step in range(2):  # the second AdamW step carries the first one's momentum
        # the sampler is fp32
        batch = common.rollout_batch(copy.deepcopy(model).float(), task, draw, 3, 4, gen)
        batch.rewards = torch.tensor([float(i % 2) for i in range(12)])  # mixed groups
        adv = estimators.advantages(batch.rewards, batch.group, "dr_grpo")
        cfg = common.Config(loss="dr_grpo", grad_clip=clip)
        out = DP.split_step(model, opt, batch, adv, cfg, task, problems, memo)
        assert out["predicted"] == pytest.approx(out["exact"], rel=1e-6, abs=1e-12)
        assert out["measured"] == pytest.approx(out["exact"], rel=0.05, abs=1e-9)
        assert out["direct"] != 0 and out["coupled"] != 0
        assert out["carried_direct"] + out["carried_coupled"] == pytest.approx(
            out["carried"], rel=1e-9, abs=1e-15
        )
        if opt_name in ("sgd", "adam_b1_0"):  # no momentum: nothing carried
            assert out["carried"] == 0
        assert (out["direct_own_v"] is None) == opt_name.startswith("sgd")
        if opt_name.startswith("adam"):  # the other tokens' squared gradients change it
            assert out["direct_own_v"] != pytest.approx(out["direct"], rel=1e-3)
    if opt_name in ("adamw", "sgd_momentum"):
        assert out["carried"] != 0 and out["carried_direct"] != 0 and out["carried_coupled"] != 0


def test_momentum_of_first_token_copies_alone_is_all_direct():
    """With only the first completion token in the loss, g_coupled = 0 at every step,
    so AdamW's carried momentum is all of direct origin: carried_coupled = 0."""
    task, model, opt, draw, gen, problems = _setup("adamw", 1e-4)
    memo = {}
    for step in range(2):
        batch = common.rollout_batch(copy.deepcopy(model).float(), task, draw, 3, 4, gen)
        batch.mask[:, 1:] = False
        batch.rewards = torch.tensor([float(i % 2) for i in range(12)])
        adv = estimators.advantages(batch.rewards, batch.group, "dr_grpo")
        out = DP.split_step(
            model,
            opt,
            batch,
            adv,
            common.Config(loss="dr_grpo", grad_clip=1e9),
            task,
            problems,
            memo,
        )
        assert abs(out["coupled"]) < 1e-12 * max(1.0, abs(out["direct"])) and out["direct"] != 0
    assert out["carried"] != 0 and out["carried_direct"] == pytest.approx(out["carried"], rel=1e-9)
    assert abs(out["carried_coupled"]) < 1e-9 * abs(out["carried"])
    # no other token's gradient: the first-token denominator is the optimizer's own
    assert out["direct_own_v"] == pytest.approx(out["direct"], rel=1e-9)
    assert out["carried_direct_own_v"] == pytest.approx(out["carried_direct"], rel=1e-9)


def test_first_token_logprobs_equal_column_0_of_the_completion():
    task, model, opt, draw, gen, problems = _setup("sgd", 1e-3)
    batch = common.rollout_batch(copy.deepcopy(model).float(), task, draw, 3, 4, gen)
    full = train.completion_logprobs(model, batch.prompts, batch.tokens, batch.mask, toy_tasks.PAD)
    assert torch.allclose(DP.first_token_logprobs(model, batch), full[:, 0], atol=1e-12)


@pytest.mark.parametrize(
    "loss,opt_name,offpolicy",
    [
        ("dr_grpo", "adamw", False),
        ("grpo", "sgd", False),
        ("dfpo_min", "adamw", True),
        ("dr_grpo", "adamw", True),
        ("dr_grpo", "sgd_momentum", True),
        ("dr_grpo", "adam_b1_0", True),
    ],
)
def test_split_step_takes_train_py_s_step(loss, opt_name, offpolicy):
    """The probe's step is train.optimizer_step's: same parameters after it, on a
    whole on-policy batch and on an off-policy mini-batch whose ratio and clip bind."""
    task, model, opt, draw, gen, problems = _setup(opt_name, 1e-2 if opt_name == "sgd" else 3e-3)
    cfg = common.Config(loss=loss, grad_clip=0.5)
    batch = common.rollout_batch(copy.deepcopy(model).float(), task, draw, 3, 4, gen)
    batch.rewards = torch.tensor([float(i % 3 == 0) for i in range(12)])
    adv = estimators.advantages(batch.rewards, batch.group, cfg.adv)
    with torch.no_grad():
        batch.old_logprobs = train.completion_logprobs(
            model, batch.prompts, batch.tokens, batch.mask, toy_tasks.PAD
        )
    if offpolicy:  # one step first, so that the ratio is not 1 and the clip binds for some tokens
        train.optimizer_step(model, opt, batch, adv, torch.arange(12), cfg, hooks=LabHooks(cfg))
    twin = copy.deepcopy(model)
    twin_opt = train.rl_optimizer(twin.parameters(), opt_name, opt.param_groups[0]["lr"])
    # load_state_dict shares same-dtype tensors
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    rows = torch.arange(6) if offpolicy else torch.arange(12)  # a mini-batch: the first 2 groups
    sub = batch.rows(rows)
    train.optimizer_step(model, opt, batch, adv, rows, cfg, hooks=LabHooks(cfg))
    out = DP.split_step(twin, twin_opt, sub, adv[rows], cfg, task, problems)
    moved = max(
        float((p - q).detach().abs().max()) for p, q in zip(model.parameters(), twin.parameters())
    )
    assert moved < 1e-10
    assert out["predicted"] == pytest.approx(out["exact"], rel=1e-6, abs=1e-12)
    assert out["kl"] > 0
