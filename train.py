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

With ``--diagnostics`` each RL step also logs the *learning tax* of DESIGN.md
section 4 (the KL between the policy before and after the step's updates, at
histories that a whole group shares, and its running sum), and each evaluation
the mean token entropy, pass@1 and pass@k, and on a task with several correct
answers the log-odds between two of them and the entropy over all of them.

Usage: ``python train.py --key=value ...``; ``python train.py --help`` lists
every flag. Writes to --out_dir: config.json (the resolved config: what
actually ran), metrics.jsonl (one JSON object per line), warm_start.pt (the
end of SFT) and ckpt.pt (every --ckpt_every steps of either phase, with the
state that ``--resume`` continues from exactly: checkpoint.py). An --out_dir
that holds another run is refused unless --resume or --overwrite is given.
Every input is checked before anything is written; a NaN or inf loss, logit
or weight stops the run with one line naming the phase and step.
"""

import contextlib
import json
from dataclasses import fields, replace
import os
import random
import sys
import time

import torch
from tqdm import tqdm

import batching
import diagnostics
import loss as L
import toy_tasks
import checkpoint as C
from checkpoint import load_checkpoint, save_checkpoint  # noqa: F401  (train.load_checkpoint)
from config import Config, CliError, parse_args, fail, validate
from model import GPT, GPTConfig, completion_logprobs, token_logprobs, left_pad
from sampler import sample
from toy_tasks import EOS, PAD


# ----------------------------------------------------------------------------- checkpoints
# (checkpoint.py: atomic writes, the schema, the resume state; re-exported here)

RUN_FILES = ("config.json", "metrics.jsonl", "ckpt.pt", "warm_start.pt")
KEEP = ("out_dir", "resume", "overwrite")  # flags a resumed run may change


def holds_run(out_dir):
    """The files of a run already in out_dir."""
    return [f for f in RUN_FILES if os.path.exists(os.path.join(out_dir, f))]


def resumed_config(cfg):
    """The config of the run in cfg.out_dir. A flag that differs from both the default
    and that run's value is an error: --resume continues the run as it was configured."""
    path = os.path.join(cfg.out_dir, "config.json")
    try:
        saved = json.load(open(path))
        assert isinstance(saved, dict) and {"task", "seed", "out_dir"} <= set(saved)
    except (OSError, ValueError, AssertionError):
        raise CliError(f"--resume: {path} is missing or not a config of this project") from None
    values = {}
    for f in fields(Config):
        mine, default = getattr(cfg, f.name), f.default
        if f.name in KEEP or f.name not in saved:
            values[f.name] = mine
        elif mine == saved[f.name] or mine == default:
            values[f.name] = saved[f.name]
        else:
            raise CliError(f"--resume continues the run as configured in {path}, where "
                           f"{f.name}={saved[f.name]}; drop --{f.name}={mine}")
    new = Config(**values)
    validate(new)
    return new


def init_from_checks(cfg, model, ck):
    """--init_from: the task must match; model sizes come from the checkpoint; SFT flags
    are ignored (a warning), size flags that contradict the checkpoint are an error."""
    t = ck["task"]
    if (t["task"], t["digits"], t["scratchpad"]) != (cfg.task, cfg.digits, cfg.scratchpad):
        raise CliError(f"checkpoint was trained on task {t}, not on "
                       f"task={cfg.task} digits={cfg.digits} scratchpad={cfg.scratchpad}")
    for k in ("n_layer", "n_head", "n_embd"):
        mine, theirs = getattr(cfg, k), getattr(model.cfg, k)
        if mine != theirs and mine != getattr(Config, k):
            raise CliError(f"--{k}={mine} contradicts --init_from={cfg.init_from} ({k}={theirs}); "
                           f"model sizes come from the checkpoint")
    ignored = [k for k in ("sft_steps", "sft_batch", "sft_lr", "sft_flawed")
               if getattr(cfg, k) != getattr(Config, k)]
    if ignored:
        print(f"warning: {', '.join('--' + k for k in ignored)} ignored: --init_from skips SFT",
              file=sys.stderr)
    return replace(cfg, n_layer=model.cfg.n_layer, n_head=model.cfg.n_head, n_embd=model.cfg.n_embd)


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


def eval_diagnostics(model, task, held_out, cfg, n_problems=64):
    """Entropy, pass@k and (several correct answers) drift on held-out problems.
    Uses its own generator, so the training run is the same with or without it."""
    probs = held_out[:n_problems]
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(cfg.seed + 7)
    out = {"entropy": diagnostics.mean_token_entropy(model, task, probs),
           "pass1": diagnostics.pass_at_k_eval(model, task, probs, 2 * cfg.pass_k, 1, gen),
           f"pass{cfg.pass_k}": diagnostics.pass_at_k_eval(model, task, probs, 2 * cfg.pass_k, cfg.pass_k,
                                                           gen)}
    if max(len(task.answers(p)) for p in probs) > 1:
        drift = diagnostics.answer_drift(diagnostics.answer_logprobs(model, task, probs))
        out.update({f"answer_{k}": v for k, v in drift.items()})
    return out


def rollouts(model, task, draw, cfg, gen, device):
    """Sample a rollout batch and reward it."""
    problems = [draw() for _ in range(cfg.prompts_per_step)]
    prompts = [toy_tasks.encode(task.prompt(p)) for p in problems]
    with amp(cfg, device):
        out = sample(model, prompts, cfg.group_size, task.max_new_tokens, cfg.temperature,
                     cfg.top_k, generator=gen)
    texts = [toy_tasks.decode(t) for t in out["tokens"].tolist()]
    out["rewards"] = torch.tensor([task.reward(problems[i // cfg.group_size], t)
                                   for i, t in enumerate(texts)], device=device)
    return out


def rl_update(model, opt, batch, cfg, gen):
    """Advantages, mini-batches, epochs: the optimizer steps of one rollout batch."""
    rewards, group, mask = batch["rewards"], batch["group"], batch["mask"]
    adv = L.advantages(rewards, group, cfg.loss)
    lens = mask.sum(1)
    logs = []
    for _ in range(cfg.epochs):
        mbs = batching.make_minibatches(cfg.batching, group, adv, lens, cfg.minibatches, gen)
        for mb in mbs:
            idx = mb.tolist()
            prompts = [batch["prompts"][i] for i in idx]
            with amp(cfg, mask.device.type):
                new_logp = completion_logprobs(model, prompts, batch["tokens"][mb], mask[mb], PAD,
                                               cfg.temperature)
            counts = L.step_counts(mask[mb], adv[mb], cfg.loss, max_len=batch["max_len"])
            loss, stats = L.policy_loss(new_logp, batch["logprobs"][mb], mask[mb], adv[mb],
                                        group[mb], cfg.loss, cfg.clip, cfg.clip_low,
                                        cfg.clip_high, counts)
            stats["residual"] = L.shared_residual(L.coefficients(loss, new_logp), group[mb])
            if not torch.isfinite(loss):
                raise FloatingPointError("loss is not finite")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            stats["loss"] = loss.item()
            logs.append(stats)
    out = {k: sum(s[k] for s in logs) / len(logs) for k in logs[0]}
    out["mb_stats"] = batching.minibatch_stats(mbs, group, adv, lens)
    out["steps"] = logs  # per optimizer step, in order
    return out


# ----------------------------------------------------------------------------- main

def main(cfg):
    # ---- everything that can be checked is checked before anything is written
    device = resolve_device(cfg.device)
    task = toy_tasks.make_task(cfg.task, cfg.digits, cfg.scratchpad)
    found = holds_run(cfg.out_dir) if os.path.isdir(cfg.out_dir) else []
    if found and not (cfg.resume or cfg.overwrite):
        raise CliError(f"--out_dir={cfg.out_dir} holds another run ({', '.join(found)}); "
                       f"continue it with --resume or replace it with --overwrite")
    if cfg.resume and "config.json" not in found:
        raise CliError(f"--resume: --out_dir={cfg.out_dir} holds no run to resume")
    state, metrics_path = None, os.path.join(cfg.out_dir, "metrics.jsonl")
    if cfg.resume:
        cfg = resumed_config(cfg)
        if "ckpt.pt" in found:
            model, ck = load_checkpoint(os.path.join(cfg.out_dir, "ckpt.pt"), device)
            if "resume" not in ck:
                raise CliError(f"--resume: {cfg.out_dir}/ckpt.pt holds no resume state")
            state = ck["resume"]
            have = os.path.getsize(metrics_path) if os.path.exists(metrics_path) else 0
            if have < state["metrics_bytes"]:
                raise CliError(f"--resume: {metrics_path} is shorter ({have} bytes) than its "
                               f"checkpoint says ({state['metrics_bytes']})")
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    sft_steps = 0 if cfg.init_from else cfg.sft_steps
    if state is not None:
        pass  # the model is ckpt.pt's
    elif cfg.init_from:
        model, ck = load_checkpoint(cfg.init_from, device)
        cfg = init_from_checks(cfg, model, ck)
    else:
        mcfg = GPTConfig(vocab_size=toy_tasks.VOCAB_SIZE, n_out=toy_tasks.N_OUT, n_layer=cfg.n_layer,
                         n_head=cfg.n_head, n_embd=cfg.n_embd, block_size=64)
        model = GPT(mcfg).to(device)
    if cfg.compile:  # the module itself stays as it is, so checkpoints are unchanged
        model.forward = torch.compile(model.forward, dynamic=True)
    resolved = dict(vars(cfg), device=device, task_name=task.name, params=model.num_params(),
                    sft_steps_run=sft_steps, torch=torch.__version__)

    # ---- now write: clear stale temp files, replace (--overwrite) or continue (--resume)
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
    draw = toy_tasks.train_sampler(task, held_out, cfg.seed)
    sol_rng = random.Random(cfg.seed + 1)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    metrics = open(metrics_path, "a")

    def log(d):
        metrics.write(json.dumps(d) + "\n")
        metrics.flush()

    def save(name, kind, phase, step, opt):
        st = C.capture(phase, step, opt, gen, draw, sol_rng, sums, metrics.tell())
        save_checkpoint(os.path.join(cfg.out_dir, name), model, cfg, kind, step, st)

    t0 = time.time()
    sums = {"acc0": None, "acc": None, "mixed_at_start": None, "tax_sum": 0.0}
    phase, done = (state["phase"], state["step"]) if state else ("sft", 0)
    # ---- phase 1: SFT warm start
    if phase == "sft" and sft_steps > 0:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
        if state:
            sums = C.restore(state, opt, gen, draw, sol_rng)
        bar = tqdm(range(done + 1, sft_steps + 1), desc="sft", dynamic_ncols=True)
        for step in bar:
            prompts, tokens, mask = sft_batch(task, draw, cfg.sft_batch, sol_rng, device, cfg.sft_flawed)
            with amp(cfg, device):
                logp = completion_logprobs(model, prompts, tokens, mask, PAD)
            loss = -(logp.sum() / mask.sum())
            if not torch.isfinite(loss):
                raise FloatingPointError(f"SFT step {step}: loss is not finite; the run diverged "
                                         f"(try a smaller --sft_lr)")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")
            log({"phase": "sft", "step": step, "loss": loss.item()})
            if step == sft_steps:
                save_checkpoint(os.path.join(cfg.out_dir, "warm_start.pt"), model, cfg, "warm_start", step)
            if step % cfg.ckpt_every == 0 or step == sft_steps:
                save("ckpt.pt", "sft", "sft", step, opt)
        bar.close()

    # ---- phase 2: RL
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
    if phase == "rl":
        sums = C.restore(state, opt, gen, draw, sol_rng)
    else:
        done = 0
        try:
            acc0 = evaluate(model, task, held_out, cfg, device)
            log({"phase": "rl", "step": 0, "eval_acc": acc0,
                 **(eval_diagnostics(model, task, held_out, cfg) if cfg.diagnostics else {})})
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step 0 (evaluation of the warm start): {e}") from None
        sums.update(acc0=acc0, acc=acc0)
        print(f"rl step 0: eval_acc {acc0:.3f} (warm start)  [{time.time() - t0:.0f}s]")
        if cfg.rl_steps == 0:
            save("ckpt.pt", "rl", "rl", 0, opt)
    bar = tqdm(range(done + 1, cfg.rl_steps + 1), desc="rl", dynamic_ncols=True)
    for step in bar:
        try:
            rec = rl_step(model, opt, task, draw, cfg, gen, device, held_out, sums, step, t0)
        except FloatingPointError as e:
            raise FloatingPointError(f"RL step {step}: {e}; the run diverged (try a smaller --lr); "
                                     f"the last good checkpoint is kept") from None
        log(rec)
        if step % cfg.ckpt_every == 0 or step == cfg.rl_steps:
            save("ckpt.pt", "rl", "rl", step, opt)
        bar.set_postfix(reward=f"{rec['reward']:.2f}", acc=f"{sums['acc']:.2f}")
    bar.close()
    acc, acc0 = sums["acc"], sums["acc0"]
    summary = {"warm_start_acc": acc0}
    if sums["mixed_at_start"] is not None:
        summary["mixed_at_start"] = sums["mixed_at_start"]
    summary.update(final_acc=acc, gain=acc - acc0, seconds=round(time.time() - t0, 1))
    log({"phase": "summary", "step": cfg.rl_steps, **summary})
    metrics.close()
    print(f"warm start acc {acc0:.3f} -> after RL {acc:.3f} ({100 * (acc - acc0):+.1f} points); "
          f"mixed groups at RL start {summary.get('mixed_at_start', float('nan')):.2f}; "
          f"{summary['seconds']:.0f}s; outputs in {cfg.out_dir}/")
    return summary


def rl_step(model, opt, task, draw, cfg, gen, device, held_out, sums, step, t0):
    """One RL step: rollouts, update, (diagnostics), evaluation -> its metrics line."""
    model.train()
    batch = rollouts(model, task, draw, cfg, gen, device)
    batch["max_len"] = task.max_new_tokens
    r, g = batch["rewards"], batch["group"]
    zero_var = L.zero_variance_fraction(r, g)
    if cfg.diagnostics:
        hist = diagnostics.shared_histories(batch["tokens"], batch["mask"], g)
        before = diagnostics.policy_at(model, batch["prompts"], batch["tokens"], batch["mask"], hist)
    stats = rl_update(model, opt, batch, cfg, gen)
    C.check_finite(model, "after the update")
    if cfg.diagnostics:
        after = diagnostics.policy_at(model, batch["prompts"], batch["tokens"], batch["mask"], hist)
        stats["tax"] = float(diagnostics.kl(before, after).mean())
        sums["tax_sum"] += stats["tax"]
        stats["tax_sum"] = sums["tax_sum"]
    rec = {"phase": "rl", "step": step, "reward": float(r.mean()), "mixed": 1.0 - zero_var,
           "zero_var": zero_var, **{k: v for k, v in stats.items() if k not in ("mb_stats", "steps")},
           **stats["mb_stats"]}
    if step == 1:
        sums["mixed_at_start"] = rec["mixed"]
    if step % cfg.eval_every == 0 or step == cfg.rl_steps:
        sums["acc"] = rec["eval_acc"] = evaluate(model, task, held_out, cfg, device)
        if cfg.diagnostics:
            rec.update(eval_diagnostics(model, task, held_out, cfg))
        tqdm.write(f"rl step {step}: eval_acc {sums['acc']:.3f}  reward {rec['reward']:.3f}  "
                   f"mixed {rec['mixed']:.2f}  residual {rec['residual']:.3f}  "
                   f"[{time.time() - t0:.0f}s]")
    return rec


def cli(argv):
    """The command line: bad input gets one 'error: ...' line and exit status 2."""
    try:
        return main(parse_args(argv, Config, doc=__doc__))
    except CliError as e:
        fail(str(e))
    except FloatingPointError as e:
        fail(str(e))
    except OSError as e:  # a disk that fills up, a folder that vanishes
        fail(f"{e.strerror or type(e).__name__}: {e.filename or ''}".rstrip(": "))
    except KeyboardInterrupt:
        fail("interrupted")


if __name__ == "__main__":
    cli(sys.argv[1:])
