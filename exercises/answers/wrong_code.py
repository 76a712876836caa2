"""Teacher's side: the catalogue of wrong programs for exercises 2, 3, 5 and 6.

Each entry is code a student who half understands the exercise could write. Every one
must fail at least one property of exercises/check.py (tests/test_exercises.py and the
audit check that). ``REFERENCE`` names the right answers: the library's own functions
in the teacher's repository.
"""

import torch

import batching
import loss

# Taken when this module is imported: tests replace the library's functions by the wrong
# ones below, and a wrong one that calls the reference must not call itself.
REFERENCE = {"adv_orthogonal": loss.adv_orthogonal, "min_replace": loss.min_replace,
             "query_balanced": batching.query_balanced}


def reference(name):
    return REFERENCE[name]


def per_group(fn):
    """Apply fn(w, adv) to each group's rows."""
    def out(w, adv, group):
        res = w.clone()
        for g in torch.unique(group):
            m = group == g
            res[m] = fn(w[m], adv[m].to(w.dtype))
        return res
    return out


def projection(denominator=lambda a: a @ a, guard=lambda a: float(a @ a) > 0):
    def fn(w, a):
        return w - (a @ w) / denominator(a) * a if guard(a) else w
    return fn


def recentred(w, adv, group):  # re-centres A inside each group before projecting
    return per_group(lambda w, a: projection()(w, a - a.mean()))(w, adv, group)


def reshaped(w, adv, group):  # assumes contiguous groups of equal size
    K = len(torch.unique(group))
    W, A = w.reshape(K, -1), adv.reshape(K, -1).to(w.dtype)
    sq = (A * A).sum(1, keepdim=True)
    return (W - torch.where(sq > 0, (A * W).sum(1, keepdim=True) / sq.clamp(min=1e-12),
                            0 * sq) * A).reshape(-1)


def no_guard(w, adv, group):  # 0/0 in a group whose advantages are all zero
    return per_group(projection(guard=lambda a: True))(w, adv, group)


def in_place(w, adv, group):  # right values, but overwrites the caller's w
    return w.copy_(reference("adv_orthogonal")(w.clone(), adv, group))


def whole_batch(w, adv, group):  # one projection over the batch, not per group
    adv = adv.to(w.dtype)
    return w - (adv @ w) / (adv @ adv) * adv


def runs(fn):
    """fn(w, adv) over contiguous runs of equal labels only (assumes sorted rows)."""
    def out(w, adv, group):
        res, start = w.clone(), 0
        for n in torch.unique_consecutive(group, return_counts=True)[1].tolist():
            res[start:start + n] = fn(w[start:start + n], adv[start:start + n].to(w.dtype))
            start += n
        return res
    return out


def skips_single_rows(w, adv, group):  # "a group of one cannot be projected"
    out = reference("adv_orthogonal")(w, adv, group)
    for g in torch.unique(group):
        m = group == g
        if int(m.sum()) == 1:
            out[m] = w[m]
    return out


def detached(w, adv, group):  # right values, but no gradient flows back to w
    return reference("adv_orthogonal")(w, adv, group).detach()


def float32_out(w, adv, group):  # computes in float32 whatever the input
    return reference("adv_orthogonal")(w.float(), adv.float(), group)


def rebuilt(w, adv, group):  # right values copied into a new tensor: no gradient
    return torch.tensor(reference("adv_orthogonal")(w, adv, group).tolist(), dtype=w.dtype)


EX2 = {
    "re-centred A": recentred,
    "equal contiguous groups": reshaped,
    "no 0/0 guard": no_guard,
    "modifies its input": in_place,
    "one projection for the batch": whole_batch,
    "projected on sign(A)": per_group(lambda w, a: projection()(w, torch.sign(a))
                                      if float(a @ a) > 0 else w),
    "the part along A kept, not removed": per_group(
        lambda w, a: (a @ w) / (a @ a) * a if float(a @ a) > 0 else 0 * w),
    "w centred instead of projected": per_group(lambda w, a: w - w.mean() + 1),
    "skips groups of one row": skips_single_rows,
    "output detached": detached,
    "output rebuilt from numbers": rebuilt,
    "guard at |A|^2 < 0.01": per_group(projection(guard=lambda a: float(a @ a) >= 0.01)),
    "float32 output": float32_out,
    "divided by |A|, not |A|^2": per_group(projection(denominator=lambda a: (a @ a).sqrt())),
    "no denominator": per_group(projection(denominator=lambda a: 1.0)),
    "contiguous runs": runs(projection()),
    "the part along A added": per_group(
        lambda w, a: w + (a @ w) / (a @ a) * a if float(a @ a) > 0 else w),
}


def min_runs(w, adv, group):  # min over contiguous runs of equal labels only
    return runs(lambda w, a: torch.full_like(w, float(w.min())))(w, adv, group)


EX3 = {
    "contiguous runs": min_runs,
    "global min": lambda w, a, g: torch.full_like(w, float(w.min())),
    "group mean": per_group(lambda w, a: torch.full_like(w, float(w.mean()))),
    "equal contiguous groups": lambda w, a, g: w.reshape(len(torch.unique(g)), -1)
    .min(1, keepdim=True).values.expand(len(torch.unique(g)), -1).reshape(-1),
    "group max": per_group(lambda w, a: torch.full_like(w, float(w.max()))),
    "min over the A > 0 rows": per_group(
        lambda w, a: torch.full_like(w, float(w[a > 0].min()) if bool((a > 0).any())
                                     else float(w.min()))),
    "clamped at 1": lambda w, a, g: w.clamp(max=1.0),
    "group median": per_group(lambda w, a: torch.full_like(w, float(w.median()))),
    "float32 output": lambda w, a, g: reference("min_replace")(w.float(), a, g),
    "modifies its input": lambda w, a, g: w.copy_(reference("min_replace")(w.clone(), a, g)),
    "min of |A|-weighted w": per_group(lambda w, a: torch.full_like(w, float((w * a.abs()).min()))),
}


def greedy_no_room(group_ids, adv, lengths, M, gen):
    """Each group to the mini-batch with the fewest signed rollouts so far: even signs,
    uneven group counts."""
    chunks, load = [[] for _ in range(M)], [0] * M
    for gid in torch.unique(group_ids).tolist():
        rows = (group_ids == gid).nonzero().flatten()
        c = min(range(M), key=lambda c: load[c])
        chunks[c].append(rows)
        load[c] += int((adv[rows] != 0).sum()) + 100 * (len(chunks[c]) > 2)
    return [torch.cat(ch) if ch else torch.zeros(0, dtype=torch.long) for ch in chunks]


def round_robin(group_ids, adv, lengths, M, gen):  # whole groups dealt in label order
    groups = torch.unique(group_ids).tolist()
    return [torch.cat([(group_ids == g).nonzero().flatten() for g in groups[c::M]])
            for c in range(M)]


def global_rng(group_ids, adv, lengths, M, gen):  # ignores the generator it is given
    seed = int(torch.randint(1 << 62, ()))
    return reference("query_balanced")(group_ids, adv, lengths, M,
                                       torch.Generator().manual_seed(seed))


def group_ids_returned(group_ids, adv, lengths, M, gen):  # labels, not row indices
    mbs = reference("query_balanced")(group_ids, adv, lengths, M, gen)
    return [group_ids[mb] for mb in mbs]


def ex5_library(name):
    return getattr(batching, name)


EX5 = {
    "shuffle (splits groups)": ex5_library("shuffle"),
    "query (no balancing)": ex5_library("query"),
    "balanced (splits groups)": ex5_library("balanced"),
    "contiguous cut of the rows": lambda g, a, l, M, gen: list(
        torch.arange(len(g)).tensor_split(M)),
    "greedy without room": greedy_no_room,
    "length (splits groups)": ex5_library("length"),
    "sign (splits groups)": ex5_library("sign"),
    "whole groups dealt in label order": round_robin,
    "the global random stream, not the generator": global_rng,
    "group ids instead of row indices": group_ids_returned,
}


# ---------------------------------------------------------------- exercise 6

def fixed(new_logp, old_logp, mask, adv, group, max_len):
    """The reference fix (exercises/answers/ex6_buggy_loss.py)."""
    from exercises.answers import ex6_buggy_loss
    return ex6_buggy_loss.dfpo_orth_loss(new_logp, old_logp, mask, adv, group, max_len)


def _adv_orthogonal():
    return loss.adv_orthogonal  # what the check provides while it measures exercise 6


def buggy(new_logp, old_logp, mask, adv, group, max_len):
    from exercises import ex6_buggy_loss
    return ex6_buggy_loss.dfpo_orth_loss(new_logp, old_logp, mask, adv, group, max_len)


def detached_loss(new_logp, old_logp, mask, adv, group, max_len):  # the whole loss detached
    return buggy(new_logp, old_logp, mask, adv, group, max_len).detach()


def own_length(new_logp, old_logp, mask, adv, group, max_len):  # 1/L_i instead of 1/L_max
    lens = mask.sum(1).clamp(min=1)
    w = ((new_logp - old_logp) * mask).sum(1).div(lens).exp()
    per_seq = _adv_orthogonal()(w, adv, group).detach() * adv / (mask.shape[0] * lens)
    return -(per_seq[:, None] * new_logp * mask).sum()


def untransformed(new_logp, old_logp, mask, adv, group, max_len):  # w without the transform
    w = ((new_logp - old_logp) * mask).sum(1).div(mask.sum(1).clamp(min=1)).exp().detach()
    return -((w * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


def whole_batch_weights(new_logp, old_logp, mask, adv, group, max_len):  # ignores the groups
    lens = mask.sum(1).clamp(min=1)
    w = ((new_logp - old_logp) * mask).sum(1).div(lens).exp()
    w_tilde = _adv_orthogonal()(w, adv, torch.zeros_like(group)).detach()
    return -((w_tilde * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


def batch_max_len(new_logp, old_logp, mask, adv, group, max_len):  # L_max from the batch
    return fixed(new_logp, old_logp, mask, adv, group, int(mask.sum(1).max()))


def no_gradient(new_logp, old_logp, mask, adv, group, max_len):  # the whole input detached
    return fixed(new_logp.detach(), old_logp, mask, adv, group, max_len) + 0 * new_logp.sum()


def ratio_upside_down(new_logp, old_logp, mask, adv, group, max_len):  # w from log(old / new)
    return fixed(new_logp, 2 * new_logp.detach() - old_logp, mask, adv, group, max_len)


def summed_log_ratio(new_logp, old_logp, mask, adv, group, max_len):  # s_i without 1/L_i
    w = ((new_logp - old_logp) * mask).sum(1).exp()
    w_tilde = _adv_orthogonal()(w, adv, group).detach()
    return -((w_tilde * adv / (mask.shape[0] * max_len))[:, None] * new_logp * mask).sum()


def detach_new_logp_term(new_logp, old_logp, mask, adv, group, max_len):  # "detach new_logp"
    lens = mask.sum(1).clamp(min=1)
    w = ((new_logp.detach() - old_logp) * mask).sum(1).div(lens).exp()
    w_tilde = _adv_orthogonal()(w, adv, group)
    return -((w_tilde * adv / (mask.shape[0] * max_len))[:, None] * new_logp.detach()
             * mask).sum() + 0 * new_logp.sum()


EX6 = {
    "the bug left in": buggy,
    "the loss detached": detached_loss,
    "1/L_i for 1/L_max": own_length,
    "w without the transform": untransformed,
    "one projection for the batch": whole_batch_weights,
    "L_max from the batch": batch_max_len,
    "no gradient at all": no_gradient,
    "the ratio upside down": ratio_upside_down,
    "s_i without 1/L_i": summed_log_ratio,
    "new_logp detached everywhere": detach_new_logp_term,
}

WRONG = {"ex2": EX2, "ex3": EX3, "ex5": EX5, "ex6": EX6}
