"""Model log-probs, KV-cache sampling against full recompute, masks, SFT, checkpoints."""
import os

import pytest
import torch

import toy_tasks
from plumbing import checkpoint
import sampler
import train
from model import GPT, GPTConfig, completion_logprobs, left_pad
from sampler import sample


def tiny(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(
        vocab_size=toy_tasks.VOCAB_SIZE,
        n_out=toy_tasks.N_OUT,
        n_layer=2,
        n_head=2,
        n_embd=32,
        block_size=40,
    )
    cfg.update(kw)
    return GPT(GPTConfig(**cfg))


def mixed_prompts():
    texts = ["47+85=", "9=", "123*4=", "58=", "1+1=", "99*99="]
    return [toy_tasks.encode(t) for t in texts]


def test_head_is_untied_and_hidden_states_feed_it():
    m = tiny()
    assert m.lm_head.weight.data_ptr() != m.wte.weight.data_ptr()
    assert m.lm_head.weight.shape == (toy_tasks.N_OUT, 32)
    idx = torch.tensor([toy_tasks.encode("47+85=132")])
    logits, h = m(idx, return_hidden=True)
    torch.testing.assert_close(logits, h @ m.lm_head.weight.T)


def test_logprobs_equal_hand_written_cross_entropy():
    m = tiny()
    prompts = mixed_prompts()[:3]
    comps = [
        toy_tasks.encode("132") + [toy_tasks.EOS],
        toy_tasks.encode("7"),
        toy_tasks.encode("4,92") + [toy_tasks.EOS],
    ]
    Tn = max(map(len, comps))
    tokens = torch.tensor([c + [toy_tasks.PAD] * (Tn - len(c)) for c in comps])
    mask = tokens != toy_tasks.PAD
    lp = completion_logprobs(m, prompts, tokens, mask, toy_tasks.PAD)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        seq = torch.tensor([p + c])  # alone, no padding at all
        logits = m(seq)[0, len(p) - 1:-1]
        ce = torch.nn.functional.cross_entropy(logits, torch.tensor(c), reduction="none")
        torch.testing.assert_close(lp[i, :len(c)], -ce, atol=1e-5, rtol=1e-5)
        assert torch.all(lp[i, len(c):] == 0)


def test_padding_does_not_change_a_prompt():
    m = tiny()
    p = toy_tasks.encode("5=")
    alone = m(torch.tensor([p]))[0, -1]
    ids, valid, _ = left_pad([toy_tasks.encode("123*45="), p], toy_tasks.PAD)
    padded = m(ids, valid)[1, -1]
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_kv_cache_equals_full_recompute(seed):
    m = tiny(seed)
    a = sample(m, mixed_prompts(), 1, 12, temperature=0.0, use_cache=True)
    b = sample(m, mixed_prompts(), 1, 12, temperature=0.0, use_cache=False)
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.mask, b.mask)
    torch.testing.assert_close(a.old_logprobs, b.old_logprobs, atol=1e-5, rtol=1e-5)


def test_seeded_sampling_is_deterministic_and_paths_agree():
    m = tiny(3)
    outs = [sample(m, mixed_prompts(), 4, 10, 1.0, generator=torch.Generator().manual_seed(7),
                   use_cache=c) for c in (True, True, False)]
    assert torch.equal(outs[0].tokens, outs[1].tokens)
    assert torch.equal(outs[0].tokens, outs[2].tokens)
    other = sample(m, mixed_prompts(), 4, 10, 1.0, generator=torch.Generator().manual_seed(8))
    assert not torch.equal(other.tokens, outs[0].tokens)
    assert torch.equal(outs[0].group, torch.arange(6).repeat_interleave(4))


def test_sampler_masks_eos_and_recorded_logprobs():
    m = tiny(4)
    with torch.no_grad():  # make EOS likely so that rows stop at different times
        m.lm_head.weight[toy_tasks.EOS] += 0.5 * m.lm_head.weight.abs().max()
    out = sample(m, mixed_prompts(), 3, 10, 1.0, generator=torch.Generator().manual_seed(0))
    tok, mask = out.tokens, out.mask
    lens = mask.sum(1)
    assert lens.min() < lens.max()  # rows ended at different steps
    for row, n in zip(tok.tolist(), lens.tolist()):
        assert toy_tasks.PAD not in row[:n] and all(t == toy_tasks.PAD for t in row[n:])
        if toy_tasks.EOS in row:
            assert row.index(toy_tasks.EOS) == n - 1  # mask covers EOS, nothing after it
    assert torch.all(out.old_logprobs[~mask] == 0) and torch.all(out.old_logprobs[mask] < 0)
    recomputed = completion_logprobs(m, out.prompts, tok, mask, toy_tasks.PAD)
    # on-policy ratio 1
    torch.testing.assert_close(recomputed, out.old_logprobs, atol=1e-5, rtol=1e-5)


def test_temperature_and_top_k():
    m = tiny(5)
    g = torch.Generator().manual_seed(0)
    out = sample(m, mixed_prompts(), 8, 6, temperature=1.0, top_k=1, generator=g)
    greedy = sample(m, mixed_prompts(), 1, 6, temperature=0.0)
    assert torch.equal(out.tokens[::8], greedy.tokens[:, :out.tokens.shape[1]])


def test_sft_steps_lower_the_loss():
    m = tiny(6, n_embd=64)
    task = toy_tasks.make_task("add", 2)
    import random
    draw, rng = toy_tasks.train_sampler(task, [], 0), random.Random(0)
    fixed = next(sampler.sft_batches(task, draw, 64, rng, "cpu", 0.0, 1))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)

    def loss():
        lp = completion_logprobs(m, *fixed, toy_tasks.PAD)
        return -(lp.sum() / fixed[2].sum())
    before = loss().item()
    for _ in range(30):
        opt.zero_grad()
        l = loss()
        l.backward()
        opt.step()
    assert loss().item() < 0.7 * before


def test_checkpoint_round_trip_and_atomic_write(tmp_path):
    from plumbing.config import Config
    m = tiny(7)
    cfg = Config()
    path = os.path.join(tmp_path, "c.pt")
    checkpoint.save_checkpoint(path, m, cfg, "warm_start", 5)
    assert os.listdir(tmp_path) == ["c.pt"]  # no temp file left behind
    m2, ck = checkpoint.load_checkpoint(path)
    assert ck["kind"] == "warm_start" and ck["step"] == 5 and ck["task"]["task"] == cfg.task
    for (k, a), (_, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k
    idx = torch.tensor([toy_tasks.encode("12+34=")])
    assert torch.equal(m(idx), m2(idx))


def test_bad_checkpoints_raise_one_line(tmp_path):
    from plumbing.config import Config
    from plumbing.errors import CliError
    with pytest.raises(CliError, match="does not exist"):
        checkpoint.load_checkpoint(os.path.join(tmp_path, "nope.pt"))
    path = os.path.join(tmp_path, "c.pt")
    checkpoint.save_checkpoint(path, tiny(), Config(), "rl", 1)
    data = open(path, "rb").read()
    for name, blob in [("trunc.pt", data[: len(data) // 2]), ("junk.pt", b"not a checkpoint")]:
        p = os.path.join(tmp_path, name)
        open(p, "wb").write(blob)
        with pytest.raises(CliError, match="corrupt") as e:
            checkpoint.load_checkpoint(p)
        assert "\n" not in str(e.value)
    torch.save({"hello": 1}, os.path.join(tmp_path, "other.pt"))
    with pytest.raises(CliError, match="corrupt"):
        checkpoint.load_checkpoint(os.path.join(tmp_path, "other.pt"))


def test_kv_cache_is_written_in_place_and_replicated_per_group():
    """Encoding 2 prompts once and replicating them to 3 rows each gives the keys and values
    that encoding all 6 rows gives, in buffers that decoding then writes in place."""
    from model import attention_mask, positions
    from sampler import KVCache
    m = tiny(8).eval()
    prompts = mixed_prompts()[:2]
    with torch.no_grad():
        ids, valid, _ = left_pad(prompts, toy_tasks.PAD)
        once = KVCache(m, 2, ids.shape[1])
        m.step(ids, positions(valid), attention_mask(valid, valid), once)
        rows = [p for p in prompts for _ in range(3)]
        ids6, valid6, _ = left_pad(rows, toy_tasks.PAD)
        every = KVCache(m, 6, ids.shape[1])
        m.step(ids6, positions(valid6), attention_mask(valid6, valid6), every)
        grouped = KVCache(m, 6, ids.shape[1] + 2)
        grouped.replicate(once, 3)
        n = ids.shape[1]
        torch.testing.assert_close(grouped.k[..., :n, :], every.k, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(grouped.v[..., :n, :], every.v, atol=1e-6, rtol=1e-6)
        before = grouped.k.data_ptr()
        k, _ = grouped.write(0, grouped.k[0, :, :, :1], grouped.v[0, :, :, :1])
        assert grouped.k.data_ptr() == before and k.data_ptr() == before
        assert k.shape[2] == n + 1


def test_sft_batches_in_bulk_are_the_batches_step_by_step():
    """Made k at a time (one copy to the device), each step's batch is what the same random
    streams give one step alone: its prompts left-padded to its own longest, as left_pad does."""
    import random
    task = toy_tasks.make_task("add", 2, True)
    bulk = list(sampler.sft_batches(task, toy_tasks.train_sampler(task, [], 0), 16,
                                  random.Random(1), "cpu", 0.7, 5))
    draw, rng = toy_tasks.train_sampler(task, [], 0), random.Random(1)
    for (ids_valid, tokens, mask) in bulk:
        prompts, sols = sampler.sft_texts(task, draw, 16, rng, 0.7)
        ids, valid, _ = left_pad(prompts, toy_tasks.PAD)
        assert torch.equal(ids_valid[0], ids) and torch.equal(ids_valid[1], valid)
        T = max(len(s) for s in sols)
        assert torch.equal(tokens, torch.tensor([s + [toy_tasks.PAD] * (T - len(s))
                                                 for s in sols]))
        assert torch.equal(mask, tokens != toy_tasks.PAD)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_static_decoder_samples_what_the_full_recompute_samples(temperature):
    """sample(decoder=fast_decode.decoder): one decode step of fixed shapes over the whole
    preallocated cache
    (what a CUDA graph replays on a GPU; run as it is on the CPU). Same tokens as the
    reference that recomputes every sequence, log-probs to 1e-5, and again on a second call,
    which reuses the decoder of that shape with other prompts."""
    from plumbing import fast_decode
    m = tiny(7)
    for seed, prompts in ((0, mixed_prompts()), (1, mixed_prompts()[::-1])):
        outs = [sample(m, prompts, 4, 6, temperature=temperature,
                       generator=torch.Generator().manual_seed(seed), **kw)
                for kw in ({"use_cache": False}, {"decoder": fast_decode.decoder})]
        assert torch.equal(outs[0].tokens, outs[1].tokens)
        torch.testing.assert_close(outs[0].old_logprobs, outs[1].old_logprobs, atol=1e-5, rtol=0)


def test_static_decode_is_a_flag_that_names_its_choices():
    from plumbing.config import parse_args
    from plumbing.errors import CliError
    from plumbing import fast_decode
    assert fast_decode.for_run(parse_args([], check=False), "cpu") is None
    assert fast_decode.for_run(parse_args([], check=False), "cuda") is fast_decode.decoder
    assert fast_decode.for_run(parse_args(["--static_decode=true"], check=False), "cpu") \
        is fast_decode.decoder
    with pytest.raises(CliError, match="--static_decode takes auto, true or false"):
        parse_args(["--static_decode=maybe"])
