"""The motion ledger (lab/motion.py, THEORY.md 4.3): a hand example, the sum against the
measured change, own = 0 for equal weights, each part against per-token autograd, and the
optimizer's parts against a step taken without them."""

import copy
import os
import math
import types

import pytest
import torch
from torch.nn.utils import parameters_to_vector

from lab import motion
from model import GPT, GPTConfig, completion_logprobs

P = (0.6, 0.3, 0.1)  # the critique's probabilities at one history


class FreeLogits(torch.nn.Module):
    """A one-layer softmax: the logits are parameters, the same after every history."""

    def __init__(self, p, dtype=torch.float64):
        super().__init__()
        self.z = torch.nn.Parameter(torch.tensor(p, dtype=dtype).log())

    def forward(self, idx, valid=None, return_hidden=False):
        logits = self.z.expand(*idx.shape, len(self.z))
        h = torch.zeros(*idx.shape, 1, dtype=self.z.dtype)
        return (logits, h) if return_hidden else logits


def one_step(model, batch, coef, opt, clip=None):
    """The step the lesson takes: the loss -sum c log pi, its backward, the clip, the step.
    Returns the flat parameters before it, and the clip's factor (train.py's hooks get it
    from the norm the clip returns)."""
    before = parameters_to_vector(model.parameters()).detach().clone()
    logp = completion_logprobs(model, batch.prompts, batch.tokens, batch.mask, 31)
    opt.zero_grad()
    (-(coef * logp).sum()).backward()
    kappa = 1.0
    if clip is not None:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        kappa = min(1.0, clip / (float(norm) + 1e-6))
    opt.step()
    return before, kappa


def hand_batch():
    """Two groups of four rollouts of two tokens after one prompt (ids 0, 1, 2 = a, b, c).
    Every rollout writes a first (a group-shared token) with coefficients that cancel;
    in group 0 one rollout then pushes c, in group 1 one pushes b."""
    tokens = torch.tensor([[0, 0], [0, 1], [0, 2], [0, 0], [0, 0], [0, 1], [0, 2], [0, 0]])
    coef = torch.zeros(8, 2, dtype=torch.float64)
    coef[:, 0] = torch.tensor([1.0, -1.0, 1.0, -1.0, 0.5, -0.5, 0.5, -0.5])
    coef[2, 1], coef[5, 1] = 1.0, 0.4
    return types.SimpleNamespace(prompts=[[3]] * 8, tokens=tokens,
                                 mask=torch.ones(8, 2, dtype=torch.bool),
                                 group=torch.tensor([0] * 4 + [1] * 4),
                                 rewards=torch.tensor([1.0, 0.0] * 4)), coef


def test_the_critiques_case_by_hand():
    """Free logits p = (0.6, 0.3, 0.1), SGD of size eta: a's copies cancel (own 0), and to
    first order a moves by eta (e_a - p).(e_c - p) = -0.24 eta through its group's push on c
    and by 0.4 eta (e_a - p).(e_b - p) = -0.176 eta through group 1's push on b."""
    eta = 1e-4
    model = FreeLogits(P)
    batch, coef = hand_batch()
    opt = torch.optim.SGD(model.parameters(), lr=eta)
    before, _ = one_step(model, batch, coef, opt)
    out = motion.token_motion(model, opt, batch, torch.arange(8), coef, before)
    assert out["kind"].count("shared") == 2  # a at the prompt, in each group
    j = out["kind"].index("shared")  # group 0's a
    # by hand: e_a - p = (0.4, -0.3, -0.1), e_c - p = (-0.6, -0.3, 0.9), e_b - p = (-0.6, 0.7, -0.1)
    assert 0.4 * -0.6 + -0.3 * -0.3 + -0.1 * 0.9 == pytest.approx(-0.24)
    assert out["own"][j] == pytest.approx(0.0, abs=1e-18)
    assert out["same"][j] == pytest.approx(-0.24 * eta, rel=1e-3)
    assert out["other"][j] == pytest.approx(0.4 * -0.44 * eta, rel=1e-3)  # (e_a-p).(e_b-p)
    assert out["memory"][j] == out["decay"][j] == 0.0
    # the realised change, by hand: z moves by eta ((e_c - p) + 0.4 (e_b - p))
    z = [math.log(x) + eta * (dc + 0.4 * db)
         for x, dc, db in zip(P, (-0.6, -0.3, 0.9), (-0.6, 0.7, -0.1))]
    la = z[0] - math.log(sum(math.exp(x) for x in z))
    lb = z[1] - math.log(sum(math.exp(x) for x in z))
    assert out["dlogp"][j] == pytest.approx(la - math.log(0.6), rel=1e-9)
    assert abs(out["gap"][j]) < 1e-12
    # log(p_a / p_b) moved by -0.3 eta (and 0.4 x -1.3 eta from group 1), a's copies cancelled
    assert (la - lb) - math.log(2.0) == pytest.approx((-0.3 - 0.4 * 1.3) * eta, rel=1e-3)


def tiny(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32)).to(dtype)
    G, B = 4, 3
    tokens = torch.randint(0, 30, (G * B, 6))
    tokens[:, :2] = torch.tensor([5, 7])  # a shared prefix of two tokens
    tokens[::2, 2] = 9
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[1, 4:] = False
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0] * B)
    batch = types.SimpleNamespace(prompts=[[1, 2, 3, 4 + k] for k in range(B) for _ in range(G)],
                                  tokens=tokens, mask=mask,
                                  group=torch.arange(B).repeat_interleave(G), rewards=rewards)
    return model, batch


def grpo_coef(batch, dtype=torch.float64, equal=False):
    """grpo's coefficients (Â / (N L_i)), or with ``equal`` dapo's (Â / sum L)."""
    adv = (batch.rewards - 0.5).to(dtype)[:, None] * batch.mask
    lens = batch.mask.sum(1, keepdim=True).to(dtype)
    return adv / (batch.mask.sum() if equal else lens * len(lens))


@pytest.mark.parametrize("name, lr, tol", [("sgd", 1e-1, 1e-5), ("sgd_momentum", 1e-1, 1e-5),
                                           ("sgd_wd", 1e-1, 1e-5),
                                           ("adamw", 1e-4, 1e-4), ("adamw_wd", 1e-4, 1e-4),
                                           ("adam_l2", 1e-4, 1e-4)])
def test_the_parts_add_up_to_the_measured_change(name, lr, tol):
    """In float64, after three steps (so that momentum holds something), the parts add up to
    the change measured by evaluating log pi again, within ``tol`` of the largest change."""
    model, batch = tiny()
    opt = {"sgd": lambda: torch.optim.SGD(model.parameters(), lr=lr),
           "sgd_momentum": lambda: torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
           "sgd_wd": lambda: torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9,
                                             weight_decay=0.1),
           "adamw": lambda: torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99),
                                               weight_decay=0.0),
           "adamw_wd": lambda: torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1),
           "adam_l2": lambda: torch.optim.Adam(model.parameters(), lr=lr, weight_decay=0.1),
           }[name]()
    coef = grpo_coef(batch)
    for _ in range(3):
        before, kappa = one_step(model, batch, coef, opt, clip=0.05)
        out = motion.token_motion(model, opt, batch, torch.arange(12), coef, before,
                                  kappa=kappa)
    assert kappa < 1  # the clip binds: its factor enters every part of the gradient
    assert out["recon"] < 1e-9  # the optimizer's parts rebuild its step
    scale = max(abs(x) for x in out["dlogp"])
    assert scale > 0 and len(out["dlogp"]) >= 4
    for j in range(len(out["dlogp"])):
        total = sum(out[p][j] for p in motion.PARTS)
        assert abs(out["dlogp"][j] - total) < tol * scale
    assert any(abs(m) > 0 for m in out["memory"]) == (name != "sgd")
    assert any(abs(d) > 0 for d in out["decay"]) == (name in ("adamw_wd", "adam_l2", "sgd_wd"))


def test_own_is_zero_for_equal_weights_on_whole_groups():
    """dapo's equal weights: a group-shared token's copies sum to w sum Â = 0, so its own
    part is 0 up to rounding, while grpo's 1/L_i leaves a row of unequal length some."""
    for equal, zero in ((True, True), (False, False)):
        model, batch = tiny()
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        coef = grpo_coef(batch, equal=equal)
        before, _ = one_step(model, batch, coef, opt)
        out = motion.token_motion(model, opt, batch, torch.arange(12), coef, before)
        own = [abs(o) for o, k in zip(out["own"], out["kind"]) if k == "shared"]
        moved = max(abs(x) for x in out["dlogp"])
        assert (max(own) < 1e-12 * moved) == zero, own


def per_token_parts(model, batch, coef, lr, before, after, nodes=5):
    """SGD's parts by another route: every token's gradient by its own autograd call, the
    parts of the step assembled from them, and the path integral by 5-point Gauss-Legendre."""
    net = copy.deepcopy(model)
    params = list(net.parameters())

    def grads_at(theta):
        torch.nn.utils.vector_to_parameters(theta, params)
        out = {}
        for i in range(len(batch.tokens)):
            for t in range(int(batch.mask[i].sum())):
                lp = completion_logprobs(net, [batch.prompts[i]], batch.tokens[i:i + 1],
                                         batch.mask[i:i + 1], 31)[0, t]
                g = torch.autograd.grad(lp, params, allow_unused=True)
                out[i, t] = torch.cat([(x if x is not None else torch.zeros_like(p)).reshape(-1)
                                       for x, p in zip(g, params)])
        return out
    g0 = grads_at(before)
    x, w = torch.tensor([-0.9061798459, -0.5384693101, 0.0, 0.5384693101, 0.9061798459]), \
        torch.tensor([0.2369268851, 0.4786286705, 0.5688888889, 0.4786286705, 0.2369268851])
    d = after - before
    path = [grads_at(before + float((s + 1) / 2) * d) for s in x]
    return g0, path, [float(v) / 2 for v in w]


@pytest.mark.parametrize("clip", [None, 0.01])
def test_each_part_against_per_token_autograd(clip):
    """SGD: own, same and other assembled from per-token gradients (autograd, one token at a
    time, times the clip's factor when it binds) and integrated by Gauss-Legendre; they
    match the ledger's to 1e-6 of the largest change."""
    model, batch = tiny()
    lr = 1e-2 if clip is None else 1.0
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    coef = grpo_coef(batch)
    before, kappa = one_step(model, batch, coef, opt, clip)
    assert (kappa < 0.5) == (clip is not None)
    after = parameters_to_vector(model.parameters()).detach()
    out = motion.token_motion(model, opt, batch, torch.arange(12), coef, before, kappa=kappa)
    tracked = motion.tracked_tokens(batch.tokens, batch.mask, batch.group, batch.rewards)
    g0, path, w = per_token_parts(model, batch, coef, lr, before, after)
    for j, (kind, rows, t) in enumerate(tracked):
        u = sum(wq * gq[rows[0], t] for wq, gq in zip(w, path))
        k = int(batch.group[rows[0]])
        move = {"own": 0, "same": 0, "other": 0}
        for (i, s), g in g0.items():
            where = ("own" if i in rows and s == t else "same" if int(batch.group[i]) == k
                     else "other")
            move[where] = move[where] + kappa * lr * float(coef[i, s]) * g
        scale = max(abs(x) for x in out["dlogp"])
        for p in move:
            assert out[p][j] == pytest.approx(float(u @ move[p]), abs=1e-6 * scale), (p, j)


@pytest.mark.parametrize("lr", [1e-4, 1e-5])
def test_adams_parts_against_steps_without_them(lr):
    """AdamW: the parts against steps taken without them, computed here by Adam's formula from
    the optimizer's state before the step (m, v): without the other groups' gradient in the
    first moment, and with the first moment's memory alone, the second moment held as the
    step applied it (THEORY.md 4.3: a step that recomputed it would be another step). The
    change of the token between the full step and each of them matches the part to first
    order: the paths differ, so the two differ at second order, within 500 lr (5 % at lr 1e-4,
    0.5 % at 1e-5: tenfold less for a tenfold shorter step)."""
    model, batch = tiny()
    b1, b2, eps = 0.9, 0.99, 1e-8
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(b1, b2), eps=eps, weight_decay=0.0)
    coef = grpo_coef(batch)
    for _ in range(50):  # a history for the moments
        one_step(model, batch, coef, opt)
    params = list(model.parameters())
    m0 = torch.cat([opt.state[p]["exp_avg"].reshape(-1) for p in params])
    v0 = torch.cat([opt.state[p]["exp_avg_sq"].reshape(-1) for p in params])
    t = float(opt.state[params[0]]["step"]) + 1
    before, _ = one_step(model, batch, coef, opt)
    after = parameters_to_vector(params).detach().clone()
    out = motion.token_motion(model, opt, batch, torch.arange(12), coef, before)
    kind, rows, pos = motion.tracked_tokens(batch.tokens, batch.mask, batch.group,
                                            batch.rewards)[0]
    assert kind == "shared" and int(batch.group[rows[0]]) == 0

    net = copy.deepcopy(model)

    def grad_of(keep):  # the gradient of the rows ``keep`` of the loss, at the step's start
        torch.nn.utils.vector_to_parameters(before, list(net.parameters()))
        lp = completion_logprobs(net, batch.prompts, batch.tokens, batch.mask, 31)
        g = torch.autograd.grad(-(coef * keep * lp).sum(), list(net.parameters()))
        return torch.cat([x.reshape(-1) for x in g])

    def logp_at(theta):
        torch.nn.utils.vector_to_parameters(theta, list(net.parameters()))
        with torch.no_grad():
            return float(completion_logprobs(net, batch.prompts, batch.tokens, batch.mask,
                                             31)[rows[0], pos])
    ones = torch.ones(12, 1, dtype=torch.float64)
    g = grad_of(ones)
    v = b2 * v0 + (1 - b2) * g * g
    denom = (v / (1 - b2 ** t)).sqrt() + eps
    step = lambda m: before - lr / (1 - b1 ** t) * m / denom  # noqa: E731
    assert (step(b1 * m0 + (1 - b1) * g) - after).abs().max() < 1e-12  # Adam by hand
    others = grad_of((batch.group != 0).to(torch.float64)[:, None])
    full = logp_at(after)
    assert full - logp_at(before) == pytest.approx(out["dlogp"][0], rel=1e-9)
    without_others = logp_at(step(b1 * m0 + (1 - b1) * (g - others)))
    assert full - without_others == pytest.approx(out["other"][0], rel=500 * lr)
    memory_alone = logp_at(step(b1 * m0)) - logp_at(before)
    assert memory_alone == pytest.approx(out["memory"][0], rel=500 * lr)


def test_the_summary_shares_and_lines():
    """The shares are sum part x change / sum change^2 (by hand), and the lines fit 100
    characters and name the largest part; a part that is 0 is left out."""
    m = {"kind": ["shared", "shared", "partial"], "dlogp": [2.0, -1.0, 9.0],
         "own": [0.0, 0.0, 9.0], "same": [1.0, -0.5, 0.0], "other": [0.5, -0.75, 0.0],
         "memory": [0.5, 0.25, 0.0], "decay": [0.0, 0.0, 0.0], "gap": [0.0, 0.0, 0.0],
         "scale": 4.0}
    step = dict(motion.step_metrics(m), motion_steps=1)
    assert step["motion_n"] == 2 and step["motion_abs"] == 3.0 and step["motion_sq"] == 5.0
    assert step["motion_same"] == 2.5 and step["motion_other"] == 1.75
    s = motion.summary(step)
    assert s["motion_share_same"] == 0.5 and s["motion_share_other"] == 0.35
    assert s["motion_share_memory"] == pytest.approx(0.15)
    assert sum(s[f"motion_share_{p}"] for p in motion.PARTS) == pytest.approx(1.0)
    assert s["motion_moved"] == 1.5 and s["motion_scale_mean"] == 4.0
    lines = motion.lines(s, 4)
    assert lines[1] == ("  up to 8 of them in up to 3 mixed groups, in 1 RL steps "
                        "(1, 5, ...: --motion_every=4)")
    lines = lines[:1] + lines[2:]
    assert all(len(x) <= 100 for x in lines)
    assert lines[-2] == "  the largest push along the change: the rest of its group"
    assert not any("weight decay" in x or "own copies" in x for x in lines)
    assert lines[1] == "  mean |change| 1.5e+00 nats, 0.38 times the mean token's (4.0e+00)"


def test_the_checks_agreement_by_hand():
    """motion_check's agreement: slope sum xy / sum x^2, the correlation, and the worst
    token's |y - x| over max |x|, on numbers whose values are known."""
    from lab.experiments import motion_check
    a = motion_check.agreement([1.0, -2.0, 3.0], [1.0, -2.0, 3.0])
    assert a == {"slope": 1.0, "corr": pytest.approx(1.0), "worst": 0.0}
    b = motion_check.agreement([1.0, -2.0, 3.0], [2.0, -4.0, 6.5])
    assert b["slope"] == pytest.approx((2 + 8 + 19.5) / 14) and b["worst"] == pytest.approx(3.5 / 3)


def test_the_checks_bad_input_is_one_line(tmp_path):
    """Bad input is one error line and exit status 2, before anything is written: the
    command once, then each case through its checks in this process."""
    import subprocess
    import sys
    from lab.experiments import motion_check
    from plumbing.errors import CliError
    out = tmp_path / "o"
    run = subprocess.run([sys.executable, "-m", "lab.experiments.motion_check", "--step=0",
                          f"--out={out}"], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), run.stderr
    assert "--step" in lines[0] and not out.exists()
    for argv, words in ((["--seeds=x"], "--seeds"), (["--step=3", "--step=4"], "given twice"),
                        (["--jobs=2"], "--jobs")):
        with pytest.raises(CliError, match=words):
            motion_check.main(argv + [f"--out={out}"])
        assert not out.exists()


def test_the_copy_runs_its_own_parameters_under_compile():
    """--compile replaces the model's forward on the instance (dist_utils): the ledger's
    copy drops it, so that a point of the path is evaluated at that point, not at the run's
    weights (a stand-in for the compiled function, bound to the run's model)."""
    model, batch = tiny()
    model.forward = model.forward  # an instance attribute bound to the run's model
    net = motion.Scratch(model)
    theta = parameters_to_vector(model.parameters()).detach()
    a = net.at(theta).logprobs(batch, [0], 1.0)
    b = net.at(theta * 0.5).logprobs(batch, [0], 1.0)
    assert not torch.allclose(a, b)
