"""bench.py: how fast the sampler, the update phase and one RL step run here.

* ``matmul_peak``: GFLOP/s of a square ``torch.mm`` (2048 x 2048), this
  machine's reference peak for the MFU below.
* ``sampler``: tokens/s of ``sampler.sample`` with the KV cache, with full
  recompute (``use_cache=False``) and with the fixed-shape decoder (``fast_decode.decoder``, a
  CUDA graph on a GPU), same model, prompts and seed, and their ratios. 128 rollouts
  (16 add prompts x 8) of exactly 32 new tokens: the EOS
  logit is pinned to -1e4 (``no_eos``), so no row stops early and N * T token
  slots are generated on both paths.
* ``update``: one ``train.rl_update`` (forward + backward of the GRPO loss,
  grad clip, AdamW step) on those rollouts: tokens/s over the prompt +
  completion positions, GFLOP/s by nanoGPT's ``6 N + 12 n_layer n_embd T``
  FLOPs per token (N: parameters less the position embedding), and
  ``mfu`` = achieved / matmul_peak.
* ``rl_step``: one step of train.py's RL loop (add task, 16 prompts x 8)
  split into sample / reward / forward+backward / optimizer, in seconds and
  as shares of the step.
* ``ddp`` (``--ddp``; on by default without ``--quick``): one RL step of
  train.py (sample + reward + all-gather + rl_update) on the same total batch
  (16 prompts x 8) in 1 process and in 2 torchrun processes (gloo on CPU,
  nccl on CUDA), each process sampling half the prompts; ``speedup`` =
  1-process / 2-process time. ``comm_share``: the time of the step's
  collectives measured one by one (the all-gather of the rollouts, and one
  all-reduce of a gradient-sized buffer per optimizer step, as DDP does it)
  over the 2-process step time. The all-gather also waits for the slower
  rank's sampling, and DDP overlaps its all-reduce with backward, so this is
  an upper bound on what communication adds. Two processes on
  a machine with few cores share them: read ``others_busy``. On CUDA it needs
  two GPUs (train.py runs one process per GPU): with one, the line says skipped.
* ``hf_generate``: the KV sampler against Hugging Face transformers'
  ``generate`` (``GPT2LMHeadModel``, the same sizes, random weights, KV cache
  on, temperature-1 sampling, the same 16 prompts x 8 completions x 32 new
  tokens with no early stop), timed interleaved in one process;
  ``speedup`` = HF seconds / ours. ``matmul_floor_s`` times our sampler's
  linear layers alone (the same shapes: the prompt once per group, then
  32 - 1 decode steps of 128 rows): no fp32 sampler that does this arithmetic
  can be faster, so ``hf_over_floor`` = HF seconds / floor is the largest
  speedup over ``generate`` any such sampler could reach; ``ours_over_floor``
  is our time over it. ``attention_s`` times our sampler's decode attention
  alone (one query per row over the keys cached so far, the same shapes and
  kernel): ``floor_and_attention_over_floor`` is the least ``ours_over_floor``
  a sampler with a per-row KV cache can reach. Skipped with a note
  when transformers is not installed (it is not a dependency:
  ``pip install transformers``).
* ``syncs``: host reads (``.item()`` and its kin, ``nonzero`` and boolean indexing,
  copies to the CPU), each a wait of the host for a GPU, per SFT step and in one RL step
  with the lab's instruments on and off, counted at the dispatcher (lab/syncs.py: an
  upper bound, the same on any device); on CUDA also the waits the driver reports.
* ``ledger``: the cancellation ledger's bookkeeping at a real model's size, 512 completions
  of 2,048 tokens (groups of 8, each sharing a 32-token template, then random tokens of a
  50k vocabulary, lengths 1,024-2,048): ``sets_s`` for ``residuals.history_token_sets``
  (target ``target_s``, 0.5 s on the CPU), ``ledger_s`` for one ``ledger.ledger_sums``.
* ``motion``: the motion ledger's cost. The demo (``python train.py``; with --quick a shorter
  run) twice in one process, with the motion ledger as the demo runs it (``--motion_every``'s
  default) and off (``--motion_every=0``), the same seed, interleaved (up to 3 times each):
  the medians ``on_s``, ``off_s`` and ``share`` = (on - off) / off, against its target
  ``target_share`` 0.2.
* ``memory``: peak memory (CPU: ru_maxrss; CUDA: max_memory_allocated);
  every line carries the peak so far.

Each time is the median over repeats after one warm-up run (CUDA timings
synchronize). Models: the default 4 layers x 128 (4 heads) and 6 x 256
(8 heads), block_size 64. As in train.py (--bf16=auto), CUDA runs autocast
to bf16 and the peak is then a bf16 mm; CPU runs are fp32. ``--quick`` takes
a tiny model, small batches and one repeat: it checks that every line comes
out and asserts no speed. Every line is one JSON object (stdout, and
``--out=FILE``) with the device, threads, torch version and ``others_busy``,
the share of all cores that *other* processes used during the measurement
(/proc/stat): above ~0.05 the numbers are disturbed.

Usage: python -m lab.bench [--quick] [--ddp] [--device=cpu|cuda|auto] [--out=FILE]
"""

import contextlib
import dataclasses
import io
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch

from plumbing import dist_utils
import loss
import toy_tasks
import train
from plumbing.config import Config, check_out_dir, parse_args
from plumbing import checkpoint, errors, fast_decode
from plumbing.errors import CliError
from model import GPT, GPTConfig, completion_logprobs
from sampler import sample
from toy_tasks import EOS, PAD
from lab import estimators, ledger, objectives, residuals, syncs
from lab.hooks import LabHooks

FULL = {"sizes": [(4, 128, 4), (6, 256, 8)], "prompts": 16, "group": 8, "new_tokens": 32,
        "mm": 2048, "repeats": 5, "recompute_repeats": 3, "sync_flags": [],
        "ledger": (512, 2048), "motion_flags": []}
QUICK = {"sizes": [(2, 32, 2)], "prompts": 4, "group": 4, "new_tokens": 8,
         "mm": 256, "repeats": 1, "recompute_repeats": 1,
         "sync_flags": ["--n_layer=1", "--n_head=2", "--n_embd=32", "--prompts_per_step=4",
                        "--group_size=4", "--eval_size=8"], "ledger": (32, 64),
         "motion_flags": ["--n_layer=1", "--n_head=2", "--n_embd=32", "--prompts_per_step=4",
                          "--group_size=4", "--eval_size=8", "--sft_steps=20", "--rl_steps=8",
                          "--eval_every=8"]}


def timed(fn, device):
    """(seconds, result) of one call."""
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t, out


def median_time(fn, repeats, device):
    """Median seconds over ``repeats`` calls after one warm-up call."""
    fn()
    return statistics.median(timed(fn, device)[0] for _ in range(repeats))


def cpu_sample():
    """(CPU s used by all processes, CPU s elapsed, CPU s used by this one and the
    children it waited for, e.g. bench_ddp's torchrun), or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    r, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        (sum(v) - v[3] - v[4]) / hz,
        sum(v) / hz,
        r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime,
    )


WINDOW = [cpu_sample()]


def others_busy():
    """Share of all cores that other processes used since the last line."""
    a, b = WINDOW[0], cpu_sample()
    WINDOW[0] = b
    if a is None or b is None or b[1] <= a[1]:
        return None
    return max(0.0, (b[0] - a[0]) - (b[2] - a[2])) / (b[1] - a[1])


def emit(rec, device, out):
    mem = (torch.cuda.max_memory_allocated() / 2 ** 20 if device == "cuda"
           else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # KiB on Linux
    rec.update(device=device, threads=torch.get_num_threads(), torch=torch.__version__,
               others_busy=others_busy(), peak_mem_mb=mem)
    line = json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in rec.items()})
    print(line, flush=True)
    if out:
        out.write(line + "\n")


def make_model(n_layer, n_embd, n_head, device, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT,
                         n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=64)).to(device)


@torch.no_grad()
def no_eos(model):
    """Pin the EOS logit to -1e4: channel 0 of the final LayerNorm outputs a
    constant 1, which only the EOS row of the output matrix reads."""
    model.ln_f.weight[0], model.ln_f.bias[0] = 0.0, 1.0
    model.lm_head.weight[:, 0] = 0.0
    model.lm_head.weight[EOS] = 0.0
    model.lm_head.weight[EOS, 0] = -1e4
    return model


def matmul_peak(P, device):
    """In the dtype the update runs in: fp32, or bf16 where train.amp autocasts."""
    n, bf16 = P["mm"], device == "cuda" and Config().bf16 == "auto"
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16 if bf16 else None)
            for _ in range(2))
    s = median_time(lambda: torch.mm(a, b), max(P["repeats"], 10), device)
    return {"name": "matmul_peak", "n": n, "dtype": str(a.dtype)[6:], "seconds": s,
            "gflops": 2 * n ** 3 / s / 1e9}


def bench_sampler(model, P, device):
    task, rng = toy_tasks.make_task("add", 2), random.Random(0)
    prompts = [toy_tasks.encode(task.prompt(task.sample(rng))) for _ in range(P["prompts"])]
    G, T, N = P["group"], P["new_tokens"], P["prompts"] * P["group"]

    def run(use_cache, static=False):
        gen = torch.Generator(device=device).manual_seed(0)
        with train.amp(Config(), device):  # as train.rollouts samples
            return sample(model, prompts, G, T, 1.0, generator=gen, use_cache=use_cache,
                          decoder=fast_decode.decoder if static else None)
    kv = median_time(lambda: run(True), P["repeats"], device)
    full = median_time(lambda: run(False), P["recompute_repeats"], device)
    # the fixed-shape decoder (a CUDA graph on a GPU, train.py's --static_decode)
    static = median_time(lambda: run(True, True), P["repeats"], device)
    a, b, c = run(True), run(False), run(True, True)
    assert a.tokens.shape == (N, T) and bool(a.mask.all()), "a row stopped early"
    return {"name": "sampler", "rollouts": N, "new_tokens": T, "kv_s": kv, "full_s": full,
            "static_s": static, "kv_tok_s": N * T / kv, "full_tok_s": N * T / full,
            "kv_speedup": full / kv, "static_speedup": full / static,
            "same_tokens": bool(torch.equal(a.tokens, b.tokens)),
            "static_same_tokens": bool(torch.equal(c.tokens, b.tokens))}, a


def bench_hf(model, P, device, size):
    """Our KV sampler against transformers' generate, interleaved, same prompts and shapes.

    Long because: both samplers are set up and timed side by side in one function, so that the
    comparison is visibly like for like."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return {
            "name": "hf_generate",
            "skipped": "transformers is not installed (pip install transformers)",
        }
    n_layer, n_embd, n_head = size
    torch.manual_seed(0)
    hf = (
        GPT2LMHeadModel(
            GPT2Config(
                vocab_size=toy_tasks.VOCAB_SIZE,
                n_positions=64,
                n_embd=n_embd,
                n_layer=n_layer,
                n_head=n_head,
                activation_function="gelu",
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                bos_token_id=None,
                eos_token_id=None,
            )
        )
        .to(device)
        .eval()
    )
    task, rng = toy_tasks.make_task("add", 2), random.Random(0)
    prompts = [toy_tasks.encode(task.prompt(task.sample(rng))) for _ in range(P["prompts"])]
    ids = torch.tensor(prompts, device=device)  # 2-digit add: every prompt has the same length
    G, T = P["group"], P["new_tokens"]

    def ours():
        return sample(
            model, prompts, G, T, 1.0, generator=torch.Generator(device=device).manual_seed(0)
        )

    @torch.no_grad()
    def theirs():
        return hf.generate(
            ids,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=T,
            min_new_tokens=T,
            num_return_sequences=G,
            use_cache=True,
            pad_token_id=PAD,
            eos_token_id=None,
        )
    lin = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    xp = [torch.randn(len(prompts) * ids.shape[1], m.in_features, device=device) for m in lin]
    xd = [torch.randn(len(prompts) * G, m.in_features, device=device) for m in lin]

    @torch.no_grad()
    # our sampler's matmuls alone: the prompt once per group, T - 1 decode steps of B x G rows
    def floor():
        for m, x in zip(lin, xp):
            torch.nn.functional.linear(x, m.weight, m.bias)
        for _ in range(T - 1):
            for m, x in zip(lin, xd):
                torch.nn.functional.linear(x, m.weight, m.bias)

    cfg = model.cfg
    Lp, N, H = ids.shape[1], len(prompts) * G, cfg.n_head
    kv = [torch.randn(2, N, H, Lp + T, cfg.n_embd // H, device=device) for _ in range(cfg.n_layer)]
    q = torch.randn(N, H, 1, cfg.n_embd // H, device=device)
    keys_ok = torch.ones(N, 1, 1, Lp + T, dtype=torch.bool, device=device)

    @torch.no_grad()
    # our sampler's attention alone: each decode step, each layer, one query per row over the
    # keys cached so far (the same shapes and the same fused kernel)
    def attention():
        for t in range(T - 1):
            for k, v in kv:
                torch.nn.functional.scaled_dot_product_attention(
                    q, k[:, :, :Lp + t + 1], v[:, :, :Lp + t + 1],
                    attn_mask=keys_ok[..., :Lp + t + 1])

    ours(), theirs(), floor(), attention()  # warm-up
    a, b, c, d = [], [], [], []
    for _ in range(P["repeats"]):  # interleaved: all four see the same machine state
        a.append(timed(ours, device)[0])
        b.append(timed(theirs, device)[0])
        c.append(timed(floor, device)[0])
        d.append(timed(attention, device)[0])
    out = theirs()
    assert out.shape == (P["prompts"] * G, ids.shape[1] + T), "generate stopped early"
    ka, kb, kc, kd = (statistics.median(x) for x in (a, b, c, d))
    return {
        "name": "hf_generate",
        "ours_s": ka,
        "hf_s": kb,
        "speedup": kb / ka,
        "matmul_floor_s": kc,
        "ours_over_floor": ka / kc,
        "floor_share_of_ours": kc / ka,
        "hf_over_floor": kb / kc,
        "attention_s": kd,
        "floor_and_attention_over_floor": (kc + kd) / kc,
        "rollouts": P["prompts"] * G,
        "new_tokens": T,
    }


def bench_update(model, batch, P, peak, device):
    N, T = batch.tokens.shape[0], len(batch.prompts[0]) + batch.tokens.shape[1] - 1
    # a sampled batch as a rollout batch: its log-probs become the old ones, rewards alternate
    batch = dataclasses.replace(batch, rewards=(torch.arange(N, device=device) % 2).float(),
                                max_len=batch.tokens.shape[1])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.99), weight_decay=0.0)
    gen = torch.Generator(device=device).manual_seed(0)
    model.train()
    cfg = Config(batching="full")
    hooks = LabHooks(cfg)
    s = median_time(lambda: train.rl_update(model, opt, batch, cfg, gen, hooks), P["repeats"],
                    device)
    c = model.cfg
    flops = 6 * (model.num_params() - model.wpe.weight.numel()) + 12 * c.n_layer * c.n_embd * T
    gflops = flops * N * T / s / 1e9  # N * T positions: the last token predicts nothing
    return {"name": "update", "sequences": N, "seq_len": T, "seconds": s, "tok_s": N * T / s,
            "gflops": gflops, "peak_gflops": peak, "mfu": gflops / peak}


def rl_step(model, opt, task, draw, cfg, gen, device):
    """train.py's RL step with timers: sample, reward, forward+backward, optimizer."""
    t = {}
    model.train()
    problems = [draw() for _ in range(cfg.prompts_per_step)]
    prompts = [toy_tasks.encode(task.prompt(p)) for p in problems]
    with train.amp(cfg, device):
        t["sample"], out = timed(lambda: sample(model, prompts, cfg.group_size,
                                                task.max_new_tokens, cfg.temperature,
                                                cfg.top_k, generator=gen), device)

    def reward():
        texts = [toy_tasks.decode(x) for x in out.tokens.tolist()]
        return torch.tensor([task.reward(problems[i // cfg.group_size], x)
                             for i, x in enumerate(texts)], device=device)
    t["reward"], rewards = timed(reward, device)
    mask, group = out.mask, out.group

    def fwd_bwd():
        adv = estimators.advantages(rewards, group, objectives.own_estimator(cfg.loss))
        with train.amp(cfg, device):
            logp = completion_logprobs(model, out.prompts, out.tokens, mask, PAD,
                                       cfg.temperature)
        counts = loss.step_counts(mask, adv, max_len=task.max_new_tokens)
        value, _ = objectives.policy_loss(
            objectives.LossBatch(logp, out.old_logprobs, mask, adv, group, counts=counts),
            objectives.LossSettings(cfg.loss, cfg.clip, cfg.clip_low, cfg.clip_high),
        )
        residuals.first_token_residual(residuals.coefficients(value, logp), group)
        opt.zero_grad(set_to_none=True)
        value.backward()
    t["fwd_bwd"], _ = timed(fwd_bwd, device)

    def step():
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
    t["optimizer"], _ = timed(step, device)
    return t


def bench_rl_step(model, P, device):
    cfg = Config(prompts_per_step=P["prompts"], group_size=P["group"])
    task = toy_tasks.make_task(cfg.task, cfg.digits)
    draw = toy_tasks.train_sampler(task, [], 0)
    gen = torch.Generator(device=device).manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    runs = [rl_step(model, opt, task, draw, cfg, gen, device) for _ in range(P["repeats"] + 1)]
    rec = {"name": "rl_step", "rollouts": cfg.prompts_per_step * cfg.group_size,
           "max_new_tokens": task.max_new_tokens}
    rec.update({k + "_s": statistics.median(r[k] for r in runs[1:]) for k in runs[0]})
    rec["total_s"] = sum(rec[k + "_s"] for k in runs[0])
    rec.update({k + "_share": rec[k + "_s"] / rec["total_s"] for k in runs[0]})
    return rec


def ddp_step(model, raw, opt, task, draw, cfg, gen, device):
    """train.py's RL step on this rank's share of the prompts: (seconds, seconds
    in the all-gather of the rollouts)."""
    t = time.perf_counter()
    model.train()
    batch = train.rollouts(
        raw, task, draw, cfg, gen, device, cfg.prompts_per_step // dist_utils.rank_world()[1]
    )
    batch.max_len = task.max_new_tokens
    gather_s, batch = timed(lambda: dist_utils.gather_rollouts(batch), device)
    train.rl_update(model, opt, batch, cfg, gen, LabHooks(cfg))
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t, gather_s


def ddp_steps(P, device, size):
    """Median step time (and, with a process group, its collectives) of P["repeats"] steps."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank, world = dist_utils.rank_world()
    cfg = Config(prompts_per_step=P["prompts"], group_size=P["group"], device=device)
    task = toy_tasks.make_task(cfg.task, cfg.digits)
    draw = toy_tasks.train_sampler(task, [], rank)
    gen = torch.Generator(device=device).manual_seed(rank)
    raw = make_model(*size, device)
    model = raw if world == 1 else DDP(raw, device_ids=[torch.cuda.current_device()]
                                       if device == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    runs = [
        ddp_step(model, raw, opt, task, draw, cfg, gen, device) for _ in range(P["repeats"] + 1)
    ][1:]
    rec = {"step_s": statistics.median(r[0] for r in runs)}
    if world > 1:
        flat = torch.zeros(raw.num_params(), device=device)
        reduce_s = median_time(lambda: dist.all_reduce(flat), P["repeats"], device)
        comm = statistics.median(r[1] for r in runs) + cfg.minibatches * cfg.epochs * reduce_s
        rec.update(gather_s=statistics.median(r[1] for r in runs), grad_allreduce_s=reduce_s,
                   comm_s=comm, comm_share=comm / rec["step_s"])
    return rec


def ddp_worker(P, device, size):
    """Run under torchrun by bench_ddp: rank 0 prints one JSON line."""
    import torch.distributed as dist
    rank, local_rank, world = dist_utils.env_world()
    backend = dist_utils.setup_device(device, local_rank)
    dist.init_process_group(backend, timeout=dist_utils.TIMEOUT)
    rec = ddp_steps(P, device, size)
    if rank == 0:
        print(json.dumps(rec), flush=True)
    dist_utils.teardown(clean=True)  # a barrier, then leave the group: no collective left in flight


def bench_ddp(P, device, size, quick):
    one = ddp_steps(P, device, size)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "lab.bench",
        "--ddp_worker",
        f"--device={device}",
    ] + (["--quick"] if quick else [])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=root,
                         env=dict(os.environ, OMP_NUM_THREADS=str(torch.get_num_threads())))
    if run.returncode:
        sys.exit(f"error: the 2-process run failed:\n{run.stderr[-2000:]}")
    two = json.loads(run.stdout.strip().splitlines()[-1])
    return {"name": "ddp", "rollouts": P["prompts"] * P["group"], "processes": 2,
            "one_process_step_s": one["step_s"], "two_process_step_s": two["step_s"],
            "speedup": one["step_s"] / two["step_s"], "gather_s": two["gather_s"],
            "grad_allreduce_s": two["grad_allreduce_s"], "comm_share": two["comm_share"],
            "threads_per_process": torch.get_num_threads()}


def count_run(flags, device="cpu"):
    """Host reads of a short train.py run on ``device``: per SFT step (all of SFT over its
    steps, logged lines included) and in RL step 2 (no evaluation in it), with the lab's
    instruments on and off. On CUDA also the waits the driver reports
    (torch.cuda.set_sync_debug_mode), the count that matters there."""
    out, real_sft, real_rl = {}, train.sft, train.rl_step

    def counted(fn, key, when=lambda run: True):
        def wrapper(run, *a):
            if not when(run):
                return fn(run, *a)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if device == "cuda":
                    torch.cuda.set_sync_debug_mode(1)
                try:
                    with syncs.SyncCounter() as c:
                        result = fn(run, *a)
                finally:
                    if device == "cuda":
                        torch.cuda.set_sync_debug_mode(0)
            out[key] = {"reads": c.total, "by_kind": dict(c.by_kind),
                        "driver_waits": sum("synchroniz" in str(w.message) for w in caught)
                        if device == "cuda" else None}
            return result
        return wrapper

    try:
        for instruments in (True, False):
            tag = "on" if instruments else "off"
            train.sft = counted(real_sft, "sft")
            train.rl_step = counted(real_rl, f"rl_step_instruments_{tag}",
                                    lambda run: run.state.step == 2)
            with tempfile.TemporaryDirectory() as d:
                cfg = parse_args(flags + [f"--out_dir={d}/run", f"--device={device}",
                                          "--rl_steps=3", "--eval_every=3",
                                          f"--instruments={str(instruments).lower()}"])
                train.main(cfg)
    finally:
        train.sft, train.rl_step = real_sft, real_rl
    out["sft"]["steps"] = cfg.sft_steps
    return out


def bench_ledger(P):
    """The ledger's bookkeeping on N completions x T tokens (the docstring's ``ledger``), on
    the CPU, where it runs."""
    n, T = P["ledger"]
    g = torch.Generator().manual_seed(0)
    group = torch.arange(n) // 8
    tokens = torch.randint(0, 50000, (n, T), generator=g)
    tokens[:, :min(32, T)] = tokens[group * 8, :min(32, T)]  # the group's shared template
    lens = torch.randint(T // 2, T + 1, (n,), generator=g)
    mask = torch.arange(T)[None, :] < lens[:, None]
    adv, coef = torch.randn(n, generator=g), torch.randn(n, T, generator=g) * mask
    sets_s = median_time(lambda: residuals.history_token_sets(tokens, mask, group),
                         P["repeats"], "cpu")
    step = [(torch.arange(n), coef, coef)]
    ledger_s = median_time(lambda: ledger.ledger_sums(step, adv, tokens, mask, group),
                           P["repeats"], "cpu")
    return {"name": "ledger", "completions": n, "tokens": T, "sets_s": sets_s,
            "ledger_s": ledger_s, "target_s": 0.5}


def bench_motion(P, device):
    """The demo with the motion ledger on and off, side by side (the docstring's ``motion``):
    the two interleaved, P["repeats"] times (at most 3: a demo is a minute), medians."""
    secs = {Config.motion_every: [], 0: []}
    for on in [Config.motion_every, 0] * min(P["repeats"], 3):
        quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
        with tempfile.TemporaryDirectory() as tmp, quiet[0], quiet[1]:
            flags = P["motion_flags"] + [f"--motion_every={on}", f"--device={device}",
                                         f"--out_dir={os.path.join(tmp, 'run')}"]
            t = time.perf_counter()
            train.main(parse_args(flags, Config))
            secs[on].append(time.perf_counter() - t)
    on, off = statistics.median(secs[Config.motion_every]), statistics.median(secs[0])
    return {"name": "motion", "flags": " ".join(P["motion_flags"]) or "the demo's",
            "every": Config.motion_every, "on_s": on, "off_s": off,
            "share": (on - off) / off, "target_share": 0.2}


def bench_syncs(P, device):
    """Host reads (each a GPU wait) per SFT step and per RL step (lab/syncs.py), with the
    instruments on and off, on the demo's task and model."""
    with contextlib.redirect_stdout(io.StringIO()):  # the runs' own printed lines
        counts = count_run(["--sft_steps=40", "--ckpt_every=40"] + P["sync_flags"], device)
    sft = counts.pop("sft")
    rec = {"name": "syncs", "sft_reads_per_step": sft["reads"] / sft["steps"],
           "sft_steps": sft["steps"]}
    for key, c in counts.items():
        rec[f"{key}_reads"] = c["reads"]
        if c["driver_waits"] is not None:
            rec[f"{key}_driver_waits"] = c["driver_waits"]
    return rec


def parse(argv):
    """--quick, --ddp, --device, --out: checked before any measurement (CliError, one line)."""
    opts = {"quick": False, "device": "auto", "out": "", "ddp": None, "ddp_worker": False}
    usage = "usage: python -m lab.bench [--quick] [--ddp] [--device=cpu|cuda|auto] [--out=FILE]"
    given = set()
    for a in argv:
        if a in ("-h", "--help"):
            print(
                __doc__.strip().splitlines()[0] + "\n\n" + usage + "\n\n"
                "  --quick         a tiny model, small batches, one repeat: every line, no speed "
                "claim\n"
                "  --ddp           also time 1 against 2 torchrun processes (default: on without "
                "--quick)\n"
                "  --device=auto   cpu | cuda | auto\n"
                "  --out=FILE      also write the JSON lines to FILE (default: none)"
            )
            sys.exit(0)
        key, eq, val = a[2:].partition("=")
        if not a.startswith("--") or key not in opts:
            raise CliError(f"unknown argument {a!r}; {usage}")
        if key in given:  # else the last one would win without a word
            raise CliError(f"--{key} is given twice; give it once")
        given.add(key)
        if key in ("quick", "ddp", "ddp_worker"):
            if val.lower() not in (("true", "1", "yes", "false", "0", "no") if eq else ("",)):
                raise CliError(f"--{key} takes true or false, got {val!r}")
            opts[key] = val.lower() in ("", "true", "1", "yes")
        elif not eq:
            raise CliError(f"--{key} needs a value: --{key}=VALUE; {usage}")
        else:
            opts[key] = val
    if opts["device"] not in ("auto", "cpu", "cuda"):
        raise CliError(f"unknown device {opts['device']!r}; choose cpu, cuda or auto")
    opts["device"] = dist_utils.resolve_device(opts["device"])
    one_gpu = opts["device"] == "cuda" and torch.cuda.device_count() < 2
    if opts["ddp"] and one_gpu:  # train.py runs one process per GPU (dist_utils.check_world)
        raise CliError("--ddp on cuda needs 2 GPUs (one per process); this machine has "
                       f"{torch.cuda.device_count()}")
    if "out" in given and not opts["out"]:  # else the lines would go nowhere without a word
        raise CliError("--out is empty; give a file name, or leave --out out")
    if opts["out"]:
        check_out_kept(opts["out"])
        if os.path.isdir(opts["out"]):
            raise CliError(f"--out={opts['out']} is a folder; give a file name")
        if os.path.exists(opts["out"]) and not os.path.isfile(opts["out"]):
            raise CliError(f"--out={opts['out']} is not a regular file")
        check_out_dir(os.path.dirname(opts["out"]) or ".", "--out")
        if not os.path.isdir(os.path.dirname(opts["out"]) or "."):
            raise CliError(f"--out={opts['out']}: its folder does not exist")
    return opts


def check_out_kept(out):
    """--out replaces an earlier --out of the bench, never a file someone keeps: not one in
    the committed results/, not a file of another kind (its first line is not a JSON
    object). Real paths are compared: a link, or a chain of them, into results/ is in it."""
    real = os.path.realpath(out)
    results = os.path.realpath(os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "results"))
    if real == results or real.startswith(results + os.sep):
        raise CliError(f"--out={out} lies in results/, whose files are committed; name a file "
                       f"outside it")
    if os.path.isfile(real) and os.path.getsize(real):
        with open(real, "rb") as f:
            first = f.readline(1 << 16).strip()
        if not (first.startswith(b"{") and first.endswith(b"}")):
            raise CliError(f"--out={out} holds something else than the bench's lines; "
                           f"name a new file (the bench replaces only its own)")


def main(argv):
    opts = parse(argv)
    P, device = (QUICK if opts["quick"] else FULL), opts["device"]
    if opts["ddp_worker"]:
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise CliError(
                "--ddp_worker is internal: bench.py starts it under torchrun; "
                "run python -m lab.bench "
                "--ddp"
            )
        return ddp_worker(P, device, P["sizes"][0])
    # the lines are kept in memory and written at the end, atomically: a run that stops
    # (Ctrl-C, a full disk) leaves an earlier --out whole
    out = io.StringIO() if opts["out"] else None
    peak = matmul_peak(P, device)
    emit(peak, device, out)
    for n_layer, n_embd, n_head in P["sizes"]:
        size = {"model": f"{n_layer}x{n_embd}", "n_head": n_head}
        model = no_eos(make_model(n_layer, n_embd, n_head, device))
        rec, batch = bench_sampler(model, P, device)
        emit(dict(rec, **size), device, out)
        emit(dict(bench_hf(model, P, device, (n_layer, n_embd, n_head)), **size), device, out)
        emit(dict(bench_update(model, batch, P, peak["gflops"], device), **size), device, out)
        model = make_model(n_layer, n_embd, n_head, device)
        emit(dict(bench_rl_step(model, P, device), **size), device, out)
    if opts["ddp"] or (opts["ddp"] is None and not opts["quick"]):
        n_layer, n_embd, n_head = P["sizes"][0]
        one_gpu = device == "cuda" and torch.cuda.device_count() < 2
        rec = ({"name": "ddp", "skipped": "2 processes need 2 GPUs (one per process)"} if one_gpu
               else bench_ddp(P, device, P["sizes"][0], opts["quick"]))
        emit(dict(rec, model=f"{n_layer}x{n_embd}", n_head=n_head), device, out)
    emit(bench_syncs(P, device), device, out)
    emit(bench_ledger(P), device, out)
    emit(bench_motion(P, device), device, out)
    emit({"name": "memory"}, device, out)
    if out:
        checkpoint.atomic_write_text(out.getvalue(), os.path.realpath(opts["out"]))  # a link stays


def cli(argv):
    """The command line: bad input, a failed write and Ctrl-C get one 'error: ...' line
    and exit status 2."""
    errors.cli(main, argv)


if __name__ == "__main__":
    cli(sys.argv[1:])
    # a torchrun worker leaves at once: gloo's threads and the GIL can deadlock at exit
    dist_utils.finish_worker()
