"""Check for exercise 5: a valid whole-group cut with a lower sign spread than shuffle."""

import pytest
import torch

import _impl
import batching
import loss as L

scheduler = _impl.load("ex5_scheduler").scheduler


@pytest.fixture(autouse=True)
def trap(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("exercise 5 asks for your own scheduler, not batching.query_balanced")
    monkeypatch.setattr(batching, "query_balanced", refuse)
    monkeypatch.setitem(batching.SCHEDULERS, "query_balanced", refuse)


def make_batch(seed, B=8, G=4):
    """B groups x G rollouts in shuffled order; each group has its own success rate."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(B, 1, generator=g)
    rewards = (torch.rand(B, G, generator=g) < p).float().flatten()
    group_ids = torch.arange(B).repeat_interleave(G)
    perm = torch.randperm(B * G, generator=g)
    rewards, group_ids = rewards[perm], group_ids[perm]
    advantages = L.advantages(rewards, group_ids, "dr_grpo")
    lengths = torch.randint(3, 9, (B * G,), generator=g)
    return group_ids, advantages, lengths


def sign_spread(stats):
    return (max(stats["mb_pos"]) - min(stats["mb_pos"])) + (max(stats["mb_neg"]) - min(stats["mb_neg"]))


def assert_valid(mbs, group_ids, M):
    assert isinstance(mbs, (list, tuple)) and len(mbs) == M, f"expected a list of {M} index tensors"
    assert all(len(mb) > 0 for mb in mbs), "a mini-batch is empty"
    flat = sorted(torch.cat([torch.as_tensor(mb, dtype=torch.long) for mb in mbs]).tolist())
    assert flat == list(range(len(group_ids))), "the mini-batches must hold every rollout exactly once"
    n_groups = [len(torch.unique(group_ids[torch.as_tensor(mb)])) for mb in mbs]
    assert max(n_groups) - min(n_groups) <= 1, f"groups per mini-batch {n_groups} differ by more than 1"


@pytest.mark.parametrize("B, G, M", [(8, 4, 1), (8, 4, 2), (8, 4, 3), (8, 4, 8), (5, 3, 2), (6, 5, 4)])
def test_ex5_valid_whole_group_cut(B, G, M):
    for seed in range(5):
        group_ids, adv, lens = make_batch(seed, B, G)
        group_ids = group_ids * 7 + 3  # arbitrary labels
        mbs = scheduler(group_ids, adv, lens, M, torch.Generator().manual_seed(seed))
        assert_valid(mbs, group_ids, M)
        stats = batching.minibatch_stats([torch.as_tensor(mb) for mb in mbs], group_ids, adv, lens)
        assert stats["groups_split"] == 0, "a group is split across mini-batches"


def test_ex5_same_seed_same_cut():
    group_ids, adv, lens = make_batch(0)
    a = scheduler(group_ids, adv, lens, 4, torch.Generator().manual_seed(3))
    b = scheduler(group_ids, adv, lens, 4, torch.Generator().manual_seed(3))
    assert [sorted(x.tolist()) for x in a] == [sorted(x.tolist()) for x in b]


@pytest.mark.parametrize("M", [2, 4])
def test_ex5_beats_shuffle_and_query(M):
    spread = {"yours": 0, "shuffle": 0, "query": 0}
    for seed in range(200):
        group_ids, adv, lens = make_batch(seed)
        for name, fn in (("yours", scheduler), ("shuffle", batching.shuffle), ("query", batching.query)):
            mbs = [torch.as_tensor(mb) for mb in fn(group_ids, adv, lens, M, torch.Generator().manual_seed(seed))]
            stats = batching.minibatch_stats(mbs, group_ids, adv, lens)
            if name == "yours":
                assert_valid(mbs, group_ids, M)
                assert stats["groups_split"] == 0, f"batch {seed}: a group is split"
            spread[name] += sign_spread(stats) / 200
    msg = ", ".join(f"{k} {v:.2f}" for k, v in spread.items())
    assert spread["yours"] < spread["shuffle"] and spread["yours"] < spread["query"], \
        f"M={M}: mean sign spread {msg}"
