"""The motion ledger inside train.py's runs: its numbers in metrics.jsonl at every RL step,
the summary recomputed from them, and the closing lines that print them, in the regimes
the lesson has (grpo, dapo, DFPO, reused data in several mini-batches and epochs)."""
import contextlib
import dataclasses
import io
import json

import pytest
import torch

import train
from ddp_driver import B, G, fixed_batch
from lab import motion
from model import completion_logprobs
from plumbing.config import parse_args
from toy_tasks import PAD

TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=0", "--rl_steps=3",
        f"--prompts_per_step={B}", f"--group_size={G}", "--eval_size=4", "--eval_every=3",
        "--device=cpu", "--lr=1e-3", "--motion_every=2"]


def on_policy_rollouts(batch):
    """A stand-in for train.rollouts: fixed tokens and mixed rewards (tests/ddp_driver.py),
    with the log-probs of the policy that samples them, so that a first step is on-policy."""
    def rollouts(model, task, draw, cfg, gen, device, n_prompts=None, decoder=None):
        with torch.no_grad():
            old = completion_logprobs(model, batch.prompts, batch.tokens, batch.mask, PAD)
        return dataclasses.replace(batch, old_logprobs=old, max_len=None)
    return rollouts


def run(tmp_path, *flags):
    train.rollouts = on_policy_rollouts(fixed_batch(torch.float32))
    cfg = parse_args(TINY + [f"--out_dir={tmp_path}", *flags])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        summary = train.main(cfg)
    ms = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    return summary, [m for m in ms if m.get("phase") == "rl" and m.get("step", 0) > 0], \
        printed.getvalue()


@pytest.mark.parametrize("flags", [["--loss=grpo"], ["--loss=dapo"],
                                   ["--loss=dfpo_min", "--minibatches=2", "--epochs=2"]],
                         ids=["grpo", "dapo", "dfpo_reused"])
def test_the_summary_and_lines_are_the_metrics(tmp_path, flags, monkeypatch):
    monkeypatch.setattr(train, "rollouts", train.rollouts)  # run() replaces it: restored
    summary, steps, printed = run(tmp_path, *flags)
    # --motion_every=2: RL steps 1 and 3 measured, step 2 not
    assert len(steps) == 3 and [all(k in m for k in motion.STEP_KEYS) for m in steps] == [
        True, False, True]
    assert not any(k.startswith("motion_") for k in steps[1])
    steps = [steps[0], steps[2]]
    sums = {k: sum(m[k] for m in steps) for k in motion.STEP_KEYS}
    sums["motion_steps"] = 2
    if not sums["motion_n"]:  # no mixed group in 3 steps: the line says so
        assert "followed none" in printed
        return
    again = motion.summary(sums)
    for k, v in again.items():
        assert summary[k] == pytest.approx(v, rel=1e-9), k
    assert (f"mean |change| {again['motion_moved']:.1e} nats, "
            f"{again['motion_moved'] / again['motion_scale_mean']:.2f} times the mean "
            f"token's ({again['motion_scale_mean']:.1e})") in printed
    for p, words in motion.PARTS.items():
        share = again[f"motion_share_{p}"]
        assert (f"{words:40s} {100 * share:+8.2f} %" in printed) == (share != 0), p
    closing = printed[printed.index("what moved"):printed.index("outputs in")].splitlines()
    assert all(len(line) <= 100 for line in closing), closing  # (the paths' line may not)
    assert "push plus the pull" not in printed
    # the parts add up to the measured change, up to Simpson's rule and float32's rounding
    assert summary["motion_gap_share"] < 0.05


def test_equal_weights_on_whole_groups_leave_no_own_push(tmp_path, monkeypatch):
    """dapo on-policy, one optimizer step per batch: a group-shared token's copies sum to
    w sum Â = 0 in each group, so its own part of the movement is 0 up to rounding."""
    monkeypatch.setattr(train, "rollouts", train.rollouts)
    summary, steps, _ = run(tmp_path, "--loss=dapo")
    assert sum(m.get("motion_n", 0) for m in steps) > 0
    assert abs(summary["motion_share_own"]) < 1e-4
