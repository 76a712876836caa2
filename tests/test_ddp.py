"""One optimizer step however it is split: micro-batches, permutations, 2 processes.

Every objective x clip, float64, plain SGD (so that the weights show the
gradient's scale, which Adam's first step would hide): the parameters after
rl_update agree to 1e-6 across the unsplit step, --micro_batch splits (also
uneven ones), a permutation of the rollouts and 2 torchrun processes (gloo).
With --norm=local the failure shows, with a number by hand. torchrun is
started once per scenario (the 2-process runs of every case share one launch).
"""
import json
import os
import signal
import types
import socket
import subprocess
import sys

import pytest
import torch

import lab.hooks
import lab.instruments
from plumbing import dist_utils
import loss
import toy_tasks
from plumbing import checkpoint
import train
from plumbing.config import parse_args
from plumbing.errors import CliError
from ddp_driver import (
    CASES,
    INVARIANT,
    MAIN_FLAGS,
    fixed_batch,
    fixed_rollouts,
    one_update,
    step_config,
    tiny_model,
)
from model import completion_logprobs
from sampler import Rollouts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def params_after(cfg, batch=None):
    model = tiny_model()
    one_update(model, fixed_batch() if batch is None else batch, cfg)
    return [p.detach() for p in model.parameters()]


def assert_same(a, b):
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def unsplit():
    """The reference: one process, no micro-batches, for every case."""
    return {
        (objective, clip): params_after(step_config(objective, clip, 0))
        for objective in INVARIANT
        for clip in loss.CLIPS
    }


def test_bnpo_depends_on_the_split():
    """bnpo normalises by each micro-batch's own tokens, as TRL does: the same
    rollouts give another step once it is split (clip_cov and kl_cov select inside
    each micro-batch too, but on these few tokens verl's ratio selects none)."""
    a, b = params_after(step_config("bnpo", "none", 0)), params_after(
        step_config("bnpo", "none", 3)
    )
    assert max(float((x - y).abs().max()) for x, y in zip(a, b)) > 1e-6


@pytest.mark.parametrize("objective", INVARIANT)
@pytest.mark.parametrize("clip", loss.CLIPS)
def test_micro_batches_and_permutation_give_the_same_step(unsplit, objective, clip):
    ref = unsplit[(objective, clip)]
    start = [p.detach() for p in tiny_model().parameters()]
    assert max(float((a - b).abs().max()) for a, b in zip(ref, start)) > 1e-3  # the step moves
    for k in (1, 3, 5):  # mini-batches of 8 rows: 8 x 1, 3 + 3 + 2, 5 + 3
        assert_same(params_after(step_config(objective, clip, k)), ref)
    # a permutation of the rollouts: query cuts by group, so the same groups meet
    batch = fixed_batch()
    perm = torch.randperm(len(batch.rewards), generator=torch.Generator().manual_seed(1))
    shuffled = batch.rows(perm)
    cfg = dict(objective=objective, clip=clip, batching="query")
    assert_same(params_after(step_config(micro_batch=3, **cfg), shuffled),
                params_after(step_config(micro_batch=0, **cfg), batch))


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """One torchrun launch: train.main on fixed rollouts, then every case's step."""
    out = tmp_path_factory.mktemp("ddp")
    run = subprocess.run(TORCHRUN + ["tests/ddp_driver.py", "steps", str(out)], cwd=ROOT,
                         env=ENV, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def test_two_processes_give_the_single_process_step(unsplit, two_processes):
    params = torch.load(two_processes / "params.pt", weights_only=True)
    assert set(params) == set(CASES)
    for (objective, clip, k), p in params.items():
        assert_same(p, unsplit[(objective, clip)])


def test_dfpo_split_groups_need_the_step_weights():
    """Without the step's per-group weights (each micro-batch its own w~, as
    --norm=local does) a split group gives another step: the weights matter."""
    ref = params_after(step_config("dfpo_orth", "none", 0))
    local = params_after(step_config("dfpo_orth", "none", 3, norm="local"))
    assert max(float((a - b).abs().max()) for a, b in zip(ref, local)) > 1e-4


# ----------------------------------------------------------------------- the failure that must show

def shared_group():
    """One group of 4: all start with token 5, then differ; rewards 1, 1, 0, 0;
    lengths 2, 2, 4, 4; on-policy (recorded log-probs = the current policy's)."""
    tokens = torch.tensor(
        [
            [5, 7, toy_tasks.PAD, toy_tasks.PAD],
            [5, 8, toy_tasks.PAD, toy_tasks.PAD],
            [5, 9, 1, 2],
            [5, 3, 4, 2],
        ]
    )
    mask = tokens != toy_tasks.PAD
    prompts = [toy_tasks.encode("12+34=")] * 4
    with torch.no_grad():
        logp = completion_logprobs(tiny_model(), prompts, tokens, mask, toy_tasks.PAD)
    return Rollouts(prompts=prompts, tokens=tokens, mask=mask, old_logprobs=logp,
                    rewards=torch.tensor([1.0, 1, 0, 0]), group=torch.zeros(4, dtype=torch.long),
                    max_len=4)


@pytest.mark.parametrize("norm, expected", [("global", 0.0), ("local", 1 / 3)])
def test_local_norm_breaks_dapo_cancellation(norm, expected):
    """Micro-batches {0, 1} (4 tokens) and {2, 3} (8 tokens). dapo's coefficient
    of the shared first token is Â_i / sum L globally: the copies cancel. With
    per-micro-batch denominators it is Â_i / (2 * 4) and Â_i / (2 * 8): net
    a (1/4 - 1/8), mass a (1/4 + 1/8), residual (8 - 4) / (8 + 4) = 1/3."""
    cfg = parse_args(["--loss=dapo", "--batching=full", "--micro_batch=2", "--clip=none",
                      "--prompts_per_step=1", "--group_size=4", f"--norm={norm}"])
    model = tiny_model()
    inst = lab.instruments.Instruments(cfg, types.SimpleNamespace(sums=checkpoint.new_sums()),
                                       True)
    batch = shared_group()
    inst.rollouts(model, batch)  # the lab sees the rollouts before the update
    out = train.rl_update(model, torch.optim.SGD(model.parameters(), lr=0.1), batch, cfg,
                          torch.Generator().manual_seed(0),
                          lab.hooks.LabHooks(cfg, instruments=inst))
    assert out["exch_residual"] == pytest.approx(expected, abs=1e-6)
    # only the first token is shared
    assert out["first_token_residual"] == pytest.approx(expected, abs=1e-6)


# ----------------------------------------------------------------------------- helpers and errors

def test_micro_batches_and_shards():
    assert [len(p) for p in dist_utils.micro_batches(8, 3)] == [3, 3, 2]
    assert [len(p) for p in dist_utils.micro_batches(5, 0)] == [5]
    assert torch.equal(torch.cat(dist_utils.micro_batches(7, 2)), torch.arange(7))
    mb = torch.tensor([9, 4, 7, 1, 3])
    assert [dist_utils.shard(mb, r, 2).tolist() for r in (0, 1)] == [[9, 4, 7], [1, 3]]
    assert dist_utils.rank_world() == (0, 1) and dist_utils.gather_rollouts({"a": 1}) == {"a": 1}


def test_world_checks():
    dist_utils.check_world(parse_args([]), 1)
    with pytest.raises(CliError, match="not divisible by the 3 processes"):
        dist_utils.check_world(parse_args(["--prompts_per_step=4"]), 3)
    with pytest.raises(CliError, match="fewer than the 4 processes"):
        dist_utils.check_world(
            parse_args(["--prompts_per_step=4", "--group_size=2", "--minibatches=4"]), 4
        )


TORCHRUN_ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
BAD = [
    ({}, ["--micro_batch=-1"], "--micro_batch must be at least 1"),
    ({}, ["--micro_batch=0"], "--micro_batch must be at least 1"),
    ({}, ["--micro_batch=65"], "larger than a mini-batch"),
    ({}, ["--norm=mean"], "unknown norm"),
    (TORCHRUN_ENV, ["--prompts_per_step=3"], "not divisible by the 2 processes"),
]
if not torch.cuda.is_available():
    BAD.append((TORCHRUN_ENV, ["--device=cuda"], "no CUDA device"))


@pytest.mark.parametrize("env, flags, message", BAD)
def test_bad_input_is_caught_before_anything_runs(tmp_path, monkeypatch, env, flags, message):
    for k, v in env.items():  # what torchrun sets; the checks come before the process group
        monkeypatch.setenv(k, v)
    with pytest.raises(CliError, match=message):
        train.main(parse_args(["--minibatches=2", f"--out_dir={tmp_path}/o"] + flags))
    assert not os.path.exists(f"{tmp_path}/o")


def test_bad_input_under_torchrun_is_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, "train.py", "--prompts_per_step=3", f"--out_dir={tmp_path}/o"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(ENV, **TORCHRUN_ENV),
    )
    lines = [l for l in run.stderr.splitlines() if l.strip()]
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), run.stderr
    assert "not divisible by the 2 processes" in lines[0]
    assert not os.path.exists(f"{tmp_path}/o")


# ----------------------------------------------------------------------------- torchrun end to end

def test_torchrun_train_logs_each_step_once_and_checkpoints(two_processes):
    out = two_processes / "cli"
    ms = [json.loads(l) for l in open(out / "metrics.jsonl")]
    assert [m["step"] for m in ms if m["phase"] == "rl"] == [0, 1, 2, 3]  # rank 0 only
    assert [m["step"] for m in ms if m["phase"] == "sft"] == [1, 2]
    assert sorted(os.listdir(out)) == ["ckpt.pt", "config.json", "metrics.jsonl", "warm_start.pt"]
    assert json.load(open(out / "config.json"))["world_size"] == 2
    _, ck = checkpoint.load_checkpoint(str(out / "ckpt.pt"))
    assert ck["step"] == 3


def test_torchrun_main_step_equals_single_process_on_fixed_rollouts(two_processes, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setattr(train, "rollouts", fixed_rollouts(fixed_batch(torch.float32)))
    monkeypatch.setattr(
        torch.optim, "AdamW", lambda params, lr, **kw: torch.optim.SGD(params, lr=lr)
    )
    train.main(parse_args(MAIN_FLAGS + [f"--out_dir={tmp_path}"]))
    two, _ = checkpoint.load_checkpoint(str(two_processes / "ckpt.pt"))
    one, _ = checkpoint.load_checkpoint(str(tmp_path / "ckpt.pt"))
    with torch.no_grad():
        start = tiny_model(torch.float32)
        moved = max(
            float((a - b).abs().max()) for a, b in zip(one.parameters(), start.parameters())
        )
    assert moved > 1e-3
    assert_same([p.detach() for p in two.parameters()], [p.detach() for p in one.parameters()])
    logs = [[json.loads(l) for l in open(d / "metrics.jsonl")] for d in (tmp_path, two_processes)]
    steps = [[m for m in ms if m["phase"] == "rl" and m["step"] > 0] for ms in logs]
    assert len(steps[1]) == 2  # once per step: rank 0 only
    for a, b in zip(*steps):
        for key in ("loss", "first_token_residual", "exch_residual", "reward", "motion_n",
                    "motion_abs", "motion_same", "motion_scale"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_failing_rank_does_not_hang_the_other():
    """Two plain processes (no torchrun to stop the survivor): rank 1 exits once
    the process group is up, rank 0 then waits on it in an all-reduce. Rank 0
    must end with an error (a hang fails by the timeout)."""
    env = dict(ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, "tests/ddp_driver.py", "fail"], cwd=ROOT,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for r in (0, 1)]
    try:
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes[1] == 3 and codes[0] != 0


# --------------------------------------------------------------- torchrun: exact resume, clean exit

RUN_FLAGS = [
    "--n_layer=1",
    "--n_head=2",
    "--n_embd=16",
    "--sft_steps=4",
    "--sft_batch=4",
    "--rl_steps=6",
    "--prompts_per_step=2",
    "--group_size=3",
    "--eval_size=4",
    "--eval_every=2",
    "--ckpt_every=2",
    "--device=cpu",
    "--lr=1e-2",
]


HANG = 300  # s: a run far past its usual 5-30 s (2 cores shared with the suite) has hung


def torchrun_train(out, kill_at=0, extra=()):
    """One torchrun of train.py (tests/ddp_driver.py). A run still going at HANG fails the
    test with what each worker was doing: the driver dumps its threads' stacks (faulthandler)
    a little before, so a hang at exit is told from a slow machine or a hung launcher."""
    stacks = f"{out}.stacks"
    env = dict(ENV, DDP_DRIVER_STACKS=stacks, DDP_DRIVER_STACKS_AFTER=str(HANG - 30))
    proc = subprocess.Popen(
        TORCHRUN + ["tests/ddp_driver.py", "train", str(kill_at)] + RUN_FLAGS
        + [f"--out_dir={out}"] + list(extra),
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said, err = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        # the workers first (torchrun starts them in sessions of their own), then torchrun
        for pid in descendants(proc.pid) + [proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:  # a worker orphaned before the kill could still hold the pipes
            said, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            said, err = "(its output: a process still held it)", ""
        dumps = "".join(f"\nrank {r}: {open(f'{stacks}.{r}').read()}" for r in (0, 1)
                        if os.path.exists(f"{stacks}.{r}") and os.path.getsize(f"{stacks}.{r}"))
        pytest.fail(f"torchrun ran past {HANG} s; its last output:\n{said[-1500:]}\n"
                    f"its last errors:\n{err[-1500:]}\nthe workers' stacks {HANG - 30} s "
                    f"after each started (none: they had left, or started late):"
                    f"{dumps or ' none'}", pytrace=False)
    return subprocess.CompletedProcess(proc.args, proc.returncode, said, err)


def descendants(pid):
    """The processes below ``pid`` (Linux's /proc), children first."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        try:
            kids = open(f"/proc/{pid}/task/{task}/children").read().split()
        except OSError:
            continue
        for k in map(int, kids):
            out += [k] + descendants(k)
    return out


def logged(out):
    """metrics.jsonl without its wall-clock fields."""
    recs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    return [{k: v for k, v in r.items() if k not in ("seconds", "time", "elapsed")} for r in recs]


def test_torchrun_runs_end_cleanly_and_a_killed_run_resumes_to_the_same_bits(tmp_path):
    """Two uninterrupted 2-process runs, each under a timeout (a hang at exit fails
    here), identical; then a run SIGKILLed in RL step 5 (its last checkpoint is step 4)
    and resumed equals them: metrics and final weights, bit for bit. (The resumed run
    ends cleanly too: three clean exits in all.)"""
    for i in range(2):
        run = torchrun_train(tmp_path / f"full{i}")
        assert run.returncode == 0 and "warm start acc" in run.stdout, run.stderr[-2000:]
        assert logged(tmp_path / f"full{i}") == logged(tmp_path / "full0")
    killed = torchrun_train(tmp_path / "cut", kill_at=5)
    assert killed.returncode != 0
    ck = torch.load(tmp_path / "cut" / "ckpt.pt", weights_only=True)
    assert (ck["resume"]["phase"], ck["resume"]["step"], ck["resume"]["world"]) == ("rl", 4, 2)
    resumed = torchrun_train(tmp_path / "cut", extra=["--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert logged(tmp_path / "cut") == logged(tmp_path / "full0")
    a = torch.load(tmp_path / "cut" / "ckpt.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "full0" / "ckpt.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in b)
    start = torch.load(tmp_path / "full0" / "warm_start.pt", weights_only=True)["model"]
    # RL moved the weights: the check has teeth
    assert any(not torch.equal(start[k], b[k]) for k in b)
