"""The choice's motion (lab/choice_motion.py): a hand example on free logits, a tabular policy
where coupling is absent, each part against a step taken with that part's coefficients
alone, the parts against the measured change under AdamW, and its numbers in a run."""

import math
import types

import pytest
import torch
from torch.nn.utils import parameters_to_vector

from lab import choice_motion
from model import GPT, GPTConfig, completion_logprobs
from test_motion import FreeLogits  # one logit vector after every history
from toy_tasks import PAD

A, B_, C = 0, 1, 2  # token ids: the choice is A


class Table(torch.nn.Module):
    """A tabular policy: the logits after a history are a free row of W chosen by its last
    token, so histories ending in different tokens share no parameter."""

    def __init__(self, vocab=8, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(vocab, vocab, generator=g, dtype=torch.float64))

    def forward(self, idx, valid=None, return_hidden=False):
        logits = self.w[idx]
        h = torch.zeros(*idx.shape, 1, dtype=self.w.dtype)
        return (logits, h) if return_hidden else logits


def hand_batch():
    """Group 0 (prompt [3]): first tokens a, b, a, c with c0 = 1, -1, 0.5, -0.5, then row 2
    pushes a again at position 1. Group 1 (prompt [4]): every row writes b, net push 0.2."""
    tokens = torch.tensor([[A, A], [B_, A], [A, A], [C, A], [B_, A], [B_, A], [B_, A], [B_, A]])
    coef = torch.zeros(8, 2, dtype=torch.float64)
    coef[:4, 0] = torch.tensor([1.0, -1.0, 0.5, -0.5])
    coef[2, 1] = 1.0
    coef[4:, 0] = torch.tensor([0.3, -0.3, 0.2, 0.0])
    return types.SimpleNamespace(prompts=[[3]] * 4 + [[4]] * 4, tokens=tokens,
                                 mask=torch.ones(8, 2, dtype=torch.bool),
                                 group=torch.tensor([0] * 4 + [1] * 4),
                                 rewards=torch.tensor([1.0, 0.0] * 4)), coef


def step(model, batch, coef, opt):
    """The lesson's step on the loss -sum c log pi; returns the flat parameters before it."""
    before = parameters_to_vector(model.parameters()).detach().clone()
    logp = completion_logprobs(model, batch.prompts, batch.tokens, batch.mask, PAD)
    opt.zero_grad()
    (-(coef * logp).sum()).backward()
    opt.step()
    return before


def log_odds(model, prompt, dtype=torch.float64):
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([prompt]))[0, -1].to(dtype), -1)[A]
    return float(lp - torch.log1p(-lp.exp()))


def test_the_hand_example():
    """Free logits p = (0.6, 0.3, 0.1), SGD of size eta. The log-odds' gradient in logit space
    is (e_a - p) / (1 - p_a) = (1, -0.75, -0.25), so to first order, at group 0's prompt:
    own 1.5 x 0.65 eta, history (1 x 1.1 + 0.5 x 0.6) eta, peers 0.2 x -1.1 eta (group 1's
    b), same 0.65 eta (row 2's second a), other 0; at group 1's: no own, history -0.22 eta,
    peers group 0's first tokens (0.975 + 1.4) eta, other its second a, 0.65 eta."""
    eta = 1e-5
    model = FreeLogits((0.6, 0.3, 0.1))
    batch, coef = hand_batch()
    opt = torch.optim.SGD(model.parameters(), lr=eta)
    f0 = log_odds(model, [3])
    before = step(model, batch, coef, opt)
    out = choice_motion.choice_motion(model, opt, batch, torch.arange(8), coef, before, A)
    assert out["group"] == [0, 1]
    assert out["f"][0] == pytest.approx(math.log(1.5), rel=1e-12)
    want = [dict(own=0.975, history=1.4, peers=-0.22, same=0.65, other=0.0),
            dict(own=0.0, history=-0.22, peers=2.375, same=0.0, other=0.65)]
    for j, parts in enumerate(want):
        for k, v in parts.items():
            assert out[k][j] == pytest.approx(v * eta, rel=1e-3, abs=1e-12), (j, k)
        assert out["memory"][j] == out["decay"][j] == 0.0
        assert abs(out["gap"][j]) < 1e-9 * abs(out["dlo"][j])
    assert out["dlo"][0] == pytest.approx(log_odds(model, [3]) - f0, rel=1e-9)


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_a_tabular_policy_has_no_coupling(name):
    """Histories ending in different tokens share no parameter: peers, same and other are 0,
    own + history (+ memory under AdamW, after three steps) is the whole change."""
    model = Table()
    batch, coef = hand_batch()
    opt = (torch.optim.SGD(model.parameters(), lr=1e-2) if name == "sgd" else
           torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0))
    for _ in range(3):
        before = step(model, batch, coef, opt)
    out = choice_motion.choice_motion(model, opt, batch, torch.arange(8), coef, before, A)
    for j in range(2):  # 0 up to the rounding of same = group - own - history, and so on
        for part in ("peers", "same", "other"):
            assert abs(out[part][j]) < 1e-14 * abs(out["dlo"][j]), part
        total = out["own"][j] + out["history"][j] + out["memory"][j]
        assert total == pytest.approx(out["dlo"][j], rel=1e-6)
    assert (out["memory"][0] != 0.0) == (name == "adamw")


def tiny(seed=0):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32)).to(torch.float64)
    G, n = 4, 3
    tokens = torch.randint(0, 30, (G * n, 5))
    tokens[::2, 0] = A  # half of each group writes the choice first
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[1, 3:] = False
    batch = types.SimpleNamespace(prompts=[[1, 2, 3, 4 + k] for k in range(n) for _ in range(G)],
                                  tokens=tokens, mask=mask,
                                  group=torch.arange(n).repeat_interleave(G),
                                  rewards=torch.tensor([1.0, 0.0, 0.0, 1.0] * n))
    lens = mask.sum(1, keepdim=True).double()
    coef = (batch.rewards.double() - 0.5)[:, None] * mask / (lens * len(lens))  # grpo's
    return model, batch, coef


def test_each_part_is_the_step_its_coefficients_alone_take():
    """Under SGD at lr 1e-4, each part equals the change of the log-odds in a
    step taken from the same point with only that part's coefficients (to first order)."""
    model, batch, coef = tiny()
    lr, rows = 1e-4, torch.arange(12)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    before = step(model, batch, coef, opt)
    out = choice_motion.choice_motion(model, opt, batch, rows, coef, before, A)
    wrote = batch.tokens[:, 0] == A
    for j, k in enumerate(out["group"]):
        mine = batch.group == k
        keep = {"own": lambda: (mine & wrote)[:, None] & (torch.arange(5) == 0),
                "history": lambda: (mine & ~wrote)[:, None] & (torch.arange(5) == 0),
                "peers": lambda: (~mine)[:, None] & (torch.arange(5) == 0),
                "same": lambda: mine[:, None] & (torch.arange(5) > 0),
                "other": lambda: (~mine)[:, None] & (torch.arange(5) > 0)}
        for part, sel in keep.items():
            model.load_state_dict(start)
            f0 = log_odds(model, batch.prompts[4 * k])
            step(model, batch, coef * sel(), torch.optim.SGD(model.parameters(), lr=lr))
            moved = log_odds(model, batch.prompts[4 * k]) - f0
            assert out[part][j] == pytest.approx(moved, rel=1e-2, abs=1e-12), (k, part)


def test_the_parts_add_up_under_adamw():
    """AdamW at the demo's learning rate, after three steps: the parts add up to the measured
    change within 1e-4 of the largest, with memory part of it."""
    model, batch, coef = tiny(seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0)
    for _ in range(3):
        before = step(model, batch, coef, opt)
    out = choice_motion.choice_motion(model, opt, batch, torch.arange(12), coef, before, A)
    scale = max(abs(x) for x in out["dlo"])
    assert scale > 0
    assert max(abs(g) for g in out["gap"]) < 1e-4 * scale
    assert any(m != 0 for m in out["memory"])
    m = choice_motion.step_metrics(out)
    assert m["choice_motion_n"] == 3
    assert m["choice_motion_dlo"] == pytest.approx(sum(out["dlo"]) / 3)
    total = sum(m[f"choice_motion_{p}"] for p in choice_motion.PARTS) + m["choice_motion_gap"]
    assert total == pytest.approx(m["choice_motion_dlo"], rel=1e-9)


@pytest.mark.parametrize("every", [1, 2])
def test_a_runs_metrics_hold_the_choices_motion(tmp_path, every):
    """A parity task's run: every followed RL step logs the choice's motion at its prompts,
    one entry per group, whose parts and gap add up to the measured change; memory's first
    tokens' part only while every step since RL began was followed."""
    import json

    import train
    from plumbing.config import parse_args
    cfg = parse_args(["--task=parity_wrong_long", "--n_layer=1", "--n_head=2", "--n_embd=32",
                      "--sft_steps=0", "--rl_steps=3", "--prompts_per_step=3", "--group_size=4",
                      "--eval_size=4", "--eval_every=3", "--device=cpu", "--lr=1e-3",
                      f"--motion_every={every}", f"--out_dir={tmp_path}"])
    train.main(cfg)
    steps = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    steps = [m for m in steps if m.get("phase") == "rl" and m.get("step", 0) > 0]
    assert len(steps) == 3
    followed = [m for m in steps if "choice_motion_n" in m]
    assert [m["step"] for m in followed] == ([1, 2, 3] if every == 1 else [1, 3])
    split = [m["step"] for m in followed if "choice_motion_memory_first" in m]
    assert split == ([1, 2, 3] if every == 1 else [1])
    for m in followed:
        assert m["choice_motion_n"] == 3
        total = sum(m[f"choice_motion_{p}"] for p in choice_motion.PARTS)
        assert total + m["choice_motion_gap"] == pytest.approx(m["choice_motion_dlo"], abs=1e-9)
        assert m["choice_motion_dlo"] != 0.0
        assert abs(m["choice_motion_gap"]) < 0.05 * abs(m["choice_motion_dlo"])


@pytest.mark.parametrize("name", ["adamw", "sgd_momentum"])
@pytest.mark.parametrize("where", ["first", "rest", "both"])
def test_memory_splits_by_the_first_tokens_momentum(name, where):
    """Four steps, the first tokens' momentum carried as the run carries it: with
    coefficients on the first tokens only, memory is all memory_first; with none there, it
    is 0; with both, memory_first is the momentum of a second optimizer fed the first
    tokens' gradients alone (another route: torch's own momentum, on a copy)."""
    import copy
    model, batch, coef = tiny(seed=2)
    pos0 = torch.arange(5) == 0
    coef = {"first": coef * pos0, "rest": coef * ~pos0, "both": coef}[where]
    make = {"adamw": lambda p: torch.optim.AdamW(p, lr=1e-4, betas=(0.9, 0.99),
                                                 weight_decay=0.0),
            "sgd_momentum": lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9)}[name]
    opt = make(model.parameters())
    shadow = copy.deepcopy(model)
    shadow_opt = make(shadow.parameters())
    params = list(model.parameters())
    carried = torch.zeros_like(parameters_to_vector(params))
    for _ in range(4):
        out_prev = carried
        # the shadow takes the step of the first tokens' coefficients alone, from the
        # model's own point: its momentum is m^first by torch's arithmetic
        shadow.load_state_dict(model.state_dict())
        step(shadow, batch, coef * pos0, shadow_opt)
        before = step(model, batch, coef, opt)
        out = choice_motion.choice_motion(model, opt, batch, torch.arange(12), coef, before, A,
                                          carried=carried)
        carried = choice_motion.advance(opt, params, carried, out["first_grad"])
    key = "exp_avg" if name == "adamw" else "momentum_buffer"
    torch_m = torch.cat([shadow_opt.state[p][key].reshape(-1) for p in shadow.parameters()])
    assert torch.allclose(carried, torch_m, rtol=1e-9, atol=1e-15)
    assert out_prev.abs().max() > 0 or where == "rest"
    for j in range(3):
        mem, first = out["memory"][j], out["memory_first"][j]
        assert mem != 0.0
        if where == "first":
            assert first == pytest.approx(mem, rel=1e-9)
        elif where == "rest":
            assert first == 0.0
        else:
            assert first != 0.0 and first != pytest.approx(mem, rel=1e-3)


def test_a_cap_on_groups_follows_fewer_prompts_and_changes_none_of_their_parts():
    """max_groups=1 follows group 0 alone: its parts are those of the uncapped ledger (the
    other group's tokens still enter them, as peers and other)."""
    batch, coef = hand_batch()
    runs = []
    for cap in (None, 1):
        model = FreeLogits((0.6, 0.3, 0.1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-5)
        before = step(model, batch, coef, opt)
        kw = {} if cap is None else {"max_groups": cap}
        runs.append(choice_motion.choice_motion(model, opt, batch, torch.arange(8), coef,
                                                before, A, **kw))
    full, capped = runs
    assert capped["group"] == [0] and full["group"] == [0, 1]
    for k in ("dlo", *choice_motion.PARTS):
        assert capped[k][0] == full[k][0], k
    assert choice_motion.MAX_GROUPS >= 2
