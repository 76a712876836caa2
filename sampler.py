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
that an on-policy ratio is 1, up to rounding (top-k is off by default).

Mechanics: an engine in four phases (``sample``)
------------------------------------------------
1. *Encode each prompt once.* The G rows of a group share their prompt, so the
   prompt pass runs on B rows, not B * G. Prompts of different lengths are
   left-padded; padding is masked out of attention and positions count real
   tokens only (model.py), so a prompt is encoded exactly as it would be alone.
2. *Replicate.* Each prompt's keys and values are copied to its group's G rows
   of the decode cache (``KVCache.replicate``), in one copy per buffer.
3. *Set up* the per-row state: the sequence so far, which keys are real, the
   next position of each row.
4. *Decode.* Each new token costs one forward pass over a single position: its
   keys and values are written in place into a preallocated, contiguous
   ``KVCache`` and it attends to the slots written so far. A row that has
   emitted EOS keeps being computed (it is cheap and keeps the batch
   rectangular) but its later tokens are PAD and masked out. The loop ends when
   every row is done, read back once every few steps, not per row: each read
   waits for the device. A NaN or inf logit (a diverged model) raises
   FloatingPointError; its check rides on the same read.

Randomness comes only from the ``torch.Generator`` passed in, and every row
draws at every step, so the cached and the full-recompute paths consume the
same random numbers: given a seed both return the same samples, unless the two
paths' rounding differs at a token whose draw falls on a boundary.
``sample(..., use_cache=False)`` is the reference path: it recomputes the
whole sequence at every step. Tests check that both agree token for token and
that their log-probs agree to 1e-5.

Steps 1 and 2 of an RL step (THEORY.md section 1) are ``rollouts``: G samples
per prompt, each rewarded by the task's verifier, returned as one ``Rollouts``
record. ``evaluate`` is the greedy held-out accuracy. SFT's data, for the warm start
before RL, is the teacher's solutions instead (``sft_batches``): no sampling.
"""

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch

from model import amp, attention_mask, left_pad, positions
from toy_tasks import EOS, PAD


@dataclass
class Rollouts:
    """One batch of N = B * G completions, row-aligned: row i answers prompt i // G.

    The log-probs recorded when a completion is sampled are those of the policy that sampled
    it, pi_old: every later optimizer step's ratio is exp(log pi_new - old_logprobs).
    ``sample`` fills the first five fields; ``rollouts`` adds the rewards and problems; the
    rest are filled where an option needs them (the lab's controls, its reference model)."""
    prompts: list  # N prompts (token-id lists), each repeated for its group's G rows
    tokens: torch.Tensor  # [N, T] completion tokens, PAD after EOS
    mask: torch.Tensor  # [N, T] True on a completion's own tokens (its EOS included)
    old_logprobs: torch.Tensor  # [N, T] log pi_old of each token, 0 on padding
    group: torch.Tensor  # [N] which prompt's group a row belongs to
    rewards: Optional[torch.Tensor] = None  # [N] the verifier's reward of each completion
    baseline: Optional[torch.Tensor] = None  # [N] --adv=remax: the greedy completion's reward
    max_len: Optional[int] = None  # the completion budget: the L_max of dr_grpo's denominator
    ref_logprobs: Optional[torch.Tensor] = None  # [N, T] the frozen reference's, for --beta
    problems: Optional[list] = None  # the problem each row answers

    def rows(self, idx):
        """The same record restricted to rows ``idx`` (a list or a 1-D index tensor)."""
        idx = torch.as_tensor(idx, dtype=torch.long, device=self.tokens.device)
        cut = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if torch.is_tensor(v):
                cut[f.name] = v[idx.to(v.device)]
            elif isinstance(v, list):
                cut[f.name] = [v[i] for i in idx.tolist()]
        return dataclasses.replace(self, **cut)


class KVCache:
    """The keys and values of every layer for ``rows`` sequences of up to ``size`` tokens.

    One preallocated buffer per kind, ``k`` and ``v`` [n_layer, rows, n_head, size, head_dim]:
    each step writes its keys in place after the ``length`` already held, and attention reads
    the first ``length`` slots, so nothing is concatenated or reallocated while decoding. The
    buffers take the dtype of the first keys written (bf16 under autocast)."""

    def __init__(self, model, rows, size):
        c = model.cfg
        self.shape = (c.n_layer, rows, c.n_head, size, c.n_embd // c.n_head)
        self.k = self.v = None
        self.length = 0

    def write(self, layer, k, v):
        """Store one layer's k, v [rows, n_head, T, head_dim]; return all its keys and values
        so far, [rows, n_head, length + T, head_dim]."""
        if self.k is None:  # never read before written: attention reads slots < length only
            self.k = torch.empty(self.shape, dtype=k.dtype, device=k.device)
            self.v = torch.empty_like(self.k)
        end = self.length + k.shape[2]
        self.k[layer, :, :, self.length:end] = k
        self.v[layer, :, :, self.length:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def advance(self, n):
        """Called once per forward pass, after the last layer has written its n tokens."""
        self.length += n

    def replicate(self, prompts, n):
        """Fill this cache's rows with ``prompts``' rows, each copied n times in a row: row
        b * n + j gets prompt row b (a group's G rows share their prompt)."""
        L, B, H, _, D = prompts.shape
        if self.k is None:
            self.k = torch.empty(self.shape, dtype=prompts.k.dtype, device=prompts.k.device)
            self.v = torch.empty_like(self.k)
        for mine, theirs in ((self.k, prompts.k), (self.v, prompts.v)):
            mine.view(L, B, n, H, -1, D)[:, :, :, :, :prompts.length] = \
                theirs[:, :, None, :, :prompts.length]
        self.length = prompts.length


def draw(logits, temperature, top_k, generator):
    """One token per row from pi_T = softmax(z / T), and its log pi_T (without the top-k cut,
    as the loss recomputes it). temperature=0 is greedy, scored at T = 1. Also returns whether
    every log-prob was finite, as a tensor, so that the caller can check it without a sync."""
    z = logits.float() / (temperature if temperature > 0 else 1.0)
    logp = torch.log_softmax(z, -1)
    finite = torch.isfinite(logp).all()
    if temperature == 0:
        nxt = logits.argmax(-1)
    else:
        if top_k:
            kth = torch.topk(z, min(top_k, z.shape[-1]), -1).values[:, -1:]
            logp_k = torch.log_softmax(z.masked_fill(z < kth, float("-inf")), -1)
        else:
            logp_k = logp
        p = logp_k.exp().nan_to_num_(1.0)  # keeps multinomial alive until the finite check
        nxt = torch.multinomial(p, 1, generator=generator).squeeze(1)
    return nxt, logp.gather(1, nxt[:, None])[:, 0], finite


@torch.no_grad()
def sample(model, prompts, n_per_prompt=1, max_new_tokens=16, temperature=1.0, top_k=0,
           generator=None, use_cache=True, check_every=4, decoder=None):
    """Draw ``n_per_prompt`` completions for each prompt (a list of token-id lists).

    Rows are grouped: row ``b * n_per_prompt + j`` is completion j of prompt b.
    Returns a ``Rollouts`` without rewards: ``tokens`` and ``mask`` [N, T], ``old_logprobs``
    [N, T] (log pi_T of each sampled token, 0 where masked), the N ``prompts`` and ``group``.
    ``temperature=0`` means greedy decoding (log-probs are then at T=1).
    ``use_cache=False`` is the reference: every step recomputes the whole sequence.
    ``decoder``: a fixed-shape decode step (plumbing/fast_decode.py: a CUDA graph on a GPU,
    --static_decode) in place of ``model.step``; it samples the same tokens.

    Long because: the four phases (encode each prompt, replicate, set up, decode) share their
    state; they read in order as one story.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    static = decoder is not None and use_cache
    G = n_per_prompt
    ids, valid, lens = left_pad(prompts, PAD, device)
    B, Lp = ids.shape
    N, total = B * G, Lp + max_new_tokens
    if total > model.cfg.block_size:
        raise ValueError(f"prompt ({Lp}) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"block_size={model.cfg.block_size}")

    # 1. Encode each prompt once: its G completions share it.
    if use_cache:
        prompt_cache = KVCache(model, B, Lp)
        logits = model.step(ids, positions(valid), attention_mask(valid, valid), prompt_cache)
        # 2. Replicate: each prompt's keys and values go to its group's G rows.
        dec = decoder(model, N, total, device) if static else None  # the GPU's fast path
        if static:
            dec.allocate(prompt_cache.k.dtype, device)
        cache = dec.cache if static else KVCache(model, N, total)
        cache.replicate(prompt_cache, G)
        logits = logits.repeat_interleave(G, 0)

    # 3. Per-row state: the whole sequence so far, which keys are real, the next position.
    seq = torch.full((N, total), PAD, dtype=torch.long, device=device)
    seq[:, :Lp] = ids.repeat_interleave(G, 0)
    key_valid = torch.ones(N, total, dtype=torch.bool, device=device)
    key_valid[:, :Lp] = valid.repeat_interleave(G, 0)
    pos = lens.repeat_interleave(G, 0)  # positions count real tokens only (model.py)
    if static:  # the static decoder's own mask: the prompt's real keys, no new slot yet
        dec.valid.copy_(key_valid)
        dec.valid[:, Lp:] = False
    logp_out = torch.zeros(N, max_new_tokens, device=device)
    done = torch.zeros(N, dtype=torch.bool, device=device)
    finite = torch.ones((), dtype=torch.bool, device=device)

    # 4. Decode. Every row draws at every step, done or not, so that both paths consume the
    # same random numbers; a done row's tokens become PAD. Whether all rows are done (and no
    # logit went non-finite) is read back every few steps, not at every one: a sync stalls.
    T = 0
    for t in range(max_new_tokens):
        if not use_cache:
            logits = model(seq[:, :Lp + t], key_valid[:, :Lp + t])[:, -1]
        nxt, logp, ok = draw(logits, temperature, top_k, generator)
        finite &= ok
        logp_out[:, t] = logp.masked_fill_(done, 0.0)
        nxt = nxt.masked_fill_(done, PAD)
        seq[:, Lp + t] = nxt
        done |= nxt == EOS
        T = t + 1
        if T % check_every == 0:
            stop, ok = torch.stack([done.all(), finite]).tolist()
            if stop or not ok:
                break
        if static and T < max_new_tokens:
            logits = dec(nxt, pos + t, Lp + t)
        elif use_cache and T < max_new_tokens:
            logits = model.step(nxt[:, None], (pos + t)[:, None],
                                key_valid[:, None, None, :Lp + T], cache)
    model.train(was_training)
    tokens = seq[:, Lp:Lp + T]
    mask = tokens != PAD
    # one read: were all logits finite, and the last column that any row writes in
    last = (torch.arange(1, T + 1, device=device) * mask.any(0)).max()
    ok, last = torch.stack([finite.long(), last]).tolist()
    if not ok:
        raise FloatingPointError(f"logits or sampling probabilities are not finite "
                                 f"(by new token {T})")
    T = max(last, 1)  # drop all-PAD columns
    tokens, mask = tokens[:, :T], mask[:, :T]
    group = torch.arange(B, device=device).repeat_interleave(G)
    return Rollouts(prompts=[p for p in prompts for _ in range(G)], tokens=tokens, mask=mask,
                    old_logprobs=logp_out[:, :T] * mask, group=group)


# ------------------------------------------------------------------ rollouts and their rewards

def rollouts(model, task, next_problem, cfg, gen, device, n_prompts=None, decoder=None):
    """Sample a rollout batch, n_prompts groups (default --prompts_per_step) of the problems
    ``next_problem()`` gives, and reward it (``decoder``: as ``sample``'s)."""
    problems = [next_problem() for _ in range(n_prompts or cfg.prompts_per_step)]
    prompts = [task.encode(task.prompt(p)) for p in problems]
    with amp(cfg, device):
        out = sample(model, prompts, cfg.group_size, task.max_new_tokens, cfg.temperature,
                     cfg.top_k, generator=gen, decoder=decoder)
    out.problems = [p for p in problems for _ in range(cfg.group_size)]  # row i's problem
    texts = [task.decode(t) for t in out.tokens.tolist()]
    out.rewards = torch.tensor([task.reward(p, t) for p, t in zip(out.problems, texts)],
                               device=device)
    return out


@torch.no_grad()
def evaluate(model, task, problems, cfg, device, decoder=None):
    """Greedy accuracy on held-out problems (``decoder``: as ``sample``'s)."""
    prompts = [task.encode(task.prompt(p)) for p in problems]
    with amp(cfg, device):
        out = sample(model, prompts, 1, task.max_new_tokens, temperature=0.0, decoder=decoder)
    texts = [task.decode(t) for t in out.tokens.tolist()]
    return sum(task.reward(p, t) for p, t in zip(problems, texts)) / len(problems)


# ----------------------------------------------------------------------------- SFT's batches

def sft_batches(task, next_problem, n, rng, device, flawed, steps):
    """The batches of ``steps`` SFT steps, made on the host and copied to the device at once
    (a copy per step would make a GPU wait per step): per step (prompt ids, their valid mask),
    left-padded, and the solutions, right-padded, with their mask (the loss is on them)."""
    texts = [sft_texts(task, next_problem, n, rng, flawed) for _ in range(steps)]
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


def sft_texts(task, next_problem, n, rng, flawed=0.0):
    """n problems' prompts and solutions + EOS, as token ids. A fraction ``flawed`` of the
    solutions come from the task's flawed teacher."""
    probs = [next_problem() for _ in range(n)]
    prompts = [task.encode(task.prompt(p)) for p in probs]
    # a flawed teacher (one who forgets carries, say) keeps the warm start imperfect, so that
    # groups come out mixed: only a group with right and wrong rollouts has a signal in RL
    sols = [task.encode(task.flawed(p, rng) if rng.random() < flawed
                        else task.solution(p, rng)) + [EOS] for p in probs]
    return prompts, sols
