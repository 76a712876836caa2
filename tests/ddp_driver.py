"""Run under torchrun by tests/test_ddp.py: the data-parallel step on fixed rollouts.

    torchrun --standalone --nproc_per_node=2 tests/ddp_driver.py steps OUT_DIR
    RANK=r WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... python tests/ddp_driver.py fail
    torchrun --standalone --nproc_per_node=2 tests/ddp_driver.py train K TRAIN_FLAGS...

``steps``, in one process group (started once, to keep the tests short):
train.main as ``torchrun train.py`` runs it (OUT_DIR/cli); train.main with
the rollouts replaced by each rank's share of ``fixed_batch`` (the same on
every step) and SGD for AdamW (OUT_DIR); then for every objective x clip x
micro-batch size one rl_update of a float64 model wrapped in DDP on
``fixed_batch``, whose parameters rank 0 saves to OUT_DIR/params.pt. ``fail``:
rank 1 dies after the process group is up; rank 0 must not wait for it for ever.
``train``: train.py's command line with a reward for even-length completions (so
groups are mixed and RL moves the weights); each rank SIGKILLs itself in its K-th
rollout (K = 0: never).
The single-process references are computed by test_ddp.py with the same
functions.
"""

import dataclasses
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(1)

import loss  # noqa: E402
import toy_tasks  # noqa: E402
import train  # noqa: E402
from plumbing.config import Config  # noqa: E402
from model import GPT, GPTConfig, completion_logprobs  # noqa: E402
from sampler import Rollouts  # noqa: E402
from lab import objectives
from lab.hooks import LabHooks  # noqa: E402

B, G = 4, 4  # groups, rollouts per group


def tiny_model(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    m = GPT(
        GPTConfig(
            vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=1, n_head=2, n_embd=32
        )
    )
    return m.to(dtype)


def fixed_batch(dtype=torch.float64, seed=0):
    """B groups x G rollouts of one add task: every group's rollouts share their
    first token, lengths 1..6, mixed rewards; the recorded log-probs are the
    current policy's plus noise, so the step is off-policy and clips bind."""
    g = torch.Generator().manual_seed(seed)
    task = toy_tasks.make_task("add", 2)
    prompts = [
        toy_tasks.encode(task.prompt((10 + 7 * b, 3 + 11 * b))) for b in range(B) for _ in range(G)
    ]
    N, Tm = B * G, 6
    lens = torch.randint(1, Tm + 1, (N,), generator=g)
    mask = torch.arange(Tm)[None] < lens[:, None]
    tokens = torch.randint(0, 10, (N, Tm), generator=g)
    tokens[:, 0] = tokens[::G, 0].repeat_interleave(G)   # a token the whole group shares
    tokens[torch.arange(N), lens - 1] = toy_tasks.EOS
    tokens = tokens.masked_fill(~mask, toy_tasks.PAD)
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 1])
    with torch.no_grad():
        logp = completion_logprobs(tiny_model(dtype), prompts, tokens, mask, toy_tasks.PAD)
    old = (logp - (torch.rand(N, Tm, generator=g, dtype=dtype) - 0.5) * 0.6) * mask
    return Rollouts(prompts=prompts, tokens=tokens, mask=mask, old_logprobs=old,
                    rewards=rewards, group=torch.arange(B).repeat_interleave(G), max_len=Tm)


def step_config(objective, clip, micro_batch, **kw):
    """Two mini-batches of 8 (the second one off-policy too), tight clips."""
    kw = dict(dict(minibatches=2, batching="shuffle", clip_low=0.1, clip_high=0.15, lr=0.1,
                   grad_clip=1e6), **kw)
    return Config(loss=objective, clip=clip, micro_batch=micro_batch, **kw)


def one_update(model, batch, cfg):
    """rl_update with plain SGD (lr * grad: a scale error would show, unlike
    Adam's first step) and the scheduler seeded as in train.py."""
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    train.rl_update(model, opt, batch, cfg, torch.Generator().manual_seed(0), LabHooks(cfg))


INVARIANT = [name for name, obj in objectives.OBJECTIVES.items() if not obj.split_dependent]
CASES = [(objective, clip, k) for objective in INVARIANT for clip in loss.CLIPS for k in (0, 3)]


def share(batch, rank, world):
    """Rank ``rank``'s whole groups of a batch, group ids from 0 (as sample gives)."""
    n = len(batch.rewards) // world
    out = batch.rows(range(rank * n, (rank + 1) * n))
    out.group = out.group - out.group.min()
    return out


def fixed_rollouts(batch):
    """A stand-in for train.rollouts: this rank's share of ``batch``, every step."""
    def rollouts(model, task, draw, cfg, gen, device, n_prompts=None, decoder=None):
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        return dataclasses.replace(share(batch, rank, world), max_len=None)
    return rollouts


CLI_FLAGS = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=2", "--sft_batch=8",
             "--rl_steps=3", "--prompts_per_step=4", "--group_size=4", "--eval_size=8",
             "--eval_every=5", "--device=cpu", "--minibatches=2", "--micro_batch=3"]
MAIN_FLAGS = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=0", "--rl_steps=2",
              f"--prompts_per_step={B}", f"--group_size={G}", "--eval_size=4", "--eval_every=1",
              "--device=cpu", "--minibatches=2", "--micro_batch=3", "--loss=dapo", "--lr=0.1",
              "--grad_clip=1e6", "--motion_every=1"]


if __name__ == "__main__":
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from plumbing import dist_utils
    from plumbing.config import parse_args
    mode, rank = sys.argv[1], int(os.environ["RANK"])
    # train.py with a reward that mixes groups; SIGKILL itself in RL step k (0: never)
    if mode == "train":
        import faulthandler
        import signal
        if os.environ.get("DDP_DRIVER_STACKS"):  # a run that hangs shows where (test_ddp.py)
            faulthandler.dump_traceback_later(
                float(os.environ["DDP_DRIVER_STACKS_AFTER"]),
                file=open(f"{os.environ['DDP_DRIVER_STACKS']}.{rank}", "w"))
        make, kill_at, calls = toy_tasks.make_task, int(sys.argv[2]), [0]
        toy_tasks.make_task = lambda *a, **k: dataclasses.replace(
            make(*a, **k), reward=lambda p, t: float(len(t) % 2 == 0)
        )
        real_rollouts = train.rollouts

        def counting(*a, **k):
            calls[0] += 1
            # rank 0 kills itself: it has written the last checkpoint before its step k (a
            # rank 1 that raced ahead could kill the job while rank 0 still writes it)
            if calls[0] == kill_at and rank == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_rollouts(*a, **k)
        train.rollouts = counting
        train.cli(sys.argv[3:])
        sys.stdout.flush()
        os._exit(0)
    if mode == "fail":
        dist.init_process_group("gloo", timeout=dist_utils.TIMEOUT)
        if rank == 1:
            raise SystemExit(3)
        dist.all_reduce(torch.ones(1))  # the peer is gone: this must end, not hang
        sys.exit(0)
    # one process group for three things: train.main keeps the one it starts
    init, destroy = dist.init_process_group, dist.destroy_process_group
    dist.init_process_group = lambda *a, **kw: None if dist.is_initialized() else init(*a, **kw)
    dist.destroy_process_group = lambda: None
    # 1. a few RL steps of train.py as it is (its own sampling, SFT first)
    train.main(parse_args(CLI_FLAGS + [f"--out_dir={os.path.join(sys.argv[2], 'cli')}"]))
    # 2. train.main on fixed rollouts, with SGD
    rollouts, train.rollouts = train.rollouts, fixed_rollouts(fixed_batch(torch.float32))
    adamw, torch.optim.AdamW = torch.optim.AdamW, lambda params, lr, **kw: torch.optim.SGD(
        params, lr=lr
    )
    train.main(parse_args(MAIN_FLAGS + [f"--out_dir={sys.argv[2]}"]))
    torch.optim.AdamW, train.rollouts = adamw, rollouts
    # 3. every case's step
    batch, out = fixed_batch(), {}
    for objective, clip, k in CASES:
        model = tiny_model()
        one_update(DDP(model), batch, step_config(objective, clip, k))
        out[(objective, clip, k)] = [p.detach().clone() for p in model.parameters()]
    if rank == 0:
        torch.save(out, os.path.join(sys.argv[2], "params.pt"))
    destroy()
    # leave at once, as train.py's workers do (dist_utils.finish_worker): the interpreter's
    # own teardown is where gloo's threads can abort the process (SIGABRT, now and then)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
