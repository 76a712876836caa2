"""train.py: SFT warm start, then critic-free RL with verifiable rewards.

What it teaches: the whole loop of GRPO-style training on a task whose answers
a program checks, read top to bottom: SFT, the RL step, the RL loop, main.

Phase 1, SFT: the cross-entropy of the teacher's solutions, briefly, so that the policy is
right *sometimes*: only groups with both correct and wrong completions carry a signal.

Phase 2, RL (THEORY.md section 1). Each step:
  1. sample B = --prompts_per_step prompts x G = --group_size completions, and
  2. reward each completion with the task's verifier (sampler.rollouts);
  3. compute advantages A_i with the --adv estimator (advantage.py);
  4. cut the rollout batch into --minibatches mini-batches (batching.py), and for
     --epochs passes take one optimizer step per mini-batch on

         loss = sum_{i,t} norm_i * l_{i,t}(rho_{i,t}, A_i)      (loss.policy_loss)

     with PPO ratios rho against the log-probs recorded at sampling time (one
     mini-batch and one epoch: on-policy). Each step logs the coefficients
     c_{i,t} = -d loss / d log pi(y_{i,t}) summarised as residuals (loss.py).

Micro-batches, torchrun: plumbing/dist_utils.py; the run folder, its lock, --resume:
plumbing/rundir.py and plumbing/checkpoint.py;
--diagnostics: diagnostics.py. ``python train.py --key=value ...`` (``--help``: every flag) or
``torchrun --standalone --nproc_per_node=N train.py ...``."""

import contextlib
import os
import random
import sys
import time

import torch
from tqdm import tqdm

import advantage
import batching
from plumbing import checkpoint
import diagnostics
from plumbing import dist_utils
import loss
import loss_engines
from plumbing import rundir
import toy_tasks
from plumbing.config import Config, parse_args
from plumbing.errors import CliError, fail
from plumbing.console import MIXED_START_STEPS, progress, summary_line, weak_start_hint
from model import GPT, GPTConfig, amp, completion_logprobs, rl_optimizer, token_entropy
from sampler import evaluate, rollouts
from toy_tasks import EOS, PAD


# ----------------------------------------------------------------------------- the model

def initial_model(cfg, device):
    """A new model of --n_layer/--n_head/--n_embd, or --init_from's (whose sizes win)."""
    if cfg.init_from:
        model, ck = checkpoint.load_checkpoint(cfg.init_from, device)
        return rundir.init_from_checks(cfg, model, ck), model
    return cfg, GPT(
        GPTConfig(
            vocab_size=toy_tasks.VOCAB_SIZE,
            n_out=toy_tasks.N_OUT,
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            n_embd=cfg.n_embd,
            block_size=64,
        )
    ).to(device)


# ----------------------------------------------------------------------------- phase 1: SFT

def sft_batch(task, draw, n, rng, device, flawed=0.0):
    """Prompt + solution + EOS, left-padded prompts; the loss is on the completion.
    A fraction ``flawed`` of the solutions come from the task's flawed teacher."""
    probs = [draw() for _ in range(n)]
    prompts = [toy_tasks.encode(task.prompt(p)) for p in probs]
    sols = [
        toy_tasks.encode(task.flawed(p, rng) if rng.random() < flawed else task.solution(p, rng))
        + [EOS]
        for p in probs
    ]
    T = max(len(s) for s in sols)
    tokens = torch.full((n, T), PAD, dtype=torch.long, device=device)
    for i, s in enumerate(sols):
        tokens[i, :len(s)] = torch.tensor(s)
    return prompts, tokens, tokens != PAD


def sft(model, task, cfg, state, out, device, master):
    """Cross-entropy on the teacher's solutions, --sft_steps steps of --sft_batch."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
    if state.saved:
        state.restore(opt, dist_utils.rank_world()[0])
    world, n_sft = dist_utils.rank_world()[1], len(
        dist_utils.shard(torch.arange(cfg.sft_batch), *dist_utils.rank_world())
    )  # rank's share
    bar = progress(range(state.step + 1, cfg.sft_steps + 1), "sft", master)
    for step in bar:
        prompts, tokens, mask = sft_batch(
            task, state.draw, n_sft, state.sol_rng, device, cfg.sft_flawed
        )
        with amp(cfg, device):
            logp = completion_logprobs(model, prompts, tokens, mask, PAD)
        sft_loss = (
            -(logp.sum() / dist_utils.all_reduce_sum(mask.sum())) * world
        )  # all ranks' token mean; x world: DDP
        if not torch.isfinite(sft_loss):
            raise FloatingPointError(f"SFT step {step}: loss is not finite; the run diverged "
                                     f"(try a smaller --sft_lr)")
        opt.zero_grad(set_to_none=True)
        sft_loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{sft_loss.item():.3f}")
        if bar.disable and master and step % max(1, cfg.sft_steps // 4) == 0:  # a log file: 4 lines
            print(f"sft step {step}: loss {sft_loss.item():.3f}", flush=True)
        out.log({"phase": "sft", "step": step, "loss": sft_loss.item()})
        state.step = step
        if step == cfg.sft_steps:
            out.warm_start(step)
        if step % cfg.ckpt_every == 0 or step == cfg.sft_steps:
            out.checkpoint(state, opt)
    bar.close()


# ----------------------------------------------------------------------------- phase 2: the RL step

def logprobs_of(net, batch, rows, cfg, hidden=False):
    """log pi(y_t | s_t) of the batch's ``rows`` under ``net``, tempered as at sampling."""
    with amp(cfg, batch["mask"].device.type):
        return completion_logprobs(net, [batch["prompts"][i] for i in rows.tolist()],
                                   batch["tokens"][rows], batch["mask"][rows], PAD,
                                   cfg.temperature, return_hidden=hidden)


def whole_step_weights(plain, batch, adv, mb, parts, cfg):
    """DFPO's w~ of the step's rows, or None. w~ is a per-group statistic: once a step
    is split over micro-batches or processes, each part must use the whole step's
    (a no-grad pass over every part, summed over ranks), or the copies of a shared
    token in different parts get different weights."""
    world = dist_utils.rank_world()[1]
    split = world > 1 or len(parts) > 1
    if not (loss.OBJECTIVES[cfg.loss].group_transform and cfg.norm == "global" and split):
        return None  # one part: policy_loss computes w~ from the rows it sees
    mask, old = batch["mask"], batch["logprobs"]
    with torch.no_grad():
        ratio = torch.cat([loss.sequence_ratio(logprobs_of(plain, batch, mb[p], cfg), old[mb[p]],
                                               mask[mb[p]]) for p in parts])
    ratio = dist_utils.all_reduce_rows(ratio, torch.cat(parts), len(mb))
    bounds = loss.clip_bounds(cfg.clip, cfg.clip_low, cfg.clip_high)
    return loss.dfpo_weights(ratio, adv[mb], batch["group"][mb], cfg.loss, bounds)


def step_metrics(acc, coef, batch, adv, mb):
    """The step's logged numbers: the stats summed over parts and ranks (row-weighted
    means, the loss a sum), and the residuals of every coefficient of the step."""
    keys = sorted(acc)
    total = dist_utils.all_reduce_sum(torch.tensor([acc[k] for k in keys], dtype=torch.float64))
    out = {k: float(v) if k == "loss" else float(v) / len(mb) for k, v in zip(keys, total)}
    coef = dist_utils.all_reduce_sum(coef)  # every coefficient of the step, on every rank
    group, mask = batch["group"][mb], batch["mask"][mb]
    out["first_token_residual"] = loss.first_token_residual(coef, group)
    out["exch_residual"] = loss.exch_residual(coef, adv[mb], batch["tokens"][mb], mask, group)
    return out


def optimizer_step(model, opt, batch, adv, mb, cfg):
    """One optimizer step on mini-batch ``mb`` (indices into the batch): this rank's
    share, in micro-batches whose gradients accumulate. --norm=global: every part uses
    the step's denominators and DFPO weights (the same update however the step is
    split); --norm=local: each uses its own."""
    rank, world = dist_utils.rank_world()
    mask, group, old = batch["mask"], batch["group"], batch["logprobs"]
    mine = dist_utils.shard(torch.arange(len(mb), device=mb.device), rank, world)  # positions in mb
    parts = [mine[p] for p in dist_utils.micro_batches(len(mine), cfg.micro_batch)]
    glob, plain = cfg.norm == "global", getattr(model, "module", model)
    settings = loss.LossSettings.from_config(cfg)

    def counts_of(rows, m=1):  # the denominators N, sum L, L_max of these rows
        return loss.step_counts(mask[rows], adv[rows], max_len=batch["max_len"], micro_batches=m)

    counts = counts_of(mb, len(parts) * world)  # bnpo: TRL divides by the accumulation steps
    weights = whole_step_weights(plain, batch, adv, mb, parts, cfg)
    opt.zero_grad(set_to_none=True)
    coef, acc = torch.zeros(len(mb), mask.shape[1], device=mask.device), {}
    for j, p in enumerate(parts):
        rows = mb[p]
        # DDP all-reduces the gradients on the last backward only
        no_sync = getattr(model, "no_sync", contextlib.nullcontext)
        with contextlib.nullcontext() if j == len(parts) - 1 else no_sync():
            new_logp, h = logprobs_of(model, batch, rows, cfg, hidden=True)
            entropy = token_entropy(plain, h, cfg.temperature) if loss_engines.needs_entropy(cfg) \
                else None
            # the tokens whose policy term keeps its gradient (None: every token)
            keep = loss_engines.token_keep(new_logp, old[rows], mask[rows], adv[rows], entropy, cfg)
            value, stats = loss.policy_loss(loss.LossBatch(
                new_logp, old[rows], mask[rows], adv[rows], group[rows],
                counts=counts if glob else counts_of(rows),
                weights=None if weights is None else weights[p],
                ref_logprobs=batch["ref_logprobs"][rows] if cfg.beta else None,
                entropy=entropy, keep=keep), settings)
            if not torch.isfinite(value):
                raise FloatingPointError("loss is not finite")
            term = value if glob else value / (len(parts) * world)  # this part's share of the loss
            coef[p] = loss.coefficients(term, new_logp).detach().float()
            (term * world).backward()  # DDP averages over ranks: x world makes it the sum
        for k, v in dict(stats, loss=term.item()).items():  # stats: row-weighted means
            acc[k] = acc.get(k, 0.0) + (v if k == "loss" else v * len(p))
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    return step_metrics(acc, coef, batch, adv, mb)


def rl_update(model, opt, batch, cfg, gen):
    """Advantages, mini-batches, epochs: the optimizer steps of one rollout batch.
    ``batch`` is the whole (all-gathered) rollout batch; rank 0 cuts it."""
    rewards, group, mask = batch["rewards"], batch["group"], batch["mask"]
    lens = mask.sum(1)
    adv = advantage.advantages(
        rewards, group, cfg.adv, lengths=lens, baseline=batch.get("baseline")
    )
    logs = []
    for _ in range(cfg.epochs):
        cut = dist_utils.rank_world()[0] == 0  # every rank must see rank 0's cut
        mbs = dist_utils.broadcast_cut(batching.make_minibatches(cfg.batching, group, adv, lens,
                                                        cfg.minibatches, gen) if cut else None)
        for mb in mbs:
            logs.append(optimizer_step(model, opt, batch, adv, mb.to(mask.device), cfg))
    out = {k: sum(s[k] for s in logs) / len(logs) for k in logs[0]}
    out["mb_stats"] = batching.minibatch_stats(mbs, group, adv, lens)
    out["steps"] = logs  # per optimizer step, in order
    return out


def rl_step(model, raw, opt, ref_model, task, held_out, cfg, state, device, master, t0):
    """One RL step: rollouts, update, (diagnostics), evaluation -> its metrics line."""
    step, sums = state.step, state.sums
    model.train()
    batch = rollouts(
        raw,
        task,
        state.draw,
        cfg,
        state.gen,
        device,
        cfg.prompts_per_step // dist_utils.rank_world()[1],
    )
    batch["max_len"] = task.max_new_tokens
    batch = dist_utils.gather_rollouts(batch)  # every rank: the whole batch, rank 0's groups first
    if ref_model is not None:
        with torch.no_grad(), amp(cfg, device):
            batch["ref_logprobs"] = completion_logprobs(
                ref_model, batch["prompts"], batch["tokens"], batch["mask"], PAD, cfg.temperature
            ).float()
    zero_var = advantage.zero_variance_fraction(batch["rewards"], batch["group"])
    diag = cfg.diagnostics and master
    before = (
        diagnostics.tax_before(raw, batch) if diag else None
    )  # the learning tax: KL at shared histories
    stats = rl_update(model, opt, batch, cfg, state.gen)
    checkpoint.check_finite(raw, "after the update")
    if diag:
        stats["tax"], stats["tax_interior"] = diagnostics.learning_tax(raw, batch, before)
        sums["tax_sum"] += stats["tax"]
        sums["tax_interior_sum"] += stats["tax_interior"]
        stats["tax_sum"], stats["tax_interior_sum"] = sums["tax_sum"], sums["tax_interior_sum"]
    rec = {
        "phase": "rl",
        "step": step,
        "reward": float(batch["rewards"].mean()),
        "mixed": 1.0 - zero_var,
        "zero_var": zero_var,
        **{k: v for k, v in stats.items() if k not in ("mb_stats", "steps")},
        **stats["mb_stats"],
    }
    if step <= MIXED_START_STEPS:  # one batch of 16 groups is a noisy estimate: average a few
        sums["mixed_start_sum"] += rec["mixed"]
        sums["mixed_at_start"] = sums["mixed_start_sum"] / step
    sums["exch_sum"] += rec["exch_residual"]  # the summary's mean
    if step == 1 and master and (hint := weak_start_hint(rec["mixed"], cfg)):
        tqdm.write(hint)
    if master and (step % cfg.eval_every == 0 or step == cfg.rl_steps):
        sums["acc"] = rec["eval_acc"] = evaluate(raw, task, held_out, cfg, device)
        if cfg.diagnostics:
            d = diagnostics.eval_diagnostics(raw, task, held_out, cfg, sums["diag_ref"])
            d.pop("_ref")
            rec.update(d)
        tqdm.write(f"rl step {step}: eval_acc {sums['acc']:.3f}  reward {rec['reward']:.3f}  "
                   f"mixed {rec['mixed']:.2f}  exch_residual {rec['exch_residual']:.1e}  "
                   f"[{time.time() - t0:.0f}s]")
    return rec


# ----------------------------------------------------------------------------- phase 2: the RL loop

def reference_model(raw, cfg, state, device):
    """--beta's frozen reference policy: the warm start (the run's own, or --init_from's)."""
    ref = GPT(raw.cfg).to(device)
    ref.load_state_dict(raw.state_dict() if state.phase != "rl" else checkpoint.load_checkpoint(
        cfg.init_from or os.path.join(cfg.out_dir, "warm_start.pt"), device)[0].state_dict())
    return ref.eval().requires_grad_(False)


def rl(model, raw, task, held_out, cfg, state, out, device, master, t0):
    """Evaluate the warm start, then --rl_steps RL steps, evaluating every --eval_every."""
    opt = rl_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
    ref_model = reference_model(raw, cfg, state, device) if cfg.beta else None
    if state.phase == "rl":  # resumed in RL
        state.restore(opt, dist_utils.rank_world()[0])
    else:
        state.phase, state.step = "rl", 0
        if cfg.sft_steps == 0 and not cfg.init_from:
            out.warm_start(0)  # the untrained start is the warm start: --beta's reference on resume
        if master:
            try:
                acc0 = evaluate(raw, task, held_out, cfg, device)
                diag0 = diagnostics.eval_diagnostics(raw, task, held_out, cfg) if cfg.diagnostics \
                    else {"_ref": None}
            except FloatingPointError as e:
                raise FloatingPointError(f"RL step 0 (evaluation of the warm start): {e}") from None
            state.sums["diag_ref"] = diag0.pop("_ref")
            out.log({"phase": "rl", "step": 0, "eval_acc": acc0, **diag0})
            state.sums.update(acc0=acc0, acc=acc0)
            print(f"rl step 0: eval_acc {acc0:.3f} (warm start)  [{time.time() - t0:.0f}s]")
        if cfg.rl_steps == 0:
            out.checkpoint(state, opt)
    bar = progress(range(state.step + 1, cfg.rl_steps + 1), "rl", master)
    for step in bar:
        state.step = step
        try:
            rec = rl_step(
                model, raw, opt, ref_model, task, held_out, cfg, state, device, master, t0
            )
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step {step}: {e}; the run diverged (try a smaller --lr); "
                                     f"the last good checkpoint is kept") from None
        out.log(rec)
        if step % cfg.ckpt_every == 0 or step == cfg.rl_steps:
            out.checkpoint(state, opt)
        if master:
            bar.set_postfix(reward=f"{rec['reward']:.2f}", acc=f"{state.sums['acc']:.2f}")
    bar.close()


# ----------------------------------------------------------------------------- main

def run(cfg, model, task, found, saved, rank, local_rank, world, device, master):
    """After every check: join the process group, write the config, SFT, RL, the summary."""
    model, raw = dist_utils.wrap(model, cfg, device, local_rank, world)
    sft_steps = 0 if cfg.init_from else cfg.sft_steps
    resolved = dict(vars(cfg), device=device, task_name=task.name, params=raw.num_params(),
                    sft_steps_run=sft_steps, torch=torch.__version__, world_size=world)
    if master:
        rundir.start_writing(cfg, found, resolved, saved)
    held_out = toy_tasks.eval_problems(task, cfg.eval_size, cfg.seed)
    state = checkpoint.RunState(
        draw=toy_tasks.train_sampler(task, held_out, cfg.seed + rank),  # streams per rank
        sol_rng=random.Random(cfg.seed + 1 + rank),
        gen=torch.Generator(device=device).manual_seed(cfg.seed + rank),
        saved=saved,
    )
    out = rundir.RunDir(cfg, raw, master)
    t0 = time.time()
    if state.phase == "sft" and sft_steps > 0:
        sft(model, task, cfg, state, out, device, master)
    rl(model, raw, task, held_out, cfg, state, out, device, master, t0)
    if not master:
        return {}
    s, mixed = state.sums, state.sums["mixed_at_start"]  # no mixed fraction without an RL step
    summary = {
        "warm_start_acc": s["acc0"],
        **({} if mixed is None else {"mixed_at_start": mixed}),
        "final_acc": s["acc"],
        "gain": s["acc"] - s["acc0"],
        "seconds": round(time.time() - t0, 1),
        **({"exch_residual_mean": s["exch_sum"] / cfg.rl_steps} if cfg.rl_steps else {}),
    }
    out.log({"phase": "summary", "step": cfg.rl_steps, **summary})
    out.close()
    print(summary_line(summary, cfg))
    print(f"plot the curves: python plot.py {cfg.out_dir}")
    return summary


def main(cfg):
    rank, local_rank, world = dist_utils.env_world()  # torchrun sets RANK, LOCAL_RANK, WORLD_SIZE
    dist_utils.check_world(cfg, world)
    device = dist_utils.resolve_device(cfg.device)
    master = rank == 0  # evaluates, logs, writes metrics and checkpoints
    task = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad)
    cfg, found, model, saved = rundir.open_run(
        cfg, device, world
    )  # every check before anything is written
    torch.manual_seed(cfg.seed)  # the same initial model on every rank
    random.seed(cfg.seed)
    if model is None:  # else it is ckpt.pt's (--resume)
        cfg, model = initial_model(cfg, device)
    lock = rundir.lock_run(cfg, found) if master else None  # the last check: one writer per folder
    summary = None
    try:
        summary = run(cfg, model, task, found, saved, rank, local_rank, world, device, master)
    finally:  # every exit path leaves the process group (a barrier first only after a clean run)
        rundir.unlock(lock)
        dist_utils.teardown(clean=summary is not None)
    return summary


def cli(argv):
    """The command line: bad input gets one 'error: ...' line and exit status 2.
    Under torchrun only local rank 0 prints it (one line per node)."""
    quiet = os.environ.get("LOCAL_RANK", "0") != "0"
    try:
        return main(parse_args(argv, Config, doc=__doc__))
    except CliError as e:  # the other ranks give local rank 0 the time to print, then exit
        time.sleep(5) if quiet else fail(str(e))
        sys.exit(2)
    except FloatingPointError as e:
        fail(str(e))
    except OSError as e:  # a disk that fills up, a folder that vanishes
        fail(f"{e.strerror or type(e).__name__}: {e.filename or ''}".rstrip(": "))
    except KeyboardInterrupt:
        fail("interrupted")


if __name__ == "__main__":
    cli(sys.argv[1:])
    dist_utils.finish_worker()
