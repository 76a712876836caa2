"""train.py: SFT warm start, then critic-free RL with verifiable rewards.

What it teaches: the whole loop of GRPO-style training on a task whose answers
a program checks, read top to bottom: SFT, the RL step, the RL loop, main.

Phase 1, SFT: the cross-entropy of the teacher's solutions, briefly, so that the policy is
right *sometimes*: only groups with both correct and wrong completions carry a signal.

Phase 2, RL (THEORY.md section 1). Each step:
  1. sample B = --prompts_per_step prompts x G = --group_size completions, and
  2. reward each completion with the task's verifier (sampler.rollouts);
  3. compute advantages Â_i with the --adv estimator (advantage.py);
  4. cut the rollout batch into --minibatches mini-batches (batching.py), and for
     --epochs passes take one optimizer step per mini-batch on

         loss = sum_{i,t} norm_i * l_{i,t}(rho_{i,t}, Â_i)      (loss.policy_loss)

     with PPO ratios rho against the log-probs recorded at sampling time (one
     mini-batch and one epoch: on-policy). Each step logs the coefficients
     c_{i,t} = -d loss / d log pi(y_{i,t}) summarised as residuals (loss.py).

Micro-batches, torchrun: plumbing/dist_utils.py; the run folder, its lock, --resume:
plumbing/rundir.py and plumbing/checkpoint.py;
--diagnostics: diagnostics.py. ``python train.py --key=value ...`` (``--help``: every flag) or
``torchrun --standalone --nproc_per_node=N train.py ...``."""

import os
import random
import sys
import time
from dataclasses import dataclass, field, replace

import torch
from tqdm import tqdm

import advantage
import batching
import diagnostics
import ledger
import loss
import loss_engines
import toy_tasks
from model import GPT, GPTConfig, amp, completion_logprobs, rl_optimizer, token_entropy
from plumbing import checkpoint, dist_utils, rundir
from plumbing.config import Config, given_flags, parse_args
from plumbing.console import MIXED_START_STEPS, progress, summary_line, weak_start_hint
from plumbing.errors import CliError, fail
from sampler import evaluate, rollouts
from toy_tasks import EOS, PAD


# ----------------------------------------------------------------------------- one run

@dataclass
class Run:
    """What every phase of one run shares, made once by ``run``: the flags, the
    models, the task, the resumable state, the run folder and this process's place."""
    cfg: Config
    model: torch.nn.Module       # what backward runs through: DDP-wrapped under torchrun
    raw: GPT                     # the plain module: sampling, evaluation, checkpoints
    task: object
    held_out: list               # evaluation problems, disjoint from training
    state: checkpoint.RunState   # step, random streams, running sums: what resume restores
    out: rundir.RunDir           # metrics.jsonl and checkpoints (rank 0 writes)
    device: str
    rank: int
    world: int
    t0: float = field(default_factory=time.time)

    @property
    def master(self):  # rank 0 evaluates, logs and writes
        return self.rank == 0


# ----------------------------------------------------------------------------- the model

def initial_model(cfg, device):
    """A new model of --n_layer/--n_head/--n_embd, or --init_from's (whose sizes win)."""
    if cfg.init_from:
        model, ck = checkpoint.load_checkpoint(cfg.init_from, device)
        return rundir.init_from_checks(cfg, model, ck), model
    # an untied output layer of N_OUT rows: the unembedding is a parameter of its own, so
    # the coupling of two tokens through it can be measured (probes.py, THEORY.md 4)
    gpt = GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=cfg.n_layer,
                    n_head=cfg.n_head, n_embd=cfg.n_embd, block_size=64)
    return cfg, GPT(gpt).to(device)


# ----------------------------------------------------------------------------- phase 1: SFT

def sft_batch(task, draw, n, rng, device, flawed=0.0):
    """Prompt + solution + EOS, left-padded prompts; the loss is on the completion.
    A fraction ``flawed`` of the solutions come from the task's flawed teacher."""
    probs = [draw() for _ in range(n)]
    prompts = [toy_tasks.encode(task.prompt(p)) for p in probs]
    # a flawed teacher (one who forgets carries, say) keeps the warm start imperfect, so that
    # groups come out mixed: only a group with right and wrong rollouts has a signal in RL
    sols = [toy_tasks.encode(task.flawed(p, rng) if rng.random() < flawed
                             else task.solution(p, rng)) + [EOS] for p in probs]
    # completions are right-padded; PAD positions are masked out of the loss
    T = max(len(s) for s in sols)
    tokens = torch.tensor([s + [PAD] * (T - len(s)) for s in sols], device=device)
    return prompts, tokens, tokens != PAD


def sft(run):
    """Cross-entropy on the teacher's solutions, --sft_steps steps of --sft_batch."""
    cfg, state = run.cfg, run.state
    opt = torch.optim.AdamW(run.model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
    if state.saved:  # resumed inside SFT: the optimizer's moments continue too
        state.restore(opt, run.rank)
    # each rank takes its share of the batch; the loss below is the token mean over all ranks
    n_sft = len(dist_utils.shard(torch.arange(cfg.sft_batch, device="cpu"), run.rank, run.world))
    bar = progress(range(state.step + 1, cfg.sft_steps + 1), "sft", run.master)
    for step in bar:
        prompts, tokens, mask = sft_batch(run.task, state.draw, n_sft, state.sol_rng, run.device,
                                          cfg.sft_flawed)
        with amp(cfg, run.device):
            logp = completion_logprobs(run.model, prompts, tokens, mask, PAD)
        # all ranks' token mean; times world because DDP averages the ranks' gradients
        sft_loss = -(logp.sum() / dist_utils.all_reduce_sum(mask.sum())) * run.world
        if not torch.isfinite(sft_loss):
            raise FloatingPointError(f"SFT step {step}: loss is not finite; the run diverged "
                                     f"(try a smaller --sft_lr)")
        opt.zero_grad(set_to_none=True)
        sft_loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{sft_loss.item():.3f}")
        if bar.disable and run.master and step % max(1, cfg.sft_steps // 4) == 0:
            print(f"sft step {step}: loss {sft_loss.item():.3f}", flush=True)  # a log file: 4 lines
        run.out.log({"phase": "sft", "step": step, "loss": sft_loss.item()})
        state.step = step
        if step == cfg.sft_steps:  # the warm start: --beta's reference, and E1-E9's start
            run.out.warm_start(step)
        if step % cfg.ckpt_every == 0 or step == cfg.sft_steps:
            run.out.checkpoint(state, opt)
    bar.close()


# ----------------------------------------------------------------------------- phase 2: the RL step

def logprobs_of(net, batch, rows, cfg, hidden=False):
    """log pi(y_t | s_t) of the batch's ``rows`` under ``net``, tempered as at sampling."""
    # the same temperature as the sampler's, so that an on-policy ratio is exactly 1
    with amp(cfg, batch.mask.device.type):
        return completion_logprobs(net, [batch.prompts[i] for i in rows.tolist()],
                                   batch.tokens[rows], batch.mask[rows], PAD,
                                   cfg.temperature, return_hidden=hidden)


def whole_step_weights(plain, batch, adv, mb, parts, cfg):
    """DFPO's w~ of the step's rows, or None. w~ is a per-group statistic: once a step
    is split over micro-batches or processes, each part must use the whole step's
    (a no-grad pass over every part, summed over ranks), or the copies of a shared
    token in different parts get different weights."""
    # a step in one part sees every row of every group: policy_loss computes w~ itself
    if not (loss.OBJECTIVES[cfg.loss].group_transform and cfg.norm == "global" and parts.split):
        return None
    mask, old = batch.mask, batch.old_logprobs
    with torch.no_grad():  # w~ is detached: the transform is applied before the gradient
        ratio = torch.cat([loss.sequence_ratio(logprobs_of(plain, batch, mb[p], cfg), old[mb[p]],
                                               mask[mb[p]]) for p in parts.parts])
    # every rank computed its own rows; the sum over ranks fills in the whole step
    ratio = parts.whole(ratio)
    # --clip on a dfpo loss truncates w before the transform
    bounds = loss.clip_bounds(cfg.clip, cfg.clip_low, cfg.clip_high)
    return loss.dfpo_weights(ratio, adv[mb], batch.group[mb], cfg.loss, bounds)


def step_metrics(acc, coef, batch, adv, mb):
    """The step's logged numbers: the stats summed over parts and ranks (row-weighted
    means, the loss a sum), and the residuals of every coefficient of the step (``coef``,
    already summed over ranks)."""
    keys = sorted(acc)  # the same order on every rank, for one all-reduce
    # on the rollouts' device: NCCL reduces CUDA tensors only
    total = dist_utils.all_reduce_sum(torch.tensor([acc[k] for k in keys], dtype=torch.float64,
                                                   device=coef.device))
    out = {k: float(v) if k == "loss" else float(v) / len(mb) for k, v in zip(keys, total)}
    group, mask = batch.group[mb], batch.mask[mb]
    # how far the copies of a shared token were from cancelling in this step (loss.py)
    out["first_token_residual"] = loss.first_token_residual(coef, group)
    out["exch_residual"] = loss.exch_residual(coef, adv[mb], batch.tokens[mb], mask, group)
    return out


def on_policy_coefficients(inputs, settings, cfg):
    """c° = -d loss / d log pi of the same loss at log pi = log pi_old: every ratio 1, so no
    clip binds and an off-policy mask keeps every token."""
    # a leaf at the old log-probs: the loss there is the on-policy loss, and its gradient
    # with respect to this leaf is c°; the model's parameters are not touched
    at_old = inputs.old_logprobs.detach().clone().requires_grad_()
    entropy = None if inputs.entropy is None else inputs.entropy.detach()
    # on-policy an off-policy mask keeps every token; an entropy selection stays as it was
    keep = loss_engines.token_keep(at_old, inputs.old_logprobs, inputs.mask, inputs.adv,
                                   entropy, cfg)
    # weights=None: a DFPO transform is recomputed here, from these rows' ratios, all 1
    value, _ = loss.policy_loss(replace(inputs, new_logprobs=at_old, entropy=entropy,
                                        weights=None, keep=keep), settings)
    return loss.coefficients(value, at_old).detach().float()


def optimizer_step(model, opt, batch, adv, mb, cfg):
    """One optimizer step on mini-batch ``mb`` (indices into the batch): this rank's
    share, in micro-batches whose gradients accumulate. --norm=global: every part uses
    the step's denominators and DFPO weights (the same update however the step is
    split); --norm=local: each uses its own."""
    mask, group, old = batch.mask, batch.group, batch.old_logprobs
    # this rank's rows of the mini-batch, cut into micro-batches (plumbing/dist_utils.py)
    parts = dist_utils.StepParts(model, mb, cfg.micro_batch)
    # --norm=global: every part divides by the whole step's counts, so splitting a step
    # changes no copy's weight; --norm=local shows what per-part denominators break
    glob, plain = cfg.norm == "global", getattr(model, "module", model)
    settings = loss.LossSettings.from_config(cfg)

    def counts_of(rows, m=1):  # the denominators N, sum L, L_max of these rows
        return loss.step_counts(mask[rows], adv[rows], max_len=batch.max_len, micro_batches=m)

    # bnpo: TRL divides by the accumulation steps
    counts = counts_of(mb, len(parts) * parts.world)
    weights = whole_step_weights(plain, batch, adv, mb, parts, cfg)
    # gradients accumulate over the parts: one optimizer step, one zero_grad
    opt.zero_grad(set_to_none=True)
    coef, acc = torch.zeros(len(mb), mask.shape[1], device=mask.device), {}
    coef_on = torch.zeros_like(coef)
    for p, sync in parts:  # DDP all-reduces the gradients on the last part's backward only
        rows = mb[p]
        with sync:
            new_logp, h = logprobs_of(model, batch, rows, cfg, hidden=True)
            # token entropies only where a switch reads them (--entropy_coef, selection)
            entropy = token_entropy(plain, h, cfg.temperature) if loss_engines.needs_entropy(cfg) \
                else None
            # the tokens whose policy term keeps its gradient (None: every token)
            keep = loss_engines.token_keep(new_logp, old[rows], mask[rows], adv[rows], entropy, cfg)
            inputs = loss.LossBatch(
                new_logp, old[rows], mask[rows], adv[rows], group[rows],
                counts=counts if glob else counts_of(rows),
                weights=None if weights is None else weights[p],
                ref_logprobs=batch.ref_logprobs[rows] if cfg.beta else None,
                entropy=entropy, keep=keep)
            value, stats = loss.policy_loss(inputs, settings)
            if not torch.isfinite(value):  # stop before a NaN reaches the weights
                raise FloatingPointError("loss is not finite")
            # this part's share of the step's loss
            n_parts = 1 if glob else len(parts) * parts.world
            term = value if glob else value / n_parts
            # c_{i,t} = -d loss / d log pi: what each copy of a token receives
            coef[p] = loss.coefficients(term, new_logp).detach().float()
            # and what it would receive on-policy (every ratio 1: no clip binds), which
            # separates the objective's own weights from what reuse adds (the ledger)
            coef_on[p] = on_policy_coefficients(inputs, settings, cfg) / n_parts
            parts.backward(term)
        for k, v in dict(stats, loss=term.item()).items():  # stats: row-weighted means
            acc[k] = acc.get(k, 0.0) + (v if k == "loss" else v * len(p))
    # the clip scales the whole step: it changes no ratio between two copies' weights
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    # every coefficient of the step, on every rank
    coef, coef_on = dist_utils.all_reduce_sum(coef), dist_utils.all_reduce_sum(coef_on)
    return step_metrics(acc, coef, batch, adv, mb), (mb, coef, coef_on)


def rl_update(model, opt, batch, cfg, gen):
    """Advantages, mini-batches, epochs: the optimizer steps of one rollout batch.
    ``batch`` is the whole (all-gathered) rollout batch; rank 0 cuts it."""
    rewards, group, mask = batch.rewards, batch.group, batch.mask
    lens = mask.sum(1)
    # 3. one advantage per completion, from its own group (or batch) of rewards; fixed for
    # every epoch: the data are reused, the credit is not recomputed
    adv = advantage.advantages(rewards, group, cfg.adv, lengths=lens,
                               baseline=batch.baseline)
    logs, steps = [], []
    for _ in range(cfg.epochs):
        # 4. the scheduler decides which rollouts meet in one step, and so whether the
        # copies of a shared token are applied together (batching.py); a new cut each
        # epoch, made on rank 0 and sent to every rank so that all take the same steps
        cut = dist_utils.rank_world()[0] == 0
        mbs = dist_utils.broadcast_cut(batching.make_minibatches(
            cfg.batching, group, adv, lens, cfg.minibatches, gen) if cut else None)
        for mb in mbs:  # one optimizer step per mini-batch; off-policy after the first
            metrics, coefficients = optimizer_step(model, opt, batch, adv, mb.to(mask.device), cfg)
            logs.append(metrics)
            steps.append(coefficients)
    # the batch's line of metrics.jsonl: each number is its mean over the optimizer steps
    out = {k: sum(s[k] for s in logs) / len(logs) for k in logs[0]}
    # where the shared tokens' coefficients went, over every step of the batch
    out["ledger"] = ledger.ledger_sums(steps, adv, batch.tokens, mask, group)
    # how the last epoch's cut split the groups and the signs (logged every step)
    out["mb_stats"] = batching.minibatch_stats(mbs, group, adv, lens)
    out["steps"] = logs  # per optimizer step, in order
    return out


def evaluate_step(run, rec):
    """Held-out greedy accuracy (and, with --diagnostics, drift, entropy, pass@k) into
    the step's metrics line, and one printed line."""
    sums, cfg = run.state.sums, run.cfg
    sums["acc"] = rec["eval_acc"] = evaluate(run.raw, run.task, run.held_out, cfg, run.device)
    if cfg.diagnostics:  # drift is measured against the warm start's answers (diag_ref)
        d = diagnostics.eval_diagnostics(run.raw, run.task, run.held_out, cfg, sums["diag_ref"])
        d.pop("_ref")
        rec.update(d)
    # this step's ledger: the share of the shared tokens' coefficients that cancelled
    cancelled = f"{100 * rec['ledger_cancelled']:.0f} %" if rec["ledger_mass"] > 0 else "n/a"
    tqdm.write(f"rl step {rec['step']}: eval_acc {sums['acc']:.3f}  reward {rec['reward']:.3f}  "
               f"mixed {rec['mixed']:.2f}  shared tokens cancelled {cancelled}  "
               f"[{time.time() - run.t0:.0f}s]")


def lengths_by_outcome(batch):
    """Mean completion length (tokens, EOS included) of the right and of the wrong rollouts:
    what GRPO's 1/L_i is said to bend (Dr. GRPO: wrong ones grow). None when there are none."""
    lens, right = batch.mask.sum(1).float(), batch.rewards > 0  # rewards are 0 or 1
    mean = lambda rows: float(lens[rows].mean()) if bool(rows.any()) else None
    return {"length_correct": mean(right), "length_incorrect": mean(~right)}


def rl_step(run, opt, ref_model):
    """One RL step: rollouts, update, (diagnostics), evaluation -> its metrics line."""
    cfg, state, sums, step = run.cfg, run.state, run.state.sums, run.state.step
    run.model.train()
    # 1-2. each rank samples its share of the groups and rewards them; then every rank
    # holds the whole batch, so advantages, the cut and the denominators are global
    batch = rollouts(run.raw, run.task, state.draw, cfg, state.gen, run.device,
                     cfg.prompts_per_step // run.world)
    batch.max_len = run.task.max_new_tokens
    batch = dist_utils.gather_rollouts(batch)  # rank 0's groups first
    if ref_model is not None:  # --beta: the frozen reference's log-probs of the same tokens
        with torch.no_grad(), amp(cfg, run.device):
            batch.ref_logprobs = completion_logprobs(
                ref_model, batch.prompts, batch.tokens, batch.mask, PAD, cfg.temperature
            ).float()
    # only a group with both right and wrong rollouts carries a signal (its Â is not 0)
    mixed = 1.0 - advantage.zero_variance_fraction(batch.rewards, batch.group)
    # the learning tax is a KL at the histories a group shares: take them before the update
    before = diagnostics.tax_before(run.raw, batch) if run.master else None
    # 3-4. advantages, mini-batches, epochs: the optimizer steps of this batch
    stats = rl_update(run.model, opt, batch, cfg, state.gen)
    checkpoint.check_finite(run.raw, "after the update")  # never carry a NaN into a checkpoint
    sums_of = stats.pop("ledger")  # this batch's ledger sums (ledger.py)
    rec = {"phase": "rl", "step": step, "reward": float(batch.rewards.mean()), "mixed": mixed,
           **lengths_by_outcome(batch),
           **{k: v for k, v in stats.items() if k not in ("mb_stats", "steps")},
           **stats["mb_stats"], "ledger_mass": sums_of["mass"],
           **{f"ledger_{k}": v for k, v in ledger.ledger_shares(sums_of).items()}}
    for k, v in sums_of.items():  # the run's ledger: sums, so that its shares weigh by mass
        sums[f"ledger_{k}"] += v
    sums["ledger_steps"] += 1
    sums["ledger_mixed_steps"] += float(mixed > 0)
    if run.master:  # what the update did at the histories the group shares
        rec["tax"], rec["tax_interior"], rec["shared_dlogp"] = \
            diagnostics.learning_tax_and_shift(run.raw, batch, before)
        sums["tax_sum"] += rec["tax"]
        sums["tax_interior_sum"] += rec["tax_interior"]
        sums["shared_dlogp_sum"] += rec["shared_dlogp"]
        rec["tax_sum"], rec["tax_interior_sum"] = sums["tax_sum"], sums["tax_interior_sum"]
    if step <= MIXED_START_STEPS:  # one batch of 16 groups is a noisy estimate: average a few
        sums["mixed_start_sum"] += rec["mixed"]
        sums["mixed_at_start"] = sums["mixed_start_sum"] / step
    sums["exch_sum"] += rec["exch_residual"]  # the summary's mean
    if step == 1 and run.master and (hint := weak_start_hint(rec["mixed"], cfg)):
        tqdm.write(hint)
    if run.master and (step % cfg.eval_every == 0 or step == cfg.rl_steps):
        evaluate_step(run, rec)
    return rec


# ----------------------------------------------------------------------------- phase 2: the RL loop

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


def evaluate_warm_start(run, opt):
    """RL step 0: the warm start's accuracy (and diagnostics), before any update."""
    cfg, state = run.cfg, run.state
    state.phase, state.step = "rl", 0
    if cfg.sft_steps == 0 and not cfg.init_from:
        run.out.warm_start(0)  # the untrained start is the warm start: --beta's reference on resume
    if run.master:
        try:
            acc0 = evaluate(run.raw, run.task, run.held_out, cfg, run.device)
            diag0 = diagnostics.eval_diagnostics(run.raw, run.task, run.held_out, cfg) \
                if cfg.diagnostics else {"_ref": None}
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step 0 (evaluation of the warm start): {e}") from None
        state.sums["diag_ref"] = diag0.pop("_ref")
        run.out.log({"phase": "rl", "step": 0, "eval_acc": acc0, **diag0})
        state.sums.update(acc0=acc0, acc=acc0)
        print(f"rl step 0: eval_acc {acc0:.3f} (warm start)  [{time.time() - run.t0:.0f}s]")
    if cfg.rl_steps == 0:
        run.out.checkpoint(state, opt)


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
        state.step = step
        try:
            rec = rl_step(run, opt, ref_model)
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step {step}: {e}; the run diverged (try a smaller --lr); "
                                     f"the last good checkpoint is kept") from None
        run.out.log(rec)
        # a checkpoint every --ckpt_every steps and at the end: --resume continues from it
        if step % cfg.ckpt_every == 0 or step == cfg.rl_steps:
            run.out.checkpoint(state, opt)
        if run.master:
            bar.set_postfix(reward=f"{rec['reward']:.2f}", acc=f"{state.sums['acc']:.2f}")
    bar.close()


# ----------------------------------------------------------------------------- main

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
        **({"exch_residual_mean": s["exch_sum"] / cfg.rl_steps} if cfg.rl_steps else {}),
    }
    if s["ledger_steps"]:  # the run's ledger (the steps since a resume, for an older run)
        n = int(s["ledger_steps"])
        led = {k: s[f"ledger_{k}"] for k in ("mass", "cancelled", *ledger.LEDGER_PARTS)}
        summary.update(ledger_steps=n, ledger_mass=led["mass"],
                       ledger_mixed_steps=int(s["ledger_mixed_steps"]),
                       shared_dlogp_mean=s["shared_dlogp_sum"] / n,
                       **{f"ledger_{k}": v for k, v in ledger.ledger_shares(led).items()})
    run.out.log({"phase": "summary", "step": cfg.rl_steps, **summary})
    run.out.close()
    print(summary_line(summary, cfg))
    print(f"plot the curves: python plot.py {cfg.out_dir}")
    return summary


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
    run = Run(cfg, model, raw, task, held_out, state, rundir.RunDir(cfg, raw, rank == 0), device,
              rank, world)
    if state.phase == "sft" and sft_steps > 0:
        sft(run)
    rl(run)
    return summarise(run) if run.master else {}


def main(cfg, given=None):
    """One run of train.py: the checks, then the phases; returns the summary (rank 0).
    ``given``: the flags written on the command line, which --resume compares with
    the saved run (config.given_flags); None for a Config built in code."""
    # one process, or one of torchrun's: torchrun sets RANK, LOCAL_RANK, WORLD_SIZE
    rank, local_rank, world = dist_utils.env_world()
    dist_utils.check_world(cfg, world)
    # every check before anything is written; on --resume, the saved config, device and model
    cfg, device, found, model, saved = rundir.open_run(cfg, world, given)
    task = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad)
    # the same initial model on every rank: DDP assumes the replicas start equal
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    if model is None:  # else it is ckpt.pt's (--resume)
        cfg, model = initial_model(cfg, device)
    # the last check: one writer per folder (rank 0 writes)
    lock = rundir.lock_run(cfg, found) if rank == 0 else None
    summary = None
    try:
        summary = run_phases(cfg, model, task, found, saved, rank, local_rank, world, device)
    finally:  # every exit path leaves the process group (a barrier first only after a clean run)
        rundir.unlock(lock)
        dist_utils.teardown(clean=summary is not None)
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
