"""Mini-batch schedulers: which rollouts share an optimizer step.

One rollout batch holds B groups of G completions each. The trainer usually
takes several optimizer steps on it: the batch is cut into M mini-batches, and
the cut is repeated for each of E epochs. The cut looks like bookkeeping, but
it decides which rollouts meet inside one update (arXiv 2605.08666).

A token that every rollout of one group emits after the same history (the
end of the prompt, a shared format prefix: a group-shared token) gets the summed
gradient (sum_i c_i) * grad log pi(a | h). With centred advantages, sum_i Â_i = 0,
so with equal weights that sum cancels, but only when all the copies are applied
in the same step.
If the positive copies go into step 1 and the negative copies into step 2, the
shared token is first pushed up and then pushed down at different
parameters. Nothing cancels, and the token drifts.

Each scheduler below is a pure function

    scheduler(group, advantages, lengths, M, generator) -> list of M LongTensors

- group:      LongTensor [N], the group (prompt) of each rollout. Groups need
  not be contiguous.
- advantages: FloatTensor [N]. Only the sign is used: positive (> 0),
  negative (< 0) or zero (== 0).
- lengths:    LongTensor [N], completion tokens of each rollout.
- generator:  a seeded torch.Generator. It is the only source of randomness.

The M index tensors returned form a partition of range(N): every rollout is
in exactly one mini-batch, and no mini-batch is empty. The order inside a
mini-batch does not matter, because a step sums over it.

The rules:

  full            M = 1: one step on the whole batch.
  shuffle         Permute the rollouts, then cut into M chunks (TRL).
  length          Balance the token totals across the M chunks themselves,
                  with the shuffle sizes. Greedy: shuffle, stable-sort by
                  length (longest first), then put each rollout into the
                  chunk with the fewest tokens among those with room. (verl's
                  balance_batch is another cut: ranks first, then mini-batches.)
  query (QB)      Permute the groups, then cut the list of groups into M
                  chunks. Each mini-batch gets whole groups.
  balanced (RB)   Shuffle the positives, the negatives and the zeros, each
                  class on its own. Line them up (positives, negatives,
                  zeros) and deal them round-robin to the M mini-batches, the
                  way cards are dealt. The deal runs on across classes: the
                  negatives start at the mini-batch after the one that got
                  the last positive. Each class's count per mini-batch then
                  differs by at most 1, and the sizes are those of shuffle.
  sign            Control. It is built to block cancellation, not to be
                  used for training. Line up all positives, then zeros, then
                  negatives (each class shuffled), and cut into M chunks of
                  the shuffle sizes. Chunks are single-sign wherever the
                  counts allow. A chunk is mixed only when a class boundary
                  falls inside it, so with k non-empty classes at most k-1
                  chunks are mixed.
  query_balanced  Whole groups, as in QB, with the same number of groups
                  per mini-batch. The groups are placed so that the positive
                  and negative counts per mini-batch come out even.

QB and query_balanced keep every group's sum of A = 0 inside one step. RB
keeps positives and negatives meeting in every step, but it splits groups.

Leftovers. When M does not divide the number of items being cut (rollouts,
or groups for query and query_balanced), the first (count mod M) chunks get
one extra item. These are the sizes torch.tensor_split produces. For
example, 16 rollouts into 3 mini-batches gives sizes 6, 5, 5.

train.py calls schedule(name, ...), its flags checked with the run's; make_minibatches(name,
...) validates a caller's own inputs first.
"""

import operator

import torch

# ---------------------------------------------------------------- helpers


def _sizes(count, M):
    """Chunk sizes for `count` items in M chunks: the first count % M get +1."""
    q, r = divmod(count, M)
    return [q + 1 if c < r else q for c in range(M)]


def _randperm(n, generator):
    """A random permutation of 0..n-1 from ``generator`` (drawn on the generator's device,
    so that a run's stream is the same whatever its device), as a CPU index tensor."""
    return torch.randperm(n, generator=generator, device=generator.device).cpu()


def _cut(order, M):
    """Cut a 1-D index tensor into M consecutive chunks (tensor_split sizes)."""
    return [chunk.clone() for chunk in torch.tensor_split(order, M)]


def _shuffled(idx, generator):
    """A random permutation of the index tensor `idx`."""
    return idx[_randperm(len(idx), generator)]


def _sign_classes(advantages):
    """Indices of positive, negative and zero-advantage rollouts."""
    pos = torch.nonzero(advantages > 0).flatten()
    neg = torch.nonzero(advantages < 0).flatten()
    zero = torch.nonzero(advantages == 0).flatten()
    return pos, neg, zero


def _groups(group):
    """The distinct group ids and, for each, the indices of its rollouts."""
    ids = torch.unique(group)
    members = [torch.nonzero(group == gid).flatten() for gid in ids]
    return ids, members


# ------------------------------------------------------------- schedulers


def full(group, advantages, lengths, M, generator):
    """One step on the whole batch. Nothing is ever split."""
    if M != 1:
        raise ValueError(
            f"batching 'full' takes the whole batch in one step; "
            f"it needs minibatches=1, got {M}")
    return [torch.arange(len(group), dtype=torch.long, device="cpu")]


def shuffle(group, advantages, lengths, M, generator):
    """Random permutation cut into M chunks: a group lands wherever it lands."""
    return _cut(_randperm(len(group), generator), M)


def length(group, advantages, lengths, M, generator):
    """Even token totals per chunk, with the chunk sizes of `shuffle`.

    1. Shuffle the rollouts, so that ties in length are broken at random.
    2. Stable-sort them by length, longest first.
    3. Take the rollouts in that order. Put each one into the chunk with
       the smallest token total among the chunks that are not yet full.
       Ties go to the lowest chunk index.

    This is the longest-processing-time rule with a cap on each chunk's size.
    Long rollouts are spread out first, and the short ones fill the gaps.
    """
    n = len(lengths)
    order = _randperm(n, generator)
    order = order[torch.sort(lengths[order], descending=True, stable=True).indices]
    room = _sizes(n, M)
    tokens = [0] * M
    chunks = [[] for _ in range(M)]
    for i in order.tolist():
        c = min((c for c in range(M) if room[c] > 0), key=lambda c: tokens[c])
        chunks[c].append(i)
        tokens[c] += int(lengths[i])
        room[c] -= 1
    return [torch.tensor(chunk, dtype=torch.long, device="cpu") for chunk in chunks]


def query(group, advantages, lengths, M, generator):
    """QB: permute the groups and give each mini-batch whole groups."""
    _, members = _groups(group)
    group_order = _randperm(len(members), generator)
    return [torch.cat([members[g] for g in part.tolist()])
            for part in torch.tensor_split(group_order, M)]


def balanced(group, advantages, lengths, M, generator):
    """RB: deal positives, then negatives, then zeros round-robin.

    Rollout k of the line-up goes to mini-batch k mod M. Each class is one
    run of consecutive positions in the line-up, so each class is spread
    evenly (counts differ by at most 1). Because the deal runs on across
    classes, the total sizes are those of `shuffle`.
    """
    pos, neg, zero = _sign_classes(advantages)
    line_up = torch.cat([_shuffled(pos, generator),
                         _shuffled(neg, generator),
                         _shuffled(zero, generator)])
    return [line_up[c::M].clone() for c in range(M)]


def sign(group, advantages, lengths, M, generator):
    """Control: positives, then zeros, then negatives, cut into M chunks."""
    pos, neg, zero = _sign_classes(advantages)
    line_up = torch.cat([_shuffled(pos, generator),
                         _shuffled(zero, generator),
                         _shuffled(neg, generator)])
    return _cut(line_up, M)


def query_balanced(group, advantages, lengths, M, generator):
    """Whole groups per mini-batch, with positive and negative counts even.

    Mini-batch c holds as many groups as it would under `query`, and no group
    is split. Among such cuts it seeks one whose per-mini-batch positive
    counts P_c and negative counts N_c are even: it lowers
    S = sum_c (P_c^2 + N_c^2), which is smallest when the counts are equal.
    All randomness comes from `generator` (the same seed, the same cut).
    """
    # 1. Shuffle the groups, then stable-sort them by the number of signed
    #    rollouts (p + n), most first.
    # 2. Greedy: put each group into the mini-batch, among those with room,
    #    where it raises S the least: the smallest p * P_c + n * N_c. Ties go
    #    to the lowest index.
    # 3. Swaps: while swapping two groups in different mini-batches lowers S,
    #    swap them. S is an integer that drops at every swap, so this ends.
    _, members = _groups(group)
    n_groups = len(members)
    p = [int((advantages[m] > 0).sum()) for m in members]
    n = [int((advantages[m] < 0).sum()) for m in members]

    order = _randperm(n_groups, generator).tolist()
    order.sort(key=lambda g: -(p[g] + n[g]))  # list.sort is stable

    room = _sizes(n_groups, M)
    P, N = [0] * M, [0] * M
    where = [0] * n_groups
    for g in order:
        c = min((c for c in range(M) if room[c] > 0),
                key=lambda c: p[g] * P[c] + n[g] * N[c])
        where[g] = c
        P[c] += p[g]
        N[c] += n[g]
        room[c] -= 1

    improved = True
    while improved:
        improved = False
        for a in range(n_groups):
            for b in range(a + 1, n_groups):
                ca, cb = where[a], where[b]
                if ca == cb:
                    continue
                dp, dn = p[a] - p[b], n[a] - n[b]  # what ca loses and cb gains
                before = P[ca] ** 2 + P[cb] ** 2 + N[ca] ** 2 + N[cb] ** 2
                after = ((P[ca] - dp) ** 2 + (P[cb] + dp) ** 2
                         + (N[ca] - dn) ** 2 + (N[cb] + dn) ** 2)
                if after < before:
                    where[a], where[b] = cb, ca
                    P[ca] -= dp
                    P[cb] += dp
                    N[ca] -= dn
                    N[cb] += dn
                    improved = True

    chunks = [[] for _ in range(M)]
    for g in order:
        chunks[where[g]].append(members[g])
    return [torch.cat(chunk) for chunk in chunks]


SCHEDULERS = {
    "full": full,
    "shuffle": shuffle,
    "length": length,
    "query": query,
    "balanced": balanced,
    "sign": sign,
    "query_balanced": query_balanced,
}

# The schedulers that give every mini-batch whole groups, so that each group's
# copies of a shared token meet in one optimizer step.
WHOLE_GROUPS = ("query", "query_balanced")


def scheduler(name):
    """The scheduler called ``name``; a ValueError naming the choices otherwise."""
    if name not in SCHEDULERS:
        raise ValueError(f"unknown batching {name!r}; choose one of {', '.join(SCHEDULERS)}")
    return SCHEDULERS[name]


def keeps_groups_whole(name):
    """Does scheduler ``name`` put every group into one mini-batch?"""
    return name in WHOLE_GROUPS


# ------------------------------------------------------------ entry points


def schedule(name, group, advantages, lengths, M, generator):
    """The cut of scheduler ``name``, as train.py takes it: its flags were checked with the
    run's (plumbing/config.py), so only the advantages' signs are checked here."""
    # index bookkeeping runs on the CPU, whatever device the rollouts live on
    group = torch.as_tensor(group, dtype=torch.long, device="cpu")
    advantages = torch.as_tensor(advantages, dtype=torch.float32, device="cpu")
    lengths = torch.as_tensor(lengths, dtype=torch.long, device="cpu")
    if torch.isnan(advantages).any():
        raise ValueError("advantages contain NaN, so their sign is undefined")
    return SCHEDULERS[name](group, advantages, lengths, M, generator)


def make_minibatches(name, group, advantages, lengths, M, generator):
    """Validate a caller's own inputs (an exercise's, an experiment's), then ``schedule``.

    Each error raises ValueError with a one-line message.
    """
    scheduler(name)
    group = torch.as_tensor(group, dtype=torch.long, device="cpu")
    advantages = torch.as_tensor(advantages, dtype=torch.float32, device="cpu")
    lengths = torch.as_tensor(lengths, dtype=torch.long, device="cpu")
    if not (group.dim() == advantages.dim() == lengths.dim() == 1):
        raise ValueError(
            f"group, advantages and lengths must be 1-D; got shapes "
            f"{tuple(group.shape)}, {tuple(advantages.shape)}, "
            f"{tuple(lengths.shape)}")
    n = len(group)
    if not (len(advantages) == n == len(lengths)):
        raise ValueError(
            f"group, advantages and lengths need one entry per rollout; "
            f"got {n}, {len(advantages)}, {len(lengths)}")
    try:
        M = operator.index(M)
    except TypeError:
        raise ValueError(f"minibatches must be an integer, got {M!r}") from None
    if M < 1:
        raise ValueError(f"minibatches must be at least 1, got {M}")
    if M > n:
        raise ValueError(
            f"minibatches={M} is more than the {n} rollouts in the batch; "
            f"every mini-batch needs at least one")
    if keeps_groups_whole(name):
        n_groups = len(torch.unique(group))
        if M > n_groups:
            raise ValueError(
                f"batching {name!r} gives each mini-batch whole groups; "
                f"minibatches={M} is more than the {n_groups} groups")
    return schedule(name, group, advantages, lengths, M, generator)
