"""The seam between the lesson and the lab: --instruments=false is the plain loop (one
forward and one backward pass per optimizer step, nothing else), and with it on the
lab's numbers are logged, the training unchanged."""
import json
import os

import pytest
import torch

import train
from model import GPT
from plumbing.config import parse_args

TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=3", "--sft_batch=8",
        "--rl_steps=3", "--prompts_per_step=4", "--group_size=4", "--eval_size=8",
        "--eval_every=3", "--device=cpu", "--minibatches=2"]
LAB_KEYS = ("first_token_residual", "exch_residual", "seq_ratio", "ledger_mass",
            "ledger_cancelled", "tax", "shared_dlogp", "mb_pos", "length_correct")


def run(tmp_path, name, *flags, count=None):
    cfg = parse_args(TINY + [f"--out_dir={tmp_path / name}", *flags])
    train.main(cfg)
    return [json.loads(line) for line in open(tmp_path / name / "metrics.jsonl")]


@pytest.fixture
def counted(monkeypatch):
    """Counts of GPT.forward calls, autograd.grad calls and backward passes, during RL
    steps 2 and 3 (no evaluation among them but at step 3's end)."""
    counts = {"forward": 0, "grad": 0, "backward": 0}
    real_forward, real_grad, real_backward = GPT.forward, torch.autograd.grad, \
        torch.Tensor.backward
    real_step = train.rl_step
    live = {"on": False}

    def forward(self, *a, **k):
        counts["forward"] += live["on"]
        return real_forward(self, *a, **k)

    def grad(*a, **k):
        counts["grad"] += live["on"]
        return real_grad(*a, **k)

    def backward(self, *a, **k):
        counts["backward"] += live["on"]
        return real_backward(self, *a, **k)

    def rl_step(run, opt):
        live["on"] = run.state.step == 2  # one whole RL step, before its evaluation
        try:
            return real_step(run, opt)
        finally:
            live["on"] = False
    monkeypatch.setattr(GPT, "forward", forward)
    monkeypatch.setattr(torch.autograd, "grad", grad)
    monkeypatch.setattr(torch.Tensor, "backward", backward)
    monkeypatch.setattr(train, "rl_step", rl_step)
    return counts


def test_without_the_instruments_a_step_is_the_plain_loop(tmp_path, counted):
    metrics = run(tmp_path, "off", "--instruments=false")
    # two optimizer steps (--minibatches=2): one forward and one backward each, no more
    assert counted == {"forward": 2, "grad": 0, "backward": 2}
    rl = [m for m in metrics if m["phase"] == "rl" and m["step"] >= 1]
    assert all(k not in m for m in rl for k in LAB_KEYS)
    assert all("clip_frac" in m and "loss" in m and "mixed" in m for m in rl)


def test_the_instruments_cost_two_forward_passes_and_a_loss_gradient_per_part(tmp_path,
                                                                              counted):
    run(tmp_path, "on", "--motion_every=0")
    # the policy at the shared histories before and after the update; c° by autograd.grad
    assert counted == {"forward": 2 + 2, "grad": 2, "backward": 2}


def test_the_motion_ledger_works_on_a_copy_of_the_model(tmp_path, monkeypatch):
    """The motion ledger's passes run on its own copy of the policy (motion.Scratch): the
    run's own model sees no pass more than with --motion_every=0, and the copies see some."""
    from lab import motion
    copies, calls = set(), {"run": 0, "copy": 0}
    real_init, real_forward = motion.Scratch.__init__, GPT.forward

    def init(self, model, *a):
        real_init(self, model, *a)
        copies.add(id(self.net))

    def forward(self, *a, **k):
        calls["copy" if id(self) in copies else "run"] += 1
        return real_forward(self, *a, **k)
    monkeypatch.setattr(motion.Scratch, "__init__", init)
    monkeypatch.setattr(GPT, "forward", forward)
    counts = {}
    for every in (1, 0):
        calls.update(run=0, copy=0)
        run(tmp_path, str(every), f"--motion_every={every}")
        counts[every] = dict(calls)
    assert counts[1]["run"] == counts[0]["run"]
    assert counts[0]["copy"] == 0 < counts[1]["copy"]


def test_the_instruments_change_no_number_of_the_training(tmp_path):
    on, off = run(tmp_path, "on"), run(tmp_path, "off", "--instruments=false")
    strip = lambda ms: [{k: v for k, v in m.items() if k not in LAB_KEYS and k != "seconds"
                         and not k.startswith(("ledger", "tax", "mb_", "length_", "token_",
                                               "groups_", "exch", "first_", "seq_", "abs_",
                                               "shared_", "lencov_", "choice_",
                                               "motion_"))} for m in ms]
    assert strip(on) == strip(off)
    assert all(k in on[-2] for k in LAB_KEYS)  # the last RL step's line


def test_diagnostics_need_the_instruments():
    from plumbing.errors import CliError
    with pytest.raises(CliError, match="needs --instruments=true"):
        parse_args(["--diagnostics", "--instruments=false"])
