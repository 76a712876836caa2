"""experiments/drift_probes.py: the credit of the restate choice by hand, and the
direct / coupled / carried split of a step checked against the step itself."""
import copy
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments"))
import advantage  # noqa: E402
import common  # noqa: E402
import drift_probes as DP  # noqa: E402
import toy_tasks as T  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def test_credit_by_hand():
    # group 0: restated rows 0, 1 (rewards 1, 0), not: rows 2, 3 (1, 1); group 1: none restated
    tok = torch.full((8, 3), T.encode("1")[0])
    tok[0, 0] = tok[1, 0] = DP.RESTATE
    batch = {"tokens": tok, "rewards": torch.tensor([1.0, 0, 1, 1, 0, 1, 0, 1]),
             "group": torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])}
    adv = torch.tensor([0.25, -0.75, 0.25, 0.25, -0.5, 0.5, -0.5, 0.5])
    out = DP.credit(batch, adv)
    assert out["credit_gap"] == pytest.approx(0.5 - 4 / 6)  # 1/2 with, 4/6 without
    # group 0: x = (1,1,0,0), mean 0.5; A mean 0: cov = (0.5*0.25 - 0.5*0.75 - 0.5*0.25 - 0.5*0.25)/4
    assert out["credit_cov"] == pytest.approx(((0.125 - 0.375 - 0.125 - 0.125) / 4 + 0.0) / 2)
    assert out["restated"] == pytest.approx(2 / 8)


def _setup(opt_name, lr):
    torch.manual_seed(0)
    task = T.make_task("chain")
    model = GPT(GPTConfig(vocab_size=T.VOCAB_SIZE, n_out=T.N_OUT, n_layer=1, n_head=2, n_embd=16,
                          block_size=64)).double()
    opt = (torch.optim.SGD(model.parameters(), lr=lr) if opt_name == "sgd" else
           torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0))
    draw = T.train_sampler(task, [], 0)
    gen = torch.Generator().manual_seed(0)
    problems = [draw() for _ in range(6)]
    return task, model, opt, draw, gen, problems


@pytest.mark.parametrize("opt_name,lr,clip", [("sgd", 1e-3, 1e9), ("sgd", 1e-1, 1e-3), ("adamw", 1e-5, 1e9),
                                              ("adamw", 1e-5, 1e-3)])
def test_split_adds_up_to_the_step_and_tracks_the_measured_change(opt_name, lr, clip):
    task, model, opt, draw, gen, problems = _setup(opt_name, lr)
    for step in range(2):  # the second AdamW step carries the first one's momentum
        batch = common.rollout_batch(copy.deepcopy(model).float(), task, draw, 3, 4, gen)  # the sampler is fp32
        batch["rewards"] = torch.tensor([float(i % 2) for i in range(12)])  # mixed groups
        adv = advantage.advantages(batch["rewards"], batch["group"], "dr_grpo")
        out = DP.split_step(model, opt, batch, adv, "dr_grpo", task, problems, grad_clip=clip)
        assert out["predicted"] == pytest.approx(out["exact"], rel=1e-6, abs=1e-12)
        assert out["measured"] == pytest.approx(out["exact"], rel=0.05, abs=1e-9)
        assert out["direct"] != 0 and out["coupled"] != 0
        if opt_name == "sgd":
            assert out["carried"] == 0
    if opt_name == "adamw":
        assert out["carried"] != 0
