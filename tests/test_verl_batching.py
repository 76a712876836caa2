"""--batching=verl against cuts worked by hand from verl's rules (lab/verl_batching.py):
the differencing across ranks, the even-rising odd-falling order, the mini-batches."""
import torch

import batching
from lab import verl_batching
from lab.batch_stats import minibatch_stats


def cut(lengths, M, group=None, adv=None):
    n = len(lengths)
    group = torch.arange(n) // 2 if group is None else group
    adv = torch.zeros(n) if adv is None else adv
    mbs = batching.make_minibatches("verl", group, adv, torch.tensor(lengths), M,
                                    torch.Generator().manual_seed(0))
    return [sorted(mb.tolist()) for mb in mbs]


def test_workload_is_verls():
    assert verl_batching.workload(torch.tensor([1, 100])).tolist() == [24577, 2467600]


def test_differencing_by_hand():
    # values 1..4 in pairs (1,2), (3,4): spreads 1 and 1; merge: {4,1} and {3,2}, both 5
    assert sorted(verl_batching.differencing([1, 2, 3, 4], 2)) == [[0, 3], [1, 2]]
    # unequal sizes allowed: 5 and 1,2,2 balance at 5
    assert sorted(verl_batching.differencing([5, 1, 2, 2], 2, equal_size=False)) == [
        [0], [1, 2, 3]]


def test_two_ranks_then_mini_batches_by_hand():
    # lengths 1..8 (rows 0..7). Pairs (1,2) (3,4) (5,6) (7,8) by workload; the two widest
    # pairs merge first: {8,5} {7,6}, then {4,1} {3,2}; then {8,5,3,2} and {7,6,4,1}
    # (18 length units and 102 squared units each). Rank order: sorted, the even places
    # rising then the odd falling: 2 5 8 3 and 1 6 7 4.
    assert sorted(verl_batching.rank_orders(torch.arange(1, 9), 2)) == [[0, 5, 6, 3],
                                                                         [1, 4, 7, 2]]
    L = list(range(1, 9))
    # M = 2: each rank's first half is step 1, lengths {2,5} and {1,6}
    assert cut(L, 2) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    # M = 4: the shortest go to the first and last steps, the longest to the middle two
    assert cut(L, 4) == [[0, 1], [4, 5], [6, 7], [2, 3]]


def test_one_rank_where_two_do_not_divide():
    # 7 rows: one rank; sorted 1..7, even places 1 3 5 7 then odd 6 4 2
    assert cut([4, 1, 7, 2, 6, 3, 5], 2) == [[1, 2, 5, 6], [0, 3, 4]]


def test_every_epoch_the_same_cut_and_no_random_numbers():
    L = [5, 9, 2, 7, 7, 3, 1, 8]
    g = torch.Generator().manual_seed(0)
    before = g.get_state()
    a = batching.make_minibatches("verl", torch.arange(8) // 4, torch.zeros(8),
                                  torch.tensor(L), 2, g)
    assert torch.equal(g.get_state(), before)
    assert [x.tolist() for x in a] == [x.tolist() for x in batching.make_minibatches(
        "verl", torch.arange(8) // 4, torch.zeros(8), torch.tensor(L), 2, g)]


def test_it_splits_groups_where_lengths_differ_inside_them():
    # 4 groups of 4; in each the right rollouts are short and the wrong ones long
    L = torch.tensor([10, 12, 40, 44] * 4) + torch.arange(16)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0] * 4)
    group = torch.arange(4).repeat_interleave(4)
    mbs = batching.make_minibatches("verl", group, adv, L, 4, torch.Generator())
    s = minibatch_stats(mbs, group, adv, L)
    assert s["groups_split"] == 4
    # the first and last steps get the short, right rollouts; the middle two the wrong ones
    signs = [sorted(set(adv[mb].tolist())) for mb in mbs]
    assert signs == [[1.0], [-1.0], [-1.0], [1.0]]


def test_train_runs_with_the_verl_cut(tmp_path):
    import json
    import train
    from plumbing.config import parse_args
    flags = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--sft_steps=2", "--sft_batch=8",
             "--rl_steps=2", "--prompts_per_step=4", "--group_size=4", "--eval_size=8",
             "--device=cpu", "--batching=verl", "--minibatches=2", f"--out_dir={tmp_path}"]
    train.main(parse_args(flags))
    steps = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    rl = [s for s in steps if s["phase"] == "rl" and "groups_split" in s]
    assert [s["step"] for s in rl] == [1, 2]
