"""fast_decode.py: the sampler's decode step with fixed shapes, replayed as a CUDA graph.

What it teaches
---------------
At 0.8 M parameters a decode step's arithmetic is tiny, and a GPU waits on the host's
kernel launches. Recorded once as a CUDA graph, the step is one launch. A graph needs the
same shapes and addresses at every replay, so this step keeps them fixed: the KV cache
holds every slot from the start, step t writes its keys into slot Lp + t (a tensor), and
attention reads every slot, the unwritten ones masked out. It samples the tokens
sampler.sample's KV-cache path samples (on a CPU token for token: tests/test_model.py).

One switch, --static_decode (auto: on with CUDA): ``for_run`` gives sampler.sample its
``decoder``, or None for the plain KV-cache path. Nothing here changes what is learned.
"""

import contextlib
import weakref

import torch

from sampler import KVCache


class StaticDecoder:
    """One decode step with the same shapes at every step, as a CUDA graph can replay it.

    The KV cache holds all ``size`` slots from the start; step t writes its keys into slot
    ``Lp + t`` (a tensor, not a Python int: the graph is recorded once) and attention reads
    every slot, the ones not yet written masked out. On a GPU the step is recorded once as a
    CUDA graph and replayed: one launch instead of a few dozen, each of which costs the host
    more than the GPU's arithmetic at this size. On a CPU it runs as it is (the tests check
    it against the full recompute). ``decoder(model, rows, size)`` keeps one per shape."""

    def __init__(self, model, rows, size, device):
        self.model, self.graph = model, None
        self.cache = KVCache(model, rows, size)
        self.cache.write = self.write  # this cache writes at ``slot``, and keeps its length
        self.cache.advance = lambda n: None
        self.idx = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.valid = torch.zeros(rows, size, dtype=torch.bool, device=device)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)

    def allocate(self, dtype, device):
        """Zeros, not torch.empty: attention reads every slot, and a masked slot's weight 0
        times a NaN left in memory would still be NaN."""
        if self.cache.k is None:
            self.cache.k = torch.zeros(self.cache.shape, dtype=dtype, device=device)
            self.cache.v = torch.zeros_like(self.cache.k)

    def write(self, layer, k, v):
        self.allocate(k.dtype, k.device)
        self.cache.k[layer].index_copy_(2, self.slot, k)
        self.cache.v[layer].index_copy_(2, self.slot, v)
        return self.cache.k[layer], self.cache.v[layer]

    def run(self):
        return self.model.step(self.idx, self.pos, self.valid[:, None, None, :], self.cache)

    def record(self, amp_dtype):
        """Record the step as a CUDA graph, after two warm-up runs on a side stream."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        auto = (torch.autocast("cuda", dtype=amp_dtype, cache_enabled=False) if amp_dtype
                else contextlib.nullcontext())
        with auto, torch.cuda.stream(stream):
            for _ in range(2):
                self.run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with auto, torch.cuda.graph(self.graph):
            self.logits = self.run()

    def __call__(self, nxt, pos, slot):
        """The logits after token ``nxt`` [rows] at positions ``pos``, written in ``slot``."""
        self.idx.copy_(nxt[:, None])
        self.pos.copy_(pos[:, None])
        self.slot.fill_(slot)
        self.valid[:, slot] = True
        if self.graph is None:
            return self.run()
        self.graph.replay()
        return self.logits


DECODERS = weakref.WeakKeyDictionary()  # model -> its StaticDecoders, by shape


def decoder(model, rows, size, device):
    """The StaticDecoder of ``model`` for ``rows`` x ``size`` (recorded on first use on a
    GPU, under the autocast in force, if any)."""
    keep = DECODERS.setdefault(model, {})
    amp_dtype = torch.get_autocast_dtype("cuda") if device.type == "cuda" and \
        torch.is_autocast_enabled("cuda") else None
    key = (rows, size, amp_dtype)
    if key not in keep:
        keep[key] = StaticDecoder(model, rows, size, device)
        if device.type == "cuda":
            keep[key].record(amp_dtype)
    return keep[key]


def for_run(cfg, device):
    """--static_decode: the fixed-shape ``decoder`` for sampler.sample, or None (auto: on
    with CUDA)."""
    flag = getattr(cfg, "static_decode", "auto")
    on = flag == "true" or (flag == "auto" and str(device).startswith("cuda"))
    return decoder if on else None
