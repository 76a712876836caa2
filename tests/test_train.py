"""The training loop end to end on a tiny config, and the CLI's handling of bad input."""
import dataclasses
import json
import os
import subprocess
import sys
import types

import pytest
import torch

import loss
from plumbing import checkpoint
import sampler
import train
from plumbing.config import Config, parse_args
from plumbing.errors import CliError
import lab.hooks
import lab.instruments
from lab import objectives

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=3", "--sft_batch=8",
        "--rl_steps=2", "--prompts_per_step=3", "--group_size=4", "--eval_size=8",
        "--eval_every=1", "--device=cpu"]


def run_main(tmp_path, *flags):
    cfg = parse_args(TINY + [f"--out_dir={tmp_path}"] + list(flags))
    return cfg, train.main(cfg)


def read_metrics(path):
    return [json.loads(l) for l in open(os.path.join(path, "metrics.jsonl"))]


@pytest.mark.parametrize("objective", list(objectives.OBJECTIVES))
@pytest.mark.parametrize("clip", loss.CLIPS)
def test_every_loss_and_clip_runs_an_rl_step(tmp_path, objective, clip):
    extra = ["--dro_beta=0.1"] if objective == "dro" else []
    # no ratio clip to apply: a one-line error
    if objectives.OBJECTIVES[objective].clip == "none" and clip != "none":
        with pytest.raises(CliError, match="has no ratio clip"):
            parse_args([f"--loss={objective}", f"--clip={clip}", *extra])
        return
    _, summary = run_main(tmp_path, f"--loss={objective}", f"--clip={clip}", "--minibatches=2",
                          "--batching=query", "--rl_steps=1", "--sft_steps=1", *extra)
    rl = [m for m in read_metrics(tmp_path) if m["phase"] == "rl" and m["step"] == 1][0]
    for key in ("clip_frac", "seq_ratio", "first_token_residual", "mixed", "mb_pos", "mb_neg",
                "groups_split", "token_spread", "eval_acc"):
        assert key in rl, key


def test_outputs_metrics_config_and_reproducibility(tmp_path):
    a, b = os.path.join(tmp_path, "a"), os.path.join(tmp_path, "b")
    run_main(a)
    run_main(b)
    ma, mb = read_metrics(a), read_metrics(b)
    assert all("phase" in m and "step" in m for m in ma)
    assert {m["phase"] for m in ma} == {"sft", "rl", "summary"}
    assert any("eval_acc" in m for m in ma if m["phase"] == "rl")
    strip = lambda ms: [{k: v for k, v in m.items() if k != "seconds"} for m in ms]
    assert strip(ma) == strip(mb)  # same seed, same run (CPU)
    conf = json.load(open(os.path.join(a, "config.json")))
    assert conf["loss"] == "grpo" and conf["device"] == "cpu" and conf["params"] > 0
    assert sorted(f for f in os.listdir(a) if f.endswith(".pt")) == ["ckpt.pt", "warm_start.pt"]


def test_init_from_warm_start_skips_sft(tmp_path):
    run_main(tmp_path)
    out2 = os.path.join(tmp_path, "again")
    run_main(out2, f"--init_from={os.path.join(tmp_path, 'warm_start.pt')}")
    ms = read_metrics(out2)
    assert not any(m["phase"] == "sft" for m in ms)
    first = read_metrics(tmp_path)
    acc0 = [m["eval_acc"] for m in first if m["phase"] == "rl" and m["step"] == 0]
    assert [m["eval_acc"] for m in ms if m["phase"] == "rl" and m["step"] == 0] == acc0
    with pytest.raises(CliError, match="checkpoint was trained on task"):
        run_main(os.path.join(tmp_path, "x"), "--task=mul",
                 f"--init_from={os.path.join(tmp_path, 'warm_start.pt')}")


def test_off_policy_reuse_moves_ratios_and_parameters():
    import toy_tasks
    from model import GPT, GPTConfig
    cfg = parse_args(["--epochs=2", "--lr=1e-2", "--loss=dr_grpo", "--clip=none"])
    torch.manual_seed(0)
    m = GPT(
        GPTConfig(
            vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=1, n_head=2, n_embd=32
        )
    )
    task = toy_tasks.make_task("add", 2)
    gen = torch.Generator().manual_seed(0)
    batch = train.rollouts(m, task, toy_tasks.train_sampler(task, [], 0), cfg, gen, "cpu")
    batch.rewards = torch.tensor([float(i % 3 == 0) for i in range(len(batch.rewards))])
    batch.max_len = task.max_new_tokens
    opt = torch.optim.SGD(m.parameters(), lr=cfg.lr)
    snapshots = []
    real_step = opt.step

    def step():
        real_step()
        snapshots.append([p.detach().clone() for p in m.parameters()])
    opt.step = step
    inst = lab.instruments.Instruments(cfg, types.SimpleNamespace(sums=checkpoint.new_sums()),
                                       True)
    inst.rollouts(m, batch)  # the lab sees the rollouts before the update
    hooks = lab.hooks.LabHooks(cfg, instruments=inst)
    steps = train.rl_update(m, opt, batch, cfg, gen, hooks)["steps"]
    assert len(steps) == 2
    assert steps[0]["seq_ratio"] == pytest.approx(1.0, abs=1e-5)   # first pass on-policy
    assert steps[0]["abs_log_ratio"] < 1e-5
    assert steps[1]["abs_log_ratio"] > 1e-3                        # second pass is not
    moved = sum(float((a - b).abs().sum()) for a, b in zip(snapshots[0], snapshots[1]))
    assert moved > 0


@pytest.mark.parametrize("flags", [[], ["--beta=0.1"]])  # the lesson's grpo, the catalogue's
def test_non_finite_loss_stops_with_the_step(tmp_path, monkeypatch, flags):
    real, real_grpo = objectives.policy_loss, loss.LOSSES["grpo"]

    def nan_loss(*a, **k):
        total, stats = real(*a, **k)
        return total * float("nan"), stats

    def nan_grpo(*a, **k):
        total, clip_frac = real_grpo(*a, **k)
        return total * float("nan"), clip_frac
    monkeypatch.setattr(objectives, "policy_loss", nan_loss)
    monkeypatch.setitem(loss.LOSSES, "grpo", nan_grpo)
    with pytest.raises(FloatingPointError, match="step 1"):
        run_main(tmp_path, *flags)


def test_help_lists_every_flag():
    out = subprocess.run(
        [sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0
    from dataclasses import fields
    for f in fields(Config):
        assert f"--{f.name}" in out.stdout
    for name in (
        "--task",
        "--loss",
        "--group_size",
        "--prompts_per_step",
        "--sft_steps",
        "--rl_steps",
        "--lr",
        "--seed",
        "--device",
        "--out_dir",
        "--init_from",
        "--eval_every",
    ):
        assert name in out.stdout


@pytest.fixture(scope="module")
def bad_ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("ck")
    good = d / "good.pt"
    m = torch.nn.Linear(1, 1)
    torch.save({"weights": m.state_dict()}, good)
    (d / "junk.pt").write_bytes(b"\x00garbage")
    (d / "trunc.pt").write_bytes(good.read_bytes()[:40])
    return d


BAD = [
    (["--bogus=1"], "unknown flag"),
    (["--rl_steps=many"], "takes an integer"),
    (["--lr=fast"], "takes a number"),
    (["--task=div"], "unknown task"),
    (["--loss=ppo"], "unknown loss"),
    (["--group_size=1"], "group advantages need at least 2"),
    (["--prompts_per_step=0"], "must be at least 1"),
    (["--rl_steps=-3"], "must be 0 or more"),
    (["--clip=higher", "--clip_low=0.3", "--clip_high=0.2"], "clip_high >= --clip_low"),
    (["--batching=full", "--minibatches=2"], "needs --minibatches=1"),
    (["--batching=query", "--minibatches=20"], "keeps groups whole"),
    (["--init_from=/nonexistent/ckpt.pt"], "does not exist"),
    (["--init_from={d}/junk.pt"], "corrupt"),
    (["--init_from={d}/trunc.pt"], "corrupt"),
    (["--init_from={d}/good.pt"], "corrupt"),
]


@pytest.mark.parametrize("flags, message", BAD)
def test_bad_cli_input_is_one_line_and_nonzero(tmp_path, bad_ckpts, capsys, flags, message):
    """train.cli as the script calls it, in this process (two cases also as a process)."""
    flags = [f.format(d=bad_ckpts) for f in flags] + [f"--out_dir={tmp_path}/o"]
    with pytest.raises(SystemExit) as e:
        train.cli(flags)
    assert e.value.code == 2
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
    assert not os.path.exists(f"{tmp_path}/o/metrics.jsonl")  # nothing written


@pytest.mark.parametrize("flags, message", [BAD[0], BAD[-3]])
def test_bad_cli_input_from_a_real_process(tmp_path, bad_ckpts, flags, message):
    flags = [f.format(d=bad_ckpts) for f in flags] + [f"--out_dir={tmp_path}/o"]
    out = subprocess.run(
        [sys.executable, "train.py"] + flags, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "panicked" not in out.stderr
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], out.stderr


def test_sample_cli(tmp_path, capsys):
    """sample.py as a process once, then its command line function in this process."""
    import sample
    run_main(tmp_path)
    ck = os.path.join(tmp_path, "ckpt.pt")
    ok = subprocess.run([sys.executable, "sample.py", f"--init_from={ck}", "--prompt=12+34="],
                        cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0 and "12+34=" in ok.stdout and "reward" in ok.stdout
    capsys.readouterr()
    sample.cli([f"--init_from={ck}", "--num_prompts=3"])
    assert capsys.readouterr().out.count("reward") == 3
    for flags, msg in [([f"--init_from={ck}", "--prompt=12+x="], "outside the alphabet"),
                       (["--init_from=missing.pt"], "does not exist"), ([], "required")]:
        with pytest.raises(SystemExit) as e:
            sample.cli(flags)
        err = capsys.readouterr().err
        assert e.value.code == 2 and "Traceback" not in err and msg in err
        assert len(err.strip().splitlines()) == 1


def test_bf16_autocast_path_runs_on_cpu(tmp_path):
    """The GPU path's autocast, exercised on CPU: a short run works and its
    log-probs stay fp32 and close to the fp32 ones."""
    import toy_tasks
    from model import completion_logprobs
    cfg, summary = run_main(tmp_path, "--bf16=true")
    assert 0.0 <= summary["final_acc"] <= 1.0
    model, _ = checkpoint.load_checkpoint(os.path.join(tmp_path, "ckpt.pt"))
    prompts = [toy_tasks.encode("12+34="), toy_tasks.encode("5+7=")]
    tokens = torch.tensor(
        [toy_tasks.encode("46") + [toy_tasks.EOS], toy_tasks.encode("12") + [toy_tasks.EOS]]
    )
    mask = torch.ones_like(tokens, dtype=torch.bool)
    ref = completion_logprobs(model, prompts, tokens, mask, toy_tasks.PAD)
    with train.amp(cfg, "cpu"):
        low = completion_logprobs(model, prompts, tokens, mask, toy_tasks.PAD)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, ref, atol=0.1, rtol=0.05)


@pytest.mark.parametrize(
    "flags",
    [
        ["--agg=token-sum"],
        ["--beta=0.1", "--kl_loss_type=k1"],
        ["--top_entropy_quantile=0.5", "--minibatches=2"],
        ["--off_policy_mask_threshold=0.01", "--minibatches=2", "--epochs=2"],
        ["--loss=dppo_kl", "--dual_clip=3"],
        ["--loss=dro", "--dro_beta=0.5"],
    ],
)
def test_engine_switches_run(tmp_path, flags):
    run_main(tmp_path, "--rl_steps=1", "--sft_steps=1", *flags)
    rl = [m for m in read_metrics(tmp_path) if m["phase"] == "rl" and m["step"] == 1][0]
    selecting = any(f.startswith(("--top_entropy", "--off_policy")) for f in flags)
    assert ("kept_frac" in rl) == selecting and rl.get("kept_frac", 1.0) <= 1.0
    if "--top_entropy_quantile=0.5" in flags:
        assert 0.3 < rl["kept_frac"] < 0.7


@pytest.mark.parametrize(
    "flags,msg",
    [
        (["--kl_loss_type=k1"], "needs --beta"),
        (["--loss=sapo", "--agg=token-sum"], "defines its own aggregation"),
        (["--loss=dro"], "needs --dro_beta"),
        (["--dro_beta=0.1"], "applies to it only"),
        (["--loss=gspo", "--top_entropy_quantile=0.5"], "one ratio per sequence"),
        (["--top_entropy_quantile=1.5"], "fraction"),
        (["--off_policy_mask_threshold=-1"], "0 \\(off\\) or positive"),
        (["--agg=mean"], "unknown aggregation"),
        (["--kl_loss_type=k4", "--beta=0.1"], "unknown kl_loss_type"),
    ],
)
def test_engine_switches_refuse_what_cannot_apply(flags, msg):
    with pytest.raises(CliError, match=msg):
        parse_args(flags)


def test_sft_draws_each_step_once_in_chunks_up_to_each_checkpoint(tmp_path, monkeypatch):
    """SFT makes its batches in bulk, up to the next checkpoint: every step's problems are
    drawn once, so the random streams a checkpoint saves are those after its step."""
    calls = []
    real = sampler.sft_texts
    monkeypatch.setattr(sampler, "sft_texts", lambda *a, **k: calls.append(1) or real(*a, **k))
    run_main(tmp_path, "--sft_steps=7", "--ckpt_every=3", "--rl_steps=0")
    assert len(calls) == 7
