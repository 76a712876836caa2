"""train.py: SFT warm start, then critic-free RL with verifiable rewards.

What it teaches
---------------
The whole loop of GRPO-style training on a task whose answers a program checks.

Phase 1, SFT: minimise the cross-entropy of canonical solutions, briefly, so
that the policy is right *sometimes*: groups then hold both correct and wrong
completions, and only such mixed groups carry a learning signal.

Phase 2, RL. Each step:
  1. sample B = --prompts_per_step prompts x G = --group_size completions (sampler.py);
  2. reward each completion with the task's verifier (toy_tasks.py);
  3. compute group advantages A_i (loss.advantages);
  4. cut the rollout batch into --minibatches mini-batches (batching.py), and
     for --epochs passes take one optimizer step per mini-batch on
     loss.policy_loss, with PPO ratios against the log-probs recorded at
     sampling time. With one mini-batch and one epoch every step is on-policy.
     ``--beta`` adds a k3 penalty towards a frozen copy of the warm start,
     ``--entropy_coef`` an entropy bonus (both in loss.policy_loss's table).
     Each optimizer step may be taken in micro-batches (--micro_batch) and
     over several processes (torchrun, DDP); with --norm=global its update is
     the same however it is split (dist_utils.py says how).

With ``--diagnostics`` each RL step also logs the *learning tax* of THEORY.md
section 4 (the KL between the policy before and after the step's updates, at
histories that a whole group shares, and its running sum), and each evaluation
the mean token entropy, pass@1 and pass@k, and on a task with several correct
answers the log-odds between two of them and the entropy over all of them.

Usage: ``python train.py --key=value ...``, or ``torchrun --standalone
--nproc_per_node=N train.py --key=value ...``; ``python train.py --help`` lists
every flag. ``python plot.py OUT_DIR`` draws the curves. Writes to --out_dir: config.json (the resolved config: what
actually ran), metrics.jsonl (one JSON object per line), warm_start.pt (the
end of SFT) and ckpt.pt (every --ckpt_every steps of either phase, with the
state that ``--resume`` continues from exactly: checkpoint.py). An --out_dir
that holds another run is refused unless --resume or --overwrite is given.
Every input is checked before anything is written; a NaN or inf loss, logit
or weight stops the run with one line naming the phase and step.
"""

import contextlib
import json
import os
import random
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

import batching
import checkpoint as C
import diagnostics
import dist_utils as D
import loss as L
import toy_tasks
from checkpoint import load_checkpoint, save_checkpoint  # noqa: F401  (train.load_checkpoint)
from config import Config, CliError, parse_args, fail
from model import GPT, GPTConfig, completion_logprobs, token_logprobs, left_pad  # noqa: F401
from sampler import sample
from toy_tasks import EOS, PAD


# ----------------------------------------------------------------------------- helpers

def amp(cfg, device):
    """bf16 autocast on CUDA (and on CPU with --bf16=true); log-probs stay fp32."""
    on = cfg.bf16 == "true" or (cfg.bf16 == "auto" and device == "cuda")
    return torch.autocast(device_type=device, dtype=torch.bfloat16) if on else contextlib.nullcontext()


def resolve_device(name):
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise CliError("--device=cuda but no CUDA device is available")
    return name


def sft_batch(task, draw, n, rng, device, flawed=0.0):
    """Prompt + solution + EOS, left-padded prompts; the loss is on the completion.
    A fraction ``flawed`` of the solutions come from the task's flawed teacher."""
    probs = [draw() for _ in range(n)]
    prompts = [toy_tasks.encode(task.prompt(p)) for p in probs]
    sols = [toy_tasks.encode(task.flawed(p, rng) if rng.random() < flawed else task.solution(p, rng))
            + [EOS] for p in probs]
    T = max(len(s) for s in sols)
    tokens = torch.full((n, T), PAD, dtype=torch.long, device=device)
    for i, s in enumerate(sols):
        tokens[i, :len(s)] = torch.tensor(s)
    return prompts, tokens, tokens != PAD


@torch.no_grad()
def evaluate(model, task, problems, cfg, device):
    """Greedy accuracy on held-out problems."""
    prompts = [toy_tasks.encode(task.prompt(p)) for p in problems]
    with amp(cfg, device):
        out = sample(model, prompts, 1, task.max_new_tokens, temperature=0.0)
    texts = [toy_tasks.decode(t) for t in out["tokens"].tolist()]
    return sum(task.reward(p, t) for p, t in zip(problems, texts)) / len(problems)


def eval_diagnostics(model, task, held_out, cfg, ref=None, n_problems=64):
    """Entropy, pass@k, and drift since the warm start on held-out problems: the
    log-odds between two correct answers (tasks with several) and at the style
    points (tasks with reward-irrelevant choices). ``ref`` holds the warm start's
    values (None at the warm start itself, which then returns them in ``_ref``).
    Uses its own generator, so the training run is the same with or without it."""
    probs = held_out[:n_problems]
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(cfg.seed + 7)
    out = {"entropy": diagnostics.mean_token_entropy(model, task, probs),
           "pass1": diagnostics.pass_at_k_eval(model, task, probs, 2 * cfg.pass_k, 1, gen),
           f"pass{cfg.pass_k}": diagnostics.pass_at_k_eval(model, task, probs, 2 * cfg.pass_k, cfg.pass_k,
                                                           gen)}
    ref = {} if ref is None else ref
    mine = {}
    if max(len(task.answers(p)) for p in probs) > 1:
        mine["answers"] = diagnostics.answer_logprobs(model, task, probs)
        drift = diagnostics.answer_drift(mine["answers"], ref.get("answers"))
        out.update({f"answer_{k}": v for k, v in drift.items()})
    if task.style_points is not None:
        lo, prob, kinds = diagnostics.style_log_odds(model, task, held_out[:256])
        mine["style"] = lo
        out["style_log_odds"] = float(lo.mean())
        out.update(diagnostics.style_entropy(lo, prob, kinds))
        if "style" in ref:
            out.update(diagnostics.style_drift(lo, ref["style"], prob, kinds))
    out["_ref"] = mine
    return out


def rollouts(model, task, draw, cfg, gen, device, n_prompts=None):
    """Sample a rollout batch (n_prompts groups, default --prompts_per_step) and reward it."""
    problems = [draw() for _ in range(n_prompts or cfg.prompts_per_step)]
    prompts = [toy_tasks.encode(task.prompt(p)) for p in problems]
    with amp(cfg, device):
        out = sample(model, prompts, cfg.group_size, task.max_new_tokens, cfg.temperature,
                     cfg.top_k, generator=gen)
    texts = [toy_tasks.decode(t) for t in out["tokens"].tolist()]
    out["rewards"] = torch.tensor([task.reward(problems[i // cfg.group_size], t)
                                   for i, t in enumerate(texts)], device=device)
    return out


def token_entropy(model, h, temperature=1.0):
    """H(pi(.|s_t)) in nats at every completion position, differentiable (--entropy_coef)."""
    logp = torch.log_softmax(model.lm_head(h).float() / temperature, -1)
    return -(logp.exp() * logp).sum(-1)


def rl_update(model, opt, batch, cfg, gen):
    """Advantages, mini-batches, epochs: the optimizer steps of one rollout batch.
    ``batch`` is the whole (all-gathered) rollout batch; rank 0 cuts it."""
    rewards, group, mask = batch["rewards"], batch["group"], batch["mask"]
    adv = L.advantages(rewards, group, cfg.loss)
    lens = mask.sum(1)
    logs = []
    for _ in range(cfg.epochs):
        cut = D.rank_world()[0] == 0  # every rank must see rank 0's cut
        mbs = D.broadcast_cut(batching.make_minibatches(cfg.batching, group, adv, lens,
                                                        cfg.minibatches, gen) if cut else None)
        for mb in mbs:
            logs.append(optimizer_step(model, opt, batch, adv, mb.to(mask.device), cfg))
    out = {k: sum(s[k] for s in logs) / len(logs) for k in logs[0]}
    out["mb_stats"] = batching.minibatch_stats(mbs, group, adv, lens)
    out["steps"] = logs  # per optimizer step, in order
    return out


MIXED_HINT_BELOW = 0.2  # fraction of mixed groups at the first RL step
MIXED_START_STEPS = 10  # the summary's "mixed groups at RL start": mean over this many first steps


def weak_start_hint(mixed, cfg):
    """One line when too few groups are mixed for RL to learn; '' otherwise.
    Only a group with both right and wrong rollouts has a non-zero advantage."""
    if mixed >= MIXED_HINT_BELOW:
        return ""
    return (f"hint: only {100 * mixed:.0f} % of groups are mixed at the start of RL, so few carry a "
            f"learning signal; strengthen the warm start (--sft_steps=1000 or more, --sft_flawed=0.7) "
            f"or sample more per prompt (--group_size=16, --temperature=1.2)")


def summary_line(summary, cfg):
    """The last line of a run, with no NaN in it (no RL step: no mixed fraction)."""
    acc0, acc = summary["warm_start_acc"], summary["final_acc"]
    mixed = summary.get("mixed_at_start")
    mixed_txt = (f"mixed groups in the first RL steps {mixed:.2f}" if mixed is not None else "no RL steps run")
    return (f"warm start acc {acc0:.3f} -> after RL {acc:.3f} ({100 * (acc - acc0):+.1f} points); "
            f"{mixed_txt}; {summary['seconds']:.0f}s; outputs in {cfg.out_dir}/")


def optimizer_step(model, opt, batch, adv, mb, cfg):
    """One optimizer step on mini-batch ``mb`` (indices into the batch): this
    rank's share of it (dist_utils.shard), in micro-batches of --micro_batch
    rollouts whose gradients accumulate. With --norm=global every micro-batch
    uses the step's denominators and DFPO weights, so the update is the same
    however the step is split; with --norm=local each uses its own and the
    losses are averaged (see dist_utils.py)."""
    rank, world = D.rank_world()
    mask, group, old = batch["mask"], batch["group"], batch["logprobs"]
    mine = D.shard(torch.arange(len(mb), device=mb.device), rank, world)  # positions in mb
    parts = [mine[p] for p in D.micro_batches(len(mine), cfg.micro_batch)]
    glob = cfg.norm == "global"
    step_counts = lambda rows, m=1: L.step_counts(mask[rows], adv[rows], cfg.loss, max_len=batch["max_len"],
                                                  micro_batches=m)
    counts = step_counts(mb, len(parts) * world)  # bnpo: TRL divides by the accumulation steps

    def logprobs(net, rows, hidden=False):
        with amp(cfg, mask.device.type):
            return completion_logprobs(net, [batch["prompts"][i] for i in rows.tolist()],
                                       batch["tokens"][rows], mask[rows], PAD, cfg.temperature,
                                       return_hidden=hidden)

    weights = None  # DFPO's w~ is a per-group statistic: from the whole step once it is split
    if cfg.loss in ("dfpo_min", "dfpo_orth") and glob and (world > 1 or len(parts) > 1):
        with torch.no_grad():
            ratio = torch.cat([L.sequence_ratio(logprobs(getattr(model, "module", model), mb[p]),
                                                old[mb[p]], mask[mb[p]]) for p in parts])
        ratio = D.all_reduce_rows(ratio, torch.cat(parts), len(mb))
        weights = L.dfpo_weights(ratio, adv[mb], group[mb], cfg.loss,
                                 L.clip_bounds(cfg.clip, cfg.clip_low, cfg.clip_high))
    opt.zero_grad(set_to_none=True)
    coef = torch.zeros(len(mb), mask.shape[1], device=mask.device)
    acc = {}
    for j, p in enumerate(parts):
        rows = mb[p]
        last = j == len(parts) - 1  # DDP all-reduces the gradients on the last backward only
        with contextlib.nullcontext() if last else getattr(model, "no_sync", contextlib.nullcontext)():
            new_logp, h = logprobs(model, rows, hidden=True)
            entropy = token_entropy(getattr(model, "module", model), h, cfg.temperature) \
                if cfg.entropy_coef else None
            loss, stats = L.policy_loss(new_logp, old[rows], mask[rows], adv[rows], group[rows],
                                        cfg.loss, cfg.clip, cfg.clip_low, cfg.clip_high,
                                        counts if glob else step_counts(rows),
                                        dual_clip=cfg.dual_clip, beta=cfg.beta,
                                        ref_logp=batch["ref_logprobs"][rows] if cfg.beta else None,
                                        entropy_coef=cfg.entropy_coef, entropy=entropy,
                                        weights=None if weights is None else weights[p])
            if not torch.isfinite(loss):
                raise FloatingPointError("loss is not finite")
            # this part's term of the step's loss; DDP averages over ranks, so x world
            term = loss if glob else loss / (len(parts) * world)
            coef[p] = L.coefficients(term, new_logp).detach().float()
            (term * world).backward()
        for k, v in dict(stats, loss=term.item()).items():  # stats: row-weighted means
            acc[k] = acc.get(k, 0.0) + (v if k == "loss" else v * len(p))
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    keys = sorted(acc)
    total = D.all_reduce_sum(torch.tensor([acc[k] for k in keys], dtype=torch.float64))
    out = {k: float(v) if k == "loss" else float(v) / len(mb) for k, v in zip(keys, total)}
    coef = D.all_reduce_sum(coef)  # every coefficient of the step, on every rank
    out["residual"] = L.shared_residual(coef, group[mb])
    out["residual_ha"] = L.residual_ha(coef, adv[mb], batch["tokens"][mb], mask[mb], group[mb])
    return out


# ----------------------------------------------------------------------------- main

def main(cfg):
    # ---- data parallel: torchrun sets RANK, LOCAL_RANK, WORLD_SIZE; without it one process
    rank, local_rank, world = D.env_world()
    D.check_world(cfg, world)
    device = resolve_device(cfg.device)
    master = rank == 0  # evaluates, logs, writes metrics and checkpoints
    # ---- everything that can be checked is checked before anything is written
    task = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad)
    found = C.holds_run(cfg.out_dir) if os.path.isdir(cfg.out_dir) else []
    if found and not (cfg.resume or cfg.overwrite):
        raise CliError(f"--out_dir={cfg.out_dir} holds another run ({', '.join(found)}); "
                       f"continue it with --resume or replace it with --overwrite")
    if cfg.resume and "config.json" not in found:
        raise CliError(f"--resume: --out_dir={cfg.out_dir} holds no run to resume")
    state, metrics_path = None, os.path.join(cfg.out_dir, "metrics.jsonl")
    if cfg.resume:
        cfg = C.resumed_config(cfg)
        if "ckpt.pt" in found:
            model, ck = load_checkpoint(os.path.join(cfg.out_dir, "ckpt.pt"), device)
            if "resume" not in ck:
                raise CliError(f"--resume: {cfg.out_dir}/ckpt.pt holds no resume state")
            state = ck["resume"]
            have = os.path.getsize(metrics_path) if os.path.exists(metrics_path) else 0
            if have < state["metrics_bytes"]:
                raise CliError(f"--resume: {metrics_path} is shorter ({have} bytes) than its "
                               f"checkpoint says ({state['metrics_bytes']})")
    torch.manual_seed(cfg.seed)  # the same initial model on every rank
    random.seed(cfg.seed)
    sft_steps = 0 if cfg.init_from else cfg.sft_steps
    if state is not None:
        pass  # the model is ckpt.pt's
    elif cfg.init_from:
        model, ck = load_checkpoint(cfg.init_from, device)
        cfg = C.init_from_checks(cfg, model, ck)
    else:
        mcfg = GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=cfg.n_layer,
                         n_head=cfg.n_head, n_embd=cfg.n_embd, block_size=64)
        model = GPT(mcfg).to(device)
    if world > 1:
        backend = D.setup_device(device, local_rank, world)
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=D.TIMEOUT)
    if cfg.compile:  # the module itself stays as it is, so checkpoints are unchanged
        model.forward = torch.compile(model.forward, dynamic=True)
    raw = model  # sampling, evaluation and checkpoints use the plain module
    if world > 1:  # gradients are all-reduced (averaged) in backward; optimizer_step accounts for it
        model = DDP(model, device_ids=[local_rank] if device == "cuda" else None)
    resolved = dict(vars(cfg), device=device, task_name=task.name, params=raw.num_params(),
                    sft_steps_run=sft_steps, torch=torch.__version__, world_size=world)

    # ---- now write: clear stale temp files, replace (--overwrite) or continue (--resume)
    if master:
        C.clear_stale_temps(cfg.out_dir)
        if cfg.overwrite:
            for f in found:
                os.remove(os.path.join(cfg.out_dir, f))
        os.makedirs(cfg.out_dir, exist_ok=True)
        if not cfg.resume:
            C.atomic_write_text(json.dumps(resolved, indent=1), os.path.join(cfg.out_dir, "config.json"))
        print("config: " + " ".join(f"{k}={v}" for k, v in resolved.items()))
        if cfg.resume:
            os.truncate(metrics_path, state["metrics_bytes"]) if state else open(metrics_path, "w").close()
            print(f"resuming after {state['phase']} step {state['step']}" if state else
                  "resuming from the start: the run had written no checkpoint")

    held_out = toy_tasks.eval_problems(task, cfg.eval_size, cfg.seed)
    draw = toy_tasks.train_sampler(task, held_out, cfg.seed + rank)  # a problem stream per rank
    sol_rng = random.Random(cfg.seed + 1 + rank)
    gen = torch.Generator(device=device).manual_seed(cfg.seed + rank)
    metrics = open(metrics_path, "a") if master else None

    def log(d):
        if master:
            metrics.write(json.dumps(d) + "\n")
            metrics.flush()

    def save(name, kind, phase, step, opt):
        if master:
            st = C.capture(phase, step, opt, gen, draw, sol_rng, sums, metrics.tell())
            save_checkpoint(os.path.join(cfg.out_dir, name), raw, cfg, kind, step, st)

    t0 = time.time()
    sums = {"acc0": None, "acc": None, "mixed_at_start": None, "tax_sum": 0.0, "tax_interior_sum": 0.0,
            "diag_ref": None}
    phase, done = (state["phase"], state["step"]) if state else ("sft", 0)
    # ---- phase 1: SFT warm start
    if phase == "sft" and sft_steps > 0:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
        if state:
            sums = C.restore(state, opt, gen, draw, sol_rng)
        bar = tqdm(range(done + 1, sft_steps + 1), desc="sft", dynamic_ncols=True, disable=not master)
        n_sft = len(D.shard(torch.arange(cfg.sft_batch), rank, world))  # this rank's share
        for step in bar:
            prompts, tokens, mask = sft_batch(task, draw, n_sft, sol_rng, device, cfg.sft_flawed)
            with amp(cfg, device):
                logp = completion_logprobs(model, prompts, tokens, mask, PAD)
            # mean over all ranks' tokens; x world undoes DDP's average
            loss = -(logp.sum() / D.all_reduce_sum(mask.sum())) * world
            if not torch.isfinite(loss):
                raise FloatingPointError(f"SFT step {step}: loss is not finite; the run diverged "
                                         f"(try a smaller --sft_lr)")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")
            log({"phase": "sft", "step": step, "loss": loss.item()})
            if step == sft_steps and master:
                save_checkpoint(os.path.join(cfg.out_dir, "warm_start.pt"), raw, cfg, "warm_start", step)
            if step % cfg.ckpt_every == 0 or step == sft_steps:
                save("ckpt.pt", "sft", "sft", step, opt)
        bar.close()

    # ---- phase 2: RL
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    ref_model = None
    if cfg.beta:  # the frozen reference policy of --beta: the warm start
        ref_model = GPT(raw.cfg).to(device)
        ref_model.load_state_dict(raw.state_dict() if phase != "rl" else
                                  load_checkpoint(warm_start_path(cfg), device)[0].state_dict())
        ref_model.eval().requires_grad_(False)
    if phase == "rl":
        sums = C.restore(state, opt, gen, draw, sol_rng)
    else:
        done = 0
        if master:
            try:
                acc0 = evaluate(raw, task, held_out, cfg, device)
                diag0 = eval_diagnostics(raw, task, held_out, cfg) if cfg.diagnostics else {"_ref": None}
            except FloatingPointError as e:
                raise FloatingPointError(f"RL step 0 (evaluation of the warm start): {e}") from None
            sums["diag_ref"] = diag0.pop("_ref")
            log({"phase": "rl", "step": 0, "eval_acc": acc0, **diag0})
            sums.update(acc0=acc0, acc=acc0)
            print(f"rl step 0: eval_acc {acc0:.3f} (warm start)  [{time.time() - t0:.0f}s]")
        if cfg.rl_steps == 0:
            save("ckpt.pt", "rl", "rl", 0, opt)
    bar = tqdm(range(done + 1, cfg.rl_steps + 1), desc="rl", dynamic_ncols=True, disable=not master)
    for step in bar:
        try:
            rec = rl_step(model, raw, opt, ref_model, task, draw, cfg, gen, device, held_out, sums, step,
                          t0, master)
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step {step}: {e}; the run diverged (try a smaller --lr); "
                                     f"the last good checkpoint is kept") from None
        log(rec)
        if step % cfg.ckpt_every == 0 or step == cfg.rl_steps:
            save("ckpt.pt", "rl", "rl", step, opt)
        if master:
            bar.set_postfix(reward=f"{rec['reward']:.2f}", acc=f"{sums['acc']:.2f}")
    bar.close()
    if world > 1:  # ---- data parallel teardown
        dist.destroy_process_group()
    if not master:
        return {}
    acc, acc0 = sums["acc"], sums["acc0"]
    summary = {"warm_start_acc": acc0}
    if sums["mixed_at_start"] is not None:
        summary["mixed_at_start"] = sums["mixed_at_start"]
    summary.update(final_acc=acc, gain=acc - acc0, seconds=round(time.time() - t0, 1))
    log({"phase": "summary", "step": cfg.rl_steps, **summary})
    metrics.close()
    print(summary_line(summary, cfg))
    print(f"plot the curves: python plot.py {cfg.out_dir}")
    return summary


def warm_start_path(cfg):
    """The warm start of a run: its own warm_start.pt, or the --init_from checkpoint."""
    return cfg.init_from or os.path.join(cfg.out_dir, "warm_start.pt")


def rl_step(model, raw, opt, ref_model, task, draw, cfg, gen, device, held_out, sums, step, t0, master):
    """One RL step: rollouts, update, (diagnostics), evaluation -> its metrics line."""
    model.train()
    batch = rollouts(raw, task, draw, cfg, gen, device, cfg.prompts_per_step // D.rank_world()[1])
    batch["max_len"] = task.max_new_tokens
    batch = D.gather_rollouts(batch)  # every rank: the whole batch, rank 0's groups first
    if ref_model is not None:
        with torch.no_grad(), amp(cfg, device):
            batch["ref_logprobs"] = completion_logprobs(ref_model, batch["prompts"], batch["tokens"],
                                                        batch["mask"], PAD, cfg.temperature).float()
    r, g = batch["rewards"], batch["group"]
    zero_var = L.zero_variance_fraction(r, g)
    diag = cfg.diagnostics and master
    if diag:  # the learning tax: KL at histories the whole group shares
        hist = diagnostics.shared_histories(batch["tokens"], batch["mask"], g)
        inner = diagnostics.before_divergence(hist, batch["tokens"], batch["mask"], g)
        before = diagnostics.policy_at(raw, batch["prompts"], batch["tokens"], batch["mask"], hist)
    stats = rl_update(model, opt, batch, cfg, gen)
    C.check_finite(raw, "after the update")
    if diag:
        after = diagnostics.policy_at(raw, batch["prompts"], batch["tokens"], batch["mask"], hist)
        kl = diagnostics.kl(before, after)
        stats["tax"] = float(kl.mean())  # includes the divergence point (intended learning)
        stats["tax_interior"] = float(kl[inner].mean()) if bool(inner.any()) else 0.0
        sums["tax_sum"] += stats["tax"]
        sums["tax_interior_sum"] += stats["tax_interior"]
        stats["tax_sum"], stats["tax_interior_sum"] = sums["tax_sum"], sums["tax_interior_sum"]
    rec = {"phase": "rl", "step": step, "reward": float(r.mean()), "mixed": 1.0 - zero_var,
           "zero_var": zero_var, **{k: v for k, v in stats.items() if k not in ("mb_stats", "steps")},
           **stats["mb_stats"]}
    if step <= MIXED_START_STEPS:  # one batch of 16 groups is a noisy estimate: average a few
        sums["mixed_start_sum"] = sums.get("mixed_start_sum", 0.0) + rec["mixed"]
        sums["mixed_at_start"] = sums["mixed_start_sum"] / step
    if step == 1:
        hint = weak_start_hint(rec["mixed"], cfg)
        if hint and master:
            tqdm.write(hint)
    if master and (step % cfg.eval_every == 0 or step == cfg.rl_steps):
        sums["acc"] = rec["eval_acc"] = evaluate(raw, task, held_out, cfg, device)
        if cfg.diagnostics:
            d = eval_diagnostics(raw, task, held_out, cfg, sums["diag_ref"])
            d.pop("_ref")
            rec.update(d)
        tqdm.write(f"rl step {step}: eval_acc {sums['acc']:.3f}  reward {rec['reward']:.3f}  "
                   f"mixed {rec['mixed']:.2f}  residual_ha {rec['residual_ha']:.3f}  "
                   f"[{time.time() - t0:.0f}s]")
    return rec


def cli(argv):
    """The command line: bad input gets one 'error: ...' line and exit status 2.
    Under torchrun only local rank 0 prints it (one line per node)."""
    quiet = os.environ.get("LOCAL_RANK", "0") != "0"
    try:
        return main(parse_args(argv, Config, doc=__doc__))
    except CliError as e:
        sys.exit(2) if quiet else fail(str(e))
    except FloatingPointError as e:
        fail(str(e))
    except OSError as e:  # a disk that fills up, a folder that vanishes
        fail(f"{e.strerror or type(e).__name__}: {e.filename or ''}".rstrip(": "))
    except KeyboardInterrupt:
        fail("interrupted")


if __name__ == "__main__":
    cli(sys.argv[1:])
