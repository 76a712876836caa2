"""batch_stats.py: numbers about one rollout batch and its optimizer steps, for the log.

What it teaches: the quantities that explain a run's curves without being part of the
method. The lengths of right and wrong completions (what GRPO's 1/L_i is said to bend,
E10), how far the ratios moved from 1 (off-policy reuse), and how the scheduler's cut
split the groups and the signs across mini-batches (batching.py, THEORY.md section 5).
"""

import torch


def lengths_by_outcome(batch):
    """Mean completion length (tokens, EOS included) of the right and of the wrong rollouts:
    what GRPO's 1/L_i is said to bend (Dr. GRPO: wrong ones grow). None when there are none."""
    lens, right = batch.mask.sum(1).float(), batch.rewards > 0  # rewards are 0 or 1
    mean = lambda rows: float(lens[rows].mean()) if bool(rows.any()) else None
    return {"length_correct": mean(right), "length_incorrect": mean(~right)}


def ratio_stats(logp, old_logp, mask):
    """How far one micro-batch is off-policy: the mean sequence ratio s_i over completions
    and the mean |log rho| over tokens (both 1 and 0 on-policy), as tensors (not read back:
    train.py reads a step's numbers at once)."""
    mask_f = mask.float()
    lens = mask.sum(1)
    log_ratio = ((logp - old_logp) * mask_f).detach()
    seq_ratio = (log_ratio.sum(1) / lens.clamp(min=1)).exp()
    live = lens > 0  # every completion has a token (its EOS at least): all rows, in practice
    mean = (seq_ratio * live).sum() / live.sum().clamp(min=1)
    return {"seq_ratio": torch.where(live.any(), mean, torch.ones_like(mean)),
            "abs_log_ratio": log_ratio.abs().sum() / mask_f.sum().clamp(min=1)}


def minibatch_stats(minibatches, group, advantages, lengths):
    """Plain Python numbers for the log.

    mb_pos, mb_neg, mb_zero  counts of positive, negative and zero-advantage
                             rollouts per mini-batch
    groups_split             number of groups whose rollouts land in more
                             than one mini-batch
    token_counts             completion tokens per mini-batch
    token_spread             max(token_counts) - min(token_counts)
    """
    mb_pos = [int((advantages[mb] > 0).sum()) for mb in minibatches]
    mb_neg = [int((advantages[mb] < 0).sum()) for mb in minibatches]
    mb_zero = [int((advantages[mb] == 0).sum()) for mb in minibatches]
    token_counts = [int(lengths[mb].sum()) for mb in minibatches]
    seen_in = {}
    for c, mb in enumerate(minibatches):
        for gid in group[mb].tolist():
            seen_in.setdefault(gid, set()).add(c)
    return {
        "mb_pos": mb_pos,
        "mb_neg": mb_neg,
        "mb_zero": mb_zero,
        "groups_split": sum(len(chunks) > 1 for chunks in seen_in.values()),
        "token_spread": max(token_counts) - min(token_counts),
        "token_counts": token_counts,
    }
