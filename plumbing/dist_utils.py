"""dist_utils.py: what crosses processes under torchrun, and nothing else.

A single process (no torchrun) is world = 1: every function here is then the identity
or a no-op. Under torchrun (train.optimizer_step takes the step itself):

  * the rollouts: every rank samples B / world whole groups, and ``gather_rollouts``
    all-gathers them, so that every rank computes the advantages, the mini-batch cut
    and the step's denominators from the whole batch, as one process would;
  * the cut: rank 0's scheduler cuts the batch and ``on_rank0`` sends it to every rank;
    each mini-batch is then split across ranks (``shard``) and into micro-batches;
  * DFPO's sequence ratios (``all_reduce_rows``): each rank computes its rows', and the
    sum over ranks gives every rank the step's whole vector;
  * the gradients: DDP all-reduces (averages) them in backward;
  * the logged numbers (``step_means``): one small all-reduce per step.
"""

import dataclasses
import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.functional import pad
from torch.nn.parallel import DistributedDataParallel as DDP

import batching
from plumbing.errors import CliError
from toy_tasks import PAD

TIMEOUT = datetime.timedelta(seconds=600)  # a rank that waits longer on a peer fails, not hangs


def env_world():
    """(rank, local_rank, world) the nanoGPT way: torchrun sets RANK, LOCAL_RANK
    and WORLD_SIZE; without them this is one process (0, 0, 1)."""
    if int(os.environ.get("RANK", -1)) == -1:
        return 0, 0, 1
    try:
        return int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        raise CliError("RANK is set but LOCAL_RANK / WORLD_SIZE are missing or not integers; "
                       "start with torchrun") from None


def rank_world():
    """(rank, world) of the running process group, (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_objects(obj):
    """[obj of rank 0, obj of rank 1, ...] on every rank; [obj] without a process group."""
    if rank_world()[1] == 1:
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def check_world(cfg, world):
    """Flags that cannot work with ``world`` processes (one line each)."""
    if world == 1:
        return
    if cfg.prompts_per_step % world:
        raise CliError(f"--prompts_per_step={cfg.prompts_per_step} is not divisible by the "
                       f"{world} processes (each samples whole groups)")
    whole = batching.keeps_groups_whole(cfg.batching)
    smallest = (cfg.prompts_per_step // cfg.minibatches) * cfg.group_size if whole else \
        cfg.prompts_per_step * cfg.group_size // cfg.minibatches
    if smallest < world:
        raise CliError(f"--minibatches={cfg.minibatches} leaves mini-batches of {smallest} "
                       f"rollouts, fewer than the {world} processes")


def resolve_device(name):
    """--device: auto is cuda where there is one, else cpu."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise CliError("--device=cuda but no CUDA device is available")
    return name


def wrap(model, cfg, device, local_rank, world):
    """Join the process group (torchrun), compile if asked, and wrap the model in
    DDP, which all-reduces (averages) the gradients in backward. Returns (the
    model to train, the plain module: sampling, evaluation and checkpoints use it).
    One process: (model, model)."""
    if world > 1:
        backend = setup_device(device, local_rank)
        dist.init_process_group(
            backend, rank=int(os.environ["RANK"]), world_size=world, timeout=TIMEOUT
        )
    if cfg.compile:  # the module itself stays as it is, so checkpoints are unchanged
        model.forward = torch.compile(model.forward, dynamic=True)
    if world == 1:
        return model, model
    return DDP(model, device_ids=[local_rank] if device == "cuda" else None), model


def teardown(clean=True):
    """Leave the process group, if there is one. After a clean run a barrier first
    lets every rank's last collective finish, so none is left in flight; after a
    failure there is no barrier (a peer may be gone) and the group is just destroyed."""
    if dist.is_available() and dist.is_initialized():
        if clean:
            dist.barrier()
        dist.destroy_process_group()


def finish_worker():
    """A torchrun worker that finished leaves at once (os._exit): the interpreter's
    own teardown is where gloo's threads and the GIL can deadlock."""
    if os.environ.get("WORLD_SIZE", "1") != "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def setup_device(device, local_rank):
    """The device and backend of this rank: nccl on CUDA (one GPU per local rank),
    gloo on CPU. ``device`` stays "cuda" (the current device is set)."""
    if device == "cuda":
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", local_rank + 1))
        if local_world > torch.cuda.device_count():
            raise CliError(f"{local_world} processes on this node but {torch.cuda.device_count()} "
                           f"GPUs visible; one GPU per process")
        torch.cuda.set_device(local_rank)
        return "nccl"
    return "gloo"


def all_reduce_sum(x):
    """Sum of a tensor over ranks (in place; identity for one process)."""
    if rank_world()[1] > 1:
        dist.all_reduce(x)
    return x


def gather_rollouts(batch):
    """Every rank's rollouts, concatenated in rank order, on every rank: each list and
    tensor field joined, group ids offset so that groups stay distinct, completions padded
    to the longest one (PAD, mask False, log-prob 0). Identity for one process."""
    rank, world = rank_world()
    if world == 1:
        return batch
    device = batch.tokens.device
    mine = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    parts = [None] * world
    dist.all_gather_object(parts, {k: v.cpu() if torch.is_tensor(v) else v
                                   for k, v in mine.items()})
    T = max(p["tokens"].shape[1] for p in parts)
    offset = 0
    for p in parts:
        p["group"], offset = p["group"] + offset, offset + int(p["group"].max()) + 1

    def joined(k):  # a field neither a list nor a tensor (max_len) is the same on every rank
        if isinstance(mine[k], list):
            return [x for p in parts for x in p[k]]
        if not torch.is_tensor(mine[k]):
            return mine[k]
        xs = [p[k] for p in parts]
        if mine[k].dim() == 2:  # [rows, T]: padded to the longest completion
            xs = [pad(x, (0, T - x.shape[1]), value=PAD if k == "tokens" else 0) for x in xs]
        return torch.cat(xs).to(device)
    return dataclasses.replace(batch, **{k: joined(k) for k in mine})


def broadcast_cut(mbs):
    """Rank 0's mini-batch cut (a list of index tensors) on every rank."""
    rank, world = rank_world()
    if world == 1:
        return mbs
    box = [[mb.cpu() for mb in mbs] if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def shard(mb, rank, world):
    """This rank's contiguous share of a mini-batch's rows (tensor_split sizes)."""
    return torch.tensor_split(mb, world)[rank]


def micro_batches(n, k):
    """Positions 0..n-1 cut into consecutive micro-batches of k (the last may be
    smaller); k = 0 means one micro-batch."""
    k = n if k <= 0 else k
    return [torch.arange(s, min(s + k, n), device="cpu") for s in range(0, n, k)]


def all_reduce_rows(values, rows, n):
    """A [n, ...] tensor holding ``values`` at positions ``rows`` (this rank's
    rows of a mini-batch), summed over ranks: every rank gets the whole one."""
    full = torch.zeros((n,) + tuple(values.shape[1:]), dtype=values.dtype, device=values.device)
    full[rows] = values
    return all_reduce_sum(full)


def share(n):
    """How many of ``n`` rows this process takes (torch.tensor_split sizes)."""
    rank, world = rank_world()
    return len(shard(torch.arange(n, device="cpu"), rank, world))


def token_mean(x, mask):
    """The mean of x over every process's tokens (mask), as this process's share: DDP
    *averages* the processes' gradients, so each share is the sum over its tokens times
    world over the tokens of all, and the average becomes the mean."""
    return (x.sum() / all_reduce_sum(mask.sum())) * rank_world()[1]


def on_rank0(make):
    """``make()`` on rank 0, sent to every rank (the mini-batch cut: all take the same steps)."""
    return broadcast_cut(make() if rank_world()[0] == 0 else None)


def sync_on_last(model, last):
    """DDP all-reduces the gradients in each backward: of a step's parts, let only the last
    one do it (the others accumulate locally). One process: nothing to do."""
    if rank_world()[1] > 1:
        model.require_backward_grad_sync = last


def add_rows(acc, stats, n, device):
    """Add a part's logged numbers to the step's sums, as tensors (read back once per
    step: each read makes a GPU wait): the loss as it is, the rest (row-weighted means)
    times the part's ``n`` rows."""
    for k, v in stats.items():
        v = torch.as_tensor(v, dtype=torch.float64, device=device)
        acc[k] = acc.get(k, 0.0) + (v if k == "loss" else v * n)


def step_means(acc, n, device):
    """A step's logged numbers, summed over processes: the loss is a sum, the rest were
    summed as row-weighted means (divided here by the step's n rows)."""
    keys = sorted(acc)  # the same order on every rank, for one all-reduce
    # on the rollouts' device (NCCL reduces CUDA tensors only); one read for them all
    total = all_reduce_sum(torch.stack([acc[k] for k in keys]).to(device)).tolist()
    return {k: v if k == "loss" else v / n for k, v in zip(keys, total)}
