"""train.py: SFT warm start, then critic-free RL with verifiable rewards (GRPO and its kin).

What it teaches: the whole loop, read top to bottom, as in nanoGPT's train.py.

Phase 1, SFT: the cross-entropy of a teacher's solutions, briefly, so that the policy is
right *sometimes*: only a group with both right and wrong completions carries a signal.

Phase 2, RL (THEORY.md section 1). Each RL step:
  1. sample B = --prompts_per_step prompts x G = --group_size completions (sampler.py);
  2. reward each completion with the task's verifier (toy_tasks.py);
  3. one advantage Â_i per completion, from its group's rewards (loss.advantages);
  4. cut the rollout batch into --minibatches mini-batches (batching.py), and for
     --epochs passes take one optimizer step per mini-batch on the objective, e.g.

         loss = -1/N sum_i 1/L_i sum_t min(rho_{i,t} Â_i, clip(rho_{i,t}) Â_i)   (loss.grpo)

     with rho the ratio to the policy that sampled (1 on the first step: on-policy);
  5. log, and every --eval_every steps evaluate on held-out problems.

Every step keeps c_{i,t} = -d loss / d log pi(y_{i,t}), the coefficient each token received:
what cancels or not between the copies of a shared token. The lab (lab/, one folder away)
reads the rollouts and these coefficients and measures cancellation; --instruments=false
switches it off. Plumbing a reader can skip: plumbing/ (the flags, the run folder and
--resume, torchrun and micro-batches). ``python train.py --key=value ...`` (``--help``).
"""

import math
import os
import random
import sys
import time

import torch
from tqdm import tqdm

import batching
import lab.estimators
import lab.instruments
import lab.objectives
import loss
import toy_tasks
from model import GPT, GPTConfig, amp, completion_logprobs, rl_optimizer
from plumbing import checkpoint, dist_utils, rundir
from plumbing.config import Config, given_flags, parse_args
from plumbing.console import MIXED_START_STEPS, progress, summary_line, weak_start_hint
from plumbing.errors import CliError, fail
from plumbing.rundir import Run
from sampler import evaluate, rollouts
from toy_tasks import EOS, PAD


# ----------------------------------------------------------------------------- the model

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


# ----------------------------------------------------------------------------- phase 1: SFT

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


# ----------------------------------------------------------------------------- phase 2: the RL step

def logprobs_of(net, batch, rows, cfg):
    """log pi(y_t | s_t) of the batch's ``rows`` (a tensor on the host) under ``net``, tempered
    as at sampling (so that an on-policy ratio is exactly 1), and the hidden states that
    produced them."""
    with amp(cfg, batch.mask.device.type):
        return completion_logprobs(net, [batch.prompts[i] for i in rows.tolist()],
                                   batch.tokens[rows], batch.mask[rows], PAD,
                                   cfg.temperature, return_hidden=True)


def part_loss(cfg, plain, hidden, batch, rows, logp, adv, shared):
    """The loss of ``rows`` (one part of a step) and its stats; and, for the lab, the same
    loss as a function of the log-probs with every ratio 1 (the on-policy coefficients)."""
    args = (batch.old_logprobs[rows], batch.mask[rows], adv[rows], batch.group[rows])
    objective = lab.objectives.lesson_objective(cfg)  # loss.grpo for --loss=grpo, clip bound in
    if objective is not None:  # the lesson's own function: loss.grpo in the demo
        value, clip_frac = objective(logp, *args, shared)
        on_policy = dict(shared, weights=None)  # DFPO: w~ of the ratios at pi_old, all 1
        return value, {"clip_frac": clip_frac}, lambda lp: objective(lp, *args, on_policy)[0]
    # another --loss or --adv, or a switch: the engines' catalogue, built on loss.py's pieces
    return lab.objectives.part_loss(cfg, plain, hidden, batch.ref_logprobs[rows] if cfg.beta
                                    else None, logp, *args, shared)


def optimizer_step(model, opt, batch, adv, mb, cfg, inst=None):
    """One optimizer step on mini-batch ``mb`` (indices into the batch). Returns its logged
    numbers and its coefficients c_{i,t} [len(mb), T], summed over processes."""
    mask = batch.mask
    # this process's rows of mb, cut into micro-batches whose gradients add up; every part
    # shares the whole step's denominators and DFPO weights (plumbing/dist_utils.py)
    parts = dist_utils.StepParts(model, mb, cfg)
    shared = parts.shared(batch, adv, cfg, lambda p: logprobs_of(parts.plain, batch, mb[p], cfg))
    # c_{i,t} of every row of the step, filled part by part; acc: the logged numbers
    coef, acc = torch.zeros(len(mb), mask.shape[1], device=mask.device), {}
    if inst:
        inst.start_step(len(mb), mask.shape[1], mask.device)
    # gradients accumulate over the parts: one zero_grad, one optimizer step
    opt.zero_grad(set_to_none=True)
    for p, sync in parts:  # one part unless --micro_batch or torchrun split the step
        with sync:
            logp, hidden = logprobs_of(model, batch, mb[p], cfg)
            logp.retain_grad()  # keep d loss / d log pi from the backward: the coefficients
            value, stats, loss_at = part_loss(cfg, parts.plain, hidden, batch, mb[p], logp, adv,
                                              shared(p))
            stats["finite"] = torch.isfinite(value)  # read with the step's numbers, below
            term = parts.term(value)  # this part's share of the step's loss
            parts.backward(term)
        coef[p] = parts.coefficients(logp.grad)  # c_{i,t} = -d loss / d log pi(y_{i,t})
        if inst:  # the lab: the ratios, and what c would be on-policy (lab/instruments.py)
            stats.update(inst.part(p, logp, batch.old_logprobs[mb[p]], mask[mb[p]], loss_at,
                                   parts.n_parts))
        # kept as tensors and read back once per step (each read makes a GPU wait)
        for k, v in dict(stats, loss=term.detach()).items():  # stats: row-weighted means
            v = torch.as_tensor(v, dtype=torch.float64, device=mask.device)
            acc[k] = acc.get(k, 0.0) + (v if k == "loss" else v * len(p))
    out = dist_utils.step_means(acc, len(mb), coef.device)
    if out.pop("finite") < 1:  # stop before a NaN reaches the weights
        raise FloatingPointError("loss is not finite")
    # the clip scales the whole step: it changes no ratio between two copies' weights
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    coef = dist_utils.all_reduce_sum(coef)  # every coefficient of the step, on every rank
    if inst:  # how far the step's copies of each shared token were from cancelling
        out.update(inst.step(coef, batch, adv, mb))
    return out, coef


def rl_update(model, opt, batch, cfg, gen, inst=None):
    """Advantages, mini-batches, epochs: the optimizer steps of one rollout batch.
    ``batch`` is the whole (all-gathered) rollout batch; rank 0 cuts it."""
    rewards, group, mask = batch.rewards, batch.group, batch.mask
    # 3. one advantage per completion, from its own group of rewards; fixed for every epoch:
    # the data are reused, the credit is not recomputed
    if lab.objectives.lesson_objective(cfg):  # GRPO: (r - mu_g)/(sigma_g + eps); Dr. GRPO: r - mu_g
        adv = loss.advantages(rewards, group, scale=cfg.adv == "grpo")
    else:  # the engines' estimators (lab/estimators.py)
        adv = lab.estimators.advantages(rewards, group, cfg.adv, lengths=mask.sum(1),
                                        baseline=batch.baseline)
    logs = []  # each optimizer step's numbers
    for _ in range(cfg.epochs):
        # 4. the scheduler decides which rollouts meet in one step, and so whether the copies
        # of a shared token are applied together (batching.py); a new cut each epoch, made
        # on rank 0 and sent to every rank so that all take the same steps
        cut = dist_utils.on_rank0(lambda: batching.make_minibatches(
            cfg.batching, group, adv, mask.sum(1), cfg.minibatches, gen))
        for mb in cut:  # one optimizer step per mini-batch; off-policy after the first
            metrics, _ = optimizer_step(model, opt, batch, adv, mb, cfg, inst)
            logs.append(metrics)
    # the batch's line of metrics.jsonl: each number is its mean over the optimizer steps
    out = {k: sum(s[k] for s in logs) / len(logs) for k in logs[0]}
    if inst:  # the lab: this batch's cancellation ledger, and how the last cut split it
        out.update(inst.update(batch, adv, cut))
    return dict(out, steps=logs)  # and each optimizer step's numbers, for a caller


def rl_step(run, opt, ref_model):
    """One RL step: rollouts and rewards, the update, evaluation -> its metrics line."""
    cfg, state, step, inst = run.cfg, run.state, run.state.step, run.inst
    run.model.train()  # (the sampler switches to eval mode and back by itself)
    # 1-2. each process samples its share of the groups and rewards them; then every one
    # holds the whole batch, so that advantages, the cut and the denominators are global
    batch = rollouts(run.raw, run.task, state.draw, cfg, state.gen, run.device,
                     cfg.prompts_per_step // run.world)
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
    if inst:  # the lab looks at the rollouts before the update changes the policy
        rec.update(inst.rollouts(run.raw, batch))
    # 3-4. advantages, mini-batches, epochs: the optimizer steps of this batch
    out = rl_update(run.model, opt, batch, cfg, state.gen, inst)
    checkpoint.check_finite(run.raw, "after the update")  # never carry a NaN into a checkpoint
    rec.update({k: v for k, v in out.items() if k != "steps"})
    if inst:  # the lab: what the update did at the histories each group shares
        rec.update(inst.after(run.raw, batch, mixed, rec))
    if step <= MIXED_START_STEPS:  # one batch of 16 groups is a noisy estimate: average a few
        state.sums["mixed_start_sum"] += mixed
        state.sums["mixed_at_start"] = state.sums["mixed_start_sum"] / step
    if step == 1 and run.master and (hint := weak_start_hint(mixed, cfg)):
        tqdm.write(hint)
    # 5. held-out greedy accuracy every --eval_every steps
    if run.master and (step % cfg.eval_every == 0 or step == cfg.rl_steps):
        state.sums["acc"] = rec["eval_acc"] = evaluate(run.raw, run.task, run.held_out, cfg,
                                                       run.device)
        if inst:
            rec.update(inst.evaluation(run.raw, run.task, run.held_out))
        cancelled = inst.cancelled_text(rec) if inst else ""
        tqdm.write(f"rl step {step}: eval_acc {rec['eval_acc']:.3f}  reward {rec['reward']:.3f}  "
                   f"mixed {mixed:.2f}{cancelled}  [{time.time() - run.t0:.0f}s]")
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
            acc0 = evaluate(run.raw, run.task, run.held_out, cfg, run.device)
            diag0 = run.inst.evaluation(run.raw, run.task, run.held_out) if run.inst else {}
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step 0 (evaluation of the warm start): {e}") from None
        run.out.log({"phase": "rl", "step": 0, "eval_acc": acc0, **diag0})
        state.sums.update(acc0=acc0, acc=acc0)
        print(f"rl step 0: eval_acc {acc0:.3f} (warm start)  [{time.time() - run.t0:.0f}s]")
        print(LEGEND + (LEGEND_LAB if run.inst else ""))
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
        state.step = step  # set first: a checkpoint saves the step that has just finished
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
        **(run.inst.summary() if run.inst else {}),
    }
    run.out.log({"phase": "summary", "step": cfg.rl_steps, **summary})
    run.out.close()
    print(summary_line(summary, cfg))
    for line in run.inst.lines(summary) if run.inst else []:  # the cancellation ledger
        print(line)
    print(f"outputs in {cfg.out_dir}/; plot the curves: python -m lab.plot {cfg.out_dir}")
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
    inst = lab.instruments.Instruments(cfg, state, rank == 0) if cfg.instruments else None
    run = Run(cfg, model, raw, task, held_out, state, rundir.RunDir(cfg, raw, rank == 0), device,
              rank, world, inst)
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
