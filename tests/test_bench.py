"""Tests for bench.py (its quick mode runs and prints JSON lines) and for the
sampler invariants its speed work must keep: the KV-cache path gives the same
tokens and log-probs as the full-recompute reference path."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import toy_tasks  # noqa: E402
from model import GPT, GPTConfig, completion_logprobs  # noqa: E402
from sampler import sample  # noqa: E402
from lab import bench  # noqa: E402

NAMES = {"matmul_peak", "sampler", "hf_generate", "update", "rl_step", "syncs", "ledger",
         "motion", "memory"}


def test_quick_bench_prints_json_lines(tmp_path):
    out_file = tmp_path / "bench.jsonl"
    proc = subprocess.run([sys.executable, "-m", "lab.bench", "--quick", "--device=cpu",
                           f"--out={out_file}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    recs = [json.loads(line) for line in lines]  # every line is JSON
    assert {r["name"] for r in recs} == NAMES
    for r in recs:
        assert r["device"] == "cpu" and r["threads"] >= 1 and r["torch"] == torch.__version__
    by = {r["name"]: r for r in recs}
    assert by["sampler"]["same_tokens"] is True
    hf = by["hf_generate"]  # transformers is optional: a note without it, a ratio with it
    assert ("skipped" in hf) == (importlib.util.find_spec("transformers") is None)
    assert "skipped" in hf or hf["speedup"] > 0
    assert by["sampler"]["kv_tok_s"] > 0 and by["sampler"]["full_tok_s"] > 0
    assert 0 < by["update"]["mfu"] and by["matmul_peak"]["gflops"] > 0
    shares = [by["rl_step"][k] for k in ("sample_share", "reward_share", "fwd_bwd_share",
                                         "optimizer_share")]
    assert abs(sum(shares) - 1) < 1e-3
    s = by["syncs"]  # the host's reads: fewer than one per SFT step, a few per RL step
    assert s["sft_reads_per_step"] < 1 and 0 < s["rl_step_instruments_off_reads"] <= \
        s["rl_step_instruments_on_reads"]
    m = by["motion"]  # the demo's runs with the motion ledger on and off, side by side
    assert m["on_s"] > 0 and m["off_s"] > 0  # (the JSON line rounds them: no exact ratio)
    assert abs(m["share"] - (m["on_s"] - m["off_s"]) / m["off_s"]) < 1e-3
    assert out_file.read_text().strip().splitlines() == lines


def test_bad_flag_exits_nonzero():
    proc = subprocess.run([sys.executable, "-m", "lab.bench", "--nope"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "unknown argument" in proc.stderr


def tiny_model(seed=0):
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=2,
                    n_head=2, n_embd=32, block_size=64)
    return GPT(cfg)


def mixed_prompts():
    """add prompts (6 tokens) and primes prompts (3-4 tokens), interleaved."""
    add = toy_tasks.make_task("add", 2)
    primes = toy_tasks.make_task("primes")
    texts = [add.prompt((12, 34)), primes.prompt((58,)), add.prompt((99, 10)),
             primes.prompt((100,)), primes.prompt((12,)), add.prompt((50, 57))]
    prompts = [toy_tasks.encode(t) for t in texts]
    assert len({len(p) for p in prompts}) > 1
    return prompts


def test_greedy_kv_equals_full_recompute():
    model, prompts = tiny_model(), mixed_prompts()
    a = sample(model, prompts, 2, 12, temperature=0.0, use_cache=True)
    b = sample(model, prompts, 2, 12, temperature=0.0, use_cache=False)
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.mask, b.mask)
    assert torch.allclose(a.old_logprobs, b.old_logprobs, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seeded_sampling_same_on_both_paths(seed):
    model, prompts = tiny_model(seed), mixed_prompts()
    out = []
    for use_cache in (True, False):
        gen = torch.Generator().manual_seed(seed)
        out.append(sample(model, prompts, 4, 12, temperature=1.0, generator=gen,
                          use_cache=use_cache))
    a, b = out
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.mask, b.mask)
    assert torch.allclose(a.old_logprobs, b.old_logprobs, atol=1e-5)
    assert a.prompts == b.prompts and torch.equal(a.group, b.group)
    assert bool(a.mask[:, 0].all())  # every row emits at least one token
    assert (a.old_logprobs[a.mask] < 0).all() and (a.old_logprobs[~a.mask] == 0).all()


def test_sampler_outputs_feed_a_backward_pass():
    """The update phase uses the sampled tensors in autograd (masks are saved
    for backward): they must be ordinary tensors, whatever mode sampled them."""
    model, prompts = tiny_model(), mixed_prompts()
    out = sample(model, prompts, 2, 8, generator=torch.Generator().manual_seed(0))
    logp = completion_logprobs(model, out.prompts, out.tokens, out.mask,
                               toy_tasks.PAD)
    ((logp - out.old_logprobs) * out.mask).sum().backward()
    assert model.lm_head.weight.grad is not None
    assert torch.allclose(logp, out.old_logprobs, atol=1e-5)  # on-policy: ratio 1


def test_seeded_sampling_is_reproducible():
    model, prompts = tiny_model(), mixed_prompts()
    runs = [sample(model, prompts, 4, 12, generator=torch.Generator().manual_seed(7))
            for _ in range(2)]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert torch.equal(runs[0].old_logprobs, runs[1].old_logprobs)


def test_ddp_on_one_gpu_is_refused_before_any_measurement(monkeypatch):
    """train.py runs one process per GPU, so --ddp on a one-GPU machine is refused in one
    line (the default run skips that line with a note instead of failing at the end)."""
    monkeypatch.setattr(bench.dist_utils, "resolve_device", lambda d: "cuda")
    monkeypatch.setattr(bench.torch.cuda, "device_count", lambda: 1)
    with pytest.raises(bench.CliError, match="needs 2 GPUs"):
        bench.parse(["--ddp", "--device=cuda"])
    assert bench.parse(["--device=cuda"])["ddp"] is None  # the default: skipped, with a note
