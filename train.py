"""train.py: SFT warm start, then critic-free RL with verifiable rewards (GRPO and its kin).

What it teaches: the whole loop, as in nanoGPT's train.py. Read it top to bottom: each
phase opens with its loop, and the functions it calls follow it; main, at the end, makes
the run and calls the phases.

Phase 1, SFT: the cross-entropy of a teacher's solutions, briefly, so that the policy is
right *sometimes*: only a group with both right and wrong completions carries a signal.

Phase 2, RL (THEORY.md section 1). Each RL step (``rl_step``):
  1. sample B = --prompts_per_step prompts x G = --group_size completions (sampler.py);
  2. reward each completion with the task's verifier (toy_tasks.py);
  3. one advantage Â_i per completion, from its group's rewards (loss.advantages);
  4. cut the rollout batch into --minibatches mini-batches (batching.py), and for
     --epochs passes take one optimizer step per mini-batch (``optimizer_step``): the
     step's denominators, then per micro-batch the log-probs, the loss, e.g.

         loss = -1/N sum_i 1/L_i sum_t min(rho_{i,t} Â_i, clip(rho_{i,t}) Â_i)   (loss.grpo)

     with rho the ratio to the policy that sampled (1 on the first step: on-policy), and
     its backward; then the gradient clip and the optimizer step;
  5. log, and every --eval_every steps evaluate on held-out problems.

The lab (lab/, one folder away) measures cancellation at three points of the step: after
the rollouts, after each optimizer step (reading the coefficients c_{i,t} = -d loss /
d log pi(y_{i,t}) that the backward left), and after the update. --instruments=false
switches those off: no extra pass, no coefficient kept. (The lab's catalogue still
resolves --adv=auto and checks the flags, and computes the loss when a switch of its own,
--beta say, is on.) Plumbing: the flags, the run folder and --resume (plumbing/); under
torchrun, plumbing/dist_utils.py gives each process its rows (shard, micro_batches) and
sums the logged numbers (step_means). ``python train.py --key=value`` (--help).
"""

import functools
import math
import os
import random
import sys
import time
import types

import torch
from tqdm import tqdm

import batching
from lab import instruments, objectives  # the lab: instruments; the catalogue joins loss.py
import loss
import toy_tasks
from model import GPT, GPTConfig, amp, completion_logprobs, rl_optimizer
from plumbing import checkpoint, dist_utils, fast_decode, rundir
from plumbing.config import Config, given_flags, parse_args
from plumbing.console import MIXED_START_STEPS, progress, summary_line, weak_start_hint
from plumbing.errors import CliError, fail
from plumbing.rundir import Run
from sampler import evaluate, rollouts
from toy_tasks import EOS, PAD


# ----------------------------------------------------------------------------- phase 1: SFT

def sft(run):
    """Cross-entropy on the teacher's solutions, --sft_steps steps of --sft_batch."""
    cfg, state = run.cfg, run.state
    # AdamW, as nanoGPT: SFT is ordinary next-token training, only on the completion's tokens
    opt = torch.optim.AdamW(run.model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
    if state.saved:  # resumed inside SFT: the optimizer's moments continue too
        state.restore(opt, run.rank)
    n_sft = dist_utils.share(cfg.sft_batch)  # this process's share of the batch
    bar = progress(range(state.step + 1, cfg.sft_steps + 1), "sft", run.master)
    losses, first = [], state.step + 1  # losses: read back when a line or checkpoint is due
    for step in bar:
        if (step - 1) % cfg.ckpt_every == 0 or step == first:
            # the batches up to the next checkpoint, which saves the random streams after them
            upto = min(cfg.sft_steps, ((step - 1) // cfg.ckpt_every + 1) * cfg.ckpt_every)
            batches = sft_batches(run.task, state.draw, n_sft, state.sol_rng, run.device,
                                  cfg.sft_flawed, upto - step + 1)
        prompts, tokens, mask = next(batches)
        with amp(cfg, run.device):
            logp = completion_logprobs(run.model, prompts, tokens, mask, PAD)
        sft_loss = -dist_utils.token_mean(logp, mask)  # over every process's tokens
        opt.zero_grad(set_to_none=True)
        sft_loss.backward()  # DDP all-reduces the gradients here (plumbing/dist_utils.py)
        opt.step()
        losses.append(sft_loss.detach())
        printed = step % max(1, cfg.sft_steps // 4) == 0  # a log file gets 4 lines
        if printed or step % cfg.ckpt_every == 0 or step == cfg.sft_steps:
            sft_log(run, bar, step, losses, printed)
            losses = []
        state.step = step
        if step == cfg.sft_steps:  # the warm start: --beta's reference, and the lab's start
            run.out.warm_start(step)
        if step % cfg.ckpt_every == 0 or step == cfg.sft_steps:
            run.out.checkpoint(state, opt)
    bar.close()


def sft_batches(task, draw, n, rng, device, flawed, steps):
    """The batches of ``steps`` SFT steps, made on the host and copied to the device at once
    (a copy per step would make a GPU wait per step): per step (prompt ids, their valid mask),
    left-padded, and the solutions, right-padded, with their mask (the loss is on them)."""
    texts = [sft_texts(task, draw, n, rng, flawed) for _ in range(steps)]
    L = max(len(p) for prompts, _ in texts for p in prompts)
    T = max(len(s) for _, sols in texts for s in sols)
    ids = torch.tensor([[[PAD] * (L - len(p)) + p for p in prompts] for prompts, _ in texts],
                       device="cpu").to(device)
    tok = torch.tensor([[s + [PAD] * (T - len(s)) for s in sols] for _, sols in texts],
                       device="cpu").to(device)
    for k, (prompts, sols) in enumerate(texts):
        # each step padded to its own longest prompt and solution, as one step alone would be
        p = ids[k, :, L - max(len(x) for x in prompts):]
        t = tok[k, :, :max(len(s) for s in sols)]
        yield (p, p != PAD), t, t != PAD


def sft_texts(task, draw, n, rng, flawed=0.0):
    """n problems' prompts and solutions + EOS, as token ids. A fraction ``flawed`` of the
    solutions come from the task's flawed teacher."""
    probs = [draw() for _ in range(n)]
    prompts = [task.encode(task.prompt(p)) for p in probs]
    # a flawed teacher (one who forgets carries, say) keeps the warm start imperfect, so that
    # groups come out mixed: only a group with right and wrong rollouts has a signal in RL
    sols = [task.encode(task.flawed(p, rng) if rng.random() < flawed
                        else task.solution(p, rng)) + [EOS] for p in probs]
    return prompts, sols


def sft_log(run, bar, step, losses, printed):
    """The losses of the steps up to ``step``, read back at once: their lines of
    metrics.jsonl, and the printed line. A non-finite one stops the run before its line
    (and before any checkpoint of a diverged model)."""
    values = torch.stack(losses).tolist()
    first = step - len(values) + 1
    for k, value in enumerate(values):
        if not math.isfinite(value):
            raise FloatingPointError(f"SFT step {first + k}: loss is not finite; the run "
                                     f"diverged (try a smaller --sft_lr)")
        run.out.log({"phase": "sft", "step": first + k, "loss": value})
    bar.set_postfix(loss=f"{values[-1]:.3f}")
    if bar.disable and run.master and printed:
        print(f"sft step {step}: loss {values[-1]:.3f}", flush=True)


# ----------------------------------------------------------------------------- phase 2: RL

def rl(run):
    """Evaluate the warm start, then --rl_steps RL steps, evaluating every --eval_every."""
    cfg, state = run.cfg, run.state
    opt = rl_optimizer(run.model.parameters(), cfg.optimizer, cfg.lr)
    ref_model = reference_model(run) if cfg.beta else None
    if state.phase == "rl":  # resumed in RL: the optimizer's moments continue
        state.restore(opt, run.rank)
    else:
        evaluate_warm_start(run, opt)
    bar = progress(range(state.step + 1, cfg.rl_steps + 1), "rl", run.master)
    for step in bar:
        state.step = step  # set first: a checkpoint saves the step that has just finished
        try:
            rec = rl_step(run, opt, ref_model)
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step {step}: {e}; the run diverged (try a smaller --lr); "
                                     f"the last good checkpoint is kept") from None
        if step <= MIXED_START_STEPS:  # one batch of 16 groups is noisy: average a few
            state.sums["mixed_start_sum"] += rec["mixed"]
            state.sums["mixed_at_start"] = state.sums["mixed_start_sum"] / step
        if step == 1 and run.master and (hint := weak_start_hint(rec["mixed"])):
            tqdm.write(hint)  # too few mixed groups: say how to strengthen the warm start
        run.out.log(rec)
        # a checkpoint every --ckpt_every steps and at the end: --resume continues from it
        if step % cfg.ckpt_every == 0 or step == cfg.rl_steps:
            run.out.checkpoint(state, opt)
        if run.master:
            bar.set_postfix(reward=f"{rec['reward']:.2f}", acc=f"{state.sums['acc']:.2f}")
    bar.close()


def reference_model(run):
    """--beta's frozen reference policy: the warm start (the run's own, or --init_from's)."""
    cfg = run.cfg
    ref = GPT(run.raw.cfg).to(run.device)
    # resumed in RL, the model has moved on: the reference comes back from its file
    if run.state.phase == "rl":
        path = cfg.init_from or os.path.join(cfg.out_dir, "warm_start.pt")
        ref.load_state_dict(checkpoint.load_checkpoint(path, run.device)[0].state_dict())
    else:
        ref.load_state_dict(run.raw.state_dict())
    return ref.eval().requires_grad_(False)


LEGEND = ("  eval_acc: greedy accuracy on the held-out problems; reward: the mean reward of "
          "the step's\n  samples; mixed: the share of groups with right and wrong rollouts "
          "(only they carry\n  a signal)")
LEGEND_LAB = ("; cancelled: the share of the step's shared-token coefficients that\n"
              "  cancelled (the cancellation ledger, at the end)")


def evaluate_warm_start(run, opt):
    """RL step 0: the warm start's accuracy (and the lab's diagnostics), before any update."""
    cfg, state = run.cfg, run.state
    state.phase, state.step = "rl", 0
    if cfg.sft_steps == 0 and not cfg.init_from:
        run.out.warm_start(0)  # the untrained start is the warm start: --beta's reference on resume
    if run.master:
        try:
            acc0 = evaluate(run.raw, run.task, run.held_out, cfg, run.device, run.decoder)
            diag0 = run.inst.after(run.raw, {"eval_acc": acc0}) if run.inst else {}
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step 0 (evaluation of the warm start): {e}") from None
        run.out.log({"phase": "rl", "step": 0, "eval_acc": acc0, **diag0})
        state.sums.update(acc0=acc0, acc=acc0)
        print(f"rl step 0: eval_acc {acc0:.3f} (warm start)  [{time.time() - run.t0:.0f}s]")
        print(LEGEND + (LEGEND_LAB if run.inst else ""))
    if cfg.rl_steps == 0:
        run.out.checkpoint(state, opt)


def rl_step(run, opt, ref_model):
    """One RL step: rollouts and rewards, the update, evaluation -> its metrics line."""
    cfg, state, step, lab_ = run.cfg, run.state, run.state.step, run.inst
    run.model.train()  # (the sampler switches to eval mode and back by itself)
    # 1-2. each process samples its share of the groups and rewards them; then every one
    # holds the whole batch, so that advantages, the cut and the denominators are global
    batch = rollouts(run.raw, run.task, state.draw, cfg, state.gen, run.device,
                     cfg.prompts_per_step // run.world, run.decoder)
    batch.max_len = run.task.max_new_tokens  # dr_grpo's L_max: the completion budget
    batch = dist_utils.gather_rollouts(batch)
    if ref_model is not None:  # --beta: the frozen reference's log-probs of the same tokens
        with torch.no_grad(), amp(cfg, run.device):
            batch.ref_logprobs = completion_logprobs(
                ref_model, batch.prompts, batch.tokens, batch.mask, PAD, cfg.temperature
            ).float()
    # only a group with both right and wrong rollouts carries a signal (its Â is not 0)
    mixed = loss.mixed_fraction(batch.rewards, batch.group)
    rec = {"phase": "rl", "step": step, "reward": float(batch.rewards.mean()), "mixed": mixed}
    if lab_:  # the lab looks at the rollouts before the update changes the policy
        rec.update(lab_.rollouts(run.raw, batch))
    # 3-4. advantages, mini-batches, epochs: the optimizer steps of this batch
    out = rl_update(run.model, opt, batch, cfg, state.gen, lab_)
    checkpoint.check_finite(run.raw, "after the update")  # never carry a NaN into a checkpoint
    rec.update({k: v for k, v in out.items() if k not in ("steps", "adv", "cut")})
    # 5. held-out greedy accuracy every --eval_every steps
    evaluating = step % cfg.eval_every == 0 or step == cfg.rl_steps
    if run.master and evaluating:
        state.sums["acc"] = rec["eval_acc"] = evaluate(run.raw, run.task, run.held_out, cfg,
                                                       run.device, run.decoder)
    if lab_:  # the lab: what the update did (the ledger, the learning tax), its diagnostics
        rec.update(lab_.after(run.raw, rec, batch, out["adv"], out["cut"]))
    if run.master and evaluating:
        tqdm.write(f"rl step {step}: eval_acc {rec['eval_acc']:.3f}  reward {rec['reward']:.3f}  "
                   f"mixed {mixed:.2f}{cancelled_text(rec)}  [{time.time() - run.t0:.0f}s]")
    return rec


def rl_update(model, opt, batch, cfg, gen, lab_=None):
    """Advantages, mini-batches, epochs: the optimizer steps of one rollout batch.
    ``batch`` is the whole (all-gathered) rollout batch; rank 0 cuts it."""
    # 3. one advantage per completion, from its own group of rewards (loss.ADVANTAGES; --adv=
    # auto is the --loss's own, GRPO's (r - mu_g)/(sigma_g + eps) in the demo); fixed for
    # every epoch: the data are reused, the credit is not recomputed
    adv = loss.ADVANTAGES[cfg.adv](batch.rewards, batch.group, batch.mask.sum(1), batch.baseline)
    objective = objective_of(cfg)  # loss.grpo in the demo
    logs = []  # each optimizer step's numbers
    for _ in range(cfg.epochs):
        # 4. the scheduler decides which rollouts meet in one step, and so whether the copies
        # of a shared token are applied together (batching.py); a new cut each epoch, made
        # on rank 0 and sent to every rank so that all take the same steps
        cut = dist_utils.on_rank0(lambda: batching.make_minibatches(
            cfg.batching, batch.group, adv, batch.mask.sum(1), cfg.minibatches, gen))
        for mb in cut:  # one optimizer step per mini-batch; off-policy after the first
            logs.append(optimizer_step(model, opt, batch, adv, mb, cfg, lab_, objective))
    # the batch's line of metrics.jsonl: each number is its mean over the optimizer steps
    out = {k: sum(s[k] for s in logs) / len(logs) for k in logs[0]}
    return dict(out, steps=logs, adv=adv, cut=cut)  # and what a caller or the lab reads


def optimizer_step(model, opt, batch, adv, mb, cfg, lab_=None, objective=None):
    """One optimizer step on mini-batch ``mb`` (indices into the batch): the step's
    denominators, then per micro-batch the log-probs, the loss and its backward, then the
    clip and the step. Returns its logged numbers."""
    objective = objective or objective_of(cfg)
    # one process is rank 0 of a world of 1: every torchrun step below is then a no-op
    rank, world = dist_utils.rank_world()
    mask = batch.mask
    # this process's rows of mb (torchrun gives each rank a contiguous share), cut into
    # micro-batches of --micro_batch rollouts whose gradients add up to the step's
    mine = dist_utils.shard(torch.arange(len(mb), device=mb.device), rank, world)
    parts = [mine[p] for p in dist_utils.micro_batches(len(mine), cfg.micro_batch)]
    # what every part shares: the *step's* N, sum L, L_max and DFPO weights, so that
    # splitting a step changes no copy's weight (--norm=local shows what breaks otherwise)
    counts_for = part_counts(model, batch, adv, mb, parts, cfg)
    n_parts = 1 if cfg.norm == "global" else len(parts) * world  # local: a mean of the parts
    coef = torch.zeros(len(mb), mask.shape[1], device=mask.device) if lab_ else None
    sums, seen = {}, []  # the logged numbers, summed; what the lab reads of each part
    opt.zero_grad(set_to_none=True)  # gradients accumulate over the parts: one step
    for j, p in enumerate(parts):
        rows = mb[p]
        if world > 1:  # DDP all-reduces the gradients in backward: on the last part only
            model.require_backward_grad_sync = j == len(parts) - 1
        logp, hidden = logprobs_of(model, batch, rows, cfg)
        if lab_:
            logp.retain_grad()  # d loss / d log pi after the backward: the coefficients
        args = (batch.old_logprobs[rows], mask[rows], adv[rows], batch.group[rows])
        counts = dict(counts_for(p), extra=loss_extra(cfg, model, hidden, batch, rows))
        # 4. the objective's loss of these rows: loss.grpo in the demo (loss.py). Its value is
        # about 0 on-policy (the advantages are centred); its gradient is not
        value, clip_frac = objective(logp, *args, counts)
        stats = dict(counts["extra"].stats, clip_frac=clip_frac, finite=torch.isfinite(value))
        # the step's loss is the sum of its parts' (--norm=global), as if taken whole
        term = value / n_parts
        # DDP *averages* the ranks' gradients; each rank's term is its share of the step's
        # sum, so x world makes the average the sum (1 in one process)
        (term * world).backward()
        if lab_:  # c_{i,t} = -d loss / d log pi(y_{i,t}), and the same loss with every ratio 1
            coef[p] = (-logp.grad / world).float()
            seen.append((p, logp.detach(), args, n_parts,
                         lambda lp, a=args, c=counts: objective(lp, *a, on_policy(c))[0]))
        # kept as tensors and read back once per step (each read makes a GPU wait)
        for k, v in dict(stats, loss=term.detach()).items():  # stats: row-weighted means
            v = torch.as_tensor(v, dtype=torch.float64, device=mask.device)
            sums[k] = sums.get(k, 0.0) + (v if k == "loss" else v * len(p))
    out = dist_utils.step_means(sums, len(mb), mask.device)
    if out.pop("finite") < 1:  # stop before a NaN reaches the weights
        raise FloatingPointError("loss is not finite")
    # the clip scales the whole step: it changes no ratio between two copies' weights
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    if lab_:  # how far the step's copies of each shared token were from cancelling
        out.update(lab_.step(mb, coef, seen, adv))
    return out


def part_counts(model, batch, adv, mb, parts, cfg):
    """p -> what part p shares with its whole optimizer step: the denominators N, sum L,
    L_max (loss.step_counts) and, for DFPO, w~ computed over every row of the step (a
    no-grad pass over each part, summed over ranks); under --norm=local, the part's own."""
    world = dist_utils.rank_world()[1]

    def counts_of(rows, m=1):  # m: the micro-batches M (bnpo divides by them, as TRL)
        return loss.step_counts(batch.mask[rows], adv[rows], max_len=batch.max_len,
                                micro_batches=m)

    counts, weights = counts_of(mb, len(parts) * world), None
    transform = loss.GROUP_TRANSFORMS.get(cfg.loss)  # DFPO's, else None
    split = world > 1 or len(parts) > 1  # in one part the loss sees every row: its own w~
    if transform and cfg.norm == "global" and split:
        plain = getattr(model, "module", model)
        with torch.no_grad():  # w~ is detached: the transform is applied before the gradient
            ratio = torch.cat([loss.sequence_ratio(logprobs_of(plain, batch, mb[p], cfg)[0],
                                                   batch.old_logprobs[mb[p]], batch.mask[mb[p]])
                               for p in parts])
        bounds = loss.clip_bounds(cfg.clip, cfg.clip_low, cfg.clip_high)
        # --clip on a dfpo loss truncates w before the transform
        whole = dist_utils.all_reduce_rows(ratio, torch.cat(parts), len(mb))
        weights = loss.dfpo_weights(whole, adv[mb], batch.group[mb], transform, bounds)

    def of(p):  # --norm=local: each part its own counts, as some engines shipped
        own = counts if cfg.norm == "global" else counts_of(mb[p])
        return dict(own, weights=None if weights is None else weights[p])
    return of


def objective_of(cfg):
    """--loss's function, of (logp, old_logp, mask, adv, group, counts): loss.LOSSES maps each
    name to one (loss.grpo in the demo), and --clip's bounds are bound in. The engines'
    catalogue adds its objectives to loss.LOSSES; a switch of its own (--beta, --agg,
    --entropy_coef, ...) takes the catalogue's version of the objective (lab/objectives.py)."""
    fn = loss.LOSSES[cfg.loss]
    # a switch adds a term or drops tokens: the catalogue's own version, the same numbers else
    if objectives.switched(cfg):
        fn = functools.partial(objectives.catalogue_loss, cfg.loss)
    return functools.partial(fn, clip=loss.clip_bounds(cfg.clip, cfg.clip_low, cfg.clip_high))


def on_policy(counts):
    """A part's counts with every ratio taken as 1: DFPO's w~ of the ratios at pi_old (all
    1), and the catalogue's switches as on-policy (for the lab's c°)."""
    return dict(counts, weights=None, extra=types.SimpleNamespace(**dict(vars(counts["extra"]),
                                                                        on_policy=True)))


def loss_extra(cfg, model, hidden, batch, rows):
    """What an objective of the engines' catalogue may also read (the lesson's read none of
    it): the flags, the model and these rows' hidden states (token entropies), the frozen
    reference's log-probs (--beta); and where it leaves numbers to log."""
    # the catalogue computes the token entropies once per part, and leaves them here
    return types.SimpleNamespace(
        cfg=cfg, model=getattr(model, "module", model), hidden=hidden,
        ref_logprobs=batch.ref_logprobs[rows] if cfg.beta else None,
        on_policy=False, entropy=None, stats={})


def logprobs_of(net, batch, rows, cfg):
    """log pi(y_t | s_t) of the batch's ``rows`` (a tensor on the host) under ``net``, tempered
    as at sampling (so that an on-policy ratio is exactly 1), and the hidden states that
    produced them."""
    with amp(cfg, batch.mask.device.type):
        return completion_logprobs(net, [batch.prompts[i] for i in rows.tolist()],
                                   batch.tokens[rows], batch.mask[rows], PAD,
                                   cfg.temperature, return_hidden=True)


def cancelled_text(rec):
    """The evaluation line's share of the shared tokens' coefficients that cancelled
    (the lab's ledger), or nothing without the lab."""
    if "ledger_cancelled" not in rec:  # --instruments=false: the lab measured nothing
        return ""
    done = f"{100 * rec['ledger_cancelled']:.0f} %" if rec["ledger_mass"] > 0 else "n/a"
    return f"  cancelled {done}"


# ----------------------------------------------------------------------------- main

def main(cfg, given=None):
    """One run of train.py: the checks, then the phases; returns the summary (rank 0).
    ``given``: the flags written on the command line, which --resume compares with
    the saved run (config.given_flags); None for a Config built in code."""
    # one process, or one of torchrun's: torchrun sets RANK, LOCAL_RANK, WORLD_SIZE
    rank, local_rank, world = dist_utils.env_world()
    dist_utils.check_world(cfg, world)
    # every check before anything is written; on --resume, the saved config, device and model
    try:
        cfg, device, found, model, saved = rundir.open_run(cfg, world, given)
    except rundir.Finished as done:  # --resume of a finished run: nothing to run or write
        if rank == 0:
            print(done)
        return done.summary
    task = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad)
    # the same initial model on every rank: DDP assumes the replicas start equal
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    if model is None:  # else it is ckpt.pt's (--resume)
        cfg, model = initial_model(cfg, device, task)
    # the last check: one writer per folder (rank 0 writes)
    lock = rundir.lock_run(cfg, found) if rank == 0 else None
    summary = None
    try:
        summary = run_phases(cfg, model, task, found, saved, rank, local_rank, world, device)
    finally:  # every exit path leaves the process group (a barrier first only after a clean run)
        rundir.unlock(lock)
        dist_utils.teardown(clean=summary is not None)
    return summary


def initial_model(cfg, device, task=None):
    """A new model of --n_layer/--n_head/--n_embd, or --init_from's (whose sizes win); its
    block is 64 tokens, or what ``task``'s longest prompt and completion need if more."""
    if cfg.init_from:
        model, ck = checkpoint.load_checkpoint(cfg.init_from, device)
        return rundir.init_from_checks(cfg, model, ck), model
    # an untied output layer of N_OUT rows: the unembedding is a parameter of its own, so
    # the coupling of two tokens through it can be measured (lab/probes.py, THEORY.md 4)
    gpt = GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=cfg.n_layer,
                    n_head=cfg.n_head, n_embd=cfg.n_embd, block_size=max(
                        64, toy_tasks.longest_prompt(task) + task.max_new_tokens if task else 0))
    return cfg, GPT(gpt).to(device)


def run_phases(cfg, model, task, found, saved, rank, local_rank, world, device):
    """After every check: join the process group, write the config, SFT, RL, the summary."""
    model, raw = dist_utils.wrap(model, cfg, device, local_rank, world)
    sft_steps = 0 if cfg.init_from else cfg.sft_steps
    resolved = dict(vars(cfg), device=device, task_name=task.name, params=raw.num_params(),
                    sft_steps_run=sft_steps, torch=torch.__version__, world_size=world)
    if rank == 0:  # config.json: the run as it resolved (defaults, device, sizes, versions)
        rundir.start_writing(cfg, found, resolved, saved)
    held_out = toy_tasks.eval_problems(task, cfg.eval_size, cfg.seed)
    # every rank draws its own problems and samples: its own streams, seeded by rank
    state = checkpoint.RunState(
        draw=toy_tasks.train_sampler(task, held_out, cfg.seed + rank),
        sol_rng=random.Random(cfg.seed + 1 + rank),
        gen=torch.Generator(device=device).manual_seed(cfg.seed + rank),
        saved=saved,
    )
    # the lab's instruments, or None: --instruments=false runs the plain loop
    inst = (instruments.Instruments(cfg, state, rank == 0, task, held_out)
            if cfg.instruments else None)
    run = Run(cfg, model, raw, task, held_out, state, rundir.RunDir(cfg, raw, rank == 0), device,
              rank, world, inst, fast_decode.for_run(cfg, device))
    if state.phase == "sft" and sft_steps > 0:
        sft(run)
    rl(run)
    return summarise(run) if run.master else {}


def summarise(run):
    """The summary line of metrics.jsonl and the last printed lines."""
    cfg, s = run.cfg, run.state.sums
    mixed = s["mixed_at_start"]  # no mixed fraction without an RL step
    summary = {
        "warm_start_acc": s["acc0"],
        **({} if mixed is None else {"mixed_at_start": mixed}),
        "final_acc": s["acc"],
        "gain": s["acc"] - s["acc0"],
        "seconds": round(time.time() - run.t0, 1),
    }
    lines = run.inst.finish(summary) if run.inst else []  # the lab's: the cancellation ledger
    run.out.log({"phase": "summary", "step": cfg.rl_steps, **summary})
    run.out.close()
    print(summary_line(summary, cfg))
    for line in lines:
        print(line)
    print(f"outputs in {cfg.out_dir}/; plot the curves: python -m lab.plot {cfg.out_dir}")
    return summary


def cli(argv):
    """The command line: bad input gets one 'error: ...' line and exit status 2.
    Under torchrun only local rank 0 prints it (one line per node)."""
    quiet = os.environ.get("LOCAL_RANK", "0") != "0"
    # every failure a user can cause or meet ends in one line, never a traceback
    try:
        return main(parse_args(argv, Config, doc=__doc__), given_flags(argv))
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
