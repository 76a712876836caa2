"""sampler.py: batched sampling of G completions per prompt, with a KV cache.

What it teaches
---------------
A GRPO step starts by drawing a *group* of ``G`` completions for each of ``B``
prompts. Each completion token is drawn from the tempered policy

    pi_T(y | s) = softmax(z(s) / T)[y]          (optionally restricted to the top k logits)

and its log-probability ``log pi_T(y|s)`` is recorded. These are the "old"
log-probs: the PPO ratio of a later optimizer step is
``rho = exp(log pi_new - log pi_old)`` (see loss.py). They are those of the
tempered policy *without* the top-k cut, which is what the loss recomputes, so
that an on-policy ratio is exactly 1 (top-k is off by default).

Mechanics
---------
* Prompts of different lengths are left-padded. Padding is masked out of
  attention and positions count real tokens only (model.py), so a prompt is
  encoded exactly as it would be alone: no pad token the model never saw
  reaches a real token, and no position is shifted.
* The KV cache keeps each layer's keys and values; each new token costs one
  forward pass over a single position instead of the whole sequence.
* The G rows of a group share their prompt, so the prompt is encoded once per
  group and its cache copied G times: the prompt pass costs B positions, not
  B * G.
* A row that has emitted EOS keeps being computed (it is cheap and keeps the
  batch rectangular) but its later tokens are PAD and masked out. The loop
  ends when every row is done, checked once every few steps, not per row.
* A NaN or inf logit (a diverged model) raises FloatingPointError; the check
  rides on the every-few-steps sync of ``done``, so it costs no extra one.
* Randomness comes only from the ``torch.Generator`` passed in, and every row
  draws at every step, so the cached and the full-recompute paths consume the
  same random numbers: given a seed both return the same samples.
``sample(..., use_cache=False)`` is the reference path: it recomputes the
whole sequence at every step. Tests check that both agree token for token.

Steps 1 and 2 of an RL step (THEORY.md section 1) are ``rollouts``: G samples
per prompt, each rewarded by the task's verifier. ``evaluate`` is the greedy
held-out accuracy.
"""

import torch

import advantage
import toy_tasks
from model import amp, attention_mask, left_pad
from toy_tasks import EOS, PAD


@torch.no_grad()
def sample(model, prompts, n_per_prompt=1, max_new_tokens=16, temperature=1.0, top_k=0,
           generator=None, use_cache=True, check_every=4):
    """Draw ``n_per_prompt`` completions for each prompt (a list of token-id lists).

    Rows are grouped: row ``b * n_per_prompt + j`` is completion j of prompt b.
    Returns a dict with
      ``tokens``   [N, T] completion ids, PAD after EOS;
      ``mask``     [N, T] True on completion tokens, EOS included;
      ``logprobs`` [N, T] log pi_T of each sampled token (0 where masked);
      ``prompts``  the N prompt id lists, ``group`` [N] prompt index of each row.
    ``temperature=0`` means greedy decoding (log-probs are then at T=1).

    Long because: the prefill, the copy of each prompt's cache to its group and the decode loop
    share their state; they read as one loop.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    rows = [p for p in prompts for _ in range(n_per_prompt)]
    ids, valid, lens = left_pad(rows, PAD, device)
    N, Lp = ids.shape
    total = Lp + max_new_tokens
    if total > model.cfg.block_size:
        raise ValueError(f"prompt ({Lp}) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"block_size={model.cfg.block_size}")
    seq = torch.cat([ids, torch.full((N, max_new_tokens), PAD, dtype=torch.long, device=device)], 1)
    key_valid = torch.cat(
        [valid, torch.ones(N, max_new_tokens, dtype=torch.bool, device=device)], 1
    )
    pos = torch.cat([(valid.long().cumsum(1) - 1).clamp(min=0),
                     lens[:, None] + torch.arange(max_new_tokens, device=device)[None]], 1)
    logp_out = torch.zeros(N, max_new_tokens, device=device)
    done = torch.zeros(N, dtype=torch.bool, device=device)
    bad = torch.zeros((), dtype=torch.bool, device=device)  # a NaN or inf logit was seen
    if use_cache:  # the rows of a group share their prompt: encode it once, copy its cache
        first = slice(None, None, n_per_prompt)  # row b * n_per_prompt starts group b
        cache = model.new_cache(len(prompts), total, device)
        logits = model.step(seq[first, :Lp], pos[first, :Lp],
                            attention_mask(valid[first], valid[first]), cache, 0)
        cache = {kv: [c.repeat_interleave(n_per_prompt, 0) for c in layers]
                 for kv, layers in cache.items()}
        logits = logits.repeat_interleave(n_per_prompt, 0)
    T = 0
    for t in range(max_new_tokens):
        if not use_cache:
            logits = model(seq[:, :Lp + t], key_valid[:, :Lp + t])[:, -1]
        z = logits.float() / (temperature if temperature > 0 else 1.0)
        logp = torch.log_softmax(z, -1)
        bad |= ~torch.isfinite(logp).all()  # no sync here: checked with `done` below
        if temperature > 0:
            if top_k:
                kth = torch.topk(z, min(top_k, z.shape[-1]), -1).values[:, -1:]
                z = z.masked_fill(z < kth, float("-inf"))
            p = torch.softmax(z, -1)
            p = torch.where(torch.isfinite(p), p, 1.0)  # keeps multinomial alive until the check
            nxt = torch.multinomial(p, 1, generator=generator).squeeze(1)
        else:
            nxt = logits.argmax(-1)
        logp_out[:, t] = logp.gather(1, nxt[:, None])[:, 0].masked_fill_(done, 0.0)
        nxt = nxt.masked_fill_(done, PAD)
        seq[:, Lp + t] = nxt
        done |= nxt == EOS
        T = t + 1
        if (t + 1) % check_every == 0:
            stop, diverged = torch.stack([done.all(), bad]).tolist()
            if stop or diverged:
                break
        if use_cache and t + 1 < max_new_tokens:
            logits = model.step(seq[:, Lp + t:Lp + t + 1], pos[:, Lp + t:Lp + t + 1],
                                key_valid[:, None, None, :Lp + t + 1], cache, Lp + t)
    if bool(bad):
        model.train(was_training)
        raise FloatingPointError(f"logits or sampling probabilities are not finite "
                                 f"(by new token {T})")
    tokens = seq[:, Lp:Lp + T]
    mask = tokens != PAD
    T = int(mask.any(0).nonzero().max()) + 1 if mask.any() else 1  # drop all-PAD columns
    tokens, mask = tokens[:, :T], mask[:, :T]
    model.train(was_training)
    group = torch.arange(len(prompts), device=device).repeat_interleave(n_per_prompt)
    return {"tokens": tokens, "mask": mask, "logprobs": logp_out[:, :T] * mask,
            "prompts": rows, "group": group}


# ------------------------------------------------------------------ rollouts and their rewards

def rollouts(model, task, draw, cfg, gen, device, n_prompts=None):
    """Sample a rollout batch (n_prompts groups, default --prompts_per_step) and reward it."""
    problems = [draw() for _ in range(n_prompts or cfg.prompts_per_step)]
    prompts = [toy_tasks.encode(task.prompt(p)) for p in problems]
    with amp(cfg, device):
        out = sample(model, prompts, cfg.group_size, task.max_new_tokens, cfg.temperature,
                     cfg.top_k, generator=gen)
        greedy = (
            sample(model, prompts, 1, task.max_new_tokens, temperature=0.0)["tokens"].tolist()
            if getattr(cfg, "adv", None) == "remax"
            else None
        )  # ReMax's baseline: a greedy completion
    texts = [toy_tasks.decode(t) for t in out["tokens"].tolist()]
    out["rewards"] = torch.tensor([task.reward(problems[i // cfg.group_size], t)
                                   for i, t in enumerate(texts)], device=device)
    if getattr(
        cfg, "permute_rewards", False
    ):  # the null-reward control (this process's own groups)
        out["rewards"] = advantage.permute_within_groups(out["rewards"], out["group"], gen)
    if greedy is not None:  # its reward, on each of the prompt's G rows
        out["baseline"] = torch.tensor(
            [float(task.reward(p, toy_tasks.decode(t))) for p, t in zip(problems, greedy)],
            device=device,
        ).repeat_interleave(cfg.group_size)
    # the log-probs recorded now are the "old" policy's of every later optimizer step
    out["old_logprobs"] = out.pop("logprobs")
    return out


@torch.no_grad()
def evaluate(model, task, problems, cfg, device):
    """Greedy accuracy on held-out problems."""
    prompts = [toy_tasks.encode(task.prompt(p)) for p in problems]
    with amp(cfg, device):
        out = sample(model, prompts, 1, task.max_new_tokens, temperature=0.0)
    texts = [toy_tasks.decode(t) for t in out["tokens"].tolist()]
    return sum(task.reward(p, t) for p, t in zip(problems, texts)) / len(problems)
