"""Tests for batching.py: partitions, leftover sizes and each scheduler's promise."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batching  # noqa: E402
from batching import SCHEDULERS, make_minibatches  # noqa: E402
from lab.batch_stats import minibatch_stats  # noqa: E402

NAMES = list(SCHEDULERS)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def example_batch():
    """4 groups x 4 rollouts: A = + + + -, B = + - - -, C = + + - -, D = 0 0 0 0."""
    group_ids = torch.arange(4).repeat_interleave(4)
    advantages = torch.tensor([1.0, 1.0, 1.0, -3.0,
                               3.0, -1.0, -1.0, -1.0,
                               1.0, 1.0, -1.0, -1.0,
                               0.0, 0.0, 0.0, 0.0])
    lengths = torch.tensor([120, 80, 60, 300, 90, 400, 150, 70,
                            50, 60, 220, 100, 30, 40, 35, 45])
    return group_ids, advantages, lengths


def random_batch(seed, n_groups=6, group_size=5):
    """Random 0/1 rewards, group-centred advantages (so some groups are all zero)."""
    g = gen(1000 + seed)
    rewards = (torch.rand(n_groups, group_size, generator=g) < 0.5).float()
    advantages = (rewards - rewards.mean(dim=1, keepdim=True)).flatten()
    group_ids = torch.arange(n_groups).repeat_interleave(group_size)
    lengths = torch.randint(5, 200, (n_groups * group_size,), generator=g)
    return group_ids, advantages, lengths


def canonical(minibatches):
    return [sorted(mb.tolist()) for mb in minibatches]


def n_groups_of(group_ids):
    return len(torch.unique(group_ids))


# ------------------------------------------------------------- partitions


def valid_ms(name, group_ids):
    if name == "full":
        return [1]
    if name in ("query", "query_balanced"):
        return list(range(1, n_groups_of(group_ids) + 1))
    return [1, 2, 3, 4, 5, 7, 16]


@pytest.mark.parametrize("name", NAMES)
def test_every_scheduler_returns_a_partition(name):
    group_ids, advantages, lengths = example_batch()
    n = len(group_ids)
    for M in valid_ms(name, group_ids):
        for seed in range(3):
            mbs = make_minibatches(name, group_ids, advantages, lengths, M, gen(seed))
            assert len(mbs) == M
            assert all(mb.dtype == torch.long for mb in mbs)
            assert all(len(mb) > 0 for mb in mbs)
            assert sorted(torch.cat(mbs).tolist()) == list(range(n))


@pytest.mark.parametrize("name", NAMES)
def test_partition_with_uneven_and_non_contiguous_groups(name):
    # 5 groups of sizes 3, 4, 2, 5, 3; group ids interleaved and not 0..4.
    group_ids = torch.tensor([7, 2, 7, 9, 2, 9, 9, 4, 7, 2, 9, 4, 2, 5, 5, 9, 5])
    advantages = torch.tensor([1.0, -1.0, 0.0, 1.0, 1.0, -1.0, 0.0, 2.0, -1.0,
                               0.0, -1.0, -2.0, 0.0, 1.0, -0.5, 1.0, -0.5])
    lengths = torch.arange(1, 18) * 3
    M = 1 if name == "full" else 3
    mbs = make_minibatches(name, group_ids, advantages, lengths, M, gen(0))
    assert len(mbs) == M and all(len(mb) > 0 for mb in mbs)
    assert sorted(torch.cat(mbs).tolist()) == list(range(17))


# ---------------------------------------------------------- leftover rule


@pytest.mark.parametrize("name", ["shuffle", "sign", "length", "balanced"])
def test_leftover_sizes_first_chunks_get_one_more(name):
    group_ids, advantages, lengths = example_batch()  # N = 16
    expected = {2: [8, 8], 3: [6, 5, 5], 5: [4, 3, 3, 3, 3], 7: [3, 3, 2, 2, 2, 2, 2]}
    for M, sizes in expected.items():
        mbs = make_minibatches(name, group_ids, advantages, lengths, M, gen(1))
        assert [len(mb) for mb in mbs] == sizes


def test_query_leftover_groups_go_to_first_chunks():
    group_ids = torch.arange(5).repeat_interleave(2)  # 5 groups of 2
    advantages = torch.tensor([1.0, -1.0] * 5)
    lengths = torch.ones(10, dtype=torch.long)
    for name in ("query", "query_balanced"):
        mbs = make_minibatches(name, group_ids, advantages, lengths, 3, gen(0))
        assert [len(mb) for mb in mbs] == [4, 4, 2]  # groups per chunk: 2, 2, 1


# ------------------------------------------------------------- whole groups


@pytest.mark.parametrize("name", ["query", "query_balanced"])
def test_whole_group_schedulers_never_split_a_group(name):
    for seed in range(10):
        group_ids, advantages, lengths = random_batch(seed)
        for M in (2, 3, 4, 6):
            mbs = make_minibatches(name, group_ids, advantages, lengths, M, gen(seed))
            assert minibatch_stats(mbs, group_ids, advantages, lengths)["groups_split"] == 0


def test_shuffle_does_split_groups():
    # Control for the test above: the statistic can be non-zero.
    group_ids, advantages, lengths = example_batch()
    mbs = make_minibatches("shuffle", group_ids, advantages, lengths, 2, gen(0))
    assert minibatch_stats(mbs, group_ids, advantages, lengths)["groups_split"] > 0


def lopsided_batch():
    """8 groups of 4: four mostly-positive (3+ 1-) and four mostly-negative (1+ 3-)."""
    group_ids = torch.arange(8).repeat_interleave(4)
    up = [1.0, 1.0, 1.0, -1.0]
    down = [1.0, -1.0, -1.0, -1.0]
    advantages = torch.tensor(up * 4 + down * 4)
    lengths = torch.full((32,), 10)
    return group_ids, advantages, lengths


def sign_spread(mbs, group_ids, advantages, lengths):
    s = minibatch_stats(mbs, group_ids, advantages, lengths)
    return (max(s["mb_pos"]) - min(s["mb_pos"])) + (max(s["mb_neg"]) - min(s["mb_neg"]))


def test_query_balanced_evens_signs_better_than_query():
    group_ids, advantages, lengths = lopsided_batch()
    qb, qbal = [], []
    for seed in range(20):
        qb.append(sign_spread(make_minibatches("query", group_ids, advantages, lengths, 4,
                                               gen(seed)), group_ids, advantages, lengths))
        qbal.append(sign_spread(make_minibatches("query_balanced", group_ids, advantages,
                                                 lengths, 4, gen(seed)),
                                group_ids, advantages, lengths))
    # Pairing one "up" with one "down" group gives 4+ 4- in every mini-batch.
    assert qbal == [0] * 20
    assert sum(qb) / 20 > 0  # query is sometimes uneven on this batch
    assert sum(qbal) / 20 <= sum(qb) / 20


def test_query_balanced_finds_the_even_cut_of_a_hand_example():
    # A = (3+,1-), B = (1+,3-), C = D = (2+,2-); 2 groups per mini-batch: an even cut,
    # (4+,4-) in each, exists ({A,B} {C,D}), and must be found whatever the seed.
    group_ids = torch.arange(4).repeat_interleave(4)
    advantages = torch.tensor([1.0, 1.0, 1.0, -1.0, 1.0, -1.0, -1.0, -1.0,
                               1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    lengths = torch.ones(16, dtype=torch.long)
    for seed in range(5):
        mbs = make_minibatches("query_balanced", group_ids, advantages, lengths, 2, gen(seed))
        s = minibatch_stats(mbs, group_ids, advantages, lengths)
        assert s["mb_pos"] == [4, 4] and s["mb_neg"] == [4, 4]
        assert s["groups_split"] == 0


# ----------------------------------------------------------------- balanced


def test_balanced_spreads_every_sign_class_within_one():
    for seed in range(30):
        group_ids, advantages, lengths = random_batch(seed, n_groups=5, group_size=7)
        for M in (2, 3, 4, 6, 7):
            mbs = make_minibatches("balanced", group_ids, advantages, lengths, M, gen(seed))
            s = minibatch_stats(mbs, group_ids, advantages, lengths)
            for key in ("mb_pos", "mb_neg", "mb_zero"):
                assert max(s[key]) - min(s[key]) <= 1, (seed, M, key, s[key])
            sizes = [len(mb) for mb in mbs]
            assert max(sizes) - min(sizes) <= 1


def test_balanced_hand_example_continues_the_deal_across_classes():
    # 5 positives, 4 negatives, 3 zeros into M = 4.
    # Positives go to 0 1 2 3 0, negatives start at 1: 1 2 3 0, zeros at 1: 1 2 3.
    advantages = torch.tensor([1.0] * 5 + [-1.0] * 4 + [0.0] * 3)
    group_ids = torch.arange(12) // 4
    lengths = torch.ones(12, dtype=torch.long)
    mbs = make_minibatches("balanced", group_ids, advantages, lengths, 4, gen(0))
    s = minibatch_stats(mbs, group_ids, advantages, lengths)
    assert s["mb_pos"] == [2, 1, 1, 1]
    assert s["mb_neg"] == [1, 1, 1, 1]
    assert s["mb_zero"] == [0, 1, 1, 1]
    assert [len(mb) for mb in mbs] == [3, 3, 3, 3]


# --------------------------------------------------------------------- sign


def mixed_chunks(stats):
    classes = zip(stats["mb_pos"], stats["mb_neg"], stats["mb_zero"])
    return sum(sum(c > 0 for c in counts) > 1 for counts in classes)


def test_sign_mixes_at_most_classes_minus_one_chunks():
    for seed in range(30):
        group_ids, advantages, lengths = random_batch(seed, n_groups=5, group_size=6)
        s_all = minibatch_stats([torch.arange(30)], group_ids, advantages, lengths)
        k = sum(c > 0 for c in (s_all["mb_pos"][0], s_all["mb_neg"][0], s_all["mb_zero"][0]))
        for M in (2, 3, 4, 7):
            mbs = make_minibatches("sign", group_ids, advantages, lengths, M, gen(seed))
            assert mixed_chunks(minibatch_stats(mbs, group_ids, advantages, lengths)) <= k - 1


def test_sign_hand_examples():
    group_ids = torch.arange(16) // 4
    lengths = torch.ones(16, dtype=torch.long)

    advantages = torch.tensor([1.0] * 8 + [-1.0] * 8)
    mbs = make_minibatches("sign", group_ids, advantages, lengths, 2, gen(0))
    s = minibatch_stats(mbs, group_ids, advantages, lengths)
    assert s["mb_pos"] == [8, 0] and s["mb_neg"] == [0, 8]
    assert mixed_chunks(s) == 0

    advantages = torch.tensor([1.0] * 6 + [-1.0] * 10)
    mbs = make_minibatches("sign", group_ids, advantages, lengths, 2, gen(0))
    s = minibatch_stats(mbs, group_ids, advantages, lengths)
    assert s["mb_pos"] == [6, 0] and s["mb_neg"] == [2, 8]
    assert mixed_chunks(s) == 1

    # Zeros sit between positives and negatives: 4+ 4 zeros 8-, M = 4.
    advantages = torch.tensor([1.0] * 4 + [0.0] * 4 + [-1.0] * 8)
    mbs = make_minibatches("sign", group_ids, advantages, lengths, 4, gen(0))
    s = minibatch_stats(mbs, group_ids, advantages, lengths)
    assert s["mb_pos"] == [4, 0, 0, 0] and s["mb_zero"] == [0, 4, 0, 0]
    assert s["mb_neg"] == [0, 0, 4, 4]


# ------------------------------------------------------------------- length


def test_length_spread_not_worse_than_shuffle_on_heavy_tailed_lengths():
    wins = 0
    for seed in range(20):
        g = gen(500 + seed)
        lengths = (8 * torch.exp(1.5 * torch.randn(48, generator=g))).long() + 1
        group_ids = torch.arange(48) // 6
        advantages = torch.randn(48, generator=g)
        for M in (3, 4, 5):
            sh = make_minibatches("shuffle", group_ids, advantages, lengths, M, gen(seed))
            ln = make_minibatches("length", group_ids, advantages, lengths, M, gen(seed))
            sh_spread = minibatch_stats(sh, group_ids, advantages, lengths)["token_spread"]
            ln_spread = minibatch_stats(ln, group_ids, advantages, lengths)["token_spread"]
            assert ln_spread <= sh_spread, (seed, M, ln_spread, sh_spread)
            wins += ln_spread < sh_spread
    assert wins >= 50  # strictly better almost always, not just tied


def test_length_hand_example():
    # Sorted: 100 60 50 40 4 3 2 1, two chunks of 4.
    # 100->0, 60->1, 50->1 (60<100), 40->0 (100<110), 4->1, 3->1 (chunk 1 full),
    # 2->0, 1->0: chunk 0 = {100,40,2,1} = 143, chunk 1 = {60,50,4,3} = 117.
    lengths = torch.tensor([100, 1, 2, 50, 3, 40, 60, 4])
    group_ids = torch.arange(8) // 4
    advantages = torch.zeros(8)
    mbs = make_minibatches("length", group_ids, advantages, lengths, 2, gen(0))
    assert canonical(mbs) == [[0, 1, 2, 5], [3, 4, 6, 7]]
    s = minibatch_stats(mbs, group_ids, advantages, lengths)
    assert s["token_counts"] == [143, 117]
    assert s["token_spread"] == 26


# -------------------------------------------------------------------- stats


def test_minibatch_stats_hand_example():
    group_ids, advantages, lengths = example_batch()
    mbs = [torch.tensor([0, 1, 2, 3, 4, 5]),        # A+ A+ A+ A- B+ B-
           torch.tensor([6, 7, 8, 12, 13]),         # B- B- C+ D0 D0
           torch.tensor([9, 10, 11, 14, 15])]       # C+ C- C- D0 D0
    s = minibatch_stats(mbs, group_ids, advantages, lengths)
    assert s["mb_pos"] == [4, 1, 1]
    assert s["mb_neg"] == [2, 2, 2]
    assert s["mb_zero"] == [0, 2, 2]
    assert s["groups_split"] == 3  # B, C and D are split; A is not
    assert s["token_counts"] == [1050, 340, 460]
    assert s["token_spread"] == 710
    assert all(type(v) is int for v in s["mb_pos"] + s["token_counts"])
    assert type(s["groups_split"]) is int and type(s["token_spread"]) is int


# -------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", ["shuffle", "query", "balanced", "sign", "length",
                                  "query_balanced"])
def test_same_seed_same_cut_other_seed_other_cut(name):
    group_ids, advantages, lengths = example_batch()
    if name == "length":
        # With distinct lengths the greedy cut is fixed; only ties leave room for chance.
        lengths = torch.tensor([10, 20] * 8)
    M = 2
    a = make_minibatches(name, group_ids, advantages, lengths, M, gen(0))
    b = make_minibatches(name, group_ids, advantages, lengths, M, gen(0))
    assert [x.tolist() for x in a] == [x.tolist() for x in b]
    others = [canonical(make_minibatches(name, group_ids, advantages, lengths, M, gen(s)))
              for s in range(1, 6)]
    assert any(o != canonical(a) for o in others)


def test_full_is_the_identity():
    group_ids, advantages, lengths = example_batch()
    mbs = make_minibatches("full", group_ids, advantages, lengths, 1, gen(0))
    assert [mb.tolist() for mb in mbs] == [list(range(16))]


# ---------------------------------------------------------------- bad input


def error_of(*args):
    with pytest.raises(ValueError) as info:
        make_minibatches(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_bad_inputs_raise_one_line_errors():
    group_ids, advantages, lengths = example_batch()
    assert "at least 1" in error_of("shuffle", group_ids, advantages, lengths, 0, gen(0))
    assert "17" in error_of("shuffle", group_ids, advantages, lengths, 17, gen(0))
    message = error_of("random", group_ids, advantages, lengths, 2, gen(0))
    assert "'random'" in message and all(name in message for name in NAMES)
    message = error_of("query", group_ids, advantages, lengths, 5, gen(0))
    assert "4 groups" in message
    assert "4 groups" in error_of("query_balanced", group_ids, advantages, lengths, 5, gen(0))
    message = error_of("full", group_ids, advantages, lengths, 4, gen(0))
    assert "minibatches=1" in message and "got 4" in message
    assert "15" in error_of("shuffle", group_ids, advantages[:15], lengths, 2, gen(0))
    assert "integer" in error_of("shuffle", group_ids, advantages, lengths, 2.5, gen(0))
    bad = advantages.clone()
    bad[3] = float("nan")
    assert "NaN" in error_of("sign", group_ids, bad, lengths, 2, gen(0))


def test_full_called_directly_rejects_more_than_one_minibatch():
    group_ids, advantages, lengths = example_batch()
    with pytest.raises(ValueError, match="needs minibatches=1, got 4"):
        batching.full(group_ids, advantages, lengths, 4, gen(0))


@pytest.mark.parametrize("name", NAMES)
def test_schedule_is_make_minibatches_without_the_callers_checks(name):
    """train.py calls ``schedule`` (its flags checked with the run's): the same cut as
    make_minibatches for every valid M and seed, on inputs of any device and dtype; a NaN
    advantage is still one error."""
    group_ids, advantages, lengths = random_batch(3)
    for M in valid_ms(name, group_ids)[:4]:
        for seed in range(3):
            want = make_minibatches(name, group_ids, advantages, lengths, M, gen(seed))
            got = batching.schedule(name, group_ids.tolist(), advantages.double(),
                                    lengths.int(), M, gen(seed))
            assert canonical(got) == canonical(want) and len(got) == M
            assert [mb.tolist() for mb in got] == [mb.tolist() for mb in want]
    bad = advantages.clone()
    bad[0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        batching.schedule(name, group_ids, bad, lengths, 1, gen(0))
