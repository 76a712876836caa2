"""verl_batching.py: verl's cut of a rollout batch, as the scheduler ``--batching=verl``.

What it teaches
---------------
verl's trainer (``trainer.balance_batch``, on by default) reorders every rollout batch
before the actor sees it, so that each data-parallel rank gets about the same work
(``RayPPOTrainer._balance_batch``, verl/trainer/ppo/ray_trainer.py at b178a3c):

1. Each rollout's workload is 24576 L + L^2 (``calculate_workload``,
   verl/utils/seqlen_balancing.py: a 7B model's FLOPs per sequence, up to a factor).
2. The workloads are split into D equal-sized parts, one per rank, by the largest
   differencing method of Karmarkar and Karp (``get_seqlen_balanced_partitions``).
3. Inside each part the rollouts are sorted by workload, and laid out as the even places
   rising, then the odd places falling (short ones at both ends, for pipeline bubbles).
4. Rank r takes part r. Its actor cuts its rows, in that order, into M consecutive
   mini-batches (``data.split(ppo_mini_batch_size)``, verl/workers/actor/dp_actor.py),
   the same cut in every epoch. Mini-batch m of the optimizer is chunk m of every rank.

Nothing in it reads a group. So a group's rollouts land in the mini-batch their lengths
send them to. With M = 2, step 3 sends the even places of the length order to the first
step and the odd places to the second. With M = 4, the short rollouts go to steps 1
and 4 and the long ones to steps 2 and 3. Where length goes with reward, so do the
steps. verl keeps a group on one rank only with ``use_prefix_grouper``
(``get_group_balanced_partitions``), which this copy does not imitate.

How this copy differs from verl: L is the completion's length (the scheduler does not see
the prompt; a group's rollouts share one prompt); ties in the differencing are broken by
the order the states were made, not by comparing their items as verl does; where D does
not divide N, or a rank would get fewer than M rows, it cuts as one rank (verl asserts
instead); where M does not divide a rank's rows, the first chunks get one more (verl
asserts). The cut reads no random numbers: the generator is unused, as in verl.
"""

import heapq

import torch

import batching

DP = 2  # the data-parallel ranks the cut imitates (the smallest that partitions)


def workload(lengths):
    """verl's calculate_workload: 24576 L + L^2 per rollout (a 7B model's hidden size 4096)."""
    L = torch.as_tensor(lengths, dtype=torch.long)
    return 24576 * L + L * L


def differencing(values, k, equal_size=True):
    """k lists of indices whose sums of ``values`` are near equal: the largest differencing
    method. A state is k sets; merge two states by pairing the largest set of one with
    the smallest of the other, and merge first the two states of largest spread
    (largest sum minus smallest). equal_size: start from the values sorted and taken k at
    a time (one per set), so that every set gets len(values) / k of them."""
    order = sorted((v, i) for i, v in enumerate(values))
    if equal_size:
        starts = [order[j:j + k] for j in range(0, len(order), k)]
    else:
        starts = [[item] for item in order]
    heap = []
    for n, items in enumerate(starts):
        sets = [[v, [i]] for v, i in items] + [[0, []] for _ in range(k - len(items))]
        sets.sort(key=lambda s: -s[0])
        heapq.heappush(heap, (-(sets[0][0] - sets[-1][0]), -sets[0][0], n, sets))
    n = len(starts)
    while len(heap) > 1:
        a, b = heapq.heappop(heap)[3], heapq.heappop(heap)[3]
        sets = [[a[j][0] + b[k - 1 - j][0], a[j][1] + b[k - 1 - j][1]] for j in range(k)]
        sets.sort(key=lambda s: -s[0])
        heapq.heappush(heap, (-(sets[0][0] - sets[-1][0]), -sets[0][0], n, sets))
        n += 1
    return [sorted(s[1]) for s in heap[0][3]]


def rank_orders(lengths, dp):
    """Each rank's rows, in the order its actor reads them (steps 1 to 3 above)."""
    w = workload(lengths).tolist()
    out = []
    for part in differencing(w, dp, equal_size=True):
        part = sorted(part, key=lambda i: (w[i], i))
        out.append(part[::2] + part[1::2][::-1])
    return out


def verl(group, advantages, lengths, M, generator, dp=DP):
    """verl's balance_batch on ``dp`` ranks, then each rank's M consecutive mini-batches;
    mini-batch m holds chunk m of every rank."""
    n = len(lengths)
    if n % dp or n // dp < M:
        dp = 1
    chunks = [[] for _ in range(M)]
    for order in rank_orders(lengths, dp):
        rows = torch.tensor(order, dtype=torch.long, device="cpu")
        for m, part in enumerate(torch.tensor_split(rows, M)):
            chunks[m].append(part)
    return [torch.cat(c) for c in chunks]


# verl's cut joins the lesson's registry, as the catalogue's objectives join loss.py's
batching.SCHEDULERS.setdefault("verl", verl)
