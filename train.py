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
every flag. Writes to --out_dir: config.json (the resolved config),
metrics.jsonl (one JSON object per line), warm_start.pt and ckpt.pt;
``python plot.py OUT_DIR`` draws the curves.
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
import diagnostics
import dist_utils as D
import loss as L
import toy_tasks
from config import Config, CliError, parse_args, fail
from model import GPT, GPTConfig, completion_logprobs, token_logprobs, left_pad
from sampler import sample
from toy_tasks import EOS, PAD


# ----------------------------------------------------------------------------- checkpoints

def save_checkpoint(path, model, cfg, kind, step):
    """Write atomically: a temp file in the same folder, then os.replace."""
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save({"kind": kind, "step": step, "model_cfg": vars(model.cfg),
                "task": {"task": cfg.task, "digits": cfg.digits, "scratchpad": cfg.scratchpad},
                "model": model.state_dict(), "config": vars(cfg)}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, device="cpu"):
    """Load and validate a checkpoint; raise CliError with one line if it is bad."""
    if not os.path.isfile(path):
        raise CliError(f"checkpoint {path!r} does not exist")
    try:
        ck = torch.load(path, map_location=device, weights_only=True)
        mcfg = GPTConfig(**ck["model_cfg"])
        model = GPT(mcfg).to(device)
        model.load_state_dict(ck["model"])
        ck["task"]["task"], ck["kind"]
    except Exception as e:  # truncated, corrupt, or not one of ours
        raise CliError(f"checkpoint {path!r} is corrupt or not a checkpoint of this project "
                       f"({type(e).__name__})") from None
    return model, ck


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
    mixed_txt = f"mixed groups at RL start {mixed:.2f}" if mixed is not None else "no RL steps run"
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
    if world > 1:
        backend = D.setup_device(device, local_rank, world)
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=D.TIMEOUT)
    # ----
    torch.manual_seed(cfg.seed)  # the same initial model on every rank
    random.seed(cfg.seed)
    os.makedirs(cfg.out_dir, exist_ok=True)
    task = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad)

    if cfg.init_from:
        model, ck = load_checkpoint(cfg.init_from, device)
        t = ck["task"]
        if (t["task"], t["digits"], t["scratchpad"]) != (cfg.task, cfg.digits, cfg.scratchpad):
            raise CliError(f"checkpoint was trained on task {t}, not on "
                           f"task={cfg.task} digits={cfg.digits} scratchpad={cfg.scratchpad}")
        sft_steps = 0
    else:
        mcfg = GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=cfg.n_layer, n_head=cfg.n_head,
                         n_embd=cfg.n_embd, block_size=64)
        model = GPT(mcfg).to(device)
        sft_steps = cfg.sft_steps
    if cfg.compile:  # the module itself stays as it is, so checkpoints are unchanged
        model.forward = torch.compile(model.forward, dynamic=True)
    raw = model  # sampling, evaluation and checkpoints use the plain module
    if world > 1:  # gradients are all-reduced (averaged) in backward; rl_update accounts for it
        model = DDP(model, device_ids=[local_rank] if device == "cuda" else None)
    resolved = dict(vars(cfg), device=device, task_name=task.name, params=raw.num_params(),
                    sft_steps_run=sft_steps, torch=torch.__version__, world_size=world)
    if master:
        with open(os.path.join(cfg.out_dir, "config.json"), "w") as f:
            json.dump(resolved, f, indent=1)
        print("config: " + " ".join(f"{k}={v}" for k, v in resolved.items()))

    held_out = toy_tasks.eval_problems(task, cfg.eval_size, cfg.seed)
    draw = toy_tasks.train_sampler(task, held_out, cfg.seed + rank)  # a problem stream per rank
    sol_rng = random.Random(cfg.seed + 1 + rank)
    gen = torch.Generator(device=device).manual_seed(cfg.seed + rank)
    metrics = open(os.path.join(cfg.out_dir, "metrics.jsonl"), "w") if master else None

    def log(d):
        if master:
            metrics.write(json.dumps(d) + "\n")
            metrics.flush()

    t0 = time.time()
    summary = {}
    # ---- phase 1: SFT warm start
    if sft_steps > 0:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
        bar = tqdm(range(1, sft_steps + 1), desc="sft", dynamic_ncols=True, disable=not master)
        n_sft = len(D.shard(torch.arange(cfg.sft_batch), rank, world))  # this rank's share
        for step in bar:
            prompts, tokens, mask = sft_batch(task, draw, n_sft, sol_rng, device, cfg.sft_flawed)
            with amp(cfg, device):
                logp = completion_logprobs(model, prompts, tokens, mask, PAD)
            # mean over all ranks' tokens; x world undoes DDP's average
            loss = -(logp.sum() / D.all_reduce_sum(mask.sum())) * world
            if not torch.isfinite(loss):
                raise FloatingPointError(f"SFT loss is not finite at step {step}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")
            log({"phase": "sft", "step": step, "loss": loss.item()})
        bar.close()
        if master:
            save_checkpoint(os.path.join(cfg.out_dir, "warm_start.pt"), raw, cfg, "warm_start", sft_steps)

    # ---- phase 2: RL
    acc0 = evaluate(raw, task, held_out, cfg, device) if master else float("nan")
    summary["warm_start_acc"] = acc0
    diag0 = eval_diagnostics(raw, task, held_out, cfg) if cfg.diagnostics and master else {"_ref": None}
    ref = diag0.pop("_ref")
    log({"phase": "rl", "step": 0, "eval_acc": acc0, **diag0})
    if master:
        print(f"rl step 0: eval_acc {acc0:.3f} (warm start)  [{time.time() - t0:.0f}s]")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    ref_model = None
    if cfg.beta:  # the frozen reference policy of --beta: the warm start
        ref_model = GPT(raw.cfg).to(device)
        ref_model.load_state_dict(raw.state_dict())
        ref_model.eval().requires_grad_(False)
    bar = tqdm(range(1, cfg.rl_steps + 1), desc="rl", dynamic_ncols=True, disable=not master)
    acc, tax_sum, tax_interior_sum = acc0, 0.0, 0.0
    for step in bar:
        model.train()
        batch = rollouts(raw, task, draw, cfg, gen, device, cfg.prompts_per_step // world)
        batch["max_len"] = task.max_new_tokens
        batch = D.gather_rollouts(batch)  # every rank: the whole batch, rank 0's groups first
        if ref_model is not None:
            with torch.no_grad(), amp(cfg, device):
                batch["ref_logprobs"] = completion_logprobs(ref_model, batch["prompts"], batch["tokens"],
                                                            batch["mask"], PAD, cfg.temperature).float()
        r, g = batch["rewards"], batch["group"]
        zero_var = L.zero_variance_fraction(r, g)
        if cfg.diagnostics and master:  # the learning tax: KL at histories the whole group shares
            hist = diagnostics.shared_histories(batch["tokens"], batch["mask"], g)
            inner = diagnostics.before_divergence(hist, batch["tokens"], batch["mask"], g)
            before = diagnostics.policy_at(raw, batch["prompts"], batch["tokens"], batch["mask"], hist)
        try:
            stats = rl_update(model, opt, batch, cfg, gen)
        except FloatingPointError:
            raise FloatingPointError(f"RL loss is not finite at step {step}") from None
        if cfg.diagnostics and master:
            after = diagnostics.policy_at(raw, batch["prompts"], batch["tokens"], batch["mask"], hist)
            kl = diagnostics.kl(before, after)
            stats["tax"] = float(kl.mean())  # includes the divergence point (intended learning)
            stats["tax_interior"] = float(kl[inner].mean()) if bool(inner.any()) else 0.0
            tax_sum += stats["tax"]
            tax_interior_sum += stats["tax_interior"]
            stats["tax_sum"], stats["tax_interior_sum"] = tax_sum, tax_interior_sum
        rec = {"phase": "rl", "step": step, "reward": float(r.mean()), "mixed": 1.0 - zero_var,
               "zero_var": zero_var, **{k: v for k, v in stats.items() if k not in ("mb_stats", "steps")},
               **stats["mb_stats"]}
        if step == 1:
            summary["mixed_at_start"] = rec["mixed"]
            hint = weak_start_hint(rec["mixed"], cfg)
            if hint and master:
                tqdm.write(hint)
        if master and (step % cfg.eval_every == 0 or step == cfg.rl_steps):
            acc = evaluate(raw, task, held_out, cfg, device)
            rec["eval_acc"] = acc
            if cfg.diagnostics:
                d = eval_diagnostics(raw, task, held_out, cfg, ref)
                d.pop("_ref")
                rec.update(d)
            tqdm.write(f"rl step {step}: eval_acc {acc:.3f}  reward {rec['reward']:.3f}  "
                       f"mixed {rec['mixed']:.2f}  residual_ha {rec['residual_ha']:.3f}  "
                       f"[{time.time() - t0:.0f}s]")
            save_checkpoint(os.path.join(cfg.out_dir, "ckpt.pt"), raw, cfg, "rl", step)
        log(rec)
        bar.set_postfix(reward=f"{rec['reward']:.2f}", acc=f"{acc:.2f}")
    bar.close()
    if cfg.rl_steps == 0 and master:
        save_checkpoint(os.path.join(cfg.out_dir, "ckpt.pt"), raw, cfg, "rl", 0)
    summary.update(final_acc=acc, gain=acc - acc0, seconds=round(time.time() - t0, 1))
    log({"phase": "summary", "step": cfg.rl_steps, **summary})
    if world > 1:  # ---- data parallel teardown
        dist.destroy_process_group()
    if not master:
        return summary
    metrics.close()
    print(summary_line(summary, cfg))
    print(f"plot the curves: python plot.py {cfg.out_dir}")
    return summary


if __name__ == "__main__":
    quiet = os.environ.get("LOCAL_RANK", "0") != "0"  # under torchrun one line per node
    try:
        cfg = parse_args(sys.argv[1:], Config, doc=__doc__)
        main(cfg)
    except CliError as e:
        sys.exit(2) if quiet else fail(str(e))
    except FloatingPointError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted")
