"""model.py: a small pre-LN GPT whose output head is *not* tied to its embedding.

What it teaches
---------------
The policy of every experiment here is this network. Two things matter for the
cancellation analysis of THEORY.md section 4:

* the logits are ``z = W h`` with ``h`` the final hidden state (after the last
  LayerNorm) and ``W`` the *untied* output matrix ``lm_head.weight``. The
  coupling proxy treats ``h`` as fixed and moves only ``W``, so ``W`` must be
  its own parameter, and ``forward`` can return ``h``;
* the RL objectives need per-token log-probabilities of given tokens,
  ``log pi(y_t | s_t) = z_t[y_t] - logsumexp(z_t)``, from one forward pass
  (``token_logprobs``), their entropy (``token_entropy``, for --entropy_coef),
  and ``amp``, the bf16 autocast they run under on CUDA.

Equations (one block, pre-LN as in GPT-2 / nanoGPT)::

    x <- x + Attn(LN(x))          causal, multi-head, with a padding mask
    x <- x + MLP(LN(x))           MLP(u) = W2 gelu(W1 u)
    h  = LN_f(x),   z = W h       W = lm_head.weight, untied

Rows of a batch may hold prompts of different lengths. They are left-padded;
``valid`` marks the real tokens. Padding never influences a real token: a real
query attends only to real keys, and positions count real tokens only, so a
prompt gets the same positions and the same output whatever its padding.
"""

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class GPTConfig:
    vocab_size: int = 32  # input ids, PAD included
    n_out: int = 31       # output classes: every id the policy may emit (PAD is input-only)
    block_size: int = 64  # longest prompt + completion
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout

    def forward(self, x, mask, cache=None, layer=0):
        """x: [B,T,C]. mask: bool [B,1,T,Tk], True where a query may attend. With a KV cache
        (sampler.KVCache) this call's keys and values are stored after the cached ones, and the
        queries attend to all of them."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k, v = cache.write(layer, k, v)
        y = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd), nn.Dropout(cfg.dropout))

    def forward(self, x, mask, cache=None, layer=0):
        x = x + self.attn(self.ln1(x), mask, cache, layer)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.n_out, bias=False)  # untied: its own W
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2 scaled init of residual projections
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, valid=None, return_hidden=False):
        """Full forward pass. idx: [B,T] token ids (left-padded rows allowed);
        valid: bool [B,T], False on padding (default: all valid).
        Returns logits [B,T,V], and the final hidden states h [B,T,C] if asked."""
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence of {T} tokens exceeds block_size={self.cfg.block_size}")
        if valid is None:
            valid = torch.ones_like(idx, dtype=torch.bool)
        pos = positions(valid)
        mask = attention_mask(valid, valid)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x, mask)
        h = self.ln_f(x)
        logits = self.lm_head(h)
        return (logits, h) if return_hidden else logits

    def step(self, idx, pos, mask, cache):
        """Incremental forward for sampling: feed tokens idx [B,T] at positions pos [B,T] after
        the ``cache.length`` tokens a KV cache (sampler.KVCache) already holds; mask is bool
        [B,1,T,cache.length+T], True where a query may attend. Returns the logits of the last
        token, [B,V]."""
        x = self.wte(idx) + self.wpe(pos)
        for i, blk in enumerate(self.blocks):
            x = blk(x, mask, cache, i)
        cache.advance(idx.shape[1])
        return self.lm_head(self.ln_f(x[:, -1]))

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


def positions(valid):
    """Position of each token counting real tokens only (pads get 0)."""
    return (valid.long().cumsum(1) - 1).clamp(min=0)


def attention_mask(q_valid, k_valid, offset=0):
    """bool [B,1,Tq,Tk]: causal, real keys only. A padding query sees itself
    only, so that no row of the softmax is empty (it would give NaN)."""
    Tq, Tk = q_valid.shape[1], k_valid.shape[1]
    qi = torch.arange(Tq, device=q_valid.device)[:, None] + offset
    ki = torch.arange(Tk, device=q_valid.device)[None, :]
    causal = ki <= qi
    m = causal[None] & k_valid[:, None, :]
    m = m | ((ki == qi)[None] & ~q_valid[:, :, None])
    return m[:, None]


def left_pad(prompts, pad_id, device="cpu"):
    """List of id lists -> (ids [N, L] left-padded, valid [N, L] bool, lengths [N]).
    Built on the host and copied once: a copy per row would make a GPU wait per row."""
    L = max(len(p) for p in prompts)
    rows = [[pad_id] * (L - len(p)) + list(p) for p in prompts]
    ids = torch.tensor(rows, dtype=torch.long, device="cpu").to(device)
    lens = torch.tensor([len(p) for p in prompts], device="cpu").to(device)
    valid = torch.arange(L, device=device)[None, :] >= (L - lens)[:, None]
    return ids, valid, lens


def completion_logprobs(model, prompts, tokens, mask, pad_id, temperature=1.0, return_hidden=False):
    """log pi_T(y_t | prompt, y_<t) for completion tokens [N,T] after prompts (id
    lists), in one forward pass. Row layout: [left pad | prompt | completion].
    Returns logp [N,T] (0 where mask is False) and, if asked, the hidden states
    h [N,T,C] that produced each completion token's logits."""
    # prompts: id lists, or already left-padded (ids, valid) tensors
    ids, valid = prompts if isinstance(prompts, tuple) else left_pad(prompts, pad_id,
                                                                     tokens.device)[:2]
    Lp = ids.shape[1]
    seq = torch.cat([ids, tokens], 1)[:, :-1]  # the last token predicts nothing we need
    val = torch.cat([valid, mask], 1)[:, :-1]
    logits, h = model(seq, val, return_hidden=True)
    logits, h = logits[:, Lp - 1:], h[:, Lp - 1:]
    logp = token_logprobs(logits / temperature, tokens.masked_fill(~mask, 0)) * mask
    return (logp, h) if return_hidden else logp


def token_logprobs(logits, targets):
    """log pi(y_t | s_t) = z_t[y_t] - logsumexp(z_t), for given target ids."""
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)


def token_entropy(model, h, temperature=1.0):
    """H(pi(.|s_t)) in nats at every completion position, differentiable (--entropy_coef)."""
    logp = torch.log_softmax(model.lm_head(h).float() / temperature, -1)
    return -(logp.exp() * logp).sum(-1)


# The RL optimizers (--optimizer): name -> (what it is, how it is built at a learning rate).
# AdamW rescales every parameter's step by its own gradient history; plain SGD's step is lr
# times the gradient.
# They cross the two things Adam adds to SGD, momentum and a per-parameter step size:
# sgd has neither, sgd_momentum momentum only, adam_b1_0 the normalisation only, adamw both
# (lab/experiments/e11_optimizer.py).
OPTIMIZERS = {
    "adamw": ("betas 0.9, 0.99, no weight decay",
              lambda p, lr: torch.optim.AdamW(p, lr=lr, betas=(0.9, 0.99), weight_decay=0.0)),
    "adam_b1_0": ("AdamW with beta1 = 0: per-parameter normalisation, no momentum",
                  lambda p, lr: torch.optim.AdamW(p, lr=lr, betas=(0.0, 0.99), weight_decay=0.0)),
    "sgd_momentum": ("SGD with momentum 0.9: momentum, no normalisation",
                     lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9)),
    "sgd": ("plain, no momentum", lambda p, lr: torch.optim.SGD(p, lr=lr)),
}


def rl_optimizer(params, name, lr):
    """The RL optimizer ``name`` (a key of OPTIMIZERS) at learning rate lr."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name][1](params, lr)


def amp(cfg, device):
    """bf16 autocast on CUDA (and on CPU with --bf16=true); log-probs stay fp32."""
    on = cfg.bf16 == "true" or (cfg.bf16 == "auto" and device == "cuda")
    return (
        torch.autocast(device_type=device, dtype=torch.bfloat16) if on else contextlib.nullcontext()
    )
